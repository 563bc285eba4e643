"""The ringccl command for every collective and algorithm: roots, parameters, --json."""

import json

import pytest

import ringccl
from ringccl.collectives import split_safe
from ringccl.cli import main


def test_show_rooted_chain_with_segments(capsys):
    assert main(["show", "broadcast", "-N", "4", "--src", "1", "--segments", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["algorithm"] == "ring" and data["num_steps"] == 5
    assert data["params"] == {"root": 1, "segments": 3}
    assert data["rows"][0]["cells"] == ["", "c0 → R2", "", ""]


def test_show_master_root_and_table(capsys):
    assert main(["show", "all_reduce", "-a", "master", "-N", "4", "--root", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "master all_reduce: world_size=4, 1 chunk per rank, 6 steps"
    assert next(ln for ln in lines if ln.startswith("after reduce")).split()[2:] == [
        "-", "-", "owns", "c0", "-"]


@pytest.mark.parametrize("collective", list(ringccl.collectives()))
def test_simulate_every_algorithm(capsys, collective):
    for algorithm in ringccl.algorithms(collective):
        schedule = ringccl.schedule(collective, algorithm, world_size=5)
        # schedules that move all_to_all blocks through other blocks' slots need equal blocks
        count = "1003" if split_safe(schedule) else "1005"
        argv = ["simulate", collective, "-a", algorithm, "-N", "5", "-c", count, "--json"]
        assert main(argv) == 0, algorithm
        r = json.loads(capsys.readouterr().out)
        assert r["verified"] and r["steps"] == r["steps_closed_form"], algorithm
        if r["params"].get("root") is not None:
            assert r["params"]["root"] == 0


def test_simulate_with_a_root(capsys):
    assert main(["simulate", "gather", "-a", "binomial", "-N", "6", "--dst", "5", "-c", "10",
                 "--dtype", "int8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["params"] == {"root": 5} and r["steps"] == 3
    assert r["buffer_bytes"] == 60 and r["bytes_sent_max"] == 20  # the subtree {R1, R2}
    assert r["bytes_sent_closed_form"] == 20


@pytest.mark.parametrize("argv,message", [
    (["show", "reduce", "--src", "1"], "src=1 does not apply to reduce, which takes dst="),
    (["simulate", "broadcast", "--src", "9", "-N", "4"], "src=9 is out of range"),
    (["show", "all_reduce", "--segments", "2"], "ring all_reduce takes the parameters (none); "
                                                "got segments"),
    (["show", "scatter", "-a", "ring"], "algorithm='ring' is not available for scatter"),
    (["show", "broadcast", "--param", "segments"], "--param 'segments' must be NAME=INTEGER"),
])
def test_errors_exit_2_with_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringccl: error: ") and message in err and err.count("\n") == 1


def test_algorithms_lists_every_collective(capsys):
    assert main(["algorithms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["collective"] for r in rows} == set(ringccl.collectives())
    assert {"collective": "scatter", "algorithm": "binomial", "steps": "⌈log2 N⌉"}.items() <= \
        next(r for r in rows if r["collective"] == "scatter" and
             r["algorithm"] == "binomial").items()
