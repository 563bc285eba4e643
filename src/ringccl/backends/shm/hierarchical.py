"""Shared memory inside a host, point-to-point across hosts: one engine transport for a group
that spans several hosts with several ranks each (backend-neutral; docs/shm.md).

:class:`HybridTransport` routes each peer by where it runs: a peer on this host goes through
the host's :class:`~ringccl.backends.shm.ShmTransport` (its bytes read in place from its slot of the
host's segment), a peer on another host through the backend's point-to-point transport (gloo,
MPI). Any schedule runs on it unchanged; the registered ``hierarchical`` all_reduce (intra-node
reduce-scatter, inter-node all-reduce of one block per local rank, intra-node all-gather: the
two-level all-reduce of Jia et al., arXiv:1807.11205) is the one that makes the split pay,
since only its middle phase crosses hosts.

Why a composite transport and not a composition of sub-group calls (shm reduce_scatter, then
p2p all_reduce, then shm all_gather): the schedule stays data the checker verified and the
engine's order, rollback, error attribution and tracing apply to the whole call; no algorithm
is special-cased, and any other schedule (ring, direct, ...) also runs across hosts with the
host-local transfers over shared memory.

How the two halves meet in one engine call:

* ``reads_in_place`` is True, so the engine hands receives' views to ``wait``'s caller; a
  point-to-point receive still lands where the engine put it (the working buffer or its
  staging slot: the workspace keeps a staging buffer for these) and its ``wait`` returns None,
  which the engine takes as "already in the landing" (applied from staging as over p2p);
* the working buffer lives in this rank's slot of the host's segment, so shared-memory peers
  read it in place and the point-to-point sends read the same bytes;
* a point-to-point wait polls the backend's request (MPI: ``Request.Test``; gloo, whose
  ``Work.is_completed`` only turns true inside ``wait``: the blocking ``wait`` on a helper
  thread of the transport's own, its completion polled) and meanwhile reads every
  shared-memory receive that has arrived (:meth:`ShmTransport._progress`), as the
  shared-memory transport's own waits do: a host peer waiting for this rank to read its send
  is never blocked by a transfer from another host. Every wait is bounded (the call's
  timeout, else the group's).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, NamedTuple, Sequence

from .transport import ShmTransport

__all__ = ["HostLayout", "host_layout", "HybridTransport", "POLL_SPINS"]

#: polls of a point-to-point request before its wait starts yielding the core, then sleeping
#: (20 µs growing to 1 ms): with more ranks than cores a spinning waiter keeps its peers off
POLL_SPINS = 64


class HostLayout(NamedTuple):
    """Where the ranks of a group run (from every rank's :func:`ringccl.backends.shm.host_id`).

    Attributes:
        hosts: the distinct host identities in order of first appearance.
        host_of: per rank of the group, the index of its host in ``hosts``.
        local_ranks: the group's ranks on this rank's host, ascending.
        local_rank: this rank's index in ``local_ranks``.
        local_of: per rank of the group, its index in ``local_ranks``, or None on another host.
        local_size: ranks per host when every host holds the same number of consecutive ranks
            (rank r on host r // local_size: the ``hierarchical`` schedule's placement), else
            None.
    """

    hosts: tuple
    host_of: tuple
    local_ranks: tuple
    local_rank: int
    local_of: tuple
    local_size: int | None

    @property
    def spans_hosts(self) -> bool:
        return len(self.hosts) > 1

    @property
    def shares_hosts(self) -> bool:
        """Whether some host holds two or more of the group's ranks."""
        return len(self.hosts) < len(self.host_of)

    @property
    def balanced(self) -> bool:
        """Several hosts, each holding the same number (two or more) of the group's ranks:
        where ``transport="auto"`` picks the hybrid transport (a rank alone on its host gains
        nothing from shared memory, and the two-level schedules need equal hosts)."""
        counts = [self.host_of.count(h) for h in range(len(self.hosts))]
        return len(counts) > 1 and counts[0] >= 2 and len(set(counts)) == 1


def host_layout(hosts: Sequence[str], rank: int) -> HostLayout:
    """The :class:`HostLayout` of a group whose rank r runs on host ``hosts[r]``, seen from
    ``rank``."""
    names: dict = {}
    host_of = tuple(names.setdefault(h, len(names)) for h in hosts)
    mine = host_of[rank]
    local_ranks = tuple(r for r, h in enumerate(host_of) if h == mine)
    local_of = tuple(local_ranks.index(r) if h == mine else None
                     for r, h in enumerate(host_of))
    n, hosts_n = len(host_of), len(names)
    size = n // hosts_n
    blocks = n % hosts_n == 0 and all(h == r // size for r, h in enumerate(host_of))
    return HostLayout(tuple(names), host_of, local_ranks, local_ranks.index(rank), local_of,
                      size if blocks else None)


class HybridTransport:
    """The engine's transport over shared memory to host peers and point-to-point to the rest
    (see the module docstring).

    Args:
        shm: the host's :class:`ShmTransport` (its group's ranks: ``layout.local_ranks``).
        p2p: the backend's point-to-point transport over the whole group (its ``isend`` /
            ``irecv`` / ``wait`` / ``is_timeout``).
        layout: this group's :class:`HostLayout`.
        done: ``done(request) -> bool``: whether a point-to-point request completed (MPI:
            ``Request.Test``), polled while host peers are served; None: the backend has no
            such test (gloo), ``p2p.wait`` runs on a helper thread and its end is polled.
        peer_name: ``peer_name(peer) -> str`` for messages.
        timeout: seconds a point-to-point wait may take.
    """

    reads_in_place = True

    def __init__(self, shm: ShmTransport, p2p: Any, layout: HostLayout,
                 done: Callable[[Any], bool] | None, peer_name: Callable[[int], str],
                 timeout: float):
        self.shm, self.p2p, self.layout = shm, p2p, layout
        self.done, self.name, self.timeout = done, peer_name, timeout
        self.local = layout.local_of
        self.mapped: dict = {}   # SegmentRecv (group ranks) -> the shm transport's (local ranks)
        self.helper: ThreadPoolExecutor | None = None   # done=None: runs the blocking waits

    def begin(self, *args, timeout: float | None = None, **kwargs) -> None:
        """Set up one call (:meth:`ShmTransport.begin`'s arguments)."""
        self.shm.begin(*args, timeout, **kwargs)
        if timeout is not None:
            self.timeout = timeout
        self.mapped.clear()

    def isend(self, s, data):
        local = self.local[s.peer]
        if local is None:
            return ("p", self.p2p.isend(s, data))
        return ("s", self.shm.isend(s._replace(peer=local), data))

    def irecv(self, r, landing):
        local = self.local[r.peer]
        if local is None:
            return ("p", self.p2p.irecv(r, landing))
        mine = self.mapped[r] = r._replace(peer=local)
        return ("s", self.shm.irecv(mine, None))

    def wait(self, handle):
        kind, inner = handle
        if kind == "s":
            return self.shm.wait(inner)
        if self.done is not None:
            if not self.done(inner):
                self._poll(lambda: self.done(inner))
            self.p2p.wait(inner)    # completed: raises the backend's error if it failed
            return None             # the bytes are in the engine's landing
        if self.helper is None:
            self.helper = ThreadPoolExecutor(1, thread_name_prefix="ringccl-hybrid-wait")
        future = self.helper.submit(self.p2p.wait, inner)
        if not future.done():
            self._poll(future.done)
        future.result()             # the backend's error, if the wait failed
        return None

    def close(self) -> None:
        """Stop the helper thread (idle between calls); idempotent."""
        if self.helper is not None:
            self.helper.shutdown(wait=False)
            self.helper = None

    def _poll(self, finished: Callable[[], bool]) -> None:
        """Until ``finished()``, serving host peers meanwhile; bounded by the timeout."""
        deadline = time.monotonic() + self.timeout
        nap, polls = 2e-5, 0
        progress = self.shm._progress
        while not finished():
            progress(True)
            polls += 1
            if polls < POLL_SPINS:
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"a point-to-point transfer did not complete within "
                                   f"{self.timeout:g} s")
            if polls < 4 * POLL_SPINS:
                os.sched_yield()
            else:
                time.sleep(nap)
                nap = min(2 * nap, 1e-3)

    def release(self, r) -> None:
        mine = self.mapped.pop(r, None)
        if mine is not None:
            self.shm.release(mine)

    def is_timeout(self, exc: BaseException) -> bool:
        return isinstance(exc, TimeoutError) or self.p2p.is_timeout(exc)

    def peer_name(self, peer: int) -> str:
        return self.name(peer)
