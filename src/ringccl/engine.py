"""One rank's part of a schedule, driven over any point-to-point transport.

The executors (:mod:`ringccl.torch.executor` for torch.distributed, :mod:`ringccl.mpi.executor`
for mpi4py) differ only in how a message is posted, waited for and combined; the order of
operations, the staging layout, pipelining into segments, error attribution, timeouts and the
all-or-nothing guarantee live here, once. Nothing here knows an algorithm: the engine walks
``schedule.program(rank)``, whose per-step sends and receives come in the schedule's canonical
order, identical on every rank, so operations between a pair of ranks are posted in the same order
on both sides and matched by order (MPI 4.0 §3.5, non-overtaking messages; gloo and NCCL match
point-to-point the same way). No rank ever blocks in a send before its peer has posted the
matching receive (that deadlocks a ring).

Two drivers, chosen by the backend, never by the algorithm:

* :func:`run_dataflow` (gloo, MPI: each isend/irecv is independent): operations are posted as soon
  as their data is ready. The next step's receives go out while this step is applied; with
  segments a reduced segment is forwarded while later segments are still arriving.
* :func:`run_lockstep` (NCCL, UCC: they coalesce a batch of point-to-point into one group call):
  one batch per step, waited for, then applied.

Receives that reduce land in a staging buffer (two halves, so consecutive steps do not collide)
and are then combined into the working buffer, several reduces into one chunk in canonical
(ascending source) order, as the simulator does; receives that copy land directly in their chunk
unless the step also sends that chunk (BSP: a step's sends read the pre-step state). A chunk is
overwritten only after every send reading it has completed.

Failures: every wait is bounded (by the transport's timeout). The first failing operation raises
:class:`ringccl.errors.PeerError` (or :class:`~ringccl.errors.RingcclTimeout` when the wait ran
out of time) naming the collective, algorithm, step and the peer it was exchanging with. With
``restore=True`` every chunk is saved just before this rank first writes it and restored before
the error propagates, so the working buffer is either fully updated or exactly as it was.
"""

from __future__ import annotations

import datetime
import functools
import os
import re
from typing import Any, NamedTuple, Protocol

from .errors import ArgumentError, BackendError, PeerError, RingcclTimeout
from .ir import Kind, Schedule, chunk_bounds

__all__ = ["Send", "Recv", "StepPlan", "Plan", "Transport", "plan", "uniform_bounds",
           "check_bounds", "timeout_seconds", "run_dataflow", "run_lockstep"]


class Send(NamedTuple):
    """Send ``buffer[lo:hi]`` (element offsets; one segment of ``chunk``) to ``peer`` at the
    schedule's step ``step``."""

    step: int
    chunk: int
    segment: int
    lo: int
    hi: int
    peer: int


class Recv(NamedTuple):
    """Receive ``hi - lo`` elements from ``peer`` for ``buffer[lo:hi]`` (segment of ``chunk``).

    ``stage`` is the element offset in the staging buffer where it lands, or -1 when it lands in
    the buffer itself; ``reduce``: combine with the reduce op instead of copying.
    """

    step: int
    chunk: int
    segment: int
    lo: int
    hi: int
    stage: int
    reduce: bool
    peer: int


class StepPlan(NamedTuple):
    index: int
    phase: str
    sends: tuple
    recvs: tuple
    writes: frozenset     # chunks this step writes
    peers: tuple


class Plan(NamedTuple):
    """This rank's whole part of a schedule: steps, chunk offsets, staging elements needed."""

    steps: tuple
    bounds: tuple         # num_chunks + 1 element offsets into the working buffer
    staging_elems: int


def _segments(lo: int, hi: int, segment_elems: int) -> list[tuple[int, int]]:
    if segment_elems <= 0 or hi - lo <= segment_elems:
        return [(lo, hi)]
    return [(a, min(a + segment_elems, hi)) for a in range(lo, hi, segment_elems)]


@functools.lru_cache(maxsize=128)
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
    for k, step in enumerate(program.steps):
        sending = {s.chunk for s in step.sends}
        sends = tuple(Send(step.index, s.chunk, i, lo, hi, s.peer) for s in step.sends
                      for i, (lo, hi) in enumerate(_segments(bounds[s.chunk], bounds[s.chunk + 1],
                                                             segment_elems)) if hi > lo)
        recvs = []
        offset = (k % 2) * half
        for r in step.recvs:
            lo, hi = bounds[r.chunk], bounds[r.chunk + 1]
            if hi == lo:
                continue
            reduce = r.kind is Kind.REDUCE
            staged = reduce or r.chunk in sending
            for i, (a, b) in enumerate(_segments(lo, hi, segment_elems)):
                recvs.append(Recv(step.index, r.chunk, i, a, b,
                                  offset + a - lo if staged else -1, reduce, r.peer))
            if staged:
                offset += hi - lo
        peers = tuple(sorted({s.peer for s in step.sends} | {r.peer for r in step.recvs}))
        steps.append(StepPlan(step.index, step.phase, sends, tuple(recvs),
                              frozenset(r.chunk for r in recvs), peers))
    return Plan(tuple(steps), tuple(bounds), 2 * half)


@functools.lru_cache(maxsize=128)
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
    bounds = tuple(int(b) for b in bounds)
    if len(bounds) != num_chunks + 1 or any(b < a for a, b in zip(bounds, bounds[1:])) or (
            bounds[0] < 0 or bounds[-1] > count):
        raise BackendError(f"bounds must be {num_chunks + 1} non-decreasing offsets within the "
                           f"buffer's {count} elements")
    return bounds


def timeout_seconds(timeout) -> float | None:
    """An executor's ``timeout=`` (seconds or ``datetime.timedelta``) in seconds; when None, the
    ``RINGCCL_TIMEOUT`` environment variable (seconds), or None if it is not set either.

    Raises:
        ArgumentError: not a finite number of seconds > 0 (the message names ``timeout`` or
            ``RINGCCL_TIMEOUT``).
    """
    argument = "timeout"
    if timeout is None:
        env = os.environ.get("RINGCCL_TIMEOUT")
        if not env:
            return None
        argument, timeout = "RINGCCL_TIMEOUT", env
        try:
            timeout = float(env)
        except ValueError:
            pass
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            0 < timeout < 10 ** 9):
        raise ArgumentError(f"{argument}={timeout!r} must be a finite number of seconds > 0 "
                            "(or a datetime.timedelta)")
    return float(timeout)


class Transport(Protocol):
    """What a backend provides to the engine (handles are the backend's request objects).

    Every method may raise; the engine attributes the failure to the operation's step and peer.
    ``wait`` must be bounded: it raises :class:`TimeoutError` (or a backend error that
    ``is_timeout`` recognises) when the peer does not answer in time.
    """

    def isend(self, s: Send) -> Any: ...
    def irecv(self, r: Recv) -> Any: ...
    def wait(self, handle: Any) -> None: ...
    def apply(self, r: Recv) -> None: ...            # combine/copy a staged receive into place
    def save(self, lo: int, hi: int) -> None: ...    # back up buffer[lo:hi] (restore=True)
    def restore(self, lo: int, hi: int) -> None: ...
    def is_timeout(self, exc: BaseException) -> bool: ...
    def peer_name(self, peer: int) -> str: ...
    def batch(self, sends: tuple, recvs: tuple) -> list: ...   # lockstep backends only


class _Context(NamedTuple):
    schedule: Schedule
    rank: int
    transport: Transport
    timeout: float | None


def _fail(ctx: _Context, op: Send | Recv | None, step: StepPlan, exc: BaseException):
    """The PeerError/RingcclTimeout for ``op`` (None: a whole lockstep batch) failing."""
    t, s = ctx.transport, ctx.schedule
    timed_out = isinstance(exc, TimeoutError) or t.is_timeout(exc)
    if op is None:
        peer, what = None, f"exchanging with ranks {[t.peer_name(p) for p in step.peers]}"
    else:
        peer = op.peer
        what = (f"waiting for a receive from rank {t.peer_name(peer)}" if isinstance(op, Recv)
                else f"waiting for a send to rank {t.peer_name(peer)}")
        step = op.step
    step_index = step if isinstance(step, int) else step.index
    how = (f"timed out after {ctx.timeout:g} s" if timed_out and ctx.timeout is not None
           else "timed out" if timed_out else "failed")
    # gloo prefixes its messages with its source location: "[.../pair.cc:553] Connection ..."
    detail = re.sub(r"^\[[^\]]*\]\s*", "", str(exc).strip()) or type(exc).__name__
    # 0-based step of the whole schedule, with its phase (``ringccl show`` numbers per phase)
    message = (f"{s.algorithm} {s.collective} {how} on rank {ctx.rank} at step {step_index} "
               f"of {s.num_steps} ({s.phase_names[step_index]}) {what}: {detail}")
    cls = RingcclTimeout if timed_out else PeerError
    return cls(message, collective=s.collective, algorithm=s.algorithm, step=step_index,
               rank=ctx.rank, peer=peer)


class _Guard:
    """Saves each chunk before this rank first writes it; restores them all on failure."""

    def __init__(self, transport: Transport, bounds: tuple, enabled: bool):
        self.transport, self.bounds, self.enabled = transport, bounds, enabled
        self.saved: list[int] = []
        self.seen: set[int] = set()

    def before_write(self, chunk: int) -> None:
        if self.enabled and chunk not in self.seen:
            self.seen.add(chunk)
            self.transport.save(self.bounds[chunk], self.bounds[chunk + 1])
            self.saved.append(chunk)

    def rollback(self) -> None:
        for chunk in self.saved:
            self.transport.restore(self.bounds[chunk], self.bounds[chunk + 1])


def run_lockstep(schedule: Schedule, rank: int, p: Plan, transport: Transport, *,
                 timeout: float | None = None, restore: bool = False) -> None:
    """One batch of point-to-point per step, waited for, then applied (NCCL, UCC coalesce a
    batch into one group call, which is what keeps a ring from deadlocking).

    Raises:
        PeerError, RingcclTimeout: a batch failed (after the rollback); the message names the
            step and the peer whose operation failed, or the step's peers when the backend
            returned one handle for the batch.
    """
    ctx = _Context(schedule, rank, transport, timeout)
    guard = _Guard(transport, p.bounds, restore)
    for step in p.steps:
        if not step.sends and not step.recvs:
            continue
        ops = step.sends + step.recvs
        op = None   # the operation that failed, when the backend's handles say which
        try:
            for r in step.recvs:
                if r.stage < 0:
                    guard.before_write(r.chunk)
            handles = transport.batch(step.sends, step.recvs)
            for i, handle in enumerate(handles):
                # NCCL may return one handle for the whole coalesced batch: then no single peer
                op = ops[i] if len(handles) == len(ops) else None
                transport.wait(handle)
            op = None
            for r in step.recvs:
                if r.stage >= 0:
                    guard.before_write(r.chunk)
                    transport.apply(r)
        except Exception as exc:
            guard.rollback()
            raise _fail(ctx, op, step, exc) from exc


def run_dataflow(schedule: Schedule, rank: int, p: Plan, transport: Transport, *,
                 timeout: float | None = None, restore: bool = False) -> None:
    """Post every operation as soon as its data is ready (gloo, MPI).

    * step k+1's receives are posted while step k is still running (staged ones land in the
      other staging half; in-place ones wait until nothing of step k writes their chunk);
    * a send of step k+1 is posted as soon as step k has finished writing its segment;
    * a chunk is overwritten only after every earlier send reading it completed.

    Posting order per peer and direction stays the canonical one (step-major, then the step's
    order, segment-minor) on both sides, so messages match: an operation that must wait holds
    back the later ones to the same peer.

    Args:
        timeout: seconds, only used in the error message (the transport bounds its waits).
        restore: save each chunk before its first write and restore all on failure.
    Raises:
        PeerError, RingcclTimeout: an operation failed or timed out (after the rollback); the
            message names the collective, algorithm, step and peer.
    """
    ctx = _Context(schedule, rank, transport, timeout)
    guard = _Guard(transport, p.bounds, restore)
    steps = p.steps
    in_flight: dict[int, list] = {}   # chunk -> (send, handle) that may still read it
    current: list = [None, steps[0]]  # the operation being posted or waited for, its step

    def wait(op, handle) -> None:
        current[0] = op
        transport.wait(handle)

    def drain(chunk: int) -> None:
        for s, handle in in_flight.pop(chunk, ()):
            wait(s, handle)

    def post_send(s: Send) -> None:
        current[0] = s
        in_flight.setdefault(s.chunk, []).append((s, transport.isend(s)))

    def post_recv(r: Recv):
        if r.stage < 0:
            drain(r.chunk)
            guard.before_write(r.chunk)
        current[0] = r
        return transport.irecv(r)

    def apply(r: Recv) -> None:
        if r.stage >= 0:
            drain(r.chunk)  # sends may still read the chunk being updated
            transport.apply(r)  # its chunk was saved when the step began (step.writes)

    try:
        recv_handles = {0: [post_recv(r) for r in steps[0].recvs]}
        for s in steps[0].sends:
            post_send(s)
        for k, step in enumerate(steps):
            current[1] = step
            nxt = steps[k + 1] if k + 1 < len(steps) else None
            # sends of step k+1 held back, per peer in posting order: [send, ready?]
            held: dict[int, list[list]] = {}
            pending: dict[tuple[int, int], list[list]] = {}  # segment -> its held entries
            # the last receive into each segment (several reduces may target one segment)
            last = {(r.chunk, r.segment): i for i, r in enumerate(step.recvs)}

            def flush(peer: int) -> None:
                queue = held[peer]
                while queue and queue[0][1]:
                    post_send(queue.pop(0)[0])

            if nxt is not None:
                # receives of step k+1 that cannot disturb step k go out now; once one from a
                # peer must wait, the later ones from that peer wait too (order matches them)
                late, late_peers = [], set()
                for r in nxt.recvs:
                    hold = r.peer in late_peers or (r.stage < 0 and r.chunk in step.writes)
                    if hold:
                        late_peers.add(r.peer)
                    late.append(hold)
                recv_handles[k + 1] = [None if hold else post_recv(r)
                                       for r, hold in zip(nxt.recvs, late)]
                for s in nxt.sends:
                    blocked = s.chunk in step.writes
                    if blocked or held.get(s.peer):
                        entry = [s, not blocked]
                        held.setdefault(s.peer, []).append(entry)
                        if blocked:
                            pending.setdefault((s.chunk, s.segment), []).append(entry)
                    else:
                        post_send(s)
            for chunk in step.writes:
                guard.before_write(chunk)  # while this step's messages are in flight
            for i, (r, handle) in enumerate(zip(step.recvs, recv_handles.pop(k))):
                wait(r, handle)
                apply(r)
                if last[(r.chunk, r.segment)] == i:
                    # the segment is final for this step: forward it
                    for entry in pending.pop((r.chunk, r.segment), ()):
                        entry[1] = True
                        flush(entry[0].peer)
            for peer, queue in held.items():
                for entry in queue:
                    entry[1] = True
                flush(peer)
            if nxt is not None:
                handles = recv_handles[k + 1]
                for i, r in enumerate(nxt.recvs):
                    if handles[i] is None:
                        handles[i] = post_recv(r)
        for chunk in list(in_flight):
            drain(chunk)
    except Exception as exc:
        guard.rollback()
        raise _fail(ctx, current[0], current[1], exc) from exc

