"""ringccl as a torch.distributed backend: ``dist.init_process_group("ringccl")``.

``import ringccl.torch`` registers the backend ``"ringccl"`` (``Backend.register_backend`` with
``extended_api=True``, devices ``["cpu"]``); the package's ``torch.backends`` entry point
(:mod:`ringccl.torch_autoload`) does the same for scripts that only pass the name (torch >= 2.5 loads those entry points when it is
imported; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off). Then every torch.distributed call
on a ringccl group — ``dist.all_reduce``, DDP's gradient buckets, FSDP2's all-gathers and
reduce-scatters, ``dist.new_group(ranks, backend="ringccl")`` — runs a ringccl schedule::

    import torch.distributed as dist, ringccl.torch      # registers "ringccl"
    dist.init_process_group("ringccl")                    # torchrun's env://, or store/rank/...
    model = torch.nn.parallel.DistributedDataParallel(model)   # unchanged

How (torch's own pattern for Python process groups, ``torch.testing._internal.distributed.
multi_threaded_pg``): the creator returns a :class:`RingcclProcessGroup`, a subclass of
``torch.distributed.ProcessGroup`` whose collectives are Python methods, so torch uses it as the
group itself. Each group owns

* its transport, chosen once when the group is created from every rank's host identity
  (:func:`ringccl.shm.host_id`, exchanged through the group's store; ``RINGCCL_HOST_ID`` splits
  one machine into "hosts" for tests): every rank on this host (and x86-64) → the
  shared-memory transport (:mod:`ringccl.shm`: one segment per group, set up at the group's
  first collective with its exchange over the inner gloo group, freed by
  ``destroy_process_group``); otherwise gloo point-to-point on the inner gloo group
  (:class:`_GlooTransport`, tag :data:`COLLECTIVE_TAG`). ``RINGCCL_TRANSPORT=p2p`` forces gloo
  point-to-point, ``=shm`` forces shared memory (refused at creation across hosts). Either way
  the run itself is :mod:`ringccl.torch.executor`'s (``_execute_shm``, :func:`~ringccl.torch.
  executor.run_p2p`).
* an inner gloo group (``ProcessGroupGloo`` on a ``PrefixStore`` of the group's store) that
  carries the user's ``send``/``recv`` (their own tags), the small exchanges (the cross-rank
  check, all_to_all's block sizes, ``barrier``, the shared-memory set-up) and, off one host,
  the schedules' messages. A raw gloo object, not a registered group: nothing is added to
  torch's group registry, ``dist.get_rank`` and friends never see it, and
  ``destroy_process_group`` on ours frees it with no second teardown.
* one worker thread that runs the group's collectives one at a time in issue order (so the
  k-th collective of every rank is the same one), under ``torch.no_grad`` (grad mode is per
  thread), completing each call's ``torch.futures.Future`` with the value gloo's would carry
  (the output tensors: ``[tensor]`` for all_reduce, what DDP's comm hooks read).

**Dispatch policy** (:meth:`_Group.submit`). Handing a call to the worker costs a thread
hand-off (measured 145-320 us per call for 2 processes, 450-620 us for 4, on the 2-core test
machine: docs/backend.md), more than a small all_reduce itself costs on shared memory; the
worker pays only where the caller has something to overlap with a long call (DDP's reducer
launches its bucket all-reduces from autograd hooks and waits at the end of backward). So a
call runs *inline*, in the caller's thread, returning an already-completed Work, when

* the worker has nothing queued or running, and
* the call moves at most ``RINGCCL_BACKEND_INLINE_BYTES`` bytes (default :data:`INLINE_BYTES`
  = 256 KiB: up to it the inline call costs about 1-3 hand-offs, measured; ``0`` sends every
  non-empty call to the worker);

everything else goes to the worker. Issue order holds across threads: the decision and the
count of outstanding worker jobs are taken under one submit lock, and a run lock is held by the
worker per job and by an inline call before it lets go of the submit lock, so a call issued
after an inline one (from any thread) runs after it. Failures are the same either way: the
Work's ``wait()`` / ``get_future()`` raise the collective's failure; only refusals of the
arguments (dtype, op, root) raise from the call itself, as before. ``RINGCCL_BACKEND_THREAD=0``
runs every collective inline (no worker).

Each collective is the ringccl front end's flow (:mod:`ringccl.frontend`: contract → working
buffer → schedule → engine) with ringccl.torch's tensor dialect and this group as its group
adapter; the algorithm is chosen per call by the one chooser (:func:`ringccl.costmodel.choice.
choose`: ``RINGCCL_ALGO``, else the transport's choice, the same as ringccl.torch's) and
logged once per (collective, size class, group) with ``RINGCCL_DEBUG=INFO``, naming the
transport and the cost model's predicted time on it.

Errors, as gloo's: what ringccl cannot do (``PREMUL_SUM``, a dtype outside ringccl's set, a
bitwise op on floats, AVG on integers) raises ``RuntimeError`` naming the op and dtype, at the
call; a peer that dies or stalls fails the waiting ranks' Work within the group's timeout
(``init_process_group(timeout=...)``, applied by the inner gloo group to every wait).

References: torch.distributed's "Third-party backends" (``Backend.register_backend``);
NCCL_ALGO / NCCL_DEBUG (NCCL's environment variables), which RINGCCL_ALGO / RINGCCL_DEBUG mirror.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue
import socket
import threading
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from ... import engine, frontend, units
from .. import shm
from ...args import check_rank
from ...consistency import debug_level
from ...errors import ArgumentError
from ...frontend import debug
from ...ops import ReduceOp
from ..shm.hierarchical import host_layout
from . import executor, hybrid
from ...costmodel import choice
from .collectives import _SUPPORTED, _Torch

__all__ = ["BACKEND_NAME", "RingcclProcessGroup", "register", "create_process_group",
           "COLLECTIVE_TAG", "SIZE_CLASSES", "size_class", "host_id"]

#: the name given to ``init_process_group`` / ``new_group(backend=...)``
BACKEND_NAME = "ringccl"

#: the gloo tag of the schedules' point-to-point messages on the inner group. gloo matches a
#: receive to a send by (peer, tag) in posting order; users' ``dist.send`` tags are small
#: non-negative ints (default 0), so a collective's messages, posted from the worker thread,
#: can never be matched against a user's, posted from theirs. gloo tags are uint32.
COLLECTIVE_TAG = (1 << 31) - 7

# torch.distributed's RedOpType -> ringccl's ReduceOp (PREMUL_SUM, and anything newer, absent)
_OPS = {dist.ReduceOp.SUM: ReduceOp.SUM, dist.ReduceOp.PRODUCT: ReduceOp.PRODUCT,
        dist.ReduceOp.MIN: ReduceOp.MIN, dist.ReduceOp.MAX: ReduceOp.MAX,
        dist.ReduceOp.AVG: ReduceOp.AVG, dist.ReduceOp.BAND: ReduceOp.BAND,
        dist.ReduceOp.BOR: ReduceOp.BOR, dist.ReduceOp.BXOR: ReduceOp.BXOR}


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _reduce_op(opts_op, dtype, collective: str) -> ReduceOp:
    """torch's ``opts.reduceOp`` as ringccl's ReduceOp, refused (RuntimeError, as gloo's
    "Cannot use ReduceOp.PREMUL_SUM with Gloo") where ringccl cannot reduce it on ``dtype``."""
    kind = getattr(opts_op, "op", opts_op)   # a ReduceOp object carries its RedOpType in .op
    op = _OPS.get(kind)
    name = str(kind).rsplit(".", 1)[-1]
    if op is None:
        raise RuntimeError(f"Cannot use ReduceOp.{name} with ringccl ({collective}, dtype "
                           f"{_dtype_name(dtype)}); ringccl reduces with SUM, PRODUCT, MIN, MAX, "
                           "AVG, BAND, BOR, BXOR")
    is_float = dtype.is_floating_point
    if op is ReduceOp.AVG and not is_float:
        raise RuntimeError(f"Cannot use ReduceOp.AVG with non-floating dtype "
                           f"{_dtype_name(dtype)} ({collective}) on ringccl")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and is_float:
        raise RuntimeError(f"Cannot use ReduceOp.{name} with non-integral dtype "
                           f"{_dtype_name(dtype)} ({collective}) on ringccl")
    return op


def _check_dtype(tensors: Sequence[torch.Tensor], collective: str, same: bool = False) -> None:
    """Refuse, as gloo's "Invalid scalar type" RuntimeError, dtypes and devices ringccl does not
    move, and with ``same`` (a collective whose inputs and outputs are one array type) tensors
    of different dtypes, as gloo's "invalid tensor type" (ringccl.torch's functions refuse them
    too); named."""
    for t in tensors:
        if t.dtype not in _SUPPORTED:
            allowed = ", ".join(_dtype_name(d) for d in _SUPPORTED)
            raise RuntimeError(f"ringccl {collective}: dtype {_dtype_name(t.dtype)} is not "
                               f"supported (Invalid scalar type); expected one of {allowed}")
        if t.device.type != "cpu":
            raise RuntimeError(f"ringccl {collective}: tensors must be on the CPU, got device "
                               f"{t.device} (the backend is registered for devices ['cpu'])")
    dtypes = {t.dtype for t in tensors} if same else ()
    if len(dtypes) > 1:
        raise RuntimeError(f"ringccl {collective}: invalid tensor type: the input and output "
                           f"tensors must have one dtype, got "
                           f"{', '.join(sorted(_dtype_name(d) for d in dtypes))}")


# -- the inner gloo group and the transport over it --------------------------------------------

class _GlooTransport(executor.P2PTransport):
    """The engine's transport (:class:`ringccl.engine.Transport`) over a raw gloo group:
    ``ProcessGroupGloo.send/recv`` with :data:`COLLECTIVE_TAG`; waits, failure mapping and peer
    names are ringccl.torch's point-to-point transport's (``peers`` = the global ranks)."""

    def __init__(self, inner, global_ranks: Sequence[int], timeout: datetime.timedelta | None):
        super().__init__(None, global_ranks, timeout)
        self.inner = inner

    def isend(self, s, data):
        return self.inner.send([data], s.peer, COLLECTIVE_TAG)

    def irecv(self, r, landing):
        return self.inner.recv([landing], r.peer, COLLECTIVE_TAG)

    def batch(self, sends, recvs) -> list:   # gloo matches independent isend/irecv: dataflow
        raise NotImplementedError("the gloo transport runs the dataflow driver")


class _Group:
    """One ringccl process group's state: identity, the inner gloo group, hosts, the worker.

    Attributes:
        rank, size: this process's rank in the group and the group's size.
        global_ranks: the group's ranks in the default group, by group rank.
        name: torch's group name (its PrefixStore prefix), for log lines.
        timeout: the group's timeout (``init_process_group(timeout=...)``).
        hosts: every rank's host identity (:func:`ringccl.shm.host_id`), by group rank.
        transport: "shm", "hybrid" or "p2p", what the group's collectives run on
            (:func:`_transport`).
        layout: where the ranks run (:class:`ringccl.shm.hierarchical.HostLayout`); its
            ``local_size`` (ranks per host, hosts of equal blocks of consecutive ranks) is the
            two-level schedules' ``local_size`` over "hybrid".
        shm_setup: the shared-memory set-up (:class:`ringccl.torch.executor.ShmSetup`) when
            ``transport == "shm"``, else None; hybrid_setup: the hybrid transport's
            (:class:`ringccl.torch.hybrid.HybridSetup`) when ``transport == "hybrid"``.
        threaded: False under ``RINGCCL_BACKEND_THREAD=0`` (every call inline, no worker).
        inline_bytes: the dispatch policy's threshold in bytes (:func:`inline_bytes`).
        issued: how many collectives have taken their place in issue order (:meth:`submit`).
    """

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta,
                 global_ranks: Sequence[int], name: str):
        self.rank, self.size, self.name, self.timeout = rank, size, name, timeout
        # parsed first: a bad value fails the group before any rendezvous
        self.threaded = os.environ.get("RINGCCL_BACKEND_THREAD", "1") != "0"
        self.inline_bytes = inline_bytes()
        self.global_ranks = list(global_ranks)
        # its own key space in the group's store: torch's wrapper groups and our exchange of
        # host names never collide with gloo's rendezvous keys
        self.inner = dist.ProcessGroupGloo(dist.PrefixStore("ringccl/gloo", store), rank, size,
                                           timeout)
        self.hosts = _exchange_hosts(dist.PrefixStore("ringccl/host", store), rank, size,
                                     timeout)
        self.layout = host_layout(self.hosts, rank)
        self.transport = _transport(self.hosts, size)
        # the segment's set-up exchange goes over the inner gloo group: it runs on the worker
        # thread, inside this group's first collective, where our own collectives cannot
        setup = executor.ShmSetup(rank, size, self.global_ranks, self.all_gather_object,
                                  timeout.total_seconds())
        self.shm_setup = setup if self.transport == "shm" else None
        self.hybrid_setup = (hybrid.HybridSetup(setup, self.hosts, _GlooTransport(
            self.inner, self.global_ranks, None)) if self.transport == "hybrid" else None)
        self.logged: set = set()
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
        returns its future.

        The dispatch policy (module docstring): inline — in the caller's thread, the future
        completed on return — when the group runs without a worker (``RINGCCL_BACKEND_THREAD
        =0``), or when the worker has nothing queued or running and ``nbytes`` (the bytes the
        call moves) is at most :attr:`inline_bytes`; else handed to the worker. Either way a
        failure of ``job`` goes into the future (``wait()`` raises it), never out of here.

        Raises:
            RuntimeError: the group has been destroyed.
        """
        if self.closed:
            raise RuntimeError(f"ringccl process group {self.name!r} has been destroyed")
        future: torch.futures.Future = torch.futures.Future()
        with self._lock:
            self.issued += 1
            queued = self.threaded and (self._outstanding > 0 or nbytes > self.inline_bytes)
            if queued:
                self._outstanding += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._worker_loop,
                                                    name=f"ringccl-backend-{self.name}",
                                                    daemon=True)
                    self._thread.start()
                self._jobs.put((job, future))
            else:
                # taken before the submit lock is released: a call issued after this one (from
                # any thread) runs after it, inline (it waits here) or on the worker (it waits
                # for the run lock)
                self._run_lock.acquire()
        if not queued:
            try:
                outcome = _run(job)
            finally:
                self._run_lock.release()
            _settle(future, outcome)   # after the release: callbacks may issue collectives
        return future

    def _worker_loop(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, future = item
            with self._run_lock:
                outcome = _run(job)
                # counted down before the future is settled: a caller woken by it finds the
                # worker idle and may run its next small call inline (counted down after, the
                # next call would race the count and, once queued, keep every later one queued).
                # Lock order run → submit is safe: an inline caller waits for the run lock under
                # the submit lock only when the count is 0, i.e. not while a job of ours runs
                with self._lock:
                    self._outstanding -= 1
            _settle(future, outcome)   # outside the locks: callbacks may issue collectives

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
        executor.release_shm_state(self)   # unmaps the segment (its name is gone already)
        hybrid.release_hybrid_state(self)
        self.inner = None


def _run(job: Callable[[], Any]) -> tuple[bool, Any]:
    """``(True, job())``, or ``(False, exception)``: every failure is handed to whoever waits
    on the Work, as gloo's Work carries its failure."""
    with torch.no_grad():   # collectives write parameters and their views, below autograd
        try:
            return True, job()
        except BaseException as exc:  # noqa: B902  (the Work's wait() re-raises it)
            return False, exc


def _settle(future: torch.futures.Future, outcome: tuple[bool, Any]) -> None:
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


#: the default inline threshold (bytes a call moves), from benchmarks/bench_backend.py
#: (docs/backend.md, "Dispatch policy" and round 3): up to it an inline all_reduce on shared
#: memory blocks its caller for 0.14-0.41 ms (2 processes) / 0.67-1.1 ms (4), about 1-3 worker
#: hand-offs (0.15-0.32 / 0.45-0.62 ms quiet), which every synchronous call saves; above it
#: (1 MiB: 0.5 / 2.1 ms, 4 MiB: 1.5 / 5.1 ms) the call is long enough that the overlap the
#: worker gives async callers (DDP's buckets) is worth the hand-off
INLINE_BYTES = 256 * 1024


def inline_bytes() -> int:
    """The inline threshold in bytes: ``RINGCCL_BACKEND_INLINE_BYTES`` (a size: ``65536``,
    ``256KiB``; ``0`` hands every non-empty call to the worker) or :data:`INLINE_BYTES`.

    Raises:
        ValueError: a value that is not a non-negative size.
    """
    text = os.environ.get("RINGCCL_BACKEND_INLINE_BYTES")
    if text is None or text == "":
        return INLINE_BYTES
    try:
        return units.size(text)
    except ArgumentError as exc:
        raise ValueError(f"RINGCCL_BACKEND_INLINE_BYTES={text!r} is not a size in bytes "
                         f"(allowed: a non-negative size such as 0, 65536, 256KiB): "
                         f"{exc}") from None


def host_id() -> str:
    """This process's host identity (:func:`ringccl.shm.host_id`: ``RINGCCL_HOST_ID`` if set —
    tests split one machine into several "hosts" with it — else the host name and boot id)."""
    return shm.host_id()


_TRANSPORT_VALUES = ("auto", "shm", "p2p", "hybrid")


def _transport(hosts: Sequence[str], size: int) -> str:
    """The group's transport from every rank's host identity (the same on every rank):
    ``RINGCCL_TRANSPORT`` "p2p" → "p2p"; "shm" → "shm" (refused across hosts); "hybrid" →
    "hybrid" (shared memory inside each host, gloo point-to-point across); "auto" (or unset) on
    an x86-64 machine → "shm" when every rank is on this host, "hybrid" when the ranks span
    hosts that each hold the same number (two or more) of them, as ringccl.torch's "auto"
    (:func:`ringccl.torch.collectives.resolve_transport`), else "p2p". A group of one rank
    moves nothing: "p2p".

    Raises:
        ValueError: a ``RINGCCL_TRANSPORT`` outside auto/shm/p2p/hybrid, or "shm" for ranks on
            several hosts. BackendError: "shm" or "hybrid" on a machine that is not x86-64.
    """
    value = os.environ.get("RINGCCL_TRANSPORT") or "auto"
    if value not in _TRANSPORT_VALUES:
        raise ValueError(f"RINGCCL_TRANSPORT={value!r} must be one of "
                         f"{', '.join(map(repr, _TRANSPORT_VALUES))}")
    one_host = len(set(hosts)) == 1
    if value == "p2p" or size == 1:
        return "p2p"
    if value == "shm":
        if not one_host:
            raise ValueError(f"RINGCCL_TRANSPORT='shm': the group's {size} ranks are on "
                             f"{len(set(hosts))} hosts ({sorted(set(hosts))}); shared memory "
                             "needs every rank on one host (use 'auto', 'hybrid' or 'p2p')")
        shm.check_platform()
        return "shm"
    if value == "hybrid":
        shm.check_platform()
        return "hybrid"
    if not shm.supported_platform():
        return "p2p"
    if one_host:
        return "shm"
    return "hybrid" if host_layout(hosts, 0).balanced else "p2p"


def _exchange_hosts(store, rank: int, size: int, timeout: datetime.timedelta) -> list[str]:
    """Every rank's :func:`host_id`, by group rank, through the group's store (bounded by the
    store's timeout: a rank that never arrives fails the set-up). Every rank's
    ``RINGCCL_TRANSPORT`` travels with it: each rank chooses the group's transport from its own
    (:func:`_transport`), and ranks that chose differently would each wait for the others on
    a transport they never use.

    Raises:
        ValueError: the ranks' ``RINGCCL_TRANSPORT`` differ (on every rank, naming each
            rank's value).
    """
    store.set(str(rank), f"{host_id()}\0{os.environ.get('RINGCCL_TRANSPORT') or 'auto'}")
    keys = [str(r) for r in range(size)]
    store.wait(keys, timeout)
    got = [store.get(k).decode().rpartition("\0") for k in keys]
    values = [v for _, _, v in got]
    if len(set(values)) > 1:
        raise ValueError("RINGCCL_TRANSPORT differs across the group's ranks ("
                         + ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
                         + "); set it alike on every rank (or not at all: 'auto')")
    return [h for h, _, _ in got]


# -- the front end's group adapter and transport for this backend -------------------------------

class _Front(_Torch):
    """ringccl.torch's tensor dialect (:class:`ringccl.torch.collectives._Torch`) with a
    :class:`_Group` as the group: its size and rank, its inner gloo group for the small
    exchanges and the schedules' messages. Roots arrive as group ranks (torch converts a global
    ``src``/``dst`` before calling the backend)."""

    name = "ringccl backend"

    @staticmethod
    def group(g):
        return g

    @staticmethod
    def size(g) -> int:
        return g.size

    @staticmethod
    def rank(g) -> int:
        return g.rank

    @staticmethod
    def root(g, rank, argument: str, world_size: int) -> int:
        return check_rank(rank, world_size, argument)

    @staticmethod
    def key(g):
        return id(g)

    @staticmethod
    def gather_objects(g, obj, collective: str, algorithm: str, timeout=None) -> list:
        return g.all_gather_object(obj)

    @staticmethod
    def max2(g, a: int, b: int) -> tuple[int, int]:
        x, y = g.allreduce_max([a, b])
        return x, y

    @staticmethod
    def default_restore(timeout) -> bool:
        """False: torch.distributed promises nothing of a failed collective's tensors (gloo
        and NCCL leave partial results), so the backend does not pay for ringccl.torch's
        all-or-nothing (a saved copy of every chunk over p2p; over shared memory the results
        copied out only after the call's last wait, where final receives may land in the
        caller's tensor directly: :mod:`ringccl.engine.staged`)."""
        return False

    @staticmethod
    def stages(g, opts) -> bool:
        return g.transport == "shm"   # as ringccl.torch's: the slot holds private buffers

    @staticmethod
    def call_pipelining(g, collective: str, opts):
        return executor.call_pipelining(collective, opts.pipelining, g.transport)

    @staticmethod
    def execute(schedule, work, op, g, bounds, opts, restore: bool) -> None:
        _execute(schedule, work, op, g, bounds, opts, restore)


def _execute(schedule, buffer: torch.Tensor, op: ReduceOp, g: _Group, bounds, opts,
             restore: bool) -> None:
    """The executor's run on the group's transport: over shared memory
    (``executor._execute_shm`` with the group's :class:`~ringccl.torch.executor.ShmSetup`),
    else :func:`ringccl.torch.executor.run_p2p` over the inner gloo group."""
    wait_timeout = executor.check_timeout(opts.timeout)
    numel = buffer.numel if isinstance(buffer, engine.Staged) else buffer.numel()
    bounds = engine.check_bounds(bounds, schedule.num_chunks, numel)
    # as executor.execute: over shared memory whole chunks unless a segment size was asked for
    pipelining = executor.call_pipelining(schedule.collective, opts.pipelining, g.transport)
    if g.transport == "shm":
        executor._execute_shm(schedule, buffer, op, g, bounds,
                              lambda itemsize: pipelining.segment_elems(bounds, itemsize),
                              None if wait_timeout is None else wait_timeout.total_seconds(),
                              restore, g.shm_setup)
        return
    if g.transport == "hybrid":   # shm inside each host, gloo across (ringccl.torch.hybrid)
        hybrid.execute_hybrid(schedule, buffer, op, g, bounds,
                              lambda itemsize: pipelining.segment_elems(bounds, itemsize),
                              None if wait_timeout is None else wait_timeout.total_seconds(),
                              restore, g.hybrid_setup)
        return
    executor.run_p2p(schedule, buffer, op, g.rank, bounds,
                     pipelining.segment_elems(bounds, buffer.element_size()),
                     _GlooTransport(g.inner, g.global_ranks, wait_timeout),
                     timeout_s=(wait_timeout or g.timeout).total_seconds(), restore=restore,
                     backend=BACKEND_NAME)


_F = _Front()


def _options(opts_timeout=None) -> frontend.Options:
    """The executor options of one call: the per-call ``opts.timeout`` when torch set one.
    (The transport is the group's, read by :func:`_execute` from the group.)"""
    timeout = None
    if isinstance(opts_timeout, datetime.timedelta) and opts_timeout.total_seconds() > 0:
        timeout = opts_timeout
    return frontend.options(_F, None, timeout, None, None)


def _log_choice(g: _Group, collective: str, algorithm: str, params: dict, nbytes: int,
                forced: bool) -> None:
    """``RINGCCL_DEBUG=INFO``: one line per (collective, size class, group), as NCCL_DEBUG=INFO
    prints its choices once; the per-call lines are :mod:`ringccl.frontend.debug`'s."""
    level = debug_level()
    if level not in ("info", "trace"):
        return
    key = (collective, size_class(nbytes))
    if key in g.logged:
        return
    g.logged.add(key)
    debug._configure(level)
    seconds = choice.predicted_seconds(collective, algorithm, g.size, nbytes, g.transport,
                                       params, g.layout.local_size or None)
    predicted = "n/a" if seconds is None else f"{seconds * 1e6:.1f}"
    if choice.LINKS[g.transport][1]:   # the cost model has no fitted class for it yet
        predicted += " (provisional link figures)"
    debug.logger.info("%s:%d [rank %d] backend group=%s size=%d %s size_class=%s "
                      "algorithm=%s (%s) transport=%s predicted_us=%s", socket.gethostname(),
                      os.getpid(), g.rank, g.name, g.size, collective, key[1], algorithm,
                      "RINGCCL_ALGO" if forced else "auto", _TRANSPORT_NAMES[g.transport],
                      predicted)


#: upper bounds (bytes, exclusive) of the size classes of the log lines, NCCL-style powers of 4
SIZE_CLASSES = tuple(4 ** k for k in range(5, 17))   # 1 KiB ... 4 GiB


def size_class(nbytes: int) -> str:
    """The size class of a ``nbytes`` buffer as text: ``"<1KiB"``, ``"4KiB-16KiB"``, …"""
    lower = 0
    for upper in SIZE_CLASSES:
        if nbytes < upper:
            return f"{_human(lower)}-{_human(upper)}" if lower else f"<{_human(upper)}"
        lower = upper
    return f">={_human(lower)}"


def _human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


#: the transports as the INFO lines name them
_TRANSPORT_NAMES = {"shm": "shm", "p2p": "gloo-p2p", "hybrid": "shm+gloo-p2p"}


def _algorithm(g: _Group, collective: str, nbytes: int) -> tuple[str, dict]:
    """(algorithm, its parameters) of one call (the one chooser,
    :func:`ringccl.costmodel.choice.choose`, with ``RINGCCL_ALGO`` honoured), logged once per
    (collective, size class) with ``RINGCCL_DEBUG=INFO``."""
    algorithm, params, forced = choice.choose(collective, g.size, nbytes, g.transport,
                                              local_size=g.layout.local_size or None,
                                              honour_env=True)
    _log_choice(g, collective, algorithm, params, nbytes, forced)
    return algorithm, dict(params)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _Work(dist.Work):
    """A collective's handle, as gloo's: ``wait()`` blocks until the collective is done and
    raises its failure (PeerError/RingcclTimeout, ...); ``get_future()`` is the future whose
    value is the output tensors (DDP's comm hooks and bucket futures read it).

    Not ``torch._C._distributed_c10d._create_work_from_future``: that Work's ``wait()`` returns
    True even when the future holds an exception (torch 2.13), so a dead peer would pass
    silently. torch's C++ callers (DDP's reducer) reach these methods through its Python-Work
    trampoline, as for torch's own Python test groups."""

    def __init__(self, future: torch.futures.Future):
        super().__init__()
        self._future = future

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._future.wait()   # raises the collective's exception; bounded by the group timeout
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:   # the collective failed
            return False
        return True

    def exception(self):
        try:
            self._future.value()
        except Exception as exc:   # the failure is the answer
            return exc
        return None

    def result(self) -> list:
        return self._future.value()


# -- the process group torch sees ---------------------------------------------------------------

class RingcclProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run ringccl schedules over an inner
    gloo group (module docstring). Built by torch through :func:`create_process_group`; never
    constructed directly. CPU tensors only; every method takes and returns what gloo's does
    (lists of tensors and an options object in, a ``Work`` out)."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta,
                 global_ranks: Sequence[int] | None = None, name: str = ""):
        super().__init__(rank, size)
        self._name = name
        self._group = _Group(store, rank, size, timeout,
                             range(size) if global_ranks is None else global_ranks, name)
        # the group is freed with the object if torch (< 2.5) never calls shutdown
        self._finalizer = weakref.finalize(self, self._group.close)

    # -- identity -------------------------------------------------------------------------------
    def getBackendName(self) -> str:
        return BACKEND_NAME

    def name(self) -> str:
        return BACKEND_NAME

    def size(self) -> int:
        return self._group.size

    # torch sets and reads a group's name (destroy_process_group unregisters it by name); a
    # Python group keeps it itself, as torch's threaded test group does
    @property
    def group_name(self) -> str:
        return self._name

    def _set_group_name(self, name: str) -> None:
        self._name = self._group.name = str(name)

    def rank(self) -> int:
        return self._group.rank

    @property
    def hosts(self) -> list[str]:
        """Every rank's host identity by group rank (:func:`ringccl.shm.host_id`)."""
        return list(self._group.hosts)

    @property
    def transport(self) -> str:
        """What the group's collectives run on: "shm" (every rank on this host) or "p2p"
        (gloo point-to-point)."""
        return self._group.transport

    def shutdown(self) -> None:
        """Called by ``destroy_process_group``: finish queued collectives, free the worker, the
        shared memory (this rank's mappings; the segment's name was unlinked at set-up) and the
        inner gloo group."""
        self._finalizer()

    def abort(self) -> None:
        self._finalizer()

    def _submit(self, job: Callable[[], Any], nbytes: int = 0):
        """``job`` as a collective of this group (:meth:`_Group.submit`: inline or on the
        worker by ``nbytes``, the bytes the call moves) and its Work."""
        return _Work(self._group.submit(job, nbytes))

    # -- collectives ----------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        return self._all_reduce(list(tensors), opts.reduceOp, opts.timeout)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        return self._all_reduce(list(tensors), opts.reduceOp, opts.timeout)

    def _all_reduce(self, tensors: list, reduce_op, timeout):
        g = self._group
        _check_dtype(tensors, "all_reduce")
        ops = [_reduce_op(reduce_op, t.dtype, "all_reduce") for t in tensors]
        options = _options(timeout)
        plan = [(t, op, _algorithm(g, "all_reduce", _nbytes(t))) for t, op in zip(tensors, ops)]

        def job():
            for t, op, (algorithm, params) in plan:
                frontend.in_place(_F, "all_reduce", t, op, g, algorithm, params, options)
            return tensors
        return self._submit(job, sum(_nbytes(t) for t in tensors))

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        g, tensors = self._group, list(tensors)
        _check_dtype(tensors, "broadcast")
        root = check_rank(opts.rootRank, g.size, "src")
        options = _options(opts.timeout)
        plan = [(t, _algorithm(g, "broadcast", _nbytes(t))) for t in tensors]

        def job():
            for t, (algorithm, params) in plan:
                frontend.in_place(_F, "broadcast", t, ReduceOp.SUM, g, algorithm,
                                  {**params, "root": root}, options)
            return tensors
        return self._submit(job, sum(_nbytes(t) for t in tensors))

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        g, tensors = self._group, list(tensors)
        _check_dtype(tensors, "reduce")
        root = check_rank(opts.rootRank, g.size, "dst")
        ops = [_reduce_op(opts.reduceOp, t.dtype, "reduce") for t in tensors]
        options = _options(opts.timeout)
        plan = [(t, op, _algorithm(g, "reduce", _nbytes(t))) for t, op in zip(tensors, ops)]

        def job():
            for t, op, (algorithm, params) in plan:
                frontend.in_place(_F, "reduce", t, op, g, algorithm, {**params, "root": root}, options,
                                  copy=g.rank != root)
            return tensors
        return self._submit(job, sum(_nbytes(t) for t in tensors))

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        g = self._group
        outputs, inputs = [list(o) for o in output_tensors], list(input_tensors)
        _check_dtype(inputs + [t for o in outputs for t in o], "all_gather", same=True)
        options = _options(opts.timeout)
        plan = []
        for out, inp in zip(outputs, inputs):
            if len(out) != g.size:
                raise RuntimeError(f"ringccl all_gather: output list has {len(out)} tensors, "
                                   f"the group has {g.size} ranks")
            plan.append((out, inp, _algorithm(g, "all_gather", _nbytes(inp) * g.size)))

        def job():
            for out, inp, (algorithm, params) in plan:
                # one contiguous working buffer; the blocks are copied out (list outputs may be
                # anywhere in memory)
                whole = inp.new_empty(g.size * inp.numel())
                frontend.all_gather(_F, whole, inp, g, algorithm, params, options, "all_gather",
                                    ("output_tensor_list", "input_tensor"))
                for r, t in enumerate(out):
                    t.copy_(whole[r * inp.numel():(r + 1) * inp.numel()].view(t.shape))
            return outputs
        return self._submit(job, sum(_nbytes(inp) * g.size for _, inp, _ in plan))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        # gloo's layout: output_lists[r][i] receives rank r's input_list[i]; allgather wants,
        # per input, the list over ranks
        per_input = [[output_lists[r][i] for r in range(len(output_lists))]
                     for i in range(len(input_list))]
        work = self.allgather(per_input, input_list, opts)
        lists = [list(o) for o in output_lists]
        # f.value() re-raises the gather's failure into the returned future
        return _Work(work.get_future().then(lambda f: (f.value(), lists)[1]))

    def _allgather_base(self, output, input, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        g = self._group
        _check_dtype([output, input], "all_gather_into_tensor", same=True)
        options = _options(opts.timeout)
        algorithm, params = _algorithm(g, "all_gather", _nbytes(output))

        def job():
            frontend.all_gather(_F, output, input, g, algorithm, params, options,
                                "all_gather_into_tensor", ("output_tensor", "input_tensor"))
            return [output]
        return self._submit(job, _nbytes(output))

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced(self._allgather_base, outputs, inputs, opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        g = self._group
        outputs, inputs = list(output_tensors), [list(i) for i in input_tensors]
        _check_dtype(outputs + [t for i in inputs for t in i], "reduce_scatter", same=True)
        ops = [_reduce_op(opts.reduceOp, t.dtype, "reduce_scatter") for t in outputs]
        options = _options(opts.timeout)
        plan = []
        for out, inp, op in zip(outputs, inputs, ops):
            if len(inp) != g.size:
                raise RuntimeError(f"ringccl reduce_scatter: input list has {len(inp)} tensors, "
                                   f"the group has {g.size} ranks")
            plan.append((out, inp, op, _algorithm(g, "reduce_scatter", _nbytes(out) * g.size)))

        def job():
            for out, inp, op, (algorithm, params) in plan:
                whole = torch.cat([t.reshape(-1) for t in inp])
                frontend.reduce_scatter(_F, out, whole, op, g, algorithm, params, options, None,
                                        "reduce_scatter")
            return outputs
        return self._submit(job, sum(_nbytes(out) * g.size for out in outputs))

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        g = self._group
        _check_dtype([output, input], "reduce_scatter_tensor", same=True)
        op = _reduce_op(opts.reduceOp, input.dtype, "reduce_scatter_tensor")
        options = _options(opts.timeout)
        algorithm, params = _algorithm(g, "reduce_scatter", _nbytes(input))

        def job():
            frontend.reduce_scatter(_F, output, input, op, g, algorithm, params, options, None,
                                    "reduce_scatter_tensor")
            return [output]
        return self._submit(job, _nbytes(input))

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced(self._reduce_scatter_base, outputs, inputs, opts)

    def _coalesced(self, one, outputs, inputs, opts):
        """Several calls of ``one`` issued back to back: the returned Work completes after all
        of them (issue order), with every output as its value, and its ``wait()`` raises the
        first one's failure."""
        works = [one(o, i, opts) for o, i in zip(outputs, inputs)]
        if not works:
            return self._submit(lambda: [])
        if len(works) == 1:
            return works[0]
        outputs = list(outputs)

        def joined(f):
            for part in f.value():
                part.value()   # raises the first failed call's exception into the Work
            return outputs
        # chained on the calls' futures, not a job of its own: nothing waits inside a run
        return _Work(torch.futures.collect_all([w.get_future() for w in works]).then(joined))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        g = self._group
        _check_dtype([output, input], "all_to_all_single", same=True)
        options = _options(opts.timeout)
        algorithm, params = _algorithm(g, "all_to_all", _nbytes(input))
        outs = list(output_split_sizes) or None   # torch passes [] for equal pieces
        ins = list(input_split_sizes) or None

        def job():
            frontend.all_to_all(_F, output, input, outs, ins, g, algorithm, params, options)
            return [output]
        return self._submit(job, _nbytes(input))

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        g = self._group
        outputs, inputs = list(output_tensors), list(input_tensors)
        _check_dtype(outputs + inputs, "all_to_all", same=True)
        for what, tensors in (("input", inputs), ("output", outputs)):
            if len(tensors) != g.size:   # gloo's words
                raise RuntimeError(f"ringccl all_to_all: {what} tensor list size {len(tensors)} "
                                   f"does not match world size {g.size}")
        options = _options(opts.timeout)
        algorithm, params = _algorithm(g, "all_to_all", sum(_nbytes(t) for t in inputs))

        def job():
            frontend.exchange(_F, inputs, [t.numel() for t in inputs],
                              [t.numel() for t in outputs], g, algorithm, params, options, outputs)
            return outputs
        return self._submit(job, sum(_nbytes(t) for t in inputs))

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.GatherOptions()
        g = self._group
        inputs = list(input_tensors)
        root = check_rank(opts.rootRank, g.size, "dst")
        blocks = list(output_tensors[0]) if g.rank == root else None
        _check_dtype(inputs + (blocks or []), "gather", same=True)
        options = _options(opts.timeout)
        algorithm, params = _algorithm(g, "gather", _nbytes(inputs[0]) * g.size)

        def job():
            frontend.gather(_F, inputs[0], blocks, root, g, algorithm, params, options)
            return [blocks] if blocks is not None else []
        return self._submit(job, _nbytes(inputs[0]) * g.size)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        g = self._group
        outputs = list(output_tensors)
        root = check_rank(opts.rootRank, g.size, "src")
        blocks = list(input_tensors[0]) if g.rank == root else None
        _check_dtype(outputs + (blocks or []), "scatter", same=True)
        options = _options(opts.timeout)
        algorithm, params = _algorithm(g, "scatter", _nbytes(outputs[0]) * g.size)

        def job():
            frontend.scatter(_F, outputs[0], blocks, root, g, algorithm, params, options)
            return outputs
        return self._submit(job, _nbytes(outputs[0]) * g.size)

    def barrier(self, opts=None):
        g = self._group

        def job():
            # after every collective issued before it (the worker's order), then gloo's own
            g.inner.barrier().wait()
            return []
        return self._submit(job)

    # -- point to point: straight to the inner gloo group (gloo's own Work and futures) ---------
    def send(self, tensors, dstRank: int, tag: int = 0):
        _check_p2p(tensors, tag, "send")
        return self._group.inner.send(list(tensors), dstRank, tag)

    def recv(self, tensors, srcRank: int, tag: int = 0):
        _check_p2p(tensors, tag, "recv")
        return self._group.inner.recv(list(tensors), srcRank, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        _check_p2p(tensors, tag, "recv")
        return self._group.inner.recv_anysource(list(tensors), tag)


def _check_p2p(tensors, tag: int, what: str) -> None:
    _check_dtype(list(tensors), what)
    if tag == COLLECTIVE_TAG:
        raise RuntimeError(f"ringccl {what}: tag={tag} is reserved for ringccl's collectives; "
                           "use another tag")


# -- registration -------------------------------------------------------------------------------

def create_process_group(backend_opts, pg_options=None) -> RingcclProcessGroup:
    """torch's creator (``extended_api=True``): a :class:`RingcclProcessGroup` for the group
    described by ``backend_opts`` (``torch.distributed._DistributedBackendOptions``: store,
    group_rank, group_size, timeout, group_id, global_ranks_in_group).

    Raises:
        ValueError: ``pg_options`` given (ringccl takes its settings from the environment:
            RINGCCL_ALGO, RINGCCL_DEBUG, RINGCCL_TIMEOUT).
    """
    if pg_options is not None:
        raise ValueError(f"pg_options={pg_options!r}: the ringccl backend takes no options "
                         "object; set RINGCCL_ALGO / RINGCCL_DEBUG / RINGCCL_TIMEOUT instead")
    ranks = list(getattr(backend_opts, "global_ranks_in_group", None) or [])
    size = backend_opts.group_size
    return RingcclProcessGroup(backend_opts.store, backend_opts.group_rank, size,
                               backend_opts.timeout, ranks if len(ranks) == size else None,
                               str(getattr(backend_opts, "group_id", "")))


def register() -> None:
    """Register the ``"ringccl"`` backend with torch.distributed (idempotent; what
    ``import ringccl.torch`` and the ``torch.backends`` entry point do)."""
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, create_process_group, extended_api=True,
                                  devices=["cpu"])



def autoload() -> None:
    """Kept for installs whose metadata still names ``ringccl.torch.backend:autoload``; the entry
    point is :func:`ringccl.torch_autoload.autoload` (this module cannot be imported while
    ``import torch`` runs inside ``import ringccl.torch``)."""
    register()
