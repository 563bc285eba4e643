"""Algorithm choice: fastest per size, crossovers, the predicted nccl-tests table; bucketing."""

import math

import numpy as np
import pytest

import ringccl
from ringccl import ArgumentError, buckets
from ringccl.costmodel.tuning import Range, predict_table
from ringccl.costmodel.topology import two_level

from .cost_helpers import recursive_doubling_time, registered, ring_only

ALPHA, BW = 5e-6, 50e9


@pytest.fixture(autouse=True)
def _registry_of_ring_only():
    """These tests expect ring (and the test rival) to be the only algorithms registered."""
    with ring_only():
        yield


def _ring_time(n, m):
    return 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * m / BW


def test_only_ring_wins_everywhere_when_alone():
    t = ringccl.tune("all_reduce", 1024, alpha="5us", bandwidth="50GB/s", algorithms=["ring"])
    assert t.ranges == (Range("ring", 4.0, 16 * 2**30),)
    assert t.crossovers == () and set(t.best) == {"ring"}


def test_crossover_is_where_the_two_times_meet():
    """Recursive doubling (log2 N steps, M per step) beats ring below
    M* = (2(N-1) - log2 N) alpha / (log2 N - 2(N-1)/N) beta, ring above."""
    n = 1024
    with registered() as rd:
        t = ringccl.tune("all_reduce", n, alpha=ALPHA, bandwidth=BW)
        assert t.algorithms == ("ring", rd)
        lg = math.log2(n)
        m_star = (2 * (n - 1) - lg) * ALPHA / ((lg - 2 * (n - 1) / n) / BW)
        (c,) = t.crossovers
        assert (c.below, c.above) == (rd, "ring")
        assert c.nbytes == pytest.approx(m_star, rel=1e-9)
        assert t.ranges[0] == (rd, 4.0, c.nbytes) and t.ranges[1][0] == "ring"
        assert t.best_at(m_star * 0.99) == rd and t.best_at(m_star * 1.01) == "ring"
        assert t.time_at(m_star, "ring") == pytest.approx(_ring_time(n, m_star))
        assert t.time_at(m_star, rd) == pytest.approx(
            recursive_doubling_time(n, m_star, ALPHA, 1 / BW, 0))
        # the grid's seconds are the predictors' values
        i = 10
        assert t.seconds[0, i] == pytest.approx(_ring_time(n, t.sizes[i]))


def test_tune_skips_algorithms_that_cannot_build_and_says_why():
    with registered() as rd:
        t = ringccl.tune("all_reduce", 12, alpha=ALPHA, bandwidth=BW)  # not a power of two
        assert t.algorithms == ("ring",)
        assert "power of two" in t.skipped[rd]


def test_tune_errors():
    with pytest.raises(ArgumentError, match="algorithm='nope' is not available"):
        ringccl.tune("all_reduce", 8, alpha=ALPHA, bandwidth=BW, algorithms=["nope"])
    with pytest.raises(ArgumentError, match="sizes must be"):
        ringccl.tune("all_reduce", 8, sizes=[0, 4], alpha=ALPHA, bandwidth=BW)
    with pytest.raises(ArgumentError, match="give a topology"):
        ringccl.tune("all_reduce", 8)
    with registered() as rd:
        with pytest.raises(ArgumentError, match="no algorithm of all_reduce can be costed"):
            ringccl.tune("all_reduce", 12, alpha=ALPHA, bandwidth=BW, algorithms=[rd])


def test_tune_on_a_two_level_machine():
    topo = two_level(4, 8, intra=("1us", "900GB/s"), inter=("5us", "50GB/s"))
    with registered() as rd:
        t = ringccl.tune("all_reduce", None, topology=topo)
        # recursive doubling's three cross-node exchanges carry the whole buffer through one NIC
        assert t.world_size == 32 and t.best[0] == rd and t.best[-1] == "ring"


def test_predict_table_has_nccl_tests_columns():
    rows, skipped = predict_table("all_reduce", 8, ["1MiB", 2**30], alpha=ALPHA,
                                       bandwidth=BW, dtype="float16")
    assert skipped == {}
    assert [r["size"] for r in rows] == [2**20, 2**30]
    r = rows[1]
    assert r["count"] == 2**29 and r["type"] == "float16" and r["algorithm"] == "ring"
    assert r["time_s"] == pytest.approx(_ring_time(8, 2**30))
    assert r["algbw"] == pytest.approx(2**30 / r["time_s"])
    assert r["busbw"] == pytest.approx(r["algbw"] * 2 * 7 / 8)
    assert r["max_link_bytes"]["port out"] == pytest.approx(2 * 7 / 8 * 2**30)
    assert r["best"] and 0 < r["latency_fraction"] < 0.01


def test_predict_table_shows_bytes_per_link_kind_on_two_level():
    topo = two_level(2, 4, intra=("1us", "900GB/s"), inter=("5us", "50GB/s"))
    rows, _ = predict_table("all_reduce", None, [2**20], topo)
    (r,) = rows
    assert set(r["max_link_bytes"]) == {"nvlink out", "nvlink in", "nic out", "nic in"}
    assert r["max_link_bytes"]["nic out"] == pytest.approx(2 * 7 / 8 * 2**20)


# -- bucketing ------------------------------------------------------------------------------------

def test_assign_buckets_follows_ddp():
    """Same assignment as torch's _compute_bucket_assignment_by_size for these float32 tensors
    (limits [1024, 2048] bytes): [[0, 1], [2, 3], [4, 5], [6, 7, 8]]."""
    sizes = [4 * n for n in [100, 300, 50, 600, 10, 2000, 5, 5, 5]]
    assert buckets.assign_buckets(sizes, 2048, first_bucket_bytes=1024) == [
        (0, 2), (2, 4), (4, 6), (6, 9)]
    assert buckets.assign_buckets(sizes, 0) == [(i, i + 1) for i in range(9)]
    assert buckets.assign_buckets(sizes, 10**9) == [(0, 9)]


def test_bucket_plan_without_overlap_is_a_sum_of_costs():
    sizes = [2**20, 3 * 2**20, 2**10, 5 * 2**20]
    kw = dict(alpha=ALPHA, bandwidth=BW)
    one_by_one = buckets.bucket_plan(sizes, 0, 64, **kw)
    fused = buckets.bucket_plan(sizes, "1GiB", 64, **kw)
    each = [ringccl.cost("all_reduce", "ring", 64, s, **kw).seconds for s in sizes]
    assert one_by_one.num_buckets == 4 and one_by_one.finish_seconds == pytest.approx(sum(each))
    assert fused.num_buckets == 1
    assert fused.comm_seconds == pytest.approx(_ring_time(64, sum(sizes)))
    # fusing saves three latencies of 2(N-1) alpha
    assert one_by_one.comm_seconds - fused.comm_seconds == pytest.approx(3 * 2 * 63 * ALPHA)
    assert fused.exposed_seconds == fused.finish_seconds  # no backward to hide behind


def test_bucket_timeline_overlaps_backward():
    sizes = [4 * 2**20] * 4  # four 4 MiB gradients, 10 ms of backward each
    plan = buckets.bucket_plan(sizes, 8 * 2**20, 8, alpha=ALPHA, bandwidth=BW,
                               backward_seconds=[0.01] * 4)
    comm = _ring_time(8, 8 * 2**20)
    b0, b1 = plan.buckets
    assert (b0.first, b0.last, b1.first, b1.last) == (0, 2, 2, 4)
    assert b0.ready_seconds == pytest.approx(0.02) and b0.start_seconds == b0.ready_seconds
    assert b1.start_seconds == pytest.approx(0.04)
    assert plan.finish_seconds == pytest.approx(0.04 + comm)
    assert plan.exposed_seconds == pytest.approx(comm)


def test_best_bucket_size_beats_both_extremes():
    """With backward to hide behind, the best capacity is neither one-by-one (latency per
    tensor) nor one bucket (nothing overlaps), and it is the brute-force minimum."""
    sizes = buckets.gpt2_gradient_sizes("gpt2")
    kw = dict(alpha=ALPHA, bandwidth=BW, backward_seconds=0.1)
    best, plans = buckets.best_bucket_size(sizes, 64, **kw)
    finish = {p.bucket_bytes: p.finish_seconds for p in plans}
    assert best.finish_seconds == min(finish.values())
    assert best.bucket_bytes not in (0, max(finish))
    assert best.finish_seconds < finish[0] and best.finish_seconds < finish[max(finish)]
    again = buckets.bucket_plan(sizes, best.bucket_bytes, 64, **kw)
    assert again.finish_seconds == best.finish_seconds


def test_gpt2_sizes():
    sizes = buckets.gpt2_gradient_sizes("gpt2", itemsize=1)
    assert sum(sizes) == 124_439_808 and len(sizes) == 2 + 12 * 12 + 2
    assert sizes[-1] == 50257 * 768  # wte's gradient is ready last
    with pytest.raises(ArgumentError, match="model='gpt5' is unknown"):
        buckets.gpt2_gradient_sizes("gpt5")


def test_bucket_errors():
    with pytest.raises(ArgumentError, match="tensor_sizes"):
        buckets.bucket_plan([], 10, 8, alpha=0, bandwidth=1)
    with pytest.raises(ArgumentError, match="backward_seconds"):
        buckets.bucket_plan([1, 2], 10, 8, alpha=0, bandwidth=1, backward_seconds=[1.0])
    with pytest.raises(ArgumentError, match="must be >= 0"):
        buckets.assign_buckets([1, 2], -1)


def test_ring_at_any_size_is_cheap_to_price():
    """The predictor walks once and prices a whole grid without walking again."""
    p = ringccl.predictor("all_reduce", "ring", 64, alpha=ALPHA, bandwidth=BW)
    grid = np.logspace(0, 10, 41)
    assert np.allclose(p(grid), [_ring_time(64, m) for m in grid], rtol=1e-12)
    assert p.method == "walk" and p(1e6) == pytest.approx(_ring_time(64, 1e6))


def test_tune_takes_one_name_as_one_algorithm_and_refuses_what_it_would_ignore():
    one = ringccl.tune("all_reduce", 8, alpha="5us", bandwidth="1GB/s", algorithms="ring")
    assert one.algorithms == ("ring",)     # not 'r', 'i', 'n', 'g'
    with pytest.raises(ringccl.ArgumentError, match="finite sizes > 0 bytes"):
        ringccl.tune("all_reduce", 8, sizes=[float("inf")], alpha="5us", bandwidth="1GB/s")
    with pytest.raises(ringccl.ArgumentError, match="algorithm='treee' is not available"):
        ringccl.tune("all_reduce", 8, alpha="5us", bandwidth="1GB/s",
                     params={"treee": {"segments": 0}})


def test_tune_result_and_predictors_pickle_and_copy():
    """A result is kept or sent to another process (multiprocessing) like any value: the
    registry entry it prices with is looked up again by name."""
    import copy
    import pickle

    for method in ("walk", "closed_form"):
        t = ringccl.tune("all_reduce", 8, alpha="5us", bandwidth="50GB/s", method=method,
                         algorithms=None if method == "walk" else ["ring"])
        for back in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t)):
            assert back.algorithms == t.algorithms and back.best == t.best
            np.testing.assert_array_equal(back.seconds, t.seconds)
            for a in t.algorithms:
                assert back.time_at(3e6, a) == t.time_at(3e6, a)
                assert back._predictors[a].algorithm is t._predictors[a].algorithm
