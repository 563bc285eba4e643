"""One plan's inputs, checked, and what every part of the step reads from them, built once.

:func:`step_context` refuses a layout that cannot run the model on the cluster, then lays the
ranks out (:func:`~ringccl.planner.groups.rank_grid`) and derives what each PP stage holds
(:func:`~ringccl.planner.stages.stage_shape`). The inventory, the step and the memory read the
:class:`StepContext` instead of deriving them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from .cluster import Cluster, Straggler
from .groups import RankGrid, rank_grid
from .model import ModelConfig
from .parallel_dims import ParallelDims
from .stages import StageShape, stage_shape

__all__ = ["StepContext", "step_context"]


@dataclass(frozen=True)
class StepContext:
    """What one plan reads.

    Attributes:
        model, dims, cluster, straggler: the inputs (``dims`` checked against the model and
            the cluster; ``straggler`` None or a rank inside the world).
        grid: the ranks on the cluster's nodes.
        stages: one :class:`~ringccl.planner.stages.StageShape` per PP stage.
        straggler_stage: the PP stage of the straggler's rank (None without one).
    """

    model: ModelConfig
    dims: ParallelDims
    cluster: Cluster
    straggler: Straggler | None
    grid: RankGrid
    stages: tuple[StageShape, ...]
    straggler_stage: int | None

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step, m."""
        return self.dims.num_micro_batches

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch on one rank of a CP group: mbs · s / cp."""
        return self.dims.micro_batch_size * self.model.seq_length / self.dims.cp

    @property
    def activation_bytes(self) -> float:
        """Bytes of one layer's output of one micro-batch on a TP group: tokens · h · dtype."""
        return self.tokens * self.model.hidden_size * self.model.dtype_bytes


def step_context(model: ModelConfig, dims: ParallelDims, cluster: Cluster,
                 straggler: Straggler | None = None) -> StepContext:
    """The :class:`StepContext` of one plan.

    Raises:
        ArgumentError: the layout refused (:meth:`ParallelDims.check`), a straggler rank
            outside the world.
    """
    dims.check(model, cluster.world_size)
    if straggler is not None and not 0 <= straggler.rank < dims.world_size:
        raise ArgumentError(f"straggler rank={straggler.rank} is outside the world of "
                            f"{dims.world_size} ranks")
    grid = rank_grid(dims, cluster.gpus_per_node, cluster.nics_per_node)
    stages = tuple(stage_shape(model, dims, s) for s in range(dims.pp))
    slow_stage = None if straggler is None else int(grid.coord["pp"][straggler.rank])
    return StepContext(model, dims, cluster, straggler, grid, stages, slow_stage)
