"""``ringccl moe``, ``ringccl replay`` and ``ringccl plan --emit``: what is refused before any
process starts (one stderr line, exit 2), and the step file --emit writes. The runs on
processes are in tests/distributed/test_moe_cli.py."""

from __future__ import annotations

import json

import pytest

from ringccl.cli.app import main
from ringccl.planner.emit import STEP_VERSION

pytest.importorskip("torch")

PLAN = ["plan", "--model", "llama3-8b", "--dp", "2", "--tp", "2", "--gpus-per-node", "4",
        "--nodes", "1"]


@pytest.fixture
def no_launch(monkeypatch):
    import ringccl.torch.launch as launch_module

    def refuse(*args, **kwargs):
        raise AssertionError("a process was started")
    monkeypatch.setattr(launch_module, "launch", refuse)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv,match", [
    (["--capacity-factor", "0"], "--capacity-factor: 0 must be a finite number > 0"),
    (["--capacity-factor", "-1"], "--capacity-factor"),
    (["--capacity-factor", "abc"], "'abc' must be a number > 0 or 'none'"),
    (["--experts", "6"], "num_experts=6 must be a multiple of the 4 processes"),
    (["--top-k", "9"], "top_k=9 must be <= num_experts=8"),
    (["--skew", "-1"], "skew"),
    (["--nproc", "4000", "--experts", "4000"], "--nproc 4000"),
    (["--chunks", "100000"], "num_chunks=100000 must be <= tokens=4096"),
    (["--tokens", "8", "--chunks", "9"], "num_chunks=9 must be <= tokens=8"),
    (["-a", "ring"], "algorithm='ring' is not available for all_to_all; expected one of"),
    (["--ffn-hidden-size", "10000000"], "so not even one fits; use a smaller "
                                        "--ffn-hidden-size, --experts or --hidden-size (a "
                                        "worker's tokens are "),
    (["--tokens", "100000000"], "so not even one fits; use a smaller --tokens or --hidden-size "
                                "(a worker's tokens are 953.67 GiB and its expert weights "
                                "8.00 MiB"),
])
def test_moe_refusals_before_any_process(no_launch, capsys, argv, match):
    try:
        code = main(["moe", *argv])
    except SystemExit as exc:   # argparse's own usage errors (the option's type refused it)
        code = exc.code
    assert code == 2
    assert match in _one_line_error(capsys)


def test_plan_emit_writes_a_versioned_step_file(tmp_path, capsys):
    path = tmp_path / "step.json"
    assert main([*PLAN, "--emit", str(path)]) == 0
    assert f"step file written to {path}" in capsys.readouterr().out
    step = json.loads(path.read_text())
    assert step["version"] == STEP_VERSION and step["world_size"] == 4
    assert {c["group"] for c in step["collectives"]} == {"tp", "dp"}
    assert main([*PLAN, "--emit", str(tmp_path / "j.json"), "--json"]) == 0
    json.loads(capsys.readouterr().out)   # --json stays pure JSON


def test_plan_emit_refused_with_search(capsys, tmp_path):
    assert main(["plan", "--model", "llama3-8b", "--search", "--gpus", "8", "--emit",
                 str(tmp_path / "s.json")]) == 2
    assert "--emit writes one plan's step" in _one_line_error(capsys)


def test_replay_refuses_a_step_file_of_another_version(no_launch, tmp_path, capsys):
    path = tmp_path / "step.json"
    assert main([*PLAN, "--emit", str(path)]) == 0
    capsys.readouterr()
    step = json.loads(path.read_text())
    step["version"] = 0
    path.write_text(json.dumps(step))
    assert main(["replay", str(path), "--nproc", "4"]) == 2
    assert f"has version 0; this ringccl reads version {STEP_VERSION} only" in \
        _one_line_error(capsys)


@pytest.mark.parametrize("content,match", [("[]", "not a ringccl step file"),
                                           ("{", "cannot read it as JSON")])
def test_replay_refuses_what_is_no_step_file(no_launch, tmp_path, capsys, content, match):
    path = tmp_path / "x.json"
    path.write_text(content)
    assert main(["replay", str(path)]) == 2
    assert match in _one_line_error(capsys)


def test_replay_refuses_one_process(no_launch, tmp_path, capsys):
    path = tmp_path / "step.json"
    assert main([*PLAN, "--emit", str(path)]) == 0
    capsys.readouterr()
    assert main(["replay", str(path), "--nproc", "1"]) == 2
    assert "nproc=1 must be an integer >= 2" in _one_line_error(capsys)


def test_replay_refuses_an_nproc_that_would_make_single_rank_groups(no_launch, tmp_path, capsys):
    path = tmp_path / "step.json"
    assert main([*PLAN, "--emit", str(path)]) == 0
    capsys.readouterr()
    assert main(["replay", str(path), "--nproc", "3"]) == 2
    assert "nproc=3: a group of 2 ranks cannot be laid over 3 processes" in \
        _one_line_error(capsys)
