"""Worker bodies comparing every ringccl.torch primitive and every registered algorithm with
torch.distributed's own collective on gloo (module level, so spawned processes can import them).

Each check appends a failure string instead of raising, so every rank reaches the same
collectives (no hang) and one bad case does not hide the others. Inputs are small random
integers stored in the dtype, so every reduction is exact and results must be equal.
"""

import math

import torch
import torch.distributed as dist

import ringccl
from ringccl.collectives import split_safe
import ringccl.torch as rt

OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "prod": dist.ReduceOp.PRODUCT,
       "bxor": dist.ReduceOp.BXOR}
DTYPES = (torch.float32, torch.int64, torch.uint8)


def _data(rank, count, dtype, seed, op="sum"):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if op == "prod":
        return torch.randint(-2, 3, (count,), generator=g).to(dtype)
    return torch.randint(0 if dtype == torch.uint8 else -8, 8, (count,), generator=g).to(dtype)


def _ops(dtype):
    return ["sum", "max", "prod"] + ([] if dtype.is_floating_point else ["bxor"])


def _counts(n):
    return [0, 1, n + 1, 1000]


def rooted(rank, n):
    """broadcast, reduce, scatter, gather: every algorithm, root, dtype and a few counts."""
    failures = []
    seed = 0
    for algorithm in ringccl.algorithms("broadcast"):
        for root in range(n):
            for dtype in DTYPES:
                for count in _counts(n):
                    seed += 1
                    x = _data(rank, count, dtype, seed)
                    ours, ref = x.clone(), x.clone()
                    rt.broadcast(ours, src=root, algorithm=algorithm)
                    dist.broadcast(ref, src=root)
                    if not torch.equal(ours, ref):
                        failures.append(f"broadcast {algorithm} root={root} {dtype} {count}")
    for algorithm in ringccl.algorithms("reduce"):
        for root in range(n):
            for dtype in DTYPES:
                for op in _ops(dtype):
                    for count in _counts(n):
                        seed += 1
                        x = _data(rank, count, dtype, seed, op)
                        ours, ref = x.clone(), x.clone()
                        rt.reduce(ours, dst=root, op=op, algorithm=algorithm)
                        dist.reduce(ref, dst=root, op=OPS[op])
                        want = ref if rank == root else x  # ours leaves non-roots unchanged
                        if not torch.equal(ours, want):
                            failures.append(f"reduce {algorithm} root={root} {dtype} {op} "
                                            f"{count}")
    for algorithm in ringccl.algorithms("scatter"):
        for root in range(n):
            for dtype in DTYPES:
                for m in (0, 1, 3, 250):
                    seed += 1
                    pieces = list(_data(rank, m * n, dtype, seed).view(n, m).unbind(0))
                    ours, ref = torch.full((m,), 77, dtype=dtype), torch.empty(m, dtype=dtype)
                    rt.scatter(ours, pieces if rank == root else None, src=root,
                               algorithm=algorithm)
                    dist.scatter(ref, [p.clone() for p in pieces] if rank == root else None,
                                 src=root)
                    if not torch.equal(ours, ref):
                        failures.append(f"scatter {algorithm} root={root} {dtype} m={m}")
    for algorithm in ringccl.algorithms("gather"):
        for root in range(n):
            for dtype in DTYPES:
                for m in (0, 1, 3, 250):
                    seed += 1
                    x = _data(rank, m, dtype, seed)
                    ours = [torch.empty(m, dtype=dtype) for _ in range(n)] if rank == root \
                        else None
                    ref = [torch.empty(m, dtype=dtype) for _ in range(n)] if rank == root \
                        else None
                    before = x.clone()
                    rt.gather(x, ours, dst=root, algorithm=algorithm)
                    dist.gather(x, ref, dst=root)
                    if rank == root and not all(torch.equal(a, b) for a, b in zip(ours, ref)):
                        failures.append(f"gather {algorithm} root={root} {dtype} m={m}")
                    if not torch.equal(x, before):
                        failures.append(f"gather {algorithm} modified its input")
    return failures


def _split_table(n, seed):
    """(n, n) random split sizes with zeros, the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randint(0, 4, (n, n), generator=g)
    table[0, 1 % n] = 0
    return table


def exchange(rank, n):
    """all_to_all_single (equal and uneven splits), all_to_all, and the all_reduce,
    reduce_scatter and all_gather algorithms, against torch.distributed."""
    failures = []
    seed = 100_000
    for algorithm in ringccl.algorithms("all_to_all"):
        for dtype in DTYPES:
            for per in (0, 1, 5, 300):
                seed += 1
                x = _data(rank, per * n * 2, dtype, seed).view(per * n, 2)
                ours, ref = torch.empty_like(x), torch.empty_like(x)
                rt.all_to_all_single(ours, x, algorithm=algorithm)
                dist.all_to_all_single(ref, x)
                if not torch.equal(ours, ref):
                    failures.append(f"all_to_all_single {algorithm} {dtype} per={per}")
            seed += 1
            table = _split_table(n, seed)
            ins, outs = table[rank].tolist(), table[:, rank].tolist()
            x = _data(rank, sum(ins), dtype, seed)
            ours, ref = torch.empty(sum(outs), dtype=dtype), torch.empty(sum(outs), dtype=dtype)
            try:
                rt.all_to_all_single(ours, x, outs, ins, algorithm=algorithm)
            except ringccl.ArgumentError as exc:
                if split_safe(ringccl.schedule("all_to_all", algorithm, n)):
                    failures.append(f"all_to_all_single {algorithm} refused uneven splits: {exc}")
                continue  # refused on every rank alike: no data moved
            dist.all_to_all_single(ref, x, outs, ins)
            if not torch.equal(ours, ref):
                failures.append(f"all_to_all_single {algorithm} {dtype} splits {table.tolist()}")
            inputs = list(x.split(ins))
            ours_l = [torch.empty(k, dtype=dtype) for k in outs]
            rt.all_to_all(ours_l, inputs, algorithm=algorithm)
            # gloo's all_to_all needs equal tensors: the uneven reference is all_to_all_single
            if not all(torch.equal(a, b) for a, b in zip(ours_l, ref.split(outs))):
                failures.append(f"all_to_all {algorithm} {dtype} splits {table.tolist()}")
            equal_in = list(_data(rank, 3 * n, dtype, seed).view(n, 3).unbind(0))
            ours_l = [torch.empty(3, dtype=dtype) for _ in range(n)]
            rt.all_to_all(ours_l, equal_in, algorithm=algorithm)
            dist.all_to_all(ref_l := [torch.empty(3, dtype=dtype) for _ in range(n)],
                            [t.clone() for t in equal_in])
            if not all(torch.equal(a, b) for a, b in zip(ours_l, ref_l)):
                failures.append(f"all_to_all {algorithm} {dtype} equal blocks")
    for algorithm in ringccl.algorithms("all_reduce"):
        for dtype in DTYPES:
            for op in _ops(dtype):
                for count in _counts(n):
                    seed += 1
                    x = _data(rank, count, dtype, seed, op)
                    ours, ref = x.clone(), x.clone()
                    rt.all_reduce(ours, op=op, algorithm=algorithm)
                    dist.all_reduce(ref, op=OPS[op])
                    if not torch.equal(ours, ref):
                        failures.append(f"all_reduce {algorithm} {dtype} {op} {count}")
    for algorithm in ringccl.algorithms("reduce_scatter"):
        for dtype in DTYPES:
            for op in _ops(dtype):
                for k in (0, 1, 333):
                    seed += 1
                    x = _data(rank, k * n, dtype, seed, op)
                    ours, ref = torch.empty(k, dtype=dtype), torch.empty(k, dtype=dtype)
                    rt.reduce_scatter_tensor(ours, x, op=op, algorithm=algorithm)
                    dist.reduce_scatter_tensor(ref, x.clone(), op=OPS[op])
                    if not torch.equal(ours, ref):
                        failures.append(f"reduce_scatter {algorithm} {dtype} {op} k={k}")
    for algorithm in ringccl.algorithms("all_gather"):
        for dtype in DTYPES:
            for count in _counts(n):
                seed += 1
                x = _data(rank, count, dtype, seed)
                ours = torch.empty(count * n, dtype=dtype)
                ref = torch.empty(count * n, dtype=dtype)
                rt.all_gather_into_tensor(ours, x, algorithm=algorithm)
                dist.all_gather_into_tensor(ref, x)
                if not torch.equal(ours, ref):
                    failures.append(f"all_gather {algorithm} {dtype} {count}")
    return failures


def bad_arguments(rank, n):
    """The same bad argument on every rank raises before any data moves (no hang)."""
    from ringccl.errors import ArgumentError, ArgumentTypeError
    messages = []
    calls = [
        lambda: rt.broadcast(torch.ones(3), src=n),
        lambda: rt.reduce(torch.ones(3, dtype=torch.int32), dst=0, op="avg"),
        lambda: rt.scatter(torch.empty(2), None, src=-1),
        lambda: rt.gather(torch.empty(2, dtype=torch.complex64), None, dst=0),
        lambda: rt.all_to_all_single(torch.empty(4 * n), torch.empty(4 * n),
                                     input_split_sizes=[1] * n),
        lambda: rt.all_to_all_single(torch.empty(n + 1), torch.empty(n + 1)),
        lambda: rt.all_to_all([torch.empty(1)] * n, [torch.empty(1, dtype=torch.int64)] * n),
        lambda: rt.scatter(torch.empty(2), None, src=0, algorithm="ring"),
    ]
    for call in calls:
        try:
            call()
            messages.append("no error")
        except (ArgumentError, ArgumentTypeError) as exc:
            messages.append(str(exc))
    dist.barrier()  # everyone is still in step after the refused calls
    x = torch.full((5,), float(rank))
    rt.broadcast(x, src=n - 1)
    messages.append(str(x[0].item()))
    return messages


def subgroup(rank, n):
    """Roots are global ranks: a group of ranks 1..n-1 with src/dst = the global rank n-1."""
    members = list(range(1, n))
    group = dist.new_group(members)
    if rank not in members:
        # stays until the others are done: it hosts the store, which they may still poll
        # (torch's store-based barrier of new_group) after it returned
        dist.barrier()
        return []
    failures = _in_subgroup(rank, n, members, group)
    dist.barrier()
    return failures


def _in_subgroup(rank, n, members, group) -> list:
    """:func:`subgroup`'s calls on a member."""
    failures = []
    x = torch.full((7,), float(rank))
    rt.broadcast(x, src=n - 1, group=group)
    if not bool((x == n - 1).all()):
        failures.append(f"broadcast in subgroup got {x.tolist()}")
    y = torch.full((7,), float(rank))
    rt.reduce(y, dst=n - 1, group=group, algorithm="direct")
    want = float(sum(members)) if rank == n - 1 else float(rank)
    if not bool((y == want).all()):
        failures.append(f"reduce in subgroup got {y.tolist()}, want {want}")
    got = [torch.empty(2) for _ in members] if rank == 1 else None
    rt.gather(torch.full((2,), float(rank)), got, dst=1, group=group)
    if rank == 1 and [g[0].item() for g in got] != [float(m) for m in members]:
        failures.append(f"gather in subgroup got {[g.tolist() for g in got]}")
    return failures


def root_only_arguments(rank, n):
    """Lists checked on the root only (run with one process, so nothing waits)."""
    from ringccl.errors import ArgumentError
    messages = []
    for call in (lambda: rt.scatter(torch.empty(2), [torch.empty(3)], src=0),
                 lambda: rt.scatter(torch.empty(2), None, src=0),
                 lambda: rt.gather(torch.empty(2), [torch.empty(2)] * 2, dst=0)):
        try:
            call()
            messages.append("no error")
        except ArgumentError as exc:
            messages.append(str(exc))
    out = [torch.empty(3)]
    rt.gather(torch.arange(3.0), out, dst=0)
    messages.append(out[0].tolist())
    return messages


def requires_grad(rank, n):
    """Tensors that require grad (parameters) are written below autograd, as dist's all_reduce,
    reduce and broadcast do."""
    failures = []

    def leaf(*shape):
        return (torch.arange(float(math.prod(shape))).reshape(shape) + rank).requires_grad_()

    for name, ours, theirs in [
        ("all_reduce", lambda t: rt.all_reduce(t), lambda t: dist.all_reduce(t)),
        ("reduce", lambda t: rt.reduce(t, dst=n - 1), lambda t: dist.reduce(t, dst=n - 1)),
        ("broadcast", lambda t: rt.broadcast(t, src=1), lambda t: dist.broadcast(t, src=1)),
        ("all_gather_into_tensor",
         lambda t: rt.all_gather_into_tensor(t, leaf(3).detach()),
         lambda t: dist.all_gather_into_tensor(t, leaf(3).detach())),
        ("reduce_scatter_tensor", lambda t: rt.reduce_scatter_tensor(t, leaf(3 * n).detach()),
         lambda t: dist.reduce_scatter_tensor(t, leaf(3 * n).detach())),
    ]:
        shape = (3 * n,) if name == "all_gather_into_tensor" else (3,) if (
            name == "reduce_scatter_tensor") else (2, 5)
        mine, want = leaf(*shape), leaf(*shape)
        try:
            ours(mine)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        theirs(want.detach())  # the reference (dist's own refuses some outputs that need grad)
        if name == "reduce" and rank != n - 1:
            want = leaf(*shape)  # gloo leaves partial sums off dst; ringccl the input
        if not (mine.requires_grad and torch.equal(mine.detach(), want.detach())):
            failures.append(f"{name}: {mine.tolist()} != {want.tolist()}")
    after = torch.ones(4)
    rt.all_reduce(after)  # the group is fine afterwards
    if after.tolist() != [float(n)] * 4:
        failures.append(f"next all_reduce got {after.tolist()}")
    return failures
