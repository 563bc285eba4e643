"""The simulator's float64 reference and its tolerances, and the floating-point error bound
of a sum over ranks (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., §4.2).

The reference is numpy's reduction over the ranks (axis 0), independent of any schedule; copy
collectives are compared exactly, floating sums within :func:`reference_tolerance`.
"""

from __future__ import annotations

import numpy as np

from ..chunking import chunk_bounds
from ..errors import ArgumentError
from ..ops import FLOAT_FORMATS, ReduceOp, check_accumulate_dtype, ufunc

__all__ = ["fp_error_bound", "reference_tolerance", "unit_roundoff"]


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


# Elements numpy casts per buffer in the float64 reference's reduce (its default is 8192): a
# float32 -> float64 reduce over ranks ran about 1.5x faster with 2^18 (measured on 64 x 1Mi
# and 256 x 256Ki float32, benchmarks/bench_sim.py); the buffer is 2 MiB.
_CAST_BUFSIZE = 1 << 18


class _Tolerance:
    """The tolerance of a floating sum, avg or product over ranks, per element of a block of
    columns (see :func:`reference_tolerance`), computed where needed.

    The sum's and avg's tolerance grows with Σ|x_i|, which costs one more pass over every
    rank's input; since Σ|x_i| >= max(|Σ x_i|, |x_0|, |x_{N-1}|), the tolerance evaluated there
    is a lower bound that needs only the reference and two ranks' inputs (|Σ x_i| alone is small
    wherever the sum cancels). :meth:`lower` gives it for every element; :meth:`exact` the
    tolerance itself, for the few elements the lower bound does not clear.
    """

    def __init__(self, block: np.ndarray, op: ReduceOp, total: np.ndarray, accumulate) -> None:
        self.block = block          # (N, w) inputs, in their dtype
        self.op = op
        self.total = total          # float64 (w,): Σ x_i (prod: Π x_i)
        self.accumulate = accumulate

    def __getitem__(self, sub: slice) -> "_Tolerance":
        return _Tolerance(self.block[:, sub], self.op, self.total[sub], self.accumulate)

    def _bound(self, abs_sum: np.ndarray, total: np.ndarray) -> np.ndarray:
        n, dtype = self.block.shape[0], self.block.dtype
        eps = float(np.finfo(dtype).eps)
        with np.errstate(all="ignore"):
            if self.op is ReduceOp.PRODUCT:
                return (n - 1) * eps * np.abs(total) + n * float(np.finfo(dtype).tiny)
            if self.accumulate is None:
                tol = (n - 1) * eps * abs_sum
            else:
                tol = (fp_error_bound(dtype, n, abs_sum, total, self.accumulate)
                       + n * 2.0 ** -53 * abs_sum)
            if self.op is ReduceOp.AVG:
                # the division by n rounds once more: a relative eps, or half the smallest
                # subnormal where the average is subnormal (round to nearest there is an
                # absolute error)
                tol = tol / n + eps * np.abs(total / n) + float(
                    np.finfo(dtype).smallest_subnormal) / 2
        return tol

    def lower(self) -> np.ndarray:
        """float64 (w,): at most the tolerance (Σ|x_i| replaced by a lower bound of it)."""
        if self.op is ReduceOp.PRODUCT:  # its tolerance does not depend on Σ|x_i|
            return self._bound(None, self.total)
        least = np.abs(self.total)
        for row in (self.block[0], self.block[-1]):
            np.maximum(least, np.abs(row), out=least)
        return self._bound(least, self.total)

    def exact(self, cols: np.ndarray) -> np.ndarray:
        """float64 (len(cols),): the tolerance of columns ``cols``; inf where Σ|x_i| exceeds the
        dtype's largest finite value (partial sums may overflow legitimately)."""
        block = self.block[:, cols]
        with np.errstate(all="ignore"):
            abs_sum = np.abs(block).sum(axis=0, dtype=np.float64)
        tol = self._bound(abs_sum, self.total[cols])
        return np.where(abs_sum > float(np.finfo(self.block.dtype).max), np.inf, tol)


def _reference_reduction(x: np.ndarray, op: ReduceOp, cols: slice, accumulate=None):
    """The reduction over ranks of ``x[:, cols]`` (``accumulate``: see reference_tolerance).

    Returns (exact expected in x's dtype or None, float64 expected or None, :class:`_Tolerance`
    or None). The float64 reference is one pass over the inputs, cast on the fly (no float64
    copy of the block).
    """
    n = x.shape[0]
    block = x[:, cols]
    if x.dtype.kind != "f" or op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT):
        return ufunc(op).reduce(block, axis=0, dtype=x.dtype), None, None
    reduce = np.multiply if op is ReduceOp.PRODUCT else np.add
    size = np.setbufsize(_CAST_BUFSIZE)
    try:
        with np.errstate(all="ignore"):
            total = reduce.reduce(block, axis=0, dtype=np.float64)
    finally:
        np.setbufsize(size)
    ref = total / n if op is ReduceOp.AVG else total
    return None, ref, _Tolerance(block, op, total, accumulate)


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
        same = (out64 == ref64) | (np.isnan(out64) & np.isnan(ref64))
        ok = np.where(finite_ref, diff <= tol.lower(), same)
    unsure = np.flatnonzero(~ok.all(axis=0))
    if unsure.size:  # the lower bound did not clear these columns: their exact tolerance
        exact = tol.exact(unsure)
        with np.errstate(invalid="ignore"):
            ok[:, unsure] = np.where(finite_ref[unsure], diff[:, unsure] <= exact,
                                     same[:, unsure]) | np.isinf(exact)
    finite = np.isfinite(diff)
    return int((~ok).sum()), float(diff[finite].max()) if finite.any() else 0.0


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
    if whole and n:
        # every rank outputs the whole reduced buffer: a rank whose output equals rank 0's
        # element for element has rank 0's mismatches and error, so only rank 0 and the ranks
        # that differ from it (NaN never equals: such ranks are compared too) meet the reference
        distinct = [r for r in range(1, n) if not np.array_equal(outputs[r], outputs[0])]
        alike = n - len(distinct)
    for a in range(0, count, step):
        cols = slice(a, min(count, a + step))
        ref, ref64, tol = _reference_reduction(x, op, cols, accumulate)
        if whole:
            bad, err = _compare(outputs[:1, cols], ref, ref64, tol)
            add((bad * alike, err))
            if distinct:
                add(_compare(outputs[distinct, cols], ref, ref64, tol))
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
