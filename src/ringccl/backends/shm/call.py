"""The shared-memory call: one collective over a group's shared memory, for every backend.

ringccl.torch (CPU tensors, seen as numpy arrays), ringccl.mpi (numpy arrays) and the hybrid
transport (shared memory inside each host, point-to-point across: torch tensors) run a call over
shared memory the same way, here; a backend supplies only its :class:`Dialect` (the engine's
array ops on the slot's arrays, and a view of the caller's arrays in that dialect), the group's
:class:`~ringccl.backends.shm.ShmGroup` and transport, and the plan's arguments.

One call: enter (every rank enters every call, also with nothing to move, so the call counters
stay equal; lazily from :data:`LAZY_ENTRY_MIN_WORLD` ranks on), place the working buffer in this
rank's slot with the call's eager area after it (:mod:`~ringccl.backends.shm.transport`: small
sends are copied there and complete at once, so one-shot all_reduce waits once per call), run
the plan with the dataflow driver (:func:`run_call`), end the call. Where the caller's buffer
already lies in the slot (a ``shm_empty`` array: zero copy) the schedule runs on it in place,
the rollback saving what it overwrites; else the ranges the schedule reads are copied in and the
results out after the call's last wait (:mod:`ringccl.engine.staged`: a private working buffer
given as its sources and targets, final receives landing in the caller's arrays with
``restore=False``, or those the slot can put back with ``restore=True``, seeded reduces reading
the caller's bytes), so the caller's arrays change only if the call succeeds. On any failure the
group is aborted: every peer's wait ends with the failure named.

Over the hybrid transport the receives from other hosts land where the engine puts them (its
staging buffer, point-to-point), so that call copies the whole working buffer in and out, keeps
a staging buffer, and enters with the full agreement (a lazy entry's error attribution reads
this host's control block, whose ranks are the host's).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ... import engine
from ...engine import trace
from ...engine.dataflow import run_dataflow
from ...engine.staged import (Landing, Pieces, Staged, merge, plan_ranges, split)
from ...errors import PeerError, RingcclTimeout
from ...ir import Schedule
from ...ops import ReduceOp
from .group import ShmGroup
from . import lane
from .hierarchical import HybridTransport
from .transport import EAGER_AREA_BYTES

__all__ = ["Dialect", "execute", "run_call", "entry_error", "LAZY_ENTRY_MIN_WORLD",
           "DEFAULT_TIMEOUT_S"]

#: seconds a shared-memory wait may take when neither ``timeout=``, RINGCCL_TIMEOUT nor the
#: group's own timeout is known (torch's default group timeout is 30 minutes; MPI's own waits
#: are unbounded, a dead peer is still noticed at once by its pid)
DEFAULT_TIMEOUT_S = 1800.0

#: groups of at least this many ranks enter a call lazily (``ShmGroup.enter(lazy=True)``: no
#: wait for the peers when the working area is large enough; ``leave()`` completes the
#: agreement); smaller ones agree at every entry. Measured on both backends (the two ways
#: interleaved, median µs per call, 2 cores). ringccl.torch, 200 calls per sample over 9
#: rounds: 4 processes 4 KiB lazy / agreeing 554 / 596 (load 1.9), 1098 / 1253 (load 7.4),
#: 1371 / 1641 (load 10); 2 processes 4 KiB 109 / 76 (load 1.8), 115 / 243 (load 6.6), 288 /
#: 243 (load 10.6), 8 bytes 145 / 139 (load 1.8), 365 / 289 (load 7); again at load 1.6:
#: 4 KiB 135 / 128, 135 / 143, 16 KiB 105 / 119. ringccl.mpi at 4 KiB, 100 calls per batch, 9
#: rounds, load 5: 4 processes no eager sends + agreeing / eager + agreeing / eager + lazy
#: 256 / 222 / 191; 2 processes 48.0 / 47.0 / 47.7 (lazy: 44.0, inside the noise). So for 2
#: ranks no clear gain (the entry's wait and the wait for the peer's data are the same
#: synchronisation there, and the lazy entry's own waits, for the peer's releases before the
#: slot is written, remain): they keep the full agreement.
LAZY_ENTRY_MIN_WORLD = 3


class Dialect(NamedTuple):
    """How the shared-memory call sees memory, per backend and dtype.

    Attributes:
        ops: the engine's array ops (:class:`ringccl.engine.ArrayOps`) on the slot's arrays.
        view: ``view(a)``: the caller's 1-D array as an array of ``ops`` (the same memory).
        address: ``address(a)``: where the caller's array starts (its zero-copy check).
        slot: ``slot(group, serial)``: a mapped segment as one 1-D array of ``ops`` of the
            call's dtype.
        clone: ``clone(a)``: a private copy of such an array (reads ahead of a wait).
    """

    ops: Any
    view: Callable[[Any], Any]
    address: Callable[[Any], int]
    slot: Callable[[ShmGroup, int], Any]
    clone: Callable[[Any], Any]


def execute(schedule: Schedule, buffer: Any, op: ReduceOp, rank: int, bounds, segment_elems: int,
            group: ShmGroup, transport: Any, dialect: Dialect, *, itemsize: int,
            timeout: float | None, restore: bool) -> Any:
    """Run ``schedule`` on this rank's working ``buffer`` over ``group``'s shared memory
    (module docstring).

    Args:
        schedule, op, bounds: as the backends' ``execute`` (``bounds`` checked already).
        buffer: the caller's 1-D working buffer, or a :class:`ringccl.engine.Staged` (a
            private one given as its sources and targets: the front end's all_to_all,
            scatter, gather, reduce_scatter).
        rank: this rank in the schedule (the group's rank; over the hybrid transport, the
            whole group's, not the host's).
        segment_elems: elements per pipelined segment (0: whole chunks).
        group, transport: the group's :class:`ShmGroup` and its transport (a
            :class:`~ringccl.backends.shm.ShmTransport`, or the hybrid one).
        dialect: the backend's :class:`Dialect` for ``buffer``'s dtype.
        itemsize: bytes per element.
        timeout: seconds per wait (None: the group's).
        restore: a caller's buffer used in place is put back on failure (the rollback).
    Returns:
        ``buffer``.
    Raises:
        PeerError, RingcclTimeout: a peer failed or a wait ran past the timeout (named step and
            peer), after the rollback; the group is aborted.
    """
    described = buffer if isinstance(buffer, Staged) else None
    hybrid = isinstance(transport, HybridTransport)
    mine = None if described is not None else dialect.view(buffer)
    numel = described.numel if described is not None else len(mine)
    ops = dialect.ops
    # zero copy: the buffer lies in this rank's slot of one of the group's segments (shm_empty)
    where = group.locate(dialect.address(buffer), numel * itemsize) \
        if described is None and numel and not hybrid else None
    plan = engine.plan(schedule, rank, bounds, segment_elems)

    def failed(exc: BaseException, when: str = "entering the call") -> PeerError:
        return entry_error(schedule, rank, exc, timeout or group.timeout, when, transport)

    workspace, direct = None, True
    try:
        try:
            serial, offset, eager = _enter(group, transport, dialect, numel, itemsize, where,
                                           hybrid, timeout, bool(plan.steps))
        except (TimeoutError, ConnectionError) as exc:
            raise failed(exc) from exc
        if serial is None:   # nothing moves
            _drain_described(described, dialect)
            return buffer
        work = dialect.slot(group, serial)[offset // itemsize:offset // itemsize + numel]
        if hybrid:
            ops.copy(work, buffer)
            workspace = engine.Workspace(ops, work, op, plan.staging_elems)
        elif described is not None:
            workspace, direct, finish = _staged(plan, work, op, ops, described, dialect.view)
        elif where is None:
            workspace, direct, finish = _in_place(plan, work, op, ops, mine, restore)
        else:
            work = mine
            workspace = engine.Workspace(ops, work, op, 0)
        # zero copy: the rollback saves what it overwrites; else the caller's buffer is written
        # only after success (unless final receives land there: restore=False)
        run_call(schedule, rank, plan, transport, workspace, group,
                 restore=restore and where is not None and not hybrid, timeout=timeout,
                 itemsize=itemsize, entry_error=failed, backend="hybrid" if hybrid else "shm")
        if hybrid:
            ops.copy(buffer, work)
        elif where is None:
            finish()
            box = lane.wanted() if described is None else None
            if box is not None:
                _offer_lane(box, schedule, plan, rank, group, transport, dialect, op,
                            itemsize=itemsize, numel=numel, timeout=timeout, restore=restore)
        return buffer
    except BaseException:
        if isinstance(workspace, Landing) and not direct:
            workspace.rollback()   # restore=True: the restorable final receives that landed
        if not group.closed:
            group.abort()
        raise


def _drain_described(described: Staged | None, dialect: Dialect) -> None:
    """A call whose plan has no steps: a described buffer's targets get their sources."""
    if described is not None:
        _drain(dialect.ops.copy, None, described.drain_runs,
               Pieces(described.drain_runs, [dialect.view(t) for t in described.targets]),
               (), (), Pieces(described.fill_runs, [dialect.view(t) for t in described.sources]))


def _offer_lane(box: "lane.capture", schedule: Schedule, plan, rank: int, group: ShmGroup,
                transport: Any, dialect: Dialect, op: ReduceOp, *, itemsize: int, numel: int,
                timeout: float | None, restore: bool) -> None:
    """Offer the call that just ran on a caller's buffer to the compiled lane's capture ``box``
    (:mod:`ringccl.backends.shm.lane`), when no trace is recording."""
    if trace.state.recorder is None:
        box.offer(lambda: lane.lower(schedule, plan, rank, group, transport, dialect, op,
                                     itemsize=itemsize, numel=numel,
                                     need=_need(numel, itemsize), timeout=timeout,
                                     restore=restore))


def _enter(group: ShmGroup, transport: Any, dialect: Dialect, numel: int, itemsize: int,
           where: tuple | None, hybrid: bool, timeout: float | None, steps: bool) -> tuple:
    """Enter the call and set the transport up for it: ``(serial, byte offset, eager area)``
    of the working buffer, or ``(None, None, None)`` for a plan with no steps (the call ended
    already)."""
    # the working buffer, 64-aligned, then this call's eager area: EAGER_AREA_BYTES more asked
    # for only by small buffers (a large buffer's eager sends are its small chunks, if any, in
    # what the slot holds beyond it)
    used = -(-numel * itemsize // 64) * 64
    if hybrid:
        need = max(1, numel * itemsize)
    else:
        need = 0 if where is not None else _need(numel, itemsize)
    # lazy: no wait for the peers when the working area holds ``need`` (ShmGroup.enter);
    # leave() completes the agreement (a no-op after a full agreement)
    group.enter(need, timeout, lazy=not hybrid and group.world_size >= LAZY_ENTRY_MIN_WORLD)
    if not steps:
        group.leave(timeout)
        return None, None, None
    serial, offset, eager = group.call_area(used, where)
    slot, ops = dialect.slot, dialect.ops
    transport.begin(serial, offset, itemsize,
                    lambda s, off, n: slot(group, s)[off // itemsize:(off + n) // itemsize],
                    dialect.clone, timeout=timeout, eager=None if hybrid else eager,
                    copy=ops.copy)
    return serial, offset, eager


def _need(numel: int, itemsize: int) -> int:
    """Bytes of working area a call of ``numel`` elements copied into the slot asks for: the
    buffer, 64-aligned, and the eager area after it when the buffer is small."""
    used = -(-numel * itemsize // 64) * 64
    return used + EAGER_AREA_BYTES if used <= EAGER_AREA_BYTES else used


def _staged(plan, work, op: ReduceOp, ops, described: Staged, view) -> tuple:
    """The workspace of a call whose working buffer is copied into the slot from the arrays
    ``described`` names: ``(Landing, direct, finish)``; ``direct``: final receives land in the
    caller's arrays unchecked (no rollback), ``finish()``: drain the results after the call's
    last wait."""
    ranges = plan_ranges(plan)
    copy = ops.copy
    sources = Pieces(described.fill_runs, [view(t) for t in described.sources])
    targets = Pieces(described.drain_runs, [view(t) for t in described.targets])
    # aliased targets are written only after the last read of the sources
    direct = not described.restore and not described.aliased
    # seeded reduces read the caller's bytes; a range no single array holds is copied in as
    # any other (Pieces.view: None)
    seeded = {}
    for r in ranges.seeded:
        source = sources.view(r.lo, r.hi)
        if source is None:
            _fill(copy, work, ((r.lo, r.hi),), sources)
        else:
            seeded[r] = source
    _fill(copy, work, ranges.upfront, sources)   # the lazy sends' segments: when posted
    # restore=False: every final receive lands in the caller's arrays
    landing = {}
    for r in ranges.finals if direct else ():
        target = targets.view(r.lo, r.hi)
        if target is not None:
            landing[r] = target
    workspace = Landing(ops, work, op, landing, ranges.lazy,
                        lambda lo, hi: _fill(copy, work, ((lo, hi),), sources), seeded)

    def finish() -> None:
        _drain(copy, work, described.drain_runs, targets, merge((r.lo, r.hi) for r in landing),
               merge(ranges.reads + ranges.writes), sources)
    return workspace, direct, finish


def _in_place(plan, work, op: ReduceOp, ops, mine, restore: bool) -> tuple:
    """:func:`_staged` for the caller's one array used in place (all_reduce, broadcast,
    reduce, ...; ``mine``): the same copies, without the bookkeeping for several arrays (a
    small call's time is its Python calls)."""
    copy, ranges = ops.copy, plan_ranges(plan)
    for lo, hi in ranges.upfront:   # the lazy sends' segments: when posted
        copy(work[lo:hi], mine[lo:hi])
    seeded = {r: mine[r.lo:r.hi] for r in ranges.seeded}   # read the caller's bytes
    # restore=False: every final receive lands in the caller's array; restore=True: those
    # whose caller's bytes the slot keeps (put back on failure)
    landing = {r: mine[r.lo:r.hi] for r in (ranges.restorable if restore else ranges.finals)}

    def fill(lo: int, hi: int) -> None:
        copy(work[lo:hi], mine[lo:hi])
    workspace = Landing(ops, work, op, landing, ranges.lazy, fill, seeded)
    writes = ranges.writes

    def finish() -> None:
        landed = merge((r.lo, r.hi) for r in landing)
        for lo, hi in writes:   # every range the call wrote lies in the slot
            for a, b, done in split(lo, hi, landed):
                if not done:
                    copy(mine[a:b], work[a:b])
    return workspace, not restore, finish


def _fill(copy, work, reads: tuple, sources: Pieces) -> None:
    """Copy the ranges ``reads`` of the working buffer from ``sources``."""
    for lo, hi in reads:
        for a, b, src, at in sources.parts(lo, hi):
            copy(work[a:b], src[at:at + b - a])


def _drain(copy, work, runs: tuple, targets: Pieces, landed: tuple, in_slot: tuple,
           sources: Pieces) -> None:
    """Copy the ranges ``runs`` of the call's result into ``targets``: skipping what
    ``landed`` there already (final receives), from the slot where the call wrote or read
    (``in_slot``), else from ``sources`` (a range no step touched: the caller's bytes,
    unchanged)."""
    for lo, hi in runs:
        for a, b, done in split(lo, hi, landed):
            if done:
                continue
            for c, d, dst, at in targets.parts(a, b):
                for e, f, written in split(c, d, in_slot):
                    out = dst[at + e - c:at + f - c]
                    if written:
                        copy(out, work[e:f])
                    else:
                        for g, h, src, s_at in sources.parts(e, f):
                            copy(out[g - e:h - e], src[s_at:s_at + h - g])


def run_call(schedule, rank: int, plan, transport, workspace, group: ShmGroup, *,
             restore: bool, timeout: float | None, itemsize: int,
             entry_error: Callable[[BaseException, str], BaseException],
             backend: str = "shm") -> None:
    """Run one call's ``plan`` over ``group``'s ``transport`` and end the call: the dataflow
    driver (through the trace recorder when one is on, as ``backend``), then ``group.leave``.

    After a lazy entry (``group.lazy``: the call began without waiting for the peers) a
    PeerError from a wait for a peer that never entered this call is what the entry's wait
    would have reported: it is raised as ``entry_error(cause, "entering the call")``; a leave
    that fails as ``entry_error(exc, "leaving the call")`` (PeerError / RingcclTimeout naming
    step and peer)."""
    try:
        trace.drive(run_dataflow, schedule, rank, plan, transport, workspace, restore=restore,
                    timeout=timeout, itemsize=itemsize, backend=backend)
    except PeerError as exc:
        peer, c = exc.peer, group.lazy
        if c and peer is not None and not group.closed and \
                group.entered(peer) < c and exc.__cause__ is not None:
            raise entry_error(exc.__cause__, "entering the call") from exc.__cause__
        raise
    try:
        group.leave(timeout)
    except (TimeoutError, ConnectionError) as exc:
        raise entry_error(exc, "leaving the call") from exc


def entry_error(schedule, rank: int, exc: BaseException, timeout: float,
                when: str = "entering the call", transport: Any = None,
                where: str = " over shared memory",
                peer_name: Callable[[int], str] | None = None) -> PeerError:
    """The PeerError/RingcclTimeout of a shared-memory call whose entry failed (before step 0;
    ``when`` also "setting up the group's shared memory": the group's first call) or whose end
    failed after a lazy entry (``when``: "leaving the call"; its last step),
    naming the peer (``exc.peer``, a rank of the group's shared memory; over the hybrid
    transport, of the host's, given as the whole group's) as ``transport`` names it (or
    ``peer_name``: a set-up that failed has no transport yet), and the collective; ``where``:
    appended to ``when`` in the message."""
    peer = getattr(exc, "peer", None)
    if peer is not None and isinstance(transport, HybridTransport):
        peer = exc.peer = transport.layout.local_ranks[peer]
    timed_out = isinstance(exc, TimeoutError)
    how = f"timed out after {timeout:g} s" if timed_out else "failed"
    name = transport.peer_name if peer_name is None else peer_name
    who = "" if peer is None else f" waiting for rank {name(peer)}"
    cls = RingcclTimeout if timed_out else PeerError
    step = max(schedule.num_steps - 1, 0) if when == "leaving the call" else 0
    return cls(f"{schedule.algorithm} {schedule.collective} {how} on rank {rank} at step {step} "
               f"of {schedule.num_steps} ({when}{where}){who}: {exc}",
               collective=schedule.collective, algorithm=schedule.algorithm, step=step,
               rank=rank, peer=peer)
