"""Dead (os._exit, SIGKILL) and stopped (SIGSTOP) ranks over the shared-memory transport: every
survivor raises PeerError/RingcclTimeout naming step and peer within timeout + 5 s, nothing
hangs, no segment is left (faults.py; benchmarks/fault_injection.py --transport shm runs 60+)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from .. import bounds  # noqa: E402
from . import faults  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(300))]

TRIALS = faults.trials(seed=16, count=6, stall_every=3, transport="shm")


@pytest.mark.parametrize("trial", TRIALS,
                         ids=[f"{t.collective}-{t.algorithm}-n{t.world_size}-v{t.victim}"
                              f"-s{t.step}-{t.mode}" for t in TRIALS])
def test_dead_or_stopped_rank_over_shm(trial):
    outcome = faults.run(trial)
    assert not outcome.problems, outcome.problems
    assert outcome.survivors and all(rec["error"] for rec in outcome.survivors.values())


def test_dead_peer_is_found_before_the_timeout():
    # a timeout far beyond what a loaded machine adds: found in less than half of it, the
    # death was seen (the peer's pid), not waited out
    trial = faults.Trial("all_reduce", "ring", 3, victim=1, step=1, mode="sigkill",
                         timeout=max(30.0, 4 * bounds.slack()), transport="shm")
    outcome = faults.run(trial)
    assert not outcome.problems, outcome.problems
    for rec in outcome.survivors.values():
        assert rec["error"]["type"] == "PeerError"
        assert rec["error"]["at"] - outcome.died_at < trial.timeout / 2   # liveness


def _straggler(rank, world_size):
    import time

    import ringccl.torch as rt
    from ringccl.errors import RingcclTimeout

    rt.all_reduce(torch.ones(4))       # set-up (host identities, the segment) on every rank
    t = torch.arange(6, dtype=torch.float32) + rank
    if rank == 0:
        # longer than rank 1's timeout= and what a loaded machine adds, shorter than the group's
        time.sleep(1.5 + 2 * bounds.slack())
        return "slept"
    start = time.monotonic()
    try:
        rt.all_reduce(t, timeout=1.5)
    except RingcclTimeout as exc:
        return (time.monotonic() - start, str(exc), exc.peer, exc.step,
                torch.equal(t, torch.arange(6, dtype=torch.float32) + rank))
    return "no error"


def test_timeout_argument_bounds_the_shm_waits():
    out = faults.run_ranks(_straggler, 2, timeout=30)
    ok, value = out[1]
    assert ok, value
    waited, message, peer, step, unchanged = value
    assert 1.4 <= waited <= 1.5 + bounds.slack()
    assert peer == 0 and step == 0 and "timed out after 1.5 s" in message
    assert "direct all_reduce" in message and "waiting for rank 0" in message
    assert unchanged


@pytest.mark.parametrize("world_size", [3, 4])
def test_a_peer_dying_after_final_receives_landed_leaves_the_tensor_as_it_was(world_size):
    # two_shot's all-gather receives land in the caller's tensor also with restore=True (the
    # slot keeps its bytes: ringccl.engine.staged.PlanRanges.restorable); the last rank dies
    # before its all-gather sends, after the others' have landed: they are put back
    trial = faults.Trial("all_reduce", "two_shot", world_size, victim=world_size - 1, step=1,
                         mode="sigkill", timeout=20.0, transport="shm", count=4096 * world_size)
    outcome = faults.run(trial)
    assert not outcome.problems, outcome.problems
    assert all(rec["error"]["unchanged"] for rec in outcome.survivors.values())


def _call_after_a_failure(rank, world_size):
    import ringccl.torch as rt
    from ringccl.errors import PeerError

    rt.all_reduce(torch.ones(4))       # set-up on every rank
    if rank == world_size - 1:
        return "left"                  # its process ends here (faults.run_ranks), between calls
    errors = []
    for _ in range(2):                 # the failed call, then one more on the broken group
        try:
            rt.all_reduce(torch.ones(8), timeout=10)
        except PeerError as exc:
            errors.append((str(exc), exc.peer))
    return errors


def _dies_before_the_first_call(rank, world_size):
    import ringccl.torch as rt
    from ringccl.errors import PeerError

    if rank == world_size - 1:
        return "left"                  # its process ends before the group's first shm call
    try:
        rt.all_reduce(torch.ones(8), algorithm="direct", transport="shm")
    except PeerError as exc:
        time.sleep(bounds.slack())     # not gone before a slower survivor looked
        return type(exc).__name__, str(exc), exc.peer, exc.step, exc.collective
    return "no error"


def test_a_peer_gone_at_the_first_call_is_named_with_the_call():
    """The group's first shared-memory call sets it up with exchanges over the group (gloo's
    all_gather): a peer gone there is a PeerError naming the call, step 0 and the peer, as a
    failure inside a call is, not gloo's RuntimeError."""
    out = faults.run_ranks(_dies_before_the_first_call, 3, timeout=20)
    for rank in (0, 1):
        ok, value = out[rank]
        assert ok and value != "no error", (rank, value)
        kind, message, peer, step, collective = value
        assert kind == "PeerError" and peer == 2 and step == 0, value
        assert collective == "all_reduce" and "direct all_reduce" in message, message
        assert "setting up the group's shared memory" in message, message
        assert "waiting for rank 2" in message, message


def test_a_call_after_a_failure_does_not_name_this_rank_as_the_peer():
    out = faults.run_ranks(_call_after_a_failure, 3, timeout=20)
    for rank in (0, 1):
        ok, errors = out[rank]
        assert ok and len(errors) == 2, (rank, errors)
        message, peer = errors[1]
        assert peer != rank and f"waiting for rank {rank}:" not in message, (rank, message)
        assert "aborted" in message, message
