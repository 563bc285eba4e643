"""ringccl.torch's compiled shared-memory lane (ringccl.backends.shm.lane) on real processes:
bitwise equal to the general path (the lane switched off) over world sizes 2-4, counts 0, 1,
< N, not divisible and either side of the one-shot/two-shot crossover, dtypes, the five ops
and several algorithms, with lane and general calls alternating; a peer that dies or stalls
before a replayed call reported as a PeerError / RingcclTimeout naming step and peer, the
tensor as it was."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from .. import bounds  # noqa: E402
from . import faults  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


def _off_on(x, op, algorithm, restore=None) -> list:
    """The bytes of ``x`` all-reduced over shm with the lane off, on (compiling), on, off, on."""
    import ringccl.torch as rt
    from ringccl.backends.shm import lane

    results = []
    for on in (False, True, True, False, True):
        lane.set_enabled(on)
        y = x.clone()
        rt.all_reduce(y, op=op, algorithm=algorithm, transport="shm", restore=restore)
        results.append(y.view(torch.uint8).numpy().tobytes() if x.numel() else b"")
    lane.set_enabled(True)
    return results


def _bitwise(rank, world_size):
    from ringccl.backends.shm import lane
    from ringccl.costmodel import choice

    gen = torch.Generator().manual_seed(rank)
    cross = choice.two_shot_bytes(world_size, "torch")
    problems, digests = [], []
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.float64):
        size = torch.empty(0, dtype=dtype).element_size()
        counts = (0, 1, world_size - 1, 7 * world_size + 3, 1001, cross // size - 1,
                  cross // size + 1)
        for algorithm in (None, "direct", "two_shot", "ring"):
            for count in counts:
                for op in ("sum", "product", "min", "max", "avg"):
                    if op == "avg" and not dtype.is_floating_point:
                        continue
                    x = (torch.randn(count, generator=gen) * 3).to(dtype)
                    results = _off_on(x, op, algorithm)
                    if any(r != results[0] for r in results):
                        problems.append(f"lane differs: {dtype} {algorithm} {count} {op}")
                    digests.append(hash(results[-1]))
    return problems, digests, lane.compiled()


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_the_lane_gives_the_general_paths_bits(world_size):
    out = faults.run_ranks(_bitwise, world_size, timeout=bounds.job(120))
    assert len(out) == world_size, out
    values = []
    for rank in range(world_size):
        ok, value = out[rank]
        assert ok, value
        problems, digests, compiled = value
        assert not problems, problems[:5]
        assert compiled > 0
        values.append(digests)
    assert all(v == values[0] for v in values)   # the same bytes on every rank


def _native(rank, world_size):
    import numpy as np

    import ringccl.torch as rt
    from ringccl.backends.shm import lane, lane_native

    gen = torch.Generator().manual_seed(100 + rank)
    problems, digests = [], []
    before = lane_native.native_runs()
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 3e38])
    for dtype in (torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
                  torch.int64, torch.uint8):
        ops = ("sum", "product", "min", "max") + (("avg",) if dtype.is_floating_point else ())
        for count in (0, 1, world_size - 1, 7 * world_size + 3, 1001, 3000):
            for op in ops:
                if dtype.is_floating_point:
                    x = (torch.randn(count, generator=gen) * 3).to(dtype)
                    pick = torch.rand(count, generator=gen) < 0.3
                    x[pick] = special[torch.randint(0, 6, (int(pick.sum()),),
                                                    generator=gen)].to(dtype)
                else:   # the whole range: sums and products overflow
                    info = torch.iinfo(dtype)
                    x = torch.randint(info.min, info.max, (count,), generator=gen, dtype=dtype)
                results = []
                for on, native in ((False, True), (True, True), (True, True), (True, False),
                                   (False, True), (True, True)):
                    lane.set_enabled(on)
                    lane.set_native(native)
                    y = x.clone()
                    rt.all_reduce(y, op=op, transport="shm")
                    results.append(y.view(torch.uint8).numpy().tobytes() if count else b"")
                lane.set_enabled(True)
                lane.set_native(True)
                # C (2, 5) and Python (3) replays bitwise; against the general path and
                # across ranks bitwise too (the IR's operand order), but a float sum's or
                # product's NaN is any NaN (tests/mpi/lane_script.py, _same)
                if any(r != results[2] for r in results[2:]):
                    problems.append(f"the C and Python replays differ: {dtype} {count} {op}")
                a = np.frombuffer(results[2], y.numpy().dtype) if count else np.zeros(0)
                b = np.frombuffer(results[0], y.numpy().dtype) if count else np.zeros(0)
                if a.dtype.kind == "f" and op not in ("min", "max"):
                    a, b = a.copy(), b.copy()
                    a[np.isnan(a)] = b[np.isnan(b)] = np.nan
                if a.tobytes() != b.tobytes():
                    problems.append(f"replays differ from the general path: {dtype} {count} {op}")
                digests.append(a.tobytes())
    return problems, digests, lane_native.native_runs() - before


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_c_and_python_replays_give_the_general_paths_bits(world_size):
    out = faults.run_ranks(_native, world_size, timeout=bounds.job(180))
    assert len(out) == world_size, out
    for rank in range(world_size):
        ok, value = out[rank]
        assert ok, value
        problems, digests, native_runs = value
        assert not problems, problems[:5]
        assert native_runs > 0   # the C loop ran (the extension is built in CI)
        assert digests == out[0][1][1]


def _peer_fails(rank, world_size, how, timeout):
    import time

    import ringccl.torch as rt
    from ringccl.backends.shm import lane
    from ringccl.errors import PeerError

    t = torch.arange(6, dtype=torch.float32) + rank
    rt.all_reduce(t, timeout=timeout)      # compiles the lane on every rank
    if rank == world_size - 1:
        if how == "stall":
            time.sleep(timeout + 3 * bounds.slack())
            return "slept"
        return "left"                      # its process ends here, between calls
    before = t.clone()
    start = time.monotonic()
    try:
        rt.all_reduce(t, timeout=timeout)  # replayed
    except PeerError as exc:
        return (time.monotonic() - start, type(exc).__name__, str(exc), exc.peer, exc.step,
                torch.equal(t, before), lane.compiled(native=True))
    return "no error"


@pytest.mark.parametrize("how", ["dies", "stall"])
def test_a_failing_peer_during_a_replayed_call_names_step_and_peer(how):
    # a stall's timeout is short, its slack added to the compiling call's wait for the peers'
    # start; a death must be found by the peer's liveness, well before a long timeout
    timeout = round(3 + bounds.slack(), 1) if how == "stall" else round(bounds.job(60), 1)
    out = faults.run_ranks(_peer_fails, 2, how, timeout, timeout=timeout)
    ok, value = out[0]
    assert ok and value != "no error", value
    waited, kind, message, peer, step, unchanged, compiled = value
    assert compiled > 0   # the failing call was a replay in C
    assert peer == 1 and step == 0, message
    assert "direct all_reduce" in message and "from rank 1" in message, message
    assert unchanged
    if how == "stall":
        assert kind == "RingcclTimeout" and f"timed out after {timeout:g} s" in message, message
        assert waited <= timeout + bounds.slack()
    else:
        assert kind == "PeerError" and "died" in message, message
        assert waited < timeout   # the peer's liveness, not the timeout


def _group_freed(rank, world_size):
    import gc
    import weakref

    import torch.distributed as dist

    import ringccl.torch as rt
    from ringccl.backends.shm import lane

    pg = dist.new_group(list(range(world_size)), backend="gloo")
    t = torch.ones(4)
    rt.all_reduce(t, group=pg, transport="shm")    # compiles
    rt.all_reduce(t, group=pg, transport="shm")    # replays
    compiled = lane.compiled()
    ref = weakref.ref(pg)
    dist.destroy_process_group(pg)
    del pg
    gc.collect()
    return compiled, ref() is None, t.tolist()


def test_a_compiled_lane_does_not_keep_its_process_group_alive():
    # a group kept alive keeps gloo's threads running into the interpreter's exit
    out = faults.run_ranks(_group_freed, 2, timeout=bounds.job(30))
    for rank in range(2):
        ok, value = out[rank]
        assert ok, value
        compiled, freed, values = value
        assert compiled > 0 and values == [4.0] * 4
        assert freed


def _process_group_bitwise(rank, world_size):
    import hashlib

    import torch.distributed as dist

    from ringccl.backends.shm import lane

    gen = torch.Generator().manual_seed(rank)
    problems, digests = [], []
    ops = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for count in (0, 1, world_size - 1, 7 * world_size + 3, 1001, 20000):
            for name, op in ops.items():
                if name == "avg" and not dtype.is_floating_point:
                    continue
                x = (torch.randn(count, generator=gen) * 3).to(dtype)
                results = []
                for on in (False, True, True, False, True):
                    lane.set_enabled(on)
                    y = x.clone()
                    dist.all_reduce(y, op=op)
                    results.append(y.view(torch.uint8).numpy().tobytes() if count else b"")
                lane.set_enabled(True)
                if any(r != results[0] for r in results):
                    problems.append(f"lane differs: {dtype} {count} {name}")
                digests.append(hashlib.sha1(results[-1]).hexdigest())   # not hash(): salted
    return {"problems": problems, "digests": digests, "compiled": lane.compiled()}


@pytest.mark.parametrize("world_size", [2, 3])
def test_dist_all_reduce_on_the_ringccl_backend_replays_the_same_bits(world_size):
    from ringccl.torch.launch import launch

    runs = launch(_process_group_bitwise, world_size, backend="ringccl",
                  timeout=bounds.job(300))
    for r in runs:
        assert not r["problems"], r["problems"][:5]
        assert r["compiled"] > 0
    assert all(r["digests"] == runs[0]["digests"] for r in runs)   # every rank's bytes


def _in_place(rank, world_size):
    import hashlib

    import ringccl
    from ringccl.backends.shm import lane, lane_native, peer_memory

    peer_memory.MIN_BYTES = 4096   # calls of some KiB send in place (the C loop's sends)
    ringccl.clear_caches()
    gen = torch.Generator().manual_seed(300 + rank)
    problems, digests = [], []
    before = lane_native.native_runs()
    for dtype in (torch.float32, torch.float64, torch.int64):
        size = torch.empty(0, dtype=dtype).element_size()
        for count in ((4096 * world_size) // size + 5, (3 << 15) // size + 7):
            for algorithm in (None, "two_shot"):
                for op in ("sum", "product", "min", "max"):
                    x = (torch.randn(count, generator=gen) * 3).to(dtype)
                    results = _off_on(x, op, algorithm)
                    if any(r != results[0] for r in results):
                        problems.append(f"differs: {dtype} {algorithm} {count} {op}")
                    digests.append(hashlib.sha1(results[-1]).hexdigest())
    lanes = [e.lane for e in lane._lanes.values() if e is not lane._INELIGIBLE]
    direct = sum(1 for one in lanes for sends, _ in one.steps for s in sends if s[7])
    return problems, digests, direct, lane_native.native_runs() - before


def _agree(out: dict, world_size: int) -> list:
    """Every rank's ``(problems, digests, *counts)`` from ``out``: no problem, every rank's
    digests rank 0's; the ranks' counts."""
    counts = []
    for rank in range(world_size):
        ok, value = out[rank]
        assert ok, value
        problems, digests, *more = value
        assert not problems, problems[:5]
        assert digests == out[0][1][1]
        counts.append(more)
    return counts


@pytest.mark.parametrize("world_size", [2, 3])
def test_sends_read_in_place_give_the_general_paths_bits(world_size):
    out = faults.run_ranks(_in_place, world_size, timeout=bounds.job(180))
    for direct, native_runs in _agree(out, world_size):
        assert direct > 0 and native_runs > 0   # sent in place, by the C loop


def _threaded(rank, world_size):
    import hashlib
    import os

    import ringccl
    from ringccl.backends.shm import _lanec, lane_native, peer_memory

    os.environ["RINGCCL_SHM_THREADS"] = "3"   # large operations split over three threads
    gen = torch.Generator().manual_seed(400 + rank)
    problems, digests = [], []
    before = lane_native.native_runs()
    for min_bytes in (1 << 40, 4096):   # sends copied to the slot, then read in place
        peer_memory.MIN_BYTES = min_bytes
        ringccl.clear_caches()
        for dtype in (torch.float32, torch.float64):
            size = torch.empty(0, dtype=dtype).element_size()
            # two_shot's and ring's chunks just over two parts (_lanec.PART_BYTES) each
            count = (2 * _lanec.PART_BYTES * world_size) // size + 7
            for algorithm in ("direct", "two_shot", "ring"):
                for op in ("sum", "max"):
                    x = (torch.randn(count, generator=gen) * 3).to(dtype)
                    x[rank::997] = float("nan")   # NaN from either rank, or both
                    # not all-or-nothing: a call this large runs the lane only without
                    # the rollback copy (lane.RESTORE_MAX_BYTES)
                    results = _off_on(x, op, algorithm, restore=False)
                    if any(r != results[0] for r in results):
                        problems.append(f"differs: {min_bytes} {dtype} {algorithm} {op}")
                    digests.append(hashlib.sha1(results[-1]).hexdigest())
    return problems, digests, _lanec.workers(), lane_native.native_runs() - before


@pytest.mark.parametrize("world_size", [2, 3])
def test_operations_split_over_threads_give_the_general_paths_bits(world_size):
    out = faults.run_ranks(_threaded, world_size, timeout=bounds.job(240))
    for workers, native_runs in _agree(out, world_size):
        assert workers == 2 and native_runs > 0   # split, by the C loop


def _restore_cap(rank, world_size):
    import ringccl
    import ringccl.torch as rt
    from ringccl.backends.shm import lane

    ringccl.clear_caches()
    counts = []
    cap = lane.RESTORE_MAX_BYTES
    for nbytes, restore in ((cap + 64, None), (cap + 64, False), (cap, None)):
        x = torch.full((nbytes // 4,), float(rank + 1))
        for _ in range(3):
            y = x.clone()
            rt.all_reduce(y, transport="shm", restore=restore)
            assert torch.equal(y, torch.full_like(x, world_size * (world_size + 1) / 2))
        counts.append(lane.compiled())
    return counts


def test_an_all_or_nothing_call_beyond_the_cap_runs_the_general_path():
    out = faults.run_ranks(_restore_cap, 2, timeout=bounds.job(120))
    for rank in range(2):
        ok, value = out[rank]
        assert ok, value
        assert value == [0, 1, 2]   # not compiled; compiled without the rollback; at the cap


def _dies_while_read(rank, world_size, timeout, threads):
    import os
    import threading
    import time

    import ringccl
    import ringccl.torch as rt
    from ringccl.backends.shm import _lanec, lane, peer_memory
    from ringccl.backends.shm.group import process_alive
    from ringccl.errors import PeerError

    peer_memory.MIN_BYTES = 4096
    ringccl.clear_caches()
    # threads: the read split over them (halves of 2 parts), not all-or-nothing at that size
    os.environ["RINGCCL_SHM_THREADS"] = str(threads)
    count = 4 * _lanec.PART_BYTES // 4 if threads > 1 else 1 << 14
    kw = dict(algorithm="two_shot", timeout=timeout, restore=False if threads > 1 else None)
    t = torch.arange(count, dtype=torch.float32) + rank
    rt.all_reduce(t, **kw)   # compiles the lane
    one = next(e.lane for e in lane._lanes.values() if e is not lane._INELIGIBLE)
    g, posted = one.group, one.group.posted_word(1, 0)
    sent = one.transport.expected[1] if rank == 0 else one.transport.sent[0]
    if rank == 1:
        # its replayed call sends in place at once, then waits for rank 0's send: the process
        # ends during that wait, its send posted and never read
        def end():
            while g.w[posted] <= sent:
                time.sleep(0.001)
            os._exit(0)
        threading.Thread(target=end, daemon=True).start()
        rt.all_reduce(t, **kw)
        return "not ended"
    deadline = time.monotonic() + timeout
    while (g.w[posted] <= sent or process_alive(g.pids[1])) and time.monotonic() < deadline:
        time.sleep(0.01)   # until rank 1 posted its send and is gone
    before = t.clone()
    try:
        rt.all_reduce(t, **kw)
    except PeerError as exc:
        return (type(exc).__name__, str(exc), exc.peer, exc.step, torch.equal(t, before),
                _lanec.workers())
    return "no error"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_peer_gone_before_its_send_is_read_in_place_is_named(threads):
    timeout = round(bounds.job(60), 1)
    out = faults.run_ranks(_dies_while_read, 2, timeout, threads, timeout=timeout, report=[0])
    ok, value = out[0]
    assert ok and value != "no error", value
    kind, message, peer, step, unchanged, workers = value
    assert kind == "PeerError" and peer == 1 and step == 0, message
    assert "from rank 1" in message and "is gone" in message and "in place" in message, message
    assert workers == threads - 1   # the read split over the threads asked for
    # ringccl.torch's all-or-nothing call: the tensor as it was
    assert unchanged or threads > 1
