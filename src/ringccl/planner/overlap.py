"""What the frameworks overlap, and what they leave exposed.

Each collective of the step (an :class:`~ringccl.planner.costing.Entry`) either hides behind a
window of compute or stays on the critical path. The window, per the framework's knobs on
:class:`~ringccl.planner.parallel_dims.ParallelDims`:

================ ============================= ===============================================
parallelism      hidden behind                 when
================ ============================= ===============================================
dp (DDP), zero   the last micro-batch's        ``overlap_grad_reduce`` (DDP's bucket hooks;
reduce-scatter   backward, bucket by bucket    Megatron's --overlap-grad-reduce; DeepSpeed's
(ZeRO-1/2)                                     overlap_comm). Else after the backward.
zero all-gather  the next step's first         ``overlap_param_gather`` (Megatron's
(ZeRO-1/2)       forward                       --overlap-param-gather). Else before it.
zero (ZeRO-3)    the layers' forward /         ``zero3_gather="layer"`` (FSDP): the next
                 backward, layer by layer      layer's gather runs during this one's compute
                                               when ``fsdp_prefetch`` >= 1 (FSDP2's implicit
                                               prefetch, torch ``_fsdp_param_group.py``); the
                                               reduce-scatter always runs on its own stream.
                                               ``"parameter"`` (DeepSpeed): gathered
                                               ``zero3_prefetch_bucket`` elements ahead; 0 =
                                               every gather blocks (DeepSpeed v0.3.15:
                                               ``torch.cuda.synchronize()`` before each
                                               per-parameter gather, reduce-scatter on the
                                               compute stream).
tp, sp           the GEMMs they feed           ``tp_comm_overlap`` (Megatron's userbuffers,
                                               torchtitan's async TP): each call split in tp
                                               chunks, one of which stays exposed. Else
                                               exposed (Megatron-LM 2019 §3), but for
                                               ``overlap_dgrad_reduce`` (Megatron-LM since
                                               2022, ``layers.py`` ``LinearWithGrad
                                               AccumulationAndAsyncCommunication``): the
                                               column-parallel layers' input-gradient
                                               all-reduce / reduce-scatter behind their
                                               weight-gradient GEMMs, SP's re-gather of their
                                               input behind their input-gradient GEMMs.
pp               the micro-batch's compute     ``overlap_p2p`` (Megatron-Core's
                                               --overlap-p2p-communication): each send behind
                                               the next micro-batch's compute. Else exposed.
cp               attention                     always: ring attention overlaps each K/V block's
                                               transfer with the previous block's attention
                                               (Liu et al. 2023).
ep               the experts' GEMMs, in        always (micro-chunked all-to-all, the
                 micro-chunks                  planner's own assumption).
embedding        nothing                       the tied embedding's all-reduce is exposed.
================ ============================= ===============================================

Megatron-Core's distributed optimizer (r0.8.0, the same code at the README commit f2e5db402c;
the same schedule at ``d98e8a64``, its hooks moved to the DDP wrapper's bucket groups): a
bucket's reduce-scatter is launched by the gradient hook of its last parameter, only while
``is_last_microbatch`` (``param_and_grad_buffer.py`` ``register_grad_ready``; the schedule runs
the other micro-batches under ``no_sync``), and waited for in ``finalize_model_grads`` before
the optimizer: one micro-batch's backward is its window however many micro-batches
accumulate. The parameter all-gathers run one bucket at a time: ``zero_grad`` dispatches the
bucket the forward needs first, each forward pre-hook waits for its bucket and dispatches the
next (``distrib_optimizer.py`` ``_make_forward_pre_hook``, ``_finish_param_sync_helper``), so
all of them fall in the first micro-batch's forward.

Collectives that share a window run one after another on one communication stream: their
seconds are added before being set against the window. What stays exposed of ``T`` seconds of
communication behind ``W`` seconds of compute cut into ``chunks`` pieces is
``max(0, T − W) + min(T, W) / chunks`` (:func:`exposed_seconds`): the excess, plus the one piece
that cannot start before the compute it waits for (the last DDP bucket, the first layer's
gather).
"""

from __future__ import annotations

from .compute import StageCompute
from .costing import Entry
from .parallel_dims import ParallelDims

__all__ = ["exposed_seconds", "contended", "decide", "exposure"]


#: the windows of Megatron's asynchronous TP backward (``overlap_dgrad_reduce``)
_TP_BACKWARD = ("weight gradients", "input gradients")


def exposed_seconds(seconds: float, window: float, chunks: int = 1) -> float:
    """Communication of ``seconds`` overlapped with ``window`` seconds of compute, cut into
    ``chunks`` pieces: what stays on the critical path."""
    if window <= 0:
        return seconds
    return max(0.0, seconds - window) + min(seconds, window) / max(chunks, 1)


def contended(seconds: float, window: float, chunks: int, contention: float) -> float:
    """:func:`exposed_seconds`, plus what the compute loses while the collective runs beside
    it: ``contention · min(seconds, window)``. A collective's kernel holds SMs the GEMMs then
    cannot use: NCCL runs one thread block per channel (NCCL documentation,
    NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS: "more CUDA blocks ... uses more GPU resources
    that could be used for computation"); Transformer Engine's userbuffers overlap takes 16
    SMs for its pipelined and bulk methods (``initialize_ub`` defaults, ``num_sm``)."""
    return exposed_seconds(seconds, window, chunks) + contention * min(seconds, window)


def decide(entry: Entry, dims: ParallelDims) -> str:
    """The window ``entry`` hides behind under ``dims``' knobs (module doc): "exposed",
    "forward", "backward", "attention", "expert compute", "weight gradients" or "input
    gradients"; from the entry's builder-given ``window``, not its ``overlap`` (which this
    sets: memoized entries are decided again for every layout)."""
    p, c = entry.parallelism, entry.collective
    if p in ("tp", "sp"):
        if dims.tp_comm_overlap:
            return entry.phase
        if dims.overlap_dgrad_reduce and entry.window in _TP_BACKWARD:
            return entry.window
        return "exposed"
    if p == "pp":
        return "forward" if dims.overlap_p2p else "exposed"
    if p == "dp":
        return "backward" if dims.overlap_grad_reduce else "exposed"
    if p == "zero" and dims.zero_stage in (1, 2):
        if c == "all_gather":
            return "forward" if dims.overlap_param_gather else "exposed"
        return "backward" if dims.overlap_grad_reduce else "exposed"
    if p == "zero":   # ZeRO-3
        if dims.zero3_gather == "parameter":
            return entry.phase if dims.zero3_prefetch_bucket > 0 else "exposed"
        if c == "reduce_scatter":
            return "backward"
        return entry.phase if dims.fsdp_prefetch > 0 else "exposed"
    if p in ("cp", "ep"):
        return entry.window
    return "exposed"


def _chunks(e: Entry, dims: ParallelDims) -> int:
    """Pieces an overlapped collective is cut into: tp per TP/SP call (userbuffers' ring
    exchange), each call behind its own GEMM (the asynchronous TP backward), each PP send on
    its own (the next micro-batch's compute hides it), else the entry's own (DDP buckets,
    layers)."""
    if e.parallelism in ("tp", "sp") and e.overlap in _TP_BACKWARD:
        return max(1, e.calls_per_micro_batch)
    if e.parallelism in ("tp", "sp"):
        return dims.tp
    if e.parallelism == "pp":
        return max(1, e.calls_per_step)
    return e.chunks


def _window(kind: str, phase: str, c: StageCompute) -> float:
    if kind == "weight gradients":
        return c.column_weight_grad
    if kind == "input gradients":
        return c.column_input_grad
    if kind == "attention":
        return c.attention_forward * (2 if phase == "backward" else 1)
    if kind == "forward":
        return c.forward
    return c.backward


def exposure(entries: list[Entry], dims: ParallelDims, c: StageCompute,
             micro_batches: int, contention: float = 0.0) -> tuple[dict, dict]:
    """What ``entries`` leave exposed on a stage whose compute is ``c``: (parallelism ->
    seconds per micro-batch, parallelism -> seconds per step). Sets each entry's ``overlap``
    to its :func:`decide` window. ``contention``: the fraction of the SMs an overlapped
    collective takes from the compute while it runs (:func:`contended`)."""
    per_mb: dict = {}
    per_step: dict = {}
    shared: dict = {}   # (parallelism, window, phase, per micro-batch) -> [seconds, chunks]
    for e in entries:
        e.overlap = decide(e, dims)
        if e.overlap == "expert compute":
            # each all-to-all against its own layer's expert GEMMs (backward: twice the
            # forward's), half the window each for dispatch and combine
            window = c.expert_forward * (2 if e.phase == "backward" else 1) / 2
            x = contended(e.seconds_per_call, window, e.chunks, contention) \
                * e.calls_per_micro_batch
            per_mb[e.parallelism] = per_mb.get(e.parallelism, 0.0) + x
            continue
        t = e.seconds_per_step / micro_batches if e.per_micro_batch else e.seconds_per_step
        out = per_mb if e.per_micro_batch else per_step
        if e.overlap == "exposed":
            out[e.parallelism] = out.get(e.parallelism, 0.0) + t
            continue
        phase = "backward" if e.overlap == "backward" else e.phase
        key = (e.parallelism, e.overlap, phase, e.per_micro_batch)
        acc = shared.setdefault(key, [0.0, 1])
        acc[0] += t
        acc[1] = max(acc[1], _chunks(e, dims))
    for (p, kind, phase, per_micro), (t, chunks) in shared.items():
        out = per_mb if per_micro else per_step
        out[p] = out.get(p, 0.0) + contended(t, _window(kind, phase, c), chunks, contention)
    return per_mb, per_step
