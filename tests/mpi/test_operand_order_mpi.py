"""MIN/MAX on signed zeros and NaN payloads through ringccl.mpi on real processes
(operand_order_script.py under mpirun on 2 and 3 processes): every reducing algorithm, over
shared memory with the lane off, replayed in C and in Python, and over MPI point-to-point; every
result the simulator's bit for bit, every all_reduce the same bytes on every rank; no segment
left behind.

Skipped, with the reason, where mpirun or mpi4py is missing (scripts/install_mpi.sh).
"""

import importlib.util
import os
import re
import shutil

import pytest

if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
    pytest.skip("no mpirun/mpiexec on PATH (run scripts/install_mpi.sh)", allow_module_level=True)
if importlib.util.find_spec("mpi4py") is None:
    pytest.skip("mpi4py is not installed (pip install 'ringccl[mpi]')", allow_module_level=True)

from .. import bounds, ties  # noqa: E402
from . import mpirun  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(bounds.job(600))]


@pytest.mark.parametrize("nproc", [2, 3])
def test_every_rank_and_the_simulator_get_the_same_bits(nproc):
    from ringccl.backends.shm import shm_dir, sweep
    job = f"order{os.getpid()}n{nproc}"
    env = {v: "" for v in ("RINGCCL_HOST_ID", "RINGCCL_TRANSPORT", "RINGCCL_LANE",
                           "RINGCCL_ALGO")}
    env["RINGCCL_SHM_JOB"] = job
    proc = mpirun.run(nproc, mpirun.python("operand_order_script.py"), seconds=400, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc, proc.stdout
    # every case ran: per (case, op, dtype, count) five all_reduce runs, two of the others (a
    # reduce's at its root only); mpirun may join two ranks' lines
    compared = {int(r): int(k) for r, k in
                re.findall(r"rank (\d+): OK \((\d+) results compared\)", proc.stdout)}
    runs = {"all_reduce": 5, "reduce_scatter": 2, "reduce": 2}
    per = len(ties.OPS) * len(ties.DTYPES) * 3
    assert compared == {r: sum(per * runs[c] for c, _, kw in ties.cases(nproc)
                               if kw.get("dst", r) == r) for r in range(nproc)}, proc.stdout
    assert not sweep(job), "a segment was left behind"
    assert not [f for f in os.listdir(shm_dir()) if f.startswith(f"ringccl-{job}-")]
