"""The CLI's safety rails and output, without starting processes: --nproc and memory
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


# -- schedules sized before they are built --------------------------------------------------------

@pytest.fixture
def built(monkeypatch):
    """The world sizes the CLI builds schedules at (probes included), with 8 GiB available
    whatever the machine has: what is refused must be refused before its size is built."""
    from ringccl import clear_caches
    from ringccl.algorithms import bounded as limits
    sizes = []
    real = limits.build_schedule

    def record(collective, algorithm, world_size, **params):
        sizes.append(world_size)
        return real(collective, algorithm, world_size, **params)

    clear_caches()
    monkeypatch.setattr(limits, "build_schedule", record)
    monkeypatch.setattr(resources, "available_memory", lambda: 8 << 30)
    return sizes


@pytest.mark.parametrize("argv,message", [
    # the ring all-reduce's symbolic check on 10,000 ranks needs ~120 GiB (its 10^4 x 10^4
    # slots of 157-word bit sets): refused at once, not after allocating it
    (["show", "all_reduce", "-N", "10000"],
     "-N/--world-size 10000: the ring all_reduce schedule on 10000 ranks would have about "
     "221,223,808 transfers and 10,000 chunks per rank (extrapolated from 32 and 64 ranks); "
     "building and checking it needs about 292.90 GiB, more than this machine's 8.00 GiB "
     "available; use a smaller -N/--world-size"),
    (["simulate", "all_reduce", "-N", "10000", "-c", "1"],
     "-N/--world-size 10000: the ring all_reduce schedule on 10000 ranks would have about "
     "221,223,808 transfers (extrapolated from 32 and 64 ranks); building it needs about "
     "19.78 GiB, more than this machine's 8.00 GiB available"),
    (["compare", "all_to_all", "-N", "20000"], "-N/--world-size 20000: the direct all_to_all"),
    (["show", "broadcast", "--src", "5000", "-N", "10000"],
     "-N/--world-size 10000: the ring broadcast schedule on 10000 ranks would have about"),
    # a pipelined chain's steps grow with --segments, counted by the closed form
    (["show", "broadcast", "--segments", "1000000000", "-N", "4"],
     "-N/--world-size 4 --segments 1000000000: the ring broadcast schedule has 1,000,000,002 "
     "steps, which need about 59.60 GiB, more than this machine's 8.00 GiB available; use a "
     "smaller -N/--world-size or --segments"),
])
def test_a_schedule_too_large_for_memory_is_refused_before_it_is_built(capsys, built, argv,
                                                                      message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringccl: error: ") and err.count("\n") == 1 and message in err, err
    assert max(built, default=0) <= 64, built   # the probes at most


def test_a_schedule_too_large_for_its_bound_is_refused_as_it_is_built(capsys, monkeypatch):
    # on 64 ranks (no extrapolation) the ring all-reduce's 8,064 transfers need ~774 KB to
    # build: with 500 KB, (500,000 - 126 steps x 64) // 96 = 5,124 transfers fit, and the
    # group that passes them is refused before its arrays exist
    from ringccl import clear_caches
    from ringccl.algorithms._build import Transfers
    clear_caches()
    monkeypatch.setattr(resources, "available_memory", lambda: 500_000)
    made = []
    real = Transfers.schedule
    monkeypatch.setattr(Transfers, "schedule",
                        lambda *a, **k: made.append(1) or real(*a, **k))
    assert main(["show", "all_reduce", "-N", "64"]) == 2
    assert ("-N/--world-size 64: the ring all_reduce schedule on 64 ranks has more than 5,124 "
            "transfers; at ~96 bytes each while it is built they need more than this machine's "
            "488.28 KiB of available memory; use a smaller -N/--world-size") in \
        capsys.readouterr().err
    assert not made


def test_a_check_too_large_for_memory_is_refused_before_it_runs(monkeypatch):
    from ringccl.algorithms import build_schedule
    from ringccl.check import verify_bytes
    from ringccl.algorithms import bounded as limits
    schedule = build_schedule("all_reduce", "ring", 64)
    need = verify_bytes(schedule)
    assert need == 18 * 64 * 64 * 1 + 48 * 8064 + 24 * 1 * 64
    monkeypatch.setattr(resources, "available_memory", lambda: need - 1)
    with pytest.raises(RingcclError, match=r"^-N/--world-size 64: checking the ring all_reduce "
                       r"schedule \(64 ranks, 64 chunks per rank, 8,064 transfers\) needs about "
                       r"451\.50 KiB, more than this machine's 451\.50 KiB available"):
        limits.check_verify(schedule, ("-N/--world-size 64", "-N/--world-size"))
    monkeypatch.setattr(resources, "available_memory", lambda: need)
    limits.check_verify(schedule, ("-N/--world-size 64", "-N/--world-size"))


def test_the_extrapolation_covers_the_built_size():
    # the built-in algorithms grow as N, N^2 or N^2 log N: from 32 and 64 ranks the estimate
    # at 200 is at least the truth and within MARGIN of it
    from ringccl.algorithms import REGISTRY, build_schedule
    from ringccl.algorithms import bounded as limits
    for (collective, algorithm) in REGISTRY:
        s = build_schedule(collective, algorithm, 200)
        transfers, chunks, busiest = limits.estimate(collective, algorithm, 200, {})
        assert s.num_transfers <= transfers * 1.01 and transfers <= limits.MARGIN * max(
            s.num_transfers, 1) + 1, (collective, algorithm, s.num_transfers, transfers)
        assert s.num_chunks <= chunks * 1.01, (collective, algorithm)


def test_an_address_space_bound_fails_allocations_beyond_it():
    import resource
    before = resource.getrlimit(resource.RLIMIT_AS)
    with resources.address_space_bound(64 << 20):
        np.ones(1 << 20)                # 8 MiB: within
        with pytest.raises(MemoryError):
            np.ones(1 << 27)            # 1 GiB: refused at once, nothing touched
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    np.ones(1 << 27)


def test_run_names_the_process_limit_before_building_a_schedule(capsys, no_launch, built,
                                                                  monkeypatch):
    monkeypatch.setattr(resources, "usable_cores", lambda: 2)
    assert main(["run", "all_reduce", "-n", "10000", "-c", "8"]) == 2
    assert "--nproc 10000 is more than 4 processes per core" in capsys.readouterr().err
    assert built == [] and not no_launch


# -- the machine's limit that binds first ---------------------------------------------------------

def test_bench_names_the_limit_that_binds(capsys, no_launch, monkeypatch):
    # 2 cores hold 8 processes, 24.5 GB hold 35 of them: 64 is refused for the cores
    monkeypatch.setattr(resources, "usable_cores", lambda: 2)
    monkeypatch.setattr(resources, "available_memory", lambda: 24_500_000_000)
    assert main(["bench", "all_reduce", "-n", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("ringccl: error: --nproc 64 is more than 4 processes per core on this "
                   "machine's 2 usable cores (at most 8); pass --oversubscribe to start them "
                   "anyway")
    # ... and with 64 cores the memory binds: 35 fit
    monkeypatch.setattr(resources, "usable_cores", lambda: 64)
    assert main(["bench", "all_reduce", "-n", "64"]) == 2
    assert "available; at most 35 fit" in capsys.readouterr().err
    assert not no_launch


# -- the environment every worker reads, checked before any starts -------------------------------

@pytest.fixture
def no_workers(monkeypatch):
    """The torch launcher's process creation and mpirun replaced by refusals that record: the
    launcher's own checks run, and a refusal must come before them."""
    pytest.importorskip("torch")
    import ringccl.backends.mpi.launch
    import ringccl.backends.torch.launch
    import ringccl.backends.torch.runner
    started = []

    def refuse(*args, **kwargs):
        started.append(args)
        raise _Started("a worker was started")

    monkeypatch.setattr(ringccl.backends.torch.launch, "_processes", refuse)
    # the real launcher, whatever a test before left in the runner's name for it
    monkeypatch.setattr(ringccl.backends.torch.runner, "launch",
                        ringccl.backends.torch.launch.launch)
    monkeypatch.setattr(ringccl.backends.mpi.launch.subprocess, "Popen", refuse)
    for name in ("RINGCCL_TRANSPORT", "RINGCCL_TIMEOUT", "RINGCCL_DEBUG", "RINGCCL_ALGO",
                 "RINGCCL_LANE"):
        monkeypatch.delenv(name, raising=False)
    return started


def _worker_message(name: str) -> str:
    """What a worker's call says about the variable's value: its own parser, called here."""
    from ringccl import consistency, environment
    from ringccl.backends import shm
    from ringccl.backends.shm import lane
    from ringccl.backends.torch.transport import TRANSPORTS
    from ringccl.costmodel.choice import parse_algo_env
    from ringccl.engine import timeout_seconds
    parse = {"RINGCCL_TRANSPORT": lambda: shm.transport_choice("auto", TRANSPORTS),
             "RINGCCL_TIMEOUT": lambda: timeout_seconds(None),
             "RINGCCL_DEBUG": consistency.debug_level,
             "RINGCCL_ALGO": lambda: parse_algo_env(environment.get("RINGCCL_ALGO")),
             "RINGCCL_LANE": lane.check_environment}[name]
    with pytest.raises(RingcclError) as info:
        parse()
    return str(info.value)


@pytest.mark.parametrize("name,value,message", [
    ("RINGCCL_TRANSPORT", "tcp", "RINGCCL_TRANSPORT='tcp' must be one of 'auto', 'shm', 'p2p', "
     "'hybrid'"),
    ("RINGCCL_TIMEOUT", "abc", "RINGCCL_TIMEOUT='abc' must be a finite number of seconds > 0"),
    ("RINGCCL_DEBUG", "INOF", "RINGCCL_DEBUG='INOF' must be one of 0, off, false, no or unset "
     "(nothing), INFO (a log line per call), TRACE (INFO and every step's times) or 1, on, "
     "true, yes, check, detail (the cross-rank check); case-insensitive"),
    ("RINGCCL_ALGO", "all_reduce:nope", "RINGCCL_ALGO entry 'all_reduce:nope': all_reduce has "
     "no algorithm 'nope'; expected one of ring"),
    ("RINGCCL_ALGO", "garbage", "RINGCCL_ALGO entry 'garbage' must be collective:algorithm"),
    ("RINGCCL_LANE", "maybe", "RINGCCL_LANE='maybe' must be '1' or 'on'"),
])
@pytest.mark.parametrize("command", [["run", "all_reduce", "-n", "2", "-c", "8"],
                                     ["bench", "all_reduce", "-n", "2", "-e", "4KiB"],
                                     ["train", "--nproc", "2", "--epochs", "1", "--no-plot"]])
def test_a_bad_environment_variable_is_refused_before_any_worker_starts(
        capsys, monkeypatch, no_workers, command, name, value, message):
    monkeypatch.setenv(name, value)
    assert main(command) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ringccl: error: {_worker_message(name)}"   # the worker's words, once
    assert message in err and not no_workers


def test_mpi_launches_check_their_own_transports(capsys, monkeypatch, no_workers):
    monkeypatch.setenv("RINGCCL_TRANSPORT", "hybrid")   # the torch backend's, not ringccl.mpi's
    assert main(["bench", "all_reduce", "--backend", "mpi", "-n", "2", "-e", "4KiB"]) == 2
    assert capsys.readouterr().err.strip() == (
        "ringccl: error: RINGCCL_TRANSPORT='hybrid' must be one of 'auto', 'shm', 'p2p'")
    assert not no_workers


def test_demo_sizes_every_part_before_printing_the_first(capsys, monkeypatch, no_launch):
    from ringccl.sim import memory
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 << 30)
    monkeypatch.setattr(resources, "usable_cores", lambda: 2)
    assert main(["demo", "--sim-count", "1e12"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("ringccl: error: --sim-count 1000000000000 is too large")
    assert "use a smaller --sim-count" in err
    assert main(["demo", "--nproc", "64"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--nproc 64 is more than 4 processes per core" in err
    assert "pass --oversubscribe" in err
    assert not no_launch
    # the option the refusal names is one demo takes: it goes on to start them
    main(["demo", "--nproc", "64", "--oversubscribe", "--sim-count", "8"])
    capsys.readouterr()
    assert no_launch and no_launch[0][1]["oversubscribe"] is True


def test_the_cost_models_walks_are_bounded_by_memory(capsys, monkeypatch):
    # a two-level machine has no closed forms: model walks every algorithm's schedule on
    # 2048 ranks (a ring all-reduce's 8.4M transfers); with 256 MiB the large ones are refused
    # by name, the small ones (tree: 4,094 transfers) still costed
    from ringccl import clear_caches
    clear_caches()
    monkeypatch.setattr(resources, "available_memory", lambda: 256 << 20)
    assert main(["model", "all_reduce", "--nodes", "256", "--local", "8", "-s", "1MiB",
                 "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["tables"][0]
    assert "tree" in {r["algorithm"] for r in table["rows"]}
    assert table["skipped"]["ring"] == (
        "--nodes 256 --local 8: the cost model's walk of an algorithm's schedule builds a "
        "schedule with more than 2,796,202 transfers; at ~96 bytes each they need more than "
        "this machine's 256.00 MiB of available memory; use a smaller --nodes or --local")


@pytest.mark.parametrize("argv,flags", [
    (["plan", "--model", "llama3-8b"], "--seq-length, --global-batch-size or --gpus"),
    (["simulate", "all_reduce"], "-c/--count or -N/--world-size"),
])
def test_out_of_memory_names_the_commands_own_size_flags(monkeypatch, capsys, argv, flags):
    from ringccl.cli import app

    def out_of_memory(args):
        raise MemoryError("Unable to allocate 58.2 GiB")
    monkeypatch.setattr(app, "_run", out_of_memory)
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"ringccl: error: not enough memory (Unable to allocate "
                                       f"58.2 GiB); use a smaller {flags}\n")
