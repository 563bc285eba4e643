"""`ringccl fit` on nccl-tests logs: NCCL's network fitted per link level, the held-out check
(fit on half the sizes of each log, predict the other half), the profile and its loaders, and
`ringccl nccl`."""

import json
import pathlib

import pytest

from ringccl.cli import main
from ringccl.costmodel.fit import load_rows
from ringccl.costmodel.nccl import nccl_machine, price
from ringccl.costmodel.nccl_fit import (cluster_fields, fit_network, held_out_network,
                                        load_network_profile, predict_row)
from ringccl.errors import ArgumentError
from ringccl.planner.cluster import load_profile

DATA = pathlib.Path(__file__).parent / "data" / "nccl_tests"
H100_LOGS = sorted(str(p) for p in DATA.glob("h100_*.log"))


def _rows(machine, coll, ppn, nodes, name):
    """Rows as the parser gives them, timed by NCCL's model itself on ``machine``."""
    out = []
    for k in range(3, 34, 2):
        size = 2 ** k
        out.append({"source": "nccl-tests", "collective": coll, "size": size, "time_s":
                    price(coll, size, ppn, nodes, machine).seconds, "ranks_per_node": ppn,
                    "nodes": nodes, "world_size": ppn * nodes, "placement": "in-place",
                    "device": "NVIDIA H100 80GB HBM3", "file": name, "wrong": 0})
    return out


def test_the_fit_recovers_a_machine_the_model_describes():
    truth = nccl_machine("dgx-h100", intra_bandwidth=300e9, intra_alpha=5e-6,
                         inter_bandwidth=40e9, inter_alpha=9e-6, inter_message=3e-6,
                         inter_epsilon=4e-6)
    rows = (_rows(truth, "all_reduce", 8, 1, "a") + _rows(truth, "all_gather", 8, 1, "b")
            + _rows(truth, "all_reduce", 8, 4, "c") + _rows(truth, "reduce_scatter", 8, 4, "d")
            + _rows(truth, "all_to_all", 8, 2, "e"))
    m = fit_network(rows).machine  # from the preset the device names
    # the alternation (choose, fit) may settle where a size or two pick a neighbouring
    # algorithm, with parameters a few per cent off: bandwidths within 2%, latencies within 5%
    for attr, rel in (("intra_bandwidth", 0.02), ("inter_bandwidth", 0.02), ("intra_alpha", 0.05),
                      ("inter_alpha", 0.05), ("inter_message", 0.05)):
        assert getattr(m, attr) == pytest.approx(getattr(truth, attr), rel=rel), attr
    assert m.inter_epsilon == pytest.approx(truth.inter_epsilon, abs=1e-6)
    assert m.intra_epsilon == pytest.approx(0.0, abs=0.5e-6)


def test_half_the_sizes_predict_the_other_half():
    """The acceptance check on this folder's logs (their numbers are ours, from a law that is
    not NCCL's model): median |error| <= 10% over the held-out sizes, every log <= 15%."""
    held = held_out_network(load_rows(H100_LOGS))
    assert held.median_error() <= 0.10
    for name, points in held.logs.items():
        errs = sorted(abs(p[3]) for p in points)
        assert errs[len(errs) // 2] <= 0.15, name
    assert set(held.by_level()) == {"intra", "inter"}
    # every log alone, fitted on its own even sizes
    for name in H100_LOGS + [str(DATA / "a100_1node_all_reduce_perf_v2.0.log")]:
        assert held_out_network(load_rows([name])).median_error() <= 0.15, name


def test_the_profile_round_trips_and_the_planner_reads_it(tmp_path, capsys):
    assert main(["fit", *H100_LOGS, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    entry = report[0]
    assert entry["backend"] == "nccl" and set(entry["levels"]) == {"intra", "inter"}
    assert entry["held_out"]["median_abs_error"] <= 0.10
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(report))
    m = load_network_profile(path)
    assert m == fit_network(load_rows(H100_LOGS)).machine
    fields = cluster_fields(m)
    assert fields["inter_bandwidth"] == entry["levels"]["inter"]["bandwidth_Bps"]
    # the planner's loader of `ringccl fit --json` reads the network's inter level from it
    legacy = load_profile(path, "inter")
    assert legacy["inter_alpha"] == pytest.approx(m.inter_alpha)
    assert legacy["inter_bandwidth"] == pytest.approx(m.inter_bandwidth)
    (tmp_path / "only.json").write_text(json.dumps(entry["profile"]))
    assert load_network_profile(tmp_path / "only.json") == m
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ArgumentError, match="holds no ringccl-network-profile"):
        load_network_profile(tmp_path / "other.json")


def test_cli_fit_prints_levels_held_out_and_draws(tmp_path, capsys):
    png = tmp_path / "fit.png"
    assert main(["fit", *H100_LOGS, "--plot", str(png), "--min-size", "0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in ("NCCL's network fitted to nccl-tests", "alpha (fitted)", "per GPU", "per NIC",
                 "held out: ", "NCCL's choice", "ring/Simple", "p2p/", "held-out median |error| "
                 "for sizes >= 0.00 B", "chart written to"):
        assert text in out, text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_fit_needs_a_machine_for_unknown_devices(tmp_path, capsys):
    text = (DATA / "h100_1node_all_gather.log").read_text().replace("H100 80GB HBM3", "X9")
    log = tmp_path / "all_gather_perf.log"
    log.write_text(text)
    assert main(["fit", str(log)]) == 2
    assert "name no single machine preset" in capsys.readouterr().err
    assert main(["fit", str(log), "--machine", "dgx-h100", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["profile"]["prior"] == "dgx-h100" and "inter" not in entry["levels"]


def test_cli_nccl_prices_explains_and_reads_a_profile(tmp_path, capsys):
    assert main(["nccl", "all_reduce", "--nodes", "4", "--size", "1KiB,1GiB", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    small, big = report["rows"]
    assert small["seconds"] < big["seconds"] and big["busbw"] > 300e9
    assert big["explain"].startswith("all_reduce of 1.00 GiB over 32 ranks")
    cost = price("all_reduce", 1 << 30, 8, 4, nccl_machine("dgx-h100"))
    assert big["seconds"] == pytest.approx(cost.seconds)
    assert (big["algorithm"], big["protocol"]) == (cost.algorithm, cost.protocol)
    assert main(["nccl", "all_to_all", "--nodes", "128", "--size", "1MiB", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "p2p" in out and "NCCL picks p2p/LL" in out
    assert main(["fit", *H100_LOGS, "--json"]) == 0
    profile = tmp_path / "p.json"
    profile.write_text(capsys.readouterr().out)
    assert main(["nccl", "send_recv", "--ranks-per-node", "1", "--nodes", "2", "--size", "1GiB",
                 "--profile", str(profile), "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert fitted["machine"] == load_network_profile(profile).to_dict()
    assert main(["nccl", "all_reduce", "--algorithm", "rings"]) == 2
    assert "unknown rings" in capsys.readouterr().err
    # one rank moves nothing: refused, rather than a row of inf algbw and nan busbw
    assert main(["nccl", "all_reduce", "--ranks-per-node", "1", "--nodes", "1"]) == 2
    assert "= 1 rank: a collective over one rank moves nothing" in capsys.readouterr().err


def test_a_network_profile_with_bad_machine_fields_or_a_raw_log_is_named(tmp_path):
    path = tmp_path / "net.json"
    for machine, match in (({"bogus_field": 1}, "machine does not read as NcclMachine fields"),
                           (None, "machine=None is not an object of NcclMachine fields")):
        path.write_text(json.dumps({"format": "ringccl-network-profile", "machine": machine}))
        with pytest.raises(ArgumentError, match=match):   # was a TypeError / KeyError
            load_network_profile(path)
        with pytest.raises(ArgumentError, match=match):   # the planner's loader: the same words
            load_profile(path)
    # the log the profile is fitted from, passed in its place
    with pytest.raises(ArgumentError, match=r"cannot read it \(Expecting value.*\); it is "
                                            "nccl-tests output: fit it first, `ringccl fit --json"):
        load_network_profile(DATA / "h100_1node_all_reduce.log")


def test_cli_fit_prints_what_the_logs_left_out_and_no_nan(tmp_path, capsys):
    source = DATA / "h100_1node_all_reduce.log"
    lines = source.read_text().splitlines(keepends=True)
    data = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
    # wrong results at the first size; the log cut after its 32 KiB row
    first = lines[data[0]].rstrip("\n").rsplit(None, 1)
    lines[data[0]] = first[0] + " 3\n"
    cut = next(i for i in data if int(lines[i].split()[0]) == 32768)
    log = tmp_path / "h100_1node_all_reduce_perf.log"
    log.write_text("".join(lines[:cut + 1]))
    assert main(["fit", str(log)]) == 0
    out = capsys.readouterr().out
    assert "note: " in out and "#wrong != 0 at" in out
    assert "nan%" not in out and "n/a (no held-out row is that large" in out
    assert main(["fit", str(log), "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert any("#wrong != 0" in n for n in entry["notes"])


# -- the held-out check: the fit's rows, short logs, --min-size per log; flags that do not apply

def _edited(tmp_path, source, edit, name="h100_1node_all_reduce_perf.log"):
    """``source`` with ``edit(lines, data_indices)`` applied, written to ``name``."""
    lines = (DATA / source).read_text().splitlines(keepends=True)
    data = [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]
    lines = edit(lines, data) or lines
    path = tmp_path / name
    path.write_text("".join(lines))
    return str(path)


def test_a_row_of_time_zero_is_left_out_of_the_fit_and_the_check_alike(tmp_path, capsys):
    truth = nccl_machine("dgx-h100")
    rows = _rows(truth, "all_reduce", 8, 1, "a")
    rows[3]["time_s"] = 0.0  # an odd-numbered size: it would be held out
    held = held_out_network(rows)  # was a ZeroDivisionError
    assert rows[3]["size"] not in {p[0] for p in held.logs["a"]}
    assert len(fit_network(rows).levels["intra"].rows) == len(rows) - 1

    def zero(lines, data):
        fields = lines[data[13]].split()
        fields[5] = fields[9] = "0.00"
        lines[data[13]] = "  ".join(fields) + "\n"
    log = _edited(tmp_path, "h100_1node_all_reduce.log", zero)
    assert main(["fit", log]) == 0
    out = capsys.readouterr().out
    assert f"note: {log}: time 0.00 at 65536 bytes (out-of-place); 65536 bytes (in-place)" in out


def test_a_log_of_two_sizes_is_fitted_and_the_check_says_why_it_is_not_held_out(tmp_path,
                                                                                capsys):
    def two(lines, data):
        keep = {data[0], data[-1]}
        return [line for i, line in enumerate(lines) if i not in data or i in keep]
    log = _edited(tmp_path, "h100_1node_all_reduce.log", two)
    held = held_out_network(load_rows([log]))  # was: refused, "holding sizes out needs 3"
    assert held.logs == {} and "2 sizes: holding sizes out needs at least 3" in held.reason
    assert held.fit.levels["intra"].rows
    assert main(["fit", log, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert "needs at least 3" in entry["held_out"]["reason"]
    assert any(n.startswith(f"no held-out check for {log}: 2 sizes") for n in entry["notes"])
    # the other logs keep their check
    held = held_out_network(load_rows([log, str(DATA / "h100_1node_all_gather.log")]))
    assert set(held.logs) == {str(DATA / "h100_1node_all_gather.log")} and not held.reason


def test_a_log_of_one_size_is_refused_for_the_true_cause(tmp_path, capsys):
    def one(lines, data):
        return [line for i, line in enumerate(lines) if i not in data[:-1]]
    log = _edited(tmp_path, "h100_1node_all_reduce.log", one)
    assert main(["fit", log]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"ringccl: error: {log}: these 1 rows cannot separate α " \
        "(per step) from β (per byte): every row is of one size (8.00 GiB)" in err
    assert "all_reduce_perf -b 8 -e 8G -f 2" in err and "non-negative" not in err


def test_per_log_medians_keep_the_sizes_min_size_keeps(capsys):
    log = str(DATA / "h100_1node_all_reduce.log")
    for min_size in ("64KiB", "0"):
        assert main(["fit", log, "--json", "--min-size", min_size]) == 0
        (entry,) = json.loads(capsys.readouterr().out)
        held = entry["held_out"]
        # one log: its median is the summary's, over the same sizes
        assert held["per_log_median_abs_error"] == {log: pytest.approx(held["median_abs_error"])}
    assert main(["fit", log]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    summary = last.split("sizes >= 64.00 KiB: ")[1].split("%")[0]
    assert last.endswith(f"per log: h100_1node_all_reduce.log {summary}%")


@pytest.mark.parametrize("flags, named", [
    (["--train", "foo", "--predict"], "--train, --predict have no effect on nccl-tests logs"),
    (["--residuals"], "--residuals has no effect on nccl-tests logs"),
    (["-N", "8"], "-N has no effect on nccl-tests logs"),
])
def test_flags_for_bench_rows_are_refused_on_nccl_tests_logs(capsys, flags, named):
    assert main(["fit", str(DATA / "h100_1node_all_reduce.log"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ringccl: error: {named}") and err.count("\n") == 1


def test_cli_refuses_a_program_the_log_contradicts(capsys):
    log = str(DATA / "h100_1node_all_reduce.log")
    assert main(["fit", log, "--program", "alltoall_perf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "all_reduce_perf" in err and "alltoall_perf" in err


def test_a_logged_nccl_algo_exclusion_restricts_the_prediction():
    """NCCL_ALGO=^ring in a log's environment leaves every algorithm but ring (NCCL's own
    syntax), as ``ringccl nccl -a ^ring`` does; a plain list restricts to it."""
    m = nccl_machine("dgx-h100")
    row = dict(collective="all_reduce", size=1 << 30, ranks_per_node=8, nodes=2)
    assert predict_row(m, dict(row, nccl_algo="Ring")).algorithm == "ring"
    chosen = predict_row(m, row).algorithm
    assert chosen != "ring"
    assert predict_row(m, dict(row, nccl_algo=f"^{chosen}")).algorithm != chosen
    assert predict_row(m, dict(row, collective="all_to_all", nccl_algo="^ring")).algorithm == "p2p"


def test_a_fit_that_does_not_describe_its_rows_says_so_and_keeps_what_they_leave_open(
        tmp_path, capsys):
    """A multi-node all-reduce log whose time is the same at every size (a broken run)
    determines neither α nor a bandwidth (β is not told from 0): the fit keeps the machine's
    (as its notes say, and ``held`` lists) and notes that it misses its own rows; a
    bandwidth the rows do determine, faster than the NIC, is noted as not a link's; a log the
    model describes gets neither note."""
    truth = nccl_machine("dgx-h100")
    flat = [{**r, "time_s": 50e-6} for r in _rows(truth, "all_reduce", 8, 4, "flat")]
    level = fit_network(flat).levels["inter"]
    for name in ("inter_alpha", "inter_beta"):
        assert f"{name} kept at the machine's value: these rows do not determine it" in \
            level.notes
    assert (level.alpha, level.bandwidth) == (truth.inter_alpha, truth.inter_bandwidth)
    assert set(level.held) == {"alpha", "bandwidth"}
    assert any(n.startswith("the fit misses its own inter-node rows by") for n in level.notes)
    # one GPU per node: the NIC bounds every size; five times the preset's NIC
    fast = nccl_machine("dgx-h100", inter_bandwidth=240e9)
    level = fit_network(_rows(fast, "all_reduce", 1, 4, "fast"), truth).levels["inter"]
    assert level.bandwidth == pytest.approx(240e9, rel=0.02) and not level.held
    assert any("faster than that link can be" in n for n in level.notes)
    good = fit_network(_rows(truth, "all_reduce", 8, 4, "good")).levels["inter"]
    assert not any("misses its own" in n or "faster than" in n for n in good.notes)
