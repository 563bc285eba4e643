"""Worker bodies of the MoE tests (module level, so spawned processes can import them).

One launch runs every case (a launch costs seconds here); each case returns plain lists, and
the comparisons happen in the test, so every rank always reaches the same collectives.
"""

import torch
import torch.distributed as dist

from ringccl.errors import RingcclError
from ringccl.torch import moe
from ringccl.training import moe_run
from ringccl.torch.background import Communicator

HIDDEN, FFN, EXPERTS = 8, 16, 8
TOKENS = 12  # per rank


def _layer(skew, capacity_factor, top_k=2):
    return moe.MoELayer(HIDDEN, FFN, EXPERTS, top_k=top_k, capacity_factor=capacity_factor,
                        skew=skew, seed=7).double()


def _tokens(rank, world_size, n=TOKENS):
    g = torch.Generator().manual_seed(11)
    return torch.randn(world_size * n, HIDDEN, generator=g, dtype=torch.float64)


def _grads(layer):
    return {name: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
            for name, p in layer.named_parameters()}


def _max_abs(t):
    return float(t.detach().abs().max()) if t.numel() else 0.0


def _case(rank, world_size, skew, capacity_factor, tokens_per_rank):
    """EP over the default group vs the same layer in this process on all ranks' tokens."""
    counts = tokens_per_rank(world_size)
    x_all = _tokens(rank, world_size, max(counts))[:sum(counts)]
    bounds = [sum(counts[:r]) for r in range(world_size + 1)]
    w = torch.randn(x_all.shape, generator=torch.Generator().manual_seed(3), dtype=x_all.dtype)
    # the reference: one process, every token, capacity per rank's share
    ref = _layer(skew, capacity_factor)
    x_ref = x_all.clone().requires_grad_(True)
    # with a capacity, each rank's share is its own capacity group (GShard's groups)
    shares = [x_ref[bounds[r]:bounds[r + 1]] for r in range(world_size)] if capacity_factor \
        else [x_ref]
    stats_ref = [{} for _ in shares]
    out_ref = torch.cat([ref(s, stats=st) for s, st in zip(shares, stats_ref)])
    (out_ref * w).sum().backward()
    # expert parallel: this rank's tokens, its experts
    ep = _layer(skew, capacity_factor)
    x = x_all[bounds[rank]:bounds[rank + 1]].clone().requires_grad_(True)
    stats: dict = {}
    out = ep(x, dist.group.WORLD, stats=stats)
    (out * w[bounds[rank]:bounds[rank + 1]]).sum().backward()
    grads = _grads(ep)
    # the router's gradient is a sum over every rank's tokens
    dist.all_reduce(grads["router.weight"])
    local = EXPERTS // world_size
    mine = range(rank * local, (rank + 1) * local)
    ref_grads = _grads(ref)
    diffs = {"output": _max_abs(out - out_ref[bounds[rank]:bounds[rank + 1]]),
             "input_grad": _max_abs(x.grad - x_ref.grad[bounds[rank]:bounds[rank + 1]]),
             "router_grad": _max_abs(grads["router.weight"] - ref_grads["router.weight"])}
    for name, g in grads.items():
        if name.startswith("experts."):
            e = int(name.split(".")[1])
            if e in mine:
                diffs[f"expert_grad {name}"] = float((g - ref_grads[name]).abs().max())
            elif g.abs().max() != 0:
                diffs[f"foreign expert {name} has a gradient"] = float(g.abs().max())
    received = torch.tensor(stats["tokens_per_expert"]).sum()
    dist.all_reduce(dropped := torch.tensor(stats["dropped"]))
    return {"diffs": diffs, "received": int(received), "dropped": int(dropped),
            "dropped_ref": sum(st["dropped"] for st in stats_ref), "rank": rank,
            "grad_norm": float(x.grad.norm())}


def equivalence(rank, world_size):
    """Every case of the EP-vs-single-process test, one result dict per case."""
    torch.set_num_threads(1)
    out = {}
    out["uniform"] = _case(rank, world_size, 0.0, None, lambda p: [TOKENS] * p)
    # Zipf skew 3 on 8 experts: experts 6 and 7 (rank 3) are chosen ~1% of the time each
    out["skewed"] = _case(rank, world_size, 3.0, None, lambda p: [TOKENS] * p)
    # a huge skew: every token goes to experts 0 and 1 (rank 0); ranks 1..3 receive nothing
    out["empty_ranks"] = _case(rank, world_size, 60.0, None, lambda p: [TOKENS] * p)
    # uneven token counts, one rank with no tokens at all, and a capacity that drops
    out["capacity"] = _case(rank, world_size, 3.0, 0.5, lambda p: [TOKENS, 0, 5, 9][:p])
    return out


def bad_input(rank, world_size):
    """Each refusal, raised on every rank before any data moves (the group still works)."""
    x = torch.randn(4, HIDDEN)
    ids = torch.zeros(4, 2, dtype=torch.long)
    probs = torch.ones(4, 2)
    cases = {"expert id out of range": (x, ids + EXPERTS, probs, {}),
             "negative expert id": (x, ids - 1, probs, {}),
             "probs wrong shape": (x, ids, torch.ones(4, 3), {}),
             "capacity 0": (x, ids, probs, {"capacity_factor": 0}),
             "capacity negative": (x, ids, probs, {"capacity_factor": -1.0}),
             "experts not a multiple": (x, ids, probs, {"num_experts": 6})}
    messages = {}
    for name, (t, i, p, kw) in cases.items():
        kw = {"num_experts": EXPERTS, **kw}
        try:
            moe.dispatch(t, i, p, **kw)
            messages[name] = None
        except RingcclError as exc:
            messages[name] = str(exc)
    # the group still works: nothing was half sent
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    messages["group still works"] = float(t)
    return messages


def overlap(rank, world_size):
    """pipelined_moe gives unsplit_moe's output (with capacity drops carried over)."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(40, HIDDEN, generator=g, dtype=torch.float64)
    ids, probs = moe.zipf_routing(40, EXPERTS, 2, 1.5, g)
    probs = probs.double()
    torch.manual_seed(0)
    experts = [moe.Expert(HIDDEN, FFN).double() for _ in range(EXPERTS)]
    local = EXPERTS // world_size

    def fn(received, counts):
        pieces = torch.split(received, [int(c) for c in counts])
        return torch.cat([experts[rank * local + i](p) for i, p in enumerate(pieces)])

    out, handle = moe.unsplit_moe(x, ids, probs, fn, num_experts=EXPERTS, capacity_factor=0.75)
    diffs = {}
    with Communicator() as comm:
        for chunks in (1, 3, 4):
            log = []
            piped = moe.pipelined_moe(x, ids, probs, fn, comm, num_experts=EXPERTS,
                                      num_chunks=chunks, kept=handle.kept, timeline=log)
            diffs[chunks] = (float((piped - out).abs().max()),
                             sorted({lane for lane, *_ in log}))
    return {"diffs": diffs, "dropped": handle.dropped}


def all_cases(rank, world_size):
    return {"equivalence": equivalence(rank, world_size), "bad": bad_input(rank, world_size),
            "overlap": overlap(rank, world_size),
            "token_matrix": moe_run.token_matrix_worker(rank, world_size)}
