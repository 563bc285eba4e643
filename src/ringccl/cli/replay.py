"""``ringccl replay STEP.json --nproc 4``: a planned step's collectives on local processes,
α, β, γ fitted from what they measured, the step re-predicted and set against the measurement.

``STEP.json`` is ``ringccl plan ... --emit STEP.json``'s step file
(:mod:`ringccl.planner.emit`). Its groups are mapped onto the local processes (the plan's own
rank grid when its world is ``--nproc`` ranks), its bytes scaled by one power of two so the
largest call fits ``--max-bytes`` (the scaling is printed), every collective run on its groups
through ringccl.torch (:mod:`ringccl.backends.torch.replay`), then calibration sweeps; the fit
(``ringccl fit``'s :func:`ringccl.costmodel.fit.fit_rows`) sees the sweeps only, and each step
collective is predicted from it (:mod:`ringccl.planner.replay`). Printed: predicted vs measured
per collective and in total, the median error whatever it is; ``--plot`` draws both.
"""

from __future__ import annotations

from .. import units
from ..errors import Interrupted
from ..planner.emit import load_step_file, replay_calls
from ..planner.replay import calibration_sweeps, repredict
from ..views.plot import _pyplot, save_figure
from ..backends.torch import launch as torch_launch
from .common import (IMAGE_SUFFIXES, add_format_option, add_launch_options, check_nproc,
                     emit_json, interrupted, need_torch, nonnegative_int, output_path,
                     positive_int, seconds_arg, size_arg, table)
from .progress import Progress

__all__ = ["register", "plot_replay"]


def plot_replay(report: dict, path: str, title: str = "") -> str:
    """Bars of predicted and measured seconds per collective (log scale), and the totals."""
    plt = _pyplot()
    rows = report["rows"]
    labels = [f"#{r['order']} {r['parallelism']} {r['collective']}\n"
              f"{units.format_size(r['size'])}, {len(r['groups'][0])} ranks" for r in rows]
    fig, (ax, tot) = plt.subplots(1, 2, figsize=(3 + 1.3 * len(rows), 4.2),
                                  gridspec_kw={"width_ratios": [max(len(rows), 1), 1.2]})
    x = list(range(len(rows)))
    ax.bar([i - 0.2 for i in x], [r["measured_s"] * 1e3 for r in rows], 0.4, label="measured")
    ax.bar([i + 0.2 for i in x], [r["predicted_s"] * 1e3 for r in rows], 0.4,
           label="predicted (fit)")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("ms per call")
    ax.legend(fontsize=8)
    ax.set_title(f"per collective: median |error| {100 * report['median_error']:.1f}%",
                 fontsize=9)
    tot.bar([0, 1], [report["measured_total_s"] * 1e3, report["predicted_total_s"] * 1e3],
            color=["C0", "C1"])
    tot.set_xticks([0, 1], ["measured", "predicted"], fontsize=8)
    tot.set_ylabel("ms per step (communication)")
    tot.set_title(f"total: error {100 * report['total_error']:+.1f}%", fontsize=9)
    return save_figure(fig, path, title, title_size=9)


def _print(report: dict, step: dict, fmt: str) -> None:
    fit = report["fit"]["params"]
    print(f"replay of {step['describe']}")
    for note in report["notes"]:
        print(f"note: {note}")
    print(f"fit on the calibration sweeps ({report['fit']['rows']} rows): alpha "
          f"{fit['alpha']['value'] * 1e6:.2f} us/step, beta "
          f"{1 / fit['beta']['value'] / 1e9 if fit['beta']['value'] else float('inf'):.3f} "
          f"GB/s, gamma {fit['gamma']['value'] * 1e12:.2f} ps/byte reduced")
    rows = [[r["order"], r["parallelism"], r["collective"], r["phase"], r["algorithm"],
             " ".join("{" + ",".join(map(str, g)) + "}" for g in r["groups"]),
             units.format_size(r["size"]), units.format_size(r["simulated_bytes"]),
             r["calls_per_step"], f"{r['measured_s'] * 1e6:.1f}", f"{r['predicted_s'] * 1e6:.1f}",
             f"{100 * r['error']:+.1f}%"] for r in report["rows"]]
    table("predicted (fitted alpha-beta-gamma, closed form) vs measured, per call",
          ["#", "parallelism", "collective", "phase", "algorithm", "local groups", "bytes",
           "sent/rank (sim)", "calls/step", "measured us", "predicted us", "error"], rows, fmt)
    print(f"total communication per step (sum of calls x time, no overlap): measured "
          f"{report['measured_total_s'] * 1e3:.2f} ms, predicted "
          f"{report['predicted_total_s'] * 1e3:.2f} ms ({100 * report['total_error']:+.1f}%)")
    print(f"median |error| per collective: {100 * report['median_error']:.1f}%")
    for r in report["rows"]:
        if r["note"]:
            print(f"note: #{r['order']}: {r['note']}")
    if report.get("plot"):
        print(f"chart written to {report['plot']}")


def _cmd_replay(args) -> int:
    need_torch()
    step = load_step_file(args.step)          # a bad file: refused before anything starts
    rmap = replay_calls(step, args.nproc, args.max_bytes)
    sweeps = calibration_sweeps(rmap)
    check_nproc(args, max(c.nbytes for c in rmap.calls), "--max-bytes")
    from ..backends.torch.replay import replay_worker

    total = len(rmap.calls) + len(sweeps)
    done = {"n": 0}
    shown = Progress(enabled=not args.json)
    task = shown.task("ringccl replay: collectives and sweeps", total=total)

    def on_progress(event):
        done["n"] = event[1]
        task.update(completed=event[1])

    try:
        with shown:
            per_rank = torch_launch.launch(replay_worker, args.nproc,
                                           [c.to_dict() for c in rmap.calls], sweeps, args.iters,
                                           args.warmup, timeout=args.timeout, oversubscribe=True,
                                           verbose=args.verbose, on_progress=on_progress)
    except Interrupted:
        return interrupted(f"ringccl replay stopped after {done['n']} of {total} collectives "
                           "and sweeps; every worker ended")
    report = repredict(rmap, [row for rows in per_rank for row in rows]).to_dict()
    if args.plot:
        report["plot"] = plot_replay(report, args.plot, f"ringccl replay: {step['describe']} "
                                     f"on {args.nproc} local gloo processes")
    if args.json:
        emit_json({"step": args.step, "describe": step["describe"], **report})
    else:
        _print(report, step, args.format)
    wrong = sum(r["wrong"] or 0 for r in report["rows"])
    return 0 if wrong == 0 else 1


def register(sub) -> None:
    """``ringccl replay``."""
    p = sub.add_parser("replay", help="run a planned step's collectives (ringccl plan --emit) "
                       "on local processes, fit alpha/beta/gamma, re-predict, compare")
    p.add_argument("step", help="a step file from ringccl plan ... --emit STEP.json")
    p.add_argument("--nproc", "-n", type=positive_int, default=4, help="local processes")
    p.add_argument("--max-bytes", type=size_arg, default=4 << 20,
                   help="the largest call after scaling (default 4MiB)")
    p.add_argument("--iters", type=positive_int, default=10, help="timed calls per row")
    p.add_argument("--warmup", type=nonnegative_int, default=3,
                   help="untimed calls before each row's timed ones (default 3; 0 as bench -w 0)")
    p.add_argument("--plot", metavar="PNG", type=output_path(IMAGE_SUFFIXES, "an image"),
                   help="predicted vs measured bars")
    p.add_argument("--timeout", type=seconds_arg, default=900.0)
    p.add_argument("--json", action="store_true")
    add_launch_options(p)
    add_format_option(p)
    p.set_defaults(func=_cmd_replay)
