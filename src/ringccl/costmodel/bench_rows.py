"""The rows ``ringccl fit`` reads: ``ringccl bench --json`` files (each row checked as it is
read, so that a hand-edited file is refused with its file, row and field rather than failing
inside the fit) and nccl-tests output (:mod:`ringccl.bench.nccl_tests`, every run of a file)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

from ..bench.nccl_tests import SOURCE, looks_like_nccl_tests, parse_nccl_runs
from ..bench.spec import LOCAL_REDUCE
from ..errors import ArgumentError
from ..units import MAX_INT

__all__ = ["load_rows", "check_row"]

_KINDS = ("collective", LOCAL_REDUCE)
_PLACEMENTS = ("in-place", "out-of-place")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bytes(value) -> bool:
    """A byte count as the bench writes one: an integer in 0 … :data:`~ringccl.units.MAX_INT`
    (2^63 - 1, the largest size the size parsers return, numpy's int64)."""
    return _integer(value) and 0 <= value <= MAX_INT


_BYTES = f"an integer number of bytes >= 0 and <= {MAX_INT}"


#: (field, needed, test, what is allowed); of the optional ones, those in _NULLABLE may be null
_FIELDS = (
    ("time_s", True, lambda v: _number(v) and math.isfinite(v) and v >= 0,
     "a finite number of seconds >= 0"),
    ("size", True, _bytes, _BYTES),
    ("world_size", True, lambda v: _integer(v) and v >= 1, "an integer >= 1"),
    ("collective", True, lambda v: isinstance(v, str), "a collective's name"),
    ("algorithm", True, lambda v: isinstance(v, str), "an algorithm's name"),
    ("kind", False, lambda v: v in _KINDS, " or ".join(_KINDS)),
    ("placement", False, lambda v: v in _PLACEMENTS, " or ".join(_PLACEMENTS)),
    ("backend", False, lambda v: isinstance(v, str), "a backend's name"),
    ("transport", False, lambda v: isinstance(v, str), "a transport's name (shm, p2p)"),
    ("params", False, lambda v: isinstance(v, dict), "an object of the algorithm's parameters"),
    ("segment_bytes", False, _bytes, _BYTES),
    ("accumulate_dtype", False, lambda v: isinstance(v, str), "a dtype's name"),
    ("wrong", False, lambda v: _number(v) and v >= 0, "a count >= 0"),
)
#: null in the rows `ringccl bench --json` writes: builtin rows' transport, no segmenting, ...
_NULLABLE = {"transport", "params", "segment_bytes", "accumulate_dtype", "wrong"}


def check_row(row: dict, where: str) -> None:
    """Refuse a benchmark row the fit cannot use as it is: a missing or mistyped field.

    Args:
        row: one row of a ``ringccl bench --json`` file.
        where: the file and row index, for the message.
    Raises:
        ArgumentError: naming ``where``, the field, its value and what is allowed.
    """
    fields = list(_FIELDS)
    if row.get("kind") == LOCAL_REDUCE:
        fields.append(("reduced_bytes", True, _bytes, _BYTES))
    if row.get("source") == SOURCE:
        fields += [(k, True, lambda v: _integer(v) and v >= 1, "an integer >= 1")
                   for k in ("ranks_per_node", "nodes")]
    for name, needed, ok, allowed in fields:
        if name not in row or (row[name] is None and name in _NULLABLE):
            if needed:
                raise ArgumentError(f"{where}: no {name!r} field; expected {allowed} (a row "
                                    "as `ringccl bench --json` writes it)")
            continue
        if not ok(row[name]):
            raise ArgumentError(f"{where}: {name}={row[name]!r}; expected {allowed}")


def load_rows(paths: Iterable[str | Path], program: str | None = None) -> list[dict]:
    """Rows of ``ringccl bench --json`` files ({"rows": [...]}), plain JSON lists of rows, or
    nccl-tests output as printed (:func:`ringccl.bench.nccl_tests.parse_nccl_runs`: a file of
    several runs gives each run's rows, under its own ``file``).

    Args:
        paths: the files.
        program: the nccl-tests program of logs that do not name it (e.g. "alltoall_perf").
    Raises:
        ArgumentError: a file that is neither (the message names it), a JSON row that is not
            an object (file, row index, value) or with a missing or bad field
            (:func:`check_row`: file, row index, field, value), or an nccl-tests log that
            cannot be read (as parse_nccl_runs).
    """
    rows: list[dict] = []
    for path in paths:
        try:
            text = Path(path).read_text(errors="replace")
        except OSError as exc:
            raise ArgumentError(f"cannot read benchmark rows from {str(path)!r}: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if looks_like_nccl_tests(text):
                rows.extend(r for log in parse_nccl_runs(text, str(path), program)
                            for r in log.rows)
                continue
            raise ArgumentError(f"cannot read benchmark rows from {str(path)!r}: neither JSON "
                                f"({exc}) nor nccl-tests output") from None
        part = data.get("rows") if isinstance(data, dict) else data
        # not one row in it: not a file of rows; some rows: a bad one is named below
        if not isinstance(part, list) or not any(isinstance(r, dict) for r in part):
            raise ArgumentError(f"{str(path)!r} holds no benchmark rows: expected the output of "
                                "`ringccl bench --json` or of an nccl-tests program")
        for i, row in enumerate(part):
            where = f"{str(path)!r}, row {i}"
            if not isinstance(row, dict):
                raise ArgumentError(f"{where}: {row!r} is not a row; expected an object of "
                                    "fields (a row as `ringccl bench --json` writes it)")
            check_row(row, where)
        rows.extend(part)
    return rows
