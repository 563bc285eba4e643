"""The dataflow driver: every operation posted as soon as its data is ready (gloo, MPI), its
order compiled once per plan and replayed."""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, NamedTuple

from ..ir import Schedule
from .plan import Plan
from .transport import Transport, _Context, _fail, _received
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


def _compile_dataflow(p: Plan, restore: bool) -> DataflowProgram:
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
    return DataflowProgram(tuple(code), len(slot))


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
        for code, op, _, _ in program.instrs[:at]:
            if code == SAVE:
                ws.restore(*op)
        instr = program.instrs[at]
        op = instr.op if instr.code != SAVE else None
        raise _fail(_Context(schedule, rank, transport, timeout), op, p.steps[instr.step],
                    exc) from exc
