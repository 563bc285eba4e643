"""All eight primitives in the simulator against plain numpy, and their contracts.

The expectations here are written independently of ringccl's own reference (a Python fold per
rank, numpy.array_split blocks), for random world sizes, counts (0, 1, < N, not divisible),
dtypes, ops, roots and all_to_all split sizes.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ringccl
from ringccl import Schedule, Step
from ringccl.collectives import ALL, ANY, ORIGIN, split_safe

from .test_sim import DTYPES, FLOAT_OPS, INT_OPS, _inputs

ALGORITHMS = {
    "all_reduce": ["ring", "direct", "master"], "reduce_scatter": ["ring", "direct"],
    "all_gather": ["ring", "direct"], "broadcast": ["ring", "direct"],
    "reduce": ["ring", "direct"], "scatter": ["direct", "binomial"],
    "gather": ["direct", "binomial"], "all_to_all": ["direct"],
}
ROOT_ARG = {"broadcast": "src", "scatter": "src", "reduce": "dst", "gather": "dst"}
_UFUNC = {"sum": np.add, "avg": np.add, "prod": np.multiply, "min": np.minimum,
          "max": np.maximum, "band": np.bitwise_and, "bor": np.bitwise_or,
          "bxor": np.bitwise_xor}


def _fold(x, op):
    """Rank-order fold of the rows of x in x's dtype (exact for integers)."""
    acc = x[0].copy()
    for row in x[1:]:
        acc = _UFUNC[op](acc, row)
    return acc


def _expected(collective, x, op, root):
    """torch.distributed's results, one array per rank (gather: the root's only)."""
    n = x.shape[0]
    if collective == "all_reduce":
        return [_fold(x, op)] * n
    if collective == "reduce":
        return [_fold(x, op) if r == root else x[r] for r in range(n)]
    if collective == "reduce_scatter":
        return np.array_split(_fold(x, op), n)
    if collective == "broadcast":
        return [x[root]] * n
    if collective == "scatter":
        return np.array_split(x[root], n)
    if collective in ("all_gather", "gather"):
        return [x.reshape(-1)] * (n if collective == "all_gather" else 1)
    blocks = [np.array_split(row, n) for row in x]  # all_to_all
    return [np.concatenate([blocks[i][r] for i in range(n)]) for r in range(n)]


@st.composite
def primitive_cases(draw):
    collective = draw(st.sampled_from(sorted(ALGORITHMS)))
    algorithm = draw(st.sampled_from(ALGORITHMS[collective]))
    n = draw(st.integers(1, 11))
    count = draw(st.one_of(st.sampled_from([0, 1, max(n - 1, 0), n, n + 1, 3 * n]),
                           st.integers(0, 200)))
    dtype = draw(st.sampled_from(DTYPES))
    op = draw(st.sampled_from(FLOAT_OPS if dtype.startswith("float") else INT_OPS))
    root = draw(st.integers(0, n - 1))
    segments = draw(st.sampled_from([None, 1, 2, 7]))
    order = draw(st.sampled_from(["C", "F", "transposed", "strided"]))
    return (collective, algorithm, n, count, dtype, op, root, segments, order,
            draw(st.integers(0, 2**32)))


def _in_layout(x: np.ndarray, order: str) -> np.ndarray:
    """The same values as ``x`` in another memory layout (inputs need not be C-contiguous)."""
    if order == "F":
        return np.asfortranarray(x)
    if order == "transposed":
        return np.ascontiguousarray(x.T).T
    if order == "strided":
        wide = np.zeros((x.shape[0], 2 * x.shape[1]), x.dtype)
        wide[:, ::2] = x
        return wide[:, ::2]
    return x


@given(primitive_cases())
def test_every_primitive_matches_numpy(case):
    collective, algorithm, n, count, dtype, op, root, segments, order, seed = case
    x = _in_layout(_inputs(np.random.default_rng(seed), n, count, dtype), order)
    before = x.copy()
    kwargs = {ROOT_ARG[collective]: root} if collective in ROOT_ARG else {}
    if algorithm == "master":
        kwargs["root"] = root
    if segments is not None and algorithm == "ring" and collective in ("broadcast", "reduce"):
        kwargs["segments"] = segments
    r = ringccl.simulate(collective, x, op=op, algorithm=algorithm, **kwargs)
    assert np.array_equal(x, before)  # inputs untouched
    assert r.matches_reference, (r.mismatches, r.max_abs_error)
    assert r.stats.steps == r.schedule.num_steps
    if r.schedule.params.get("root") is not None and collective in ROOT_ARG:
        assert r.schedule.params["root"] == root
    want = _expected(collective, x, op, root)
    got = [r.outputs] if collective == "gather" else list(r.outputs)
    assert [g.shape for g in got] == [w.shape for w in want]
    assert all(g.dtype == x.dtype for g in got)
    exact = not ringccl.get_collective(collective).reduces or x.dtype.kind != "f"
    for rank, (g, w) in enumerate(zip(got, want)):
        if exact or (collective == "reduce" and rank != root) or op in ("min", "max"):
            assert g.tobytes() == w.astype(x.dtype).tobytes(), (rank, g, w)
    if collective == "all_gather" or (collective == "reduce_scatter" and count % n == 0):
        assert isinstance(r.outputs, np.ndarray)


@given(st.integers(1, 9), st.integers(0, 2**32), st.sampled_from(["int32", "float32", "uint8"]),
       st.booleans())
def test_all_to_all_single_with_random_splits(n, seed, dtype, give_output):
    rng = np.random.default_rng(seed)
    ins = rng.integers(0, 5, size=(n, n))
    ins[rng.random((n, n)) < 0.3] = 0  # plenty of zero splits
    rows = [_inputs(rng, 1, int(ins[r].sum()), dtype)[0] for r in range(n)]
    kwargs = ({"output_split_sizes": ins.T.copy()} if give_output
              else {"input_split_sizes": ins})
    r = ringccl.simulate("all_to_all", rows, algorithm="direct", **kwargs)
    assert r.matches_reference and isinstance(r.outputs, tuple)
    offsets = np.cumsum(ins, axis=1) - ins
    for dst in range(n):
        want = np.concatenate([rows[i][offsets[i, dst]:offsets[i, dst] + ins[i, dst]]
                               for i in range(n)])
        assert r.outputs[dst].tobytes() == want.tobytes()
    itemsize = np.dtype(dtype).itemsize
    assert r.stats.bytes_sent.tolist() == [
        int((ins[s].sum() - ins[s, s]) * itemsize) for s in range(n)]
    assert r.stats.bytes_received.tolist() == [
        int((ins[:, d].sum() - ins[d, d]) * itemsize) for d in range(n)]


def test_all_to_all_equal_blocks_and_not_divisible():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    r = ringccl.simulate("all_to_all", np.arange(18).reshape(3, 6))
    assert r.outputs.tolist() == [[0, 1, 6, 7, 12, 13], [2, 3, 8, 9, 14, 15],
                                  [4, 5, 10, 11, 16, 17]]
    # 4 elements over 3 ranks: numpy.array_split blocks (2, 1, 1), so rank 0 receives more
    r = ringccl.simulate("all_to_all", x)
    assert [o.tolist() for o in r.outputs] == [[0, 1, 4, 5, 8, 9], [2, 6, 10], [3, 7, 11]]


def test_reduce_leaves_other_ranks_unchanged_and_avg_divides_at_the_root():
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    r = ringccl.simulate("reduce", x, op="avg", dst=1)
    assert np.array_equal(r.outputs[[0, 2]], x[[0, 2]])
    assert np.allclose(r.outputs[1], x.mean(axis=0)) and r.matches_reference


def test_shapes_follow_torch():
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    assert ringccl.simulate("broadcast", x, src=2).outputs.tolist() == [x[2].tolist()] * 4
    assert ringccl.simulate("scatter", np.arange(32).reshape(4, 8), src=3).outputs.tolist() == [
        [24, 25], [26, 27], [28, 29], [30, 31]]
    g = ringccl.simulate("gather", x, dst=1, algorithm="binomial").outputs
    assert g.shape == (24,) and np.array_equal(g, x.reshape(-1))
    assert isinstance(ringccl.simulate("scatter", x).outputs, tuple)  # 6 over 4: uneven


@pytest.mark.parametrize("n", [2, 3, 4, 7, 9])
def test_several_reduces_into_one_slot_combine_in_ascending_rank_order(n):
    """direct all_reduce and reduce: rank d folds every rank's value in ascending rank order,
    its own at its own position (the IR's reduction order: before, rank d started from
    its own value, so ranks rounded differently), for small N and larger N."""
    x = np.random.default_rng(n).standard_normal((n, 257)).astype(np.float32) * 1e4
    r = ringccl.simulate("all_reduce", x, algorithm="direct")
    for d in range(n):
        acc = x[0].copy()
        for s in range(1, n):
            acc = acc + x[s]
        assert r.outputs[d].tobytes() == acc.tobytes()
    root = n - 1
    red = ringccl.simulate("reduce", x, algorithm="direct", dst=root)
    assert red.outputs[root].tobytes() == r.outputs[root].tobytes()


def test_a_step_mixing_copies_and_several_reduces():
    # all_reduce on 3 ranks: step 0 R0 and R2 reduce into R1 while R1 copies its own to nobody;
    # then R1 copies the sum to R0 and R2
    s = Schedule("all_reduce", "star", 3, 2, [
        Step.of([0, 2, 0, 2], [1, 1, 1, 1], [0, 0, 1, 1], reduce=True),
        Step.of([1, 1, 1, 1], [0, 2, 0, 2], [0, 0, 1, 1])])
    ringccl.verify(s)
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    r = ringccl.simulate("all_reduce", x, schedule=s)
    assert r.matches_reference and (r.outputs == x.sum(axis=0)).all()


# -- contracts ------------------------------------------------------------------------------------

def test_blocked_chunks_never_straddle_blocks():
    spec = ringccl.get_collective("all_gather")
    # 3 ranks, 2 chunks per block, blocks of 5: each block split 3 + 2
    assert spec.chunk_sizes(3, 6, 15)[0].tolist() == [3, 2, 3, 2, 3, 2]
    rs = ringccl.get_collective("reduce_scatter")
    assert rs.chunk_sizes(2, 4, 7)[1].tolist() == [2, 2, 2, 1]  # blocks 4 + 3


def test_all_to_all_layout():
    spec = ringccl.get_collective("all_to_all")
    n, c = 3, 7  # one scratch chunk
    chunk_id, origin = spec.pre(n, c)
    assert chunk_id.tolist() == [[0, 1, 2, -1, -1, -1, -1]] * 3
    assert origin.tolist() == [[r, r, r, -1, -1, -1, -1] for r in range(3)]
    kind, want_id, want_origin = spec.expected(n, c)
    assert spec.output_chunks(n, c, {}).tolist() == [[0, 4, 5], [3, 1, 5], [3, 4, 2]]
    for r in range(n):
        assert kind[r].tolist() == [ORIGIN if k in (r, 3, 4, 5) and k != 3 + r else ANY
                                    for k in range(c)]
        for i in range(n):
            slot = r if i == r else n + i
            assert (want_id[r, slot], want_origin[r, slot]) == (r, i)
    assert spec.chunk_sizes(n, c, 6)[0].tolist() == [2] * 7
    sizes = spec.chunk_sizes(n, 2 * n, None, input_split_sizes=[[1, 2, 3], [0, 0, 4], [5, 0, 0]])
    assert sizes.tolist() == [[1, 2, 3, 1, 0, 5], [0, 0, 4, 2, 0, 0], [5, 0, 0, 3, 4, 0]]
    with pytest.raises(ringccl.ArgumentError, match="num_chunks=5 must be at least"):
        spec.chunk_sizes(3, 5, 6)


def test_rooted_contracts_read_the_root():
    spec = ringccl.get_collective("reduce")
    kind, _, _ = spec.expected(4, 2, {"root": 2})
    assert (kind[2] == ALL).all() and (kind[[0, 1, 3]] == ANY).all()
    bc = ringccl.get_collective("broadcast")
    chunk_id, origin = bc.pre(3, 2, {"root": 1})
    assert chunk_id.tolist() == [[-1, -1], [0, 1], [-1, -1]]
    assert (bc.expected(3, 2, {"root": 1})[2] == 1).all()
    with pytest.raises(ringccl.ArgumentError, match="root=3 is out of range"):
        bc.pre(3, 2, {"root": 3})


def _scratch_schedule():
    """all_to_all on 2 ranks that parks R0's block 1 in a scratch chunk on the way."""
    return Schedule("all_to_all", "parked", 2, 5, [
        Step.of([0, 1], [1, 0], [1, 0], [4, 3]),   # R0's block 1 → R1 scratch; R1's 0 → R0
        Step.of(1, 0, 4, 4),                        # back to R0's scratch
        Step.of(0, 1, 4, 2)])                       # into R1's output slot from R0


def test_scratch_chunks_need_equal_blocks():
    s = ringccl.verify(_scratch_schedule())
    assert not split_safe(s) and split_safe(ringccl.schedule("all_to_all", "direct", 4))
    r = ringccl.simulate("all_to_all", np.arange(8).reshape(2, 4), schedule=s)
    assert r.matches_reference and r.outputs.tolist() == [[0, 1, 4, 5], [2, 3, 6, 7]]
    with pytest.raises(ringccl.ArgumentError, match="count=3 is not divisible by world_size=2"):
        ringccl.simulate("all_to_all", np.arange(6).reshape(2, 3), schedule=s)
    with pytest.raises(ringccl.ArgumentError, match="2 scratch chunks|1 scratch chunks"):
        ringccl.simulate("all_to_all", [np.arange(3), np.arange(1)], schedule=s,
                         input_split_sizes=[[1, 2], [1, 0]])


def test_a_transfer_between_slots_of_different_sizes_is_refused():
    s = Schedule("all_to_all", "wrong", 2, 4, [Step.of(0, 1, 1, 3)])  # into R1's own-rank slot
    with pytest.raises(ringccl.ArgumentError, match=r"moves R0's chunk c1 \(2 elements\) into "
                                                    r"R1's chunk c3 \(1 elements\) at step 0"):
        ringccl.simulate("all_to_all", [np.arange(3), np.arange(2)], schedule=s,
                         input_split_sizes=[[1, 2], [1, 1]])


@pytest.mark.parametrize("call,exc,match", [
    (lambda x: ringccl.simulate("reduce", x, src=1), ringccl.ArgumentError,
     "src=1 does not apply to reduce, which takes dst="),
    (lambda x: ringccl.simulate("all_reduce", x, dst=0), ringccl.ArgumentError,
     "dst=0 does not apply to all_reduce, which has no root"),
    (lambda x: ringccl.simulate("broadcast", x, src=4), ringccl.ArgumentError,
     "src=4 is out of range for world_size=4"),
    (lambda x: ringccl.simulate("gather", x, dst=1, root=2), ringccl.ArgumentError,
     "dst=1 and root=2 disagree"),
    (lambda x: ringccl.simulate("all_gather", x, input_split_sizes=np.ones((4, 4), int)),
     ringccl.ArgumentError, "apply to all_to_all only"),
    (lambda x: ringccl.simulate("all_to_all", x, input_split_sizes=np.ones((4, 3), int)),
     ringccl.ArgumentError, r"shape \(world_size, world_size\) = \(4, 4\)"),
    (lambda x: ringccl.simulate("all_to_all", x, input_split_sizes=np.full((4, 4), 2)),
     ringccl.ArgumentError, "input_split_sizes\\[0\\] sums to 8, but rank 0's input has 4"),
    (lambda x: ringccl.simulate("all_to_all", x, input_split_sizes=-np.eye(4, dtype=int)),
     ringccl.ArgumentError, r"input_split_sizes\[0\]\[0\]=-1 must be >= 0"),
    (lambda x: ringccl.simulate("all_to_all", x, input_split_sizes=np.eye(4, dtype=int) * 4,
                                output_split_sizes=np.ones((4, 4), int)),
     ringccl.ArgumentError, "must be the transpose of input_split_sizes"),
    (lambda x: ringccl.simulate("scatter", x, algorithm="ring"), ringccl.ArgumentError,
     "algorithm='ring' is not available for scatter; expected one of direct, binomial"),
])
def test_bad_arguments_name_the_argument(call, exc, match):
    with pytest.raises(exc, match=match):
        call(np.ones((4, 4), np.float32))


def test_default_algorithms():
    from ringccl.sim import default_algorithm
    assert default_algorithm("all_reduce") == "ring"
    assert default_algorithm("broadcast") == "ring"
    assert default_algorithm("scatter") == ringccl.algorithms("scatter")[0]
