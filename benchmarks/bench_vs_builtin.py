"""ringccl's ring all_reduce next to the backend's own (gloo's dist.all_reduce, MPI_Allreduce).

Each run is one ``ringccl bench all_reduce`` sweep (1–64 MiB float32, both placements, ring and
builtin measured at every size before the next size), so the ratio of one run compares the two
under the same machine load. The figure is, per size, the busbw ratio ringccl ring / builtin,
each at its best placement (the faster of in place and out of place), median over ``--runs``
runs (min–max in brackets). 2 and 4 processes are reported separately: 4 processes
oversubscribe a 2-core machine.

``--segments 0,1MiB,…`` adds the ring once per pipelining segment size ("auto" is the executor's
own threshold, 0 never splits), to show where segmenting pays. ``--no-restore`` measures
ringccl.torch without its all-or-nothing backup copy (what gloo's own all_reduce promises).

    python benchmarks/bench_vs_builtin.py --backend mpi [--nproc 2 4] [--runs 3]
        [--segments auto,0] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics

from ringccl import units
from ringccl.bench import BUILTIN, BenchSpec, best_placement

BUILTIN_NAME = {"mpi": "MPI_Allreduce", "gloo": "gloo all_reduce", "nccl": "NCCL all_reduce"}


def launch(spec: BenchSpec, nproc: int) -> list[dict]:
    """One sweep on ``nproc`` fresh local processes of ``spec.backend``."""
    if spec.backend == "mpi":
        from ringccl.backends.mpi.launch import launch_bench
        return launch_bench(spec, nproc, timeout=1800)
    from ringccl.backends.torch.runner import launch_sweep
    return launch_sweep(spec, nproc, timeout=1800)


def label(r: dict) -> str:
    if r["algorithm"] == BUILTIN:
        return BUILTIN_NAME.get(r["backend"], BUILTIN)
    seg = r["segment_bytes"]
    return r["algorithm"] + ("" if seg is None else
                             f" seg={'off' if seg == 0 else units.format_size(seg, 0)}")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["gloo", "mpi", "nccl"], default="mpi")
    parser.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("-b", default="1MiB", help="smallest size (default 1MiB)")
    parser.add_argument("-e", default="64MiB", help="largest size (default 64MiB)")
    parser.add_argument("-f", type=int, default=2, help="size factor (default 2)")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--segments", default="auto",
                        help="ring pipelining settings, comma-separated: auto, 0 or sizes")
    parser.add_argument("--no-restore", action="store_true",
                        help="gloo: measure ringccl with restore=False (no rollback backup)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", help="write a PNG of median busbw vs size")
    args = parser.parse_args(argv)
    segments = tuple(None if s == "auto" else units.size(s) for s in args.segments.split(","))
    results = []
    for nproc in args.nproc:
        spec = BenchSpec("all_reduce", ("ring", BUILTIN), units.size(args.b), units.size(args.e),
                         args.f, args.iters, args.warmup, segment_bytes=segments,
                         backend=args.backend, calibrate=False, restore=not args.no_restore)
        runs = [best_placement(launch(spec, nproc)) for _ in range(args.runs)]
        for size in sorted({r["size"] for r in runs[0]}):
            per_run = [{label(r): r for r in run if r["size"] == size} for run in runs]
            builtin = BUILTIN_NAME[args.backend]
            ref = [p[builtin]["busbw"] for p in per_run]
            for name in per_run[0]:
                bw = [p[name]["busbw"] for p in per_run]
                ratio = [b / m for b, m in zip(bw, ref)]
                results.append({"backend": args.backend, "nproc": nproc, "size": size,
                                "impl": name, "busbw_median": statistics.median(bw),
                                "ratio_median": statistics.median(ratio),
                                "ratio_min": min(ratio), "ratio_max": max(ratio),
                                "placements": [p[name]["placement"] for p in per_run],
                                "wrong": sum(p[name]["wrong"] or 0 for p in per_run)})
    if args.plot:
        _plot(results, args.plot)
    if args.json:
        print(json.dumps(results, indent=2))
        return results
    print(f"all_reduce float32 on {args.backend}: busbw (GB/s = 1e9 B/s) at the best placement, "
          f"median of {args.runs} runs; ratio = busbw / {BUILTIN_NAME[args.backend]} busbw in "
          "the same run")
    print(f"{'nproc':>5} {'size':>10}  {'implementation':<18} {'busbw':>7} {'ratio':>6} "
          f"{'[min-max]':>13} {'#wrong':>6}")
    for r in results:
        print(f"{r['nproc']:>5} {units.format_size(r['size']):>10}  {r['impl']:<18} "
              f"{r['busbw_median'] / 1e9:>7.3f} {r['ratio_median']:>5.2f}x "
              f"[{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] {r['wrong']:>6}")
    return results


def _plot(results: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for key in dict.fromkeys((r["nproc"], r["impl"]) for r in results):
        sel = [r for r in results if (r["nproc"], r["impl"]) == key]
        ax.plot([r["size"] for r in sel], [r["busbw_median"] / 1e9 for r in sel], "o-",
                label=f"{key[1]}, {key[0]} procs")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s = 1e9 B/s)")
    ax.set_title(f"all_reduce on {results[0]['backend']}, median of runs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
