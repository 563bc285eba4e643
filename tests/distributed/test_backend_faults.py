"""The ringccl backend started as torchrun starts ranks (env://), with an explicit store, and a
rank killed mid-collective. Plain subprocesses, so a dead rank is a real dead process.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from ringccl.torch.launch import free_port  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(300))]

#: the survivors' waits' bound (RINGCCL_TIMEOUT); the group's own is generous (bounds)
WAIT_S = 10

SCRIPT = Path(__file__).with_name("backend_script.py")
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _leftover(reports) -> list:
    """Entries of the shm directory that belong to the reported groups' segments."""
    uids = {u for r in reports for u in r.get("uid", [])}
    directory = os.environ.get("RINGCCL_SHM_DIR", "/dev/shm")
    return [f for f in os.listdir(directory) if any(u in f for u in uids)]


def _run(mode: str, world_size: int, hosts=None) -> list:
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), GLOO_SOCKET_IFNAME="lo",
                   OMP_NUM_THREADS="1", RINGCCL_TIMEOUT=str(WAIT_S), **bounds.environment(),
                   PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if hosts:
            env["RINGCCL_HOST_ID"] = hosts[rank]
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), mode], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    reports = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=bounds.job(120))
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            reports.append(json.loads(lines[-1]) if lines else {"exit": p.returncode,
                                                               "stderr": err[-2000:]})
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return reports


#: RINGCCL_HOST_ID per rank for each transport "auto" picks on 4 ranks: one host, 2 "hosts" x
#: 2 ranks (shm inside, gloo across), and 4 "hosts" of one rank (gloo point-to-point)
HOSTS = {"shm": None, "hybrid": ["a", "a", "b", "b"], "p2p": ["a", "b", "c", "d"]}


def test_env_init_as_torchrun_and_host_identity():
    hosts = ["hostA", "hostA", "hostB", "hostB"]   # one machine split into 2 "hosts"
    reports = _run("env", 4, hosts)
    for rank, r in enumerate(reports):
        assert r.get("sum") == 6.0, r
        assert r["backend"] == "ringccl" and r["hosts"] == hosts
        assert r["transport"] == "hybrid"   # 2 "hosts" x 2: shm inside, gloo across
    # one segment per "host", each mapped by its two ranks only
    uids = [tuple(r["uid"]) for r in reports]
    assert uids[0] == uids[1] and uids[2] == uids[3] and uids[0] != uids[2], uids
    assert _leftover(reports) == []
    reports = _run("env", 4, HOSTS["p2p"])
    assert [(r.get("sum"), r["transport"], r["uid"]) for r in reports] == [(6.0, "p2p", [])] * 4


def test_explicit_store():
    reports = _run("store", 2)
    assert [r.get("sum") for r in reports] == [1.0, 1.0], reports
    # one host: shared memory, one segment for the group, freed by destroy_process_group
    assert [r["transport"] for r in reports] == ["shm", "shm"]
    assert len({u for r in reports for u in r["uid"]}) == 1
    assert [r["shm_states_after_destroy"] for r in reports] == [0, 0]
    assert _leftover(reports) == []


@pytest.mark.parametrize("transport", sorted(HOSTS))
def test_killed_rank_survivors_raise_within_the_timeout(transport):
    reports = _run("kill", 4, HOSTS[transport])
    assert reports[3].get("exit") == 17
    for r in reports[:3]:
        assert "raised" in r, r
        assert r["transport"] == transport, r
        assert r["seconds"] < WAIT_S + bounds.slack(), r   # the waits' bound, and a loaded machine
    assert _leftover(reports[:3]) == []


@pytest.mark.parametrize("transport", sorted(HOSTS))
def test_killed_rank_fails_the_survivors_barrier_naming_it(transport):
    reports = _run("kill_barrier", 4, HOSTS[transport])
    assert reports[3].get("exit") == 17
    for r in reports[:3]:
        raised = r.get("raised", "")
        assert r["transport"] == transport, r
        assert raised.startswith(("PeerError: ", "RingcclTimeout: ")), r
        # across "hosts" a survivor may be waiting for another survivor that failed (or left)
        # first: the peer it names is the one it waited for
        assert ("rank 3" in raised) if transport == "shm" else re.search(r"rank \d", raised), r
        assert r["seconds"] < WAIT_S + bounds.slack(), r
    assert _leftover(reports[:3]) == []


@pytest.mark.parametrize("mode, transport", [("kill_ddp", "shm"), ("kill_ddp", "p2p"),
                                             ("kill_ddp_hook", "shm")])
def test_a_rank_gone_mid_training_fails_ddps_backward_naming_it(mode, transport):
    # DDP's reducer reads each bucket's future in C++: a failed collective must reach it as
    # the future's error (a RuntimeError naming the peer), not as a value (SIGSEGV; with
    # ringccl's comm hook, "Unable to cast ... to Tensor")
    reports = _run(mode, 3, HOSTS[transport][:3] if HOSTS[transport] else None)
    assert reports[2].get("exit") == 17
    for r in reports[:2]:
        assert "exit" not in r, r   # the survivor reported: no crash
        raised = r.get("raised", "")
        assert re.search(r"(PeerError|RingcclTimeout)", raised) and re.search(r"rank \d",
                                                                               raised), r
        assert "Unable to cast" not in raised, r
        assert r["seconds"] < WAIT_S + bounds.slack(), r


def test_a_rank_gone_before_the_first_call_is_named_with_the_call():
    # the group's first call sets its shared memory up through the inner gloo group: a rank
    # gone then is a PeerError naming the call, step 0 and the rank (its pid was exchanged
    # when the group was made), not gloo's RuntimeError
    reports = _run("kill_first", 3)
    assert reports[2].get("exit") == 17
    for r in reports[:2]:
        assert r["transport"] == "shm", r
        raised = r.get("raised", "")
        assert raised.startswith("PeerError: ") and "all_reduce" in raised, r
        assert "at step 0" in raised and "setting up the group's shared memory" in raised, r
        assert "waiting for rank 2" in raised, r


@pytest.mark.parametrize("transport", sorted(HOSTS))
def test_killed_rank_inline_call_fails_the_survivors_work(transport):
    # 4 KiB all_reduces: the dispatch policy runs them in the caller's thread; the failure
    # must reach the Work's wait(), as the worker's does
    reports = _run("kill_small", 4, HOSTS[transport])
    assert reports[3].get("exit") == 17
    for r in reports[:3]:
        assert "raised" in r, r
        assert r["transport"] == transport, r
        assert 4096 <= r["inline_bytes"], r
        assert r["complete_on_return"] is True, r   # ran inline: the Work came back complete
        assert r["seconds"] < WAIT_S + bounds.slack(), r   # the failing call
    assert _leftover(reports[:3]) == []


class _Store:
    """The store calls _absent_peer makes (check, get), with keys that appear at given times."""

    def __init__(self, appear: dict):
        self.t0, self.appear = time.monotonic(), appear   # key -> (after s, value)

    def _there(self, key) -> bool:
        at = self.appear.get(key)
        return at is not None and time.monotonic() - self.t0 >= at[0]

    def check(self, keys) -> bool:
        return all(self._there(k) for k in keys)

    def get(self, key) -> bytes:
        return str(self.appear[key][1]).encode()


def test_the_absent_peer_is_the_one_that_never_came_not_a_late_live_one():
    from ringccl.backends.torch import shm

    key = shm._PID_KEY.format
    # rank 1 asks: rank 0 is alive and reaches the set-up 0.3 s late; rank 2 never comes
    late = _Store({key(0): (0.3, os.getpid())})
    assert shm._absent_peer(late, 1, 3, grace_s=2.0) == 2
    # everyone came: the first whose process is gone (a pid above Linux's largest, 2^22)
    gone = _Store({key(0): (0.0, 2 ** 22 + 12345), key(2): (0.0, os.getpid())})
    assert shm._absent_peer(gone, 1, 3, grace_s=2.0) == 0
    # one that never came goes before one gone since (a survivor that left meanwhile)
    assert shm._absent_peer(_Store({key(0): (0.0, 2 ** 22 + 12345)}), 1, 3, grace_s=0.2) == 2
    # everyone there and alive: nobody is named
    assert shm._absent_peer(_Store({key(0): (0, os.getpid()), key(2): (0, os.getpid())}),
                            1, 3, grace_s=0.1) is None
