"""The simulator: run any schedule on N virtual ranks in one process, on numpy buffers.

All ranks live in one array ``S`` of shape (world_size, num_chunks, m): rank r's chunk c is
``S[r, c, :len(c)]`` with m = ceil(L / num_chunks); the padding of shorter chunks holds the reduce
op's identity, so every chunk can be moved as a full row of m elements. When L divides evenly
there is no padding and ``S`` reshaped to (world_size, L) *is* the all-ranks buffer, so the only
full copy is the initial one (the caller's inputs are never modified).

Each step runs vectorized over all its transfers at once. A step is compiled once per schedule
into a few strided slices of the flattened (world_size·num_chunks, m) buffer: transfers whose
source and destination slot indices both advance by constant strides form one slice, so a ring
step is 2-3 numpy operations on contiguous rows regardless of N. Steps with irregular patterns
fall back to one gather (``np.take``) and one scatter. BSP semantics: if a step writes a slot that
another of its transfers reads, the sources are snapshotted before any write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .algorithms import build_schedule
from .collectives import get_collective
from .errors import ArgumentError, ArgumentTypeError
from .ir import Schedule, chunk_bounds
from .ops import ReduceOp, check_dtype, check_op_dtype, identity, parse_op, ufunc

__all__ = ["simulate", "SimResult", "SimStats", "reference_tolerance"]

_MAX_PIECES = 8  # beyond this many strided runs a step uses one gather/scatter instead


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
        outputs: per-rank outputs with torch.distributed's shapes: an ndarray of shape
            (world_size, ...) when all ranks' outputs have the same length, else a tuple of 1-D
            arrays (reduce_scatter with a count not divisible by world_size).
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


# -- compilation of steps into strided pieces ------------------------------------------------------

def _pieces(s: np.ndarray, d: np.ndarray, limit: int):
    """Greedy runs of transfers whose src and dst flat indices advance by constant strides.

    Returns a list of (s_start, s_stride, d_start, d_stride, length) or None if more than
    ``limit`` runs are needed.
    """
    order = np.argsort(s, kind="stable")
    s, d = s[order], d[order]
    n = s.shape[0]
    out = []
    i = 0
    ds, dd = np.diff(s), np.diff(d)
    while i < n:
        if len(out) >= limit:
            return None
        if i == n - 1 or ds[i] <= 0 or dd[i] <= 0:
            out.append((int(s[i]), 1, int(d[i]), 1, 1))
            i += 1
            continue
        a, b = ds[i], dd[i]
        rest = (ds[i:] != a) | (dd[i:] != b)
        j = i + (int(np.argmax(rest)) if rest.any() else n - 1 - i)  # last diff index in the run
        out.append((int(s[i]), int(a), int(d[i]), int(b), j - i + 1))
        i = j + 1
    return out


def _compile(schedule: Schedule) -> list:
    plan = schedule._cache.get("sim_plan")
    if plan is not None:
        return plan
    c = schedule.num_chunks
    plan = []
    for k in range(schedule.num_steps):
        lo, hi = schedule.step_ptr[k], schedule.step_ptr[k + 1]
        s = schedule.src[lo:hi].astype(np.int64) * c + schedule.src_chunk[lo:hi]
        d = schedule.dst[lo:hi].astype(np.int64) * c + schedule.dst_chunk[lo:hi]
        red = schedule.reduce[lo:hi]
        hazard = bool(np.intersect1d(s, d).size)
        groups = []
        for flag in (True, False):
            sel = red == flag
            if sel.any():
                p = _pieces(s[sel], d[sel], _MAX_PIECES)
                if p is None:
                    groups = None
                    break
                groups.extend((flag,) + piece for piece in p)
        if groups is None or len(groups) > _MAX_PIECES:
            plan.append(("fancy", s, d, red, hazard))
        else:
            plan.append(("slices", groups, hazard, int(hi - lo)))
    schedule._cache["sim_plan"] = plan
    return plan


def _view(flat: np.ndarray, start: int, stride: int, length: int) -> np.ndarray:
    return flat[start:start + stride * (length - 1) + 1:stride]


def _run(plan: list, flat: np.ndarray, combine: np.ufunc) -> None:
    """Execute compiled steps in place on ``flat`` (world_size·num_chunks, m)."""
    max_t = max((p[3] if p[0] == "slices" else p[1].shape[0] for p in plan), default=0)
    scratch = np.empty((max_t, flat.shape[1]), dtype=flat.dtype)
    for entry in plan:
        if entry[0] == "slices":
            _, groups, hazard, _t = entry
            sources = []
            at = 0
            for flag, s0, ss, d0, dd, n in groups:
                src = _view(flat, s0, ss, n)
                if hazard:  # BSP: snapshot what this step reads before anything is written
                    np.copyto(scratch[at:at + n], src)
                    src = scratch[at:at + n]
                    at += n
                sources.append(src)
            for (flag, s0, ss, d0, dd, n), src in zip(groups, sources):
                dst = _view(flat, d0, dd, n)
                if flag:
                    combine(dst, src, out=dst)
                else:
                    np.copyto(dst, src)
        else:
            _, s, d, red, _hazard = entry
            vals = scratch[:s.shape[0]]
            np.take(flat, s, axis=0, out=vals)  # a gather always snapshots
            if red.any():
                idx = d[red]
                flat[idx] = combine(flat[idx], vals[red])
            if not red.all():
                flat[d[~red]] = vals[~red]


# -- data in and out ------------------------------------------------------------------------------

def _load(x: np.ndarray, storage: np.ndarray, bounds: np.ndarray, lo: np.ndarray, hi: np.ndarray,
          even: bool) -> None:
    n = x.shape[0]
    if even:
        buf = storage.reshape(n, -1)
        if (lo == lo[0]).all() and (hi == hi[0]).all():
            buf[:, bounds[lo[0]]:bounds[hi[0]]] = x
        else:
            for r in range(n):  # setup, not a step: one contiguous copy per rank
                buf[r, bounds[lo[r]]:bounds[hi[r]]] = x[r]
        return
    for c in range(storage.shape[1]):
        rows = np.nonzero((lo <= c) & (c < hi))[0]
        length = int(bounds[c + 1] - bounds[c])
        if rows.size == 0 or length == 0:
            continue
        offsets = bounds[c] - bounds[lo[rows]]
        if (offsets == offsets[0]).all():
            storage[rows, c, :length] = x[rows, offsets[0]:offsets[0] + length]
        else:
            for r, off in zip(rows.tolist(), offsets.tolist()):
                storage[r, c, :length] = x[r, off:off + length]


def _unload(storage: np.ndarray, bounds: np.ndarray, lo: np.ndarray, hi: np.ndarray,
            even: bool):
    n = storage.shape[0]
    lengths = bounds[hi] - bounds[lo]
    if even:
        buf = storage.reshape(n, -1)
        if (lo == 0).all() and (hi == storage.shape[1]).all():
            return buf  # the working buffer is the output: no copy
        parts = [buf[r, bounds[lo[r]]:bounds[hi[r]]] for r in range(n)]
    else:
        parts = []
        for r in range(n):
            sizes = np.diff(bounds[lo[r]:hi[r] + 1])
            parts.append(np.concatenate([storage[r, c, :k] for c, k in
                                         zip(range(lo[r], hi[r]), sizes.tolist())])
                         if hi[r] > lo[r] else storage[r, :0, :0].reshape(0))
    if (lengths == lengths[0]).all():
        return np.stack(parts) if parts else np.zeros((0, 0), storage.dtype)
    return tuple(np.ascontiguousarray(p) for p in parts)


# -- reference ------------------------------------------------------------------------------------

def reference_tolerance(op: ReduceOp, dtype: np.dtype, world_size: int) -> str:
    """The tolerance :func:`simulate` allows against the float64 reference, as text.

    * sum on floats: |out - ref| <= (N-1)·eps·Σ|x_i|, the bound for recursive summation in any
      order (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2),
      with eps = numpy.finfo(dtype).eps (twice the unit roundoff, for margin);
    * avg on floats: the sum's bound / N, plus eps·|ref|;
    * prod on floats: (N-1)·eps·|ref| + N·tiny (gradual underflow);
    * min, max, bitwise ops, and every op on integers and bool: exact (integers wrap on overflow
      as numpy does). NaN matches NaN; ±inf must match exactly.
    Elements whose Σ|x_i| exceeds the dtype's largest finite value are not compared (partial sums
    may overflow to inf legitimately).
    """
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT):
        return "exact"
    return {ReduceOp.SUM: f"(N-1)·eps·Σ|x| with N={world_size}, eps={np.finfo(dtype).eps:g}",
            ReduceOp.AVG: f"(N-1)·eps·Σ|x|/N + eps·|ref| with N={world_size}",
            ReduceOp.PRODUCT: f"(N-1)·eps·|ref| + N·tiny with N={world_size}"}[op]


def _reference_buffer(x: np.ndarray, collective, bounds, lo, hi, op: ReduceOp, cols: slice):
    """Expected working-buffer contents (same for every rank) on column range ``cols``.

    Returns (expected in the output dtype, float64 expected or None, tolerance or None).
    """
    n = x.shape[0]
    if collective.reduces:
        block = x[:, cols]
        if x.dtype.kind != "f" or op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT):
            return ufunc(op).reduce(block, axis=0, dtype=x.dtype), None, None
        b64 = block.astype(np.float64)
        eps = float(np.finfo(x.dtype).eps)
        with np.errstate(all="ignore"):
            if op is ReduceOp.PRODUCT:
                ref = np.prod(b64, axis=0)
                tol = (n - 1) * eps * np.abs(ref) + n * float(np.finfo(x.dtype).tiny)
            else:
                ref = b64.sum(axis=0)
                tol = (n - 1) * eps * np.abs(b64).sum(axis=0)
                if op is ReduceOp.AVG:
                    ref = ref / n
                    tol = tol / n + eps * np.abs(ref)
            skip = np.abs(b64).sum(axis=0) > float(np.finfo(x.dtype).max)
        tol = np.where(skip, np.inf, tol)
        return None, ref, tol
    return None, None, None


def _compare(out_rows, ref, ref64, tol) -> tuple[int, float]:
    """Count elements of ``out_rows`` (k, len) outside tolerance; returns (mismatches, max err)."""
    if ref64 is None:
        if out_rows.dtype.kind == "f":
            same = (out_rows == ref) | (np.isnan(out_rows) & np.isnan(ref))
        else:
            same = out_rows == ref
        bad = int((~same).sum())
        err = 0.0
        if out_rows.dtype.kind == "f" and out_rows.size:
            with np.errstate(all="ignore"):
                diff = np.abs(out_rows.astype(np.float64) - np.asarray(ref, np.float64))
            finite = np.isfinite(diff)
            err = float(diff[finite].max()) if finite.any() else 0.0
        return bad, err
    out64 = out_rows.astype(np.float64)
    finite_ref = np.isfinite(ref64)
    with np.errstate(all="ignore"):
        diff = np.abs(out64 - ref64)
    ok = np.where(finite_ref, diff <= tol,
                  (out64 == ref64) | (np.isnan(out64) & np.isnan(ref64)))
    ok |= np.isinf(tol)
    d = diff[np.isfinite(diff)]
    return int((~ok).sum()), float(d.max()) if d.size else 0.0


def _check_outputs(x, outputs, collective, bounds, lo, hi, olo, ohi, op) -> tuple[int, float]:
    n, count = x.shape
    total = int(bounds[-1])
    step = max(1, (1 << 22) // max(n, 1))  # columns per block: bounds the float64 temporaries
    mismatches, max_err = 0, 0.0
    rows = outputs
    if collective.reduces:
        same_range = isinstance(outputs, np.ndarray) and outputs.shape[1:] == (count,)
        for a in range(0, count, step):
            cols = slice(a, min(count, a + step))
            ref, ref64, tol = _reference_buffer(x, collective, bounds, lo, hi, op, cols)
            if same_range:  # every rank outputs the whole reduced buffer (all_reduce)
                bad, err = _compare(outputs[:, cols], ref, ref64, tol)
                mismatches += bad
                max_err = max(max_err, err)
                continue
            for r in range(n):  # each rank outputs a slice of the reduced buffer
                o0, o1 = int(bounds[olo[r]]), int(bounds[ohi[r]])
                a0, a1 = max(o0, cols.start), min(o1, cols.stop)
                if a1 <= a0:
                    continue
                out = np.asarray(rows[r][a0 - o0:a1 - o0])[None, :]
                sub = slice(a0 - cols.start, a1 - cols.start)
                bad, err = _compare(out, None if ref is None else ref[sub],
                                    None if ref64 is None else ref64[sub],
                                    None if tol is None else tol[sub])
                mismatches += bad
                max_err = max(max_err, err)
        return mismatches, max_err
    # copy collectives: the working buffer is every rank's input at its input chunks
    expected = np.empty(total, dtype=x.dtype)
    for r in range(n):
        expected[bounds[lo[r]]:bounds[hi[r]]] = x[r, :bounds[hi[r]] - bounds[lo[r]]]
    for r in range(n):
        o0, o1 = int(bounds[olo[r]]), int(bounds[ohi[r]])
        bad, err = _compare(np.asarray(rows[r])[None, :], expected[o0:o1], None, None)
        mismatches += bad
        max_err = max(max_err, err)
    return mismatches, max_err


# -- the public entry point -----------------------------------------------------------------------

def simulate(collective: str, inputs, op: Any = "sum", algorithm: str = "ring", *,
             schedule: Schedule | None = None, check: bool = True, out: np.ndarray | None = None,
             **params) -> SimResult:
    """Run ``algorithm`` for ``collective`` on N virtual ranks and compare with numpy.

    Args:
        collective: "all_reduce", "reduce_scatter" or "all_gather" (see ringccl.collectives).
        inputs: array-like of shape (world_size, count); row r is rank r's buffer. Any count >= 0.
            Dtypes: float16/32/64, int8/16/32/64, uint8, bool. Never modified.
        op: reduce op (str, ringccl.ReduceOp or torch.distributed.ReduceOp); ignored by
            all_gather. avg needs floats, band/bor/bxor integers or bool.
        algorithm: registered algorithm name (``ringccl.algorithms(collective)``).
        schedule: run this schedule instead of building ``algorithm``'s.
        check: compare with the numpy reference (set False to time the executor alone).
        out: optional preallocated C-contiguous array of shape (world_size, L) and the inputs'
            dtype, L = the working buffer (all_reduce and reduce_scatter: count; all_gather:
            world_size·count). When L divides evenly into the schedule's chunks it *is* the
            simulator's storage, so repeated calls reuse memory instead of faulting in new pages;
            ``outputs`` then views it.
        **params: algorithm parameters (e.g. root) passed to the builder.

    Returns:
        :class:`SimResult`. ``outputs`` shapes: all_reduce (N, count); reduce_scatter (N, count/N)
        when divisible (else a tuple of numpy.array_split blocks); all_gather (N, N·count).
        Tolerances are stated in :func:`reference_tolerance`.

    Raises:
        ArgumentError: unknown collective/algorithm/op, bad shape, op not valid for the dtype,
            schedule for another collective or world size.
        ArgumentTypeError: unsupported dtype.
    """
    spec = get_collective(collective)
    x = np.asarray(inputs)
    if x.ndim != 2:
        raise ArgumentError(f"inputs must have shape (world_size, count), got shape {x.shape}")
    dtype = check_dtype(x.dtype, "inputs.dtype")
    reduce_op = parse_op(op)
    if spec.reduces:
        check_op_dtype(reduce_op, dtype)
    n, count = x.shape
    if n < 1:
        raise ArgumentError(f"inputs has world_size={n} rows; need at least 1")
    if schedule is None:
        schedule = build_schedule(collective, algorithm, n, **params)
    elif not isinstance(schedule, Schedule):
        raise ArgumentTypeError(f"schedule must be a ringccl Schedule, got {type(schedule).__name__}")
    elif schedule.collective != collective or schedule.world_size != n:
        raise ArgumentError(f"schedule is for {schedule.collective} on world_size="
                            f"{schedule.world_size}, but the call is {collective} on {n} ranks")
    c = schedule.num_chunks
    total = spec.buffer_count(n, count)
    bounds = chunk_bounds(total, c)
    m = -(-total // c)
    even = total % c == 0
    lo, hi = spec.input_chunks(n, c, schedule.params)
    olo, ohi = spec.output_chunks(n, c, schedule.params)

    if out is not None:
        if (not isinstance(out, np.ndarray) or out.shape != (n, total) or out.dtype != dtype
                or not out.flags.c_contiguous):
            raise ArgumentError(f"out must be a C-contiguous {dtype.name} array of shape "
                                f"({n}, {total}), got "
                                f"{getattr(out, 'shape', type(out).__name__)}")
    if out is not None and even:
        storage = out.reshape(n, c, m)
        if (lo == 0).all() and (hi == c).all():
            np.copyto(out, x)
        else:
            storage.fill(identity(reduce_op, dtype))
            _load(x, storage, bounds, lo, hi, even)
    elif even and (lo == 0).all() and (hi == c).all():
        storage = x.reshape(n, c, m).copy()  # the only full copy
    else:
        storage = np.full((n, c, m), identity(reduce_op, dtype), dtype=dtype)
        _load(x, storage, bounds, lo, hi, even)
    if m:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are intended, not warnings
            _run(_compile(schedule), storage.reshape(n * c, m), ufunc(reduce_op))
    outputs = _unload(storage, bounds, olo, ohi, even)
    if spec.reduces and reduce_op is ReduceOp.AVG:
        if isinstance(outputs, tuple):
            outputs = tuple(np.true_divide(o, n, dtype=dtype) for o in outputs)
        else:
            np.true_divide(outputs, n, out=outputs)
    stats = SimStats(schedule.num_steps, schedule.bytes_sent(total, dtype.itemsize),
                     schedule.bytes_received(total, dtype.itemsize))
    mismatches, max_err = (_check_outputs(x, outputs, spec, bounds, lo, hi, olo, ohi, reduce_op)
                           if check else (0, 0.0))
    return SimResult(outputs, stats, mismatches == 0 if check else None, mismatches, max_err,
                     schedule)
