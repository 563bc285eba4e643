"""One training step: compute, exposed communication, the pipeline bubble, step time and MFU.

Per PP stage and micro-batch, the stage's time is its compute plus the communication on its
critical path: ``τ_s = compute_s + exposed_s``. Compute is every kernel of the stage's layers
timed from its shape (:mod:`ringccl.planner.compute`: GEMMs with tile and wave quantisation,
FlashAttention, memory-bound passes), with what recompute re-runs in the backward
(Korthikanti et al. 2022 §5). What of each collective stays exposed follows the framework's
knobs (:mod:`ringccl.planner.overlap`); under DualPipe the PP sends and the MoE all-to-alls of
one micro-batch hide behind the other micro-batch's chunk (DeepSeek-V3 §3.2.1).

The pipeline (:mod:`ringccl.planner.pipeline`): the slowest stage paces the passes and the
schedule's fill and drain go through the others,
``T_pipe = passes · max_s τ_s + slots/(p − 1) · Σ_{s ≠ slowest} X_s`` with each stage's τ split
into F (forward), B (backward for the inputs) and W (backward for the weights: half of each
GEMM's backward), its exposed communication spread over them in proportion: for 1F1B
``(Σ_s τ_s − max τ)/v``, Narayanan et al.'s ``(p − 1)/m`` (``(p − 1)/(v·m)`` interleaved) of
the ideal time for equal stages; ZB-H1 ``(p − 1)(F + B − W)``, ZB-H2
``(p − 1)·max(0, F + B − 2W)`` (Qi et al. 2024); DualPipe and DualPipeV per DeepSeek-V3
Table 2, whose F&B pairs also hide the PP sends and the MoE all-to-alls of one micro-batch
behind the other's compute. Once per step come the gradient reductions not hidden in the
last backward, ZeRO's parameter gathers not hidden in the next forward and the tied-embedding
all-reduce, and the optimizer step (:func:`~ringccl.planner.compute.optimizer_seconds`).
``step = T_pipe + max_s(per-step exposed_s + optimizer_s)``;
``MFU = model FLOPs per step / (step · GPUs · peak)``, model FLOPs without recompute
(Megatron-LM 2021 §5.1; Chowdhery et al. 2022, PaLM, Appendix B).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace

from .. import units
from ..caches import register
from ..errors import ArgumentError
from .memory import MemoryBreakdown
from .cluster import Cluster, Straggler
from .context import StepContext, step_context
from .compute import StageCompute, compute_precision, stage_compute
from .costing import Entry, sm_contention
from .inventory import inventory
from .model import ModelConfig
from .overlap import exposed_seconds, exposure
from .parallel_dims import ParallelDims
from .pipeline import get_schedule, pipeline_bubble_fraction, pipeline_seconds
from .stage_memory import (in_flight_activations, in_flight_counts, stage_memory,
                           stage_memory_parts)
from .stages import StageShape
from .timeline import Timeline, simulate

__all__ = ["StageEstimate", "StepEstimate", "estimate_step", "exposed_seconds", "stage_memory",
           "compute_of", "passes_of", "step_seconds", "peak_memory", "stage_estimates"]


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
    memory: MemoryBreakdown | None = None
    compute: StageCompute | None = None
    weight_gradient_per_micro_batch: float = 0.0
    #: (memory without activations, activations of one pass): :func:`stage_memory_parts`
    memory_parts: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def micro_batch_seconds(self) -> float:
        return self.compute_per_micro_batch + sum(self.exposed_per_micro_batch.values())

    def passes(self) -> tuple[float, float, float]:
        """(F, B, W) of one pass through the stage, seconds: the forward, the backward for the
        inputs, the backward for the weights, the exposed communication spread over them in
        proportion to their compute."""
        scale = self.micro_batch_seconds / self.compute_per_micro_batch
        w = self.weight_gradient_per_micro_batch
        return (self.forward_per_micro_batch * scale,
                (self.backward_per_micro_batch - w) * scale, w * scale)

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
                "weight_gradient_per_micro_batch_s": self.weight_gradient_per_micro_batch,
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
                "stages": [s.to_dict() for s in self.stages], "notes": list(self.notes),
                "warnings": [w.to_dict() for w in self.warnings]}

    def describe(self) -> str:
        return (f"{self.model.name} on {self.dims.world_size} GPUs, {self.dims.describe()}: "
                f"step {units.format_duration(self.step_seconds)}, MFU {100 * self.mfu:.1f}%")

    def timeline(self) -> Timeline | None:
        """The pipeline schedule as it runs (:func:`ringccl.planner.timeline.simulate`) with
        each stage's (F, B, W) (:meth:`StageEstimate.passes`); None without a pipeline."""
        d = self.dims
        if d.pp < 2:
            return None
        return simulate(d.schedule, pp=d.pp, num_micro_batches=d.num_micro_batches,
                        virtual_stages=d.virtual_stages,
                        times=[s.passes() for s in self.stages])


def compute_of(model: ModelConfig, dims: ParallelDims, cluster: Cluster,
               st: StageShape) -> StageCompute:
    """The stage's :class:`~ringccl.planner.compute.StageCompute`: its layers on the
    cluster's GPU, its optimizer over the states ZeRO leaves it (dense states sharded over the
    ZeRO shard group, routed experts over the expert-data-parallel ranks); memoized on what it
    reads."""
    dense_shard, expert_shard = dims.shard_size, dims.expert_dp
    if dims.zero_stage == 0:
        dense_shard = expert_shard = 1
    held = st.dense_parameters + st.expert_parameters
    if dims.zero_stage == 3:
        held = st.dense_parameters / dense_shard + st.expert_parameters / expert_shard
    sharded = st.dense_parameters / dense_shard + st.expert_parameters / expert_shard
    key = (model, cluster.gpu_spec, st.layers, st.moe_layers, st.first, st.last,
           st.expert_load, held, sharded, dims.tp, dims.sp, dims.cp, dims.ep,
           dims.micro_batch_size, dims.attention, dims.precision, dims.recompute,
           dims.gradient_accumulation_fusion, dims.zero_stage, dims.reduce_dtype, dims.framework)
    c = _COMPUTED.get(key)
    if c is None:
        if len(_COMPUTED) > 1 << 16:
            _COMPUTED.clear()
        c = _COMPUTED[key] = _loaded(stage_compute(
            model, dims, cluster.gpu_spec, layers=st.layers, moe_layers=st.moe_layers,
            first=st.first, last=st.last, parameters=held, sharded_parameters=sharded), st)
    return c


#: :func:`compute_of`'s results (a layout search asks for the same stages again and again)
_COMPUTED: dict = {}
register(_COMPUTED.clear)


def _loaded(c: StageCompute, st: StageShape) -> StageCompute:
    """``c`` with the routed experts' GEMMs of the busiest EP rank: ``st.expert_load`` times
    the uniform share (:func:`~ringccl.planner.routing.expert_load`)."""
    moe = c.layers.get("moe")
    if moe is None or st.expert_load == 1:
        return c
    extra = st.expert_load - 1
    fwd = sum(o.forward_s for o in moe.ops if o.expert) * extra * st.moe_layers
    bwd = sum(o.backward_s for o in moe.ops if o.expert) * extra * st.moe_layers
    return replace(c, forward=c.forward + fwd, backward=c.backward + bwd,
                   expert_forward=c.expert_forward * st.expert_load)


def passes_of(c: StageCompute, st: StageShape) -> tuple[float, float, float]:
    """(F, B, W) of one pass through stage ``st`` from its compute: W, the backward for the
    weights, is half of each GEMM's backward (its weight-gradient GEMM, as many FLOPs as the
    forward's); B the rest of the backward (Qi et al. 2024's split)."""
    counts = {"dense": st.layers - st.moe_layers, "moe": st.moe_layers,
              "embedding": int(st.first), "head": int(st.last)}
    w = sum(counts[k] * sum(o.backward_s for o in part.ops if o.kind == "gemm") / 2
            for k, part in c.layers.items())
    return c.forward, c.backward - w, w


def _stage(ctx: StepContext, stage: int, copies: bool = True) -> StageEstimate:
    st = ctx.stages[stage]
    entries = inventory(ctx, stage, copies)
    c = compute_of(ctx.model, ctx.dims, ctx.cluster, st)
    hidden = get_schedule(ctx.dims.schedule).hidden_sends if ctx.dims.pp > 1 else ()
    # DualPipe's F&B pairs: one micro-batch's PP sends and all-to-alls run under the other's
    # compute, "fully hidden" (DeepSeek-V3 §3.2.1) up to that compute's length
    paired = [e for e in entries if e.per_micro_batch and e.parallelism in hidden]
    per_mb, per_step = exposure([e for e in entries if e not in paired], ctx.dims, c,
                                ctx.micro_batches, sm_contention(ctx.cluster))
    for e in paired:
        e.overlap = "other micro-batch"
        t = e.seconds_per_step / ctx.micro_batches
        per_mb[e.parallelism] = per_mb.get(e.parallelism, 0.0) + max(
            0.0, t - (c.forward + c.backward))
    est = StageEstimate(stage, st, entries, c.forward + c.backward, c.forward, c.backward,
                        per_mb, per_step, compute=c,
                        weight_gradient_per_micro_batch=passes_of(c, st)[2])
    base, per_pass = stage_memory_parts(ctx, st, entries)
    est.memory_parts = (base, per_pass)
    est.memory = replace(base, activations=in_flight_activations(ctx.dims, st.stage, per_pass))
    return est


def _shifted(entry: Entry, offset: int) -> Entry:
    """A copy of ``entry`` for the stage whose ranks are its stage's plus ``offset``."""
    shape = copy.copy(entry.shape)
    object.__setattr__(shape, "example", tuple(r + offset for r in entry.shape.example))
    out = copy.copy(entry)
    out.shape, out.params = shape, dict(entry.params)
    return out


def _stages_shared(ctx: StepContext, shift: bool = True) -> list[StageEstimate]:
    """Every stage's :class:`StageEstimate`, each distinct stage estimated once.

    Two stages are alike when they hold as many layers (and MoE layers), play the same role
    (first: embedding, last: LM head) and the second's ranks are the first's shifted by whole
    nodes (:meth:`RankGrid.stage_offset`): then each group of the second is a group of the first
    moved to other nodes, with the same placement, NIC sharing, algorithm and time. Only the
    group's example ranks (shifted) and the memory (the in-flight micro-batches depend on the
    stage's index) differ. The straggler's stage is always estimated on its own. The result
    equals ``[_stage(ctx, s) for s in range(pp)]``; with ``shift=False`` alike stages keep their
    representative's entries (example ranks not shifted: the numbers are the same).
    """
    planned: dict[tuple, tuple[StageEstimate, int]] = {}
    stages = []
    for s, st in enumerate(ctx.stages):
        offset = ctx.grid.stage_offset(s)
        key = (st.layers, st.moe_layers, st.first, st.last)
        if offset is None or s == ctx.straggler_stage:
            key += (s,)
        if key not in planned:
            planned[key] = (_stage(ctx, s, shift), offset)
            stages.append(planned[key][0])
            continue
        rep, rep_offset = planned[key]
        if not shift:      # the search: the representative's numbers under this stage's index
            est = copy.copy(rep)
            est.stage, est.shape, est.memory = s, st, None
            stages.append(est)
            continue
        entries = [_shifted(e, offset - rep_offset) for e in rep.entries]
        est = StageEstimate(s, st, entries, rep.compute_per_micro_batch,
                            rep.forward_per_micro_batch, rep.backward_per_micro_batch,
                            dict(rep.exposed_per_micro_batch), dict(rep.exposed_per_step),
                            compute=rep.compute,
                            weight_gradient_per_micro_batch=rep.weight_gradient_per_micro_batch)
        # alike stages hold the same states and buffers; only the in-flight count differs
        est.memory_parts = rep.memory_parts
        est.memory = replace(rep.memory_parts[0], activations=in_flight_activations(
            ctx.dims, s, rep.memory_parts[1]))
        stages.append(est)
    return stages


def stage_estimates(ctx: StepContext) -> list[StageEstimate]:
    """Every stage's estimate, alike stages estimated once and their entries not shifted: the
    numbers :func:`step_seconds` and :func:`peak_memory` read, for the layout search.

    Raises:
        ArgumentError: an FP8 recipe on a GPU without FP8 tensor cores.
    """
    _check_precision(ctx.model, ctx.dims, ctx.cluster)
    return _stages_shared(ctx, shift=False)


def _check_precision(model: ModelConfig, dims: ParallelDims, cluster: Cluster) -> None:
    recipe = compute_precision(model, dims)
    if recipe != "bf16" and not cluster.gpu_spec.fp8_flops:
        raise ArgumentError(f"precision={recipe!r} runs GEMMs in FP8; the cluster's GPU "
                            f"{cluster.gpu!r} has no FP8 tensor cores (use precision 'bf16')")


def step_seconds(dims: ParallelDims, stages: list[StageEstimate]) -> tuple[float, float, float]:
    """(pipeline, bubble, once-per-step exposed) seconds of ``stages`` run with ``dims``' schedule
    and batch (:func:`~ringccl.planner.pipeline.pipeline_seconds`): what
    :func:`estimate_step` adds up, and what the layout search prices for every schedule and
    batch of one set of stages (a stage's estimate depends on neither)."""
    pipeline, bubble = pipeline_seconds(dims.schedule if dims.pp > 1 else "1f1b",
                                        num_micro_batches=dims.num_micro_batches,
                                        virtual_stages=dims.virtual_stages,
                                        stages=[s.passes() for s in stages])
    return pipeline, bubble, max(s.per_step_seconds for s in stages)


def peak_memory(dims: ParallelDims, stages: list[StageEstimate]) -> int:
    """The largest stage's memory, bytes, with ``dims``' schedule and batch in flight (alike
    stages share their parts: each group's peak is at its most in-flight stage)."""
    counts = in_flight_counts(dims)
    most: dict = {}
    for s in stages:
        key = id(s.memory_parts)
        most[key] = (s.memory_parts, max(counts[s.stage], most.get(key, (None, 0))[1]))
    den = 2 * dims.virtual_stages
    return max(base.total + -(-per_pass * count // den) for (base, per_pass), count in
               most.values())


#: the share of the MFU count in attention scores above which a plan says what the MFU would be
#: with causal attention counted at half
CAUSAL_NOTE_SHARE = 0.25


def causal_count_note(model: ModelConfig, flops: float, peak_flops_seconds: float) -> str:
    """A note when attention's score matmuls are more than :data:`CAUSAL_NOTE_SHARE` of the
    MFU count (long sequences): PaLM's count (Chowdhery et al. 2022, Appendix B) charges the
    whole s x s score matrix, while causal attention computes about half of it (Dao 2023,
    FlashAttention-2, §4.1, halves its FLOPs for causal); so the MFU can pass 100% although
    no GPU ran faster than its peak. Empty when the share is smaller."""
    per_token = model.flops_per_token()
    attention = 3.0 * model.attention_flops_per_token()
    share = attention / per_token
    if share <= CAUSAL_NOTE_SHARE:
        return ""
    halved = flops * (1.0 - share / 2.0)
    return (f"attention scores are {100 * share:.1f}% of the MFU count (PaLM, Appendix B: the "
            f"whole s x s matrix); causal attention computes half of it: counted so, the MFU "
            f"is {100 * halved / peak_flops_seconds:.2f}% instead of "
            f"{100 * flops / peak_flops_seconds:.2f}%")


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
    _check_precision(model, dims, cluster)
    ctx = step_context(model, dims, cluster, straggler)
    dims = ctx.dims                     # completed for the model (batch, reduce dtype, bucket)
    if share_stages:
        stages = _stages_shared(ctx)
    else:
        stages = [_stage(ctx, s) for s in range(dims.pp)]
    m, p = ctx.micro_batches, dims.pp
    pipeline, bubble, per_step = step_seconds(dims, stages)
    f, b, w = max(stages, key=lambda s: s.micro_batch_seconds).passes()
    fraction = pipeline_bubble_fraction(schedule=dims.schedule if p > 1 else "1f1b", pp=p,
                                        num_micro_batches=dims.num_micro_batches,
                                        virtual_stages=dims.virtual_stages, forward=f,
                                        backward_input=b, backward_weight=w)
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
    notes = list(dims.notes)     # what the layout turned off rather than refused
    if not fits:
        notes.append(f"needs {units.format_size(peak)} on a GPU of "
                     f"{units.format_size(cluster.gpu_memory)}")
    if model.dtype in ("float32", "fp32") and dims.precision == "bf16":
        notes.append("float32 parameters and activations, GEMMs at the BF16 peak (the bf16 "
                     "recipe: autocast); GEMMs in float32 itself (FP32 or TF32 peaks) are not "
                     "modelled")
    if not math.isfinite(step) or step <= 0:  # pragma: no cover - compute is always > 0
        raise ArgumentError(f"step time {step!r} is not a positive number")
    note = causal_count_note(model, flops, step * dims.world_size * cluster.peak_flops)
    if note:
        notes.append(note)
    if model.windowed_layers:
        priced = ("over the keys each query sees" if dims.attention in ("flash", "flash2")
                  else f"over the whole sequence (attention={dims.attention!r} has no window)")
        notes.append(f"sliding-window attention ({model.sliding_window} keys per query) on "
                     f"{model.windowed_layers} of {model.num_hidden_layers} layers: priced "
                     f"{priced}; context parallelism still exchanges every key/value block; "
                     "the MFU count is PaLM's, over the whole sequence")
    return StepEstimate(model, dims, cluster, straggler, stages, pipeline, bubble, fraction,
                        step, flops, exposed, peak, fits, notes)
