"""DDP and FSDP2 training on backend "ringccl" and on gloo in the same processes.

The default group is ringccl's; a gloo group over the same ranks runs the same training from the
same initial weights on the same data. Both are unmodified torch: DistributedDataParallel (plain,
with a registered comm hook, with no_sync() gradient accumulation) and FSDP2's fully_shard.
Returns per-step losses and final parameters of every variant as numpy arrays.
"""

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ringccl.torch  # noqa: F401  (registers "ringccl")

assert ringccl.torch.backend.BACKEND_NAME == "ringccl"  # the import is the point

STEPS = 8


def _digits(rank, world_size, per_rank=16):
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    n = per_rank * world_size
    return [(x[s * n + rank * per_rank: s * n + (rank + 1) * per_rank],
             y[s * n + rank * per_rank: s * n + (rank + 1) * per_rank]) for s in range(STEPS)]


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.ReLU(), torch.nn.Linear(48, 10))


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def _ddp(group, data, hook=None, accumulate=1):
    model = DDP(_mlp(), process_group=group, bucket_cap_mb=0.01)   # several buckets
    if hook is not None:
        model.register_comm_hook(group, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step, (x, y) in enumerate(data):
        sync = (step + 1) % accumulate == 0
        if sync:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        else:
            with model.no_sync():
                loss = F.cross_entropy(model(x), y)
                loss.backward()
        losses.append(loss.item())
    return np.array(losses), _flat(model.module)


class _Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(2 * dim, dim))
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class _Transformer(torch.nn.Module):
    def __init__(self, vocab=50, dim=32, heads=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList([_Block(dim, heads), _Block(dim, heads)])
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def _fsdp2(group, rank, world_size):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    model = _Transformer()
    mesh = DeviceMesh.from_group(group, "cpu")
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # SGD, not Adam: attention's key bias has a gradient that is zero but for rounding (softmax
    # ignores a constant shift), and Adam scales that rounding noise up to lr-sized steps whose
    # sign depends on the summation order (seen: 62 of 20338 parameters 1e-3 apart after 8 steps)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    # one batch per rank, seen every step: the model memorizes it, so the loss falls (fresh
    # random tokens each step would keep it at log(50))
    tokens = torch.randint(0, 50, (4, 12), generator=g)
    losses = []
    for _ in range(STEPS):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    full = torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])
    return np.array(losses), full.numpy().copy()


def everything(rank, world_size):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    gloo = dist.new_group(backend="gloo")
    ringccl_group = dist.group.WORLD
    data = _digits(rank, world_size)
    out = {}
    for name, group in (("ringccl", ringccl_group), ("gloo", gloo)):
        out[f"ddp/{name}"] = _ddp(group, data)
        out[f"ddp_hook/{name}"] = _ddp(group, data, hook=default_hooks.allreduce_hook)
        out[f"ddp_no_sync/{name}"] = _ddp(group, data, accumulate=2)
        out[f"fsdp2/{name}"] = _fsdp2(group, rank, world_size)
    # the dispatch policy's other branches (this model's buckets are all below the default
    # inline threshold): every call on the worker, and a threshold inside the bucket sizes so
    # inline and queued buckets mix within each backward; the reference is gloo's
    for variant, threshold in (("thread", "0"), ("mixed", "8KiB")):
        os.environ["RINGCCL_BACKEND_INLINE_BYTES"] = threshold   # read at group creation
        group = dist.new_group(backend="ringccl")
        del os.environ["RINGCCL_BACKEND_INLINE_BYTES"]
        out[f"ddp_{variant}/ringccl"] = _ddp(group, data)
        out[f"ddp_{variant}/gloo"] = out["ddp/gloo"]
        out[f"fsdp2_{variant}/ringccl"] = _fsdp2(group, rank, world_size)
        out[f"fsdp2_{variant}/gloo"] = out["fsdp2/gloo"]
    return {k: (v[0].tolist(), v[1].tolist()) for k, v in out.items()}
