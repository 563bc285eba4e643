"""The README's chart: measured all_reduce busbw per size, with the fitted α-β-γ model beside it.

Runs ``ringccl bench all_reduce`` on ``--nproc`` local processes for each backend (ring and
builtin, 4 KiB–64 MiB float32, best placement per size), fits α, β, γ to each backend's ring
rows (``ringccl.fit.fit_rows``, in-place rows plus the local-reduce calibration) and draws the
measured busbw as markers and the model's ring busbw as a line. Writes the PNG, prints the fits
and saves the rows (``--rows``) so the chart can be redrawn with ``--from-rows``.

    python benchmarks/plot_busbw.py [--backends mpi gloo] [--nproc 2] [--out docs/busbw.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ringccl import units
from ringccl.bench import BUILTIN, BenchSpec, best_placement
from ringccl.costmodel.fit import fit_rows

NAMES = {"mpi": ("ringccl ring over MPI", "MPI_Allreduce"),
         "gloo": ("ringccl ring over gloo", "gloo all_reduce")}


def measure(backend: str, nproc: int, args) -> list[dict]:
    spec = BenchSpec("all_reduce", ("ring", BUILTIN), units.size(args.b), units.size(args.e),
                     args.f, args.iters, args.warmup, backend=backend)
    if backend == "mpi":
        from ringccl.backends.mpi.launch import launch_bench
        return launch_bench(spec, nproc, timeout=1800)
    from ringccl.backends.torch.runner import launch_sweep
    return launch_sweep(spec, nproc, timeout=1800)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["mpi", "gloo"])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("-b", default="4KiB")
    parser.add_argument("-e", default="64MiB")
    parser.add_argument("-f", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default="docs/busbw.png")
    parser.add_argument("--rows", help="save the measured rows to this JSON file")
    parser.add_argument("--from-rows", help="redraw from a JSON file saved with --rows")
    args = parser.parse_args()
    if args.from_rows:
        rows = json.loads(Path(args.from_rows).read_text())["rows"]
    else:
        rows = [r for b in args.backends for r in measure(b, args.nproc, args)]
    if args.rows:
        Path(args.rows).write_text(json.dumps({"rows": rows}))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {"mpi": "tab:blue", "gloo": "tab:orange"}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        sel = [r for r in rows if r["backend"] == backend]
        fit = fit_rows(sel, backend)
        n = sel[0]["world_size"]
        print(f"{backend}: α = {fit.alpha * 1e6:.2f} us, β = {fit.beta * 1e9:.4f} ns/B "
              f"(1/β = {1e-9 / fit.beta if fit.beta else float('inf'):.2f} GB/s), "
              f"γ = {fit.gamma * 1e9:.4f} ns/B, R² (log) = {fit.r2_log:.3f}")
        best = best_placement(sel)
        ours, theirs = NAMES.get(backend, (f"ring ({backend})", f"builtin ({backend})"))
        for algorithm, name, marker in (("ring", ours, "o"), (BUILTIN, theirs, "s")):
            pts = sorted((r["size"], r["busbw"] / 1e9) for r in best if r["algorithm"] == algorithm)
            ax.plot(*zip(*pts), marker, color=colors.get(backend),
                    mfc="none" if algorithm == BUILTIN else None, label=f"{name} (measured)")
        sizes = np.geomspace(min(r["size"] for r in sel), max(r["size"] for r in sel), 100)
        model = [s / fit.time("all_reduce", "ring", n, s) * 2 * (n - 1) / n / 1e9 for s in sizes]
        ax.plot(sizes, model, "-", color=colors.get(backend), alpha=0.6,
                label=f"ring model ({backend}): α={fit.alpha * 1e6:.0f} µs, "
                f"1/β={1e-9 / fit.beta if fit.beta else float('inf'):.2f} GB/s, "
                f"1/γ={1e-9 / fit.gamma if fit.gamma else float('inf'):.1f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s = 1e9 B/s)")
    ax.set_title(f"all_reduce float32, {n} local processes, 2-core machine")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
