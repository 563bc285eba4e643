"""Simulator speed: ring all_reduce on N virtual ranks next to np.sum(axis=0) on the same array.

The ring necessarily moves about 4x the memory traffic of a plain sum (a reduce-scatter reads two
chunks and writes one per step, the all-gather copies; the inputs are read in place until first
written), so the ratio is the figure of merit. Three variants: the default call (fresh output, reference check on: what
``ringccl.simulate("all_reduce", x)`` costs), the executor alone (``check=False``; a fresh output
pays the page faults of allocating world_size x count elements) and a preallocated ``out=``
reused across calls. Every figure is the median of --repeat runs, np.sum measured in the same run.
Targets: default call <= 10x np.sum, check=False <= 6x, for the first two shapes.

    python benchmarks/bench_sim.py [--repeat 5] [--json] [--plot sim.png]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import ringccl

CASES = [(64, 1 << 20), (256, 1 << 18), (8, 1 << 22)]


def _median_times(fns: dict, repeat: int) -> dict:
    """Median seconds of each of ``fns``, the runs interleaved (one of each per round), so a
    change in the machine's load during the benchmark shifts all of them alike."""
    for fn in fns.values():
        fn()  # warm-up: compiles the step plan, faults in pages
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per median (>= 3)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", help="write a PNG bar chart of the ratios")
    args = parser.parse_args()
    if args.repeat < 3:
        parser.error(f"--repeat={args.repeat}: the medians need at least 3 runs")
    rows = []
    for n, count in CASES:
        x = np.random.default_rng(0).standard_normal((n, count), dtype=np.float32)
        out = np.zeros_like(x)
        t = _median_times({
            "sum": lambda: x.sum(axis=0),
            "check": lambda: ringccl.simulate("all_reduce", x),
            "fresh": lambda: ringccl.simulate("all_reduce", x, check=False),
            "out": lambda: ringccl.simulate("all_reduce", x, check=False, out=out)}, args.repeat)
        t_sum, t_check, t_fresh, t_out = t["sum"], t["check"], t["fresh"], t["out"]
        ok = ringccl.simulate("all_reduce", x).matches_reference
        rows.append({"world_size": n, "count": count, "np_sum_s": t_sum, "sim_check_s": t_check,
                     "sim_fresh_s": t_fresh, "sim_out_s": t_out, "ratio_check": t_check / t_sum,
                     "ratio_fresh": t_fresh / t_sum,
                     "ratio_out": t_out / t_sum, "matches_reference": bool(ok)})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"float32 ring all_reduce, median of {args.repeat} interleaved runs; "
              "ratio = time / np.sum(axis=0)")
        print(f"{'ranks x count':>16} {'np.sum':>10} {'sim (check)':>12} {'ratio':>6} "
              f"{'check=False':>12} {'ratio':>6} {'out=':>9} {'ratio':>6}  verified")
        for r in rows:
            print(f"{r['world_size']:>5} x {ringccl.units.format_count(r['count']):>8} "
                  f"{r['np_sum_s'] * 1e3:>8.1f}ms {r['sim_check_s'] * 1e3:>10.1f}ms "
                  f"{r['ratio_check']:>5.1f}x {r['sim_fresh_s'] * 1e3:>10.1f}ms "
                  f"{r['ratio_fresh']:>5.1f}x {r['sim_out_s'] * 1e3:>7.1f}ms "
                  f"{r['ratio_out']:>5.1f}x  {r['matches_reference']}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels = [f"{r['world_size']}×{ringccl.units.format_count(r['count'])}" for r in rows]
        pos = np.arange(len(rows))
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.bar(pos - 0.27, [r["ratio_check"] for r in rows], 0.27, label="default (check)")
        ax.bar(pos, [r["ratio_fresh"] for r in rows], 0.27, label="check=False")
        ax.bar(pos + 0.27, [r["ratio_out"] for r in rows], 0.27, label="check=False, out=")
        ax.set_xticks(pos, labels)
        ax.set_ylabel("time / np.sum(axis=0)")
        ax.set_title("ring all_reduce simulator vs np.sum (float32)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
