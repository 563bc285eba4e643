"""The published-runs data and GPU presets: benchmarks/published_runs.json, gpu_specs.json.

Checks the files' schema, the held-out split against its stated rule, that every layout and model
is one the planner can read, and that each transcribed row agrees with its own source's
arithmetic (e.g. a table's MFU column recomputed from its iteration-time column with the
source's FLOP formula).  Nothing here runs the planner or judges its accuracy.
"""

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from ringccl.planner.parallel_dims import SCHEDULES, ParallelDims
from ringccl.planner.hf_config import resolve_model

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
DATA = json.loads((BENCH / "published_runs.json").read_text())
GPUS = json.loads((BENCH / "gpu_specs.json").read_text())["gpus"]
RUNS = DATA["runs"]
BY_ID = {r["id"]: r for r in RUNS}

UNITS = {"tflops_per_gpu": "TFLOP/s/GPU", "model_tflops_per_gpu": "TFLOP/s/GPU",
         "iteration_time": "s", "tokens_per_second_per_gpu": "tokens/s/GPU", "mfu": "fraction",
         "hfu": "fraction"}
NEEDS_CONVENTION = {"tflops_per_gpu", "model_tflops_per_gpu", "mfu", "hfu"}
LAYOUT_FIELDS = ("tp", "pp", "dp", "cp", "ep", "virtual_stages", "schedule", "micro_batch_size",
                 "global_batch_size", "num_micro_batches", "sp", "recompute", "zero_stage")


def rows(group):
    found = [r for r in RUNS if r["group"] == group]
    assert found, group
    return found


def also(row, quantity):
    return next(x["value"] for x in row["also_published"] if x["quantity"] == quantity)


# -- schema ---------------------------------------------------------------------------------

def test_ids_are_unique_and_rows_are_many():
    assert len(BY_ID) == len(RUNS) >= 36


@pytest.mark.parametrize("row", RUNS, ids=lambda r: r["id"])
def test_row_schema(row):
    for key in ("id", "group", "group_index", "kind", "source", "model", "layout", "hardware",
                "measured", "also_published", "assumptions", "split"):
        assert key in row, key
    src = row["source"]
    assert src["ref"] in DATA["sources"] and src["table"].strip() and src["row"].strip()
    m = row["measured"]
    assert m["quantity"] in UNITS and m["unit"] == UNITS[m["quantity"]]
    assert isinstance(m["value"], (int, float)) and math.isfinite(m["value"]) and m["value"] > 0
    assert m["as_published"].strip()
    conv = m["flop_convention"]
    assert (conv in DATA["conventions"]) if m["quantity"] in NEEDS_CONVENTION else conv is None
    for extra in row["also_published"]:
        assert extra["value"] > 0 and extra["unit"] and extra["as_published"]
        assert extra.get("flop_convention") in (None, *DATA["conventions"])
    for a in row["assumptions"]:
        assert set(a) == {"field", "value", "why"} and a["why"].strip()
    assert row["split"] in ("validation", "held_out")
    assert row["hardware"]["gpu"] in GPUS
    assert set(LAYOUT_FIELDS) <= set(row["layout"])


def test_sources_are_citable():
    for ref, s in DATA["sources"].items():
        assert s["title"] and s["authors"] and isinstance(s["year"], int), ref
        assert any(s.get(k) for k in ("arxiv", "venue", "url")), ref
        assert s["read_from"], ref
    assert {r["source"]["ref"] for r in RUNS} == set(DATA["sources"])


def test_conventions_name_their_source():
    for name, c in DATA["conventions"].items():
        assert c["formula"] and c["source"], name


# -- the held-out split ----------------------------------------------------------------------

def test_held_out_fraction():
    held = sum(r["split"] == "held_out" for r in RUNS)
    assert 0.25 <= held / len(RUNS) <= 0.40


def test_split_follows_the_stated_rule():
    assert "index % 3 == 2" in DATA["held_out_rule"]
    groups = defaultdict(list)
    for r in RUNS:
        groups[r["group"]].append(r["group_index"])
        assert (r["split"] == "held_out") == (r["group_index"] % 3 == 2), r["id"]
    for group, idx in groups.items():
        assert sorted(idx) == list(range(1, len(idx) + 1)), group


def test_enough_validation_rows_and_sources():
    val = [r for r in RUNS if r["split"] == "validation"]
    held = [r for r in RUNS if r["split"] == "held_out"]
    assert len(val) >= 25 and len({r["source"]["ref"] for r in val}) >= 5
    assert len({r["source"]["ref"] for r in held}) >= 5


# -- layouts and models the planner can read -------------------------------------------------

@pytest.mark.parametrize("row", RUNS, ids=lambda r: r["id"])
def test_layout_fills_the_gpus_and_the_batch(row):
    lay, hw = row["layout"], row["hardware"]
    assert lay["tp"] * lay["cp"] * lay["pp"] * lay["dp"] == hw["gpu_count"]
    assert hw["gpu_count"] == hw["nodes"] * hw["gpus_per_node"]
    assert lay["dp"] % lay["ep"] == 0
    per_step = lay["dp"] * lay["micro_batch_size"] * lay["num_micro_batches"]
    assert per_step == lay["global_batch_size"]


@pytest.mark.parametrize("row", RUNS, ids=lambda r: r["id"])
def test_planner_reads_the_row(row):
    model = resolve_model(row["model"])
    assert model.num_hidden_layers == row["model"]["num_hidden_layers"]
    lay = row["layout"]
    assert lay["schedule"] in SCHEDULES          # every published schedule is modelled
    built = ParallelDims(**{k: lay[k] for k in LAYOUT_FIELDS})
    assert built.world_size == row["hardware"]["gpu_count"]


# -- each transcription agrees with its source's own arithmetic -------------------------------

def megatron_flops(B, s, L, h, V, passes):
    """Narayanan et al. 2021 (SC21) Eq. 3 (passes=4, with recompute) and Korthikanti et al.
    2022 Eq. 7 (passes=3): 24*passes*B*s*L*h^2*(1 + s/6h + V/(4*passes*L*h)); the logits,
    6*B*s*h*V, are not recomputed."""
    return 24 * passes * B * s * L * h * h * (1 + s / (6 * h) + V / (4 * passes * L * h))


def shape(row):
    m = row["model"]
    return m["seq_length"], m["num_hidden_layers"], m["hidden_size"], m["vocab_size"]


def test_sc21_table1_columns_agree():
    for r in rows("sc21-table1"):
        tf, n = r["measured"]["value"], r["hardware"]["gpu_count"]
        assert tf * n / 1000 == pytest.approx(also(r, "aggregate_pflops"), rel=0.01), r["id"]
        assert abs(tf / 312 - also(r, "fraction_of_peak")) <= 0.01, r["id"]


def test_sc21_table1_parameter_counts():
    # SC21 Eq. 2: P = 12*l*h^2*(1 + 13/(12h) + (V + s)/(12*l*h))
    for r in rows("sc21-table1"):
        s, L, h, V = shape(r)
        p = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))
        assert abs(p / 1e9 - also(r, "parameters_billion")) <= 0.051, r["id"]  # printed to 0.1B


def test_sc21_table2_training_days():
    # SC21 §5.1: days = T/(B*s) iterations x F (Eq. 3) / (n * X), T = 300B tokens
    for r in rows("sc21-table2"):
        s, L, h, V = shape(r)
        B, n = r["layout"]["global_batch_size"], r["hardware"]["gpu_count"]
        step = megatron_flops(B, s, L, h, V, 4) / (n * r["measured"]["value"] * 1e12)
        days = 300e9 / (B * s) * step / 86400
        assert days == pytest.approx(also(r, "training_days_300b_tokens"), rel=0.02), r["id"]


@pytest.mark.parametrize("group", ["korthikanti-table5", "korthikanti-s6.3"])
def test_korthikanti_mfu_from_iteration_time(group):
    for r in rows(group):
        if not any(x["quantity"] == "mfu" for x in r["also_published"]):
            continue
        s, L, h, V = shape(r)
        B, n = r["layout"]["global_batch_size"], r["hardware"]["gpu_count"]
        mfu = megatron_flops(B, s, L, h, V, 3) / (r["measured"]["value"] * n * 312e12)
        assert abs(mfu - also(r, "mfu")) <= 0.005, r["id"]


def test_korthikanti_throughput_increase():
    for r in rows("korthikanti-table5"):
        if r["id"].endswith("sp-selective"):
            full = BY_ID[r["id"].replace("sp-selective", "full")]["measured"]["value"]
            gain = full / r["measured"]["value"] - 1
            assert abs(gain - also(r, "throughput_increase_vs_full_recompute")) <= 0.002, r["id"]


@pytest.mark.parametrize("group", ["mtnlg-s2.4", "bloom-tr11"])
def test_hardware_tflops_from_iteration_time(group):
    for r in rows(group):
        s, L, h, V = shape(r)
        B, n = r["layout"]["global_batch_size"], r["hardware"]["gpu_count"]
        tf = megatron_flops(B, s, L, h, V, 4) / (r["measured"]["value"] * n * 1e12)
        assert tf == pytest.approx(also(r, "tflops_per_gpu"), abs=1.0), r["id"]


def test_megascale_throughput_and_mfu():
    for r in rows("megascale-table2"):
        s, L, h, V = shape(r)
        B, n = r["layout"]["global_batch_size"], r["hardware"]["gpu_count"]
        t = r["measured"]["value"]
        assert B * s / t == pytest.approx(also(r, "tokens_per_second"), rel=0.01), r["id"]
        mfu = megatron_flops(B, s, L, h, V, 3) / (t * n * 312e12)
        assert abs(mfu - also(r, "mfu")) <= 0.003, r["id"]


def nemo_flops_per_token(m):
    """NeMo nemo/utils/flops_formulas.py (first version, f0bf77bcf7): gpt3, llama and nemotron
    families without a causal discount; vocabularies from LLM_VOCAB_SIZE_MAP."""
    s, L, h = m["seq_length"], m["num_hidden_layers"], m["hidden_size"]
    if m["name"].startswith("nemo-gpt3"):
        return ((24 * s * h * h + 4 * s * s * h) * 3 * L + 6 * s * h * 51200) / s
    family = "nemotron" if m["name"].startswith("nemotron") else m["name"][:6]
    vocab = {"llama2": 32000, "llama3": 128256, "nemotron": 256000}[family]
    mlp = 12 if family == "nemotron" else 18  # squared-ReLU MLP: 2 matrices; SwiGLU: 3
    ratio = m["num_key_value_heads"] / m["num_attention_heads"]
    return L * h * h * (12 + 12 * ratio + mlp * m["intermediate_size"] / h + 12 * s / h
                        + 6 * vocab / (L * h))


def test_nemo_tflops_from_tokens_per_second():
    for r in rows("nemo-24.07-pretrain"):
        tf = r["measured"]["value"] * nemo_flops_per_token(r["model"]) / 1e12
        assert tf == pytest.approx(also(r, "model_tflops_per_gpu"), rel=0.005), r["id"]


def test_llama3_table4_mfu_and_tokens_per_batch():
    for r in rows("llama3-table4"):
        assert abs(r["measured"]["value"] / 989 - also(r, "mfu")) <= 0.007, r["id"]
        lay = r["layout"]
        tokens = lay["global_batch_size"] * r["model"]["seq_length"]
        assert tokens == pytest.approx(also(r, "tokens_per_batch"), rel=0.01), r["id"]


def test_mcore_readme_mfu_and_aggregate():
    for r in rows("mcore-readme-h100"):
        tf, n = r["measured"]["value"], r["hardware"]["gpu_count"]
        assert abs(tf / 989 - also(r, "mfu")) <= 0.006, r["id"]
        assert tf * n / 1000 == pytest.approx(also(r, "aggregate_pflops"), rel=0.005), r["id"]


def test_llm_foundry_throughput_and_model_tflops():
    for r in rows("llm-foundry-h100-large"):
        tpsg, n = r["measured"]["value"], r["hardware"]["gpu_count"]
        assert tpsg * n == pytest.approx(also(r, "tokens_per_second"), rel=0.002), r["id"]
        s, L, h, _ = shape(r)
        per_token = 6 * also(r, "num_params") + 12 * L * h * s  # README 'MFU and HFU'
        assert tpsg * per_token / 1e12 == pytest.approx(also(r, "model_tflops_per_gpu"), abs=1.5)
        assert abs(tpsg * per_token / 989e12 - also(r, "mfu")) <= 0.002, r["id"]


# -- GPU presets -----------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb",
                                 "h800-sxm5-80gb", "h200-sxm-141gb", "b200-hgx"])
def test_gpu_preset_fields_and_sources(key):
    g = GPUS[key]
    for field in ("bf16_dense_tflops", "hbm_gb", "hbm_bandwidth_gbps", "sm_count",
                  "nvlink_gbps_bidirectional"):
        assert g[field] > 0, field
        assert g["sources"][field].strip(), field
    assert g["nvlink_gbps_per_direction"] * 2 == g["nvlink_gbps_bidirectional"]
    assert g["checked_against"]
    if g["fp8_dense_tflops"] is not None:
        assert g["fp8_dense_tflops"] == pytest.approx(2 * g["bf16_dense_tflops"], rel=0.01)


def test_hopper_tensor_peak_matches_sms_and_clock():
    # 4096 dense BF16 FLOP per clock per SM on Hopper, 1024 FMA x 2 on Ampere (whitepapers)
    for key, per_sm in (("h100-sxm5-80gb", 4096), ("a100-sxm4-80gb", 2048)):
        g = GPUS[key]
        peak = g["sm_count"] * per_sm * g["tensor_clock_mhz"] * 1e6 / 1e12
        assert peak == pytest.approx(g["bf16_dense_tflops"], rel=0.002)


def test_h800_differs_from_h100_only_in_nvlink():
    h100, h800 = GPUS["h100-sxm5-80gb"], GPUS["h800-sxm5-80gb"]
    assert h800["nvlink_gbps_bidirectional"] < h100["nvlink_gbps_bidirectional"]
    for field in ("bf16_dense_tflops", "fp8_dense_tflops", "hbm_gb", "hbm_bandwidth_gbps"):
        assert h800[field] == h100[field]
