"""The ringccl command: outputs, --json, exit codes."""

import importlib.util
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
    assert data["steps_not_shown"] == 0


def test_show_json_says_how_many_steps_it_left_out(capsys):
    assert main(["show", "all_reduce", "-N", "100", "--max-steps", "50", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    steps = [r for r in data["rows"] if r["kind"] == "step"]
    assert data["num_steps"] == 198 and len(steps) == data["max_steps"] == 50
    assert data["steps_not_shown"] == 148


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
    # --accumulate-dtype: checked before any input is made, naming the option and what is allowed
    (["simulate", "all_gather", "--accumulate-dtype", "float32"],
     "--accumulate-dtype='float32' applies to reducing collectives only (all_reduce, "
     "reduce_scatter, reduce), not all_gather"),
    (["simulate", "all_reduce", "--accumulate-dtype", "float16"],
     "--accumulate-dtype=float16 is narrower than the input's float32; expected None or one of "
     "float32, float64"),
    (["simulate", "reduce", "--dtype", "int32", "--accumulate-dtype", "float64"],
     "--accumulate-dtype='float64' needs a floating input, got int32"),
    (["simulate", "reduce_scatter", "--accumulate-dtype", "int64"],
     "--accumulate-dtype='int64' is not a floating dtype; expected None or one of float32, "
     "float64"),
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


def test_simulate_accumulate_dtype(capsys):
    argv = ["simulate", "all_reduce", "-N", "5", "-c", "1003", "--dtype", "float16", "--json"]
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(argv + ["--accumulate-dtype", "f4"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["accumulate_dtype"] == "float32" and plain["accumulate_dtype"] is None
    assert r["verified"] is True and "accumulate_dtype=float32" in r["tolerance"]
    # the working buffer, and so every message, is float32: twice float16's bytes
    assert r["buffer_bytes"] == plain["buffer_bytes"] == 1003 * 2
    assert r["wire_bytes"] == 2 * plain["wire_bytes"] == 1003 * 4
    assert r["bytes_sent_max"] == 2 * plain["bytes_sent_max"]
    assert r["bytes_sent_closed_form"] == 2 * plain["bytes_sent_closed_form"]
    assert main(argv[:-1] + ["--accumulate-dtype", "float64"]) == 0
    out = capsys.readouterr().out
    assert "accumulate_dtype=float64" in out and "on the wire in float64" in out


@pytest.mark.parametrize("command", ["simulate", "run"])
def test_accumulate_dtype_is_in_the_help(capsys, command):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert "--accumulate-dtype DTYPE" in capsys.readouterr().out


torch_missing = importlib.util.find_spec("torch") is None


@pytest.mark.skipif(torch_missing, reason="ringccl run needs torch")
def test_run_accumulate_dtype_reaches_the_workers_and_is_checked_first(capsys, monkeypatch):
    import ringccl.backends.torch.runner as runner   # imported first: its launch is replaced
    calls = []

    def launch(fn, nproc, spec, *args, **kwargs):  # the bench sweep's worker and its spec
        calls.append(spec)
        row = {"world_size": nproc, "size": 16, "wrong": 0, "time_s": 1e-5, "min_s": 1e-5,
               "p90_s": 1e-5, "algbw": 1.6e6, "busbw": 1.6e6}
        return [[dict(row, algorithm=spec["algorithms"][0]), dict(row, algorithm="builtin")]]

    monkeypatch.setattr(runner, "launch", launch)
    assert main(["run", "reduce", "-n", "2", "-c", "8", "--dtype", "float16",
                 "--accumulate-dtype", "float64", "--json"]) == 0
    assert calls[0]["accumulate_dtype"] == "float64"
    assert json.loads(capsys.readouterr().out)["accumulate_dtype"] == "float64"
    # refused in this process, before any worker starts
    assert main(["run", "broadcast", "-n", "2", "-c", "8", "--accumulate-dtype", "float64"]) == 2
    assert "--accumulate-dtype='float64' applies to reducing collectives only" in \
        capsys.readouterr().err
    assert len(calls) == 1


def test_a_simulation_larger_than_memory_is_refused_up_front(capsys):
    # 4 ranks x 2^36 float32 (1 TiB of inputs): refused before any input is made, not killed
    assert main(["simulate", "all_reduce", "-N", "4", "-c", "64Gi"]) == 2
    err = capsys.readouterr().err
    assert "simulating all_reduce on 4 ranks x count=68719476736 needs about 2.10 TiB" in err
    assert "more than this machine's" in err and "use a smaller -c/--count" in err
    assert err.startswith("ringccl: error: -c/--count 68719476736 is too large") and "fit" in err
