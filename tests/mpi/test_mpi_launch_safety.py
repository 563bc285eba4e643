"""ringccl.mpi.launch.launch_bench's safety rails: mpirun and its ranks end with a
SIGKILLed launcher; Ctrl-C ends them with one line and keeps the rows received; a job killed
(mpirun and its ranks at once, or through its launcher) leaves nothing in /dev/shm; mpi4py and
RINGCCL_TIMEOUT are checked before mpirun starts."""

import os
import shutil
import signal
import subprocess
import uuid

import pytest

pytest.importorskip("mpi4py")
from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.skipif(shutil.which("mpirun") is None and shutil.which("mpiexec")
                                 is None, reason="no MPI launcher"),
              pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")]

from ringccl.bench import BenchSpec  # noqa: E402
from ringccl.errors import ArgumentError, BackendError  # noqa: E402
from ringccl.backends.mpi import launch as mpi_launch  # noqa: E402
from tests.distributed.safety_helpers import (GONE_S, START_S, kill_all, marked,  # noqa: E402
                                              start_launcher, wait_for)


def _ranks(marker: str, launcher_pid: int, nproc: int):
    """The marked processes but the launcher (mpirun and its ranks), once nproc ranks run."""
    found = marked(marker, exclude=launcher_pid)
    ranks = [p for p in found if b"_rank_main" in open(f"/proc/{p}/cmdline", "rb").read()]
    return found if len(ranks) >= nproc else None


def test_sigkill_of_the_launcher_ends_mpirun_and_every_rank():
    marker = uuid.uuid4().hex
    launcher = start_launcher("mpi", "2", "silent", marker=marker)
    try:
        pids = wait_for(lambda: _ranks(marker, launcher.pid, 2), START_S)
        assert pids, "mpirun's ranks did not start"
        launcher.kill()
        launcher.wait()
        wait_for(lambda: not (pids & marked(marker)), GONE_S)
        still = pids & marked(marker)
        assert not still, f"{sorted(still)} outlived their SIGKILLed launcher"
    finally:
        kill_all(launcher, marker)


def test_ctrl_c_ends_mpirun_with_one_line_and_keeps_the_rows():
    marker = uuid.uuid4().hex
    launcher = start_launcher("mpi", "2", marker=marker)
    try:
        assert launcher.stdout.readline() == "row\n"  # a first row measured
        os.killpg(launcher.pid, signal.SIGINT)
        out, err = launcher.communicate(timeout=bounds.job(60))
        assert launcher.returncode == 130, (out, err)
        assert "Traceback" not in err, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("interrupted: "), err
        received = int(lines[0].rsplit("(", 1)[1].split()[0])
        assert received == 1 + out.count("row\n")  # every row printed is kept
        assert not marked(marker, exclude=launcher.pid)
    finally:
        kill_all(launcher, marker)


def _open_mpi_shm():
    """Open MPI's segment files in /dev/shm now; skip unless the launcher is Open MPI's and
    /dev/shm exists (where its files go by default)."""
    if not (mpi_launch.mpi_launcher()[1] and os.path.isdir("/dev/shm")):
        pytest.skip("Open MPI's shared-memory files in /dev/shm only")
    return {f for f in os.listdir("/dev/shm") if f.startswith("vader_segment.")}


def _left(before: set, cmd: list) -> list:
    """What a job left in /dev/shm: Open MPI's segment files (``vader_segment.*``, by default
    in /dev/shm) and the folder its command gave them (``btl_vader_backing_directory``)."""
    left = {f for f in os.listdir("/dev/shm") if f.startswith("vader_segment.")} - before
    if "btl_vader_backing_directory" in cmd:
        folder = cmd[cmd.index("btl_vader_backing_directory") + 1]
        left |= {folder} if os.path.exists(folder) else set()
    return sorted(left)


def test_a_job_killed_whole_leaves_nothing_in_dev_shm(monkeypatch):
    # mpirun and its ranks SIGKILLed at once (as the timeout does): nothing of Open MPI's
    # removes its files; the launcher must
    before = _open_mpi_shm()
    mpirun = []
    real = subprocess.Popen

    def popen(args, *rest, **kwargs):
        proc = real(args, *rest, **kwargs)
        if args[0] == mpi_launch.mpi_launcher()[0]:
            mpirun.append(proc)
        return proc

    def on_row(row):   # a row measured: every rank's segment exists
        if len(mpirun) == 1:
            os.killpg(mpirun[0].pid, signal.SIGKILL)
            mpirun.append(None)

    monkeypatch.setattr(mpi_launch.subprocess, "Popen", popen)
    spec = BenchSpec(collective="all_reduce", algorithms=("ring",), min_bytes=1 << 10,
                     max_bytes=16 << 20, iters=2000, warmup=0, check=False, calibrate=False,
                     placements=("out-of-place",), backend="mpi")
    with pytest.raises(BackendError, match="mpirun exited with -9"):
        mpi_launch.launch_bench(spec, 2, on_row)
    assert not _left(before, mpirun[0].args), _left(before, mpirun[0].args)


def test_sigkill_of_the_launcher_leaves_nothing_in_dev_shm():
    # the launcher's own removal never runs: the folder goes once mpirun has ended
    before = _open_mpi_shm()
    marker = uuid.uuid4().hex
    launcher = start_launcher("mpi", "2", marker=marker)
    try:
        assert launcher.stdout.readline() == "row\n"  # a row measured: the segments exist
        cmds = [open(f"/proc/{p}/cmdline", "rb").read().decode().split("\0")
                for p in marked(marker, exclude=launcher.pid)]
        cmd = next(c for c in cmds if c[0] == mpi_launch.mpi_launcher()[0])
        launcher.kill()
        launcher.wait()
        assert wait_for(lambda: not marked(marker), GONE_S), "a process of the job outlived it"
        assert not _left(before, cmd), _left(before, cmd)
    finally:
        kill_all(launcher, marker)


def test_missing_mpi4py_is_caught_before_mpirun_starts(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mpi4py" else real(name, *a))
    mpi_launch.mpi_launcher()  # (cached) before Popen is replaced
    started = []
    monkeypatch.setattr(mpi_launch.subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(BackendError, match=r"backend 'mpi' needs mpi4py in .*ringccl\[mpi\]"):
        mpi_launch.launch_bench(BenchSpec(collective="all_reduce", backend="mpi"), 2)
    assert not started


def test_bad_ringccl_timeout_is_refused_before_mpirun_starts(monkeypatch):
    monkeypatch.setenv("RINGCCL_TIMEOUT", "abc")
    mpi_launch.mpi_launcher()  # (cached) before Popen is replaced
    started = []
    monkeypatch.setattr(mpi_launch.subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(ArgumentError, match="RINGCCL_TIMEOUT='abc'"):
        mpi_launch.launch_bench(BenchSpec(collective="all_reduce", backend="mpi"), 2)
    with pytest.raises(ArgumentError, match="nproc=100000 .*oversubscribe=True"):
        monkeypatch.delenv("RINGCCL_TIMEOUT")
        mpi_launch.launch_bench(BenchSpec(collective="all_reduce", backend="mpi"), 100_000)
    assert not started
