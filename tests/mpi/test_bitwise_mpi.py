"""One result on every rank through ringccl.mpi (issue 14): bitwise_script.py under mpirun on 4
local processes compares every rank's result bytes with rank 0's, for every collective whose
result every rank receives × every algorithm × dtype × a grid of counts.

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

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.mark.parametrize("nproc", [3, 4])
def test_every_rank_receives_the_same_bytes(nproc):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    script = str(Path(__file__).with_name("bitwise_script.py"))
    proc = subprocess.run(mpirun_command(nproc, [sys.executable, script]), capture_output=True,
                          text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == nproc, proc.stdout
