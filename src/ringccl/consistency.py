"""Opt-in cross-rank check that every rank is calling the same collective.

A rank that calls a different collective, algorithm, op, dtype or count than its peers makes a
point-to-point executor hang or return garbage. With the check on (``check=True`` on a call, or
``RINGCCL_DEBUG=1`` in every rank's environment, in the spirit of
``TORCH_DISTRIBUTED_DEBUG=DETAIL``), each call first all-gathers a small fingerprint — call
sequence number on the group, collective, algorithm and its parameters, op, dtype, count, and for
all_to_all the split sizes — and every rank raises the same :class:`ringccl.errors.
ConsistencyError` when they disagree, before any data of the collective moves. The exchange is
the same operation whatever the collective, so it cannot itself mismatch; it costs one small
all-gather per call, so it is off by default.

Backend-neutral: the executors' APIs gather the fingerprints (torch: ``all_gather_object``) and
call :func:`compare`.

``RINGCCL_DEBUG`` levels (:func:`debug_level`), as ``NCCL_DEBUG`` has them:

* unset, "", "0", "off", "false", "no": nothing.
* ``INFO``: one log line per collective call on each rank (logger ``"ringccl"``, to stderr
  unless the application configured that logger): rank, collective, algorithm, dtype, count,
  bytes, segment size, time (:mod:`ringccl.frontend.debug`). It changes no behaviour, as
  ``NCCL_DEBUG=INFO`` does not: the cross-rank check stays off.
* ``TRACE``: INFO plus, per call, one line per step with its measured posting, waiting and
  reduce times (the recorder of :mod:`ringccl.engine.trace`). No check either.
* "1", "on", "true", "yes", "check", "detail" (as ``TORCH_DISTRIBUTED_DEBUG=DETAIL``): the
  cross-rank check.

Any other value is refused (:class:`~ringccl.errors.ArgumentError` naming the variable, its
value and these), at the first call that reads it and by the launchers before any worker
starts: a typo such as ``INOF`` would otherwise turn on the check, not the log.
"""

from __future__ import annotations

from typing import Any

from . import environment
from .errors import ArgumentError

__all__ = ["enabled", "debug_level", "fingerprint", "compare"]

_FIELDS = ("seq", "collective", "algorithm", "params", "op", "dtype", "count")
_NAMES = {"seq": "call sequence number (ringccl collectives so far on this group)",
          "params": "algorithm parameters"}


_OFF = ("", "0", "off", "false", "no")
_LOG_LEVELS = ("info", "trace")
_CHECK = ("1", "on", "true", "yes", "check", "detail")


def debug_level() -> str:
    """What ``RINGCCL_DEBUG`` asks for: "" (nothing), "info", "trace" (logging, see the module
    docstring) or "check" (the cross-rank check).

    Raises:
        ArgumentError: any other value (the message names the variable, the value and what it
            may be).
    """
    value = (environment.get("RINGCCL_DEBUG") or "").strip().lower()
    if value in _OFF:
        return ""
    if value in _LOG_LEVELS:
        return value
    if value in _CHECK:
        return "check"
    raise ArgumentError(f"RINGCCL_DEBUG={environment.get('RINGCCL_DEBUG')!r} must be one of "
                        f"{', '.join(_OFF[1:])} or unset (nothing), INFO (a log line per call), "
                        f"TRACE (INFO and every step's times) or {', '.join(_CHECK)} (the "
                        "cross-rank check); case-insensitive")


def enabled(check: bool | None) -> bool:
    """``check`` if given, else whether ``RINGCCL_DEBUG`` asks for the cross-rank check (1, on,
    true, yes, check or detail, case-insensitive; :func:`debug_level`).

    Raises:
        ArgumentError: ``check`` None and a ``RINGCCL_DEBUG`` value :func:`debug_level` refuses.
    """
    if check is not None:
        return bool(check)
    return debug_level() == "check"


def fingerprint(seq: int, collective: str, algorithm: str, params: dict, op: str | None,
                dtype: str, count: int | None, splits=None) -> dict:
    """This rank's fingerprint of one call (a small picklable dict).

    Args:
        seq: how many ringccl collectives this rank called on the group before this one.
        params: the algorithm's keyword parameters (root included).
        op: the reduce op's name, None for collectives that do not reduce.
        count: elements of the collective's buffer, equal on every rank (all_to_all with split
            sizes: None, the splits are compared instead).
        splits: all_to_all only: (input split sizes, output split sizes) of this rank, in
            elements.
    """
    return {"seq": seq, "collective": collective, "algorithm": algorithm,
            "params": sorted((k, repr(v)) for k, v in params.items()), "op": op,
            "dtype": dtype, "count": None if splits is not None else count,
            "splits": None if splits is None else [list(map(int, s)) for s in splits]}


def _by_value(values: list) -> str:
    groups: dict[str, list[int]] = {}
    for rank, v in enumerate(values):
        groups.setdefault(repr(v), []).append(rank)
    return "; ".join(f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}: {v}"
                     for v, r in groups.items())


def compare(fingerprints: list[dict[str, Any]]) -> str | None:
    """The first disagreement among the ranks' fingerprints (rank order), or None.

    For all_to_all, rank r's input split j must equal rank j's output split r.
    """
    for field in _FIELDS:
        values = [fp[field] for fp in fingerprints]
        if any(v != values[0] for v in values[1:]):
            name = _NAMES.get(field, field)
            verb = "differ" if field == "params" else "differs"
            return f"{name} {verb}: {_by_value(values)}"
    if fingerprints and fingerprints[0]["splits"] is not None:
        n = len(fingerprints)
        ins = [fp["splits"][0] for fp in fingerprints]
        outs = [fp["splits"][1] for fp in fingerprints]
        for r in range(n):
            for j in range(n):
                if ins[r][j] != outs[j][r]:
                    return (f"rank {r} sends {ins[r][j]} elements to rank {j} (input_split_sizes"
                            f"[{j}]), but rank {j} expects {outs[j][r]} from rank {r} "
                            f"(output_split_sizes[{r}])")
    return None
