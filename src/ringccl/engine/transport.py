"""What a backend provides to the engine (:class:`Transport`), timeouts, and how a failed
operation becomes a :class:`~ringccl.errors.PeerError` naming its step and peer."""

from __future__ import annotations

import datetime
import os
import re
from typing import Any, NamedTuple, Protocol

from ..errors import ArgumentError, PeerError, RingcclTimeout
from ..ir import Schedule
from .plan import SegmentRecv, SegmentSend, StepPlan

__all__ = ["Transport", "timeout_seconds"]


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

    def isend(self, s: SegmentSend) -> Any: ...
    def irecv(self, r: SegmentRecv) -> Any: ...
    def wait(self, handle: Any) -> None: ...
    def apply(self, r: SegmentRecv) -> None: ...            # combine/copy a staged receive into place
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
