"""Text views of schedules: the step table, one row per step and one column per rank."""

from __future__ import annotations

import numbers
from typing import Sequence

from ..args import check_int
from ..check import SymbolicState
from ..collectives import get_collective
from ..errors import ArgumentError, ArgumentTypeError
from ..ir import Schedule
from ..units import plural

__all__ = ["step_table", "step_rows", "parse_ranks"]


def parse_ranks(text: str, world_size: int) -> list[int]:
    """Ranks from ``"0-7"``, ``"0,3,8-11"`` (ranges inclusive), in the order given, each once.

    Raises:
        ArgumentError: not such a list, or a rank outside [0, world_size) (naming it).
    """
    ranks: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise ArgumentError(f"ranks={text!r}: {part!r} is not a rank or a range such as 0-7; "
                                "expected a comma list of ranks and ranges, e.g. 0-7 or 0,5,9-12")
        if last < first:
            raise ArgumentError(f"ranks={text!r}: the range {part!r} is empty (write LOW-HIGH)")
        for r in (first, last):
            if not 0 <= r < world_size:
                raise ArgumentError(f"ranks={text!r}: rank {r} is out of range for "
                                    f"world_size={world_size}; ranks are 0-{world_size - 1}")
        ranks.extend(range(first, last + 1))
    return list(dict.fromkeys(ranks))


def step_rows(schedule: Schedule, max_steps: int = 200,
              ranks: Sequence[int] | None = None) -> list[dict]:
    """Rows of the step table as data (for ``--json``).

    Each row is ``{"kind": "step", "phase", "step" (1-based in its phase), "index",
    "cells": [per-rank list of "cK → RJ"]}`` or, after each phase, ``{"kind": "holds", "phase",
    "cells": [per-rank text]}``: the chunks each rank then holds completely. ``ranks``: the
    ranks whose cells are given, in that order (default all).
    """
    n = schedule.world_size
    shown = range(n) if ranks is None else list(ranks)
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
                             "index": index, "cells": [", ".join(cells[r]) for r in shown]})
            state.apply(index)
        if end > max_steps:
            break
        held = state.complete() if reduces else state.chunk_id >= 0
        texts = []
        for r in shown:
            chunks = [c for c in range(schedule.num_chunks) if held[r, c]]
            if len(chunks) == schedule.num_chunks and schedule.num_chunks > 1:
                texts.append("all " + " ".join(f"c{c}" for c in chunks)
                             if schedule.num_chunks <= 8 else f"all {schedule.num_chunks}")
            else:
                texts.append(("owns " if reduces else "has ") + " ".join(f"c{c}" for c in chunks)
                             if chunks else "-")
        rows.append({"kind": "holds", "phase": name, "cells": texts})
    return rows


def step_table(schedule: Schedule, max_steps: int = 200, ranks: Sequence[int] | None = None,
               width: int | None = None) -> str:
    """The step table as text (``ringccl.table``): one row per step, one column per rank
    (entries like ``c0 → R1``), and after each phase what every rank holds completely, from the
    symbolic checker ("owns c1" for reduced chunks after a reduce-scatter phase). For
    ``ringccl.schedule("all_reduce", "ring", world_size=4)`` this is the N=4 table of the ring
    all-reduce (Patarasuk & Yuan, JPDC 2009): 6 steps, 4 rank columns.

    Args:
        schedule: any schedule (built or loaded).
        max_steps: show at most this many steps, an integer >= 0; a last line counts the steps
            left out.
        ranks: the rank columns to show, in order (default all): ints, or text such as
            ``"0-7"`` or ``"0,3,8-11"`` (:func:`parse_ranks`).
        width: at most this many characters per line, an integer >= 1 (None: no limit). Cells
            longer than a line allows end in "… +K" (K entries left out); without ``ranks``,
            the table shows the first ranks that fit and a last line says how many were left
            out.
    Returns:
        the table, lines joined by newlines (no trailing newline).
    Raises:
        ArgumentTypeError: ``schedule`` is not a :class:`~ringccl.ir.Schedule`; ``max_steps``
            or ``width`` not an integer.
        ArgumentError: a rank of ``ranks`` out of range or text that does not read;
            ``max_steps`` < 0, ``width`` < 1.
    """
    if not isinstance(schedule, Schedule):
        raise ArgumentTypeError(f"schedule={schedule!r} must be a ringccl Schedule (e.g. "
                                f"ringccl.schedule(...)), got {type(schedule).__name__}")
    n = schedule.world_size
    max_steps = check_int(max_steps, "max_steps", minimum=0)
    if width is not None:
        width = check_int(width, "width", minimum=1)
    if isinstance(ranks, str):  # "0-7" or "0,3,8-11", as --ranks takes them
        ranks = parse_ranks(ranks, n)
    shown = list(range(n)) if ranks is None else list(ranks)
    bad = [r for r in shown
           if isinstance(r, bool) or not isinstance(r, numbers.Integral) or not 0 <= r < n]
    if bad:
        raise ArgumentError(f"ranks={list(ranks)!r}: {bad[0]!r} is not a rank of world_size={n}; "
                            f"ranks are 0-{n - 1}")
    rows = step_rows(schedule, max_steps, shown)
    header = ["step"] + [f"R{r}" for r in shown]
    body: list[list[str]] = []
    for row in rows:
        if row["kind"] == "step":
            body.append([f"{row['phase']} {row['step']}"] + row["cells"])
        else:
            body.append([f"after {row['phase']}"] + row["cells"])
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    if width is not None:
        # a cell may not be wider than the line leaves beside the step column, shared among
        # the ranks asked for (the first ranks that fit are chosen below when none were)
        room = max((width - widths[0]) // (1 if ranks is None else len(shown)) - 2, 16)
        body = [[r[0]] + [_clip(c, room) for c in r[1:]] for r in body]
        widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
        if ranks is None:  # the leading ranks that fit, at least one
            used, keep = widths[0], 0
            while keep < len(shown) and used + 2 + widths[keep + 1] <= width:
                used += 2 + widths[keep + 1]
                keep += 1
            keep = max(keep, 1)
            header, body, widths = header[:keep + 1], [r[:keep + 1] for r in body], \
                widths[:keep + 1]
            shown_now = keep
        else:
            shown_now = len(shown)
    else:
        shown_now = len(shown)
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    rule = "  ".join("-" * w for w in widths)
    title = (f"{schedule.algorithm} {schedule.collective}: world_size={n}, "
             f"{plural(schedule.num_chunks, 'chunk')} per rank, {plural(schedule.num_steps, 'step')}")
    if ranks is not None:
        title += f"; ranks {_ranges(shown)}"
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
    if shown_now < len(shown):
        nxt = f"{shown_now}-{min(2 * shown_now, n) - 1}" if shown_now > 1 else str(shown_now)
        out.append(f"… {n - shown_now} of {n} ranks not shown (R{shown_now}-R{n - 1}: "
                   f"{width} columns hold {shown_now}); choose ranks with ranks= "
                   f"(ringccl show --ranks {nxt}) or widen the table (--width)")
    return "\n".join(out)


def _clip(cell: str, room: int) -> str:
    """``cell`` cut to ``room`` characters at an entry boundary (entries "c0 → R1, c1 → R2" or
    chunk lists "has c0 c1"), ending in "… +K" for the K entries left out."""
    if len(cell) <= room:
        return cell
    sep = ", " if ", " in cell else " "
    entries = cell.split(sep)
    for keep in range(len(entries) - 1, 0, -1):
        text = sep.join(entries[:keep]) + f"{sep}… +{len(entries) - keep}"
        if len(text) <= room:
            return text
    return cell[:max(room - 1, 1)] + "…"


def _ranges(ranks: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    out: list[list[int]] = []
    for r in ranks:
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)
