"""Seconds of one GPU kernel from its shape: GEMMs, FlashAttention, memory-bound passes.

**GEMM** ``C[m, n] = A[m, k] · B[k, n]`` (``batch`` independent ones in one launch):
``max(compute, memory)`` where

* ``memory = bytes / (HBM bandwidth × memory_efficiency)``, the bytes being A and B read once
  and C written once (the roofline of Williams, Waterman & Patterson, CACM 52(4), 2009);
* ``compute``: the output is cut into thread-block tiles of ``tm × tn`` and the tiles run in
  waves of one tile per SM (NVIDIA, "Matrix Multiplication Background User's Guide", Deep
  Learning Performance documentation, sections "Tile quantization" and "Wave quantization": a
  partial tile costs a whole tile, a partial wave a whole wave; e.g. on A100's 108 SMs a
  1792 × 1792 output in 256 × 128 tiles is 7 × 14 = 98 tiles, one wave 91% full). A wave of
  ``tm × tn`` tiles takes its main loop, ``2·tm·tn·k / (peak × gemm_efficiency / SMs)``, then
  its epilogue, the ``tm·tn`` output tile stored at the SM's share of HBM bandwidth (CUTLASS,
  "Efficient GEMM in CUDA": the epilogue runs after the main loop has accumulated the tile), so
  short-K GEMMs and FP8 GEMMs (twice the main-loop rate, the same BF16 output) lose more to it.
  The library picks the tile (of :data:`TILES`, the large tiles the guide lists for cuBLAS) with
  the fewest seconds. ``gemm_efficiency`` is what the main loop of a large GEMM sustains
  (:mod:`ringccl.planner.gpus`). Not modelled: the GEMV and split-K kernels a library picks
  when m (or n) is far below a tile (decoding, an expert with a few tokens); those shapes are
  charged a padded tile.

**FlashAttention** (Dao et al. 2022, arXiv:2205.14135; Dao 2023, FlashAttention-2,
arXiv:2307.08691): the forward computes ``S = QKᵀ`` and ``O = PV`` block by block, 4·d FLOPs per
(query, key) pair computed; with a causal mask it skips the key blocks wholly above the diagonal,
so it computes, for query block i of ``bq`` rows, ``ceil((i + 1)·bq / bk)`` key blocks of ``bk``
(FlashAttention-2 §3.1.1; blocks ``bq = 128``, ``bk = 128`` for head dimension 128). The backward
runs 5 matmuls to the forward's 2 (it recomputes S, then dV, dP, dQ, dK): 2.5 × the forward's
FLOPs (FlashAttention-2 §3.1.2). Rate, on Ampere: :data:`FLASH_EFFICIENCY` of the peak, the
kernels' reported fractions on large problems. On Hopper (and Blackwell, at Hopper's fraction of
its peak: no published figure read) the kernel's measured rate at the call's sequence length
(:data:`HOPPER_ATTENTION_TFLOPS`, FlashAttention-3's Figures 4 and 5, interpolated in log2 of
the length and clamped to the measured 512–16k): the causal forward at the paper's own FLOP
count, the pairs a causal mask keeps (about ``s²/2``: its benchmark halves the FLOPs for the
mask), so the measured cost of masking is the paper's; the backward, measured without a mask,
on the blocks computed. Both times the wave quantisation of the call's
``batch·heads·ceil(s/bq)`` thread blocks over the SMs, relative to the paper's benchmark (16k
tokens of 16 heads: 2,048 blocks).

**Memory-bound kernels** (norms, activations, softmax, dropout, rotary, casts, the optimizer
step): ``bytes / (HBM bandwidth × memory_efficiency)``.

**A compute profile** (``ringccl calibrate``, :mod:`ringccl.costmodel.compute_profile`) on the
GPU replaces the model with what was measured on the user's device: each GEMM's time is the
profile's (its measured shape, else the roofline with the efficiency of the measured shape
nearest in FLOPs; FP8 at the preset's FP8-over-BF16 ratio), memory-bound kernels run at the
measured copy bandwidth, attention at the efficiency of the measured attention nearest in
sequence length (the backward at the preset's backward-over-forward ratio).

All functions take numpy arrays or scalars (broadcast) and are pure; the planner caches them per
shape.
"""

from __future__ import annotations

import math

import numpy as np

from ..caches import memoize
from ..costmodel.compute_profile import ComputeProfile, load_compute_profile
from ..errors import ArgumentError
from .gpus import GPU

__all__ = ["TILES", "FLASH_EFFICIENCY", "FLASH2_EFFICIENCY", "FLASH_BLOCK",
           "HOPPER_ATTENTION_TFLOPS", "ATTENTION_LENGTHS", "attention_efficiency", "gemm_seconds",
           "gemm_efficiency", "wave_utilisation", "tiles", "flash_attention_flops",
           "causal_pairs_flops", "flash_attention_seconds", "memory_seconds", "compute_profile", "profile_dtype"]

#: thread-block tiles (rows, columns) the library chooses from (NVIDIA's "Matrix
#: Multiplication Background User's Guide", "Tile quantization": 256×128 and 128×256 the most
#: efficient, 128×128 next)
TILES = ((256, 128), (128, 256), (128, 128))

#: FlashAttention's fraction of the dense tensor peak on large problems, per architecture:
#: (forward, backward). Ampere: FlashAttention-2 (arXiv:2307.08691) §4.1, A100: forward up to
#: 73%, backward up to 63% of the theoretical maximum. Hopper and Blackwell: the long-sequence
#: end of :data:`HOPPER_ATTENTION_TFLOPS` (what a profile falls back to); the step's kernels
#: take the measured rate at their own length (:func:`attention_efficiency`).
FLASH_EFFICIENCY = {"ampere": (0.73, 0.63), "hopper": (0.54, 0.52), "blackwell": (0.54, 0.52)}

#: FlashAttention-2's own kernel (``attention="flash2"``: the kernel of 2023 and of torch's
#: SDPA flash backend, before FlashAttention-3 and cuDNN's Hopper attention): Ampere as above;
#: Hopper and Blackwell: the long-sequence end of its :data:`HOPPER_ATTENTION_TFLOPS` row.
FLASH2_EFFICIENCY = {"ampere": (0.73, 0.63), "hopper": (0.34, 0.33), "blackwell": (0.34, 0.33)}

#: sequence lengths of :data:`HOPPER_ATTENTION_TFLOPS`' columns
ATTENTION_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)

#: measured TFLOP/s of attention kernels on an H100 SXM5 in BF16, head dimension 128, at the
#: sequence lengths of :data:`ATTENTION_LENGTHS` (batch × length = 16k tokens, 16 heads):
#: FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608) §4.1, Figure 4 (forward; the causal
#: panel at its FLOP count, half the pairs; and without a mask) and Figure 5 (backward, without
#: a mask). ``"flash"``: the cuDNN bars, the kernel Transformer Engine runs on Hopper
#: (``transformer_engine/pytorch/attention.py`` v1.8, ``get_attention_backend``: FlashAttention
#: disabled "to give FusedAttention preference on Hopper+"), so Megatron-Core's and NeMo's;
#: ``"flash2"``: the FlashAttention-2 bars. The values are the labels printed on the bars, read
#: through transcriptions of the figures (the forward without a mask in two, which agree but
#: for cuDNN's and FlashAttention-3's bars at 512, 497 and 467 swapped; the causal forward and
#: the backward in one each), not from the paper's PDF.
HOPPER_ATTENTION_TFLOPS = {
    "flash": {"causal": (315, 410, 484, 518, 529, 539),
              "full": (497, 574, 617, 609, 600, 595),
              "backward": (305, 408, 465, 499, 518, 516)},
    "flash2": {"causal": (191, 260, 298, 319, 333, 335),
               "full": (309, 350, 362, 368, 370, 370),
               "backward": (214, 260, 291, 310, 318, 322)},
}

#: the H100 SXM5's dense BF16 peak the figures above are fractions of (gpus.py's preset)
_H100_BF16 = 989.4e12

#: thread blocks of the FlashAttention-3 benchmark (16k tokens, 16 heads, 128-row blocks)
_BENCH_BLOCKS = 16384 * 16 // 128

#: FlashAttention-2's query and key block sizes for head dimension <= 128 (§3.1.1, §3.3)
FLASH_BLOCK = (128, 128)


def _ceil_div(a, b):
    return -(-np.asarray(a) // b)


def tiles(m, n, tile: tuple[int, int], batch=1):
    """Thread-block tiles of an ``m × n`` output (× batch) in ``tile`` (tile quantisation)."""
    tm, tn = tile
    return np.asarray(batch) * _ceil_div(m, tm) * _ceil_div(n, tn)


def wave_utilisation(num_tiles, sm_count: int):
    """Busy fraction of the SMs over the waves of ``num_tiles`` (wave quantisation): e.g. 108
    tiles on 108 SMs 1.0, 109 tiles 109/216."""
    num_tiles = np.asarray(num_tiles, dtype=float)
    return num_tiles / (_ceil_div(num_tiles, sm_count) * sm_count)


@memoize(maxsize=16)
def compute_profile(path: str) -> ComputeProfile:
    """The compute profile at ``path``, read once (:func:`load_compute_profile`)."""
    return load_compute_profile(path)


def profile_dtype(profile: ComputeProfile) -> str:
    """The profile's 16-bit dtype if it timed one, else its first (a CPU's float32).

    Raises:
        ArgumentError: a profile without a calibrated dtype (``peak_flops`` empty or absent;
            :func:`load_compute_profile` refuses such a file, a profile built in code may not).
    """
    peaks = profile.data.get("peak_flops")
    if not isinstance(peaks, dict) or not peaks:
        raise ArgumentError(f"compute profile: peak_flops={peaks!r} names no calibrated dtype; "
                            "expected {dtype: FLOP/s} with at least one (`ringccl calibrate`)")
    return next((d for d in ("bfloat16", "float16") if d in peaks), next(iter(peaks)))


def memory_seconds(nbytes, gpu: GPU):
    """Seconds of a kernel that streams ``nbytes`` through HBM (or at a profile's measured copy
    bandwidth)."""
    if gpu.compute_profile:
        bandwidth = compute_profile(gpu.compute_profile).memory_bandwidth
        return np.asarray(nbytes, dtype=float) / bandwidth
    return np.asarray(nbytes, dtype=float) / (gpu.hbm_bandwidth * gpu.memory_efficiency)


def _profiled_gemm(m, n, k, gpu: GPU, fp8: bool, batch):
    prof = compute_profile(gpu.compute_profile)
    dtype = profile_dtype(prof)
    scale = (gpu.bf16_flops / gpu.fp8_flops) if fp8 and gpu.fp8_flops else 1.0

    def one(m, n, k, b):
        if min(m, n, k) <= 0:
            return 0.0
        return b * scale * prof.gemm_seconds(math.ceil(m), math.ceil(n), math.ceil(k), dtype)
    return np.vectorize(one, otypes=[float])(m, n, k, batch)


def _compute_seconds(m, n, k, gpu: GPU, fp8: bool, batch, out_bytes: float):
    per_sm = gpu.peak(fp8) * gpu.gemm_efficiency / gpu.sm_count
    store = gpu.hbm_bandwidth * gpu.memory_efficiency / gpu.sm_count
    best = None
    for tm, tn in TILES:
        waves = _ceil_div(tiles(m, n, (tm, tn), batch), gpu.sm_count)
        t = waves * ((2.0 * tm * tn * np.asarray(k, dtype=float)) / per_sm
                     + tm * tn * out_bytes / store)
        best = t if best is None else np.minimum(best, t)
    return best


def gemm_seconds(m, n, k, gpu: GPU, *, fp8: bool = False, batch=1, in_bytes: float = 2.0,
                 out_bytes: float = 2.0):
    """Seconds of ``batch`` GEMMs ``[m, k] · [k, n]`` (module doc): max(tile- and
    wave-quantised compute, bytes / HBM bandwidth).

    Args:
        m, n, k: the shape (ints or arrays); an empty GEMM (a dimension 0) takes 0 s.
        gpu: the :class:`~ringccl.planner.gpus.GPU`.
        fp8: at the FP8 peak (operands 1 byte unless ``in_bytes`` says otherwise).
        batch: GEMMs of the same shape in one launch (batched or grouped GEMM).
        in_bytes, out_bytes: bytes per element of A and B, of C.
    """
    if gpu.compute_profile:
        return _profiled_gemm(m, n, k, gpu, fp8, batch)
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    nbytes = np.asarray(batch) * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    t = np.maximum(_compute_seconds(m, n, k, gpu, fp8, batch, out_bytes),
                   memory_seconds(nbytes, gpu))
    return np.where((m > 0) & (n > 0) & (k > 0), t, 0.0)


def gemm_efficiency(m, n, k, gpu: GPU, *, fp8: bool = False, batch=1):
    """Achieved fraction of the peak: FLOPs / (seconds × peak) of :func:`gemm_seconds`."""
    flops = 2.0 * np.asarray(batch) * np.asarray(m) * np.asarray(n) * np.asarray(k)
    return flops / (gemm_seconds(m, n, k, gpu, fp8=fp8, batch=batch,
                                 in_bytes=1.0 if fp8 else 2.0) * gpu.peak(fp8))


def flash_attention_flops(s_q, s_k, head_dim_qk: int, head_dim_v: int, causal: bool,
                          block: tuple[int, int] = FLASH_BLOCK, offset: int = 0,
                          window: int = 0) -> float:
    """Forward FLOPs of one (batch, head) of FlashAttention as the kernel computes them:
    ``2·(d_qk + d_v)`` per (query, key) pair of every block it computes (module doc).

    ``offset``: the queries' position in the key sequence (the causal diagonal is at key
    ``offset + i`` for query i; context parallelism's later chunks see earlier keys whole).
    ``window``: causal sliding-window attention, query i seeing its ``window`` latest keys
    (itself included; FlashAttention-2's ``window_size``, Dao 2023): a query block's key
    blocks start at the block holding its first query's oldest key (0: no window).
    """
    per_pair = 2.0 * (head_dim_qk + head_dim_v)
    if not causal:
        return per_pair * s_q * s_k
    bq, bk = block
    qblocks = int(-(-s_q // bq))
    if not window and bq % bk == 0 and offset % bk == 0:
        # every block's last key is on a key-block edge: whole blocks of bq rows see
        # min(s_k, offset + bq·(j + 1)) keys, a clamped arithmetic series (exact, any length)
        whole = int(s_q // bq)
        tail = s_q - bq * whole
        return float(per_pair * (bq * _clamped_series(offset + bq, bq, whole, s_k)
                                 + tail * min(s_k, offset + bq * (whole + 1))))
    rows = np.minimum(bq, s_q - bq * np.arange(qblocks))
    last_key = offset + bq * (np.arange(qblocks) + 1)     # one past the block's last query
    keys = np.minimum(s_k, bk * _ceil_div(last_key, bk))
    if window:      # less the key blocks before the one holding the first query's oldest key
        keys = keys - bk * (np.maximum(0, last_key - bq - window + 1) // bk)
    return float(per_pair * np.sum(rows * keys))


def _clamped_series(first, step, count, cap) -> float:
    """``sum(min(cap, first + step·j) for j in range(count))`` in closed form."""
    if count <= 0:
        return 0.0
    below = 0 if first > cap else min(count, int((cap - first) // step) + 1)
    return below * first + step * below * (below - 1) / 2 + (count - below) * cap


def attention_efficiency(kind: str, seq: float, architecture: str = "hopper",
                         kernel: str = "flash") -> float:
    """The fraction of the BF16 peak the attention kernel sustains at sequence length ``seq``
    (module doc): ``kind`` "causal" (forward, against the exact causal FLOPs), "full" (forward
    without a mask) or "backward"; Ampere's constant fractions (:data:`FLASH_EFFICIENCY`, both
    kernels) whatever the length."""
    if architecture == "ampere":
        fwd, bwd = FLASH_EFFICIENCY["ampere"]
        return bwd if kind == "backward" else fwd
    row = HOPPER_ATTENTION_TFLOPS["flash2" if kernel == "flash2" else "flash"][kind]
    x = float(np.clip(math.log2(max(seq, 1)), math.log2(ATTENTION_LENGTHS[0]),
                      math.log2(ATTENTION_LENGTHS[-1])))
    tflops = float(np.interp(x, np.log2(ATTENTION_LENGTHS), row))
    return tflops * 1e12 / _H100_BF16


def causal_pairs_flops(s_q, s_k, head_dim_qk: int, head_dim_v: int, offset: int,
                        window: int = 0) -> float:
    """Forward FLOPs of the (query, key) pairs a causal mask keeps: query i sees keys up to
    ``offset + i`` (the FLOP count of FlashAttention-3's causal figures), at most ``window``
    of them with a sliding window (0: none)."""
    cap = min(s_k, window) if window else s_k
    return float(2.0 * (head_dim_qk + head_dim_v)
                 * _clamped_series(offset + 1, 1, int(s_q), cap))


def flash_attention_seconds(batch_heads: int, s_q: int, s_k: int, head_dim_qk: int,
                            head_dim_v: int, causal: bool, gpu: GPU, *, backward: bool = False,
                            fp8: bool = False, offset: int = 0, kernel: str = "flash",
                            length: int | None = None, window: int = 0) -> float:
    """Seconds of FlashAttention's forward (or backward: 2.5 × the FLOPs of the blocks it
    computes) over ``batch_heads`` (batch × heads) of ``s_q`` queries and ``s_k`` keys (module
    doc); ``kernel`` "flash" (the architecture's current kernel) or "flash2"; ``length``: the
    sequence length the kernel's measured rate is read at (default ``s_k``); ``window``: a
    causal sliding window (:func:`flash_attention_flops`), its rate read at the window's
    length when that is shorter (each query block sees about that many keys)."""
    flops = batch_heads * flash_attention_flops(s_q, s_k, head_dim_qk, head_dim_v, causal,
                                                offset=offset, window=window)
    if backward:
        flops *= 2.5
    arch = gpu.architecture
    if gpu.compute_profile:
        table = FLASH2_EFFICIENCY if kernel == "flash2" else FLASH_EFFICIENCY
        fwd_eff, bwd_eff = table[arch]
        return flops / _profiled_attention_rate(gpu, s_q, bwd_eff / fwd_eff if backward else 1.0)
    kind = "backward" if backward else ("causal" if causal else "full")
    if kind == "causal" and arch != "ampere":
        flops = batch_heads * causal_pairs_flops(s_q, s_k, head_dim_qk, head_dim_v, offset,
                                                  window)
    rate_length = s_k if length is None else length
    if window:
        rate_length = min(rate_length, window)
    eff = attention_efficiency(kind, rate_length, arch, kernel)
    blocks = batch_heads * int(-(-s_q // FLASH_BLOCK[0]))
    util = float(wave_utilisation(blocks, gpu.sm_count))
    if arch != "ampere":     # the measured rates include their own benchmark's waves
        util /= float(wave_utilisation(_BENCH_BLOCKS, 132))
    return flops / (gpu.peak(fp8) * eff * util)


def _profiled_attention_rate(gpu: GPU, seq: int, ratio: float) -> float:
    """FLOP/s of the profile's attention nearest in sequence length (else its GEMM peak at
    the preset's FlashAttention fraction), times ``ratio``."""
    prof = compute_profile(gpu.compute_profile)
    dtype = profile_dtype(prof)
    rows = [a for a in prof.data["attention"] if a["dtype"] == dtype and a.get("flops_per_s")]
    if not rows:
        return prof.peak_flops(dtype) * FLASH_EFFICIENCY[gpu.architecture][0] * ratio
    near = min(rows, key=lambda a: abs(math.log(a["seq"] / max(seq, 1))))
    return float(near["flops_per_s"]) * ratio
