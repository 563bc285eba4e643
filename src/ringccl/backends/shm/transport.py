"""The engine's shared-memory transport (:class:`ringccl.engine.Transport` with
``reads_in_place = True``): a send publishes where its bytes lie; the peer reads them there.

* ``isend(s, data)``: writes the descriptor (segment serial, byte offset of ``s``'s segment of
  this rank's working buffer, nbytes) into the (this rank, peer) ring, then bumps ``posted``;
  nothing is copied.
* ``irecv(r, None)``: takes the next sequence number from the peer (the k-th send from A to B
  matches B's k-th receive from A: the engine posts both in the schedule's canonical order).
* ``wait(recv)``: until ``posted`` passes it; checks nbytes (the ranks' calls differ
  otherwise) and returns the dialect's view of the peer's bytes, which the engine reduces or
  copies from directly; ``release(r)`` then tells the peer it may overwrite them.
* ``wait(send)``: until the peer released it.

Where reading in place would make a send's completion depend on the receiver's program order
(over gloo or MPI a send completes once the bytes reached the receiver's posted landing,
whatever the receiver is waiting for), the receive is copied out (the dialect's ``clone``) and
released at once, so no cycle of waits can form:

* a reduce whose chunk this rank also sends in the same step (direct all_reduce, recursive
  doubling): the engine applies it only after the peers read this rank's chunk, and a peer
  reads it only when it reaches that receive itself;
* while this rank waits for anything, every posted receive whose bytes have arrived is read
  (small ones at once, large ones once the tight spin is over), as a p2p backend's progress
  engine would: a peer waiting for this rank to read its send is never blocked by what this
  rank waits for first.

Eager sends (small messages): a send of at most :data:`EAGER_SEND_BYTES` is copied into this
rank's eager area (a region of its slot the call does not otherwise use, given to
:meth:`ShmTransport.begin`) and its descriptor points there, so the send is complete at once:
waiting for it returns without waiting for the peer, and a later write into its chunk (one-shot
all_reduce reduces into the very chunk it sent) need not wait for the peer to read it. That
takes one of the two synchronisations per step off the critical path (the other: waiting for
the peer's data), at the cost of one copy of a small message. Sends of one step reading the
same elements (one chunk to every peer) share one copy. The area is reused from its start at
every call: a peer entered this call (:meth:`ringccl.backends.shm.group.ShmGroup.enter`) only after
its previous call ended, so after it released every send of ours (after a lazy entry,
:meth:`ShmTransport.begin` waits for the releases instead).

A descriptor whose serial is :data:`~ringccl.backends.shm.peer_memory.PEER_MEMORY` names bytes
in the sender's own memory (the compiled lane's large sends): the receive copies them out at
once (``process_vm_readv``) and releases them.

Every wait is bounded (:meth:`ringccl.backends.shm.group.ShmGroup.wait_word`).
"""

from __future__ import annotations

from typing import Any, Callable

from ...errors import BackendError
from . import peer_memory
from .group import RING, ShmGroup

__all__ = ["ShmTransport", "mismatch", "read_peer", "EAGER_COPY_BYTES", "EAGER_SEND_BYTES",
           "EAGER_AREA_BYTES"]

#: while waiting, receives up to this many bytes that have arrived are copied out at once;
#: larger ones only once the tight spin is over (a copy of a large chunk costs more than a
#: short wait, and is needed only to break a cycle of waits)
EAGER_COPY_BYTES = 64 << 10

#: sends up to this many bytes are copied into the eager area and complete at once (see the
#: module docstring); above it a copy costs more than the wait it saves
EAGER_SEND_BYTES = 64 << 10
#: bytes of eager area per rank and call a backend reserves in its slot (the sends of a call
#: that do not fit in what is left are sent in place, as large ones)
EAGER_AREA_BYTES = 256 << 10


def read_peer(group: ShmGroup, peer: int, at: int, into: Any, name: str) -> Any:
    """:func:`peer_memory.read` of rank ``peer``'s send at address ``at`` into ``into``; a
    failure aborts ``group`` (the error names the rank, ``.peer`` its index)."""
    try:
        return peer_memory.read(group.pids[peer], at, into, name)
    except peer_memory.ReadError as exc:
        group.abort(peer=peer)
        exc.peer = peer
        raise


def mismatch(group: ShmGroup, peer: str, nbytes: int, expect: int, seq: int) -> BackendError:
    """Abort ``group`` and return the error of a descriptor from rank ``peer`` that does not
    match this rank's receive (``seq``: the message's sequence number)."""
    group.abort()
    return BackendError(
        f"rank {peer} sent {nbytes} bytes where this rank expects {expect} (message {seq}): the "
        "ranks' calls differ (collective, count, dtype, algorithm or root); run with "
        "check=True to compare them")


class ShmTransport:
    """Shared-memory transport of one :class:`ShmGroup` (sequence numbers persist across calls).

    Args:
        group: the group's shared memory.
        peer_name: ``peer_name(peer) -> str`` for messages (e.g. with the global rank).
    """

    reads_in_place = True

    def __init__(self, group: ShmGroup, peer_name: Callable[[int], str] = str):
        n = group.world_size
        self.group, self.name = group, peer_name
        self.sent = [0] * n          # sends posted to each peer
        self.expected = [0] * n      # receives posted from each peer
        self.released = [0] * n      # receives from each peer released (a prefix)
        self.later: list[set] = [set() for _ in range(n)]   # released out of order
        self.holding: dict = {}      # SegmentRecv -> (peer, seq) of a view handed out
        self.sending: dict = {}      # handle -> (lo, hi) of a send not yet waited for
        self.pending: dict = {}      # handle of a receive posted, not waited for -> None
        self.copied: dict = {}       # handle -> private copy read ahead while waiting
        self.timeout: float | None = None
        self.eager: tuple | None = None   # (serial, byte offset, bytes) of the eager area
        self.eager_used = 0
        self.eager_copies: dict = {}      # (step, lo, hi) -> byte offset of its copy
        # the compiled lane (:mod:`~ringccl.backends.shm.lane`): the last call it ran that wrote
        # only its parity half (-1 after one that wrote its whole send area), and
        # ``sent`` as that call began (what must be read before its parity area is reused)
        self.lane_call = 0
        self.lane_marks: list = [0] * n

    def begin(self, serial: int, offset: int, itemsize: int, view: Callable[[int, int, int], Any],
              clone: Callable[[Any], Any], timeout: float | None, *,
              eager: tuple | None = None, copy: Callable[[Any, Any], None] | None = None) -> None:
        """Set up one call: this rank's working buffer starts ``offset`` bytes into segment
        ``serial``, with ``itemsize``-byte elements; ``view(serial, offset, nbytes)`` gives the
        dialect's array over those bytes; ``clone(array)`` a private copy. ``eager``:
        ``(serial, offset, nbytes)`` of this rank's eager area for this call (offset a multiple
        of 64; None: every send is read in place), ``copy(dst, src)`` the dialect's copy into
        it (module docstring). Call it after :meth:`ShmGroup.enter` of this call and before
        writing the working buffer: it waits (bounded) until the peers read every earlier send
        of this rank (eager copies outlive their call; after a lazy entry nothing else says
        so; usually they have long), then unmaps the working areas growth replaced."""
        g = self.group
        for peer, sent in enumerate(self.sent):
            if sent:
                g.wait_word(g.released_word(g.rank, peer), sent, peer,
                            "read this rank's sends of its previous call", timeout)
        if g.retired:
            g.drop_retired()
        self.serial, self.offset, self.itemsize = serial, offset, itemsize
        self.view, self.clone, self.timeout = view, clone, timeout
        self.eager = eager if copy is not None else None
        self.copy = copy
        self.eager_used = 0
        self.eager_copies.clear()
        self.holding.clear()
        self.sending.clear()
        self.pending.clear()
        self.copied.clear()

    def isend(self, s, data) -> tuple:
        g, me, peer = self.group, self.group.rank, s.peer
        seq = self.sent[peer]
        if seq >= RING:   # the ring slot's previous descriptor must have been read
            g.wait_word(g.released_word(me, peer), seq - RING + 1, peer,
                        "read this rank's earlier sends", self.timeout)
        self.sent[peer] = seq + 1
        nbytes = (s.hi - s.lo) * self.itemsize
        w, at = g.w, g.ring_entry(me, peer, seq)
        eager = self.eager
        if eager is not None and nbytes <= EAGER_SEND_BYTES:
            key = (s.step, s.lo, s.hi)    # a step's sends read the pre-step state: one copy
            where = self.eager_copies.get(key)
            if where is None and self.eager_used + nbytes <= eager[2]:
                where = eager[1] + self.eager_used
                self.eager_used += -(-nbytes // 64) * 64
                self.copy(self.view(eager[0], where, nbytes), data)
                self.eager_copies[key] = where
            if where is not None:
                w[at] = eager[0]
                w[at + 1] = where
                w[at + 2] = nbytes
                w[at + 3] = seq
                w[g.posted_word(me, peer)] = seq + 1
                return ("e", peer, seq)   # complete: the peer reads the copy
        w[at] = self.serial
        w[at + 1] = self.offset + s.lo * self.itemsize
        w[at + 2] = nbytes
        w[at + 3] = seq
        w[g.posted_word(me, peer)] = seq + 1   # after the descriptor: TSO keeps the order
        handle = ("s", peer, seq)
        self.sending[handle] = (s.lo, s.hi)
        return handle

    def irecv(self, r, landing) -> tuple:
        seq = self.expected[r.peer]
        self.expected[r.peer] = seq + 1
        handle = ("r", r, seq)
        self.pending[handle] = None
        return handle

    def _progress(self, large: bool) -> None:
        """Copy out (and release) every pending receive whose bytes have arrived (those over
        EAGER_COPY_BYTES only when ``large``)."""
        if not self.pending:
            return
        g = self.group
        w, me = g.w, g.rank
        for handle in list(self.pending):
            _, r, seq = handle
            if w[g.posted_word(r.peer, me)] <= seq:
                continue
            if not large and (r.hi - r.lo) * self.itemsize > EAGER_COPY_BYTES:
                continue
            del self.pending[handle]
            view, private = self._view(r, seq)
            self.copied[handle] = view if private else self.clone(view)
            self._release(r.peer, seq)

    def _view(self, r, seq: int) -> tuple:
        """``(array, private)``: the dialect's view of receive ``r``'s bytes (sequence ``seq``,
        arrived) in shared memory, or (``private``) a copy of a send the peer made in its own
        memory (:mod:`~ringccl.backends.shm.peer_memory`), read now."""
        g = self.group
        w, at = g.w, g.ring_entry(r.peer, g.rank, seq)
        serial, offset, nbytes, got = w[at], w[at + 1], w[at + 2], w[at + 3]
        expect = (r.hi - r.lo) * self.itemsize
        if got != seq or nbytes != expect or (serial not in g.segments and
                                              serial != peer_memory.PEER_MEMORY):
            raise mismatch(g, self.name(r.peer), nbytes, expect, seq)
        if serial != peer_memory.PEER_MEMORY:
            return self.view(serial, offset, nbytes), False
        # an array of the dialect's type and the receive's length to read into
        into = self.clone(self.view(self.serial, self.offset + r.lo * self.itemsize, nbytes))
        return read_peer(g, r.peer, offset, into, self.name(r.peer)), True

    def wait(self, handle):
        g = self.group
        kind = handle[0]
        if kind == "e":
            return None
        if kind == "s":
            _, peer, seq = handle
            self.sending.pop(handle, None)
            g.wait_word(g.released_word(g.rank, peer), seq + 1, peer,
                        "read this rank's send", self.timeout, self._progress)
            return None
        copy = self.copied.pop(handle, None)
        if copy is not None:
            return copy
        self.pending.pop(handle, None)
        _, r, seq = handle
        peer = r.peer
        g.wait_word(g.posted_word(peer, g.rank), seq + 1, peer, "send", self.timeout,
                    self._progress)
        copy = self.copied.pop(handle, None)
        if copy is not None:
            return copy
        view, private = self._view(r, seq)
        if private:   # read out of the peer's memory: nothing of the peer's is held
            self._release(peer, seq)
            return view
        if r.stage >= 0 and any(lo < r.hi and r.lo < hi for lo, hi in self.sending.values()):
            view = self.clone(view)   # see the module docstring: copied, released now
            self._release(peer, seq)
            return view
        self.holding[r] = (peer, seq)
        return view

    def release(self, r) -> None:
        held = self.holding.pop(r, None)
        if held is not None:
            self._release(*held)

    def _release(self, peer: int, seq: int) -> None:
        # the peer reads ``released`` as "every send up to here is read": publish a prefix
        if seq != self.released[peer]:
            self.later[peer].add(seq)
            return
        seq += 1
        later = self.later[peer]
        while seq in later:
            later.discard(seq)
            seq += 1
        self.released[peer] = seq
        g = self.group
        g.w[g.released_word(peer, g.rank)] = seq

    def is_timeout(self, exc: BaseException) -> bool:
        return isinstance(exc, TimeoutError)

    def peer_name(self, peer: int) -> str:
        return self.name(peer)

    def batch(self, sends: list, recvs: list) -> list:
        return [self.isend(s, d) for s, d in sends] + [self.irecv(r, x) for r, x in recvs]
