"""One cache story: every memo table registers with ringccl.caches, and ringccl.clear_caches()
empties them all; build_schedule's cache sees a name registered again."""

import numpy as np
import pytest

import ringccl
from ringccl import caches, engine
from ringccl.algorithms import REGISTRY, Algorithm, build_schedule, register
from ringccl.algorithms import tree
from ringccl.algorithms.registry import _build_cached
from ringccl.engine.plan import _checked_bounds, plan, uniform_bounds
from ringccl.engine.dataflow import _programs
from ringccl.layout import _layout, layout


def _fill():
    """Build one of everything that is memoized; return the objects built."""
    s = build_schedule("all_reduce", "ring", 4)
    lay = layout(s, 1, buffer_count=10)
    p = engine.plan(s, 1, lay.offsets, 0)
    engine.check_bounds(lay.offsets, s.num_chunks, lay.numel)
    engine.uniform_bounds(10, 4)
    engine.dataflow_program(p, restore=False)
    t = tree.binary_tree(5)
    return s, lay, p, t


def test_clear_caches_empties_schedules_layouts_plans_and_programs():
    s, lay, p, t = _fill()
    tables = [_build_cached, _layout, plan, uniform_bounds, _checked_bounds, tree.binary_tree]
    assert all(f.cache_info().currsize > 0 for f in tables)
    assert _programs
    ringccl.clear_caches()
    assert [f.cache_info().currsize for f in tables] == [0] * len(tables)
    assert not _programs
    # what is built next is built anew, not fetched
    s2, lay2, p2, t2 = _fill()
    assert s2 is not s and lay2 is not lay and p2 is not p and t2 is not t
    assert np.array_equal(s2.src, s.src) and lay2.offsets == lay.offsets


def test_engine_clear_caches_is_the_one_story():
    """The executors' release_buffers call engine.clear_caches: it is ringccl.clear_caches."""
    assert engine.clear_caches is ringccl.clear_caches is caches.clear_caches
    _fill()
    engine.clear_caches()
    assert _build_cached.cache_info().currsize == 0 and _layout.cache_info().currsize == 0


def test_a_cache_hit_is_the_same_schedule_and_a_new_entry_builds_anew():
    ringccl.clear_caches()
    assert build_schedule("all_reduce", "ring", 4) is build_schedule("all_reduce", "ring", 4)
    assert build_schedule("all_reduce", "ring", np.int64(4)) is build_schedule(
        "all_reduce", "ring", 4)
    ring = REGISTRY[("all_reduce", "ring")]
    calls = []

    def counted(world_size):
        calls.append(world_size)
        return ring.builder(world_size)

    try:
        register(Algorithm(collective="all_reduce", name="ring", builder=counted,
                           num_steps=ring.num_steps, bytes_sent=ring.bytes_sent,
                           steps_formula=ring.steps_formula, bytes_formula=ring.bytes_formula))
        first = build_schedule("all_reduce", "ring", 4)
        assert calls == [4]          # the re-registered name is seen, without clear_caches()
        assert build_schedule("all_reduce", "ring", 4) is first and calls == [4]
    finally:
        register(ring)
    assert build_schedule("all_reduce", "ring", 4) is not first


def test_cached_path_still_checks_its_arguments():
    build_schedule("broadcast", "tree", 4, root=0, segments=2)
    with pytest.raises(ringccl.ArgumentTypeError, match="world_size=4.0"):
        build_schedule("all_reduce", "ring", 4.0)
    with pytest.raises(ringccl.ArgumentTypeError, match="world_size=True"):
        build_schedule("all_reduce", "ring", True)
    with pytest.raises(ringccl.ArgumentError, match="takes the parameters segments; got root"):
        build_schedule("all_reduce", "tree", 4, root=0)
    with pytest.raises(ringccl.ArgumentError, match="algorithm='nope' is not available"):
        build_schedule("all_reduce", "nope", 4)
    with pytest.raises(ringccl.ArgumentTypeError, match="segments=2.0"):
        build_schedule("broadcast", "tree", 4, root=0, segments=2.0)
