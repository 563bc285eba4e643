"""The planner's step time against published measured training runs.

Reads ``benchmarks/published_runs.json`` (every row: a source's table, the model, the layout and
the hardware as published, each inferred value labelled) and plans each row with the planner's
defaults for its GPU preset. Nothing is set per row: the row's own published fields (layout,
GPUs, NICs) and its published framework's preset (:data:`FRAMEWORK_PRESETS`: the version of
Megatron-LM, DeepSpeed, Composer or torchtitan the run used, ``ringccl.planner.frameworks``)
make its inputs.

The measured value is converted to a step time with its source's own formula (the notes in the
data file, ``conventions``): an iteration time as printed; tokens/s/GPU as
``global batch · s / (GPUs · value)``; TFLOP/s per GPU as ``F / (GPUs · value)`` with ``F`` the
source's FLOP count (SC21 Eq. 3 counts the recompute forward; Megatron-Core's and Korthikanti's
Eq. 7 do not; Llama 3's PaLM MFU counts ``6·N + 12·L·h·s`` per token). So the planner's own FLOP
count never enters the comparison: error = planned step / measured step − 1 (positive: the
planner is slower than the run).

Rows the planner cannot plan as published are listed with the reason (:func:`unmodelled`),
never dropped silently. Held-out rows (the data file's fixed rule) are printed apart, in
``--acceptance`` runs only.

    python benchmarks/validate_planner.py                  # validation rows
    python benchmarks/validate_planner.py --acceptance     # and the held-out rows, apart
    python benchmarks/validate_planner.py --json           # machine-readable
    python benchmarks/validate_planner.py --acceptance --plot docs/planner_validation.png \\
        --markdown docs/planner_validation.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import fields
from pathlib import Path

from ringccl.planner import Cluster, ParallelDims, estimate_step, resolve_model
from ringccl.planner.gpus import gpu_preset
from ringccl.planner.parallel_dims import SCHEDULES

HERE = Path(__file__).resolve().parent
DATA = json.loads((HERE / "published_runs.json").read_text())

#: ParallelDims fields a row's layout gives as published
LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "schedule", "micro_batch_size",
                 "global_batch_size", "sp", "recompute", "zero_stage")

#: the framework preset (``ringccl.planner.frameworks``) each row's published framework is
#: planned with, matched by the start of its ``framework`` text, and why that preset
FRAMEWORK_PRESETS = (
    ("Megatron-LM (2021)", "megatron-2021", "SC21's code: Megatron-LM of April 2021"),
    ("Megatron-LM (2022)", "megatron-2022", "Korthikanti et al. 2022's code (May 2022)"),
    ("Megatron-LM + DeepSpeed ZeRO-3", "megatron-deepspeed",
     "SC21 §5.2: Megatron-LM's GPT under DeepSpeed's ZeRO-3 (v0.3, April 2021)"),
    ("Megatron-LM commit 285068c8", "megatron-2022",
     "MegaScale §6.1's baseline, Megatron-LM of 2023-01-11 (before --overlap-grad-reduce)"),
    ("Megatron-DeepSpeed", "megatron-deepspeed",
     "MT-NLG (2021) and BLOOM (2022): DeepSpeed's pipeline engine and ZeRO-1 under "
     "Megatron-LM's GPT"),
    ("Meta internal", "torchtitan",
     "Llama 3 §3.3.2 describes torchtitan's FSDP under a pipeline: parameters kept gathered "
     "after the forward, gradients reduce-scattered in fp32 once per step"),
    ("Megatron-Core r0.8.0", "megatron", "Megatron-Core (2024)"),
    ("NeMo 24.07", "megatron", "NeMo 24.07 runs Megatron-Core"),
    ("torchtitan 9dec370", "torchtitan-2024", "torchtitan of December 2024: torch SDPA's "
     "FlashAttention-2 kernel"),
    ("torchtitan", "torchtitan", "torchtitan"),
    ("llm-foundry", "composer", "llm-foundry trains with Composer's FSDP"),
    ("HAI-LLM", "megatron", "DeepSeek's HAI-LLM (internal): no preset; its row is a whole-run "
     "average, not modelled anyway"),
)

#: published flags -> ParallelDims knobs
ROW_FLAGS = {"dp_overlap": ("overlap_grad_reduce", "overlap_param_gather"),
             "tp_comm_overlap": ("tp_comm_overlap",),
             "pp_overlap": ("overlap_p2p",)}

#: frameworks whose ZeRO-2 is FSDP's SHARD_GRAD_OP: zero_stage 3 with the gathered weights
#: kept to the backward (ParallelDims refuses zero_stage 2 under them, saying so)
FSDP_PRESETS = ("composer", "fsdp2", "torchtitan", "torchtitan-2024")


def framework_preset(row: dict) -> str:
    """The preset of the row's published framework (:data:`FRAMEWORK_PRESETS`)."""
    text = row["layout"].get("framework") or ""
    for prefix, preset, _ in FRAMEWORK_PRESETS:
        if text.startswith(prefix):
            return preset
    raise KeyError(f"{row['id']}: no framework preset for {text!r}")


#: GPT-style models (a plain 2-matrix MLP) as Megatron-LM, Megatron-Core, Megatron-DeepSpeed
#: and NeMo build them: a bias on every linear layer and LayerNorm (Megatron's add_bias_linear
#: and normalization defaults; GPT-3, Brown et al. 2020, follows GPT-2's layers)
MEGATRON_GPT = {"qkv_bias": True, "attention_out_bias": True, "mlp_bias": True,
                "norm_type": "layernorm"}
MEGATRON_FAMILIES = ("Megatron", "NeMo")


def precision(row: dict) -> str:
    """The planner's precision recipe for the row's published one."""
    lay = row["layout"]
    p = (lay.get("precision") or "").lower()
    recipe = (lay.get("precision_recipe") or "").lower()
    if "fp8" in p or "float8" in p:
        if "delayed" in recipe:
            return "fp8-delayed"
        if "fine-grained" in recipe or "block" in recipe:
            return "fp8-blockwise"
        if "rowwise" in recipe:
            return "fp8-rowwise"
        return "fp8-tensorwise"
    return "bf16"


def unmodelled(row: dict) -> str | None:
    """Why the planner cannot plan this row as published (None: it can)."""
    if row["kind"] != "step":
        return f"{row['kind']}: a whole-run average (batch ramp, restarts), not one step"
    if row["layout"]["schedule"] not in SCHEDULES:
        return f"schedule {row['layout']['schedule']!r} is not modelled"
    if row["hardware"].get("gpu_overrides"):
        return ("GPU of unpublished peak (" + row["hardware"]["gpu_overrides"].get("note", "")
                + ")")
    return None


def row_model(row: dict):
    """The row's model as published, in its published 16-bit type (fp16 where the row says
    so, else bf16); a GPT-style one trained with a Megatron-family code base gets Megatron's
    biases and LayerNorm (:data:`MEGATRON_GPT`)."""
    fields_ = {k: v for k, v in row["model"].items()
               if k not in ("shape_source", "notes", "activation")}
    framework = row["layout"].get("framework") or ""
    if not fields_.get("gated_mlp", True) and framework.startswith(MEGATRON_FAMILIES):
        fields_ = {**MEGATRON_GPT, **fields_}
    if "fp16" in (row["layout"].get("precision") or "").lower():
        fields_["dtype"] = "float16"
    return resolve_model(fields_)


def planner_inputs(row: dict):
    """(model, dims, cluster) of a row: its model and layout as published, its framework's
    preset (:func:`framework_preset`) with the row's published flags, its GPU preset, its
    nodes and NICs."""
    model = row_model(row)
    lay = row["layout"]
    values = {k: lay[k] for k in LAYOUT_FIELDS}
    values["framework"] = framework_preset(row)
    for flag, names in ROW_FLAGS.items():
        if flag in lay:
            values.update({n: bool(lay[flag]) for n in names})
    if "bucket_bytes" in lay:       # a published bucket size (torch DDP's bucket_cap_mb)
        values["bucket_bytes"] = lay["bucket_bytes"]
    if "cp_comm_type" in lay:       # a published context-parallel design (Llama 3 §3.3.2)
        values["cp_comm_type"] = lay["cp_comm_type"]
    if lay.get("distributed_optimizer") and lay["zero_stage"] == 0:
        values["zero_stage"] = 1    # Megatron's distributed optimizer shards optimizer states
    if values["framework"] in FSDP_PRESETS and values["zero_stage"] == 2:
        values.update(zero_stage=3, reshard_after_forward=False)
    values["precision"] = precision(row)
    dims = ParallelDims(**values)
    hw = row["hardware"]
    gpu = gpu_preset(hw["gpu"])
    cluster_fields = {f.name for f in fields(Cluster)}
    cl = dict(nodes=hw["nodes"], gpus_per_node=hw["gpus_per_node"],
              nics_per_node=hw["nics_per_node"], inter_bandwidth=f"{hw['nic_gbps']}Gbps",
              intra_bandwidth=gpu.nvlink_bandwidth, peak_flops=gpu.bf16_flops,
              gpu_memory=gpu.hbm_bytes, name=hw["gpu"], gpu=hw["gpu"])
    cluster = Cluster(**{k: v for k, v in cl.items() if k in cluster_fields})
    return model, dims, cluster


# -- the measured step time, in each source's convention --------------------------------------

def _megatron(m: dict, batch: int, passes: int, vocab_ratio: float) -> float:
    s, L, h, V = m["seq_length"], m["num_hidden_layers"], m["hidden_size"], m["vocab_size"]
    return 24 * passes * batch * s * L * h * h * (1 + s / (6 * h) + V / (vocab_ratio * L * h))


def measured_step_seconds(row: dict) -> float:
    """The row's measured value as a step time (module doc)."""
    meas, lay, m = row["measured"], row["layout"], row["model"]
    gpus, gbs, value = row["hardware"]["gpu_count"], lay["global_batch_size"], meas["value"]
    q, conv = meas["quantity"], meas.get("flop_convention")
    if q == "iteration_time":
        return value
    if q == "tokens_per_second_per_gpu":
        return gbs * m["seq_length"] / (gpus * value)
    if q == "tflops_per_gpu":
        if conv == "megatron-sc21-eq3":       # 96·B·s·l·h²(1 + s/6h + V/16lh)
            flops = _megatron(m, gbs, 4, 16)
        elif conv == "mcore-r0.8":            # 72·B·s·L·h²(1 + s/6h + V/12Lh)
            flops = _megatron(m, gbs, 3, 12)
        elif conv == "palm-mfu":              # tokens · (6·N_matmul + 12·L·h·s)
            model = row_model(row)
            per_token = (6 * model.matmul_parameters_per_token
                         + 12 * m["num_hidden_layers"] * m["hidden_size"] * m["seq_length"])
            flops = gbs * m["seq_length"] * per_token
        else:
            raise KeyError(f"{row['id']}: convention {conv!r}")
        return flops / (gpus * value * 1e12)
    raise KeyError(f"{row['id']}: quantity {q!r}")


# -- the suite ----------------------------------------------------------------------------------

def evaluate(row: dict) -> dict:
    out = {"id": row["id"], "group": row["group"], "split": row["split"],
           "source": f"{DATA['sources'][row['source']['ref']].get('short', row['source']['ref'])}"
                     f" {row['source']['table']}",
           "measured_s": measured_step_seconds(row), "reason": unmodelled(row)}
    try:
        model, dims, cluster = planner_inputs(row)
        t0 = time.perf_counter()
        plan = estimate_step(model, dims, cluster)
        out["plan_wall_s"] = time.perf_counter() - t0
        out["planned_s"] = plan.step_seconds
        out["error"] = plan.step_seconds / out["measured_s"] - 1
        out["exposed_s"] = {k: round(v, 4) for k, v in plan.exposed.items()}
        out["compute_s"] = max(s.compute_per_micro_batch for s in plan.stages) * \
            dims.num_micro_batches
    except Exception as exc:   # a row the planner refuses is reported, not dropped
        out["planned_s"] = None
        out["error"] = None
        out["reason"] = (out["reason"] or "") + f" planner refused: {exc}"
    return out


def summary(results: list[dict]) -> dict:
    errs = [abs(r["error"]) for r in results if r["error"] is not None and not r["reason"]]
    if not errs:
        return {"rows": 0}
    worst = max((r for r in results if r["error"] is not None and not r["reason"]),
                key=lambda r: abs(r["error"]))
    return {"rows": len(errs), "median_abs_error": statistics.median(errs),
            "mean_abs_error": statistics.fmean(errs), "worst_abs_error": abs(worst["error"]),
            "worst_row": worst["id"]}


def _print(title: str, results: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'row':42} {'measured s':>11} {'planned s':>11} {'error':>8}  note")
    for r in results:
        planned = "-" if r["planned_s"] is None else f"{r['planned_s']:.4g}"
        err = "-" if r["error"] is None else f"{100 * r['error']:+.1f}%"
        print(f"{r['id']:42} {r['measured_s']:11.4g} {planned:>11} {err:>8}  "
              f"{r['reason'] or ''}")
    s = summary(results)
    if s["rows"]:
        print(f"rows {s['rows']}: median |error| {100 * s['median_abs_error']:.1f}%, mean "
              f"{100 * s['mean_abs_error']:.1f}%, worst {100 * s['worst_abs_error']:.1f}% "
              f"({s['worst_row']})")


def acceptance(results: list[dict]) -> dict:
    """The acceptance checks on all rows (validation and held-out): Korthikanti et al.'s eight
    Table 5 rows (mean |error|, against Calculon's 3.65%), SC21 Table 2's ZeRO-3 175B per-GPU
    throughput from 384 to 1,536 GPUs (planned and measured fall), SC21 Table 1's errors by
    model size (the sign should not flip from small to large models)."""
    by_id = {r["id"]: r for r in results}
    out = {}
    k = [r for r in results if r["group"] == "korthikanti-table5" and r["error"] is not None]
    if k:
        out["korthikanti_mean_abs_error"] = statistics.fmean(abs(r["error"]) for r in k)
        out["korthikanti_rows"] = len(k)
    ids = ("sc21-t2-zero3-175b-384", "sc21-t2-zero3-175b-1536")
    if all(i in by_id and by_id[i]["planned_s"] for i in ids):
        rows = {r["id"]: r for r in DATA["runs"]}
        def per_gpu(i, key):
            row = rows[i]
            gpus = row["hardware"]["gpu_count"]
            return row["layout"]["global_batch_size"] / (by_id[i][key] * gpus)
        out["zero3_fall_planned"] = per_gpu(ids[0], "planned_s") / per_gpu(ids[1], "planned_s")
        out["zero3_fall_measured"] = (per_gpu(ids[0], "measured_s")
                                      / per_gpu(ids[1], "measured_s"))
    t1 = [r for r in results if r["group"] == "sc21-table1" and r["error"] is not None]
    if t1:
        out["sc21_table1_errors"] = {r["id"]: r["error"] for r in t1}
    return out


def _print_acceptance(a: dict) -> None:
    print("\nacceptance checks (all rows)")
    if "korthikanti_mean_abs_error" in a:
        print(f"Korthikanti Table 5 ({a['korthikanti_rows']} rows): mean |error| "
              f"{100 * a['korthikanti_mean_abs_error']:.2f}% (Calculon: 3.65%)")
    if "zero3_fall_planned" in a:
        print(f"SC21 Table 2 ZeRO-3 175B, per-GPU throughput 384 -> 1536 GPUs: planned falls "
              f"{a['zero3_fall_planned']:.2f}x, measured {a['zero3_fall_measured']:.2f}x")
    if "sc21_table1_errors" in a:
        print("SC21 Table 1 by model size: " + ", ".join(
            f"{i.split('-')[-1]} {100 * e:+.1f}%" for i, e in a["sc21_table1_errors"].items()))


def write_markdown(path: str, val: list[dict], held: list[dict]) -> None:
    """The tables (validation, held-out) as Markdown."""
    lines = []
    for title, rows in (("validation", val), ("held-out", held)):
        if not rows:
            continue
        s = summary(rows)
        lines += [f"**{title} rows**: {s['rows']} planned, median |error| "
                  f"{100 * s['median_abs_error']:.1f}%, mean {100 * s['mean_abs_error']:.1f}%, "
                  f"worst {100 * s['worst_abs_error']:.1f}% ({s['worst_row']})", "",
                  "| row | source | measured s | planned s | error | not modelled |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            planned = "-" if r["planned_s"] is None else f"{r['planned_s']:.4g}"
            err = "-" if r["error"] is None else f"{100 * r['error']:+.1f}%"
            lines.append(f"| {r['id']} | {r['source']} | {r['measured_s']:.4g} | {planned} | "
                         f"{err} | {r['reason'] or ''} |")
        lines.append("")
    Path(path).write_text("\n".join(lines))


def plot(path: str, val: list[dict], held: list[dict]) -> None:
    """Planned against measured step time (log-log), ±5% and ±15% bands; validation rows
    filled, held-out rows open, rows not modelled as grey crosses (planned with the preset
    anyway)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 6.5))
    groups = sorted({r["group"] for r in val + held if r["error"] is not None
                     and not r["reason"]})
    colors = {g: plt.cm.tab20(i % 20) for i, g in enumerate(groups)}
    for rows, filled in ((val, True), (held, False)):
        for r in rows:
            if r["planned_s"] is None:
                continue
            if r["reason"]:
                ax.plot(r["measured_s"], r["planned_s"], "x", color="0.6")
                continue
            c = colors[r["group"]]
            ax.plot(r["measured_s"], r["planned_s"], "o", mfc=c if filled else "none", mec=c)
    lo, hi = 0.3, 400
    xs = [lo, hi]
    ax.plot(xs, xs, "k-", lw=0.8)
    for f, style in ((0.05, "--"), (0.15, ":")):
        ax.plot(xs, [x * (1 + f) for x in xs], "k" + style, lw=0.6)
        ax.plot(xs, [x * (1 - f) for x in xs], "k" + style, lw=0.6)
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
           xlabel="measured step time (s)", ylabel="planned step time (s)",
           title="planned vs measured (filled: validation, open: held-out, x: not modelled)")
    for g in groups:
        ax.plot([], [], "o", color=colors[g], label=g)
    ax.plot([], [], "x", color="0.6", label="not modelled (reason in the table)")
    ax.legend(fontsize=7, loc="upper left")
    rows = [r for r in val + held if r["error"] is not None and not r["reason"]]
    for i, g in enumerate(groups):
        for r in rows:
            if r["group"] == g:
                bx.plot(100 * r["error"], i, "o", color=colors[g],
                        mfc=colors[g] if r["split"] == "validation" else "none")
    bx.axvline(0, color="k", lw=0.8)
    for f in (5, 15):
        bx.axvspan(-f, f, color="0.5", alpha=0.08)
    bx.set(yticks=range(len(groups)), yticklabels=groups, xlabel="planned / measured - 1 (%)",
           title="error per row, by source (shaded: ±5%, ±15%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--acceptance", action="store_true",
                   help="also plan the held-out rows (printed apart) and the acceptance checks")
    p.add_argument("--json", action="store_true")
    p.add_argument("--group", help="only this group")
    p.add_argument("--plot", metavar="PNG", help="draw planned against measured")
    p.add_argument("--markdown", metavar="MD", help="write the tables as Markdown")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rows = [r for r in DATA["runs"] if args.group in (None, r["group"])]
    val = [evaluate(r) for r in rows if r["split"] == "validation"]
    held = [evaluate(r) for r in rows if r["split"] == "held_out"] if args.acceptance else []
    checks = acceptance(val + held) if args.acceptance else {}
    if args.plot:
        plot(args.plot, val, held)
    if args.markdown:
        write_markdown(args.markdown, val, held)
    if args.json:
        json.dump({"validation": val, "held_out": held, "acceptance": checks,
                   "summary": {"validation": summary(val), "held_out": summary(held)}},
                  sys.stdout, indent=1)
        print()
        return 0
    _print("validation rows", val)
    if held:
        _print("held-out rows", held)
        _print_acceptance(checks)
    print(f"\n{len(val) + len(held)} rows in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
