"""Does overlapping bucket all-reduces with backward pay off, and what does a step send?

On N local gloo processes, one MLP, one synthetic batch per step, the same buckets every time:

* ``compute``     forward + backward + SGD step, no communication (the floor);
* ``overlap``     GradientBucketer: each bucket all-reduced in the background once full;
* ``after``       the same buckets, all-reduced one after another once backward is done;
* ``ddp-hook``    DistributedDataParallel + ringccl.torch.comm_hook;
* ``ddp-gloo``    DistributedDataParallel with gloo's own all-reduce;
* ``zero``        ShardedOptimizer (reduce-scatter at the end of backward, all-gather after step).

Reported per variant: median step time (each step's time is the max over ranks), exposed
communication (time from the end of backward until the averaged gradients are in place; for
zero, the reduce-scatter + all-gather time), and bytes each rank sent per step, measured from
the schedules, against the closed forms 2(N-1)/N x gradient bytes (all-reduce) and
(N-1)/N x padded bytes twice (reduce-scatter + all-gather).

Usage: python benchmarks/bench_train_overlap.py [--nproc 4] [--width 1024] [--depth 6] [--json]
Figures depend on the machine: on few shared cores, the background thread competes with
backward for the same CPUs and overlap can gain little.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _model(width: int, depth: int, inputs: int = 256, classes: int = 10):
    torch.manual_seed(0)
    layers, w = [], inputs
    for _ in range(depth):
        layers += [torch.nn.Linear(w, width), torch.nn.ReLU()]
        w = width
    layers.append(torch.nn.Linear(w, classes))
    return torch.nn.Sequential(*layers)


def _sync_time(seconds: list[float]) -> list[float]:
    """Per-step max over ranks (a step lasts until its slowest rank is done)."""
    t = torch.tensor(seconds, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _variant(name, rank, world_size, args):
    import ringccl.torch as rt
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = _model(args.width, args.depth)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, 256, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    forward, bucketer, stats, hook = model, None, None, None
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    if name in ("overlap", "after"):
        bucketer = rt.GradientBucketer(model, args.bucket_cap_mb, args.first_bucket_mb,
                                       overlap=name == "overlap")
        stats = bucketer.stats
    elif name in ("ddp-hook", "ddp-gloo"):
        forward = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
        if name == "ddp-hook":
            hook = rt.comm_hook()
            forward.register_comm_hook(None, hook)
            stats = hook.stats
    elif name == "zero":
        optimizer = rt.ShardedOptimizer(model.parameters(), torch.optim.SGD, lr=1e-3)
        stats = optimizer.stats
    steps, exposed, sent = [], [], []
    for i in range(args.warmup + args.steps):
        before = stats.bytes_sent if stats else 0
        dist.barrier()
        t0 = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        t_backward = time.perf_counter()
        if bucketer is not None:
            bucketer.finish()
        t_grads = time.perf_counter()
        optimizer.step()
        t1 = time.perf_counter()
        if i >= args.warmup:
            steps.append(t1 - t0)
            if name == "zero":  # reduce-scatter ran inside backward's end; all-gather in step
                exposed.append(float("nan"))
            elif bucketer is not None:
                exposed.append(t_grads - t_backward)
            elif hook is not None:
                last = max(e["launched"] for e in list(hook.events)[-8:])
                exposed.append(t_backward - last)
            else:
                exposed.append(float("nan"))
            sent.append((stats.bytes_sent - before) if stats else float("nan"))
    steps = _sync_time(steps)
    exposed = _sync_time(exposed)
    if bucketer is not None:
        buckets = bucketer.buckets
        bucketer.remove()
    else:
        buckets = None
    if hook is not None:
        hook.communicator.close()
    if name == "zero":
        optimizer.remove()
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"variant": name, "step_s": statistics.median(steps),
            "exposed_s": statistics.median(exposed) if exposed[0] == exposed[0] else None,
            "bytes_per_step": statistics.median(sent) if sent[0] == sent[0] else None,
            "grad_bytes": grad_bytes, "buckets": buckets}


def worker(rank, world_size, args):
    args = argparse.Namespace(**args)
    return [_variant(v, rank, world_size, args) for v in args.variants]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--batch", type=int, default=64, help="samples per rank")
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bucket-cap-mb", type=float, default=4.0)
    parser.add_argument("--first-bucket-mb", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads per process")
    parser.add_argument("--variants", default="compute,overlap,after,ddp-hook,ddp-gloo,zero")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from ringccl.torch.launch import launch

    options = dict(vars(args), variants=args.variants.split(","))
    rows = launch(worker, args.nproc, options, timeout=1200, threads=args.threads)[0]
    n = args.nproc
    grad_bytes = rows[0]["grad_bytes"]
    params = grad_bytes // 4
    padded = -(-params // n) * n * 4
    closed = {"all_reduce": 2 * (n - 1) / n * grad_bytes,
              "zero": 2 * (n - 1) / n * padded}
    compute = next((r["step_s"] for r in rows if r["variant"] == "compute"), None)
    for r in rows:
        model = closed["zero"] if r["variant"] == "zero" else closed["all_reduce"]
        r["closed_form_bytes"] = model if r["variant"] != "compute" else 0
        r["comm_overhead_s"] = None if compute is None else r["step_s"] - compute
    if args.json:
        print(json.dumps({"nproc": n, "grad_bytes": grad_bytes, "rows": rows}, indent=2))
        return 0
    print(f"MLP {args.depth}x{args.width} ({params:,} parameters, {grad_bytes / 2**20:.1f} MiB of "
          f"fp32 gradients) on {n} gloo processes, batch {args.batch}/rank, buckets "
          f"{args.first_bucket_mb:g}/{args.bucket_cap_mb:g} MiB; medians of {args.steps} steps")
    header = (f"{'variant':<10}{'step ms':>10}{'over compute':>14}{'exposed comm ms':>17}"
              f"{'sent/step MiB':>15}{'closed form MiB':>17}{'ratio':>8}")
    print(header)
    def ms(value, sign=""):
        return "-" if value is None else f"{value * 1e3:{sign}.1f}"

    for r in rows:
        sent, closed_b = r["bytes_per_step"], r["closed_form_bytes"]
        ratio = f"{sent / closed_b:.4f}" if sent and closed_b else "-"
        print(f"{r['variant']:<10}{ms(r['step_s']):>10}{ms(r['comm_overhead_s'], '+'):>14}"
              f"{ms(r['exposed_s']):>17}{'-' if sent is None else f'{sent / 2**20:.3f}':>15}"
              f"{closed_b / 2**20:>17.3f}{ratio:>8}")
    print("exposed comm: end of backward -> averaged grads in place (ddp-hook: last bucket "
          "launched -> backward returned); zero: see step time.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
