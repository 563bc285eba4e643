"""The replayed step re-predicted: α, β, γ fitted from what the replay measured, every
collective predicted again and set against its measured time (``ringccl replay``).

The replay (:func:`ringccl.planner.emit.replay_calls`, run by
:func:`ringccl.backends.torch.replay.replay_worker`) gives two kinds of ``ringccl bench`` rows:
one per step collective at its scaled size, and calibration sweeps — each distinct (collective,
algorithm, group size) from 4 KiB to the largest scaled size, with ``local-reduce`` rows for the
reducing ones. The fit (:func:`ringccl.costmodel.fit.fit_rows`, relative least squares, the
registry's closed forms) sees the calibration rows only, so each step collective's
prediction is held out: the closed form of its algorithm at its size with the fitted α, β, γ
(:func:`ringccl.costmodel.fit.features`). The simulator counts the bytes the busiest rank sends
per call (:func:`ringccl.sim.simulate`), as a check that the replay moved what the schedule
says.

Totals are ``Σ calls_per_step × seconds per call`` over the step's collectives at the scaled
sizes: the communication the step issues, before any overlap with compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..collectives import get_collective
from ..costmodel.fit import Fit, fit_rows, row_time
from ..errors import ArgumentError
from ..sim import simulate
from .emit import ReplayCall, ReplayMap

__all__ = ["calibration_sweeps", "ReplayReport", "repredict", "simulated_bytes"]

#: the smallest calibration size: a few KiB is α-bound on gloo (tens of µs per message)
CALIBRATION_MIN_BYTES = 4 << 10


def calibration_sweeps(rmap: ReplayMap) -> list[dict]:
    """One sweep per distinct (collective, algorithm, params, group size) of the replay, from
    :data:`CALIBRATION_MIN_BYTES` to the largest scaled call (at least 4x the minimum, so a
    sweep has 2 sizes or more and the fit can separate α from β)."""
    top = max(max(c.nbytes for c in rmap.calls), 4 * CALIBRATION_MIN_BYTES)
    seen: dict[tuple, dict] = {}
    for c in rmap.calls:
        key = (c.collective, c.algorithm, tuple(sorted(c.params.items())), c.group_size)
        seen.setdefault(key, {"collective": c.collective, "algorithm": c.algorithm,
                              "params": dict(c.params), "group_size": c.group_size,
                              "min_bytes": CALIBRATION_MIN_BYTES, "max_bytes": top})
    return list(seen.values())


def simulated_bytes(call: ReplayCall) -> int:
    """Bytes the busiest rank sends in one call, counted by the simulator on the call's
    schedule at its scaled size (float32)."""
    n = call.group_size
    spec = get_collective(call.collective)
    count = call.nbytes // 4 // spec.buffer_count(n, 1)
    inputs = np.ones((n, count), dtype=np.float32)
    kwargs = {"src": 0} if call.collective == "broadcast" else {}
    params = {k: v for k, v in call.params.items() if k != "root"}
    result = simulate(call.collective, inputs, algorithm=call.algorithm, check=False,
                      **kwargs, **params)
    return int(result.stats.bytes_sent.max())


@dataclass
class ReplayReport:
    """Predicted vs measured, per collective and in total.

    Attributes:
        rows: per call: the call's dict plus ``measured_s``, ``predicted_s``, ``error``
            (predicted / measured − 1), ``simulated_bytes``, ``wrong``.
        fit: the :class:`~ringccl.costmodel.fit.Fit` of the calibration rows.
        measured_total_s, predicted_total_s: Σ calls_per_step × per call.
        median_error: median |error| over the collectives; total_error: of the totals.
        scale, notes: from the mapping.
    """

    rows: list
    fit: Fit
    measured_total_s: float
    predicted_total_s: float
    median_error: float
    total_error: float
    scale: float
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"rows": self.rows, "fit": self.fit.to_json(),
                "measured_total_s": self.measured_total_s,
                "predicted_total_s": self.predicted_total_s, "median_error": self.median_error,
                "total_error": self.total_error, "scale": self.scale, "notes": list(self.notes)}


def _slowest(rows: list[dict]) -> dict:
    """Of one row measured on several concurrent groups: the slowest (the step waits for every
    group), its ``wrong`` the sum."""
    worst = max(rows, key=lambda r: r["time_s"])
    wrong = [r["wrong"] for r in rows if r.get("wrong") is not None]
    return dict(worst, wrong=sum(wrong) if wrong else None)


def repredict(rmap: ReplayMap, rows: list[dict]) -> ReplayReport:
    """Fit on the calibration rows, predict every step call, compare (module doc).

    Args:
        rmap: the mapping that was replayed.
        rows: every rank's rows from :func:`ringccl.backends.torch.replay.replay_worker`,
            together.
    Raises:
        ArgumentError: a call without a measured row, or calibration rows the fit refuses.
    """
    by_call: dict[int, list] = {}
    by_size: dict[tuple, list] = {}
    for r in rows:
        tag = r.get("replay", {})
        if "call" in tag:
            by_call.setdefault(tag["call"], []).append(r)
        else:
            key = (tag.get("calibration"), r["kind"], r["size"])
            by_size.setdefault(key, []).append(r)
    calibration = [_slowest(v) for v in by_size.values()]
    fit = fit_rows(calibration, backend="gloo", placement=None)
    out, measured_total, predicted_total = [], 0.0, 0.0
    for c in rmap.calls:
        if c.order not in by_call:
            raise ArgumentError(f"collective {c.order} ({c.label()}) has no measured row")
        row = _slowest(by_call[c.order])
        predicted = row_time(fit, row)   # features · params, + ε over shared memory
        measured = float(row["time_s"])
        measured_total += c.calls_per_step * measured
        predicted_total += c.calls_per_step * predicted
        out.append({**c.to_dict(), "size": row["size"], "measured_s": measured,
                    "predicted_s": predicted, "error": predicted / measured - 1,
                    "simulated_bytes": simulated_bytes(c), "wrong": row.get("wrong")})
    errors = [abs(r["error"]) for r in out]
    median = float(np.median(errors)) if errors else math.nan
    total_error = predicted_total / measured_total - 1 if measured_total else math.nan
    return ReplayReport(out, fit, measured_total, predicted_total, median, total_error,
                        rmap.scale, list(rmap.notes))
