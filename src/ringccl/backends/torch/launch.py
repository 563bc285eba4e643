"""Start N local processes with a gloo process group on 127.0.0.1, without torchrun.

``launch(fn, nproc, *args)`` spawns ``nproc`` processes; each initializes
``torch.distributed`` (TCP rendezvous on a free loopback port), calls ``fn(rank, world_size,
*args)`` and sends its return value back. The parent returns the per-rank results in rank order.
A worker that raises makes ``launch`` raise :class:`~ringccl.errors.WorkerError` ("rank R:
Type: message"; the traceback with ``verbose=True``) naming the cause: a rank that fails makes
its peers fail too (its connections close: gloo's "Connection reset by peer", ringccl's
:class:`~ringccl.errors.PeerError`), often before its own report arrives, so such knock-on
errors wait up to :data:`CAUSE_WAIT_S` s for another rank's error, which is then named
instead. A worker that dies or a run that exceeds ``timeout`` seconds ends every worker and
raises too, so nothing hangs.

Shared memory: the workers' segments carry a job id (``RINGCCL_SHM_JOB``, set for
them unless already set), so that after the workers end the launcher removes any a worker
SIGKILLed between creating and unlinking one left behind (:func:`ringccl.backends.shm.sweep`;
the window is the set-up exchange of one segment, milliseconds).

Safety rails: the process count is checked against the machine's cores and memory
before anything starts (:mod:`ringccl.resources`); workers die with the launcher, even on
SIGKILL; Ctrl-C or SIGTERM ends every worker and raises one
:class:`~ringccl.errors.Interrupted`, without worker tracebacks.
"""

from __future__ import annotations

import contextlib
import functools
import datetime
import math
import os
import queue as queue_mod
import re
import signal
import socket
import threading
import time
import traceback
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

from ...args import check_int
from ...errors import BackendError, Interrupted, WorkerError
from ...plugins import import_user_modules
from ...resources import WORKER_BYTES, check_processes, tied_call, usable_cores
from ..shm import sweep
from ..shm.variables import check_environment

_jobs = iter(range(1, 1 << 62))

__all__ = ["launch", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, backend: str, timeout: float, threads: int,
            launcher_pid: int, fn: Callable, args: tuple, results, progress=None) -> None:
    # started through ringccl.resources.tied_call, which tied it to the launcher before this
    # module (and torch, seconds to import under load) was unpickled; ``progress``: the queue
    # ``fn`` reports to, passed as its last argument
    if progress is not None:
        args = args + (progress,)
    # the terminal sends Ctrl-C's SIGINT to the whole foreground process group: only the
    # launcher reports it (it ends the workers with SIGTERM); the launcher blocked SIGINT
    # around the start, so none arrived before this line
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # every rank runs on this host: torchrun's names for it (what the shared-memory lane's
    # default thread count divides the cores by, ringccl.backends.shm.lane_native.threads)
    os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"] = str(rank), str(world_size)
    try:
        import_user_modules()  # the algorithms ``--import`` / RINGCCL_IMPORT registered
        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
        # every rank's mesh is connected before any rank runs fn: a rank whose fn returns at
        # once would otherwise close its connections while a slower peer still connects
        # (gloo's connectFullMesh then fails there with "Connection closed by peer")
        dist.barrier()
        try:
            value = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, value))
    except BaseException as exc:  # report everything to the parent, which prints nothing itself
        cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        results.put((rank, False, (cause, type(exc).__name__, traceback.format_exc())))


def _check_nccl(nproc: int) -> None:
    """Refuse in the parent what every NCCL worker would fail on: no NCCL, too few GPUs."""
    import torch
    import torch.distributed as dist

    if not dist.is_nccl_available():
        raise BackendError("backend='nccl' is not available in this torch build (CPU-only "
                           "wheel?); use backend 'gloo' or 'mpi'")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < nproc:
        raise BackendError(f"backend='nccl' needs one CUDA GPU per process: nproc={nproc}, "
                           f"but {gpus} GPUs are visible")


def launch(fn: Callable[..., Any], nproc: int, *args: Any, backend: str = "gloo",
           timeout: float = 300.0, threads: int | None = None, oversubscribe: bool = False,
           worker_bytes: int = 0, on_progress: Callable[[Any], None] | None = None,
           verbose: bool = False) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``nproc`` fresh local processes.

    Safety: before any process starts, ``nproc`` is checked against this machine's cores and
    memory (:func:`ringccl.resources.check_processes` with ``WORKER_BYTES + worker_bytes`` per
    process) and the environment its calls read (:mod:`ringccl.backends.shm.variables`). Every
    worker dies with this process, even when SIGKILLed (:func:`ringccl.resources.
    die_with_parent`), and ignores SIGINT: on Ctrl-C or SIGTERM here, every worker is sent
    SIGTERM, then SIGKILL after :data:`GRACE_S` s, and :class:`~ringccl.errors.Interrupted` is
    raised once, with no worker traceback.

    Args:
        fn: a picklable (module-level) function; its return value must be picklable and not
            hold torch tensors (they travel through shared memory that ends with the worker:
            return ``t.numpy()`` or lists).
        nproc: number of processes (>= 1).
        backend: torch.distributed backend ("gloo"; "nccl" needs one GPU per process).
        timeout: seconds for the whole run and for each collective's rendezvous.
        threads: torch intra-op threads per process (default: usable cores // nproc, >= 1).
        oversubscribe: start ``nproc`` processes even beyond the cores/memory check.
        worker_bytes: bytes each worker needs beyond an idle torch interpreter (its buffers:
            :func:`ringccl.resources.run_worker_bytes` for ``ringccl run``/``bench``).
        on_progress: called here, in this thread, with each item a worker puts on the queue
            passed to ``fn`` as its last argument (``fn(rank, world_size, *args, queue)``), as
            it arrives (bench rows, training events); None: no queue is passed.
        verbose: a failed worker's message carries its full traceback (default: one line).

    Returns:
        the results in rank order.
    Raises:
        ArgumentError: nproc < 1 or beyond the machine's cores or memory (unless
            ``oversubscribe``), a bad environment variable. ArgumentTypeError: nproc not int.
        WorkerError (a BackendError): a worker raised: "rank R: ExceptionType: message".
        BackendError: a worker died, or the run timed out; backend "nccl" without NCCL or with
            fewer than ``nproc`` GPUs (before any process starts).
        Interrupted (a KeyboardInterrupt): Ctrl-C or SIGTERM in this process; its ``partial``
            holds the progress items received before it.
    """
    nproc = check_int(nproc, "nproc", minimum=1)
    check_processes(nproc, WORKER_BYTES + worker_bytes, oversubscribe=oversubscribe)
    from .transport import TRANSPORTS  # imports torch
    check_environment(TRANSPORTS)  # RINGCCL_TIMEOUT=abc: one error here, not one per rank
    if str(backend).lower() == "nccl":  # torch accepts any case
        _check_nccl(nproc)
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    progress = ctx.Queue() if on_progress is not None else None
    threads = threads or max(1, usable_cores() // nproc)
    procs = _processes(ctx, (nproc, free_port(), backend, timeout, threads, os.getpid(), fn,
                             args), results, progress)
    received: list = []
    drain = functools.partial(_drain, progress, on_progress, received)
    out: dict[int, Any] = {}
    job = None
    with _interruptible() as interrupted:
        try:
            # SIGINT blocked while starting: the children inherit the mask and ignore SIGINT
            # before unblocking it, so a Ctrl-C now reaches only this process (when unblocked)
            with _sigint_blocked(), _shm_job() as job:
                for p in procs:
                    p.start()
            _collect(procs, results, out, nproc, timeout, verbose, drain,
                     poll=0.5 if progress is None else 0.1)
            drain()
        except KeyboardInterrupt as exc:
            interrupted.append(exc)
        finally:
            _end(procs, graceful=len(out) == nproc)
            if job:
                sweep(job)   # every worker is gone: what is left of this job is a leak
        if interrupted:
            drain()  # what arrived before the interrupt; the workers are gone now
            why = str(interrupted[0]) or "Ctrl-C"   # SIGINT's KeyboardInterrupt says nothing
            raise Interrupted(f"launch of {nproc} processes interrupted ({why}); every worker "
                              "was ended", partial=received) from None
    return [out[r] for r in range(nproc)]


def _processes(ctx, call: tuple, results, progress) -> list:
    """The workers of a launch (not started): rank r runs ``_worker(r, *call)``. Each ties
    itself to this process first, then unpickles its call (importing fn's module and torch): a
    launcher killed while the workers still import leaves no orphan."""
    return [ctx.Process(target=tied_call, args=(os.getpid(), bytes(ForkingPickler.dumps(
        (_worker, (r, *call)))), results, progress), daemon=True) for r in range(call[0])]


def _drain(progress, on_progress, received: list, wait: float = 0.0) -> None:
    """Hand every item on the ``progress`` queue to ``on_progress`` (waiting up to ``wait``
    seconds for the first), keeping them in ``received``; nothing without a queue."""
    if progress is None:
        return
    while True:
        try:
            item = progress.get(timeout=wait) if wait else progress.get_nowait()
        except (queue_mod.Empty, EOFError, OSError):
            return
        received.append(item)
        on_progress(item)
        wait = 0.0


#: seconds workers get between SIGTERM and SIGKILL when a launch ends early
GRACE_S = 3.0

#: seconds a peer's knock-on error waits for the error that caused it (the failing rank
#: reports after closing its connections, which is what its peers' errors report)
CAUSE_WAIT_S = 5.0

#: a rank's error that reports a peer's failure rather than its own: ringccl's peer errors,
#: and torch's and gloo's lost connections
_PEER_TYPES = frozenset({"PeerError", "RingcclTimeout"})
_PEER_GONE = re.compile(r"connection (reset|closed|refused|aborted)|broken pipe|closed by peer"
                        r"|reset by peer", re.IGNORECASE)


def _knock_on(type_name: str, cause: str) -> bool:
    """Whether a worker's error (``type_name``, its ``cause`` line) reports a peer's failure."""
    return type_name in _PEER_TYPES or bool(_PEER_GONE.search(cause))


def _worker_error(failures: list, verbose: bool) -> WorkerError:
    """The error naming the cause among ``failures`` ((rank, (cause, type, traceback)) in
    arrival order): the first that is not a knock-on, else the first."""
    rank, (cause, type_name, tb) = next(
        (f for f in failures if not _knock_on(f[1][1], f[1][0])), failures[0])
    return WorkerError(f"rank {rank}: {cause}" + (f"\n{tb}" if verbose else ""), rank=rank,
                       exc_type=type_name, worker_traceback=tb)


def _collect(procs, results, out: dict, nproc: int, timeout: float, verbose: bool,
             drain: Callable[[], None], poll: float) -> None:
    """Fill ``out`` with every rank's result; raise on a failure (its cause: a knock-on
    error waits up to :data:`CAUSE_WAIT_S` s for another rank's), a death or the timeout."""
    deadline = time.monotonic() + timeout + 30  # + start-up (importing torch) time
    gone: dict[int, float] = {}  # rank -> when it was first seen exited without a result
    failures: list = []   # (rank, (cause, type, traceback)), in arrival order: all knock-ons
    cause_by = math.inf   # when to stop waiting for the cause of the knock-on errors
    while len(out) + len(failures) < nproc and time.monotonic() < cause_by:
        drain()
        try:
            rank, ok, value = results.get(timeout=poll)
        except (EOFError, ConnectionError, FileNotFoundError) as exc:
            # a torch tensor's result lives in shared memory the exited worker freed
            raise BackendError(f"could not read a worker's result ({type(exc).__name__}: "
                               f"{exc}); return numpy arrays or plain Python values, not "
                               "torch tensors") from None
        except queue_mod.Empty:
            now = time.monotonic()
            reported = set(out) | {r for r, _ in failures}
            for r, p in enumerate(procs):
                if p.exitcode is not None and r not in reported:
                    gone.setdefault(r, now)
            # a result put just before exiting may still be in flight: wait 2 s for it
            dead = [r for r, t in gone.items() if r not in reported and (
                procs[r].exitcode != 0 or now - t > 2.0)]
            if dead:
                raise BackendError(f"rank {dead[0]} exited with code "
                                   f"{procs[dead[0]].exitcode} before reporting") from None
            if failures:
                continue
            if time.monotonic() > deadline:
                raise BackendError(f"launch timed out after {timeout:.0f} s waiting for ranks "
                                   f"{sorted(set(range(nproc)) - set(out))}") from None
            continue
        if not ok:
            failures.append((rank, value))
            if not _knock_on(value[1], value[0]):
                break
            cause_by = min(cause_by, time.monotonic() + CAUSE_WAIT_S)
            continue
        out[rank] = value
    if failures:
        raise _worker_error(failures, verbose)


def _end(procs, graceful: bool) -> None:
    """Join the workers; after a failure or an interrupt, SIGTERM them, then SIGKILL those
    still alive after GRACE_S seconds, and wait for every one (no process outlives launch)."""
    if graceful:
        for p in procs:
            p.join(timeout=10)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + GRACE_S
    for p in alive:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in alive:
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


@contextlib.contextmanager
def _shm_job():
    """Set ``RINGCCL_SHM_JOB`` to a fresh job id while the workers start (they inherit it);
    yields it, or None when the caller had set one (then nothing is swept: it may be shared)."""
    if os.environ.get("RINGCCL_SHM_JOB"):
        yield None
        return
    job = f"L{os.getpid()}x{next(_jobs)}"
    os.environ["RINGCCL_SHM_JOB"] = job
    try:
        yield job
    finally:
        del os.environ["RINGCCL_SHM_JOB"]


@contextlib.contextmanager
def _sigint_blocked():
    """Block SIGINT in this thread (POSIX); a pending one is delivered when unblocked."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _interruptible():
    """Turn SIGTERM into KeyboardInterrupt while launching (main thread only: elsewhere Python
    cannot install handlers, and the default action, ending the process, still ends the workers
    through their parent-death signal). Yields a list that collects the interrupt."""
    caught: list = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def on_sigterm(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGTERM, previous)
