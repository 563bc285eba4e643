"""What an nccl-tests log's columns say about the program that printed it.

Each nccl-tests program prints its rows its own way (github.com/NVIDIA/nccl-tests, ``src/*.cu``
``*GetCollByteCount``, ``*GetBw`` and ``*RunTest``; ``doc/PERFORMANCE.md`` for the bus factors):

* ``redop``: the reduction's name for the reducing programs (all_reduce, reduce_scatter,
  reduce), ``none`` for the others (all_gather, alltoall, broadcast, sendrecv);
* ``size`` / (``count`` × the type's bytes): the number of ranks n for the programs whose count
  is one rank's block (all_gather, reduce_scatter, alltoall), else 1;
* busbw / algbw, the bus factor: 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
  reduce_scatter and alltoall, 1 for broadcast, reduce and sendrecv.

:func:`infer_program` names the program where the columns tell it alone;
:func:`contradiction` says why a program named by the caller cannot have printed the rows.
"""

from __future__ import annotations

__all__ = ["TYPE_SIZES", "infer_program", "contradiction", "programs_agreeing"]

#: bytes per element of the type names nccl-tests prints
TYPE_SIZES = {"int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8,
              "uint64": 8, "half": 2, "float16": 2, "float": 4, "float32": 4, "double": 8,
              "float64": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1,
              "fp8_e5m2": 1}

_REDUCING = ("all_reduce", "reduce_scatter", "reduce")
_BLOCKS = ("all_gather", "reduce_scatter", "alltoall")
#: busbw / algbw at n ranks (nccl-tests doc/PERFORMANCE.md)
_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
           "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0}
_FORMULA = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
            "alltoall": "(n-1)/n", "broadcast": "1", "reduce": "1", "sendrecv": "1"}
#: the smallest algbw (bytes/s) whose two printed decimals give the bus factor within 1%
_READABLE = 1e9
#: how far a bus factor read off the columns may be from the program's
_TOLERANCE = 0.02


def _largest(rows: list[dict]) -> dict:
    return max(rows, key=lambda r: r["size"])


def _per_rank(r: dict) -> float | None:
    """size / (count × the type's bytes), or None when the row does not give it."""
    elt = TYPE_SIZES.get(r["type"])
    return r["size"] / (r["count"] * elt) if elt and r["count"] else None


def infer_program(rows: list[dict], world_size: int | None) -> tuple[str, int | None]:
    """The program and world size the columns imply, or ("", world size) when they do not
    tell (all_gather and alltoall print alike, as do broadcast and reduce)."""
    r = _largest(rows)
    if not r["algbw"] or r["count"] == 0:
        return "", world_size
    factor = r["busbw"] / r["algbw"]
    per_rank = r["size"] / (r["count"] * TYPE_SIZES.get(r["type"], 0) or 1)
    if r["redop"] == "none" or per_rank > 1.5:  # size = N blocks of count elements
        n = round(per_rank)
        if r["redop"] != "none":
            return "reduce_scatter", n
        return "", n  # all_gather and alltoall print alike
    if r["root"] not in ("-1", None) and abs(factor - 1) < 0.02:
        return "", world_size  # broadcast and reduce print alike
    if factor > 1.02:  # 2(n-1)/n > 1 only for all_reduce with n > 2
        return "all_reduce", round(2 / (2 - factor)) if factor < 1.999 else world_size
    return "", world_size


def contradiction(program: str, rows: list[dict], world_size: int | None) -> str | None:
    """Why ``program`` (nccl-tests' name without ``_perf``) cannot have printed ``rows`` of a
    run of ``world_size`` ranks (None: unknown), or None when the columns agree with it: its
    redop (a reduction or ``none``), size per count and bus factor (module doc)."""
    r = _largest(rows)
    reasons = []
    if r["redop"]:  # the v2.0-era layout without the column reads ""
        reduces = r["redop"] != "none"
        if reduces != (program in _REDUCING):
            reasons.append(f"redop {r['redop']}: " + (
                f"a reduction, and {program}_perf does none" if reduces else
                f"no reduction, and {program}_perf reduces"))
    per_rank = _per_rank(r)
    n = world_size
    if per_rank is not None and n:
        expected = n if program in _BLOCKS else 1
        if abs(per_rank - expected) > 0.01 * expected:
            reasons.append(f"size / count = {per_rank:g} elements, and {program}_perf's is "
                           f"{expected} at {n} ranks")
    if n and r["algbw"] >= _READABLE:
        factor, want = r["busbw"] / r["algbw"], _FACTOR[program](n)
        if abs(factor - want) > _TOLERANCE * max(want, factor):
            reasons.append(f"busbw / algbw = {factor:.3g}, and {program}_perf's bus factor is "
                           f"{_FORMULA[program]} = {want:.3g} at {n} ranks")
    return "; ".join(reasons) or None


def programs_agreeing(rows: list[dict], world_size: int | None) -> list[str]:
    """The programs whose columns ``rows`` agree with (:func:`contradiction` is None)."""
    return [p for p in _FACTOR if contradiction(p, rows, world_size) is None]
