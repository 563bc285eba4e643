"""``ringccl plan``: options, a config file (JSON and TOML), --json, --search, refusals."""

from __future__ import annotations

import json
import re

import pytest

from ringccl.cli.app import main


def test_plan_json_from_the_command_line(capsys):
    # DDP and plain TP, not the Megatron preset's distributed optimizer and SP
    assert main(["plan", "--model", "llama3-8b", "--tp", "8", "--dp", "2", "--seq-length",
                 "2048", "--no-sp", "--zero", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["world_size"] == 16 and out["cluster"]["nodes"] == 2
    assert {c["parallelism"] for c in out["stages"][0]["collectives"]} == {"tp", "dp"}


def test_plan_config_file_and_command_line_override(tmp_path, capsys):
    toml = tmp_path / "plan.toml"
    toml.write_text('model = "llama3-8b"\nseq_length = 2048\n[layout]\ntp = 4\ndp = 4\n'
                    '[cluster]\npreset = "dgx-a100"\n')
    assert main(["plan", "--config", str(toml), "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert a["layout"]["tp"] == 4 and a["cluster"]["name"] == "dgx-a100"
    js = tmp_path / "plan.json"
    js.write_text(json.dumps({"model": "llama3-8b", "seq_length": 2048,
                              "layout": {"tp": 4, "dp": 4}}))
    assert main(["plan", "--config", str(js), "--tp", "8", "--dp", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["tp"] == 8
    assert main(["plan", "--config", str(js), "--zero", "1"]) == 0   # the tables
    assert "reduce_scatter" in capsys.readouterr().out


def test_plan_refusals_exit_2_with_the_field(tmp_path, capsys):
    assert main(["plan", "--model", "llama3-8b", "--tp", "3", "--dp", "1", "--nodes", "1",
                 "--gpus-per-node", "3"]) == 2
    assert "tp=3 must divide num_attention_heads=32" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"modle": "x"}))
    assert main(["plan", "--config", str(bad)]) == 2
    assert "unknown key(s) modle" in capsys.readouterr().err
    assert main(["plan", "--model", "llama3-8b", "--search"]) == 2
    assert "--search needs --gpus N" in capsys.readouterr().err


def test_search_refuses_a_straggler_and_nodes_that_disagree_with_gpus(tmp_path, capsys):
    base = ["plan", "--model", "llama3-8b", "--search", "--gpus", "64"]
    assert main([*base, "--straggler", "0:0.5"]) == 2
    assert capsys.readouterr().err.startswith(
        "ringccl: error: --straggler slows one rank's NIC in one layout's step; it does not "
        "apply to --search")
    path = tmp_path / "p.toml"
    path.write_text('straggler = "3:0.5"\n')
    assert main([*base, "--config", str(path)]) == 2
    assert f"--config {str(path)!r}: straggler slows" in capsys.readouterr().err
    assert main([*base, "--nodes", "4"]) == 2
    assert "--gpus 64 and the cluster's 4 nodes x 8 GPUs = 32 disagree" in \
        capsys.readouterr().err
    assert main(["plan", "--model", "llama3-8b", "--search", "--gpus", "12"]) == 2
    assert capsys.readouterr().err.startswith(
        "ringccl: error: --gpus 12 does not fill nodes of 8 GPUs: --search lays out whole "
        "nodes; give a multiple of 8")


def test_a_config_file_that_does_not_read_says_why(tmp_path, capsys):
    missing = tmp_path / "missing.toml"
    assert main(["plan", "--config", str(missing)]) == 2
    assert f"--config {str(missing)!r}: cannot read the file (No such file or directory)" in \
        capsys.readouterr().err
    toml_named_otherwise = tmp_path / "plan.cfg"
    toml_named_otherwise.write_text('model = "llama3-8b"\n')
    assert main(["plan", "--config", str(toml_named_otherwise)]) == 2
    assert "a name ending in .toml is read as TOML, any other as JSON" in \
        capsys.readouterr().err


def test_plan_search_json(capsys):
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--search", "--gpus",
                 "8", "--global-batch-size", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["top"][0]["why_slower"] == "fastest" and len(out["top"]) <= 10
    steps = [t["summary"]["step_s"] for t in out["top"]]
    assert steps == sorted(steps)
    # within memory: every priced layout not refused, not only those shown
    assert out["within_memory"] == out["priced"] - out["refused_memory"] >= out["shown"] \
        == len(out["top"])


def test_plan_search_with_nothing_that_fits_says_so(capsys):
    assert main(["plan", "--model", "llama3-405b", "--search", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "no layout of llama3-405b fits 8 GPUs of 80.00 GiB" in out
    assert "Pareto front" not in out


def test_plan_nodes_set_dp_and_the_first_error_names_the_ways_out(capsys):
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048"]) == 2
    err = capsys.readouterr().err
    assert "the layout's 1 GPU (dp x tp x cp x pp) does not fill nodes of 8" in err
    assert "--gpus N or --nodes N" in err and "--dp" in err
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--nodes", "2",
                 "--tp", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["dp"] == 8   # 16 GPUs / tp 2
    assert main(["plan", "--model", "llama3-8b", "--nodes", "2", "--tp", "3"]) == 2
    assert "--nodes 2 x 8 GPUs = 16 is not a multiple of tp x cp x pp" in \
        capsys.readouterr().err


def test_plan_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "step.png"
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--tp", "4", "--dp",
                 "2", "--pp", "2", "--global-batch-size", "16", "--zero", "1", "--plot",
                 str(png)]) == 0
    assert f"chart written to {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # --search draws its fastest layout
    best = tmp_path / "best.png"
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--search", "--gpus",
                 "8", "--global-batch-size", "16", "--json", "--plot", str(best)]) == 0
    capsys.readouterr()
    assert best.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_new_layout_flags(tmp_path, capsys):
    # the CP design, HSDP, node-limited two-hop dispatch and a schedule, each from its flag
    assert main(["plan", "--model", "llama3-8b", "--cp", "4", "--cp-comm-type", "a2a+p2p",
                 "--hierarchical-context-parallel-sizes", "2", "2", "--dp", "4", "--zero", "3",
                 "--dp-shard", "2", "--seq-length", "8192", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    groups = {c["group"] for c in out["stages"][0]["collectives"]}
    assert {"cp_a2a", "cp_p2p", "dp_shard", "dp_replicate"} <= groups
    png = tmp_path / "step.png"
    assert main(["plan", "--model", "deepseek-v3", "--pp", "16", "--dp", "128", "--ep", "64",
                 "--schedule", "dualpipe", "--global-batch-size", "4096", "--zero", "1",
                 "--moe-router-group-topk", "4", "--moe-token-dispatcher-type", "flex",
                 "--cluster", "h800", "--plot", str(png), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"]["moe_router_group_topk"] == 4 and png.stat().st_size > 10_000
    assert {"ep_inter", "ep_intra", "pp_mirror"} <= {c["group"] for s in out["stages"]
                                                    for c in s["collectives"]}
    # DeepSeek-V3's report writes dp 2 (the expert replicas): refused with the layout to write
    assert main(["plan", "--model", "deepseek-v3", "--pp", "16", "--dp", "2", "--ep", "64",
                 "--cluster", "h800", "--nodes", "256"]) == 2
    assert "write dp=128 ep=64" in capsys.readouterr().err


# -- --gpus with a layout, the framework and the warnings --------------------------------------

def _json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_gpus_with_a_layout_fills_dp_or_must_agree(capsys):
    base = ["plan", "--model", "llama3-8b", "--seq-length", "2048", "--tp", "8"]
    assert _json(capsys, base + ["--gpus", "32"])["layout"]["dp"] == 4
    assert _json(capsys, base + ["--dp", "2", "--gpus", "16"])["world_size"] == 16
    assert main(base + ["--dp", "2", "--gpus", "32"]) == 2
    assert ("--gpus 32 disagrees with the layout: dp x tp x cp x pp = 2 x 8 x 1 x 1 = 16; give "
            "--gpus 16, or leave --dp out for --gpus to set it") in capsys.readouterr().err
    assert main(base + ["--gpus", "12"]) == 2
    assert ("--gpus 12 is not a multiple of tp x cp x pp = 8 x 1 x 1 = 8, so dp = 12/8 is not "
            "whole") in capsys.readouterr().err


def test_warnings_in_text_and_json(capsys):
    # no framework, no batch: two "default" warnings naming the preset and the rule
    out = _json(capsys, ["plan", "--model", "llama3-8b", "--seq-length", "2048", "--tp", "8",
                         "--dp", "2"])
    kinds = [w["kind"] for w in out["warnings"]]
    assert kinds == ["default", "default"]
    framework, batch = out["warnings"]
    assert framework["message"].startswith("the framework is megatron by default (the "
                                           "layout's terms are Megatron-Core's:")
    assert "its preset decided sp=True, zero_stage=1" in framework["message"]
    assert framework["first_change"] == ("--framework deepspeed|fsdp2|torchtitan|megatron-2021|"
                                         "megatron-2022|megatron-deepspeed|composer|"
                                         "torchtitan-2024 if your job runs another")
    assert batch["message"].startswith("the global batch (2048 sequences = 4,194,304 tokens, "
                                       "1024 micro-batches) is the default rule's: about 4M")
    assert batch["first_change"] == "--global-batch-size of your job (sequences per step)"
    # given: no default warning; the text output prints each warning with its first change
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--pp", "4",
                 "--gpus-per-node", "4", "--global-batch-size", "4", "--framework",
                 "megatron"]) == 0
    text = capsys.readouterr().out
    # its share of the step: 3/7 for equal stages, less when the last stage's LM head makes it
    # the slowest
    found = re.search(r"warning \(bubble\): the pipeline bubble is (\d+)% of the step \(pp=4, 4 "
                      r"micro-batches: \(pp - 1\)/m = 75% of the ideal time\); first try: "
                      r"--schedule interleaved --virtual-stages 2 \(the bubble \(pp - 1\)/\(v x "
                      r"m\) halves\)", text)
    assert found and 25 < int(found.group(1)) <= 43
    assert "warning (default)" not in text
    assert "framework            megatron (given); from its preset: sp=False" in text


def test_bubble_warning_asks_for_a_batch_when_interleaving_cannot_apply(capsys):
    out = _json(capsys, ["plan", "--model", "llama3-8b", "--seq-length", "2048", "--pp", "4",
                         "--gpus-per-node", "4", "--global-batch-size", "2", "--framework",
                         "megatron"])
    bubble = next(w for w in out["warnings"] if w["kind"] == "bubble")
    assert bubble["first_change"] == ("--global-batch-size 16 (4 x pp = 16 micro-batches of "
                                      "dp x micro_batch_size = 1 sequences)")


@pytest.mark.parametrize("extra, change", [
    # model states dominate: the distributed optimizer first
    (["--tp", "8", "--dp", "2", "--zero", "0", "--recompute", "full"],
     "--zero 1 (Megatron's distributed optimizer: the optimizer state sharded over dp)"),
    # activations dominate: SP first with TP, then FlashAttention, then full recompute
    (["--tp", "8", "--pp", "8", "--no-sp", "--attention", "unfused", "--micro-batch-size", "4"],
     "--sp (sequence parallelism divides every activation by tp=8)"),
    (["--tp", "8", "--pp", "8", "--attention", "unfused", "--micro-batch-size", "4"],
     "--attention flash (no s x s attention scores kept)"),
])
def test_memory_warning_names_the_stage_and_the_first_change(capsys, extra, change):
    out = _json(capsys, ["plan", "--model", "llama3-70b", "--seq-length", "8192",
                         "--framework", "megatron", "--global-batch-size", "64"] + extra)
    mem = next(w for w in out["warnings"] if w["kind"] == "memory")
    assert re.match(r"stage \d+ needs [\d.]+ [GT]iB per GPU, more than the 80.00 GiB it has "
                    r"\(weights .*, gradients .*, optimizer .*, activations .*, buffers .*\)",
                    mem["message"])
    assert mem["first_change"] == change
    assert not out["summary"]["fits_memory"]


def test_an_unknown_cluster_preset_on_the_command_line_names_the_flag(capsys):
    assert main(["plan", "--model", "llama3-8b", "--tp", "8", "--cluster", "dgx-z"]) == 2
    assert capsys.readouterr().err.startswith(
        "ringccl: error: --cluster: preset='dgx-z' is not a preset; expected one of dgx-a100")


@pytest.mark.parametrize("table, body, message", [
    ("layout", {"tp": None}, "layout.tp=null: leave the field out for its default"),
    ("layout", {"tp": -2}, "layout.tp=-2 must be an integer >= 1"),
    ("layout", {"tp": "8"}, 'layout.tp="8" must be an integer >= 1, got str'),
    ("layout", {"sp": "yes"}, 'layout.sp="yes" must be true or false, got str'),
    ("layout", {"framework": "jax"}, 'layout.framework="jax" must be one of megatron, '
     "deepspeed, fsdp2, torchtitan"),
    ("layout", {"zero_stage": 5}, "layout.zero_stage=5 must be 0, 1, 2 or 3"),
    ("layout", {"tpp": 2}, "unknown layout field(s) tpp; expected"),
    ("layout", {"dp": 4, "global_batch_size": 6}, "global_batch_size=6 does not split into "
     "micro-batches: it must be a multiple of dp x micro_batch_size = 4 x 1 = 4"),
    ("cluster", {"nodes": -2}, "cluster.nodes=-2 must be an integer >= 1"),
    ("cluster", {"nodes": None}, "cluster.nodes=null: leave the field out for its default"),
    ("cluster", {"gpu_memory": True}, "cluster.gpu_memory=true must be a finite size > 0 such "
     "as '80GB', or bytes, got bool"),
    ("cluster", {"compute_efficiency": 1.5}, "cluster.compute_efficiency=1.5 must be a number "
     "in (0, 1]"),
    ("cluster", {"inter_alpha": -1e-6}, "cluster.inter_alpha=-1e-06 must be a finite duration "
     ">= 0"),
    ("cluster", {"preset": "dgx-z"}, 'cluster.preset="dgx-z" is not a preset; expected one of '
     "dgx-a100, dgx-h100"),
    (None, {"search": "yes"}, 'search="yes" must be true or false, got str'),
    (None, {"seq_length": 0}, "seq_length=0 must be an integer >= 1"),
    (None, {"gpus": 2.5}, "gpus=2.5 must be an integer >= 1, got float"),
    (None, {"model": None}, "model=null must be a preset name or a config.json path (a "
     "string), got null"),
])
def test_config_file_refusals_name_the_field_as_written(tmp_path, capsys, table, body, message):
    data = {"model": "llama3-8b", "seq_length": 2048}
    if table is None:
        data.update(body)
    else:
        data[table] = body
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    assert main(["plan", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    if "global_batch_size" not in message:
        assert f"--config {str(path)!r}" in err


@pytest.mark.parametrize("argv, message", [
    (["--peak-flops", "-1"], "argument --peak-flops: -1 must be > 0 (FLOP/s)"),
    (["--compute-efficiency", "2"], "argument --compute-efficiency: 2 must be in (0, 1] (a "
     "fraction of peak)"),
    (["--bucket-size", "-1MiB"], "argument --bucket-size: size '-1MiB' is negative"),
    (["--framework", "jax"], "argument --framework: invalid choice: 'jax'"),
])
def test_command_line_refusals_name_the_option(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        main(["plan", "--model", "llama3-8b"] + argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_command_line_framework_refusal(capsys):
    assert main(["plan", "--model", "llama3-8b", "--framework", "fsdp2", "--zero", "1",
                 "--dp", "8"]) == 2
    assert "zero_stage=1 is not how fsdp2 shards" in capsys.readouterr().err


def test_framework_from_the_config_file_and_the_command_line(tmp_path, capsys):
    path = tmp_path / "plan.toml"
    path.write_text('model = "llama3-8b"\nseq_length = 2048\n[layout]\nframework = "torchtitan"'
                    '\ndp = 8\nglobal_batch_size = 64\n')
    out = _json(capsys, ["plan", "--config", str(path)])
    assert out["layout"]["framework"] == "torchtitan" and out["layout"]["zero_stage"] == 3
    assert "framework" not in out["layout"]["from_preset"]
    assert not [w for w in out["warnings"] if w["kind"] == "default"]
    # the command line wins, field by field
    out = _json(capsys, ["plan", "--config", str(path), "--framework", "deepspeed"])
    assert out["layout"]["framework"] == "deepspeed" and out["layout"]["zero_stage"] == 0


def test_plan_prints_nccls_choice_and_prices_ringccls_what_if(capsys):
    base = ["plan", "--model", "llama3-8b", "--tp", "8", "--dp", "2", "--seq-length", "2048",
            "--json"]
    assert main(base) == 0
    nccl = json.loads(capsys.readouterr().out)
    algos = {c["algorithm"] for c in nccl["stages"][0]["collectives"]}
    assert all("/" in a for a in algos)            # algorithm/protocol, as NCCL picks them
    assert nccl["cluster"]["collectives"] == "nccl"
    assert main(base + ["--collectives", "ringccl"]) == 0
    what_if = json.loads(capsys.readouterr().out)
    assert all("/" not in c["algorithm"] for c in what_if["stages"][0]["collectives"])


def test_plan_gpu_and_precision_options(capsys):
    base = ["plan", "--model", "llama3-8b", "--dp", "8", "--seq-length", "2048", "--json"]
    assert main(base + ["--gpu", "h200"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert bf16["cluster"]["gpu"] == "h200-sxm-141gb"
    assert bf16["cluster"]["gpu_memory"] == 141 * 2**30     # the GPU's own memory (binary GB)
    assert main(base + ["--gpu", "h200", "--precision", "fp8-delayed"]) == 0
    fp8 = json.loads(capsys.readouterr().out)
    assert fp8["summary"]["step_s"] < bf16["summary"]["step_s"]
    assert main(base + ["--cluster", "dgx-a100", "--precision", "fp8-delayed"]) == 2
    assert "has no FP8 tensor cores" in capsys.readouterr().err


def test_plan_says_what_float32_and_a_one_chunk_interleave_mean(capsys):
    base = ["plan", "--model", "llama3-8b", "--seq-length", "2048", "--json"]
    assert main(base + ["--dp", "8", "--dtype", "float32"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("GEMMs at the BF16 peak" in n for n in notes)
    assert main(base + ["--dp", "8"]) == 0
    assert not any("BF16 peak" in n for n in json.loads(capsys.readouterr().out)["notes"])
    assert main(base + ["--dp", "2", "--pp", "4", "--schedule", "interleaved"]) == 0
    kinds = [w["kind"] for w in json.loads(capsys.readouterr().out)["warnings"]]
    assert "schedule" in kinds
    assert main(base + ["--dp", "2", "--pp", "4", "--schedule", "interleaved",
                        "--virtual-stages", "2"]) == 0
    kinds = [w["kind"] for w in json.loads(capsys.readouterr().out)["warnings"]]
    assert "schedule" not in kinds


def test_plan_refuses_fp8_as_a_dtype_and_names_the_recipes(capsys):
    for spelling in ("fp8", "float8"):
        assert main(["plan", "--model", "llama3-8b", "--dp", "8", "--dtype", spelling]) == 2
        err = capsys.readouterr().err
        assert f"dtype='{spelling}'" in err and "--precision fp8-tensorwise" in err
    assert main(["plan", "--model", "llama3-8b", "--dp", "8", "--seq-length", "2048",
                 "--precision", "fp8-tensorwise", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["precision"] == "fp8-tensorwise"


def test_plan_refusals_name_the_flag(capsys):
    for flag, value, field in (("--bucket-size", "0", "bucket_bytes=0"),
                               ("--gpu-memory", "0", "gpu_memory='0'"),
                               ("--intra-bandwidth", "0GB/s", "intra_bandwidth='0GB/s'")):
        assert main(["plan", "--model", "llama3-8b", "--dp", "8", flag, value]) == 2
        assert f"{flag}: {field}" in capsys.readouterr().err
