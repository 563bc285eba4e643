"""The simulator against numpy: property tests over world size, count, op and dtype."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringccl
import ringccl.ops
import ringccl.sim
from ringccl import ReduceOp

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]
FLOAT_OPS = ["sum", "prod", "min", "max", "avg"]
INT_OPS = ["sum", "prod", "min", "max", "band", "bor", "bxor"]


def _inputs(rng, n, count, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=(n, count)).astype(bool)
    if dtype.kind == "f":
        return rng.standard_normal((n, count)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=(n, count), endpoint=True, dtype=dtype)


def _expected(x, op):
    """Independent reference: a plain Python-order fold in float64 / the dtype."""
    uf = {"sum": np.add, "avg": np.add, "prod": np.multiply, "min": np.minimum,
          "max": np.maximum, "band": np.bitwise_and, "bor": np.bitwise_or,
          "bxor": np.bitwise_xor}[op]
    if x.dtype.kind == "f":
        acc = x[0].astype(np.float64)
        for row in x[1:]:
            acc = uf(acc, row.astype(np.float64))
        return acc / x.shape[0] if op == "avg" else acc
    acc = x[0].copy()
    for row in x[1:]:
        acc = uf(acc, row)
    return acc


@st.composite
def cases(draw):
    n = draw(st.integers(1, 12))
    count = draw(st.one_of(st.sampled_from([0, 1, max(n - 1, 0), n, n + 1]),
                           st.integers(0, 300)))
    dtype = draw(st.sampled_from(DTYPES))
    ops = FLOAT_OPS if dtype.startswith("float") else INT_OPS
    op = draw(st.sampled_from(ops))
    seed = draw(st.integers(0, 2**32 - 1))
    return n, count, dtype, op, seed


@given(cases())
def test_all_reduce_matches_numpy(case):
    n, count, dtype, op, seed = case
    x = _inputs(np.random.default_rng(seed), n, count, dtype)
    before = x.copy()
    r = ringccl.simulate("all_reduce", x, op=op)
    assert np.array_equal(x, before)  # inputs untouched
    assert r.outputs.shape == (n, count) and r.outputs.dtype == x.dtype
    assert r.matches_reference, (r.mismatches, r.max_abs_error)
    # every rank's result is bitwise identical (the complete chunk is copied around the ring)
    assert all(r.outputs[i].tobytes() == r.outputs[0].tobytes() for i in range(n))
    exp = _expected(x, op)
    if x.dtype.kind == "f":
        if op in ("sum", "avg"):
            bound = (n - 1) * np.finfo(x.dtype).eps * np.abs(x.astype(np.float64)).sum(0)
            if op == "avg":
                bound = bound / n + np.finfo(x.dtype).eps * np.abs(exp)
            finite = np.isfinite(exp) & (np.abs(x.astype(np.float64)).sum(0)
                                         <= np.finfo(x.dtype).max)
            assert np.all(np.abs(r.outputs[0][finite] - exp[finite]) <= bound[finite])
        elif op in ("min", "max"):
            assert np.array_equal(r.outputs[0], exp.astype(x.dtype))
    else:
        assert np.array_equal(r.outputs[0], exp)
    assert r.stats.steps == 2 * (n - 1)


@given(cases())
def test_reduce_scatter_and_all_gather_match_numpy(case):
    n, count, dtype, op, seed = case
    x = _inputs(np.random.default_rng(seed), n, count, dtype)
    rs = ringccl.simulate("reduce_scatter", x, op=op)
    assert rs.matches_reference
    blocks = np.array_split(np.arange(count), n)
    outs = list(rs.outputs)
    assert [len(o) for o in outs] == [len(b) for b in blocks]
    exp = _expected(x, op)
    if x.dtype.kind != "f":
        for r in range(n):
            assert np.array_equal(outs[r], exp[blocks[r]])
    ag = ringccl.simulate("all_gather", x)
    assert ag.matches_reference
    assert ag.outputs.shape == (n, n * count)
    for r in range(n):
        assert np.array_equal(ag.outputs[r], x.reshape(-1))


@pytest.mark.parametrize("n,count", [(4, 16), (8, 100_003), (3, 2)])
def test_stats_are_exact_bytes(n, count):
    x = np.ones((n, count), np.float32)
    r = ringccl.simulate("all_reduce", x)
    chunk = np.diff(ringccl.chunk_bounds(count, n))
    assert r.stats.bytes_sent.sum() == 2 * (n - 1) * chunk.sum() * 4
    assert r.stats.bytes_sent.tolist() == r.schedule.bytes_sent(count, 4).tolist()
    assert r.stats.bytes_received.sum() == r.stats.bytes_sent.sum()


def test_seed_simulation_256_ranks_stats():
    """The ring's closed form: 2(N-1) steps and 2(N-1)/N·K bytes per rank (here K = 4 KiB)."""
    n, count = 256, 1024
    r = ringccl.simulate("all_reduce", np.ones((n, count), np.float32))
    assert r.stats.steps == 510
    assert (r.stats.bytes_sent == 2 * 255 / 256 * count * 4).all()
    assert r.matches_reference and (r.outputs == 256).all()


def test_world_size_one_is_a_copy():
    x = np.arange(5, dtype=np.int32)[None, :]
    r = ringccl.simulate("all_reduce", x)
    assert r.stats.steps == 0 and np.array_equal(r.outputs, x) and r.outputs is not x


def test_nan_and_inf_propagate():
    x = np.zeros((4, 3), np.float32)
    x[2, 0] = np.nan
    x[1, 1] = np.inf
    x[3, 2] = -np.inf
    x[0, 2] = np.inf
    r = ringccl.simulate("all_reduce", x)
    assert np.isnan(r.outputs[:, 0]).all() and (r.outputs[:, 1] == np.inf).all()
    assert np.isnan(r.outputs[:, 2]).all()  # inf + -inf
    assert r.matches_reference


def test_integer_sum_wraps_like_numpy():
    x = np.full((4, 2), 100, np.int8)
    r = ringccl.simulate("all_reduce", x)
    assert (r.outputs == np.int8(-112)).all() and r.matches_reference  # 400 mod 256


def test_preallocated_out_is_used():
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    out = np.empty_like(x)
    r = ringccl.simulate("all_reduce", x, out=out)
    assert np.shares_memory(r.outputs, out) and np.array_equal(out[1], x.sum(0))
    with pytest.raises(ringccl.ArgumentError, match="out must be"):
        ringccl.simulate("all_reduce", x, out=np.empty((4, 9), np.float32))


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(collective="all_reduce", op="avg", dtype=np.int32), ringccl.ArgumentError,
     "op=avg needs a floating dtype"),
    (dict(collective="all_reduce", op="bxor", dtype=np.float32), ringccl.ArgumentError,
     "op=bxor is bitwise"),
    (dict(collective="all_reduce", op="median", dtype=np.float32), ringccl.ArgumentError,
     "op='median' is not a reduce op; expected one of sum"),
    (dict(collective="allreduce", op="sum", dtype=np.float32), ringccl.ArgumentError,
     "collective='allreduce' is unknown; expected one of all_reduce"),
    (dict(collective="all_reduce", op="sum", dtype=np.complex64), ringccl.ArgumentTypeError,
     "inputs.dtype=complex64 is not supported"),
])
def test_bad_arguments_name_the_argument(kwargs, exc, match):
    x = np.ones((4, 4), dtype=kwargs.pop("dtype"))
    with pytest.raises(exc, match=match):
        ringccl.simulate(kwargs["collective"], x, op=kwargs["op"])


def test_bad_shapes_and_algorithms():
    with pytest.raises(ringccl.ArgumentError, match=r"shape \(world_size, count\)"):
        ringccl.simulate("all_reduce", np.ones(4))
    with pytest.raises(ringccl.ArgumentError, match="algorithm='nope' is not available"):
        ringccl.simulate("all_reduce", np.ones((2, 2)), algorithm="nope")
    s = ringccl.schedule("all_reduce", "ring", world_size=3)
    with pytest.raises(ringccl.ArgumentError, match="world_size=3"):
        ringccl.simulate("all_reduce", np.ones((2, 2)), schedule=s)


def test_torch_reduce_op_is_accepted():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    assert ringccl.ops.parse_op(dist.ReduceOp.MAX) is ReduceOp.MAX
    assert ringccl.ops.parse_op(ReduceOp.SUM) is ReduceOp.SUM
    del torch


def test_tolerance_is_stated():
    assert ringccl.sim.reference_tolerance(ReduceOp.SUM, np.dtype("float16"), 8).startswith(
        "(N-1)·eps·Σ|x|")
    assert ringccl.sim.reference_tolerance(ReduceOp.MAX, np.dtype("float32"), 8) == "exact"


def test_an_input_numpy_cannot_read_is_an_argument_type_error():
    torch = pytest.importorskip("torch")
    with pytest.raises(ringccl.ArgumentTypeError,
                       match=r"inputs \(Tensor, dtype torch.bfloat16\) cannot be read as a numpy"):
        ringccl.simulate("all_reduce", torch.ones(4, 8, dtype=torch.bfloat16))


def _ring_missing_last_delivery(n):
    """Ring all_reduce on n ranks without its last transfer into rank n - 1: that rank keeps a
    partial sum in one chunk, every other rank is right."""
    good = ringccl.schedule("all_reduce", "ring", n)
    last = [i for i in range(good.num_transfers)
            if good.step_of(i) == good.num_steps - 1 and good.transfer(i).dst == n - 1]
    keep = np.setdiff1d(np.arange(good.num_transfers), last)
    return ringccl.Schedule.from_arrays(
        "all_reduce", "broken", n, good.num_chunks, num_steps=good.num_steps,
        step=good.step_of(keep), src=good.src[keep], dst=good.dst[keep],
        src_chunk=good.src_chunk[keep], dst_chunk=good.dst_chunk[keep],
        reduce=good.reduce[keep])


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_a_wrong_row_on_a_non_first_rank_is_caught(dtype):
    # the check compares rank 0 with the reference and the other ranks with rank 0: a rank that
    # alone is wrong (here the last, in one chunk) must still count as mismatches
    n, count = 5, 40
    x = _inputs(np.random.default_rng(3), n, count, dtype)
    if dtype == "int32":
        x //= 1 << 8  # no wrap-around: partial sums differ from the total
    result = ringccl.simulate("all_reduce", x, schedule=_ring_missing_last_delivery(n))
    wrong = [r for r in range(n) if not np.array_equal(result.outputs[r], result.outputs[0])]
    assert wrong == [n - 1]
    assert result.matches_reference is False
    assert result.mismatches == count // n  # one chunk of rank n - 1
    assert (result.max_abs_error > 0) == (dtype == "float32")  # reported for floats only


def test_a_nan_on_a_non_first_rank_is_caught():
    from ringccl.collectives import get_collective
    from ringccl.sim.reference import _check_outputs
    x = np.random.default_rng(4).standard_normal((4, 9)).astype(np.float32)
    outputs = ringccl.simulate("all_reduce", x).outputs.copy()
    spec = get_collective("all_reduce")
    assert _check_outputs(spec, x, outputs, ReduceOp.SUM, None, None)[0] == 0
    outputs[2, 5] = np.nan
    assert _check_outputs(spec, x, outputs, ReduceOp.SUM, None, None)[0] == 1
    outputs[3, 0] += 1.0  # and a plain wrong value on another rank
    assert _check_outputs(spec, x, outputs, ReduceOp.SUM, None, None)[0] == 2


def test_cancellation_is_judged_by_the_full_tolerance():
    # |Σx| and the first and last ranks' inputs are tiny but Σ|x| is not: the check's lower
    # bound of the tolerance fails these elements, the tolerance (N-1)·eps·Σ|x| must still
    # accept the float32 rounding
    x = np.tile(np.array([[2.0 ** -25], [1.0], [-1.0], [2.0 ** -25]], dtype=np.float32),
                (1, 8))
    result = ringccl.simulate("all_reduce", x)
    assert result.matches_reference is True and result.mismatches == 0
    assert result.max_abs_error > 0  # the rounding happened: the full tolerance was used


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "bool"])
@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "broadcast"])
def test_large_copies_move_the_same_bytes(monkeypatch, dtype, collective):
    # copies of more than _UFUNC_COPY_BYTES go through an identity ufunc on unsigned views:
    # every bit (NaN payloads, -0.0) must arrive as np.copyto would move it
    import ringccl.sim.kernel as kernel
    x = _inputs(np.random.default_rng(5), 5, 60, dtype)
    if x.dtype.kind == "f":
        x[1, :3] = [-0.0, np.nan, -np.nan]
    op = "max" if dtype == "bool" else "sum"
    monkeypatch.setattr(kernel, "_UFUNC_COPY_BYTES", 1 << 62)
    plain = ringccl.simulate(collective, x, op=op)
    monkeypatch.setattr(kernel, "_UFUNC_COPY_BYTES", 0)
    ufunc = ringccl.simulate(collective, x, op=op)
    assert np.asarray(plain.outputs).tobytes() == np.asarray(ufunc.outputs).tobytes()
    assert ufunc.matches_reference


def _sim_algorithms():
    """(collective, algorithm, params) for every registered pair (root 1 where rooted)."""
    from ringccl.algorithms import REGISTRY
    from ringccl.collectives import get_collective

    out = []
    for collective, algorithm in sorted(REGISTRY):
        params = {"local_size": 1} if algorithm == "hierarchical" else {}
        if get_collective(collective).root_arg:
            params[get_collective(collective).root_arg] = 1
        out.append((collective, algorithm, params))
    return out


SIM_PAIRS = _sim_algorithms()
IN_PLACE = {"all_reduce", "broadcast", "reduce", "reduce_scatter", "scatter"}   # out is inputs


@pytest.mark.parametrize("pair", [p for p in SIM_PAIRS
                                  if p[0] in IN_PLACE | {"all_gather", "gather"}],
                         ids=lambda p: f"{p[0]}-{p[1]}")
@settings(max_examples=12)
@given(n=st.integers(1, 6), per=st.integers(0, 3), extra=st.integers(0, 2),
       dtype=st.sampled_from(["float64", "int32"]), op=st.sampled_from(["sum", "max"]),
       seed=st.integers(0, 2 ** 16))
def test_in_place_out_changes_only_the_outputs(pair, n, per, extra, dtype, op, seed):
    """``out`` sharing memory with ``inputs`` in NCCL's in-place forms (out is inputs; inputs
    each rank's own block of out): outputs as out of place, each rank's output elements of out
    hold them (chunks of any sizes: counts not divisible by N too), and the rest of out (= the
    inputs' memory) is unchanged (an in-place reduce_scatter leaves row r's other blocks as
    they were, as the library's in-place reduce_scatter leaves the caller's input)."""
    from ringccl.algorithms import build_schedule

    collective, algorithm, params = pair
    if any(k in ("src", "dst") and v >= n for k, v in params.items()):
        return   # the root 1 needs two ranks
    try:
        build_schedule(collective, algorithm, n, **{("root" if k in ("src", "dst") else k): v
                                                    for k, v in params.items()})
    except ringccl.ArgumentError:
        return   # e.g. a power-of-two-only algorithm on 3 ranks
    rng = np.random.default_rng(seed)
    count = per * n + (extra if collective not in ("all_gather", "gather") else 0)
    x = rng.integers(-8, 8, size=(n, count)).astype(dtype)
    ref = ringccl.simulate(collective, x.copy(), op, algorithm, **params)
    if collective in IN_PLACE:
        out = x.copy()
        inputs = out
    else:   # all_gather, gather: row r of inputs is out[r, r*count:(r+1)*count]
        out = np.full((n, n * count), -99).astype(dtype)
        inputs = np.lib.stride_tricks.as_strided(
            out, shape=(n, count), strides=(out.strides[0] + count * out.itemsize,
                                            out.itemsize)) if count else x[:, :0]
        if count:
            inputs[...] = x
    before = out.copy()
    res = ringccl.simulate(collective, inputs, op, algorithm, out=out, **params)
    assert res.matches_reference is not False
    assert len(res.outputs) == len(ref.outputs)   # ragged outputs (uneven counts): rank by rank
    for got, want in zip(res.outputs, ref.outputs):
        np.testing.assert_array_equal(got, want)
    # what each rank's output covers of out holds its output; the rest must be as before
    from ringccl.collectives import get_collective
    spec = get_collective(collective)
    c = res.schedule.num_chunks
    sizes = np.broadcast_to(res.schedule.chunk_sizes(out.shape[1]), (n, c))
    lists = spec.output_chunks(n, c, res.schedule.params)
    covered = np.zeros(out.shape, dtype=bool)
    for r in range(n):
        starts = np.cumsum(sizes[r]) - sizes[r]
        written = [np.arange(starts[k], starts[k] + sizes[r, k])
                   for k in np.asarray(lists[r], dtype=np.int64)]
        index = np.concatenate(written) if written else np.zeros(0, np.int64)
        covered[r, index] = True
        mine = res.outputs if collective == "gather" else res.outputs[r]
        # reduce and gather: the root's output (the other ranks' outputs are their inputs)
        if collective not in ("reduce", "gather") or r == params.get("dst", 0):
            np.testing.assert_array_equal(out[r, index], np.asarray(mine).reshape(-1))
    np.testing.assert_array_equal(out[~covered], before[~covered])


def test_partial_overlap_of_out_and_inputs_is_refused_naming_both():
    base = np.zeros(3 * 6 + 1)
    inputs = base[:18].reshape(3, 6)
    out = base[1:19].reshape(3, 6)        # shifted by one element: a partial overlap
    for collective in ("reduce_scatter", "all_reduce"):
        with pytest.raises(ringccl.ArgumentError, match="out shares memory with inputs"):
            ringccl.simulate(collective, inputs, out=out)
    big = np.zeros((3, 12))                        # all_to_all's storage: 4 blocks a rank
    with pytest.raises(ringccl.ArgumentError, match="out shares memory with inputs"):
        ringccl.simulate("all_to_all", big[:, :6], out=big)   # it also holds received blocks
    assert not big.any()
    assert not base.any()                          # refused before anything was written
    # the three-rank example of an in-place reduce_scatter: row 0 [1..6] -> [21, 24, 3, 4, 5, 6]
    for algorithm in ringccl.algorithms("reduce_scatter"):
        params = {"local_size": 1} if algorithm == "hierarchical" else {}
        y = np.arange(1, 19, dtype=np.float64).reshape(3, 6)
        try:
            ringccl.simulate("reduce_scatter", y, algorithm=algorithm, out=y, **params)
        except ringccl.ArgumentError:
            continue   # an algorithm that does not build for 3 ranks
        assert y[0].tolist() == [21, 24, 3, 4, 5, 6], algorithm


@pytest.mark.parametrize("collective", ["broadcast", "all_gather", "scatter", "gather",
                                        "all_to_all"])
def test_an_op_is_not_used_by_collectives_that_do_not_reduce(collective):
    # band on floats has no identity (numpy's iinfo failed inside the simulator); as with
    # op="max", the op of a collective that does not reduce is not used
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    got = ringccl.simulate(collective, x, op="band")
    want = ringccl.simulate(collective, x)
    assert got.matches_reference and len(got.outputs) == len(want.outputs)
    for a, b in zip(got.outputs, want.outputs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("error", [KeyboardInterrupt, MemoryError])
def test_an_error_in_the_reference_reduction_reaches_the_caller_as_itself(monkeypatch, error):
    # the float64 reference restores numpy's buffer size in a finally; what the reduction
    # raised (Ctrl-C, out of memory) must not become an error of the code after it
    from ringccl.sim import reference

    class Raising:
        def __enter__(self):
            raise error

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(reference.np, "errstate", lambda **kw: Raising())
    size = np.getbufsize()
    x = np.ones((4, 10), dtype=np.float32)
    with pytest.raises(error):
        reference._reference_reduction(x, ReduceOp.SUM, slice(None))
    assert np.getbufsize() == size
