"""Start N local MPI processes with ``mpirun`` (Open MPI) or ``mpiexec`` (MPICH), without mpi4py
in the parent.

Open MPI refuses to run as root and to place more processes than cores unless told:
``--allow-run-as-root`` (only added when running as root) and ``--oversubscribe``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from ..args import check_int
from ..errors import BackendError

__all__ = ["mpi_launcher", "mpirun_command", "launch_bench", "under_mpirun", "ROW_PREFIX"]

#: rank 0 of ``python -m ringccl.mpi.runner`` prefixes each JSON row it prints with this
ROW_PREFIX = "ROW "

#: environment variables that Open MPI, MPICH (Hydra) and PMIx set in the processes they start
_LAUNCHED_BY = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def under_mpirun() -> bool:
    """True if this process was started by mpirun/mpiexec."""
    return any(v in os.environ for v in _LAUNCHED_BY)


@functools.lru_cache(maxsize=1)
def mpi_launcher() -> tuple[str, bool]:
    """(path of mpirun or mpiexec, True if it is Open MPI's).

    Raises:
        BackendError: no MPI launcher on PATH (with the install command).
    """
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if exe is None:
        raise BackendError("no mpirun or mpiexec on PATH: install an MPI library (Debian: "
                           "apt-get install openmpi-bin libopenmpi-dev) and mpi4py "
                           "(pip install 'ringccl[mpi]'); see scripts/install_mpi.sh")
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    return exe, "Open MPI" in version or "OpenRTE" in version


def mpirun_command(nproc: int, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` on ``nproc`` local processes."""
    nproc = check_int(nproc, "nproc", minimum=1)
    exe, open_mpi = mpi_launcher()
    flags = ["-n", str(nproc)]
    if open_mpi:
        flags += ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return [exe] + flags + list(argv)


def _env() -> dict:
    """The environment for the children: ringccl importable from where this one was imported."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def launch_bench(spec, nproc: int, on_row: Callable[[dict], None] | None = None,
                 timeout: float = 600.0) -> list[dict]:
    """Run ``ringccl bench``'s sweep (:class:`ringccl.bench.BenchSpec`) on ``nproc`` MPI
    processes; ``on_row(row)`` is called as each row arrives.

    Returns:
        the rows.
    Raises:
        BackendError: no launcher, a process failed (with its stderr), or the run exceeded
            ``timeout`` seconds.
    """
    cmd = mpirun_command(nproc, [sys.executable, "-m", "ringccl.mpi.runner",
                                 json.dumps(spec.to_dict())])
    rows: list[dict] = []
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=_env(),
                                start_new_session=True)
        timer = _Killer(proc, timeout)
        try:
            for line in proc.stdout:
                if line.startswith(ROW_PREFIX):
                    row = json.loads(line[len(ROW_PREFIX):])
                    rows.append(row)
                    if on_row:
                        on_row(row)
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if code != 0 or timer.fired:
            err.seek(0)
            tail = err.read()[-4000:]
            why = f"timed out after {timeout:.0f} s" if timer.fired else f"exited with {code}"
            raise BackendError(f"mpirun {why}: {' '.join(cmd[:4])} …\n{tail}")
    return rows


class _Killer:
    """Kill ``proc`` (its whole session: mpirun and its children) after ``timeout`` seconds."""

    def __init__(self, proc, timeout: float):
        import threading
        self.fired = False
        self._proc = proc
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        import signal
        self.fired = True
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()
