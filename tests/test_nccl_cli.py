"""`ringccl nccl`'s options (bus bandwidth, sizes, NCCL_ALGO's forms, the flags it refuses) and
the network profile as `nccl` and the planner read it: refused fields named with the file, the
levels it did not fit said."""

import json

import pytest

from ringccl.cli import main
from ringccl.costmodel.nccl import nccl_machine, price
from ringccl.costmodel.nccl_fit import load_network_profile, network_profile_levels
from ringccl.errors import ArgumentError
from ringccl.planner.cluster import Cluster


def _json(capsys, *argv):
    assert main(["nccl", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _refused(capsys, *argv, command="nccl") -> str:
    try:
        rc = main([command, *argv])
    except SystemExit as exc:  # argparse's own refusals
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def _profile(tmp_path, levels=("intra", "inter"), name="net.json", **machine):
    """A network profile as `ringccl fit --json` writes it, of the dgx-a100 preset."""
    fields = {**nccl_machine("dgx-a100").to_dict(), **machine}
    path = tmp_path / name
    path.write_text(json.dumps({"format": "ringccl-network-profile", "version": 1,
                                "prior": "dgx-a100", "machine": fields,
                                "levels": {k: {"alpha_s": 1e-6} for k in levels}}))
    return path


def test_scatter_and_gather_busbw_is_algbw_times_n_minus_1_over_n(capsys):
    # nccl-tests' ScatterGetBw / GatherGetBw: busbw = algbw (n-1)/n; one 48 GB/s NIC bounds
    # a scatter across two nodes, a GPU's NVLink a gather inside one
    (row,) = _json(capsys, "scatter", "--ranks-per-node", "1", "--nodes", "2", "--size",
                   "1GiB")["rows"]
    assert row["busbw"] == pytest.approx(row["algbw"] / 2)
    assert row["busbw"] <= 48e9 * 1.001
    (row,) = _json(capsys, "gather", "--size", "1GiB")["rows"]
    assert row["busbw"] == pytest.approx(row["algbw"] * 7 / 8)
    assert row["busbw"] <= nccl_machine("dgx-h100").intra_bandwidth * 1.001


def test_sizes_are_whole_bytes_in_a_bounded_range(capsys):
    rows = _json(capsys, "all_reduce", "--size", "1B:64B:4")["rows"]
    assert [r["size"] for r in rows] == [1, 4, 16, 64]
    assert all(type(r["size"]) is int for r in rows)
    assert [r["size"] for r in _json(capsys, "all_reduce", "--size", "1MiB")["rows"]] == [2**20]
    for factor in ("1.1", "1.00001", "1", "x"):  # fractional sizes, or no end
        err = _refused(capsys, "all_reduce", "--size", f"1B:1GiB:{factor}")
        assert f"FACTOR '{factor}' must be an integer >= 2" in err
    assert "must be a whole number" in _refused(capsys, "all_reduce", "--size", "1.5B")
    for big in ("16EiB", "1e30", "8EiB"):  # one message, whatever the prefix
        assert f"size '{big}' is too large: at most" in _refused(capsys, "all_reduce", "--size",
                                                                 big)
    assert "is negative" in _refused(capsys, "all_reduce", "--size=-1B")
    # a list as long as a range may be: at most 1,000 sizes, refused before any is read
    err = _refused(capsys, "all_reduce", "--size", ",".join(["1KiB"] * 1001))
    assert "are 1,001 sizes, over the limit of 1,000" in err
    assert len(_json(capsys, "all_reduce", "--size", ",".join(["1KiB"] * 1000))["rows"]) == 1000


def test_algorithms_take_ncclalgo_exclusions_and_spellings(capsys):
    (row,) = _json(capsys, "all_reduce", "-a", "^nvls,tree", "--size", "1GiB")["rows"]
    assert {c["algorithm"] for c in row["candidates"]} == {"ring"}
    expected = price("all_reduce", 1 << 30, 8, 1, nccl_machine("dgx-h100"), algorithms=["ring"])
    assert row["seconds"] == pytest.approx(expected.seconds)
    (row,) = _json(capsys, "all_reduce", "--protocol", "^LL,LL128", "--size", "1KiB")["rows"]
    assert {c["protocol"] for c in row["candidates"]} == {"Simple"}
    m = nccl_machine("dgx-h100")
    assert price("all_reduce", 1 << 30, 8, 2, m, algorithms=["NVLSTree"]).algorithm == "nvls_tree"
    with pytest.raises(ArgumentError, match="unknown ''"):
        price("all_reduce", 1, 8, 1, m, algorithms=["^"])
    assert "unknown ^tree" in _refused(capsys, "all_reduce", "-a", "ring,^tree")


def test_flags_that_would_be_ignored_are_refused(capsys, tmp_path):
    err = _refused(capsys, "all_to_all", "-a", "ring")
    assert "-a has no effect on all_to_all: NCCL_ALGO does not apply to point-to-point" in err
    assert "--algorithm has no effect on gather" in _refused(capsys, "gather", "--algorithm",
                                                             "ring")
    path = _profile(tmp_path)
    err = _refused(capsys, "all_reduce", "--profile", str(path), "--machine", "dgx-h100")
    assert f"--machine has no effect with --profile {path}" in err
    # --nics-per-node changes the profile's machine: it applies
    report = _json(capsys, "all_reduce", "--profile", str(path), "--nics-per-node", "4")
    assert report["machine"]["nics_per_node"] == 4


def test_a_binary_profile_is_refused_naming_the_file(capsys, tmp_path):
    path = tmp_path / "garbage.bin"
    path.write_bytes(bytes([0x91, 0x8a, 0xa4, 0xff, 0x00, 0x10]) * 50)
    err = _refused(capsys, "all_reduce", "--profile", str(path))
    assert f"profile={str(path)!r}: cannot read it (a binary file, not text: byte 0x91 at " \
           "offset 0 is not UTF-8)" in err
    err = _refused(capsys, "--model", "llama3-8b", "--gpus", "8", "--profile", str(path),
                   command="plan")
    assert str(path) in err and "a binary file, not text" in err


@pytest.mark.parametrize("change, match", [
    ({"nvls": "yes"}, r"machine.nvls='yes' must be true or false"),
    ({"collnet": 1}, r"machine.collnet=1 must be true or false"),
    ({"channels": 0}, r"machine.channels=0 must be an integer >= 1"),
    ({"gpus_per_node": 2.5}, r"machine.gpus_per_node=2.5 must be an integer"),
    ({"intra_bandwidth": 0.0}, r"machine.intra_bandwidth: bandwidth 0.0 must be > 0"),
    ({"intra_bandwidth": None}, r"missing intra_bandwidth"),
    ({"inter_alpha": None}, r"missing inter_alpha"),
    ({"foo": 1}, r"unknown field\(s\) foo"),
])
def test_bad_or_missing_machine_fields_are_named_with_the_file(tmp_path, change, match):
    machine = {k: v for k, v in change.items() if v is not None}
    path = _profile(tmp_path, **machine)
    if None in change.values():  # a field left out
        data = json.loads(path.read_text())
        for k in change:
            del data["machine"][k]
        path.write_text(json.dumps(data))
    with pytest.raises(ArgumentError, match=rf"^profile='{path}': .*{match}"):
        load_network_profile(path)


def test_a_profile_of_an_unknown_version_is_refused(tmp_path):
    path = _profile(tmp_path)
    data = json.loads(path.read_text())
    assert load_network_profile(path) == nccl_machine("dgx-a100")
    for version in (2, "1", True):
        path.write_text(json.dumps({**data, "version": version}))
        with pytest.raises(ArgumentError, match=rf"version={version!r} is unknown; this "
                                                "ringccl reads ringccl-network-profile version 1"):
            load_network_profile(path)


def test_the_plan_says_which_levels_a_network_profile_fitted(tmp_path, capsys):
    one_node = _profile(tmp_path, levels=("intra",), name="a100prof.json")
    assert network_profile_levels(one_node) == ("dgx-a100", ("intra",))
    text = Cluster(network_profile=str(one_node)).describe()
    assert (f"network fitted in {one_node} for intra (NVLink) only; inter (NICs) the dgx-a100 "
            "preset's figures, not fitted") in text
    both = _profile(tmp_path, name="both.json")
    assert f"network fitted in {both} (the cluster preset's link figures unused)" in \
        Cluster(network_profile=str(both)).describe()
    assert main(["plan", "--model", "llama3-8b", "--gpus", "16", "--cluster", "dgx-h100",
                 "--profile", str(one_node)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "for intra (NVLink) only; inter (NICs) the dgx-a100 preset's figures" in out
    assert (f"warning (profile): the network profile {one_node} fitted intra only: the plan's "
            "inter links are the dgx-a100 preset's, not measured; it was fitted on dgx-a100 "
            "(ampere), not on the cluster's h100-sxm5-80gb (hopper)") in out
