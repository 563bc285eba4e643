"""The rows of ``ringccl bench --format nccl-tests`` read back from its text.

That text is nccl-tests' layout (:func:`.report.format_nccl_tests`) plus two comments per run
that say what ran: ``# ringccl bench all_reduce: backend gloo, transport shm, world_size 2`` and
``# ringccl algorithm: ring seg=1MiB (segment_bytes 1048576)``. Its rows are ringccl's
algorithms, not NCCL's, so they are read back as the rows of ``ringccl bench --json`` are
(the closed-form α-β-γ fit of ``ringccl fit``; the nccl-tests reader's rows go to NCCL's
model), without what the text does not hold: the per-iteration times and the local-reduce
rows.
"""

from __future__ import annotations

import re

from ..collectives import COLLECTIVES
from ..errors import ArgumentError
from .spec import BUILTIN

__all__ = ["SOURCE", "ringccl_block", "ringccl_rows"]

#: the ``source`` of rows read back from ringccl's nccl-tests text
SOURCE = "ringccl-bench-text"

_BENCH = re.compile(r"#\s*ringccl bench (\w+): backend (\w+),(?: transport (\w+),)? "
                    r"world_size (\d+)")
_ALGORITHM = re.compile(r"#\s*ringccl algorithm: (\S+)([^\n]*)")
_SEGMENT = re.compile(r"\(segment_bytes (\d+)\)")
_ACCUMULATE = re.compile(r"\bacc=(\w+)")


def ringccl_block(text: str, source: str) -> dict | None:
    """What a run's ringccl comments say ({"collective", "backend", "transport",
    "world_size", "algorithm", "segment_bytes", "accumulate_dtype"}), or None when the run
    has none (nccl-tests' own output).

    Raises:
        ArgumentError: one comment without the other, or a collective ringccl does not have.
    """
    bench, algo = _BENCH.search(text), _ALGORITHM.search(text)
    if bench is None and algo is None:
        return None
    if bench is None or algo is None:
        missing = "# ringccl bench …" if bench is None else "# ringccl algorithm: …"
        raise ArgumentError(f"{source}: a run of `ringccl bench --format nccl-tests` without "
                            f"its {missing!r} line; print it again or pass --json rows")
    collective, backend, transport, world = bench.groups()
    if collective not in COLLECTIVES:
        raise ArgumentError(f"{source}: 'ringccl bench {collective}' names no collective of "
                            f"ringccl's ({', '.join(COLLECTIVES)})")
    name, rest = algo.groups()
    seg = _SEGMENT.search(rest)
    acc = _ACCUMULATE.search(rest)
    return {"collective": collective, "backend": backend,
            "transport": None if transport in (None, "none") else transport,
            "world_size": int(world), "algorithm": name,
            "segment_bytes": int(seg.group(1)) if seg else (0 if "seg=off" in rest else None),
            "accumulate_dtype": acc.group(1) if acc else None}


def ringccl_rows(block: dict, rows: list[dict], source: str, notes: list) -> list[dict]:
    """The data lines' ``rows`` (size, count, type, redop, root, placement, time_s, algbw,
    busbw, wrong) as ``ringccl bench --json`` rows of the run ``block`` describes."""
    coll = block["collective"]
    rooted = bool(getattr(COLLECTIVES[coll], "root_arg", None))
    out = []
    for r in rows:
        root = int(r["root"]) if r.get("root") not in (None, "") else -1
        out.append({**r, "kind": "collective", "source": SOURCE, "collective": coll,
                    "backend": block["backend"], "algorithm": block["algorithm"],
                    "transport": None if block["algorithm"] == BUILTIN else block["transport"],
                    "world_size": block["world_size"], "segment_bytes": block["segment_bytes"],
                    "accumulate_dtype": block["accumulate_dtype"], "root": root,
                    "params": {"root": root} if rooted else {}, "file": source,
                    "log_notes": notes})
    return out
