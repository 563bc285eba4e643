"""What this machine can hold, checked before any process starts, and processes that die with
their launcher.

``check_processes(nproc, per_process_bytes)`` refuses a process count the machine's cores or
memory cannot hold (an ArgumentError naming the argument, the value and the limit) unless told
``oversubscribe=True``; :func:`run_worker_bytes` estimates what one ``ringccl run`` worker needs
for its buffers; :func:`die_with_parent` makes a worker end when the process that started it
ends, even on SIGKILL (``prctl(PR_SET_PDEATHSIG)`` on Linux, a watchdog thread everywhere).

Linux sources: ``os.sched_getaffinity`` and the cgroup CPU quota (v2 ``cpu.max``, v1
``cpu.cfs_quota_us``/``cpu.cfs_period_us``) for cores; ``MemAvailable`` in ``/proc/meminfo`` and
the cgroup memory limit less its usage (v2 ``memory.max``/``memory.current``, v1
``memory.limit_in_bytes``/``memory.usage_in_bytes``) for memory. Elsewhere: ``os.cpu_count()``,
and no memory check (nothing portable says what is available).

:func:`address_space_bound` bounds what this process may still allocate (``RLIMIT_AS``), for
work whose size is only known once it runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import pickle
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Iterator

try:  # POSIX
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

from . import units
from .args import check_int
from .errors import ArgumentError

__all__ = ["tied_call", "WORKER_BYTES", "RUN_BUFFER_FACTOR", "MAX_PROCESSES_PER_CORE",
           "usable_cores", "available_memory", "run_worker_bytes", "check_processes",
           "address_space_bound", "die_with_parent", "end_session"]

#: Memory of one idle worker: a Python interpreter with torch imported and a gloo process group
#: initialised. Measured (torch 2.x CPU, Linux x86-64, 2 and 4 workers of
#: ``ringccl.torch.launch.launch`` reading /proc/self/smaps_rollup after init_process_group):
#: RSS 233 MB, of which 153 MB private dirty and 80 MB shared libraries; PSS 178 MB with 2
#: workers, 168 MB with 4, tending to ~155 MB as the shared pages spread over more workers.
WORKER_BYTES = 160 * 10 ** 6

#: Peak memory of a ``ringccl run`` worker (``ringccl.backends.torch.runner.measure``) beyond
#: WORKER_BYTES, in units of the collective's buffer (M = ``buffer_count`` elements x itemsize):
#: random integer source, two inputs and outputs (ours and the builtin's), the executor's
#: staging and restore backup, and the comparison. Measured with VmHWM (peak RSS) minus the RSS
#: before ``measure``, 2 gloo ranks, float32, count 8Mi (max over ranks): all_reduce 7.0,
#: broadcast 6.5, reduce 7.5, all_gather 6.6, gather 8.1, scatter 9.4, all_to_all 8.7,
#: reduce_scatter 10.3; all_reduce with count 32Mi: 6.8, with count 128Mi (``ringccl run
#: all_reduce --nproc 2 -c 128Mi``): 6.8 (3.87 GB peak RSS per rank, 7.7 GB for both). 8 is
#: within 25% of every one of them.
RUN_BUFFER_FACTOR = 8

#: At most this many worker processes per usable core unless ``oversubscribe``: ringccl's
#: workers compute (every ring step reduces) as well as wait, and each one's start-up (importing
#: torch, ~1.5 CPU-seconds) is paid by every process; beyond a few per core a run measures the
#: OS scheduler and start-up alone takes minutes (1000 processes on 2 cores drove the load
#: average to 335 and the machine stopped responding).
MAX_PROCESSES_PER_CORE = 4


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a cgroup CPU quota (a
    container's ``--cpus``), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = None
    v2 = _read("/sys/fs/cgroup/cpu.max")  # "max 100000" (no limit) or "200000 100000"
    if v2:
        parts = v2.split()
        if len(parts) == 2 and parts[0] != "max":
            quota = (parts[0], parts[1])
    else:
        q, p = (_read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
        if q and p and q != "-1":
            quota = (q, p)
    if quota is not None:
        try:
            cores = min(cores, math.ceil(int(quota[0]) / int(quota[1])))
        except (ValueError, ZeroDivisionError):
            pass
    return max(1, cores)


def available_memory() -> int | None:
    """Bytes that new processes can use now: MemAvailable, or the cgroup's limit less its usage
    if that is lower; None where neither can be read (not Linux)."""
    have = None
    meminfo = _read("/proc/meminfo")
    if meminfo:
        for line in meminfo.splitlines():
            if line.startswith("MemAvailable:"):
                have = int(line.split()[1]) * 1024
                break
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        lim, used = _read(limit), _read(usage)
        if lim is None:
            continue
        try:  # "max" (v2) or a huge number (v1) means no limit
            free = int(lim) - int(used or 0)
        except ValueError:
            break
        if int(lim) < 2 ** 60:
            have = free if have is None else min(have, free)
        break
    return None if have is None else max(0, have)


def run_worker_bytes(buffer_bytes: int) -> int:
    """Estimated peak bytes of one ``ringccl run``/``bench`` worker's buffers (on top of
    :data:`WORKER_BYTES`) for a collective whose buffer is ``buffer_bytes`` bytes (M x itemsize:
    ``get_collective(c).buffer_count(world_size, count) * itemsize``; for a bench sweep, its
    largest size). Within ~25% of the measured peaks (see :data:`RUN_BUFFER_FACTOR`).

    Raises:
        ArgumentTypeError / ArgumentError: buffer_bytes not an integer >= 0.
    """
    return RUN_BUFFER_FACTOR * check_int(buffer_bytes, "buffer_bytes")


def check_processes(nproc: int, per_process_bytes: int = WORKER_BYTES, *,
                    oversubscribe: bool = False, what: str = "nproc",
                    cores: int | None = None, memory: int | None = None) -> None:
    """Refuse, before any process starts, ``nproc`` processes of ``per_process_bytes`` bytes
    each that this machine cannot hold: more than :data:`MAX_PROCESSES_PER_CORE` x
    :func:`usable_cores`, or more memory than :func:`available_memory`.

    Args:
        nproc: number of processes (>= 1).
        per_process_bytes: estimated peak bytes of one process (WORKER_BYTES for a torch
            worker; add :func:`run_worker_bytes` for a ``ringccl run`` worker).
        oversubscribe: start them anyway (no check but nproc's type and range).
        what: how the caller names the argument in messages ("nproc", "--nproc"); a name
            starting with "--" makes the hint say ``--oversubscribe``, else
            ``oversubscribe=True``.
        cores, memory: override the machine's figures (tests); memory None: read it (no memory
            check where it cannot be read).
    Raises:
        ArgumentTypeError: nproc not an integer. ArgumentError: nproc < 1, or beyond the
            machine's cores or memory (the message names the value, the smaller of the two
            limits, the one that binds, and the way out).
    """
    nproc = check_int(nproc, what, minimum=1)
    if oversubscribe:
        return
    hint = ("pass --oversubscribe to start them anyway" if what.startswith("--")
            else "pass oversubscribe=True to start them anyway")
    label = f"{what} {nproc}" if what.startswith("--") else f"{what}={nproc}"
    memory = available_memory() if memory is None else memory
    per = max(1, int(per_process_bytes))
    cores = usable_cores() if cores is None else cores
    by_cores = MAX_PROCESSES_PER_CORE * cores
    by_memory = None if memory is None else memory // per
    if nproc <= by_cores and (by_memory is None or nproc <= by_memory):
        return
    if by_memory is not None and by_memory < by_cores:  # name the limit that binds first
        raise ArgumentError(
            f"{label} needs about {units.format_size(nproc * per)} for {nproc} worker processes "
            f"(~{units.format_size(per)} each: a Python interpreter with torch and its data), "
            f"more than this machine's {units.format_size(memory)} available; at most "
            f"{by_memory} fit; {hint}")
    raise ArgumentError(
        f"{label} is more than {MAX_PROCESSES_PER_CORE} processes per core on this "
        f"machine's {cores} usable cores (at most {by_cores}); {hint}")


def _address_space() -> int | None:
    """This process's address space in bytes (VmSize); None where /proc does not say."""
    status = _read("/proc/self/status")
    for line in (status or "").splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return None


@contextlib.contextmanager
def address_space_bound(extra_bytes: int | None) -> Iterator[None]:
    """Inside it, this process's address space may grow by at most ``extra_bytes`` (Linux:
    ``RLIMIT_AS`` set to its current size plus that, then restored): an allocation beyond it
    raises MemoryError at once, instead of taking memory the machine does not have. For work
    whose size cannot be known before it runs (a schedule's builder), so that it ends before
    it takes the machine down. No bound with None, or where the size or the limit cannot be
    read or set."""
    now = _address_space() if extra_bytes is not None and resource is not None else None
    if now is None:
        yield
        return
    old = resource.getrlimit(resource.RLIMIT_AS)
    want = now + max(0, int(extra_bytes))
    if old[0] != resource.RLIM_INFINITY:
        want = min(want, old[0])
    if old[1] != resource.RLIM_INFINITY:
        want = min(want, old[1])
    try:
        resource.setrlimit(resource.RLIMIT_AS, (want, old[1]))
    except (ValueError, OSError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


# -- dying with the launcher --------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _set_pdeathsig(sig: int) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent thread ends; False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _parent_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's (the pid was reused): treat as gone
        return False
    return True


def tied_call(parent_pid: int, payload: bytes, *tail) -> None:
    """A worker process's entry: :func:`die_with_parent` first, then ``target(*args, *tail)``
    from ``payload`` (pickled ``(target, args)``). Unpickling the call imports its modules
    (torch: seconds under load); tied before that, the worker cannot outlive a launcher killed
    while it was still importing. This module imports nothing heavy, so the tie comes first."""
    die_with_parent(parent_pid)
    target, args = pickle.loads(payload)
    target(*args, *tail)


def die_with_parent(parent_pid: int, *, watch_pid: int | None = None,
                    interval: float = 0.5) -> None:
    """End this process (SIGKILL) when ``parent_pid``, the process that started it, ends.

    On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` asks the kernel to do it; since the parent
    may have died before that call, ``os.getppid()`` is compared with ``parent_pid`` after it.
    A daemon thread polling ``os.getppid()`` every ``interval`` seconds covers every platform
    (an orphan is re-parented, so its parent pid changes). ``watch_pid``: also end when this
    process (not the parent: an MPI rank's launcher, two generations up) is gone.
    """
    _set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)

    def watch() -> None:
        while True:
            time.sleep(interval)
            if os.getppid() != parent_pid or (watch_pid is not None
                                              and not _parent_alive(watch_pid)):
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="ringccl-die-with-parent", daemon=True).start()


def end_session(proc, grace_s: float, kill_wait_s: float = 10.0) -> None:
    """End the session of ``proc`` (a ``subprocess.Popen`` started with
    ``start_new_session=True``: a launcher and what it started): SIGTERM first, so that a
    launcher ends its ranks and removes its files (Open MPI's mpirun its shared-memory
    segments, which a SIGKILL leaves in /dev/shm), SIGKILL after ``grace_s`` seconds; then
    reap ``proc``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        proc.kill()
        proc.wait()
