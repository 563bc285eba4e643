"""``ringccl plan``: the communication of a whole training step (or ``--search`` for the best
layout), from a model, a layout and a cluster; every option also from ``--config`` (JSON or
TOML, read and merged by :mod:`ringccl.planner.config`; the command line wins)."""

from __future__ import annotations

import argparse
import math

from .. import units
from ..args import JSON_SUFFIXES
from ..errors import ArgumentError
from ..planner import plan, search
from ..planner.cluster import (CLUSTER_PRESETS, COLLECTIVE_MODELS, MAX_GPUS, PROFILE_LEVELS,
                               check_cluster_field)
from ..planner.config import PlanConfig, cluster_for, layout_for_gpus, plan_config
from ..planner.emit import write_step_file
from ..planner.frameworks import DEFAULT_FRAMEWORK, DEFAULT_WHY, FRAMEWORKS, REDUCE_DTYPES
from ..planner.gpus import GPU_PRESETS
from ..planner.model import PRESETS
from ..planner.parallel_dims import (ATTENTION, BATCH_RULE, CP_COMM_TYPES, DISPATCHERS,
                                     RECOMPUTE, SCHEDULES, resolve_dims)
from ..planner.precision import PRECISIONS
from ..views.explore_html import require_plotly
from ..views.explore_plan import plan_page
from ..views.plan_plot import plan_chart
from .common import (HTML_SUFFIXES, IMAGE_SUFFIXES, emit_json, output_path, positive_int, size_arg,
                     table)
from .progress import Progress

__all__ = ["register"]

#: command-line dest -> ParallelDims field
_LAYOUT = {"dp": "dp", "tp": "tp", "sp": "sp", "cp": "cp", "pp": "pp", "ep": "ep",
           "zero": "zero_stage", "micro_batch_size": "micro_batch_size",
           "num_micro_batches": "num_micro_batches", "global_batch_size": "global_batch_size",
           "schedule": "schedule", "virtual_stages": "virtual_stages",
           "recompute": "recompute", "order": "order", "bucket_size": "bucket_bytes",
           "etp": "etp", "cp_comm_type": "cp_comm_type",
           "hierarchical_context_parallel_sizes": "hierarchical_context_parallel_sizes",
           "moe_token_dispatcher_type": "moe_token_dispatcher_type",
           "moe_router_group_topk": "moe_router_group_topk",
           "capacity_factor": "capacity_factor", "routing_imbalance": "routing_imbalance",
           "routing_skew": "routing_skew", "dp_shard": "dp_shard",
           "precision": "precision", "attention": "attention",
           "framework": "framework", "reduce_dtype": "reduce_dtype",
           "reshard_after_forward": "reshard_after_forward",
           "account_for_embedding_in_pipeline_split": "account_for_embedding_in_pipeline_split",
           "account_for_loss_in_pipeline_split": "account_for_loss_in_pipeline_split"}
#: command-line dest -> Cluster field
_CLUSTER = {"cluster": "preset", "gpu": "gpu", "nodes": "nodes",
            "gpus_per_node": "gpus_per_node",
            "intra_bandwidth": "intra_bandwidth", "inter_bandwidth": "inter_bandwidth",
            "intra_alpha": "intra_alpha", "inter_alpha": "inter_alpha",
            "nics_per_node": "nics_per_node", "peak_flops": "peak_flops",
            "compute_efficiency": "compute_efficiency", "gpu_memory": "gpu_memory",
            "profile": "profile", "profile_level": "profile_level",
            "collectives": "collectives"}


def _inputs(args) -> PlanConfig:
    """The --config file, then the command line's options over it."""
    return plan_config(
        args.config, model=args.model, seq_length=args.seq_length, dtype=args.dtype,
        layout={name: getattr(args, dest) for dest, name in _LAYOUT.items()
                if getattr(args, dest) is not None},
        cluster={name: getattr(args, dest) for dest, name in _CLUSTER.items()
                 if getattr(args, dest) is not None},
        straggler=args.straggler, search=args.search, gpus=args.gpus)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def _number(low: float, high: float | None, what: str):
    """An argparse type: a number in (low, high] (high None: no bound), named in refusals."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number ({what})") from None
        bound = f"in ({low:g}, {high:g}]" if high is not None else f"> {low:g}"
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not finite: must be {bound} ({what})")
        if not value > low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{text} must be {bound} ({what})")
        return value
    parse.__name__ = what
    return parse


def _gpus(text: str) -> int:
    """``--gpus`` (argparse type): an integer in [1, :data:`MAX_GPUS`]."""
    value = positive_int(text)
    if value > MAX_GPUS:
        raise argparse.ArgumentTypeError(f"{value} must be an integer in [1, {MAX_GPUS}] (the "
                                         "GPUs a plan takes)")
    return value


def _check_given(args) -> None:
    """Refuse, before the model is read or anything planned, a cluster option whose value the
    cluster would refuse (its field named: :func:`_by_flag` adds the option)."""
    for dest, name in _CLUSTER.items():
        value = getattr(args, dest)
        if value is not None:
            check_cluster_field(name, value)


def _check_world(cfg: PlanConfig) -> None:
    """Refuse more GPUs than a plan takes (:data:`MAX_GPUS`) in the layout's own sizes, before
    any rank is laid out, naming the ``--config`` file where it gave any of them (``--gpus``
    and a file's ``gpus`` are bounded as they are read)."""
    sizes = [cfg.layout.get(k, 1) for k in ("dp", "tp", "cp", "pp")]
    if math.prod(sizes) > MAX_GPUS:
        where = (f"--config {cfg.path!r}: " if any(f"layout.{k}" in cfg.from_file
                                                   for k in ("dp", "tp", "cp", "pp")) else "")
        raise ArgumentError(f"{where}the layout's dp x tp x cp x pp = "
                            f"{' x '.join(map(str, sizes))} = {math.prod(sizes):,} GPUs, more "
                            f"than the {MAX_GPUS:,} a plan takes")


def _framework_row(p) -> str:
    dims = p.dims
    preset = [f"{k}={getattr(dims, k)}" for k in dims.from_preset
              if k not in ("framework", "global_batch_size")]
    given = "default" if "framework" in dims.from_preset else "given"
    return (f"{dims.framework} ({given}); from its preset: {', '.join(preset) or 'nothing'}")


def _batch_row(p) -> str:
    dims = p.dims
    text = (f"{dims.global_batch_size} sequences x {p.model.seq_length} tokens = "
            f"{dims.global_batch_size * p.model.seq_length:,} tokens "
            f"({dims.num_micro_batches} micro-batches)")
    if "global_batch_size" in dims.from_preset:
        text += f"; default rule: {BATCH_RULE}"
    return text


def _print_plan(p) -> None:
    s = p.summary()
    table(f"ringccl plan: {p.model.name} ({p.model.num_parameters / 1e9:.2f}B parameters, "
          f"{p.model.active_parameters / 1e9:.2f}B active) on {p.cluster.describe()}",
          ["quantity", "value"],
          [["layout", p.dims.describe()], ["framework", _framework_row(p)],
           ["global batch", _batch_row(p)],
           ["step time", units.format_duration(p.step_seconds)],
           ["tokens/s", f"{p.tokens_per_second:,.0f}"], ["MFU", f"{100 * p.mfu:.2f}%"],
           ["pipeline bubble", f"{units.format_duration(p.bubble_seconds)} (formula "
            f"{100 * p.bubble_fraction:.2f}% of ideal)"],
           ["peak memory per GPU", f"{units.format_size(p.peak_memory)} of "
            f"{units.format_size(p.cluster.gpu_memory)}"
            + ("" if p.fits_memory else "  EXCEEDS the GPU")],
           ["straggler", "none" if p.straggler is None else
            f"rank {p.straggler.rank} {p.straggler.link} at {p.straggler.fraction:g}x"]])
    table("per parallelism (slowest position): exposed on the critical path, total, bytes sent "
          "by the busiest rank", ["parallelism", "exposed (ms)", "total (ms)", "bytes/step"],
          [[k, _ms(s["exposed_s"].get(k, 0.0)),
            _ms(s["seconds_per_step_by_parallelism"].get(k, 0.0)),
            units.format_size(s["bytes_per_step_by_parallelism"].get(k, 0.0))]
           for k in sorted(set(s["exposed_s"]) | set(s["bytes_per_step_by_parallelism"]))])
    seen = {}
    for st in p.stages:
        key = tuple((e.parallelism, e.collective, e.nbytes, e.calls_per_step, e.algorithm,
                     e.seconds_per_call) for e in st.entries) + (st.shape.layers,)
        seen.setdefault(key, []).append(st)
    for stages in seen.values():
        st = stages[0]
        label = (f"stage {st.stage}" if len(stages) == 1 else
                 f"stages {', '.join(str(x.stage) for x in stages)}")
        rows = [[e.parallelism, e.collective, e.what, e.phase,
                 f"{e.shape.size} ({e.shape.ranks_per_node}/node, {e.shape.nodes_spanned} "
                 f"nodes)", units.format_size(e.nbytes), e.calls_per_step, e.algorithm,
                 f"{e.seconds_per_call * 1e6:.2f}", _ms(e.seconds_per_step), e.overlap]
                for e in st.entries]
        mem = st.memory
        table(f"{label}: {st.shape.layers} layers{', embedding' if st.shape.first else ''}"
              f"{', LM head' if st.shape.last else ''}; compute "
              f"{_ms(st.compute_per_micro_batch)} ms per micro-batch; memory "
              f"{units.format_size(mem.total)} (weights {units.format_size(mem.weights)}, "
              f"gradients {units.format_size(mem.gradients)}, optimizer "
              f"{units.format_size(mem.optimizer)}, activations "
              f"{units.format_size(mem.activations)}, buffers "
              f"{units.format_size(mem.communication)})",
              ["parallelism", "collective", "what", "phase", "group", "bytes/call",
               "calls/step", "algorithm", "us/call", "ms/step", "overlap"], rows)
    for note in p.notes:
        print(f"note: {note}")
    for w in p.warnings:
        print(f"warning ({w.kind}): {w}")


def _chart(p, path: str) -> None:
    """The step's PNG, with the pipeline schedule as it runs on top."""
    timeline = p.timeline()
    plan_chart(p.to_dict(), path, timeline=None if timeline is None else timeline.to_dict())


def _cmd_plan(args) -> int:
    if args.html:
        require_plotly()  # before the plan (a search takes seconds)
    cfg = None
    try:
        _check_given(args)
        cfg = _inputs(args)
        return _plan(args, cfg)
    except ArgumentError as exc:   # a field's refusal, named by the flag or file that set it
        raise _by_flag(exc, args, cfg) from None


def _by_flag(exc: ArgumentError, args, cfg: PlanConfig | None = None) -> ArgumentError:
    """``exc`` prefixed with the command-line flag whose field it names (``bucket_bytes=0 ...``
    -> ``--bucket-size: bucket_bytes=0 ...``), where that flag was given; else with the
    ``--config`` file and its table, where the field is the file's (``nodes=1048576 x ...`` ->
    ``--config 'plan.toml': cluster.nodes=1048576 x ...``); else ``exc``."""
    text = str(exc)
    for dest, name in {**_LAYOUT, **_CLUSTER}.items():
        if getattr(args, dest, None) is not None and (
                text.startswith((f"{name}=", f"{name} ")) or (
                    dest.endswith("bandwidth") and text.startswith("bandwidth ")
                    and str(getattr(args, dest)) in text)):
            return ArgumentError(f"--{dest.replace('_', '-')}: {text}")
    for key in sorted(cfg.from_file) if cfg is not None else ():
        table, _, name = key.rpartition(".")
        if text.startswith(f"{name}="):
            return ArgumentError(f"--config {cfg.path!r}: {table + '.' if table else ''}{text}")
    return exc


def _plan(args, cfg: PlanConfig) -> int:
    model, layout, cluster, straggler = cfg.model, cfg.layout, cfg.cluster, cfg.straggler
    do_search, gpus = cfg.search, cfg.gpus
    _check_world(cfg)
    if not do_search and gpus is None and "nodes" in cluster and "dp" not in layout:
        machine = cluster_for(cluster, 1)   # --nodes given: dp fills them, as --gpus does
        layout = layout_for_gpus(layout, machine.nodes * machine.gpus_per_node,
                                 f"--nodes {machine.nodes} x {machine.gpus_per_node} GPUs = "
                                 f"{machine.nodes * machine.gpus_per_node}")
    elif not do_search and gpus is not None:
        layout = layout_for_gpus(layout, gpus)
    if do_search and args.emit:
        raise ArgumentError("--emit writes one plan's step; it does not apply to --search")
    if do_search:
        if gpus is None:
            raise ArgumentError("--search needs --gpus N")
        if straggler is not None:  # the search ranks layouts on a healthy cluster
            where = (f"--config {cfg.path!r}: straggler" if "straggler" in cfg.from_file
                     else "--straggler")
            raise ArgumentError(f"{where} slows one rank's NIC in one layout's step; it does "
                                "not apply to --search, which ranks layouts on the cluster as "
                                "given: drop it, or plan the layout you choose with it")
        per_node = cluster_for({**cluster, "nodes": 1}, 1).gpus_per_node
        if gpus % per_node:
            raise ArgumentError(f"--gpus {gpus} does not fill nodes of {per_node} GPUs: "
                                f"--search lays out whole nodes; give a multiple of {per_node}, "
                                "or --gpus-per-node")
        machine = cluster_for(cluster, gpus)
        if machine.world_size != gpus:   # --nodes given, and not the nodes --gpus fill
            raise ArgumentError(
                f"--gpus {gpus} and the cluster's {machine.nodes} node"
                f"{'s' if machine.nodes > 1 else ''} x {machine.gpus_per_node} GPUs = "
                f"{machine.world_size} disagree; --search lays out --gpus: "
                "drop --nodes (the GPUs fill whole nodes) or make them agree")
        fixed = sorted(k for k in layout if k not in ("global_batch_size", "framework"))
        if fixed:  # the search enumerates every dimension itself: a fixed one would be dropped
            raise ArgumentError(f"--search ranks every layout and does not take fixed layout "
                                f"options ({', '.join(fixed)}); drop them, or plan that layout "
                                "without --search (--framework and --global-batch-size apply "
                                "to every layout it ranks)")
        gbs = layout.get("global_batch_size")
        with Progress(enabled=not args.json) as shown:
            task = shown.task("searching layouts")
            result = search(model, machine, global_batch_size=gbs, framework=layout.get(
                "framework"), progress=lambda done, total, _: task.update(completed=done,
                                                                           total=total))
        if args.plot and result.plans:
            _chart(result.plans[0], args.plot)
        if args.html and result.plans:
            plan_page(result.plans[0].to_dict(), args.html)
        if args.json:
            emit_json(result.to_dict())
            return 0
        under = f" under {layout['framework']}" if "framework" in layout else ""
        table(f"ringccl plan --search: {model.name}{under} on {machine.describe()}; "
              f"{result.tried} "
              f"layouts: {result.priced} priced ({result.priced - result.refused_memory} within "
              f"memory, the {len(result.plans)} fastest shown; {result.refused_memory} too big), "
              f"{result.pruned_memory} pruned as too big and {result.pruned_slower} as "
              "dominated before pricing"
              + (f", {result.skipped_walk_limit} skipped (not walked)"
                 if result.skipped_walk_limit else ""),
              ["#", "layout", "step", "MFU", "tokens/s", "memory/GPU", "why slower than #1"],
              [[i + 1, p.dims.describe(), units.format_duration(p.step_seconds),
                f"{100 * p.mfu:.2f}%", f"{p.tokens_per_second:,.0f}",
                units.format_size(p.peak_memory), why]
               for i, (p, why) in enumerate(result.top(10))])
        if result.skipped_walk_limit:
            print(f"note: {result.skipped_walk_limit} layouts skipped, not ranked: "
                  f"{result.skipped_why}")
        if not result.plans:
            left = result.tried - result.skipped_walk_limit
            print(f"no layout of {model.name} fits {gpus} GPUs of "
                  f"{units.format_size(machine.gpu_memory)}: every one of the {left} "
                  + ("not skipped " if result.skipped_walk_limit else "")
                  + "is too big (priced or pruned above); give more --gpus, or plan one layout "
                  "without --search to see its memory")
            return 0
        table("Pareto front: no priced layout is both faster and smaller",
              ["step", "memory/GPU", "layout"],
              [[units.format_duration(p.step_seconds), units.format_size(p.peak_memory),
                p.dims.describe()] for p in result.pareto])
        return 0
    dims = resolve_dims(layout)
    p = plan(model, dims, cluster_for(cluster, dims.world_size), straggler=straggler)
    if args.plot:
        _chart(p, args.plot)
    if args.emit:
        write_step_file(p, args.emit)
    if args.html:
        plan_page(p.to_dict(), args.html)
    if args.json:
        emit_json(p.to_dict())
    else:
        _print_plan(p)
        if args.plot:
            print(f"chart written to {args.plot}")
        if args.emit:
            print(f"step file written to {args.emit} (ringccl replay {args.emit} --nproc N)")
        if args.html:
            print(f"interactive timeline written to {args.html} (self-contained HTML)")
    return 0


def register(sub) -> None:
    """Add ``ringccl plan`` to the subparsers ``sub``."""
    p = sub.add_parser(
        "plan", help="the collectives, bytes, algorithms and time of a whole training step",
        description="Every collective of one training step for a model, a DP/TP/SP/CP/PP/EP/"
        "ZeRO layout and a cluster: each kernel of the compute timed from its shape, the "
        "algorithm NCCL picks for each collective on its group's placement, what the "
        "framework overlaps, the bubble, step time, MFU, memory; or --search "
        "--gpus N for the best layouts. Every option can come from --config (JSON or TOML).")
    p.add_argument("--config", help="a JSON or TOML file with the options (the command line "
                   "wins): model, seq_length, dtype, straggler, gpus, search, [layout], "
                   "[cluster]")
    p.add_argument("--model", help=f"a preset ({', '.join(PRESETS)}) or a Hugging Face "
                   "config.json path")
    p.add_argument("--seq-length", type=positive_int, help="tokens per sequence")
    p.add_argument("--dtype", help="the dtype parameters, gradients and activations are "
                   "kept in (memory, bytes on the wire; default bfloat16); the GEMMs run in "
                   "--precision's recipe")
    g = p.add_argument_group("layout")
    _add_layout_args(g)
    _add_sharding_args(g)
    _add_cluster_args(p.add_argument_group("cluster"))
    p.add_argument("--straggler", help="RANK:FRACTION: that rank's NIC at a fraction of its "
                   "bandwidth")
    p.add_argument("--search", action="store_true", default=None, help="rank every valid "
                   "layout on --gpus N by step time (with --framework: those it runs, under "
                   "its preset)")
    p.add_argument("--gpus", type=_gpus, help="GPUs for --search; with a layout, its "
                   "dp x tp x cp x pp (dp left out: set to GPUs / (tp x cp x pp)); at most "
                   f"{MAX_GPUS:,} (2^20), as for the layout and --nodes x --gpus-per-node")
    p.add_argument("--json", action="store_true", help="strict JSON on stdout")
    p.add_argument("--plot", metavar="PNG", type=output_path(IMAGE_SUFFIXES, "an image"),
                   help="draw the step (with --search: the fastest "
                   "layout's) as a timeline per PP stage and bars per parallelism (matplotlib)")
    p.add_argument("--emit", metavar="STEP.json",
                   type=output_path(JSON_SUFFIXES, "a JSON step file"),
                   help="write the step's inventory (every "
                   "collective: group, bytes, calls, order) for ringccl replay, as JSON (a name "
                   "ending in .json)")
    p.add_argument("--html", metavar="PAGE.html", type=output_path(HTML_SUFFIXES, "an HTML page"),
                   help="write the step (with --search: the "
                   "fastest layout's) as an interactive timeline page: hover, zoom; "
                   "self-contained HTML, works offline (plotly)")
    p.set_defaults(func=_cmd_plan)


def _add_layout_args(g) -> None:
    """The layout group's parallel sizes, batch, schedule, recompute and gradient options."""
    g.add_argument("--framework", choices=FRAMEWORKS, help="what holds the model states and "
                   "runs the step; its preset fills every layout option left out (default "
                   f"{DEFAULT_FRAMEWORK}: {DEFAULT_WHY})")
    for name in ("dp", "tp", "cp", "pp", "ep"):
        g.add_argument(f"--{name}", type=positive_int, help=f"{name} group size")
    g.add_argument("--sp", action=argparse.BooleanOptionalAction, default=None,
                   help="sequence parallelism (default: the framework's)")
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage (FSDP = 3; "
                   "Megatron's distributed optimizer = 1; default: the framework's)")
    g.add_argument("--micro-batch-size", type=positive_int)
    g.add_argument("--num-micro-batches", type=positive_int)
    g.add_argument("--global-batch-size", type=positive_int)
    g.add_argument("--schedule", choices=SCHEDULES)
    g.add_argument("--virtual-stages", type=positive_int, help="model chunks per PP rank "
                   "(interleaved)")
    g.add_argument("--recompute", choices=RECOMPUTE, help="default: the framework's")
    g.add_argument("--reduce-dtype", choices=tuple(REDUCE_DTYPES), help="dtype the gradients "
                   "are reduced in (default: the framework's; Megatron with bf16: float32)")
    g.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction,
                   default=None, help="ZeRO-3/FSDP frees gathered weights after each forward")
    g.add_argument("--account-for-embedding-in-pipeline-split", action="store_true",
                   default=None, help="the embedding counts as a layer: the first stage "
                   "holds one layer fewer (Megatron-Core's flag; default: the framework's, "
                   "on for torchtitan)")
    g.add_argument("--account-for-loss-in-pipeline-split", action="store_true", default=None,
                   help="the loss counts as a layer: the last stage holds one layer fewer "
                   "(default: the framework's, on for torchtitan)")
    g.add_argument("--order", help="rank order, fastest first (default tp-cp-ep-dp-pp)")
    g.add_argument("--bucket-size", type=size_arg, help="gradient bucket, e.g. 25MiB (default: "
                   "the framework's)")


def _add_sharding_args(g) -> None:
    """The layout group's expert, context-parallel, sharding and precision options."""
    g.add_argument("--etp", type=positive_int, help="expert tensor-parallel size (default: tp; "
                   "the expert grid etp x ep x expert-dp is folded over tp x cp x dp)")
    g.add_argument("--cp-comm-type", choices=CP_COMM_TYPES, help="context parallelism: p2p "
                   "(ring attention, default), all_gather (Llama 3), a2a (Ulysses), a2a+p2p")
    g.add_argument("--hierarchical-context-parallel-sizes", type=positive_int, nargs=2,
                   metavar=("A2A", "P2P"), help="a2a+p2p: Ulysses over A2A ranks, a ring over "
                   "P2P (A2A x P2P = cp)")
    g.add_argument("--moe-token-dispatcher-type", choices=DISPATCHERS, help="alltoall (one "
                   "all-to-all over EP, default) or flex (DeepEP: NIC once per node, then "
                   "NVLink)")
    g.add_argument("--moe-router-group-topk", type=positive_int, metavar="M", help="each token "
                   "to experts on at most M nodes (DeepSeek-V3's node-limited routing)")
    g.add_argument("--capacity-factor", type=float, help="expert capacity over the uniform "
                   "share, padded (default: dropless)")
    g.add_argument("--routing-imbalance", type=float, help="measured tokens of the busiest EP "
                   "rank over the mean (>= 1)")
    g.add_argument("--routing-skew", type=float, help="Zipf exponent of expert popularity, as "
                   "ringccl moe --skew (0: uniform)")
    g.add_argument("--dp-shard", type=positive_int, help="ZeRO/FSDP shard over this many of "
                   "the dp ranks (x cp), replicate over the rest (HSDP)")
    g.add_argument("--precision", choices=tuple(PRECISIONS), help="precision recipe (default "
                   "bf16; fp8-* run the linear layers' GEMMs at the FP8 peak)")
    g.add_argument("--attention", choices=ATTENTION, help="flash: FlashAttention, no s x s "
                   "scores kept (the current frameworks' default); flash2: FlashAttention-2's "
                   "kernel (2023); unfused: Megatron's core attention (2021-2022)")


def _add_cluster_args(c) -> None:
    """The cluster group: preset, GPU, links, profiles, pricing."""
    c.add_argument("--cluster", help=f"a preset: {', '.join(CLUSTER_PRESETS)} (default "
                   "dgx-h100)")
    c.add_argument("--gpu", help=f"GPU preset ({', '.join(GPU_PRESETS)}; default the "
                   "cluster preset's)")
    c.add_argument("--nodes", type=positive_int, help="default: the GPUs / gpus per node")
    c.add_argument("--gpus-per-node", type=positive_int)
    c.add_argument("--intra-bandwidth", help="per GPU per direction, e.g. 450GB/s")
    c.add_argument("--inter-bandwidth", help="per NIC per direction, e.g. 400Gbps (= 50GB/s)")
    c.add_argument("--intra-alpha", help="e.g. 2us")
    c.add_argument("--inter-alpha", help="e.g. 5us")
    c.add_argument("--nics-per-node", type=positive_int)
    c.add_argument("--peak-flops", type=_number(0, None, "FLOP/s"),
                   help="GPU peak FLOP/s, e.g. 989e12")
    c.add_argument("--compute-efficiency", type=_number(0, 1, "a fraction of peak"),
                   help="fraction of peak (0, 1]")
    c.add_argument("--gpu-memory", help="e.g. 80GB")
    c.add_argument("--profile", action="append", help="a profile (repeatable, one of each "
                   "kind): a network profile (`ringccl fit` on nccl-tests logs), a compute "
                   "profile (`ringccl calibrate`), or a `ringccl fit --json` alpha-beta fit")
    c.add_argument("--collectives", choices=COLLECTIVE_MODELS, help="price collectives as "
                   "NCCL runs them (default) or as ringccl's own schedules would (what-if)")
    c.add_argument("--profile-level", choices=PROFILE_LEVELS, help="which link the "
                   "--profile alpha-beta fit measured (default inter); only with one")
