"""Start N local MPI processes with ``mpirun`` (Open MPI) or ``mpiexec`` (MPICH), without mpi4py
in the parent.

Open MPI refuses to run as root and to place more processes than cores unless told:
``--allow-run-as-root`` (only added when running as root) and ``--oversubscribe``. The ranks'
shared-memory files (Open MPI's ``vader_segment.*`` and ringccl's own, in /dev/shm by default)
go into a folder of the launch's own (:mod:`.segment_folder`), removed however the launch ends:
Open MPI removes its files only when its ranks end cleanly, ranks SIGKILLed leave them behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

from ...args import check_int
from ...errors import BackendError, Interrupted, WorkerError
from ...resources import WORKER_BYTES, check_processes, die_with_parent, end_session
from ..shm.segment import SHM_DIR
from ..shm.variables import check_environment
from .collectives import TRANSPORTS
from .segment_folder import SegmentFolder

__all__ = ["mpi_launcher", "mpirun_command", "check_launch", "launch_bench", "under_mpirun",
           "ROW_PREFIX"]

#: rank 0 of ``python -m ringccl.backends.mpi.runner`` prefixes each JSON row it prints with this
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


def mpirun_command(nproc: int, argv: list[str], *,
                   backing_directory: str | None = None) -> list[str]:
    """The command line that runs ``argv`` on ``nproc`` local processes. ``backing_directory``:
    the folder of Open MPI's shared-memory files (else Open MPI's default, /dev/shm); another
    MPI's launcher is not given it."""
    nproc = check_int(nproc, "nproc", minimum=1)
    exe, open_mpi = mpi_launcher()
    flags = ["-n", str(nproc)]
    if open_mpi:
        flags += ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
        if backing_directory is not None:
            flags += ["--mca", "btl_vader_backing_directory", str(backing_directory)]
    return [exe] + flags + list(argv)


def _env() -> dict:
    """The environment for the children: ringccl importable from where this one was imported."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def check_launch(nproc: int, *, oversubscribe: bool = False, worker_bytes: int = 0) -> int:
    """What :func:`launch_bench` refuses before mpirun starts: no launcher, no mpi4py in this
    Python (every rank would fail to import it), a value of the environment variables every
    rank's calls read that they would refuse (``RINGCCL_TRANSPORT``, ``RINGCCL_TIMEOUT``,
    ``RINGCCL_DEBUG``, ``RINGCCL_ALGO``, ``RINGCCL_LANE``:
    :func:`ringccl.backends.shm.variables.check_environment`), ``nproc`` beyond the machine's
    cores or memory (:func:`ringccl.resources.check_processes`).

    Returns:
        nproc (an int).
    Raises:
        BackendError: no mpirun/mpiexec, or mpi4py not importable.
        ArgumentError / ArgumentTypeError: nproc, an environment variable, cores or memory.
    """
    nproc = check_int(nproc, "nproc", minimum=1)
    check_processes(nproc, WORKER_BYTES + worker_bytes, oversubscribe=oversubscribe)
    check_environment(TRANSPORTS)
    mpi_launcher()
    if importlib.util.find_spec("mpi4py") is None:
        raise BackendError(f"backend 'mpi' needs mpi4py in {sys.executable}: pip install "
                           "'ringccl[mpi]' (and an MPI library: scripts/install_mpi.sh)")
    return nproc


#: seconds mpirun gets between SIGTERM and SIGKILL when a launch ends early
GRACE_S = 3.0

#: the rank lines ``ringccl.backends.mpi.runner`` prints before aborting: "rank R: Type: message"
_RANK_LINE = re.compile(r"^rank (\d+): (.*)$", re.M)


def launch_bench(spec, nproc: int, on_row: Callable[[dict], None] | None = None,
                 timeout: float = 600.0, *, oversubscribe: bool = False, worker_bytes: int = 0,
                 verbose: bool = False) -> list[dict]:
    """Run ``ringccl bench``'s sweep (:class:`ringccl.bench.BenchSpec`) on ``nproc`` MPI
    processes; ``on_row(row)`` is called as each row arrives.

    Checked first (:func:`check_launch`): mpirun and mpi4py present, RINGCCL_TIMEOUT valid,
    ``nproc`` processes of ``WORKER_BYTES + worker_bytes`` bytes fit the machine (unless
    ``oversubscribe``). mpirun runs in its own session and receives SIGTERM (Linux
    parent-death signal) when this process ends; each rank ends when mpirun or this process does
    (:func:`ringccl.resources.die_with_parent`), so nothing outlives a killed launcher. On
    Ctrl-C or SIGTERM here, mpirun's session gets SIGTERM, then SIGKILL after GRACE_S seconds.
    The ranks put their shared-memory files (Open MPI's; ringccl's, unless RINGCCL_SHM_DIR is
    set) in a folder of this launch's own (:class:`.segment_folder.SegmentFolder`), removed
    once this process and mpirun have ended, however they ended, so that /dev/shm keeps
    nothing of a killed job.

    Returns:
        the rows.
    Raises:
        WorkerError: a rank raised ("rank R: Type: message"; with ``verbose``, mpirun's stderr).
        BackendError: no launcher or mpi4py, no folder for the ranks' shared-memory files, a
            process failed (with its stderr), or the run exceeded ``timeout`` seconds.
        Interrupted: Ctrl-C or SIGTERM; ``partial`` holds the rows received before it.
        ArgumentError: see :func:`check_launch`.
    """
    nproc = check_launch(nproc, oversubscribe=oversubscribe, worker_bytes=worker_bytes)
    rows: list[dict] = []
    with tempfile.TemporaryFile(mode="w+") as err, _segments() as segments:
        cmd = mpirun_command(nproc, [sys.executable, "-c", _RANK_MAIN, json.dumps(spec.to_dict())],
                             backing_directory=segments.folder)
        env = _env()
        env[_LAUNCHER_PID] = str(os.getpid())
        if not env.get("RINGCCL_SHM_DIR") and os.path.dirname(segments.folder) == SHM_DIR:
            env["RINGCCL_SHM_DIR"] = segments.folder   # ringccl's segments: the same tmpfs
        interrupted = None
        with _sigterm_as_interrupt():
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                    start_new_session=True, preexec_fn=_mpirun_preexec(),
                                    pass_fds=segments.pass_fds)
            timer = _Killer(proc, timeout)
            try:
                for line in proc.stdout:
                    if line.startswith(ROW_PREFIX):
                        row = json.loads(line[len(ROW_PREFIX):])
                        rows.append(row)
                        if on_row:
                            on_row(row)
                code = proc.wait()
            except KeyboardInterrupt as exc:
                interrupted = exc
                code = None
            finally:
                timer.cancel()
                if proc.poll() is None:
                    _end_session(proc)
        if interrupted is not None:
            raise Interrupted(f"mpirun of {nproc} processes interrupted ({interrupted or 'Ctrl-C'})"
                              "; every rank was ended", partial=rows) from None
        if code != 0 or timer.fired:
            err.seek(0)
            tail = err.read()[-4000:]
            why = f"timed out after {timeout:.0f} s" if timer.fired else f"exited with {code}"
            failed = _RANK_LINE.search(tail)
            if failed and not timer.fired:
                raise WorkerError(failed.group(0) + (f"\n{tail}" if verbose else ""),
                                  rank=int(failed.group(1)),
                                  exc_type=failed.group(2).split(":", 1)[0],
                                  worker_traceback=tail)
            raise BackendError(f"mpirun {why}: {' '.join(cmd[:4])} …\n{tail}")
    return rows


#: environment variable that tells each rank which process launched mpirun
_LAUNCHER_PID = "RINGCCL_LAUNCHER_PID"


@contextlib.contextmanager
def _segments():
    """A started :class:`.segment_folder.SegmentFolder`, closed on leaving.

    Raises:
        BackendError: the folder could not be made.
    """
    segments = SegmentFolder()
    try:
        segments.start()
    except OSError as exc:
        raise BackendError(str(exc)) from None
    try:
        yield segments
    finally:
        segments.close()


#: each rank's entry point: end with mpirun and with the launcher (before importing mpi4py,
#: which starts MPI), then run the sweep (:func:`ringccl.backends.mpi.runner.main`)
_RANK_MAIN = ("import sys; from ringccl.backends.mpi.launch import _rank_main; _rank_main(); "
              "from ringccl.backends.mpi.runner import main; sys.exit(main(sys.argv[1:]))")


def _rank_main() -> None:
    """The first act of ``python -c _RANK_MAIN SPEC_JSON`` under mpirun: :func:`die_with_parent`
    (parent: mpirun's daemon; watched: the launcher)."""
    launcher = os.environ.get(_LAUNCHER_PID)
    die_with_parent(os.getppid(), watch_pid=int(launcher) if launcher else None)


def _mpirun_preexec():
    """A preexec_fn giving mpirun SIGTERM when this process ends (Linux), else None: SIGTERM,
    not SIGKILL, so that mpirun ends its ranks and removes their shared-memory segments (after
    a SIGKILL, Open MPI leaves them behind)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork, not in the child

    def preexec() -> None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
    return preexec


def _end_session(proc) -> None:
    """SIGTERM mpirun's session (mpirun and its ranks), SIGKILL after GRACE_S, reap mpirun."""
    end_session(proc, GRACE_S)


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """SIGTERM raises KeyboardInterrupt while mpirun runs (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Killer:
    """Kill ``proc`` (its whole session: mpirun and its children) after ``timeout`` seconds."""

    def __init__(self, proc, timeout: float):
        self.fired = False
        self._proc = proc
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()
