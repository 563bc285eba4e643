"""The layout search: every valid layout of a model on N GPUs, priced exactly, the ones that
cannot fit or cannot win pruned before pricing, ranked by step time, with the Pareto front of
step time against memory.

**The space** (:class:`SearchSpace`): tp over the divisors of the node's GPUs (a TP group stays
inside a node, Megatron-LM 2021 §3.3) that divide the heads, with sequence parallelism and
without (MoE: with, as Megatron-Core requires); cp from ``cps`` in each of its designs
(``cp_comm_types``; a2a+p2p with its all-to-all over the rest of the node); pp over the divisors
of the remaining GPUs up to the layers; ep over the divisors of the experts that divide tp·cp·dp
(MoE parallel folding) with expert TP tp or 1, and the dispatchers; ZeRO 0–3, and HSDP (shards
inside a node, replicas across) for ZeRO 1–3 where dp spans nodes; micro-batch sizes; the
schedules 1F1B, interleaved (``virtual_stages`` chunks), ZB-H1, ZB-H2, DualPipe and DualPipeV
where they apply (GPipe is left out: 1F1B's bubble with more memory, it never wins); recompute
none, selective, full. Every layout is checked (:meth:`ParallelDims.check`); one whose batch
does not split is not a layout. With a ``framework`` every layout is that framework's: its
preset fills what the search does not enumerate (the overlap and gather knobs, the attention
kernel, the reduce dtype and bucket, bytes per parameter), and a layout it refuses (a ZeRO stage
it does not run, what a dated framework had not yet) is not a layout.

**Pricing is exact and shared.** A stage's estimate (its collectives, compute, exposed
communication, memory without activations) does not depend on the schedule among those that
place the layers alike (1F1B, ZB-H1, ZB-H2; not DualPipe, DualPipeV or another v) nor on the
batch: layouts that differ only there share one set of stage estimates
(:func:`~ringccl.planner.step.stage_estimates`), and each is priced by the same
:func:`~ringccl.planner.step.step_seconds` and :func:`~ringccl.planner.step.peak_memory` that
:func:`~ringccl.planner.step.estimate_step` adds up — equal to it, not an approximation (a test
compares them).

**Pruning before pricing**, each a proven bound:

* *cannot fit*: the model states alone (weights, gradients, optimizer after ZeRO, from the stage
  shapes) of some stage exceed the GPU's memory;
* *cannot win*: the pipeline time of the compute alone (no communication, every stage's F, B, W
  as the step computes them, through the same schedule formula, which only grows with each
  stage's times) is a lower bound of the step; a layout whose bound is no faster than a priced
  layout that also needs no more memory than its states (the Pareto front) is dominated.

**Layouts the walk cannot price.** With ``Cluster.collectives == "ringccl"`` a layout with a
group of more than :data:`~ringccl.planner.costing.WALK_MAX_RANKS` ranks is refused by the walk
(:class:`~ringccl.planner.costing.WalkLimitError`): the search skips it (its class, which has the
same groups), ranks the others and counts it (``SearchResult.skipped_walk_limit``, with the
reason in ``skipped_why``). A skipped layout never enters the front, so the bounds prune only
against priced layouts. When no layout is priced and some were skipped, the search is refused.

References: Narayanan et al. 2021 (SC21) §3.3; Liu et al. 2025 (MoE parallel folding); Qi et
al. 2024; DeepSeek-V3 §3.2.1; Zhao et al. 2023 (FSDP, hybrid sharding).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..caches import memoize
from ..errors import ArgumentError, RingcclError
from .cluster import Cluster, resolve_cluster
from .context import step_context
from .costing import WalkLimitError
from .frameworks import check_framework
from .hf_config import resolve_model
from .model import ModelConfig
from .parallel_dims import ParallelDims
from .pipeline import pipeline_lower_bound
from .stages import stage_shapes
from .stage_memory import stage_states
from .step import (StepEstimate, compute_of, estimate_step, passes_of, peak_memory,
                   stage_estimates)
from .step import step_seconds as _step_seconds

__all__ = ["search", "SearchResult", "SearchSpace", "Priced", "candidates", "price",
           "lower_bounds", "why_slower"]

#: the schedules the search tries, in this order
SEARCH_SCHEDULES = ("1f1b", "interleaved", "zb-h1", "zb-h2", "dualpipe", "dualpipev")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class SearchSpace:
    """What the search enumerates (see the module docstring).

    Attributes:
        micro_batch_sizes, cps, zero_stages, recompute: the values tried.
        cp_comm_types: CP designs tried when cp > 1.
        schedules: pipeline schedules tried when pp > 1 (a subset of :data:`SEARCH_SCHEDULES`).
        virtual_stages: chunks per rank tried with the interleaved schedule.
        hsdp: also try ZeRO shards inside a node, replicated across nodes.
        dispatchers: MoE dispatchers tried when the EP group spans nodes.
        max_pp: the deepest pipeline tried (None: the layers).
    """

    micro_batch_sizes: tuple = (1, 2)
    cps: tuple = (1,)
    cp_comm_types: tuple = ("p2p", "all_gather", "a2a", "a2a+p2p")
    zero_stages: tuple = (0, 1, 2, 3)
    recompute: tuple = ("none", "selective", "full")
    schedules: tuple = SEARCH_SCHEDULES
    virtual_stages: tuple = (2, 4)
    hsdp: bool = True
    dispatchers: tuple = ("alltoall", "flex")
    max_pp: int | None = None

    def __post_init__(self):
        bad = sorted(set(self.schedules) - set(SEARCH_SCHEDULES))
        if bad:
            raise ArgumentError(f"schedules {', '.join(bad)} are not searched; choose from "
                                f"{', '.join(SEARCH_SCHEDULES)}")


def _cp_designs(space: SearchSpace, cp: int, tp: int, gpus_per_node: int) -> Iterator[dict]:
    if cp == 1:
        yield {}
        return
    for kind in space.cp_comm_types:
        if kind != "a2a+p2p":
            yield {"cp_comm_type": kind}
            continue
        a2a = min(cp, max(1, gpus_per_node // tp))   # Ulysses over the rest of the node
        if 1 < a2a < cp and cp % a2a == 0:
            yield {"cp_comm_type": kind, "hierarchical_context_parallel_sizes": (a2a, cp // a2a)}


def _experts(model: ModelConfig, space: SearchSpace, tp: int, cp: int, dp: int,
             gpus_per_node: int) -> Iterator[dict]:
    if not model.moe:
        yield {}
        return
    for ep in _divisors(model.num_local_experts):
        for etp in sorted({tp, 1}):
            if (tp * cp * dp) % (ep * etp):
                continue
            spans_nodes = ep * etp > gpus_per_node
            for dispatcher in (space.dispatchers if spans_nodes else ("alltoall",)):
                yield {"ep": ep, "etp": etp, "moe_token_dispatcher_type": dispatcher}


def _schedules(space: SearchSpace, pp: int, m: int, layers: int) -> Iterator[dict]:
    if pp == 1:
        yield {}
        return
    for name in space.schedules:
        if name == "interleaved":
            for v in space.virtual_stages:
                if m % pp == 0 and pp * v <= layers:
                    yield {"schedule": name, "virtual_stages": v}
        elif name == "zb-h2" and m < 2 * pp - 1:
            continue
        elif name in ("dualpipe", "dualpipev") and (m < 2 * pp or (
                name == "dualpipe" and (pp % 2 or m % 2)) or (
                name == "dualpipev" and 2 * pp > layers)):
            continue
        else:
            yield {"schedule": name}


def candidates(model: ModelConfig, world_size: int, gpus_per_node: int, *,
               global_batch_size: int, space: SearchSpace | None = None,
               framework: str | None = None, **options) -> Iterator[ParallelDims]:
    """Every layout the search tries (valid by :meth:`ParallelDims.check`, a batch that splits),
    layouts that share stage estimates next to each other.

    ``framework``: each layout's (None: the default one). ``options``: :class:`SearchSpace`
    fields (when ``space`` is None).
    """
    space = space or SearchSpace(**options)
    L = model.num_hidden_layers
    for tp in _divisors(gpus_per_node):
        if world_size % tp or model.num_attention_heads % tp or (
                not model.mla and model.num_key_value_heads % tp):
            continue
        for sp in ((False, True) if tp > 1 else (False,)):
            if model.moe and tp > 1 and not sp:
                continue
            for cp, pp in itertools.product(space.cps, _divisors(world_size // tp)):
                if (world_size // tp) % (cp * pp) or pp > L or (space.max_pp and
                                                                pp > space.max_pp):
                    continue
                dp = world_size // (tp * cp * pp)
                yield from _grid_layouts(model, world_size, gpus_per_node, global_batch_size,
                                         space, dict(tp=tp, sp=sp, cp=cp, pp=pp, dp=dp,
                                                     framework=framework))


def _grid_layouts(model, world_size, gpus_per_node, gbs, space, base) -> Iterator[ParallelDims]:
    tp, cp, pp, dp = base["tp"], base["cp"], base["pp"], base["dp"]
    shards = [None]
    if space.hsdp and dp * tp * cp > gpus_per_node and gpus_per_node % (tp * cp) == 0:
        inner = gpus_per_node // (tp * cp)
        if 1 < inner < dp and dp % inner == 0:
            shards.append(inner)
    for design in _cp_designs(space, cp, tp, gpus_per_node):
        for experts in _experts(model, space, tp, cp, dp, gpus_per_node):
            for mbs in space.micro_batch_sizes:
                if gbs % (dp * mbs):
                    continue
                m = gbs // (dp * mbs)
                for zero, shard, rc in itertools.product(space.zero_stages, shards,
                                                         space.recompute):
                    if shard is not None and zero == 0:
                        continue
                    for sched in _schedules(space, pp, m, model.num_hidden_layers):
                        try:
                            dims = ParallelDims(**base, **design, **experts, zero_stage=zero,
                                                dp_shard=shard, micro_batch_size=mbs,
                                                global_batch_size=gbs, recompute=rc, **sched)
                            dims.check(model, world_size)
                        except RingcclError:
                            continue
                        yield dims


def why_slower(plan: StepEstimate, best: StepEstimate, top: int = 2) -> str:
    """Why ``plan`` is slower than ``best``: its largest extra costs, e.g.
    ``"+41.2 ms pp bubble, +12.0 ms compute (recompute full)"``."""
    def parts(p: StepEstimate) -> dict:
        out = dict(p.exposed)
        out["compute"] = p.step_seconds - sum(p.exposed.values())
        return out
    mine, theirs = parts(plan), parts(best)
    diffs = sorted(((mine.get(k, 0.0) - theirs.get(k, 0.0), k) for k in set(mine) | set(theirs)),
                   reverse=True)
    out = []
    for d, k in diffs[:top]:
        if d <= 0:
            break
        label = k
        if k == "compute" and plan.dims.recompute != best.dims.recompute:
            label = f"compute (recompute {plan.dims.recompute})"
        elif k in ("tp", "sp", "dp", "zero", "pp", "cp", "ep", "embedding"):
            label = f"{k} communication exposed"
        out.append(f"+{d * 1e3:.2f} ms {label}")
    return ", ".join(out) or "ties with the first"


# -- pricing ---------------------------------------------------------------------------------

#: the fields a stage's estimate depends on (all but the batch; the schedule as a placement)
_CLASS_FIELDS = tuple(f for f in ParallelDims.__dataclass_fields__
                      if f not in ("global_batch_size", "num_micro_batches", "schedule"))
#: schedules that place the layers as 1F1B does and hide no sends
_PLAIN = ("1f1b", "zb-h1", "zb-h2", "gpipe")


@memoize(maxsize=1 << 16)
def _for_model(dims: ParallelDims, model: ModelConfig) -> ParallelDims:
    """:meth:`ParallelDims.for_model`, memoized: a layout is bounded, then priced."""
    return dims.for_model(model)


def _class_key(dims: ParallelDims) -> tuple:
    """What a stage's estimate depends on: every field but the batch, and the schedule only as
    far as it places the layers or hides sends."""
    placement = "1f1b" if dims.schedule in _PLAIN or (
        dims.schedule == "interleaved" and dims.virtual_stages == 1) else dims.schedule
    return (placement,) + tuple(getattr(dims, f) for f in _CLASS_FIELDS)


@dataclass(frozen=True)
class Priced:
    """One layout's price: ``step_seconds`` and ``peak_memory`` (bytes) as
    :func:`~ringccl.planner.step.estimate_step` gives them, and whether it fits."""

    dims: ParallelDims
    step_seconds: float
    peak_memory: int
    fits: bool


def price(model: ModelConfig, dims: ParallelDims, cluster: Cluster,
          cache: dict | None = None) -> Priced:
    """Price one layout; ``cache`` (a dict) shares stage estimates between the layouts that
    differ only in schedule or batch (see the module docstring). Equal to
    :func:`~ringccl.planner.step.estimate_step`'s step time and peak memory.

    Raises:
        ArgumentError: the layout refused (:class:`WalkLimitError`: a group beyond the walk's
            limit, which :func:`search` skips).
    """
    dims = _for_model(dims, model)
    key = _class_key(dims)
    stages = None if cache is None else cache.get(key)
    if stages is None:
        stages = stage_estimates(step_context(model, dims, cluster))
        if cache is not None:
            cache[key] = stages
    pipeline, _, per_step = _step_seconds(dims, stages)
    peak = peak_memory(dims, stages)
    return Priced(dims, pipeline + per_step, peak, peak <= cluster.gpu_memory)


def _class_bounds(model: ModelConfig, dims: ParallelDims, cluster: Cluster
                  ) -> tuple[list, int]:
    """(each stage's compute-only (F, B, W), the largest stage's model states in bytes) of the
    layouts of ``dims``' class."""
    stages = stage_shapes(model, dims)
    passes = [passes_of(compute_of(model, dims, cluster, st), st) for st in stages]
    states = max(sum(dense.values()) + sum(experts.values())
                 for dense, experts in (stage_states(model, dims, st) for st in stages))
    return passes, states


def lower_bounds(model: ModelConfig, dims: ParallelDims, cluster: Cluster,
                 bounds: tuple | None = None) -> tuple[float, int]:
    """(step seconds, bytes) no more than the layout's price: the pipeline of compute alone
    (:func:`~ringccl.planner.pipeline.pipeline_lower_bound`), and the largest stage's model
    states (see the module docstring). ``bounds``: :func:`_class_bounds` of its class."""
    dims = _for_model(dims, model)
    passes, states = bounds or _class_bounds(model, dims, cluster)
    time = pipeline_lower_bound(dims.schedule if dims.pp > 1 else "1f1b",
                                num_micro_batches=dims.num_micro_batches,
                                virtual_stages=dims.virtual_stages, stages=passes)
    return time, states


class _Front:
    """The Pareto front of (step seconds, peak memory) of the priced layouts that fit."""

    def __init__(self):
        self.points: list[tuple[float, int]] = []

    def dominates(self, time: float, nbytes: int) -> bool:
        return any(t <= time and b <= nbytes for t, b in self.points)

    def add(self, time: float, nbytes: int) -> None:
        if self.dominates(time, nbytes):
            return
        self.points = [(t, b) for t, b in self.points if not (time <= t and nbytes <= b)]
        self.points.append((time, nbytes))


# -- the search ------------------------------------------------------------------------------

@dataclass
class SearchResult:
    """Ranked layouts.

    Attributes:
        plans: full estimates of the ``top`` fastest layouts within memory, fastest first.
        pareto: full estimates of the Pareto front (step time against peak memory), fastest
            first: no priced layout is both faster and smaller.
        tried: layouts enumerated; priced: priced exactly; pruned_memory, pruned_slower: skipped
            before pricing (cannot fit, cannot win); refused_memory: priced, too big.
        skipped_walk_limit: layouts not priced because ``collectives="ringccl"`` does not walk
            one of their groups (more than ``WALK_MAX_RANKS`` ranks); skipped_why: why, in
            words (None when none was skipped).
        model, cluster: the inputs.
    """

    model: ModelConfig
    cluster: Cluster
    plans: list[StepEstimate]
    tried: int
    refused_memory: int
    priced: int = 0
    pruned_memory: int = 0
    pruned_slower: int = 0
    pareto: list[StepEstimate] = field(default_factory=list)
    skipped_walk_limit: int = 0
    skipped_why: str | None = None

    def top(self, n: int = 10) -> list[tuple[StepEstimate, str]]:
        """The ``n`` fastest, each with the reason it loses to the first."""
        if not self.plans:
            return []
        best = self.plans[0]
        return [(p, "fastest" if i == 0 else why_slower(p, best))
                for i, p in enumerate(self.plans[:n])]

    def to_dict(self, n: int = 10) -> dict:
        def row(p):
            return {"layout": p.dims.to_dict(), "describe": p.dims.describe(),
                    "summary": p.summary()}
        return {"model": self.model.name, "cluster": self.cluster.to_dict(),
                "tried": self.tried, "priced": self.priced,
                "pruned_memory": self.pruned_memory, "pruned_slower": self.pruned_slower,
                "within_memory": self.priced - self.refused_memory, "shown": len(self.plans),
                "refused_memory": self.refused_memory,
                "skipped_walk_limit": self.skipped_walk_limit, "skipped_why": self.skipped_why,
                "top": [{"rank": i + 1, **row(p), "why_slower": why}
                        for i, (p, why) in enumerate(self.top(n))],
                "pareto": [row(p) for p in self.pareto]}


def search(model: ModelConfig | str | dict, cluster: Cluster | str | dict, *,
           global_batch_size: int | None = None,
           progress: Callable[[int, int, ParallelDims], None] | None = None, top: int = 10,
           space: SearchSpace | None = None, prune: bool = True, framework: str | None = None,
           **options) -> SearchResult:
    """Every valid layout of ``model`` on ``cluster``'s GPUs, by step time, with the Pareto front.

    Args:
        model, cluster: what to place and where, as :func:`ringccl.planner.plan` takes them: a
            :class:`ModelConfig`, a preset name, a config.json path or a dict of its fields
            (:func:`~ringccl.planner.hf_config.resolve_model`); a :class:`Cluster`, a preset
            name or a dict of its fields (:func:`~ringccl.planner.cluster.resolve_cluster`:
            ``{"preset": "dgx-h100", "nodes": 8}``), its GPUs the ones laid out.
        global_batch_size: sequences per step (default: the world size, at least 256).
        progress: called as ``progress(done, total, layout)`` as layouts are priced or pruned.
        top: how many of the fastest to estimate in full (``plans``).
        space / options: the :class:`SearchSpace` (or its fields).
        prune: skip the layouts that cannot fit or cannot win before pricing them (False: price
            every one; the fastest layout and the Pareto front are the same either way).
        framework: the framework every layout runs under (None: the default,
            :data:`~ringccl.planner.frameworks.DEFAULT_FRAMEWORK`); see the module docstring.
    Returns:
        :class:`SearchResult`.
    Raises:
        ArgumentError: a model or cluster that does not resolve (naming what is allowed); no
            valid layout at all; an unknown framework; with
            ``collectives="ringccl"``, every layout that was not pruned has a group beyond the
            walk's limit (none priced).
    """
    model, cluster = resolve_model(model), resolve_cluster(cluster)
    if framework is not None:
        framework = check_framework(framework)
    world = cluster.world_size
    gbs = global_batch_size or max(world, 256)
    space = space or SearchSpace(**options)
    layouts = list(candidates(model, world, cluster.gpus_per_node, global_batch_size=gbs,
                              space=space, framework=framework))
    if not layouts:
        raise ArgumentError(f"no valid layout of {model.name} on {world} GPUs with "
                            f"global_batch_size={gbs}"
                            + (f" under framework={framework!r}" if framework else ""))
    priced, pruned_memory, pruned_slower, skipped = _price_all(model, cluster, layouts,
                                                               progress, prune)
    why = _skipped_why(skipped)
    if skipped["layouts"] and not priced:
        raise ArgumentError(
            f"collectives='ringccl' prices none of the {len(layouts):,} layouts of {model.name} "
            f"on {world:,} GPUs: {skipped['layouts']:,} have {_skipped_groups(skipped)}, beyond "
            f"the {skipped['limit']:,} ranks its walk prices (time and memory grow as ranks²)"
            + (f", {pruned_memory:,} are too big" if pruned_memory else "")
            + "; price them with collectives='nccl' (the default, --collectives nccl)")
    fits = sorted((p for p in priced if p.fits), key=lambda p: p.step_seconds)
    front = _Front()
    for p in fits:
        front.add(p.step_seconds, p.peak_memory)
    pareto = sorted(front.points)
    full = lambda dims: estimate_step(model, dims, cluster)       # noqa: E731
    plans = [full(p.dims) for p in fits[:top]]
    by_point = {(p.step_seconds, p.peak_memory): p.dims for p in fits}
    return SearchResult(model, cluster, plans, len(layouts), len(priced) - len(fits),
                        len(priced), pruned_memory, pruned_slower,
                        [full(by_point[pt]) for pt in pareto], skipped["layouts"], why)


def _skipped_why(skipped: dict) -> str | None:
    """The reason the search skipped layouts (:class:`WalkLimitError`), in words: the limit,
    the ranks of each group refused (fewest to most), and the pricing that takes them."""
    if not skipped["layouts"]:
        return None
    return (f"collectives='ringccl' walks groups of at most {skipped['limit']:,} ranks and "
            f"these layouts have {_skipped_groups(skipped)}; --collectives nccl (the default) "
            "prices them")


def _skipped_groups(skipped: dict) -> str:
    """``"a dp group of 8,192 ranks or an ep group of 4,160 to 5,120 ranks"``."""
    def one(name, low, high):
        article = "an" if name[0] in "aeiou" else "a"
        ranks = f"{high:,}" if low == high else f"{low:,} to {high:,}"
        return f"{article} {name} group of {ranks} ranks"
    return " or ".join(one(name, *sizes) for name, sizes in sorted(skipped["groups"].items()))


def _price_all(model, cluster, layouts, progress, prune
               ) -> tuple[list[Priced], int, int, dict]:
    """Price the layouts class by class, pruning before pricing (see the module docstring).
    A class is priced whole once any of its layouts survives the bounds; one the walk refuses
    (:class:`WalkLimitError`) is skipped whole: its layouts share their groups. Returns (the
    prices, pruned as too big, pruned as dominated, the skipped: ``{"layouts": count,
    "limit": ranks, "groups": {name: (fewest, most ranks)}}``)."""
    cache: dict = {}
    priced: list[Priced] = []
    front = _Front()
    pruned_memory = pruned_slower = 0
    skipped: dict = {"layouts": 0, "limit": None, "groups": {}}
    done = 0
    for _, group in itertools.groupby(layouts, key=_class_key):
        group = list(group)
        keep = [] if prune else group
        shared = (_class_bounds(model, _for_model(group[0], model), cluster) if prune
                  else None)
        for dims in (group if prune else ()):
            time, states = lower_bounds(model, dims, cluster, shared)
            if states > cluster.gpu_memory:
                pruned_memory += 1
            elif front.dominates(time, states):
                pruned_slower += 1
            else:
                keep.append(dims)
        for i, dims in enumerate(keep):
            try:
                p = price(model, dims, cluster, cache)
            except WalkLimitError as exc:
                skipped["layouts"] += len(keep) - i
                skipped["limit"] = exc.limit
                low, high = skipped["groups"].get(exc.group, (exc.ranks, exc.ranks))
                skipped["groups"][exc.group] = (min(low, exc.ranks), max(high, exc.ranks))
                break
            priced.append(p)
            if p.fits:
                front.add(p.step_seconds, p.peak_memory)
        cache.clear()          # classes come one after another: keep memory flat
        done += len(group)
        if progress is not None:
            progress(done, len(layouts), group[-1])
    return priced, pruned_memory, pruned_slower, skipped
