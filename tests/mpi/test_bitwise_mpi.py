"""One result on every rank through ringccl.mpi: bitwise_script.py under mpirun on 4
local processes compares every rank's result bytes with rank 0's, for every collective whose
result every rank receives × every algorithm × dtype × a grid of counts.

Skipped, with the reason, where mpirun or mpi4py is missing (scripts/install_mpi.sh).
"""

import importlib.util
import shutil

import pytest

if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
    pytest.skip("no mpirun/mpiexec on PATH (run scripts/install_mpi.sh)", allow_module_level=True)
if importlib.util.find_spec("mpi4py") is None:
    pytest.skip("mpi4py is not installed (pip install 'ringccl[mpi]')", allow_module_level=True)

from .. import bounds  # noqa: E402
from . import mpirun  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(bounds.job(600))]


@pytest.mark.parametrize("nproc", [3, 4])
def test_every_rank_receives_the_same_bytes(nproc):
    proc = mpirun.run(nproc, mpirun.python("bitwise_script.py"), seconds=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc, proc.stdout
