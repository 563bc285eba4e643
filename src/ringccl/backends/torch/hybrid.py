"""``transport="hybrid"``: shared memory inside each host, gloo point-to-point across hosts, in
one engine call (:class:`ringccl.backends.shm.hierarchical.HybridTransport`; docs/shm.md,
"Hierarchical on real processes").

Set-up, once per group and collective over the whole group (so no torch sub-group is created
and a group that is itself a sub-group works): every rank's host identity (the group's
:func:`~ringccl.backends.torch.transport.layout_of`), then each host's shared-memory set-up,
whose two exchanges are the group's ``all_gather_object`` with each rank keeping its host's
entries. Every host gets a segment of its own (its ranks only map it).

``transport="auto"`` picks it (:func:`ringccl.backends.torch.transport.resolve_transport`) for
CPU tensors on x86-64 when the group spans several hosts and some host holds two or more of its
ranks; ``algorithm=None`` on all_reduce, reduce_scatter and all_gather then runs what the one
chooser picks (:func:`ringccl.costmodel.choice.choose`: the model's cheaper of the collective's
default and ``hierarchical`` with ``local_size`` = ranks per host, when hosts hold equal blocks
of consecutive ranks), else the collective's default.

The call itself is the one shared-memory call (:func:`ringccl.backends.shm.call.execute`) on
torch tensors (the point-to-point half sends tensors): the working buffer is copied into this
rank's slot of its host's segment, the schedule runs with host peers read in place and the
others over gloo, the result is copied back (the caller's buffer is written only after
success).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ...errors import BackendError
from ...ir import Schedule
from ...ops import ReduceOp
from ..shm import call, check_platform, registry
from ..shm.group import ShmGroup
from ..shm.hierarchical import HybridTransport, host_layout
from ..shm.transport import ShmTransport
from .dialect import OPS
from .shm import ShmSetup, setup_error
from .transport import P2PTransport, group_timeout_s, layout_of, peer_namer, peers, weak_group

__all__ = ["hybrid_state", "execute_hybrid", "HybridSetup", "release_hybrid_state"]


def _typed(state: ShmGroup, serial: int, dtype: torch.dtype) -> torch.Tensor:
    """The whole segment ``serial`` as a 1-D tensor of ``dtype`` (cached with the segment)."""
    key = (serial, dtype)
    t = state.cache.get(key)
    if t is None:
        # through numpy: its view holds the mapping exported (see shm_empty)
        raw = torch.from_numpy(state.array(serial, np.uint8))
        t = state.cache[key] = raw.view(dtype) if dtype != torch.uint8 else raw
    return t


def _dialect(dtype: torch.dtype) -> call.Dialect:
    return call.Dialect(OPS, lambda t: t, torch.Tensor.data_ptr,
                        functools.partial(_typed, dtype=dtype), torch.clone)


_DIALECTS: dict = {}


class HybridSetup(NamedTuple):
    """How :func:`hybrid_state` sets up a group that is not a torch.distributed group (the
    ringccl backend's, whose own collectives cannot carry the set-up: they run on the worker
    thread that is setting up)."""

    shm: ShmSetup              # the group's rank, size, global ranks, exchange, timeout
    hosts: Sequence[str]       # every rank's host identity (ringccl.backends.shm.host_id)
    p2p: Any                   # the point-to-point transport across hosts (engine Transport)


def hybrid_state(group, timeout: float | None = None, setup: HybridSetup | None = None):
    """``(HostLayout, ShmGroup, HybridTransport)`` of ``group`` on this rank, set up on first
    use (collective over the group). ``setup``: for a group-like ``group`` (kept until
    :func:`release_hybrid_state` or ``ringccl.clear_caches``).

    Raises:
        BackendError: not x86-64, or the set-up failed (ShmSpaceError: the shared-memory
            directory is too small).
    """
    owner = (dist.group.WORLD if group is None else group) if setup is None else group
    hit = registry.find("hybrid", id(owner), owner)
    if hit is not None:
        return hit[1].layout, hit[0], hit[1]
    check_platform()
    if setup is None:
        layout = layout_of(group)
        world_size = dist.get_world_size(group)
        ranks = peers(group, world_size)
        seconds = timeout or group_timeout_s(group) or call.DEFAULT_TIMEOUT_S
        the_group = weak_group(group)   # the kept state never keeps the group alive

        def gather(obj):
            everyone: list = [None] * world_size
            dist.all_gather_object(everyone, obj, group=the_group())
            return everyone
        p2p = P2PTransport(group, ranks, None)
    else:
        layout = host_layout(setup.hosts, setup.shm.rank)
        ranks = list(setup.shm.global_ranks)
        seconds = timeout or setup.shm.timeout_s
        gather, p2p = setup.shm.exchange, setup.p2p

    def exchange(obj):
        everyone = gather(obj)
        return [everyone[r] for r in layout.local_ranks]

    state = ShmGroup(layout.local_rank, len(layout.local_ranks), exchange, seconds)
    name = peer_namer(ranks)
    local = ShmTransport(state, lambda lp: name(layout.local_ranks[lp]))
    # gloo's Work.is_completed turns true only inside wait: the waits run on a helper thread
    transport = HybridTransport(local, p2p, layout, None, name, seconds)
    registry.keep("hybrid", id(owner), owner, state, transport)
    if setup is None:   # a torch group's end frees it (a HybridSetup's owner releases its own)
        registry.forget_with_owner("hybrid", id(owner), owner)
    return layout, state, transport


def release_hybrid_state(key) -> None:
    """Drop the hybrid state set up for the group-like ``key`` (:class:`HybridSetup`) on this
    rank, if any (its owner's teardown: ``destroy_process_group`` of a ringccl-backend group)."""
    registry.release("hybrid", id(key), key)


def execute_hybrid(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp, group, bounds,
                   segment_elems_of, timeout_s: float | None, restore: bool,
                   setup: HybridSetup | None = None) -> torch.Tensor:
    """:func:`ringccl.backends.torch.executor.execute` over the hybrid transport (module
    docstring). ``setup``: for a group-like ``group`` (:func:`hybrid_state`).

    Raises:
        BackendError: a tensor not on the CPU. PeerError, RingcclTimeout: as the
            shared-memory call, and a peer that died or stalled in the set-up (named, step 0).
    """
    if buffer.device.type != "cpu":
        raise BackendError(f"transport='hybrid' needs CPU tensors, got one on {buffer.device}")
    try:
        _, state, transport = hybrid_state(group, timeout_s, setup)
    except (TimeoutError, ConnectionError) as exc:   # a peer died or stalled in the set-up
        local = layout_of(group).local_ranks if setup is None else \
            host_layout(setup.hosts, setup.shm.rank).local_ranks
        raise setup_error(schedule, group, None if setup is None else setup.shm, exc,
                          timeout_s, lambda p: local[p]) from exc
    rank = dist.get_rank(group) if setup is None else setup.shm.rank
    dialect = _DIALECTS.get(buffer.dtype)
    if dialect is None:
        dialect = _DIALECTS[buffer.dtype] = _dialect(buffer.dtype)
    itemsize = buffer.element_size()
    return call.execute(schedule, buffer, op, rank, bounds, segment_elems_of(itemsize), state,
                        transport, dialect, itemsize=itemsize, timeout=timeout_s,
                        restore=restore)
