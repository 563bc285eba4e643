"""The compiled lane's sends and receives: a plan's steps lowered into the flat tuples the
replays (:mod:`~ringccl.backends.shm.lane`, its C loop in :mod:`.lane_native`) run.

Per send: the copy into this rank's area (one per step and range; none where an earlier
receive's reduction writes it, :func:`fusable`; none where the C loop sends it in place,
:func:`in_place_sends`). Per receive: its mode, its operands, the words it waits on and the
sends read in place whose bytes it overwrites (the C loop waits until the peer read them
first). A send read in place is never one whose range a receive of the same step writes: each
rank would wait for the other's read before its own receive.
"""

from __future__ import annotations

from typing import Any, Callable

from . import peer_memory
from .group import ShmGroup

__all__ = ["fusable", "in_place_sends", "lower_steps"]


def fusable(writes: list, lo: int, hi: int) -> list | None:
    """The last of ``writes`` (``(lo, hi, receive)``, plan order) to write any of ``[lo, hi)``
    if it reduced exactly that range and is not fused yet, else None: its reduction will write
    the send's area too, from cache (two-shot, ring: half a pass over the buffer fewer)."""
    for a, b, recv in reversed(writes):
        if a < hi and lo < b:
            return recv if (a, b) == (lo, hi) and recv[2] in (1, 4) and recv[11] is None \
                else None
    return None


def in_place_sends(g: ShmGroup, native: bool) -> Callable[[int], bool]:
    """``direct(nbytes)``: whether the C loop sends ``nbytes`` in place (in this rank's own
    memory, :mod:`~ringccl.backends.shm.peer_memory`): large sends, in a lane the C loop runs
    (``native``), in a group whose every rank reads its peers' memory (so the sends of one
    range, to several peers, are all sent one way)."""
    if not (native and peer_memory.enabled() and all(
            g.reads_peers(p) for p in range(g.world_size))):
        return lambda nbytes: False
    return lambda nbytes: nbytes >= peer_memory.MIN_BYTES


def _writes(r) -> bool:
    """Whether receive ``r`` writes its range of the buffer (all but an accumulator's fold that
    is not flushed)."""
    return r.fold < 0 or r.flush


def lower_steps(plan, g: ShmGroup, work: Any, segment: Any, acc: Any, bases: list, copies: dict,
                itemsize: int, in_place: Callable[[int], bool]) -> tuple:
    """``(steps, read_waits)`` of this rank's ``plan`` over ``g``: per step ``(sends,
    recvs)``, each send ``(peer, src, areas, offsets, nbytes, ring, posted, in place)`` and
    each receive ``(peer, dst, mode, fold, flush, nbytes, posted, released, ring, op, step,
    fused send's (areas, offsets) or None, waits)`` over ``work`` (the buffer the replay runs
    on) and ``acc`` (the accumulator); ``read_waits``: ``(peer, released word, k)`` per peer
    sent to in place, k its last such send of the call (the C loop waits for its read before
    the call ends). ``copies``: byte offset of each (step, lo, hi)'s copy in this rank's area
    (at ``bases``, one per call parity, in ``segment``)."""
    me = g.rank
    done: set = set()
    steps, writes = [], []   # writes: (lo, hi, receive) in plan order
    exposed, count = [], {}  # sends read in place: (lo, hi, peer, k-th send to it)
    for st in plan.steps:
        sends = []
        # ranges its receives write (all but a fold not flushed): a send of one is not read in
        # place (each rank would wait for the other to read before receiving: it is copied)
        written = [(r.lo, r.hi) for r in st.recvs if _writes(r)]
        for s in st.sends:
            at, nbytes = copies[(s.step, s.lo, s.hi)], (s.hi - s.lo) * itemsize
            first = (s.step, s.lo, s.hi) not in done
            done.add((s.step, s.lo, s.hi))
            areas = tuple(segment[(b + at) // itemsize:(b + at + nbytes) // itemsize]
                          for b in bases) if first else None
            offsets = tuple(b + at for b in bases)
            k = count[s.peer] = count.get(s.peer, -1) + 1
            direct = in_place(nbytes) and not any(   # (the C loop's)
                lo < s.hi and s.lo < hi for lo, hi in written)
            fused = fusable(writes, s.lo, s.hi) if first and not direct else None
            if fused is not None:   # the receive writes the area as it reduces
                fused[11], areas = (areas, offsets), None
            if direct:
                exposed.append((s.lo, s.hi, s.peer, k))
            sends.append((s.peer, work[s.lo:s.hi], areas, offsets, nbytes,
                          g.ring_entry(me, s.peer, 0), g.posted_word(me, s.peer), direct))
        recvs = []
        for r in st.recvs:
            # mode: 0 copy, 1 reduce (dst ⊕ src), 2 start the accumulator, 3 fold into it,
            # 4 reduce from a peer below (src ⊕ dst: the IR's operand order)
            mode = (2 if r.start else 3) if r.fold >= 0 else (4 if r.below else 1) \
                if r.reduce else 0
            fold = acc[r.fold:r.fold + r.hi - r.lo] if r.fold >= 0 else None
            # [11]: a later send's (areas, offsets), fused; [12]: (peer, word, k) of the
            # sends read in place whose bytes it overwrites: read first (the C loop waits)
            recvs.append([r.peer, work[r.lo:r.hi], mode, fold, r.flush,
                          (r.hi - r.lo) * itemsize, g.posted_word(r.peer, me),
                          g.released_word(r.peer, me), g.ring_entry(r.peer, me, 0), r, st,
                          None, tuple((p, g.released_word(me, p), k)
                                      for lo, hi, p, k in exposed
                                      if lo < r.hi and r.lo < hi and _writes(r))])
            writes.append((r.lo, r.hi, recvs[-1]))
        steps.append((tuple(sends), recvs))
    # before the call ends, every peer read the last send this rank made to it in place
    last = {p: k for _, _, p, k in exposed}
    return tuple((sends, tuple(map(tuple, recvs))) for sends, recvs in steps), tuple(
        (p, g.released_word(me, p), k) for p, k in sorted(last.items()))
