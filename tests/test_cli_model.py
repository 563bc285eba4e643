"""`ringccl model` and `ringccl tune`: tables, --json, --plot, --preset worked-examples, errors;
the size lists every command reads (model, tune, explore, nccl --size, fit --sizes): the same
sizes as before they shared one parser, and a bounded number of them."""

import json
import math
from pathlib import Path

import pytest

import ringccl
from ringccl.cli import main
from ringccl.cli.app import build_parser

from .cost_helpers import registered, ring_only


@pytest.fixture(autouse=True)
def _registry_of_ring_only():
    """These tests expect ring (and the test rival) to be the only algorithms registered."""
    with ring_only():
        yield


def test_model_json_matches_the_api(capsys):
    assert main(["model", "all_reduce", "--world-size", "8,64", "--size", "4KiB:1MiB:4",
                 "--alpha", "5us", "--bandwidth", "400Gbps", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [t["world_size"] for t in report["tables"]] == [8, 64]
    rows = report["tables"][1]["rows"]
    assert [r["size"] for r in rows] == [4096, 16384, 65536, 262144, 1048576]
    r = rows[-1]
    expected = ringccl.cost("all_reduce", "ring", 64, 2**20, alpha=5e-6, bandwidth=50e9)
    assert r["time_s"] == pytest.approx(expected.seconds)
    assert r["busbw"] == pytest.approx(expected.busbw)
    assert r["count"] == 2**18 and r["type"] == "float32"


def test_json_is_strict_for_one_rank(capsys):
    # one rank moves nothing in no time: algbw inf, busbw nan, written as null (strict JSON)
    assert main(["model", "all_reduce", "-N", "1", "--size", "4KiB", "--json"]) == 0

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    row = json.loads(capsys.readouterr().out, parse_constant=refuse)["tables"][0]["rows"][0]
    assert row["time_s"] == 0 and row["algbw"] is None and row["busbw"] is None


def test_model_table_prints_nccl_tests_columns(capsys):
    assert main(["model", "all_reduce", "-N", "1024", "--size", "4MiB"]) == 0
    out = capsys.readouterr().out
    for column in ("size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)"):
        assert column in out
    line = next(x for x in out.splitlines() if "4.00 MiB" in x)
    expected_us = ringccl.cost("all_reduce", "ring", 1024, 2**22, alpha=5e-6,
                               bandwidth=50e9).seconds * 1e6
    assert f"{expected_us:.2f}" in line and "fastest" in line


def test_model_two_level(capsys):
    assert main(["model", "all_reduce", "--nodes", "4", "--local", "8", "--intra", "5us,900GB/s",
                 "--inter", "5us,50GB/s", "--size", "1GiB", "--json"]) == 0
    (table,) = json.loads(capsys.readouterr().out)["tables"]
    assert table["world_size"] == 32 and table["machine"].startswith("two-level")
    (row,) = table["rows"]
    assert row["max_link_bytes"]["nic out"] == pytest.approx(2 * 31 / 32 * 2**30)


def test_model_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (ringccl[plot])")
    path = tmp_path / "model.png"
    with registered():
        assert main(["model", "all_reduce", "--world-size", "8,64,1024", "--size", "4KiB:1GiB",
                     "--alpha", "5us", "--bandwidth", "50GB/s", "--plot", str(path)]) == 0
    out = capsys.readouterr().out
    assert "crossover: test_recursive_doubling -> ring" in out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


def test_a_plot_named_without_a_suffix_is_written_as_png_under_that_name(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (ringccl[plot])")
    path = tmp_path / "chart"
    assert main(["model", "all_reduce", "-N", "8", "--size", "1MiB", "--alpha", "5us",
                 "--bandwidth", "50GB/s", "--plot", str(path)]) == 0
    assert f"chart written to {path}" in capsys.readouterr().out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "chart.png").exists()


@pytest.mark.parametrize("extra, named", [
    (["--alpha", "1us", "-N", "3", "--size", "1KiB", "-a", "ring"],
     "--algorithm, --size, --world-size, --alpha have no effect"),
    (["all_gather"], "the collective all_gather has no effect"),
    (["--nodes", "4", "--local", "2"], "--nodes, --local have no effect")])
def test_model_preset_refuses_the_options_it_would_ignore(extra, named, capsys):
    assert main(["model", "--preset", "worked-examples", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ringccl: error: {named} with --preset worked-examples"), err


def test_model_preset_worked_examples_prints_their_figures(capsys):
    assert main(["model", "--preset", "worked-examples"]) == 0
    out = capsys.readouterr().out
    for figure in ("1.750 K", "0.250 x", "0.875 x", "1.992 K", "0.996 x",   # per-rank bytes
                   "0.094", "10.26", "10.23", "99.7%", "17.38", "7.15",     # latency table
                   "12.61", "4301.00", "3.18", "14.42", "4.21", "4.29",      # closed forms
                   "53.14", "8.75", "6.07x"):                                # hierarchical
        assert figure in out, figure


def test_model_preset_worked_examples_json(capsys):
    assert main(["model", "--preset", "worked-examples", "--json"]) == 0
    fig = json.loads(capsys.readouterr().out)
    assert set(fig) == {"per_rank_bytes", "ring_latency", "closed_forms", "hierarchical"}
    assert round(fig["closed_forms"][-1]["closed_form"]["master"] * 1e3, 2) == 4301.00


def test_tune_prints_ranges(capsys):
    with registered():
        assert main(["tune", "all_reduce", "--world-size", "1024", "--alpha", "5us",
                     "--bandwidth", "50GB/s"]) == 0
    out = capsys.readouterr().out
    assert "fastest all_reduce algorithm by size" in out
    lines = [x for x in out.splitlines() if "test_recursive_doubling" in x or " ring " in x]
    # the first range starts at 4 B
    assert any(x.replace("│", " ").split()[:2] == ["4.00", "B"] for x in lines)
    assert "crossover: test_recursive_doubling -> ring at" in out


def test_tune_json_and_buckets(capsys):
    assert main(["tune", "all_reduce", "-N", "64", "--bucket-model", "gpt2", "--backward",
                 "100ms", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ranges"][0]["algorithm"] == "ring"
    b = report["buckets"]
    assert b["tensors"] == 148 and b["total_bytes"] == 4 * 124_439_808
    finish = {r["bucket_bytes"]: r["finish_s"] for r in b["rows"] if not r["plan"]
              .startswith("DDP")}
    assert finish[b["best_bucket_bytes"]] == min(finish.values())
    assert b["rows"][-1]["plan"].startswith("DDP default")


@pytest.mark.parametrize("argv,message", [
    (["model", "all_reduce", "--size", "4Mb"], "ambiguous"),
    (["model", "all_reduce", "--bandwidth", "fast"], "bandwidth"),
    (["model", "all_reduce", "--size", "1GiB:4KiB"], "LOW <= HIGH"),
    # a FACTOR that is no number, or no finite one, is named (not argparse's "invalid value")
    (["model", "all_reduce", "--size", "1B:1GiB:x"],
     "size range '1B:1GiB:x': FACTOR 'x' must be a number > 1"),
    (["model", "all_reduce", "--size", "1B:1GiB:nan"], "FACTOR 'nan' must be a number > 1"),
    (["model", "all_reduce", "--size", "1B:1GiB:1"], "FACTOR '1' must be a number > 1"),
])
def test_bad_units_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["model", "all_reduce", "--algorithm", "nope"], "algorithm='nope' is not available"),
    (["model", "all_reduce", "--nodes", "2", "--world-size", "8"], "differs from --nodes"),
    (["tune", "all_reduce", "--world-size", "8,16"], "tune takes one world size, got "
                                                     "--world-size 8,16"),
    (["tune", "all_reduce", "--link", "shm"], "got --link shm without --world-size"),
    (["model", "all_reduce", "--nodes", "2", "--oversubscription", "0.5"], "oversubscription"),
    # a flag the rest of the command line ignores is refused, not silently dropped
    (["tune", "all_reduce", "--backward", "5ms"],
     "--backward has no effect without --bucket-model or --tensor-sizes"),
    (["tune", "all_reduce", "--bucket-algorithm", "direct"], "--bucket-algorithm has no effect"),
    (["tune", "all_reduce", "--bucket-model", "gpt2", "--tensor-sizes", "1MiB"],
     "--bucket-model gpt2 and --tensor-sizes both give the gradients"),
    (["tune", "all_reduce", "-N", "2", "--link", "shm", "--gamma", "1GB/s"],
     "--gamma has no effect with --link shm"),
    (["model", "all_reduce", "--nodes", "2", "--alpha", "1us", "--bandwidth", "1GB/s"],
     "--alpha, --bandwidth have no effect with --nodes"),
    (["model", "all_reduce", "--inter", "1us,1GB/s"], "--inter has no effect without --nodes"),
    (["model", "all_reduce", "--local", "4"], "--local has no effect without --nodes"),
    (["explore", "all_reduce", "--topology", "2x4", "--bandwidth", "1GB/s"],
     "--bandwidth has no effect with --topology 2x4"),
    (["explore", "all_reduce", "--intra", "1us,1GB/s"], "--intra has no effect on a flat machine"),
    (["explore", "all_reduce", "--model", "-c", "10"], "-c has no effect with --model"),
    (["explore", "all_reduce", "--size", "1MiB"], "--size has no effect without the crossover"),
])
def test_errors_exit_2_with_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ringccl: error: ") and message in err and err.count("\n") == 1


# -- size lists: one parser for every command, bounded --------------------------------------------

#: the option that reads a size list, per parser it replaced
_SIZE_ARGV = {"size_list": ["model", "--size"], "nccl_sizes": ["nccl", "all_reduce", "--size"],
              "fit_sizes": ["fit", "x.json", "--sizes"]}


def _sizes(kind: str, text: str) -> list:
    """The sizes the command line reads from ``text`` (parsed only: nothing runs)."""
    args = build_parser().parse_args([*_SIZE_ARGV[kind], text])
    return args.sizes if kind == "fit_sizes" else args.size


def _refused(capsys, argv) -> str:
    """argparse's one-line refusal (exit 2) of the command line, parsed only: nothing runs."""
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_size_lists_are_those_of_the_three_former_parsers():
    # recorded from model's size_list, nccl's nccl_sizes and fit's --sizes before they became
    # one parser: the same values, the same types (floats; whole bytes for nccl and fit)
    recorded = json.loads((Path(__file__).parent / "data" / "size_lists.json").read_text())
    assert sum(len(cases) for cases in recorded.values()) >= 30
    for kind, cases in recorded.items():
        for text, expected in cases.items():
            got = _sizes(kind, text)
            if kind == "fit_sizes" and ":" in text:
                # but for one mend: a fractional FACTOR's whole-byte sizes that round down to
                # the same byte count are kept once (fit's parser repeated them: 1, 1, 1, ...)
                expected = list(dict.fromkeys(expected))
            if kind == "size_list" and ":" in text:
                # and a second: every size is whole bytes (model's parser gave 4096 x 1.5^13 =
                # 797161.5 B, ...): the recorded sizes rounded down, each once
                expected = list(dict.fromkeys(float(math.floor(x)) for x in expected))
            assert got == expected, (kind, text)
            assert [type(x) for x in got] == [type(x) for x in expected], (kind, text)
    # and the defaults
    parse = build_parser().parse_args
    assert parse(["model"]).size == recorded["size_list"]["4KiB:1GiB"]
    assert parse(["tune", "all_reduce"]).size == recorded["size_list"]["4B:16GiB"]
    assert parse(["nccl", "all_reduce"]).size == recorded["nccl_sizes"]["8B:8GiB:8"]
    assert parse(["fit", "x.json"]).sizes == recorded["fit_sizes"]["64KiB,1MiB,16MiB,256MiB,1GiB"]


def test_a_range_of_too_many_sizes_is_refused_before_any_is_built(capsys):
    err = _refused(capsys, ["model", "-s", "1B:1GiB:1.00001"])
    assert ("argument --size/-s: size range '1B:1GiB:1.00001' would give 2,079,452 sizes, "
            "over the limit of 1,000: a FACTOR of at least 1.0211") in err
    # 2^63 - 1 bytes in steps of 1 part in 10^9: counted, never built (43.7 billion sizes
    # would not fit in memory)
    err = _refused(capsys, ["fit", "x.json", "--sizes", "1B:8388607TiB:1.000000001"])
    assert "would give 43,668," in err and "over the limit of 1,000" in err
    # the limit itself is accepted, one more is not
    assert len(_sizes("size_list", f"1000:{int(1000 * 1.01 ** 999.5)}:1.01")) == 1000
    assert len(_sizes("fit_sizes", f"1000:{int(1000 * 1.01 ** 999.5)}:1.01")) == 1000
    err = _refused(capsys, ["tune", "all_reduce", "-s", f"1000:{int(1000 * 1.01 ** 1000.5)}:1.01"])
    assert "would give 1,001 sizes, over the limit of 1,000" in err
    from ringccl.cli.common import MAX_SIZES
    assert MAX_SIZES == 1000


@pytest.mark.parametrize("argv", [
    ["model", "-s"], ["tune", "all_reduce", "--tensor-sizes"], ["explore", "all_reduce", "-s"],
    ["nccl", "all_reduce", "--size"], ["fit", "x.json", "--sizes"]])
def test_a_comma_list_of_sizes_is_bounded_alike(capsys, argv):
    many = ",".join(f"{i}B" for i in range(1, 2001))
    err = _refused(capsys, [*argv, many])
    # the text as given, shortened: the count and the limit
    assert "sizes '1B,2B,3B," in err and ",1999B,2000B' are 2,000 sizes, over the limit of " \
        "1,000" in err and len(err) < 300
    exactly = ",".join(f"{i}B" for i in range(1, 1001))
    args = build_parser().parse_args([*argv, exactly])
    assert len(args.sizes if "--sizes" in argv else
               args.tensor_sizes if "--tensor-sizes" in argv else args.size) == 1000


# -- size lists: every entry a size, every size whole bytes ---------------------------------------

#: every option that reads a size list (one parser), and how argparse names it
_SIZE_OPTIONS = [(["model", "-s"], "--size/-s"), (["tune", "all_reduce", "-s"], "--size/-s"),
                 (["tune", "all_reduce", "--tensor-sizes"], "--tensor-sizes"),
                 (["explore", "all_reduce", "-s"], "--size/-s"),
                 (["nccl", "all_reduce", "--size"], "--size/-s"),
                 (["fit", "x.json", "--sizes"], "--sizes")]


def _parsed_sizes(argv, text) -> list:
    args = build_parser().parse_args([*argv, text])
    return args.sizes if "--sizes" in argv else (
        args.tensor_sizes if "--tensor-sizes" in argv else args.size)


@pytest.mark.parametrize("argv, option", _SIZE_OPTIONS)
@pytest.mark.parametrize("text, empty", [
    ("1KiB,,4MiB", "entry 2 of 3 is empty"), (",1KiB", "entry 1 of 2 is empty"),
    ("1KiB,", "entry 2 of 2 is empty"), (",", "entry 1 of 2 is empty"),
    ("1KiB, ,4MiB", "entry 2 of 3 is empty"),
    (":1GiB", "LOW is empty"), ("4KiB::4", "HIGH is empty"), ("4KiB:", "HIGH is empty"),
    ("4KiB:1GiB:", "FACTOR is empty")])
def test_an_empty_entry_of_a_size_list_is_refused_naming_the_option_and_the_value(
        capsys, argv, option, text, empty):
    # before, 1KiB,,4MiB read as 1KiB,4MiB: a typo's missing size went unnoticed
    err = _refused(capsys, [*argv, text])
    kind = "size range" if ":" in text else "sizes"
    assert f"argument {option}: {kind} {text!r}: {empty}; " in err, err


@pytest.mark.parametrize("argv, option, text, message", [
    (["model", "all_reduce", "-s", "1MiB", "-N"], "--world-size/-N", "8,,64",
     "integers '8,,64': entry 2 of 3 is empty; each entry must be an integer >= 1"),
    (["model", "all_reduce", "-s", "1MiB", "-a"], "--algorithm/-a", "ring,",
     "names 'ring,': entry 2 of 2 is empty; each entry must be a name"),
])
def test_an_empty_entry_of_a_list_of_world_sizes_or_names_is_refused(capsys, argv, option,
                                                                     text, message):
    # before, 8,,64 read as 8,64 and ring, as ring
    err = _refused(capsys, [*argv, text])
    assert f"argument {option}: {message}" in err, err


@pytest.mark.parametrize("argv", [a for a, _ in _SIZE_OPTIONS if a[0] != "nccl"])
def test_a_fractional_factor_gives_whole_bytes_each_rounded_down_once(capsys, argv):
    # 1, 1.5, 2.25, 3.375, 5.06, ... bytes: rounded down, 1 kept once (nccl-tests' sizes are
    # whole bytes: -b, -e and -i are byte counts, -f an integer)
    sizes = _parsed_sizes(argv, "1B:64B:1.5")
    assert sizes == [1, 2, 3, 5, 7, 11, 17, 25, 38, 57]
    assert all(float(s).is_integer() for s in sizes)
    # computed exactly: 1000 x 1.4 x 1.4 is 1960 bytes (1959.9999999999998 in floats)
    assert _parsed_sizes(argv, "1000B:2000B:1.4") == [1000, 1400, 1960]
    # an integer FACTOR (nccl-tests' -f): exact products up to HIGH
    assert _parsed_sizes(argv, "3B:300B:3") == [3, 9, 27, 81, 243]
    # and a size itself is whole bytes
    assert "size '1.5B' must be a whole number >= 0, got 1.5" in _refused(capsys, [*argv, "1.5B"])
