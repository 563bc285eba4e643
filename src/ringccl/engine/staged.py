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

__all__ = ["Staged", "Pieces", "Landing", "final_receives", "merge", "split", "plan_ranges"]


class Staged(NamedTuple):
    """A private working buffer of ``numel`` elements like ``like`` (dtype, device), given as
    ``fill``: the element ranges ``fill_runs`` of the buffer hold the 1-D arrays ``sources``,
    concatenated, before the call; ``drain``: after it, the ranges ``drain_runs`` go to the 1-D
    arrays ``targets``, concatenated. ``restore``: the targets must not change unless the call
    succeeds (True: everything is drained after the call's last wait)."""

    like: Any
    numel: int
    fill_runs: tuple
    sources: Sequence[Any]
    drain_runs: tuple
    targets: Sequence[Any]
    restore: bool


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


_ranges: dict = {}   # id(plan) -> (plan, ranges read, ranges written, final receives)
caches.register(_ranges.clear)


def plan_ranges(plan: Plan) -> tuple:
    """``(reads, writes, finals)`` of ``plan``'s working buffer: the merged element ranges the
    call reads (its sends, the chunks its receives reduce into: what a transport that holds
    the buffer in its own memory must copy in), those it writes (its receives: what it must
    copy back), and :func:`final_receives`. Chunks only received need no copy in (an
    all_to_all's output blocks, a non-root's broadcast), chunks never received no copy back:
    a 16 MiB all_to_all moved 4x its blocks through shared memory when the whole buffer went
    both ways. Cached per plan (plans are memoized)."""
    hit = _ranges.get(id(plan))
    if hit is None or hit[0] is not plan:
        reads = [(op.lo, op.hi) for st in plan.steps for op in st.sends]
        reads += [(r.lo, r.hi) for st in plan.steps for r in st.recvs if r.reduce]
        writes = [(r.lo, r.hi) for st in plan.steps for r in st.recvs]
        if len(_ranges) >= 256:
            _ranges.clear()
        hit = _ranges[id(plan)] = (plan, merge(reads), merge(writes), final_receives(plan))
    return hit[1], hit[2], hit[3]


class Landing(Workspace):
    """A workspace whose final receives (:func:`final_receives`) are copied straight into the
    caller's arrays (``direct``: receive -> the target's view) instead of the working buffer:
    one copy per element instead of two (into the transport's memory, then out of it). For a
    transport that reads its receives in place (no staging buffer)."""

    __slots__ = ("direct",)

    def __init__(self, ops: ArrayOps, buffer: Any, op: ReduceOp, direct: dict):
        super().__init__(ops, buffer, op, 0)
        self.direct = direct

    def apply(self, r, received=None) -> None:
        dst = self.direct.get(r)
        if dst is None or received is None:
            super().apply(r, received)
        else:
            self.copy(dst, received)
