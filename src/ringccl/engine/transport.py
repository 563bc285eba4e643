"""What a backend provides to the engine (:class:`Transport`), timeouts, and how a failed
operation becomes a :class:`~ringccl.errors.PeerError` naming its step and peer."""

from __future__ import annotations

import datetime
import re
from typing import Any, NamedTuple, Protocol

from .. import environment
from ..errors import ArgumentError, PeerError, RingcclTimeout
from ..ir import Schedule
from .plan import SegmentRecv, SegmentSend, StepPlan

__all__ = ["Transport", "timeout_seconds", "step_error", "SETTLE_SECONDS"]

#: seconds a failed call with ``restore`` gives the receives it had posted to its live peers,
#: all together, to land before it puts its buffer back: gloo cannot withdraw a posted receive,
#: so one that lands after the rollback would change the caller's buffer after the call
#: failed (a direct all_gather whose third peer's bytes were still in flight when the second
#: died). A peer that sends nothing by then is stuck itself (waiting for the one that failed):
#: its receive never lands.
SETTLE_SECONDS = 2.0


def timeout_seconds(timeout) -> float | None:
    """An executor's ``timeout=`` (seconds or ``datetime.timedelta``) in seconds; when None, the
    ``RINGCCL_TIMEOUT`` environment variable (seconds), or None if it is not set either.

    Raises:
        ArgumentError: not a finite number of seconds > 0 (the message names ``timeout`` or
            ``RINGCCL_TIMEOUT``).
    """
    argument = "timeout"
    if timeout is None:
        env = environment.get("RINGCCL_TIMEOUT")
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
    """What a backend provides to the engine: it only moves bytes (handles are the backend's
    request objects). What happens to the bytes once they arrived (combine or copy into place,
    the staging buffer, the rollback) is the engine's (:class:`ringccl.engine.workspace.
    Workspace`), the same for every backend.

    * ``isend(s, data)``: post the send of ``data`` (the segment ``s`` of the working buffer)
      to ``s.peer``; returns a handle.
    * ``irecv(r, landing)``: post the receive of ``r.hi - r.lo`` elements from ``r.peer`` into
      ``landing`` (the segment itself, or its staging slot; None only for a transport that
      reads its receives in place, see below); returns a handle.
    * ``wait(handle)``: block until the operation completed; bounded: raises
      :class:`TimeoutError` (or a backend error that ``is_timeout`` recognises) when the peer
      does not answer in time. Returns None, or for a receive whose bytes the transport exposes
      in place, a readable array of them, which the engine reduces or copies from directly.
    * ``batch(sends, recvs)``: lockstep backends only: post ``[(s, data)]`` and
      ``[(r, landing)]`` as one group call; returns the handles (one per operation, in that
      order, or one for the whole batch).
    * ``is_timeout(exc)``, ``peer_name(peer)``: failure mapping (PeerError vs RingcclTimeout;
      how a peer is named in the message, e.g. with its global rank).

    Optional attributes (read with ``getattr``, default False):

    * ``reads_in_place``: receives need no staging: the peer's bytes are addressable on this
      rank (shared memory), so ``irecv`` of a staged receive gets ``landing=None`` and ``wait``
      returns a view of the bytes; the engine then allocates no staging buffer, copies an
      in-place receive's view into its segment, and reduces a staged one from the view. The
      view must stay valid until the engine calls ``release(r)`` after it applied it.
    * ``settle(handle, seconds)``: wait at most ``seconds`` for a posted operation, ignoring its
      failure (a failed call's receives still in flight, :data:`SETTLE_SECONDS`).
    """

    def isend(self, s: SegmentSend, data: Any) -> Any: ...
    def irecv(self, r: SegmentRecv, landing: Any) -> Any: ...
    def wait(self, handle: Any) -> Any: ...
    def is_timeout(self, exc: BaseException) -> bool: ...
    def peer_name(self, peer: int) -> str: ...
    def batch(self, sends: list, recvs: list) -> list: ...   # lockstep backends only


class _Context(NamedTuple):
    schedule: Schedule
    rank: int
    transport: Transport
    timeout: float | None


def _received(t: Transport, ws: Any, r: SegmentRecv, got: Any, in_place: dict) -> None:
    """A receive's view ``got`` from a transport that reads receives in place: copied into its
    segment now (an in-place receive), or kept for its apply (a staged one)."""
    if r.stage < 0:
        ws.apply(r, got)   # a COPY receive: never a reduce
        t.release(r)
    else:
        in_place[r] = got


def step_error(schedule: Schedule, rank: int, transport: Transport, timeout: float | None,
               op: SegmentSend | SegmentRecv, step: StepPlan, exc: BaseException):
    """The PeerError/RingcclTimeout the drivers raise when ``op`` (of plan step ``step``)
    failed with ``exc``: for an executor that replays a plan without a driver (the
    shared-memory lane, :mod:`ringccl.backends.shm.lane`), so its messages are the drivers'."""
    return _fail(_Context(schedule, rank, transport, timeout), op, step, exc)


def _fail(ctx: _Context, op: SegmentSend | SegmentRecv | None, step: StepPlan, exc: BaseException):
    """The PeerError/RingcclTimeout for ``op`` (None: a whole lockstep batch) failing."""
    t, s = ctx.transport, ctx.schedule
    timed_out = isinstance(exc, TimeoutError) or t.is_timeout(exc)
    if op is None:
        peer, what = None, f"exchanging with ranks {[t.peer_name(p) for p in step.peers]}"
    else:
        peer = op.peer
        what = (f"waiting for a receive from rank {t.peer_name(peer)}" if isinstance(op, SegmentRecv)
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
