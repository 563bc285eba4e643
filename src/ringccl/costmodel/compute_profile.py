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

from ..bench.nccl_tests import looks_like_nccl_tests
from ..args import not_text
from ..errors import ArgumentError

__all__ = ["PROFILE_FORMAT", "ComputeProfile", "make_compute_profile", "load_compute_profile",
           "check_compute_profile", "DTYPE_BYTES"]

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


def _positive(value) -> bool:
    """A finite number > 0 (not a bool)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def _count(value) -> bool:
    """An integer >= 1 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_entries(where: str, entries, fields: dict) -> None:
    """Each entry an object whose ``fields`` ({name: (test, what it must be)}) pass."""
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ArgumentError(f"{where}[{i}]={entry!r} must be an object")
        for name, (test, what) in fields.items():
            if not test(entry.get(name)):
                raise ArgumentError(f"{where}[{i}].{name}={entry.get(name)!r} must be {what}")


def check_compute_profile(data: dict, where: str = "compute profile") -> None:
    """Check the fields a planner reads (module doc), so that a damaged profile is refused
    when it is read, not midway through pricing.

    Raises:
        ArgumentError: a version other than 1 (absent reads as 1); a field missing or of the
            wrong kind; ``peak_flops`` empty or not > 0; ``gemm`` empty, an entry with a
            dimension < 1, a time or FLOP count not > 0, an efficiency outside (0, 1], or a
            dtype ``peak_flops`` lacks; a dtype of ``peak_flops`` no GEMM timed;
            an ``attention`` entry without dtype or seq >= 1; ``memory_bandwidth`` not > 0.
            The message names ``where`` (the file), the field and what it must be.
    """
    version = data.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise ArgumentError(f"{where}: version={version!r} is unknown; this ringccl reads "
                            f"{PROFILE_FORMAT} version 1 (write it again with `ringccl "
                            "calibrate --out PATH`)")
    missing = [k for k in ("device", "peak_flops", "memory_bandwidth", "gemm", "attention")
               if k not in data]
    if missing:
        raise ArgumentError(f"{where} is a {PROFILE_FORMAT} but lacks {', '.join(missing)} "
                            "(write it again with `ringccl calibrate --out PATH`)")
    if not isinstance(data["device"], dict):
        raise ArgumentError(f"{where}: device={data['device']!r} must be an object (type, "
                            "name, ...)")
    peaks = data["peak_flops"]
    if not isinstance(peaks, dict) or not peaks:
        raise ArgumentError(f"{where}: peak_flops={peaks!r} must be an object of dtype: FLOP/s "
                            "with at least one dtype (the GEMMs' best rate per dtype)")
    for dtype, peak in peaks.items():
        if not _positive(peak):
            raise ArgumentError(f"{where}: peak_flops.{dtype}={peak!r} must be a FLOP/s > 0")
    if not _positive(data["memory_bandwidth"]):
        raise ArgumentError(f"{where}: memory_bandwidth={data['memory_bandwidth']!r} must be "
                            "bytes/s > 0")
    gemms = data["gemm"]
    if not isinstance(gemms, list) or not gemms:
        raise ArgumentError(f"{where}: gemm={gemms!r} must be a list of at least one timed "
                            "GEMM (name, m, n, k, dtype, flops, seconds, efficiency)")
    _check_entries(f"{where}: gemm", gemms, {
        "m": (_count, "an integer >= 1"), "n": (_count, "an integer >= 1"),
        "k": (_count, "an integer >= 1"),
        "dtype": (lambda d: d in peaks, f"a dtype of peak_flops ({', '.join(peaks)})"),
        "flops": (_positive, "a FLOP count > 0"), "seconds": (_positive, "a time > 0"),
        # of the best GEMM of its dtype: that one is 1, none above
        "efficiency": (lambda e: _positive(e) and e <= 1, "a fraction of the peak in (0, 1]")})
    untimed = [d for d in peaks if not any(g["dtype"] == d for g in gemms)]
    if untimed:
        raise ArgumentError(f"{where}: peak_flops has {', '.join(untimed)} but gemm has no "
                            "entry of that dtype (each dtype needs a timed GEMM)")
    attention = data["attention"]
    if not isinstance(attention, list):
        raise ArgumentError(f"{where}: attention={attention!r} must be a list (empty: none "
                            "timed)")
    _check_entries(f"{where}: attention", attention, {
        "dtype": (lambda d: isinstance(d, str), "a dtype name"),
        "seq": (_count, "an integer >= 1"),
        "flops_per_s": (lambda r: r is None or _positive(r), "a FLOP/s > 0 (or null)")})


def load_compute_profile(path) -> ComputeProfile:
    """Read a profile written by ``ringccl calibrate --out`` (or its ``--json`` output).

    Raises:
        ArgumentError: unreadable file (for nccl-tests output, the message says what reads
            it), not a compute profile, missing or damaged fields (:func:`check_compute_profile`:
            the message names the file and the field).
    """
    try:
        text = Path(path).read_text()
        data = json.loads(text)
    except UnicodeDecodeError as exc:
        raise ArgumentError(f"compute profile {str(path)!r}: cannot read it ({not_text(exc)})") \
            from None
    except (OSError, json.JSONDecodeError) as exc:
        hint = ""
        if isinstance(exc, json.JSONDecodeError) and looks_like_nccl_tests(text):
            hint = ("; it looks like nccl-tests output, which `ringccl fit --json` turns into a "
                    "network profile")
        raise ArgumentError(f"compute profile {str(path)!r}: cannot read it ({exc}){hint}") \
            from None
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise ArgumentError(f"{str(path)!r} is not a {PROFILE_FORMAT} (write one with "
                            "`ringccl calibrate --out PATH`)")
    check_compute_profile(data, f"compute profile {str(path)!r}")
    return ComputeProfile(data)
