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
FLOPs (FlashAttention-2 §3.1.2). Rate: :data:`FLASH_EFFICIENCY` of the peak, the kernels'
reported fractions on large problems, times the wave quantisation of its ``batch·heads·ceil(s/bq)``
thread blocks over the SMs.

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
from .gpus import GPU

__all__ = ["TILES", "FLASH_EFFICIENCY", "FLASH2_EFFICIENCY", "FLASH_BLOCK", "gemm_seconds",
           "gemm_efficiency", "wave_utilisation", "tiles", "flash_attention_flops",
           "flash_attention_seconds", "memory_seconds", "compute_profile", "profile_dtype"]

#: thread-block tiles (rows, columns) the library chooses from (NVIDIA's "Matrix
#: Multiplication Background User's Guide", "Tile quantization": 256×128 and 128×256 the most
#: efficient, 128×128 next)
TILES = ((256, 128), (128, 256), (128, 128))

#: FlashAttention's fraction of the dense tensor peak on large problems, per architecture:
#: (forward, backward). Ampere: FlashAttention-2 (arXiv:2307.08691) §4.1, A100: forward up to
#: 73%, backward up to 63% of the theoretical maximum. Hopper: FlashAttention-3 (Shah et al.
#: 2024, arXiv:2407.08608) §4.1, H100 SXM5 BF16: forward up to 740 TFLOP/s (75%), backward
#: 1.5-1.75x FlashAttention-2's, about 500 TFLOP/s (50%). Blackwell: Hopper's fractions (no
#: published figure read).
FLASH_EFFICIENCY = {"ampere": (0.73, 0.63), "hopper": (0.75, 0.50), "blackwell": (0.75, 0.50)}

#: FlashAttention-2's own kernel on each architecture (``attention="flash2"``: the kernel of
#: 2023, before FlashAttention-3 and cuDNN's Hopper attention): Ampere as above; Hopper:
#: FlashAttention-3 (arXiv:2407.08608), abstract and §1, "FlashAttention-2 achieving only 35%
#: utilization on H100", and §4.1, its backward 1.5-1.75x FlashAttention-2's, so 0.50 / 1.625
#: = 0.31. Blackwell: Hopper's (no published figure read).
FLASH2_EFFICIENCY = {"ampere": (0.73, 0.63), "hopper": (0.35, 0.31),
                     "blackwell": (0.35, 0.31)}

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
    """The profile's 16-bit dtype if it timed one, else its first (a CPU's float32)."""
    peaks = profile.data["peak_flops"]
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
                          block: tuple[int, int] = FLASH_BLOCK, offset: int = 0) -> float:
    """Forward FLOPs of one (batch, head) of FlashAttention as the kernel computes them:
    ``2·(d_qk + d_v)`` per (query, key) pair of every block it computes (module doc).

    ``offset``: the queries' position in the key sequence (the causal diagonal is at key
    ``offset + i`` for query i; context parallelism's later chunks see earlier keys whole).
    """
    per_pair = 2.0 * (head_dim_qk + head_dim_v)
    if not causal:
        return per_pair * s_q * s_k
    bq, bk = block
    qblocks = int(-(-s_q // bq))
    rows = np.minimum(bq, s_q - bq * np.arange(qblocks))
    last_key = offset + bq * (np.arange(qblocks) + 1)     # one past the block's last query
    keys = np.minimum(s_k, bk * _ceil_div(last_key, bk))
    return float(per_pair * np.sum(rows * keys))


def flash_attention_seconds(batch_heads: int, s_q: int, s_k: int, head_dim_qk: int,
                            head_dim_v: int, causal: bool, gpu: GPU, *, backward: bool = False,
                            fp8: bool = False, offset: int = 0, kernel: str = "flash") -> float:
    """Seconds of FlashAttention's forward (or backward: 2.5 × the FLOPs) over ``batch_heads``
    (batch × heads) of ``s_q`` queries and ``s_k`` keys (module doc); ``kernel`` "flash" (the
    architecture's newest, :data:`FLASH_EFFICIENCY`) or "flash2" (:data:`FLASH2_EFFICIENCY`)."""
    flops = batch_heads * flash_attention_flops(s_q, s_k, head_dim_qk, head_dim_v, causal,
                                                offset=offset)
    if backward:
        flops *= 2.5
    table = FLASH2_EFFICIENCY if kernel == "flash2" else FLASH_EFFICIENCY
    fwd_eff, bwd_eff = table[gpu.architecture]
    if gpu.compute_profile:
        return flops / _profiled_attention_rate(gpu, s_q, bwd_eff / fwd_eff if backward else 1.0)
    blocks = batch_heads * int(-(-s_q // FLASH_BLOCK[0]))
    rate = gpu.peak(fp8) * (bwd_eff if backward else fwd_eff) * float(
        wave_utilisation(blocks, gpu.sm_count))
    return flops / rate


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
