"""Worker for tests/distributed/test_torch_numerics.py (module level, so spawned processes can
import it). Returns its results; the test compares them with numpy."""

import numpy as np
import torch

import ringccl.torch as rt

ALGORITHMS = ("ring", "tree", "recursive_doubling")
COUNT = 11


def special_inputs(world_size):
    """(world_size, COUNT) float32 with NaN, ±inf and an inf/-inf pair planted (needs N >= 2)."""
    x = np.arange(world_size * COUNT, dtype=np.float32).reshape(world_size, COUNT) / 7
    x[1, 0] = np.nan                          # one NaN
    x[0, 1] = np.inf                          # +inf only
    x[0, 2], x[world_size - 1, 2] = np.inf, -np.inf  # +inf + -inf
    x[:, 3] = np.nan                          # NaN everywhere
    x[world_size - 1, 4] = -np.inf            # -inf only
    x[0, 5], x[1, 5] = np.nan, np.inf         # NaN and inf
    return x


def float16_inputs(world_size, count=4095):
    """Multiples of 1/8 below 256: exact in float16 (11 bits), every float32 partial sum is
    exact, while float16 partial sums above 256 round (ulp 0.25)."""
    k = np.random.default_rng(16).integers(0, 2048, (world_size, count))
    return (k / 8).astype(np.float16)


def int8_inputs(world_size, count=64):
    x = np.random.default_rng(8).integers(-128, 128, (world_size, count), dtype=np.int8)
    x[:, 0] = 127
    return x


def numerics(rank, world_size):
    out = {}
    x = special_inputs(world_size)
    for algorithm in ALGORITHMS:
        for op in ("sum", "max", "min", "avg", "prod"):
            t = torch.from_numpy(x[rank].copy())
            rt.all_reduce(t, op=op, algorithm=algorithm)
            out[algorithm, op] = t.numpy()
        h = torch.from_numpy(float16_inputs(world_size)[rank].copy())
        plain, acc = h.clone(), h.clone()
        rt.all_reduce(plain, algorithm=algorithm)
        rt.all_reduce(acc, algorithm=algorithm, accumulate_dtype=torch.float32)
        out[algorithm, "f16"] = plain.numpy()
        out[algorithm, "f16acc"] = acc.numpy()
        i8 = torch.from_numpy(int8_inputs(world_size)[rank].copy())
        rt.all_reduce(i8, algorithm=algorithm)
        out[algorithm, "int8"] = i8.numpy()
    h = torch.from_numpy(float16_inputs(world_size)[rank].copy())
    rs = torch.empty(h.numel() // world_size, dtype=torch.float16)
    rt.reduce_scatter_tensor(rs, h, accumulate_dtype="float32")
    out["rs_f16acc"] = rs.numpy()
    red = h.clone()
    rt.reduce(red, dst=1, accumulate_dtype=np.float32)
    out["reduce_f16acc"] = red.numpy()
    try:
        rt.all_reduce(torch.ones(4, dtype=torch.int32), accumulate_dtype=torch.float64)
    except ValueError as exc:  # ArgumentError, raised before any data moves
        out["int_refused"] = str(exc)
    try:
        rt.all_reduce(torch.ones(4), accumulate_dtype=torch.float16)
    except ValueError as exc:
        out["narrow_refused"] = str(exc)
    return out
