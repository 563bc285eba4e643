"""Back-to-back small all_reduce through torch, as a training loop issues them: per-call µs of
``dist.all_reduce`` on the "ringccl" backend, ``ringccl.torch.all_reduce`` and gloo's
``dist.all_reduce``, interleaved block by block in one launch (same machine load).

Each variant runs ``--blocks`` blocks of ``--calls`` calls (one barrier before each block);
per variant the minimum and the median over blocks of the per-call time on rank 0 are
reported, with the load average before and after. Single calls between barriers (where every
call pays a wake-up) are ``bench_backend.py``'s and ``bench_shm.py``'s figures.

    python benchmarks/bench_torch_calls.py --nproc 2 --bytes 8 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

from ringccl import units  # noqa: E402


def worker(rank, world_size, nbytes, blocks, calls):
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt   # registers "ringccl": the default group is ringccl's

    gloo = dist.new_group(backend="gloo")
    t = torch.ones(max(nbytes // 4, 1))
    variants = {"dist.all_reduce ringccl": lambda: dist.all_reduce(t),
                "ringccl.torch.all_reduce": lambda: rt.all_reduce(t, group=gloo,
                                                                  transport="shm"),
                "dist.all_reduce gloo": lambda: dist.all_reduce(t, group=gloo)}
    for fn in variants.values():   # warm-up: compiles the lanes, sets shared memory up
        for _ in range(300):
            fn()
    times = {name: [] for name in variants}
    for _ in range(blocks):
        for name, fn in variants.items():
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t0) / calls * 1e6)
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--bytes", default="8", help="bytes per all_reduce (e.g. 8, 4KiB)")
    p.add_argument("--blocks", type=int, default=15)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from ringccl.torch.launch import launch

    nbytes = units.size(args.bytes)
    load = [os.getloadavg()[0]]
    runs = launch(worker, args.nproc, nbytes, args.blocks, args.calls, backend="ringccl",
                  timeout=1200)
    load.append(os.getloadavg()[0])
    rows = [{"variant": name, "min_us": min(v), "median_us": statistics.median(v), "blocks": v}
            for name, v in runs[0].items()]
    if args.json:
        print(json.dumps({"nproc": args.nproc, "bytes": nbytes, "calls": args.calls,
                          "load": load, "rows": rows}))
        return 0
    print(f"{nbytes} B all_reduce back to back, {args.nproc} processes, rank 0, "
          f"{args.blocks} blocks x {args.calls} calls; load average before {load[0]:.1f}, "
          f"after {load[1]:.1f}")
    print(f"{'variant':<28}{'min us':>10}{'median us':>12}")
    for r in rows:
        print(f"{r['variant']:<28}{r['min_us']:>10.1f}{r['median_us']:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
