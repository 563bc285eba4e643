"""ringccl.engine.staged: a private working buffer described by its sources and targets (the
range arithmetic, and which receives may land in the caller's arrays)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringccl import engine
from ringccl.algorithms import REGISTRY, build_schedule
from ringccl.engine.staged import Pieces, final_receives, merge, split
from ringccl.layout import layout


def test_merge_joins_overlapping_and_touching_ranges_and_drops_empty_ones():
    assert merge([(5, 7), (0, 2), (2, 3), (6, 9), (4, 4)]) == ((0, 3), (5, 9))
    assert merge([]) == ()


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=6),
       st.integers(0, 40), st.integers(0, 40))
def test_split_cuts_a_range_at_the_edges_of_merged_ranges(ranges, lo, hi):
    ranges = merge((a, b) for a, b in ranges)
    inside = {i for a, b in ranges for i in range(a, b)}
    parts = list(split(lo, hi, ranges))
    covered = [i for a, b, _ in parts for i in range(a, b)]
    assert covered == list(range(lo, hi))            # in order, no gaps, no overlaps
    for a, b, flag in parts:
        assert a < b
        assert all((i in inside) == flag for i in range(a, b))


@settings(max_examples=50)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=5), st.data())
def test_pieces_lay_runs_over_concatenated_arrays(sizes, data):
    arrays = [np.arange(n) + 100 * k for k, n in enumerate(sizes)]
    total = sum(sizes)
    # runs of the same total length, with gaps between them
    cuts = sorted(data.draw(st.lists(st.integers(0, total), max_size=3)))
    runs, at, prev = [], 0, 0
    for c in cuts + [total]:
        at += 2                                       # a gap of 2 before each run
        runs.append((at, at + c - prev))
        at, prev = at + c - prev, c
    pieces = Pieces(runs, arrays)
    flat = np.concatenate(arrays) if arrays else np.empty(0)
    got = np.concatenate([arr[off:off + b - a] for a, b, arr, off in pieces.entries]) \
        if pieces.entries else np.empty(0)
    np.testing.assert_array_equal(got, flat)
    lo, hi = runs[0][0], runs[-1][1]
    parts = list(pieces.parts(lo, hi))
    assert sum(b - a for a, b, _, _ in parts) == total
    for a, b, arr, off in pieces.entries:            # a view inside one entry is that entry's
        assert pieces.view(a, b) is not None
        np.testing.assert_array_equal(pieces.view(a, b), arr[off:off + b - a])


def _finals(collective, algorithm, n, rank, count, segment_elems=0, **params):
    schedule = build_schedule(collective, algorithm, n, **params)
    lay = layout(schedule, rank, count)
    plan = engine.plan(schedule, rank, lay.offsets, segment_elems)
    return plan, final_receives(plan)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_every_receive_of_a_one_step_exchange_is_final(n):
    for collective in ("all_to_all", "all_gather"):
        for rank in range(n):
            plan, finals = _finals(collective, "direct", n, rank, 4 * n)
            recvs = [r for st_ in plan.steps for r in st_.recvs]
            assert len(recvs) == n - 1 and set(finals) == set(recvs)


@pytest.mark.parametrize("n", [3, 4, 6])
def test_a_ring_forwards_what_it_receives_so_only_its_last_step_is_final(n):
    for rank in range(n):
        plan, finals = _finals("all_gather", "ring", n, rank, 5 * n)
        assert [r.step for r in finals] == [plan.steps[-1].index]


def test_reducing_receives_are_never_final_and_two_shot_lands_its_all_gather_half():
    plan, finals = _finals("all_reduce", "direct", 4, 1, 40)
    assert finals == ()
    plan, finals = _finals("all_reduce", "two_shot", 4, 1, 40)
    assert finals and all(not r.reduce for r in finals)
    assert {r.step for r in finals} == {plan.steps[-1].index}
    assert len(finals) == 3


def _schedule(pair, n: int):
    """A registered (collective, algorithm)'s schedule on ``n`` ranks (hierarchical: 2 ranks
    per node where ``n`` is even); None where it does not build for ``n`` (e.g. powers of two
    only)."""
    collective, algorithm = pair
    params = {"local_size": 2 if n % 2 == 0 else 1} if algorithm == "hierarchical" else {}
    try:
        return build_schedule(collective, algorithm, n, **params)
    except Exception:   # noqa: BLE001 - e.g. a power-of-two-only algorithm
        return None


def _drawn_plan(pair, n: int, segment: int, data):
    """One rank's plan of :func:`_schedule` (``pair``, ``n``), the rank drawn; None where it
    does not build."""
    schedule = _schedule(pair, n)
    if schedule is None:
        return None
    rank = data.draw(st.integers(0, n - 1))
    return engine.plan(schedule, rank, layout(schedule, rank, 7 * n).offsets, segment)


@settings(max_examples=80, deadline=None)
@given(pair=st.sampled_from(sorted(REGISTRY)), n=st.integers(2, 6),
       segment=st.sampled_from([0, 2]), data=st.data())
def test_nothing_later_touches_a_final_receive(pair, n, segment, data):
    collective = pair[0]
    plan = _drawn_plan(pair, n, segment, data)
    if plan is None:
        return
    finals = final_receives(plan)
    index = {st_.index: k for k, st_ in enumerate(plan.steps)}
    for r in finals:
        assert not r.reduce and r.fold < 0 and r.hi > r.lo
        for st_ in plan.steps[index[r.step] + 1:]:
            for op in list(st_.sends) + list(st_.recvs):
                assert not (op.lo < r.hi and r.lo < op.hi), (r, op)
    # the last write of every element a non-reducing collective receives is final
    if collective in ("all_gather", "broadcast", "all_to_all", "scatter", "gather"):
        last: dict = {}
        for st_ in plan.steps:
            for r in st_.recvs:
                for i in range(r.lo, r.hi):
                    last[i] = r
        touched_later = set()
        for r in set(last.values()):
            later = plan.steps[index[r.step] + 1:]
            if any(op.lo < r.hi and r.lo < op.hi for s in later for op in s.sends):
                touched_later.add(r)
        assert set(last.values()) - touched_later <= set(finals)


def test_lazy_sends_read_only_the_callers_bytes():
    from ringccl.engine.staged import plan_ranges
    # a broadcast root's sends, an all_to_all's blocks, two_shot's inputs: lazy
    for collective, algorithm, rank, params in (("broadcast", "direct", 0, {"root": 0}),
                                                ("all_to_all", "direct", 1, {}),
                                                ("all_reduce", "two_shot", 2, {})):
        schedule = build_schedule(collective, algorithm, 4, **params)
        plan = engine.plan(schedule, rank, layout(schedule, rank, 64).offsets, 0)
        ranges = plan_ranges(plan)
        first = [s for s in plan.steps[0].sends if s.hi > s.lo]
        assert first and set(first) <= ranges.lazy, (collective, algorithm)
        assert not any(a < s.hi and s.lo < b for s in first for a, b in ranges.upfront)
    # one-shot all_reduce sends the chunks it reduces into: copied in up front
    schedule = build_schedule("all_reduce", "direct", 4)
    plan = engine.plan(schedule, 0, layout(schedule, 0, 64).offsets, 0)
    ranges = plan_ranges(plan)
    assert not ranges.lazy and ranges.upfront == ranges.reads
    # a ring forwards what it received: those sends are not lazy
    schedule = build_schedule("all_gather", "ring", 4)
    plan = engine.plan(schedule, 1, layout(schedule, 1, 64).offsets, 0)
    ranges = plan_ranges(plan)
    assert {s.step for s in ranges.lazy} == {plan.steps[0].index}


@settings(max_examples=60, deadline=None)
@given(pair=st.sampled_from(sorted(REGISTRY)), n=st.integers(2, 6),
       segment=st.sampled_from([0, 2]), data=st.data())
def test_no_lazy_send_reads_what_the_call_wrote_or_reduces(pair, n, segment, data):
    from ringccl.engine.staged import plan_ranges
    plan = _drawn_plan(pair, n, segment, data)
    if plan is None:
        return
    ranges = plan_ranges(plan)
    index = {st_.index: k for k, st_ in enumerate(plan.steps)}
    for s in ranges.lazy:
        for st_ in plan.steps:
            for r in st_.recvs:
                if r.lo < s.hi and s.lo < r.hi:
                    assert not r.reduce and index[st_.index] >= index[s.step], (s, r)


def test_every_byte_the_call_reads_is_in_the_slot_or_read_from_the_caller():
    """Replay every plan on element tags, in the order both drivers apply it (a step's sends
    read the pre-step state, then its receives in order): the up-front copy and the lazy
    sends' fills put the caller's bytes in the working buffer, receives write it. No send and
    no reduce that combines in place may read an element nothing put there; a seeded reduce
    (which reads the caller's array instead) must be the first to touch its range."""
    from ringccl.engine.staged import plan_ranges
    for plan in _every_plan():
        ranges = plan_ranges(plan)
        seeded = set(ranges.seeded)
        work: dict = {}
        for a, b in ranges.upfront:
            work.update((i, "orig") for i in range(a, b))
        touched: set = set()
        for st_ in plan.steps:
            for s in st_.sends:
                if s in ranges.lazy:
                    work.update((i, "orig") for i in range(s.lo, s.hi) if i not in work)
                assert all(i in work for i in range(s.lo, s.hi)), (s, "reads nothing")
            step_sent = {i for s in st_.sends for i in range(s.lo, s.hi)}
            for r in st_.recvs:
                span = set(range(r.lo, r.hi))
                if r in seeded:
                    assert r.reduce and not span & (touched | step_sent), r
                elif r.reduce and (r.fold < 0 or r.flush):
                    assert all(i in work for i in span), (r, "combines into nothing")
                if not r.reduce or r.fold < 0 or r.flush:   # a fold's: its accumulator
                    work.update((i, "recv") for i in span)
                    touched |= span
            touched |= step_sent


def _every_plan(max_n: int = 6):
    """Every registered algorithm's plan for every world size 2..max_n, rank and segment size
    (whole chunks, 2 elements), on a count of 7 per rank."""
    for pair in sorted(REGISTRY):
        for n in range(2, max_n + 1):
            schedule = _schedule(pair, n)
            if schedule is None:
                continue
            for rank in range(n):
                for segment in (0, 2):
                    yield engine.plan(schedule, rank, layout(schedule, rank, 7 * n).offsets,
                                      segment)


def test_a_restorable_receive_lands_where_the_working_buffer_keeps_the_callers_bytes():
    """Replay every plan on element tags: the working buffer starts empty, the up-front copy
    and the lazy sends' fills put the caller's bytes there ("orig", read from the caller's
    array, so never after a restorable receive of their range landed in it), receives write
    it. When a restorable receive lands (and to the end of the call) its range must still be
    "orig": that is what the rollback puts back."""
    from ringccl.engine.staged import plan_ranges
    for plan in _every_plan():
        _replay_restorable(plan, plan_ranges(plan))


def _replay_restorable(plan, ranges) -> None:
    assert set(ranges.restorable) <= set(ranges.finals)
    work: dict = {}
    for a, b in ranges.upfront:
        work.update((i, "orig") for i in range(a, b))
    landed: set = set()
    restorable = set(ranges.restorable)
    for st_ in plan.steps:
        for s in st_.sends:
            if s in ranges.lazy:
                assert not landed & set(range(s.lo, s.hi)), (s, "refills a landed range")
                work.update((i, "orig") for i in range(s.lo, s.hi) if i not in landed)
        for r in st_.recvs:
            if r in restorable:
                assert all(work.get(i) == "orig" for i in range(r.lo, r.hi)), r
                landed.update(range(r.lo, r.hi))
            else:
                work.update((i, "recv") for i in range(r.lo, r.hi))
    assert all(work.get(i) == "orig" for i in landed)


def test_two_shots_all_gather_half_is_restorable():
    from ringccl.engine.staged import plan_ranges
    for n in (2, 3, 4):
        schedule = build_schedule("all_reduce", "two_shot", n)
        plan = engine.plan(schedule, 1, layout(schedule, 1, 8 * n).offsets, 0)
        ranges = plan_ranges(plan)
        assert len(ranges.restorable) == n - 1
        assert set(ranges.restorable) == set(ranges.finals)
    # a ring's final copies overwrite chunks it reduced into: the slot lost the caller's bytes
    schedule = build_schedule("all_reduce", "ring", 4)
    plan = engine.plan(schedule, 1, layout(schedule, 1, 32).offsets, 0)
    assert plan_ranges(plan).finals and not plan_ranges(plan).restorable


def test_two_shot_and_direct_reduce_scatter_reduce_from_the_callers_bytes():
    from ringccl.engine.staged import plan_ranges
    for collective, algorithm in (("all_reduce", "two_shot"), ("reduce_scatter", "direct")):
        for n in (2, 3, 4):
            schedule = build_schedule(collective, algorithm, n)
            plan = engine.plan(schedule, 1, layout(schedule, 1, 8 * n).offsets, 0)
            ranges = plan_ranges(plan)
            assert ranges.seeded, (collective, n)
            own = [(r.lo, r.hi) for r in ranges.seeded]
            assert not any(a < hi and lo < b for lo, hi in own for a, b in ranges.upfront)
    # one-shot all_reduce sends what it reduces into: the slot must hold it (not seeded)
    schedule = build_schedule("all_reduce", "direct", 4)
    plan = engine.plan(schedule, 0, layout(schedule, 0, 64).offsets, 0)
    assert not plan_ranges(plan).seeded
