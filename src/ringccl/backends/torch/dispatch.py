"""One ringccl process group's state (:class:`Group`) and its dispatcher: the group's
collectives run one at a time in issue order, inline or on its worker thread.

It follows the dispatch policy of :mod:`ringccl.backends.torch.process_group` (its module
docstring): a call runs inline, in the caller's thread, when the worker is idle and the call
moves at most :func:`inline_bytes`; else on the worker, in issue order either way.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import pickle
import queue
import threading
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from ... import units
from ...errors import ArgumentError
from ..shm.hierarchical import host_layout
from .hybrid import HybridSetup, release_hybrid_state
from .shm import ShmSetup, release_shm_state
from .transport import GlooTransport, exchange_hosts, group_transport

__all__ = ["Group", "Work", "DoneWork", "INLINE_BYTES", "inline_bytes", "backend_thread",
           "live", "autograd_free"]


class Group:
    """One ringccl process group's state: identity, the inner gloo group, hosts, the worker.

    Attributes:
        rank, size: this process's rank in the group and the group's size.
        global_ranks: the group's ranks in the default group, by group rank.
        name: torch's group name (its PrefixStore prefix), for log lines.
        timeout: the group's timeout (``init_process_group(timeout=...)``).
        hosts: every rank's host identity (:func:`ringccl.backends.shm.host_id`), by rank.
        transport: "shm", "hybrid" or "p2p", what the group's collectives run on
            (:func:`~ringccl.backends.torch.transport.group_transport`).
        layout: where the ranks run (:class:`ringccl.backends.shm.hierarchical.HostLayout`); its
            ``local_size`` (ranks per host, hosts of equal blocks of consecutive ranks) is the
            two-level schedules' ``local_size`` over "hybrid".
        shm_setup: the shared-memory set-up (:class:`ringccl.backends.torch.shm.ShmSetup`) when
            ``transport == "shm"``, else None; hybrid_setup: the hybrid transport's
            (:class:`ringccl.backends.torch.hybrid.HybridSetup`) when ``transport == "hybrid"``.
        threaded: False under ``RINGCCL_BACKEND_THREAD=0`` (every call inline, no worker).
        inline_bytes: the dispatch policy's threshold in bytes (:func:`inline_bytes`).
        issued: how many collectives have taken their place in issue order (:meth:`submit`).
        choices: the chooser's answers per call signature
            (:func:`ringccl.backends.torch.pg_front.call_algorithm`).
    """

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta,
                 global_ranks: Sequence[int], name: str):
        self.rank, self.size, self.name, self.timeout = rank, size, name, timeout
        # parsed first: a bad value fails the group before any rendezvous
        self.threaded = backend_thread()
        self.inline_bytes = inline_bytes()
        self.global_ranks = list(global_ranks)
        # its own key space in the group's store: torch's wrapper groups and our exchange of
        # host names never collide with gloo's rendezvous keys
        self.inner = dist.ProcessGroupGloo(dist.PrefixStore("ringccl/gloo", store), rank, size,
                                           timeout)
        self.hosts = exchange_hosts(dist.PrefixStore("ringccl/host", store), rank, size,
                                    timeout)
        self.layout = host_layout(self.hosts, rank)
        self.transport = group_transport(self.hosts, size)
        # the segment's set-up exchange goes over the inner gloo group: it runs on the worker
        # thread, inside this group's first collective, where our own collectives cannot;
        # with a store of its own: a peer that leaves the set-up is named
        setup = ShmSetup(rank, size, self.global_ranks, self.all_gather_object,
                         timeout.total_seconds(), dist.PrefixStore("ringccl/shm", store))
        self.shm_setup = setup if self.transport == "shm" else None
        self.hybrid_setup = (HybridSetup(setup, self.hosts, GlooTransport(
            self.inner, self.global_ranks, None)) if self.transport == "hybrid" else None)
        self.logged: set = set()
        # (collective, nbytes, RINGCCL_ALGO, RINGCCL_DEBUG) -> (algorithm, params): the
        # chooser's answers (:func:`ringccl.backends.torch.pg_front.call_algorithm`)
        self.choices: dict = {}
        self._jobs: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        # the submit lock orders every call (its place in issue order is taken under it) and
        # guards _outstanding, the jobs handed to the worker and not finished yet; the run lock
        # is held by whoever runs a collective (the worker, per job, or an inline caller), so a
        # queued job never overlaps an inline one issued before it
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._outstanding = 0
        self.issued = 0   # calls placed in issue order so far (under the submit lock)
        self.closed = False

    # -- small exchanges over the inner group (the front end's group adapter) ------------------
    def allreduce_max(self, values: Sequence[int]) -> list[int]:
        t = torch.tensor(list(values), dtype=torch.int64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        self.inner.allreduce([t], opts).wait()
        return [int(v) for v in t]

    def all_gather_object(self, obj: Any) -> list:
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        (n,) = self.allreduce_max([data.numel()])
        padded = torch.zeros(n + 8, dtype=torch.uint8)
        padded[:8] = torch.tensor([data.numel()], dtype=torch.int64).view(torch.uint8)
        padded[8:8 + data.numel()] = data
        out = [[torch.empty_like(padded) for _ in range(self.size)]]
        self.inner.allgather(out, [padded]).wait()
        objs = []
        for t in out[0]:
            k = int(t[:8].view(torch.int64))
            objs.append(pickle.loads(t[8:8 + k].numpy().tobytes()))
        return objs

    # -- running the group's collectives, one at a time in issue order --------------------------
    def submit(self, job: Callable[[], Any], nbytes: int = 0) -> torch.futures.Future:
        """Run ``job()`` (returns the future's value) after every collective issued before it;
        returns its future (:meth:`issue`, the future completed when the call ran inline).

        Raises:
            RuntimeError: the group has been destroyed.
        """
        done = self.issue(job, nbytes)
        if type(done) is tuple:
            return completed_future(done)
        return done.then(_unwrap)

    def issue(self, job: Callable[[], Any], nbytes: int = 0,
              no_grad: bool = True) -> "torch.futures.Future | tuple[bool, Any]":
        """Run ``job()`` after every collective issued before it.

        The dispatch policy (module docstring): inline — in the caller's thread — when the
        group runs without a worker (``RINGCCL_BACKEND_THREAD=0``), or when the worker has
        nothing queued or running and ``nbytes`` (the bytes the call moves) is at most
        :attr:`inline_bytes`; the outcome is then returned, ``(True, value)`` or ``(False,
        exception)``. Else the job is handed to the worker and a future of that outcome returned
        (its value the same tuple: :meth:`Work.of_outcome` wraps it). Either way a failure of
        ``job`` is in the outcome, never raised from here.
        ``no_grad=False`` (the caller's tensors need no ``torch.no_grad``: :func:`autograd_free`)
        runs an inline job in the caller's grad mode; the worker always runs under
        ``torch.no_grad``.

        Raises:
            RuntimeError: the group has been destroyed.
        """
        if self.closed:
            raise RuntimeError(f"ringccl process group {self.name!r} has been destroyed")
        with self._lock:
            self.issued += 1
            if self.threaded and (self._outstanding > 0 or nbytes > self.inline_bytes):
                settled: torch.futures.Future = torch.futures.Future()
                self._outstanding += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._worker_loop,
                                                    name=f"ringccl-backend-{self.name}",
                                                    daemon=True)
                    self._thread.start()
                self._jobs.put((job, settled))
                return settled
            # taken before the submit lock is released: a call issued after this one (from
            # any thread) runs after it, inline (it waits here) or on the worker (it waits
            # for the run lock)
            self._run_lock.acquire()
        try:
            return _run(job) if no_grad else _run_plain(job)
        finally:
            self._run_lock.release()

    def _worker_loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, settled = item
            with self._run_lock:
                outcome = _run(job)
                # counted down before the future is settled: a caller woken by it finds the
                # worker idle and may run its next small call inline (counted down after, the
                # next call would race the count and, once queued, keep every later one queued).
                # Lock order run → submit is safe: an inline caller waits for the run lock under
                # the submit lock only when the count is 0, i.e. not while a job of ours runs
                with self._lock:
                    self._outstanding -= 1
            settled.set_result(outcome)   # outside the locks: callbacks may issue collectives

    def close(self) -> None:
        """Finish the queued collectives, stop the worker, drop the inner gloo group."""
        if self.closed:
            return
        self.closed = True
        thread = self._thread
        if thread is not None:
            self._jobs.put(None)
            if thread is not threading.current_thread():
                thread.join(self.timeout.total_seconds() + 5)
        release_shm_state(self)   # unmaps the segment (its name is gone already)
        release_hybrid_state(self)
        # the last references to the inner gloo group: freed now, its threads joined
        self.inner = self.shm_setup = self.hybrid_setup = None


class Work(dist.Work):
    """A collective's handle, as gloo's: ``wait()`` blocks until the collective is done and
    raises its failure (PeerError/RingcclTimeout, ...); ``get_future()`` is the future whose
    value is the output tensors (DDP's comm hooks and bucket futures read it) and which fails,
    in C++ too, when the collective fails (:func:`completed_future`).

    Not ``torch._C._distributed_c10d._create_work_from_future``: that Work's ``wait()`` returns
    True even when the future holds an exception (torch 2.13), so a dead peer would pass
    silently. torch's C++ callers (DDP's reducer) reach these methods through its Python-Work
    trampoline, as for torch's own Python test groups."""

    def __init__(self, future: torch.futures.Future,
                 settled: torch.futures.Future | None = None):
        super().__init__()
        self._future = future
        self._settled = settled   # the outcome (ok, value) where known: its exception as is

    @classmethod
    def of_outcome(cls, settled: torch.futures.Future) -> "Work":
        """The Work of a future whose value will be the outcome ``(ok, value)``
        (:meth:`Group.issue`'s)."""
        return cls(settled.then(_unwrap), settled)

    def _outcome(self) -> tuple[bool, Any]:
        if self._settled is not None:
            return self._settled.wait()
        try:
            return True, self._future.wait()
        except Exception as exc:   # the failure is the answer
            return False, exc

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        ok, value = self._outcome()   # bounded by the group timeout
        if not ok:
            raise value               # the collective's exception
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return (self._settled or self._future).done()

    def is_success(self) -> bool:
        return self.is_completed() and self._outcome()[0]

    def exception(self):
        ok, value = self._outcome()
        return None if ok else value

    def result(self) -> list:
        ok, value = self._outcome()
        if not ok:
            raise value
        return value


_work_init = dist.Work.__init__


class DoneWork(dist.Work):
    """The handle of a collective that ran inline (:meth:`Group.issue`): :class:`Work`'s
    answers from the known outcome, without a ``torch.futures.Future`` per call. The future
    is made, completed, on the first ``get_future()`` (DDP's comm hooks): ``wait()``,
    ``result()`` and the future answer exactly as :class:`Work`'s would."""

    __slots__ = ("_outcome", "_future")   # made once per inline call: no instance dict

    def __init__(self, outcome: tuple):
        _work_init(self)   # dist.Work's, named once (super() costs ~0.2 us a call)
        self._outcome = outcome
        self._future: torch.futures.Future | None = None

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        if not self._outcome[0]:
            raise self._outcome[1]     # the collective's exception
        return True

    def get_future(self) -> torch.futures.Future:
        if self._future is None:
            self._future = completed_future(self._outcome)
        return self._future

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return self._outcome[0]

    def exception(self):
        ok, value = self._outcome
        return None if ok else value

    def result(self) -> list:
        if not self._outcome[0]:
            raise self._outcome[1]     # the collective's exception
        return self._outcome[1]


#: every group not collected yet (:func:`_close_at_exit`); a process group adds its own
live: "weakref.WeakSet[Group]" = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """At the interpreter's exit, before finalization: close the groups nobody destroyed
    (their worker threads joined, their inner gloo groups freed), saying so once, as torch
    asks every program to call ``destroy_process_group`` (its ProcessGroupNCCL warns "process
    group has NOT been destroyed"). A worker thread left running into finalization would
    take the GIL from torch's C++ code after finalization began and abort the process
    ("terminate called without an active exception")."""
    left = [g for g in list(live) if not g.closed]
    if left:
        logging.getLogger("ringccl").warning(
            "ringccl: %d process group(s) were not destroyed before exit (%s); call "
            "torch.distributed.destroy_process_group() at the end of the program so that "
            "pending collectives finish and the group's threads end first. Closing them now.",
            len(left), ", ".join(repr(g.name) for g in left))
    for g in left:
        g.close()


def _run(job: Callable[[], Any]) -> tuple[bool, Any]:
    """``(True, job())``, or ``(False, exception)``: every failure is handed to whoever waits
    on the Work, as gloo's Work carries its failure."""
    with torch.no_grad():   # collectives write parameters and their views, below autograd
        return _run_plain(job)


def _run_plain(job: Callable[[], Any]) -> tuple[bool, Any]:
    """:func:`_run` in the caller's grad mode (tensors that need no ``torch.no_grad``)."""
    try:
        return True, job()
    except BaseException as exc:  # noqa: B902  (the Work's wait() re-raises it)
        return False, exc


def autograd_free(tensors) -> bool:
    """Whether writing ``tensors`` in place is the same with grad mode on as under
    ``torch.no_grad``: none requires grad and none is a view (a view's base may require grad,
    and a view made under ``no_grad`` refuses in-place writes in grad mode), or grad mode is
    off already. Then autograd records nothing and checks nothing for the collective's
    writes (of these tensors and of buffers made from them), so its ``torch.no_grad`` can be
    left out."""
    if not torch.is_grad_enabled():
        return True
    for t in tensors:
        if t.requires_grad or t._is_view():
            return False
    return True


def _unwrap(settled: torch.futures.Future) -> Any:
    """A chained future's callback: the outcome's value, or its exception raised, which makes
    the chained future failed in C++ too. ``Future.set_exception`` stores the exception as the
    future's value with a Python-only unwrap; DDP's reducer reads that value in C++ as tensors
    (``parseCppCommHookResult``: SIGSEGV), so a failure must be an error of the future itself."""
    ok, value = settled.value()
    if ok:
        return value
    raise value


def completed_future(outcome: tuple[bool, Any]) -> torch.futures.Future:
    """A completed future of ``outcome``: ``(True, value)`` its value; ``(False, exception)``
    an error of the future itself (:func:`_unwrap`), whose ``wait()`` raises a RuntimeError
    carrying the exception's type and message, as a failed gloo or NCCL Work's future does."""
    future: torch.futures.Future = torch.futures.Future()
    if outcome[0]:
        future.set_result(outcome[1])
        return future
    chained = future.then(_unwrap)
    future.set_result(outcome)
    return chained


#: the default inline threshold (bytes a call moves), from benchmarks/bench_backend.py
#: (docs/backend.md, "Dispatch policy"): up to it an inline all_reduce on shared
#: memory blocks its caller for 0.14-0.41 ms (2 processes) / 0.67-1.1 ms (4), about 1-3 worker
#: hand-offs (0.15-0.32 / 0.45-0.62 ms quiet), which every synchronous call saves; above it
#: (1 MiB: 0.5 / 2.1 ms, 4 MiB: 1.5 / 5.1 ms) the call is long enough that the overlap the
#: worker gives async callers (DDP's buckets) is worth the hand-off
INLINE_BYTES = 256 * 1024


def inline_bytes() -> int:
    """The inline threshold in bytes: ``RINGCCL_BACKEND_INLINE_BYTES`` (a size: ``65536``,
    ``256KiB``; ``0`` hands every non-empty call to the worker) or :data:`INLINE_BYTES`.

    Raises:
        ArgumentError (a ValueError): a value that is not a non-negative size.
    """
    text = os.environ.get("RINGCCL_BACKEND_INLINE_BYTES")
    if text is None or text == "":
        return INLINE_BYTES
    try:
        return units.size(text)
    except ArgumentError as exc:
        raise ArgumentError(f"RINGCCL_BACKEND_INLINE_BYTES={text!r} is not a size in bytes "
                            f"(allowed: a non-negative size such as 0, 65536, 256KiB): "
                            f"{exc}") from None


def backend_thread() -> bool:
    """``RINGCCL_BACKEND_THREAD``: "1" (or unset) hands long calls to the group's worker
    thread, "0" runs every collective inline.

    Raises:
        ArgumentError: another value (named, with the allowed ones).
    """
    text = os.environ.get("RINGCCL_BACKEND_THREAD", "")
    if text not in ("", "0", "1"):
        raise ArgumentError(f"RINGCCL_BACKEND_THREAD={text!r} must be '1' (long collectives on "
                            "the group's worker thread, the default) or '0' (every collective "
                            "inline)")
    return text != "0"
