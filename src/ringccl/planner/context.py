"""One plan's inputs, checked, and what every part of the step reads from them, built once.

:func:`step_context` refuses a layout that cannot run the model on the cluster, then lays the
ranks out (:func:`~ringccl.planner.groups.rank_grid`) and derives what each PP stage holds
(:func:`~ringccl.planner.stages.stage_shapes`). The inventory, the step and the memory read the
:class:`StepContext` instead of deriving them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from . import frameworks
from .cluster import Cluster, Straggler
from .groups import RankGrid, rank_grid
from .model import ModelConfig
from .parallel_dims import ParallelDims
from .pipeline import passes_per_step
from .stages import StageShape, stage_shapes

__all__ = ["StepContext", "step_context"]


@dataclass(frozen=True)
class StepContext:
    """What one plan reads.

    Attributes:
        model, dims, cluster, straggler: the inputs (``dims`` completed for the model and
            checked against it and the cluster; ``straggler`` None or a rank inside the
            world).
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
        """Passes through a rank's layers per step: m, or m/2 for DualPipe (a pass then carries
        one micro-batch of each direction through one of the rank's two stages,
        :func:`~ringccl.planner.pipeline.passes_per_step`)."""
        return passes_per_step(self.dims.schedule, self.dims.num_micro_batches)

    @property
    def tokens(self) -> float:
        """Tokens of one micro-batch on one rank of a CP group: mbs · s / cp."""
        return self.dims.micro_batch_size * self.model.seq_length / self.dims.cp

    @property
    def gradient_bytes(self) -> float:
        """Bytes per gradient element on the wire: the framework's reduce dtype."""
        return frameworks.REDUCE_DTYPES[self.dims.reduce_dtype]

    @property
    def gather_bytes(self) -> float:
        """Bytes per weight element a ZeRO / FSDP all-gather moves: the working dtype."""
        return frameworks.state_bytes(self.dims.framework, self.model.dtype_bytes,
                                      self.dims.reduce_dtype).gather

    @property
    def gathers_once(self) -> bool:
        """ZeRO-3 / FSDP gathers each layer's weights once per step and reduce-scatters its
        gradients once: the gathered weights stay to the backward (``reshard_after_forward``
        off) and the pipeline defers the reduce-scatter to the last micro-batch
        (:func:`~ringccl.planner.frameworks.defers_gradient_sync`)."""
        dims = self.dims
        return (dims.pp > 1 and frameworks.defers_gradient_sync(dims.framework)
                and dims.reshard_after_forward is False)

    @property
    def activation_bytes(self) -> float:
        """Bytes of one layer's output of one micro-batch on a TP group: tokens · h · dtype."""
        return self.tokens * self.model.hidden_size * self.model.dtype_bytes


def _check_node_limit(model: ModelConfig, dims: ParallelDims, grid: RankGrid) -> None:
    """Refuse a node limit the EP group's placement cannot use (DeepSeek-V3 §2.1.2)."""
    limit = dims.moe_router_group_topk
    if limit is None:
        return
    nodes = grid.sizes["ep_inter"]
    if nodes < 2:
        raise ArgumentError(
            f"moe_router_group_topk={limit} limits the nodes a token reaches, but each EP group "
            f"of ep={dims.ep} sits on one node ({grid.gpus_per_node} GPUs per node): "
            "drop it, or spread ep over nodes")
    if limit > nodes:
        raise ArgumentError(f"moe_router_group_topk={limit} is larger than the {nodes} nodes an "
                            f"EP group of ep={dims.ep} spans: it must be in [1, {nodes}]")
    per_node = model.num_local_experts // nodes
    if limit * per_node < model.num_experts_per_tok:
        raise ArgumentError(f"moe_router_group_topk={limit} nodes hold {limit} x {per_node} = "
                            f"{limit * per_node} experts, fewer than num_experts_per_tok="
                            f"{model.num_experts_per_tok}")


def step_context(model: ModelConfig, dims: ParallelDims, cluster: Cluster,
                 straggler: Straggler | None = None) -> StepContext:
    """The :class:`StepContext` of one plan.

    ``dims`` is completed with what needs the model first (:meth:`ParallelDims.for_model`:
    the gradients' reduce dtype and bucket, the default global batch).

    Raises:
        ArgumentError: the layout refused (:meth:`ParallelDims.check`), a node limit the EP
            group cannot use, a straggler rank outside the world.
    """
    dims = dims.for_model(model)
    dims.check(model, cluster.world_size)
    if straggler is not None and not 0 <= straggler.rank < dims.world_size:
        raise ArgumentError(f"straggler rank={straggler.rank} is outside the world of "
                            f"{dims.world_size} ranks")
    grid = rank_grid(dims, cluster.gpus_per_node, cluster.nics_per_node)
    _check_node_limit(model, dims, grid)
    stages = stage_shapes(model, dims)
    slow_stage = None if straggler is None else int(grid.coordinate("pp", straggler.rank))
    return StepContext(model, dims, cluster, straggler, grid, stages, slow_stage)
