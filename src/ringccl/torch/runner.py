"""Measure a ringccl collective against the backend's own on local processes (``ringccl run``).

Inputs are random integers in [-8, 8) stored in the requested dtype, so every reduction is exact
in float32/float64 (|sum| <= 8·N is far below 2^24) and ringccl's result must equal the
backend's element for element: ``wrong`` counts the elements that differ.

Timing follows nccl-tests: warm-up iterations first, then each iteration is timed on every rank
between a barrier and the collective's return; an iteration's time is the maximum over ranks,
and the reported time is the median over iterations.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

from ..collectives import get_collective
from ..metrics import algbw, busbw
from ..ops import parse_op
from . import all_gather_into_tensor, all_reduce, reduce_scatter_tensor

__all__ = ["measure"]

_TORCH_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "band": "BAND",
              "bor": "BOR", "bxor": "BXOR", "avg": "AVG"}


def _calls(collective: str, algorithm: str, op, world_size: int, count: int, dtype, rank: int):
    """(ringccl call, builtin call, fresh-input factory, output factory) for one collective."""
    gen = torch.Generator().manual_seed(1234 + rank)
    torch_op = getattr(dist.ReduceOp, _TORCH_OPS[op.value])
    if collective == "all_reduce":
        base = torch.randint(-8, 8, (count,), generator=gen).to(dtype)
        return (lambda x, out: all_reduce(x, op, algorithm=algorithm),
                lambda x, out: dist.all_reduce(x, torch_op), lambda: base.clone(), lambda: None,
                lambda x, out: x)
    if collective == "reduce_scatter":
        base = torch.randint(-8, 8, (count,), generator=gen).to(dtype)
        return (lambda x, out: reduce_scatter_tensor(out, x, op, algorithm=algorithm),
                lambda x, out: dist.reduce_scatter_tensor(out, x, torch_op),
                lambda: base.clone(), lambda: torch.empty(count // world_size, dtype=dtype),
                lambda x, out: out)
    base = torch.randint(-8, 8, (count,), generator=gen).to(dtype)
    return (lambda x, out: all_gather_into_tensor(out, x, algorithm=algorithm),
            lambda x, out: dist.all_gather_into_tensor(out, x),
            lambda: base.clone(), lambda: torch.empty(count * world_size, dtype=dtype),
            lambda x, out: out)


def _time(call, make_in, make_out, iters: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call(make_in(), make_out())
    times = []
    for _ in range(iters):
        x, out = make_in(), make_out()
        dist.barrier()
        t0 = time.perf_counter()
        call(x, out)
        times.append(time.perf_counter() - t0)
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # an iteration lasts until its slowest rank ends
    return t.tolist()


def measure(rank: int, world_size: int, collective: str, algorithm: str, count: int,
            dtype_name: str, op_name: str, iters: int, warmup: int) -> dict:
    """Worker body for :func:`ringccl.torch.launch.launch`: time and check one collective.

    ``count`` is the element count of one rank's input (all_reduce, all_gather) or of the whole
    N-block input (reduce_scatter, rounded down to a multiple of world_size).

    Returns (on every rank): a dict with times in seconds, bytes, bytes/s and ``wrong``.
    """
    spec = get_collective(collective)
    op = parse_op(op_name)
    dtype = getattr(torch, dtype_name)
    if collective == "reduce_scatter":
        count -= count % world_size
    ours, builtin, make_in, make_out, result = _calls(collective, algorithm, op, world_size,
                                                      count, dtype, rank)
    # correctness first: same inputs through both, compared element for element
    x1, o1, x2, o2 = make_in(), make_out(), make_in(), make_out()
    ours(x1, o1)
    builtin(x2, o2)
    a, b = result(x1, o1), result(x2, o2)
    wrong = torch.tensor([int((a != b).sum())], dtype=torch.int64)
    dist.all_reduce(wrong)
    t_ours = _time(ours, make_in, make_out, iters, warmup)
    t_builtin = _time(builtin, make_in, make_out, iters, warmup)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = (count * world_size if collective == "all_gather" else count) * itemsize
    row = {"collective": collective, "algorithm": algorithm, "world_size": world_size,
           "count": count, "dtype": dtype_name, "op": op.value, "size_bytes": nbytes,
           "wrong": int(wrong.item()), "iters": iters, "warmup": warmup}
    for name, times in (("ringccl", t_ours), ("builtin", t_builtin)):
        med = statistics.median(times)
        row[name] = {"time_s": med, "min_s": min(times), "p90_s": float(np.percentile(times, 90)),
                     "algbw": algbw(nbytes, med), "busbw": busbw(collective, nbytes, med,
                                                                 world_size)}
    row["busbw_ratio"] = row["ringccl"]["busbw"] / row["builtin"]["busbw"]
    row["bus_factor"] = spec.bus_factor(world_size)
    return row
