"""Does cutting the MoE dispatch into micro-chunks hide it behind the expert GEMMs?

Measured on N local gloo processes: Zipf-skewed top-k routing of T random
tokens per rank over E expert MLPs (:func:`ringccl.training.moe_run.scale_worker`), timed

* ``unsplit``    dispatch (counts + tokens all-to-all), every local expert, combine;
* ``C chunks``   the tokens cut into C micro-chunks; chunk c+1 dispatched and chunk c-1
                 combined on the background communicator while the experts compute chunk c.

Reported per C: the slowest rank's median time of both, the measured speedup, and the
planner's MoE overlap model (``ringccl.planner.step.exposed_seconds``: the experts' time W plus
each all-to-all exposed against W/2 in C pieces) computed from the unsplit run's measured
dispatch, experts and combine — both numbers, whatever they are. ``--plot`` draws the per-rank
comm and compute lanes of the largest C.

Usage: python benchmarks/bench_moe_overlap.py [--nproc 4] [--tokens 4096] [--chunks 1,2,4,8]
       [--plot moe_overlap.png] [--json]
Figures depend on the machine: with fewer cores than processes x 2, the communicator thread and
the expert GEMMs share the same CPUs, so the pipeline has little or nothing to hide behind.
"""

from __future__ import annotations

import argparse
import json

from ringccl.cli.moe import overlap_model, plot_timelines
from ringccl.resources import usable_cores
from ringccl.torch.launch import launch
from ringccl.training.moe_run import ScaleConfig, scale_worker


def _worker(rank, world_size, config):
    import torch
    torch.set_num_threads(1)
    return scale_worker(rank, world_size, config)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden-size", type=int, default=256)
    ap.add_argument("--ffn-hidden-size", type=int, default=1024)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--skew", type=float, default=1.0)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--chunks", default="1,2,4,8")
    ap.add_argument("--plot", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows, last = [], None
    for chunks in [int(c) for c in args.chunks.split(",")]:
        cfg = ScaleConfig(tokens=args.tokens, hidden_size=args.hidden_size,
                          ffn_hidden_size=args.ffn_hidden_size, num_experts=args.experts,
                          top_k=args.top_k, capacity_factor=None, skew=args.skew,
                          iters=args.iters, num_chunks=chunks).validate(args.nproc)
        results = launch(_worker, args.nproc, dict(vars(cfg)), timeout=900)
        slow = {k: max(r["seconds"][k] for r in results) for k in results[0]["seconds"]}
        model = overlap_model(slow, chunks)
        rows.append({"chunks": chunks, **{f"{k}_s": v for k, v in slow.items()},
                     "speedup": slow["unsplit"] / slow["pipelined"],
                     "model_pipelined_s": model, "model_speedup": slow["unsplit"] / model})
        last = (chunks, results)
    if args.plot and last:
        plot_timelines(last[1], args.plot, f"bench_moe_overlap: {args.nproc} processes on "
                       f"{usable_cores()} cores, {args.tokens} tokens/rank, {last[0]} chunks")
    if args.json:
        print(json.dumps({"nproc": args.nproc, "cores": usable_cores(), "rows": rows}, indent=1))
        return
    print(f"MoE dispatch overlap: {args.nproc} gloo processes on {usable_cores()} usable cores, "
          f"{args.tokens} tokens x {args.hidden_size} per rank, {args.experts} experts "
          f"(MLP {args.hidden_size}-{args.ffn_hidden_size}), top-{args.top_k}, Zipf skew "
          f"{args.skew:g}, no capacity limit; slowest rank, medians of {args.iters}")
    print(f"{'chunks':>6} {'dispatch':>9} {'experts':>9} {'combine':>9} {'unsplit':>9} "
          f"{'pipelined':>10} {'speedup':>8} {'model':>9} {'model x':>8}")
    for r in rows:
        print(f"{r['chunks']:>6} {r['dispatch_s'] * 1e3:>7.2f}ms {r['experts_s'] * 1e3:>7.2f}ms "
              f"{r['combine_s'] * 1e3:>7.2f}ms {r['unsplit_s'] * 1e3:>7.2f}ms "
              f"{r['pipelined_s'] * 1e3:>8.2f}ms {r['speedup']:>7.2f}x "
              f"{r['model_pipelined_s'] * 1e3:>7.2f}ms {r['model_speedup']:>7.2f}x")
    if args.plot:
        print(f"timeline written to {args.plot}")


if __name__ == "__main__":
    main()
