"""``transport="hybrid"``: shared memory inside each host, gloo point-to-point across hosts, in
one engine call (:class:`ringccl.shm.hierarchical.HybridTransport`; docs/shm.md, "Hierarchical
on real processes").

Set-up, once per group and collective over the whole group (so no torch sub-group is created
and a group that is itself a sub-group works): one ``all_gather_object`` of every rank's
:func:`ringccl.shm.host_id`, then each host's shared-memory set-up, whose two exchanges are the
group's ``all_gather_object`` with each rank keeping its host's entries. Every host gets a
segment of its own (its ranks only map it).

``transport="auto"`` picks it (:func:`ringccl.torch.collectives.resolve_transport`) for CPU
tensors on x86-64 when the group spans several hosts and some host holds two or more of its
ranks; ``algorithm=None`` on all_reduce, reduce_scatter and all_gather then runs what the one
chooser picks (:func:`ringccl.costmodel.choice.choose`: the model's cheaper of the collective's
default and ``hierarchical`` with ``local_size`` = ranks per host, when hosts hold equal blocks
of consecutive ranks), else the collective's default.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple, Sequence

import torch
import torch.distributed as dist

from ... import caches, engine
from .. import shm
from ...engine import trace
from ...errors import BackendError
from ...ir import Schedule
from ...ops import ReduceOp
from ..shm.hierarchical import HostLayout, HybridTransport, host_layout
from . import executor

__all__ = ["hybrid_state", "layout_of", "execute_hybrid", "release_hybrid",
           "HybridSetup", "release_hybrid_state"]

_states: dict = {}     # id(group object) -> (group object, layout, ShmGroup, HybridTransport)
_layouts: dict = {}    # id(group object) -> (group object, HostLayout)
_lock = threading.Lock()


@caches.register
def release_hybrid() -> None:
    """Drop every group's hybrid state and host layout on this rank (``ringccl.clear_caches``;
    collective in effect, as :func:`ringccl.torch.executor.release_shm`)."""
    with _lock:
        states = list(_states.values())
        _states.clear()
        _layouts.clear()
    for _, _, state, transport in states:
        transport.close()
        state.close()


def _pg(group):
    return dist.group.WORLD if group is None else group


def layout_of(group) -> HostLayout:
    """The :class:`HostLayout` of ``group`` (every rank's host identity, exchanged once through
    the group and cached: a collective call on first use)."""
    pg = _pg(group)
    hit = _layouts.get(id(pg))
    if hit is not None and hit[0] is pg:
        return hit[1]
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, shm.host_id(), group=group)
    layout = host_layout(everyone, dist.get_rank(group))
    _layouts[id(pg)] = (pg, layout)
    return layout


class HybridSetup(NamedTuple):
    """How :func:`hybrid_state` sets up a group that is not a torch.distributed group (the
    ringccl backend's, whose own collectives cannot carry the set-up: they run on the worker
    thread that is setting up)."""

    shm: executor.ShmSetup     # the group's rank, size, global ranks, exchange, timeout
    hosts: Sequence[str]       # every rank's host identity (ringccl.shm.host_id), by rank
    p2p: Any                   # the point-to-point transport across hosts (engine Transport)


def hybrid_state(group, timeout: float | None = None, setup: HybridSetup | None = None):
    """``(HostLayout, ShmGroup, HybridTransport)`` of ``group`` on this rank, set up on first
    use (collective over the group). ``setup``: for a group-like ``group`` (kept until
    :func:`release_hybrid_state` or ``ringccl.clear_caches``).

    Raises:
        BackendError: not x86-64, or the set-up failed (ShmSpaceError: the shared-memory
            directory is too small).
    """
    pg = _pg(group) if setup is None else group
    hit = _states.get(id(pg))
    if hit is not None and hit[0] is pg and not hit[2].closed:
        return hit[1], hit[2], hit[3]
    shm.check_platform()
    if setup is None:
        layout = layout_of(group)
        world_size = dist.get_world_size(group)
        peers = executor._peers(group, world_size)
        seconds = timeout or executor._group_timeout_s(group) or executor.SHM_DEFAULT_TIMEOUT_S

        def gather(obj):
            everyone: list = [None] * world_size
            dist.all_gather_object(everyone, obj, group=group)
            return everyone
        p2p = executor.P2PTransport(group, peers, None)
    else:
        layout = host_layout(setup.hosts, setup.shm.rank)
        peers = list(setup.shm.global_ranks)
        seconds = timeout or setup.shm.timeout_s
        gather, p2p = setup.shm.exchange, setup.p2p

    def exchange(obj):
        everyone = gather(obj)
        return [everyone[r] for r in layout.local_ranks]

    state = shm.ShmGroup(layout.local_rank, len(layout.local_ranks), exchange, seconds)

    def name(p):
        return str(p) if peers[p] == p else f"{p} (global rank {peers[p]})"

    local = shm.ShmTransport(state, lambda lp: name(layout.local_ranks[lp]))
    # gloo's Work.is_completed turns true only inside wait: the waits run on a helper thread
    transport = HybridTransport(local, p2p, layout, None, name, seconds)
    with _lock:
        _states[id(pg)] = (pg, layout, state, transport)
    return layout, state, transport


def release_hybrid_state(key) -> None:
    """Drop the hybrid state set up for the group-like ``key`` (:class:`HybridSetup`) on this
    rank, if any (its owner's teardown: ``destroy_process_group`` of a ringccl-backend group)."""
    with _lock:
        hit = _states.pop(id(key), None)
    if hit is not None and hit[0] is key:
        hit[3].close()
        hit[2].close()


def execute_hybrid(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp, group, bounds,
                   segment_elems_of, timeout_s: float | None, restore: bool,
                   setup: HybridSetup | None = None) -> torch.Tensor:
    """:func:`ringccl.torch.executor.execute` over the hybrid transport (module docstring):
    the working buffer is copied into this rank's slot of its host's segment, the schedule
    runs with host peers read in place and the others over gloo, the result is copied back
    (the caller's buffer is written only after success). ``setup``: for a group-like
    ``group`` (:func:`hybrid_state`)."""
    if buffer.device.type != "cpu":
        raise BackendError(f"transport='hybrid' needs CPU tensors, got one on {buffer.device}")
    layout, state, transport = hybrid_state(group, timeout_s, setup)
    rank = dist.get_rank(group) if setup is None else setup.shm.rank
    itemsize = buffer.element_size()
    plan = engine.plan(schedule, rank, bounds, segment_elems_of(itemsize))
    try:
        try:
            state.enter(max(1, buffer.numel() * itemsize), timeout_s)
        except (TimeoutError, ConnectionError) as exc:
            if getattr(exc, "peer", None) is not None:   # a rank of the host: of the group
                exc.peer = layout.local_ranks[exc.peer]
            raise executor._entry_error(schedule, rank, transport, exc,
                                        timeout_s or state.timeout) from exc
        if not plan.steps:
            return buffer
        serial, offset = state.work_serial, state.rank * state.work_slot
        dtype = buffer.dtype
        start = offset // itemsize
        work = executor._typed(state, serial, dtype)[start:start + buffer.numel()]
        work.copy_(buffer)
        transport.begin(serial, offset, itemsize,
                        lambda s, off, n: executor._typed(state, s, dtype)[off // itemsize:
                                                                           (off + n) // itemsize],
                        torch.clone, timeout=timeout_s)
        # staging for the receives from other hosts (those from this host are read in place)
        workspace = engine.Workspace(executor.OPS, work, op, plan.staging_elems)
        trace.drive(engine.run_dataflow, schedule, rank, plan, transport, workspace,
                    restore=False, timeout=timeout_s, itemsize=itemsize, backend="hybrid")
        buffer.copy_(work)
        return buffer
    except BaseException:
        if not state.closed:
            state.abort()
        raise
