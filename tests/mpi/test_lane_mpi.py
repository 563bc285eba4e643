"""ringccl.mpi's compiled shared-memory lane on real processes (lane_script.py under mpirun):
bitwise equal to the general path over world sizes 2-4, counts, dtypes, ops and algorithms with
lane and general calls alternating, sends read in place; a stalled peer during a replayed call
reported as a PeerError naming step and peer; no segment left behind.

Skipped, with the reason, where mpirun or mpi4py is missing (scripts/install_mpi.sh).
"""

import importlib.util
import os
import shutil
import subprocess

import pytest

if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
    pytest.skip("no mpirun/mpiexec on PATH (run scripts/install_mpi.sh)", allow_module_level=True)
if importlib.util.find_spec("mpi4py") is None:
    pytest.skip("mpi4py is not installed (pip install 'ringccl[mpi]')", allow_module_level=True)

from .. import bounds  # noqa: E402
from . import mpirun  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(bounds.job(600))]


def _run(nproc: int, mode: str, job: str, seconds: float) -> subprocess.CompletedProcess:
    env = {v: "" for v in ("RINGCCL_HOST_ID", "RINGCCL_TRANSPORT", "RINGCCL_LANE",
                           "RINGCCL_ALGO")}
    env["RINGCCL_SHM_JOB"] = job
    return mpirun.run(nproc, mpirun.python("lane_script.py") + [mode], seconds=seconds,
                      env=env)


def _nothing_left(job: str) -> None:
    from ringccl.backends.shm import shm_dir, sweep
    assert not sweep(job), "a segment was left behind"
    assert not [f for f in os.listdir(shm_dir()) if f.startswith(f"ringccl-{job}-")]


@pytest.mark.parametrize("nproc", [2, 3, 4])
@pytest.mark.parametrize("mode", ["bitwise", "native", "single_copy"])
def test_the_lane_gives_the_general_paths_bits(mode, nproc):
    # bitwise: the lane (as installed) against the general path; native: the C and the Python
    # replays against the general path on every dtype and op the C loop takes; single_copy:
    # sends read in place from the sender's memory (peer_memory), read by the C loop, the
    # Python replay and the general path
    job = f"lane{mode[0]}{os.getpid()}n{nproc}"
    proc = _run(nproc, mode, job, 360)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc, proc.stdout
    _nothing_left(job)


@pytest.mark.parametrize("nproc", [2, 3])
def test_a_large_call_then_small_ones_keep_the_peers_data(nproc):
    # a one-area (large) lane writes the whole slot: the double-buffered call after it waits
    # for the peers to read it all first
    job = f"lanea{os.getpid()}n{nproc}"
    proc = _run(nproc, "alternating", job, 240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc, proc.stdout
    _nothing_left(job)


def test_a_stalled_peer_during_a_replayed_call_is_reported():
    job = f"lane{os.getpid()}stall"
    proc = _run(3, "stall", job, 120)
    assert proc.stdout.count(": OK") == 2, proc.stdout + proc.stderr
    _nothing_left(job)
