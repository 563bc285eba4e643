"""The compute profile ``ringccl calibrate`` writes, and what a planner asks of it.

A profile is JSON (:data:`PROFILE_FORMAT`, version 1) built from the measurements of
:func:`ringccl.bench.compute.measure`:

* ``device``: type ("cuda", "cpu"), name, torch version, CPU threads;
* ``peak_flops``: {dtype: the highest FLOP/s any timed GEMM reached} — achieved, not the
  datasheet's;
* ``gemm``: one entry per (shape, dtype): name, m, n, k, dtype, seconds (median), flops,
  flops_per_s and ``efficiency`` = flops_per_s / peak_flops[dtype];
* ``attention``: the same for scaled_dot_product_attention shapes (batch, heads, seq,
  head_dim, causal), efficiency against the GEMM peak of its dtype (above 1 where attention
  outruns every GEMM timed);
* ``memory_bandwidth``: bytes/s of a device copy (read + write);
* ``settings``: iters, warmup, and where the shapes came from.

:func:`load_compute_profile` reads it back as a :class:`ComputeProfile`, whose
:meth:`~ComputeProfile.gemm_seconds` prices a GEMM from its shape: a measured shape's own time,
else max(FLOPs / (peak × efficiency), bytes / memory bandwidth) with the efficiency of the
measured shape of that dtype nearest in log FLOPs — the roofline (Williams, Waterman &
Patterson, CACM 52(4), 2009) with a measured efficiency in place of the peak.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import ArgumentError

__all__ = ["PROFILE_FORMAT", "ComputeProfile", "make_compute_profile", "load_compute_profile",
           "DTYPE_BYTES"]

PROFILE_FORMAT = "ringccl-compute-profile"
#: bytes per element of the dtypes a profile holds
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def make_compute_profile(measured: dict, shapes_from: str = "default") -> dict:
    """The profile JSON (module doc) of :func:`ringccl.bench.compute.measure`'s result.

    Raises:
        ArgumentError: a measurement with a time <= 0 (the message names it).
    """
    for row in measured["gemm"] + measured["attention"]:
        if not row["time_s"] > 0:
            raise ArgumentError(f"{row['name']} {row['dtype']}: measured {row['time_s']!r} s; "
                                "a time must be > 0 (raise --iters)")
    peaks: dict[str, float] = {}
    gemms = []
    for row in measured["gemm"]:
        rate = row["flops"] / row["time_s"]
        peaks[row["dtype"]] = max(peaks.get(row["dtype"], 0.0), rate)
        gemms.append({**{k: row[k] for k in ("name", "m", "n", "k", "dtype", "flops")},
                      "seconds": row["time_s"], "min_seconds": row["min_s"],
                      "flops_per_s": rate})
    for row in gemms:
        row["efficiency"] = row["flops_per_s"] / peaks[row["dtype"]]
    attention = []
    for row in measured["attention"]:
        rate = row["flops"] / row["time_s"]
        peak = peaks.get(row["dtype"])
        attention.append({**{k: row[k] for k in ("name", "batch", "heads", "seq", "head_dim",
                                                  "causal", "dtype", "flops")},
                          "seconds": row["time_s"], "flops_per_s": rate,
                          "efficiency": rate / peak if peak else None})
    return {"format": PROFILE_FORMAT, "version": 1, "device": measured["device"],
            "peak_flops": peaks, "memory_bandwidth": measured["memory"]["bandwidth"],
            "gemm": gemms, "attention": attention,
            "settings": {"iters": measured["iters"], "warmup": measured["warmup"],
                         "shapes_from": shapes_from,
                         "memory_copy_bytes": measured["memory"]["bytes"]}}


@dataclass(frozen=True)
class ComputeProfile:
    """A loaded compute profile (module doc); ``data`` is its JSON."""

    data: dict

    @property
    def device(self) -> str:
        return str(self.data["device"].get("name", ""))

    @property
    def memory_bandwidth(self) -> float:
        """Bytes/s of the device copy."""
        return float(self.data["memory_bandwidth"])

    def peak_flops(self, dtype: str) -> float:
        """The highest FLOP/s a GEMM of ``dtype`` reached.

        Raises:
            ArgumentError: no GEMM of that dtype was timed.
        """
        try:
            return float(self.data["peak_flops"][dtype])
        except KeyError:
            raise ArgumentError(f"dtype={dtype!r} was not calibrated; the profile has "
                                f"{', '.join(self.data['peak_flops']) or 'none'}") from None

    def efficiency(self, m: int, n: int, k: int, dtype: str) -> float:
        """The measured efficiency of (m, n, k), or of the measured shape of ``dtype`` nearest
        in log FLOPs."""
        rows = [g for g in self.data["gemm"] if g["dtype"] == dtype]
        if not rows:
            self.peak_flops(dtype)  # raises, naming what there is
        exact = [g for g in rows if (g["m"], g["n"], g["k"]) == (m, n, k)]
        if exact:
            return float(exact[0]["efficiency"])
        target = math.log(2.0 * m * n * k)
        return float(min(rows, key=lambda g: abs(math.log(g["flops"]) - target))["efficiency"])

    def gemm_seconds(self, m: int, n: int, k: int, dtype: str) -> float:
        """Seconds of an (m, k) @ (k, n) GEMM in ``dtype`` (module doc).

        Raises:
            ArgumentError: a dimension < 1, a dtype the profile lacks.
        """
        if min(m, n, k) < 1:
            raise ArgumentError(f"GEMM (m, n, k)=({m}, {n}, {k}) must have every dimension >= 1")
        for g in self.data["gemm"]:
            if (g["m"], g["n"], g["k"], g["dtype"]) == (m, n, k, dtype):
                return float(g["seconds"])
        flops = 2.0 * m * n * k
        compute = flops / (self.peak_flops(dtype) * self.efficiency(m, n, k, dtype))
        moved = DTYPE_BYTES.get(dtype, 4) * (m * k + k * n + m * n)
        return max(compute, moved / self.memory_bandwidth)


def load_compute_profile(path) -> ComputeProfile:
    """Read a profile written by ``ringccl calibrate --out`` (or its ``--json`` output).

    Raises:
        ArgumentError: unreadable file, not a compute profile, missing fields.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ArgumentError(f"compute profile {str(path)!r}: cannot read it ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise ArgumentError(f"{str(path)!r} is not a {PROFILE_FORMAT} (write one with "
                            "`ringccl calibrate --out PATH`)")
    missing = [k for k in ("device", "peak_flops", "memory_bandwidth", "gemm", "attention")
               if k not in data]
    if missing:
        raise ArgumentError(f"{str(path)!r} lacks {', '.join(missing)}")
    return ComputeProfile(data)
