"""Worker bodies for the multi-process tests (module level, so spawned processes can import them).

Every check returns a list of failure strings instead of raising, so one bad case does not hide
the others and every rank always reaches the same collectives (no hang on failure).
"""

import torch
import torch.distributed as dist

import ringccl.torch as rt

COUNTS = lambda n: [0, 1, n - 1, n + 1, 1000, 65_537]  # noqa: E731
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
       "bxor": dist.ReduceOp.BXOR}


def _data(rank, count, dtype, op, seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if op == "prod":  # keep products small and exact
        return torch.randint(-2, 3, (count,), generator=g).to(dtype)
    low = 0 if dtype == torch.uint8 else -8
    return torch.randint(low, 8, (count,), generator=g).to(dtype)


def compare_all(rank, world_size):
    failures = []
    seed = 0
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8):
        is_float = dtype.is_floating_point
        ops = ["sum", "prod", "min", "max"] + ([] if is_float else ["band", "bor", "bxor"])
        for op in ops:
            for count in COUNTS(world_size):
                seed += 1
                x = _data(rank, count, dtype, op, seed)
                ours, ref = x.clone(), x.clone()
                rt.all_reduce(ours, op=op)
                dist.all_reduce(ref, op=OPS[op])
                if not torch.equal(ours, ref):
                    failures.append(f"all_reduce {dtype} {op} count={count}")
                # reduce_scatter_tensor on world_size * k elements
                k = count // world_size + 1
                xin = _data(rank, k * world_size, dtype, op, seed)
                out_ours = torch.empty(k, dtype=dtype)
                rt.reduce_scatter_tensor(out_ours, xin, op=op)
                full = xin.clone()
                dist.all_reduce(full, op=OPS[op])
                if not torch.equal(out_ours, full[rank * k:(rank + 1) * k]):
                    failures.append(f"reduce_scatter_tensor {dtype} {op} k={k}")
            # all_gather_into_tensor once per dtype and count
        for count in COUNTS(world_size):
            x = _data(rank, count, dtype, "sum", seed)
            ours = torch.empty(count * world_size, dtype=dtype)
            ref = torch.empty(count * world_size, dtype=dtype)
            rt.all_gather_into_tensor(ours, x)
            dist.all_gather_into_tensor(ref, x)
            if not torch.equal(ours, ref):
                failures.append(f"all_gather_into_tensor {dtype} count={count}")
    # avg: gloo has no AVG, so compare with sum / N
    x = _data(rank, 1001, torch.float64, "sum", 99)
    ours, ref = x.clone(), x.clone()
    rt.all_reduce(ours, op="avg")
    dist.all_reduce(ref)
    if not torch.allclose(ours, ref / world_size, rtol=0, atol=1e-12):
        failures.append("all_reduce avg")
    # shapes and non-contiguous tensors are handled through a contiguous copy
    base = _data(rank, 6 * 10, torch.float32, "sum", 7).view(6, 10)
    view = base[:, ::2]
    ref = view.clone()
    dist.all_reduce(ref)
    rt.all_reduce(view)
    if not torch.equal(view, ref) or view.shape != (6, 5):
        failures.append("non-contiguous all_reduce")
    if not torch.equal(base[:, 1::2], _data(rank, 60, torch.float32, "sum", 7).view(6, 10)[:, 1::2]):
        failures.append("non-contiguous all_reduce touched other elements")
    return failures


def subgroup(rank, world_size):
    """A group of the last world_size-1 ranks: peers must be mapped to global ranks."""
    members = list(range(1, world_size))
    group = dist.new_group(members)
    x = torch.full((10,), float(rank))
    if rank in members:
        rt.all_reduce(x, group=group)
    # rank 0, outside the group, stays until the others are done: it hosts the store, which
    # they may still poll (torch's store-based barrier of new_group) after it returned
    dist.barrier()
    if rank not in members:
        return []
    expected = float(sum(members))
    return [] if bool((x == expected).all()) else [f"subgroup got {x[0].item()} != {expected}"]


def bad_arguments(rank, world_size):
    """Every rank gets the same bad argument: each raises before any data moves (no hang)."""
    from ringccl.errors import ArgumentError, ArgumentTypeError
    messages = []
    for call in (lambda: rt.reduce_scatter_tensor(torch.empty(3), torch.empty(3 * world_size + 1)),
                 lambda: rt.all_gather_into_tensor(torch.empty(5), torch.empty(2)),
                 lambda: rt.all_reduce(torch.ones(3, dtype=torch.int32), op="avg"),
                 lambda: rt.all_reduce(torch.ones(3), op="bxor"),
                 lambda: rt.all_reduce(torch.ones(3), algorithm="nope"),
                 lambda: rt.all_gather_into_tensor(torch.empty(2 * world_size, dtype=torch.int64),
                                                   torch.empty(2))):
        try:
            call()
            messages.append("no error")
        except (ArgumentError, ArgumentTypeError) as exc:
            messages.append(str(exc))
    dist.barrier()  # everyone is still in step after the refused calls
    x = torch.ones(4)
    rt.all_reduce(x)
    messages.append(str(x[0].item()))
    return messages


def exit_silently(rank, world_size):
    """Rank 1 exits with code 0 without returning (a worker's os._exit in user code)."""
    import os
    if rank == 1:
        os._exit(0)
    return rank
