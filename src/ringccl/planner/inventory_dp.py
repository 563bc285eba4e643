"""Data parallelism's collectives: DDP, ZeRO-1/2 (the distributed optimizer), ZeRO-3 / FSDP and
their hybrid-sharded forms, each on its group of the rank grid.

Dense gradients belong to the dp·cp ranks that hold the same weights (group ``dp``); ZeRO and
FSDP shard them over all of those, or with HSDP over ``dp_shard``·cp of them (group
``dp_shard``) and all-reduce each shard across the ``dp / dp_shard``
replicas (group ``dp_replicate``: torchtitan's ``dp_replicate``, Megatron-Core's distributed
optimizer instances). Routed experts' gradients belong to the expert-data-parallel ranks (group
``edp``, tp·cp·dp/(etp·ep) of them), sharded over all of them.

* DDP (ZeRO stage 0): all-reduce of the gradient buckets once per step (``no_sync`` on all but
  the last micro-batch), overlapping the last backward.
* ZeRO-1/2 (Rajbhandari et al. 2020 §5; Megatron-Core's distributed optimizer): reduce-scatter
  of the gradient buckets to their shard owners (ZeRO-2 every micro-batch) and all-gather of the
  updated parameters, overlapping the next forward (``--overlap-param-gather``).
* ZeRO-3 / FSDP (§7.2; FSDP2 as torchtitan applies it per block, 2-D with TP and with CP on the
  ``dp_shard_cp`` mesh): all-gather of each layer's weights before its forward and again before
  its backward, reduce-scatter of its gradients, prefetched behind compute; with
  ``zero3_gather="parameter"`` DeepSpeed's one list-based call per parameter tensor.
* HSDP (Zhao et al. 2023, PyTorch FSDP §3.3; torchtitan): after the reduce-scatter inside the
  shard group, an all-reduce of the gradient shard across the replicas, once per step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from .context import StepContext
from .costing import Entry
from .entries import slowest
from .frameworks import all_reduces_zero1_gradients
from .stages import StageShape, stage_layers
from .tensors import layer_tensors

__all__ = ["data_parallel", "zero_sharded", "fully_sharded", "replicated_shards",
           "gradient_groups"]


@dataclass(frozen=True)
class _Gradients:
    """One kind of gradients: the group that reduces them (``dp`` for DDP, ``dp_shard`` for
    ZeRO), its label, bytes, buckets of ``bucket_bytes``, and its ranks per shard."""

    group: str
    label: str
    nbytes: float
    buckets: int
    shard: int
    gather_nbytes: float = 0.0          # the same parameters all-gathered (working dtype)

    @property
    def bucket(self) -> float:
        return self.nbytes / self.buckets

    @property
    def gather_bucket(self) -> float:
        return self.gather_nbytes / self.buckets


def _shard_group(ctx: StepContext) -> str:
    """The group ZeRO shards the dense states over: ``dp`` (all dp·cp ranks), or ``dp_shard``
    with HSDP."""
    return "dp_shard" if ctx.dims.dp_replicate > 1 else "dp"


def gradient_groups(ctx: StepContext, st: StageShape) -> list[_Gradients]:
    """The stage's dense gradients and routed experts' gradients, where their group has 2 ranks
    or more."""
    dims = ctx.dims
    sharded = dims.zero_stage > 0
    parts = [(_shard_group(ctx) if sharded else "dp", st.dense_parameters, "dense",
              dims.shard_size if sharded else dims.dp * dims.cp)]
    if st.expert_parameters:
        parts.append(("edp", st.expert_parameters, "expert", dims.expert_dp))
    out = []
    for group, params, label, ranks in parts:
        if ranks < 2:
            continue
        grads = params * ctx.gradient_bytes          # the framework's reduce dtype
        out.append(_Gradients(group, label, grads,
                              max(1, int(np.ceil(grads / dims.bucket_bytes))), ranks,
                              params * ctx.gather_bytes))
    return out


def data_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """DDP (ZeRO stage 0): all-reduce of the gradient buckets once per step (``no_sync`` on
    all but the last micro-batch), overlapping the last backward."""
    if ctx.dims.zero_stage != 0:
        return []
    rows: list[Entry] = []
    for g in gradient_groups(ctx, st):
        rows += slowest(ctx, st.stage, g.group, parallelism="dp", collective="all_reduce",
                        phase="step", what=f"{g.label} gradients (DDP buckets)",
                        nbytes=g.bucket, calls_per_step=g.buckets, overlap="backward",
                        chunks=g.buckets, per_micro_batch=False)
    return rows


def zero_sharded(ctx: StepContext, st: StageShape) -> list[Entry]:
    """ZeRO-1/2 (Rajbhandari et al. 2020 §5): reduce-scatter of the gradient buckets to their
    shard owners (ZeRO-2 every micro-batch) and all-gather of the updated parameters.

    DeepSpeed's ZeRO-1 as Megatron-DeepSpeed ran it
    (:func:`~ringccl.planner.frameworks.all_reduces_zero1_gradients`, DeepSpeed v0.5.4
    ``zero/stage2.py``): each bucket flattened, divided, all-reduced and copied back (three
    passes over it), and the updated parameters all-gathered with one tensor per rank."""
    z = ctx.dims.zero_stage
    if z not in (1, 2):
        return []
    per = ctx.micro_batches if z == 2 else 1
    fallback = z == 1 and all_reduces_zero1_gradients(ctx.dims.framework)
    collective, what, passes = (("all_reduce", "all-reduced in flattened buckets", 3)
                                if fallback else
                                ("reduce_scatter", "to their shard owners", 0))
    rows: list[Entry] = []
    for g in gradient_groups(ctx, st):
        rows += slowest(ctx, st.stage, g.group, parallelism="zero", collective=collective,
                        phase="backward" if z == 2 else "step",
                        what=f"{g.label} gradients {what}", nbytes=g.bucket,
                        calls_per_step=g.buckets * per, overlap="backward", chunks=g.buckets,
                        per_micro_batch=z == 2, buffer_passes=passes)
        rows += slowest(ctx, st.stage, g.group, parallelism="zero", collective="all_gather",
                        phase="step", what=f"updated {g.label} parameters",
                        nbytes=g.gather_bucket, calls_per_step=g.buckets, overlap="forward",
                        chunks=g.buckets, per_micro_batch=False, list_collective=fallback)
    return rows


def fully_sharded(ctx: StepContext, st: StageShape) -> list[Entry]:
    """ZeRO-3 / FSDP (§7.2): all-gather of each layer's weights before its forward and again
    before its backward, reduce-scatter of its gradients, prefetched behind compute; with
    ``zero3_gather="parameter"`` one call per parameter tensor (:func:`_per_parameter`)."""
    if ctx.dims.zero_stage != 3:
        return []
    if ctx.dims.zero3_gather == "parameter":
        return _per_parameter(ctx, st)
    # once per step when the weights stay gathered through the pipeline's micro-batches
    once = ctx.gathers_once
    m = 1 if once else ctx.micro_batches
    layers = max(st.layers, 1)
    phases = [("forward", "weights before each layer's forward")]
    if ctx.dims.reshard_after_forward is not False:
        phases.append(("backward", "weights again for each layer's backward"))
    rows: list[Entry] = []
    for g in gradient_groups(ctx, st):
        for phase, what in phases:
            rows += slowest(ctx, st.stage, g.group, parallelism="zero",
                            collective="all_gather", phase=phase, what=f"{g.label} {what}",
                            nbytes=g.gather_nbytes / layers, calls_per_step=layers * m,
                            overlap=phase, chunks=layers, per_micro_batch=not once)
        rows += slowest(ctx, st.stage, g.group, parallelism="zero", collective="reduce_scatter",
                        phase="backward", what=f"{g.label} gradients of each layer",
                        nbytes=g.nbytes / layers, calls_per_step=layers * m, overlap="backward",
                        chunks=layers, per_micro_batch=not once)
    return rows


def _stage_tensors(ctx: StepContext, st: StageShape) -> tuple[Counter, Counter]:
    """Element count -> tensors of that size on the stage (dense, routed experts), each
    divided by its shards (tp; experts ep·etp), embedding and LM head included."""
    dims, model = ctx.dims, ctx.model
    dense, experts = Counter(), Counter()
    for chunk in stage_layers(model, dims, st.stage):
        for i in chunk:
            d, e = layer_tensors(model, i)
            dense.update({-(-size // dims.tp): n for size, n in d.items()})
            experts.update({-(-size // (dims.expert_tp * dims.ep)): n for size, n in e.items()})
    vocab = -(-model.vocab_size // dims.tp) * model.hidden_size
    if st.first:
        dense[vocab] += 1
    if st.last:
        dense[model.hidden_size] += 1
        if not (model.tie_word_embeddings and st.first):
            dense[vocab] += 1
    return dense, experts


def _per_parameter(ctx: StepContext, st: StageShape) -> list[Entry]:
    """DeepSpeed's ZeRO-3 (v0.3, ``partition_parameters.py``): a list-based all-gather of
    each parameter tensor into a zero-filled buffer (``_allgather_param``: ``torch.zeros``)
    before its forward, again before the recompute's forward (full recompute: the forward hook
    fires again) and before its backward; a list-based reduce-scatter of each gradient."""
    dims, m = ctx.dims, ctx.micro_batches
    # weights gathered in the working dtype, gradients reduced in the framework's reduce dtype
    per_element = {"all_gather": ctx.gather_bytes, "reduce_scatter": ctx.gradient_bytes}
    again = 2 if dims.recompute == "full" else 1
    rows: list[Entry] = []
    dense, experts = _stage_tensors(ctx, st)
    for group, counts, label, ranks in ((_shard_group(ctx), dense, "dense", dims.shard_size),
                                        ("edp", experts, "expert", dims.expert_dp)):
        if not counts or ranks < 2:
            continue
        for size, n in sorted(counts.items()):
            what = f"{label} parameter of {size:,} elements"
            for collective, phase, calls in (("all_gather", "forward", n * m),
                                             ("all_gather", "backward", again * n * m),
                                             ("reduce_scatter", "backward", n * m)):
                rows += slowest(ctx, st.stage, group, parallelism="zero",
                                collective=collective, phase=phase, what=f"{what} ({phase})",
                                nbytes=size * per_element[collective], calls_per_step=calls,
                                overlap=phase, chunks=max(st.layers, 1),
                                list_collective=True,
                                zero_filled=collective == "all_gather")
    return rows


def replicated_shards(ctx: StepContext, st: StageShape) -> list[Entry]:
    """HSDP: the all-reduce of each dense gradient shard across the dp / dp_shard replicas,
    once per step, overlapping the last backward (FSDP's HYBRID_SHARD; torchtitan's
    dp_replicate mesh)."""
    dims = ctx.dims
    if dims.zero_stage == 0 or dims.dp_replicate < 2:
        return []
    rows: list[Entry] = []
    for g in gradient_groups(ctx, st):
        if g.label != "dense":
            continue
        rows += slowest(ctx, st.stage, "dp_replicate", parallelism="zero",
                        collective="all_reduce", phase="step",
                        what=f"{g.label} gradient shards across the replicas (HSDP)",
                        nbytes=g.bucket / g.shard, calls_per_step=g.buckets,
                        overlap="backward", chunks=g.buckets, per_micro_batch=False)
    return rows
