"""The dataflow driver: every operation posted as soon as its data is ready (gloo, MPI), its
order compiled once per plan and replayed."""

from __future__ import annotations

import heapq
import time
from collections import deque
from typing import Any, NamedTuple

from ..ir import Schedule
from .plan import Plan
from .transport import SETTLE_SECONDS, Transport, _Context, _fail, _received
from .workspace import Workspace

__all__ = ["Instr", "DataflowProgram", "dataflow_program", "run_dataflow"]


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


class DataflowProgram(NamedTuple):
    """A rank's whole dataflow execution as a flat instruction list (one handle per slot)."""

    instrs: tuple
    slots: int


class _DataflowCompiler:
    """List-schedule a plan's operations into the order :func:`run_dataflow` executes them.

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

    Operations are named by id ``(step, kind, index)``, kind "r" (receive) or "s" (send), index
    into the step's receives or sends. Each peer and direction is a queue of ids in canonical
    order, posted from its head.

    State (one compilation; :meth:`compile` runs it once):
        code: the instructions emitted so far.
        ops: id -> operation.
        pending_writes: segment -> steps of its incomplete writes, in step order.
        reads: segment -> ids of its sends not yet waited for.
        left: per step, its receives not yet complete.
        queues, heads: queue key ("r" or "s", peer) -> its ids, and the index of its first
            unposted one; ``order`` lists the keys, receive queues first.
        slot: id -> handle slot, once posted.
        saved: segments backed up (restore).
        step, received: the step whose receives are being waited for, and the index of its last
            completed receive (-1: none yet).
        waiting: what a queue's head waits for -> indices (in ``order``) of the queues blocked
            on it. An event re-examines only those, in ``order`` (scanning every queue after
            every receive is quadratic in the number of peers).
        dirty: queue indices to examine in the next pass.
        heap, at: the pass in progress: a heap of the indices still to visit after position
            ``at`` (``at`` = len(order) between passes, so every wake is for the next one).
    """

    def __init__(self, p: Plan, restore: bool) -> None:
        self.steps = p.steps
        self.restore = restore
        self.code: list[Instr] = []
        self.ops: dict[tuple, Any] = {}
        send_q: dict[int, list] = {}
        recv_q: dict[int, list] = {}
        self.pending_writes: dict[tuple, deque] = {}
        self.reads: dict[tuple, list] = {}
        self.left = [len(st.recvs) for st in self.steps]
        for k, st in enumerate(self.steps):
            for i, r in enumerate(st.recvs):
                self.ops[(k, "r", i)] = r
                recv_q.setdefault(r.peer, []).append((k, "r", i))
                self.pending_writes.setdefault((r.chunk, r.segment), deque()).append(k)
            for i, s in enumerate(st.sends):
                self.ops[(k, "s", i)] = s
                send_q.setdefault(s.peer, []).append((k, "s", i))
                self.reads.setdefault((s.chunk, s.segment), []).append((k, "s", i))
        self.heads = {("r", q): 0 for q in recv_q} | {("s", q): 0 for q in send_q}
        self.queues = ({("r", q): v for q, v in recv_q.items()}
                       | {("s", q): v for q, v in send_q.items()})
        self.order = ([q for q in self.queues if q[0] == "r"]
                      + [q for q in self.queues if q[0] == "s"])
        self.slot: dict[tuple, int] = {}
        self.saved: set[tuple] = set()
        self.step, self.received = 0, -1
        self.waiting: dict[tuple, set] = {}
        self.dirty: set[int] = set()
        self.heap: list = []
        self.at = -1

    def wake(self, reason: tuple) -> None:
        """Mark the queues waiting for ``reason`` for examination: in the pass in progress when
        it has not reached them yet, else in the next."""
        for i in self.waiting.pop(reason, ()):
            if i > self.at:
                if i not in self.dirty:
                    self.dirty.add(i)
                    heapq.heappush(self.heap, i)
            else:
                self.dirty.add(i)

    def save(self, op, k: int) -> None:
        """With ``restore``: back up ``op``'s segment, just before op first writes it."""
        key = (op.chunk, op.segment)
        if self.restore and key not in self.saved:
            self.saved.add(key)
            self.code.append(Instr(SAVE, (op.lo, op.hi), -1, k))

    def wait_send(self, sid: tuple) -> None:
        """Wait for the posted send ``sid``: its segment may be overwritten after this."""
        s = self.ops[sid]
        self.code.append(Instr(WAIT, s, self.slot[sid], sid[0]))
        self.reads[(s.chunk, s.segment)].remove(sid)
        self.wake(("segment", (s.chunk, s.segment)))

    def releasable(self, sid: tuple) -> bool:
        """True if the send ``sid`` may be waited for now (see the class docstring: a send of
        the current step waits until as large a fraction of the step's receives is done)."""
        if sid[0] < self.step:
            return True
        st = self.steps[self.step]
        return sid[0] == self.step and (
            (self.received + 1) * len(st.sends) >= (sid[2] + 1) * len(st.recvs))

    def try_post(self, oid: tuple) -> tuple | None:
        """Post ``oid`` (None) or say what it waits for."""
        k, kind, _ = oid
        op = self.ops[oid]
        key = (op.chunk, op.segment)
        pending = self.pending_writes.get(key)
        if (kind == "s" or op.stage < 0) and pending and pending[0] < k:
            return ("segment", key)              # earlier writes to the segment not complete
        if kind == "s":
            self.code.append(Instr(SEND, op, len(self.slot), k))
            self.slot[oid] = len(self.slot)
            self.wake(("segment", key))          # a receive may wait for this send's slot
            return None
        if op.stage >= 0:
            if k >= 2 and self.left[k - 2]:
                return ("half", k - 2)           # its staging half is still in use
        else:
            blocking = [sid for sid in self.reads.get(key, ()) if sid[0] < k]
            if not all(sid in self.slot for sid in blocking):
                return ("segment", key)
            if not all(self.releasable(sid) for sid in blocking):
                return ("progress",)
            for sid in blocking:
                self.wait_send(sid)
            self.save(op, k)
        self.code.append(Instr(RECV, op, len(self.slot), k))
        self.slot[oid] = len(self.slot)
        return None

    def post_ready(self) -> None:
        """Post every operation that can go out now, in queue order."""
        # this step's operations before the next step's; receives before sends, so the
        # peer's data can land directly; again while posting a send unblocks a receive
        for limit in (self.step, self.step + 1):
            self.at = len(self.order)            # between passes: every wake is for the next
            self.wake(("limit",))
            while self.dirty:
                self.heap = sorted(self.dirty)   # one pass over the dirty queues, in order
                self.at = -1
                while self.heap:
                    i = heapq.heappop(self.heap)
                    self.dirty.discard(i)
                    self.at = i
                    q = self.order[i]
                    queue = self.queues[q]
                    while self.heads[q] < len(queue):
                        oid = queue[self.heads[q]]
                        reason = ("limit",) if oid[0] > limit else self.try_post(oid)
                        if reason is not None:
                            self.waiting.setdefault(reason, set()).add(i)
                            break
                        self.heads[q] += 1
                self.at = len(self.order)

    def compile(self) -> DataflowProgram:
        """Run the list scheduling: per step, post what is ready, then wait for (and apply)
        the step's receives one by one, posting what each completion unblocks."""
        for k, st in enumerate(self.steps):
            self.step, self.received = k, -1
            self.dirty.update(range(len(self.order)))  # a new step: look at every queue
            self.waiting.clear()
            self.post_ready()
            if any(self.heads[q] < len(queue) and queue[self.heads[q]][0] <= k
                   for q, queue in self.queues.items()):
                raise AssertionError("dataflow program stalled")  # every step-k op is out
            for i, r in enumerate(st.recvs):
                self.code.append(Instr(WAIT, r, self.slot[(k, "r", i)], k))
                key = (r.chunk, r.segment)
                if r.stage >= 0:
                    for sid in [sid for sid in self.reads.get(key, ()) if sid[0] <= k]:
                        self.wait_send(sid)      # sends still read the segment
                    self.save(r, k)
                    self.code.append(Instr(APPLY, r, -1, k))
                self.pending_writes[key].popleft()  # writes complete in step order
                self.wake(("segment", key))
                self.left[k] -= 1
                if not self.left[k]:
                    self.wake(("half", k))
                self.received = i
                self.wake(("progress",))
                self.post_ready()
        for sid in sorted(self.slot, key=self.slot.get):  # the sends still outstanding
            if sid[1] == "s" and sid in self.reads[(self.ops[sid].chunk, self.ops[sid].segment)]:
                self.wait_send(sid)
        return DataflowProgram(tuple(self.code), len(self.slot))


def _compile_dataflow(p: Plan, restore: bool) -> DataflowProgram:
    """``p``'s dataflow program (the order and its rules: :class:`_DataflowCompiler`)."""
    return _DataflowCompiler(p, restore).compile()


_programs: dict = {}


def dataflow_program(p: Plan, restore: bool) -> DataflowProgram:
    """:func:`_compile_dataflow` of ``p``, cached per plan object (plans are cached too)."""
    key = (id(p), restore)
    hit = _programs.get(key)
    if hit is None or hit[0] is not p:
        if len(_programs) >= 256:
            _programs.clear()
        hit = _programs[key] = (p, _compile_dataflow(p, restore))
    return hit[1]


def _settle(transport, instrs, handles: list, failed_peer) -> None:
    """Before a rollback: give the receives posted into the buffer itself (not staging) and not
    waited for, but the failed peer's, :data:`SETTLE_SECONDS` in all to land (a transport
    without ``settle`` cannot: skipped)."""
    settle = getattr(transport, "settle", None)
    if settle is None:
        return
    deadline = time.monotonic() + SETTLE_SECONDS
    for code, op, slot, _ in instrs:
        if code == RECV and handles[slot] is not None and op.stage < 0 and \
                op.peer != failed_peer:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            settle(handles[slot], left)
            handles[slot] = None


def run_dataflow(schedule: Schedule, rank: int, p: Plan, transport: Transport,
                 workspace: Workspace, *, timeout: float | None = None,
                 restore: bool = False) -> None:
    """Post every operation as soon as its data is ready (gloo, MPI): replay
    :func:`dataflow_program` (the order and its rules are documented at
    :func:`_compile_dataflow`).

    * step k+1's receives are posted while step k is still running (staged ones land in the
      other staging half; in-place ones once the sends reading their segment are done);
    * a send is posted as soon as its segment is final, so with segments a reduced segment is
      forwarded while later segments are still arriving;
    * a segment is overwritten only after every earlier send reading it completed.

    Args:
        transport: moves the bytes (:class:`Transport`).
        workspace: the working buffer, its staging and backup (apply, save, restore).
        timeout: seconds, only used in the error message (the transport bounds its waits).
        restore: save each chunk before its first write and restore all on failure.
    Raises:
        PeerError, RingcclTimeout: an operation failed or timed out (after the rollback); the
            message names the collective, algorithm, step and peer.
    """
    program = dataflow_program(p, restore)
    handles: list = [None] * program.slots
    t, ws = transport, workspace
    if p.accumulator_elems:
        ws.reserve(p.accumulator_elems)
    # views of received bytes, from a transport that reads receives in place (shared memory)
    in_place: dict | None = {} if getattr(t, "reads_in_place", False) else None
    at = 0
    try:
        for at, (code, op, slot, _) in enumerate(program.instrs):
            if code == WAIT:
                got = t.wait(handles[slot])
                handles[slot] = None
                if got is not None and in_place is not None:
                    _received(t, ws, op, got, in_place)
            elif code == RECV:
                handles[slot] = t.irecv(op, ws.landing(op))
            elif code == SEND:
                handles[slot] = t.isend(op, ws.source(op))
            elif code == APPLY:
                if in_place is None:
                    ws.apply(op)
                else:
                    ws.apply(op, in_place.pop(op, None))
                    t.release(op)
            else:
                ws.save(*op)
    except Exception as exc:
        instr = program.instrs[at]
        if restore and in_place is None:
            _settle(t, program.instrs[:at], handles, instr.op.peer
                    if instr.code != SAVE else None)
        for code, op, _, _ in program.instrs[:at]:
            if code == SAVE:
                ws.restore(*op)
        op = instr.op if instr.code != SAVE else None
        raise _fail(_Context(schedule, rank, transport, timeout), op, p.steps[instr.step],
                    exc) from exc
