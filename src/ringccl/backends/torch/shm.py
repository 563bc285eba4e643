"""``transport="shm"`` on torch: the shared-memory call (:mod:`ringccl.backends.shm.call`) on CPU
tensors, seen as numpy arrays.

The working buffer lives in this rank's slot of the group's shared-memory segment (copied in and
out, unless the caller's buffer already lies there: a :func:`shm_empty` tensor), and receives
are read in place from the peer's slot. The array dialect of that data path
(:class:`_SlotOps`) is numpy views of the slots and of the caller's tensors, because a call
slices and copies many small ranges and slicing a numpy array costs ~0.1 µs against a tensor's
~1.2 µs (a 4 KiB all_reduce on 2 processes spent ~45 µs more per call than ringccl.mpi's on the
same transport); the reductions are torch's own in-place ops on tensors sharing those views'
memory, so results are bitwise those of the point-to-point path and float16/bfloat16 reduce
vectorised (numpy's float16 loops are scalar), and so are copies from :data:`TORCH_COPY_BYTES`
on (torch's use the process's intra-op threads).

A group's shared memory is set up on its first call over it (:func:`shm_state`: a collective
exchange through the group) and kept in :mod:`ringccl.backends.shm.registry`.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ... import caches, engine
from ...errors import ArgumentTypeError, BackendError
from ...ir import Schedule
from ...ops import ReduceOp
from ..shm import call, process_alive, registry
from ..shm.group import ShmGroup
from .dialect import SUPPORTED_DTYPES, combine_fn, combine_into_fn
from .transport import group_timeout_s, peer_namer, peers, weak_group

__all__ = ["execute_shm", "shm_state", "shm_empty", "ShmSetup", "release_shm_state",
           "setup_error", "SHM_PIPELINING", "SHM_PIPELINING_BY_COLLECTIVE", "shm_pipelining", "NUMPY_DTYPES",
           "TORCH_COPY_BYTES"]

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
    """The shm data path's array dialect (:class:`ringccl.engine.ArrayOps`; module docstring):
    numpy views, torch's reductions (:func:`~ringccl.backends.torch.dialect.combine_fn`)."""

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


def _dialect(dtype: torch.dtype) -> call.Dialect:
    return call.Dialect(_SlotOps(dtype), _numpy, torch.Tensor.data_ptr,
                        functools.partial(ShmGroup.array, dtype=NUMPY_DTYPES[dtype]), np.copy)


#: the shared-memory call's view of each dtype ringccl.torch moves
_DIALECTS = {d: _dialect(d) for d in SUPPORTED_DTYPES}


class ShmSetup(NamedTuple):
    """How :func:`shm_state` sets up the shared memory of a group that is not a
    torch.distributed group (the ringccl backend's, whose own collectives cannot carry the
    set-up exchange: they run on the worker thread that is setting up)."""

    rank: int                          # this rank in the group
    world_size: int
    global_ranks: Sequence[int]        # by group rank, for messages
    exchange: Callable[[Any], list]    # every rank's small object, in rank order (collective)
    timeout_s: float                   # the group's timeout: the waits' default, seconds
    store: Any = None                  # the group's store (names a peer that left the set-up)


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
            shared-memory directory is too small). PeerDied (a ConnectionError) or
            TimeoutError: a peer died or stalled in the set-up's exchange (``.peer`` the peer
            that left, or None: :func:`_set_up`).
    """
    if setup is not None:
        hit = registry.find("owned", id(group), group)
        if hit is None:
            hit = _set_up(setup.store, setup.rank, setup.world_size, lambda: registry.setup(
                "owned", id(group), group, setup.rank, setup.world_size, setup.exchange,
                timeout or setup.timeout_s, peer_namer(setup.global_ranks)))
        return hit
    pg = dist.group.WORLD if group is None else group
    hit = registry.find("torch", id(pg), pg)
    if hit is not None:
        return hit
    # groups destroyed since (their objects gone from torch's map) free their memory now
    registry.release_dead("torch", {id(g) for g in getattr(dist.distributed_c10d._world,
                                                           "pg_map", {})})
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    the_group = weak_group(group)   # the kept state never keeps the group alive

    def exchange(obj):
        everyone: list = [None] * world_size
        dist.all_gather_object(everyone, obj, group=the_group())
        return everyone

    hit = _set_up(_group_store(pg), rank, world_size, lambda: registry.setup(
        "torch", id(pg), pg, rank, world_size, exchange,
        timeout or group_timeout_s(group) or call.DEFAULT_TIMEOUT_S,
        peer_namer(peers(group, world_size))))
    # the group's end (destroy_process_group dropping the last reference) frees it at once
    registry.forget_with_owner("torch", id(pg), pg)
    return hit


_PID_KEY = "ringccl/shm-set-up-pid/{}"


def _group_store(pg):
    """The store torch made ``pg`` with (None where this torch does not say)."""
    try:
        return dist.distributed_c10d._world.pg_map[pg][1]
    except (AttributeError, KeyError, IndexError, TypeError):
        return None


def _set_up(store, rank: int, world_size: int, make: Callable[[], Any]):
    """``make()``: a group's shared-memory set-up (:class:`~ringccl.backends.shm.ShmGroup`).
    ``store``: the group's (None: not known): this rank says there that it reached the set-up,
    and if the set-up's first exchange fails (before the ranks' pids are known to each other)
    the store names the peer that left: :func:`_absent_peer`.

    Raises: as ShmGroup (PeerDied, TimeoutError: ``.peer`` the peer that left, or None)."""
    if store is not None:
        try:
            store.set(_PID_KEY.format(rank), str(os.getpid()))
        except (RuntimeError, ValueError):   # a store that does not answer: not named then
            store = None
    try:
        return make()
    except (TimeoutError, ConnectionError) as exc:
        if getattr(exc, "peer", None) is None:
            exc.peer = _absent_peer(store, rank, world_size)
        raise


#: how long a set-up that failed waits for its peers' pids before naming one that never came:
#: a live peer only slower to reach the set-up (a loaded machine) writes its pid within it
ABSENT_GRACE_S = 2.0


def _absent_peer(store, rank: int, world_size: int,
                 grace_s: float = ABSENT_GRACE_S) -> int | None:
    """Who left the set-up's first exchange, when the store still answers: the first peer that
    has not reached the set-up (no pid in the store) within ``grace_s`` seconds, else the first
    whose process is gone, else None. Without the grace a peer alive but only late was named
    instead of the one that never came; a peer that never came goes first because a survivor
    may have left by the time a slower one's exchange fails."""
    if store is None:
        return None
    try:
        keys = {r: _PID_KEY.format(r) for r in range(world_size) if r != rank}
        missing = [r for r, key in keys.items() if not store.check([key])]
        deadline = time.monotonic() + grace_s
        while missing and time.monotonic() < deadline:
            time.sleep(0.05)
            missing = [r for r in missing if not store.check([keys[r]])]
        if missing:
            return missing[0]
        return next((r for r, key in keys.items()
                     if not process_alive(int(store.get(key)))), None)
    except (RuntimeError, ValueError):   # the store's host is gone too
        return None


def setup_error(schedule: Schedule, group, setup: ShmSetup | None, exc: BaseException,
                timeout_s: float | None, peers_of: Callable[[int], int] | None = None):
    """The PeerError/RingcclTimeout of a group's first shared-memory call whose set-up failed
    (a peer died or stalled in its exchange: gloo's own error, the cause), naming the call,
    step 0 and the peer found dead, as a failure inside a call does. ``setup``: the group's
    :class:`ShmSetup` (None: a torch group); ``peers_of``: maps the failed group's ranks
    to the schedule's (hybrid: a host's ranks)."""
    if setup is None:
        rank, n = dist.get_rank(group), dist.get_world_size(group)
        ranks, seconds = peers(group, n), timeout_s or group_timeout_s(group)
    else:
        rank, ranks = setup.rank, list(setup.global_ranks)
        seconds = timeout_s or setup.timeout_s
    peer = getattr(exc, "peer", None)
    if peer is not None and peers_of is not None:
        exc.peer = peers_of(peer)
    return call.entry_error(schedule, rank, exc, seconds or call.DEFAULT_TIMEOUT_S,
                            "setting up the group's shared memory", where="",
                            peer_name=peer_namer(ranks))


def release_shm_state(key) -> None:
    """Drop the shared memory set up for the group-like ``key`` (:class:`ShmSetup`) on this
    rank, if any (its owner's teardown: ``destroy_process_group`` of a ringccl-backend group)."""
    registry.release("owned", id(key), key)


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
    shape = registry.check_shape(shape)
    if dtype not in SUPPORTED_DTYPES:
        raise ArgumentTypeError(f"dtype={dtype!r} is not supported; expected one of "
                                f"{', '.join(str(d).replace('torch.', '') for d in SUPPORTED_DTYPES)}")
    count = 1
    for n in shape:
        count *= n
    state, _ = shm_state(group)
    raw = registry.allocate(state, count, dtype.itemsize, f"{shape}, {dtype}")
    return torch.from_numpy(raw).view(dtype)[:count].view(shape)


def execute_shm(schedule: Schedule, buffer, op: ReduceOp, group, bounds, segment_elems_of,
                timeout_s: float | None, restore: bool,
                setup: ShmSetup | None = None) -> torch.Tensor:
    """:func:`ringccl.backends.torch.executor.execute` over the group's shared memory (the one
    shared-memory call, :func:`ringccl.backends.shm.call.execute`, on this module's dialect);
    ``setup``: for a group-like ``group`` (:func:`shm_state`). ``buffer``: the working buffer,
    or a :class:`ringccl.engine.Staged` private one (the front end's all_to_all, scatter,
    gather, reduce_scatter), filled from its sources and drained into its targets.

    Raises:
        BackendError: a tensor not on the CPU. ArgumentTypeError: a dtype the shm data path
            does not hold. PeerError, RingcclTimeout: as the shared-memory call.
    """
    like = buffer.like if isinstance(buffer, engine.Staged) else buffer
    if like.device.type != "cpu":
        raise BackendError(f"transport='shm' needs CPU tensors, got one on {like.device}")
    dialect = _DIALECTS.get(like.dtype)
    if dialect is None:
        raise ArgumentTypeError(f"transport='shm' does not move {like.dtype}; it moves "
                                f"{', '.join(str(d).replace('torch.', '') for d in SUPPORTED_DTYPES)}")
    try:
        state, transport = shm_state(group, timeout_s, setup)
    except (TimeoutError, ConnectionError) as exc:   # a peer died or stalled in the set-up
        raise setup_error(schedule, group, setup, exc, timeout_s) from exc
    itemsize = like.element_size()
    return call.execute(schedule, buffer, op, state.rank, bounds, segment_elems_of(itemsize),
                        state, transport, dialect, itemsize=itemsize, timeout=timeout_s,
                        restore=restore)
