"""`ringccl compare` and `ringccl show --trace/--msccl-xml`."""

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import ringccl
import ringccl.cli


def _compare(capsys, *argv):
    assert ringccl.cli.main(["compare", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_1024_ranks_ring_against_logarithmic_algorithms(capsys):
    """Ring 2046 steps, the tree-based algorithms O(log N)."""
    report = _compare(capsys, "all_reduce", "--world-size", "1024", "--count", "1Mi")
    rows = {r["algorithm"]: r for r in report["rows"]}
    assert rows["ring"]["steps"] == 2046
    log = math.ceil(math.log2(1024))
    for name in ("tree", "double_binary_tree", "recursive_doubling", "halving_doubling"):
        assert rows[name]["steps"] <= 3 * log, name
    k = report["buffer_bytes"]
    assert k == 4 << 20
    assert rows["ring"]["bytes_sent_max"] == 2 * 1023 * k // 1024
    assert rows["double_binary_tree"]["bytes_sent_max"] == 2 * k
    assert rows["tree"]["bytes_sent_max"] == 3 * k
    assert rows["recursive_doubling"]["bytes_sent_max"] == 10 * k
    assert rows["ring"]["bytes_through_max"] == 2 * rows["ring"]["bytes_sent_max"]
    assert set(rows) == set(ringccl.algorithms("all_reduce"))


@pytest.mark.parametrize("n,expected", [(8, 1.75), (64, 1.97), (256, 1.992)])
def test_compare_reproduces_the_seed_ring_column(capsys, n, expected):
    report = _compare(capsys, "all_reduce", "--world-size", str(n), "--count", "64Ki")
    ring = next(r for r in report["rows"] if r["algorithm"] == "ring")
    assert round(ring["bytes_sent_per_buffer"], 3 if n == 256 else 2) == expected


def test_compare_precision_differs_by_algorithm_and_stays_bounded(capsys):
    report = _compare(capsys, "all_reduce", "--world-size", "24", "--count", "3001",
                      "--precision")
    errors = {r["algorithm"]: r["max_abs_error"] for r in report["rows"]}
    assert all(e > 0 for e in errors.values())            # float32 sums are inexact …
    assert len(set(errors.values())) > 1                   # … each in its own order
    x = np.random.default_rng(0).standard_normal((24, 3001)).astype(np.float32)
    bound = 23 * np.finfo(np.float32).eps * np.abs(x.astype(np.float64)).sum(axis=0).max()
    assert max(errors.values()) <= bound
    assert all(r["max_rel_error"] >= 0 for r in report["rows"])


def test_compare_precision_of_reduce_scatter_and_copies(capsys):
    rs = _compare(capsys, "reduce_scatter", "--world-size", "6", "--count", "1000",
                  "--precision")
    assert all(r["max_abs_error"] > 0 for r in rs["rows"])
    ag = _compare(capsys, "all_gather", "--world-size", "6", "--count", "10", "--precision")
    assert all(r["max_abs_error"] == 0 for r in ag["rows"])


def test_compare_table(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich: do not wrap the algorithm names
    assert ringccl.cli.main(["compare", "all_gather", "--world-size", "12", "--count",
                             "1000"]) == 0
    out = capsys.readouterr().out
    for name in ringccl.algorithms("all_gather"):
        assert name in out
    assert "all_gather on 12 ranks" in out


def test_show_writes_trace_and_msccl_xml(tmp_path, capsys):
    trace, xml = tmp_path / "t.json", tmp_path / "a.xml"
    assert ringccl.cli.main(["show", "all_reduce", "--algorithm", "double_binary_tree",
                             "--world-size", "8", "--trace", str(trace),
                             "--msccl-xml", str(xml)]) == 0
    out = capsys.readouterr()
    assert "double_binary_tree all_reduce: world_size=8" in out.out
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["tid"] for e in events if e["ph"] == "X"} == set(range(8))
    assert ET.fromstring(xml.read_text()).get("ngpus") == "8"
    assert "Perfetto" in out.err


def test_compare_counts_bytes_beyond_int64_exactly(capsys):
    assert ringccl.cli.main(["compare", "all_reduce", "--count", "1e18", "--json"]) == 0
    rows = {r["algorithm"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["master"]["bytes_sent_max"] == 7 * 4 * 10 ** 18    # root sends N - 1 buffers
    assert rows["master"]["bytes_sent_per_buffer"] == 7.0
    assert rows["ring"]["bytes_through_max"] == 2 * 7 * 10 ** 18  # sent + received, no wrap


@pytest.mark.parametrize("argv, named", [
    (["show", "all_reduce", "--world-size", "4", "--trace", "t.png"], "--trace"),
    (["show", "all_reduce", "--world-size", "4", "--msccl-xml", "a.json"], "--msccl-xml"),
    (["run", "all_reduce", "--world-size", "2", "--trace", "t.txt"], "--trace"),
])
def test_a_trace_or_xml_name_of_another_kind_is_refused_before_any_work(argv, named, capsys,
                                                                         tmp_path,
                                                                         monkeypatch):
    """A trace is JSON and MSCCL's schedule XML: a name ending otherwise is refused when the
    option is read (exit 2, the option named), and nothing is written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        ringccl.cli.main(argv)
    assert exit_.value.code == 2
    assert f"argument {named}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
