"""The lockstep driver: one batch of point-to-point per step (NCCL, UCC)."""

from __future__ import annotations

from ..ir import Schedule
from .plan import Plan
from .transport import Transport, _Context, _fail, _received
from .workspace import Workspace

__all__ = ["run_lockstep"]


class _Guard:
    """Saves each chunk before this rank first writes it; restores them all on failure."""

    def __init__(self, workspace: Workspace, bounds: tuple, enabled: bool):
        self.workspace, self.bounds, self.enabled = workspace, bounds, enabled
        self.saved: list[int] = []
        self.seen: set[int] = set()

    def before_write(self, chunk: int) -> None:
        if self.enabled and chunk not in self.seen:
            self.seen.add(chunk)
            self.workspace.save(self.bounds[chunk], self.bounds[chunk + 1])
            self.saved.append(chunk)

    def rollback(self) -> None:
        for chunk in self.saved:
            self.workspace.restore(self.bounds[chunk], self.bounds[chunk + 1])


def run_lockstep(schedule: Schedule, rank: int, p: Plan, transport: Transport,
                 workspace: Workspace, *, timeout: float | None = None,
                 restore: bool = False) -> None:
    """One batch of point-to-point per step, waited for, then applied (NCCL, UCC coalesce a
    batch into one group call, which is what keeps a ring from deadlocking).

    Raises:
        PeerError, RingcclTimeout: a batch failed (after the rollback); the message names the
            step and the peer whose operation failed, or the step's peers when the backend
            returned one handle for the batch.
    """
    ctx = _Context(schedule, rank, transport, timeout)
    ws = workspace
    if p.accumulator_elems:
        ws.reserve(p.accumulator_elems)
    guard = _Guard(ws, p.bounds, restore)
    # views of received bytes, from a transport that reads receives in place (shared memory)
    in_place: dict | None = {} if getattr(transport, "reads_in_place", False) else None
    for step in p.steps:
        if not step.sends and not step.recvs:
            continue
        ops = step.sends + step.recvs
        op = None   # the operation that failed, when the backend's handles say which
        try:
            for r in step.recvs:
                if r.stage < 0:
                    guard.before_write(r.chunk)
            handles = transport.batch([(s, ws.source(s)) for s in step.sends],
                                      [(r, ws.landing(r)) for r in step.recvs])
            for i, handle in enumerate(handles):
                # NCCL may return one handle for the whole coalesced batch: then no single peer
                op = ops[i] if len(handles) == len(ops) else None
                got = transport.wait(handle)
                if got is not None and in_place is not None and op is not None:
                    _received(transport, ws, op, got, in_place)
            op = None
            for r in step.recvs:
                if r.stage >= 0:
                    guard.before_write(r.chunk)
                    if in_place is None:
                        ws.apply(r)
                    else:
                        ws.apply(r, in_place.pop(r, None))
                        transport.release(r)
        except Exception as exc:
            guard.rollback()
            raise _fail(ctx, op, step, exc) from exc
