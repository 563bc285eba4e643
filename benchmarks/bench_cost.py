"""Cost-model speed: walking big schedules, and the closed form at a million ranks.

Prints, for ring all_reduce: schedule build time and walk time at N = 256 and 1024 on a flat
machine and on a 128 x 8 two-level machine (the walk also prices every later size for free:
the time of pricing a 35-size grid is shown), and the median time of one closed-form
``ringccl.cost`` call at N = 2^20.

    python benchmarks/bench_cost.py [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import ringccl
from ringccl.algorithms import get_algorithm
from ringccl.costmodel.model import walk
from ringccl.costmodel.topology import flat, two_level


def _timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    machines = [("flat", 256, flat(256, "5us", "50GB/s")),
                ("flat", 1024, flat(1024, "5us", "50GB/s")),
                ("two-level 128x8", 1024, two_level(128, 8, intra=("5us", "900GB/s"),
                                                     inter=("5us", "50GB/s")))]
    for label, n, topo in machines:
        build_s, schedule = _timed(lambda: get_algorithm("all_reduce", "ring").builder(n), 1)
        walk_s, result = _timed(lambda: walk(schedule, 2**30, topo), args.repeat)
        p = ringccl.predictor("all_reduce", "ring", None, topo, method="walk")
        grid = 2.0 ** np.arange(2, 37)
        price_s, _ = _timed(lambda: p(grid), args.repeat)
        rows.append({"machine": label, "world_size": n, "transfers": schedule.num_transfers,
                     "build_s": build_s, "walk_s": walk_s, "price_35_sizes_s": price_s,
                     "predicted_ms": result.seconds * 1e3})
    closed_s, r = _timed(lambda: ringccl.cost("all_reduce", "ring", 2**20, "4MiB", alpha="5us",
                                              bandwidth="300GB/s"), 200)
    rows.append({"machine": "flat (closed form)", "world_size": 2**20, "cost_call_s": closed_s,
                 "predicted_ms": r.seconds * 1e3, "method": r.method})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        if "walk_s" in row:
            print(f"ring all_reduce, {row['machine']:>16}, N={row['world_size']:>5}: "
                  f"{row['transfers']:>9,} transfers; build {row['build_s']:.3f} s, walk "
                  f"{row['walk_s']:.3f} s, then 35 sizes priced in "
                  f"{row['price_35_sizes_s'] * 1e3:.2f} ms (1 GiB: {row['predicted_ms']:.2f} ms)")
        else:
            print(f"ring all_reduce, closed form, N={row['world_size']:,}: one ringccl.cost call "
                  f"{row['cost_call_s'] * 1e6:.1f} us (median of 200; 4 MiB: "
                  f"{row['predicted_ms']:.2f} ms)")


if __name__ == "__main__":
    main()
