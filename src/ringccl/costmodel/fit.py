"""Fit α, β, γ to measured times and predict what was not measured (``ringccl fit``).

The model is the one every registered algorithm states in closed form,
``Algorithm.time_for(world_size, nbytes, alpha, beta, gamma, **params)`` (flat network,
Hockney's α-β plus a reduction term; Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005,
section 2): linear in (α, β, γ), so each benchmark row gives one linear equation

    t_measured ≈ α·T(n, M, 1, 0, 0) + β·T(n, M, 0, 1, 0) + γ·T(n, M, 0, 0, 1)

whatever the algorithm, read off the registry (no per-algorithm code here). For a single
collective the β and γ columns are often proportional (ring all_reduce: 2(N-1)/N·M and
(N-1)/N·M), so γ is pinned by the ``local-reduce`` rows of ``ringccl bench``: the backend's
reduction of M/N bytes alone, ``t ≈ δ + γ·bytes``, with δ a per-call overhead that appears in no
other row.

Least squares on relative errors (each equation divided by its measured time), so a 4 KiB row
(tens of µs) weighs as much as a 64 MiB row (tens of ms) — ordinary least squares would fit the
largest sizes only. Parameters are constrained to be >= 0 (exact non-negative least squares by
trying every subset of free parameters, there are at most four). Reported: the estimates, their
standard errors and 95% confidence intervals from the weighted residual variance (Student t),
R² on log times and on times, and the relative residual of every row.

Held-out check: fit on one sweep (one collective × algorithm × world size), predict every other
sweep's measured times and print the relative error per size. With a single sweep the check
fits on every other size and predicts the sizes in between.

Shared memory (rows with ``"transport": "shm"``, ``ringccl bench`` on one host): a "send"
moves nothing, the receiver reads the peer's bytes where they lie, so β is the seconds per byte
read from a peer's slot and copied or reduced (memory bandwidth), α the synchronisation of one
step (a counter published and seen), γ the reduction. Every call also copies the caller's
buffer into the segment and back (:data:`SHM_COPIES` passes over the row's size, whatever the
algorithm): that is added to the β column of those rows and to :func:`predict` for a fit of
shm rows (``Fit.transport``). Those rows also get a per-call term ε (the frontend's and the
engine's fixed cost and the call entry, tens of µs in Python, which would otherwise be read as
α and move the one-shot/two-shot crossover: one-shot has 1 step, two-shot 2). Both are the same
for every algorithm, so the crossovers are those of the closed forms with the fitted α, β, γ.

nccl-tests output (``all_reduce_perf`` and the others, as printed) is read by the same loader
(:func:`load_rows`, through :mod:`ringccl.bench.nccl_tests`); NCCL runs its own algorithms,
so those rows carry their linear terms from NCCL's model instead of a registry closed form
(``row["nccl_terms"]``: known seconds and the α and β coefficients of one link level, set by
:mod:`.nccl_fit`, which fits the levels one after the other through :func:`fit_rows`).

One message size (at one world size) cannot separate α from β: steps and bytes then grow
together, any split of the time between them fits exactly, and the fit would report β = 0.
:func:`fit_rows` refuses such rows (ArgumentError saying so); a held-out check whose training
rows are such (a training sweep of one size, a single sweep of fewer than 3 sizes) is not made,
and :class:`HeldOut` says why (``method="none"``, ``reason``) instead of a nan error. The same
for a training sweep of shm rows of one step count (ring at one world size), which cannot tell α
from ε: a fit on it would mispredict the sweeps of other step counts (``train="sizes"`` sees
several).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..algorithms import REGISTRY, get_algorithm
from ..bench.nccl_tests import SOURCE
from ..bench.spec import BUILTIN, LOCAL_REDUCE
from ..errors import ArgumentError
from ..units import format_size
from .bench_rows import load_rows

__all__ = ["Fit", "HeldOut", "load_rows", "sweep_key", "fit_rows", "held_out", "predict",
           "PARAMS", "SHM_COPIES", "copy_bytes", "per_call", "row_time", "offset",
           "alpha_beta_problem"]

PARAMS = ("alpha", "beta", "gamma", "delta")
_UNITS = ("s/step", "s/byte", "s/byte reduced", "s/call")
#: the fit's columns: PARAMS, then ε (s per collective call over shared memory, shm rows only)
_COLUMNS = PARAMS + ("epsilon",)


def _closed_form(row: dict):
    """``time(n, nbytes, alpha, beta, gamma)`` of the row's algorithm and parameters, or None."""
    algo = REGISTRY.get((row.get("collective"), row.get("algorithm")))
    if algo is None or algo.time is None:
        return None
    params = row.get("params") or {}
    return lambda n, m, a, b, g: algo.time_for(n, m, a, b, g, **params)


def usable(row: dict, placement: str | None = "in-place") -> bool:
    """True for rows the model explains: a registered algorithm with a closed form (or a
    local-reduce calibration row), of ``placement`` (None: any), with a positive time, reducing
    in the row's own dtype (no ``accumulate_dtype``)."""
    if not row.get("time_s") or row["time_s"] <= 0:
        return False
    if "nccl_terms" in row:  # nccl-tests: NCCL's model, a result nccl-tests found correct
        return (not row.get("wrong")) and (placement is None or row.get("placement") == placement)
    if row.get("kind") == LOCAL_REDUCE:
        return bool(row.get("reduced_bytes"))
    if row.get("algorithm") == BUILTIN or _closed_form(row) is None:
        return False
    if row.get("accumulate_dtype"):  # its messages are wider than the row's size says
        return False
    return placement is None or row.get("placement") == placement


#: passes over the buffer a shared-memory call adds to its schedule's bytes: the copy into
#: the segment and the copy back (module doc)
SHM_COPIES = 2


def copy_bytes(transport: str | None, nbytes: float) -> float:
    """Bytes a call of ``nbytes`` (the row's size) copies besides its schedule's transfers:
    ``SHM_COPIES * nbytes`` over shared memory, 0 over point-to-point."""
    return SHM_COPIES * float(nbytes) if transport == "shm" else 0.0


def features(row: dict) -> np.ndarray:
    """The row's coefficients of (α, β, γ, δ): t ≈ offset + features · params."""
    if "nccl_terms" in row:
        terms = row["nccl_terms"]
        return np.array([terms["alpha"], terms["beta"], 0.0, 0.0])
    if row.get("kind") == LOCAL_REDUCE:
        return np.array([0.0, 0.0, float(row["reduced_bytes"]), 1.0])
    time = _closed_form(row)
    n, m = row["world_size"], float(row["size"])
    return np.array([time(n, m, 1.0, 0.0, 0.0),
                     time(n, m, 0.0, 1.0, 0.0) + copy_bytes(row.get("transport"), m),
                     time(n, m, 0.0, 0.0, 1.0), 0.0])


def row_seconds(row: dict) -> float:
    """The row's measured seconds."""
    return float(row["time_s"])


def offset(row: dict) -> float:
    """Seconds of the row the fitted parameters do not touch (an nccl-tests row's other link
    level and fixed latencies; 0 for ringccl's rows)."""
    return float(row["nccl_terms"]["known"]) if "nccl_terms" in row else 0.0


def per_call(row: dict) -> float:
    """The row's coefficient of ε: 1 for a collective row over shared memory or of
    nccl-tests (a fixed cost per call the model's latencies leave out), else 0."""
    if "nccl_terms" in row:
        return float(row["nccl_terms"].get("epsilon", 1.0))
    return 1.0 if row.get("transport") == "shm" and row.get("kind") != LOCAL_REDUCE else 0.0


def row_time(fit: "Fit", row: dict) -> float:
    """The fit's predicted seconds for a measured row: features · params, plus ε for a
    shared-memory row."""
    return float(features(row) @ fit.params) + fit.epsilon * per_call(row) + offset(row)


def sweep_key(row: dict) -> tuple:
    """(collective, algorithm, world_size, segment_bytes): rows of one measured sweep."""
    return (row["collective"], row["algorithm"], row["world_size"], row.get("segment_bytes"))


def sweep_label(key: tuple) -> str:
    collective, algorithm, n, seg = key
    extra = "" if seg is None else f", seg={'off' if seg == 0 else format_size(seg, 0)}"
    return f"{algorithm} {collective}, {n} ranks{extra}"


@dataclass
class Fit:
    """A fitted (α, β, γ) for one backend.

    Attributes:
        backend: the rows' backend.
        params: (4,) estimates of alpha [s/step], beta [s/byte], gamma [s/byte reduced] and
            delta [s per local-reduce call, a nuisance parameter]; 0 where not free.
        stderr: (4,) standard errors (nan where the parameter was not free).
        ci95: (4, 2) 95% confidence intervals.
        free: which parameters were estimated (the others are held at 0: not identifiable
            from the rows, or the unconstrained estimate was negative).
        r2_log, r2: coefficient of determination on log times and on times.
        rows, predicted: the rows used and the model's times for them.
        notes: why a parameter is fixed, in words.
        transport: the transport every collective row ran on ("shm", "p2p"), None when the
            rows do not say or differ; "shm" adds the copy in and out and ε to
            :func:`predict`.
        epsilon, epsilon_stderr, epsilon_ci95: s per collective call over shared memory (the
            call's fixed cost, the same for every algorithm; only shm rows have it; 0 and nan
            otherwise), its standard error and 95% interval. "epsilon" is in ``free`` when
            estimated.
    """

    backend: str
    params: np.ndarray
    stderr: np.ndarray
    ci95: np.ndarray
    free: tuple
    r2_log: float
    r2: float
    rows: list = field(repr=False, default_factory=list)
    predicted: np.ndarray = field(repr=False, default=None)
    notes: list = field(default_factory=list)
    transport: str | None = None
    epsilon: float = 0.0
    epsilon_stderr: float = math.nan
    epsilon_ci95: tuple = (math.nan, math.nan)

    @property
    def alpha(self) -> float:
        return float(self.params[0])

    @property
    def beta(self) -> float:
        return float(self.params[1])

    @property
    def gamma(self) -> float:
        return float(self.params[2])

    def time(self, collective: str, algorithm: str, world_size: int, nbytes: float) -> float:
        """Predicted seconds through the algorithm's closed form.

        Raises:
            ArgumentError: unknown algorithm or one without a closed form.
        """
        return predict(self, collective, algorithm, world_size, nbytes)

    def to_json(self) -> dict:
        params = {name: {"value": float(self.params[i]), "unit": _UNITS[i],
                         "stderr": _finite(self.stderr[i]),
                         "ci95": [_finite(v) for v in self.ci95[i]], "free": name in self.free}
                  for i, name in enumerate(PARAMS)}
        if self.transport == "shm" or "epsilon" in self.free:
            params["epsilon"] = {"value": self.epsilon, "unit": "s/call",
                                 "stderr": _finite(self.epsilon_stderr),
                                 "ci95": [_finite(v) for v in self.epsilon_ci95],
                                 "free": "epsilon" in self.free}
        return {"backend": self.backend, "transport": self.transport, "rows": len(self.rows),
                "r2_log": self.r2_log, "r2": self.r2, "notes": self.notes, "params": params,
                "residuals": [{"sweep": sweep_label(sweep_key(r)) if r.get("kind") !=
                               LOCAL_REDUCE else LOCAL_REDUCE, "size": r["size"],
                               "measured_s": r["time_s"], "predicted_s": float(p),
                               "relative_error": float(p / r["time_s"] - 1)}
                              for r, p in zip(self.rows, self.predicted)]}


def _finite(v: float):
    return float(v) if math.isfinite(v) else None


#: two-sided 95% Student t quantiles for 1…30 degrees of freedom (any statistics table)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def _t_quantile(dof: int) -> float:
    """Two-sided 95% Student t quantile (scipy when installed, else a table and, above 30
    degrees of freedom, the Cornish-Fisher expansion around the normal quantile)."""
    if dof <= 0:
        return math.nan
    try:
        from scipy.stats import t
        return float(t.ppf(0.975, dof))
    except ImportError:
        if dof <= len(_T975):
            return _T975[dof - 1]
        z = 1.959963984540054
        return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)


def fit_rows(rows: Sequence[dict], backend: str = "", placement: str | None = "in-place") -> Fit:
    """Fit (α, β, γ) to ``rows`` (see the module doc for the method).

    Args:
        rows: benchmark rows (``ringccl bench --json``); rows the model cannot explain (builtin,
            algorithms without a closed form, other placements) are skipped.
        backend: label for the result.
        placement: use rows of this placement only (in-place is ringccl's natural mode; the
            out-of-place rows add a copy the model does not have); None: all.

    Raises:
        ArgumentError: fewer usable rows than free parameters, or rows that cannot separate α
            from β (every row of one message size and world size: α·steps and β·bytes then
            grow together, and any split of the time between them fits exactly).
    """
    rows = [r for r in rows if usable(r, placement)]
    if not rows:
        raise ArgumentError("no benchmark rows the model can explain: need rows of registered "
                            "algorithms (not only builtin) from `ringccl bench --json`")
    problem = alpha_beta_problem(rows)
    if problem:
        raise ArgumentError(problem)
    X = np.column_stack([np.stack([features(r) for r in rows]), [per_call(r) for r in rows]])
    t, known = (np.array([f(r) for r in rows], dtype=float) for f in (row_seconds, offset))
    Xw, tw = X / t[:, None], 1 - known / t  # relative errors: divide each equation by t
    present = [j for j in range(len(_COLUMNS)) if np.any(X[:, j] != 0)]
    best = _best_subset(Xw, tw, present)
    if best is None:
        raise ArgumentError(f"{len(rows)} usable rows cannot determine alpha, beta, gamma")
    rss, free, theta = best
    params = np.zeros(len(_COLUMNS))
    params[list(free)] = theta
    notes = _held_at_zero(Xw, present, free)
    stderr, ci = _intervals(Xw[:, free], free, theta, rss)
    predicted = X @ params + known
    ok = predicted > 0
    logt, logp = np.log(t[ok]), np.log(predicted[ok])
    r2_log = 1 - np.sum((logp - logt) ** 2) / max(np.sum((logt - logt.mean()) ** 2), 1e-300)
    r2 = 1 - np.sum((predicted - t) ** 2) / max(np.sum((t - t.mean()) ** 2), 1e-300)
    transports = {r.get("transport") for r in rows if r.get("kind") != LOCAL_REDUCE}
    return Fit(backend, params[:4], stderr[:4], ci[:4], tuple(_COLUMNS[j] for j in free),
               float(r2_log), float(r2), rows, predicted, notes,
               transports.pop() if len(transports) == 1 else None, float(params[4]),
               float(stderr[4]), (float(ci[4, 0]), float(ci[4, 1])))


def _best_subset(Xw: np.ndarray, tw: np.ndarray, present: list) -> tuple | None:
    """Exact non-negative least squares of ``Xw @ theta = tw``: (rss, free columns, theta) of
    the best feasible subset of the ``present`` columns, or None when no subset is feasible."""
    n = Xw.shape[0]
    best = None
    for k in range(len(present), 0, -1):
        for subset in itertools.combinations(present, k):
            A = Xw[:, subset]
            if n < k or np.linalg.matrix_rank(A, tol=1e-9 * np.abs(A).max()) < k:
                continue
            theta, *_ = np.linalg.lstsq(A, tw, rcond=None)
            if np.any(theta < 0):
                continue
            rss = float(np.sum((A @ theta - tw) ** 2))
            # ties (collinear columns fit equally well): keep the larger, earlier subset
            if best is None or rss < best[0] - 1e-10 * n:
                best = (rss, subset, theta)
    return best


def _held_at_zero(Xw: np.ndarray, present: list, free: tuple) -> list[str]:
    """A note for each parameter the fit held at 0, saying why (and what rows would pin it:
    local-reduce rows only where there are none, since δ's column is present with them)."""
    notes = []
    calibrated = 3 in present
    rank = np.linalg.matrix_rank(Xw[:, present], tol=1e-9 * np.abs(Xw).max())
    for j in present:
        if j in free:
            continue
        others = [i for i in present if i != j]
        if np.linalg.matrix_rank(Xw[:, others], tol=1e-9 * np.abs(Xw).max()) == rank:
            notes.append(f"{_COLUMNS[j]} held at 0: not identifiable from these rows (its column "
                         f"is a combination of the others'; {_remedy(_COLUMNS[j], calibrated)})")
        else:
            notes.append(f"{_COLUMNS[j]} held at 0: its unconstrained estimate was negative")
    if 2 not in present:
        notes.append("gamma held at 0: no reduction in these rows (add local-reduce rows or a "
                     "reducing collective)")
    return notes


def _remedy(column: str, calibrated: bool) -> str:
    """What rows would make ``column`` identifiable."""
    if column == "epsilon":  # per call, α per step: one step count cannot tell them apart
        return "add sweeps of algorithms with other step counts, or another world size"
    if column == "delta":
        return "add local-reduce rows of other sizes"
    if column == "gamma" and not calibrated:
        return "add local-reduce rows or sweeps of other collectives"
    return "add sweeps of other collectives, sizes or world sizes"


def _intervals(A: np.ndarray, free: tuple, theta: np.ndarray, rss: float) -> tuple:
    """Standard errors and 95% t intervals of the free parameters (``A``: their weighted
    columns); NaN for the parameters held at 0, and for all when no degree of freedom is left."""
    stderr = np.full(len(_COLUMNS), math.nan)
    ci = np.full((len(_COLUMNS), 2), math.nan)
    dof = A.shape[0] - len(free)
    if dof > 0:
        cov = rss / dof * np.linalg.pinv(A.T @ A)
        se = np.sqrt(np.clip(np.diag(cov), 0, None))
        q = _t_quantile(dof)
        stderr[list(free)] = se
        ci[list(free), 0] = theta - q * se
        ci[list(free), 1] = theta + q * se
    return stderr, ci


def alpha_beta_problem(rows: Sequence[dict]) -> str | None:
    """Why ``rows`` (usable ones) cannot separate α from β, or None when they can: their α and
    β columns are proportional (one size at one world size), so a fit would put the whole time
    on one of them (β = 0, or α = 0) and every prediction at another size would be wrong by as
    much as that split was."""
    coll = [r for r in rows if r.get("kind") != LOCAL_REDUCE]
    if not coll:
        return None
    ab = np.stack([features(r)[:2] / r["time_s"] for r in coll])
    if not (np.any(ab[:, 0] != 0) and np.any(ab[:, 1] != 0)):
        return None  # one of the two is absent (world size 1): nothing to separate
    if np.linalg.matrix_rank(ab, tol=1e-9 * np.abs(ab).max()) >= 2:
        return None
    sizes = sorted({r["size"] for r in coll})
    worlds = sorted({r["world_size"] for r in coll})
    which = (f"every row is of one size ({format_size(sizes[0])})" if len(sizes) == 1
             else f"the {len(sizes)} sizes give proportional step and byte counts")
    how = ("all_reduce_perf -b 8 -e 8G -f 2" if any(r.get("source") == SOURCE for r in coll)
           else "ringccl bench -b 4KiB -e 64MiB")
    more = "at least two sizes" if len(sizes) == 1 else "sizes from small to large"
    return (f"these {len(coll)} rows cannot separate α (per step) from β (per byte): {which} "
            f"at world size {', '.join(map(str, worlds))}; measure {more} (e.g. {how})")


def _alpha_epsilon_problem(train: list, others: dict) -> str | None:
    """Why one sweep's rows cannot tell α (per step) from ε (per call) while other sweeps need
    them apart, or None: every training row takes the same steps per call, so any split of
    α·steps + ε fits it, and a sweep of another step count is mispredicted by as much as the
    fit's split is wrong."""
    def steps(r):
        return features(r)[0] / per_call(r) if per_call(r) else None
    ratios = [steps(r) for r in train]
    if None in ratios or max(ratios) - min(ratios) > 1e-9 * max(ratios):
        return None
    k = ratios[0]
    differ = [sweep_label(key) for key, rows in others.items()
              if any(steps(r) is None or abs(steps(r) - k) > 1e-9 * k for r in rows)]
    if not differ:
        return None
    return (f"every row takes {k:g} steps per call, so α (per step) and ε (per call) cannot be "
            f"told apart: a fit on it puts ε into α and mispredicts {', '.join(differ)} (other "
            "step counts)")


def predict(fit: Fit, collective: str, algorithm: str, world_size: int, nbytes: float) -> float:
    """Seconds for ``algorithm`` on ``world_size`` ranks and ``nbytes`` (nccl-tests' size)
    through its closed form ``Algorithm.time`` with the fitted α, β, γ (plus, for a fit of
    shared-memory rows, β times the copy in and out: :func:`copy_bytes`).

    Raises:
        ArgumentError: unknown algorithm, or one registered without a closed form.
    """
    algo = get_algorithm(collective, algorithm)
    if algo.time is None:
        raise ArgumentError(f"{algorithm} {collective} has no closed-form time to predict with")
    extra = fit.beta * copy_bytes(fit.transport, nbytes) + (
        fit.epsilon if fit.transport == "shm" else 0.0)
    return float(algo.time_for(world_size, float(nbytes), fit.alpha, fit.beta, fit.gamma)
                 + extra)


@dataclass
class HeldOut:
    """Predictions for measured rows the fit did not see.

    Attributes:
        train: label of what the fit used; fit: that fit.
        sweeps: {label: [(size, measured_s, predicted_s, relative_error), ...]}.
        method: "sweep" (fit on one sweep, predict the others), "interleaved" (one sweep:
            fit on every other size, predict the rest), "sizes" (every sweep: fit on every
            other size, predict the rest) or "none" (no check possible: ``reason``
            says why; ``fit`` is then the fit on every row and ``sweeps`` is empty).
        reason: why there is no held-out check ("" when there is one).
    """

    train: str
    fit: Fit
    sweeps: dict
    method: str
    reason: str = ""

    def errors(self, min_size: int = 0) -> list[float]:
        """|relative error| of every held-out row of at least ``min_size`` bytes."""
        return [abs(e) for rows in self.sweeps.values() for (s, _, _, e) in rows
                if s >= min_size]

    def median_error(self, min_size: int = 0) -> float:
        errs = self.errors(min_size)
        return float(np.median(errs)) if errs else math.nan


def held_out(rows: Sequence[dict], train: str | None = None, backend: str = "",
             placement: str | None = "in-place") -> HeldOut:
    """Fit on one sweep and predict the others' measured times (see the module doc).

    Args:
        rows: one backend's rows.
        train: ``"collective:algorithm"`` (optionally ``:world_size``) of the sweep to fit on;
            default: the sweep with the most rows (first in order on ties). ``"sizes"``: fit
            on every other size of every sweep together, predict the sizes in between
            (``method="sizes"``).
        placement: as :func:`fit_rows`.

    Raises:
        ArgumentError: no usable sweep, or ``train`` matches none.
    """
    data = [r for r in rows if usable(r, placement)]
    calib = [r for r in data if r.get("kind") == LOCAL_REDUCE]
    sweeps: dict[tuple, list[dict]] = {}
    for r in data:
        if r.get("kind") != LOCAL_REDUCE:
            sweeps.setdefault(sweep_key(r), []).append(r)
    if not sweeps:
        raise ArgumentError("no sweep of a registered algorithm to fit on")
    if train == "sizes":
        return _held_out_sizes(sweeps, calib, backend, placement)
    key = _train_key(sweeps, train)
    others = {k: v for k, v in sweeps.items() if k != key}
    problem = alpha_beta_problem(sweeps[key])
    remedy = "pass --train a sweep of at least two sizes"
    if others and not problem:
        problem = _alpha_epsilon_problem(sweeps[key], others)
        remedy = "pass --train sizes (every sweep's even sizes: their step counts differ)"
    if others and problem:
        # the other sweeps may separate what this one cannot: fit on every row, hold nothing
        # out, say why
        return HeldOut(sweep_label(key), fit_rows(data, backend, placement), {}, "none",
                       f"the training sweep {sweep_label(key)}: {problem}; {remedy}")
    if len(sweeps) > 1:
        fit = fit_rows(sweeps[key] + calib, backend, placement)
        tests = {k: v for k, v in sweeps.items() if k != key}
        method, label = "sweep", sweep_label(key)
    elif len({r["size"] for r in sweeps[key]}) < 3:
        # the even sizes alone would be one size, which cannot separate α from β: fit on all
        # (fit_rows refuses a single size) and say why nothing is held out
        fit = fit_rows(sweeps[key] + calib, backend, placement)
        return HeldOut(sweep_label(key), fit, {}, "none",
                       f"one sweep ({sweep_label(key)}) of {len({r['size'] for r in sweeps[key]})}"
                       " sizes: holding sizes out needs at least 3 (fit on every other size, "
                       "predict the rest) or a second sweep")
    else:
        ordered = sorted(sweeps[key], key=lambda r: r["size"])
        fit = fit_rows(ordered[::2] + calib, backend, placement)
        tests = {sweep_label(key) + " (odd sizes)": ordered[1::2]}
        method, label = "interleaved", sweep_label(key) + " (even sizes)"
    return HeldOut(label, fit, _predictions(fit, tests), method)


def _held_out_sizes(sweeps: dict, calib: list, backend: str, placement: str | None) -> HeldOut:
    """``held_out(train="sizes")``: every sweep at once, on every other size: α, β, γ (and ε)
    from all algorithms, the sizes in between predicted (the check for a link class: its
    crossovers lie there)."""
    sizes = sorted({r["size"] for v in sweeps.values() for r in v})
    if len(sizes) < 3:
        raise ArgumentError(f"train='sizes' needs at least 3 sizes, these rows have "
                            f"{len(sizes)}")
    even = set(sizes[::2])
    fit = fit_rows([r for v in sweeps.values() for r in v if r["size"] in even] + calib,
                   backend, placement)
    tests = {sweep_label(k) + " (odd sizes)": [r for r in v if r["size"] not in even]
             for k, v in sweeps.items()}
    return HeldOut("every sweep's even sizes", fit, _predictions(fit, tests), "sizes")


def _train_key(sweeps: dict, train: str | None) -> tuple:
    """The sweep ``train`` names (``collective[:algorithm[:world_size]]``, first match), or the
    one with the most rows when it is None."""
    if train is None:
        return max(sweeps, key=lambda k: len(sweeps[k]))
    parts = train.split(":")
    matches = [k for k in sweeps if k[0] == parts[0] and (len(parts) < 2 or k[1] == parts[1])
               and (len(parts) < 3 or str(k[2]) == parts[2])]
    if not matches:
        raise ArgumentError(f"train={train!r} matches no sweep; sweeps: "
                            f"{', '.join(f'{k[0]}:{k[1]}:{k[2]}' for k in sweeps)}")
    return matches[0]


def _predictions(fit: Fit, tests: dict) -> dict:
    """{label: [(size, measured_s, predicted_s, relative_error), ...]} of the ``tests`` rows
    (keys: labels or sweep keys), in size order."""
    out = {}
    for k, test_rows in tests.items():
        name = k if isinstance(k, str) else sweep_label(k)
        out[name] = []
        for r in sorted(test_rows, key=lambda r: r["size"]):
            p = row_time(fit, r)
            out[name].append((r["size"], r["time_s"], p, p / r["time_s"] - 1))
    return out


def by_backend(rows: Sequence[dict]) -> dict[str, list[dict]]:
    """Rows grouped by their ``backend`` field and, where a row says so, the ``transport``
    ringccl ran on (``"mpi/shm"``: ringccl.mpi over shared memory, MPI's own rows under
    ``"mpi"``), in order of appearance. A backend's local-reduce rows (the γ calibration) and
    builtin rows (the backend's own collective, which the fit does not use) join every
    transport group of that backend."""
    out: dict[str, list[dict]] = {}
    calibration: dict[str, list[dict]] = {}
    for r in rows:
        backend = str(r.get("backend", ""))
        if r.get("kind") == LOCAL_REDUCE or r.get("algorithm") == BUILTIN:
            calibration.setdefault(backend, []).append(r)
            continue
        key = f"{backend}/{r['transport']}" if r.get("transport") else backend
        out.setdefault(key, []).append(r)
    for backend, cal in calibration.items():
        keys = [k for k in out if k == backend or k.startswith(backend + "/")] or [backend]
        for k in keys:
            out.setdefault(k, []).extend(cal)
    return out
