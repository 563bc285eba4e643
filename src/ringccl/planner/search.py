"""The layout search: every valid layout of a model on N GPUs, within memory, by step time.

Candidates: tp over the divisors of the node's GPUs (a TP group never leaves a node, as
Megatron-LM 2021 §3.3 advises) that divide the heads, with SP (equal bytes to plain TP, less
activation memory: Korthikanti et al. 2022 §4.2.2) and without; pp over the divisors of the
remaining GPUs up to the layers; ep over the divisors of dp that divide the experts (MoE only);
cp from ``cps``; ZeRO 0–3 (ZeRO-3 only with pp = 1, as DeepSpeed and FSDP run it);
micro-batch sizes from ``micro_batch_sizes``; 1F1B, and interleaved with 2 chunks where it
applies; recompute none/selective/full. A layout whose batch does not split, or that the layout
checks refuse, is skipped; one that does not fit the GPU's memory is counted and dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..errors import ArgumentError, RingcclError
from .cluster import Cluster
from .model import ModelConfig
from .parallel_dims import ParallelDims
from .step import StepEstimate, estimate_step

__all__ = ["search", "SearchResult", "candidates", "why_slower"]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(model: ModelConfig, world_size: int, gpus_per_node: int, *,
               global_batch_size: int, micro_batch_sizes: Iterable[int] = (1, 2),
               cps: Iterable[int] = (1,), zero_stages: Iterable[int] = (0, 1, 2, 3),
               recompute: Iterable[str] = ("none", "selective", "full"),
               max_pp: int | None = None) -> Iterable[ParallelDims]:
    """Every layout the search tries (valid by :meth:`ParallelDims.check`, batch that
    splits)."""
    for tp in _divisors(gpus_per_node):
        if world_size % tp or model.num_attention_heads % tp or (
                not model.mla and model.num_key_value_heads % tp):
            continue
        for sp in ((False, True) if tp > 1 else (False,)):
            if model.moe and tp > 1 and not sp:
                continue
            for cp in cps:
                if world_size % (tp * cp):
                    continue
                for pp in _divisors(world_size // (tp * cp)):
                    if pp > model.num_hidden_layers or (max_pp and pp > max_pp):
                        continue
                    dp = world_size // (tp * cp * pp)
                    eps = ([e for e in _divisors(dp) if model.num_local_experts % e == 0]
                           if model.moe else [1])
                    for ep in eps:
                        for zero in zero_stages:
                            if zero == 3 and pp > 1:
                                continue
                            for mbs in micro_batch_sizes:
                                if global_batch_size % (dp * mbs):
                                    continue
                                m = global_batch_size // (dp * mbs)
                                schedules = [("1f1b", 1)]
                                if pp > 1 and m % pp == 0 and model.num_hidden_layers >= 2 * pp:
                                    schedules.append(("interleaved", 2))
                                for schedule, v in schedules:
                                    for rc in recompute:
                                        try:
                                            dims = ParallelDims(
                                                dp=dp, tp=tp, sp=sp, cp=cp, pp=pp, ep=ep,
                                                zero_stage=zero, micro_batch_size=mbs,
                                                global_batch_size=global_batch_size,
                                                schedule=schedule, virtual_stages=v,
                                                recompute=rc)
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


@dataclass
class SearchResult:
    """Ranked layouts.

    Attributes:
        plans: the layouts within memory, fastest first (all of them).
        tried, refused_memory: counts. model, cluster: the inputs.
    """

    model: ModelConfig
    cluster: Cluster
    plans: list[StepEstimate]
    tried: int
    refused_memory: int
    oversized: list = field(default_factory=list)

    def top(self, n: int = 10) -> list[tuple[StepEstimate, str]]:
        """The ``n`` fastest, each with the reason it loses to the first."""
        if not self.plans:
            return []
        best = self.plans[0]
        return [(p, "fastest" if i == 0 else why_slower(p, best))
                for i, p in enumerate(self.plans[:n])]

    def to_dict(self, n: int = 10) -> dict:
        return {"model": self.model.name, "cluster": self.cluster.to_dict(),
                "tried": self.tried, "within_memory": len(self.plans),
                "refused_memory": self.refused_memory,
                "top": [{"rank": i + 1, "layout": p.dims.to_dict(),
                         "describe": p.dims.describe(), "summary": p.summary(),
                         "why_slower": why} for i, (p, why) in enumerate(self.top(n))]}


def search(model: ModelConfig, cluster: Cluster, *, global_batch_size: int | None = None,
           progress: Callable[[int, int, ParallelDims], None] | None = None, **options
           ) -> SearchResult:
    """Every valid layout of ``model`` on ``cluster``'s GPUs, within memory, by step time.

    Args:
        model, cluster: what to place and where.
        global_batch_size: sequences per step (default: the world size, at least 256).
        progress: called as ``progress(done, total, layout)`` after each layout.
        **options: ``micro_batch_sizes``, ``cps``, ``zero_stages``, ``recompute``, ``max_pp``
            (see :func:`candidates`).
    Returns:
        :class:`SearchResult`.
    Raises:
        ArgumentError: no valid layout at all.
    """
    world = cluster.world_size
    gbs = global_batch_size or max(world, 256)
    layouts = list(candidates(model, world, cluster.gpus_per_node, global_batch_size=gbs,
                              **options))
    if not layouts:
        raise ArgumentError(f"no valid layout of {model.name} on {world} GPUs with "
                            f"global_batch_size={gbs}")
    plans, oversized = [], []
    for i, dims in enumerate(layouts):
        p = estimate_step(model, dims, cluster)
        (plans if p.fits_memory else oversized).append(p)
        if progress is not None:
            progress(i + 1, len(layouts), dims)
    plans.sort(key=lambda p: p.step_seconds)
    return SearchResult(model, cluster, plans, len(layouts), len(oversized),
                        [p.dims for p in oversized])
