"""Time the compute a training step is made of on the local device (``ringccl calibrate``).

* GEMMs: ``torch.matmul`` of an (m, k) by a (k, n) tensor, 2·m·n·k FLOPs.
* Attention: ``torch.nn.functional.scaled_dot_product_attention`` of (batch, heads, seq,
  head_dim) tensors, 4·batch·heads·seq²·head_dim FLOPs, half of it when causal (the count
  FlashAttention-2 reports, Dao 2023, section 4.1).
* Memory bandwidth: a copy of one buffer into another, 2 × its bytes moved (read and write),
  as STREAM's Copy counts it (McCalpin, 1995).

Each measurement runs ``warmup`` untimed calls, then ``iters`` calls each timed alone (CUDA
events on a GPU, ``time.perf_counter`` on the CPU, the device synchronised around each) and
reports the median, minimum and 90th percentile (:func:`~ringccl.bench.sweep.summarize`).
torch is imported when a measurement runs. The profile built from these rows is
:mod:`ringccl.costmodel.compute_profile`'s.

Shapes of a transformer layer (:func:`layer_gemms`) follow Megatron-LM's tensor parallelism
(Shoeybi et al. 2019, section 3: the QKV and first MLP GEMMs split by columns, the attention
output and second MLP GEMMs by rows), forward and both backward GEMMs (input gradient
(m, k, n), weight gradient (n, k, m) for a forward (m, n, k)).
"""

from __future__ import annotations

import platform
import time
from typing import Callable, Sequence

from ..args import check_int
from ..errors import ArgumentError
from .sweep import summarize

__all__ = ["GemmShape", "AttentionShape", "layer_gemms", "layer_attention", "DEFAULT_SHAPES",
           "time_gemm", "time_attention", "copy_bandwidth", "resolve_device",
           "DTYPES", "measure"]

#: dtypes ``ringccl calibrate`` times (torch's names)
DTYPES = ("float32", "bfloat16", "float16")


class GemmShape(tuple):
    """(name, m, n, k): an (m, k) @ (k, n) product."""

    def __new__(cls, name: str, m: int, n: int, k: int):
        for value, what in ((m, "m"), (n, "n"), (k, "k")):
            check_int(value, f"{name} {what}", minimum=1)
        return super().__new__(cls, (name, int(m), int(n), int(k)))

    @property
    def flops(self) -> int:
        return 2 * self[1] * self[2] * self[3]


class AttentionShape(tuple):
    """(name, batch, heads, seq, head_dim, causal)."""

    def __new__(cls, name: str, batch: int, heads: int, seq: int, head_dim: int,
                causal: bool = True):
        for value, what in ((batch, "batch"), (heads, "heads"), (seq, "seq"),
                            (head_dim, "head_dim")):
            check_int(value, f"{name} {what}", minimum=1)
        return super().__new__(cls, (name, int(batch), int(heads), int(seq), int(head_dim),
                                     bool(causal)))

    @property
    def flops(self) -> float:
        _, b, h, s, d, causal = self
        return 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)


def layer_gemms(hidden_size: int, intermediate_size: int, num_attention_heads: int,
                seq_length: int, micro_batch_size: int = 1, tp: int = 1,
                num_key_value_heads: int | None = None, gated_mlp: bool = True,
                vocab_size: int | None = None, head_dim: int | None = None) -> list[GemmShape]:
    """The GEMMs of one transformer layer on one tensor-parallel rank (module doc), plus the
    output layer when ``vocab_size`` is given. Fields are Hugging Face config names;
    ``head_dim`` defaults to hidden_size / num_attention_heads (a model such as Gemma sets its
    own).

    Raises:
        ArgumentError: a size < 1, heads or sizes not divisible by ``tp``.
    """
    h = check_int(hidden_size, "hidden_size", minimum=1)
    heads = check_int(num_attention_heads, "num_attention_heads", minimum=1)
    kv = check_int(num_key_value_heads or heads, "num_key_value_heads", minimum=1)
    tp = check_int(tp, "tp", minimum=1)
    tokens = check_int(seq_length, "seq_length", minimum=1) * check_int(
        micro_batch_size, "micro_batch_size", minimum=1)
    ffn = check_int(intermediate_size, "intermediate_size", minimum=1) * (2 if gated_mlp else 1)
    for value, what in ((heads, "num_attention_heads"), (kv, "num_key_value_heads"),
                        (ffn, "intermediate_size")):
        if value % tp and not (what == "num_key_value_heads" and kv < tp):
            raise ArgumentError(f"{what}={value} is not divisible by tp={tp}")
    head_dim = h // heads if head_dim is None else check_int(head_dim, "head_dim", minimum=1)
    kv_local = max(1, kv // tp)
    forward = [("qkv", tokens, (heads // tp + 2 * kv_local) * head_dim, h),
               ("attention out", tokens, h, heads // tp * head_dim),
               ("mlp in", tokens, ffn // tp, h),
               ("mlp out", tokens, h, intermediate_size // tp)]
    if vocab_size:
        forward.append(("output", tokens, -(-check_int(vocab_size, "vocab_size", 1) // tp), h))
    out = []
    for name, m, n, k in forward:
        out += [GemmShape(f"{name} fwd", m, n, k), GemmShape(f"{name} dgrad", m, k, n),
                GemmShape(f"{name} wgrad", n, k, m)]
    return out


def layer_attention(hidden_size: int, num_attention_heads: int, seq_length: int,
                    micro_batch_size: int = 1, tp: int = 1,
                    head_dim: int | None = None) -> list[AttentionShape]:
    """The causal self-attention of one layer on one tensor-parallel rank (``head_dim`` as in
    :func:`layer_gemms`)."""
    heads = check_int(num_attention_heads, "num_attention_heads", minimum=1)
    tp = check_int(tp, "tp", minimum=1)
    if heads % tp:
        raise ArgumentError(f"num_attention_heads={heads} is not divisible by tp={tp}")
    d = (check_int(hidden_size, "hidden_size", 1) // heads if head_dim is None
         else check_int(head_dim, "head_dim", minimum=1))
    return [AttentionShape("self-attention", micro_batch_size, heads // tp, seq_length, d)]


#: the default sets per device: square GEMMs and causal attention at two lengths (the CPU's
#: smaller, so that a default run takes seconds there)
DEFAULT_SHAPES = {
    "cuda": (tuple(GemmShape(f"square {s}", s, s, s) for s in (256, 1024, 2048, 4096, 8192)),
             (AttentionShape("attention 2k", 1, 16, 2048, 128),
              AttentionShape("attention 8k", 1, 16, 8192, 128))),
    "cpu": (tuple(GemmShape(f"square {s}", s, s, s) for s in (64, 128, 256, 512)),
            (AttentionShape("attention 256", 1, 4, 256, 64),
             AttentionShape("attention 1k", 1, 4, 1024, 64))),
}


def resolve_device(device: str = "auto") -> str:
    """"cuda" or "cpu": ``auto`` is CUDA when torch sees a device.

    Raises:
        ArgumentError: torch not installed, an unknown device, cuda without a CUDA device.
    """
    try:
        import torch
    except ImportError:
        raise ArgumentError("calibration needs torch: pip install 'ringccl[torch]'") from None
    if device not in ("auto", "cpu", "cuda"):
        raise ArgumentError(f"device={device!r} is unknown; expected auto, cpu or cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ArgumentError("device='cuda' but torch sees no CUDA device; use --device cpu")
    return device


def _dtype(name: str):
    import torch
    if name not in DTYPES:
        raise ArgumentError(f"dtype={name!r} is not timed; expected one of {', '.join(DTYPES)}")
    return getattr(torch, name)


def _timed(fn: Callable[[], object], device: str, iters: int, warmup: int) -> dict:
    """Median/min/p90 seconds of ``fn`` (module doc)."""
    import torch
    iters = check_int(iters, "iters", minimum=1)
    for _ in range(check_int(warmup, "warmup", minimum=0)):
        fn()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return summarize(times)


def time_gemm(shape: GemmShape, dtype: str, device: str, iters: int = 10,
              warmup: int = 3) -> dict:
    """One GEMM timed: ``{"name", "m", "n", "k", "dtype", "flops", "time_s", "min_s",
    "p90_s"}`` (seconds)."""
    import torch
    name, m, n, k = shape
    a = torch.randn(m, k, device=device, dtype=_dtype(dtype))
    b = torch.randn(k, n, device=device, dtype=_dtype(dtype))
    t = _timed(lambda: torch.matmul(a, b), device, iters, warmup)
    return {"name": name, "m": m, "n": n, "k": k, "dtype": dtype, "flops": shape.flops,
            **{key: t[key] for key in ("time_s", "min_s", "p90_s")}}


def time_attention(shape: AttentionShape, dtype: str, device: str, iters: int = 10,
                   warmup: int = 3) -> dict:
    """One scaled_dot_product_attention timed (causal when the shape says so)."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention
    name, b, h, s, d, causal = shape
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=_dtype(dtype)) for _ in range(3))
    t = _timed(lambda: scaled_dot_product_attention(q, k, v, is_causal=causal), device, iters,
               warmup)
    return {"name": name, "batch": b, "heads": h, "seq": s, "head_dim": d, "causal": causal,
            "dtype": dtype, "flops": shape.flops,
            **{key: t[key] for key in ("time_s", "min_s", "p90_s")}}


def copy_bandwidth(nbytes: int, device: str, iters: int = 10, warmup: int = 3) -> dict:
    """Bytes/s of copying an ``nbytes`` buffer (2 × nbytes moved per copy)."""
    import torch
    nbytes = check_int(nbytes, "memory bytes", minimum=1024)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    # written before timing, whatever the warm-up: a target never touched would time its
    # first-touch page faults with the copy (a tenth of the bandwidth on a CPU)
    dst = torch.empty_like(src).fill_(0.0)
    t = _timed(lambda: dst.copy_(src), device, iters, warmup)
    moved = 2 * src.numel() * 4
    return {"bytes": src.numel() * 4, "moved": moved, "time_s": t["time_s"],
            "bandwidth": moved / t["time_s"]}


def measure(gemms: Sequence[GemmShape], attention: Sequence[AttentionShape],
            dtypes: Sequence[str], device: str = "auto", iters: int = 10, warmup: int = 3,
            memory_bytes: int = 256 << 20, on_step: Callable[[dict], None] | None = None,
            threads: int | None = None) -> dict:
    """Every GEMM and attention shape in every dtype, and the copy bandwidth.

    Args:
        threads: CPU threads torch uses (``torch.set_num_threads``; default: torch's own).
        on_step: called after each measurement with {"algorithm": a label, "size": bytes
            touched} (a progress bar).
    Returns:
        ``{"device": {"type", "name", "torch", "threads"}, "gemm": [...], "attention": [...],
        "memory": {...}, "iters", "warmup"}``.
    Raises:
        ArgumentError: as :func:`resolve_device`, an unknown dtype, no shape to time.
    """
    import torch
    device = resolve_device(device)
    for d in dtypes:
        _dtype(d)
    if threads is not None:
        torch.set_num_threads(check_int(threads, "threads", minimum=1))
    if not gemms and not attention:
        raise ArgumentError("no GEMM or attention shape to time")
    step = on_step or (lambda row: None)
    rows_g, rows_a = [], []
    for dtype in dtypes:
        size = torch.tensor([], dtype=_dtype(dtype)).element_size()
        for g in gemms:
            rows_g.append(time_gemm(g, dtype, device, iters, warmup))
            step({"algorithm": f"{g[0]} {dtype}", "size": size * (g[1] * g[3] + g[3] * g[2])})
        for a in attention:
            rows_a.append(time_attention(a, dtype, device, iters, warmup))
            step({"algorithm": f"{a[0]} {dtype}", "size": 3 * size * a[1] * a[2] * a[3] * a[4]})
    memory = copy_bandwidth(memory_bytes, device, iters, warmup)
    step({"algorithm": "copy", "size": memory["bytes"]})
    name = torch.cuda.get_device_name() if device == "cuda" else _cpu_name()
    return {"device": {"type": device, "name": name, "torch": torch.__version__,
                       "threads": torch.get_num_threads()},
            "gemm": rows_g, "attention": rows_a, "memory": memory, "iters": iters,
            "warmup": warmup}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
