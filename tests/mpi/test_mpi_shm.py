"""ringccl.mpi over shared memory (issue 16): mpi_shm_script.py under mpirun on 2 and 4 local
processes checks every collective x algorithm over transport="shm" against MPI's own
collectives, against transport="p2p" bit for bit, the same bytes on every rank, and
transport="auto"'s choice (shm on one host, p2p across RINGCCL_HOST_ID "hosts"); afterwards no
segment of ours is left in /dev/shm.

Skipped, with the reason, where mpirun or mpi4py is missing (scripts/install_mpi.sh).
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
    pytest.skip("no mpirun/mpiexec on PATH (run scripts/install_mpi.sh)", allow_module_level=True)
if importlib.util.find_spec("mpi4py") is None:
    pytest.skip("mpi4py is not installed (pip install 'ringccl[mpi]')", allow_module_level=True)

from ringccl.backends.mpi.launch import mpirun_command  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_collective_over_shm_matches_mpi(nproc, tmp_path):
    job = f"mpishm{os.getpid()}n{nproc}"
    env = dict(os.environ, RINGCCL_SHM_JOB=job, PYTHONPATH=os.pathsep.join(
        p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    env.pop("RINGCCL_HOST_ID", None)
    env.pop("RINGCCL_TRANSPORT", None)
    cmd = mpirun_command(nproc, [sys.executable, str(Path(__file__).with_name(
        "mpi_shm_script.py"))])
    if "--oversubscribe" in cmd:  # Open MPI: pass the variables on explicitly
        cmd[1:1] = ["-x", "PYTHONPATH", "-x", "RINGCCL_SHM_JOB"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc, proc.stdout
    from ringccl.backends.shm import shm_dir
    assert not [f for f in os.listdir(shm_dir()) if f.startswith(f"ringccl-{job}-")]


def test_a_stalled_rank_over_shm_is_reported_and_the_output_kept(tmp_path):
    job = f"mpishm{os.getpid()}stall"
    env = dict(os.environ, RINGCCL_SHM_JOB=job, PYTHONPATH=os.pathsep.join(
        p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    cmd = mpirun_command(3, [sys.executable, str(Path(__file__).with_name(
        "shm_timeout_script.py"))])
    if "--oversubscribe" in cmd:
        cmd[1:1] = ["-x", "PYTHONPATH", "-x", "RINGCCL_SHM_JOB"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.stdout.count(": OK") == 2, proc.stdout + proc.stderr
    from ringccl.backends.shm import shm_dir, sweep
    assert not sweep(job), "a segment was left behind"
    assert not [f for f in os.listdir(shm_dir()) if f.startswith(f"ringccl-{job}-")]
