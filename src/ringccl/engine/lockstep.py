"""The lockstep driver: one batch of point-to-point per step (NCCL, UCC)."""

from __future__ import annotations

from ..ir import Schedule
from .plan import Plan
from .transport import Transport, _Context, _fail

__all__ = ["run_lockstep"]


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
