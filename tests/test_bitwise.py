"""One result on every rank: the IR's reduction order in the simulator.

For every collective whose result every rank receives (all_reduce, all_gather, broadcast), every
registered algorithm and every dtype, every rank ends with the same bytes. The rule that makes
it so (:func:`ringccl.ir.reduce_order`): several reduces into one slot combine as the left fold
over the contributions in ascending rank, the slot's own value at its own rank's position, so
direct all_reduce computes x_0 ⊕ x_1 ⊕ … ⊕ x_{N-1} in the same order on every rank. The torch
and MPI executors are checked the same way in tests/distributed/test_bitwise_torch.py and
tests/mpi/test_bitwise_mpi.py, the engine's accumulator in tests/test_engine.py.

MIN and MAX on ties between -0.0 and +0.0 and on NaNs of different payloads also depend on the
operand order inside one ⊕ (tests/ties.py); the IR fixes that too (the lower ranks' side on the
left), so every rank of every reducing algorithm gets the same bits, and the direct algorithms
numpy's left fold in ascending rank.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringccl
from ringccl.algorithms import REGISTRY, build_schedule
from ringccl.ir import Schedule, reduce_order, reduce_rounds

from . import ties

EVERYONE = ("all_reduce", "all_gather", "broadcast")
PAIRS = sorted(key for key in REGISTRY if key[0] in EVERYONE)
DTYPES = ["float16", "float32", "float64", "int32", "int8"]


def _bits(a: np.ndarray) -> np.ndarray:
    """The bytes of ``a``'s elements as unsigned integers (NaN-proof, -0.0 != +0.0)."""
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind != "b" else a


def _inputs(rng, n: int, count: int, dtype: str) -> np.ndarray:
    """Values whose float sums round differently in different orders: normals spread over
    three decades (no zeros, no NaN); small integers for integer dtypes (no overflow)."""
    if np.dtype(dtype).kind == "f":
        scale = 10.0 ** rng.integers(-1, 2, size=(n, count))
        return (rng.standard_normal((n, count)) * scale).astype(dtype)
    return rng.integers(-3, 4, size=(n, count)).astype(dtype)


def _fold(x: np.ndarray, ufunc) -> np.ndarray:
    """The left fold over the rows in ascending rank, in x's dtype: ((x0 ⊕ x1) ⊕ x2) ⊕ …"""
    acc = x[0].copy()
    for row in x[1:]:
        ufunc(acc, row, out=acc)
    return acc


def test_the_issues_float16_example_gives_one_result():
    x = np.array([[1.], [1.], [4096.], [1.], [1.]], np.float16)
    out = ringccl.simulate("all_reduce", x, algorithm="direct").outputs
    # 1 + 1 = 2; 2 + 4096 = 4098, a tie between 4096 and 4100 (float16's spacing there is 4):
    # even 4096; + 1, + 1: 4096 each time. Before, R3 and R4 started from their own 1 and got
    # 1 + 1 + 1 + 4096 = 4099 -> 4100
    assert _bits(out).tolist() == _bits(np.full((5, 1), 4096, np.float16)).tolist()
    assert (_bits(out[:, 0]) == _bits(_fold(x, np.add))).all()


@st.composite
def _case(draw):
    collective, algorithm = draw(st.sampled_from(PAIRS))
    n = draw(st.integers(1, 12))
    # gloo's grid: 0, 1, fewer than N, not divisible by N, larger
    count = draw(st.sampled_from([0, 1, max(n - 1, 0), n + 1, 3 * n + 2, 37]))
    dtype = draw(st.sampled_from(DTYPES))
    op = "sum"
    if collective == "all_reduce" and np.dtype(dtype).kind == "i":
        op = draw(st.sampled_from(["sum", "max", "bxor"]))
    kw = {}
    if algorithm in ("tree", "double_binary_tree"):
        kw["segments"] = draw(st.integers(1, 3))
    elif algorithm == "hierarchical":
        kw["local_size"] = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
    elif algorithm == "master":
        kw["root"] = draw(st.integers(0, n - 1))
    if collective == "broadcast":
        kw["src"] = draw(st.integers(0, n - 1))
        if algorithm == "ring":
            kw["segments"] = draw(st.sampled_from([None, 1, 2]))
    return collective, algorithm, n, count, dtype, op, kw, draw(st.integers(0, 2 ** 32 - 1))


@settings(max_examples=400, deadline=None)
@given(case=_case())
def test_every_rank_receives_the_same_bits(case):
    collective, algorithm, n, count, dtype, op, kw, seed = case
    x = _inputs(np.random.default_rng(seed), n, count, dtype)
    result = ringccl.simulate(collective, x, op, algorithm=algorithm, **kw)
    assert result.matches_reference  # (c): still numpy's result within the tolerance
    bits = _bits(np.asarray(result.outputs))
    differ = np.flatnonzero((bits != bits[:1]).any(axis=1))
    assert differ.size == 0, f"ranks {differ.tolist()} differ from rank 0"


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 13])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_direct_algorithms_compute_the_left_fold_in_ascending_rank(n, dtype):
    # the rule itself, where it matters: every rank's slot gets N - 1 reduces in one step
    x = _inputs(np.random.default_rng(n), n, 257, dtype)
    want = _fold(x, np.add)
    out = ringccl.simulate("all_reduce", x, algorithm="direct").outputs
    assert (_bits(out) == _bits(want)).all()
    for dst in {0, n // 2, n - 1}:  # the root's own value at its own position
        got = ringccl.simulate("reduce", x, algorithm="direct", dst=dst).outputs[dst]
        assert (_bits(got) == _bits(want)).all()
    blocks = ringccl.simulate("reduce_scatter", np.tile(x, (1, n)), algorithm="direct").outputs
    for r in range(n):
        assert (_bits(np.asarray(blocks[r])) == _bits(want)).all()


def test_a_slot_with_three_sources_below_and_one_above():
    # R3 receives from R0, R1, R2 (below) and R4 (above) in one step:
    # ((x0 ⊕ x1) ⊕ x2) ⊕ x3 ⊕ x4, with x3 at R3's position
    s = Schedule.from_arrays("reduce", "custom", 5, 1, step=0, src=[0, 1, 2, 4], dst=3,
                             src_chunk=0, reduce=True, params={"root": 3})
    x = _inputs(np.random.default_rng(3), 5, 512, "float16")
    got = ringccl.simulate("reduce", x, schedule=s, dst=3).outputs[3]
    assert (_bits(got) == _bits(_fold(x, np.add))).all()
    # the old order (x3 first, then the others ascending) rounds differently for these inputs
    old = _fold(x[[3, 0, 1, 2, 4]], np.add)
    assert (_bits(old) != _bits(got)).any()


@pytest.mark.parametrize("pair", sorted(REGISTRY))
def test_reduce_order_is_reduce_rounds_without_accumulators(pair):
    # for every algorithm's steps: the same contributions as the checker's rounds, and where
    # no slot has two sources below its rank, the very same rounds (ring, trees: unchanged)
    for n in (3, 5, 8):
        s = build_schedule(*pair, n)
        for k in range(s.num_steps):
            lo, hi = s.step_ptr[k], s.step_ptr[k + 1]
            d = s.dst[lo:hi].astype(np.int64) * s.num_chunks + s.dst_chunk[lo:hi]
            order = reduce_order(d, s.src[lo:hi], s.dst[lo:hi], s.reduce[lo:hi])
            rounds = reduce_rounds(d, s.reduce[lo:hi])
            used = np.concatenate([order.starts] + [t for t, _ in order.folds] + order.rounds
                                  + [np.zeros(0, np.int64)])
            assert sorted(used.tolist()) == np.flatnonzero(s.reduce[lo:hi]).tolist()
            if not order.starts.size:
                assert [r.tolist() for r in order.rounds] == [r.tolist() for r in rounds]
            for t, a in order.folds:
                assert (np.diff(a) > 0).all()
                assert (s.src[lo:hi][t] < s.dst[lo:hi][t]).all()
            for r in order.rounds:
                assert np.unique(d[r]).size == r.size


# -- MIN/MAX on signed zeros and NaN payloads: the operand order ------------------------------


def _simulate(collective, algorithm, kw, x, op):
    with np.errstate(invalid="ignore"):
        return ringccl.simulate(collective, x, op, algorithm=algorithm, **kw)


def _check_min_max(collective, algorithm, kw, n, count, op, dtype, seed):
    """all_reduce: every rank the same bits; the direct algorithms (and every algorithm on two
    ranks, one ⊕ in all): numpy's left fold in ascending rank, bit for bit."""
    x = ties.inputs(np.random.default_rng(seed), n, count, dtype)
    out = _simulate(collective, algorithm, kw, x, op).outputs
    label = f"{collective} {algorithm} {kw} n={n} {op} {dtype}"
    if collective == "all_reduce":
        got = ties.bits(np.asarray(out))
        differ = np.flatnonzero((got != got[:1]).any(axis=1))
        assert differ.size == 0, f"{label}: ranks {differ.tolist()} differ from rank 0"
    if algorithm != "direct" and n > 2:
        return
    want = ties.bits(_fold(x, np.minimum if op == "min" else np.maximum))
    if collective == "all_reduce":
        assert (ties.bits(np.asarray(out)) == want).all(), label
    elif collective == "reduce":
        assert (ties.bits(out[kw["dst"]]) == want).all(), label
    else:
        blocks = np.array_split(np.arange(count), n)
        for r in range(n):
            assert (ties.bits(np.asarray(out[r])) == want[blocks[r]]).all(), f"{label} rank {r}"


@pytest.mark.parametrize("n", range(2, 9))
def test_min_max_on_signed_zeros_and_nans_every_algorithm(n):
    # every reducing algorithm with its parameters (tests/ties.py), both ops, both dtypes
    for i, (collective, algorithm, kw) in enumerate(ties.cases(n)):
        for op in ties.OPS:
            for dtype in ties.DTYPES:
                count = n * (n + 3) if collective == "reduce_scatter" else 37
                _check_min_max(collective, algorithm, kw, n, count, op, dtype, seed=i)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_min_max_on_signed_zeros_and_nans_property(data):
    n = data.draw(st.integers(2, 8))
    collective, algorithm, kw = data.draw(st.sampled_from(ties.cases(n)))
    blocks = data.draw(st.integers(0, 9))
    count = n * blocks if collective == "reduce_scatter" else data.draw(
        st.sampled_from([1, n - 1, n + 1, 3 * n + 2, 64, 101]))
    _check_min_max(collective, algorithm, kw, n, count, data.draw(st.sampled_from(ties.OPS)),
                   data.draw(st.sampled_from(ties.DTYPES)), data.draw(st.integers(0, 2**32 - 1)))
