"""Worker bodies for the training-integration tests, run by one launch of 4 processes.

Every variant trains the same float64 MLP from the same initial weights on the same data, so
final parameters may differ only by floating-point summation order. float64 keeps that
difference near 1e-15 and lets the tests state tight tolerances.
"""

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import ringccl.torch as rt
from ringccl.training import clip, zero

DTYPE = torch.float64
STEPS = 50
PER_RANK = 8          # samples per rank per step
LR, WD = 1e-2, 1e-2


def make_model(seed=0):
    # 13 -> 31 -> 17 -> 6: 434 + 544 + 108 = 1086 parameters, not a multiple of 4: ZeRO pads
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(13, 31), torch.nn.Tanh(), torch.nn.Linear(31, 17),
                               torch.nn.Tanh(), torch.nn.Linear(17, 6)).to(DTYPE)


def make_data(world_size, steps=STEPS, per_rank=PER_RANK, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, world_size * per_rank, 13, generator=g, dtype=DTYPE)
    y = torch.randint(0, 6, (steps, world_size * per_rank), generator=g)
    return x, y


def local(batch, rank, world_size):
    n = batch.shape[0] // world_size
    return batch[rank * n:(rank + 1) * n]


def flat(model):
    # numpy, not torch: tensors sent back through the launch queue use shared memory that
    # disappears with the worker
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def adamw(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WD)


def train_single(world_size, max_norm=None, steps=STEPS):
    """The reference: one process, the full global batch each step."""
    model = make_model()
    opt = adamw(model.parameters())
    x, y = make_data(world_size, steps)
    for s in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x[s]), y[s]).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
    return flat(model)


def train_ddp(rank, world_size, hook=None):
    model = DDP(make_model())
    if hook is not None:
        model.register_comm_hook(None, hook)
    opt = adamw(model.parameters())
    x, y = make_data(world_size)
    for s in range(STEPS):
        opt.zero_grad()
        xs, ys = local(x[s], rank, world_size), local(y[s], rank, world_size)
        F.cross_entropy(model(xs), ys).backward()
        opt.step()
    return flat(model.module)


def train_bucketer(rank, world_size, max_norm=None, **kw):
    model = make_model()
    bucketer = rt.GradientBucketer(model, **kw)
    opt = adamw(model.parameters())
    x, y = make_data(world_size)
    for s in range(STEPS):
        opt.zero_grad()
        xs, ys = local(x[s], rank, world_size), local(y[s], rank, world_size)
        F.cross_entropy(model(xs), ys).backward()
        bucketer.finish()
        if max_norm is not None:  # grads are replicated after finish(): counted once
            rt.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
    info = {"buckets": bucketer.buckets, "sizes": bucketer.bucket_sizes(),
            "timeline": [t.as_dict() for t in bucketer.timeline[-3:]]}
    bucketer.remove()
    return flat(model), info


def train_zero(rank, world_size, max_norm=None, algorithm="ring"):
    model = make_model()
    opt = rt.ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=LR, weight_decay=WD,
                              algorithm=algorithm)
    x, y = make_data(world_size)
    for s in range(STEPS):
        opt.zero_grad()
        xs, ys = local(x[s], rank, world_size), local(y[s], rank, world_size)
        F.cross_entropy(model(xs), ys).backward()
        if max_norm is not None:
            opt.clip_grad_norm_(max_norm)
        opt.step()
    # the unsharded optimizer's state after one step, for the 1/N comparison
    ref = make_model()
    unsharded = adamw(ref.parameters())
    for p in ref.parameters():
        p.grad = torch.zeros_like(p)
    unsharded.step()
    state = {"sharded": opt.state_bytes(), "unsharded": zero.optimizer_state_bytes(unsharded)}
    return flat(model), state


def accumulation(rank, world_size, k=4, steps=5):
    """k micro-batches with no_sync vs one step on the k-times-larger batch, and the bytes.

    Returns {variant: (params, bytes per optimizer step)}.
    """
    x, y = make_data(world_size, steps, per_rank=PER_RANK * k, seed=2)
    out = {}

    def run(kind, micro, use_no_sync):
        model = make_model()
        if kind == "bucketer":
            sync_obj = rt.GradientBucketer(model, bucket_cap_mb=0.002, first_bucket_mb=0.001)
            opt = adamw(model.parameters())
            stats = sync_obj.stats
        elif kind == "zero":
            opt = sync_obj = rt.ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=LR,
                                                 weight_decay=WD)
            stats = opt.stats
        else:  # DDP with the ringccl hook
            hook = rt.comm_hook()
            ddp = DDP(model)
            ddp.register_comm_hook(None, hook)
            sync_obj, opt, stats = ddp, adamw(ddp.parameters()), hook.stats
        per_step = []
        for s in range(steps):
            before = stats.snapshot()["by_collective"].get(
                "reduce_scatter" if kind == "zero" else "all_reduce", 0)
            opt.zero_grad()
            xs, ys = local(x[s], rank, world_size), local(y[s], rank, world_size)
            for xm, ym, i in zip(xs.chunk(micro), ys.chunk(micro), range(micro)):
                last = i == micro - 1
                ctx = sync_obj.no_sync() if (use_no_sync and not last) else contextlib.nullcontext()
                with ctx:
                    model_fn = sync_obj if kind == "ddp" else model
                    (F.cross_entropy(model_fn(xm), ym) / micro).backward()
                    if kind == "bucketer":
                        sync_obj.finish()
            opt.step()
            after = stats.snapshot()["by_collective"].get(
                "reduce_scatter" if kind == "zero" else "all_reduce", 0)
            per_step.append(after - before)
        if kind == "bucketer":
            sync_obj.remove()
        return flat(model), per_step

    for kind in ("bucketer", "zero", "ddp"):
        out[kind] = {"big_batch": run(kind, 1, False), "no_sync": run(kind, k, True),
                     "sync_every": run(kind, k, False)}
    return out


def clip_shards(rank, world_size):
    """Each rank holds a different, unevenly sized shard of one global gradient vector (and a
    replicated tensor): total norms and coefficients must be the same bits on every rank and
    equal the unsharded norm."""
    results = {}
    g = torch.Generator().manual_seed(5)
    sizes = [1000 + 37 * r for r in range(world_size)]  # uneven shards
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        full = (torch.randn(sum(sizes), generator=g) * 3).to(dtype)
        replicated = (torch.randn(77, generator=g)).to(dtype)
        lo = sum(sizes[:rank])
        shard = torch.nn.Parameter(torch.zeros(sizes[rank], dtype=dtype))
        shard.grad = full[lo:lo + sizes[rank]].clone()
        rep = torch.nn.Parameter(torch.zeros(77, dtype=dtype))
        rep.grad = replicated.clone()
        norm = rt.clip_grad_norm_([shard, rep], max_norm=1.0, sharded=[True, False])
        coef = clip.clip_coefficient(norm, 1.0)
        # the unsharded reference, in float32 from the same values
        ref_params = [torch.nn.Parameter(torch.zeros(sum(sizes))),
                      torch.nn.Parameter(torch.zeros(77))]
        ref_params[0].grad = full.float().clone()
        ref_params[1].grad = replicated.float().clone()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref_params, 1.0)
        clipped_shard = shard.grad.float()
        expected_shard = ref_params[0].grad[lo:lo + sizes[rank]]
        results[str(dtype)] = {
            "norm_bits": norm.view(torch.int32).item(), "coef_bits": coef.view(torch.int32).item(),
            "norm": norm.item(), "ref_norm": ref_norm.item(),
            "shard_err": (clipped_shard - expected_shard).abs().max().item(),
            "shard_scale": expected_shard.abs().max().item()}
        # inf norm too
        shard.grad = full[lo:lo + sizes[rank]].clone()
        rep.grad = replicated.clone()
        inf = rt.clip_grad_norm_([shard, rep], 1.0, norm_type=float("inf"), sharded=[True, False])
        results[str(dtype)]["inf"] = inf.item()
        results[str(dtype)]["ref_inf"] = max(full.float().abs().max().item(),
                                             replicated.float().abs().max().item())
    return results


def bad_arguments(rank, world_size):
    from ringccl.errors import ArgumentError, ArgumentTypeError
    model = make_model()
    messages = []
    for call in (lambda: rt.comm_hook(compression="int8"),
                 lambda: rt.GradientBucketer(model, bucket_cap_mb=0),
                 lambda: rt.GradientBucketer(model, bucket_cap_mb=float("inf")),
                 lambda: rt.ShardedOptimizer([torch.zeros(3, dtype=torch.int64)]),
                 lambda: rt.GradientBucketer(model, algorithm="nope"),
                 lambda: rt.ShardedOptimizer([], torch.optim.AdamW),
                 lambda: rt.ShardedOptimizer(model.parameters(), dict),
                 lambda: rt.clip_grad_norm_(model.parameters(), 1.0, norm_type=1.0),
                 lambda: rt.clip_grad_norm_(model.parameters(), 1.0, sharded=[True])):
        try:
            call()
            messages.append("no error")
        except (ArgumentError, ArgumentTypeError) as exc:
            messages.append(f"{type(exc).__name__}: {exc}")
    return messages


def zero_frozen(rank, world_size, steps=3):
    """ShardedOptimizer vs torch's AdamW (full batch, one process) on a model whose middle
    layer is frozen: torch.optim never steps it, and weight decay must not move it either."""
    def build():
        m = make_model()
        m[2].requires_grad_(False)
        return m

    ref, model = build(), build()
    opt_ref = adamw([p for p in ref.parameters()])
    opt = rt.ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=LR, weight_decay=WD)
    x, y = make_data(world_size, steps)
    for s in range(steps):
        opt_ref.zero_grad()
        F.cross_entropy(ref(x[s]), y[s]).backward()
        opt_ref.step()
        opt.zero_grad()
        F.cross_entropy(model(local(x[s], rank, world_size)),
                        local(y[s], rank, world_size)).backward()
        opt.step()
    frozen_moved = float((model[2].weight - make_model()[2].weight).abs().max())
    return float(torch.max(torch.abs(torch.as_tensor(flat(model) - flat(ref))))), frozen_moved


def zero_one_rank_backward(rank, world_size, skipped_step=False):
    """Only rank 0 runs backward, then every rank steps: the ranks' collectives must still pair
    (the others reduce-scatter zeros), so every replica ends up equal to rank 0's gradient / N.
    ``skipped_step``: first every rank runs backward and zero_grad() without stepping; that
    dropped reduction must not count for the next step (the other ranks would pair their
    all-gather with rank 0's reduce-scatter)."""
    model = make_model()
    opt = rt.ShardedOptimizer(model.parameters(), torch.optim.SGD, lr=1.0)
    x, y = make_data(world_size, 2)
    if skipped_step:
        F.cross_entropy(model(x[1]), y[1]).backward()
        opt.zero_grad()
    ref = make_model()
    F.cross_entropy(ref(x[0]), y[0]).backward()  # the same loss everywhere, for the expectation
    want = torch.cat([(p - p.grad / world_size).detach().reshape(-1) for p in ref.parameters()])
    if rank == 0:
        F.cross_entropy(model(x[0]), y[0]).backward()
    opt.step()
    return float((torch.as_tensor(flat(model)) - want).abs().max())


def zero_grad_to_zeros_still_steps(rank, world_size):
    """zero_grad(set_to_none=False) then step(): torch.optim steps with zero gradients (AdamW's
    weight decay and moments move the parameters); so must ShardedOptimizer."""
    ref, model = make_model(), make_model()
    opt_ref = adamw(ref.parameters())
    opt = rt.ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=LR, weight_decay=WD)
    x, y = make_data(world_size, 1)
    F.cross_entropy(ref(x[0]), y[0]).backward()
    F.cross_entropy(model(local(x[0], rank, world_size)),
                    local(y[0], rank, world_size)).backward()
    for _ in range(2):
        opt_ref.step()
        opt_ref.zero_grad(set_to_none=False)
        opt.step()
        opt.zero_grad(set_to_none=False)
    return float(torch.max(torch.abs(torch.as_tensor(flat(model) - flat(ref)))))


def inf_norm_nan_elsewhere(rank, world_size):
    """A NaN in the shard of the last rank makes the global inf-norm NaN on every rank."""
    g = torch.ones(3, dtype=DTYPE)
    if rank == world_size - 1:
        g[1] = float("nan")
    p = torch.zeros(3, dtype=DTYPE, requires_grad=True)
    p.grad = g
    return float(rt.clip_grad_norm_([p], 1.0, norm_type=float("inf"), sharded=True))


def everything(rank, world_size):
    """All equivalence checks in one launch (each launch costs seconds here)."""
    torch.use_deterministic_algorithms(True)
    out = {"single": train_single(world_size),
           "single_clipped": train_single(world_size, max_norm=0.05),
           "torch_ddp": train_ddp(rank, world_size),
           "ddp_hook": train_ddp(rank, world_size, rt.comm_hook("ring")),
           "ddp_hook_fp16": train_ddp(rank, world_size, rt.comm_hook("ring", compression="fp16")),
           "ddp_hook_bf16": train_ddp(rank, world_size, rt.comm_hook("ring", compression="bf16"))}
    out["bucketer"], out["bucketer_info"] = train_bucketer(rank, world_size, bucket_cap_mb=0.002,
                                                           first_bucket_mb=0.001)
    out["bucketer_after"], _ = train_bucketer(rank, world_size, bucket_cap_mb=0.002,
                                              first_bucket_mb=0.001, overlap=False)
    out["bucketer_clipped"], _ = train_bucketer(rank, world_size, max_norm=0.05,
                                                bucket_cap_mb=0.002, first_bucket_mb=0.001)
    out["zero"], out["zero_state"] = train_zero(rank, world_size)
    # other registered algorithms run through the same components (world_size 4: a power of 2)
    out["bucketer_recursive_doubling"], _ = train_bucketer(
        rank, world_size, bucket_cap_mb=0.002, first_bucket_mb=0.001,
        algorithm="recursive_doubling")
    out["zero_halving_doubling"], _ = train_zero(rank, world_size, algorithm="halving_doubling")
    out["zero_clipped"], _ = train_zero(rank, world_size, max_norm=0.05)
    out["accumulation"] = accumulation(rank, world_size)
    out["clip"] = clip_shards(rank, world_size)
    out["bad_arguments"] = bad_arguments(rank, world_size)
    out["zero_frozen"] = zero_frozen(rank, world_size)
    out["zero_one_rank_backward"] = zero_one_rank_backward(rank, world_size)
    out["inf_norm_nan_elsewhere"] = inf_norm_nan_elsewhere(rank, world_size)
    out["zero_skipped_step"] = zero_one_rank_backward(rank, world_size, skipped_step=True)
    out["zero_grad_to_zeros"] = zero_grad_to_zeros_still_steps(rank, world_size)
    with rt.Communicator() as comm:  # inherits the group's timeout (launch: 800 s)
        out["communicator_timeout"] = rt.background._group_timeout(comm.group).total_seconds()
    dist.barrier()
    return out
