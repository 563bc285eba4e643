"""A/B of the shm executor's seeded reduces (``ringccl.engine.staged.PlanRanges.seeded``: a
reduce that is the first to touch its chunk computes ``dst = caller ⊕ peer`` from the caller's
tensor) against copying that chunk into the slot first and reducing in place (what the
executor did before), interleaved call by call in one run, so both see the same machine load.

The "copied-in" variant is the same code with ``plan_ranges`` answering no seeded reduces and
the up-front copy they replace; results are checked equal. Median of ``--reps`` per variant,
max over ranks; two_shot all_reduce (from ``shm_two_shot_bytes``) and direct
reduce_scatter_tensor, default ``restore``.

    python benchmarks/bench_shm_seeded.py [--nproc 2] [--sizes 4MiB,16MiB,64MiB] [--reps 11]
        [--json]

Figures for the note only; never timed asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from ringccl import units  # noqa: E402
from ringccl.cli.sizes import size_list  # noqa: E402


def worker(rank, world_size, sizes, reps):
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt
    from ringccl.engine import staged

    real, seed = staged.plan_ranges, [True]

    def plan_ranges(plan):
        r = real(plan)
        if seed[0]:
            return r
        return r._replace(seeded=(), upfront=staged._upfront(plan, r.lazy, frozenset()))
    staged.plan_ranges = plan_ranges   # the executor looks it up per call
    rows = []
    for nbytes in sizes:
        count = nbytes // 4 // world_size * world_size
        x = torch.randint(-8, 8, (count,)).float()
        out = torch.empty(count // world_size)
        # timed in place on one buffer (its values grow by world_size per call: exact and
        # finite for these counts); the check runs each variant on a copy of the input
        calls = {"all_reduce": lambda a: rt.all_reduce(a),
                 "reduce_scatter": lambda a: rt.reduce_scatter_tensor(out, a) is None or out}
        for name, call in calls.items():
            results = []
            for variant in (True, False):       # warm-up, and the results compared
                seed[0] = variant
                results.append(call(x.clone()).clone())
            same = bool(torch.equal(results[0], results[1]))
            fn = lambda: call(x)   # noqa: E731
            times = {True: [], False: []}
            for _ in range(reps):
                for variant in (True, False):
                    seed[0] = variant
                    dist.barrier()
                    t0 = time.perf_counter()
                    fn()
                    times[variant].append(time.perf_counter() - t0)
            t = torch.tensor([statistics.median(times[True]), statistics.median(times[False]),
                              float(not same)])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            rows.append({"collective": name, "nbytes": nbytes, "seeded_s": t[0].item(),
                         "copied_in_s": t[1].item(), "equal": t[2].item() == 0})
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--sizes", default="4MiB,16MiB,64MiB",
                        type=lambda text: size_list(text, whole_bytes=True),
                        help="sizes as ringccl's --size lists take them (4MiB,16MiB or "
                        "4MiB:64MiB:4)")
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from ringccl.torch.launch import launch
    sizes = args.sizes
    load = os.getloadavg()
    rows = launch(worker, args.nproc, sizes, max(1, args.reps), timeout=1800,
                  worker_bytes=8 * max(sizes))[0]
    if args.json:
        print(json.dumps({"nproc": args.nproc, "load_before": load, "rows": rows}, indent=1))
        return
    print(f"{args.nproc} processes, median of {args.reps} interleaved calls per variant, max "
          f"over ranks; load {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"{'collective':<16}{'size':>10}{'seeded ms':>12}{'copied-in ms':>14}{'ratio':>8}"
          f"{'equal':>7}")
    for r in rows:
        print(f"{r['collective']:<16}{units.format_size(r['nbytes']):>10}"
              f"{r['seeded_s'] * 1e3:>12.3f}{r['copied_in_s'] * 1e3:>14.3f}"
              f"{r['copied_in_s'] / r['seeded_s']:>8.2f}{str(r['equal']):>7}")


if __name__ == "__main__":
    main()
