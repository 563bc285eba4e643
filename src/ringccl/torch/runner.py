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
from . import (all_gather_into_tensor, all_reduce, all_to_all_single, broadcast, gather, reduce,
               reduce_scatter_tensor, scatter)

__all__ = ["measure"]

_TORCH_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "band": "BAND",
              "bor": "BOR", "bxor": "BXOR", "avg": "AVG"}


class _Calls:
    """One collective both ways: ``ours(x, out)``, ``builtin(x, out)``, fresh inputs and
    outputs, and ``result(x, out)``, the tensor to compare (empty where a rank has no output)."""

    def __init__(self, ours, builtin, make_in, make_out, result):
        self.ours, self.builtin = ours, builtin
        self.make_in, self.make_out, self.result = make_in, make_out, result


def _calls(collective: str, algorithm: str, op, world_size: int, count: int, dtype, rank: int,
           params: dict) -> _Calls:
    """Calls for ``collective``; ``params`` are the algorithm's (``root`` = src/dst when the
    collective is rooted)."""
    gen = torch.Generator().manual_seed(1234 + rank)
    torch_op = getattr(dist.ReduceOp, _TORCH_OPS[op.value])
    base = torch.randint(-8, 8, (count,), generator=gen).to(dtype)
    fresh = base.clone
    none = lambda: None  # noqa: E731
    empty = torch.empty(0, dtype=dtype)
    n = world_size
    params = dict(params)
    root = int(params.pop("root", 0)) if get_collective(collective).root_arg else 0
    kw = dict(algorithm=algorithm, **params)
    if collective == "all_reduce":
        return _Calls(lambda x, out: all_reduce(x, op, **kw),
                      lambda x, out: dist.all_reduce(x, torch_op), fresh, none,
                      lambda x, out: x)
    if collective == "broadcast":
        return _Calls(lambda x, out: broadcast(x, root, **kw),
                      lambda x, out: dist.broadcast(x, root), fresh, none, lambda x, out: x)
    if collective == "reduce":
        return _Calls(lambda x, out: reduce(x, root, op, **kw),
                      lambda x, out: dist.reduce(x, root, torch_op), fresh, none,
                      lambda x, out: x if rank == root else empty)  # non-roots: unspecified
    if collective == "reduce_scatter":
        return _Calls(lambda x, out: reduce_scatter_tensor(out, x, op, **kw),
                      lambda x, out: dist.reduce_scatter_tensor(out, x, torch_op), fresh,
                      lambda: torch.empty(count // n, dtype=dtype), lambda x, out: out)
    if collective == "all_gather":
        return _Calls(lambda x, out: all_gather_into_tensor(out, x, **kw),
                      lambda x, out: dist.all_gather_into_tensor(out, x), fresh,
                      lambda: torch.empty(count * n, dtype=dtype), lambda x, out: out)
    if collective == "scatter":  # count = the root's N blocks
        pieces = lambda x: list(x.view(n, count // n).unbind(0)) if rank == root else None  # noqa
        return _Calls(lambda x, out: scatter(out, pieces(x), root, **kw),
                      lambda x, out: dist.scatter(out, pieces(x), root), fresh,
                      lambda: torch.empty(count // n, dtype=dtype), lambda x, out: out)
    if collective == "gather":
        blocks = lambda: [torch.empty(count, dtype=dtype) for _ in range(n)] \
            if rank == root else None  # noqa: E731
        return _Calls(lambda x, out: gather(x, out, root, **kw),
                      lambda x, out: dist.gather(x, out, root), fresh, blocks,
                      lambda x, out: torch.cat(out) if out else empty)
    # all_to_all: count = this rank's N equal blocks
    return _Calls(lambda x, out: all_to_all_single(out, x, **kw),
                  lambda x, out: dist.all_to_all_single(out, x), fresh,
                  lambda: torch.empty(count, dtype=dtype), lambda x, out: out)


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
            dtype_name: str, op_name: str, iters: int, warmup: int,
            params: dict | None = None) -> dict:
    """Worker body for :func:`ringccl.torch.launch.launch`: time and check one collective.

    ``count`` is the element count of one rank's input (all_reduce, broadcast, reduce,
    all_gather, gather, all_to_all) or of the whole N-block input (reduce_scatter, scatter);
    reduce_scatter, scatter and all_to_all round it down to a multiple of world_size.
    ``params``: the algorithm's parameters; ``root`` is the src/dst of rooted collectives
    (default 0).

    Returns (on every rank): a dict with times in seconds, bytes, bytes/s and ``wrong``.
    """
    spec = get_collective(collective)
    op = parse_op(op_name)
    dtype = getattr(torch, dtype_name)
    params = dict(params or {})
    if collective in ("reduce_scatter", "scatter", "all_to_all"):
        count -= count % world_size
    calls = _calls(collective, algorithm, op, world_size, count, dtype, rank, params)
    # correctness first: same inputs through both, compared element for element
    x1, o1, x2, o2 = calls.make_in(), calls.make_out(), calls.make_in(), calls.make_out()
    calls.ours(x1, o1)
    calls.builtin(x2, o2)
    a, b = calls.result(x1, o1), calls.result(x2, o2)
    wrong = torch.tensor([int((a != b).sum())], dtype=torch.int64)
    dist.all_reduce(wrong)
    t_ours = _time(calls.ours, calls.make_in, calls.make_out, iters, warmup)
    t_builtin = _time(calls.builtin, calls.make_in, calls.make_out, iters, warmup)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = spec.buffer_count(world_size, count) * itemsize
    row = {"collective": collective, "algorithm": algorithm, "world_size": world_size,
           "count": count, "dtype": dtype_name, "op": op.value, "size_bytes": nbytes,
           "params": params, "wrong": int(wrong.item()), "iters": iters, "warmup": warmup}
    for name, times in (("ringccl", t_ours), ("builtin", t_builtin)):
        med = statistics.median(times)
        row[name] = {"time_s": med, "min_s": min(times), "p90_s": float(np.percentile(times, 90)),
                     "algbw": algbw(nbytes, med), "busbw": busbw(collective, nbytes, med,
                                                                 world_size)}
    row["busbw_ratio"] = row["ringccl"]["busbw"] / row["builtin"]["busbw"]
    row["bus_factor"] = spec.bus_factor(world_size)
    return row
