"""``ringccl bench``: nccl-tests-style measurements of every algorithm against the backend's own.

This module is backend-neutral (numpy only). The backends (:mod:`ringccl.torch.runner` for
gloo/NCCL, :mod:`ringccl.mpi.runner` for MPI) implement :class:`Backend`; :func:`run_sweep`
drives them the same way:

* **sizes** ``-b``, ``-e``, ``-f`` as nccl-tests: min, min·f, min·f², … up to max bytes. A size is
  nccl-tests' "size": the collective's whole buffer M (``Collective.buffer_count``), rounded
  down to whole elements and, for blocked collectives, to a multiple of world_size; "count" is
  the element count nccl-tests prints (M, or M / world_size when ``Collective.size_is_buffer``).
* **inputs with a known exact result**: rank r's element e is ``T[(5e + 3r + 1) mod 13]`` for a
  small table T of integers chosen per reduce op (sums of at most a few dozen small integers,
  products of ±1 and 2), so every dtype reduces exactly, in any order, and the expected output
  is known without gathering the inputs. A misplaced chunk or a missing rank changes the values
  (13 is prime to every power-of-two chunk size), so ``#wrong`` (elements differing from the
  expected output, summed over ranks) catches it.
* **timing** as nccl-tests with per-iteration timing: ``warmup`` untimed iterations, then each
  of ``iters`` iterations timed on every rank between a barrier and the collective's return; an
  iteration lasts until its slowest rank ends (maximum over ranks); the row reports the median,
  minimum and 90th percentile over iterations. The input is restored before every iteration,
  outside the timed region. Unlike nccl-tests, the algorithms of one size take turns iteration
  by iteration, so load from elsewhere on a shared machine hits them alike.
* **placements** as nccl-tests: out-of-place (input and output buffers distinct) and in-place
  (output aliases input: the same buffer for all_reduce; output = block ``rank`` of the input for
  reduce_scatter; input = block ``rank`` of the output for all_gather). An API that only works in
  place (``dist.all_reduce``) runs out-of-place as "copy the input to the output, then in place".
* **algbw** = size / time, **busbw** = algbw × ``Collective.bus_factor(world_size)``, printed in
  GB/s = 1e9 bytes/s (nccl-tests doc/PERFORMANCE.md).

Each ringccl algorithm also runs once per extra ``segment_bytes`` value ("with and without
pipelining"). For reducing collectives a ``local-reduce`` calibration row times the backend's
own elementwise reduction of one chunk (M / world_size elements), the γ that ``ringccl fit``
cannot separate from β on a single collective.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Protocol, Sequence

import numpy as np

from ..algorithms import algorithms, get_algorithm
from ..args import check_rank
from ..collectives import get_collective
from ..errors import ArgumentError
from ..ops import (ReduceOp, check_accumulate_dtype, check_dtype, check_op_dtype, parse_op,
                  ufunc)

__all__ = ["BUILTIN", "PLACEMENTS", "LOCAL_REDUCE", "BenchSpec", "Case", "Backend", "Prepared",
           "Sweep", "parse_algorithms", "sweep_sizes", "buffer_elements", "nccl_count", "make_case",
           "run_sweep", "row_count", "summarize", "row_label", "best_placement",
           "format_nccl_tests", "format_csv", "plot_busbw", "NCCL_TYPE_NAMES"]

#: the ``--algorithm`` name of the backend's own collective (MPI_Allreduce, dist.all_reduce, …)
BUILTIN = "builtin"
PLACEMENTS = ("out-of-place", "in-place")
#: the kind of the calibration rows (the backend's elementwise reduction alone)
LOCAL_REDUCE = "local-reduce"

#: nccl-tests' type names (``ncclDataType_t`` spelled as the tests print them)
NCCL_TYPE_NAMES = {"float16": "half", "float32": "float", "float64": "double", "int8": "int8",
                   "uint8": "uint8", "int16": "int16", "int32": "int32", "int64": "int64",
                   "bool": "bool"}

_PERIOD = 13  # prime, so it never divides a power-of-two chunk size


@dataclass(frozen=True)
class BenchSpec:
    """What one ``ringccl bench`` run measures (JSON-serializable with ``asdict``).

    Attributes:
        collective: a name from ``ringccl.collectives()``.
        algorithms: registered algorithm names and/or ``"builtin"``, in report order.
        min_bytes, max_bytes, factor: the size sweep (nccl-tests ``-b``, ``-e``, ``-f``).
        iters, warmup: timed and untimed iterations per row (nccl-tests ``-n``, ``-w``).
        check: count wrong elements (nccl-tests ``-c``).
        dtype: numpy dtype name; op: reduce op name; root: root rank of rooted collectives.
        segment_bytes: pipelining settings for ringccl algorithms, one sweep each (None = the
            executor's automatic choice, 0 = never split).
        placements: a subset of :data:`PLACEMENTS`.
        backend: "gloo", "nccl" or "mpi" (for the report).
        calibrate: add a ``local-reduce`` row per size for reducing collectives.
        restore: ringccl.torch's all-or-nothing backup (``restore=``, default True); False
            measures what the backends' own collectives promise (contents undefined on failure).
        accumulate_dtype: ringccl algorithms of reducing collectives reduce in this wider
            floating dtype (``accumulate_dtype=`` of ringccl.torch and ringccl.mpi; what travels
            is then its bytes); size, algbw and busbw still count the buffer in ``dtype``, so
            the rows compare with the builtin's as a user sees them. None: reduce in ``dtype``.
    """

    collective: str
    algorithms: tuple[str, ...] = ("ring", BUILTIN)
    min_bytes: int = 4 << 10
    max_bytes: int = 64 << 20
    factor: int = 4
    iters: int = 20
    warmup: int = 5
    check: bool = True
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    segment_bytes: tuple[int | None, ...] = (None,)
    placements: tuple[str, ...] = PLACEMENTS
    backend: str = "gloo"
    calibrate: bool = True
    restore: bool = True
    accumulate_dtype: str | None = None

    def validate(self, world_size: int | None = None) -> "BenchSpec":
        """Raise ArgumentError/ArgumentTypeError for a bad field (before any process starts);
        returns the spec, with ``accumulate_dtype`` normalized to its name ("f4" -> "float32")."""
        spec = get_collective(self.collective)
        dtype = check_dtype(self.dtype)
        op = parse_op(self.op)
        if spec.reduces:
            check_op_dtype(op, dtype)
        parse_algorithms(self.collective, ",".join(self.algorithms))
        if self.min_bytes < 0 or self.max_bytes < self.min_bytes:
            raise ArgumentError(f"sizes must satisfy 0 <= min_bytes <= max_bytes, got "
                                f"min_bytes={self.min_bytes}, max_bytes={self.max_bytes}")
        if self.factor < 2:
            raise ArgumentError(f"factor={self.factor} must be >= 2")
        if self.iters < 1 or self.warmup < 0:
            raise ArgumentError(f"iters={self.iters} must be >= 1 and warmup={self.warmup} >= 0")
        bad = [p for p in self.placements if p not in PLACEMENTS]
        if bad or not self.placements:
            raise ArgumentError(f"placements={list(self.placements)} must be a non-empty subset "
                                f"of {list(PLACEMENTS)}")
        for s in self.segment_bytes:
            if s is not None and s < 0:
                raise ArgumentError(f"segment_bytes={s} must be >= 0 (0 = never split)")
        if world_size is not None and _is_rooted(spec):
            check_rank(self.root, world_size, "root")
        acc = check_accumulate_dtype(self.accumulate_dtype, dtype, self.collective, spec.reduces)
        if acc is not None and self.backend == "mpi" and self.collective == "reduce":
            raise ArgumentError(f"accumulate_dtype={acc} with backend 'mpi': ringccl.mpi "
                                "accumulates in all_reduce and reduce_scatter only, not reduce")
        return self if acc == self.accumulate_dtype else replace(self, accumulate_dtype=acc)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "BenchSpec":
        d = dict(d)
        for key in ("algorithms", "segment_bytes", "placements"):
            if key in d:
                d[key] = tuple(d[key])
        return BenchSpec(**d)


def _is_rooted(spec) -> bool:
    return bool(getattr(spec, "root_arg", None))


def parse_algorithms(collective: str, text: str) -> tuple[str, ...]:
    """``"ring,builtin"`` -> ("ring", "builtin"); ``"all"`` = every registered algorithm + builtin.

    Raises:
        ArgumentError: an unknown name (the message lists the registered ones).
    """
    names = [t.strip() for t in str(text).split(",") if t.strip()]
    if names == ["all"]:
        return tuple(algorithms(collective)) + (BUILTIN,)
    if not names:
        raise ArgumentError(f"algorithm={text!r} names no algorithm; expected a comma-separated "
                            f"list from {', '.join(algorithms(collective) + [BUILTIN])}")
    for name in names:
        if name != BUILTIN:
            get_algorithm(collective, name)  # unknown -> ArgumentError listing the valid names
    return tuple(dict.fromkeys(names))


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """nccl-tests' sizes: min, min·factor, … while <= max (min = 0 gives just 0)."""
    if min_bytes == 0:
        return [0]
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def buffer_elements(collective: str, size_bytes: int, itemsize: int, world_size: int) -> int:
    """M, the collective's buffer in elements, for nccl-tests' ``size`` in bytes (rounded down;
    to a multiple of world_size when the buffer is made of world_size blocks)."""
    m = size_bytes // itemsize
    if get_collective(collective).size_is_buffer:
        m -= m % world_size
    return m


def nccl_count(collective: str, m: int, world_size: int) -> int:
    """The count nccl-tests prints: M, or elements per rank block when size is the buffer."""
    return m // world_size if get_collective(collective).size_is_buffer else m


# -- inputs with a known result ------------------------------------------------------------------

def _table(op: ReduceOp, dtype: np.dtype) -> np.ndarray:
    """13 small values whose reductions over any number of ranks are exact in ``dtype``."""
    k = np.arange(_PERIOD)
    if dtype.kind == "b":
        conjunctive = op in (ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.BAND)
        return (k % 3 != 0) if conjunctive else (k % 3 == 0)
    if op is ReduceOp.PRODUCT:
        vals = np.array([1, 2, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1]) * (
            1 if dtype.kind == "u" else np.where(k % 4 == 1, -1, 1))
    elif op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR):
        vals = (k * 7 + 3) % 16
    elif dtype.kind == "u":
        vals = (k * 5) % 13
    else:
        vals = (k * 5) % 13 - 6
    return vals.astype(dtype)


def _tile(base: np.ndarray, start: int, length: int) -> np.ndarray:
    """Elements start … start+length-1 of the periodic sequence ``base[e mod period]``."""
    return np.resize(np.roll(base, -(start % _PERIOD)), length)


def _rank_base(table: np.ndarray, rank: int) -> np.ndarray:
    """Rank r's periodic pattern: element e is T[(5e + 3r + 1) mod 13]."""
    return table[(5 * np.arange(_PERIOD) + 3 * rank + 1) % _PERIOD]


@dataclass
class Case:
    """One rank's data for one size: what it puts in and what it must get out.

    Attributes:
        input: this rank's input (numpy, 1-D), or None when the rank contributes nothing.
        expected: what this rank's output must equal, or None when it has no output.
        m: the collective's buffer in elements; block: elements of one rank's block.
    """

    input: np.ndarray | None
    expected: np.ndarray | None
    m: int
    block: int


def make_case(collective: str, m: int, world_size: int, rank: int, root: int, op,
              dtype) -> Case:
    """Inputs and the exact expected output of ``collective`` on this rank (see module doc).

    Collectives follow torch.distributed: all_reduce, reduce_scatter (block ``rank`` of the
    reduction), all_gather, broadcast/scatter (from ``root``), reduce/gather (to ``root``),
    all_to_all (equal blocks). Non-reducing collectives ignore ``op``.

    Raises:
        ArgumentError: a collective this module has no case for.
    """
    dtype = np.dtype(dtype)
    op = parse_op(op)
    spec = get_collective(collective)
    n, block = world_size, (m // world_size if world_size else 0)
    table = _table(op if spec.reduces else ReduceOp.SUM, dtype)
    mine = _rank_base(table, rank)

    def reduced(start: int, length: int) -> np.ndarray:
        bases = np.stack([_rank_base(table, r) for r in range(n)])
        red = ufunc(op).reduce(bases, axis=0, dtype=dtype)
        if op is ReduceOp.AVG:
            red = np.divide(red, n, dtype=dtype)
        return _tile(red.astype(dtype), start, length)

    def gathered() -> np.ndarray:  # block b comes from rank b's pattern at the same offsets
        out = np.empty(m, dtype=dtype)
        for b in range(n):
            out[b * block:(b + 1) * block] = _tile(_rank_base(table, b), b * block, block)
        return out

    root_base = _rank_base(table, root)
    if collective == "all_reduce":
        return Case(_tile(mine, 0, m), reduced(0, m), m, block)
    if collective == "reduce_scatter":
        return Case(_tile(mine, 0, m), reduced(rank * block, block), m, block)
    if collective == "all_gather":
        return Case(_tile(mine, rank * block, block), gathered(), m, block)
    if collective == "broadcast":
        return Case(_tile(root_base, 0, m) if rank == root else np.zeros(m, dtype),
                    _tile(root_base, 0, m), m, block)
    if collective == "reduce":
        return Case(_tile(mine, 0, m), reduced(0, m) if rank == root else None, m, block)
    if collective == "scatter":
        return Case(_tile(root_base, 0, m) if rank == root else None,
                    _tile(root_base, rank * block, block), m, block)
    if collective == "gather":
        return Case(_tile(mine, rank * block, block), gathered() if rank == root else None, m,
                    block)
    if collective == "all_to_all":
        # output block i is rank i's input block destined to us (elements rank·block …)
        out = np.empty(m, dtype=dtype)
        for i in range(n):
            out[i * block:(i + 1) * block] = _tile(_rank_base(table, i), rank * block, block)
        return Case(_tile(mine, 0, m), out, m, block)
    raise ArgumentError(f"ringccl bench has no input/expected-output case for collective="
                        f"{collective!r} yet")


# -- the backend interface and the sweep ----------------------------------------------------------

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


def _wrong(result: np.ndarray | None, expected: np.ndarray | None) -> int:
    if expected is None:
        return 0
    if result is None or result.shape != expected.shape:
        return int(expected.size)
    if expected.dtype.kind == "f":
        return int(np.count_nonzero(~((result == expected) | (np.isnan(result)
                                                             & np.isnan(expected)))))
    return int(np.count_nonzero(result != expected))


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
        kind ("collective" or "local-reduce").
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
        base = {"collective": spec.collective, "backend": backend.name, "world_size": n,
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
                wrong = backend.sum_over_ranks(_wrong(prepared.result(), case.expected))
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
                           segment_bytes=seg, wrong=wrongs[i],
                           accumulate_dtype=None if algorithm == BUILTIN else spec.accumulate_dtype,
                           **stats)
                row["algbw"] = nbytes / t if t > 0 else math.inf
                row["busbw"] = row["algbw"] * coll.bus_factor(n)
            rows.append(row)
            if emit:
                emit(row)
    return rows


# -- output --------------------------------------------------------------------------------------

def row_label(row: dict) -> str:
    """Algorithm label: ``ring``, ``ring seg=1MiB``, ``ring acc=float32``, ``builtin``."""
    from ..units import format_size
    seg, acc = row.get("segment_bytes"), row.get("accumulate_dtype")
    label = row["algorithm"]
    if label != BUILTIN and seg is not None:
        label += f" seg={'off' if seg == 0 else format_size(seg, 0).replace(' ', '')}"
    return f"{label} acc={acc}" if acc else label


def _num(value: float, width: int) -> str:
    """nccl-tests' number style: 2 decimals while they fit in ``width``, then fewer, then
    scientific notation."""
    digits = len(str(int(value))) if value >= 1 else 0
    if digits < width - 2:
        return f"{value:{width}.2f}"
    if digits < width - 1:
        return f"{value:{width}.1f}"
    if digits < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def format_nccl_tests(rows: Sequence[dict], spec: BenchSpec, world_size: int) -> str:
    """The report in nccl-tests' text layout, one block per algorithm (segment setting).

    Reproduced: the ``#``-comment preamble line with the sweep parameters, the two header lines
    with the out-of-place and in-place groups, the units line, one data line per size
    (``size count type redop root`` then ``time algbw busbw #wrong`` per placement, nccl-tests'
    column widths and number formatting), and the footer (``# Out of bounds values`` and
    ``# Avg bus bandwidth``). Not reproduced: the device list (ringccl runs on CPUs) and the
    per-iteration columns. A placement that was not measured prints ``N/A`` fields; ``#wrong``
    prints ``N/A`` when checking is off, as nccl-tests does. Each block starts with a comment
    ``# ringccl algorithm: <label>`` so one file can hold several algorithms.
    """
    out = io.StringIO()
    p = lambda line="": out.write(line + "\n")  # noqa: E731
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("kind", "collective") == "collective":
            groups.setdefault(row_label(r), []).append(r)
    for label, group in groups.items():
        p(f"# ringccl bench {spec.collective}: backend {spec.backend}, world_size {world_size}")
        p(f"# nThread 1 nGpus 1 minBytes {spec.min_bytes} maxBytes {spec.max_bytes} "
          f"step: {spec.factor}(factor) warmup iters: {spec.warmup} iters: {spec.iters} "
          f"agg iters: 1 validation: {int(spec.check)} graph: 0")
        p(f"# ringccl algorithm: {label}")
        p("#")
        p(f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place"
          f"                       in-place          ")
        p(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  "
          f"{'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}  "
          f"{'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6} ")
        p(f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  "
          f"{'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}  "
          f"{'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6} ")
        by_size: dict[int, dict[str, dict]] = {}
        for r in group:
            by_size.setdefault(r["size"], {})[r["placement"]] = r
        errors, busbws = 0, []
        for size, placed in by_size.items():
            first = next(iter(placed.values()))
            line = (f"{size:>12}  {first['count']:>12}  {first['type']:>8}  "
                    f"{first['redop']:>6}  {first['root']:>6}")
            for placement in PLACEMENTS:
                r = placed.get(placement)
                if r is None:
                    line += f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
                    continue
                wrong = "N/A" if r["wrong"] is None else f"{r['wrong']:g}"
                line += (f"  {_num(r['time_s'] * 1e6, 7)}  {_num(r['algbw'] / 1e9, 6)}  "
                         f"{_num(r['busbw'] / 1e9, 6)}  {wrong:>6}")
                errors += r["wrong"] or 0
                busbws.append(r["busbw"] / 1e9)
            p(line)
        p(f"# {'Out of bounds values':<20} : {errors} {'FAILED' if errors else 'OK'}")
        p(f"# {'Avg bus bandwidth':<20} : {statistics.fmean(busbws) if busbws else 0:g} ")
        p("#")
    return out.getvalue()


CSV_FIELDS = ["collective", "backend", "world_size", "algorithm", "segment_bytes",
              "accumulate_dtype", "placement", "size", "count", "dtype", "type", "redop", "root",
              "time_s", "min_s", "p90_s", "algbw", "busbw", "wrong", "iters", "warmup", "kind"]


def format_csv(rows: Sequence[dict]) -> str:
    """One CSV line per row (SI units: bytes, seconds, bytes/s); per-iteration times omitted."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS})
    return out.getvalue()


def best_placement(rows: Sequence[dict]) -> list[dict]:
    """Per (algorithm label, size): the faster of the out-of-place and in-place rows."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if r.get("kind", "collective") != "collective":
            continue
        key = (row_label(r), r["world_size"], r["size"])
        if key not in best or r["time_s"] < best[key]["time_s"]:
            best[key] = r
    return list(best.values())


def plot_busbw(rows: Sequence[dict], path: str, title: str = "") -> None:
    """Write a PNG of busbw (GB/s) versus size per algorithm (best placement), matplotlib Agg."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    lines: dict[str, list[dict]] = {}
    for r in best_placement(rows):
        label = row_label(r) + (f", {r['world_size']} ranks"
                             if len({x["world_size"] for x in rows}) > 1 else "")
        lines.setdefault(label, []).append(r)
    for label, sel in lines.items():
        sel.sort(key=lambda r: r["size"])
        ax.plot([r["size"] for r in sel], [r["busbw"] / 1e9 for r in sel],
                "s--" if label.startswith(BUILTIN) else "o-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s = 1e9 B/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@dataclass
class Sweep:
    """A finished run: the spec, the world size and the rows (what ``--json`` prints)."""

    spec: BenchSpec
    world_size: int
    rows: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"spec": self.spec.to_dict(), "world_size": self.world_size, "rows": self.rows}
