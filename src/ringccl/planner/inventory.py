"""Every collective of one training step, per rank position (PP stage), costed by the tuner.

The map from parallelism to collectives, each built by its own function (:data:`BUILDERS`):

* DDP: all-reduce of the gradients, in buckets, once per step (``no_sync`` on all but the last
  micro-batch), overlapping the last micro-batch's backward;
* Megatron TP: 2 all-reduces of the activations per layer forward (attention and MLP outputs)
  and 2 backward (Megatron-LM 2019 §3, the f/g operators), one forward after the embedding
  (first stage) and one backward for the LM head's input gradient (last stage); SP
  (Korthikanti et al. 2022 §4.2.2) replaces each all-reduce with an all-gather +
  reduce-scatter of the same buffer — equal total bytes; full recompute repeats the layers'
  forward ones in the backward;
* ZeRO-1/2 (Rajbhandari et al. 2020 §5, §7): reduce-scatter of the gradients + all-gather of
  the updated parameters (ZeRO-2 reduce-scatters every micro-batch: its gradients are sharded);
  ZeRO-3/FSDP: all-gather of each layer's weights in forward and again in backward, and a
  reduce-scatter of its gradients (3Ψ against DDP's 2Ψ, §7.2), prefetched behind compute;
* PP: point-to-point activations forward and gradients backward between adjacent stages
  (Megatron-LM 2021 §3.2; with TP, the scatter/gather optimisation of §4.1 sends 1/tp of the
  activation across nodes and all-gathers it inside the node);
* MoE (:mod:`.inventory_ep`): dispatch and combine per MoE layer each way, as one all-to-all or
  DeepEP's two hops with node-limited routing, and the expert-TP gathers;
* CP (:mod:`.inventory_cp`): ring attention, the all-gather of K/V, Ulysses, or their hybrid;
* DP, ZeRO, FSDP and HSDP (:mod:`.inventory_dp`);
* DualPipe: the all-reduce of the gradients of the two stages a rank and its mirror both hold;
* a tied embedding across pipeline stages: an all-reduce of its gradient between the first and
  the last stage (Megatron-LM 2021 §3.2), exposed.

Each builder takes the plan's :class:`~ringccl.planner.context.StepContext` and one stage's
:class:`~ringccl.planner.stages.StageShape` and returns that stage's entries of its parallelism,
costed (:func:`~ringccl.planner.costing.costed`); :func:`inventory` concatenates them in the
order of :data:`BUILDERS`. A new parallelism is a new builder in that tuple.
"""

from __future__ import annotations

import copy
from typing import Callable

import numpy as np

from ..caches import register
from .context import StepContext
from .costing import Entry, costed
from .entries import slowest
from .groups import GRID_FIELDS
from .inventory_cp import context_parallel
from .inventory_dp import data_parallel, fully_sharded, replicated_shards, zero_sharded
from .inventory_ep import expert_parallel
from .stages import StageShape

__all__ = ["inventory", "BUILDERS", "tensor_parallel", "sequence_parallel", "context_parallel",
           "expert_parallel", "pipeline_parallel", "data_parallel", "zero_sharded",
           "fully_sharded", "replicated_shards", "tied_embedding"]


# -- tensor and sequence parallelism: 2 per layer forward, 2 backward (+2 with full recompute)

def _tp_calls(ctx: StepContext, st: StageShape) -> tuple[int, int, int, int, int]:
    """TP collectives of one micro-batch on the stage: (forward, backward, recompute, first,
    last). ``forward`` and ``backward`` are the layers' two each way (the row-parallel outputs
    forward, the column-parallel layers' input gradients backward), ``recompute`` the
    forward's again under full recompute; ``first`` and ``last`` the embedding's and the LM
    head's one collective each way, on the stages that hold them:

    * the vocab-parallel embedding reduces its output over TP in the forward (Megatron-LM
      ``megatron/mpu/layers.py`` ``VocabParallelEmbedding.forward``: ``reduce_from_tensor_
      model_parallel_region``; Megatron-Core's ``reduce_scatter_embeddings`` under SP); under
      SP the gradient of its sequence scatter is all-gathered in the backward
      (``_ScatterToSequenceParallelRegion.backward``, ``_gather_along_first_dim``);
    * the LM head is one more column-parallel layer: without SP its input's gradient is
      all-reduced in the backward (Megatron-LM ``megatron/model/language_model.py``
      ``parallel_lm_logits``: ``copy_to_tensor_model_parallel_region`` of its input, whose
      backward is the all-reduce, at aed2f75e of 2021 as at 2755bcb8 of 2022); under SP its
      input is all-gathered forward and its input gradient reduce-scattered backward (and the
      input gathered again for the weight gradient, ``overlap_dgrad_reduce``), as every
      column-parallel layer's (``LinearWithGradAccumulationAndAsyncCommunication``)."""
    fwd = bwd = 2 * st.layers
    again = 2 * st.layers if ctx.dims.recompute == "full" else 0
    return fwd, bwd, again, int(st.first), int(st.last)


def tensor_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """Megatron TP without SP: all-reduces of the activations (Megatron-LM 2019 §3), the
    embedding's forward and the LM head's input gradient (:func:`_tp_calls`); the
    backward's, of the column-parallel layers' input gradients, behind their weight-gradient
    GEMMs where the framework issues them asynchronously (``overlap_dgrad_reduce``)."""
    if ctx.dims.tp < 2 or ctx.dims.sp:
        return []
    fwd, bwd, again, first, last = _tp_calls(ctx, st)
    act, m = ctx.activation_bytes, ctx.micro_batches
    rows = (slowest(ctx, st.stage, "tp", parallelism="tp", collective="all_reduce",
                    phase="forward", what="attention and MLP outputs", nbytes=act,
                    calls_per_step=(fwd + first) * m)
            + slowest(ctx, st.stage, "tp", parallelism="tp", collective="all_reduce",
                      phase="backward", what="input gradients of the column-parallel matmuls",
                      nbytes=act, calls_per_step=(bwd + last) * m, overlap="weight gradients"))
    if again:
        rows += slowest(ctx, st.stage, "tp", parallelism="tp", collective="all_reduce",
                        phase="backward", what="attention and MLP outputs again (recompute)",
                        nbytes=act, calls_per_step=again * m)
    return rows


def sequence_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """Megatron SP: each all-reduce becomes an all-gather + a reduce-scatter of the same
    buffer (Korthikanti et al. 2022 §4.2.2). Backward: the row-parallel layers' output
    gradients gathered, the column-parallel layers' input gradients reduce-scattered; with
    ``overlap_dgrad_reduce`` (Megatron's implementation) the column-parallel input is also
    re-gathered (only its shard was kept), behind the input-gradient GEMM, and the
    reduce-scatter runs behind the weight-gradient GEMM. The embedding's forward reduction is
    counted as an all-gather + a reduce-scatter, the bytes of Megatron-LM 2022's all-reduce
    before its sequence scatter (Megatron-Core with rotary positions reduce-scatters only: one
    all-gather too many there), the scatter's gradient gathered backward; the LM head gathers
    its input forward and reduce-scatters its input gradient backward (:func:`_tp_calls`)."""
    dims = ctx.dims
    if dims.tp < 2 or not dims.sp:
        return []
    fwd, bwd, again, first, last = _tp_calls(ctx, st)
    act, m = ctx.activation_bytes, ctx.micro_batches
    calls = [("forward", "all_gather", fwd + first + last,
              "activations (sequence shards -> full)", ""),
             ("forward", "reduce_scatter", fwd + first,
              "partial activations (full -> sequence shards)", ""),
             ("backward", "all_gather", bwd + first,
              "output gradients of the row-parallel matmuls", ""),
             ("backward", "reduce_scatter", bwd + last,
              "input gradients of the column-parallel matmuls", "weight gradients")]
    if dims.overlap_dgrad_reduce:
        calls.append(("backward", "all_gather", bwd + last,
                      "column-parallel inputs again (for the weight gradients)",
                      "input gradients"))
    if again:
        calls += [("backward", "all_gather", again, "activations again (recompute)", ""),
                  ("backward", "reduce_scatter", again, "partial activations again (recompute)",
                   "")]
    rows: list[Entry] = []
    for phase, collective, n, what, window in calls:
        extra = {"overlap": window} if window else {}
        rows += slowest(ctx, st.stage, "tp", parallelism="sp", collective=collective,
                        phase=phase, what=what, nbytes=act, calls_per_step=n * m, **extra)
    return rows


# -- pipeline: activations forward, gradients backward, per model chunk

def pipeline_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """Point-to-point activations and gradients between adjacent stages, and with TP (no SP)
    the all-gather of the received shards (Megatron-LM 2021 §3.2, §4.1); with
    ``pp_sequential_p2p`` every send and receive its own transfer (DeepSpeed's pipeline engine,
    ``deepspeed/runtime/pipe/engine.py``: SendActivation, RecvGrad, SendGrad, RecvActivation
    one after another)."""
    dims, grid = ctx.dims, ctx.grid
    if dims.pp < 2:
        return []
    m, act = ctx.micro_batches, ctx.activation_bytes
    v = 2 if dims.schedule in ("dualpipe", "dualpipev") else dims.virtual_stages
    sends = v - (1 if st.last else 0)    # the last chunk of the last stage ends the model
    recvs = v - (1 if st.first else 0)
    # scatter/gather optimisation (§4.1), or SP's shard; else the whole output from every rank
    p2p = act / dims.tp if dims.pp_scatter_gather or dims.sp else act
    # a send (activation forward) goes with a receive (gradient back) in one batched call,
    # or, one blocking call at a time (DeepSpeed's pipeline engine), each is its own transfer
    calls = (sends + recvs) * m * (2 if dims.pp_sequential_p2p else 1)
    rank = int(grid.ranks_of_stage(st.stage)[0])
    peers = grid.group("pp", rank)
    nxt = peers[(peers.index(rank) + 1) % len(peers)] if sends else peers[peers.index(rank) - 1]
    pair = grid.shape_of(sorted((rank, nxt)))
    e = costed(Entry(parallelism="pp", collective="send_recv", phase="forward",
                     what="activations to the next stage, gradients back", group="pp",
                     shape=pair, nbytes=p2p, calls_per_step=calls), ctx.cluster)
    e.calls_per_micro_batch = calls // m
    rows = [e]
    if dims.tp > 1 and not dims.sp and dims.pp_scatter_gather:
        rows += slowest(ctx, st.stage, "tp", parallelism="pp", collective="all_gather",
                        phase="forward", what="received activation shards (scatter/gather)",
                        nbytes=act, calls_per_step=calls)
    return rows + _mirror(ctx, st)


def _mirror(ctx: StepContext, st: StageShape) -> list[Entry]:
    """DualPipe: rank s and rank pp − 1 − s hold the same two stages; their gradients are
    all-reduced between the two once per step, in buckets, overlapping the last backward
    (DeepSeek-V3 §3.2.1: "two copies of the model parameters")."""
    if ctx.dims.schedule != "dualpipe":
        return []
    grads = (st.dense_parameters + st.expert_parameters) * ctx.gradient_bytes
    buckets = max(1, int(np.ceil(grads / ctx.dims.bucket_bytes)))
    return slowest(ctx, st.stage, "pp_mirror", parallelism="pp", collective="all_reduce",
                   phase="step", what="gradients of the two stages the mirror rank also holds",
                   nbytes=grads / buckets, calls_per_step=buckets, overlap="backward",
                   chunks=buckets, per_micro_batch=False)


# -- the tied embedding shared by the first and the last stage

def tied_embedding(ctx: StepContext, st: StageShape) -> list[Entry]:
    """The all-reduce of a tied embedding's gradient between the first and the last stage
    (Megatron-LM 2021 §3.2), once per step, exposed."""
    model, dims = ctx.model, ctx.dims
    if not (model.tie_word_embeddings and dims.pp > 1 and (st.first or st.last)):
        return []
    return slowest(ctx, st.stage, "embedding", parallelism="embedding",
                    collective="all_reduce", phase="step",
                    what="tied embedding gradient (first + last stage)",
                    nbytes=model.vocab_size * model.hidden_size / dims.tp * model.dtype_bytes,
                    calls_per_step=1, per_micro_batch=False)


#: the inventory's builders, in the step's order (forward, backward, per step)
BUILDERS: tuple[Callable[[StepContext, StageShape], list[Entry]], ...] = (
    tensor_parallel, sequence_parallel, context_parallel, expert_parallel, pipeline_parallel,
    data_parallel, zero_sharded, fully_sharded, replicated_shards, tied_embedding)


#: the layout fields each builder reads besides the rank grid's (:data:`GRID_FIELDS`): with the
#: model, cluster, straggler, stage shape and passes per step they make its memo key
BUILDER_FIELDS = {
    tensor_parallel: ("sp", "recompute", "micro_batch_size"),
    sequence_parallel: ("sp", "recompute", "micro_batch_size", "overlap_dgrad_reduce"),
    context_parallel: ("recompute", "micro_batch_size"),
    expert_parallel: ("sp", "recompute", "micro_batch_size", "moe_token_dispatcher_type",
                      "moe_router_group_topk", "precision"),
    pipeline_parallel: ("sp", "schedule", "virtual_stages", "micro_batch_size",
                        "bucket_bytes", "pp_scatter_gather", "reduce_dtype",
                        "pp_sequential_p2p"),
    data_parallel: ("zero_stage", "bucket_bytes", "reduce_dtype", "framework"),
    zero_sharded: ("zero_stage", "bucket_bytes", "reduce_dtype", "framework"),
    fully_sharded: ("zero_stage", "bucket_bytes", "zero3_gather", "recompute", "reduce_dtype",
                    "framework", "reshard_after_forward"),
    replicated_shards: ("zero_stage", "bucket_bytes", "reduce_dtype", "framework"),
    tied_embedding: (),
}

#: builder results, shared by the layouts whose key is the same (a search plans thousands)
_BUILT: dict = {}
register(_BUILT.clear)


class _Key(tuple):
    """A tuple whose hash is computed once (a plan's part of every builder's key)."""

    def __new__(cls, items):
        self = super().__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self):
        return self._hash


def _builder_keys(ctx: StepContext) -> dict:
    """Per builder, what its result depends on in ``ctx`` (the model, cluster, straggler,
    passes per step, the grid's fields, what the stage shapes depend on, and the builder's own
    fields, :data:`BUILDER_FIELDS`), built once per plan."""
    keys = getattr(ctx, "_builder_keys", None)
    if keys is None:
        dims = ctx.dims
        common = (ctx.model, ctx.cluster, ctx.straggler, ctx.straggler_stage,
                  ctx.micro_batches,
                  dims.schedule if dims.schedule in ("dualpipe", "dualpipev") else "",
                  dims.virtual_stages, dims.micro_batch_size, dims.capacity_factor,
                  dims.routing_imbalance, dims.routing_skew,
                  dims.account_for_embedding_in_pipeline_split,
                  dims.account_for_loss_in_pipeline_split) + tuple(
            getattr(dims, f) for f in GRID_FIELDS)
        keys = {build: _Key((build,) + common + tuple(getattr(dims, f) for f in fields))
                for build, fields in BUILDER_FIELDS.items()}
        object.__setattr__(ctx, "_builder_keys", keys)
    return keys


def _built(build, ctx: StepContext, st: StageShape) -> list[Entry]:
    key = (_builder_keys(ctx)[build], st.stage)
    rows = _BUILT.get(key)
    if rows is None:
        if len(_BUILT) > 1 << 16:
            _BUILT.clear()
        rows = _BUILT[key] = build(ctx, st)
    return rows


def inventory(ctx: StepContext, stage: int, copies: bool = True) -> list[Entry]:
    """Every collective PP stage ``stage``'s ranks run in one step, costed.

    Args:
        ctx: the plan (:func:`~ringccl.planner.context.step_context`).
        stage: 0 … pp-1.
        copies: each entry a copy of the memoized one (False: the memoized entries themselves).
    Returns:
        a list of :class:`~ringccl.planner.costing.Entry`, in the step's order.
    """
    st = ctx.stages[stage]
    rows = [e for build in BUILDERS for e in _built(build, ctx, st)]
    # the step sets each entry's overlap from the layout's knobs: a plan keeps its own copies
    # (``copies=False``: the layout search, which reads only the numbers)
    return [copy.copy(e) for e in rows] if copies else rows
