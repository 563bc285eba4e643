"""Numerical hygiene of the simulator: IEEE NaN/±inf propagation for every reducing
collective × algorithm, integer wrap-around as numpy's, and float16 sums accumulated in float32
within the error bound stated by ringccl.sim.fp_error_bound (Higham §4.2)."""

import numpy as np
import pytest

import ringccl
from ringccl.sim import fp_error_bound, unit_roundoff

REDUCING = [(c, a) for c in ("all_reduce", "reduce_scatter", "reduce")
            for a in ringccl.algorithms(c)]


def _receivers(collective, n, count, root):
    """(rank, first column, end column) of the reduced vector that each receiving rank holds."""
    if collective == "all_reduce":
        return [(r, 0, count) for r in range(n)]
    if collective == "reduce":
        return [(root, 0, count)]
    b = np.cumsum([0] + [len(p) for p in np.array_split(np.arange(count), n)])
    return [(r, int(b[r]), int(b[r + 1])) for r in range(n)]


def _specials(n, count, dtype, seed):
    """Finite inputs with NaN, +inf, -inf and +inf/-inf pairs planted in known columns."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, count)).astype(dtype)
    x[rng.integers(n), 0] = np.nan            # column 0: one NaN
    x[rng.integers(n), 1] = np.inf            # column 1: +inf only
    x[rng.integers(n), 2] = -np.inf           # column 2: -inf only
    if n >= 2:
        a, b = rng.choice(n, 2, replace=False)
        x[a, 3], x[b, 3] = np.inf, -np.inf    # column 3: +inf + -inf
    x[:, 4] = np.nan                          # column 4: NaN everywhere
    a, b = rng.permutation(n)[:2] if n >= 2 else (0, None)
    x[a, 5] = np.nan                          # column 5: NaN next to an inf
    if b is not None:
        x[b, 5] = np.inf
    return x


def _ieee(x, op):
    """The IEEE result per column, independent of order for the planted columns (float64)."""
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return {"sum": x64.sum(0), "avg": x64.sum(0) / x.shape[0], "prod": x64.prod(0),
                "max": np.maximum.reduce(x64, axis=0), "min": np.minimum.reduce(x64, axis=0)}[op]


@pytest.mark.parametrize("collective,algorithm", REDUCING)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_nan_and_inf_propagate_as_ieee(collective, algorithm, n):
    count = 13
    for dtype in ("float16", "float32", "float64"):
        for op in ("sum", "avg", "max", "min", "prod"):
            x = _specials(n, count, dtype, seed=n * 31 + len(op))
            root = n - 1
            kw = {"dst": root} if collective == "reduce" else {}
            r = ringccl.simulate(collective, x, op=op, algorithm=algorithm, **kw)
            assert r.matches_reference, (dtype, op)
            want = _ieee(x, op)
            for rank, a, b in _receivers(collective, n, count, root):
                got = np.asarray(r.outputs[rank], dtype=np.float64)
                if collective == "reduce_scatter":
                    got = np.concatenate([np.full(a, np.nan), got, np.full(count - b, np.nan)])
                for col in range(max(a, 0), min(b, 6)):
                    w, g = want[col], got[col]
                    assert (np.isnan(w) and np.isnan(g)) or w == g, (dtype, op, rank, col, g, w)
            if n >= 2 and op in ("sum", "avg"):
                # the planted NaN/inf/-inf pairs: NaN on every receiver
                assert np.isnan(want[[0, 3, 4, 5]]).all()
                assert want[1] == np.inf and want[2] == -np.inf
            if op in ("max", "min"):  # NaN propagates through max/min (numpy.maximum semantics)
                assert np.isnan(want[[0, 4, 5]]).all()


def test_max_min_propagate_nan_like_numpy_and_torch():
    x = np.array([[1.0, np.nan], [np.nan, 2.0], [3.0, -np.inf]], np.float32)
    for op, ref in (("max", np.maximum), ("min", np.minimum)):
        out = ringccl.simulate("all_reduce", x, op=op).outputs
        assert np.isnan(out).all()  # not numpy.fmax's 3.0 / 2.0
        assert np.isnan(ref.reduce(x, axis=0)).all()


@pytest.mark.parametrize("collective,algorithm", REDUCING)
def test_int8_sums_wrap_like_numpy(collective, algorithm):
    rng = np.random.default_rng(7)
    for n in (2, 3, 6, 9):
        x = rng.integers(-128, 128, size=(n, 40), dtype=np.int8)
        x[:, 0] = 127  # certain overflow in column 0
        wrapped = x.sum(axis=0, dtype=np.int8)  # numpy's modulo-256 sum
        assert wrapped[0] == np.int8((127 * n + 128) % 256 - 128)
        kw = {"dst": 0} if collective == "reduce" else {}
        r = ringccl.simulate(collective, x, op="sum", algorithm=algorithm, **kw)
        assert r.matches_reference
        for rank, a, b in _receivers(collective, n, 40, 0):
            got = r.outputs[rank]
            assert got.dtype == np.int8
            assert np.array_equal(got, wrapped[a:b]), (n, rank)
        prod = ringccl.simulate(collective, x, op="prod", algorithm=algorithm, **kw)
        wrapped_prod = x.prod(axis=0, dtype=np.int8)
        for rank, a, b in _receivers(collective, n, 40, 0):
            assert np.array_equal(prod.outputs[rank], wrapped_prod[a:b])


# -- float16 accumulated in float32 ---------------------------------------------------------------

def test_fp_error_bound_values():
    assert unit_roundoff("float16") == 2.0 ** -11 and unit_roundoff(np.float32) == 2.0 ** -24
    # γ_{N−1} for N = 1024, u = 2^-11: 1023u / (1 − 1023u)
    g = 1023 * 2.0 ** -11 / (1 - 1023 * 2.0 ** -11)
    assert fp_error_bound("float16", 1024, 1.0) == pytest.approx(g)
    ga = 1023 * 2.0 ** -24 / (1 - 1023 * 2.0 ** -24)
    want = ga * 10 + 2.0 ** -11 * (4 + ga * 10) + 2.0 ** -25
    assert fp_error_bound("float16", 1024, 10.0, 4.0, "float32") == pytest.approx(want)
    assert fp_error_bound("float16", 1, 5.0) == 0.0  # one rank: nothing is added
    assert np.isinf(fp_error_bound("float16", 4096, 1.0))  # (N−1)u >= 1: no bound


@pytest.mark.parametrize("algorithm", ["ring", "tree", "recursive_doubling"])
@pytest.mark.parametrize("values", ["uniform01", "mixed_signs"])
def test_float16_over_1024_ranks_with_float32_accumulation(algorithm, values):
    n, count = 1024, 256
    rng = np.random.default_rng(1024)
    x = (rng.random((n, count)) if values == "uniform01"
         else rng.uniform(-1, 1, (n, count))).astype(np.float16)
    x64 = x.astype(np.float64)
    exact, abs_sum = x64.sum(0), np.abs(x64).sum(0)

    plain = ringccl.simulate("all_reduce", x, algorithm=algorithm)
    acc = ringccl.simulate("all_reduce", x, algorithm=algorithm, accumulate_dtype="float32")
    assert acc.outputs.dtype == np.float16 and acc.matches_reference and plain.matches_reference
    assert all(o.tobytes() == acc.outputs[0].tobytes() for o in acc.outputs)
    err_plain = np.abs(plain.outputs[0].astype(np.float64) - exact)
    err_acc = np.abs(acc.outputs[0].astype(np.float64) - exact)
    bound_plain = fp_error_bound(np.float16, n, abs_sum)
    bound_acc = fp_error_bound(np.float16, n, abs_sum, exact, accumulate_dtype=np.float32)
    assert (err_plain <= bound_plain).all()
    assert (err_acc <= bound_acc).all()
    assert (bound_acc * 100 < bound_plain).all()
    # accumulating in float32, the float16 rounding at the end dominates: within ½ ulp of the
    # exact sum plus float32's γ_1023·Σ|x| (6.1e-5·Σ|x|)
    ulp = np.spacing(np.abs(exact).astype(np.float16)).astype(np.float64)
    assert (err_acc <= ulp / 2 + 1024 * 2.0 ** -24 * abs_sum).all()
    assert err_acc.max() <= err_plain.max()
    if algorithm == "ring":  # a chain of 1023 float16 additions loses far more
        assert err_acc.max() * 10 < err_plain.max()
    # the float32 run equals the float16 rounding of the same schedule run on float32 inputs
    f32 = ringccl.simulate("all_reduce", x.astype(np.float32), algorithm=algorithm, check=False)
    assert np.array_equal(acc.outputs, f32.outputs.astype(np.float16))
    assert acc.stats.bytes_sent.tolist() == [2 * b for b in plain.stats.bytes_sent.tolist()]


@pytest.mark.parametrize("collective", ["reduce_scatter", "reduce"])
def test_accumulate_dtype_for_the_other_reductions(collective):
    x = np.random.default_rng(3).random((64, 130)).astype(np.float16)
    kw = {"dst": 5} if collective == "reduce" else {}
    r = ringccl.simulate(collective, x, accumulate_dtype=np.float32, **kw)
    ref = ringccl.simulate(collective, x.astype(np.float32), check=False, **kw)
    assert r.matches_reference
    for a, b in zip(r.outputs, ref.outputs):
        assert a.dtype == np.float16 and np.array_equal(a, b.astype(np.float16))
    if collective == "reduce":  # other ranks keep their inputs exactly
        assert np.array_equal(np.delete(r.outputs, 5, axis=0), np.delete(x, 5, axis=0))


@pytest.mark.parametrize("kwargs,collective,dtype,match", [
    ({"accumulate_dtype": "float16"}, "all_reduce", "float32",
     r"accumulate_dtype=float16 is narrower than the input's float32; expected None or one of "
     r"float32, float64"),
    ({"accumulate_dtype": "int32"}, "all_reduce", "float16",
     r"accumulate_dtype='int32' is not a floating dtype; expected None or one of float16, "
     r"float32, float64"),
    ({"accumulate_dtype": "float32"}, "all_reduce", "int8",
     r"accumulate_dtype='float32' needs a floating input, got int8"),
    ({"accumulate_dtype": np.float64}, "all_gather", "float16",
     r"accumulate_dtype=<class 'numpy.float64'> applies to reducing collectives only"),
    ({"accumulate_dtype": "nonsense"}, "reduce", "float16", r"accumulate_dtype='nonsense' is not"),
])
def test_bad_accumulate_dtype_is_refused(kwargs, collective, dtype, match):
    with pytest.raises(ringccl.ArgumentError, match=match):
        ringccl.simulate(collective, np.ones((4, 8), dtype), **kwargs)
