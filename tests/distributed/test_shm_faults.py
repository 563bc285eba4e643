"""Dead (os._exit, SIGKILL) and stopped (SIGSTOP) ranks over the shared-memory transport: every
survivor raises PeerError/RingcclTimeout naming step and peer within timeout + 5 s, nothing
hangs, no segment is left (faults.py; benchmarks/fault_injection.py --transport shm runs 60+)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from . import faults  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(300)]

TRIALS = faults.trials(seed=16, count=6, stall_every=3, transport="shm")


@pytest.mark.parametrize("trial", TRIALS,
                         ids=[f"{t.collective}-{t.algorithm}-n{t.world_size}-v{t.victim}"
                              f"-s{t.step}-{t.mode}" for t in TRIALS])
def test_dead_or_stopped_rank_over_shm(trial):
    outcome = faults.run(trial)
    assert not outcome.problems, outcome.problems
    assert outcome.survivors and all(rec["error"] for rec in outcome.survivors.values())


def test_dead_peer_is_found_before_the_timeout():
    trial = faults.Trial("all_reduce", "ring", 3, victim=1, step=1, mode="sigkill",
                         timeout=30.0, transport="shm")
    outcome = faults.run(trial)
    assert not outcome.problems, outcome.problems
    for rec in outcome.survivors.values():
        assert rec["error"]["type"] == "PeerError"
        assert rec["error"]["at"] - outcome.died_at < 5   # liveness, not the 30 s timeout


def _straggler(rank, world_size):
    import time

    import ringccl.torch as rt
    from ringccl.errors import RingcclTimeout

    rt.all_reduce(torch.ones(4))       # set-up (host identities, the segment) on every rank
    t = torch.arange(6, dtype=torch.float32) + rank
    if rank == 0:
        time.sleep(6)          # longer than rank 1's timeout=, shorter than the group's
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
    assert 1.4 <= waited <= 1.5 + 5
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


def test_a_call_after_a_failure_does_not_name_this_rank_as_the_peer():
    out = faults.run_ranks(_call_after_a_failure, 3, timeout=20)
    for rank in (0, 1):
        ok, errors = out[rank]
        assert ok and len(errors) == 2, (rank, errors)
        message, peer = errors[1]
        assert peer != rank and f"waiting for rank {rank}:" not in message, (rank, message)
        assert "aborted" in message, message
