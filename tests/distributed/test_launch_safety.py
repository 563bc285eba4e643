"""ringccl.torch.launch.launch's safety rails: resources checked up front, workers
that die with their launcher (even on SIGKILL), Ctrl-C ending every worker with one line, one
line per failed worker."""

import os
import signal
import uuid

import pytest

pytest.importorskip("torch")
from .. import bounds  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

from ringccl.errors import ArgumentError, WorkerError  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from . import workers  # noqa: E402
from .safety_helpers import (GONE_S, START_S, kill_all, marked, raise_on_rank_1,  # noqa: E402
                             start_launcher, wait_for)


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
