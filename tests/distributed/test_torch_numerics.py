"""NaN/±inf, int8 wrap-around and float16 accumulation in float32 through ringccl.torch on 3
local gloo processes, against numpy."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ringccl.sim import fp_error_bound  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from . import numerics_workers as w  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]
N = 3


@pytest.fixture(scope="module")
def results():
    return launch(w.numerics, N, timeout=bounds.job(300))


def _same(got, want):
    return np.array_equal(got, want, equal_nan=True)


def test_nan_and_inf_propagate_on_every_rank(results):
    x = w.special_inputs(N).astype(np.float64)
    with np.errstate(all="ignore"):
        want = {"sum": x.sum(0), "avg": x.sum(0) / N, "prod": x.prod(0),
                "max": np.maximum.reduce(x, axis=0), "min": np.minimum.reduce(x, axis=0)}
    assert np.isnan(want["sum"][[0, 2, 3, 5]]).all() and want["sum"][1] == np.inf
    assert np.isnan(want["max"][[0, 3, 5]]).all()  # torch.maximum / numpy.maximum semantics
    for algorithm in w.ALGORITHMS:
        for op, ref in want.items():
            for rank in range(N):
                got = results[rank][algorithm, op].astype(np.float64)
                special = slice(0, 6)  # the planted columns: exact IEEE values
                assert _same(got[special], ref[special]), (algorithm, op, rank, got[special])
                assert np.allclose(got[6:], ref[6:], rtol=1e-6), (algorithm, op, rank)


def test_int8_sum_wraps_like_numpy(results):
    wrapped = w.int8_inputs(N).sum(axis=0, dtype=np.int8)
    for algorithm in w.ALGORITHMS:
        for rank in range(N):
            assert np.array_equal(results[rank][algorithm, "int8"], wrapped), algorithm


def test_float16_accumulated_in_float32(results):
    x = w.float16_inputs(N).astype(np.float64)
    exact, abs_sum = x.sum(0), np.abs(x).sum(0)
    for algorithm in w.ALGORITHMS:
        acc = results[0][algorithm, "f16acc"]
        assert acc.dtype == np.float16
        assert all(_same(results[r][algorithm, "f16acc"], acc) for r in range(N))
        err = np.abs(acc.astype(np.float64) - exact)
        assert (err <= fp_error_bound(np.float16, N, abs_sum, exact, np.float32)).all()
        plain = np.abs(results[0][algorithm, "f16"].astype(np.float64) - exact)
        assert (plain <= fp_error_bound(np.float16, N, abs_sum)).all()
        # multiples of 1/8: every float32 partial sum is exact, so the result is the exact sum
        # rounded once to float16; float16 additions round at each step and differ somewhere
        assert np.array_equal(acc, exact.astype(np.float16))
        assert not np.array_equal(results[0][algorithm, "f16"], acc)
    blocks = np.array_split(exact, N)
    for rank in range(N):
        got = results[rank]["rs_f16acc"].astype(np.float64)
        assert np.array_equal(got, blocks[rank].astype(np.float16).astype(np.float64))
    assert np.array_equal(results[1]["reduce_f16acc"], exact.astype(np.float16))
    assert np.array_equal(results[0]["reduce_f16acc"], w.float16_inputs(N)[0])  # unchanged


def test_bad_accumulate_dtype_is_refused_before_data_moves(results):
    for rank in range(N):
        assert "accumulate_dtype=torch.float64 needs a floating input, got int32" in \
            results[rank]["int_refused"]
        assert "accumulate_dtype=float16 is narrower than the input's float32" in \
            results[rank]["narrow_refused"]
