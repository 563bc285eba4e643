"""One training step: compute, exposed communication, the pipeline bubble, step time and MFU.

Per PP stage and micro-batch, the stage's time is its compute plus the communication on its
critical path: ``τ_s = compute_s + exposed_s``. Compute is every kernel of the stage's layers
timed from its shape (:mod:`ringccl.planner.compute`: GEMMs with tile and wave quantisation,
FlashAttention, memory-bound passes), with what recompute re-runs in the backward
(Korthikanti et al. 2022 §5). What of each collective stays exposed follows the framework's
knobs (:mod:`ringccl.planner.overlap`).

The pipeline (Megatron-LM 2021 §2.2): with ``v`` model chunks per stage, the m·v chunk-steps
of the slowest stage and the fill/drain through every stage give
``T_pipe = (m·v − 1)·max_s(τ_s / v) + Σ_s τ_s / v`` — for equal stages
``(m + (p − 1)/v)·τ``, a bubble of ``(p − 1)/m`` (1F1B, GPipe) or ``(p − 1)/(v·m)``
(interleaved) of the ideal time. Once per step come the gradient reductions not hidden in the
last backward, ZeRO's parameter gathers not hidden in the next forward and the tied-embedding
all-reduce, and the optimizer step (:func:`~ringccl.planner.compute.optimizer_seconds`).
``step = T_pipe + max_s(per-step exposed_s + optimizer_s)``;
``MFU = model FLOPs per step / (step · GPUs · peak)``, model FLOPs without recompute
(Megatron-LM 2021 §5.1; Chowdhery et al. 2022, PaLM, Appendix B).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction

from .. import units
from ..errors import ArgumentError
from . import memory
from .cluster import Cluster, Straggler
from .compute import StageCompute, compute_precision, stage_compute
from .context import StepContext, step_context
from .costing import Entry
from .inventory import inventory
from .model import ModelConfig
from .overlap import exposed_seconds, exposure
from .parallel_dims import ParallelDims
from .stages import StageShape

__all__ = ["StageEstimate", "StepEstimate", "estimate_step", "exposed_seconds", "stage_memory"]


@dataclass
class StageEstimate:
    """One rank position (PP stage): its collectives, compute and exposed communication.

    Times are seconds; ``exposed_per_micro_batch`` and ``exposed_per_step`` map a parallelism
    ("tp", "sp", "pp", ...) to its exposed seconds.
    """

    stage: int
    shape: StageShape
    entries: list[Entry]
    compute_per_micro_batch: float
    forward_per_micro_batch: float
    backward_per_micro_batch: float
    exposed_per_micro_batch: dict
    exposed_per_step: dict
    memory: memory.MemoryBreakdown | None = None
    compute: StageCompute | None = None

    @property
    def micro_batch_seconds(self) -> float:
        return self.compute_per_micro_batch + sum(self.exposed_per_micro_batch.values())

    @property
    def per_step_compute(self) -> float:
        """Seconds once per step: the optimizer step (and cached FP8 weight casts)."""
        return 0.0 if self.compute is None else self.compute.per_step

    @property
    def per_step_seconds(self) -> float:
        """What this stage adds once per step: exposed per-step communication + optimizer."""
        return sum(self.exposed_per_step.values()) + self.per_step_compute

    def to_dict(self) -> dict:
        mem = self.memory
        return {"stage": self.stage, "layers": self.shape.layers,
                "moe_layers": self.shape.moe_layers, "first": self.shape.first,
                "last": self.shape.last, "dense_parameters": self.shape.dense_parameters,
                "expert_parameters": self.shape.expert_parameters,
                "compute_per_micro_batch_s": self.compute_per_micro_batch,
                "forward_per_micro_batch_s": self.forward_per_micro_batch,
                "backward_per_micro_batch_s": self.backward_per_micro_batch,
                "micro_batch_s": self.micro_batch_seconds,
                "exposed_per_micro_batch_s": dict(self.exposed_per_micro_batch),
                "exposed_per_step_s": dict(self.exposed_per_step),
                "optimizer_s": self.per_step_compute,
                "compute": None if self.compute is None else self.compute.to_dict(),
                "memory": None if mem is None else mem.to_dict(),
                "collectives": [e.to_dict() for e in self.entries]}


@dataclass
class StepEstimate:
    """The whole step (see the module docstring for the formulas).

    Attributes:
        model, dims, cluster, straggler: the inputs.
        stages: one :class:`StageEstimate` per PP stage.
        pipeline_seconds, bubble_seconds, bubble_fraction (formula), step_seconds.
        tokens_per_second, mfu, model_flops_per_step.
        exposed: parallelism -> exposed seconds per step on the slowest path.
        fits_memory: every stage's memory within the GPU's; peak_memory: the largest total.
    """

    model: ModelConfig
    dims: ParallelDims
    cluster: Cluster
    straggler: Straggler | None
    stages: list[StageEstimate]
    pipeline_seconds: float
    bubble_seconds: float
    bubble_fraction: float
    step_seconds: float
    model_flops_per_step: float
    exposed: dict
    peak_memory: float
    fits_memory: bool
    notes: list = field(default_factory=list)

    @property
    def tokens_per_step(self) -> int:
        return self.dims.global_batch_size * self.model.seq_length

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_seconds

    @property
    def mfu(self) -> float:
        return self.model_flops_per_step / (
            self.step_seconds * self.dims.world_size * self.cluster.peak_flops)

    def entries(self):
        """(stage, entry) for every collective of every stage."""
        return [(s.stage, e) for s in self.stages for e in s.entries]

    def bytes_by_parallelism(self) -> dict:
        """parallelism -> bytes the busiest rank of the slowest position sends per step."""
        return self._by_parallelism("bytes_sent_per_step")

    def seconds_by_parallelism(self) -> dict:
        """parallelism -> predicted seconds per step (exposed or not), slowest position."""
        return self._by_parallelism("seconds_per_step")

    def _by_parallelism(self, field: str) -> dict:
        """parallelism -> the largest per-stage sum of the entries' ``field``."""
        out: dict = {}
        for s in self.stages:
            per: dict = {}
            for e in s.entries:
                per[e.parallelism] = per.get(e.parallelism, 0.0) + getattr(e, field)
            for k, v in per.items():
                out[k] = max(out.get(k, 0.0), v)
        return out

    def summary(self) -> dict:
        return {"step_s": self.step_seconds, "pipeline_s": self.pipeline_seconds,
                "bubble_s": self.bubble_seconds, "bubble_fraction": self.bubble_fraction,
                "tokens_per_s": self.tokens_per_second, "mfu": self.mfu,
                "model_flops_per_step": self.model_flops_per_step,
                "exposed_s": dict(self.exposed),
                "optimizer_s": max(s.per_step_compute for s in self.stages),
                "peak_memory_bytes": self.peak_memory,
                "fits_memory": self.fits_memory,
                "bytes_per_step_by_parallelism": self.bytes_by_parallelism(),
                "seconds_per_step_by_parallelism": self.seconds_by_parallelism()}

    def to_dict(self) -> dict:
        """Everything as JSON-ready values (floats, ints, strings, lists, dicts)."""
        return {"model": self.model.to_dict(), "layout": self.dims.to_dict(),
                "cluster": self.cluster.to_dict(),
                "straggler": None if self.straggler is None else vars(self.straggler),
                "world_size": self.dims.world_size, "describe": self.describe(),
                "summary": self.summary(),
                "stages": [s.to_dict() for s in self.stages], "notes": list(self.notes)}

    def describe(self) -> str:
        return (f"{self.model.name} on {self.dims.world_size} GPUs, {self.dims.describe()}: "
                f"step {units.format_duration(self.step_seconds)}, MFU {100 * self.mfu:.1f}%")


def stage_memory(ctx: StepContext, st: StageShape,
                 entries: list[Entry]) -> memory.MemoryBreakdown:
    """The memory of one rank of stage ``st``, bytes, from :mod:`ringccl.planner.memory`.

    - model states (:func:`~ringccl.planner.memory.model_state_bytes`): the dense weights
      sharded by ZeRO over the ``dp · cp`` ranks that hold them, the routed experts over
      ``dp · cp / ep``;
    - activations: :func:`~ringccl.planner.memory.activation_bytes` of one micro-batch through
      all the stage's layers (every model chunk) × the micro-batches in flight
      (:func:`~ringccl.planner.memory.in_flight_micro_batches`, in those same units: for the
      interleaved schedule its chunk-activations divided by v), rounded up;
    - communication buffers (:func:`~ringccl.planner.memory.communication_buffer_bytes`):
      DDP's bucket copy of the gradients (PyTorch's default ``gradient_as_bucket_view=False``),
      ZeRO-3's live gathered layers, the all-to-all's send and receive buffers; ZeRO-1/2 add
      their largest in-flight bucket twice (the gradients being reduce-scattered and the
      parameters being gathered).

    Returns:
        A :class:`~ringccl.planner.memory.MemoryBreakdown` (it sums its own ``total``).
    """
    model, dims = ctx.model, ctx.dims
    data_parallel = dims.dp * dims.cp
    dense = memory.model_state_bytes(st.dense_parameters, dp=data_parallel,
                                     zero_stage=dims.zero_stage)
    expert = memory.model_state_bytes(st.expert_parameters,
                                      dp=max(1, data_parallel // dims.ep),
                                      zero_stage=dims.zero_stage)
    per_micro_batch = memory.activation_bytes(
        seq_length=model.seq_length, micro_batch_size=dims.micro_batch_size,
        hidden_size=model.hidden_size, num_attention_heads=model.num_attention_heads,
        num_layers=st.layers, tp=dims.tp, sp=dims.sp, cp=dims.cp,
        recompute=dims.recompute, dtype_bytes=model.dtype_bytes)
    in_flight = memory.in_flight_micro_batches(
        schedule=dims.schedule if dims.pp > 1 else "1f1b", pp=dims.pp, stage=st.stage,
        num_micro_batches=dims.num_micro_batches, virtual_stages=dims.virtual_stages)
    # in_flight is a whole number, or chunk-activations / v for the interleaved schedule:
    # exact as a fraction of denominator v
    activations = math.ceil(per_micro_batch * Fraction(in_flight).limit_denominator(
        dims.virtual_stages))
    gradient_bytes = dense["gradients"] + expert["gradients"]
    moe_tokens = 0
    if st.moe_layers and dims.ep > 1:
        # tokens a rank routes per MoE layer and micro-batch: its sequence shard (SP splits it
        # over tp, as Megatron-Core's token dispatcher does)
        moe_tokens = (dims.micro_batch_size * model.seq_length
                      // (dims.cp * (dims.tp if dims.sp else 1)))
    buffers = memory.communication_buffer_bytes(
        ddp_gradient_bytes=gradient_bytes if dims.zero_stage == 0 and data_parallel > 1
        else 0,
        zero3_layer_parameters=st.largest_layer_parameters if dims.zero_stage == 3 else 0,
        param_bytes=model.dtype_bytes, grad_bytes=model.dtype_bytes, moe_tokens=moe_tokens,
        moe_top_k=max(1, model.num_experts_per_tok),
        moe_capacity_factor=dims.capacity_factor, moe_hidden_size=model.hidden_size,
        dtype_bytes=model.dtype_bytes)
    communication = sum(buffers.values())
    if dims.zero_stage in (1, 2):
        communication += 2 * max((math.ceil(e.nbytes) for e in entries
                                  if e.parallelism == "zero"), default=0)
    return memory.MemoryBreakdown(
        weights=dense["weights"] + expert["weights"],
        gradients=gradient_bytes, optimizer=dense["optimizer"] + expert["optimizer"],
        activations=activations, communication=communication)


def _compute(ctx: StepContext, st: StageShape) -> StageCompute:
    """The stage's :class:`~ringccl.planner.compute.StageCompute`: its layers on the
    cluster's GPU, its optimizer over the states ZeRO leaves it."""
    dims = ctx.dims
    data_parallel = dims.dp * dims.cp
    dense_shard, expert_shard = data_parallel, max(1, data_parallel // dims.ep)
    if dims.zero_stage == 0:
        dense_shard = expert_shard = 1
    held = st.dense_parameters + st.expert_parameters
    if dims.zero_stage == 3:
        held = st.dense_parameters / dense_shard + st.expert_parameters / expert_shard
    sharded = st.dense_parameters / dense_shard + st.expert_parameters / expert_shard
    return stage_compute(ctx.model, dims, ctx.cluster.gpu_spec, layers=st.layers,
                         moe_layers=st.moe_layers, first=st.first, last=st.last,
                         parameters=held, sharded_parameters=sharded)


def _stage(ctx: StepContext, stage: int) -> StageEstimate:
    st = ctx.stages[stage]
    entries = inventory(ctx, stage)
    c = _compute(ctx, st)
    per_mb, per_step = exposure(entries, ctx.dims, c, ctx.micro_batches)
    est = StageEstimate(stage, st, entries, c.forward + c.backward, c.forward, c.backward,
                        per_mb, per_step, compute=c)
    est.memory = stage_memory(ctx, st, entries)
    return est


def _shifted(entry: Entry, offset: int) -> Entry:
    """A copy of ``entry`` for the stage whose ranks are its stage's plus ``offset``."""
    shape = replace(entry.shape, example=tuple(r + offset for r in entry.shape.example))
    return replace(entry, shape=shape, params=dict(entry.params))


def _stages_shared(ctx: StepContext) -> list[StageEstimate]:
    """Every stage's :class:`StageEstimate`, each distinct stage estimated once.

    Two stages are alike when they hold as many layers (and MoE layers), play the same role
    (first: embedding, last: LM head) and the second's ranks are the first's shifted by whole
    nodes (:meth:`RankGrid.stage_offset`): then each group of the second is a group of the first
    moved to other nodes, with the same placement, NIC sharing, algorithm and time. Only the
    group's example ranks (shifted) and the memory (the in-flight micro-batches depend on the
    stage's index) differ. The straggler's stage is always estimated on its own. The result
    equals ``[_stage(ctx, s) for s in range(pp)]``.
    """
    planned: dict[tuple, tuple[StageEstimate, int]] = {}
    stages = []
    for s, st in enumerate(ctx.stages):
        offset = ctx.grid.stage_offset(s)
        key = (st.layers, st.moe_layers, st.first, st.last)
        if offset is None or s == ctx.straggler_stage:
            key += (s,)
        if key not in planned:
            planned[key] = (_stage(ctx, s), offset)
            stages.append(planned[key][0])
            continue
        rep, rep_offset = planned[key]
        shift = offset - rep_offset
        entries = [_shifted(e, shift) for e in rep.entries]
        est = StageEstimate(s, st, entries, rep.compute_per_micro_batch,
                            rep.forward_per_micro_batch, rep.backward_per_micro_batch,
                            dict(rep.exposed_per_micro_batch), dict(rep.exposed_per_step),
                            compute=rep.compute)
        est.memory = stage_memory(ctx, st, entries)
        stages.append(est)
    return stages


def estimate_step(model: ModelConfig, dims: ParallelDims, cluster: Cluster,
                  straggler: Straggler | None = None, *,
                  share_stages: bool = True) -> StepEstimate:
    """The :class:`StepEstimate` of ``dims`` (checked against ``model`` and ``cluster``).

    ``share_stages=False`` estimates every PP stage on its own (the reference the tests
    compare the default against: stages alike in layers, role and placement are estimated
    once).

    Raises:
        ArgumentError: the layout refused (:meth:`ParallelDims.check`), a straggler rank outside
            the world, an FP8 recipe on a GPU without FP8 tensor cores.
    """
    recipe = compute_precision(model, dims)
    if recipe != "bf16" and not cluster.gpu_spec.fp8_flops:
        raise ArgumentError(f"precision={recipe!r} runs GEMMs in FP8; the cluster's GPU "
                            f"{cluster.gpu!r} has no FP8 tensor cores (use precision 'bf16')")
    ctx = step_context(model, dims, cluster, straggler)
    if share_stages:
        stages = _stages_shared(ctx)
    else:
        stages = [_stage(ctx, s) for s in range(dims.pp)]
    m, v, p = dims.num_micro_batches, dims.virtual_stages, dims.pp
    tau = [s.micro_batch_seconds for s in stages]
    pipeline = (m * v - 1) * max(tau) / v + sum(tau) / v
    bubble = pipeline - m * max(tau)
    fraction = (p - 1) / (v * m)
    per_step = max(s.per_step_seconds for s in stages)
    step = pipeline + per_step
    slowest = max(stages, key=lambda s: s.micro_batch_seconds)
    last = max(stages, key=lambda s: s.per_step_seconds)
    exposed = {k: m * t for k, t in slowest.exposed_per_micro_batch.items()}
    for k, t in last.exposed_per_step.items():
        exposed[k] = exposed.get(k, 0.0) + t
    if p > 1:
        exposed["pp bubble"] = bubble
    flops = dims.global_batch_size * model.seq_length * model.flops_per_token()
    peak = max(s.memory.total for s in stages)
    fits = all(s.memory.fits(cluster.gpu_memory) for s in stages)
    notes = []
    if not fits:
        notes.append(f"needs {units.format_size(peak)} on a GPU of "
                     f"{units.format_size(cluster.gpu_memory)}")
    if not math.isfinite(step) or step <= 0:  # pragma: no cover - compute is always > 0
        raise ArgumentError(f"step time {step!r} is not a positive number")
    return StepEstimate(model, dims, cluster, straggler, stages, pipeline, bubble, fraction,
                        step, flops, exposed, peak, fits, notes)
