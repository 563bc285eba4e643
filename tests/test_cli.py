"""The ringccl command: outputs, --json, exit codes."""

import json

import pytest

from ringccl.cli import main


def test_show_prints_the_seed_table(capsys):
    assert main(["show", "all_reduce", "--world-size", "4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    row = next(line for line in lines if line.startswith("reduce-scatter 1"))
    assert row.split()[2:] == ["c0", "→", "R1", "c1", "→", "R2", "c2", "→", "R3", "c3", "→", "R0"]
    owns = next(line for line in lines if line.startswith("after reduce-scatter"))
    assert owns.split()[2:] == ["owns", "c1", "owns", "c2", "owns", "c3", "owns", "c0"]
    ag = next(line for line in lines if line.startswith("all-gather 1"))
    assert ag.split()[2:] == ["c1", "→", "R1", "c2", "→", "R2", "c3", "→", "R3", "c0", "→", "R0"]


def test_show_json(capsys):
    assert main(["show", "all_reduce", "-N", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["num_steps"] == 4 and data["rows"][0]["cells"] == ["c0 → R1", "c1 → R2",
                                                                   "c2 → R0"]


def test_simulate_json_reports_steps_and_bytes(capsys):
    assert main(["simulate", "all_reduce", "--world-size", "16", "--count", "1Ki", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["steps"] == 30 and r["verified"] is True
    assert r["bytes_sent_max"] == 2 * 15 * 1024 * 4 // 16 == r["bytes_sent_closed_form"]


def test_simulate_table(capsys):
    assert main(["simulate", "reduce_scatter", "-N", "5", "-c", "1003", "--dtype", "int16",
                 "--op", "bxor"]) == 0
    out = capsys.readouterr().out
    assert "verified against numpy" in out and "yes" in out


def test_algorithms_listing(capsys):
    assert main(["algorithms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"collective": "all_reduce", "algorithm": "ring", "steps": "2(N-1)",
            "bytes_sent_per_rank": "2(N-1)/N·M"}.items() <= rows[0].items()


@pytest.mark.parametrize("argv,message", [
    (["simulate", "all_reduce", "--op", "avg", "--dtype", "int32"], "op=avg needs a floating"),
    (["simulate", "all_reduce", "--algorithm", "nope"], "algorithm='nope' is not available"),
    (["show", "all_gather", "--algorithm", "tree"], "algorithm='tree' is not available"),
])
def test_errors_exit_2_with_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringccl: error: ") and message in err and err.count("\n") == 1


def test_bad_count_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["simulate", "all_reduce", "--count", "1.5"])
    assert info.value.code == 2
    assert "count '1.5' must be a whole number" in capsys.readouterr().err


def test_demo_without_processes(capsys):
    assert main(["demo", "--no-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulate"]["verified"] and data["simulate"]["world_size"] == 8
