"""Worker bodies for tests/distributed/test_torch_fastpath.py: a small all_reduce through
``dist.all_reduce`` on the "ringccl" backend and through ``ringccl.torch.all_reduce``, in grad
mode and under ``torch.no_grad``, on tensors autograd sees and tensors it does not; the
records (bits, version-counter steps, requires_grad, errors) are compared by the test."""

from __future__ import annotations

import torch
import torch.distributed as dist

import ringccl
import ringccl.torch as rt
from ringccl.backends.shm import lane
from ringccl.backends.torch import dispatch

REPEATS = 4   # the first call compiles the lane, the others replay it


def _tensor(kind: str, rank: int) -> torch.Tensor:
    base = torch.arange(6, dtype=torch.float32) + rank + 0.25
    if kind == "plain":
        return base
    if kind == "leaf":
        return base.requires_grad_()
    if kind == "grad_view":
        return base.requires_grad_()[1:5]
    if kind == "no_grad_view":
        leaf = base.requires_grad_()
        with torch.no_grad():
            return leaf[1:5]
    if kind == "plain_view":
        return base[1:5]
    raise ValueError(kind)


def _record(path: str, kind: str, op: str, rank: int) -> list:
    out = []
    for _ in range(REPEATS):
        t = _tensor(kind, rank)
        before = t._version
        try:
            if path == "dist":
                work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op.upper()), async_op=True)
                value = work.get_future().value()
                ok = work.wait() and work.is_success() and value[0] is t
            else:
                ok = rt.all_reduce(t, op=op) is t
        except Exception as exc:  # noqa: BLE001 - compared across grad modes
            out.append(f"{type(exc).__name__}: {exc}")
            continue
        # (a view's grad_fn is not read: for a view made under no_grad, reading it in grad
        # mode after any in-place write raises, whoever wrote)
        out.append((ok, t.detach().numpy().tobytes(), t._version - before, t.requires_grad,
                    t._is_view() or t.grad_fn is None))
    return out


def grad_modes(rank, world_size):
    """{(path, kind, op, lane on, grad mode): record} for every combination."""
    records = {}
    for on in (True, False):
        lane.set_enabled(on)
        ringccl.clear_caches()
        for path in ("dist", "rt"):
            for kind in ("plain", "leaf", "grad_view", "no_grad_view", "plain_view"):
                for op in ("sum", "avg"):
                    for grad in (True, False):
                        with torch.set_grad_enabled(grad):
                            records[path, kind, op, on, grad] = _record(path, kind, op, rank)
    lane.set_enabled(True)
    inline = dist.all_reduce(torch.ones(2), async_op=True)
    return {"records": records, "compiled": lane.compiled(),
            "inline_work": type(inline).__name__,
            "done_work": isinstance(inline, dispatch.DoneWork)}
