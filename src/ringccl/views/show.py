"""Text views of schedules: the step table of the ring all-reduce walk-through (its section 2)."""

from __future__ import annotations

from ..check import SymbolicState
from ..collectives import get_collective
from ..ir import Schedule

__all__ = ["step_table", "step_rows"]


def step_rows(schedule: Schedule, max_steps: int = 200) -> list[dict]:
    """Rows of the step table as data (for ``--json``).

    Each row is ``{"kind": "step", "phase", "step" (1-based in its phase), "index",
    "cells": [per-rank list of "cK → RJ"]}`` or, after each phase, ``{"kind": "holds", "phase",
    "cells": [per-rank text]}``: the chunks each rank then holds completely.
    """
    n = schedule.world_size
    state = SymbolicState(schedule)
    reduces = get_collective(schedule.collective).reduces
    rows: list[dict] = []
    phases = schedule.phases
    for name, first, end in phases:
        for index in range(first, end):
            if index < max_steps:
                cells: list[list[str]] = [[] for _ in range(n)]
                for t in schedule.steps[index].transfers():
                    label = f"c{t.src_chunk}" + (f"→c{t.dst_chunk}" if t.dst_chunk != t.src_chunk
                                                 else "")
                    cells[t.src].append(f"{label} → R{t.dst}")
                rows.append({"kind": "step", "phase": name, "step": index - first + 1,
                             "index": index, "cells": [", ".join(c) for c in cells]})
            state.apply(index)
        if end > max_steps:
            break
        held = state.complete() if reduces else state.chunk_id >= 0
        texts = []
        for r in range(n):
            chunks = [c for c in range(schedule.num_chunks) if held[r, c]]
            if len(chunks) == schedule.num_chunks and schedule.num_chunks > 1:
                texts.append("all " + " ".join(f"c{c}" for c in chunks)
                             if schedule.num_chunks <= 8 else f"all {schedule.num_chunks}")
            else:
                texts.append(("owns " if reduces else "has ") + " ".join(f"c{c}" for c in chunks)
                             if chunks else "-")
        rows.append({"kind": "holds", "phase": name, "cells": texts})
    return rows


def step_table(schedule: Schedule, max_steps: int = 200) -> str:
    """The step table as text (``ringccl.table``): one row per step, one column per rank
    (entries like ``c0 → R1``), and after each phase what every rank holds completely, from the
    symbolic checker ("owns c1" for reduced chunks after a reduce-scatter phase). For
    ``ringccl.schedule("all_reduce", "ring", world_size=4)`` this is the N=4 table of the ring
    all-reduce walk-through (its section 2).

    Args:
        schedule: any schedule (built or loaded).
        max_steps: show at most this many steps; a last line counts the steps left out.
    Returns:
        the table, lines joined by newlines (no trailing newline).
    """
    n = schedule.world_size
    rows = step_rows(schedule, max_steps)
    header = ["step"] + [f"R{r}" for r in range(n)]
    body: list[list[str]] = []
    for row in rows:
        if row["kind"] == "step":
            body.append([f"{row['phase']} {row['step']}"] + row["cells"])
        else:
            body.append([f"after {row['phase']}"] + row["cells"])
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    rule = "  ".join("-" * w for w in widths)
    title = (f"{schedule.algorithm} {schedule.collective}: world_size={n}, "
             f"{schedule.num_chunks} chunks per rank, {schedule.num_steps} steps")
    out = [title, line(header), rule]
    previous = None
    for row, cells in zip(rows, body):
        if row["kind"] == "holds":
            out.append(line(cells))
            out.append(rule)
        else:
            if previous is not None and previous != row["phase"] and out[-1] != rule:
                out.append(rule)
            out.append(line(cells))
        previous = row["phase"]
    if schedule.num_steps > max_steps:
        out.append(f"… {schedule.num_steps - max_steps} more steps not shown")
    return "\n".join(out)
