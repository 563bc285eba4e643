"""``ringccl plan``: options, a config file (JSON and TOML), --json, --search, refusals."""

from __future__ import annotations

import json

import pytest

from ringccl.cli.app import main


def test_plan_json_from_the_command_line(capsys):
    assert main(["plan", "--model", "llama3-8b", "--tp", "8", "--dp", "2", "--seq-length",
                 "2048", "--json"]) == 0
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


def test_plan_search_json(capsys):
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--search", "--gpus",
                 "8", "--global-batch-size", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["top"][0]["why_slower"] == "fastest" and len(out["top"]) <= 10
    steps = [t["summary"]["step_s"] for t in out["top"]]
    assert steps == sorted(steps)


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
    assert bf16["cluster"]["gpu_memory"] == 141e9            # the GPU's own memory
    assert main(base + ["--gpu", "h200", "--precision", "fp8-delayed"]) == 0
    fp8 = json.loads(capsys.readouterr().out)
    assert fp8["summary"]["step_s"] < bf16["summary"]["step_s"]
    assert main(base + ["--cluster", "dgx-a100", "--precision", "fp8-delayed"]) == 2
    assert "has no FP8 tensor cores" in capsys.readouterr().err
