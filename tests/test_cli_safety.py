"""The CLI's safety rails and output (issue 14), without starting processes: --nproc and memory
refused up front, --oversubscribe, Ctrl-C's partial report, tables that never truncate,
what ``run`` rounds, torch's non-deprecated builtins, ``demo`` without torch."""

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from ringccl import resources
from ringccl.cli import common, main
from ringccl.errors import Interrupted, RingcclError

from .gloo_group import one_rank_gloo_group

SRC = Path(__file__).resolve().parents[1] / "src"


class _Started(RingcclError):
    """A launcher was reached (main reports it as an error, exit 2)."""


@pytest.fixture
def no_launch(monkeypatch):
    """Every launcher the CLI can reach replaced by one that records and refuses: a refusal
    must come before any of them is called."""
    calls = []

    def refuse(*args, **kwargs):
        calls.append((args, kwargs))
        raise _Started("a launcher was called")

    pytest.importorskip("torch")
    import ringccl.torch.launch
    import ringccl.backends.torch.runner
    monkeypatch.setattr(ringccl.torch.launch, "launch", refuse)
    monkeypatch.setattr(ringccl.backends.torch.runner, "launch_sweep", refuse)
    monkeypatch.setattr("ringccl.cli.run.launch_bench", refuse)
    return calls


@pytest.mark.parametrize("argv", [
    ["run", "all_reduce", "--nproc", "1000", "-c", "10"],
    ["bench", "all_reduce", "--nproc", "1000", "-b", "4KiB", "-e", "4KiB"],
    ["bench", "all_reduce", "--nproc", "1000", "-b", "4KiB", "-e", "4KiB", "--backend", "mpi"],
    ["train", "--nproc", "1000", "--epochs", "1", "--no-plot"],
])
def test_too_many_processes_are_refused_before_any_starts(argv, capsys, no_launch):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ringccl: error: --nproc 1000 "), err
    assert "--oversubscribe" in err[0] and "at most" in err[0]
    assert not no_launch


def test_too_many_processes_for_the_cores_name_the_core_limit(capsys, no_launch, monkeypatch):
    monkeypatch.setattr(resources, "usable_cores", lambda: 1)
    assert main(["run", "all_reduce", "--nproc", "5", "-c", "10"]) == 2
    err = capsys.readouterr().err
    assert "--nproc 5 is more than 4 processes per core" in err and "1 usable cores" in err
    assert not no_launch


def test_a_buffer_larger_than_memory_is_refused_naming_memory_and_count(capsys, no_launch):
    assert main(["run", "all_reduce", "-c", "100Gi", "--nproc", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "available" in err and "--count" in err
    assert "400.00 GiB per rank" in err, err
    assert main(["bench", "all_reduce", "--nproc", "2", "-b", "4KiB", "-e", "1TiB"]) == 2
    assert "-e/--maxbytes" in capsys.readouterr().err
    assert not no_launch


def test_oversubscribe_passes_the_check_and_tells_launch_it_was_checked(capsys, monkeypatch):
    pytest.importorskip("torch")
    import ringccl.backends.torch.runner
    monkeypatch.setattr(resources, "usable_cores", lambda: 1)
    seen = {}

    def record(spec, nproc, on_row=None, timeout=0, **kwargs):
        seen.update(kwargs, nproc=nproc)
        raise Interrupted(partial=[])  # stop here: what reached the launcher is the point

    monkeypatch.setattr(ringccl.backends.torch.runner, "launch_sweep", record)
    assert main(["run", "all_reduce", "--nproc", "5", "-c", "10", "--oversubscribe",
                 "--verbose"]) == 130
    assert seen["nproc"] == 5 and seen["oversubscribe"] is True and seen["verbose"] is True
    assert seen["worker_bytes"] == resources.run_worker_bytes(40)


# -- what run rounds -----------------------------------------------------------------------------

def test_run_says_what_it_rounded(capsys, no_launch):
    assert main(["run", "scatter", "--nproc", "4", "-c", "7"]) == 2  # the launcher refused
    err = capsys.readouterr().err
    assert ("count 7 rounded down to 4 = world_size × 1 for scatter: the input of scatter is "
            "world_size equal blocks, one per rank") in err
    assert len(no_launch) == 1  # then it ran (the launcher was reached)


def test_run_refuses_a_count_that_rounds_to_nothing(capsys, no_launch):
    assert main(["run", "reduce_scatter", "--nproc", "4", "-c", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--count 3 rounds down to 0 elements for reduce_scatter" in err[0]
    assert not no_launch


# -- tables --------------------------------------------------------------------------------------

def _numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)?", text)


def test_tables_are_plain_when_narrower_than_the_terminal(capsys, monkeypatch):
    rows = [["ringccl ring", "4.00 MiB", 1048576, "5929123.4"], ["gloo", "4.00 MiB", 7, "0.001"]]
    monkeypatch.setattr(common, "_terminal_columns", lambda: 40)
    common.table("a title", ["impl", "size", "count", "time (us)"], rows)
    out = capsys.readouterr().out
    assert "…" not in out and "┃" not in out
    lines = out.splitlines()
    assert lines[0] == "a title" and lines[1].split() == ["impl", "size", "count", "time", "(us)"]
    assert lines[3].split() == ["ringccl", "ring", "4.00", "MiB", "1048576", "5929123.4"]
    monkeypatch.setattr(common, "_terminal_columns", lambda: 500)  # a wide terminal: rich
    common.table("a title", ["impl", "size", "count", "time (us)"], rows)
    out = capsys.readouterr().out
    if common.importlib.util.find_spec("rich"):
        assert "┃" in out and "5929123.4" in out
    common.table("a title", ["impl", "size", "count", "time (us)"], rows, "plain")
    assert "┃" not in capsys.readouterr().out


def test_a_piped_table_is_plain_even_with_a_tiny_columns(monkeypatch):
    code = ("from ringccl.cli import common; common.table('t', ['a', 'b', 'c'], "
            "[['x' * 30, 123456789.123, 'y' * 30]])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "COLUMNS": "40", "PATH": "/usr/bin:/bin"},
                         check=True).stdout
    assert "123456789.123" in out and "…" not in out and "x" * 30 in out


@pytest.fixture(scope="module")
def gloo_group():
    yield from one_rank_gloo_group()


def _in_process_sweep(recorded, stop_after=None):
    """launch_sweep's stand-in: the real sweep, on the test process's one-rank gloo group."""
    def run(spec, nproc, on_row=None, timeout=0, **kwargs):
        from ringccl.bench import run_sweep
        from ringccl.backends.torch.runner import TorchBackend
        done = []

        def emit(row):
            done.append(row)
            if on_row:
                on_row(row)
            if stop_after is not None and len(done) == stop_after:
                raise Interrupted(partial=list(done))
        rows = run_sweep(TorchBackend(), spec, emit)
        recorded.extend(rows)
        return rows
    return run


def test_run_and_bench_tables_print_every_number_in_full(gloo_group, capsys, monkeypatch):
    import ringccl.backends.torch.runner
    recorded: list = []
    monkeypatch.setattr(ringccl.backends.torch.runner, "launch_sweep", _in_process_sweep(recorded))
    monkeypatch.setenv("COLUMNS", "40")
    assert main(["run", "all_reduce", "--nproc", "1", "-c", "1Mi", "--iters", "2"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    for r in recorded:
        for value in (r["time_s"] * 1e6, r["min_s"] * 1e6, r["p90_s"] * 1e6):
            assert f"{value:.1f}" in _numbers(out), (value, out)
    assert "1048576" in _numbers(out)
    recorded.clear()
    assert main(["bench", "all_reduce", "--nproc", "1", "-b", "4KiB", "-e", "64KiB",
                 "-a", "ring,builtin", "--iters", "2", "-w", "0", "--format", "plain"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    for r in recorded:
        if r["kind"] == "collective":
            assert f"{r['time_s'] * 1e6:.1f}" in _numbers(out)
            assert f"{r['busbw'] / 1e9:.3f}" in _numbers(out)


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--csv"]])
def test_an_interrupted_bench_reports_the_rows_so_far(gloo_group, capsys, monkeypatch, fmt):
    import ringccl.backends.torch.runner
    monkeypatch.setattr(ringccl.backends.torch.runner, "launch_sweep", _in_process_sweep([], 3))
    assert main(["bench", "all_reduce", "--nproc", "1", "-b", "4KiB", "-e", "64KiB", "-a",
                 "ring,builtin", "--iters", "1", "-w", "0"] + fmt) == 130
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "interrupted: 3 of 15 rows measured, every worker ended"]
    if fmt == ["--json"]:
        report = json.loads(captured.out)
        assert len(report["rows"]) == 3 and report["interrupted"] is True
    elif fmt == ["--csv"]:
        assert len(captured.out.strip().splitlines()) == 1 + 3
    else:
        assert captured.out.count("4.00 KiB") == 3


def test_main_turns_any_keyboard_interrupt_into_one_line(capsys, monkeypatch):
    import ringccl.cli.simulate

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ringccl.cli.simulate, "sim_report", interrupt)
    assert main(["simulate", "all_reduce", "-N", "4", "-c", "8"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [
        "interrupted: ringccl simulate stopped before it finished"]


# -- torch's deprecations ------------------------------------------------------------------------

@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
def test_the_builtin_uses_no_deprecated_torch_api(gloo_group, collective):
    from ringccl.bench import BUILTIN, BenchSpec
    from ringccl.bench.inputs import make_case
    from ringccl.ops import parse_op
    from ringccl.backends.torch.runner import TorchBackend
    be = TorchBackend()
    spec = BenchSpec(collective)
    case = make_case(collective, 8, 1, 0, 0, parse_op("sum"), np.dtype("float32"))
    for placement in ("out-of-place", "in-place"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            prepared = be.prepare(collective, BUILTIN, placement, case, spec, None)
            prepared.reset()
            prepared.run()
        assert not [w for w in caught if issubclass(w.category, FutureWarning)], \
            [str(w.message) for w in caught]


# -- demo without torch --------------------------------------------------------------------------

def test_demo_without_torch_skips_the_third_part_with_a_note():
    code = ("import sys; sys.modules['torch'] = None; from ringccl.cli import main; "
            "sys.exit(main(['demo', '--sim-count', '1003']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2) Ring all-reduce simulated" in done.stdout
    assert ("3) skipped: the part on real processes needs torch, which is not installed: pip "
            "install 'ringccl[torch]'") in done.stdout
    assert done.stderr == ""
