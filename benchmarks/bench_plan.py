"""Time `ringccl.plan` on the lecture's 70B-on-1,024-GPUs case and the DeepSeek-V3 preset, and
the layout search over 1,024 GPUs, pricing collectives as NCCL runs them (the default) and, in
the same run, with ringccl's own schedules (``--collectives ringccl``, the pricing the planner
used before). Figures, not asserts: run it and read them.

    PYTHONPATH=src python benchmarks/bench_plan.py
"""

from __future__ import annotations

import time

import ringccl
from ringccl.planner import cluster_preset, search
from ringccl.planner.model import PRESETS


def timed(label, fn):
    ringccl.clear_caches()          # cold: every group's walk is built again
    t0 = time.perf_counter()
    out = fn()
    print(f"{label}: {time.perf_counter() - t0:.2f} s")
    return out


def main() -> None:
    for collectives in ("nccl", "ringccl"):
        print(f"-- collectives priced by {collectives}")
        # the lecture's incident (0.2): 70B, 128 A100 servers, DDP + PP (+ single-node TP)
        p = timed("plan llama3-70b tp8 pp4 dp32 on 128 x dgx-a100", lambda: ringccl.plan(
            "llama3-70b", {"tp": 8, "pp": 4, "dp": 32, "global_batch_size": 1024,
                           "recompute": "selective"},
            {"preset": "dgx-a100", "nodes": 128, "collectives": collectives}))
        print("   ", p.describe())
        q = timed("plan deepseek-v3 pp16 dp128 ep64 on 256 x h800", lambda: ringccl.plan(
            "deepseek-v3", {"pp": 16, "dp": 128, "ep": 64, "global_batch_size": 4096},
            {"preset": "h800", "nodes": 256, "collectives": collectives}))
        print("   ", q.describe())
        r = timed("search llama3-70b on 1,024 GPUs (dgx-h100)", lambda: search(
            PRESETS["llama3-70b"], cluster_preset("dgx-h100", nodes=128,
                                                  collectives=collectives),
            global_batch_size=1024))
        print(f"    {r.tried} layouts, {len(r.plans)} within memory; best: "
              f"{r.plans[0].describe() if r.plans else '-'}")


if __name__ == "__main__":
    main()
