"""``dist.all_reduce`` through the "ringccl" backend next to gloo's; DDP and FSDP2 training steps.

All in one launch of ``--nproc`` processes (one host: the backend runs over shared memory)
whose default group is ringccl's, with a gloo group, a second ringccl group in caller-thread
mode (``RINGCCL_BACKEND_THREAD=0``) and a third forced onto gloo point-to-point
(``RINGCCL_TRANSPORT=p2p``) over the same ranks, so every variant is measured under the same
machine load, interleaved: per repetition, every variant once at each size, then the next
repetition. Variants:

* ``gloo``: gloo's own ``dist.all_reduce``.
* ``ringccl``: ``dist.all_reduce`` on the ringccl group (shared memory, worker thread: the
  default).
* ``ringccl-inline``: the same, run in the calling thread (completed Work).
* ``ringccl-p2p``: the backend over gloo point-to-point (what it runs across hosts).
* ``ringccl.torch``: ``ringccl.torch.all_reduce(t, group=gloo, transport="shm")`` (the same
  algorithm choice and transport, no torch.distributed dispatch, no worker thread): the
  backend's dispatch overhead is ``ringccl`` minus this (``ringccl-inline`` minus this: without
  the thread hand-off).

The DDP step (forward, backward with DDP's bucketed all-reduce, SGD step) uses an MLP of about
25M float32 parameters, so the gradient all-reduce (~100 MB) dominates; the FSDP2 step
(``fully_shard`` on each layer and the model: all-gathers of the parameters, reduce-scatters of
the gradients) the same MLP. Figures are medians of ``--reps`` (min–max kept in the JSON),
with the load average before and after the run; never timed asserts.

    python benchmarks/bench_backend.py [--nproc 4] [--reps 5] [--sizes 4KiB:64MiB]
        [--ddp-steps 5] [--no-fsdp] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def _sizes(spec: str) -> list[int]:
    from ringccl import units
    lo, _, hi = spec.partition(":")
    lo_b, hi_b = int(units.size(lo)), int(units.size(hi or lo))
    out, s = [], lo_b
    while s <= hi_b:
        out.append(s)
        s *= 4
    return out


def _mlp(h: int):
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(h, h), torch.nn.ReLU(), torch.nn.Linear(h, h),
                               torch.nn.ReLU(), torch.nn.Linear(h, h))


def _step_times(model, opt, x, steps: int, barrier) -> dict:
    """Median/min/max seconds of ``steps`` training steps (one more first, as warm-up)."""
    ts = []
    for step in range(steps + 1):
        barrier()
        t0 = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if step:
            ts.append(time.perf_counter() - t0)
    return {"seconds": statistics.median(ts), "min": min(ts), "max": max(ts),
            "parameters": sum(p.numel() for p in model.parameters())}


def _worker(rank, world_size, sizes, reps, ddp_steps, ddp_hidden, fsdp):
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt

    gloo = dist.new_group(backend="gloo")
    os.environ["RINGCCL_BACKEND_THREAD"] = "0"
    inline = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_BACKEND_THREAD"]
    os.environ["RINGCCL_TRANSPORT"] = "p2p"   # read when the group is created
    p2p = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_TRANSPORT"]
    transports = [dist.distributed_c10d._get_default_group().transport, inline.transport,
                  p2p.transport]
    variants = {
        "gloo": lambda t: dist.all_reduce(t, group=gloo),
        "ringccl": lambda t: dist.all_reduce(t),
        "ringccl-inline": lambda t: dist.all_reduce(t, group=inline),
        "ringccl-p2p": lambda t: dist.all_reduce(t, group=p2p),
        "ringccl.torch": lambda t: rt.all_reduce(t, group=gloo, transport="shm"),
    }
    times = {(v, n): [] for v in variants for n in sizes}
    buffers = {n: torch.ones(n // 4) for n in sizes}
    for rep in range(reps + 1):            # repetition 0 warms up (connections, caches)
        for n in sizes:
            for name, fn in variants.items():
                iters = max(1, min(20, (1 << 22) // n))
                dist.barrier(group=gloo)
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn(buffers[n])
                seconds = (time.perf_counter() - t0) / iters
                if rep:
                    times[(name, n)].append(seconds)
    rows = [{"variant": v, "nbytes": n, "seconds": statistics.median(ts), "min": min(ts),
             "max": max(ts)} for (v, n), ts in times.items()]
    # DDP step, ~25M parameters: 3 layers of ddp_hidden^2
    steps, fsdp_steps = {}, {}
    barrier = lambda: dist.barrier(group=gloo)   # noqa: E731
    x = torch.randn(8, ddp_hidden)
    if ddp_steps:
        from torch.nn.parallel import DistributedDataParallel as DDP
        for name, group in (("gloo", gloo), ("ringccl", None), ("ringccl-inline", inline),
                            ("ringccl-p2p", p2p)):
            model = DDP(_mlp(ddp_hidden), process_group=group)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            steps[name] = _step_times(model, opt, x, ddp_steps, barrier)
            del model, opt
    if ddp_steps and fsdp:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
        for name, group in (("gloo", gloo), ("ringccl", dist.group.WORLD)):
            mesh = DeviceMesh.from_group(group, "cpu")
            model = _mlp(ddp_hidden)
            for layer in model:
                if isinstance(layer, torch.nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            fsdp_steps[name] = _step_times(model, opt, x, ddp_steps, barrier)
            fsdp_steps[name]["parameters"] = 3 * ddp_hidden * (ddp_hidden + 1)
            del model, opt
    return ({"rows": rows, "ddp": steps, "fsdp2": fsdp_steps, "transports": transports}
            if rank == 0 else None)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes", default="4KiB:64MiB")
    parser.add_argument("--ddp-steps", type=int, default=5)
    parser.add_argument("--ddp-hidden", type=int, default=2900,
                        help="MLP width; 3 layers of width^2 (2900: 25.2M parameters)")
    parser.add_argument("--no-fsdp", action="store_true", help="skip the FSDP2 step")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from ringccl.torch.launch import launch
    load_before = os.getloadavg()
    result = launch(_worker, args.nproc, _sizes(args.sizes), args.reps, args.ddp_steps,
                    args.ddp_hidden, not args.no_fsdp, backend="ringccl", timeout=3000,
                    worker_bytes=6 * 4 * 3 * args.ddp_hidden ** 2)[0]
    result["nproc"] = args.nproc
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    by = {(r["variant"], r["nbytes"]): r["seconds"] for r in result["rows"]}
    print(f"dist.all_reduce, {args.nproc} processes, median of {args.reps} (µs; ratio gloo/x); "
          f"transports (ringccl, inline, p2p group): {result['transports']}; load average "
          f"before {result['load_average']['before'][0]:.1f}, after "
          f"{result['load_average']['after'][0]:.1f}")
    print(f"{'size':>10} {'gloo':>9} {'ringccl':>9} {'inline':>9} {'p2p':>9} {'rt shm':>9} "
          f"{'gloo/ringccl':>12} {'gloo/p2p':>8} {'dispatch':>9} {'disp.inl':>9}")
    for n in sorted({r["nbytes"] for r in result["rows"]}):
        g, r, i, p, d = (by[(v, n)] for v in ("gloo", "ringccl", "ringccl-inline",
                                               "ringccl-p2p", "ringccl.torch"))
        print(f"{n:>10} {g * 1e6:>9.0f} {r * 1e6:>9.0f} {i * 1e6:>9.0f} {p * 1e6:>9.0f} "
              f"{d * 1e6:>9.0f} {g / r:>12.2f} {g / p:>8.2f} {(r - d) * 1e6:>9.0f} "
              f"{(i - d) * 1e6:>9.0f}")
    for title, table in (("DDP", result["ddp"]), ("FSDP2", result["fsdp2"])):
        for name, s in table.items():
            print(f"{title} step ({s['parameters'] / 1e6:.1f}M parameters) {name}: "
                  f"{s['seconds'] * 1e3:.0f} ms (min {s['min'] * 1e3:.0f}, "
                  f"max {s['max'] * 1e3:.0f})")


if __name__ == "__main__":
    main()
