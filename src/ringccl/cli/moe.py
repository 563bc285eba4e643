"""``ringccl moe``: MoE expert parallelism on local processes.

First the token exchange of expert parallelism on real processes: GPU ``src`` holds one token
for each expert, ``Token_G{src}->E{dst}``, and after the dispatch (an all-to-all) GPU ``dst``'s
expert holds the tokens of every GPU — the 4 × 4 token matrix transposed, printed before and
after. Then the same dispatch at scale
(:func:`ringccl.training.moe_run.scale_worker`): random tokens with Zipf-skewed top-k routing
and a capacity factor, timed unsplit (dispatch, expert MLPs, combine) and micro-chunked against
the experts on the background communicator, with the imbalance, the dropped assignments and
the planner's overlap model (:func:`ringccl.planner.step.exposed_seconds`) next to the measured
pipeline.
"""

from __future__ import annotations

from .. import resources, units
from ..errors import ArgumentError, Interrupted
from ..planner.step import exposed_seconds
from ..views.plot import _pyplot, save_figure
from ..backends.torch import launch as torch_launch
from .common import (IMAGE_SUFFIXES, add_format_option, add_launch_options, check_nproc, checked,
                     emit_json, interrupted, need_torch, nonnegative, output_path, positive_int,
                     seconds_arg, table)
from .progress import Progress

__all__ = ["register", "overlap_model", "plot_timelines"]


def overlap_model(seconds: dict, num_chunks: int) -> float:
    """The planner's prediction of the pipelined layer from the unsplit run's measurement:
    the experts' time ``W`` (the slowest rank's) plus the layer's two all-to-alls (dispatch,
    combine), each exposed against half of ``W`` in ``num_chunks`` pieces, as
    :mod:`ringccl.planner.step` prices an MoE layer's forward.

    The communication is what the unsplit run spent beyond ``W``, split evenly between the two
    all-to-alls: a combine's own timing also holds its wait for the slowest rank's experts
    (imbalance), which must not be counted twice. With one chunk the model gives the unsplit
    time back.

    Args:
        seconds: "unsplit" and "experts", the slowest rank's medians.
    """
    window = seconds["experts"]
    comm = max(seconds["unsplit"] - window, 0.0)
    return window + 2 * exposed_seconds(comm / 2, window / 2, num_chunks)


def capacity_factor_arg(text: str):
    """``--capacity-factor``: a number > 0, or "none" (no capacity limit)."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ArgumentError(f"{text!r} must be a number > 0 or 'none'") from None
    if not value > 0 or value == float("inf"):
        raise ArgumentError(f"{text} must be a finite number > 0 (or 'none': no capacity "
                            "limit); an expert of capacity 0 would drop every token")
    return value


def plot_timelines(results: list, path: str, title: str = "") -> str:
    """Per rank, the comm and compute lanes of the unsplit and the pipelined run (matplotlib).

    ``results``: :func:`ringccl.training.moe_run.scale_worker`'s per-rank dicts. Returns ``path``.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(11, 1.2 + 1.1 * len(results)), sharex=True)
    colors = {"comm": "#d62728", "compute": "#1f77b4"}
    for ax, key, label in ((axes[0], "timeline_unsplit", "unsplit"),
                           (axes[1], "timeline_pipelined", "pipelined")):
        ticks, names = [], []
        for r in results:
            for j, lane in enumerate(("comm", "compute")):
                y = 2 * r["rank"] + j
                spans = [(s * 1e3, (e - s) * 1e3) for ln, _, s, e in r[key] if ln == lane]
                ax.broken_barh(spans, (y - 0.4, 0.8), color=colors[lane])
                ticks.append(y)
                names.append(f"rank {r['rank']} {lane}")
        ax.set_yticks(ticks, names)
        ax.invert_yaxis()
        ax.set_title(f"{label}: {max(r['seconds'][label] for r in results) * 1e3:.1f} ms "
                     "(slowest rank)", fontsize=10)
    axes[1].set_xlabel("ms since the barrier")
    return save_figure(fig, path, title)


def _report(results: list, config: dict, nproc: int) -> dict:
    scale = [r["scale"] for r in results]
    slow = {k: max(s["seconds"][k] for s in scale) for k in scale[0]["seconds"]}
    counts = [c for s in scale for c in s["tokens_per_expert"]]
    mean = sum(counts) / len(counts) if counts else 0.0
    dropped = sum(s["dropped"] for s in scale)
    assignments = sum(s["assignments"] for s in scale)
    predicted = overlap_model(slow, config["num_chunks"])
    return {"nproc": nproc, "config": config, "token_matrix": [r["token_matrix"] for r in results],
            "per_rank": [{"rank": s["rank"], "tokens_per_expert": s["tokens_per_expert"],
                          "dropped": s["dropped"], "seconds": s["seconds"]} for s in scale],
            "slowest_seconds": slow, "tokens_per_expert": counts,
            "imbalance": max(counts) / mean if mean else None,
            "dropped": dropped, "assignments": assignments,
            "dropped_fraction": dropped / assignments if assignments else 0.0,
            "speedup": slow["unsplit"] / slow["pipelined"] if slow["pipelined"] else None,
            "model_pipelined_s": predicted,
            "model_speedup": slow["unsplit"] / predicted if predicted else None}


def _print(report: dict, fmt: str = "auto") -> None:
    n = report["nproc"]
    print(f"token matrix: MoE expert parallelism's all-to-all on {n} processes, the token "
          "matrix transposed (an illustration with one expert per process; --experts sets the "
          "MoE layer's experts below)")
    print("before, the tokens each GPU is about to dispatch:")
    for src in range(n):
        print(f"  GPU {src} (one token for each expert): "
              f"{[f'Token_G{src}->E{dst}' for dst in range(n)]}")
    print("after the all-to-all, what each GPU's expert received:")
    for dst, labels in enumerate(report["token_matrix"]):
        print(f"  GPU {dst}, expert {dst} (tokens from every GPU): {labels}")
    ok = all(labels == [f"Token_G{s}->E{d}" for s in range(n)]
             for d, labels in enumerate(report["token_matrix"]))
    print(f"transpose {'verified' if ok else 'WRONG'}: recv[dst][src] = send[src][dst]\n")
    c = report["config"]
    cap = "none" if c["capacity_factor"] is None else f"{c['capacity_factor']:g}"
    rows = [[r["rank"], " ".join(map(str, r["tokens_per_expert"])), r["dropped"],
             f"{r['seconds']['dispatch'] * 1e3:.2f}", f"{r['seconds']['experts'] * 1e3:.2f}",
             f"{r['seconds']['combine'] * 1e3:.2f}", f"{r['seconds']['unsplit'] * 1e3:.2f}",
             f"{r['seconds']['pipelined'] * 1e3:.2f}"] for r in report["per_rank"]]
    table(f"at scale: {c['tokens']} tokens x {c['hidden_size']} per rank, {c['num_experts']} "
          f"experts (MLP {c['hidden_size']}-{c['ffn_hidden_size']}), top-{c['top_k']}, "
          f"capacity factor {cap}, Zipf skew {c['skew']:g}; medians of {c['iters']} iterations",
          ["rank", "tokens per local expert", "dropped", "dispatch ms", "experts ms",
           "combine ms", "unsplit ms", f"{c['num_chunks']} chunks ms"], rows, fmt)
    slow = report["slowest_seconds"]
    imb = report["imbalance"]
    print(f"imbalance: the busiest expert got {'n/a' if imb is None else f'{imb:.2f}'}x the "
          f"mean; dropped {report['dropped']} of {report['assignments']} assignments "
          f"({100 * report['dropped_fraction']:.1f}%)")
    print(f"overlap (slowest rank): unsplit {slow['unsplit'] * 1e3:.2f} ms, pipelined in "
          f"{c['num_chunks']} chunks {slow['pipelined'] * 1e3:.2f} ms: measured speedup "
          f"{report['speedup']:.2f}x; the planner's overlap model predicts "
          f"{report['model_pipelined_s'] * 1e3:.2f} ms ({report['model_speedup']:.2f}x)")
    if report.get("plot"):
        print(f"timeline written to {report['plot']}")


def _cmd_moe(args) -> int:
    need_torch()
    from ..training.moe_run import ScaleConfig, command_worker

    config = ScaleConfig(tokens=args.tokens, hidden_size=args.hidden_size,
                         ffn_hidden_size=args.ffn_hidden_size, num_experts=args.experts,
                         top_k=args.top_k, capacity_factor=args.capacity_factor, skew=args.skew,
                         iters=args.iters, num_chunks=args.chunks, seed=args.seed,
                         algorithm=args.algorithm)
    config.validate(args.nproc)
    # a worker's buffers: its tokens, the dispatched copies (top_k of each, both ways, and
    # the pipeline's) and every expert's weights (each rank builds all E, keeps E/p)
    item = 4
    token_bytes = item * args.tokens * args.hidden_size * (2 + 4 * args.top_k)
    expert_bytes = item * args.experts * 2 * args.hidden_size * args.ffn_hidden_size
    # a refusal names the flags of the larger part
    flags = ("--tokens or --hidden-size" if token_bytes >= expert_bytes else
             "--ffn-hidden-size, --experts or --hidden-size")
    check_nproc(args, token_bytes + expert_bytes, hint=(
        f"a smaller {flags} (a worker's tokens are {units.format_size(token_bytes)} and its "
        f"expert weights {units.format_size(expert_bytes)}, peaking at about "
        f"{resources.RUN_BUFFER_FACTOR}x their sum)"))
    done = {"iters": 0}
    shown = Progress(enabled=not args.json)
    task = shown.task("ringccl moe: timed runs", total=2 * args.iters)

    def on_progress(event):
        if event[0] == "iter":
            done["iters"] = event[1]
            task.update(completed=event[1])

    try:
        with shown:
            results = torch_launch.launch(command_worker, args.nproc, dict(vars(config)),
                                          timeout=args.timeout, oversubscribe=True,
                                          verbose=args.verbose, on_progress=on_progress)
    except Interrupted:
        return interrupted(f"ringccl moe stopped after {done['iters']} of {2 * args.iters} "
                           "timed runs; every worker ended")
    report = _report(results, dict(vars(config)), args.nproc)
    if args.plot:
        report["plot"] = plot_timelines(
            [r["scale"] for r in results], args.plot,
            f"ringccl moe: {args.nproc} processes, {args.tokens} tokens/rank, "
            f"{args.experts} experts, top-{args.top_k}, {args.chunks} chunks")
    if args.json:
        emit_json(report)
    else:
        _print(report, args.format)
    ok = all(labels == [f"Token_G{s}->E{d}" for s in range(args.nproc)]
             for d, labels in enumerate(report["token_matrix"]))
    return 0 if ok else 1


def register(sub) -> None:
    """``ringccl moe``."""
    p = sub.add_parser("moe", help="MoE expert parallelism on local processes: the token "
                       "matrix's all-to-all, then token dispatch at scale (timings, imbalance, "
                       "dropped tokens, overlap)")
    p.add_argument("--nproc", "-n", type=positive_int, default=4, help="local processes "
                   "(default 4)")
    p.add_argument("--tokens", type=positive_int, default=4096, help="tokens per rank")
    p.add_argument("--hidden-size", type=positive_int, default=256)
    p.add_argument("--ffn-hidden-size", type=positive_int, default=512,
                   help="each expert MLP's inner width")
    p.add_argument("--experts", type=positive_int, default=8, help="E, a multiple of --nproc")
    p.add_argument("--top-k", type=positive_int, default=2)
    p.add_argument("--capacity-factor", type=checked(capacity_factor_arg), default=1.25,
                   help="> 0, or 'none' (default 1.25): each expert takes at most "
                   "ceil(factor x tokens x top_k / E) assignments from each rank")
    p.add_argument("--skew", type=nonnegative(float, "skew", "a number >= 0"), default=1.0,
                   help="Zipf exponent of expert popularity (0: uniform; default 1)")
    p.add_argument("--chunks", type=positive_int, default=4, help="micro-chunks of the "
                   "pipelined run (default 4)")
    p.add_argument("--iters", type=positive_int, default=5)
    p.add_argument("--algorithm", "-a", default=None, help="the all-to-all algorithm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", metavar="PNG", type=output_path(IMAGE_SUFFIXES, "an image"),
                   help="draw each rank's comm and compute lanes")
    p.add_argument("--timeout", type=seconds_arg, default=600.0)
    p.add_argument("--json", action="store_true")
    add_launch_options(p)
    add_format_option(p)
    p.set_defaults(func=_cmd_moe)
