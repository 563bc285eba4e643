"""NCCL as it runs: ``ringccl nccl`` (a collective priced as NCCL's tuning would run it, and
why) and the nccl-tests half of ``ringccl fit`` (the network fitted per link level, the
held-out check, the profile)."""

from __future__ import annotations

import numpy as np

from .. import units
from ..collectives import COLLECTIVES as _CONTRACTS
from ..costmodel.nccl import (ALGORITHMS, COLLECTIVES, NCCL_MACHINES, PROTOCOLS,
                              machine_for_device, nccl_machine, price)
from ..costmodel.nccl_fit import (fit_network, held_out_network, load_network_profile,
                                  predict_row)
from ..errors import ArgumentError
from ..views.plot import fit_chart
from .common import (Given, emit_json, name_list, positive_int, refuse_unused, size_list,
                     status, table)

__all__ = ["register_nccl", "nccl_fit_report", "print_nccl_fit", "add_machine_option"]


def add_machine_option(p) -> None:
    """--machine / --nics-per-node: what NCCL's tuning needs that a log does not show."""
    p.add_argument("--machine", choices=sorted(NCCL_MACHINES), action=Given,
                   help="NCCL machine preset (GPU generation, NVLink, NICs, NVLS); default: "
                   "the one the logs' device names (H100 -> dgx-h100, A100 -> dgx-a100, ...)")
    p.add_argument("--nics-per-node", type=positive_int,
                   help="NICs (rails) per node, replacing the preset's")


def _machine(args, rows=None):
    """The machine the options name: --profile, else --machine (default dgx-h100 without
    logs; with logs, None lets the fit take the preset their devices name), with
    --nics-per-node."""
    nics = args.nics_per_node
    if getattr(args, "profile", None):
        # the profile is a whole machine, its preset among its fields: one or the other
        refuse_unused(args, ["machine"], f"with --profile {args.profile} (the profile's "
                      "machine replaces the preset; give one of the two)")
        m = load_network_profile(args.profile)
        return m.replace(nics_per_node=nics) if nics else m
    name = args.machine
    if name is None and rows is None:
        name = "dgx-h100"
    if name is None and nics is not None:
        names = {machine_for_device(r.get("device", "")) for r in rows}
        if len(names) != 1 or None in names:
            raise ArgumentError("--nics-per-node needs --machine: the logs' devices name no "
                                "single preset")
        name = names.pop()
    return None if name is None else nccl_machine(name, nics_per_node=nics)


#: collectives NCCL runs as sends and receives (NCCL_ALGO does not choose for them)
_P2P = ("all_to_all", "send_recv", "scatter", "gather")


def nccl_sizes(text: str) -> list[int]:
    """``--size`` of ``ringccl nccl`` (argparse type): :func:`.common.size_list` in whole bytes
    with nccl-tests' integer FACTOR: a comma list (``1MiB,1GiB``) or LOW:HIGH[:FACTOR] as
    ``-b``, ``-e``, ``-f`` (LOW times FACTOR^k up to HIGH; FACTOR an integer >= 2, default 2,
    so at most 63 sizes); at most :data:`.sizes.MAX_SIZES` sizes in all.

    Raises:
        argparse.ArgumentTypeError: as :func:`.common.size_list` (naming ``text``).
    """
    return size_list(text, whole_bytes=True, integer_factor=True)


def _bus_factor(row: dict) -> float:
    """busbw / algbw of a row, as nccl-tests: ringccl's collectives' own factor
    (scatter, gather: (n-1)/n), 1 for sendrecv."""
    if row["collective"] == "send_recv":
        return 1.0
    return _CONTRACTS[row["collective"]].bus_factor(row["world_size"])


def nccl_fit_report(rows: list[dict], args) -> dict:
    """The fit, held-out check and profile of nccl-tests rows, as JSON-ready data."""
    placement = None if args.placement == "any" else args.placement
    machine = _machine(args, rows)
    with status("fitting NCCL's network to the nccl-tests logs …"):
        net = fit_network(rows, machine, placement)
        held = held_out_network(rows, machine, placement)
    profile = net.profile(held)
    main = net.levels.get("inter") or net.levels["intra"]
    logs = {}
    for name, points in held.logs.items():
        logs[name] = [dict(zip(("size", "measured_s", "predicted_s", "relative_error",
                                "choice"), p)) for p in points]
    # what the logs' reading left out and why (ringccl.bench.nccl_tests), and which logs have
    # too few sizes to hold any out
    notes = list(dict.fromkeys(n for r in rows for n in r.get("log_notes", ())))
    notes += [f"no held-out check for {name}: {why}" for name, why in held.skipped.items()]
    return {"backend": "nccl", "source": "nccl-tests", "fit": main.fit.to_json(),
            "levels": profile["levels"], "profile": profile, "notes": notes,
            "held_out": {"method": "every log's even-numbered sizes fit, odd-numbered predicted",
                         "median_abs_error": held.median_error(args.min_size),
                         "min_size": args.min_size,
                         # over the sizes --min-size keeps, as the median above
                         "per_log_median_abs_error": held.per_log_median(args.min_size),
                         "reason": held.reason or None, "not_held_out": dict(held.skipped),
                         # what the held-out fit kept at the preset: its errors do not check it
                         "rests_on_preset": _rests_on_preset(held.fit),
                         "logs": logs},
            "_net": net, "_held": held, "_rows": rows, "_placement": placement}


def print_nccl_fit(report: dict, args) -> None:
    net, held = report["_net"], report["_held"]
    m, prior = net.machine, net.prior
    rows = []
    for level, lf in net.levels.items():
        unit = "per GPU" if level == "intra" else "per NIC"
        rows.append([level, units.format_duration(lf.prior_alpha),
                     units.format_duration(lf.alpha) + _preset(lf, "alpha"),
                     f"{units.format_bandwidth(lf.prior_bandwidth)} {unit}",
                     _fitted_bandwidth(lf, unit),
                     units.format_duration(getattr(m, f"{level}_message"))
                     + _preset(lf, "message"),
                     units.format_duration(getattr(m, f"{level}_epsilon")), len(lf.rows),
                     f"{100 * float(np.median(np.abs(lf.relative_errors()))):.1f}%"])
    table(f"NCCL's network fitted to nccl-tests ({prior.describe()}); alpha: one ring Simple hop",
          ["level", "alpha (preset)", "alpha (fitted)", "bandwidth (preset)",
           "bandwidth (fitted)", "per message", "per call", "rows", "median |error|"], rows)
    for note in dict.fromkeys([n for lf in net.levels.values() for n in lf.notes]
                              + report["notes"]):
        print(f"  note: {note}")
    for name, points in held.logs.items():
        table(f"held out: {name} (predicted from the fit on the other sizes)",
              ["size", "measured (us)", "predicted (us)", "error", "NCCL's choice"],
              [[units.format_size(s), f"{t * 1e6:.1f}", f"{p * 1e6:.1f}", f"{e * 100:+.1f}%", c]
               for s, t, p, e, c in points])
    med = report["held_out"]["median_abs_error"]
    if not held.logs:   # every log too short to hold sizes out: the notes above say which
        value = "n/a (no log has 3 sizes or more)"
    else:   # no held-out size that large: say so rather than print nan%
        value = (f"{100 * med:.1f}%" if np.isfinite(med) else
                 "n/a (no held-out row is that large; lower --min-size)")
    per_log = ", ".join(f"{k.split('/')[-1]} {100 * v:.1f}%" for k, v in
                        report["held_out"]["per_log_median_abs_error"].items() if v is not None)
    print(f"held-out median |error| for sizes >= {units.format_size(args.min_size)}: "
          f"{value} (fit on every log's even-numbered sizes, predict the others)"
          + (f"; per log: {per_log}" if per_log else ""))
    for what in report["held_out"]["rests_on_preset"]:
        print(f"  the prediction rests on the preset's {what}: these logs do not determine it, "
              "so the errors above do not check it" + (
                  " (they are of sizes it does not bound; larger sizes would fit it)"
                  if " bandwidth " in what else ""))
    print()
    if getattr(args, "plot", None):
        _plot_fit(report, args.plot)
        print(f"chart written to {args.plot}")


def _preset(lf, what: str) -> str:
    """" (preset, not fitted)" where the level's rows did not determine ``what``."""
    return " (preset, not fitted)" if what in lf.held else ""


def _fitted_bandwidth(lf, unit: str) -> str:
    """The fitted bandwidth; across nodes also the node's, what the rows determine (the
    preset's NIC count splits it: ``--nics-per-node``)."""
    text = f"{units.format_bandwidth(lf.bandwidth)} {unit}"
    if lf.bandwidth_per_node is not None:
        text += (f" x {lf.nics} NICs = {units.format_bandwidth(lf.bandwidth_per_node)} "
                 "per node")
    return text + _preset(lf, "bandwidth")


def _rests_on_preset(net) -> list[str]:
    """What a fit's predictions take from the preset, the rows not determining it ("inter
    bandwidth (48.00 GB/s per NIC)")."""
    names = {"alpha": "alpha", "bandwidth": "bandwidth", "message": "per-message post"}
    out = []
    for level, lf in net.levels.items():
        for what in lf.held:
            value = (units.format_bandwidth(lf.bandwidth) + (" per GPU" if level == "intra"
                                                             else " per NIC")
                     if what == "bandwidth" else
                     units.format_duration(lf.alpha if what == "alpha" else lf.message))
            out.append(f"{level} {names[what]} ({value})")
    return out


def _plot_fit(report: dict, path: str) -> None:
    """Measured busbw and the held-out fit's (the model that did not see the squares)."""
    held = report["_held"]
    m = held.fit.machine
    charts = []
    for name in held.logs:
        part = sorted((r for r in report["_rows"] if r.get("file") == name
                       and (report["_placement"] in (None, r["placement"]))),
                      key=lambda r: r["size"])
        test = {s for s, *_ in held.logs[name]}
        factor = _bus_factor(part[0]) if part else 1.0
        charts.append({"name": f"{name.split('/')[-1]} ({part[0]['collective']}, "
                               f"{part[0]['world_size']} ranks)" if part else name,
                       "sizes": [r["size"] for r in part],
                       "measured": [r["busbw"] for r in part],
                       "predicted": [r["size"] / predict_row(m, r).seconds * factor
                                     for r in part],
                       "held_out": [r["size"] in test for r in part]})
    fit_chart(charts, path, title=f"nccl-tests busbw, measured and fitted on the filled points "
              f"({m.name})")


def _cmd_nccl(args) -> int:
    if args.ranks_per_node * args.nodes < 2:
        raise ArgumentError(f"--ranks-per-node {args.ranks_per_node} x --nodes {args.nodes} = 1 "
                            "rank: a collective over one rank moves nothing to price; give at "
                            "least 2 ranks")
    if args.collective in _P2P:
        refuse_unused(args, ["algorithm"], f"on {args.collective}: NCCL_ALGO does not apply to "
                      f"point-to-point collectives ({', '.join(_P2P)}), which NCCL runs as "
                      "sends and receives (--protocol does)")
    m = _machine(args)
    rows = []
    for size in args.size:
        c = price(args.collective, size, args.ranks_per_node, args.nodes, m, rails=args.rails,
                  algorithms=args.algorithm, protocols=args.protocol)
        factor = _bus_factor({"collective": args.collective, "world_size": c.world_size})
        rows.append({"size": size, "seconds": c.seconds, "algorithm": c.algorithm,
                     "protocol": c.protocol, "latency_s": c.latency_s,
                     "bandwidth_s": c.bandwidth_s, "algbw": c.algbw,
                     "busbw": c.algbw * factor, "link_bytes": c.link_bytes,
                     "candidates": [{"algorithm": a, "protocol": p, "seconds": t}
                                    for a, p, t in c.candidates],
                     "explain": c.explain()})
    report = {"collective": args.collective, "machine": m.to_dict(),
              "ranks_per_node": args.ranks_per_node, "nodes": args.nodes, "rows": rows}
    if args.json:
        emit_json(report)
        return 0
    table(f"{args.collective} as NCCL runs it: {args.ranks_per_node} x {args.nodes} ranks on "
          f"{m.describe()}",
          ["size", "algorithm", "protocol", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
           "GPU fabric bytes", "NIC bytes"],
          [[units.format_size(r["size"]), r["algorithm"], r["protocol"],
            f"{r['seconds'] * 1e6:.2f}", f"{r['algbw'] / 1e9:.2f}", f"{r['busbw'] / 1e9:.2f}",
            units.format_size(r["link_bytes"]["intra"]),
            units.format_size(r["link_bytes"]["inter"])] for r in rows])
    for r in rows[-1:] if not args.explain else rows:
        print("  " + r["explain"])
    return 0


def register_nccl(sub) -> None:
    """``ringccl nccl``."""
    p = sub.add_parser(
        "nccl", help="price a collective as NCCL's tuning would run it (algorithm, protocol)",
        description="Time, algorithm and protocol of one collective as NCCL's tuning model "
        "(NCCL 2.27 src/graph/tuning.cc) picks them on a placement: ranks per node x nodes, "
        "NICs per node; bytes on each link level; why.")
    p.add_argument("collective", choices=list(COLLECTIVES))
    p.add_argument("--size", "-s", type=nccl_sizes, default=nccl_sizes("8B:8GiB:8"),
                   help="nccl-tests' size in whole bytes: 1MiB,1GiB or a range LOW:HIGH:FACTOR "
                   "(as -b, -e, -f: an integer factor >= 2), 8B:8GiB:8 (default)")
    p.add_argument("--ranks-per-node", type=positive_int, default=8)
    p.add_argument("--nodes", type=positive_int, default=1)
    p.add_argument("--rails", type=positive_int,
                   help="NICs per node the group uses (default: its share of the node's)")
    add_machine_option(p)
    p.add_argument("--profile", help="a network profile (`ringccl fit --json` on nccl-tests "
                   "logs) instead of --machine")
    p.add_argument("--algorithm", "-a", type=name_list, action=Given,
                   help=f"as NCCL_ALGO: the algorithms allowed ({', '.join(ALGORITHMS)}; "
                   "NCCL's NVLSTree, CollnetDirect spellings too), or ^ring,tree: all but "
                   "those; not on point-to-point collectives")
    p.add_argument("--protocol", type=name_list,
                   help=f"as NCCL_PROTO: the protocols allowed ({', '.join(PROTOCOLS)}), or "
                   "^LL: all but those")
    p.add_argument("--explain", action="store_true", help="say why, for every size")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_nccl)
