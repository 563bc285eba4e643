"""The sweep driver: :func:`run_sweep` measures every (size, algorithm, segment setting,
placement) of a :class:`~ringccl.bench.spec.BenchSpec` on a :class:`Backend`, the same way for
every backend (:mod:`ringccl.backends.torch.runner` for gloo/NCCL,
:mod:`ringccl.backends.mpi.runner` for MPI implement it; they supply only how a case is run).

* **timing** as nccl-tests with per-iteration timing: ``warmup`` untimed iterations, then each
  of ``iters`` iterations timed on every rank between a barrier and the collective's return; an
  iteration lasts until its slowest rank ends (maximum over ranks); the row reports the median,
  minimum and 90th percentile over iterations. The input is restored before every iteration,
  outside the timed region. Unlike nccl-tests, the algorithms of one size take turns iteration
  by iteration, so load from elsewhere on a shared machine hits them alike.
* **checking**: before timing, each call runs once on the inputs of
  :func:`~ringccl.bench.inputs.make_case`; ``wrong`` is
  :func:`~ringccl.bench.inputs.count_wrong` summed over ranks.
* **algbw** = size / time, **busbw** = algbw × ``Collective.bus_factor(world_size)``, printed in
  GB/s = 1e9 bytes/s (nccl-tests doc/PERFORMANCE.md).

Each ringccl algorithm also runs once per extra ``segment_bytes`` value ("with and without
pipelining"). For reducing collectives a ``local-reduce`` calibration row times the backend's
own elementwise reduction of one chunk (M / world_size elements), the γ that ``ringccl fit``
cannot separate from β on a single collective.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from ..collectives import get_collective
from ..ops import parse_op
from .inputs import Case, count_wrong, make_case
from .spec import (BUILTIN, LOCAL_REDUCE, NCCL_TYPE_NAMES, BenchSpec, _is_rooted,
                   buffer_elements, nccl_count, sweep_sizes)

__all__ = ["Prepared", "Backend", "run_sweep", "row_count", "summarize"]

@dataclass
class Prepared:
    """One measurable call: ``reset()`` restores the input (untimed), ``run()`` is timed,
    ``result()`` returns this rank's output as numpy (None when it has none)."""

    run: Callable[[], object]
    reset: Callable[[], object]
    result: Callable[[], np.ndarray | None]


class Backend(Protocol):
    """What :func:`run_sweep` needs from an executor's process group."""

    name: str
    rank: int
    world_size: int

    def barrier(self) -> None: ...

    def max_over_ranks(self, values: list[float]) -> list[float]: ...

    def sum_over_ranks(self, value: int) -> int: ...

    def prepare(self, collective: str, algorithm: str, placement: str, case: Case,
                spec: BenchSpec, segment_bytes: int | None) -> Prepared: ...

    def local_reduce(self, count: int, spec: BenchSpec) -> Prepared: ...


def summarize(times: Sequence[float]) -> dict:
    """Median, minimum and 90th percentile (linear interpolation) of per-iteration seconds."""
    t = sorted(times)
    return {"time_s": statistics.median(t), "min_s": t[0],
            "p90_s": float(np.percentile(t, 90)), "times_s": list(times)}


def _variants(spec: BenchSpec):
    for algorithm in spec.algorithms:
        for seg in ((None,) if algorithm == BUILTIN else spec.segment_bytes):
            for placement in spec.placements:
                yield algorithm, seg, placement


def row_count(spec: BenchSpec) -> int:
    """How many rows :func:`run_sweep` emits (for a progress bar)."""
    sizes = sweep_sizes(spec.min_bytes, spec.max_bytes, spec.factor)
    per_size = len(list(_variants(spec))) + _calibrates(spec)
    return len(sizes) * per_size


def _calibrates(spec: BenchSpec) -> bool:
    return spec.calibrate and get_collective(spec.collective).reduces


def _time(calls: Sequence[Prepared], backend: Backend, iters: int, warmup: int) -> list[list]:
    """Per-iteration seconds of each call, maximum over ranks.

    The calls take turns (iteration i of every call, then iteration i + 1), so a burst of load
    from elsewhere on a shared machine hits them all alike and their ratios stay meaningful.
    """
    for _ in range(warmup):
        for c in calls:
            c.reset()
            c.run()
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(iters):
        for c, t in zip(calls, times):
            c.reset()
            backend.barrier()
            t0 = time.perf_counter()
            c.run()
            t.append(time.perf_counter() - t0)
    flat = backend.max_over_ranks([x for t in times for x in t])  # an iteration lasts until
    return [flat[i * iters:(i + 1) * iters] for i in range(len(calls))]  # its slowest rank ends


def run_sweep(backend: Backend, spec: BenchSpec,
              emit: Callable[[dict], None] | None = None) -> list[dict]:
    """Measure every (size, algorithm, segment setting, placement) of ``spec`` on ``backend``.

    Every rank calls this with the same spec; all ranks return the same rows (times are
    maxima over ranks, ``wrong`` a sum over ranks); ``emit(row)`` is called as each row is
    done (a progress bar, a stream).

    Returns:
        a list of row dicts: collective, algorithm, backend, world_size, size (bytes), count,
        dtype, type (nccl-tests' name), redop, root, placement, segment_bytes, time_s, min_s,
        p90_s, times_s, algbw and busbw (bytes/s), wrong (None when not checked), iters, warmup,
        kind ("collective" or "local-reduce"), params (the root of rooted collectives, and
        ``spec.params`` on ringccl's rows).
    """
    coll = get_collective(spec.collective)
    dtype = np.dtype(spec.dtype)
    n = backend.world_size
    op = parse_op(spec.op)
    rows = []
    for size in sweep_sizes(spec.min_bytes, spec.max_bytes, spec.factor):
        m = buffer_elements(spec.collective, size, dtype.itemsize, n)
        nbytes = m * dtype.itemsize
        case = make_case(spec.collective, m, n, backend.rank, spec.root, op, dtype)
        # ``transport``: what ringccl's rows ran on (the backend's resolved transport="auto",
        # e.g. "shm" on one host); the builtin rows are the backend's own (None)
        base = {"collective": spec.collective, "backend": backend.name,
                "transport": getattr(backend, "transport", None), "world_size": n,
                "size": nbytes, "count": nccl_count(spec.collective, m, n), "dtype": dtype.name,
                "type": NCCL_TYPE_NAMES.get(dtype.name, dtype.name),
                "redop": op.value if coll.reduces else "none",
                "root": spec.root if _is_rooted(coll) else -1, "iters": spec.iters,
                "warmup": spec.warmup, "params": {"root": spec.root} if _is_rooted(coll) else {}}
        variants = list(_variants(spec))
        calls, wrongs = [], []
        for algorithm, seg, placement in variants:
            prepared = backend.prepare(spec.collective, algorithm, placement, case, spec, seg)
            wrong = None
            if spec.check:
                prepared.reset()
                prepared.run()
                wrong = backend.sum_over_ranks(count_wrong(prepared.result(), case.expected))
            calls.append(prepared)
            wrongs.append(wrong)
        chunk = m // n if n else m
        if _calibrates(spec):
            calls.append(backend.local_reduce(chunk, spec))
        for i, times in enumerate(_time(calls, backend, spec.iters, spec.warmup)):
            stats = summarize(times)
            if i == len(variants):  # the calibration row
                row = dict(base, kind=LOCAL_REDUCE, algorithm=LOCAL_REDUCE,
                           placement="in-place", segment_bytes=None, wrong=None,
                           reduced_bytes=chunk * dtype.itemsize, algbw=None, busbw=None, **stats)
            else:
                algorithm, seg, placement = variants[i]
                t = stats["time_s"]
                row = dict(base, kind="collective", algorithm=algorithm, placement=placement,
                           transport=None if algorithm == BUILTIN else base["transport"],
                           segment_bytes=seg, wrong=wrongs[i],
                           accumulate_dtype=None if algorithm == BUILTIN else spec.accumulate_dtype,
                           **stats)
                if algorithm != BUILTIN and spec.params:  # the builder's, as ringccl ran it
                    row["params"] = {**spec.params, **base["params"]}
                row["algbw"] = nbytes / t if t > 0 else math.inf
                row["busbw"] = row["algbw"] * coll.bus_factor(n)
            rows.append(row)
            if emit:
                emit(row)
    return rows


