"""Start N local processes with a gloo process group on 127.0.0.1, without torchrun.

``launch(fn, nproc, *args)`` spawns ``nproc`` processes; each initializes
``torch.distributed`` (TCP rendezvous on a free loopback port), calls ``fn(rank, world_size,
*args)`` and sends its return value back. The parent returns the per-rank results in rank order.
A worker that raises makes ``launch`` raise :class:`~ringccl.errors.BackendError` with that
rank's traceback; a worker that dies or a run that exceeds ``timeout`` seconds ends every worker
and raises too, so nothing hangs.
"""

from __future__ import annotations

import datetime
import os
import queue as queue_mod
import socket
import time
import traceback
from typing import Any, Callable

from ..args import check_int
from ..errors import BackendError

__all__ = ["launch", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, backend: str, timeout: float, threads: int,
            fn: Callable, args: tuple, results) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(threads)
    try:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
        try:
            value = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, value))
    except BaseException:  # report everything, including KeyboardInterrupt, to the parent
        results.put((rank, False, traceback.format_exc()))


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
           timeout: float = 300.0, threads: int | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``nproc`` fresh local processes.

    Args:
        fn: a picklable (module-level) function; its return value must be picklable and not
            hold torch tensors (they travel through shared memory that ends with the worker:
            return ``t.numpy()`` or lists).
        nproc: number of processes (>= 1).
        backend: torch.distributed backend ("gloo"; "nccl" needs one GPU per process).
        timeout: seconds for the whole run and for each collective's rendezvous.
        threads: torch intra-op threads per process (default: cores // nproc, at least 1).

    Returns:
        the results in rank order.
    Raises:
        ArgumentError: nproc < 1; ArgumentTypeError: nproc not an integer.
        BackendError: a worker raised, died, or the run timed out; backend "nccl" without NCCL
            or with fewer than ``nproc`` GPUs (before any process starts).
    """
    nproc = check_int(nproc, "nproc", minimum=1)
    if str(backend).lower() == "nccl":  # torch accepts any case
        _check_nccl(nproc)
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    threads = threads or max(1, (os.cpu_count() or 1) // nproc)
    procs = [ctx.Process(target=_worker, args=(r, nproc, port, backend, timeout, threads, fn,
                                               args, results), daemon=True)
             for r in range(nproc)]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    deadline = time.monotonic() + timeout + 30  # + start-up (importing torch) time
    gone: dict[int, float] = {}  # rank -> when it was first seen exited without a result
    try:
        while len(out) < nproc:
            try:
                rank, ok, value = results.get(timeout=0.5)
            except (EOFError, ConnectionError, FileNotFoundError) as exc:
                # a torch tensor's result lives in shared memory the exited worker freed
                raise BackendError(f"could not read a worker's result ({type(exc).__name__}: "
                                   f"{exc}); return numpy arrays or plain Python values, not "
                                   "torch tensors") from None
            except queue_mod.Empty:
                now = time.monotonic()
                for r, p in enumerate(procs):
                    if p.exitcode is not None and r not in out:
                        gone.setdefault(r, now)
                # a result put just before exiting may still be in flight: wait 2 s for it
                dead = [r for r, t in gone.items() if r not in out and (
                    procs[r].exitcode != 0 or now - t > 2.0)]
                if dead:
                    raise BackendError(f"rank {dead[0]} exited with code "
                                       f"{procs[dead[0]].exitcode} before reporting") from None
                if time.monotonic() > deadline:
                    raise BackendError(f"launch timed out after {timeout:.0f} s waiting for ranks "
                                       f"{sorted(set(range(nproc)) - set(out))}") from None
                continue
            if not ok:
                raise BackendError(f"rank {rank} failed:\n{value}")
            out[rank] = value
    finally:
        for p in procs:
            p.join(timeout=10 if len(out) == nproc else 0.1)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    return [out[r] for r in range(nproc)]
