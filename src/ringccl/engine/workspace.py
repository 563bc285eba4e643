"""The engine's side of a call's memory: the working buffer, the staging buffer, the backup.

A transport only moves bytes (:class:`ringccl.engine.transport.Transport`); what happens to them
after they arrive is the same for every backend and lives here, once: a staged receive is
combined (REDUCE, with the dialect's reduce functions, operands in the IR's order) or copied
(COPY) into its segment of the working buffer, or first folded into an accumulator where the IR's
reduction order asks for one (:meth:`Workspace.apply`), and with ``restore=True`` each segment
is saved before this rank first writes it and restored if the call fails
(:meth:`Workspace.save`, :meth:`Workspace.restore`).

The staging, accumulator and backup buffers are kept between calls: allocating (and
page-faulting) a fresh one per call cost as much as the transfer itself for 64 MiB all-reduces on
gloo. They are kept per thread (a background communicator, :mod:`ringccl.training.background`, may
run a collective while the caller's thread runs another; the two must not share staging memory)
and per dtype and device, and :func:`ringccl.clear_caches` frees them.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, Protocol

from .. import caches
from ..ops import ReduceOp
from .plan import SegmentRecv, SegmentSend

__all__ = ["ArrayOps", "Workspace", "kept_buffer", "release_kept_buffers"]


class ArrayOps(Protocol):
    """What the engine needs of an array dialect (numpy arrays, torch tensors): 1-D arrays that
    slice with ``a[lo:hi]`` into views."""

    def empty(self, like: Any, elements: int) -> Any:
        """A new 1-D array of ``elements`` with ``like``'s dtype (and device)."""

    def copy(self, dst: Any, src: Any) -> None:
        """``dst[...] = src`` (same size)."""

    def combine(self, op: ReduceOp) -> Callable[[Any, Any], None]:
        """In-place ``dst = op(dst, src)`` (AVG sums; the front end divides last)."""

    def combine_into(self, op: ReduceOp) -> Callable[[Any, Any, Any], None]:
        """``dst = op(a, b)`` into ``dst``, which may be ``b`` itself (the same operation as
        :meth:`combine` on a ``dst`` holding ``a``): a received segment on the left of ⊕ (the
        IR's operand order, :class:`ringccl.engine.plan.SegmentRecv`), and
        :class:`ringccl.engine.staged.Landing`'s seeded reduces."""

    def kind(self, a: Any) -> Hashable:
        """What kept buffers are keyed by besides the thread: dtype (and device)."""


_kept: dict = {}


@caches.register
def release_kept_buffers() -> None:
    """Free the staging and backup buffers kept between calls (every thread's)."""
    _kept.clear()


def kept_buffer(ops: ArrayOps, like: Any, elements: int, purpose: str) -> Any:
    """A 1-D array of ``elements`` like ``like``, the start of one kept between calls for this
    thread, ``purpose`` ("staging", "backup", or a front end's "work") and ``ops.kind(like)``
    (contents undefined)."""
    key = (threading.get_ident(), purpose, ops.kind(like))
    cached = _kept.get(key)
    if cached is None or len(cached) < elements:
        cached = ops.empty(like, elements)
        _kept[key] = cached
    return cached[:elements]


class Workspace:
    """One call's working buffer with its staging and backup (see the module docstring).

    Args:
        ops: the array dialect.
        buffer: the 1-D working buffer the plan's offsets index.
        op: the reduce op REDUCE receives apply.
        staging_elems: the plan's ``staging_elems`` (0, or a transport that reads its receives
            in place: no staging buffer).
    """

    __slots__ = ("ops", "buffer", "staging", "backup", "accumulators", "combine",
                 "combine_into", "copy")

    def __init__(self, ops: ArrayOps, buffer: Any, op: ReduceOp, staging_elems: int):
        self.ops, self.buffer = ops, buffer
        self.staging = kept_buffer(ops, buffer, staging_elems, "staging") if staging_elems \
            else None
        self.backup = None
        self.accumulators = None
        self.combine, self.combine_into = ops.combine(op), ops.combine_into(op)
        self.copy = ops.copy

    def reserve(self, accumulator_elems: int) -> None:
        """Make room for the plan's ``accumulator_elems`` (the drivers call it with
        ``Plan.accumulator_elems`` when it is not 0: kept between calls like the staging, and
        needed whether or not the transport reads its receives in place)."""
        if self.accumulators is None or len(self.accumulators) < accumulator_elems:
            self.accumulators = kept_buffer(self.ops, self.buffer, accumulator_elems,
                                            "accumulator")

    def source(self, s: SegmentSend) -> Any:
        """What send ``s`` reads: its segment of the working buffer."""
        return self.buffer[s.lo:s.hi]

    def landing(self, r: SegmentRecv) -> Any:
        """Where receive ``r`` lands: its segment of the working buffer, or its staging slot
        (None when there is no staging buffer: the transport reads its receives in place)."""
        if r.stage < 0:
            return self.buffer[r.lo:r.hi]
        staging = self.staging
        return None if staging is None else staging[r.stage:r.stage + r.hi - r.lo]

    def apply(self, r: SegmentRecv, received: Any = None) -> None:
        """Combine (REDUCE) or copy (COPY) receive ``r`` into its segment of the buffer, from
        ``received`` (the transport's view of the bytes, when it reads receives in place) or
        else from its staging slot; a receive with an accumulator (``r.fold >= 0``) is copied
        (``start``) or combined into it instead, and ``flush`` combines the accumulator into the
        segment (the IR's reduction and operand order:
        :class:`ringccl.engine.plan.SegmentRecv`)."""
        dst = self.buffer[r.lo:r.hi]
        src = received if received is not None else \
            self.staging[r.stage:r.stage + r.hi - r.lo]
        if r.fold >= 0:
            acc = self.accumulators[r.fold:r.fold + r.hi - r.lo]
            if r.start:
                self.copy(acc, src)
            else:
                self.combine(acc, src)   # acc := acc ⊕ source, in ascending peer
            if r.flush:
                self.reduce(r, dst, acc)   # own := accumulator ⊕ own (r.below holds)
            return
        if r.reduce:
            self.reduce(r, dst, src)
        else:
            self.copy(dst, src)

    def reduce(self, r: SegmentRecv, dst: Any, src: Any) -> None:
        """``dst := src ⊕ dst`` for a receive ``r`` from below this rank, else ``dst := dst ⊕
        src`` (a subclass may compute it otherwise)."""
        if r.below:
            self.combine_into(dst, src, dst)
        else:
            self.combine(dst, src)

    def save(self, lo: int, hi: int) -> None:
        """Back up ``buffer[lo:hi]`` for the rollback (memory: up to one copy of the buffer,
        kept between calls)."""
        if self.backup is None:
            self.backup = kept_buffer(self.ops, self.buffer, len(self.buffer), "backup")
        self.copy(self.backup[lo:hi], self.buffer[lo:hi])

    def restore(self, lo: int, hi: int) -> None:
        """Put back what :meth:`save` saved of ``buffer[lo:hi]``."""
        self.copy(self.buffer[lo:hi], self.backup[lo:hi])
