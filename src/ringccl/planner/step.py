"""One training step: compute, exposed communication, the pipeline bubble, step time and MFU.

Per PP stage and micro-batch, the stage's time is its compute plus the communication on its
critical path: ``τ_s = compute_s + exposed_s``. Compute is the stage's forward FLOPs × 3
(backward = 2 × forward), plus one more forward with full recompute or the attention core's
with selective recompute (Korthikanti et al. 2022 §5), at ``peak × compute_efficiency``.

A collective that hides behind compute (DDP buckets in the backward, ZeRO-3 prefetch, MoE
all-to-all micro-chunks against the expert GEMMs, CP's K/V ring against attention) exposes
``max(0, T - W) + min(T, W) / chunks``: what exceeds its compute window ``W``, plus one of its
``chunks`` pieces that cannot start before the compute it waits for (the last DDP bucket, the
first prefetched layer). TP and SP (no overlap in Megatron's default) and PP's sends are exposed.

The pipeline (Megatron-LM 2021 §2.2): with ``v`` model chunks per stage, the m·v chunk-steps
of the slowest stage and the fill/drain through every stage give
``T_pipe = (m·v − 1)·max_s(τ_s / v) + Σ_s τ_s / v`` — for equal stages
``(m + (p − 1)/v)·τ``, a bubble of ``(p − 1)/m`` (1F1B, GPipe) or ``(p − 1)/(v·m)``
(interleaved) of the ideal time. Once per step come the gradient reductions not hidden in the
last backward, ZeRO's parameter gathers not hidden in the next forward and the tied-embedding
all-reduce. ``step = T_pipe + max_s(per-step exposed_s)``;
``MFU = model FLOPs per step / (step · GPUs · peak)``, model FLOPs without recompute
(Megatron-LM 2021 §5.1; Chowdhery et al. 2022, PaLM, Appendix B).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .. import units
from ..errors import ArgumentError
from . import memory
from .cluster import Cluster, Straggler
from .context import StepContext, step_context
from .costing import Entry
from .inventory import inventory
from .model import ModelConfig
from .parallel_dims import ParallelDims
from .stage_memory import stage_memory
from .stages import StageShape

__all__ = ["StageEstimate", "StepEstimate", "estimate_step", "exposed_seconds", "stage_memory"]


def exposed_seconds(seconds: float, window: float, chunks: int = 1) -> float:
    """Communication of ``seconds`` overlapped with ``window`` seconds of compute, cut into
    ``chunks`` pieces: what stays on the critical path."""
    if window <= 0:
        return seconds
    return max(0.0, seconds - window) + min(seconds, window) / max(chunks, 1)


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

    @property
    def micro_batch_seconds(self) -> float:
        return self.compute_per_micro_batch + sum(self.exposed_per_micro_batch.values())

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
        warnings: :class:`~ringccl.planner.advice.PlanWarning` (``ringccl.plan`` fills them).
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
    warnings: list = field(default_factory=list)

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
                "exposed_s": dict(self.exposed), "peak_memory_bytes": self.peak_memory,
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
                "stages": [s.to_dict() for s in self.stages], "notes": list(self.notes),
                "warnings": [w.to_dict() for w in self.warnings]}

    def describe(self) -> str:
        return (f"{self.model.name} on {self.dims.world_size} GPUs, {self.dims.describe()}: "
                f"step {units.format_duration(self.step_seconds)}, MFU {100 * self.mfu:.1f}%")


def _stage(ctx: StepContext, stage: int) -> StageEstimate:
    st = ctx.stages[stage]
    entries = inventory(ctx, stage)
    cluster = ctx.cluster
    rate = cluster.peak_flops * cluster.compute_efficiency
    fwd = st.forward_flops / rate
    extra = {"none": 0.0, "selective": st.attention_core_flops / rate, "full": fwd}[
        ctx.dims.recompute]
    bwd = 2 * fwd + extra
    m = ctx.micro_batches
    per_mb: dict = {}
    per_step: dict = {}
    attn_window = st.attention_core_flops / rate
    expert_window = st.expert_forward_flops_per_layer / rate
    for e in entries:
        if e.per_micro_batch:
            t = e.seconds_per_step / m          # this entry's seconds per micro-batch
            if e.overlap == "exposed":
                x = t
            elif e.overlap == "attention":
                x = exposed_seconds(t, attn_window * (2 if e.phase == "backward" else 1),
                                    e.chunks)
            elif e.overlap == "expert compute":
                # each all-to-all against its layer's expert GEMMs (backward: 2x the forward)
                per_call = e.seconds_per_call
                window = expert_window * (2 if e.phase == "backward" else 1) / 2
                x = exposed_seconds(per_call, window, e.chunks) * e.calls_per_micro_batch
            else:
                window = fwd if e.overlap == "forward" else bwd
                x = exposed_seconds(t, window, e.chunks)
            per_mb[e.parallelism] = per_mb.get(e.parallelism, 0.0) + x
        else:
            t = e.seconds_per_step
            if e.overlap == "backward":       # hidden in the last micro-batch's backward
                x = exposed_seconds(t, bwd, e.chunks)
            elif e.overlap == "forward":      # hidden in the next step's first forward
                x = exposed_seconds(t, fwd, e.chunks)
            else:
                x = t
            per_step[e.parallelism] = per_step.get(e.parallelism, 0.0) + x
    est = StageEstimate(stage, st, entries, fwd + bwd, fwd, bwd, per_mb, per_step)
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
                            dict(rep.exposed_per_micro_batch), dict(rep.exposed_per_step))
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
            the world.
    """
    ctx = step_context(model, dims, cluster, straggler)
    dims = ctx.dims                     # completed for the model (batch, reduce dtype, bucket)
    if share_stages:
        stages = _stages_shared(ctx)
    else:
        stages = [_stage(ctx, s) for s in range(dims.pp)]
    m, v, p = dims.num_micro_batches, dims.virtual_stages, dims.pp
    tau = [s.micro_batch_seconds for s in stages]
    pipeline = (m * v - 1) * max(tau) / v + sum(tau) / v
    bubble = pipeline - m * max(tau)
    fraction = (p - 1) / (v * m)
    per_step = max(sum(s.exposed_per_step.values()) for s in stages)
    step = pipeline + per_step
    slowest = max(stages, key=lambda s: s.micro_batch_seconds)
    last = max(stages, key=lambda s: sum(s.exposed_per_step.values()))
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
