"""The simulator's entry point: :func:`simulate` (inputs checked, schedule built, storage
loaded, the kernel run, outputs unloaded and compared with the reference) and its result types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..algorithms import build_schedule
# re-exported: the registry's one default per collective (ringccl.sim.default_algorithm)
from ..algorithms.registry import default_algorithm
from ..collectives import check_root, get_collective, split_sizes
from ..errors import ArgumentError, ArgumentTypeError
from ..ir import Schedule
from ..ops import (ReduceOp, check_accumulate_dtype, check_dtype, check_op_dtype, identity,
                   parse_op, ufunc)
from .buffers import (_check_transfer_sizes, _divide, _in_place, _load, _rows, _shape,
                      _store_outputs, _unload)
from .kernel import _compile, _lazy_load, _run
from .reference import _check_outputs

__all__ = ["simulate", "SimResult", "SimStats", "default_algorithm", "resolve_root"]


@dataclass(frozen=True)
class SimStats:
    """Exact communication statistics of one simulated collective, counted from the schedule.

    Attributes:
        steps: number of steps (latency terms).
        bytes_sent: int64 (world_size,), bytes each rank sends.
        bytes_received: int64 (world_size,), bytes each rank receives.
    """

    steps: int
    bytes_sent: np.ndarray
    bytes_received: np.ndarray

    def as_dict(self) -> dict:
        return {"steps": self.steps, "bytes_sent": self.bytes_sent.tolist(),
                "bytes_received": self.bytes_received.tolist()}


@dataclass(frozen=True)
class SimResult:
    """What :func:`simulate` returns.

    Attributes:
        outputs: per-rank outputs with torch.distributed's shapes (see :func:`simulate`): an
            ndarray of shape (world_size, ...) when all ranks' outputs have the same length,
            else a tuple of 1-D arrays; gather: the root's (world_size·count,) array.
        stats: :class:`SimStats`.
        matches_reference: True if every output matches the numpy reference within
            :func:`reference_tolerance`; None if the call passed ``check=False``.
        mismatches: number of output elements outside the tolerance.
        max_abs_error: largest |output - reference| over finite elements (0.0 if exact).
        schedule: the schedule that ran.
    """

    outputs: Any
    stats: SimStats
    matches_reference: bool | None
    mismatches: int
    max_abs_error: float
    schedule: Schedule = field(repr=False)


def resolve_root(spec, params: dict, src=None, dst=None) -> dict:
    """``params`` with ``root`` set from torch's ``src``/``dst`` (default 0 for rooted
    collectives).

    Raises:
        ArgumentError: src/dst given to a collective that does not take it, or both root and
            src/dst given with different values.
    """
    params = dict(params)
    for name, value in (("src", src), ("dst", dst)):
        if value is None:
            continue
        if spec.root_arg != name:
            takes = f"takes {spec.root_arg}=" if spec.root_arg else "has no root"
            raise ArgumentError(f"{name}={value!r} does not apply to {spec.name}, which {takes}")
        if "root" in params and params["root"] != value:
            raise ArgumentError(f"{name}={value!r} and root={params['root']!r} disagree; give one")
        params["root"] = value
    if spec.root_arg:
        params.setdefault("root", 0)
    return params


def simulate(collective: str, inputs, op: Any = "sum", algorithm: str | None = None, *,
             schedule: Schedule | None = None, check: bool = True, out: np.ndarray | None = None,
             src: int | None = None, dst: int | None = None, input_split_sizes=None,
             output_split_sizes=None, accumulate_dtype=None, **params) -> SimResult:
    """Run ``algorithm`` for ``collective`` on N virtual ranks and compare with numpy.

    Args:
        collective: one of ``ringccl.collectives()`` (see ringccl.collectives for contracts).
        inputs: array-like of shape (world_size, count); row r is rank r's buffer. Any count >= 0.
            broadcast, scatter: only the root's row is read (scatter: its N blocks); gather,
            all_gather: row r is rank r's block; all_to_all: row r is rank r's N blocks. With
            split sizes, also a sequence of N 1-D arrays of different lengths.
            Dtypes: float16/32/64, int8/16/32/64, uint8, bool. Never modified.
        op: reduce op (str, ringccl.ReduceOp or torch.distributed.ReduceOp); used by all_reduce,
            reduce_scatter and reduce. avg needs floats, band/bor/bxor integers or bool.
        algorithm: registered algorithm name (``ringccl.algorithms(collective)``); default
            "ring", or the first registered one for collectives without a ring.
        schedule: run this schedule instead of building ``algorithm``'s.
        check: compare with the numpy reference (set False to time the executor alone).
        out: optional preallocated C-contiguous array of shape (world_size, L) and the inputs'
            dtype, L = the elements of one rank's working buffer (all_reduce and
            reduce_scatter: count; all_gather: world_size·count). When every chunk has the same
            size it *is* the simulator's storage, so repeated calls reuse memory; ``outputs``
            then views it. Otherwise it is not written (read ``outputs``), except in the
            in-place forms below, which always write it. It may share memory with ``inputs`` only
            in NCCL's in-place forms: ``out`` is ``inputs`` itself (all_reduce, broadcast,
            reduce, reduce_scatter, scatter), or row r of ``inputs`` is ``out[r, r·count:
            (r+1)·count]`` (all_gather, gather); then only each rank's output elements of
            ``out`` are written (an in-place reduce_scatter changes row r's block r alone) and
            ``outputs`` are arrays of their own.
        src: root of broadcast and scatter (torch.distributed's name); default 0.
        dst: root of reduce and gather; default 0.
        input_split_sizes, output_split_sizes: all_to_all only (all_to_all_single): (N, N)
            integer arrays, row r = rank r's splits; one may be None (then it is the other's
            transpose). Zero sizes are allowed.
        accumulate_dtype: reducing collectives on floating inputs only: None (reduce in the
            inputs' dtype), or a floating dtype at least as wide ("float32", np.float32,
            torch.float32). The working buffer is held in it (inputs cast in, every step reduces
            in it, outputs cast back to the inputs' dtype once), so each element is rounded to
            the inputs' dtype once instead of at each of the N − 1 additions; error bound in
            :func:`fp_error_bound`. ``stats`` then count the accumulate dtype's bytes (what
            the wire would carry) and ``out`` is not used as storage.
        **params: algorithm parameters passed to the builder (root, segments, ...).

    Returns:
        :class:`SimResult`. ``outputs`` with torch.distributed's shapes:

        * all_reduce (N, count); broadcast (N, count), every row the root's;
        * reduce (N, count): row dst is the reduction, the other rows are the ranks' inputs
          unchanged (ringccl.torch.reduce leaves non-root tensors unchanged too);
        * reduce_scatter (N, count/N), scatter (N, count/N): when count is not divisible by N,
          a tuple of the numpy.array_split blocks;
        * all_gather (N, N·count); gather (N·count,): the root's gathered buffer only;
        * all_to_all (N, count), block i of rank r = rank i's block r (count not divisible:
          array_split blocks, then a tuple); with split sizes always a tuple of per-rank arrays.

        Tolerances are stated in :func:`reference_tolerance`.

    Raises:
        ArgumentError: unknown collective/algorithm/op, bad shape, op not valid for the dtype,
            src/dst for a collective that does not take it, root out of range, bad split sizes,
            schedule for another collective or world size, a schedule whose transfers do not
            fit the chunk sizes (scratch-chunk all_to_all algorithms with uneven blocks).
            ``out`` sharing memory with ``inputs`` in any other form (both named).
        ArgumentTypeError: unsupported dtype.

    Numerics: integer sums and products wrap modulo 2^bits exactly as numpy's (an int8 sum over
    ranks equals ``x.sum(axis=0, dtype=np.int8)``); floats follow IEEE 754: NaN on any rank
    gives NaN on every rank receiving that element of the reduction, +inf + -inf = NaN, and
    min/max propagate NaN (numpy.minimum/maximum, torch.minimum/maximum).
    """
    spec = get_collective(collective)
    splits = input_split_sizes is not None or output_split_sizes is not None
    rows, dtype, reduce_op, acc = _checked_inputs(spec, collective, inputs, op,
                                                  accumulate_dtype, splits)
    params = resolve_root(spec, params, src, dst)
    schedule = _checked_schedule(spec, collective, algorithm, schedule, len(rows), params)
    return _simulate(spec, rows, schedule, dtype, reduce_op, acc, out, check, splits,
                     input_split_sizes, output_split_sizes)


def _checked_inputs(spec, collective: str, inputs, op, accumulate_dtype, splits: bool) -> tuple:
    """(rows, dtype, ReduceOp, accumulate dtype or None) of a :func:`simulate` call, checked."""
    if splits and spec.layout != "all_to_all":
        raise ArgumentError(f"input_split_sizes/output_split_sizes apply to all_to_all only, "
                            f"not {collective}")
    rows = _rows(spec, inputs, splits)
    n = len(rows)
    if n < 1:
        raise ArgumentError(f"inputs has world_size={n} rows; need at least 1")
    dtype = check_dtype(rows[0].dtype, "inputs.dtype")
    reduce_op = parse_op(op)
    if spec.reduces:
        check_op_dtype(reduce_op, dtype)
    else:   # no reduction: the op is unused (so is its identity, which band on floats lacks)
        reduce_op = ReduceOp.SUM
    acc = check_accumulate_dtype(accumulate_dtype, dtype, collective, spec.reduces)
    return rows, dtype, reduce_op, acc


def _checked_schedule(spec, collective: str, algorithm: str | None, schedule, n: int,
                      params: dict) -> Schedule:
    """The schedule a :func:`simulate` call runs: ``schedule`` checked against the call, or
    ``algorithm``'s (default :func:`default_algorithm`) built for ``n`` ranks."""
    if spec.root_arg:
        check_root(params["root"], n, spec.root_arg)
    if schedule is None:
        return build_schedule(collective, algorithm or default_algorithm(collective), n,
                              **params)
    if not isinstance(schedule, Schedule):
        raise ArgumentTypeError(f"schedule must be a ringccl Schedule, got {type(schedule).__name__}")
    if schedule.collective != collective or schedule.world_size != n:
        raise ArgumentError(f"schedule is for {schedule.collective} on world_size="
                            f"{schedule.world_size}, but the call is {collective} on {n} ranks")
    return schedule


class _Layout(NamedTuple):
    """How a call's rows map onto the schedule's chunks."""

    count: int | None     # elements per row (None: ragged rows)
    ins: Any              # all_to_all: input split sizes (N, N); else None
    sizes: np.ndarray     # (N, C) elements of each chunk
    m: int                # the largest chunk
    even: bool            # every chunk of m elements
    in_lists: Any         # spec.input_chunks
    out_lists: Any        # spec.output_chunks
    whole: bool           # the input fills every chunk in order


def _layout(spec, rows, schedule: Schedule, splits: bool, input_split_sizes,
            output_split_sizes) -> _Layout:
    """The chunk sizes and chunk lists of a call (split sizes and transfer sizes checked)."""
    n, c = len(rows), schedule.num_chunks
    ragged = not isinstance(rows, np.ndarray)
    count = None if ragged else rows.shape[1]
    ins = None
    if spec.layout == "all_to_all":
        ins, outs = split_sizes(n, count or 0, input_split_sizes, output_split_sizes,
                                row_counts=[len(r) for r in rows])
        sizes = spec.chunk_sizes(n, c, count or 0, schedule.params,
                                 *((ins, outs) if splits else (None, None)))
    else:
        sizes = spec.chunk_sizes(n, c, spec.buffer_count(n, count), schedule.params)
    _check_transfer_sizes(schedule, sizes)
    m = int(sizes.max(initial=0))
    even = bool((sizes == m).all())
    in_lists = spec.input_chunks(n, c, schedule.params)
    out_lists = spec.output_chunks(n, c, schedule.params)
    whole = (even and not ragged and isinstance(in_lists, np.ndarray)
             and in_lists.shape[1] == c and (in_lists.strides[0] == 0 or
                                             (in_lists == in_lists[0]).all())
             and (np.diff(in_lists[0]) == 1).all())  # the input fills every chunk in order
    return _Layout(count, ins, sizes, m, even, in_lists, out_lists, whole)


def _check_out(out, n: int, c: int, lay: _Layout, dtype: np.dtype) -> None:
    """Refuse an ``out`` that is not a C-contiguous ``dtype`` array of the working buffer's
    shape."""
    length = c * lay.m if lay.even else int(lay.sizes[0].sum())
    if (not isinstance(out, np.ndarray) or out.shape != (n, length) or out.dtype != dtype
            or not out.flags.c_contiguous):
        got = (f"shape {out.shape}, dtype {out.dtype}, "
               f"{'' if out.flags.c_contiguous else 'not '}C-contiguous"
               if isinstance(out, np.ndarray) else type(out).__name__)
        raise ArgumentError(f"out must be a C-contiguous {dtype.name} array of shape "
                            f"({n}, {length}), got {got}")


def _storage(rows, out, lay: _Layout, c: int, dtype, work_dtype, reduce_op,
             in_place: bool) -> tuple:
    """(storage (N, C, m), lazy): the simulator's working buffer, loaded unless ``lazy`` (the
    steps then read the inputs until first written: kernel, loading lazily)."""
    n, m, even, whole = len(rows), lay.m, lay.even, lay.whole
    # the inputs fill the buffer in its own layout: the steps read them until first written
    # instead of a full copy first (kernel: loading lazily); not onto memory they share
    lazy = bool(whole and m and work_dtype == dtype and rows.flags.c_contiguous
            and (out is None or not in_place))
    if out is not None and even and work_dtype == dtype and not in_place:
        storage = out.reshape(n, c, m)
        if whole and not lazy:
            np.copyto(out, rows)
        elif not whole:
            storage.fill(identity(reduce_op, dtype))
            _load(rows, storage, lay.sizes, lay.in_lists, even)
    elif lazy:
        storage = np.empty((n, c, m), dtype=dtype)
    elif whole:
        # the only full copy (in the accumulate dtype: the cast is the copy)
        # order="C": _run reduces in place through a (n·c, m) view of it
        storage = rows.reshape(n, c, m).astype(work_dtype, order="C", copy=True)
    else:
        storage = np.full((n, c, m), identity(reduce_op, work_dtype), dtype=work_dtype)
        _load(rows, storage, lay.sizes, lay.in_lists, even)
    return storage, lazy


def _simulate(spec, rows, schedule: Schedule, dtype, reduce_op, acc, out, check: bool,
              splits: bool, input_split_sizes, output_split_sizes) -> SimResult:
    """:func:`simulate` once its arguments are checked and its schedule chosen."""
    n, c = len(rows), schedule.num_chunks
    work_dtype = np.dtype(acc) if acc is not None else dtype
    root = spec.root(n, schedule.params)
    lay = _layout(spec, rows, schedule, splits, input_split_sizes, output_split_sizes)
    m, even, sizes = lay.m, lay.even, lay.sizes
    if out is not None:
        _check_out(out, n, c, lay, dtype)
    # in place (out shares memory with inputs as NCCL's in-place forms): the steps run on
    # storage of their own and only the outputs' elements of out are written
    in_place = out is not None and _in_place(spec, out, rows)
    storage, lazy = _storage(rows, out, lay, c, dtype, work_dtype, reduce_op, in_place)
    if m:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are intended, not warnings
            plan = _compile(schedule)
            _run(plan, storage.reshape(n * c, m), ufunc(reduce_op),
                 *((rows.reshape(n * c, m), _lazy_load(schedule, plan)) if lazy else ()))
    outputs = _shape(spec, _unload(storage, sizes, lay.out_lists, even),
                     rows if work_dtype == dtype else rows.astype(work_dtype), root, splits)
    if spec.reduces and reduce_op is ReduceOp.AVG:
        outputs = _divide(spec, outputs, n, root, work_dtype)
    if work_dtype != dtype:  # one rounding to the inputs' dtype
        outputs = (tuple(o.astype(dtype) for o in outputs) if isinstance(outputs, tuple)
                   else outputs.astype(dtype))
    total = spec.buffer_count(n, lay.count or 0)
    stats = SimStats(schedule.num_steps,
                     schedule.bytes_sent(total, work_dtype.itemsize, chunk_sizes=sizes),
                     schedule.bytes_received(total, work_dtype.itemsize, chunk_sizes=sizes))
    mismatches, max_err = (_check_outputs(spec, rows, outputs, reduce_op, root, lay.ins, acc)
                           if check else (0, 0.0))
    if in_place:   # after the reference read the inputs; any chunk sizes, any accumulate dtype
        _store_outputs(spec, out, outputs, lay.out_lists, sizes, root)
    return SimResult(outputs, stats, mismatches == 0 if check else None, mismatches, max_err,
                     schedule)
