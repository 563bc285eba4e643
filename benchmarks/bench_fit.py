"""Held-out error of the α-β-γ fit on MPI: fit on ring all_reduce, predict reduce_scatter and
all_gather.

Each run measures three sweeps on the same number of MPI processes (``ringccl bench`` with
``--backend mpi``, ring only, in place, 4 KiB–64 MiB float32): all_reduce with its local-reduce
calibration rows, then reduce_scatter and all_gather. ``ringccl.fit.held_out`` fits α, β, γ on
the all_reduce sweep (plus the calibration) and predicts the other two sweeps' measured times
through their closed forms. Printed: the relative error per size of each held-out sweep (median
over ``--runs`` runs) and the median |error| over sizes >= ``--min-size`` (64 KiB), per run and
its median. 2 and 4 processes are reported separately.

    python benchmarks/bench_fit.py [--nproc 2 4] [--runs 3] [--json] [--save DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from ringccl import units
from ringccl.bench import BenchSpec
from ringccl.costmodel.fit import held_out
from ringccl.backends.mpi.launch import launch_bench

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


def measure(nproc: int, args) -> list[dict]:
    rows = []
    for collective in COLLECTIVES:
        spec = BenchSpec(collective, ("ring",), units.size(args.b), units.size(args.e), args.f,
                         args.iters, args.warmup, placements=("in-place",), backend="mpi",
                         calibrate=collective == "all_reduce")
        rows += launch_bench(spec, nproc, timeout=1800)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-b", default="4KiB")
    parser.add_argument("-e", default="64MiB")
    parser.add_argument("-f", type=int, default=4)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-size", default="64KiB")
    parser.add_argument("--save", help="also write each run's rows as JSON into this folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    min_size = units.size(args.min_size)
    report = []
    for nproc in args.nproc:
        helds = []
        for run in range(args.runs):
            rows = measure(nproc, args)
            if args.save:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                Path(args.save, f"mpi_{nproc}p_run{run}.json").write_text(
                    json.dumps({"rows": rows}))
            helds.append(held_out(rows, train="all_reduce:ring", backend="mpi"))
        per_size = {}
        for held in helds:
            for sweep, points in held.sweeps.items():
                for size, measured, predicted, error in points:
                    per_size.setdefault((sweep, size), []).append(error)
        medians = [h.median_error(min_size) for h in helds]
        report.append({
            "nproc": nproc, "runs": args.runs,
            "fits": [{"alpha": h.fit.alpha, "beta": h.fit.beta, "gamma": h.fit.gamma,
                      "r2_log": h.fit.r2_log} for h in helds],
            "median_abs_error_per_run": medians,
            "median_abs_error": statistics.median(medians),
            "error_per_size": [{"sweep": s, "size": size, "median_error": statistics.median(e)}
                               for (s, size), e in per_size.items()]})
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for r in report:
        print(f"\n{r['nproc']} MPI processes: fit on ring all_reduce (+ local-reduce rows), "
              f"predict ring reduce_scatter and all_gather; median of {r['runs']} runs")
        for f in r["fits"]:
            print(f"  fit: α = {f['alpha'] * 1e6:.2f} us, β = {f['beta'] * 1e9:.4f} ns/B "
                  f"({1e-9 / f['beta'] if f['beta'] else float('inf'):.2f} GB/s), "
                  f"γ = {f['gamma'] * 1e9:.4f} ns/B, R² (log) = {f['r2_log']:.3f}")
        print(f"  {'held-out sweep':<32} {'size':>10} {'error':>8}")
        for e in r["error_per_size"]:
            print(f"  {e['sweep']:<32} {units.format_size(e['size']):>10} "
                  f"{e['median_error'] * 100:>+7.1f}%")
        print(f"  median |error| for sizes >= {args.min_size}: "
              f"{r['median_abs_error'] * 100:.1f}% (per run: "
              f"{', '.join(f'{m * 100:.1f}%' for m in r['median_abs_error_per_run'])})")


if __name__ == "__main__":
    main()
