"""ringccl.mpi.launch.launch_bench's safety rails: mpirun and its ranks end with a
SIGKILLed launcher; Ctrl-C ends them with one line and keeps the rows received; mpi4py and
RINGCCL_TIMEOUT are checked before mpirun starts."""

import os
import shutil
import signal
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
