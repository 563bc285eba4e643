"""The torch backend's transports: which one a call or a group runs on, and the point-to-point
one.

One resolution of ``"auto"`` (:func:`auto_transport`) for ringccl.torch's calls
(:func:`resolve_transport`, per call) and for the torch.distributed backend's groups
(:func:`group_transport`, once per group): shared memory when every rank of the group is on
this host, shared memory inside each host and point-to-point across ("hybrid") when the ranks
span hosts that each hold the same number (two or more) of them, else point-to-point; "shm"
and "hybrid" only on x86-64 (:func:`ringccl.backends.shm.check_platform`). Where the ranks run
is every rank's :func:`ringccl.backends.shm.host_id` (``RINGCCL_HOST_ID`` splits one machine
into "hosts" for tests), exchanged once per group (:func:`layout_of`).

:class:`P2PTransport` is the engine's transport (:class:`ringccl.engine.Transport`) over
torch.distributed point-to-point: ``dist.isend``/``dist.irecv`` on slices of the working buffer,
``Work.wait`` bounded by the group's timeout (or ``timeout=``); :class:`GlooTransport` the same
over the torch.distributed backend's inner gloo group, on a tag of its own
(:data:`COLLECTIVE_TAG`).
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import platform
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from ... import caches, environment
from ...errors import ArgumentError, BackendError
from .. import shm
from ..shm.hierarchical import HostLayout, host_layout

__all__ = ["TRANSPORTS", "auto_transport", "resolve_transport", "group_transport",
           "exchange_hosts", "layout_of", "P2PTransport", "GlooTransport", "COLLECTIVE_TAG",
           "peers", "rank_name", "peer_namer", "group_timeout_s", "weak_group"]

#: the values of ``transport=`` and ``RINGCCL_TRANSPORT``
TRANSPORTS = ("auto", "shm", "p2p", "hybrid")

_debug_log = logging.getLogger("ringccl")
# never keeps the group alive (:func:`weak_group`)
_layouts: dict = {}   # id(group object) -> (weakref to it, HostLayout)
_warned: set = set()
caches.register(_layouts.clear)


def auto_transport(layout: HostLayout) -> str:
    """What "auto" runs a group of two or more ranks placed as ``layout`` on, on an x86-64
    machine: "shm" when every rank is on one host, "hybrid" when several hosts each hold the
    same number (two or more) of its ranks (a rank alone on its host gains nothing from shared
    memory, and the two-level schedules need equal hosts), else "p2p"."""
    if not layout.spans_hosts:
        return "shm"
    return "hybrid" if layout.balanced else "p2p"


def layout_of(group) -> HostLayout:
    """The :class:`~ringccl.backends.shm.hierarchical.HostLayout` of the torch.distributed
    ``group`` (every rank's host identity, exchanged once through the group and cached: a
    collective call on first use)."""
    pg = dist.group.WORLD if group is None else group
    hit = _layouts.get(id(pg))
    if hit is not None and hit[0]() is pg:
        return hit[1]
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, shm.host_id(), group=group)
    layout = host_layout(everyone, dist.get_rank(group))
    _layouts[id(pg)] = (weakref.ref(pg), layout)
    return layout


def resolve_transport(group, transport: Any, tensor) -> str:
    """``transport=`` ("auto", "shm", "p2p", "hybrid") as the transport this call runs on.

    "auto" (the default; ``RINGCCL_TRANSPORT`` overrides it): for CPU tensors on an x86-64
    machine :func:`auto_transport` of the group's :func:`layout_of`; else "p2p" (with
    ``RINGCCL_DEBUG`` set, one log line says why a machine that is not x86-64 does). Same answer
    on every rank when they pass the same ``transport`` and tensors on the same kind of device.

    Raises:
        ArgumentError: another value; BackendError: "shm" on a non-x86-64 machine.
    """
    transport = shm.transport_choice(transport, TRANSPORTS)
    if transport != "auto":
        return transport
    if dist.get_world_size(group) == 1 or tensor.device.type != "cpu":
        return "p2p"
    if not shm.supported_platform():
        if _debug_log.isEnabledFor(logging.INFO) and not _warned:
            _warned.add("platform")
            _debug_log.info("transport='auto' uses p2p: shared memory needs x86-64, this is "
                            "%s", platform.machine())
        return "p2p"
    return auto_transport(layout_of(group))


def group_transport(hosts: Sequence[str], size: int) -> str:
    """The torch.distributed backend's group's transport from every rank's host identity (the
    same on every rank): ``RINGCCL_TRANSPORT`` "p2p" → "p2p"; "shm" → "shm" (refused across
    hosts); "hybrid" → "hybrid"; "auto" (or unset) → :func:`auto_transport` on an x86-64
    machine, else "p2p". A group of one rank moves nothing: "p2p".

    Raises:
        ArgumentError (a ValueError, torch.distributed's error for a bad backend option): a
            ``RINGCCL_TRANSPORT`` outside auto/shm/p2p/hybrid, or "shm" for ranks on several
            hosts. BackendError: "shm" or "hybrid" on a machine that is not x86-64.
    """
    value = environment.get("RINGCCL_TRANSPORT") or "auto"
    if value not in TRANSPORTS:
        raise ArgumentError(f"RINGCCL_TRANSPORT={value!r} must be one of "
                         f"{', '.join(map(repr, TRANSPORTS))}")
    layout = host_layout(hosts, 0)
    if value == "p2p" or size == 1:
        return "p2p"
    if value == "shm":
        if layout.spans_hosts:
            raise ArgumentError(f"RINGCCL_TRANSPORT='shm': the group's {size} ranks are on "
                             f"{len(layout.hosts)} hosts ({sorted(layout.hosts)}); shared "
                             "memory needs every rank on one host (use 'auto', 'hybrid' or "
                             "'p2p')")
        shm.check_platform()
        return "shm"
    if value == "hybrid":
        shm.check_platform()
        return "hybrid"
    return auto_transport(layout) if shm.supported_platform() else "p2p"


def peers(group, world_size: int) -> Sequence[int]:
    """The global ranks of ``group``'s ranks, by group rank."""
    if group is None or group is dist.group.WORLD:
        return range(world_size)
    return [dist.get_global_rank(group, r) for r in range(world_size)]


def rank_name(global_ranks: Sequence[int], rank: int) -> str:
    """A group rank for messages, with its global rank where that differs ("1 (global rank
    3)")."""
    g = global_ranks[rank]
    return str(rank) if g == rank else f"{rank} (global rank {g})"


def peer_namer(global_ranks: Sequence[int]) -> Callable[[int], str]:
    """:func:`rank_name` for the group of ``global_ranks``."""
    return functools.partial(rank_name, global_ranks)


def weak_group(group) -> Callable[[], Any]:
    """``group`` (None: the default group, looked up at each call) as a callable returning it,
    holding only a weak reference: state ringccl keeps for a group (its shared memory, host
    layout, transports) must not keep the group alive past ``destroy_process_group``. A group
    kept alive keeps gloo's worker threads running into the interpreter's exit, where one that
    releases a finished operation's tensors after finalization began takes the GIL and aborts
    the process ("terminate called without an active exception"; torch pull request 179291).

    Raises (when called): BackendError: the group was destroyed."""
    if group is None:
        return lambda: None
    ref = weakref.ref(group)

    def deref():
        g = ref()
        if g is None:
            raise BackendError("the process group was destroyed (destroy_process_group); "
                               "ringccl's state for it is gone with it")
        return g
    return deref


def group_timeout_s(group) -> float | None:
    """The timeout ``group`` was created with, in seconds (None where torch hides it)."""
    pg = dist.group.WORLD if group is None else group
    try:
        t = pg._get_backend(torch.device("cpu")).options._timeout
    except (AttributeError, RuntimeError, ValueError):
        return None
    return t.total_seconds() if isinstance(t, datetime.timedelta) else None


class P2PTransport:
    """The engine's transport over torch.distributed point-to-point: it moves bytes only (see
    :class:`ringccl.engine.Transport`); applying them is the engine's workspace."""

    def __init__(self, group, peers: Sequence[int], timeout: datetime.timedelta | None):
        self._group = weak_group(group)   # kept with a group's state: never keeps it alive
        self.peers, self.timeout = peers, timeout

    @property
    def group(self):
        return self._group()

    def isend(self, s, data):
        return dist.isend(data, self.peers[s.peer], self.group)

    def irecv(self, r, landing):
        return dist.irecv(landing, self.peers[r.peer], self.group)

    def wait(self, work) -> None:
        if self.timeout is None:
            work.wait()       # gloo bounds it by the group's timeout
        else:
            work.wait(self.timeout)

    def settle(self, work, seconds: float) -> None:
        """Wait at most ``seconds`` for ``work``, ignoring its failure (engine.dataflow)."""
        try:
            work.wait(datetime.timedelta(seconds=max(seconds, 1e-3)))
        except RuntimeError:
            pass

    def is_timeout(self, exc: BaseException) -> bool:
        text = str(exc).lower()
        return "timed out" in text or "timeout" in text

    def peer_name(self, peer: int) -> str:
        return rank_name(self.peers, peer)

    def batch(self, sends, recvs) -> list:
        ops = ([dist.P2POp(dist.isend, data, self.peers[s.peer], self.group)
                for s, data in sends]
               + [dist.P2POp(dist.irecv, landing, self.peers[r.peer], self.group)
                  for r, landing in recvs])
        return dist.batch_isend_irecv(ops)


#: the gloo tag of the schedules' point-to-point messages on the inner group. gloo matches a
#: receive to a send by (peer, tag) in posting order; users' ``dist.send`` tags are small
#: non-negative ints (default 0), so a collective's messages, posted from the worker thread,
#: can never be matched against a user's, posted from theirs. gloo tags are uint32.
COLLECTIVE_TAG = (1 << 31) - 7


class GlooTransport(P2PTransport):
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


def exchange_hosts(store, rank: int, size: int, timeout: datetime.timedelta) -> list[str]:
    """Every rank's :func:`ringccl.backends.shm.host_id`, by group rank, through the group's
    store (bounded by the store's timeout: a rank that never arrives fails the set-up). Every rank's
    ``RINGCCL_TRANSPORT`` travels with it: each rank chooses the group's transport from its own
    (:func:`group_transport`), and ranks that chose differently would each wait for the others on
    a transport they never use.

    Raises:
        ArgumentError (a ValueError): the ranks' ``RINGCCL_TRANSPORT`` differ (on every rank,
            naming each rank's value).
    """
    store.set(str(rank), f"{shm.host_id()}\0{os.environ.get('RINGCCL_TRANSPORT') or 'auto'}")
    keys = [str(r) for r in range(size)]
    store.wait(keys, timeout)
    got = [store.get(k).decode().rpartition("\0") for k in keys]
    values = [v for _, _, v in got]
    if len(set(values)) > 1:
        raise ArgumentError("RINGCCL_TRANSPORT differs across the group's ranks ("
                         + ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
                         + "); set it alike on every rank (or not at all: 'auto')")
    return [h for h, _, _ in got]
