"""The cost-model commands: ``model`` (predicted time, algbw and busbw per algorithm on a
machine), ``tune`` (the fastest algorithm per size, crossovers, a gradient bucket size) and
``fit`` (α, β, γ fitted to ``ringccl bench --json`` rows, held-out check, predictions)."""

from __future__ import annotations

import numpy as np

from .. import units
from ..algorithms import REGISTRY, bounded
from ..bench import LOCAL_REDUCE
from ..collectives import COLLECTIVES, get_collective
from ..costmodel.buckets import (DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, best_bucket_size,
                                 bucket_plan, gpt2_gradient_sizes)
from ..costmodel.fit import (PARAMS, by_backend, fit_rows, held_out, load_rows, sweep_key,
                             sweep_label)
from ..costmodel.nccl_fit import nccl_tests_rows
from ..costmodel.presets import LINK_CLASSES, link_class, worked_examples
from ..costmodel.topology import flat, two_level
from ..costmodel.tuning import predict_table, tune
from ..errors import ArgumentError
from ..ops import SUPPORTED_DTYPES
from ..views.plot import model_chart
from .network import add_machine_option, nccl_fit_report, print_nccl_fit
from .common import (IMAGE_SUFFIXES, Given, GivenFlag, add_flat_link_args, add_node_link_args,
                     emit_json, int_list, name_list, nonnegative, output_path, positive_int,
                     refuse_unused, size_arg, size_list, status, table)

__all__ = ["register_model", "register_tune", "register_fit"]


def _ms(seconds: float) -> str:
    """Milliseconds as the worked examples print them: 2 decimals, 3 below 1 ms."""
    ms = seconds * 1e3
    return f"{ms:.2f}" if abs(ms) >= 1 else f"{ms:.3f}"


def _machines(args) -> list:
    """The machines the command line describes: one per world size (flat) or one two-level.
    ``--link NAME``: a flat machine of that measured link class (its α, bandwidth and γ
    replace --alpha, --bandwidth and --gamma)."""
    if getattr(args, "link", None):
        if args.nodes is not None:
            raise ArgumentError(f"--link {args.link} describes a flat machine; it cannot be "
                                "combined with --nodes")
        refuse_unused(args, _FLAT_LINK + _TWO_LEVEL,
                      f"with --link {args.link} (its fitted alpha, bandwidth and gamma)")
        link = link_class(args.link)
        args.alpha, args.bandwidth, args.gamma = link.alpha, link.bandwidth, link.gamma
        return [link.flat(n) for n in (args.world_size or [2, 4])]
    if args.nodes is not None:
        refuse_unused(args, _FLAT_LINK[:2], "with --nodes (a two-level machine: --intra, "
                      "--inter)")
        topo = two_level(args.nodes, args.local, intra=args.intra, inter=args.inter,
                         nics_per_node=args.nics_per_node,
                         oversubscription=args.oversubscription, placement=args.placement)
        if args.world_size and args.world_size != [topo.world_size]:
            raise ArgumentError(f"--world-size {args.world_size} differs from --nodes x --local "
                                f"= {topo.world_size}")
        return [topo]
    refuse_unused(args, _TWO_LEVEL, "without --nodes (a flat machine: --alpha, --bandwidth)")
    return [flat(n, args.alpha, args.bandwidth) for n in (args.world_size or [8])]


#: the flat machine's link flags (dests), and the two-level machine's
_FLAT_LINK = ("alpha", "bandwidth", "gamma")
_TWO_LEVEL = ("local", "intra", "inter", "nics_per_node", "oversubscription", "placement")


def _link_bytes_text(max_link_bytes: dict) -> str:
    return ", ".join(f"{kind} {units.format_size(b)}" for kind, b in max_link_bytes.items()
                     if kind.endswith("out")) or "-"


def _size_flags(args) -> tuple[str, str]:
    """The flags that size the machines (:func:`.limits.size_flags`'s form, which
    :func:`ringccl.algorithms.bounded.bounded` names)."""
    if args.nodes is not None:
        return f"--nodes {args.nodes} --local {args.local}", "--nodes or --local"
    sizes = ",".join(str(n) for n in args.world_size or ())
    return (f"-N/--world-size {sizes}" if sizes else "the default world size",
            "-N/--world-size")


#: what builds schedules in model and tune (bounded by ringccl.algorithms.bounded.bounded)
_WALKS = "the cost model's walk of an algorithm's schedule"


def _model_report(args) -> dict:
    tables = []
    for topo in _machines(args):
        with bounded.bounded(_size_flags(args), _WALKS):
            rows, skipped = predict_table(args.collective, None, args.size, topo,
                                          gamma=args.gamma, algorithms=args.algorithm,
                                          dtype=args.dtype)
            t = tune(args.collective, None, args.size, topo, gamma=args.gamma,
                     algorithms=args.algorithm)
        crossovers = [{"nbytes": c.nbytes, "below": c.below, "above": c.above,
                       "seconds": t.time_at(c.nbytes, c.below)} for c in t.crossovers]
        tables.append({"world_size": topo.world_size, "machine": topo.describe(), "rows": rows,
                       "skipped": skipped, "crossovers": crossovers})
    return {"collective": args.collective, "tables": tables}


def _gbps(rate: float) -> str:
    """A rate in GB/s, or n/a where it is no number (a 0 s prediction)."""
    return f"{rate / 1e9:.3f}" if np.isfinite(rate) else "n/a"


def _print_model(report: dict) -> None:
    headers = ["size", "count", "type", "algorithm", "time (us)", "algbw (GB/s)",
               "busbw (GB/s)", "latency", "busiest link out (bytes)", "steps", ""]
    for t in report["tables"]:
        # world_size 1 moves nothing: 0 s, so algbw = size/0 and busbw = 0·inf are no numbers
        rows = [[units.format_size(r["size"]), r["count"], r["type"], r["algorithm"],
                 f"{r['time_s'] * 1e6:.2f}", _gbps(r["algbw"]), _gbps(r["busbw"]),
                 f"{100 * r['latency_fraction']:.1f}%" if r["time_s"] > 0 else "n/a",
                 _link_bytes_text(r["max_link_bytes"]),
                 r["num_steps"], "fastest" if r["best"] and r["time_s"] > 0 else ""]
                for r in t["rows"]]
        table(f"predicted {report['collective']} (nccl-tests columns), {t['machine']}",
              headers, rows)
        if t["world_size"] == 1:
            print("  world_size 1: nothing to communicate (time 0 s; algbw, busbw and the "
                  "latency share n/a)")
        for c in t["crossovers"]:
            print(f"  crossover: {c['below']} -> {c['above']} at "
                  f"{units.format_size(c['nbytes'])} ({c['seconds'] * 1e6:.2f} us)")
        for name, why in t["skipped"].items():
            print(f"  skipped {name}: {why}")
        print()


def _plot_model(report: dict, path: str) -> None:
    charts = []
    for t in report["tables"]:
        algos = list(dict.fromkeys(r["algorithm"] for r in t["rows"]))
        sizes = sorted({r["size"] for r in t["rows"]})
        by = {(r["algorithm"], r["size"]): r for r in t["rows"]}
        charts.append({"world_size": t["world_size"], "sizes": sizes,
                       "seconds": {a: [by[a, s]["time_s"] for s in sizes] for a in algos},
                       "busbw": {a: [by[a, s]["busbw"] for s in sizes] for a in algos},
                       "crossovers": t["crossovers"]})
    machines = "; ".join(dict.fromkeys(t["machine"].split(":")[0] for t in report["tables"]))
    model_chart(charts, path, title=f"ringccl model {report['collective']} ({machines}; "
                f"{report['tables'][0]['machine'].split(', ', 1)[-1]})")


#: the public sources of the --preset worked-examples formulas
RING_SOURCE = "Patarasuk & Yuan, JPDC 69(2) 2009 (bandwidth-optimal ring all-reduce)"
HIERARCHICAL_SOURCE = "Jia et al., arXiv:1807.11205 2018 (hierarchical all-reduce)"


def _print_examples(fig: dict) -> None:
    print(f"worked examples of the alpha-beta model, recomputed by ringccl; ring: {RING_SOURCE}; "
          f"two-level: {HIERARCHICAL_SOURCE}\n")
    table("ring all_reduce bytes sent per rank (K = one rank's buffer)",
           ["N", "bytes per rank", "vs naive (N-1)K", "vs lower bound 2K"],
           [[r["world_size"], f"{r['bytes_per_rank_K']:.3f} K", f"{r['vs_direct']:.3f} x",
             f"{r['vs_lower_bound']:.3f} x"] for r in fig["per_rank_bytes"]])
    print()
    table("ring all_reduce, alpha = 5 us, 300 GB/s, float32: latency and bandwidth terms",
           ["ranks", "elements", "size", "total (ms)", "latency (ms)", "latency share",
            "bandwidth (ms)"],
           [[r["world_size"], units.format_count(r["count"]), units.format_size(r["nbytes"]),
             _ms(r["seconds"]), _ms(r["latency_seconds"]), f"{100 * r['latency_fraction']:.1f}%",
             _ms(r["bandwidth_seconds"])] for r in fig["ring_latency"]])
    print()
    rows = fig["closed_forms"]
    walked = list(rows[0]["ringccl"])
    table("all_reduce of 100 MiB, 50 GB/s, 5 us (ms); closed forms master 2(P-1)(a+M/B), "
          "ring 2(P-1)a+2(P-1)/P*M/B, tree 2log2(P)a+2M/B | ringccl's walked schedules",
           ["P", "master", "ring", "tree", "|"] + [f"ringccl {a}" for a in walked],
           [[r["world_size"]] + [_ms(r["closed_form"][a]) for a in ("master", "ring", "tree")]
            + ["|"] + ["-" if r["ringccl"][a] is None else _ms(r["ringccl"][a]) for a in walked]
            for r in rows])
    missing = [a for a in walked if rows[0]["ringccl"][a] is None]
    if missing:
        print(f"  (-: {', '.join(missing)} not registered in this build)")
    print()
    h = fig["hierarchical"]
    hw = h["hierarchical_walked"]
    table(f"flat ring vs hierarchical all_reduce of {units.format_size(h['nbytes'])} on "
          f"{h['nodes']} nodes x "
          f"{h['local']} GPUs, NVLink {units.format_bandwidth(h['nvlink_bandwidth'])}, "
          f"{units.format_bandwidth(h['nic_bandwidth'])} per NIC, alpha 5 us",
           ["algorithm", "time (ms)", "bytes out of the busiest NIC", "NICs used per node"],
           [["flat ring (walked)", _ms(h["flat_ring"]["seconds"]),
             units.format_size(h["flat_ring"]["nic_bytes"]), h["flat_ring"]["nics_used_per_node"]],
            ["hierarchical (formula)", _ms(h["hierarchical_formula"]["seconds"]),
             units.format_size(h["hierarchical_formula"]["nic_bytes"]),
             h["hierarchical_formula"]["nics_used_per_node"]]]
          + ([["hierarchical (walked)", _ms(hw["seconds"]), units.format_size(hw["nic_bytes"]),
               hw["nics_used_per_node"]]] if hw else []))
    print(f"  speed-up of hierarchical over flat ring: {h['speedup_formula']:.2f}x (formula)"
          + (f", {hw['speedup']:.2f}x (walked)" if hw else "")
          + f"; bytes per NIC {h['nic_bytes_ratio']:.2f}x fewer")


#: ``model`` options the worked examples do not read (their machines are fixed)
_NOT_WITH_PRESET = ("collective", "algorithm", "size", "dtype", "world_size", "link", "nodes",
                    "plot")


def _refuse_with_preset(args) -> None:
    """Refuse the options ``--preset worked-examples`` would ignore, naming them."""
    flags = {"collective": f"the collective {args.collective}", "algorithm": "--algorithm",
             "size": "--size",
             "dtype": "--dtype", "world_size": "--world-size", "link": "--link",
             "nodes": "--nodes", "plot": "--plot"}
    given = [flags[d] for d in _NOT_WITH_PRESET if getattr(args, d) != args.model_defaults[d]]
    given += list((getattr(args, "given", None) or {}).values())
    if given:
        raise ArgumentError(f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no "
                            "effect with --preset worked-examples (its machines and sizes are "
                            "fixed; --json is the one option it takes)")


def _cmd_model(args) -> int:
    if args.preset == "worked-examples":
        _refuse_with_preset(args)
        with status("recomputing the worked examples …"):
            fig = worked_examples()
        if args.json:
            emit_json(fig)
        else:
            _print_examples(fig)
        return 0
    report = _model_report(args)
    if args.plot:
        _plot_model(report, args.plot)
    if args.json:
        emit_json(report)
    else:
        _print_model(report)
        if args.plot:
            print(f"chart written to {args.plot}")
    return 0


def _bucket_report(args, topo) -> dict | None:
    if args.bucket_model is None and args.tensor_sizes is None:
        refuse_unused(args, ("backward", "bucket_algorithm"),
                      "without --bucket-model or --tensor-sizes (the gradients to bucket)")
        return None
    if args.bucket_model is not None and args.tensor_sizes is not None:
        raise ArgumentError(f"--bucket-model {args.bucket_model} and --tensor-sizes both give "
                            "the gradients to bucket: pass one")
    sizes = (gpt2_gradient_sizes(args.bucket_model) if args.tensor_sizes is None
             else args.tensor_sizes)
    kw = dict(collective=args.collective, algorithm=args.bucket_algorithm, gamma=args.gamma,
              backward_seconds=args.backward)
    best, plans = best_bucket_size(sizes, None, topo, **kw)
    ddp = bucket_plan(sizes, DDP_BUCKET_BYTES, None, topo,
                      first_bucket_bytes=DDP_FIRST_BUCKET_BYTES, **kw)
    row = (lambda label, p: {"plan": label, "bucket_bytes": p.bucket_bytes,
                             "buckets": p.num_buckets, "comm_s": p.comm_seconds,
                             "finish_s": p.finish_seconds, "exposed_s": p.exposed_seconds})
    rows = [row("one by one" if p.bucket_bytes == 0 else "", p) for p in plans]
    rows.append(row("DDP default (1 MiB first, 25 MiB)", ddp))
    return {"model": args.bucket_model or "tensor sizes", "tensors": len(sizes),
            "total_bytes": int(sum(sizes)), "backward_s": args.backward,
            "algorithm": args.bucket_algorithm, "best_bucket_bytes": best.bucket_bytes,
            "rows": rows}


def _cmd_tune(args) -> int:
    topo = _machines(args)
    if len(topo) != 1:
        given = (f"--world-size {','.join(map(str, args.world_size))}" if args.world_size else
                 f"--link {args.link} without --world-size (it models {len(topo)} world sizes: "
                 f"{', '.join(str(t.world_size) for t in topo)})")
        raise ArgumentError(f"tune takes one world size, got {given}; pass one -N/--world-size")
    topo = topo[0]
    with bounded.bounded(_size_flags(args), _WALKS):
        t = tune(args.collective, None, args.size, topo, gamma=args.gamma,
                 algorithms=args.algorithm)
        buckets = _bucket_report(args, topo)
    ranges = [{"algorithm": r.algorithm, "low": r.low, "high": r.high,
               "seconds_low": t.time_at(r.low, r.algorithm),
               "seconds_high": t.time_at(r.high, r.algorithm)} for r in t.ranges]
    report = {"collective": args.collective, "machine": topo.describe(),
              "algorithms": list(t.algorithms), "ranges": ranges,
              "crossovers": [c._asdict() for c in t.crossovers], "skipped": t.skipped,
              "buckets": buckets}
    if args.json:
        emit_json(report)
        return 0
    table(f"fastest {args.collective} algorithm by size, {topo.describe()} "
          f"(compared: {', '.join(t.algorithms)})",
           ["from", "to", "fastest", "time at from", "time at to"],
           [[units.format_size(r["low"]), units.format_size(r["high"]), r["algorithm"],
             units.format_duration(r["seconds_low"]), units.format_duration(r["seconds_high"])]
            for r in ranges])
    for c in t.crossovers:
        print(f"  crossover: {c.below} -> {c.above} at {units.format_size(c.nbytes)} "
              f"({c.nbytes:,.0f} bytes)")
    for name, why in t.skipped.items():
        print(f"  skipped {name}: {why}")
    b = report["buckets"]
    if b:
        print()
        table(f"bucketing {b['model']}: {b['tensors']} tensors, "
              f"{units.format_size(b['total_bytes'])}, backward "
              f"{units.format_duration(b['backward_s'])}, {b['algorithm']} {args.collective}",
               ["bucket size", "buckets", "comm time", "finish", "exposed", ""],
               [[units.format_size(r["bucket_bytes"]) if r["bucket_bytes"] else "0",
                 r["buckets"], units.format_duration(r["comm_s"]),
                 units.format_duration(r["finish_s"]), units.format_duration(r["exposed_s"]),
                 " ".join(x for x in (r["plan"], "best" if r["bucket_bytes"] ==
                                      b["best_bucket_bytes"] and not r["plan"].startswith("DDP")
                                      else "") if x)]
                for r in b["rows"]])
    return 0


def _add_machine_args(p) -> None:
    g = p.add_argument_group("machine (flat by default; --nodes for two-level)")
    g.add_argument("--world-size", "-N", type=int_list, default=None,
                   help="ranks, or a list: 8,64,1024 (flat machine; default 8)")
    add_flat_link_args(g)
    g.add_argument("--link", choices=sorted(LINK_CLASSES),
                   help="a measured link class (flat machine; its fitted alpha, bandwidth and "
                        "gamma replace --alpha/--bandwidth/--gamma; default --world-size 2,4): "
                        "shm = ringccl's shared-memory transport "
                        "(ringccl.costmodel.presets.SHARED_MEMORY)")
    g.add_argument("--nodes", type=positive_int, help="two-level: number of nodes")
    g.add_argument("--local", type=positive_int, default=8, action=Given,
                   help="two-level: GPUs per node")
    add_node_link_args(g)
    g.add_argument("--nics-per-node", type=positive_int, action=Given,
                   help="two-level: default --local")
    g.add_argument("--oversubscription", type=float, default=1.0, action=Given,
                   help="two-level: inter-node fabric oversubscription (>= 1)")
    g.add_argument("--placement", default="node_major", choices=["node_major", "round_robin"],
                   action=Given, help="two-level: rank placement")


def _fmt_param(name: str, value: float) -> str:
    """α and δ in µs, β and γ in ns per byte."""
    if not np.isfinite(value):
        return "-"
    return (f"{value * 1e6:.3f} us" if name in ("alpha", "delta", "epsilon")
            else f"{value * 1e9:.4f} ns/B")


def _print_fit(fit, held, args) -> None:
    names = {"alpha": "α (per step)", "beta": "β (per byte sent)",
             "gamma": "γ (per byte reduced)", "delta": "δ (per local-reduce call)",
             "epsilon": "ε (per call over shm)"}
    rows = []
    # ε (shared-memory rows only) after the four of every fit
    values = [(name, fit.params[i], fit.stderr[i], fit.ci95[i]) for i, name in enumerate(PARAMS)]
    values.append(("epsilon", fit.epsilon, fit.epsilon_stderr, fit.epsilon_ci95))
    for name, value, stderr, (lo, hi) in values:
        if name in ("delta", "epsilon") and name not in fit.free:
            continue
        free = name in fit.free
        rows.append([names[name], _fmt_param(name, value),
                     _fmt_param(name, stderr) if free else "held at 0",
                     f"[{_fmt_param(name, lo)}, {_fmt_param(name, hi)}]"
                     if free and np.isfinite(lo) else "-",
                     f"{1e-9 / value:.3f} GB/s" if name in ("beta", "gamma")
                     and value > 0 else ""])
    table(f"α-β-γ fit, backend {fit.backend or '?'}: {len(fit.rows)} rows, least squares on "
          f"relative error; R² = {fit.r2_log:.4f} (log time), {fit.r2:.4f} (time)",
           ["parameter", "estimate", "std. error", "95% confidence interval", "as a rate"], rows)
    for note in fit.notes:
        print(f"  note: {note}")
    res = []
    for r, p in zip(fit.rows, fit.predicted):
        label = LOCAL_REDUCE if r.get("kind") == LOCAL_REDUCE else sweep_label(sweep_key(r))
        res.append([label, units.format_size(r["size"]), f"{r['time_s'] * 1e6:.1f}",
                    f"{p * 1e6:.1f}", f"{(p / r['time_s'] - 1) * 100:+.1f}%"])
    if args.residuals:
        table("residuals (predicted / measured - 1)",
               ["rows", "size", "measured (us)", "predicted (us)", "error"], res)
    for label, points in held.sweeps.items():
        table(f"held out: {label}, predicted from {held.train}",
               ["size", "measured (us)", "predicted (us)", "error"],
               [[units.format_size(s), f"{m * 1e6:.1f}", f"{p * 1e6:.1f}", f"{e * 100:+.1f}%"]
                for s, m, p, e in points])
    print(_held_out_summary(held, args.min_size) + "\n")


def _held_out_summary(held, min_size: int) -> str:
    """The held-out line: the median |error|, or n/a and why there is none."""
    fitted = (f"(fit on {held.train}: α = {_fmt_param('alpha', held.fit.alpha)}, "
              f"β = {_fmt_param('beta', held.fit.beta)}, "
              f"γ = {_fmt_param('gamma', held.fit.gamma)})")
    if held.reason:
        return f"held-out median |error|: n/a ({held.reason})"
    if not held.errors(min_size):
        return (f"held-out median |error| for sizes >= {units.format_size(min_size)}: n/a (no "
                f"held-out row is that large; lower --min-size)  {fitted}")
    return (f"held-out median |error| for sizes >= {units.format_size(min_size)}: "
            f"{held.median_error(min_size) * 100:.1f}%  {fitted}")


def _predictions(fit, args, data_rows) -> list[dict]:
    collectives = (args.collective.split(",") if args.collective
                   else list(dict.fromkeys(r["collective"] for r in data_rows)))
    out = []
    for collective in collectives:
        spec = get_collective(collective)
        names = ([a.strip() for a in args.algorithm.split(",")] if args.algorithm
                 else [a for (c, a), algo in REGISTRY.items()
                       if c == collective and algo.time is not None])
        for n in args.world_size:
            for size in args.sizes:
                for name in names:
                    t = fit.time(collective, name, n, size)
                    out.append({"backend": fit.backend, "collective": collective,
                                "algorithm": name, "world_size": n, "size": size, "time_s": t,
                                "busbw": size / t * spec.bus_factor(n) if t > 0 else None})
    return out


#: ``fit`` flags for ``ringccl bench --json`` rows only, and those only --predict uses
_BENCH_FLAGS = ("train", "residuals", "predict", "sizes", "world_size", "collective", "algorithm")
_PREDICT_FLAGS = ("sizes", "world_size", "collective", "algorithm")


def _refuse_unused_fit_flags(args, nccl: bool, bench: bool) -> None:
    """Refuse the flags these files leave without effect (naming them), before any fit."""
    if not bench:
        refuse_unused(args, _BENCH_FLAGS, "on nccl-tests logs (they fit NCCL's own model per "
                      "link level; those flags are for `ringccl bench --json` rows)")
    elif not args.predict:
        refuse_unused(args, _PREDICT_FLAGS, "without --predict")
    if not nccl:
        flags = [f"{flag} {value}" for flag, value in (
            ("--program", args.program), ("--machine", args.machine),
            ("--nics-per-node", args.nics_per_node)) if value is not None]
        if flags:
            raise ArgumentError(f"{', '.join(flags)}: {'has' if len(flags) == 1 else 'have'} "
                                "no effect without nccl-tests logs (these files hold `ringccl "
                                "bench --json` rows only)")
    if args.plot and not nccl:
        raise ArgumentError(f"--plot {args.plot!r}: fit draws the fit of nccl-tests logs, and "
                            "these rows have none (for a chart of the model: ringccl model "
                            "--plot)")


def _cmd_fit(args) -> int:
    rows = load_rows(args.files, args.program)
    placement = None if args.placement == "any" else args.placement
    report = []
    nccl = nccl_tests_rows(rows)
    _refuse_unused_fit_flags(args, bool(nccl), len(nccl) < len(rows))
    if nccl:  # nccl-tests logs: NCCL's own model, fitted per link level (first: the profile)
        entry = nccl_fit_report(nccl, args)
        if args.json:
            report.append({k: v for k, v in entry.items() if not k.startswith("_")})
        else:
            print_nccl_fit(entry, args)
        rows = [r for r in rows if r.get("source") != "nccl-tests"]
    for backend, group in by_backend(rows).items():
        held = held_out(group, args.train, backend, placement)
        fit = fit_rows(group, backend, placement)
        preds = _predictions(fit, args, group) if args.predict else []
        if args.json:
            report.append({"fit": fit.to_json(), "held_out": {
                "train": held.train, "method": held.method, "reason": held.reason or None,
                "fit": held.fit.to_json()["params"],
                "median_abs_error": held.median_error(args.min_size),
                "min_size": args.min_size,
                "sweeps": {k: [dict(zip(("size", "measured_s", "predicted_s",
                                         "relative_error"), p)) for p in v]
                           for k, v in held.sweeps.items()}}, "predictions": preds})
            continue
        _print_fit(fit, held, args)
        if preds:
            table(f"predicted with the fit of backend {backend} (closed forms, flat network)",
                   ["collective", "algorithm", "world_size", "size", "time", "busbw (GB/s)"],
                   [[p["collective"], p["algorithm"], p["world_size"],
                     units.format_size(p["size"]), units.format_duration(p["time_s"]),
                     f"{p['busbw'] / 1e9:.3f}" if p["busbw"] else "-"] for p in preds])
    if args.json:
        emit_json(report)
    return 0


def register_model(sub) -> None:
    """``ringccl model``."""
    p = sub.add_parser("model", help="predict time, algbw, busbw per algorithm (cost model)")
    p.add_argument("collective", nargs="?", default="all_reduce", choices=list(COLLECTIVES))
    p.add_argument("--algorithm", "-a", type=name_list, default=None,
                   help="algorithms to compare, comma-separated (default: all registered)")
    p.add_argument("--size", "-s", type=size_list, default=size_list("4KiB:1GiB"),
                   help="bytes per rank: 4KiB:1GiB (x2), 4KiB:1GiB:4, or 1MiB,1GiB; whole "
                   "bytes (a fractional FACTOR's sizes are rounded down)")
    p.add_argument("--dtype", default="float32", choices=SUPPORTED_DTYPES,
                   help="element type for the count column")
    _add_machine_args(p)
    p.add_argument("--plot", metavar="PNG", type=output_path(IMAGE_SUFFIXES, "an image"),
                   help="write a chart: time and busbw vs size")
    p.add_argument("--preset", choices=["worked-examples"],
                   help="worked-examples: recompute four alpha-beta examples: ring all_reduce "
                   "bytes per rank (N = 8, 64, 256), a ring latency table (5 us, 300 GB/s), "
                   "all_reduce of 100 MiB at 50 GB/s for P = 4 ... 1024 (closed forms for "
                   "master, ring, tree next to the walked schedules), and flat ring vs "
                   "hierarchical all_reduce of 1 GiB on 128 nodes x 8 GPUs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_model,
                   model_defaults={d: p.get_default(d) for d in _NOT_WITH_PRESET})


def register_tune(sub) -> None:
    """``ringccl tune``."""
    p = sub.add_parser("tune", help="fastest algorithm per size, crossovers, bucket size")
    p.add_argument("collective", choices=list(COLLECTIVES))
    p.add_argument("--algorithm", "-a", type=name_list, default=None,
                   help="algorithms to compare, comma-separated (default: all registered)")
    p.add_argument("--size", "-s", type=size_list, default=size_list("4B:16GiB"),
                   help="size grid (default 4B:16GiB, x2; whole bytes, as model --size); "
                   "crossovers are refined between")
    _add_machine_args(p)
    p.add_argument("--bucket-model", choices=["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"],
                   help="also find the best gradient bucket size for this model")
    p.add_argument("--tensor-sizes", type=size_list,
                   help="gradient sizes in backward order, instead of --bucket-model")
    p.add_argument("--backward", default=0.0, action=Given, type=nonnegative(
        units.duration, "backward time", ">= 0 s (e.g. 50ms)"),
                   help="backward time the buckets overlap with (default 0)")
    p.add_argument("--bucket-algorithm", default="ring", action=Given,
                   help="algorithm for each bucket")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_tune)


def _predict_sizes(text: str) -> list[int]:
    """``fit --sizes`` (argparse type): :func:`.common.size_list` in whole bytes (each size
    rounded down; FACTOR any number > 1), at most :data:`.sizes.MAX_SIZES` of them.

    Raises:
        argparse.ArgumentTypeError: as :func:`.common.size_list` (naming ``text``).
    """
    return size_list(text, whole_bytes=True)


def register_fit(sub) -> None:
    """``ringccl fit``."""
    p = sub.add_parser(
        "fit", help="fit alpha, beta, gamma to `ringccl bench --json` rows or nccl-tests logs",
        description="Least-squares fit (relative errors, parameters >= 0) of the α-β-γ model "
        "through every algorithm's closed form, per backend, with R², confidence intervals, "
        "residuals and a held-out check: fit on one sweep, predict the others. nccl-tests "
        "output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, "
        "sendrecv_perf, ... as printed) fits NCCL's own model per link level instead: "
        "single-node logs the GPU fabric, multi-node logs the NICs; --json writes the network "
        "profile `ringccl nccl --profile` and the planner read.")
    p.add_argument("files", nargs="+", help="JSON files written by `ringccl bench --json`, or "
                   "nccl-tests output")
    p.add_argument("--program", help="the nccl-tests program of logs that do not name it (no "
                   "'Collective test starting' line or *_perf in the text or file name), e.g. "
                   "alltoall_perf; refused for a log that names another")
    add_machine_option(p)
    p.add_argument("--plot", metavar="PNG", type=output_path(IMAGE_SUFFIXES, "an image"),
                   help="nccl-tests logs: draw measured and fitted "
                   "busbw per log")
    p.add_argument("--train", action=Given, help="bench rows: the sweep to fit the held-out "
                   "check on, collective:algorithm[:world_size] (default: the sweep with the most "
                   "rows), or 'sizes': every sweep's even sizes, predicting the odd ones")
    p.add_argument("--placement", choices=["in-place", "out-of-place", "any"],
                   default="in-place", help="rows to use (default in-place)")
    p.add_argument("--min-size", type=size_arg, default=units.size("64KiB"),
                   help="held-out summary over sizes >= this (default 64KiB)")
    p.add_argument("--residuals", action=GivenFlag,
                   help="bench rows: print every row's residual")
    p.add_argument("--predict", action=GivenFlag, help="bench rows: print predicted times "
                   "for --sizes × --world-size × algorithms")
    p.add_argument("--sizes", type=_predict_sizes, action=Given,
                   default=[units.size(x) for x in ("64KiB", "1MiB", "16MiB", "256MiB", "1GiB")],
                   help="sizes to predict, > 0: a list or a range as for model --size (default "
                   "64KiB,1MiB,16MiB,256MiB,1GiB)")
    p.add_argument("--world-size", "-N", type=int_list, default=[2, 8, 64, 1024], action=Given,
                   help="world sizes to predict, integers >= 1 (default 2,8,64,1024)")
    p.add_argument("--collective", action=Given,
                   help="collectives to predict (default: those measured)")
    p.add_argument("--algorithm", "-a", action=Given,
                   help="algorithms to predict (default: all with a closed form)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_fit)
