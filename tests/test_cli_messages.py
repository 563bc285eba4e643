"""Clear one-line messages for bad values, one
meaning per short flag, one default algorithm per collective, user algorithms reaching the CLI,
and ``show`` on many ranks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ringccl
from ringccl import plugins
from ringccl.algorithms import REGISTRY
from ringccl.algorithms.registry import DEFAULTS, default_algorithm
from ringccl.cli import main
from ringccl.collectives import COLLECTIVES

SRC = Path(__file__).resolve().parent.parent / "src"


def _usage_error(capsys, argv) -> str:
    """argparse's usage error: exit 2, its message (the last stderr line)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def _error(capsys, argv) -> str:
    """A ringccl error: exit 2 and exactly one stderr line; returns it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringccl: error: ") and err.count("\n") == 1, err
    return err


# -- one default per collective -------------------------------------------------------------------

def test_one_default_per_collective_everywhere(capsys):
    assert set(DEFAULTS) == set(COLLECTIVES)
    for collective in COLLECTIVES:
        name = default_algorithm(collective)
        assert name == DEFAULTS[collective] and name in ringccl.algorithms(collective)
        # ringccl.schedule without an algorithm: the default (scatter used to fail with "ring")
        assert ringccl.schedule(collective, world_size=4).algorithm == name
        from ringccl.sim import default_algorithm as sim_default
        assert sim_default(collective) == name
    assert ringccl.schedule("scatter", world_size=4).algorithm == "direct"
    assert main(["algorithms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    marked = {r["collective"]: r["algorithm"] for r in rows if r["default"]}
    assert marked == dict(DEFAULTS)
    assert main(["algorithms", "scatter"]) == 0
    out = capsys.readouterr().out
    assert "direct *" in out and "binomial *" not in out and "* = the default" in out


def test_cli_simulate_uses_the_default(capsys):
    assert main(["simulate", "gather", "-N", "4", "-c", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["algorithm"] == DEFAULTS["gather"]


# -- --version, --import --------------------------------------------------------------------------

def test_version(capsys):
    from importlib import metadata

    from ringccl.cli.app import version
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"ringccl {version()}"
    try:
        assert version() == metadata.version("ringccl")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        assert version() == ringccl.__version__


MY_ALGOS = '''
import numpy as np
from ringccl import Algorithm, Schedule, register


def my_ring(world_size):
    n = world_size
    s = np.repeat(np.arange(n - 1), n)
    r = np.tile(np.arange(n), n - 1)
    return Schedule.from_arrays("all_gather", "my_ring", n, n, step=s, src=r,
                                dst=(r - 1) % n, src_chunk=(r + s) % n,
                                phases=["all-gather"] * (n - 1))


register(Algorithm(collective="all_gather", name="my_ring", builder=my_ring,
                   num_steps=lambda n: n - 1, bytes_sent=lambda n, m: (n - 1) / n * m,
                   steps_formula="N-1", bytes_formula="(N-1)/N·M"))
'''


@pytest.fixture
def my_algos(tmp_path, monkeypatch):
    path = tmp_path / "my_algos.py"
    path.write_text(MY_ALGOS)
    monkeypatch.setenv(plugins.ENV_VAR, "")  # records the old state: restored after the test
    monkeypatch.delenv(plugins.ENV_VAR)  # main sets it for the workers
    monkeypatch.syspath_prepend(str(tmp_path))
    yield path
    REGISTRY.pop(("all_gather", "my_ring"), None)
    sys.modules.pop("my_algos", None)
    for name in [m for m in sys.modules if m.startswith("ringccl_user_my_algos")]:
        del sys.modules[name]
    ringccl.clear_caches()


def test_unknown_algorithm_without_import(capsys, my_algos):
    assert "algorithm='my_ring' is not available" in _error(
        capsys, ["show", "all_gather", "-a", "my_ring"])


@pytest.mark.parametrize("how", ["module", "path"])
def test_import_makes_a_user_algorithm_reach_the_cli(capsys, my_algos, how):
    spec = "my_algos" if how == "module" else str(my_algos)
    assert main(["--import", spec, "show", "all_gather", "-a", "my_ring", "-N", "3"]) == 0
    out = capsys.readouterr().out
    assert "my_ring" in out and "c0 → R2" in out  # rank 0 sends to rank -1 = 2
    # the workers run/bench start inherit the environment: it names the module (a file by its
    # absolute path, whatever the workers' working directory)
    assert plugins.parse_env(plugins.os.environ[plugins.ENV_VAR]) == [
        spec if how == "module" else str(my_algos.resolve())]
    assert main(["--import", spec, "simulate", "all_gather", "-a", "my_ring", "-N", "5", "-c",
                 "7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verified"] is True


def test_environment_variable_imports_in_a_fresh_process(my_algos):
    """A worker process (a fresh interpreter with the launcher's environment) gets the user's
    algorithm from RINGCCL_IMPORT through plugins.import_user_modules()."""
    code = ("from ringccl.plugins import import_user_modules; import_user_modules(); "
            "import ringccl; print(ringccl.schedule('all_gather', 'my_ring', world_size=4)"
            ".num_steps)")
    env = dict(plugins.os.environ, PYTHONPATH=str(SRC), RINGCCL_IMPORT=str(my_algos))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd="/", check=True).stdout
    assert out.strip() == "3"


def test_import_errors_name_the_module(capsys, my_algos, tmp_path):
    assert "--import 'no_such_module_xyz': no module named 'no_such_module_xyz'" in _error(
        capsys, ["--import", "no_such_module_xyz", "algorithms"])
    missing = tmp_path / "nope.py"
    assert f"--import '{missing}': no such file" in _error(
        capsys, ["--import", str(missing), "algorithms"])


# -- fit: --world-size, one-size sweeps -----------------------------------------------------------

def _bench_json(tmp_path, sizes, world_size=2, alpha=30e-6, beta=1 / 2e9):
    """A small ``ringccl bench --json`` file: ring all_gather rows of known α, β (no γ)."""
    time = ringccl.get_algorithm("all_gather", "ring").time
    rows = [{"kind": "collective", "collective": "all_gather", "algorithm": "ring",
             "world_size": world_size, "size": size, "placement": "in-place",
             "segment_bytes": None, "backend": "gloo",
             "time_s": time(world_size, size, alpha, beta, 0.0)} for size in sizes]
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"rows": rows}))
    return str(path)


@pytest.mark.parametrize("value,message", [
    ("0", "argument --world-size/-N: 0 must be >= 1"),
    ("-1", "argument --world-size/-N: -1 must be >= 1"),
    ("abc", "argument --world-size/-N: 'abc' is not an integer"),
    ("8,0", "argument --world-size/-N: 0 must be >= 1"),
])
def test_fit_world_size_is_checked(tmp_path, capsys, value, message):
    path = _bench_json(tmp_path, [4096 * 4**k for k in range(5)])
    assert message in _usage_error(capsys, ["fit", path, "--predict", "--world-size", value])


def test_fit_refuses_one_size(tmp_path, capsys):
    """One size cannot separate α from β: refused, not fitted with β = 0 and 'nan%'."""
    path = _bench_json(tmp_path, [1 << 20])
    err = _error(capsys, ["fit", path, "--predict"])
    assert "cannot separate α (per step) from β (per byte): every row is of one size " \
        "(1.00 MiB) at world size 2; measure at least two sizes" in err
    from ringccl.costmodel import fit as fitmod
    with pytest.raises(ringccl.ArgumentError, match="cannot separate"):
        fitmod.fit_rows(fitmod.load_rows([path]))


def test_fit_one_size_at_two_world_sizes_separates(tmp_path, capsys):
    """Steps and bytes grow differently with N: one size at two world sizes is enough for the
    fit, though not for a held-out check trained on one of them (said, not nan%)."""
    from ringccl.costmodel import fit as fitmod
    rows = (fitmod.load_rows([_bench_json(tmp_path, [1 << 20], 2)])
            + fitmod.load_rows([_bench_json(tmp_path, [1 << 20], 8)]))
    f = fitmod.fit_rows(rows)
    assert f.alpha == pytest.approx(30e-6) and f.beta == pytest.approx(1 / 2e9)
    held = fitmod.held_out(rows)
    assert held.method == "none" and held.fit.beta == pytest.approx(1 / 2e9)
    assert held.reason.startswith("the training sweep ring all_gather, 2 ranks: these 1 rows "
                                  "cannot separate α")
    path = tmp_path / "both.json"
    path.write_text(json.dumps(rows))
    assert main(["fit", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "nan" not in out and "held-out median |error|: n/a (the training sweep" in out


def test_fit_two_sizes_says_why_nothing_is_held_out(tmp_path, capsys):
    path = _bench_json(tmp_path, [1 << 16, 1 << 20])
    assert main(["fit", path]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "nan" not in out
    assert "held-out median |error|: n/a (one sweep (ring all_gather, 2 ranks) of 2 sizes: " \
        "holding sizes out needs at least 3" in out
    assert main(["fit", path, "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["held_out"]["method"] == "none" and report["held_out"]["median_abs_error"] \
        is None and "at least 3" in report["held_out"]["reason"]
    assert report["fit"]["params"]["beta"]["value"] == pytest.approx(1 / 2e9)


def test_fit_no_held_out_row_above_min_size(tmp_path, capsys):
    path = _bench_json(tmp_path, [1024 * 2**k for k in range(4)])
    assert main(["fit", path, "--min-size", "1GiB"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "for sizes >= 1.00 GiB: n/a (no held-out row is that large; lower --min-size)" in out


# -- negative-looking values ----------------------------------------------------------------------

@pytest.mark.parametrize("argv,message", [
    (["model", "-s", "-1MiB"], "argument --size/-s: size '-1MiB' is negative: must be > 0 bytes"),
    (["model", "--size", "4KiB:-1MiB"], "argument --size/-s: size '-1MiB' is negative"),
    (["model", "--alpha", "-1us"], "argument --alpha: latency '-1us' is negative: must be >= 0 s"),
    (["model", "--alpha=-1us"], "argument --alpha: latency '-1us' is negative"),
    (["model", "--bandwidth", "-5GB/s"], "argument --bandwidth: bandwidth '-5GB/s' is negative: "
     "must be > 0"),
    (["tune", "all_reduce", "--backward", "-1ms"],
     "argument --backward: backward time '-1ms' is negative"),
    (["simulate", "all_reduce", "-c", "-1Mi"],
     "argument --count/-c: count '-1Mi' is negative: must be >= 0 elements"),
    (["fit", "x.json", "--min-size", "-1KiB"], "argument --min-size: size '-1KiB' is negative"),
])
def test_negative_values_are_read_and_refused_by_name(capsys, argv, message):
    assert message in _usage_error(capsys, argv)


# -- messages --------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,message", [
    # --root on an algorithm without one does not apply, as --src does not
    (["simulate", "all_reduce", "--root", "9", "-N", "4", "-c", "8"],
     "root=9 does not apply to ring all_reduce, which has no root (of the all_reduce "
     "algorithms, master takes one)"),
    (["show", "all_reduce", "--root", "1"], "root=1 does not apply to ring all_reduce"),
    (["show", "all_gather", "--root", "0"], "root=0 does not apply to ring all_gather, which "
     "has no root\n"),
    (["simulate", "all_reduce", "--src", "1", "-N", "4", "-c", "8"],
     "src=1 does not apply to all_reduce, which has no root"),
    # ... while a root out of range on a rooted one says the range
    (["simulate", "all_reduce", "-a", "master", "--root", "9", "-N", "4", "-c", "8"],
     "root=9 is out of range for world_size=4; root must be an integer rank in [0, 4)"),
    (["show", "broadcast", "--root", "7", "-N", "4"], "root=7 is out of range for world_size=4"),
    (["compare", "all_gather", "--root", "1", "-N", "4", "-c", "8"],
     "root=1 does not apply to all_gather: none of its algorithms has a root"),
    # bruck all_to_all: no uneven splits were given, the count does not divide
    (["simulate", "all_to_all", "-a", "bruck", "-N", "7", "-c", "13"],
     "--count 13 is not divisible by --world-size N=7: bruck all_to_all relays blocks through "
     "other ranks' slots, so it needs N equal blocks; pass a multiple of 7 (7, 14) or an "
     "algorithm that sends every block straight to its owner (direct, pairwise)"),
])
def test_messages_say_what_applies(capsys, argv, message):
    assert message in _error(capsys, argv)


def test_bruck_with_a_dividing_count_and_direct_with_any_count_run(capsys):
    assert main(["simulate", "all_to_all", "-a", "bruck", "-N", "7", "-c", "14"]) == 0
    assert main(["simulate", "all_to_all", "-a", "direct", "-N", "7", "-c", "13"]) == 0


def test_compare_precision_honours_dtype_and_explains_empty_cells(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["compare", "all_reduce", "-N", "4", "-c", "64", "--precision", "--dtype",
                 "int32"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out and "n/a (exact: integer dtype)" in out
    assert "int32 sums are exact whatever the order" in out
    assert main(["compare", "all_reduce", "-N", "4", "-c", "64", "--precision", "--dtype",
                 "int32", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert all(r["max_abs_error"] is None and r["error_note"] == "exact: integer dtype"
               for r in rows)
    # float16 inputs are float16 (errors far above float32's), and reduce's empty relative
    # error is explained rather than printed as nan
    assert main(["compare", "all_reduce", "-N", "8", "-c", "256", "--precision", "--dtype",
                 "float16", "--json"]) == 0
    f16 = json.loads(capsys.readouterr().out)["rows"]
    assert main(["compare", "all_reduce", "-N", "8", "-c", "256", "--precision", "--json"]) == 0
    f32 = json.loads(capsys.readouterr().out)["rows"]
    assert min(r["max_abs_error"] for r in f16) > 100 * max(r["max_abs_error"] for r in f32)
    assert main(["compare", "reduce", "-N", "4", "-c", "64", "--precision"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out and "n/a (see below)" in out and "max rel error n/a: " in out


def test_model_world_size_1_has_nothing_to_communicate(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["model", "-N", "1", "-s", "1MiB", "-a", "ring,direct"]) == 0
    out = capsys.readouterr().out
    assert "inf" not in out and "nan" not in out
    assert "world_size 1: nothing to communicate (time 0 s; algbw, busbw" in out
    assert out.count("n/a") >= 6


def test_help_and_output_name_the_sources(capsys):
    assert main(["model", "--preset", "worked-examples"]) == 0
    out = capsys.readouterr().out
    assert "seed" not in out.lower() and "lecture" not in out.lower()
    assert "Patarasuk & Yuan" in out and "arXiv:1807.11205" in out
    for command in ("model", "show"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "seed 0" not in text and "the seed's" not in text and "seeds'" not in text
        assert "lecture" not in text.lower()


# -- one meaning per short flag -------------------------------------------------------------------

def _parsed(argv):
    from ringccl.cli import build_parser
    return build_parser().parse_args(argv)


def test_n_is_nproc_and_c_is_count_in_every_command(capsys):
    """-n: --nproc in run, train and bench (it was bench's --iters); -c: --count in run,
    simulate and compare (it was bench's --check); bench's iterations and check are long
    options only."""
    for command in (["run", "all_reduce"], ["train"], ["bench", "all_reduce"]):
        assert _parsed(command + ["-n", "3"]).nproc == 3
    for command in (["run", "all_reduce"], ["simulate", "all_reduce"], ["compare", "all_reduce"]):
        assert _parsed(command + ["-c", "12"]).count == 12
    args = _parsed(["bench", "all_reduce", "-n", "2", "--iters", "7", "--check", "0"])
    assert (args.nproc, args.iters, args.check) == (2, 7, 0)
    assert _parsed(["bench", "all_reduce", "-p", "2"]).nproc == 2  # nccl-tests-style alias kept


def test_old_bench_short_flags_fail_clearly(capsys):
    assert "bench takes no count (it sweeps sizes: -b/-e/-f); -c is --count in run and " \
        "simulate. For nccl-tests' -c (check) write --check 0" in _usage_error(
            capsys, ["bench", "all_reduce", "-c", "0"])
    # an old `--nproc 2 -n 5` (5 iterations) must not start 5 processes
    assert "--nproc given twice (2, then 5); -n is --nproc, iterations are --iters" in \
        _usage_error(capsys, ["bench", "all_reduce", "--nproc", "2", "-n", "5"])



def test_bench_size_flags_are_named_as_typed(capsys):
    # BenchSpec's own messages name its fields (min_bytes, factor); the CLI names its flags
    assert "-b/--minbytes 8 B is larger than -e/--maxbytes 4 B" in _error(
        capsys, ["bench", "all_reduce", "--nproc", "2", "-b", "8", "-e", "4"])
    assert "-f/--stepfactor 1 must be an integer >= 2" in _error(
        capsys, ["bench", "all_reduce", "--nproc", "2", "-f", "1"])
    # nccl-tests' -f is an integer (its strtol reads 1.5 as 1 and steps by -i bytes instead):
    # a fractional factor is refused by name, saying what it takes
    assert "argument -f/--stepfactor: step factor '1.5' must be an integer >= 2 (nccl-tests' " \
        "-f: sizes -b, -b·f, -b·f², ... whole bytes)" in _usage_error(
            capsys, ["bench", "all_reduce", "--nproc", "2", "-f", "1.5"])


def test_show_counts_steps_in_the_singular_when_there_is_one(capsys):
    assert main(["show", "all_reduce", "--algorithm", "direct", "-N", "2"]) == 0
    assert "1 chunk per rank, 1 step" in capsys.readouterr().out

# -- show on many ranks ---------------------------------------------------------------------------

def test_show_1000_ranks_fits_the_width_and_says_what_was_left_out(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "180")
    assert main(["show", "all_reduce", "-N", "1000"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines[:-1]) <= 180  # the last line is the note
    assert len(out) < 100_000  # was 3 MB of 15,000-character lines
    header = lines[1].split()
    shown = len(header) - 1
    assert header[1:] == [f"R{r}" for r in range(shown)] and 1 <= shown < 1000
    assert lines[-1].startswith(f"… {1000 - shown} of 1000 ranks not shown (R{shown}-R999")
    assert f"--ranks {shown}-{2 * shown - 1}" in lines[-1]


def test_show_ranks_chooses_columns(capsys):
    assert main(["show", "all_reduce", "-N", "1000", "--ranks", "0-3,998-999",
                 "--max-steps", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("; ranks 0-3,998-999")
    assert lines[1].split() == ["step", "R0", "R1", "R2", "R3", "R998", "R999"]
    assert lines[3].split()[2:] == ["c0", "→", "R1", "c1", "→", "R2", "c2", "→", "R3", "c3",
                                    "→", "R4", "c998", "→", "R999", "c999", "→", "R0"]
    assert "ranks not shown" not in "\n".join(lines)
    assert main(["show", "all_reduce", "-N", "6", "--ranks", "4,1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ranks"] == [4, 1] and data["rows"][0]["cells"] == ["c4 → R5", "c1 → R2"]


def test_show_long_cells_are_clipped_with_a_count(capsys):
    assert main(["show", "all_to_all", "-a", "direct", "-N", "100", "--ranks", "0,1",
                 "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "… +" in out
    assert main(["show", "all_reduce", "-N", "40", "--width", "0"]) == 0  # 0: no limit
    assert "ranks not shown" not in capsys.readouterr().out


@pytest.mark.parametrize("ranks,message", [
    ("0-1000", "ranks='0-1000': rank 1000 is out of range for world_size=1000; ranks are 0-999"),
    ("5-2", "ranks='5-2': the range '5-2' is empty"),
    ("a", "ranks='a': 'a' is not a rank or a range such as 0-7"),
])
def test_show_ranks_are_checked(capsys, ranks, message):
    assert message in _error(capsys, ["show", "all_reduce", "-N", "1000", "--ranks", ranks])


# -- values parsed by one parser per kind, refused naming the flag as typed ----------------------

@pytest.mark.parametrize("argv,message", [
    # an output file: its directory, its kind (by suffix), refused before any work
    (["explore", "all_reduce", "-o", "/nonexistent/x.html"],
     "argument --output/-o: '/nonexistent/x.html': directory '/nonexistent' does not exist"),
    (["explore", "all_reduce", "-o", "{tmp}/x.txt"],
     "argument --output/-o: '{tmp}/x.txt' is written as an HTML page: its name must end in "
     ".html, .htm"),
    (["explore", "all_reduce", "-o", "{tmp}"],
     "argument --output/-o: '{tmp}' is a directory; give a file name in it"),
    (["show", "all_reduce", "--trace", "/nonexistent/t.json"],
     "argument --trace: '/nonexistent/t.json': directory '/nonexistent' does not exist"),
    (["model", "all_reduce", "--plot", "{tmp}/chart.txt"],
     "argument --plot: '{tmp}/chart.txt' is written as an image: its name must end in .png"),
    (["bench", "all_reduce", "--plot", "/nonexistent/b.png"],
     "argument --plot: '/nonexistent/b.png': directory '/nonexistent' does not exist"),
    # bench's segment sizes: auto, 0 or a size, each entry
    (["bench", "all_reduce", "--segment-bytes", "-1"],
     "argument --segment-bytes: segment size '-1' is negative: each entry must be auto (the "
     "executor's threshold), 0 (never split) or a size such as 1MiB"),
    (["bench", "all_reduce", "--segment-bytes", "0,1us"],
     "argument --segment-bytes: size '1us' is not a size; examples: 4096, 4KiB, 4MiB, 100MB, "
     "1GiB; each entry must be auto"),
    # an empty entry (a doubled, leading or trailing comma) is no size: refused, not skipped
    (["bench", "all_reduce", "--segment-bytes", "0,,1MiB"],
     "argument --segment-bytes: segment sizes '0,,1MiB': entry 2 of 3 is empty; each entry "
     "must be auto (the executor's threshold), 0 (never split) or a size such as 1MiB"),
    (["bench", "all_reduce", "--segment-bytes", "auto,"],
     "argument --segment-bytes: segment sizes 'auto,': entry 2 of 2 is empty; each entry"),
    (["bench", "all_reduce", "--segment-bytes", ","],
     "argument --segment-bytes: segment sizes ',': entry 1 of 2 is empty; each entry"),
    # a bandwidth without its unit (bits or bytes?), zero included
    (["model", "all_reduce", "--bandwidth", "0"],
     "argument --bandwidth: bandwidth '0' has no unit; a bandwidth > 0 is bytes/s (50GB/s, "
     "50GBps) or bits/s (400Gbps, 400Gb/s)"),
    (["model", "all_reduce", "--bandwidth", "0GB/s"], "argument --bandwidth: bandwidth '0GB/s' "
     "must be > 0"),
    # a two-level machine's links: ALPHA,BANDWIDTH in model and explore, one parser
    (["model", "all_reduce", "--nodes", "2", "--intra", "1us"],
     "argument --intra: link '1us' must be ALPHA,BANDWIDTH: a latency >= 0 and a bandwidth > 0, "
     "e.g. 5us,900GB/s or 2us,400Gbps"),
    (["explore", "all_reduce", "--topology", "2x4", "--inter", "5us,1"],
     "argument --inter: bandwidth '1' has no unit"),
    (["explore", "all_reduce", "--topology", "2x4", "--intra", "1GB/s,5us"],
     "argument --intra: duration '1GB/s' is not a duration"),
    # a count is an exact integer, at most int64's largest (1e30 is not 1000000000000000019884…)
    (["simulate", "all_reduce", "-c", "1e30"],
     "argument --count/-c: count '1e30' is too large: at most 9223372036854775807 (2^63 - 1, "
     "the largest int64)"),
    (["simulate", "all_reduce", "-c", "2.5"],
     "argument --count/-c: count '2.5' must be a whole number >= 0, got 2.5"),
])
def test_values_are_refused_by_flag_before_any_work(capsys, tmp_path, argv, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert message.replace("{tmp}", str(tmp_path)) in _usage_error(capsys, argv)
    assert list(tmp_path.iterdir()) == []   # nothing written


def test_a_link_parses_as_the_library_reads_it():
    from ringccl.cli.common import link_arg
    from ringccl.costmodel.topology import parse_link
    parsed = link_arg("5us,400Gbps")
    assert parsed == parse_link(("5us", "400Gbps")) == pytest.approx((5e-6, 50e9))


def test_a_count_beyond_memory_names_the_flag_and_the_largest_that_fits(capsys, monkeypatch):
    from ringccl.sim import memory
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 << 30)
    err = _error(capsys, ["simulate", "all_reduce", "-N", "8", "-c", "1e15"])
    fit = int(((8 << 30) - memory.simulation_bytes("all_reduce", 8, 0, 4))
              // (memory.simulation_bytes("all_reduce", 8, 1, 4)
                  - memory.simulation_bytes("all_reduce", 8, 0, 4)))
    assert err.startswith("ringccl: error: -c/--count 1000000000000000 is too large: simulating "
                          "all_reduce on 8 ranks x count=1000000000000000 needs about 59.69 PiB")
    assert (f"at most {fit:,} fit on -N/--world-size 8: use a smaller -c/--count or "
            "-N/--world-size") in err
    assert memory.simulation_bytes("all_reduce", 8, fit, 4) <= 8 << 30
    assert memory.simulation_bytes("all_reduce", 8, fit + 1, 4) > 8 << 30
