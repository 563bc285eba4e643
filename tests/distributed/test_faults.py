"""Dead and stalled peers, mismatched calls, timeouts: every survivor gets a named error.

Trials fork local gloo processes (see faults.py); benchmarks/fault_injection.py runs 50+.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from .. import bounds  # noqa: E402
from . import faults  # noqa: E402

pytestmark = pytest.mark.timeout(bounds.job(300))

# a fixed CI profile: every (collective, algorithm) pair once over the seeds, some stalls
CI_TRIALS = faults.trials(seed=2026, count=36, stall_every=12)


@pytest.mark.parametrize("trial", CI_TRIALS,
                         ids=[f"{t.collective}-{t.algorithm}-n{t.world_size}-v{t.victim}"
                              f"-s{t.step}-{t.mode}" for t in CI_TRIALS])
def test_dead_or_stalled_rank(trial):
    outcome = faults.run(trial)
    assert not outcome.problems, outcome.problems
    assert outcome.survivors and all(rec["error"] for rec in outcome.survivors.values())


def test_stall_raises_timeout_naming_step_and_peer():
    trial = faults.Trial("all_reduce", "ring", 3, victim=1, step=1, mode="stall", timeout=3.0)
    outcome = faults.run(trial)
    assert not outcome.problems, outcome.problems
    # rank 2 receives from rank 1 in the ring: it waits the full timeout, then names rank 1
    err = outcome.survivors[2]["error"]
    assert err["type"] == "RingcclTimeout"
    assert err["peer"] == 1 and err["step"] >= 1
    assert "timed out" in err["message"] and "from rank 1" in err["message"]
    assert 2.5 <= err["at"] - outcome.died_at <= trial.timeout + bounds.slack()


def _timeout_argument(rank, world_size):
    import ringccl.torch as rt
    from ringccl.errors import RingcclTimeout

    t = torch.arange(6, dtype=torch.float32) + rank
    if rank == 0:
        # a straggler: longer than rank 1's timeout= and what a loaded machine adds, shorter
        # than the group's
        time.sleep(1.5 + 2 * bounds.slack())
        return "slept"
    start = time.monotonic()
    try:
        # p2p: the first call over "auto" exchanges host identities through the group, which
        # only the group's timeout bounds (test_shm_faults.py has the shm straggler)
        rt.all_reduce(t, timeout=1.5, transport="p2p")
    except RingcclTimeout as exc:
        return (time.monotonic() - start, str(exc), exc.peer,
                torch.equal(t, torch.arange(6, dtype=torch.float32) + rank))
    return "no error"


def test_timeout_argument_bounds_every_wait():
    out = faults.run_ranks(_timeout_argument, 2, timeout=30)
    ok, value = out[1]
    assert ok, value
    waited, message, peer, unchanged = value
    assert 1.4 <= waited <= 1.5 + bounds.slack()
    assert peer == 0 and "timed out after 1.5 s" in message and "ring all_reduce" in message
    assert unchanged, "the tensor must be restored after the timeout"


def _mismatch(rank, world_size, case):
    import ringccl.torch as rt
    from ringccl.errors import ConsistencyError

    t = torch.ones(12 if case != "count" or rank else 24)
    kw = {}
    if case == "op":
        kw["op"] = "max" if rank == 1 else "sum"
    if case == "dtype" and rank == 2:
        t = t.double()
    if case == "algorithm":
        kw["algorithm"] = "tree" if rank == 0 else "ring"
    try:
        if case == "collective" and rank == 1:
            rt.broadcast(t, src=0, check=True)
        elif case == "sequence":
            if rank == 0:
                rt.all_reduce(torch.ones(3), check=True)  # rank 0 makes one call more
                return "extra call went through"
            rt.all_reduce(t, check=True)
        else:
            rt.all_reduce(t, check=True, **kw)
    except ConsistencyError as exc:
        return str(exc)
    return "no error"


@pytest.mark.parametrize("case,expected", [
    ("count", "count differs: rank 0: 24; ranks 1, 2: 12"),
    ("op", "op differs: ranks 0, 2: 'sum'; rank 1: 'max'"),
    ("dtype", "dtype differs: ranks 0, 1: 'float32'; rank 2: 'float64'"),
    ("algorithm", "algorithm differs: rank 0: 'tree'; ranks 1, 2: 'ring'"),
    ("collective", "collective differs: ranks 0, 2: 'all_reduce'; rank 1: 'broadcast'"),
])
def test_mismatched_calls_raise_the_same_error_on_every_rank(case, expected):
    out = faults.run_ranks(_mismatch, 3, case, timeout=10)
    assert sorted(out) == [0, 1, 2], f"ranks missing (hang): {out}"
    messages = {r: value for r, (ok, value) in out.items()}
    assert all(ok for ok, _ in out.values()), messages
    assert len(set(messages.values())) == 1, messages
    assert expected in messages[0], messages[0]


def _split_mismatch(rank, world_size):
    import ringccl.torch as rt
    from ringccl.errors import ConsistencyError

    ins = [1, 2] if rank == 0 else [3, 1]
    outs = [1, 3] if rank == 0 else [1, 1]       # rank 1 expects 1 from rank 0, which sends 2
    try:
        rt.all_to_all_single(torch.empty(sum(outs)), torch.ones(sum(ins)), outs, ins,
                             check=True)
    except ConsistencyError as exc:
        return str(exc)
    return "no error"


def test_mismatched_split_sizes_are_named():
    out = faults.run_ranks(_split_mismatch, 2, timeout=10)
    values = [v for _, v in out.values()]
    assert len(out) == 2 and len(set(values)) == 1, out
    assert "rank 0 sends 2 elements to rank 1 (input_split_sizes[1])" in values[0]
    assert "rank 1 expects 1 from rank 0 (output_split_sizes[0])" in values[0]


def _debug_env(rank, world_size):
    import os

    import ringccl.torch as rt
    from ringccl.errors import ConsistencyError

    os.environ["RINGCCL_DEBUG"] = "1"
    try:
        rt.all_reduce(torch.ones(4 + rank))
    except ConsistencyError as exc:
        return str(exc)
    return "no error"


def test_ringccl_debug_env_turns_the_check_on():
    out = faults.run_ranks(_debug_env, 2, timeout=10)
    assert all(ok and "count differs" in v for ok, v in out.values()), out
