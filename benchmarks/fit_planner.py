"""Fit the planner's per-architecture constant on the validation rows of the published runs.

The constant (``ringccl.planner.gpus.FITTED``): per GPU architecture, the fraction of the tensor
peak a large GEMM's main loop sustains (``gemm_efficiency``). Everything else is a cited figure,
the memory fraction included (:data:`MEMORY_EFFICIENCY`). Only ``split == "validation"`` rows
the planner can plan (``validate_planner.unmodelled`` is None) enter the fit; held-out rows are
never read. The objective is the mean absolute log-ratio of planned to measured step time over
the rows of that architecture, minimised by a bounded scalar search.

Beside it, one constant comes from a kernel-level measurement, not from step times:
``ringccl.planner.gpus.SCORE_PASS_EFFICIENCY``, the fraction of HBM bandwidth unfused
attention's softmax and dropout passes sustain. Korthikanti et al. 2022, Table 4, times a 22B
layer's backward with and without selective recompute; the difference is the attention core's
forward (:data:`TABLE4_CORE_FORWARD_MS`). The core's two batched GEMMs depend on the Ampere GEMM
fraction and the fit of that fraction on the score passes, so the two are solved in turn until
neither moves (:func:`fit`).

(Fitting the memory fraction too was tried: the objective is flat along a ridge where a lower
memory fraction trades for a higher GEMM fraction, and the fitted value wandered between 0.65
and 0.9 with the weighting; so it is cited instead. Weighting each source equally instead of
each row was tried as well: median error 7.1% instead of 5.3% on the validation rows.)

    python benchmarks/fit_planner.py          # prints the constants and the fit's errors
    python benchmarks/fit_planner.py --json

Deterministic: the same data gives the same constants (no random starts).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from scipy.optimize import minimize_scalar

sys.path.insert(0, str(Path(__file__).resolve().parent))
import validate_planner as vp  # noqa: E402

from ringccl.caches import clear_caches  # noqa: E402
from ringccl.planner import ModelConfig, estimate_step, gpus  # noqa: E402
from ringccl.planner.compute import layer_compute  # noqa: E402
from ringccl.planner.gpus import gpu_preset  # noqa: E402

#: the fraction of HBM bandwidth a large streaming kernel sustains: Calculon's (Isaev et al.,
#: SC23) A100 and H100 system files, systems/a100_80g.json and h100_80g_nvl8.json, "mem1"
#: efficiency 0.90 for transfers of 100 MB and more
MEMORY_EFFICIENCY = 0.90

#: Korthikanti et al. 2022, Table 4 (one layer of the Table 3 22B model, t = 8, b = 4,
#: s = 2048, A100): the backward with selective recompute less the backward without it, ms,
#: without and with sequence parallelism: the attention core's forward, re-run
TABLE4_CORE_FORWARD_MS = (13.2 - 11.9, 13.1 - 11.8)

#: the Table 3 22B model
GPT22B = ModelConfig(num_hidden_layers=48, hidden_size=6144, num_attention_heads=64,
                     intermediate_size=24576, vocab_size=51200, seq_length=2048,
                     gated_mlp=False, tie_word_embeddings=True, name="gpt-22b")

#: fixed-point rounds of (GEMM fraction, score-pass fraction); each stops moving within two
ROUNDS = 4


def _rows() -> dict:
    """architecture -> [(source, model, dims, cluster, measured step s)]: validation rows the
    planner can plan."""
    out: dict = {}
    for row in vp.DATA["runs"]:
        if row["split"] != "validation" or vp.unmodelled(row):
            continue
        model, dims, cluster = vp.planner_inputs(row)
        arch = gpu_preset(row["hardware"]["gpu"]).architecture
        out.setdefault(arch, []).append((row["source"]["ref"], model, dims, cluster,
                                         vp.measured_step_seconds(row)))
    return out


def _loss(errors) -> float:
    """Mean |log error| of the rows."""
    return statistics.fmean(abs(e) for e in errors)


def _errors(rows, gemm: float, memory: float) -> list[float]:
    out = []
    for _, model, dims, cluster, measured in rows:
        c = cluster.replace(compute_efficiency=gemm, memory_efficiency=memory)
        out.append(math.log(estimate_step(model, dims, c).step_seconds / measured))
    return out


def score_pass_efficiency(gemm: float, memory: float) -> float:
    """The HBM fraction of unfused attention's score passes that makes the planner's attention
    core forward of Table 4's layer :data:`TABLE4_CORE_FORWARD_MS` (their mean), with the
    A100's GEMMs at ``gemm``: (bytes of the passes) / (HBM bandwidth · (core − its GEMMs))."""
    gpu = replace(gpu_preset("a100-sxm4-80gb"), gemm_efficiency=gemm, memory_efficiency=memory)
    ops = [o for o in layer_compute(GPT22B, False, 8, False, 1, 1, 4, "unfused", "bf16",
                                    gpu).ops if o.core]
    gemm_s = sum(o.forward_s for o in ops if o.kind == "gemm")
    pass_s = sum(o.forward_s for o in ops if o.kind == "memory")
    # pass_s is at min(memory, the constant in force); scale it to the fraction that fits
    in_force = min(memory, gpus.SCORE_PASS_EFFICIENCY)
    target = statistics.fmean(TABLE4_CORE_FORWARD_MS) * 1e-3
    return pass_s * in_force / (target - gemm_s)


def _fit_gemm(part, memory: float):
    r = minimize_scalar(lambda g: _loss(_errors(part, g, memory)), bounds=(0.4, 0.99),
                        method="bounded", options={"xatol": 1e-3})
    return round(float(r.x), 3), r.fun


def fit() -> dict:
    """The constants, their fit's errors on the validation rows, and the rounds it took."""
    rows = _rows()
    memory, gemms, total, rounds = MEMORY_EFFICIENCY, {}, 0.0, []
    saved = gpus.SCORE_PASS_EFFICIENCY
    try:
        for _ in range(ROUNDS):
            gemms, total = {}, 0.0
            for arch, part in rows.items():
                gemms[arch], loss = _fit_gemm(part, memory)
                total += loss * len(part)
            score = round(score_pass_efficiency(gemms["ampere"], memory), 3)
            rounds.append((gemms["ampere"], score))
            if score == gpus.SCORE_PASS_EFFICIENCY:
                break
            gpus.SCORE_PASS_EFFICIENCY = score
            clear_caches()
        errs = {arch: _errors(part, gemms[arch], memory) for arch, part in rows.items()}
    finally:
        gpus.SCORE_PASS_EFFICIENCY = saved
        clear_caches()
    flat = [abs(math.exp(e) - 1) for v in errs.values() for e in v]
    return {"memory_efficiency": memory, "gemm_efficiency": gemms,
            "score_pass_efficiency": score, "rounds": rounds,
            "loss": total / sum(len(p) for p in rows.values()),
            "rows": {a: len(p) for a, p in rows.items()},
            "median_abs_error": statistics.median(flat), "worst_abs_error": max(flat)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result = fit()
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"memory_efficiency {result['memory_efficiency']} (cited, not fitted)")
    print(f"score_pass_efficiency {result['score_pass_efficiency']} (Korthikanti et al. Table 4; "
          f"rounds (ampere gemm, score): {result['rounds']})")
    for arch, g in result["gemm_efficiency"].items():
        print(f"gemm_efficiency[{arch}] {g}  ({result['rows'][arch]} rows)")
    print(f"mean |log error| {result['loss']:.4f}; median |error| "
          f"{100 * result['median_abs_error']:.1f}%, worst {100 * result['worst_abs_error']:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
