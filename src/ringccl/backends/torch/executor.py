"""Run any schedule on a torch.distributed process group with non-blocking point-to-point.

The order of operations, staging, pipelining, error attribution and the all-or-nothing rollback
are the backend-neutral engine's (:mod:`ringccl.engine`); this module is the torch transport:
``dist.isend``/``dist.irecv`` on slices of the working buffer, ``Work.wait`` bounded by the group's
timeout (or ``timeout=``), and reduction with torch's in-place ops. How the backend is driven is
chosen by what it is, never by the algorithm:

* NCCL/UCC coalesce a ``batch_isend_irecv`` into one group call: each step is one batch, waited
  for, then applied (:func:`ringccl.engine.run_lockstep`).
* gloo and MPI match independent ``isend``/``irecv``: operations are posted as soon as their data
  is ready (:func:`ringccl.engine.run_dataflow`).

``transport="shm"`` (CPU tensors, every rank of the group on this host) runs the same engine
over :mod:`ringccl.shm` instead: the working buffer lives in this rank's slot of the group's
shared-memory segment (copied in and out, unless the caller's buffer already lies there: a
:func:`shm_empty` tensor), and receives are read in place from the peer's slot.

Staging memory (two halves of the largest step's receives) is the engine's workspace, reused
across calls, per thread (:mod:`ringccl.engine.workspace`).
"""

from __future__ import annotations

import datetime
import threading
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ... import caches, engine
from .. import shm
from ...engine import staged
from ...engine import trace
from ...args import check_int
from ...errors import ArgumentTypeError, BackendError
from ...ir import Schedule
from ...ops import ReduceOp

__all__ = ["execute", "combine_fn", "combine_into_fn", "release_buffers", "PIPELINING", "OPS",
           "PIPELINE_THRESHOLD_BYTES", "DEFAULT_SEGMENT_BYTES", "SHM_PIPELINING", "shm_state",
           "call_pipelining", "shm_pipelining", "SHM_PIPELINING_BY_COLLECTIVE",
           "shm_empty", "release_shm", "ShmSetup", "release_shm_state", "run_p2p", "P2PTransport"]


def combine_fn(op: ReduceOp):
    """In-place ``dst = op(dst, src)`` on torch tensors (AVG sums; the caller divides last)."""
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        return lambda dst, src: dst.add_(src)
    if op is ReduceOp.PRODUCT:
        return lambda dst, src: dst.mul_(src)
    if op is ReduceOp.MIN:
        return lambda dst, src: torch.minimum(dst, src, out=dst)
    if op is ReduceOp.MAX:
        return lambda dst, src: torch.maximum(dst, src, out=dst)
    if op is ReduceOp.BAND:
        return lambda dst, src: dst.bitwise_and_(src)
    if op is ReduceOp.BOR:
        return lambda dst, src: dst.bitwise_or_(src)
    return lambda dst, src: dst.bitwise_xor_(src)


def combine_into_fn(op: ReduceOp):
    """``dst = op(a, b)`` into ``dst`` on torch tensors: :func:`combine_fn`'s operation on a
    ``dst`` that held ``a`` (the same kernel, operands in the same order)."""
    f = {ReduceOp.SUM: torch.add, ReduceOp.AVG: torch.add, ReduceOp.PRODUCT: torch.mul,
         ReduceOp.MIN: torch.minimum, ReduceOp.MAX: torch.maximum,
         ReduceOp.BAND: torch.bitwise_and, ReduceOp.BOR: torch.bitwise_or,
         ReduceOp.BXOR: torch.bitwise_xor}[op]
    return lambda dst, a, b: f(a, b, out=dst)


def _peers(group, world_size: int) -> Sequence[int]:
    if group is None or group is dist.group.WORLD:
        return range(world_size)
    return [dist.get_global_rank(group, r) for r in range(world_size)]


#: chunks of at least this many bytes are split into segments of ``DEFAULT_SEGMENT_BYTES`` so
#: the reduction of one segment overlaps the transfer of the next (and, at the switch from
#: reduce-scatter to all-gather, a reduced segment is forwarded while later ones still arrive);
#: below it every extra message costs more than the overlap saves. Measured on 2 gloo processes
#: over loopback with ``benchmarks/bench_torch_ring.py -b 8MiB -e 64MiB --segments
#: 0,512KiB,1MiB,2MiB,4MiB --runs 3 --no-restore`` (busbw ratio to gloo's all_reduce in the same
#: run, median of 3; docs/benchmarks.md): whole chunks 0.68 / 0.77 / 0.75 / 0.83 at 8 / 16 / 32 /
#: 64 MiB buffers, 2 MiB segments 0.72 / 0.91 / 0.91 / 1.00 (1 MiB: 0.73 / 0.85 / 0.88 / 0.90;
#: 4 MiB: 0.64 / 0.80 / 0.92 / 0.98).
PIPELINE_THRESHOLD_BYTES = 4 << 20
DEFAULT_SEGMENT_BYTES = 2 << 20

class TorchOps:
    """The engine's array dialect on 1-D torch tensors (:class:`ringccl.engine.ArrayOps`)."""

    @staticmethod
    def empty(like: torch.Tensor, elements: int) -> torch.Tensor:
        return like.new_empty(elements)

    @staticmethod
    def copy(dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)

    combine = staticmethod(combine_fn)

    @staticmethod
    def kind(a: torch.Tensor):
        return (a.dtype, a.device)


OPS = TorchOps()

#: the dtypes ringccl.torch moves (its collectives', the backend's and shm_empty's check)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                    torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)

#: the transport's measured default (see the constants above), passed in by ringccl.torch
PIPELINING = engine.Pipelining(PIPELINE_THRESHOLD_BYTES, DEFAULT_SEGMENT_BYTES)

#: the numpy dtype the shm data path holds each dtype's bytes in (bfloat16, which numpy lacks,
#: as int16: those arrays are only sliced and copied; torch reduces them, see _SlotOps)
NUMPY_DTYPES = {d: torch.empty(0, dtype=torch.int16 if d == torch.bfloat16 else d).numpy().dtype
                for d in SUPPORTED_DTYPES}


def _numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's memory as a numpy array of :data:`NUMPY_DTYPES` (shared, not copied)."""
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return (t.detach() if t.requires_grad else t).numpy()


#: copies of at least this many bytes go through torch (its copy runs on the intra-op threads
#: a process has; numpy's on one), smaller ones through numpy (no tensor to make)
TORCH_COPY_BYTES = 256 << 10


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for the shm data path's numpy arrays (same size and dtype)."""
    if dst.nbytes >= TORCH_COPY_BYTES:
        torch.from_numpy(dst).copy_(torch.from_numpy(src))
    else:
        dst[...] = src


class _SlotOps:
    """The shm data path's array dialect (:class:`ringccl.engine.ArrayOps`): numpy views of
    the slots and of the caller's tensors, because a call slices and copies many small ranges
    and slicing a numpy array costs ~0.1 µs against a tensor's ~1.2 µs (a 4 KiB all_reduce on
    2 processes spent ~45 µs more per call than ringccl.mpi's on the same transport); the
    reductions are torch's own in-place ops (:func:`combine_fn`) on tensors sharing those
    views' memory, so results are bitwise those of the p2p path and float16/bfloat16 reduce
    vectorised (numpy's float16 loops are scalar), and so are copies from
    :data:`TORCH_COPY_BYTES` on (torch's use the process's intra-op threads)."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype

    @staticmethod
    def empty(like: np.ndarray, elements: int) -> np.ndarray:
        return np.empty(elements, like.dtype)

    copy = staticmethod(_copy)

    def combine(self, op: ReduceOp):
        return _slot_combine(op, self.dtype)

    def combine_into(self, op: ReduceOp):
        return _slot_combine_into(op, self.dtype)

    def kind(self, a: np.ndarray):
        return ("shm", self.dtype)


@caches.memoize(maxsize=128)
def _slot_combine(op: ReduceOp, dtype: torch.dtype):
    """:func:`combine_fn` for numpy arrays holding ``dtype``'s bytes: one function per (op,
    dtype), made once (the engine asks for it at every call)."""
    f = combine_fn(op)
    if dtype == torch.bfloat16:
        return lambda dst, src: f(torch.from_numpy(dst).view(dtype),
                                  torch.from_numpy(src).view(dtype))
    return lambda dst, src: f(torch.from_numpy(dst), torch.from_numpy(src))


@caches.memoize(maxsize=128)
def _slot_combine_into(op: ReduceOp, dtype: torch.dtype):
    """:func:`combine_into_fn` for numpy arrays holding ``dtype``'s bytes."""
    f = combine_into_fn(op)
    if dtype == torch.bfloat16:
        return lambda dst, a, b: f(torch.from_numpy(dst).view(dtype),
                                   torch.from_numpy(a).view(dtype),
                                   torch.from_numpy(b).view(dtype))
    return lambda dst, a, b: f(torch.from_numpy(dst), torch.from_numpy(a), torch.from_numpy(b))


_SLOT_OPS = {d: _SlotOps(d) for d in SUPPORTED_DTYPES}


def release_buffers() -> None:
    """Free the staging buffers, cached plans and dataflow programs kept between calls."""
    engine.clear_caches()


class P2PTransport:
    """The engine's transport over torch.distributed point-to-point: it moves bytes only (see
    :class:`ringccl.engine.Transport`); applying them is the engine's workspace."""

    def __init__(self, group, peers: Sequence[int], timeout: datetime.timedelta | None):
        self.group, self.peers, self.timeout = group, peers, timeout

    def isend(self, s, data):
        return dist.isend(data, self.peers[s.peer], self.group)

    def irecv(self, r, landing):
        return dist.irecv(landing, self.peers[r.peer], self.group)

    def wait(self, work) -> None:
        if self.timeout is None:
            work.wait()       # gloo bounds it by the group's timeout
        else:
            work.wait(self.timeout)

    def is_timeout(self, exc: BaseException) -> bool:
        text = str(exc).lower()
        return "timed out" in text or "timeout" in text

    def peer_name(self, peer: int) -> str:
        g = self.peers[peer]
        return str(peer) if g == peer else f"{peer} (global rank {g})"

    def batch(self, sends, recvs) -> list:
        ops = ([dist.P2POp(dist.isend, data, self.peers[s.peer], self.group)
                for s, data in sends]
               + [dist.P2POp(dist.irecv, landing, self.peers[r.peer], self.group)
                  for r, landing in recvs])
        return dist.batch_isend_irecv(ops)


#: shared memory: whole chunks. A receive is read where the peer's bytes lie, so splitting a
#: chunk into segments only adds synchronisation (each segment is one more descriptor, wait
#: and release); an explicit ``segment_bytes=`` still splits.
SHM_PIPELINING = engine.Pipelining(None, 0)

#: ...except where a segment's copy into the slot can overlap the peers' reads of the one
#: before (the lazy sends of :mod:`ringccl.engine.staged`): a broadcast's root copies its
#: buffer in while every other rank waits, so from 8 MiB chunks on it moves 2 MiB segments.
#: Measured (an A/B of ``segment_bytes=`` 0 / 1 / 2 / 4 MiB, median of 5 single calls,
#: slowest rank, restore=False; 2 processes, load 2): 16 MiB 3.36 / 2.62 / 2.07 / 2.67 ms,
#: 64 MiB 13.1 / 8.8 / 8.3 / 8.3 ms; 4 processes on the 2 cores (no idle core to overlap
#: with): 16 MiB 5.81 / 5.49 / 5.70 / 5.40 ms, 64 MiB 19.1 / 19.9 / 19.0 / 20.9 ms, level.
#: all_reduce, all_to_all and all_gather, whose ranks all copy at once, gained nothing from
#: segments (two_shot 16 MiB: 4.9 ms whole, 5.2-6.4 ms in segments): whole chunks.
SHM_PIPELINING_BY_COLLECTIVE = {"broadcast": engine.Pipelining(8 << 20, 2 << 20)}


def shm_pipelining(collective: str) -> engine.Pipelining:
    """The pipelining policy over shared memory for ``collective`` (:data:`SHM_PIPELINING`,
    or its entry of :data:`SHM_PIPELINING_BY_COLLECTIVE`)."""
    return SHM_PIPELINING_BY_COLLECTIVE.get(collective, SHM_PIPELINING)


def call_pipelining(collective: str, pipelining: engine.Pipelining | None,
                    transport: str | None) -> engine.Pipelining:
    """The pipelining policy a call of ``collective`` runs with: ``pipelining`` as asked, but
    over shared memory (``transport`` "shm", or "hybrid": shm inside each host) the p2p
    default (:data:`PIPELINING`, or None) becomes :func:`shm_pipelining`'s."""
    if transport in ("shm", "hybrid") and (pipelining is None or pipelining is PIPELINING):
        return shm_pipelining(collective)
    return pipelining or PIPELINING

#: seconds a shared-memory wait may take when neither ``timeout=``, RINGCCL_TIMEOUT nor the
#: group's own timeout is known (torch's default group timeout is 30 minutes)
SHM_DEFAULT_TIMEOUT_S = 1800.0

#: groups of at least this many ranks enter a call lazily (ShmGroup.enter(lazy=True)); smaller
#: ones agree at every entry. Measured back to back (200 calls per sample, the two ways
#: interleaved over 9 rounds, median µs per call, one script, 2 cores): 4 processes 4 KiB
#: lazy / agreeing 554 / 596 (load 1.9), 1098 / 1253 (load 7.4), 1371 / 1641 (load 10);
#: 2 processes 4 KiB 109 / 76 (load 1.8), 115 / 243 (load 6.6), 288 / 243 (load 10.6),
#: 8 bytes 145 / 139 (load 1.8), 365 / 289 (load 7); again at load 1.6: 4 KiB 135 / 128,
#: 135 / 143, 16 KiB 105 / 119. So for 2 ranks no clear gain (the entry's wait and the wait
#: for the peer's data are the same synchronisation there, and the lazy entry's own waits, for
#: the peer's releases before the slot is written, remain): they keep the full agreement.
SHM_LAZY_ENTRY_MIN_WORLD = 3

_shm: dict = {}          # id(group object) -> (group object, ShmGroup, ShmTransport)
_shm_lock = threading.Lock()
# the same for group-like objects set up through a ShmSetup (the ringccl backend's groups):
# their owner frees them (release_shm_state); the sweep of destroyed torch groups never does
_shm_owned: dict = {}


@caches.register
def release_shm() -> None:
    """Drop every group's shared memory on this rank (``ringccl.clear_caches``). Collective in
    effect: call it on every rank of a group between the same two collectives (the next call
    sets the group's shared memory up again, a collective exchange)."""
    with _shm_lock:
        states = list(_shm.values()) + list(_shm_owned.values())
        _shm.clear()
        _shm_owned.clear()
    for _, state, _ in states:
        state.close()


def _group_object(group):
    return dist.group.WORLD if group is None else group


def _group_timeout_s(group) -> float | None:
    """The timeout ``group`` was created with, in seconds (None where torch hides it)."""
    try:
        t = _group_object(group)._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError, ValueError):
        return None
    return t.total_seconds() if isinstance(t, datetime.timedelta) else None


class ShmSetup(NamedTuple):
    """How :func:`shm_state` sets up the shared memory of a group that is not a
    torch.distributed group (the ringccl backend's, whose own collectives cannot carry the
    set-up exchange: they run on the worker thread that is setting up)."""

    rank: int                          # this rank in the group
    world_size: int
    global_ranks: Sequence[int]        # by group rank, for messages
    exchange: Callable[[Any], list]    # every rank's small object, in rank order (collective)
    timeout_s: float                   # the group's timeout: the waits' default, seconds


def shm_state(group, timeout: float | None = None, setup: ShmSetup | None = None):
    """``(ShmGroup, ShmTransport)`` of ``group`` on this rank, set up on first use (a
    collective call: an exchange through the group). One segment per group: two groups, or
    two jobs, never share one.

    Args:
        group: a torch.distributed group (None: the default group); with ``setup``, any object
            that identifies the group (kept until :func:`release_shm_state` or
            ``ringccl.clear_caches``).
        timeout: the waits' default in seconds (None: the group's timeout).
        setup: rank, size and set-up exchange of a group-like ``group`` (:class:`ShmSetup`).
    Raises:
        BackendError: the platform is not x86-64, or the set-up failed (ShmSpaceError: the
            shared-memory directory is too small).
    """
    if setup is not None:
        return _owned_shm_state(group, timeout, setup)
    pg = _group_object(group)
    hit = _shm.get(id(pg))
    if hit is not None and hit[0] is pg:
        return hit[1], hit[2]
    shm.check_platform()
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    peers = _peers(group, world_size)
    seconds = timeout or _group_timeout_s(group) or SHM_DEFAULT_TIMEOUT_S

    def exchange(obj):
        everyone: list = [None] * world_size
        dist.all_gather_object(everyone, obj, group=group)
        return everyone

    state = shm.ShmGroup(rank, world_size, exchange, seconds)
    name = lambda p: str(p) if peers[p] == p else f"{p} (global rank {peers[p]})"  # noqa: E731
    transport = shm.ShmTransport(state, name)
    with _shm_lock:
        # groups destroyed since (their objects gone from torch's map) free their memory now
        live = {id(g) for g in getattr(dist.distributed_c10d._world, "pg_map", {})}
        for key in [k for k in _shm if k not in live]:
            _shm.pop(key)[1].close()
        _shm[id(pg)] = (pg, state, transport)
    return state, transport


def _owned_shm_state(key, timeout: float | None, setup: ShmSetup):
    """:func:`shm_state` of a group-like ``key`` set up through ``setup``."""
    hit = _shm_owned.get(id(key))
    if hit is not None and hit[0] is key:
        return hit[1], hit[2]
    shm.check_platform()
    state = shm.ShmGroup(setup.rank, setup.world_size, setup.exchange,
                         timeout or setup.timeout_s)
    peers = list(setup.global_ranks)
    name = lambda p: str(p) if peers[p] == p else f"{p} (global rank {peers[p]})"  # noqa: E731
    transport = shm.ShmTransport(state, name)
    with _shm_lock:
        _shm_owned[id(key)] = (key, state, transport)
    return state, transport


def release_shm_state(key) -> None:
    """Drop the shared memory set up for the group-like ``key`` (:class:`ShmSetup`) on this
    rank, if any (its owner's teardown: ``destroy_process_group`` of a ringccl-backend group)."""
    with _shm_lock:
        hit = _shm_owned.pop(id(key), None)
    if hit is not None and hit[0] is key:
        hit[1].close()


def _typed(state, serial: int, dtype: torch.dtype) -> torch.Tensor:
    """The whole segment ``serial`` as a 1-D tensor of ``dtype`` (cached with the segment;
    the hybrid executor's data path, whose p2p half sends tensors)."""
    key = (serial, dtype)
    t = state.cache.get(key)
    if t is None:
        # through numpy: its view holds the mapping exported (see shm_empty)
        raw = torch.from_numpy(state.array(serial, np.uint8))
        t = state.cache[key] = raw.view(dtype) if dtype != torch.uint8 else raw
    return t


def _fill(work: np.ndarray, reads: tuple, sources) -> None:
    """Copy the ranges ``reads`` of the working buffer from ``sources`` (a
    :class:`ringccl.engine.Pieces`, or the caller's in-place buffer)."""
    if isinstance(sources, engine.Pieces):
        for lo, hi in reads:
            for a, b, src, at in sources.parts(lo, hi):
                _copy(work[a:b], src[at:at + b - a])
    else:
        for lo, hi in reads:
            _copy(work[lo:hi], sources[lo:hi])


def _drain(work: np.ndarray, runs: tuple, targets, landed: tuple, in_slot: tuple,
           sources) -> None:
    """Copy the ranges ``runs`` of the call's result into ``targets`` (Pieces, or the caller's
    in-place buffer): skipping what ``landed`` there already (final receives), from the slot
    where the call wrote or read (``in_slot``), else from ``sources`` (a range no step touched:
    the caller's bytes, unchanged)."""
    def pieces(lo, hi):
        if isinstance(targets, engine.Pieces):
            yield from targets.parts(lo, hi)
        else:
            yield lo, hi, targets, lo
    for lo, hi in runs:
        for a, b, done in staged.split(lo, hi, landed):
            if done:
                continue
            for c, d, dst, at in pieces(a, b):
                for e, f, written in staged.split(c, d, in_slot):
                    out = dst[at + e - c:at + f - c]
                    if written:
                        _copy(out, work[e:f])
                    elif isinstance(sources, engine.Pieces):
                        for g, h, src, s_at in sources.parts(e, f):
                            _copy(out[g - e:h - e], src[s_at:s_at + h - g])


def _entry_error(schedule: Schedule, rank: int, transport, exc: BaseException, timeout: float,
                 when: str = "entering the call"):
    """:func:`ringccl.engine.staged.entry_error` naming the peer as ``transport`` does."""
    return staged.entry_error(schedule, rank, exc, timeout, when, transport.peer_name)


def _execute_shm(schedule: Schedule, buffer, op: ReduceOp, group, bounds,
                 segment_elems_of, timeout_s: float | None, restore: bool,
                 setup: ShmSetup | None = None) -> torch.Tensor:
    """:func:`execute` over the group's shared memory (see the module docstring); ``setup``:
    for a group-like ``group`` (:func:`shm_state`). ``buffer``: the working buffer, or a
    :class:`ringccl.engine.Staged` private one (the front end's all_to_all, scatter, gather,
    reduce_scatter), filled from its sources and drained into its targets here.

    Where the working buffer is not already in the slot (zero copy), the ranges the schedule
    reads are copied in, and the results out after the call's last wait, so the caller's
    arrays change only if the call succeeds; with ``restore=False`` (``Staged.restore``) the
    final receives land in the caller's arrays directly (:mod:`ringccl.engine.staged`), and
    with ``restore=True`` in place (all_reduce) those the slot can put back on failure
    (``PlanRanges.restorable``: two_shot's all-gather half)."""
    described = buffer if isinstance(buffer, staged.Staged) else None
    like = buffer if described is None else described.like
    numel = like.numel() if described is None else described.numel
    if like.device.type != "cpu":
        raise BackendError(f"transport='shm' needs CPU tensors, got one on {like.device}")
    state, transport = shm_state(group, timeout_s, setup)
    rank = state.rank
    itemsize = like.element_size()
    # zero copy: the buffer lies in this rank's slot of one of the group's segments (shm_empty)
    where = state.locate(buffer.data_ptr(), numel * itemsize) \
        if described is None and numel else None
    plan = engine.plan(schedule, rank, bounds, segment_elems_of(itemsize))
    ops, dtype = _SLOT_OPS.get(like.dtype), NUMPY_DTYPES.get(like.dtype)   # numpy views
    if ops is None:
        raise ArgumentTypeError(f"transport='shm' does not move {like.dtype}; it moves "
                                f"{', '.join(str(d).replace('torch.', '') for d in SUPPORTED_DTYPES)}")
    workspace = None
    try:
        # every rank enters every call (also with nothing to move): the call counters stay equal
        # the working buffer, then this call's eager area (ringccl.shm.transport), 64-aligned:
        # what the slot holds beyond the buffer, and EAGER_AREA_BYTES more asked for only by
        # small buffers (a large buffer's eager sends are its small chunks, if any)
        used = -(-numel * itemsize // 64) * 64
        need = 0 if where is not None else \
            used + shm.EAGER_AREA_BYTES if used <= shm.EAGER_AREA_BYTES else used
        # lazy: no wait for the peers when the working area holds ``need`` (ShmGroup.enter);
        # leave() below completes the agreement (a no-op after a full agreement)
        try:
            state.enter(need, timeout_s, lazy=state.world_size >= SHM_LAZY_ENTRY_MIN_WORLD)
            if not plan.steps:
                state.leave(timeout_s)
                if described is not None:   # nothing moves: the targets get their sources
                    _drain(None, described.drain_runs, engine.Pieces(
                        described.drain_runs, [_numpy(t) for t in described.targets]), (), (),
                        engine.Pieces(described.fill_runs, [_numpy(t) for t in
                                                            described.sources]))
                return buffer
            serial, offset, eager = state.call_area(used, where)
            transport.begin(serial, offset, itemsize,
                            lambda s, off, n: state.array(s, dtype)[off // itemsize:
                                                                    (off + n) // itemsize],
                            np.copy, timeout_s, eager=eager, copy=ops.copy)
        except (TimeoutError, ConnectionError) as exc:
            raise _entry_error(schedule, rank, transport, exc, timeout_s or state.timeout) \
                from exc
        if where is None:
            work = state.array(serial, dtype)[offset // itemsize:offset // itemsize + numel]
            ranges = staged.plan_ranges(plan)
            if described is None:
                sources = targets = mine = _numpy(buffer)
                drain_runs = ranges.writes
                direct = not restore
            else:
                sources = engine.Pieces(described.fill_runs,
                                        [_numpy(t) for t in described.sources])
                targets = engine.Pieces(described.drain_runs,
                                        [_numpy(t) for t in described.targets])
                drain_runs = described.drain_runs
                direct = not described.restore
            # seeded reduces read the caller's bytes; a range no single array holds is
            # copied in as any other (Pieces.view: None)
            seeded = {}
            for r in ranges.seeded:
                view = sources.view(r.lo, r.hi) if described is not None else mine[r.lo:r.hi]
                if view is None:
                    _fill(work, ((r.lo, r.hi),), sources)
                else:
                    seeded[r] = view
            _fill(work, ranges.upfront, sources)   # the lazy sends' segments: when posted
            landing = {}
            # restore=False: every final receive lands in the caller's arrays; restore=True in
            # place: those whose caller's bytes the slot keeps (put back on failure)
            finals = ranges.finals if direct else ranges.restorable if described is None \
                else ()
            for r in finals:
                view = targets.view(r.lo, r.hi) if described is not None else \
                    mine[r.lo:r.hi]
                if view is not None:
                    landing[r] = view
            workspace = staged.Landing(ops, work, op, landing, ranges.lazy,
                                       lambda lo, hi: _fill(work, ((lo, hi),), sources),
                                       seeded)
        else:
            work = _numpy(buffer)
            workspace = engine.Workspace(ops, work, op, 0)
        # zero copy: the rollback saves what it overwrites; else the caller's buffer is written
        # only after success (unless final receives land there: restore=False)
        staged.run_call(schedule, rank, plan, transport, workspace, state,
                        restore=restore and where is not None, timeout=timeout_s,
                        itemsize=itemsize, entry_error=lambda exc, when: _entry_error(
                            schedule, rank, transport, exc, timeout_s or state.timeout, when))
        if where is None:
            landed = staged.merge((r.lo, r.hi) for r in landing)
            _drain(work, drain_runs, targets, landed, staged.merge(ranges.reads + ranges.writes),
                   sources)
        return buffer
    except BaseException:
        if isinstance(workspace, staged.Landing) and not direct:
            workspace.rollback()   # restore=True: the restorable final receives that landed
        if not state.closed:
            state.abort()
        raise


def shm_empty(shape, dtype: torch.dtype = torch.float32, group=None) -> torch.Tensor:
    """A CPU tensor of ``shape`` and ``dtype`` that lives in this rank's slot of ``group``'s
    shared memory: collectives on it (``transport="shm"`` or "auto") skip the copy in and out.

    Collective: every rank of ``group`` calls it with the same shape and dtype, in the same
    order relative to the group's collectives. The tensor stays valid memory as long as it is
    referenced; it is zero-copy until ``ringccl.clear_caches()`` or the group's destruction
    (after that a collective copies it like any tensor). Contents are undefined (as
    ``torch.empty``).

    Args:
        shape: int or tuple of ints >= 0.
        dtype: any dtype ringccl.torch supports.
        group: process group (None = default group).
    Returns:
        the tensor.
    Raises:
        ArgumentError, ArgumentTypeError: bad shape or dtype. BackendError: no process group,
            platform not x86-64, set-up failed; ShmSpaceError: the shared-memory directory is
            too small.
    """
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list, torch.Size)):
        raise ArgumentTypeError(f"shape={shape!r} must be an int or a tuple of ints")
    shape = tuple(check_int(n, "shape", minimum=0) for n in shape)
    if dtype not in SUPPORTED_DTYPES:
        raise ArgumentTypeError(f"dtype={dtype!r} is not supported; expected one of "
                                f"{', '.join(str(d).replace('torch.', '') for d in SUPPORTED_DTYPES)}")
    count = 1
    for n in shape:
        count *= n
    state, _ = shm_state(group)
    nbytes = -(-count * dtype.itemsize // 64) * 64   # 64-byte aligned allocations
    serial, offset = state.allocate(nbytes, f"{shape}, {dtype}")
    # a numpy view of just this allocation: the tensor's storage is its own bytes (not the
    # whole segment, every peer's slot included: torch.save, pickling), and the view holds
    # the mapping exported, so closing the segment (clear_caches) leaves it valid memory
    # (a tensor from torch.frombuffer does not: the unmapping would crash it)
    raw = np.frombuffer(state.segments[serial].map, dtype=np.uint8, count=nbytes,
                        offset=offset)
    return torch.from_numpy(raw).view(dtype)[:count].view(shape)


def check_timeout(timeout) -> datetime.timedelta | None:
    """``timeout=`` (seconds or timedelta) or RINGCCL_TIMEOUT as a timedelta; None: the group's
    (:func:`ringccl.engine.timeout_seconds`)."""
    seconds = engine.timeout_seconds(timeout)
    return None if seconds is None else datetime.timedelta(seconds=seconds)


def execute(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp = ReduceOp.SUM,
            group=None, segment_bytes: int | None = None, bounds=None, *,
            timeout: float | datetime.timedelta | None = None,
            restore: bool = True, pipelining: engine.Pipelining | None = None,
            transport: str = "p2p") -> torch.Tensor:
    """Execute ``schedule`` in place on this rank's working ``buffer``.

    Args:
        schedule: any verified schedule whose world_size equals the group's size.
        buffer: 1-D contiguous tensor, the collective's working buffer; with
            ``transport="shm"`` also a :class:`ringccl.engine.Staged` (a private working
            buffer given as its sources and targets: the front end's, see
            :mod:`ringccl.engine.staged`).
        op: reduce op applied by REDUCE transfers (AVG sums here; the caller divides).
        group: process group (None = the default group).
        segment_bytes: split each transferred chunk into segments of this many bytes and move
            them as a pipeline: a segment is reduced as soon as it arrives and forwarded as soon
            as it is reduced, while later segments are in flight. None: ``pipelining`` decides.
            0: never split.
        bounds: this rank's chunk boundaries, num_chunks + 1 non-decreasing offsets into
            ``buffer``: chunk c is ``buffer[bounds[c]:bounds[c+1]]`` (from the collective's
            contract, ``Collective.chunk_sizes``; chunks this rank never touches may be empty).
            A transfer's chunk must have the same size on both ranks. None: ``chunk_bounds(
            buffer.numel(), num_chunks)``, the ``torch.tensor_split`` pieces.
        timeout: seconds (or timedelta) each wait for a peer may take; None: the
            ``RINGCCL_TIMEOUT`` environment variable if set, else the group's timeout
            (``init_process_group(timeout=...)``, which gloo applies to every wait).
        restore: save each chunk just before this rank first writes it (memory: up to one
            copy of ``buffer``, kept between calls) and restore it if the call fails, so
            ``buffer`` is either fully updated or exactly as it was. False: on failure its
            contents are undefined (as with NCCL's own collectives).
        pipelining: the policy used when ``segment_bytes`` is None (None: :data:`PIPELINING`,
            segments of DEFAULT_SEGMENT_BYTES for chunks >= PIPELINE_THRESHOLD_BYTES; over
            shared memory :func:`shm_pipelining`, whole chunks but a large broadcast's,
            replaces the p2p default).
        transport: "p2p" (torch.distributed point-to-point), "shm" (the group's shared
            memory: CPU tensors, every rank on this host, x86-64; set up on first use) or
            "hybrid" (shared memory inside each host, p2p across: :mod:`ringccl.torch.hybrid`).

    Returns:
        ``buffer``.
    Raises:
        BackendError: the group's size or this rank does not match the schedule, bad bounds.
        PeerError: a point-to-point operation failed (a peer died or closed its connection);
            RingcclTimeout (a PeerError and TimeoutError): a wait ran past the timeout. Both
            name the collective, algorithm, step and the peer, and are raised after the
            rollback. The group must not be used again afterwards: a receive already posted to a
            stalled peer cannot be withdrawn from the backend.
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if world_size != schedule.world_size:
        raise BackendError(f"schedule is for world_size={schedule.world_size}, but the process "
                           f"group has {world_size} ranks")
    if rank < 0:
        raise BackendError("this process is not a member of the given process group")
    wait_timeout = check_timeout(timeout)
    if isinstance(buffer, staged.Staged) and transport != "shm":
        raise BackendError(f"a described working buffer (ringccl.engine.Staged) needs "
                           f"transport='shm', not {transport!r}")
    numel = buffer.numel if isinstance(buffer, staged.Staged) else buffer.numel()
    bounds = engine.check_bounds(bounds, schedule.num_chunks, numel)
    if segment_bytes is not None:
        pipelining = engine.Pipelining.fixed(segment_bytes)
    pipelining = call_pipelining(schedule.collective, pipelining, transport)
    if transport == "shm":
        return _execute_shm(schedule, buffer, op, group, bounds,
                            lambda itemsize: pipelining.segment_elems(bounds, itemsize),
                            None if wait_timeout is None else wait_timeout.total_seconds(),
                            restore)
    if transport == "hybrid":   # shm inside each host, p2p across: ringccl.torch.hybrid
        from .hybrid import execute_hybrid
        return execute_hybrid(schedule, buffer, op, group, bounds,
                              lambda itemsize: pipelining.segment_elems(bounds, itemsize),
                              None if wait_timeout is None else wait_timeout.total_seconds(),
                              restore)
    if transport != "p2p":
        raise BackendError(f"transport={transport!r} must be 'p2p', 'shm' or 'hybrid' here")
    segment_elems = pipelining.segment_elems(bounds, buffer.element_size())
    backend = dist.get_backend(group)
    return run_p2p(schedule, buffer, op, rank, bounds, segment_elems,
                   P2PTransport(group, _peers(group, world_size), wait_timeout),
                   timeout_s=None if wait_timeout is None else wait_timeout.total_seconds(),
                   restore=restore, lockstep=backend in ("nccl", "ucc"), backend=str(backend))


def run_p2p(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp, rank: int, bounds,
            segment_elems: int, transport, *, timeout_s: float | None, restore: bool,
            lockstep: bool = False, backend: str = "gloo") -> torch.Tensor:
    """:func:`execute`'s run over a point-to-point ``transport`` (any
    :class:`ringccl.engine.Transport`: :func:`execute`'s torch.distributed one, the ringccl
    backend's raw gloo group): the engine's plan for ``rank``, its workspace (torch's in-place
    ops), the lockstep (``lockstep``: NCCL/UCC's grouped calls) or dataflow driver, the trace
    recorder when one is on.

    Args:
        schedule, buffer, op, bounds: as for :func:`execute` (``bounds`` checked already).
        rank: this rank in the schedule.
        segment_elems: elements per pipelined segment (0: whole chunks).
        transport: the transport object.
        timeout_s: seconds per wait, for the engine's messages (None: the transport's bound).
        restore: as for :func:`execute`.
        backend: the name traces record.
    Returns:
        ``buffer``. Raises: as :func:`execute`.
    """
    plan = engine.plan(schedule, rank, bounds, segment_elems)
    if not plan.steps:
        return buffer
    workspace = engine.Workspace(OPS, buffer, op, plan.staging_elems)
    trace.drive(engine.run_lockstep if lockstep else engine.run_dataflow, schedule, rank, plan,
                transport, workspace, restore=restore, timeout=timeout_s,
                itemsize=buffer.element_size(), backend=backend)
    return buffer


def max_staging_elements(schedule: Schedule, rank: int, count: int, bounds=None) -> int:
    """Elements of staging memory :func:`execute` allocates on ``rank`` for a buffer of ``count``
    (chunks from ``bounds``, default ``chunk_bounds(count, num_chunks)``; whole chunks)."""
    return engine.plan(schedule, rank, engine.check_bounds(bounds, schedule.num_chunks, count),
                       0).staging_elems
