"""ringccl.mpi over shared memory: mpi_shm_script.py under mpirun on 2 and 4 local
processes checks every collective x algorithm over transport="shm" against MPI's own
collectives, against transport="p2p" bit for bit, the same bytes on every rank, and
transport="auto"'s choice (shm on one host, p2p across RINGCCL_HOST_ID "hosts"); afterwards no
segment of ours is left in /dev/shm.

Skipped, with the reason, where mpirun or mpi4py is missing (scripts/install_mpi.sh).
"""

import importlib.util
import os
import shutil

import pytest

if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
    pytest.skip("no mpirun/mpiexec on PATH (run scripts/install_mpi.sh)", allow_module_level=True)
if importlib.util.find_spec("mpi4py") is None:
    pytest.skip("mpi4py is not installed (pip install 'ringccl[mpi]')", allow_module_level=True)

from .. import bounds  # noqa: E402
from . import mpirun  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(bounds.job(300))]


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_collective_over_shm_matches_mpi(nproc, monkeypatch):
    job = f"mpishm{os.getpid()}n{nproc}"
    monkeypatch.delenv("RINGCCL_HOST_ID", raising=False)
    monkeypatch.delenv("RINGCCL_TRANSPORT", raising=False)
    proc = mpirun.run(nproc, mpirun.python("mpi_shm_script.py"), seconds=240,
                      env={"RINGCCL_SHM_JOB": job})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc, proc.stdout
    from ringccl.backends.shm import shm_dir
    assert not [f for f in os.listdir(shm_dir()) if f.startswith(f"ringccl-{job}-")]


def test_a_stalled_rank_over_shm_is_reported_and_the_output_kept():
    job = f"mpishm{os.getpid()}stall"
    proc = mpirun.run(3, mpirun.python("shm_timeout_script.py"), seconds=120,
                      env={"RINGCCL_SHM_JOB": job})
    assert proc.stdout.count(": OK") == 2, proc.stdout + proc.stderr
    from ringccl.backends.shm import shm_dir, sweep
    assert not sweep(job), "a segment was left behind"
    assert not [f for f in os.listdir(shm_dir()) if f.startswith(f"ringccl-{job}-")]


@pytest.mark.parametrize("transport", ["auto", "shm"])
def test_the_first_call_on_a_communicator_keeps_its_timeout(transport, monkeypatch):
    # rank 1 refuses its own arguments: rank 0's set-up (transport="auto"'s host check, the
    # shared memory's communicator duplicate) waited for it with no bound
    monkeypatch.delenv("RINGCCL_TRANSPORT", raising=False)
    job = f"mpishm{os.getpid()}first{transport}"
    proc = mpirun.run(2, [*mpirun.python("first_call_timeout_script.py"), transport],
                      seconds=120, env={"RINGCCL_SHM_JOB": job})
    assert proc.stdout.count(": OK") == 2, proc.stdout + proc.stderr



@pytest.mark.parametrize("timeout, want", [(2.0, True), (None, False)])
def test_restore_defaults_over_shm_as_over_p2p(timeout, want, monkeypatch):
    """The executor's own entry point with ``restore=None`` over shared memory: restore exactly
    when a timeout is in effect, as over p2p (COMM_WORLD of size 1, in this process, where p2p
    has no step to run: its rule is the same line of code)."""
    from mpi4py import MPI

    import numpy as np

    import ringccl
    from ringccl.backends.mpi import executor
    from ringccl.ops import ReduceOp

    seen = []
    monkeypatch.setattr(executor, "_execute_shm", lambda *a: seen.append(a[-1]) or a[1])
    schedule = ringccl.schedule("all_gather", "ring", 1)
    executor.execute_call(schedule, np.ones(4, np.float32), ReduceOp.SUM, MPI.COMM_WORLD, None,
                          None, timeout, None, None, "shm")
    assert seen == [want]
