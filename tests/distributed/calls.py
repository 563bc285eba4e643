"""One collective both ways, ringccl.torch's and torch.distributed's, on fresh inputs: what the
lockstep and fault-injection tests compare (was ``ringccl.torch.runner._calls``, the input side
of the old ``ringccl run``; ``ringccl run`` now measures through ringccl.bench's harness).

Inputs are random integers in [-8, 8) stored in the requested dtype, so every reduction is exact
in float32/float64 and ringccl's result must equal torch.distributed's element for element.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ringccl.collectives import get_collective
from ringccl.torch import (all_gather_into_tensor, all_reduce, all_to_all_single, broadcast,
                           gather, reduce, reduce_scatter_tensor, scatter)

# torch 2.13 deprecates the two names for these successors (a FutureWarning per process);
# older torch has only the old names
_dist_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_dist_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

_TORCH_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "band": "BAND",
              "bor": "BOR", "bxor": "BXOR", "avg": "AVG"}


class _Calls:
    """One collective both ways: ``ours(x, out)``, ``builtin(x, out)``, fresh inputs and
    outputs, and ``result(x, out)``, the tensor to compare (empty where a rank has no output)."""

    def __init__(self, ours, builtin, make_in, make_out, result):
        self.ours, self.builtin = ours, builtin
        self.make_in, self.make_out, self.result = make_in, make_out, result


def collective_calls(collective: str, algorithm: str, op, world_size: int, count: int, dtype,
                     rank: int, params: dict, accumulate_dtype: str | None = None) -> _Calls:
    """Calls for ``collective``; ``params`` are the algorithm's (``root`` = src/dst when the
    collective is rooted); ``accumulate_dtype`` goes to ringccl's reducing collectives."""
    gen = torch.Generator().manual_seed(1234 + rank)
    torch_op = getattr(dist.ReduceOp, _TORCH_OPS[op.value])
    base = torch.randint(-8, 8, (count,), generator=gen).to(dtype)
    fresh = base.clone
    none = lambda: None  # noqa: E731
    empty = torch.empty(0, dtype=dtype)
    n = world_size
    params = dict(params)
    root = int(params.pop("root", 0)) if get_collective(collective).root_arg else 0
    kw = dict(algorithm=algorithm, **params)
    if accumulate_dtype is not None:  # checked by the caller: a reducing collective
        kw["accumulate_dtype"] = accumulate_dtype
    if collective == "all_reduce":
        return _Calls(lambda x, out: all_reduce(x, op, **kw),
                      lambda x, out: dist.all_reduce(x, torch_op), fresh, none,
                      lambda x, out: x)
    if collective == "broadcast":
        return _Calls(lambda x, out: broadcast(x, root, **kw),
                      lambda x, out: dist.broadcast(x, root), fresh, none, lambda x, out: x)
    if collective == "reduce":
        return _Calls(lambda x, out: reduce(x, root, op, **kw),
                      lambda x, out: dist.reduce(x, root, torch_op), fresh, none,
                      lambda x, out: x if rank == root else empty)  # non-roots: unspecified
    if collective == "reduce_scatter":
        return _Calls(lambda x, out: reduce_scatter_tensor(out, x, op, **kw),
                      lambda x, out: _dist_reduce_scatter(out, x, torch_op), fresh,
                      lambda: torch.empty(count // n, dtype=dtype), lambda x, out: out)
    if collective == "all_gather":
        return _Calls(lambda x, out: all_gather_into_tensor(out, x, **kw),
                      lambda x, out: _dist_all_gather(out, x), fresh,
                      lambda: torch.empty(count * n, dtype=dtype), lambda x, out: out)
    if collective == "scatter":  # count = the root's N blocks
        pieces = lambda x: list(x.view(n, count // n).unbind(0)) if rank == root else None  # noqa
        return _Calls(lambda x, out: scatter(out, pieces(x), root, **kw),
                      lambda x, out: dist.scatter(out, pieces(x), root), fresh,
                      lambda: torch.empty(count // n, dtype=dtype), lambda x, out: out)
    if collective == "gather":
        blocks = lambda: [torch.empty(count, dtype=dtype) for _ in range(n)] \
            if rank == root else None  # noqa: E731
        return _Calls(lambda x, out: gather(x, out, root, **kw),
                      lambda x, out: dist.gather(x, out, root), fresh, blocks,
                      lambda x, out: torch.cat(out) if out else empty)
    # all_to_all: count = this rank's N equal blocks
    return _Calls(lambda x, out: all_to_all_single(out, x, **kw),
                  lambda x, out: dist.all_to_all_single(out, x), fresh,
                  lambda: torch.empty(count, dtype=dtype), lambda x, out: out)
