"""Worker for tests/distributed/test_torch_algorithms.py (module level, so spawned processes can
import it). Returns failure strings instead of raising, so every rank reaches every collective."""

import torch
import torch.distributed as dist

import ringccl.torch as rt
from ringccl.algorithms import REGISTRY

FAMILIES = ("tree", "recursive", "bruck", "pairwise", "hierarchical", "scatter_allgather")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "bxor": dist.ReduceOp.BXOR}
CASES = [(torch.float32, "sum"), (torch.int64, "sum"), (torch.int32, "max"),
         (torch.int64, "bxor")]


def algorithms():
    """(collective, algorithm) of the non-ring families, in registry order."""
    return [key for key, a in REGISTRY.items() if key[0] in COLLECTIVES
            and a.builder.__module__.rsplit(".", 1)[-1] in FAMILIES]


def _data(rank, count, dtype, seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    # small integers: every sum is exact in float32, so any reduction order gives gloo's bits
    return torch.randint(-8, 8, (count,), generator=g).to(dtype)


def compare_algorithms(rank, world_size):
    failures, seed = [], 0
    counts = [0, 1, world_size - 1, world_size + 1, 1000, 65_537]
    for collective, algorithm in algorithms():
        for dtype, op in CASES:
            for count in counts:
                seed += 1
                x = _data(rank, count, dtype, seed)
                if collective == "all_reduce":
                    ours, ref = x.clone(), x.clone()
                    rt.all_reduce(ours, op=op, algorithm=algorithm)
                    dist.all_reduce(ref, op=OPS[op])
                elif collective == "reduce_scatter":
                    k = count // world_size + 1
                    xin = _data(rank, k * world_size, dtype, seed)
                    ours = torch.empty(k, dtype=dtype)
                    rt.reduce_scatter_tensor(ours, xin, op=op, algorithm=algorithm)
                    full = xin.clone()
                    dist.all_reduce(full, op=OPS[op])
                    ref = full[rank * k:(rank + 1) * k]
                else:
                    if op != "sum":
                        continue
                    ours = torch.empty(count * world_size, dtype=dtype)
                    ref = torch.empty(count * world_size, dtype=dtype)
                    rt.all_gather_into_tensor(ours, x, algorithm=algorithm)
                    dist.all_gather_into_tensor(ref, x)
                if not torch.equal(ours, ref):
                    failures.append(f"{algorithm} {collective} {dtype} {op} count={count}")
    return failures, len(algorithms())
