"""The simulator: run any schedule on N virtual ranks in one process, on numpy buffers.

All ranks live in one array ``S`` of shape (world_size, num_chunks, m): rank r's chunk c is
``S[r, c, :size[r, c]]``, with the sizes from the collective's contract
(``Collective.chunk_sizes``: they may differ per rank, e.g. uneven all_to_all splits) and m the
largest. The padding of shorter chunks holds the reduce op's identity, so every chunk can be moved
as a full row of m elements. When every chunk has the same size there is no padding and ``S``
reshaped to (world_size, num_chunks·m) *is* the all-ranks working buffer, so for collectives
whose input fills the whole buffer the only full copy is the initial one (the caller's inputs are
never modified).

Each step runs vectorized over all its transfers at once. A step is compiled once per schedule
into a few strided slices of the flattened (world_size·num_chunks, m) buffer: transfers whose
source and destination slot indices both advance by constant strides form one slice, so a ring
step is 2-3 numpy operations on contiguous rows regardless of N. Steps with irregular patterns
fall back to one gather (``np.take``) and one scatter (in rounds when several reduces target one
slot, so they combine in canonical order). BSP semantics: if a step writes a slot that another of
its transfers reads, the sources are snapshotted before any write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..algorithms import build_schedule, registry
from ..collectives import check_root, get_collective, split_sizes
from ..errors import ArgumentError, ArgumentTypeError
from ..ir import Schedule, chunk_bounds, reduce_rounds
from ..ops import (FLOAT_FORMATS, ReduceOp, check_accumulate_dtype, check_dtype, check_op_dtype,
                  identity, parse_op, ufunc)

__all__ = ["simulate", "SimResult", "SimStats", "reference_tolerance", "default_algorithm",
           "fp_error_bound", "unit_roundoff"]

_MAX_PIECES = 8  # beyond this many strided runs a step uses one gather/scatter instead
_BATCH_BYTES = 4 << 20  # largest temporary of a gather/scatter step (see _scatter)


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
            # several reduces into one slot: applied in rounds, in canonical order (ir.py)
            rounds = (reduce_rounds(d, red) if np.unique(d[red]).size < int(red.sum())
                      else None)
            # BSP: only sources this step also writes need a snapshot (one row per slot)
            protect = np.intersect1d(s, d)
            at = np.searchsorted(protect, s)
            snap = np.where((at < protect.size) & (protect[np.minimum(at, max(protect.size - 1,
                                                                                 0))] == s)
                            if protect.size else np.zeros(s.shape, bool), at, -1)
            plan.append(("fancy", s, d, red, rounds, protect, snap))
        else:
            plan.append(("slices", groups, hazard, int(hi - lo)))
    schedule._cache["sim_plan"] = plan
    return plan


def _view(flat: np.ndarray, start: int, stride: int, length: int) -> np.ndarray:
    return flat[start:start + stride * (length - 1) + 1:stride]


def _run(plan: list, flat: np.ndarray, combine: np.ufunc) -> None:
    """Execute compiled steps in place on ``flat`` (world_size·num_chunks, m)."""
    max_t = max(((p[3] if p[2] else 0) if p[0] == "slices" else p[5].shape[0] for p in plan),
                default=0)
    scratch = np.empty((max_t, flat.shape[1]), dtype=flat.dtype)
    for entry in plan:
        if entry[0] == "slices":
            # pieces run in ascending source slot, so several reduces into one slot combine in
            # canonical order
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
            _, s, d, red, rounds, protect, snap = entry
            saved = scratch[:protect.shape[0]]
            # mode="clip" (indices are valid) writes straight into `saved`: with the default
            # mode="raise" numpy buffers `out` in a full temporary
            np.take(flat, protect, axis=0, out=saved, mode="clip")
            src = (flat, saved, s, snap)
            if not red.all():
                _scatter(flat, d, src, np.nonzero(~red)[0], None)
            if rounds is not None:
                for sel in rounds:
                    _scatter(flat, d, src, sel, combine)
            elif red.any():
                _scatter(flat, d, src, np.nonzero(red)[0], combine)


def _scatter(flat: np.ndarray, d: np.ndarray, src: tuple, pos: np.ndarray,
             combine: np.ufunc | None) -> None:
    """``flat[d[pos]] = source rows`` (combine None) or ``combine(flat[d[pos]], source rows)``,
    for distinct ``d[pos]``, in batches of rows so that numpy's fancy-indexing temporaries stay
    within min(_BATCH_BYTES, 1/16 of the storage) each, whatever the step moves. Source rows are
    read from the step's snapshot where the step also writes them (``snap`` >= 0), else from
    ``flat`` directly. Peak memory: storage + snapshot (<= storage) + three batches."""
    flat_src, saved, s, snap = src
    row_bytes = max(1, flat.shape[1] * flat.itemsize)
    rows = max(1, min(_BATCH_BYTES, flat.nbytes // 16) // row_bytes)
    for a in range(0, pos.shape[0], rows):
        p = pos[a:a + rows]
        idx = d[p]
        k = snap[p]
        from_snap = k >= 0
        if from_snap.all():
            vals = saved[k]
        elif not from_snap.any():
            vals = flat_src[s[p]]
        else:
            vals = np.empty((p.shape[0], flat.shape[1]), dtype=flat.dtype)
            vals[from_snap] = saved[k[from_snap]]
            vals[~from_snap] = flat_src[s[p[~from_snap]]]
        if combine is None:
            flat[idx] = vals
        else:
            part = flat[idx]  # a copy of at most `rows` rows
            combine(part, vals, out=part)
            flat[idx] = part


# -- data in and out ------------------------------------------------------------------------------

def _uniform_rows(sizes: np.ndarray) -> bool:
    """True if every rank has the same chunk sizes."""
    return sizes.strides[0] == 0 or bool((sizes == sizes[:1]).all())


def _load(rows, storage: np.ndarray, sizes: np.ndarray, lists, even: bool) -> None:
    """Copy each rank's input into its input chunks (in order) of ``storage`` (N, C, m)."""
    n, c, m = storage.shape
    if even and isinstance(lists, np.ndarray) and isinstance(rows, np.ndarray):
        k = lists.shape[1]
        first = lists[0]
        if (lists.strides[0] == 0 or (lists == first).all()) and k and \
                (np.diff(first) == 1).all():  # one contiguous range, the same on every rank
            storage.reshape(n, c * m)[:, first[0] * m:(first[-1] + 1) * m] = rows
        elif k:
            storage[np.arange(n)[:, None], lists] = rows.reshape(n, k, m)
        return
    for r in range(n):  # setup, not a step: one vectorized copy per rank
        chunks = np.asarray(lists[r], dtype=np.int64)
        if chunks.size:
            storage.reshape(n, c * m)[r, _element_index(chunks, sizes[r, chunks], m)] = rows[r]


def _element_index(chunks: np.ndarray, lengths: np.ndarray, m: int) -> np.ndarray:
    """Offsets in a rank's (C·m) padded storage of the elements of ``chunks`` concatenated."""
    starts = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    return np.repeat(chunks * m - starts, lengths) + np.arange(total)


def _unload(storage: np.ndarray, sizes: np.ndarray, lists, even: bool) -> list:
    """Each rank's output: its output chunks concatenated (a view when possible)."""
    n, c, m = storage.shape
    if even and isinstance(lists, np.ndarray):
        k = lists.shape[1]
        first = lists[0]
        same = lists.strides[0] == 0 or bool((lists == first).all())
        if same and k and (np.diff(first) == 1).all():
            return storage.reshape(n, c * m)[:, first[0] * m:(first[-1] + 1) * m]
        return storage[np.arange(n)[:, None], lists].reshape(n, k * m)
    parts = []
    for r in range(n):
        chunks = np.asarray(lists[r], dtype=np.int64)
        parts.append(storage.reshape(n, c * m)[r, _element_index(chunks, sizes[r, chunks], m)])
    return parts


def _stack(parts):
    """An (N, L) array when every part has length L, else a tuple of 1-D arrays."""
    if isinstance(parts, np.ndarray):
        return parts
    lengths = {p.shape[0] for p in parts}
    if len(lengths) <= 1 and parts:
        return np.stack(parts)
    return tuple(np.ascontiguousarray(p) for p in parts)


# -- reference ------------------------------------------------------------------------------------

def unit_roundoff(dtype) -> float:
    """u = 2^-p for a floating dtype with p bits of precision: float16 2^-11, bfloat16 2^-8,
    float32 2^-24, float64 2^-53 (half of numpy.finfo(dtype).eps).

    Raises:
        ArgumentError: not a floating dtype.
    """
    return 2.0 ** -FLOAT_FORMATS[_float_name(dtype)][0]


def _float_name(dtype) -> str:
    name = str(dtype).replace("torch.", "") if str(dtype).startswith("torch.") else None
    if name is None:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = str(dtype)
    if name not in FLOAT_FORMATS:
        raise ArgumentError(f"dtype={dtype!r} is not a floating dtype; expected one of "
                            f"{', '.join(FLOAT_FORMATS)}")
    return name


def _gamma(k: int, u: float) -> float:
    """Higham's γ_k = k·u / (1 − k·u); inf when k·u >= 1 (the bound says nothing)."""
    return k * u / (1 - k * u) if k * u < 1 else float("inf")


def fp_error_bound(dtype, world_size: int, abs_sum, exact_sum=0.0,
                   accumulate_dtype=None) -> np.ndarray:
    """Worst-case error of a sum over ``world_size`` ranks by any of ringccl's algorithms.

    Every output element of a sum all_reduce/reduce/reduce_scatter is the sum of N = world_size
    contributions formed by N − 1 additions (a chain for ring and direct, a tree for tree and
    recursive doubling, in any order). For any such summation, Higham, "Accuracy and Stability
    of Numerical Algorithms", 2nd ed., section 4.2 (eq. 4.4 and the text after it) gives

        |ŝ − s| <= γ_{N−1} · Σ|x_i|,   γ_k = k·u / (1 − k·u),

    u the unit roundoff of the dtype the additions round to (:func:`unit_roundoff`). Additions
    with gradual underflow are exact when the result is subnormal, so no absolute term enters.

    With ``accumulate_dtype`` (wider, unit roundoff u_a) the additions round to it and the sum is
    rounded once more to ``dtype`` at the end (round to nearest: relative error <= u, or an
    absolute ½ of the smallest subnormal d_min when the result is subnormal), so

        |ŝ − s| <= γ^a_{N−1}·Σ|x_i| + u·(|s| + γ^a_{N−1}·Σ|x_i|) + d_min/2.

    Args:
        dtype: the inputs' (and outputs') floating dtype.
        world_size: N >= 1.
        abs_sum: Σ_i |x_i| per element (float64 array or scalar), the inputs exact.
        exact_sum: |s| = |Σ_i x_i| per element (only used with ``accumulate_dtype``).
        accumulate_dtype: None, or the dtype the additions round to.

    Returns:
        float64 array (the broadcast shape of ``abs_sum`` and ``exact_sum``): the bound, in the
        inputs' units; inf where (N − 1)·u >= 1 (float16 beyond 2049 ranks without
        accumulation). Overflow to inf is outside the bound's model (elements whose Σ|x_i|
        exceeds the largest finite value of a dtype that rounds).

    Example: 1024 float16 ranks: γ_1023 = 0.998 (the bound allows an error of about Σ|x_i|);
    accumulating in float32: γ_1023 = 6.1e-5, so ≈ 6.1e-5·Σ|x_i| + 2^-11·|s|.
    """
    n = int(world_size)
    if n < 1:
        raise ArgumentError(f"world_size={world_size!r} must be >= 1")
    abs_sum = np.asarray(abs_sum, dtype=np.float64)
    exact_sum = np.abs(np.asarray(exact_sum, dtype=np.float64))
    u = unit_roundoff(dtype)
    acc = check_accumulate_dtype(accumulate_dtype, dtype, "sum", True)
    if acc is None or unit_roundoff(acc) == u:
        return np.broadcast_to(_gamma(n - 1, u) * abs_sum, np.broadcast_shapes(
            abs_sum.shape, exact_sum.shape)).astype(np.float64)
    g = _gamma(n - 1, unit_roundoff(acc))
    p, e = FLOAT_FORMATS[_float_name(dtype)]
    tiny_half = 2.0 ** (2 - 2 ** (e - 1) - p)  # ½·smallest subnormal = ½·2^(emin − p + 1)
    return g * abs_sum + u * (exact_sum + g * abs_sum) + tiny_half


def reference_tolerance(op: ReduceOp, dtype: np.dtype, world_size: int,
                        accumulate_dtype=None) -> str:
    """The tolerance :func:`simulate` allows against the float64 reference, as text.

    * sum on floats: |out - ref| <= (N-1)·eps·Σ|x_i|, the bound for recursive summation in any
      order (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 4.2),
      with eps = numpy.finfo(dtype).eps (twice the unit roundoff, for margin);
    * avg on floats: the sum's bound / N, plus eps·|ref|;
    * prod on floats: (N-1)·eps·|ref| + N·tiny (gradual underflow);
    * min, max, bitwise ops, and every op on integers and bool: exact (integers wrap on overflow
      as numpy does). NaN matches NaN; ±inf must match exactly.
    Elements whose Σ|x_i| exceeds the dtype's largest finite value are not compared (partial sums
    may overflow to inf legitimately). Collectives that only copy (broadcast, scatter, gather,
    all_gather, all_to_all) must match exactly.

    With ``accumulate_dtype`` the sum's tolerance is :func:`fp_error_bound` (γ_{N−1} of the
    accumulate dtype, plus the final rounding to ``dtype``), plus N·2^-53·Σ|x| for the float64
    reference's own rounding; avg divides it by N and adds eps·|ref|.
    """
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT):
        return "exact"
    acc = check_accumulate_dtype(accumulate_dtype, dtype, "all_reduce", True)
    if acc is not None and op is not ReduceOp.PRODUCT:
        text = (f"fp_error_bound({dtype.name}, N={world_size}, accumulate_dtype={acc}) "
                "+ N·2^-53·Σ|x|")
        return text if op is ReduceOp.SUM else f"({text})/N + eps·|ref|"
    return {ReduceOp.SUM: f"(N-1)·eps·Σ|x| with N={world_size}, eps={np.finfo(dtype).eps:g}",
            ReduceOp.AVG: f"(N-1)·eps·Σ|x|/N + eps·|ref| with N={world_size}",
            ReduceOp.PRODUCT: f"(N-1)·eps·|ref| + N·tiny with N={world_size}"}[op]


def _reference_reduction(x: np.ndarray, op: ReduceOp, cols: slice, accumulate=None):
    """The reduction over ranks of ``x[:, cols]`` (``accumulate``: see reference_tolerance).

    Returns (exact expected in x's dtype or None, float64 expected or None, tolerance or None).
    """
    n = x.shape[0]
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
            abs_sum = np.abs(b64).sum(axis=0)
            if accumulate is None:
                tol = (n - 1) * eps * abs_sum
            else:
                tol = (fp_error_bound(x.dtype, n, abs_sum, ref, accumulate)
                       + n * 2.0 ** -53 * abs_sum)
            if op is ReduceOp.AVG:
                ref = ref / n
                tol = tol / n + eps * np.abs(ref)
        skip = np.abs(b64).sum(axis=0) > float(np.finfo(x.dtype).max)
    tol = np.where(skip, np.inf, tol)
    return None, ref, tol


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


def _reduced_ranges(name: str, n: int, count: int, root: int | None) -> list:
    """(rank, first column, end column) of the reduced vector each rank's output must equal."""
    if name == "all_reduce":
        return [(r, 0, count) for r in range(n)]
    if name == "reduce":
        return [(root, 0, count)]
    bounds = chunk_bounds(count, n)  # reduce_scatter: numpy.array_split blocks
    return [(r, int(bounds[r]), int(bounds[r + 1])) for r in range(n)]


def _copy_reference(name: str, rows, n: int, root: int | None, ins) -> list:
    """Expected output of every rank of a copy collective (numpy, independent of schedules)."""
    if name == "broadcast":
        return [rows[root]] * n
    if name == "scatter":
        return np.array_split(rows[root], n)
    if name in ("all_gather", "gather"):
        full = np.concatenate(list(rows)) if n else np.zeros(0)
        return [full] * (n if name == "all_gather" else 1)
    # all_to_all: rank r receives block r of every rank i, in rank order
    offsets = np.cumsum(ins, axis=1) - ins
    return [np.concatenate([rows[i][offsets[i, r]:offsets[i, r] + ins[i, r]] for i in range(n)])
            for r in range(n)]


def _check_outputs(spec, rows, outputs, op, root, ins, accumulate=None) -> tuple[int, float]:
    n = len(rows)
    mismatches, max_err = 0, 0.0

    def add(result):
        nonlocal mismatches, max_err
        mismatches += result[0]
        max_err = max(max_err, result[1])

    if not spec.reduces:
        expected = _copy_reference(spec.name, rows, n, root, ins)
        got = [outputs] if spec.name == "gather" else list(outputs)
        for out, exp in zip(got, expected):
            if out.shape != exp.shape:
                mismatches += max(out.size, exp.size)
                continue
            add(_compare(np.asarray(out)[None, :], exp, None, None))
        return mismatches, max_err
    x = rows
    count = x.shape[1]
    ranges = _reduced_ranges(spec.name, n, count, root)
    step = max(1, (1 << 22) // max(n, 1))  # columns per block: bounds the float64 temporaries
    whole = spec.name == "all_reduce" and isinstance(outputs, np.ndarray)
    for a in range(0, count, step):
        cols = slice(a, min(count, a + step))
        ref, ref64, tol = _reference_reduction(x, op, cols, accumulate)
        if whole:  # every rank outputs the whole reduced buffer
            add(_compare(outputs[:, cols], ref, ref64, tol))
            continue
        for r, o0, o1 in ranges:  # each listed rank outputs a slice of the reduced buffer
            a0, a1 = max(o0, cols.start), min(o1, cols.stop)
            if a1 <= a0:
                continue
            out = np.asarray(outputs[r][a0 - o0:a1 - o0])[None, :]
            sub = slice(a0 - cols.start, a1 - cols.start)
            add(_compare(out, None if ref is None else ref[sub],
                         None if ref64 is None else ref64[sub], None if tol is None else tol[sub]))
    if spec.name == "reduce":  # the other ranks keep their inputs
        for r in range(n):
            if r != root:
                add(_compare(np.asarray(outputs[r])[None, :], x[r], None, None))
    return mismatches, max_err


# -- the public entry point -----------------------------------------------------------------------

def default_algorithm(collective: str) -> str:
    """The default algorithm of ``collective``: one table for every caller,
    :data:`ringccl.algorithms.registry.DEFAULTS` (see its ``default_algorithm``)."""
    return registry.default_algorithm(collective)


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


def _row_shape(row):
    """``row``'s shape, or None when the row is itself ragged."""
    try:
        return np.shape(row)
    except ValueError:
        return None


def _ragged_error(inputs) -> ArgumentError:
    """The error for a sequence of rows that numpy cannot stack into (world_size, count)."""
    shapes = [_row_shape(r) for r in inputs]
    bad = next((i for i, shape in enumerate(shapes) if shape is None or shape != shapes[0]), 0)
    got = "is itself ragged" if shapes[bad] is None else f"has shape {shapes[bad]}"
    first = "" if bad == 0 else f"inputs[0] has shape {shapes[0]} but "
    return ArgumentError(
        f"inputs must have shape (world_size, count), one row of the same length per rank; "
        f"{first}inputs[{bad}] {got} (rows of different lengths need all_to_all with "
        "input_split_sizes/output_split_sizes)")


def _rows(spec, inputs, splits: bool):
    """The inputs as an (N, count) array, or (all_to_all with split sizes) a list of 1-D rows."""
    if splits and isinstance(inputs, (list, tuple)):
        rows = []
        for i, r in enumerate(inputs):
            try:
                rows.append(np.asarray(r))
            except ValueError:
                raise ArgumentError(f"inputs[{i}] is itself ragged; with split sizes inputs must "
                                    "be a sequence of 1-D arrays, one per rank") from None
            if rows[-1].ndim != 1:
                raise ArgumentError(f"inputs[{i}] has shape {rows[-1].shape}; with split sizes "
                                    "inputs must be a sequence of 1-D arrays, one per rank")
        dtypes = {r.dtype for r in rows}
        if len(dtypes) > 1:
            raise ArgumentTypeError(f"inputs rows have different dtypes: "
                                    f"{', '.join(sorted(d.name for d in dtypes))}")
        if len({r.shape[0] for r in rows}) == 1:
            return np.stack(rows)
        return rows
    try:
        x = np.asarray(inputs)
    except ValueError:
        # numpy refuses ragged rows from deep inside np.asarray: name the first odd row instead
        if not isinstance(inputs, (list, tuple)):
            raise
        raise _ragged_error(inputs) from None
    except TypeError as exc:  # e.g. a torch bfloat16 tensor: numpy has no such dtype
        dtype = getattr(inputs, "dtype", None)
        raise ArgumentTypeError(f"inputs ({type(inputs).__name__}, dtype {dtype}) cannot be "
                                f"read as a numpy array: {exc}; convert it first (bfloat16: "
                                "x.float())") from None
    if x.ndim != 2:
        raise ArgumentError(f"inputs must have shape (world_size, count), got shape {x.shape}")
    return x


def _check_transfer_sizes(schedule: Schedule, sizes: np.ndarray) -> None:
    """Every transfer must move a chunk into a slot of the same size."""
    uniform = _uniform_rows(sizes)
    moves = schedule._cache.get("moves")
    if moves is None:
        moves = schedule._cache["moves"] = np.nonzero(schedule.src_chunk != schedule.dst_chunk)[0]
    idx = moves if uniform else slice(None)
    a = sizes[schedule.src[idx], schedule.src_chunk[idx]]
    b = sizes[schedule.dst[idx], schedule.dst_chunk[idx]]
    if (a != b).any():
        i = int(np.argmax(a != b))
        t = schedule.transfer(int(moves[i]) if uniform else i)
        raise ArgumentError(
            f"{schedule.algorithm} {schedule.collective} moves R{t.src}'s chunk c{t.src_chunk} "
            f"({int(a[i])} elements) into R{t.dst}'s chunk c{t.dst_chunk} ({int(b[i])} elements) "
            f"at step {int(schedule.step_of(moves[i] if uniform else i))}; with these sizes "
            "it cannot run (uneven all_to_all splits need a schedule that moves every block "
            "straight to its own slot, such as direct)")


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
            then views it. Otherwise it is not used.
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
        ArgumentTypeError: unsupported dtype.

    Numerics: integer sums and products wrap modulo 2^bits exactly as numpy's (an int8 sum over
    ranks equals ``x.sum(axis=0, dtype=np.int8)``); floats follow IEEE 754: NaN on any rank
    gives NaN on every rank receiving that element of the reduction, +inf + -inf = NaN, and
    min/max propagate NaN (numpy.minimum/maximum, torch.minimum/maximum).
    """
    spec = get_collective(collective)
    splits = input_split_sizes is not None or output_split_sizes is not None
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
    acc = check_accumulate_dtype(accumulate_dtype, dtype, collective, spec.reduces)
    work_dtype = np.dtype(acc) if acc is not None else dtype
    params = resolve_root(spec, params, src, dst)
    if spec.root_arg:
        check_root(params["root"], n, spec.root_arg)
    if schedule is None:
        schedule = build_schedule(collective, algorithm or default_algorithm(collective), n,
                                  **params)
    elif not isinstance(schedule, Schedule):
        raise ArgumentTypeError(f"schedule must be a ringccl Schedule, got {type(schedule).__name__}")
    elif schedule.collective != collective or schedule.world_size != n:
        raise ArgumentError(f"schedule is for {schedule.collective} on world_size="
                            f"{schedule.world_size}, but the call is {collective} on {n} ranks")
    root = spec.root(n, schedule.params)
    c = schedule.num_chunks
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

    if out is not None:
        length = c * m if even else int(sizes[0].sum())
        if (not isinstance(out, np.ndarray) or out.shape != (n, length) or out.dtype != dtype
                or not out.flags.c_contiguous):
            got = (f"shape {out.shape}, dtype {out.dtype}, "
                   f"{'' if out.flags.c_contiguous else 'not '}C-contiguous"
                   if isinstance(out, np.ndarray) else type(out).__name__)
            raise ArgumentError(f"out must be a C-contiguous {dtype.name} array of shape "
                                f"({n}, {length}), got {got}")
    if out is not None and even and work_dtype == dtype:
        storage = out.reshape(n, c, m)
        if whole:
            np.copyto(out, rows)
        else:
            storage.fill(identity(reduce_op, dtype))
            _load(rows, storage, sizes, in_lists, even)
    elif whole:
        # the only full copy (in the accumulate dtype: the cast is the copy)
        # order="C": _run reduces in place through a (n·c, m) view of it
        storage = rows.reshape(n, c, m).astype(work_dtype, order="C", copy=True)
    else:
        storage = np.full((n, c, m), identity(reduce_op, work_dtype), dtype=work_dtype)
        _load(rows, storage, sizes, in_lists, even)
    if m:
        with np.errstate(all="ignore"):  # IEEE results (inf, NaN) are intended, not warnings
            _run(_compile(schedule), storage.reshape(n * c, m), ufunc(reduce_op))
    outputs = _shape(spec, _unload(storage, sizes, out_lists, even),
                     rows if work_dtype == dtype else rows.astype(work_dtype), root, splits)
    if spec.reduces and reduce_op is ReduceOp.AVG:
        outputs = _divide(spec, outputs, n, root, work_dtype)
    if work_dtype != dtype:  # one rounding to the inputs' dtype
        outputs = (tuple(o.astype(dtype) for o in outputs) if isinstance(outputs, tuple)
                   else outputs.astype(dtype))
    total = spec.buffer_count(n, count or 0)
    stats = SimStats(schedule.num_steps,
                     schedule.bytes_sent(total, work_dtype.itemsize, chunk_sizes=sizes),
                     schedule.bytes_received(total, work_dtype.itemsize, chunk_sizes=sizes))
    mismatches, max_err = (_check_outputs(spec, rows, outputs, reduce_op, root, ins, acc)
                           if check else (0, 0.0))
    return SimResult(outputs, stats, mismatches == 0 if check else None, mismatches, max_err,
                     schedule)


def _shape(spec, parts, rows, root, splits):
    """Per-rank output parts in torch.distributed's shapes (see :func:`simulate`)."""
    if spec.name == "gather":
        return np.ascontiguousarray(parts[root])
    if spec.name == "reduce":
        result = np.array(rows, copy=True)  # the other ranks keep their inputs
        result[root] = parts[root]
        return result
    if splits:
        return tuple(np.ascontiguousarray(p) for p in parts)
    return _stack(parts)


def _divide(spec, outputs, n, root, dtype):
    if spec.name == "reduce":
        np.true_divide(outputs[root], n, out=outputs[root])
        return outputs
    if isinstance(outputs, tuple):
        return tuple(np.true_divide(o, n, dtype=dtype) for o in outputs)
    np.true_divide(outputs, n, out=outputs)
    return outputs
