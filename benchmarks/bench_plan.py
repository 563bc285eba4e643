"""Time the planner: one plan, the layout search on 1,024 and 16,384 GPUs, and how many layouts
a second the search prices on one core against the full step estimate of each (the baseline,
in the same run, interleaved). Figures, not asserts: run it and read them.

    PYTHONPATH=src python benchmarks/bench_plan.py              # everything (minutes)
    PYTHONPATH=src python benchmarks/bench_plan.py --only rate  # the pricing rate only
    PYTHONPATH=src python benchmarks/bench_plan.py --profile    # cProfile of the priced search
    PYTHONPATH=src python benchmarks/bench_plan.py --collectives ringccl   # ringccl's schedules

Collectives are priced as NCCL runs them (the planner's default) or, with ``--collectives
ringccl``, by ringccl's own schedules on each group's placement (the α-β walk; slow on groups of
thousands of ranks).

Cold times start from empty caches (``ringccl.clear_caches()``): every group's collective is
priced afresh. The rate is measured warm (the collectives' prices cached, as within one search
after its first layouts), over the 1,024-GPU search's layouts: ``price`` shares the stage
estimates of layouts that differ only in schedule or batch, ``estimate_step`` builds each in
full; both give the same step time and memory (tests/test_plan_search.py).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
from pathlib import Path

import ringccl
from ringccl.planner import cluster_preset, estimate_step, plan, resolve_model, search
from ringccl.planner.model import PRESETS
from ringccl.planner.search import candidates, price

RUNS = Path(__file__).resolve().parent / "published_runs.json"


def timed(label, fn):
    ringccl.clear_caches()          # cold: every group's collective priced again
    t0 = time.perf_counter()
    out = fn()
    print(f"{label}: {time.perf_counter() - t0:.2f} s")
    return out


#: how collectives are priced (``Cluster.collectives``), set from the command line
COLLECTIVES = {"collectives": "nccl"}


def machine(preset: str, nodes: int):
    return cluster_preset(preset, nodes=nodes, **COLLECTIVES)


def searched(label, model, cluster, gbs):
    r = timed(label, lambda: search(model, cluster, global_batch_size=gbs))
    print(f"    {r.tried} layouts: {r.priced} priced, {r.pruned_memory} pruned (memory), "
          f"{r.pruned_slower} pruned (dominated); best: "
          f"{r.plans[0].describe() if r.plans else '-'}")
    return r


def rate(rounds: int = 3) -> None:
    model, cluster = PRESETS["llama3-70b"], machine("dgx-h100", 128)
    layouts = list(candidates(model, 1024, 8, global_batch_size=1024))
    search(model, cluster, global_batch_size=1024)          # warm the collectives' prices
    sample = layouts[::25]
    for d in sample:
        estimate_step(model, d, cluster)
    fast, full = [], []
    for _ in range(rounds):                                   # interleaved
        cache: dict = {}
        t0 = time.perf_counter()
        for d in layouts:
            price(model, d, cluster, cache)
        fast.append(len(layouts) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for d in sample:
            estimate_step(model, d, cluster)
        full.append(len(sample) / (time.perf_counter() - t0))
    print(f"pricing rate, llama3-70b on 1,024 GPUs ({len(layouts)} layouts, {rounds} rounds): "
          f"search price {max(fast):,.0f} layouts/s ({60 * max(fast):,.0f}/min); full "
          f"estimate_step {max(full):,.0f} layouts/s (baseline, {len(sample)} layouts)")


def gpt3_sc21() -> None:
    row = next(r for r in json.loads(RUNS.read_text())["runs"]
               if r["id"] == "sc21-t2-ptdp-175b-1536")
    model, cluster = resolve_model(row["model"]), machine("dgx-a100", 192)
    lay = {k: row["layout"][k] for k in ("tp", "pp", "dp", "schedule", "virtual_stages",
                                         "global_batch_size", "micro_batch_size", "recompute",
                                         "zero_stage", "sp")}
    published = plan(model, lay, cluster)
    r = searched("search gpt3-175b on 1,536 A100s (dgx-a100)", model, cluster, 1536)
    print(f"    SC21 Table 2 PTD-P planned: {published.describe()}")
    print(f"    search's best is {published.step_seconds / r.plans[0].step_seconds:.2f}x "
          "faster (planned)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("plan", "search", "rate", "gpt3"))
    ap.add_argument("--profile", action="store_true", help="cProfile the 1,024-GPU search")
    ap.add_argument("--collectives", choices=("nccl", "ringccl"), default="nccl",
                    help="price collectives as NCCL runs them (default) or by ringccl's "
                    "schedules")
    args = ap.parse_args()
    COLLECTIVES["collectives"] = args.collectives
    print(f"-- collectives priced by {args.collectives}")
    if args.profile:
        model, cluster = PRESETS["llama3-70b"], machine("dgx-h100", 128)
        prof = cProfile.Profile()
        prof.runcall(search, model, cluster, global_batch_size=1024)
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
        return
    if args.only in (None, "plan"):
        p = timed("plan llama3-70b tp8 pp4 dp32 on 128 x dgx-a100", lambda: ringccl.plan(
            "llama3-70b", {"tp": 8, "pp": 4, "dp": 32, "global_batch_size": 1024,
                           "recompute": "selective"}, {"preset": "dgx-a100", "nodes": 128, **COLLECTIVES}))
        print("   ", p.describe())
        q = timed("plan deepseek-v3 pp16 dualpipe dp128 ep64 (4 nodes/token, two hops) on 256 "
                  "x h800", lambda: ringccl.plan(
                      "deepseek-v3", {"pp": 16, "dp": 128, "ep": 64, "schedule": "dualpipe",
                                      "global_batch_size": 15360, "zero_stage": 1,
                                      "moe_router_group_topk": 4,
                                      "moe_token_dispatcher_type": "flex"},
                      {"preset": "h800", "nodes": 256, **COLLECTIVES}))
        print("   ", q.describe())
    if args.only in (None, "search"):
        searched("search llama3-70b on 1,024 GPUs (dgx-h100)", PRESETS["llama3-70b"],
                 machine("dgx-h100", 128), 1024)
        searched("search llama3-405b on 16,384 GPUs (dgx-h100)", PRESETS["llama3-405b"],
                 machine("dgx-h100", 2048), 2048)
    if args.only in (None, "gpt3"):
        gpt3_sc21()
    if args.only in (None, "rate"):
        rate()


if __name__ == "__main__":
    main()
