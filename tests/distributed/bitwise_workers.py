"""Workers for tests/distributed/test_bitwise_torch.py (module level, so spawned processes can
import them): every rank's result bytes compared with rank 0's.

Each result is compared by all-gathering its raw bytes (a uint8 view) with torch.distributed's
own all_gather, so the comparison itself involves no arithmetic. Returns failure strings
instead of raising, so every rank reaches every collective.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ringccl.torch as rt
from ringccl.algorithms import REGISTRY

from .train_workers import local, make_data, make_model

EVERYONE = ("all_reduce", "all_gather", "broadcast")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32)
STEPS = 4


def pairs():
    """(collective, algorithm) of every registered algorithm whose result every rank gets."""
    return sorted(key for key in REGISTRY if key[0] in EVERYONE)


def _data(rank, count, dtype, seed):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        # normals over three decades: float sums round differently in different orders
        scale = 10.0 ** torch.randint(-1, 2, (count,), generator=g).double()
        return (torch.randn(count, generator=g, dtype=torch.float64) * scale).to(dtype)
    return torch.randint(-1000, 1000, (count,), generator=g).to(dtype)


def differing_ranks(t, group=None):
    """The ranks whose bytes of ``t`` differ from rank 0's (the same list on every rank)."""
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
    world_size = dist.get_world_size(group)
    everyone = torch.empty(world_size * raw.numel(), dtype=torch.uint8)
    dist.all_gather_into_tensor(everyone, raw, group=group)
    rows = everyone.reshape(world_size, raw.numel())
    return [r for r in range(1, world_size) if not torch.equal(rows[r], rows[0])]


def compare_collectives(rank, world_size):
    """Every (collective, algorithm) × dtype × count: the ranks' result bytes."""
    failures, seed, checked = [], 0, 0
    counts = [0, 1, world_size - 1, world_size + 1, 1000, 4099]
    for collective, algorithm in pairs():
        for dtype in DTYPES:
            for count in counts:
                seed += 1
                x = _data(rank, count, dtype, seed)
                if collective == "all_reduce":
                    out = x.clone()
                    rt.all_reduce(out, algorithm=algorithm)
                elif collective == "all_gather":
                    out = torch.empty(count * world_size, dtype=dtype)
                    rt.all_gather_into_tensor(out, x, algorithm=algorithm)
                else:
                    out = x.clone()
                    rt.broadcast(out, src=(seed % world_size), algorithm=algorithm)
                checked += 1
                differ = differing_ranks(out)
                if differ:
                    failures.append(f"{algorithm} {collective} {dtype} count={count}: ranks "
                                    f"{differ} differ from rank 0")
    return failures, checked


def _train(rank, world_size, step_fn, model):
    """STEPS float32 AdamW steps on this rank's share of each global batch."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    x, y = make_data(world_size, STEPS)
    for s in range(STEPS):
        opt.zero_grad()
        xs, ys = local(x[s], rank, world_size), local(y[s], rank, world_size)
        F.cross_entropy(model(xs.float()), ys).backward()
        step_fn()
        opt.step()


def compare_training(rank, world_size, algorithms):
    """After STEPS steps with ``comm_hook(algorithm)`` in DDP and with
    ``GradientBucketer(algorithm=algorithm)``: the ranks whose parameters' bytes differ from
    rank 0's, per (tool, algorithm)."""
    failures = []
    comm = rt.Communicator()
    try:
        for algorithm in algorithms:
            ddp = DDP(make_model().float())
            ddp.register_comm_hook(None, rt.comm_hook(algorithm, communicator=comm))
            _train(rank, world_size, lambda: None, ddp)
            for name, p in ddp.module.named_parameters():
                differ = differing_ranks(p)
                if differ:
                    failures.append(f"comm_hook({algorithm!r}) {name}: ranks {differ} differ")
            model = make_model().float()
            bucketer = rt.GradientBucketer(model, bucket_cap_mb=0.002, first_bucket_mb=0.001,
                                           algorithm=algorithm, communicator=comm)
            _train(rank, world_size, bucketer.finish, model)
            bucketer.remove()
            for name, p in model.named_parameters():
                differ = differing_ranks(p)
                if differ:
                    failures.append(f"GradientBucketer({algorithm!r}) {name}: ranks {differ} "
                                    "differ")
    finally:
        comm.close()
    return failures
