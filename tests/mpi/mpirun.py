"""Run a script under mpirun for the MPI tests, and leave nothing behind.

* mpirun runs in a session of its own; past its bound (:func:`tests.bounds.job`) the session
  gets SIGTERM first (Open MPI's mpirun then ends its ranks and removes its files), SIGKILL
  only after :data:`GRACE_S` more seconds (:func:`ringccl.resources.end_session`);
* Open MPI's shared-memory segments (the vader transport's, in /dev/shm by default) go into a
  folder of this run's own (``btl_vader_backing_directory``), removed afterwards whatever
  happened, so a killed job cannot leave them in /dev/shm;
* the time bounds the scripts check come from the same place as every other test's:
  ``RINGCCL_TEST_SLACK`` (seconds a loaded machine may add to a timeout) is passed to them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ringccl.backends.mpi.launch import mpirun_command
from ringccl.resources import end_session

from .. import bounds

SRC = str(Path(__file__).resolve().parents[2] / "src")

#: seconds mpirun gets between SIGTERM and SIGKILL
GRACE_S = 10.0


def run(nproc: int, argv: list[str], *, seconds: float, env: dict | None = None,
        pass_env: tuple = ()) -> subprocess.CompletedProcess:
    """``argv`` on ``nproc`` processes; its output (text), its exit status (None: it ran past
    ``bounds.job(seconds)`` and was ended). ``env``: variables set for the ranks (passed on
    with ``-x`` besides PYTHONPATH, RINGCCL_TEST_SLACK and those named in ``pass_env``)."""
    backing = tempfile.mkdtemp(prefix="ringccl-test-ompi.",
                               dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    folder = tempfile.mkdtemp(prefix="ringccl-test-mpirun.")   # the scripts' (end_job.py)
    full = dict(os.environ, **(env or {}))
    full["RINGCCL_TEST_DIR"] = folder
    full["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)
    full["RINGCCL_TEST_SLACK"] = f"{bounds.slack():.1f}"
    full["OMPI_MCA_btl_vader_backing_directory"] = backing
    cmd = mpirun_command(nproc, argv)
    if "--oversubscribe" in cmd:   # Open MPI: pass the variables on explicitly
        names = ("PYTHONPATH", "RINGCCL_TEST_SLACK", "RINGCCL_TEST_DIR",
                 "OMPI_MCA_btl_vader_backing_directory",
                 *(env or {}), *pass_env)
        cmd[1:1] = [flag for name in dict.fromkeys(names) for flag in ("-x", name)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=bounds.job(seconds))
        code = proc.returncode
    except subprocess.TimeoutExpired:
        out, err = _end(proc)
        code = None
        err += f"\n[tests/mpi/mpirun.py: ended after {bounds.job(seconds):.0f} s]"
    except BaseException:
        _end(proc)
        raise
    finally:
        shutil.rmtree(backing, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
    return subprocess.CompletedProcess(cmd, code, out, err)


def _end(proc: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM to mpirun's session, SIGKILL after GRACE_S; the output it gave."""
    end_session(proc, GRACE_S)
    return proc.communicate()


def python(script: str) -> list[str]:
    """The argv running this folder's ``script`` with this Python."""
    return [sys.executable, str(Path(__file__).with_name(script))]
