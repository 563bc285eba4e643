"""ringccl ring all_reduce busbw next to gloo's own dist.all_reduce, on the same local processes.

Both run in the same processes, on the same data, in the same run, so the ratio is meaningful
even on an oversubscribed 2-core machine (4 processes). Sizes 1 MiB - 64 MiB of float32.

    python benchmarks/bench_torch_ring.py [--nproc 2 4] [--iters 10] [--json] [--plot ring.png]
"""

from __future__ import annotations

import argparse
import json

from ringccl import units
from ringccl.torch.launch import launch
from ringccl.torch.runner import measure

SIZES = ["1MiB", "4MiB", "16MiB", "64MiB"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--sizes", nargs="+", default=SIZES)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", help="write a PNG of busbw vs size")
    args = parser.parse_args()
    rows = []
    try:
        from rich.progress import track
    except ImportError:  # pragma: no cover
        track = lambda it, description="": it  # noqa: E731
    jobs = [(n, s) for n in args.nproc for s in args.sizes]
    for nproc, size in track(jobs, description="benchmarking", transient=True):
        count = units.size(size) // 4
        rows.append(launch(measure, nproc, "all_reduce", "ring", count, "float32", "sum",
                           args.iters, args.warmup, timeout=600)[0])
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'nproc':>5} {'size':>9} {'ringccl busbw':>14} {'gloo busbw':>11} {'ratio':>6} "
              f"{'#wrong':>6}")
        for r in rows:
            print(f"{r['world_size']:>5} {units.format_size(r['size_bytes']):>9} "
                  f"{r['ringccl']['busbw'] / 1e9:>10.3f}GB/s {r['builtin']['busbw'] / 1e9:>7.3f}"
                  f"GB/s {r['busbw_ratio']:>5.2f}x {r['wrong']:>6}")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for nproc in args.nproc:
            sel = [r for r in rows if r["world_size"] == nproc]
            x = [r["size_bytes"] for r in sel]
            ax.plot(x, [r["ringccl"]["busbw"] / 1e9 for r in sel], "o-",
                    label=f"ringccl ring, {nproc} procs")
            ax.plot(x, [r["builtin"]["busbw"] / 1e9 for r in sel], "s--",
                    label=f"gloo all_reduce, {nproc} procs")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title("all_reduce on local gloo processes")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
