"""The schedule IR: chunking, validation, per-rank programs, exact byte counts."""

import numpy as np
import pytest

import ringccl
import ringccl.ir
from ringccl import Kind, Schedule, ScheduleError, Step, chunk_bounds


@pytest.mark.parametrize("count,n", [(0, 1), (0, 4), (1, 4), (3, 4), (10, 4), (16, 4), (7, 3)])
def test_chunk_bounds_match_array_split(count, n):
    bounds = chunk_bounds(count, n)
    pieces = np.array_split(np.arange(count), n)
    assert [len(p) for p in pieces] == np.diff(bounds).tolist()
    assert bounds[0] == 0 and bounds[-1] == count


@pytest.mark.parametrize("count,n", [(-1, 2), (4, 0)])
def test_chunk_bounds_rejects_bad_arguments(count, n):
    with pytest.raises(ringccl.ArgumentError, match="count|num_chunks"):
        chunk_bounds(count, n)


def test_steps_are_sorted_canonically():
    step = Step.of([2, 0, 1], [0, 1, 2], [2, 0, 1])
    assert step.src.tolist() == [0, 1, 2]
    assert step.dst.tolist() == [1, 2, 0]
    assert list(step.transfers())[0] == ringccl.Transfer(0, 1, 0, 0, Kind.COPY)


def test_from_arrays_equals_steps_constructor():
    a = ringccl.schedule("all_reduce", "ring", world_size=5)
    b = Schedule("all_reduce", "ring", 5, 5, a.steps)
    for name in ("src", "dst", "src_chunk", "dst_chunk", "reduce", "step_ptr"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert a.phase_names == b.phase_names


@pytest.mark.parametrize("src,dst,chunk,match", [
    (0, 0, 0, "cannot send to itself"),
    (0, 4, 0, "ranks must be in"),
    (-1, 1, 0, "ranks must be in"),
    (0, 1, 3, r"chunks in \[0, 3\)"),
])
def test_constructor_rejects_out_of_range(src, dst, chunk, match):
    with pytest.raises(ScheduleError, match=match) as info:
        Schedule("all_reduce", "x", 4, 3, [Step.of(src, dst, chunk)])
    assert info.value.step == 0


def test_program_is_the_per_rank_projection():
    s = ringccl.schedule("all_reduce", "ring", world_size=4)
    p = s.program(2)
    assert len(p.steps) == 6
    first = p.steps[0]
    # reduce-scatter step 1 of the seed: R2 sends c2 to R3 and accumulates c1 from R1
    assert first.sends == (ringccl.ir.Send(3, 2),)
    assert first.recvs == (ringccl.ir.Recv(1, 1, Kind.REDUCE),)
    assert p.steps[3].recvs[0].kind is Kind.COPY
    with pytest.raises(ringccl.ArgumentError, match="rank=4"):
        s.program(4)


@pytest.mark.parametrize("n,count", [(4, 16), (4, 10), (3, 1), (8, 0)])
def test_exact_bytes_count_uneven_chunks(n, count):
    s = ringccl.schedule("all_reduce", "ring", world_size=n)
    sizes = np.diff(chunk_bounds(count, n))
    sent = s.bytes_sent(count, 4)
    # rank r sends every chunk except (r+1)%N... in reduce-scatter, and every chunk except r+2 in
    # all-gather: count them from the definition
    for r in range(n):
        rs = sum(sizes[(r - k) % n] for k in range(n - 1))
        ag = sum(sizes[(r + 1 - k) % n] for k in range(n - 1))
        assert sent[r] == 4 * (rs + ag)
    assert s.bytes_received(count, 4).sum() == sent.sum()


@pytest.mark.parametrize("algorithm,per_buffer", [("ring", 7 / 4), ("direct", 7), ("master", 7)])
def test_bytes_beyond_int64_are_exact(algorithm, per_buffer):
    # 8 ranks of 10**18 float32: 7 x 4e18 bytes is past int64 (it used to wrap negative)
    s = ringccl.schedule("all_reduce", algorithm, world_size=8)
    count = 10 ** 18
    sent = s.bytes_sent(count, 4)
    assert max(sent) == per_buffer * 4 * count and min(sent) >= 0
    assert sum(map(int, s.bytes_received(count, 4))) == sum(map(int, sent))
    small = s.bytes_sent(10 ** 6, 4)   # within int64: int64 as before
    assert small.dtype == np.int64 and small.max() == per_buffer * 4 * 10 ** 6
    with pytest.raises(ringccl.ArgumentError, match=r"buffer_count=\d+ must be at most 2\*\*63"):
        s.bytes_sent(2 ** 70, 4)   # beyond int64 elements: numpy's OverflowError before


def test_schedule_repr_and_phases():
    s = ringccl.schedule("all_reduce", "ring", world_size=3)
    assert "num_steps=4" in repr(s)
    assert s.phases == [("reduce-scatter", 0, 2), ("all-gather", 2, 4)]
