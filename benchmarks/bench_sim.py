"""Simulator speed: ring all_reduce on N virtual ranks next to np.sum(axis=0) on the same array.

The ring necessarily moves about 5x the memory traffic of a plain sum (a reduce-scatter reads two
chunks and writes one per step, the all-gather copies, plus loading the inputs), so the ratio is
the figure of merit. Two variants: a fresh output each call (pays the page faults of allocating
world_size x count elements) and a preallocated ``out=`` reused across calls.

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


def _median_time(fn, repeat: int) -> float:
    fn()  # warm-up: compiles the step plan, faults in pages
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", help="write a PNG bar chart of the ratios")
    args = parser.parse_args()
    rows = []
    for n, count in CASES:
        x = np.random.default_rng(0).standard_normal((n, count), dtype=np.float32)
        out = np.zeros_like(x)
        t_sum = _median_time(lambda: x.sum(axis=0), args.repeat)
        t_fresh = _median_time(lambda: ringccl.simulate("all_reduce", x, check=False),
                               args.repeat)
        t_out = _median_time(lambda: ringccl.simulate("all_reduce", x, check=False, out=out),
                             args.repeat)
        ok = ringccl.simulate("all_reduce", x).matches_reference
        rows.append({"world_size": n, "count": count, "np_sum_s": t_sum, "sim_fresh_s": t_fresh,
                     "sim_out_s": t_out, "ratio_fresh": t_fresh / t_sum,
                     "ratio_out": t_out / t_sum, "matches_reference": bool(ok)})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'ranks x count':>16} {'np.sum':>10} {'sim (fresh)':>12} {'ratio':>6} "
              f"{'sim (out=)':>11} {'ratio':>6}  verified")
        for r in rows:
            print(f"{r['world_size']:>5} x {ringccl.units.format_count(r['count']):>8} "
                  f"{r['np_sum_s'] * 1e3:>8.1f}ms {r['sim_fresh_s'] * 1e3:>10.1f}ms "
                  f"{r['ratio_fresh']:>5.1f}x {r['sim_out_s'] * 1e3:>9.1f}ms "
                  f"{r['ratio_out']:>5.1f}x  {r['matches_reference']}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        labels = [f"{r['world_size']}×{ringccl.units.format_count(r['count'])}" for r in rows]
        pos = np.arange(len(rows))
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.bar(pos - 0.2, [r["ratio_fresh"] for r in rows], 0.4, label="fresh output")
        ax.bar(pos + 0.2, [r["ratio_out"] for r in rows], 0.4, label="preallocated out=")
        ax.set_xticks(pos, labels)
        ax.set_ylabel("time / np.sum(axis=0)")
        ax.set_title("ring all_reduce simulator vs np.sum (float32)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
