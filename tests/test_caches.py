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


# -- caches bounded by bytes: built schedules grow as world_size², so a count alone does not
# bound their memory ---------------------------------------------------------------------------

class _Blob:
    """A value of a known size."""

    def __init__(self, size):
        self.size = size


def _blobs(maxsize=8, maxbytes=100):
    calls = []

    @caches.memoize(maxsize=maxsize, maxbytes=maxbytes, nbytes=lambda b: b.size)
    def make(key, size):
        calls.append(key)
        return _Blob(size)
    return make, calls


def test_memoize_by_bytes_keeps_what_fits_and_drops_the_least_recently_used():
    make, calls = _blobs(maxbytes=100)
    a, b = make("a", 40), make("b", 40)
    assert make("a", 40) is a and make("b", 40) is b and calls == ["a", "b"]
    info = make.cache_info()
    assert (info.hits, info.misses, info.currsize, info.currbytes) == (2, 2, 2, 80)
    assert (info.maxsize, info.maxbytes) == (8, 100)
    assert make("a", 40) is a            # a is now the most recently used
    c = make("c", 40)                    # 120 bytes: b, the least recently used, goes
    assert make.cache_info().currsize == 2 and make.cache_info().currbytes == 80
    assert make("a", 40) is a and make("c", 40) is c and calls == ["a", "b", "c"]
    assert make("b", 40) is not b and calls[-1] == "b"


def test_memoize_by_bytes_returns_but_does_not_keep_a_value_beyond_the_budget():
    make, calls = _blobs(maxbytes=100)
    a = make("a", 60)
    big = make("big", 101)
    assert big.size == 101 and make("big", 101) is not big and calls == ["a", "big", "big"]
    assert make("a", 60) is a            # what was kept stays: nothing left for the big one
    assert make.cache_info().currsize == 1 and make.cache_info().currbytes == 60


def test_memoize_by_bytes_keeps_its_count_limit_and_clear_caches_empties_it():
    make, calls = _blobs(maxsize=2, maxbytes=1000)
    a = make("a", 1)
    make("b", 1), make("c", 1)
    assert make.cache_info().currsize == 2 and make("a", 1) is not a
    caches.clear_caches()
    assert make.cache_info().currsize == 0 and make.cache_info().currbytes == 0
    make("a", 1)
    make.cache_clear()
    assert make.cache_info().currsize == 0


def test_memoize_by_bytes_reads_a_callable_budget_and_measures_again_on_insert():
    budget = [100]
    calls = []

    @caches.memoize(maxsize=8, maxbytes=lambda: budget[0], nbytes=lambda b: b.size)
    def make(key, size):
        calls.append(key)
        return _Blob(size)
    a = make("a", 30)
    make("b", 30)
    a.size = 90                          # a value that grew after it was cached
    make("c", 10)                        # 130 bytes measured: a, the oldest, goes
    assert make.cache_info().currbytes == 40 and make("a", 30) is not a
    budget[0] = 10                       # a smaller budget applies at the next insert
    make("d", 5)
    assert make.cache_info().currbytes <= 10 and make.cache_info().currsize == 1


def test_memoize_by_bytes_does_not_keep_failures_and_keys_as_lru_cache_does():
    attempts = []

    @caches.memoize(maxsize=8, maxbytes=100, nbytes=lambda v: 1)
    def f(x, **kw):
        attempts.append(x)
        if x < 0:
            raise ValueError(x)
        return [x, kw]
    with pytest.raises(ValueError):
        f(-1)
    with pytest.raises(ValueError):
        f(-1)
    assert attempts == [-1, -1] and f.cache_info().currsize == 0
    assert f(1, k=2) is f(1, k=2) and f(1) is not f(1, k=2)
    with pytest.raises(TypeError):       # an unhashable argument, as functools.lru_cache
        f([1])
    assert f.__wrapped__.__name__ == "f"


def test_memoize_by_bytes_under_threads_stays_within_its_budget():
    import threading
    make, calls = _blobs(maxsize=64, maxbytes=100)
    seen = {}
    errors = []

    def work(t):
        try:
            for i in range(300):
                key = (i * 7 + t) % 23
                v = make(key, 10 + key % 5)
                assert v.size == 10 + key % 5
                seen.setdefault(key, set()).add(id(v))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    info = make.cache_info()
    assert not errors and info.currbytes <= 100
    assert info.hits + info.misses == 8 * 300


def _array_bytes(s):
    return sum(getattr(s, a).nbytes
               for a in ("src", "dst", "src_chunk", "dst_chunk", "reduce", "step_ptr"))


def test_schedule_cache_holds_schedules_within_its_byte_budget(monkeypatch):
    import gc
    import weakref
    from ringccl.algorithms import registry
    ringccl.clear_caches()
    budget = 5 << 20       # ring all_gather: 1.1 MB at 256 ranks, 4.5 MB at 512
    monkeypatch.setattr(registry, "SCHEDULE_CACHE_BYTES", budget)
    built = []
    for _ in range(3):
        for n in (256, 512, 256, 512):
            s = build_schedule("all_gather", "ring", n)
            assert build_schedule("all_gather", "ring", n) is s   # the most recent is a hit
            built.append(weakref.ref(s))
            del s
            gc.collect()   # what is still alive is what the caches hold
            assert sum(_array_bytes(r()) for r in built if r() is not None) <= budget
            assert _build_cached.cache_info().currbytes <= budget
    assert _build_cached.cache_info().currsize >= 1
    # what the schedule memoizes on itself (chunk_sends) counts at the next insert
    s = build_schedule("all_gather", "ring", 512)
    s.chunk_sends(), s.chunk_recvs()
    build_schedule("all_gather", "ring", 8)
    assert _build_cached.cache_info().currbytes <= budget
    assert registry.schedule_nbytes(s) == _array_bytes(s) + 2 * s.chunk_sends().nbytes
    ringccl.clear_caches()


def test_library_schedule_cache_holds_schedules_within_the_same_budget(monkeypatch):
    from ringccl.algorithms import bounded, registry
    ringccl.clear_caches()
    monkeypatch.setattr(registry, "SCHEDULE_CACHE_BYTES", 5 << 20)
    for n in (256, 512, 256, 512):
        s = ringccl.schedule("all_gather", world_size=n, algorithm="ring")
        assert ringccl.schedule("all_gather", world_size=n, algorithm="ring") is s
        assert bounded._library_build_cached.cache_info().currbytes <= 5 << 20
    ringccl.clear_caches()
    assert bounded._library_build_cached.cache_info().currsize == 0
