"""ringccl.shm's lazy call entry without processes: two ranks of one group as two threads (the
set-up exchange through a barrier), so the growth protocol's interleavings can be forced: a
rank that entered lazily joins the growth a peer asked for in the same call, inside a wait or
when it leaves the call."""

from __future__ import annotations

import os
import threading

import pytest

from ringccl.backends import shm


@pytest.fixture
def shm_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGCCL_SHM_DIR", str(tmp_path))
    monkeypatch.delenv("RINGCCL_SHM_JOB", raising=False)
    return tmp_path


def _pair():
    """Two ShmGroup ranks set up through an in-process all-gather (threads)."""
    box: list = [None, None]
    barrier = threading.Barrier(2, timeout=10)

    def exchange_of(rank):
        def exchange(obj):
            box[rank] = obj
            barrier.wait()
            got = list(box)
            barrier.wait()
            return got
        return exchange

    groups: list = [None, None]

    def make(rank):
        groups[rank] = shm.ShmGroup(rank, 2, exchange_of(rank), timeout=10.0)

    threads = [threading.Thread(target=make, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return groups


def _run(*fns):
    errors: list = []

    def guard(fn):
        try:
            fn()
        except BaseException as exc:   # noqa: BLE001  (re-raised in the test thread)
            errors.append(exc)

    threads = [threading.Thread(target=guard, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    if errors:
        raise errors[0]


def test_lazy_entry_skips_the_wait_and_leave_joins_a_growth(shm_dir):
    g0, g1 = _pair()
    _run(lambda: g0.enter(100), lambda: g1.enter(100))          # both agree: 64 KiB slots
    assert g0.work_slot == g1.work_slot == 1 << 16
    g0.enter(10, lazy=True)                   # fits: no wait for rank 1, which has not entered
    assert g0.lazy == 2 and g0.work_slot == 1 << 16
    # rank 1 needs more: it blocks in its entry until rank 0 leaves the call and joins
    _run(lambda: g1.enter(1 << 20, lazy=True), lambda: g0.leave())
    assert g0.work_slot == g1.work_slot == 1 << 20
    assert g0.work_serial == g1.work_serial == 2
    assert g0.retired == g1.retired == [(2, 1)]   # mapped while this call's sends may name it
    g0.drop_retired(), g1.drop_retired()
    assert list(g0.segments) == list(g1.segments) == [1, 2]   # still call 2
    g0.enter(10, lazy=True), g1.enter(10, lazy=True)
    g0.drop_retired(), g1.drop_retired()
    assert list(g0.segments) == list(g1.segments) == [2]
    _run(g0.leave, g1.leave)
    assert not os.listdir(shm_dir)
    g0.close(), g1.close()


def test_a_lazy_rank_joins_a_growth_inside_its_wait(shm_dir):
    g0, g1 = _pair()
    _run(lambda: g0.enter(100), lambda: g1.enter(100))
    word = g1.rank_word(1, 4)               # any word rank 1 writes after its growth: "ready"

    def rank0():
        g0.enter(10, lazy=True)
        # waits for rank 1, which waits for rank 0 to join its growth: joined inside the wait
        g0.wait_word(word, 2, 1, "attach segment 2")
        g0.leave()

    _run(rank0, lambda: g1.enter(1 << 20, lazy=True))
    assert g0.work_slot == g1.work_slot == 1 << 20 and g0.work_serial == g1.work_serial == 2
    # the next call: both fit, neither waits
    g0.enter(1 << 19, lazy=True), g1.enter(1 << 19, lazy=True)
    assert g0.lazy == g1.lazy == 3
    _run(g0.leave, g1.leave)
    g0.close(), g1.close()
    assert not os.listdir(shm_dir)
