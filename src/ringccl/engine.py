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
  segments a reduced segment is forwarded while later segments are still arriving. The order
  depends only on the plan, so it is compiled once (:func:`dataflow_program`) and replayed.
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
``restore=True`` every chunk (with the dataflow driver: every segment) is saved just before this
rank first writes it and restored before the error propagates, so the working buffer is either
fully updated or exactly as it was.
"""

from __future__ import annotations

import datetime
import functools
import heapq
import os
import re
from collections import deque
from typing import Any, NamedTuple, Protocol

from .errors import ArgumentError, BackendError, PeerError, RingcclTimeout
from .ir import Kind, Schedule, chunk_bounds

__all__ = ["Send", "Recv", "StepPlan", "Plan", "Transport", "Instr", "Program", "plan",
           "uniform_bounds", "check_bounds", "timeout_seconds", "dataflow_program", "clear_caches",
           "run_dataflow", "run_lockstep"]


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
    if type(bounds) is tuple:  # the layouts' own tuples, checked once (every call passes one)
        try:
            return _checked_bounds(bounds, num_chunks, count)
        except TypeError:  # unhashable entries: checked (and refused) below
            pass
    return _checked_bounds.__wrapped__(tuple(bounds), num_chunks, count)


@functools.lru_cache(maxsize=256)
def _checked_bounds(bounds: tuple, num_chunks: int, count: int) -> tuple:
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


# The dataflow driver's instructions (see :func:`dataflow_program`).
RECV, SEND, WAIT, APPLY, SAVE = range(5)


class Instr(NamedTuple):
    """One instruction of a compiled dataflow program.

    ``code`` is RECV/SEND (post ``op``, keep its handle in ``slot``), WAIT (wait for the handle in
    ``slot``; ``op`` is the operation posted there), APPLY (combine/copy the staged receive
    ``op`` into place) or SAVE (back up ``op = (lo, hi)`` of the buffer for the rollback);
    ``step`` is the index into ``Plan.steps`` an error here is reported at when ``op`` has none.
    """

    code: int
    op: Any
    slot: int
    step: int


class Program(NamedTuple):
    """A rank's whole dataflow execution as a flat instruction list (one handle per slot)."""

    instrs: tuple
    slots: int


def _compile_dataflow(p: Plan, restore: bool) -> Program:
    """List-schedule ``p``'s operations into the order :func:`run_dataflow` executes them.

    Nothing in the dataflow order depends on timing, so it is decided once per plan: the replay
    is a flat loop. Rules (per segment ``(chunk, segment)``; a staged receive completes when it
    is applied, an in-place one when it is waited for, a send when it is waited for):

    * posting order per peer and direction is the canonical one (step-major, then the step's
      order), so both sides post matching operations in the same order; posts look at most one
      step ahead of the step whose receives are being waited for;
    * a send is posted once every earlier step's write to its segment has completed (it sends
      final data);
    * a staged receive of step k is posted once step k-2 (the same staging half) has completed;
    * an in-place receive is posted once every earlier write to its segment has completed and
      every earlier send reading it has been waited for. Waiting for such a send is put off
      until this rank has waited for as large a fraction of its own step's receives as the send's
      position in that step's sends (a send and the receive at the same position in a symmetric
      exchange finish together), so that at the switch from reduce-scatter to all-gather each
      segment's receive is posted as soon as its own send is done, not after the whole chunk;
    * an apply first waits for every send still reading its segment (of this step too: sends
      read the pre-step state);
    * with ``restore``, every segment is saved just before its first write (the apply then
      reads it from cache).
    """
    steps = p.steps
    code: list[Instr] = []
    ops: dict[tuple, Any] = {}                  # id -> op; id = (step, kind, index)
    send_q: dict[int, list] = {}                # peer -> ids in canonical order
    recv_q: dict[int, list] = {}
    pending_writes: dict[tuple, deque] = {}     # segment -> steps of its incomplete writes
    reads: dict[tuple, list] = {}               # segment -> ids of its sends not waited for
    left = [len(st.recvs) for st in steps]      # incomplete receives per step
    for k, st in enumerate(steps):
        for i, r in enumerate(st.recvs):
            ops[(k, "r", i)] = r
            recv_q.setdefault(r.peer, []).append((k, "r", i))
            pending_writes.setdefault((r.chunk, r.segment), deque()).append(k)
        for i, s in enumerate(st.sends):
            ops[(k, "s", i)] = s
            send_q.setdefault(s.peer, []).append((k, "s", i))
            reads.setdefault((s.chunk, s.segment), []).append((k, "s", i))
    heads = {("r", q): 0 for q in recv_q} | {("s", q): 0 for q in send_q}
    queues = {("r", q): v for q, v in recv_q.items()} | {("s", q): v for q, v in send_q.items()}
    order = [q for q in queues if q[0] == "r"] + [q for q in queues if q[0] == "s"]
    slot: dict[tuple, int] = {}                 # id -> handle slot, once posted
    saved: set[tuple] = set()                  # segments backed up (restore)
    progress = [0, -1]                          # step being waited for, its receives done - 1
    # Queues (by index in ``order``) whose head could not be posted, by what they wait for; an
    # event re-examines only those, in ``order`` (scanning every queue after every receive is
    # quadratic in the number of peers). ``scan``: the pass in progress, as a heap of indices
    # after its position; ``dirty``: indices for the next pass.
    waiting: dict[tuple, set] = {}
    dirty: set[int] = set()
    scan: list = [[], -1]

    def wake(reason: tuple) -> None:
        heap, at = scan
        for i in waiting.pop(reason, ()):
            if i > at:
                if i not in dirty:
                    dirty.add(i)
                    heapq.heappush(heap, i)
            else:
                dirty.add(i)

    def save(op, k: int) -> None:               # just before op first writes its segment
        if restore and (op.chunk, op.segment) not in saved:
            saved.add((op.chunk, op.segment))
            code.append(Instr(SAVE, (op.lo, op.hi), -1, k))

    def wait_send(sid: tuple) -> None:
        code.append(Instr(WAIT, ops[sid], slot[sid], sid[0]))
        s = ops[sid]
        reads[(s.chunk, s.segment)].remove(sid)
        wake(("segment", (s.chunk, s.segment)))

    def releasable(sid: tuple) -> bool:
        k, i = progress
        if sid[0] < k:
            return True
        st = steps[k]
        return sid[0] == k and (i + 1) * len(st.sends) >= (sid[2] + 1) * len(st.recvs)

    def try_post(oid: tuple) -> tuple | None:
        """Post ``oid`` (None) or say what it waits for."""
        k, kind, _ = oid
        op = ops[oid]
        key = (op.chunk, op.segment)
        pending = pending_writes.get(key)
        if (kind == "s" or op.stage < 0) and pending and pending[0] < k:
            return ("segment", key)              # earlier writes to the segment not complete
        if kind == "s":
            code.append(Instr(SEND, op, len(slot), k))
            slot[oid] = len(slot)
            wake(("segment", key))               # a receive may wait for this send's slot
            return None
        if op.stage >= 0:
            if k >= 2 and left[k - 2]:
                return ("half", k - 2)           # its staging half is still in use
        else:
            blocking = [sid for sid in reads.get(key, ()) if sid[0] < k]
            if not all(sid in slot for sid in blocking):
                return ("segment", key)
            if not all(releasable(sid) for sid in blocking):
                return ("progress",)
            for sid in blocking:
                wait_send(sid)
            save(op, k)
        code.append(Instr(RECV, op, len(slot), k))
        slot[oid] = len(slot)
        return None

    def post_ready() -> None:
        # this step's operations before the next step's; receives before sends, so the
        # peer's data can land directly; again while posting a send unblocks a receive
        for limit in (progress[0], progress[0] + 1):
            scan[1] = len(order)                 # between passes: every wake is for the next
            wake(("limit",))
            while dirty:
                heap = sorted(dirty)             # one pass over the dirty queues, in order
                scan[0], scan[1] = heap, -1
                while heap:
                    i = heapq.heappop(heap)
                    dirty.discard(i)
                    scan[1] = i
                    q = order[i]
                    queue = queues[q]
                    while heads[q] < len(queue):
                        oid = queue[heads[q]]
                        reason = ("limit",) if oid[0] > limit else try_post(oid)
                        if reason is not None:
                            waiting.setdefault(reason, set()).add(i)
                            break
                        heads[q] += 1
                scan[1] = len(order)

    for k, st in enumerate(steps):
        progress[:] = [k, -1]
        dirty.update(range(len(order)))          # a new step: look at every queue
        waiting.clear()
        post_ready()
        if any(heads[q] < len(queue) and queue[heads[q]][0] <= k for q, queue in queues.items()):
            raise AssertionError("dataflow program stalled")  # every step-k op is out by now
        for i, r in enumerate(st.recvs):
            rid = (k, "r", i)
            code.append(Instr(WAIT, r, slot[rid], k))
            key = (r.chunk, r.segment)
            if r.stage >= 0:
                for sid in [sid for sid in reads.get(key, ()) if sid[0] <= k]:
                    wait_send(sid)               # sends still read the segment
                save(r, k)
                code.append(Instr(APPLY, r, -1, k))
            pending_writes[key].popleft()        # writes complete in step order
            wake(("segment", key))
            left[k] -= 1
            if not left[k]:
                wake(("half", k))
            progress[1] = i
            wake(("progress",))
            post_ready()
    for sid in sorted(slot, key=slot.get):
        if sid[1] == "s" and sid in reads[(ops[sid].chunk, ops[sid].segment)]:
            wait_send(sid)
    return Program(tuple(code), len(slot))


_programs: dict = {}


def dataflow_program(p: Plan, restore: bool) -> Program:
    """:func:`_compile_dataflow` of ``p``, cached per plan object (plans are cached too)."""
    key = (id(p), restore)
    hit = _programs.get(key)
    if hit is None or hit[0] is not p:
        if len(_programs) >= 256:
            _programs.clear()
        hit = _programs[key] = (p, _compile_dataflow(p, restore))
    return hit[1]


def clear_caches() -> None:
    """Forget the cached plans and dataflow programs (executors' ``release_buffers``)."""
    plan.cache_clear()
    uniform_bounds.cache_clear()
    _checked_bounds.cache_clear()
    _programs.clear()


def run_dataflow(schedule: Schedule, rank: int, p: Plan, transport: Transport, *,
                 timeout: float | None = None, restore: bool = False) -> None:
    """Post every operation as soon as its data is ready (gloo, MPI): replay
    :func:`dataflow_program` (the order and its rules are documented at
    :func:`_compile_dataflow`).

    * step k+1's receives are posted while step k is still running (staged ones land in the
      other staging half; in-place ones once the sends reading their segment are done);
    * a send is posted as soon as its segment is final, so with segments a reduced segment is
      forwarded while later segments are still arriving;
    * a segment is overwritten only after every earlier send reading it completed.

    Args:
        timeout: seconds, only used in the error message (the transport bounds its waits).
        restore: save each chunk before its first write and restore all on failure.
    Raises:
        PeerError, RingcclTimeout: an operation failed or timed out (after the rollback); the
            message names the collective, algorithm, step and peer.
    """
    program = dataflow_program(p, restore)
    handles: list = [None] * program.slots
    t = transport
    at = 0
    try:
        for at, (code, op, slot, _) in enumerate(program.instrs):
            if code == WAIT:
                t.wait(handles[slot])
                handles[slot] = None
            elif code == RECV:
                handles[slot] = t.irecv(op)
            elif code == SEND:
                handles[slot] = t.isend(op)
            elif code == APPLY:
                t.apply(op)
            else:
                t.save(*op)
    except Exception as exc:
        for code, op, _, _ in program.instrs[:at]:
            if code == SAVE:
                t.restore(*op)
        instr = program.instrs[at]
        op = instr.op if instr.code != SAVE else None
        raise _fail(_Context(schedule, rank, transport, timeout), op, p.steps[instr.step],
                    exc) from exc
