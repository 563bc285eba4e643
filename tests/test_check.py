"""The symbolic checker: proves the ring schedules for N = 1…1024 and catches broken ones."""

import numpy as np
import pytest

import ringccl
from ringccl import Schedule, Step, VerificationError
from ringccl.algorithms import ring

# every N from 1 to 1024, in slices so pytest-xdist can spread them over cores
_SLICES = [(lo, min(lo + 64, 1025)) for lo in range(1, 1025, 64)]


@pytest.mark.parametrize("builder", [ring.all_reduce, ring.reduce_scatter, ring.all_gather],
                         ids=["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("lo,hi", _SLICES, ids=[f"N{a}-{b - 1}" for a, b in _SLICES])
def test_ring_schedules_verify_for_every_world_size(builder, lo, hi):
    for n in range(lo, hi):
        ringccl.verify(builder(n))


def _ring_steps(n):
    return list(ring.all_reduce(n).steps)


def test_missing_contribution_is_named():
    steps = _ring_steps(4)
    del steps[1]  # drop reduce-scatter step 2
    with pytest.raises(VerificationError, match="missing") as info:
        ringccl.verify(Schedule("all_reduce", "broken", 4, 4, steps))
    assert info.value.rank is not None and info.value.chunk is not None


def test_contribution_counted_twice_is_named():
    steps = _ring_steps(4)
    steps.insert(1, steps[0])  # repeat reduce-scatter step 1: R1 would add R0's c0 twice
    with pytest.raises(VerificationError, match="twice") as info:
        ringccl.verify(Schedule("all_reduce", "broken", 4, 4, steps))
    assert (info.value.step, info.value.rank, info.value.chunk) == (1, 1, 0)
    assert "step 1" in str(info.value) and "R0" in str(info.value)


def test_sending_a_chunk_not_held_is_named():
    # all-gather: rank 0 holds only block 0 at first, so sending block 1 is an error
    s = Schedule("all_gather", "broken", 3, 3, [Step.of(0, 1, 1)])
    with pytest.raises(VerificationError, match="does not hold") as info:
        ringccl.verify(s)
    assert (info.value.step, info.value.rank, info.value.chunk) == (0, 0, 1)


@pytest.mark.parametrize("reduce", [[False, False], [True, False], [False, True]])
def test_two_writes_to_one_slot_in_a_step_are_named(reduce):
    s = Schedule("all_gather", "broken", 3, 3, [Step.of([0, 2], [1, 1], [0, 2], [0, 0],
                                                       reduce=reduce)])
    with pytest.raises(VerificationError, match="two transfers write chunk c0 on rank R1") as info:
        ringccl.verify(s)
    assert (info.value.step, info.value.rank, info.value.chunk) == (0, 1, 0)


def test_several_reduces_into_one_slot_in_a_step_are_allowed():
    """R0 and R2 reduce into R1 in one step (applied in canonical order), then R1 copies back."""
    s = Schedule("all_reduce", "star", 3, 1, [Step.of([0, 2], [1, 1], [0, 0], reduce=True),
                                              Step.of([1, 1], [0, 2], [0, 0])])
    ringccl.verify(s)
    twice = Schedule("all_reduce", "broken", 3, 1, [Step.of([0, 0, 2], [1, 2, 1], [0, 0, 0],
                                                            reduce=True),
                                                    Step.of(2, 1, 0, reduce=True)])
    with pytest.raises(VerificationError, match="twice") as info:
        ringccl.verify(twice)  # step 1: R2 (which holds R0 + R2) reduces into R1 (R0 + R1 + R2)
    assert (info.value.step, info.value.rank) == (1, 1)


def test_reducing_different_chunks_is_named():
    s = Schedule("all_reduce", "broken", 2, 2, [Step.of(0, 1, 0, 1, reduce=True)])
    with pytest.raises(VerificationError, match="reduces its chunk c0 into R1's slot c1"):
        ringccl.verify(s)


def test_wrong_all_gather_origin_is_named():
    # copies block 0 over rank 1's own block 1: rank 1's slot c1 ends with the wrong origin
    steps = [Step.of(0, 1, 0, 1), Step.of([0, 1], [1, 0], [0, 1])]
    with pytest.raises(VerificationError, match="expected chunk c1 from R1"):
        ringccl.verify(Schedule("all_gather", "broken", 2, 2, steps))


def test_random_corruptions_are_always_caught():
    """Drop, duplicate or redirect one random transfer of a correct schedule: never verifies."""
    rng = np.random.default_rng(7)
    for trial in range(60):
        n = int(rng.integers(2, 9))
        good = ring.all_reduce(n)
        k = int(rng.integers(good.num_transfers))
        keep = np.ones(good.num_transfers, bool)
        step = good.step_of(np.arange(good.num_transfers))
        arrays = dict(step=step, src=good.src.copy(), dst=good.dst.copy(),
                      src_chunk=good.src_chunk.copy(), dst_chunk=good.dst_chunk.copy(),
                      reduce=good.reduce.copy())
        kind = trial % 3
        if kind == 0:
            keep[k] = False
        elif kind == 1:
            arrays["src_chunk"][k] = (arrays["src_chunk"][k] + 1) % n
            arrays["dst_chunk"][k] = arrays["src_chunk"][k]
        else:
            arrays["reduce"][k] = not arrays["reduce"][k]
        arrays = {key: v[keep] for key, v in arrays.items()}
        bad = Schedule.from_arrays("all_reduce", "broken", n, n, num_steps=good.num_steps,
                                   phases=good.phase_names, **arrays)
        with pytest.raises(VerificationError):
            ringccl.verify(bad)


def test_world_size_one_has_no_steps_and_verifies():
    for coll in ("all_reduce", "reduce_scatter", "all_gather"):
        s = ringccl.verify(ringccl.schedule(coll, "ring", world_size=1))
        assert s.num_steps == 0
