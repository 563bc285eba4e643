"""Fit NCCL's network, one link level at a time, to nccl-tests logs; the profile it writes.

``ringccl fit`` reads nccl-tests output (:mod:`ringccl.bench.nccl_tests`) through the same
loader and least squares as ringccl's own rows (:func:`.fit.load_rows`, :func:`.fit.fit_rows`).
What differs is the model: NCCL picks its own algorithm and protocol per size
(:func:`.nccl.price`), so a row's time is linear in a level's (α, β = 1/bandwidth) only once
that choice is fixed. The fit therefore alternates: price every row on the current machine (the
choice, and the row's time as ``known + a·α + b·β + ε`` of the level being fitted:
:class:`.nccl.Terms`), fit (α, β, ε) by :func:`.fit.fit_rows` (relative errors, parameters
>= 0; ε is a per-call cost NCCL's tuning leaves out), re-price with the new values, until the
choices stop changing (at most :data:`MAX_ROUNDS` rounds; the round whose re-priced times fit
best is kept). A level bound by the other level at some choice has no β column there, however
slow its rows: the rounds therefore start from the machine's bandwidth, from half of it, and
from it scaled by how much slower than the machine the logs' largest sizes run
(:func:`_implied_scale`), where the level bounds the sizes it can bound. Point-to-point logs
(``alltoall_perf``, ``sendrecv_perf``) then fit the level's per-message post cost the same way,
with its bandwidth and ε from the collectives' logs when there are any.

What the rows do not determine (:func:`_determined`: a parameter not estimated, or not told
from 0 by a t test on its 95% interval, Student t as :func:`.fit.fit_rows` computes it) is held
at the machine's value, and the others fitted again with it there (:func:`_fit_holding`);
:attr:`LevelFit.held` lists it, and ``ringccl fit`` says that the predictions it bounds rest
on the preset rather than on the logs.

Levels: single-node logs fit ``intra`` (a GPU's NVLink bandwidth and hop latency), multi-node
logs fit ``inter`` (one NIC's bandwidth and the network hop), with ``intra`` held at its fitted
(or preset) value. NCCL's graph takes a node's rails together (:func:`.nccl.price`: the
network's bandwidth is rails × a NIC's), so a collective's log determines the node's
bandwidth, reported with the NIC's (:attr:`LevelFit.bandwidth_per_node`); the preset's NIC
count (or ``--nics-per-node``) splits it. What a log cannot show (GPU generation, NICs per
node, NVLS) comes from the machine preset its device names (:func:`.nccl.machine_for_device`)
or the caller's.

Held-out check (:func:`held_out_network`): every log's sizes in order, the even-numbered ones
fit (all levels, as above), the odd-numbered ones predicted; the relative errors are reported. A
log of fewer than 3 sizes is fitted whole and not held out (the check says why). The fit and the
check use the same rows (:func:`_fittable`).

The profile (:meth:`NetworkFit.profile`) is JSON: the fitted :class:`.nccl.NcclMachine`, per
level the fitted α and bandwidth, their fit and held-out error; :func:`load_network_profile`
reads it back as a machine, :func:`cluster_fields` as the planner's cluster fields.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..bench.nccl_tests import SOURCE, looks_like_nccl_tests
from .. import units
from ..args import not_text
from ..errors import ArgumentError
from .fit import Fit, alpha_beta_problem, fit_rows
from .nccl import NcclCost, NcclMachine, machine_for_device, nccl_machine, parameter, price
from .nccl_machine import machine_from_json

__all__ = ["LevelFit", "NetworkFit", "NetworkHeldOut", "fit_network", "held_out_network",
           "predict_row", "nccl_tests_rows", "level_of", "load_network_profile",
           "network_profile_levels", "cluster_fields", "PROFILE_FORMAT", "MAX_ROUNDS",
           "read_fitted_json"]

PROFILE_FORMAT = "ringccl-network-profile"
#: rounds of (choose, fit) before the best round is kept
MAX_ROUNDS = 8
_ATTR = {"intra": ("intra_alpha", "intra_bandwidth"), "inter": ("inter_alpha", "inter_bandwidth")}


def nccl_tests_rows(rows: Sequence[dict]) -> list[dict]:
    """The rows read from nccl-tests output."""
    return [r for r in rows if r.get("source") == SOURCE]


def level_of(row: dict) -> str:
    """"intra" for a single-node log's row, "inter" for a multi-node one's."""
    return "intra" if row["nodes"] == 1 else "inter"


def _restriction(value):
    """NCCL_ALGO / NCCL_PROTO as a list of names, as :func:`~ringccl.costmodel.nccl.price`
    reads them (a first name starting with ^ excludes the list), or None (all)."""
    if not value:
        return None
    return [v.strip() for v in value.split(",") if v.strip()] or None


def predict_row(machine: NcclMachine, row: dict) -> NcclCost:
    """NCCL's choice and time for an nccl-tests row on ``machine`` (its NCCL_ALGO and
    NCCL_PROTO, when the log shows them, restrict the choice)."""
    algos = _restriction(row.get("nccl_algo"))
    if algos is not None and not algos[0].startswith("^"):
        algos = algos + ["p2p"]   # all_to_all and send/recv run as sends whatever NCCL_ALGO
    return price(row["collective"], row["size"], row["ranks_per_node"], row["nodes"], machine,
                 algorithms=algos, protocols=_restriction(row.get("nccl_proto")))


#: nccl-tests programs whose time is point-to-point messages (the others: NCCL's algorithms)
_P2P = ("all_to_all", "send_recv")


def _terms_for(machine: NcclMachine, row: dict, slots: dict) -> dict:
    """The row's time as known + alpha·(slots["alpha"]) + beta·(slots["beta"]) +
    epsilon·(slots["epsilon"]): the parameters in ``slots`` free, every other one at its
    value on ``machine`` (a slot of None: that column is absent)."""
    free = [v for v in slots.values() if v]
    known, coef = predict_row(machine, row).terms.split(machine, free)
    return {"known": known, **{k: (coef[v] if v else 0.0) for k, v in slots.items()}}


@dataclass
class LevelFit:
    """(α, bandwidth) of one link level fitted to nccl-tests rows.

    Attributes:
        level: "intra" or "inter".
        alpha, bandwidth: the fitted values (s per ring Simple hop; bytes/s per GPU for intra,
            per NIC for inter); the machine's where the rows cannot determine them.
        prior_alpha, prior_bandwidth: the machine's values before the fit.
        fit: the last round's :class:`.fit.Fit` (R², intervals, notes) of the linear model.
        rows: the rows used; predicted: their re-priced seconds; choices: NCCL's
            "algorithm/protocol" per row.
        stages: fits run (the hop, then the per-message post); notes: what was held and why.
        message, epsilon: the fitted per-message post and per-call seconds.
        held: what the rows do not determine and the fit kept at the machine's value
            ("alpha", "bandwidth", "message"): predictions that depend on it rest on the
            preset, not on the logs.
        nics: NICs per node (inter level; 0 for intra): a log shows the node's bandwidth,
            ``nics`` × the NIC's (:attr:`bandwidth_per_node`); the preset's NIC count
            splits it (``--nics-per-node`` another).
    """

    level: str
    alpha: float
    bandwidth: float
    prior_alpha: float
    prior_bandwidth: float
    fit: Fit = field(repr=False)
    rows: list = field(repr=False, default_factory=list)
    predicted: list = field(repr=False, default_factory=list)
    choices: list = field(repr=False, default_factory=list)
    stages: int = 0
    notes: list = field(default_factory=list)
    message: float = 0.0
    epsilon: float = 0.0
    held: tuple = ()
    nics: int = 0

    @property
    def bandwidth_per_node(self) -> float | None:
        """The inter level's bandwidth out of one node (bytes/s: ``nics`` × a NIC's), what
        a collective's rows determine (NCCL's graph takes the node's rails together:
        :func:`.nccl.price`); None for intra."""
        return self.nics * self.bandwidth if self.nics else None

    def relative_errors(self) -> np.ndarray:
        return np.array([p / r["time_s"] - 1 for r, p in zip(self.rows, self.predicted)])

    def to_json(self) -> dict:
        err = np.abs(self.relative_errors())
        return {"alpha_s": self.alpha, "bandwidth_Bps": self.bandwidth,
                "message_s": self.message, "epsilon_s": self.epsilon,
                "prior_alpha_s": self.prior_alpha, "prior_bandwidth_Bps": self.prior_bandwidth,
                "bandwidth_per_node_Bps": self.bandwidth_per_node, "nics_per_node":
                self.nics or None, "held_at_preset": list(self.held),
                "rows": len(self.rows), "stages": self.stages, "notes": self.notes,
                "median_abs_error": float(np.median(err)) if err.size else None,
                "logs": sorted({r.get("file", "") for r in self.rows}),
                "fit": self.fit.to_json()["params"]}


#: where the rounds start, as (alpha, bandwidth) multiples of the machine's: its own values,
#: and halves (a level bound by the other level in the first round would otherwise never be
#: fitted, its β having no column; a choice of algorithms that is consistent with wrong values
#: would otherwise be kept); the best end wins
_STARTS = ((1.0, 1.0), (1.0, 0.5), (0.5, 1.0), (0.5, 0.5))


def _slots(level: str, stage: str, bandwidth: bool) -> dict:
    """Which machine parameter each of the fit's columns stands for in one stage: ``hop``
    (alpha, bandwidth, ε of the level) or ``message`` (the per-message post; the bandwidth and
    ε too when no collective row fitted them)."""
    alpha = f"{level}_alpha" if stage == "hop" else f"{level}_message"
    return {"alpha": alpha, "beta": f"{level}_beta" if bandwidth else None,
            "epsilon": f"{level}_epsilon" if bandwidth else None}


def _set(m: NcclMachine, name: str, value: float) -> NcclMachine:
    if name.endswith("_beta"):
        return m.replace(**{name[:-5] + "_bandwidth": 1.0 / value})
    return m.replace(**{name: value})


#: the fit's columns a level's parameters stand in (ε may rest at 0: no per-call cost)
_HELD_COLUMNS = ("alpha", "beta")


def _determined(f: Fit, column: str) -> bool:
    """True when the fit determines ``column``: estimated (its column present and not a
    combination of the others'), > 0, and its 95% interval above 0 (a t test: the rows tell
    it from 0; with no degree of freedom left there is no interval and the estimate stands)."""
    i = ("alpha", "beta").index(column)
    value, low = float(f.params[i]), float(f.ci95[i][0])
    return column in f.free and value > 0 and not low <= 0


def _fit_holding(rows: list[dict], m: NcclMachine, slots: dict, prior: NcclMachine):
    """One fit of the rows priced on ``m``: (machine, fit, notes, held columns). A parameter
    the rows do not determine (:func:`_determined`) is held at ``prior``'s value and the fit
    run again without it, so that the others are fitted with it at the value it keeps (not at
    the 0 the fit held it at).

    Raises:
        ArgumentError: as :func:`.fit.fit_rows`, when no parameter is left to fit.
    """
    slots, notes, held, f = dict(slots), [], [], None
    while True:
        annotated = [{**r, "nccl_terms": _terms_for(m, r, slots)} for r in rows]
        try:
            f = fit_rows(annotated, "nccl", placement=None)
        except ArgumentError:
            if f is None:
                raise
            break  # nothing left to fit once the undetermined are held: the last fit stands
        undetermined = [c for c in _HELD_COLUMNS if slots[c] and not _determined(f, c)]
        if not undetermined:
            break
        for column in undetermined:
            name = slots[column]
            m = _set(m, name, parameter(prior, name))
            notes.append(f"{name} kept at the machine's value: these rows do not determine it")
            held.append(column)
            slots[column] = None
        if not any(slots.values()):
            break
    for column, value in (("alpha", f.alpha), ("beta", f.beta), ("epsilon", f.epsilon)):
        if slots.get(column) and (column == "epsilon" or column in f.free):
            m = _set(m, slots[column], value)
    return m, f, notes, held


def _rounds(rows: list[dict], machine: NcclMachine, slots: dict, prior: NcclMachine):
    """Alternate (choose, fit) from ``machine``; the best round as (score, machine, fit,
    costs, choices, rounds, notes, held), or None when no round could fit. A parameter the
    rows do not determine is held at ``prior``'s value (not the start's): :func:`_fit_holding`."""
    m, best, previous = machine, None, None
    for rounds in range(1, MAX_ROUNDS + 1):
        try:
            m, f, notes, held = _fit_holding(rows, m, slots, prior)
        except ArgumentError:
            break  # this choice of algorithms leaves nothing to fit (e.g. α < 0 only)
        costs = [predict_row(m, r) for r in rows]
        score = float(np.sum([(c.seconds / r["time_s"] - 1) ** 2 for c, r in zip(costs, rows)]))
        choices = [f"{c.algorithm}/{c.protocol}" for c in costs]
        if best is None or score < best[0]:
            best = (score, m, f, costs, choices, rounds, notes, held)
        # converged when the choices and what bounds each row's bandwidth stop changing
        signature = [(ch, tuple(k for k, v in c.terms.coefficients.items() if v))
                     for ch, c in zip(choices, costs)]
        if signature == previous:
            break
        previous = signature
    return best


def _implied_scale(rows: list[dict], machine: NcclMachine) -> float:
    """How much slower than ``machine`` the largest size of each log runs, the most of them:
    min over logs of predicted / measured seconds at its largest size (1 when none is
    slower). A start at the level's bandwidth times this lets that level bound the sizes
    whose bandwidth it sets, where the machine's own value leaves them to the other level
    (whose β has no column then, however slow the rows)."""
    largest: dict = {}
    for r in rows:
        key = r.get("file", "")
        if key not in largest or r["size"] > largest[key]["size"]:
            largest[key] = r
    ratios = [predict_row(machine, r).seconds / r["time_s"] for r in largest.values()]
    return min([1.0] + ratios)


def _fit_stage(rows, machine, level, slots):
    starts = _STARTS if slots["beta"] else ((1.0, 1.0), (0.5, 1.0))
    scale = _implied_scale(rows, machine) if slots["beta"] else 1.0
    if scale < min(b for _, b in starts):
        starts = starts + ((1.0, scale),)
    tries = []
    for a, b in starts:
        start = _set(_set(machine, slots["alpha"], a * parameter(machine, slots["alpha"])),
                     f"{level}_beta", parameter(machine, f"{level}_beta") / b)
        tries.append(_rounds(rows, start, slots, machine))
    tries = [t for t in tries if t is not None]
    if not tries:
        # the true cause when the sizes cannot separate α from β (one size): fit_rows' words
        problem = alpha_beta_problem([{**r, "nccl_terms": _terms_for(machine, r, slots)}
                                      for r in rows])
        files = ", ".join(dict.fromkeys(str(r.get("file", "")) for r in rows))
        raise ArgumentError(f"{files}: " + (problem or f"the {len(rows)} {level}-node rows "
                            "cannot be fitted (no choice of NCCL's algorithms leaves "
                            "non-negative parameters)"))
    return min(tries, key=lambda t: t[0])


def _fit_level(rows: list[dict], machine: NcclMachine, level: str) -> tuple[NcclMachine, LevelFit]:
    """The level's hop (alpha, bandwidth, ε) from its collectives' rows, then its
    per-message post from its point-to-point rows (all of them when there is no collective)."""
    a_attr, b_attr = _ATTR[level][:2]
    prior = (getattr(machine, a_attr), getattr(machine, b_attr))
    coll = [r for r in rows if r["collective"] not in _P2P]
    p2p = [r for r in rows if r["collective"] in _P2P]
    m, notes, fits, held = machine, [], [], []
    for stage, part, bandwidth in (("hop", coll, True), ("message", p2p, not coll)):
        if not part:
            continue
        _, m, f, _, _, _, n, columns = _fit_stage(part, m, level,
                                                  _slots(level, stage, bandwidth))
        fits.append(f)
        notes += n
        held += [{"alpha": "alpha" if stage == "hop" else "message", "beta": "bandwidth"}[c]
                 for c in columns]
    costs = [predict_row(m, r) for r in rows]
    notes += _doubts(rows, costs, level, prior[1], getattr(m, b_attr))
    return m, LevelFit(level, getattr(m, a_attr), getattr(m, b_attr), prior[0], prior[1],
                       fits[0], list(rows), [c.seconds for c in costs],
                       [f"{c.algorithm}/{c.protocol}" for c in costs], len(fits), notes,
                       getattr(m, f"{level}_message"), getattr(m, f"{level}_epsilon"),
                       tuple(dict.fromkeys(held)),
                       m.nics_per_node if level == "inter" else 0)


#: a level's fit whose median relative error on its own rows is above this does not describe
#: them; one whose bandwidth is more than :data:`FASTER_THAN` times the machine's is faster
#: than the link it stands for
DOUBTFUL_ERROR = 0.25
FASTER_THAN = 4.0


def _doubts(rows, costs, level: str, prior_bandwidth: float, bandwidth: float) -> list[str]:
    """Notes that a level's fit should not be planned with (its own rows' median error above
    :data:`DOUBTFUL_ERROR`; a bandwidth :data:`FASTER_THAN` times the machine's), saying why."""
    err = float(np.median([abs(c.seconds / r["time_s"] - 1) for c, r in zip(costs, rows)]))
    out = []
    if err > DOUBTFUL_ERROR:
        out.append(f"the fit misses its own {level}-node rows by {100 * err:.1f}% (median): "
                   "their times do not follow alpha + bytes/bandwidth under NCCL's choices "
                   "(e.g. the same time at every size); check the log before planning with "
                   "this profile")
    if bandwidth > FASTER_THAN * prior_bandwidth:
        out.append(f"the fitted {level} bandwidth, {units.format_bandwidth(bandwidth)}, is "
                   f"{bandwidth / prior_bandwidth:.1f}x the machine's "
                   f"{units.format_bandwidth(prior_bandwidth)}: faster than that link can be")
    return out


def _prior(rows: Sequence[dict], machine) -> NcclMachine:
    if isinstance(machine, NcclMachine):
        return machine
    if machine is not None:
        return nccl_machine(machine)
    devices = sorted({r.get("device", "") for r in rows})
    presets = {machine_for_device(d) for d in devices}
    if len(presets) == 1 and None not in presets:
        return nccl_machine(presets.pop())
    raise ArgumentError(f"the logs' devices ({', '.join(devices) or 'none listed'}) name no "
                        "single machine preset; pass one (--machine dgx-h100, dgx-a100, h800, "
                        "dgx-b200)")


@dataclass
class NetworkFit:
    """Every level fitted (:func:`fit_network`): ``machine`` is the prior with the fitted
    values, ``levels`` {level: :class:`LevelFit`}, ``prior`` the machine before."""

    machine: NcclMachine
    prior: NcclMachine
    levels: dict

    def profile(self, held: "NetworkHeldOut | None" = None) -> dict:
        """The profile JSON (module doc)."""
        levels = {k: v.to_json() for k, v in self.levels.items()}
        if held is not None:
            for k, errs in held.by_level().items():
                levels.setdefault(k, {})["held_out_median_abs_error"] = float(
                    np.median(np.abs(errs)))
        return {"format": PROFILE_FORMAT, "version": 1, "source": SOURCE,
                "prior": self.prior.name, "machine": self.machine.to_dict(), "levels": levels}


def _fittable(rows: Sequence[dict], placement: str | None) -> list[dict]:
    """The nccl-tests rows of ``placement`` (None: any) a fit and its held-out check use: a
    result nccl-tests found right (or did not check), more than one rank, a size > 0 and a
    finite time > 0 (the parser leaves out the others with a note:
    :mod:`ringccl.bench.nccl_tests`)."""
    return [r for r in nccl_tests_rows(rows)
            if (placement is None or r["placement"] == placement) and not r.get("wrong")
            and r["world_size"] > 1 and r["size"] > 0 and 0 < r["time_s"] < math.inf]


def fit_network(rows: Sequence[dict], machine=None,
                placement: str | None = "in-place") -> NetworkFit:
    """Fit the levels the nccl-tests rows measure (module doc).

    Args:
        rows: rows of :func:`.fit.load_rows` (only nccl-tests rows are used).
        machine: an :class:`.nccl.NcclMachine`, a preset name, or None: the preset the logs'
            device names.
        placement: "in-place", "out-of-place" or None (both).
    Raises:
        ArgumentError: no nccl-tests rows (of that placement), no preset for the devices,
            rows that cannot separate α from β (as :func:`.fit.fit_rows`).
    """
    data = _fittable(rows, placement)
    if not data:
        others = sorted({r["placement"] for r in _fittable(rows, None)})
        raise ArgumentError(f"no nccl-tests rows{'' if placement is None else ' ' + placement} "
                            "with more than one rank to fit" + (
                                f" (the logs hold {' and '.join(others)} rows: --placement "
                                f"{others[0] if len(others) == 1 else 'any'})" if others else ""))
    prior = _prior(data, machine)
    m, levels = prior, {}
    for level in ("intra", "inter"):
        part = [r for r in data if level_of(r) == level]
        if part:
            m, levels[level] = _fit_level(part, m, level)
    return NetworkFit(m, prior, levels)


@dataclass
class NetworkHeldOut:
    """Predictions of the odd-numbered sizes of every log from a fit on the even ones.

    Attributes:
        fit: the fit on the even sizes (and on every size of the logs not held out).
        logs: {file: [(size, measured_s, predicted_s, relative_error, "algorithm/protocol")]}.
        level: {file: "intra" or "inter"}.
        skipped: {file: why none of its sizes is held out} (fewer than 3 sizes).
    """

    fit: NetworkFit
    logs: dict
    level: dict
    skipped: dict = field(default_factory=dict)

    @property
    def reason(self) -> str:
        """Why there is no held-out check at all ("" when some log has one)."""
        if self.logs:
            return ""
        return "; ".join(f"{name}: {why}" for name, why in self.skipped.items())

    def errors(self, min_size: int = 0) -> np.ndarray:
        return np.array([e for rows in self.logs.values() for (s, _, _, e, _) in rows
                         if s >= min_size])

    def median_error(self, min_size: int = 0) -> float:
        errs = np.abs(self.errors(min_size))
        return float(np.median(errs)) if errs.size else math.nan

    def per_log_median(self, min_size: int = 0) -> dict:
        """{file: median |relative error| of its held-out sizes >= ``min_size`` bytes, or None
        where it has none}, the same rows as :meth:`median_error`."""
        out = {}
        for name, rows in self.logs.items():
            errs = [abs(e) for (s, _, _, e, _) in rows if s >= min_size]
            out[name] = float(np.median(errs)) if errs else None
        return out

    def by_level(self) -> dict:
        out: dict = {}
        for name, rows in self.logs.items():
            out.setdefault(self.level[name], []).extend(e for (_, _, _, e, _) in rows)
        return out


def held_out_network(rows: Sequence[dict], machine=None,
                     placement: str | None = "in-place") -> NetworkHeldOut:
    """Fit on every log's even-numbered sizes, predict its odd-numbered ones (module doc). A
    log of fewer than 3 sizes (its even ones alone could not separate α from β) is fitted on
    every size and not held out; :attr:`NetworkHeldOut.skipped` says so.

    Raises:
        ArgumentError: as :func:`fit_network`.
    """
    data = _fittable(rows, placement)
    train, test, skipped = [], {}, {}
    for name in dict.fromkeys(r.get("file", "") for r in data):
        part = [r for r in data if r.get("file", "") == name]
        sizes = sorted({r["size"] for r in part})
        if len(sizes) < 3:
            skipped[name] = (f"{len(sizes)} size{'s' if len(sizes) > 1 else ''}: holding sizes "
                             "out needs at least 3 (fit on every other size, predict the rest); "
                             "fitted on every size, none held out")
            train += part
            continue
        even = set(sizes[::2])
        train += [r for r in part if r["size"] in even]
        test[name] = [r for r in part if r["size"] not in even]
    fitted = fit_network(train, machine, placement)
    logs, level = {}, {}
    for name, part in test.items():
        out = []
        for r in sorted(part, key=lambda r: r["size"]):
            c = predict_row(fitted.machine, r)
            out.append((r["size"], r["time_s"], c.seconds, c.seconds / r["time_s"] - 1,
                        f"{c.algorithm}/{c.protocol}"))
        logs[name], level[name] = out, level_of(part[0])
    return NetworkHeldOut(fitted, logs, level, skipped)


def read_fitted_json(path, cannot: str):
    """The JSON in ``path``, a file ``ringccl fit --json`` wrote.

    Raises:
        ArgumentError: ``cannot`` and why (a binary file: the first byte that is not UTF-8);
            for nccl-tests output itself (the log, not the profile fitted to it), with the
            command that fits it.
    """
    try:
        text = Path(path).read_text()
        return json.loads(text)
    except UnicodeDecodeError as exc:
        raise ArgumentError(f"{cannot} ({not_text(exc)})") from None
    except (OSError, json.JSONDecodeError) as exc:
        hint = ""
        if isinstance(exc, json.JSONDecodeError) and looks_like_nccl_tests(text):
            hint = (f"; it is nccl-tests output: fit it first, `ringccl fit --json "
                    f"{str(path)} > profile.json`, and pass profile.json")
        raise ArgumentError(f"{cannot} ({exc}){hint}") from None


def load_network_profile(path) -> NcclMachine:
    """The fitted machine of a profile written by ``ringccl fit --json`` on nccl-tests logs
    (the profile itself, or the fit's JSON output holding it).

    Raises:
        ArgumentError: unreadable file (for nccl-tests output itself, the message says to fit
            it first), no network profile in it, a version other than 1, missing, unknown or
            bad machine fields (:func:`.nccl_machine.machine_from_json`: the message names the
            file and the field).
    """
    return machine_from_json(_network_item(path)["machine"], f"profile={str(path)!r}")


def network_profile_levels(path) -> tuple[str, tuple[str, ...]]:
    """(the preset the profile's fit started from, the levels it fitted: "intra", "inter")
    of a network profile; a level it did not fit keeps that preset's figures.

    Raises:
        ArgumentError: as :func:`load_network_profile`; ``levels`` not an object of levels.
    """
    item = _network_item(path)
    levels = item.get("levels", {})
    if not isinstance(levels, dict) or set(levels) - {"intra", "inter"}:
        raise ArgumentError(f"profile={str(path)!r}: levels={levels!r} must be an object of "
                            "the levels fitted (intra, inter)")
    return str(item.get("prior", item["machine"].get("name", "?"))), tuple(
        k for k in ("intra", "inter") if k in levels)


def _network_item(path) -> dict:
    """The network profile in ``path`` (module doc), its version and machine checked."""
    where = f"profile={str(path)!r}"
    data = read_fitted_json(path, f"{where}: cannot read it")
    for item in data if isinstance(data, list) else [data]:
        if isinstance(item, dict) and isinstance(item.get("profile"), dict):
            item = item["profile"]
        if isinstance(item, dict) and item.get("format") == PROFILE_FORMAT:
            version = item.get("version", 1)   # written since the first; absent reads as 1
            if version != 1 or isinstance(version, bool):
                raise ArgumentError(f"{where}: version={version!r} is unknown; this ringccl "
                                    f"reads {PROFILE_FORMAT} version 1 (write it again with "
                                    "`ringccl fit --json LOGS`)")
            machine_from_json(item.get("machine"), where)
            return item
    raise ArgumentError(f"profile={str(path)!r} holds no {PROFILE_FORMAT} (write one with "
                        "`ringccl fit --json LOGS` on nccl-tests output)")


def cluster_fields(machine: NcclMachine) -> dict:
    """The planner's cluster fields a fitted machine sets: ``intra_alpha``,
    ``intra_bandwidth`` (per GPU), ``inter_alpha``, ``inter_bandwidth`` (per NIC),
    ``nics_per_node``, ``gpus_per_node`` (SI units)."""
    return {"intra_alpha": machine.intra_alpha, "intra_bandwidth": machine.intra_bandwidth,
            "inter_alpha": machine.inter_alpha, "inter_bandwidth": machine.inter_bandwidth,
            "nics_per_node": machine.nics_per_node, "gpus_per_node": machine.gpus_per_node}
