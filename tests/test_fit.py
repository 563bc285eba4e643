"""ringccl.costmodel.fit on synthetic benchmark rows whose true α, β, γ are known."""

import json

import numpy as np
import pytest

import ringccl
from ringccl.costmodel import fit as fitmod
from ringccl.bench.spec import BUILTIN, LOCAL_REDUCE
from ringccl.cli import main
from ringccl.errors import ArgumentError

ALPHA, BETA, GAMMA, DELTA = 30e-6, 1 / 2e9, 1 / 8e9, 2e-6
SIZES = [4096 * 4**k for k in range(8)]  # 4 KiB … 64 MiB


def _rows(collective, n, noise=0.0, seed=0, algorithm="ring", calibrate=True,
          backend="mpi", placement="in-place"):
    rng = np.random.default_rng(seed)
    time = ringccl.get_algorithm(collective, algorithm).time
    rows = []
    for size in SIZES:
        t = time(n, size, ALPHA, BETA, GAMMA) * (1 + noise * rng.standard_normal())
        rows.append({"kind": "collective", "collective": collective, "algorithm": algorithm,
                     "world_size": n, "size": size, "time_s": t, "placement": placement,
                     "segment_bytes": None, "backend": backend})
        if calibrate:
            b = size // n
            rows.append({"kind": LOCAL_REDUCE, "collective": collective,
                         "algorithm": LOCAL_REDUCE, "world_size": n, "size": size,
                         "reduced_bytes": b, "placement": "in-place", "segment_bytes": None,
                         "backend": backend,
                         "time_s": (DELTA + GAMMA * b) * (1 + noise * rng.standard_normal())})
    return rows


def test_exact_rows_give_the_true_parameters():
    f = fitmod.fit_rows(_rows("all_reduce", 2) + _rows("all_reduce", 4, calibrate=False))
    np.testing.assert_allclose(f.params, [ALPHA, BETA, GAMMA, DELTA], rtol=1e-6)
    assert f.r2_log == pytest.approx(1.0) and f.r2 == pytest.approx(1.0)
    assert set(f.free) == {"alpha", "beta", "gamma", "delta"} and not f.notes


def test_noisy_rows_recover_the_parameters_within_their_confidence():
    rows = _rows("all_reduce", 2, noise=0.03, seed=1) + _rows("all_reduce", 4, noise=0.03, seed=2)
    f = fitmod.fit_rows(rows)
    for i, true in enumerate([ALPHA, BETA, GAMMA]):
        lo, hi = f.ci95[i]
        assert lo <= true <= hi and abs(f.params[i] / true - 1) < 0.15
        assert f.stderr[i] > 0
    assert f.r2_log > 0.99
    assert len(f.predicted) == len(f.rows) == len(rows)


def test_relative_weighting_keeps_small_sizes_accurate():
    """Ordinary least squares would sacrifice the 4 KiB rows to the 64 MiB ones."""
    rows = _rows("all_reduce", 2, noise=0.02, seed=3)
    f = fitmod.fit_rows(rows)
    small = [r for r in rows if r["kind"] == "collective" and r["size"] == 4096][0]
    assert abs(f.time("all_reduce", "ring", 2, 4096) / small["time_s"] - 1) < 0.1


def test_gamma_without_calibration_is_reported_unidentifiable():
    """Ring all_reduce alone: β's and γ's columns are proportional (2(N-1)/N·M vs (N-1)/N·M)."""
    f = fitmod.fit_rows(_rows("all_reduce", 2, calibrate=False)
                        + _rows("all_reduce", 4, calibrate=False))
    assert "gamma" not in f.free and f.gamma == 0.0
    assert any("gamma held at 0" in note for note in f.notes)
    # still predicts all_reduce: β absorbs γ/2
    assert f.beta == pytest.approx(BETA + GAMMA / 2, rel=1e-6)
    assert f.time("all_reduce", "ring", 8, 1 << 20) == pytest.approx(
        ringccl.get_algorithm("all_reduce", "ring").time(8, 1 << 20, ALPHA, BETA, GAMMA),
        rel=1e-6)


def test_parameters_stay_non_negative():
    rows = _rows("all_gather", 2, calibrate=False)
    for r in rows:  # times that fall with size would need a negative beta
        r["time_s"] = 1e-3 - r["size"] * 1e-12
    f = fitmod.fit_rows(rows)
    assert np.all(f.params >= 0)


def test_unusable_rows_are_skipped_and_none_left_raises():
    builtin = [dict(r, algorithm=BUILTIN) for r in _rows("all_reduce", 2, calibrate=False)]
    other = [dict(r, placement="out-of-place") for r in _rows("all_reduce", 2, calibrate=False)]
    wider = [dict(r, accumulate_dtype="float64") for r in _rows("all_reduce", 2, calibrate=False)]
    with pytest.raises(ArgumentError, match="no benchmark rows the model can explain"):
        fitmod.fit_rows(builtin + other + wider)
    assert len(fitmod.fit_rows(other, placement=None).rows) == len(other)


def test_held_out_predicts_other_collectives():
    rows = (_rows("all_reduce", 2, noise=0.02, seed=4)
            + _rows("reduce_scatter", 2, noise=0.02, seed=5, calibrate=False)
            + _rows("all_gather", 2, noise=0.02, seed=6, calibrate=False))
    held = fitmod.held_out(rows, train="all_reduce:ring")
    assert held.method == "sweep" and held.train.startswith("ring all_reduce")
    assert set(held.sweeps) == {"ring reduce_scatter, 2 ranks", "ring all_gather, 2 ranks"}
    for points in held.sweeps.values():
        assert [p[0] for p in points] == SIZES
    assert held.median_error(65536) < 0.1
    assert len(held.errors(65536)) == 2 * 6


def test_held_out_detects_a_wrong_model():
    """A sweep that does not follow the fitted machine shows large held-out errors."""
    rows = _rows("all_reduce", 2) + [dict(r, time_s=r["time_s"] * 3)
                                     for r in _rows("all_gather", 2, calibrate=False)]
    assert fitmod.held_out(rows, train="all_reduce").median_error() == pytest.approx(2 / 3)


def test_held_out_with_one_sweep_interleaves_sizes():
    held = fitmod.held_out(_rows("all_reduce", 2, noise=0.01, seed=7))
    assert held.method == "interleaved"
    (points,) = held.sweeps.values()
    assert [p[0] for p in points] == SIZES[1::2]
    assert held.median_error() < 0.1


def test_held_out_bad_train():
    with pytest.raises(ArgumentError, match="matches no sweep"):
        fitmod.held_out(_rows("all_reduce", 2), train="all_gather:ring")


def test_t_quantile_fallback_is_close_to_scipy(monkeypatch):
    import builtins
    exact = {1: 12.706, 3: 3.182, 10: 2.228, 100: 1.984}
    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_scipy)
    for dof, q in exact.items():
        assert fitmod._t_quantile(dof) == pytest.approx(q, rel=0.02 if dof >= 3 else 0.5)


def test_load_rows(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    rows = _rows("all_reduce", 2)
    a.write_text(json.dumps({"spec": {}, "world_size": 2, "rows": rows[:3]}))
    b.write_text(json.dumps(rows[3:]))
    assert fitmod.load_rows([a, b]) == rows
    bad = tmp_path / "bad.json"
    for text in ("{}", "[]", '{"rows": []}', "[1, 2]"):
        bad.write_text(text)
        with pytest.raises(ArgumentError, match="holds no benchmark rows"):
            fitmod.load_rows([bad])
    with pytest.raises(ArgumentError, match="cannot read"):
        fitmod.load_rows([tmp_path / "missing.json"])


def _write(tmp_path, rows):
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"rows": rows}))
    return str(path)


def test_cli_fit_prints_parameters_r2_and_held_out(tmp_path, capsys):
    rows = _rows("all_reduce", 2, noise=0.02) + _rows("all_gather", 2, calibrate=False)
    rows += [dict(r, backend="gloo") for r in _rows("all_reduce", 4, noise=0.02, seed=9)]
    assert main(["fit", _write(tmp_path, rows), "--residuals", "--predict",
                 "--world-size", "8", "--sizes", "1MiB"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich may wrap long titles
    for text in ("α (per step)", "β (per byte sent)", "γ (per byte reduced)", "R² =",
                 "95% confidence interval", "predicted from ring all_reduce, 2 ranks",
                 "held-out median |error| for sizes >= 64.00 KiB", "backend gloo",
                 "residuals", "predicted with the fit of backend mpi"):
        assert text in out


def test_cli_fit_plot_of_bench_rows_is_refused_before_fitting(tmp_path, capsys):
    # --plot draws nccl-tests fits only: bench rows get a clear refusal, not a silent success
    png = tmp_path / "fit.png"
    assert main(["fit", _write(tmp_path, _rows("all_reduce", 2)), "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert "--plot" in err and "nccl-tests" in err and not png.exists()


def test_cli_fit_json(tmp_path, capsys):
    rows = _rows("all_reduce", 2) + _rows("reduce_scatter", 2, calibrate=False)
    assert main(["fit", _write(tmp_path, rows), "--json", "--predict", "--world-size", "2,16",
                 "--sizes", "4KiB,1GiB"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    params = report["fit"]["params"]
    assert params["alpha"]["value"] == pytest.approx(ALPHA, rel=1e-6)
    assert params["gamma"]["value"] == pytest.approx(GAMMA, rel=1e-6)
    assert report["held_out"]["median_abs_error"] == pytest.approx(0, abs=1e-9)
    preds = report["predictions"]
    assert {(p["collective"], p["world_size"], p["size"]) for p in preds} == {
        (c, n, s) for c in ("all_reduce", "reduce_scatter") for n in (2, 16)
        for s in (4096, 1 << 30)}
    p = next(p for p in preds if p["collective"] == "all_reduce" and p["world_size"] == 16
             and p["size"] == 1 << 30)
    assert p["time_s"] == pytest.approx(30 * ALPHA + 30 / 16 * 2**30 * BETA
                                        + 15 / 16 * 2**30 * GAMMA)


# -- hand-edited rows, α vs ε in the held-out check, the notes, flags without --predict --------

@pytest.mark.parametrize("field, value, allowed", [
    ("time_s", float("nan"), "a finite number of seconds >= 0"),
    ("time_s", float("inf"), "a finite number of seconds >= 0"),
    ("time_s", "0.001", "a finite number of seconds >= 0"),
    ("time_s", -1e-3, "a finite number of seconds >= 0"),
    ("world_size", 0, "an integer >= 1"),
    ("world_size", "two", "an integer >= 1"),
    ("size", -4096, "an integer number of bytes >= 0 and <= 9223372036854775807"),
    ("params", "x", "an object of the algorithm's parameters"),
    ("placement", 5, "in-place or out-of-place"),
    ("collective", None, "a collective's name"),
    ("backend", None, "a backend's name"),
])
def test_a_bad_field_of_a_row_is_refused_naming_file_row_field_and_value(tmp_path, capsys,
                                                                         field, value, allowed):
    rows = _rows("all_reduce", 2)
    rows[2][field] = value
    path = _write(tmp_path, rows)
    with pytest.raises(ArgumentError) as err:
        fitmod.load_rows([path])
    assert str(err.value) == f"{path!r}, row 2: {field}={value!r}; expected {allowed}"
    assert main(["fit", path]) == 2  # one line, no traceback (was LinAlgError, TypeError, ...)
    out = capsys.readouterr().err
    assert out.startswith("ringccl: error: ") and out.count("\n") == 1


@pytest.mark.parametrize("field, value", [("size", 10 ** 30), ("size", 2 ** 63),
                                          ("segment_bytes", 10 ** 30)])
def test_an_absurd_size_is_refused_naming_field_and_row(tmp_path, capsys, field, value):
    rows = _rows("all_reduce", 2)
    rows[3][field] = value
    path = _write(tmp_path, rows)
    with pytest.raises(ArgumentError, match=rf"{path!r}, row 3: {field}={value}; expected an "
                       r"integer number of bytes >= 0 and <= 9223372036854775807"):
        fitmod.load_rows([path])
    assert main(["fit", path]) == 2 and capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("value", [5, "row", None, [1, 2]])
def test_a_row_that_is_not_an_object_is_named_with_its_index(tmp_path, capsys, value):
    rows = _rows("all_reduce", 2)
    rows[4] = value
    path = _write(tmp_path, rows)
    with pytest.raises(ArgumentError) as err:
        fitmod.load_rows([path])
    assert str(err.value).startswith(f"{path!r}, row 4: {value!r} is not a row")
    assert main(["fit", path]) == 2
    err = capsys.readouterr().err
    assert "holds no benchmark rows" not in err and "row 4" in err


@pytest.mark.parametrize("field", ["size", "world_size", "time_s", "algorithm"])
def test_a_missing_field_is_refused_naming_it(tmp_path, field):
    rows = _rows("all_reduce", 2)
    del rows[1][field]
    path = _write(tmp_path, rows)
    with pytest.raises(ArgumentError, match=rf"row 1: no '{field}' field; expected"):
        fitmod.load_rows([path])


def test_a_local_reduce_row_needs_its_reduced_bytes(tmp_path):
    rows = _rows("all_reduce", 2)
    rows[1]["reduced_bytes"] = "2048"
    with pytest.raises(ArgumentError, match=r"row 1: reduced_bytes='2048'; expected an integer"):
        fitmod.load_rows([_write(tmp_path, rows)])


EPSILON = 50e-6


def _shm_rows(algorithm, n=2):
    """Shared-memory rows of a known α, β, γ and ε (per call), with their local-reduce rows."""
    rows = _rows("all_reduce", n, algorithm=algorithm, calibrate=algorithm == "ring")
    for r in rows:
        r["transport"] = "shm"
        if r["kind"] == "collective":
            r["time_s"] += EPSILON + fitmod.SHM_COPIES * r["size"] * BETA
    return rows


def test_a_training_sweep_of_one_step_count_cannot_tell_alpha_from_epsilon():
    # ring at 2 ranks: 2 steps at every size; direct: 1 step
    rows = _shm_rows("ring") + _shm_rows("direct")
    held = fitmod.held_out(rows, train="all_reduce:ring")
    assert held.method == "none" and held.sweeps == {}  # was: α = α + ε/2, direct mispredicted
    assert held.reason.startswith("the training sweep ring all_reduce, 2 ranks: every row takes "
                                  "2 steps per call, so α (per step) and ε (per call) cannot be "
                                  "told apart")
    assert "direct all_reduce, 2 ranks" in held.reason and "--train sizes" in held.reason
    # every sweep's even sizes: two step counts, the truth, and a check
    sizes = fitmod.held_out(rows, train="sizes")
    assert sizes.fit.alpha == pytest.approx(ALPHA, rel=1e-6)
    assert sizes.fit.epsilon == pytest.approx(EPSILON, rel=1e-6)
    assert sizes.median_error() == pytest.approx(0, abs=1e-9)
    # the same step count in every sweep: nothing to mispredict, the check is made
    assert fitmod.held_out(_shm_rows("ring") + _shm_rows("halving_doubling"),
                           train="all_reduce:ring").method == "sweep"


def test_the_epsilon_note_asks_for_what_would_pin_it():
    f = fitmod.fit_rows(_shm_rows("ring"))  # local-reduce rows there, one step count
    (note,) = [n for n in f.notes if n.startswith("epsilon held at 0")]
    assert "local-reduce" not in note and "other step counts" in note
    g = fitmod.fit_rows(_rows("all_reduce", 2, calibrate=False) + _rows("all_reduce", 4,
                                                                        calibrate=False))
    assert any("gamma held at 0" in n and "local-reduce" in n for n in g.notes)


def test_cli_fit_refuses_flags_bench_rows_leave_without_effect(tmp_path, capsys):
    path = _write(tmp_path, _rows("all_reduce", 2))
    for argv, message in (
            (["--sizes", "1MiB"], "--sizes has no effect without --predict"),
            (["-N", "8", "-a", "ring"], "-N, -a have no effect without --predict"),
            (["--program", "all_reduce_perf"], "--program all_reduce_perf: has no effect "
             "without nccl-tests logs"),
            (["--machine", "dgx-h100"], "--machine dgx-h100: has no effect")):
        assert main(["fit", path, *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ringccl: error: {message}") and err.count("\n") == 1
