"""Every collective of one training step, per rank position (PP stage), costed by the tuner.

The map from parallelism to collectives, each built by its own function (:data:`BUILDERS`):

* DDP: all-reduce of the gradients, in buckets, once per step (``no_sync`` on all but the last
  micro-batch), overlapping the last micro-batch's backward;
* Megatron TP: 2 all-reduces of the activations per layer forward (attention and MLP outputs)
  and 2 backward (Megatron-LM 2019 §3, the f/g operators); SP (Korthikanti et al. 2022 §4.2.2)
  replaces each all-reduce with an all-gather + reduce-scatter of the same buffer — equal total
  bytes; full recompute repeats the forward's in the backward;
* ZeRO-1/2 (Rajbhandari et al. 2020 §5, §7): reduce-scatter of the gradients + all-gather of
  the updated parameters (ZeRO-2 reduce-scatters every micro-batch: its gradients are sharded);
  ZeRO-3/FSDP: all-gather of each layer's weights in forward and again in backward, and a
  reduce-scatter of its gradients (3Ψ against DDP's 2Ψ, §7.2), prefetched behind compute;
* PP: point-to-point activations forward and gradients backward between adjacent stages
  (Megatron-LM 2021 §3.2; with TP, the scatter/gather optimisation of §4.1 sends 1/tp of the
  activation across nodes and all-gathers it inside the node);
* MoE: 2 all-to-alls (dispatch, combine) per MoE layer forward and 2 backward in the EP group,
  split into micro-chunks against the expert GEMMs;
* CP: the ring of K/V blocks (an all-gather of K/V forward, a reduce-scatter of their gradients
  backward), overlapped with attention;
* a tied embedding across pipeline stages: an all-reduce of its gradient between the first and
  the last stage (Megatron-LM 2021 §3.2), exposed.

Each builder takes the plan's :class:`~ringccl.planner.context.StepContext` and one stage's
:class:`~ringccl.planner.stages.StageShape` and returns that stage's entries of its parallelism,
costed (:func:`~ringccl.planner.costing.costed`); :func:`inventory` concatenates them in the
order of :data:`BUILDERS`. A new parallelism is a new builder in that tuple.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .compute import compute_precision
from .context import StepContext
from .costing import Entry, costed
from .precision import precision_recipe
from .stages import StageShape, stage_layers
from .tensors import layer_tensors

__all__ = ["inventory", "BUILDERS", "tensor_parallel", "sequence_parallel", "context_parallel",
           "expert_parallel", "pipeline_parallel", "data_parallel", "zero_sharded",
           "fully_sharded", "tied_embedding"]


def _slowest(ctx: StepContext, stage: int, group: str, **entry) -> list[Entry]:
    """The costed entry of the slowest distinct shape of ``group`` on ``stage`` (SPMD: the step
    waits for every group), as a list of one; empty when every such group is a single rank.
    The straggler's own group is costed with its slow link."""
    grid, straggler = ctx.grid, ctx.straggler
    candidates = [(shape, None) for shape in grid.stage_shapes(group, stage)]
    if straggler is not None and ctx.straggler_stage == stage:
        members = grid.group(group, straggler.rank)
        if len(members) > 1:
            candidates.append((grid.shape_of(members), members.index(straggler.rank)))
    best = None
    for shape, index in candidates:
        if shape.size < 2:
            continue
        e = costed(Entry(group=group, shape=shape, **entry), ctx.cluster, straggler, index)
        if best is None or e.seconds_per_call > best.seconds_per_call:
            best = e
    if best is None:
        return []
    best.calls_per_micro_batch = (best.calls_per_step // ctx.micro_batches
                                  if best.per_micro_batch else 0)
    return [best]


def _recompute_factor(ctx: StepContext) -> int:
    """2 with full recompute (the forward's collectives run again in the backward), else 1."""
    return 2 if ctx.dims.recompute == "full" else 1


# -- tensor and sequence parallelism: 2 per layer forward, 2 backward (+2 with full recompute)

def _tp_calls(ctx: StepContext, st: StageShape) -> tuple[int, int]:
    """(forward, backward) TP collectives of one micro-batch on the stage."""
    fwd, bwd = 2 * st.layers, 2 * st.layers * _recompute_factor(ctx)
    if st.first:
        fwd += 1  # the vocab-parallel embedding's output
    if st.last and ctx.dims.sp:
        fwd += 1  # the LM head's input gathered from the sequence shards
    return fwd, bwd


def tensor_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """Megatron TP without SP: all-reduces of the activations (Megatron-LM 2019 §3)."""
    if ctx.dims.tp < 2 or ctx.dims.sp:
        return []
    fwd, bwd = _tp_calls(ctx, st)
    act, m = ctx.activation_bytes, ctx.micro_batches
    return (_slowest(ctx, st.stage, "tp", parallelism="tp", collective="all_reduce",
                     phase="forward", what="attention and MLP outputs", nbytes=act,
                     calls_per_step=fwd * m)
            + _slowest(ctx, st.stage, "tp", parallelism="tp", collective="all_reduce",
                       phase="backward", what="input gradients of the column-parallel matmuls",
                       nbytes=act, calls_per_step=bwd * m))


def sequence_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """Megatron SP: each all-reduce becomes an all-gather + a reduce-scatter of the same
    buffer (Korthikanti et al. 2022 §4.2.2)."""
    if ctx.dims.tp < 2 or not ctx.dims.sp:
        return []
    fwd, bwd = _tp_calls(ctx, st)
    act, m = ctx.activation_bytes, ctx.micro_batches
    rows: list[Entry] = []
    for phase, calls in (("forward", fwd), ("backward", bwd)):
        rows += _slowest(ctx, st.stage, "tp", parallelism="sp", collective="all_gather",
                         phase=phase, what="activations (sequence shards -> full)", nbytes=act,
                         calls_per_step=calls * m)
        rows += _slowest(ctx, st.stage, "tp", parallelism="sp", collective="reduce_scatter",
                         phase=phase, what="partial activations (full -> sequence shards)",
                         nbytes=act, calls_per_step=calls * m)
    return rows


# -- context parallelism: K/V blocks around the cp ring, per layer

def context_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """Ring attention's K/V blocks: an all-gather forward, a reduce-scatter of their gradients
    backward, overlapped with attention (Liu et al. 2023)."""
    dims, model = ctx.dims, ctx.model
    if dims.cp < 2:
        return []
    tokens, B, m = ctx.tokens, model.dtype_bytes, ctx.micro_batches
    if model.mla:
        kv = tokens * (model.kv_lora_rank + model.qk_rope_head_dim) * B
    else:
        kv = 2 * tokens * model.num_key_value_heads / dims.tp * model.head_dim * B
    fwd = st.layers * _recompute_factor(ctx)
    return (_slowest(ctx, st.stage, "cp", parallelism="cp", collective="all_gather",
                     phase="forward", what="K/V blocks (ring attention)", nbytes=kv * dims.cp,
                     calls_per_step=fwd * m, overlap="attention", chunks=dims.cp)
            + _slowest(ctx, st.stage, "cp", parallelism="cp", collective="reduce_scatter",
                       phase="backward", what="K/V gradients", nbytes=kv * dims.cp,
                       calls_per_step=st.layers * m, overlap="attention", chunks=dims.cp))


# -- experts: dispatch + combine per MoE layer, each way

def expert_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """The MoE all-to-alls (dispatch, combine) of the routed tokens in the EP group, cut into
    micro-chunks against the expert GEMMs; a buffer of capacity_factor × the uniform routing
    (GShard §2.2). A recipe with FP8 dispatch (DeepSeek-V3 §3.3.3) sends the forward dispatch
    and the backward's gradient dispatch in FP8 (1 byte and an fp32 scale per 128 values), the
    combines in BF16."""
    dims, model = ctx.dims, ctx.model
    if not (model.moe and dims.ep > 1 and st.moe_layers):
        return []
    values = (dims.micro_batch_size * model.seq_length / (dims.cp * dims.tp)
              * model.num_experts_per_tok * model.hidden_size * dims.capacity_factor)
    a2a = values * model.dtype_bytes
    fp8 = precision_recipe(compute_precision(model, dims)).fp8_dispatch
    kinds = ((("dispatch (FP8)", values * (1 + 4 / 128)), ("combine", a2a)) if fp8
             else (("dispatch, combine", a2a),))
    rows: list[Entry] = []
    for phase, calls in (("forward", 2 * st.moe_layers),
                         ("backward", 2 * st.moe_layers * _recompute_factor(ctx))):
        for what, nbytes in kinds:
            rows += _slowest(ctx, st.stage, "ep", parallelism="ep", collective="all_to_all",
                             phase=phase, what=f"routed tokens ({what})", nbytes=nbytes,
                             calls_per_step=calls // len(kinds) * ctx.micro_batches,
                             overlap="expert compute", chunks=4)
    return rows


# -- pipeline: activations forward, gradients backward, per model chunk

def pipeline_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """Point-to-point activations and gradients between adjacent stages, and with TP (no SP)
    the all-gather of the received shards (Megatron-LM 2021 §3.2, §4.1)."""
    dims, grid = ctx.dims, ctx.grid
    if dims.pp < 2:
        return []
    m, act = ctx.micro_batches, ctx.activation_bytes
    v = dims.virtual_stages
    sends = v - (1 if st.last else 0)    # the last chunk of the last stage ends the model
    recvs = v - (1 if st.first else 0)
    # scatter/gather optimisation (§4.1), or SP's shard; else the whole output from every rank
    p2p = act / dims.tp if dims.pp_scatter_gather or dims.sp else act
    calls = (sends + recvs) * m
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
        rows += _slowest(ctx, st.stage, "tp", parallelism="pp", collective="all_gather",
                         phase="forward", what="received activation shards (scatter/gather)",
                         nbytes=act, calls_per_step=calls)
    return rows


# -- data parallelism: gradients (dense over dp·cp, experts over dp·cp/ep)

@dataclass(frozen=True)
class _Gradients:
    """One kind of gradients a data-parallel group reduces: its group kind, label, bytes and
    buckets of ``bucket_bytes``."""

    group: str
    label: str
    nbytes: float
    buckets: int

    @property
    def bucket(self) -> float:
        return self.nbytes / self.buckets


def _gradients(ctx: StepContext, st: StageShape) -> list[_Gradients]:
    """The stage's dense gradients (group ``dp``: dp·cp ranks) and routed experts' (``edp``:
    dp·cp/ep ranks), where that group has 2 ranks or more."""
    dims = ctx.dims
    parts = [("dp", st.dense_parameters, "dense")]
    if st.expert_parameters:
        parts.append(("edp", st.expert_parameters, "expert"))
    out = []
    for group, params, label in parts:
        if dims.dp * dims.cp // (dims.ep if group == "edp" else 1) < 2:
            continue
        grads = params * ctx.model.dtype_bytes
        out.append(_Gradients(group, label, grads,
                              max(1, int(np.ceil(grads / dims.bucket_bytes)))))
    return out


def data_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """DDP (ZeRO stage 0): all-reduce of the gradient buckets once per step (``no_sync`` on
    all but the last micro-batch), overlapping the last backward."""
    if ctx.dims.zero_stage != 0:
        return []
    rows: list[Entry] = []
    for g in _gradients(ctx, st):
        rows += _slowest(ctx, st.stage, g.group, parallelism="dp", collective="all_reduce",
                         phase="step", what=f"{g.label} gradients (DDP buckets)",
                         nbytes=g.bucket, calls_per_step=g.buckets, overlap="backward",
                         chunks=g.buckets, per_micro_batch=False)
    return rows


def zero_sharded(ctx: StepContext, st: StageShape) -> list[Entry]:
    """ZeRO-1/2 (Rajbhandari et al. 2020 §5): reduce-scatter of the gradient buckets to their
    shard owners (ZeRO-2 every micro-batch) and all-gather of the updated parameters."""
    z = ctx.dims.zero_stage
    if z not in (1, 2):
        return []
    per = ctx.micro_batches if z == 2 else 1
    rows: list[Entry] = []
    for g in _gradients(ctx, st):
        rows += _slowest(ctx, st.stage, g.group, parallelism="zero",
                         collective="reduce_scatter", phase="backward" if z == 2 else "step",
                         what=f"{g.label} gradients to their shard owners", nbytes=g.bucket,
                         calls_per_step=g.buckets * per, overlap="backward", chunks=g.buckets,
                         per_micro_batch=z == 2)
        rows += _slowest(ctx, st.stage, g.group, parallelism="zero", collective="all_gather",
                         phase="step", what=f"updated {g.label} parameters", nbytes=g.bucket,
                         calls_per_step=g.buckets, overlap="forward", chunks=g.buckets,
                         per_micro_batch=False)
    return rows


def fully_sharded(ctx: StepContext, st: StageShape) -> list[Entry]:
    """ZeRO-3 / FSDP (§7.2): all-gather of each layer's weights before its forward and again
    before its backward, reduce-scatter of its gradients, prefetched behind compute; with
    ``zero3_gather="parameter"`` one call per parameter tensor (:func:`_per_parameter`)."""
    if ctx.dims.zero_stage != 3:
        return []
    if ctx.dims.zero3_gather == "parameter":
        return _per_parameter(ctx, st)
    m = ctx.micro_batches
    layers = max(st.layers, 1)
    rows: list[Entry] = []
    for g in _gradients(ctx, st):
        per_layer = g.nbytes / layers
        for phase, what in (("forward", "weights before each layer's forward"),
                            ("backward", "weights again for each layer's backward")):
            rows += _slowest(ctx, st.stage, g.group, parallelism="zero",
                             collective="all_gather", phase=phase, what=f"{g.label} {what}",
                             nbytes=per_layer, calls_per_step=layers * m, overlap=phase,
                             chunks=layers)
        rows += _slowest(ctx, st.stage, g.group, parallelism="zero", collective="reduce_scatter",
                         phase="backward", what=f"{g.label} gradients of each layer",
                         nbytes=per_layer, calls_per_step=layers * m, overlap="backward",
                         chunks=layers)
    return rows


def _stage_tensors(ctx: StepContext, st: StageShape) -> tuple[Counter, Counter]:
    """Element count -> tensors of that size on the stage (dense, routed experts), each
    divided by its shards (tp; experts ep·tp), embedding and LM head included."""
    dims, model = ctx.dims, ctx.model
    dense, experts = Counter(), Counter()
    for chunk in stage_layers(model, dims, st.stage):
        for i in chunk:
            d, e = layer_tensors(model, i)
            dense.update({-(-size // dims.tp): n for size, n in d.items()})
            experts.update({-(-size // (dims.tp * dims.ep)): n for size, n in e.items()})
    vocab = -(-model.vocab_size // dims.tp) * model.hidden_size
    if st.first:
        dense[vocab] += 1
    if st.last:
        dense[model.hidden_size] += 1
        if not model.tie_word_embeddings or dims.pp > 1:
            dense[vocab] += 1
    return dense, experts


def _per_parameter(ctx: StepContext, st: StageShape) -> list[Entry]:
    """DeepSpeed's ZeRO-3 (v0.3, ``partition_parameters.py``): a list-based all-gather of
    each parameter tensor before its forward, again before the recompute's forward (full
    recompute: the forward hook fires again) and before its backward; a list-based
    reduce-scatter of each gradient."""
    dims, m, B = ctx.dims, ctx.micro_batches, ctx.model.dtype_bytes
    again = 2 if dims.recompute == "full" else 1
    rows: list[Entry] = []
    dense, experts = _stage_tensors(ctx, st)
    for group, counts, label in (("dp", dense, "dense"), ("edp", experts, "expert")):
        if not counts or dims.dp * dims.cp // (dims.ep if group == "edp" else 1) < 2:
            continue
        for size, n in sorted(counts.items()):
            what = f"{label} parameter of {size:,} elements"
            for collective, phase, calls in (("all_gather", "forward", n * m),
                                             ("all_gather", "backward", again * n * m),
                                             ("reduce_scatter", "backward", n * m)):
                rows += _slowest(ctx, st.stage, group, parallelism="zero",
                                 collective=collective, phase=phase,
                                 what=f"{what} ({phase})",
                                 nbytes=size * B, calls_per_step=calls, overlap=phase,
                                 chunks=max(st.layers, 1), list_collective=True)
    return rows


# -- the tied embedding shared by the first and the last stage

def tied_embedding(ctx: StepContext, st: StageShape) -> list[Entry]:
    """The all-reduce of a tied embedding's gradient between the first and the last stage
    (Megatron-LM 2021 §3.2), once per step, exposed."""
    model, dims = ctx.model, ctx.dims
    if not (model.tie_word_embeddings and dims.pp > 1 and (st.first or st.last)):
        return []
    return _slowest(ctx, st.stage, "embedding", parallelism="embedding",
                    collective="all_reduce", phase="step",
                    what="tied embedding gradient (first + last stage)",
                    nbytes=model.vocab_size * model.hidden_size / dims.tp * model.dtype_bytes,
                    calls_per_step=1, per_micro_batch=False)


#: the inventory's builders, in the step's order (forward, backward, per step)
BUILDERS: tuple[Callable[[StepContext, StageShape], list[Entry]], ...] = (
    tensor_parallel, sequence_parallel, context_parallel, expert_parallel, pipeline_parallel,
    data_parallel, zero_sharded, fully_sharded, tied_embedding)


def inventory(ctx: StepContext, stage: int) -> list[Entry]:
    """Every collective PP stage ``stage``'s ranks run in one step, costed.

    Args:
        ctx: the plan (:func:`~ringccl.planner.context.step_context`).
        stage: 0 … pp-1.
    Returns:
        a list of :class:`~ringccl.planner.costing.Entry`, in the step's order.
    """
    st = ctx.stages[stage]
    return [e for build in BUILDERS for e in build(ctx, st)]
