"""``dist.all_reduce`` through the "ringccl" backend next to gloo's, and a DDP training step.

All in one launch of ``--nproc`` processes whose default group is ringccl's, with a gloo group
and a second ringccl group in caller-thread mode (``RINGCCL_BACKEND_THREAD=0``) over the same
ranks, so every variant is measured under the same machine load, interleaved: per repetition,
every variant once at each size, then the next repetition. Variants:

* ``gloo``: gloo's own ``dist.all_reduce``.
* ``ringccl``: ``dist.all_reduce`` on the ringccl group (worker thread; the default).
* ``ringccl-inline``: the same, run in the calling thread (completed Work).
* ``ringccl.torch``: ``ringccl.torch.all_reduce`` on the gloo group (same schedule and transport,
  no torch.distributed dispatch): the backend's dispatch overhead is ``ringccl`` minus this.

The DDP step (forward, backward with DDP's bucketed all-reduce, SGD step) uses an MLP of about
25M float32 parameters, so the gradient all-reduce (~100 MB) dominates. Figures are medians of
``--reps`` (min–max kept in the JSON); never timed asserts.

    python benchmarks/bench_backend.py [--nproc 4] [--reps 5] [--sizes 4KiB:64MiB]
        [--ddp-steps 5] [--json]
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


def _worker(rank, world_size, sizes, reps, ddp_steps, ddp_hidden):
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt

    gloo = dist.new_group(backend="gloo")
    os.environ["RINGCCL_BACKEND_THREAD"] = "0"
    inline = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_BACKEND_THREAD"]
    variants = {
        "gloo": lambda t: dist.all_reduce(t, group=gloo),
        "ringccl": lambda t: dist.all_reduce(t),
        "ringccl-inline": lambda t: dist.all_reduce(t, group=inline),
        "ringccl.torch": lambda t: rt.all_reduce(t, group=gloo),
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
    steps = {}
    if ddp_steps:
        from torch.nn.parallel import DistributedDataParallel as DDP
        for name, group in (("gloo", gloo), ("ringccl", None), ("ringccl-inline", inline)):
            torch.manual_seed(0)
            h = ddp_hidden
            model = DDP(torch.nn.Sequential(torch.nn.Linear(h, h), torch.nn.ReLU(),
                                            torch.nn.Linear(h, h), torch.nn.ReLU(),
                                            torch.nn.Linear(h, h)), process_group=group)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            x = torch.randn(8, h)
            ts = []
            for step in range(ddp_steps + 1):
                dist.barrier(group=gloo)
                t0 = time.perf_counter()
                model(x).square().mean().backward()
                opt.step()
                opt.zero_grad()
                if step:
                    ts.append(time.perf_counter() - t0)
            steps[name] = {"seconds": statistics.median(ts), "min": min(ts), "max": max(ts),
                           "parameters": sum(p.numel() for p in model.parameters())}
            del model, opt
    return {"rows": rows, "ddp": steps} if rank == 0 else None


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes", default="4KiB:64MiB")
    parser.add_argument("--ddp-steps", type=int, default=5)
    parser.add_argument("--ddp-hidden", type=int, default=2900,
                        help="MLP width; 3 layers of width^2 (2900: 25.2M parameters)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from ringccl.torch.launch import launch
    result = launch(_worker, args.nproc, _sizes(args.sizes), args.reps, args.ddp_steps,
                    args.ddp_hidden, backend="ringccl", timeout=3000,
                    worker_bytes=6 * 4 * 3 * args.ddp_hidden ** 2)[0]
    result["nproc"] = args.nproc
    if args.json:
        print(json.dumps(result, indent=1))
        return
    by = {(r["variant"], r["nbytes"]): r["seconds"] for r in result["rows"]}
    print(f"dist.all_reduce, {args.nproc} processes, median of {args.reps} (µs; ratio gloo/x)")
    print(f"{'size':>10} {'gloo':>10} {'ringccl':>10} {'inline':>10} {'rt direct':>10} "
          f"{'gloo/ringccl':>12} {'dispatch':>9}")
    for n in sorted({r["nbytes"] for r in result["rows"]}):
        g, r, i, d = (by[(v, n)] for v in ("gloo", "ringccl", "ringccl-inline", "ringccl.torch"))
        print(f"{n:>10} {g * 1e6:>10.0f} {r * 1e6:>10.0f} {i * 1e6:>10.0f} {d * 1e6:>10.0f} "
              f"{g / r:>12.2f} {(r - d) * 1e6:>9.0f}")
    for name, s in result["ddp"].items():
        print(f"DDP step ({s['parameters'] / 1e6:.1f}M parameters) {name}: "
              f"{s['seconds'] * 1e3:.0f} ms (min {s['min'] * 1e3:.0f}, max {s['max'] * 1e3:.0f})")


if __name__ == "__main__":
    main()
