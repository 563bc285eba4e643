"""Commands about schedules themselves: ``algorithms`` (the registry with its cost formulas),
``show`` (one schedule's step table, trace, MSCCL XML) and ``compare`` (every algorithm of a
collective side by side: steps, bytes, optionally float32 error)."""

from __future__ import annotations

import inspect
import json
import os
import sys

import numpy as np

from .. import units
from ..args import JSON_SUFFIXES
from ..algorithms import REGISTRY, algorithms, bounded, get_algorithm
from ..algorithms.registry import default_algorithm
from ..caches import clear_caches
from ..collectives import COLLECTIVES, get_collective
from ..errors import ArgumentError
from ..ops import SUPPORTED_DTYPES, check_dtype
from ..sim.memory import check_memory
from ..sim.precision import output_errors
from ..views.interop import to_chrome_trace, to_msccl_xml
from ..views.show import parse_ranks, step_rows, step_table
from . import limits
from .common import (add_collective_args, check_root_arg, count_arg, emit_json, nonnegative_int,
                     output_path, positive_int, schedule_params, status, table, takes_root)

__all__ = ["register_algorithms", "register_show", "register_compare"]


def _cmd_show(args) -> int:
    params = schedule_params(args)
    check_root_arg(args, params, args.world_size)
    schedule = bounded.build(args.collective, args.algorithm, args.world_size, params,
                             limits.size_flags(args), checked=True)
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(to_chrome_trace(schedule), f)
        print(f"wrote {args.trace}: Chrome/Perfetto trace, one track per rank "
              "(open in https://ui.perfetto.dev)", file=sys.stderr)
    if args.msccl_xml:
        with open(args.msccl_xml, "w") as f:
            f.write(to_msccl_xml(schedule) + "\n")
        print(f"wrote {args.msccl_xml}: MSCCL XML", file=sys.stderr)
    ranks = None if args.ranks is None else parse_ranks(args.ranks, args.world_size)
    if args.json:  # data, not a view: every rank (or those asked for), never cut to a width
        emit_json({"collective": schedule.collective, "algorithm": schedule.algorithm,
                   "world_size": schedule.world_size, "num_chunks": schedule.num_chunks,
                   "num_steps": schedule.num_steps, "params": schedule.params,
                   "ranks": ranks if ranks is not None else list(range(args.world_size)),
                   "max_steps": args.max_steps,
                   "steps_not_shown": max(0, schedule.num_steps - args.max_steps),
                   "rows": step_rows(schedule, args.max_steps, ranks)})
    else:
        width = _show_width() if args.width is None else (args.width or None)
        print(step_table(schedule, max_steps=args.max_steps, ranks=ranks, width=width))
    return 0


#: ``show`` never cuts a table narrower than this by default: the N=4 ring all-reduce table (89 columns)
#: and up to 8 ranks stay whole on an 80-column terminal (it wraps them, as before); only wide
#: tables (``-N 1000``: 15,000-character lines) are cut to the ranks that fit
_MIN_WIDTH = 160


def _show_width() -> int:
    """``show``'s default line width: $COLUMNS or the terminal's (at least :data:`_MIN_WIDTH`),
    else 200 (piped, a log)."""
    if os.environ.get("COLUMNS", "").isdigit() and int(os.environ["COLUMNS"]) > 0:
        return max(int(os.environ["COLUMNS"]), _MIN_WIDTH)
    try:
        columns = os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):  # not a terminal, or captured
        return 200
    return max(columns, _MIN_WIDTH) if columns > 0 else 200


def _builder_params(algo, args) -> dict:
    """Keyword arguments the CLI passes to a builder: ``root`` if it takes one and it is set."""
    params = {}
    if getattr(args, "root", None) is not None and "root" in inspect.signature(
            algo.builder).parameters:
        params["root"] = args.root
    return params


#: why a precision cell is empty
_EXACT = "exact: integer dtype"
_LAYOUT = ("the simulator's outputs are not the collective's output chunks (reduce: the other "
           "ranks keep their inputs), so only the max abs error is measured")


def _compare_rows(collective: str, world_size: int, count: int, dtype, args) -> list[dict]:
    spec = get_collective(collective)
    buffer_count = spec.buffer_count(world_size, count)
    k = buffer_count * dtype.itemsize
    x = None
    if args.precision and dtype.kind == "f":
        # N(0, 1) rounded to --dtype: the float64 sum of these rounded values is the reference
        x = np.random.default_rng(args.seed).standard_normal((world_size, count)).astype(dtype)
    rows = []
    for name in algorithms(collective):
        algo = get_algorithm(collective, name)
        schedule = bounded.build(collective, name, world_size, _builder_params(algo, args),
                                 limits.size_flags(args))
        sent = schedule.bytes_sent(buffer_count, dtype.itemsize)
        # Python ints: sent + received may pass int64 where each alone does not
        through = sent.astype(object) + schedule.bytes_received(buffer_count, dtype.itemsize)
        row = {"algorithm": name, "steps": schedule.num_steps, "steps_formula": algo.steps_formula,
               "bytes_sent_max": int(sent.max()),
               "bytes_sent_per_buffer": float(sent.max()) / k if k else 0.0,
               "bytes_through_max": int(through.max()),
               "busiest_rank": int(np.argmax(through))}
        if x is not None:
            row["max_abs_error"], row["max_rel_error"] = output_errors(collective, schedule, x)
            if not np.isfinite(row["max_rel_error"]):
                row["max_rel_error"], row["error_note"] = None, _LAYOUT
        elif args.precision:  # integer and bool sums are exact in every order
            row["max_abs_error"] = row["max_rel_error"] = None
            row["error_note"] = _EXACT
        rows.append(row)
        # each schedule is needed once: the memo would hold every algorithm's at once, and the
        # next one's memory bound (bounded.build) is what is available after them
        del schedule
        clear_caches()
    return rows


def _error_cell(value, note: str | None) -> str:
    if value is not None:
        return f"{value:.3g}"
    return "n/a (exact: integer dtype)" if note == _EXACT else "n/a (see below)"


def _cmd_compare(args) -> int:
    dtype = check_dtype(args.dtype)
    if args.root is not None and not any(takes_root(args.collective, a)
                                         for a in algorithms(args.collective)):
        raise ArgumentError(f"root={args.root!r} does not apply to {args.collective}: none of "
                            "its algorithms has a root")
    if args.precision:  # N(0, 1) inputs, their float64 reference and a simulation at a time
        check_memory(args.collective, args.world_size, args.count,
                     max(8, dtype.itemsize), names=("-c/--count", "-N/--world-size"))
    what = "simulating every algorithm …" if args.precision else "building schedules …"
    with status(what):
        rows = _compare_rows(args.collective, args.world_size, args.count, dtype, args)
    spec = get_collective(args.collective)
    k = spec.buffer_count(args.world_size, args.count) * dtype.itemsize
    if args.json:
        emit_json({"collective": args.collective, "world_size": args.world_size,
                   "count": args.count, "dtype": dtype.name, "buffer_bytes": k,
                   "rows": rows})
        return 0
    headers = ["algorithm", "steps", "bytes sent/rank (max)", "× buffer",
               "through busiest rank (sent+recv)"]
    if args.precision:
        headers += ["max abs error", "max rel error"]
    body = []
    for r in rows:
        line = [r["algorithm"], f"{r['steps']:,}",
                units.format_size(r["bytes_sent_max"]), f"{r['bytes_sent_per_buffer']:.3f}",
                f"{units.format_size(r['bytes_through_max'])} (R{r['busiest_rank']})"]
        if args.precision:
            note = r.get("error_note")
            line += [_error_cell(r["max_abs_error"], note), _error_cell(r["max_rel_error"], note)]
        body.append(line)
    table(f"{args.collective} on {args.world_size} ranks, {args.count:,} × {dtype.name} per "
          f"rank (buffer {units.format_size(k)}); bytes counted from each schedule",
          headers, body)
    print("step and byte formulas: `ringccl algorithms " + args.collective + "`")
    if args.precision and dtype.kind != "f":
        print(f"errors: n/a: {dtype.name} sums are exact whatever the order, so every algorithm "
              "gives the same bits (use a floating --dtype to compare rounding)")
    elif args.precision:
        print(f"errors: {dtype.name} inputs ~ N(0, 1) (seed {args.seed}) against their float64 "
              "sum; relative error is per element (large where the sum nearly cancels); each "
              "algorithm adds in its own order"
              + ("" if spec.reduces else "; a copy collective moves values unchanged (0)")
              + ".")
        if any(r.get("error_note") == _LAYOUT for r in rows):
            print(f"max rel error n/a: {_LAYOUT}.")
    return 0


def _cmd_algorithms(args) -> int:
    defaults = {c: default_algorithm(c) for c in COLLECTIVES if algorithms(c)}
    rows = [{"collective": a.collective, "algorithm": a.name,
             "default": defaults.get(a.collective) == a.name, "steps": a.steps_formula,
             "bytes_sent_per_rank": a.bytes_formula, "reference": a.reference}
            for a in REGISTRY.values()
            if args.collective is None or a.collective == args.collective]
    if args.json:
        emit_json(rows)
    else:
        table("algorithms (N = world_size, M = buffer bytes; * = the default when no "
              "--algorithm is given)",
               ["collective", "algorithm", "steps", "bytes sent per rank", "reference"],
               [[r["collective"], r["algorithm"] + (" *" if r["default"] else ""), r["steps"],
                 r["bytes_sent_per_rank"], r["reference"]] for r in rows])
    return 0


def register_show(sub) -> None:
    """``ringccl show``."""
    p = sub.add_parser("show", help="print a schedule's step table")
    add_collective_args(p)
    p.add_argument("--world-size", "-N", type=positive_int, default=4,
                   help="ranks N (default 4: one column per rank fits a terminal)")
    p.add_argument("--max-steps", type=positive_int, default=200,
                   help="print at most this many steps (default 200; with --json too, which "
                   "says how many it left out in steps_not_shown)")
    p.add_argument("--ranks", metavar="LIST",
                   help="rank columns to print: ranks and ranges, e.g. 0-7 or 0,5,9-12 (default: "
                   "as many as fit the width; a last line says how many were left out)")
    p.add_argument("--width", type=nonnegative_int, default=None,
                   help="characters per line (default: $COLUMNS or the terminal's, at least 160; "
                   "200 when piped; 0: no limit); longer cells end in '… +K'")
    p.add_argument("--trace", metavar="OUT.json", type=output_path(JSON_SUFFIXES, "a JSON trace"),
                   help="also write a Chrome/Perfetto trace (one track per rank)")
    p.add_argument("--msccl-xml", metavar="OUT.xml", type=output_path((".xml",), "MSCCL XML"),
                   help="also write the schedule as MSCCL XML")
    p.set_defaults(func=_cmd_show)


def register_compare(sub) -> None:
    """``ringccl compare``."""
    p = sub.add_parser("compare", help="every algorithm of a collective side by side")
    p.add_argument("collective", choices=list(COLLECTIVES), help="collective to compare")
    p.add_argument("--world-size", "-N", type=positive_int, default=8, help="ranks N (default 8)")
    p.add_argument("--count", "-c", type=count_arg, default=units.count("1Mi"),
                   help="elements per rank: 1M = 10^6, 1Mi = 2^20 (default 1Mi)")
    p.add_argument("--dtype", default="float32", choices=SUPPORTED_DTYPES,
                   help="element type for the byte counts (default float32)")
    p.add_argument("--root", type=int, default=None, help="root rank of rooted collectives")
    p.add_argument("--precision", action="store_true",
                   help="simulate each algorithm on the same random --dtype inputs and report "
                   "its error against a float64 reference (n/a for integer dtypes, whose sums "
                   "are exact; needs N × count × itemsize bytes per array)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="random seed (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=_cmd_compare)


def register_algorithms(sub) -> None:
    """``ringccl algorithms``."""
    p = sub.add_parser("algorithms", help="list collectives × algorithms with their costs")
    p.add_argument("collective", nargs="?", choices=list(COLLECTIVES))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_algorithms)
