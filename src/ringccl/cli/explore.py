"""``ringccl explore``: a schedule explorer page (one self-contained HTML file, works offline).

``ringccl explore all_reduce -a ring -N 8 -o ring.html`` plays one schedule step by step (see
:mod:`ringccl.views.explore` and :mod:`ringccl.views.explore_html`); ``-a ring,double_binary_tree``
puts two side by side and adds the cost model's crossover chart of the two; ``--model`` writes
only the crossover chart (every registered algorithm unless ``-a`` names some). The machine is
flat (``--alpha``, ``--bandwidth``) or two-level (``--topology NODESxLOCAL`` with ``--intra``,
``--inter``); a two-level machine also lays the ranks out by node.
"""

from __future__ import annotations

import os
import re

import numpy as np

from .. import units
from ..algorithms import bounded, get_algorithm
from ..collectives import get_collective
from ..costmodel.model import _LOCAL_NAMES, _topology_params, walk
from ..costmodel.topology import Flat, TwoLevel, flat, two_level
from ..costmodel.tuning import predict_table, tune
from ..errors import ArgumentError
from ..ops import SUPPORTED_DTYPES, check_dtype
from ..views.explore import MAX_TRANSFERS, explorer_data
from ..views.explore_html import model_figure, require_plotly, write_page
from . import limits
from .common import (HTML_SUFFIXES, Given, add_collective_args, add_flat_link_args,
                     add_node_link_args, check_root_arg, count_arg, emit_json, output_path,
                     positive_int, refuse_unused, schedule_params, size_list)

__all__ = ["register", "parse_topology"]

#: at most this many algorithms side by side (the page splits its width between them)
MAX_SIDE_BY_SIDE = 3

#: why a schedule with more than MAX_TRANSFERS transfers is refused (before it is built)
_PAGE_LIMIT = (f"the explorer draws at most {MAX_TRANSFERS:,} (a 256-rank ring all-reduce has "
               "130,560)")


def parse_topology(text: str) -> tuple[int, int] | None:
    """``--topology``: ``flat`` -> None, ``NODESxLOCAL`` (e.g. ``4x8``) -> (nodes, local).

    Raises:
        ArgumentError: anything else, or a count < 1.
    """
    text = str(text).strip().lower()
    if text == "flat":
        return None
    m = re.fullmatch(r"(\d+)x(\d+)", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ArgumentError(f"--topology {text!r} must be 'flat' or NODESxLOCAL with both >= 1, "
                            "e.g. 4x8 (4 nodes of 8 GPUs)")
    return int(m.group(1)), int(m.group(2))


def _machine(args):
    """The machine of the command line, and the world size it implies."""
    shape = parse_topology(args.topology)
    if shape is None:
        refuse_unused(args, ("intra", "inter"), "on a flat machine (--topology NODESxLOCAL "
                      "takes them)")
        n = args.world_size or 8
        return flat(n, args.alpha, args.bandwidth), n
    nodes, local = shape
    refuse_unused(args, ("alpha", "bandwidth"), f"with --topology {args.topology} (--intra and "
                  "--inter give its links)")
    if args.world_size is not None and args.world_size != nodes * local:
        raise ArgumentError(f"--world-size {args.world_size} differs from --topology "
                            f"{args.topology} = {nodes * local} ranks")
    topo = two_level(nodes, local, intra=args.intra, inter=args.inter)
    return topo, topo.world_size


def _node_of(schedule, topo) -> list[int] | None:
    """Each rank's node: the machine's (two-level), else the schedule's own node shape when its
    builder took one (a ``local_size``-like parameter: consecutive ranks share a node)."""
    if isinstance(topo, TwoLevel):
        return topo.node_of.tolist()
    local = next((schedule.params[k] for k in _LOCAL_NAMES if k in schedule.params), None)
    if isinstance(local, int) and 1 <= local < schedule.world_size:
        return (np.arange(schedule.world_size) // local).tolist()
    return None


def _step_costs(schedule, nbytes: float, topo, gamma: float):
    """Per-step cost dicts for the page, each with the kind of the link that pays."""
    result = walk(schedule, nbytes, topo, gamma=gamma)
    names = {s.link for s in result.steps if s.link}
    kind_of = {}
    for link in range(topo.num_links):  # link names -> kinds, for the links that pay only
        name = topo.link_name(link)
        if name in names:
            kind_of[name] = topo.kinds[int(topo.link_kind[link])]
    return [dict(s._asdict(), link_kind=kind_of.get(s.link, "")) for s in result.steps], result


def _model_chart(args, topo, names):
    sizes = args.size
    rows, skipped = predict_table(args.collective, None, sizes, topo, gamma=args.gamma,
                                  algorithms=names, dtype=args.dtype)
    t = tune(args.collective, None, sizes, topo, gamma=args.gamma, algorithms=names)
    algos = list(dict.fromkeys(r["algorithm"] for r in rows))
    by = {(r["algorithm"], r["size"]): r for r in rows}
    size_keys = sorted({r["size"] for r in rows})
    chart = {"world_size": topo.world_size, "sizes": size_keys,
             "seconds": {a: [by[a, s]["time_s"] for s in size_keys] for a in algos},
             "busbw": {a: [by[a, s]["busbw"] for s in size_keys] for a in algos},
             "crossovers": [{"nbytes": c.nbytes, "below": c.below, "above": c.above,
                             "seconds": t.time_at(c.nbytes, c.below)} for c in t.crossovers]}
    title = (f"ringccl model {args.collective}: predicted time and busbw vs size, "
             f"{topo.describe()}")
    return model_figure([chart], title), chart, skipped


def _cmd_explore(args) -> int:
    require_plotly()
    names = args.algorithm.split(",") if args.algorithm else []
    names = [a.strip() for a in names if a.strip()]
    dtype = check_dtype(args.dtype)
    topo, n = _machine(args)
    gamma = args.gamma
    path = args.output or f"explore-{args.collective}.html"
    report = {"path": os.path.abspath(path), "collective": args.collective,
              "machine": topo.describe(), "explorers": [], "model": None}
    explorers, model = [], None
    if args.model:
        refuse_unused(args, ("count",), "with --model (the chart spans --size)")
    elif len(names) < 2:
        refuse_unused(args, ("size",), "without the crossover chart (--model, or two or three "
                      "algorithms in -a)")
    if args.model:
        model, chart, skipped = _model_chart(args, topo, names or None)
        report["model"] = {"algorithms": list(chart["seconds"]),
                           "crossovers": chart["crossovers"], "skipped": skipped}
    else:
        if not names:
            names = [None]  # the collective's default
        if len(names) > MAX_SIDE_BY_SIDE:
            raise ArgumentError(f"--algorithm {args.algorithm!r} names {len(names)} algorithms; "
                                f"the page shows at most {MAX_SIDE_BY_SIDE} side by side (use "
                                "--model to compare more)")
        nbytes = get_collective(args.collective).buffer_count(n, args.count) * dtype.itemsize
        for name in names:
            args.algorithm = name
            params = schedule_params(args)  # sets args.algorithm to the default when None
            check_root_arg(args, params, n)
            # on a node-major two-level machine a builder's node shape follows the machine's
            params = _topology_params(get_algorithm(args.collective, args.algorithm), topo,
                                      params)
            flags = (limits.size_flags(args, value=n) if isinstance(topo, Flat) else
                     limits.size_flags(args, "--topology", args.topology))
            schedule = bounded.build(args.collective, args.algorithm, n, params, flags,
                                     checked=True, limit=MAX_TRANSFERS, why=_PAGE_LIMIT)
            costs, result = _step_costs(schedule, nbytes, topo, gamma)
            explorers.append(explorer_data(schedule, costs, node_of=_node_of(schedule, topo),
                                           machine=topo.describe(), nbytes=nbytes))
            report["explorers"].append({
                "algorithm": schedule.algorithm, "world_size": n, "num_steps": schedule.num_steps,
                "num_chunks": schedule.num_chunks, "layout": explorers[-1]["layout"]["shape"],
                "nbytes": nbytes, "seconds": result.seconds})
        if len(explorers) > 1:
            model, chart, skipped = _model_chart(args, topo, [e["algorithm"] for e in explorers])
            report["model"] = {"algorithms": list(chart["seconds"]),
                               "crossovers": chart["crossovers"], "skipped": skipped}
    what = ("model" if not explorers else " vs ".join(e["algorithm"] for e in explorers))
    size = write_page(path, explorers, model,
                      title=f"ringccl explore: {what} {args.collective}")
    report["bytes"] = size
    if args.json:
        emit_json(report)
    else:
        print(f"wrote {report['path']} ({units.format_size(size)}; self-contained, works "
              "offline): open it in a browser")
    return 0


def register(sub) -> None:
    """Add ``ringccl explore`` to the subparsers ``sub``."""
    p = sub.add_parser(
        "explore", help="write an interactive HTML page that plays a schedule step by step",
        description="One self-contained HTML page (plotly.js inlined: no network needed) that "
        "plays a schedule: ranks laid out by the schedule's shape, each step's transfers as "
        "arrows, every rank's buffer coloured by whose contributions each chunk holds (the "
        "symbolic checker), the step table, and the alpha-beta-gamma cost of each step on the "
        "machine. Two or three algorithms (-a ring,double_binary_tree) are shown side by side "
        "with the cost model's crossover chart; --model writes that chart alone.")
    add_collective_args(p)
    p.set_defaults(algorithm=None)
    p.add_argument("--world-size", "-N", type=positive_int, default=None,
                   help="ranks N (default 8 on a flat machine; NODES x LOCAL with --topology)")
    p.add_argument("--count", "-c", type=count_arg, default=units.count("1Mi"), action=Given,
                   help="elements per rank for the cost: 1M = 10^6, 1Mi = 2^20 (default 1Mi)")
    p.add_argument("--dtype", default="float32", choices=SUPPORTED_DTYPES,
                   help="element type for the cost (default float32)")
    p.add_argument("--topology", default="flat", metavar="flat|NODESxLOCAL",
                   help="flat (default: one port per rank, --alpha, --bandwidth) or a two-level "
                   "machine such as 4x8 (4 nodes of 8 GPUs; --intra, --inter), which also lays "
                   "the ranks out by node")
    add_flat_link_args(p)
    add_node_link_args(p)
    p.add_argument("--model", action="store_true",
                   help="write the cost model's crossover chart only (time and busbw vs size "
                   "per algorithm; every registered one unless --algorithm names some)")
    p.add_argument("--size", "-s", type=size_list, default=size_list("4KiB:1GiB"), action=Given,
                   help="sizes of the crossover chart: 4KiB:1GiB (x2, default), 4KiB:1GiB:4, "
                   "or 1MiB,1GiB; whole bytes (a fractional FACTOR's sizes are rounded down)")
    p.add_argument("--output", "-o", metavar="PAGE.html", default=None,
                   type=output_path(HTML_SUFFIXES, "an HTML page"),
                   help="where to write the page (default explore-COLLECTIVE.html; the path is "
                   "printed)")
    p.set_defaults(func=_cmd_explore)


