"""Run any schedule on an MPI communicator with mpi4py non-blocking point-to-point.

The order of operations (dataflow: every message posted as soon as its data is ready), staging,
pipelining, error attribution and the all-or-nothing rollback are the backend-neutral engine's
(:mod:`ringccl.engine`); this module is the MPI transport. Messages between a pair of ranks are
posted in the same order on both sides and MPI's non-overtaking rule (same source, tag and
communicator) matches them.

Everything is moved as raw bytes (``MPI.BYTE``), so every numpy dtype works, float16 and bool
included. The staging buffer (the engine's workspace) is kept between calls and the per-rank plan (chunk and segment
offsets) is cached per (schedule, bounds, segment size), so a call allocates neither index arrays
nor buffers. Messages go over a private duplicate of the caller's communicator, so they never
match the caller's own point-to-point traffic. MPI waits are unbounded; with ``timeout=`` every
wait polls (``MPI_Test``) until its deadline instead.

``transport="shm"`` (every rank of the communicator on this host) runs the one shared-memory
call (:mod:`ringccl.backends.shm.call`) instead of MPI point-to-point, on numpy arrays: the
working buffer lives in this rank's slot of the communicator's shared-memory segment (the
ranges the call reads copied in, its results out), receives are read in place from the peer's
slot. The segment's set-up exchange is ``allgather`` on the private duplicate;
:func:`shm_possible` is what ``transport="auto"`` asks (``MPI_Comm_split_type(
MPI_COMM_TYPE_SHARED)`` spans the communicator and every rank reports the same
:func:`ringccl.backends.shm.host_id`).

References:
    MPI 4.0 standard, section 3.5 (non-overtaking order of messages) and 3.7 (non-blocking
    communication).
"""

from __future__ import annotations

import functools
import time

import numpy as np
from mpi4py import MPI

from ... import engine
from .. import shm
from ..shm import call, registry
from ...engine import trace
from ...errors import ArgumentTypeError, BackendError, RingcclTimeout
from ...ir import Schedule
from ...ops import SUPPORTED_DTYPES, ReduceOp
from .dialect import OPS

__all__ = ["execute", "execute_call", "wait_request", "release_buffers", "PIPELINING", "OPS",
           "PIPELINE_THRESHOLD_BYTES", "DEFAULT_SEGMENT_BYTES", "SHM_PIPELINING", "shm_possible",
           "shm_state", "release_shm", "shm_empty"]

_SUPPORTED = frozenset(np.dtype(d) for d in SUPPORTED_DTYPES)

_TAG = 0  # order, not tags, matches messages: posting order per peer is the same on both sides

_comm_cache: dict = {}

#: Pipelining default: never split (threshold None; segments of 4 MiB when a caller asks for
#: a threshold). Measured with benchmarks/bench_mpi.py --segments on 2 Open MPI 4.1 processes
#: over shared memory (vader, CMA single copy): segments of 64 KiB–32 MiB were slower than whole
#: chunks at every size from 1 MiB to 256 MiB (e.g. 64 MiB: 1 MiB segments 0.46x, 4 MiB
#: segments 0.65x the busbw of whole chunks), because every message is a rendezvous in which
#: both processes must be running, and the receiver's single copy leaves no transfer to overlap
#: with the reduction (docs/benchmarks.md). Pass segment_bytes to pipeline anyway, e.g. across
#: nodes.
PIPELINE_THRESHOLD_BYTES: int | None = None
DEFAULT_SEGMENT_BYTES = 4 << 20
PIPELINING = engine.Pipelining(PIPELINE_THRESHOLD_BYTES, DEFAULT_SEGMENT_BYTES)




def _private(comm, schedule: Schedule, timeout: float | None) -> "MPI.Comm":
    """A duplicate of ``comm`` kept for ringccl's messages (created collectively on first use;
    with a timeout, ``MPI_Comm_idup`` polled until it, so a peer that never calls is reported)."""
    key = MPI.Comm.py2f(comm)
    dup = _comm_cache.get(key)
    if dup is None:
        if timeout is None:
            dup = comm.Dup()
        else:
            dup, request = comm.Idup()
            try:
                wait_request(request, timeout)
            except TimeoutError as exc:
                raise RingcclTimeout(
                    f"{schedule.algorithm} {schedule.collective} timed out after {timeout:g} s "
                    f"on rank {comm.Get_rank()} before step 0, duplicating the communicator "
                    "(the first ringccl call on it, collective): a peer did not join",
                    collective=schedule.collective, algorithm=schedule.algorithm,
                    rank=comm.Get_rank()) from exc
        _comm_cache[key] = dup
    return dup


def joined(comm, timeout: float | None, what: str) -> None:
    """With a timeout, an ``MPI_Ibarrier`` on ``comm`` polled until it, before a blocking
    collective set-up (``what``) that MPI has no polled form of: every rank is then inside it,
    so it cannot hang on a peer that never came.

    Raises:
        RingcclTimeout: a peer did not join within ``timeout`` seconds (naming ``what``).
    """
    if timeout is None:
        return
    try:
        wait_request(comm.Ibarrier(), timeout)
    except TimeoutError as exc:
        raise RingcclTimeout(
            f"ringccl.mpi timed out after {timeout:g} s on rank {comm.Get_rank()} before step "
            f"0, {what} (the first ringccl call on the communicator, collective): a peer did "
            "not join", rank=comm.Get_rank()) from exc


def wait_request(request, timeout: float | None) -> None:
    """``MPI_Wait``, or with a timeout ``MPI_Test`` polled until it (then TimeoutError)."""
    if timeout is None:
        request.Wait()
        return
    deadline = time.monotonic() + timeout
    spins = 0
    while not request.Test():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer within {timeout:g} s")
        spins += 1
        if spins > 1000:  # past the latency of a message: stop burning the core
            time.sleep(1e-4)


def release_buffers() -> None:
    """Free the staging buffer, the cached plans, the shared-memory segments and the private
    communicators.

    Collective over every communicator ringccl used: call it on every rank.
    """
    engine.clear_caches()
    release_shm()
    _one_host.clear()
    for comm in _comm_cache.values():
        comm.Free()
    _comm_cache.clear()


class _Transport:
    """The engine's transport over mpi4py non-blocking point-to-point: it moves bytes only (see
    :class:`ringccl.engine.Transport`); applying them is the engine's workspace."""

    def __init__(self, comm, timeout: float | None):
        self.comm, self.timeout = comm, timeout

    # messages are [array slice, MPI.BYTE]: mpi4py counts its bytes, whatever the dtype
    def isend(self, s, data):
        return self.comm.Isend([data, MPI.BYTE], s.peer, _TAG)

    def irecv(self, r, landing):
        return self.comm.Irecv([landing, MPI.BYTE], r.peer, _TAG)

    def wait(self, request) -> None:
        wait_request(request, self.timeout)

    def is_timeout(self, exc: BaseException) -> bool:
        return False  # MPI waits never time out; the polling wait raises TimeoutError itself

    def peer_name(self, peer: int) -> str:
        return str(peer)


#: shared memory: whole chunks (a receive is read where the peer's bytes lie: splitting a chunk
#: only adds descriptors, waits and releases); an explicit ``segment_bytes=`` still splits
SHM_PIPELINING = engine.Pipelining(None, 0)

_one_host: dict = {}     # py2f(comm) -> whether every rank of comm shares this host's memory


def release_shm() -> None:
    """Drop every communicator's shared memory on this rank (``ringccl.clear_caches`` drops
    every group's). Collective in effect: call it on every rank between the same two
    collectives (the next call over shm sets the segment up again, an ``allgather``)."""
    registry.release_shm("mpi")


def shm_possible(comm, timeout: float | None = None) -> bool:
    """Whether every rank of ``comm`` can map this rank's shared memory: the shared-memory
    split (``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``) has the whole communicator and every
    rank reports the same :func:`ringccl.backends.shm.host_id` (``RINGCCL_HOST_ID`` splits one
    machine into several "hosts" for tests). Collective on first use per communicator (cached),
    the same answer on every rank; with a timeout (seconds or a timedelta; None:
    ``RINGCCL_TIMEOUT``), the ranks first meet in a polled barrier (:func:`joined`).

    Raises:
        RingcclTimeout: with a timeout, a peer that did not join the first use.
    """
    key = MPI.Comm.py2f(comm)
    hit = _one_host.get(key)
    if hit is None:
        joined(comm, engine.timeout_seconds(timeout),
               "finding the ranks that share this host's memory")
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, comm.Get_rank())
        try:
            spans = local.Get_size() == comm.Get_size()
        finally:
            local.Free()
        hosts = comm.allgather(shm.host_id())
        hit = _one_host[key] = spans and len(set(hosts)) == 1
    return hit


def shm_state(comm, timeout: float | None = None):
    """``(ShmGroup, ShmTransport)`` of ``comm`` on this rank, set up on first use (collective:
    an ``allgather`` on ringccl's private duplicate of ``comm``; kept in
    :mod:`ringccl.backends.shm.registry`). One segment per communicator: two communicators, or
    two jobs, never share one.

    Raises:
        BackendError: not x86-64, or the set-up failed (ShmSpaceError: the shared-memory
            directory is too small: the message names the bytes needed and available).
        RingcclTimeout: with a timeout, a peer that did not join the first use (:func:`joined`).
    """
    key = MPI.Comm.py2f(comm)
    hit = registry.find("mpi", key)
    if hit is not None:
        return hit
    shm.check_platform()
    private = _comm_cache.get(key)
    if private is None:
        joined(comm, timeout, "setting up the shared memory")
        private = _comm_cache[key] = comm.Dup()
    return registry.setup("mpi", key, None, comm.Get_rank(), comm.Get_size(), private.allgather,
                          timeout or call.DEFAULT_TIMEOUT_S)


def _dialect(dtype: np.dtype) -> call.Dialect:
    """The shared-memory call's view of ``dtype`` (numpy throughout; made once per dtype)."""
    hit = _DIALECTS.get(dtype)
    if hit is None:
        hit = _DIALECTS[dtype] = call.Dialect(
            OPS, lambda a: a, lambda a: a.ctypes.data,
            functools.partial(shm.ShmGroup.array, dtype=dtype), np.copy)
    return hit


_DIALECTS: dict = {}


def _execute_shm(schedule: Schedule, buffer: np.ndarray, op: ReduceOp, comm, bounds,
                 segment_elems: int, timeout: float | None, restore: bool) -> np.ndarray:
    """:func:`execute` over the communicator's shared memory: the one shared-memory call
    (:func:`ringccl.backends.shm.call.execute`) on numpy arrays (module docstring)."""
    state, transport = shm_state(comm, timeout)
    with np.errstate(all="ignore"):   # IEEE results (inf, NaN) are the op's, as MPI's: no warning
        return call.execute(schedule, buffer, op, state.rank, bounds, segment_elems, state,
                            transport, _dialect(buffer.dtype), itemsize=buffer.dtype.itemsize,
                            timeout=timeout, restore=restore)


def shm_empty(shape, dtype=np.float32, comm=None) -> np.ndarray:
    """A numpy array of ``shape`` and ``dtype`` that lives in this rank's slot of ``comm``'s
    shared memory: collectives on it (``transport="shm"`` or "auto") skip the copy in and out
    (as :func:`ringccl.torch.shm_empty`).

    Collective: every rank of ``comm`` calls it with the same shape and dtype, in the same
    order relative to the communicator's collectives. The array stays valid memory while it is
    referenced; it is zero-copy until ``ringccl.clear_caches()`` (after that a collective
    copies it like any array). Contents are undefined (as ``numpy.empty``).

    Args:
        shape: int or tuple of ints >= 0.
        dtype: any numpy dtype ringccl.mpi supports.
        comm: an mpi4py intracommunicator (None = ``MPI.COMM_WORLD``).
    Returns:
        the array (C-contiguous).
    Raises:
        ArgumentError, ArgumentTypeError: bad shape or dtype. BackendError: not x86-64, the
            set-up failed; ShmSpaceError: the shared-memory directory is too small.
    """
    shape = registry.check_shape(shape)
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise ArgumentTypeError(f"dtype={dtype!r} is not a numpy dtype") from None
    if dtype not in _SUPPORTED:
        raise ArgumentTypeError(f"dtype={dtype} is not supported; expected one of "
                                f"{', '.join(str(np.dtype(d)) for d in SUPPORTED_DTYPES)}")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    state, _ = shm_state(MPI.COMM_WORLD if comm is None else comm)
    raw = registry.allocate(state, count, dtype.itemsize, f"{shape}, {dtype}")
    return raw.view(dtype)[:count].reshape(shape)


def execute(schedule: Schedule, buffer: np.ndarray, op: ReduceOp = ReduceOp.SUM, comm=None,
            segment_bytes: int | None = None, bounds=None, *, timeout: float | None = None,
            restore: bool | None = None,
            pipelining: engine.Pipelining | None = None, transport: str = "p2p") -> np.ndarray:
    """Execute ``schedule`` in place on this rank's working ``buffer``.

    Args:
        schedule: any verified schedule whose world_size equals the communicator's size.
        buffer: 1-D C-contiguous numpy array, the collective's working buffer (L elements).
        op: reduce op applied by REDUCE transfers (AVG sums here; the caller divides).
        comm: an mpi4py intracommunicator (None = ``MPI.COMM_WORLD``).
        segment_bytes: split each transferred chunk into segments of this many bytes and move
            them as a pipeline: a segment is reduced as soon as it arrives and forwarded as soon
            as it is final, while later segments are in flight. None: ``pipelining`` decides.
            0: never split.
        bounds: this rank's chunk boundaries, num_chunks + 1 non-decreasing element offsets into
            ``buffer`` (from the collective's contract, ``Collective.chunk_sizes``); a
            transfer's chunk must have the same size on both ranks. None:
            ``ringccl.chunk_bounds(L, num_chunks)``, the ``numpy.array_split`` pieces.
        timeout: seconds each wait for a peer may take (polled with ``MPI_Test``); None: the
            ``RINGCCL_TIMEOUT`` environment variable if set, else unbounded ``MPI_Wait`` (MPI
            itself has no timeouts; Open MPI aborts the job when a process dies).
        restore: save each chunk before this rank first writes it and restore it if the call
            fails (memory: up to one copy of ``buffer``, kept between calls). None: only when a
            timeout is in effect; without one an MPI failure aborts the job (Open MPI's and
            MPICH's default error handler), so there is nothing to restore for. After a
            RingcclTimeout, end the job with ``comm.Abort()``: operations still posted to the
            silent peer cannot be withdrawn, and ``MPI_Finalize`` may crash on them.
        pipelining: the policy used when ``segment_bytes`` is None (None: :data:`PIPELINING`,
            the measured default: never split).
        transport: "p2p" (MPI point-to-point) or "shm" (the communicator's shared memory:
            every rank on this host, x86-64; set up on first use). Over either, a final
            receive lands in ``buffer`` as it arrives unless ``restore`` keeps what it
            overwrites.

    Returns:
        ``buffer``.
    Raises:
        BackendError: the communicator's size does not match the schedule, bad bounds.
        PeerError, RingcclTimeout: an MPI operation failed or a wait timed out (named step and
            peer), after the rollback.
    """
    return execute_call(schedule, buffer, op, MPI.COMM_WORLD if comm is None else comm,
                    segment_bytes, bounds, engine.timeout_seconds(timeout), restore, pipelining,
                    transport)


def execute_call(schedule: Schedule, buffer: np.ndarray, op: ReduceOp, comm,
             segment_bytes: int | None, bounds, wait_timeout: float | None,
             restore: bool | None, pipelining: engine.Pipelining | None,
             transport: str) -> np.ndarray:
    """:func:`execute` with ``comm`` given and the timeout already in seconds (None:
    unbounded): what ringccl.mpi's front end calls, having resolved ``timeout=`` and
    ``RINGCCL_TIMEOUT`` once for the call (:func:`ringccl.frontend.options`)."""
    rank, world_size = comm.Get_rank(), comm.Get_size()
    if world_size != schedule.world_size:
        raise BackendError(f"schedule is for world_size={schedule.world_size}, but the "
                           f"communicator has {world_size} ranks")
    itemsize = buffer.itemsize
    count = buffer.shape[0]
    bounds = engine.check_bounds(bounds, schedule.num_chunks, count)
    if segment_bytes:
        segment_elems = max(1, segment_bytes // itemsize)
    elif segment_bytes is None and pipelining is not None:
        segment_elems = pipelining.segment_elems(bounds, itemsize)
    else:  # 0, or the measured default (PIPELINING): whole chunks
        segment_elems = 0
    if restore is None:
        restore = wait_timeout is not None
    if transport == "shm":
        return _execute_shm(schedule, buffer, op, comm, bounds,
                            max(1, segment_bytes // itemsize) if segment_bytes else 0,
                            wait_timeout, restore)
    if transport != "p2p":
        raise BackendError(f"transport={transport!r} must be 'p2p' or 'shm' here")
    plan = engine.plan(schedule, rank, bounds, segment_elems)
    if not plan.steps:
        return buffer
    workspace = engine.Workspace(OPS, buffer, op, plan.staging_elems)
    transport = _Transport(_private(comm, schedule, wait_timeout), wait_timeout)
    with np.errstate(all="ignore"):   # IEEE results (inf, NaN) are the op's, as MPI's: no warning
        trace.drive(engine.run_dataflow, schedule, rank, plan, transport, workspace,
                    timeout=wait_timeout, restore=restore, itemsize=itemsize, backend="mpi")
    return buffer
