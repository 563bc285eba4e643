"""Asynchronous ringccl collectives: a background thread with a process group of its own.

The executor (:mod:`ringccl.backends.torch.executor`) runs a schedule synchronously in the
calling thread. Overlapping communication with backward needs the collective to run *while*
autograd keeps computing, so :class:`Communicator` moves it to a worker thread and hands back a
``torch.futures.Future`` (what DDP communication hooks return, and what ``async_op=True`` gives
in torch.distributed).

Why this cannot deadlock:

1. **A private process group.** The constructor creates one with ``dist.new_group`` and only
   the worker thread ever sends or receives on it, so its point-to-point messages can never be
   matched against messages the caller's thread exchanges on other groups (gloo keeps separate
   connections per group).
2. **One worker, first in first out.** Jobs run one at a time in submission order. If every rank
   submits the same collectives in the same order - DDP launches buckets by bucket index, and
   :class:`~ringccl.training.bucketer.GradientBucketer` does the same whatever order gradients
   become ready in - then the k-th collective of every rank is the same collective, and the
   executor's matched isend/irecv order does the rest.
3. **The worker never waits for the caller.** A job owns the tensors it was given until its
   future completes; only the caller waits (on futures), never the worker.

A collective that fails on one rank fails its future; peers stuck in the same collective get
the process group's timeout. Staging buffers are per thread (see :mod:`ringccl.engine.workspace`).
"""

from __future__ import annotations

import datetime
import queue
import threading
import weakref
from typing import Any, Callable

import torch
import torch.distributed as dist

from ..errors import BackendError

__all__ = ["Communicator"]


def _group_timeout(group) -> datetime.timedelta | None:
    """The timeout ``group`` (None: the default group) was created with, so a private copy
    inherits ``init_process_group(timeout=...)`` instead of torch's 30-minute default; None where
    this torch does not expose it."""
    pg = dist.group.WORLD if group is None else group
    try:
        return pg._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError, ValueError):
        return None


def _stop(jobs: queue.Queue, thread: threading.Thread) -> None:
    """Let the worker finish the queued jobs, then join it."""
    jobs.put(None)
    if thread is not threading.current_thread():
        thread.join()


class Communicator:
    """Runs collectives on a background thread over a private copy of ``group``.

    Construction is a collective call: every rank of the *default* group must construct its
    Communicators in the same order (``dist.new_group`` requires it), also ranks outside
    ``group``.

    Args:
        group: the ranks to communicate with (None: the default group).
        timeout: timeout of the private process group (None: ``group``'s own, e.g. the one given
            to ``init_process_group``).

    Example::

        comm = Communicator()
        fut = comm.submit(lambda group: rt.all_reduce(t, group=group))
        ...                                  # compute while the ring runs
        fut.wait()
    """

    def __init__(self, group=None, timeout: datetime.timedelta | None = None):
        if not dist.is_available() or not dist.is_initialized():
            raise BackendError("torch.distributed is not initialized: call "
                               "torch.distributed.init_process_group first")
        ranks = None if group is None else dist.get_process_group_ranks(group)
        timeout = _group_timeout(group) if timeout is None else timeout
        kwargs = {} if timeout is None else {"timeout": timeout}
        self.group = dist.new_group(ranks, **kwargs)
        self._jobs: queue.Queue = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="ringccl-communicator",
                                        daemon=True)
        self._thread.start()
        # a communicator never closed stops with its object, or at the interpreter's exit
        # before finalization (weakref.finalize's atexit): a daemon thread still running a job
        # then would take the GIL from torch's C++ code after finalization began and abort
        # the process ("terminate called without an active exception")
        self._stop = weakref.finalize(self, _stop, self._jobs, self._thread)

    def submit(self, fn: Callable[[Any], Any]) -> torch.futures.Future:
        """Queue ``fn(group)`` to run on the worker thread with the private process group.

        Returns:
            a future that completes with ``fn``'s return value, or with its exception.
        Raises:
            BackendError: the communicator is closed.
        """
        if self._closed:
            raise BackendError("this Communicator is closed")
        future: torch.futures.Future = torch.futures.Future()
        self._jobs.put((fn, future))
        return future

    def _loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            fn, future = item
            try:
                value = fn(self.group)
            except BaseException as exc:  # hand every failure to the waiting caller
                future.set_exception(exc)
                continue
            future.set_result(value)

    def close(self) -> None:
        """Finish the queued jobs and stop the worker thread (the process group stays)."""
        if not self._closed:
            self._closed = True
            self._stop()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
