"""ringccl.torch.launch.launch's safety rails: resources checked up front, workers
that die with their launcher (even on SIGKILL), Ctrl-C ending every worker with one line, one
line per failed worker."""

import os
import queue
import signal
import uuid

import pytest

pytest.importorskip("torch")
from .. import bounds  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

from ringccl.errors import ArgumentError, WorkerError  # noqa: E402
from ringccl.backends.torch import launch as launch_mod  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from . import workers  # noqa: E402
from .safety_helpers import (GONE_S, START_S, kill_all, marked, raise_on_rank_1,  # noqa: E402
                             raise_on_rank_1_while_peers_wait, start_launcher, wait_for)


def _started(directory, nproc):
    pids = {int(p.split(".")[0]) for p in os.listdir(directory) if p.endswith(".pid")}
    return pids if len(pids) == nproc else None


def test_sigkill_of_the_launcher_ends_every_worker(tmp_path):
    marker = uuid.uuid4().hex
    launcher = start_launcher("torch", str(tmp_path), "2", marker=marker)
    try:
        pids = wait_for(lambda: _started(tmp_path, 2), START_S)
        assert pids, "the workers did not start"
        launcher.kill()  # SIGKILL: no handler, no cleanup in the launcher
        launcher.wait()
        # wait until every worker is gone (the old condition returned at once while they were
        # still being killed, so a worker still exiting under load failed the test)
        wait_for(lambda: not (set(pids) & marked(marker)), GONE_S)
        still = set(pids) & marked(marker)
        assert not still, f"workers {sorted(still)} outlived their SIGKILLed launcher by " \
            f"{GONE_S:g} s"
    finally:
        kill_all(launcher, marker)


def test_ctrl_c_ends_every_worker_with_one_line(tmp_path):
    marker = uuid.uuid4().hex
    launcher = start_launcher("torch", str(tmp_path), "2", marker=marker)
    try:
        pids = wait_for(lambda: _started(tmp_path, 2), START_S)
        assert pids, "the workers did not start"
        os.killpg(launcher.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        out, err = launcher.communicate(timeout=bounds.job(60))
        assert launcher.returncode == 130, (out, err)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("interrupted: "), err
        assert "2 items received" in lines[0]  # the progress items that came before it
        assert "interrupted (Ctrl-C)" in lines[0], lines[0]   # says what ended it
        assert not marked(marker)
    finally:
        kill_all(launcher, marker)


def test_sigterm_ends_every_worker(tmp_path):
    marker = uuid.uuid4().hex
    launcher = start_launcher("torch", str(tmp_path), "2", marker=marker)
    try:
        assert wait_for(lambda: _started(tmp_path, 2), START_S)
        launcher.terminate()
        out, err = launcher.communicate(timeout=bounds.job(60))
        assert launcher.returncode == 130, (out, err)
        assert "Traceback" not in err, err
        assert not marked(marker)
    finally:
        kill_all(launcher, marker)


def test_too_many_processes_are_refused_before_any_starts():
    before = marked_children()
    # 100,000 torch workers (16 TB) fit no machine; today's code started them all
    with pytest.raises(ArgumentError, match=r"nproc=100000 .*at most .*oversubscribe=True"):
        launch(workers.exit_silently, 100_000)
    assert marked_children() == before


def marked_children() -> set[int]:
    """This process's live children."""
    import glob
    mine = set()
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(path) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            mine.add(int(path.split("/")[2]))
    return mine


def test_bad_ringccl_timeout_is_refused_in_the_parent(monkeypatch):
    monkeypatch.setenv("RINGCCL_TIMEOUT", "abc")
    with pytest.raises(ArgumentError, match="RINGCCL_TIMEOUT='abc'"):
        launch(workers.exit_silently, 2)


def test_a_worker_error_is_one_line_naming_rank_and_cause():
    with pytest.raises(WorkerError) as info:
        launch(raise_on_rank_1, 2, timeout=bounds.job(120))
    assert str(info.value) == "rank 1: ArgumentError: count=-1 must be an integer >= 0"
    assert info.value.rank == 1 and info.value.exc_type == "ArgumentError"
    assert "Traceback" in info.value.worker_traceback


def test_verbose_adds_the_worker_traceback():
    with pytest.raises(WorkerError, match=r"(?s)^rank 1: ArgumentError: .*\nTraceback"):
        launch(raise_on_rank_1, 2, timeout=bounds.job(120), verbose=True)


#: what gloo raises on a rank whose peer closed its connections as it failed
_GLOO_GONE = ("RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer "
              "[127.0.0.1]:5845. This is typically caused by a remote worker crashing.")


class _Results:
    """The launcher's result queue, replayed: the items in order, then nothing."""

    def __init__(self, items):
        self.items = list(items)

    def get(self, timeout=None):
        if not self.items:
            raise queue.Empty
        return self.items.pop(0)


class _Running:
    exitcode = None


def _failure(rank, cause):
    return (rank, False, (cause, cause.split(":")[0], f"Traceback ...\n{cause}\n"))


@pytest.mark.parametrize("first", [0, 1])
def test_the_reported_error_is_the_cause_not_a_peers_knock_on(first):
    """Ranks 0 and 1 report gloo's connection errors before rank 2 reports the argument error
    that made it close its connections: rank 2's error is the one raised."""
    knock_on = [_failure(r, _GLOO_GONE) for r in (0, 1)]
    peer = _failure(3, "PeerError: broadcast (direct): step 0: rank 2 is gone")
    cause = _failure(2, "ArgumentError: src=0 is not a member of the given process group")
    items = knock_on[first:] + [peer] + knock_on[:first] + [cause]
    with pytest.raises(WorkerError) as info:
        launch_mod._collect([_Running()] * 4, _Results(items), {}, 4, 60.0, False,
                            lambda: None, poll=0.01)
    assert str(info.value) == "rank 2: ArgumentError: src=0 is not a member of the given " \
        "process group"
    assert info.value.rank == 2 and info.value.exc_type == "ArgumentError"


def test_only_knock_on_errors_report_the_first():
    items = [_failure(1, _GLOO_GONE), _failure(0, "PeerError: rank 1 is gone")]
    with pytest.raises(WorkerError, match=r"^rank 1: RuntimeError: \[gloo"):
        launch_mod._collect([_Running()] * 2, _Results(items), {}, 2, 60.0, False,
                            lambda: None, poll=0.01)


def test_a_worker_error_is_named_before_its_peers_connection_errors():
    """Rank 1 fails while ranks 0, 2, 3 wait for it in a barrier, which fails there when rank 1
    closes its connections: the launcher names rank 1 and its argument error."""
    for _ in range(2):
        with pytest.raises(WorkerError) as info:
            launch(raise_on_rank_1_while_peers_wait, 4, timeout=bounds.job(120),
                   oversubscribe=True)
        assert str(info.value) == "rank 1: ArgumentError: count=-1 must be an integer >= 0"
