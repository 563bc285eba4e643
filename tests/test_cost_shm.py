"""The shared-memory link class of the cost model: ``ringccl fit`` on rows that say
``"transport": "shm"`` (grouped apart, the copy in and out and a per-call ε added), the held-out
check over sizes, the preset and ``ringccl model/tune --link shm`` predicting the
one-shot/two-shot crossover. No processes: the rows are synthetic, made from known parameters
through the registry's closed forms."""

from __future__ import annotations

import json

import pytest

from ringccl.algorithms import REGISTRY
from ringccl.cli import main
from ringccl.costmodel.fit import (SHM_COPIES, by_backend, copy_bytes, fit_rows, held_out,
                                   predict)
from ringccl.costmodel.presets import LINK_CLASSES, SHARED_MEMORY, link_class
from ringccl.costmodel.tuning import tune
from ringccl.errors import ArgumentError

ALPHA, BETA, GAMMA, DELTA, EPSILON = 5e-6, 0.25e-9, 0.1e-9, 1e-6, 20e-6
SIZES = [4096 * 4 ** k for k in range(8)]   # 4 KiB .. 64 MiB


def _rows(world_sizes=(2, 4)):
    rows = []
    for n in world_sizes:
        for size in SIZES:
            for algorithm in ("direct", "two_shot"):
                t = REGISTRY[("all_reduce", algorithm)].time_for(n, float(size), ALPHA, BETA,
                                                                 GAMMA)
                t += BETA * SHM_COPIES * size + EPSILON
                rows.append({"collective": "all_reduce", "backend": "mpi", "transport": "shm",
                             "world_size": n, "size": size, "algorithm": algorithm,
                             "kind": "collective", "placement": "in-place",
                             "segment_bytes": None, "time_s": t})
            rows.append({"collective": "all_reduce", "backend": "mpi", "transport": None,
                         "world_size": n, "size": size, "algorithm": "builtin",
                         "kind": "collective", "placement": "in-place", "segment_bytes": None,
                         "time_s": 1e-3})
            reduced = size // n
            rows.append({"collective": "all_reduce", "backend": "mpi", "transport": "shm",
                         "world_size": n, "size": size, "algorithm": "local-reduce",
                         "kind": "local-reduce", "placement": "in-place",
                         "segment_bytes": None, "reduced_bytes": reduced,
                         "time_s": DELTA + GAMMA * reduced})
    return rows


def test_shm_rows_are_grouped_apart_and_the_fit_recovers_the_parameters():
    rows = _rows()
    p2p = [dict(r, transport="p2p", time_s=2 * r["time_s"]) for r in rows
           if r["kind"] == "collective" and r["algorithm"] != "builtin"]
    groups = by_backend(rows + p2p)
    assert set(groups) == {"mpi/shm", "mpi/p2p"}
    # the calibration and MPI's own rows join every transport group of their backend
    assert sum(r["kind"] == "local-reduce" for r in groups["mpi/p2p"]) == 2 * len(SIZES)
    fit = fit_rows(groups["mpi/shm"], "mpi/shm")
    assert fit.transport == "shm"
    want = {"alpha": ALPHA, "beta": BETA, "gamma": GAMMA, "delta": DELTA, "epsilon": EPSILON}
    got = fit.to_json()["params"]
    for name, value in want.items():
        assert got[name]["value"] == pytest.approx(value, rel=1e-6), name
    assert fit.to_json()["transport"] == "shm"
    # predictions carry the copy in and out and ε: the measured rows come back
    for r in groups["mpi/shm"]:
        if r["kind"] == "collective" and r["algorithm"] != "builtin":
            assert predict(fit, "all_reduce", r["algorithm"], r["world_size"], r["size"]) \
                == pytest.approx(r["time_s"], rel=1e-6)


def test_copy_bytes_only_over_shm():
    assert copy_bytes("shm", 1000) == SHM_COPIES * 1000
    assert copy_bytes("p2p", 1000) == 0 and copy_bytes(None, 1000) == 0


def test_rows_without_a_transport_group_as_before():
    rows = [{k: v for k, v in r.items() if k != "transport"} for r in _rows()]
    assert list(by_backend(rows)) == ["mpi"]


def test_held_out_over_sizes_predicts_the_odd_sizes_of_every_sweep():
    held = held_out(by_backend(_rows())["mpi/shm"], "sizes", "mpi/shm")
    assert held.method == "sizes"
    assert len(held.sweeps) == 4   # direct, two_shot x 2, 4 ranks
    assert all(len(v) == len(SIZES) // 2 for v in held.sweeps.values())
    assert held.median_error() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ArgumentError, match="at least 3 sizes"):
        held_out([r for r in _rows() if r["size"] <= 16384 and r["transport"] == "shm"],
                 "sizes")


def test_the_link_class_predicts_the_one_shot_two_shot_crossover():
    # 2 ranks: direct = α + M(β + γ), two_shot = 2α + Mβ + Mγ/2, equal at M = 2α/γ
    link = SHARED_MEMORY._replace(alpha=ALPHA, bandwidth=1 / BETA, gamma=GAMMA)
    sizes = [2 ** k for k in range(10, 27)]
    t = tune("all_reduce", None, sizes, link.flat(2), gamma=link.gamma,
             algorithms=["direct", "two_shot"])
    assert [(c.below, c.above) for c in t.crossovers] == [("direct", "two_shot")]
    assert t.crossovers[0].nbytes == pytest.approx(2 * ALPHA / GAMMA, rel=0.05)
    assert link.copy_seconds(1 << 20) == pytest.approx(SHM_COPIES * (1 << 20) * BETA)


def test_the_preset_names_its_measurement():
    assert LINK_CLASSES["shm"] is SHARED_MEMORY is link_class("shm")
    assert SHARED_MEMORY.copies == SHM_COPIES
    assert SHARED_MEMORY.alpha >= 0 and SHARED_MEMORY.bandwidth > 0 and SHARED_MEMORY.gamma > 0
    assert "ringccl bench" in SHARED_MEMORY.source and "ringccl fit" in SHARED_MEMORY.source
    with pytest.raises(ArgumentError, match="link='nvlink9'.*known: shm"):
        link_class("nvlink9")


def test_model_and_tune_take_the_shm_link(capsys):
    assert main(["model", "all_reduce", "--link", "shm", "-a", "direct,two_shot", "-s",
                 "4KiB:64MiB", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [t["world_size"] for t in report["tables"]] == [2, 4]
    assert main(["tune", "all_reduce", "--link", "shm", "-N", "2", "-a", "direct,two_shot",
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["model", "all_reduce", "--link", "shm", "--nodes", "2"]) != 0
    assert "cannot be combined with --nodes" in capsys.readouterr().err


def test_fit_cli_reports_the_shm_group_and_its_held_out_error(tmp_path, capsys):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"rows": _rows()}))
    assert main(["fit", str(path), "--train", "sizes", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["fit"]["backend"] for r in report] == ["mpi/shm"]
    assert report[0]["held_out"]["method"] == "sizes"
    assert report[0]["held_out"]["median_abs_error"] == pytest.approx(0.0, abs=1e-6)
