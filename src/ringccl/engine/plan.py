"""A rank's part of a schedule as segment-level sends and receives (memoized: plans, bounds and
checked bounds are tables that :func:`ringccl.clear_caches` empties)."""

from __future__ import annotations

from typing import NamedTuple

from ..caches import memoize
from ..chunking import chunk_bounds
from ..errors import BackendError
import numpy as np

from ..ir import Kind, Schedule, reduce_order

__all__ = ["SegmentSend", "SegmentRecv", "StepPlan", "Plan", "Pipelining", "plan", "uniform_bounds",
           "check_bounds"]


class SegmentSend(NamedTuple):
    """Send ``buffer[lo:hi]`` (element offsets; one segment of ``chunk``) to ``peer`` at the
    schedule's step ``step``."""

    step: int
    chunk: int
    segment: int
    lo: int
    hi: int
    peer: int


class SegmentRecv(NamedTuple):
    """Receive ``hi - lo`` elements from ``peer`` for ``buffer[lo:hi]`` (segment of ``chunk``).

    ``stage`` is the element offset in the staging buffer where it lands, or -1 when it lands in
    the buffer itself; ``reduce``: combine with the reduce op instead of copying.

    The IR's reduction order (:func:`ringccl.ir.reduce_order`): when this rank receives two or
    more reduces into one chunk in one step from peers below its rank, those are folded into an
    accumulator first and the accumulator into the buffer after the last of them. ``fold`` is
    then the element offset of this segment's accumulator in the workspace's accumulator buffer
    (-1: combined into the buffer directly); ``start``: this receive starts it (copied into it,
    the lowest such peer); ``flush``: after folding this one in, combine the accumulator into
    ``buffer[lo:hi]`` (the highest such peer). A step's receives come in ascending peer, so
    applying them in order (both drivers do) meets these dependencies.

    The IR's operand order: ``below`` (``peer`` < this rank) puts the received data on the
    left of ⊕, ``buffer := received ⊕ buffer``, else ``buffer := buffer ⊕ received``; an
    accumulator is ``acc := acc ⊕ received`` and its flush ``buffer := acc ⊕ buffer`` (every
    receive through an accumulator is ``below``).
    """

    step: int
    chunk: int
    segment: int
    lo: int
    hi: int
    stage: int
    reduce: bool
    peer: int
    fold: int = -1
    start: bool = False
    flush: bool = False
    below: bool = False


class StepPlan(NamedTuple):
    index: int
    phase: str
    sends: tuple
    recvs: tuple
    writes: frozenset     # chunks this step writes
    peers: tuple


class Plan(NamedTuple):
    """This rank's whole part of a schedule: steps, chunk offsets, staging elements needed, and
    accumulator elements needed (the largest step's chunks folded through an accumulator; 0 for
    every schedule without a chunk receiving two reduces from lower ranks in one step)."""

    steps: tuple
    bounds: tuple         # num_chunks + 1 element offsets into the working buffer
    staging_elems: int
    accumulator_elems: int = 0


class Pipelining(NamedTuple):
    """When and how finely chunks are split into segments moved as a pipeline (a segment is
    reduced as soon as it arrives and forwarded as soon as it is final, while later segments
    are in flight).

    Each transport offers its measured default (``ringccl.backends.torch.executor.PIPELINING``,
    ``ringccl.backends.mpi.executor.PIPELINING``); the front ends pass it in, or
    :meth:`fixed` for an explicit ``segment_bytes=``. Nothing reads a module global at call time.

    Attributes:
        threshold_bytes: split only when the plan's longest chunk has at least this many bytes
            (0: always; None: never).
        segment_bytes: the segment size in bytes (0: never split).
    """

    threshold_bytes: int | None
    segment_bytes: int

    @classmethod
    def fixed(cls, segment_bytes: int) -> "Pipelining":
        """Segments of ``segment_bytes`` for every chunk (0: whole chunks)."""
        return cls(0, segment_bytes)

    def segment_elems(self, bounds: tuple, itemsize: int) -> int:
        """The plan's ``segment_elems`` for chunk offsets ``bounds`` of ``itemsize``-byte
        elements (0: whole chunks; at least 1 element per segment otherwise)."""
        threshold, segment_bytes = self.threshold_bytes, self.segment_bytes
        if not segment_bytes or threshold is None:
            return 0
        if threshold > 0:
            longest = max((b - a for a, b in zip(bounds, bounds[1:])), default=0)
            if longest * itemsize < threshold:
                return 0
        return max(1, segment_bytes // itemsize)


def _segments(lo: int, hi: int, segment_elems: int) -> list[tuple[int, int]]:
    if segment_elems <= 0 or hi - lo <= segment_elems:
        return [(lo, hi)]
    return [(a, min(a + segment_elems, hi)) for a in range(lo, hi, segment_elems)]


@memoize(maxsize=128)
def plan(schedule: Schedule, rank: int, bounds: tuple, segment_elems: int) -> Plan:
    """Per step, ``rank``'s segment-level sends and receives in canonical order (cached).

    Args:
        schedule: a verified schedule.
        rank: this rank, 0 <= rank < schedule.world_size.
        bounds: num_chunks + 1 non-decreasing element offsets: chunk c is
            ``buffer[bounds[c]:bounds[c+1]]``; empty chunks move nothing.
        segment_elems: split every transferred chunk into segments of this many elements
            (0: whole chunks).

    Staged receives (reduces, and copies into a chunk the step also sends) use half ``k % 2`` of
    the staging buffer at step k, so step k+1 can post its receives while step k is applied;
    ``staging_elems`` is both halves: twice the largest step's staged elements (ring all_reduce:
    two chunks; all_gather, broadcast: none).
    """
    program = schedule.program(rank)

    def staged(step) -> int:  # elements of the step's receives that land in staging
        sending = {s.chunk for s in step.sends}
        return sum(bounds[r.chunk + 1] - bounds[r.chunk] for r in step.recvs
                   if r.kind is Kind.REDUCE or r.chunk in sending)

    half = max((staged(step) for step in program.steps), default=0)
    steps = []
    accumulator_elems = 0
    for k, step in enumerate(program.steps):
        sending = {s.chunk for s in step.sends}
        sends = tuple(SegmentSend(step.index, s.chunk, i, lo, hi, s.peer) for s in step.sends
                      for i, (lo, hi) in enumerate(_segments(bounds[s.chunk], bounds[s.chunk + 1],
                                                             segment_elems)) if hi > lo)
        roles, used = _fold_roles(step, rank, bounds)
        accumulator_elems = max(accumulator_elems, used)
        recvs = []
        offset = (k % 2) * half
        for j, r in enumerate(step.recvs):
            lo, hi = bounds[r.chunk], bounds[r.chunk + 1]
            if hi == lo:
                continue
            reduce = r.kind is Kind.REDUCE
            staged = reduce or r.chunk in sending
            fold, start, flush = roles.get(j, (-1, False, False))
            for i, (a, b) in enumerate(_segments(lo, hi, segment_elems)):
                recvs.append(SegmentRecv(step.index, r.chunk, i, a, b,
                                         offset + a - lo if staged else -1, reduce, r.peer,
                                         fold + a - lo if fold >= 0 else -1, start, flush,
                                         r.peer < rank))
            if staged:
                offset += hi - lo
        peers = tuple(sorted({s.peer for s in step.sends} | {r.peer for r in step.recvs}))
        steps.append(StepPlan(step.index, step.phase, sends, tuple(recvs),
                              frozenset(r.chunk for r in recvs), peers))
    return Plan(tuple(steps), tuple(bounds), 2 * half, accumulator_elems)


def _fold_roles(step, rank: int, bounds: tuple) -> tuple[dict, int]:
    """Which of ``step``'s receives go through an accumulator (the IR's reduction order,
    :func:`ringccl.ir.reduce_order`, on this rank's receives): receive index -> (element offset
    of its chunk's accumulator, start, flush), and the accumulator elements the step uses."""
    if sum(1 for r in step.recvs if r.kind is Kind.REDUCE and r.peer < rank) < 2:
        return {}, 0  # the common case (ring, trees, recursive): no accumulator, no arrays
    recvs = step.recvs
    order = reduce_order(np.array([r.chunk for r in recvs], dtype=np.int64),
                         np.array([r.peer for r in recvs]), np.full(len(recvs), rank),
                         np.array([r.kind is Kind.REDUCE for r in recvs]))
    if not order.starts.size:
        return {}, 0
    base, used = [], 0
    for j in order.starts.tolist():
        base.append(used)
        chunk = recvs[j].chunk
        used += bounds[chunk + 1] - bounds[chunk]
    roles = {j: (base[a], True, False) for a, j in enumerate(order.starts.tolist())}
    last: dict[int, int] = {}
    for transfers, accs in order.folds:
        for j, a in zip(transfers.tolist(), accs.tolist()):
            roles[j] = (base[a], False, False)
            last[a] = j  # folds come in ascending peer: the last one seen is the highest
    for a, j in last.items():
        roles[j] = (base[a], False, True)
    return roles, used


@memoize(maxsize=128)
def uniform_bounds(count: int, num_chunks: int) -> tuple:
    """``chunk_bounds(count, num_chunks)`` as a tuple (the ``numpy.array_split`` pieces)."""
    return tuple(chunk_bounds(count, num_chunks).tolist())


def check_bounds(bounds, num_chunks: int, count: int) -> tuple:
    """An executor's ``bounds=`` argument as a tuple of ints (None: :func:`uniform_bounds`).

    Raises:
        BackendError: not num_chunks + 1 non-decreasing offsets within ``count`` elements.
    """
    if bounds is None:
        return uniform_bounds(count, num_chunks)
    if type(bounds) is tuple:  # the layouts' own tuples, checked once (every call passes one)
        try:
            return _checked_bounds(bounds, num_chunks, count)
        except TypeError:  # unhashable entries: checked (and refused) below
            pass
    return _checked_bounds.__wrapped__(tuple(bounds), num_chunks, count)


@memoize(maxsize=256)
def _checked_bounds(bounds: tuple, num_chunks: int, count: int) -> tuple:
    bounds = tuple(int(b) for b in bounds)
    if len(bounds) != num_chunks + 1 or any(b < a for a, b in zip(bounds, bounds[1:])) or (
            bounds[0] < 0 or bounds[-1] > count):
        raise BackendError(f"bounds must be {num_chunks + 1} non-decreasing offsets within the "
                           f"buffer's {count} elements")
    return bounds
