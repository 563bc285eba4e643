"""A private working buffer described by where its elements come from and where they go.

The front end's collectives whose working buffer is private (all_to_all, scatter, gather,
reduce_scatter: :mod:`ringccl.frontend`) fill part of it from the caller's arrays, run the
schedule on it, and copy part of it into the caller's arrays. Over point-to-point that buffer
must exist: the front end fills a kept scratch array, runs, drains it. A transport that holds
the working buffer in memory of its own (shared memory: this rank's slot, which the peers read)
is given the description instead (:class:`Staged`), and moves each element the fewest times:

* the ranges the schedule reads (its sends, the chunks its receives reduce into) are copied
  from the caller's sources into its memory, nothing else;
* a receive that copies a chunk nothing later touches (:func:`final_receives`: every receive of
  a direct all_to_all, all_gather or broadcast, two_shot's all-gather half) may land straight
  in the caller's target, when the call need not keep the targets untouched until it succeeded
  (``restore=False``);
* the other output ranges are drained from its memory when the schedule wrote or read them,
  else straight from the source (a chunk no step touches: an all_to_all's own block).

An all_to_all of S bytes on N ranks thus copies (2N−1)/N · S per rank with ``restore=False``
(the sends in, the receives into the targets, the own block across) and (3N−2)/N · S with
``restore=True`` (the receives through this rank's memory), instead of (5N−3)/N · S through a
scratch buffer (the input into it and the output out of it besides; 2 processes, 16 MiB: 24 or
32 MiB instead of 56 MiB).
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple, Sequence

from .. import caches
from ..ops import ReduceOp
from .plan import Plan
from .workspace import ArrayOps, Workspace

__all__ = ["Staged", "Pieces", "Landing", "PlanRanges", "final_receives", "merge", "split",
           "plan_ranges"]


class Staged(NamedTuple):
    """A private working buffer of ``numel`` elements like ``like`` (dtype, device), given as
    ``fill``: the element ranges ``fill_runs`` of the buffer hold the 1-D arrays ``sources``,
    concatenated, before the call; ``drain``: after it, the ranges ``drain_runs`` go to the 1-D
    arrays ``targets``, concatenated. ``restore``: the targets must not change unless the call
    succeeds (True: everything is drained after the call's last wait). ``aliased``: the
    targets share memory with the sources, each element at the same place of the working
    buffer (an in-place reduce_scatter's output, its input's own block): nothing lands in a
    target before the call's last read of the sources (no final receive lands directly)."""

    like: Any
    numel: int
    fill_runs: tuple
    sources: Sequence[Any]
    drain_runs: tuple
    targets: Sequence[Any]
    restore: bool
    aliased: bool = False


class Pieces:
    """The element ranges ``runs`` of a working buffer laid over the 1-D ``arrays``, both taken
    concatenated (a range may span arrays and an array ranges)."""

    __slots__ = ("entries",)

    def __init__(self, runs, arrays: Sequence[Any]):
        entries = []   # (lo, hi, array, offset of lo in the array), ascending lo
        i, at = 0, 0
        for a, end in runs:
            while a < end:
                array = arrays[i]
                n = len(array)
                if at == n:
                    i, at = i + 1, 0
                    continue
                k = min(end - a, n - at)
                entries.append((a, a + k, array, at))
                a, at = a + k, at + k
        self.entries = entries

    def parts(self, lo: int, hi: int) -> Iterator[tuple]:
        """``(a, b, array, offset)``: the part ``[a, b)`` of ``[lo, hi)`` held by ``array``
        from ``offset`` on, for every entry overlapping it."""
        for a, b, array, at in self.entries:
            if a < hi and lo < b:
                c, d = max(a, lo), min(b, hi)
                yield c, d, array, at + c - a

    def view(self, lo: int, hi: int) -> Any:
        """The view of ``[lo, hi)`` when one array holds all of it, else None."""
        for a, b, array, at in self.entries:
            if a <= lo and hi <= b:
                return array[at + lo - a:at + hi - a]
        return None


def merge(ranges) -> tuple:
    """Sorted, overlapping or touching ``(lo, hi)`` ranges joined."""
    out: list = []
    for lo, hi in sorted(ranges):
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def split(lo: int, hi: int, ranges: tuple) -> Iterator[tuple]:
    """``(a, b, inside)``: ``[lo, hi)`` cut at the edges of the merged ``ranges``, each part
    inside one of them or outside all (nothing for an empty one)."""
    if hi <= lo:
        return
    at = lo
    for a, b in ranges:
        if b <= at:
            continue
        if a >= hi:
            break
        if a > at:
            yield at, a, False
            at = a
        end = min(b, hi)
        yield at, end, True
        at = end
    if at < hi:
        yield at, hi, False


def final_receives(plan: Plan) -> tuple:
    """The receives of ``plan`` that copy a segment (no reduce, no accumulator) which no later
    operation of this rank reads or writes and no other receive of its step writes: where
    they land, the element stays to the end of the call, so it may land in the caller's
    target instead of the working buffer. A send of the same step reads the pre-step state,
    which stays in the working buffer: it does not count."""
    later: list = []          # ranges touched by the steps after the one being looked at
    finals = []
    for st in reversed(plan.steps):
        recvs = [r for r in st.recvs if r.hi > r.lo]
        for r in recvs:
            if r.reduce or r.fold >= 0:
                continue
            if any(a < r.hi and r.lo < b for a, b in later):
                continue
            if any(o is not r and o.lo < r.hi and r.lo < o.hi for o in recvs):
                continue
            finals.append(r)
        later.extend((s.lo, s.hi) for s in st.sends)
        later.extend((r.lo, r.hi) for r in recvs)
    return tuple(finals)


class PlanRanges(NamedTuple):
    """What a transport that holds the working buffer in its own memory must move for one
    plan (:func:`plan_ranges`); ranges are merged ``(lo, hi)`` element ranges."""

    reads: tuple      # every range the call reads: its sends, the chunks it reduces into
    writes: tuple     # every range its receives write (what must be copied back)
    finals: tuple     # final_receives(plan): may land in the caller's arrays
    upfront: tuple    # the reads to copy in before the call: reads less the lazy sends'
    lazy: frozenset   # sends whose segment may be copied in when the send is posted
    restorable: tuple  # finals that may land in an in-place caller's array with restore=True
    seeded: tuple     # reduces that may read the caller's bytes instead of a copied-in chunk


_ranges: dict = {}   # id(plan) -> (plan, PlanRanges)
caches.register(_ranges.clear)


def plan_ranges(plan: Plan) -> PlanRanges:
    """:class:`PlanRanges` of ``plan``'s working buffer. Chunks only received need no copy in
    (an all_to_all's output blocks, a non-root's broadcast), chunks never received no copy
    back: a 16 MiB all_to_all moved 4x its blocks through shared memory when the whole buffer
    went both ways. A send whose segment no receive reduces into and no receive of an earlier
    step writes reads the caller's bytes: it is *lazy*, copied in when it is posted
    (:class:`Landing`), so with segments the peers read the first while this rank copies the
    next (a broadcast's root, an all_to_all's blocks, two_shot's inputs) instead of waiting for
    the whole copy.

    ``restorable``: the final receives that may land in the caller's array even when it must
    be left as it was on failure (``restore=True``), for a collective working in place on it
    (all_reduce): when one lands, the working buffer holds the caller's bytes of its range,
    copied in up front or by a lazy send of an earlier step, never written by a receive
    before it, and nothing later reads or writes it, nor refills it from the caller's array
    (no lazy send of its step or later overlaps it). A failure puts them back from there
    (:meth:`Landing.rollback`). Two_shot's all-gather half is such: its receives then cost
    one copy instead of two (into the slot, then out of it after the last wait).

    ``seeded``: the reduces that are the first thing to touch their range (no operation of an
    earlier step, no send of their step, no receive before them in their step, which is the
    order both drivers apply them in): ``dst ⊕= src`` would combine into a chunk that holds
    just the caller's bytes, so they compute ``dst = caller ⊕ src`` (``src ⊕ caller`` from a
    peer below this rank) from the caller's array instead (:meth:`Landing`'s ``seeded``),
    and their ranges are not copied in up front (unless the executor finds no single array
    holding them: it copies them then). The same operation on the same operands in the same
    order: bitwise the same result. Two_shot's reduce-scatter half and a direct reduce_scatter
    are such: one pass over this rank's own block less.

    Cached per plan (plans are memoized)."""
    hit = _ranges.get(id(plan))
    if hit is not None and hit[0] is plan:
        return hit[1]
    sends = [op for st in plan.steps for op in st.sends if op.hi > op.lo]
    reduced = merge((r.lo, r.hi) for st in plan.steps for r in st.recvs if r.reduce)
    writes = merge((r.lo, r.hi) for st in plan.steps for r in st.recvs)
    written_before: dict = {}   # step index -> recv ranges of the steps before it
    earlier: list = []
    for st in plan.steps:
        written_before[st.index] = merge(earlier)
        earlier.extend((r.lo, r.hi) for r in st.recvs)
    lazy = frozenset(
        s for s in sends
        if not _overlaps(s.lo, s.hi, reduced) and not _overlaps(s.lo, s.hi,
                                                              written_before[s.step]))
    reads = merge([(s.lo, s.hi) for s in sends] + list(reduced))
    seeded = _seeded(plan)
    upfront = _upfront(plan, lazy, frozenset(seeded))
    finals = final_receives(plan)
    restorable = tuple(
        r for r in finals
        if not _overlaps(r.lo, r.hi, written_before[r.step])
        and not any(s.step >= r.step and s.lo < r.hi and r.lo < s.hi for s in lazy)
        and _covered(r.lo, r.hi, merge(list(upfront) + [(s.lo, s.hi) for s in lazy
                                                        if s.step < r.step])))
    result = PlanRanges(reads, writes, finals, upfront, lazy, restorable, tuple(seeded))
    if len(_ranges) >= 256:
        _ranges.clear()
    _ranges[id(plan)] = (plan, result)
    return result


def _writes_chunk(r) -> bool:
    """Whether receive ``r`` writes its range of the working buffer (a fold's receives write
    their accumulator; its flush, the chunk)."""
    return r.hi > r.lo and not (r.reduce and r.fold >= 0 and not r.flush)


def _upfront(plan: Plan, lazy: frozenset, seeded: frozenset) -> tuple:
    """:attr:`PlanRanges.upfront`: what the slot must hold of the caller's bytes before the
    call, in the order both drivers apply it (a step's sends read the pre-step state, then its
    receives in order): the parts no receive wrote before of the sends not filled when posted
    (not ``lazy``) and of the reduces that combine in place (not ``seeded``)."""
    need: list = []
    written: list = []         # ranges receives applied so far wrote
    for st in plan.steps:
        done = merge(written)
        for s in st.sends:
            if s.hi > s.lo and s not in lazy:
                need.extend((a, b) for a, b, inside in split(s.lo, s.hi, done) if not inside)
        for r in st.recvs:
            if not _writes_chunk(r):
                continue
            if r.reduce and r not in seeded:
                need.extend((a, b) for a, b, inside in split(r.lo, r.hi, merge(written))
                            if not inside)
            written.append((r.lo, r.hi))
    return merge(need)


def _seeded(plan: Plan) -> list:
    """:attr:`PlanRanges.seeded`, in plan order."""
    out: list = []
    before: list = []          # every range an operation of an earlier step touched
    for st in plan.steps:
        sends = [(s.lo, s.hi) for s in st.sends if s.hi > s.lo]
        done = merge(before)
        seen: list = []        # ranges receives of this step wrote into, in apply order
        for r in st.recvs:
            if not _writes_chunk(r):
                continue
            if r.reduce and not (_overlaps(r.lo, r.hi, done) or _overlaps(r.lo, r.hi, sends)
                                 or _overlaps(r.lo, r.hi, seen)):
                out.append(r)
            seen.append((r.lo, r.hi))
        before.extend(sends)
        before.extend((r.lo, r.hi) for r in st.recvs)
    return out


def _overlaps(lo: int, hi: int, ranges: tuple) -> bool:
    return any(a < hi and lo < b for a, b in ranges)


def _covered(lo: int, hi: int, ranges: tuple) -> bool:
    """Whether the merged ``ranges`` hold all of ``[lo, hi)``."""
    return all(inside for _, _, inside in split(lo, hi, ranges))


class Landing(Workspace):
    """The workspace of a transport that holds the working buffer in its own memory (reads
    its receives in place: no staging buffer): its final receives (:func:`final_receives`)
    are copied straight into the caller's arrays (``direct``: receive -> the target's view)
    instead of the working buffer, one copy per element instead of two; its lazy sends
    (:class:`PlanRanges`) are copied in from the caller's sources when posted (``fill(lo,
    hi)``), each segment once per call; its ``seeded`` reduces (``{receive: the caller's
    view of its range}``, :attr:`PlanRanges.seeded`) read the caller's bytes instead of a
    copy of them (``ops.combine_into``). :meth:`rollback` puts back what landed, for the
    ``restorable`` ones."""

    __slots__ = ("direct", "lazy", "fill", "filled", "landed", "seeded")

    def __init__(self, ops: ArrayOps, buffer: Any, op: ReduceOp, direct: dict,
                 lazy: frozenset = frozenset(), fill: Any = None, seeded: dict | None = None):
        super().__init__(ops, buffer, op, 0)
        self.direct, self.lazy, self.fill = direct, lazy if fill is not None else (), fill
        self.filled: set = set()
        self.landed: list = []
        self.seeded = seeded or {}

    def source(self, s) -> Any:
        if s in self.lazy:
            key = (s.lo, s.hi)
            if key not in self.filled:
                self.filled.add(key)
                self.fill(s.lo, s.hi)
        return self.buffer[s.lo:s.hi]

    def apply(self, r, received=None) -> None:
        dst = self.direct.get(r)
        if dst is None or received is None:
            super().apply(r, received)
        else:
            self.copy(dst, received)
            self.landed.append(r)

    def reduce(self, r, dst: Any, src: Any) -> None:
        """A seeded reduce (:attr:`PlanRanges.seeded`: ``seeded[r]`` is the caller's bytes of
        its range) computes ``dst = caller ⊕ src`` (``src ⊕ caller`` when ``r.below``: the
        IR's operand order); any other as :meth:`Workspace.reduce`."""
        own = self.seeded.get(r)
        if own is None:
            super().reduce(r, dst, src)
        elif r.below:
            self.combine_into(dst, src, own)
        else:
            self.combine_into(dst, own, src)

    def rollback(self) -> None:
        """Put the caller's bytes back where receives landed, from the working buffer (valid
        for :attr:`PlanRanges.restorable` receives only: there it still holds them)."""
        for r in self.landed:
            self.copy(self.direct[r], self.buffer[r.lo:r.hi])
        self.landed.clear()
