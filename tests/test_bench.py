"""ringccl.bench without processes: sizes, exact inputs, the sweep driver, nccl-tests output."""

import csv
import io
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ringccl
from ringccl import bench
from ringccl.bench import BUILTIN, PLACEMENTS, BenchSpec, Prepared
from ringccl.bench.report import _num
from ringccl.bench.sweep import _variants
from ringccl.collectives import COLLECTIVES
from ringccl.errors import ArgumentError
from ringccl.ops import ufunc

DTYPE_OPS = [("float32", "sum"), ("float64", "avg"), ("float16", "prod"), ("int8", "sum"),
             ("int16", "bxor"), ("uint8", "max"), ("int64", "min"), ("bool", "sum"),
             ("bool", "prod"), ("int32", "bor"), ("int32", "band")]


def test_sweep_sizes_follow_nccl_tests():
    assert bench.sweep_sizes(4096, 64 << 20, 4) == [4096 * 4**k for k in range(8)]
    assert bench.sweep_sizes(8, 100, 2) == [8, 16, 32, 64]
    assert bench.sweep_sizes(0, 100, 2) == [0]
    assert bench.sweep_sizes(64, 63, 2) == []


def test_buffer_elements_round_to_whole_blocks():
    assert bench.buffer_elements("all_reduce", 4099, 4, 3) == 1024
    for c in ("reduce_scatter", "all_gather"):
        m = bench.buffer_elements(c, 4096, 4, 3)
        assert m == 1023 and bench.nccl_count(c, m, 3) == 341
    assert bench.nccl_count("all_reduce", 1024, 3) == 1024


def _inputs(collective, m, n, op, dtype, root=0):
    cases = [bench.make_case(collective, m, n, r, root, op, dtype) for r in range(n)]
    return cases, np.stack([c.input for c in cases])


@pytest.mark.parametrize("dtype,op", DTYPE_OPS)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_all_reduce_case_is_the_reduction_of_the_inputs(n, dtype, op):
    m = 1000
    cases, x = _inputs("all_reduce", m, n, op, dtype)
    want = ufunc(ringccl.ReduceOp(op)).reduce(x, axis=0, dtype=x.dtype)
    if op == "avg":
        want = np.divide(want, n, dtype=x.dtype)
    for c in cases:
        np.testing.assert_array_equal(c.expected, want)
    # exact in the dtype: the float64 sum of the integer-valued inputs is the same number
    if dtype.startswith("float") and op == "sum":
        np.testing.assert_array_equal(want.astype(np.float64), x.astype(np.float64).sum(0))


@pytest.mark.parametrize("collective", list(COLLECTIVES))
@given(n=st.integers(1, 7), per=st.integers(0, 30), data=st.data())
def test_cases_match_the_simulator(collective, n, per, data):
    """make_case's expected outputs are what ringccl.simulate computes from make_case's inputs."""
    spec = COLLECTIVES[collective]
    dtype, op = data.draw(st.sampled_from(DTYPE_OPS))
    if not spec.reduces:
        op = "sum"
    m = per * n if spec.size_is_buffer else per * n + data.draw(st.integers(0, n))
    root = data.draw(st.integers(0, n - 1)) if spec.root_arg else 0
    cases = [bench.make_case(collective, m, n, r, root, op, dtype) for r in range(n)]
    width = max(len(c.input) for c in cases if c.input is not None)
    x = np.stack([c.input if c.input is not None else np.zeros(width, dtype) for c in cases])
    kw = {spec.root_arg: root} if spec.root_arg else {}
    result = ringccl.simulate(collective, x, op=op, check=False, **kw)
    if collective == "gather":  # the simulator returns the root's gathered buffer only
        np.testing.assert_array_equal(result.outputs, cases[root].expected)
        assert all(c.expected is None for r, c in enumerate(cases) if r != root)
        return
    for r, c in enumerate(cases):
        if c.expected is not None:
            np.testing.assert_array_equal(np.asarray(result.outputs[r]), c.expected)
    assert all(c.expected is not None for c in cases) or spec.root_arg


def test_inputs_tell_ranks_and_positions_apart():
    """A misplaced chunk or a missing rank must change the values (what #wrong relies on)."""
    m, n = 4096, 4
    cases, x = _inputs("all_reduce", m, n, "sum", "float32")
    assert len({row.tobytes() for row in x}) == n            # ranks differ
    shifted = np.roll(cases[0].expected, 1024)               # chunk moved by a chunk size
    assert np.count_nonzero(shifted != cases[0].expected) > 0.8 * m
    partial = x[:-1].sum(0)                                  # one rank's contribution lost
    assert np.count_nonzero(partial != cases[0].expected) > 0.8 * m


def test_unknown_collective_case_raises(monkeypatch):
    with pytest.raises(ArgumentError, match="collective='nope' is unknown"):
        bench.make_case("nope", 8, 2, 0, 0, "sum", "float32")
    monkeypatch.setitem(COLLECTIVES, "nope", COLLECTIVES["all_reduce"])  # known, but no case
    with pytest.raises(ArgumentError, match="no input/expected-output case"):
        bench.make_case("nope", 8, 2, 0, 0, "sum", "float32")


def test_parse_algorithms():
    assert bench.parse_algorithms("all_reduce", "ring, builtin,ring") == ("ring", BUILTIN)
    everything = bench.parse_algorithms("all_reduce", "all")
    assert everything[-1] == BUILTIN
    assert set(everything[:-1]) == set(ringccl.algorithms("all_reduce"))
    with pytest.raises(ArgumentError, match="not available for all_reduce; expected one of"):
        bench.parse_algorithms("all_reduce", "ring,nope")
    with pytest.raises(ArgumentError, match="names no algorithm"):
        bench.parse_algorithms("all_reduce", " , ")


@pytest.mark.parametrize("field,value,message", [
    ("factor", 1, "factor=1 must be >= 2"), ("iters", 0, "iters=0 must be an integer >= 1"),
    # min_bytes x 2.5^k is no whole number of bytes (nccl-tests' -f is an integer)
    ("factor", 2.5, "factor=2.5 must be an integer >= 2 (nccl-tests' -f), so that every size "
     "is whole bytes"),
    ("warmup", -1, "warmup=-1 must be an integer >= 0"),
    ("min_bytes", 10, "min_bytes <= max_bytes"), ("placements", ("sideways",), "placements"),
    ("segment_bytes", (-1,), "segment_bytes=-1"), ("dtype", "int32", "op=avg needs"),
])
def test_spec_validation(field, value, message):
    base = dict(collective="all_reduce", min_bytes=64, max_bytes=64 if field != "min_bytes" else 8,
                op="avg" if field == "dtype" else "sum")
    base[field] = value
    with pytest.raises(ringccl.RingcclError, match=re.escape(message)):
        BenchSpec(**base).validate()


def test_spec_round_trips_through_a_dict():
    spec = BenchSpec("all_gather", ("ring",), segment_bytes=(0, None), placements=("in-place",))
    assert BenchSpec.from_dict(spec.to_dict()) == spec


def test_summarize():
    s = bench.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s["time_s"] == 3.0 and s["min_s"] == 1.0 and s["p90_s"] == pytest.approx(4.6)
    assert s["times_s"] == [5.0, 1.0, 3.0, 2.0, 4.0]


class OneRank:
    """A world_size-1 backend: every collective is a copy (or wrong on purpose)."""

    name, rank, world_size = "fake", 0, 1

    def __init__(self, corrupt=None):
        self.corrupt = corrupt
        self.barriers = 0

    def barrier(self):
        self.barriers += 1

    def max_over_ranks(self, values):
        return list(values)

    def sum_over_ranks(self, value):
        return value

    def prepare(self, collective, algorithm, placement, case, spec, segment_bytes):
        out = np.zeros_like(case.expected)

        def run():
            out[...] = case.input
            if algorithm == self.corrupt:
                out[:3] += 1
        return Prepared(run, lambda: out.fill(0), lambda: out)

    def local_reduce(self, count, spec):
        return Prepared(lambda: None, lambda: None, lambda: None)


def test_run_sweep_rows_and_wrong_counts():
    spec = BenchSpec("all_reduce", ("ring", BUILTIN), 64, 1024, 4, iters=5, warmup=2,
                     segment_bytes=(None, 0))
    emitted = []
    backend = OneRank(corrupt="ring")
    rows = bench.run_sweep(backend, spec, emitted.append)
    assert rows == emitted and len(rows) == bench.row_count(spec)
    coll = [r for r in rows if r["kind"] == "collective"]
    # ring twice (two segment settings), builtin once, each in both placements, per size
    assert len(coll) == 3 * (2 + 1) * 2
    assert {r["size"] for r in coll} == {64, 256, 1024}
    for r in coll:
        assert r["wrong"] == (3 if r["algorithm"] == "ring" else 0)
        assert r["count"] == r["size"] // 4 and r["type"] == "float" and r["root"] == -1
        assert len(r["times_s"]) == 5 and r["min_s"] <= r["time_s"] <= r["p90_s"]
        assert r["busbw"] == pytest.approx(r["algbw"] * 0.0)  # bus factor 2(N-1)/N = 0 at N=1
    assert {r["placement"] for r in coll} == set(PLACEMENTS)
    calib = [r for r in rows if r["kind"] == "local-reduce"]
    assert [r["reduced_bytes"] for r in calib] == [64, 256, 1024]
    assert backend.barriers == len(rows) * 5  # one barrier per timed iteration


@pytest.mark.parametrize("collective,count,n,m,placement", [
    ("all_reduce", 1001, 3, 1001, "in-place"), ("reduce_scatter", 1001, 3, 999, "out-of-place"),
    ("all_gather", 10, 3, 30, "out-of-place"), ("all_to_all", 10, 4, 8, "out-of-place"),
    ("broadcast", 7, 2, 7, "in-place"), ("gather", 5, 2, 10, "out-of-place"),
])
def test_one_size_is_the_run_commands_spec(collective, count, n, m, placement):
    # `ringccl run`'s count (elements per rank; reduce_scatter and scatter: the N-block input)
    # becomes one bench size, the collective's buffer M, and one placement
    algorithm = "direct" if collective in ("gather", "all_to_all") else "ring"
    spec = bench.one_size(collective, algorithm, count, n, dtype="float64", iters=2, warmup=0,
                          params={"segments": 2})
    assert spec.min_bytes == spec.max_bytes == 8 * m
    assert bench.buffer_elements(collective, spec.min_bytes, 8, n) == m
    assert spec.placements == (placement,) and spec.algorithms[1] == BUILTIN
    assert not spec.calibrate and spec.check and spec.params == {"segments": 2}


def test_one_size_takes_the_root_of_rooted_collectives_out_of_params():
    spec = bench.one_size("broadcast", "ring", 8, 3, params={"root": 2, "segments": 4})
    assert spec.root == 2 and spec.params == {"segments": 4}
    spec = bench.one_size("all_reduce", "master", 8, 3, params={"root": 1})  # the algorithm's
    assert spec.root == 0 and spec.params == {"root": 1}
    with pytest.raises(ArgumentError, match="root=3 is out of range for world_size=3"):
        bench.one_size("reduce", "ring", 8, 3, params={"root": 3})
    with pytest.raises(ArgumentError, match="not a parameter"):
        BenchSpec("reduce", params={"root": 1}).validate()


def test_run_report_from_a_one_size_sweep():
    spec = bench.one_size("all_reduce", "ring", 100, 1, iters=3, warmup=1)
    rows = bench.run_sweep(OneRank(corrupt="ring"), spec)
    report = bench.run_report(rows, spec, 100, {"segments": 2})
    assert report["wrong"] == 3 and report["ringccl"]["wrong"] == 3
    assert report["builtin"]["wrong"] == 0 and report["count"] == 100
    assert report["size_bytes"] == 400 and report["params"] == {"segments": 2}
    assert report["busbw_ratio"] is None and report["bus_factor"] == 0.0  # one rank
    assert report["ringccl"]["min_s"] <= report["ringccl"]["time_s"] <= report["ringccl"]["p90_s"]


def test_count_wrong_is_one_definition():
    expected = np.array([1.0, np.nan, 3.0])
    assert bench.count_wrong(np.array([1.0, np.nan, 3.0]), expected) == 0  # NaN == NaN here
    assert bench.count_wrong(np.array([1.0, 2.0, 4.0]), expected) == 2
    assert bench.count_wrong(None, expected) == 3 and bench.count_wrong(np.ones(2), expected) == 3
    assert bench.count_wrong(None, None) == 0  # a rank without output


def test_random_inputs_are_small_integers_and_seeded():
    x = bench.random_inputs(4, 1000, "float32", seed=3)
    assert x.shape == (4, 1000) and x.dtype == np.float32
    assert x.min() >= -8 and x.max() < 8 and np.array_equal(x, np.round(x))
    assert np.array_equal(x, bench.random_inputs(4, 1000, np.float32, seed=3))
    assert bench.random_inputs(2, 5, "uint8").min() >= 0
    assert bench.random_inputs(2, 5, "bool").dtype == np.bool_


def test_run_sweep_without_check_or_calibration():
    spec = BenchSpec("all_gather", ("ring",), 64, 64, 2, iters=1, warmup=0, check=False,
                     placements=("in-place",), calibrate=False)
    rows = bench.run_sweep(OneRank(corrupt="ring"), spec)
    assert len(rows) == 1 and rows[0]["wrong"] is None and rows[0]["redop"] == "none"


def _fake_rows(spec, n=4):
    rows = []
    for size in bench.sweep_sizes(spec.min_bytes, spec.max_bytes, spec.factor):
        for algorithm, seg, placement in _variants(spec):
            t = 1e-5 + size / 2e9 * (1.5 if algorithm == BUILTIN else 1.0)
            rows.append({"kind": "collective", "collective": spec.collective,
                         "algorithm": algorithm, "segment_bytes": seg, "placement": placement,
                         "backend": spec.backend, "world_size": n, "size": size,
                         "count": size // 4, "dtype": "float32", "type": "float",
                         "redop": "sum", "root": -1, "time_s": t, "min_s": t, "p90_s": t,
                         "algbw": size / t, "busbw": size / t * 1.5, "wrong": 0,
                         "iters": spec.iters, "warmup": spec.warmup})
    return rows


def test_nccl_tests_layout():
    spec = BenchSpec("all_reduce", ("ring", BUILTIN), 8, 1 << 30, 64)
    text = bench.format_nccl_tests(_fake_rows(spec), spec, 4)
    lines = text.splitlines()
    # nccl-tests' header: "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s"
    fmt = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
    assert fmt % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                  "time", "algbw", "busbw", "#wrong") in lines
    assert fmt % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                  "(GB/s)", "(GB/s)", "") in lines
    assert any("out-of-place" in line and "in-place" in line for line in lines)
    data = [line for line in lines if not line.startswith("#")]
    assert len(data) == 2 * len(bench.sweep_sizes(8, 1 << 30, 64))
    for line in data:
        fields = line.split()
        assert len(fields) == 13                  # what parsers split on
        # %12li  %12li  %8s  %6s  %6s, then per placement   %7s  %6s  %6s  %6s
        assert len(line) == (12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6
                             + 2 * (2 + 7 + 2 + 6 + 2 + 6 + 2 + 6))
        assert fields[2] == "float" and fields[3] == "sum" and fields[4] == "-1"
        assert fields[8] == "0" and fields[12] == "0"
    big = next(line for line in data if line.split()[0] == str(1 << 27))
    assert big.split()[5] == f"{(1e-5 + 2**27 / 2e9) * 1e6:.1f}"  # 5 digits: one decimal
    assert "# ringccl algorithm: ring" in lines and "# ringccl algorithm: builtin" in lines
    assert "# Out of bounds values : 0 OK" in lines


def test_nccl_tests_layout_names_the_program_and_lists_the_devices():
    spec = BenchSpec("all_to_all", ("ring",), 64, 256, 4)
    places = bench.rank_places([("node-a", 41), ("node-a", 41), ("node-b", 7), ("node-b", 7)],
                               ["CPU"] * 4)
    lines = bench.format_nccl_tests(_fake_rows(spec), spec, 4, places).splitlines()
    assert lines[0] == "# Collective test starting: alltoall_perf"
    assert lines[-1] == "# Collective test concluded: alltoall_perf"
    # nccl-tests' "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s"
    assert [line for line in lines if line.startswith("#  Rank")] == [
        "#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x00] CPU" % (r, 0, pid, host, d)
        for r, (host, pid, d) in enumerate([("node-a", 41, 0), ("node-a", 41, 1),
                                            ("node-b", 7, 0), ("node-b", 7, 1)])]


@pytest.mark.parametrize("value,text", [(3.14159, "   3.14"), (12345.678, "12345.7"),
                                        (123456.7, " 123457"), (12345678.0, "1.2e+07"),
                                        (0.0, "   0.00")])
def test_nccl_tests_numbers(value, text):
    assert _num(value, 7) == text


def test_nccl_tests_missing_placement_and_unchecked():
    spec = BenchSpec("all_reduce", ("ring",), 64, 64, 2, check=False, placements=("in-place",))
    rows = _fake_rows(spec)
    rows[0]["wrong"] = None
    line = next(line for line in bench.format_nccl_tests(rows, spec, 4).splitlines()
                if not line.startswith("#"))
    assert line.split()[5:] == ["N/A"] * 4 + line.split()[9:12] + ["N/A"]


def test_csv_round_trip():
    spec = BenchSpec("all_reduce", ("ring", BUILTIN), 64, 256, 4)
    rows = _fake_rows(spec)
    rows[0]["accumulate_dtype"] = "float32"
    back = list(csv.DictReader(io.StringIO(bench.format_csv(rows))))
    assert len(back) == len(rows)
    assert float(back[0]["time_s"]) == rows[0]["time_s"] and back[0]["algorithm"] == "ring"
    assert back[0]["accumulate_dtype"] == "float32" and back[1]["accumulate_dtype"] == ""


def test_best_placement_and_plot(tmp_path):
    spec = BenchSpec("all_reduce", ("ring", BUILTIN), 64, 1 << 20, 16)
    rows = _fake_rows(spec)
    rows[0]["time_s"] = 1e-9  # out-of-place ring at 64 B is the faster one
    best = bench.best_placement(rows)
    assert len(best) == 2 * 4 and rows[0] in best
    pytest.importorskip("matplotlib")
    path = tmp_path / "busbw.png"
    bench.plot_busbw(rows, str(path), "test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nccl_without_gpus_is_refused_before_any_process_starts(monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from ringccl.errors import BackendError
    from ringccl.torch import launch as launch_mod

    def never(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(torch.multiprocessing, "get_context", never)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    with pytest.raises(BackendError, match="backend='nccl' is not available in this torch"):
        launch_mod.launch(print, 2, backend="nccl")
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(BackendError, match="one CUDA GPU per process: nproc=2, but 1 GPUs"):
        launch_mod.launch(print, 2, backend="nccl")
    with pytest.raises(BackendError, match="one CUDA GPU per process"):
        launch_mod.launch(print, 2, backend="NCCL")  # torch accepts any case


def test_accumulate_dtype_is_checked_normalized_and_labelled():
    spec = BenchSpec("all_reduce", dtype="float16", accumulate_dtype="f4").validate(2)
    assert spec.accumulate_dtype == "float32"
    assert BenchSpec.from_dict(spec.to_dict()) == spec
    assert BenchSpec.from_dict({"collective": "all_reduce"}).accumulate_dtype is None
    for kwargs, message in [
            (dict(collective="all_gather", dtype="float16"), "applies to reducing collectives"),
            (dict(collective="all_reduce", dtype="int32"), "needs a floating input, got int32"),
            (dict(collective="all_reduce", dtype="float32", accumulate_dtype="float16"),
             "accumulate_dtype=float16 is narrower than the input's float32"),
            (dict(collective="reduce", dtype="float16", backend="mpi"),
             "ringccl.mpi accumulates in all_reduce and reduce_scatter only, not reduce")]:
        kwargs.setdefault("accumulate_dtype", "float32")
        with pytest.raises(ArgumentError, match=message):
            BenchSpec(**kwargs).validate(2)
    row = {"algorithm": "ring", "segment_bytes": 1 << 20, "accumulate_dtype": "float32"}
    assert bench.row_label(row) == "ring seg=1MiB acc=float32"
    assert bench.row_label({"algorithm": "builtin", "accumulate_dtype": None}) == "builtin"
