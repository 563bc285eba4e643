"""What each PP stage holds, per rank: its layers, parameters and forward FLOPs.

The L layers split as evenly as possible into model chunks: pp·v of them, stage s holding
chunks s, s + pp, s + 2·pp, ... (Megatron-LM 2021 §2.2.2); for DualPipe pp, rank s holding
stages s and pp − 1 − s (DeepSeek-V3 §3.2.1: the two directions); for DualPipeV 2·pp, rank s
holding s and 2·pp − 1 − s (the V). Megatron-Core's ``account_for_embedding_in_pipeline_split``
/ ``account_for_loss_in_pipeline_split`` count the embedding / the loss as one more layer of the
split, so the first / last chunk holds one layer fewer (the Llama 3 report's balanced first and
last stages, Dubey et al. 2024 §3.3.2; torchtitan's default split,
``torchtitan/distributed/pipeline_parallel.py`` ``_generate_llm_fqn_per_model_part`` with
``input_weight = output_weight = 1``, is this one chunk by chunk). Each weight matrix is
sharded over tp (the routed experts over ep · etp), the vocabulary-parallel embedding sits with
chunk 0 and the LM head with the last chunk. FLOPs per token are
:meth:`ModelConfig.flops_per_token`'s, split by layer; a stage's forward is one pass through
all of its chunks (for DualPipe: one micro-batch of each direction, each through one of its
two stages).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..caches import memoize
from .model import ModelConfig
from .parallel_dims import ParallelDims
from .routing import expert_load

__all__ = ["StageShape", "stage_shape", "stage_shapes", "stage_layers"]


def stage_layers(model: ModelConfig, dims: ParallelDims, stage: int) -> list[list[int]]:
    """The layers of PP stage ``stage``, one list per model chunk it holds (the first chunks
    of the split take one more layer; see the module docstring for which chunks)."""
    return [list(chunk) for chunk in _layer_chunks(model.num_hidden_layers, dims.pp,
                                                    dims.virtual_stages, stage,
                                                    _placement(dims.schedule), _extras(dims))]


def _placement(schedule: str) -> str:
    return schedule if schedule in ("dualpipe", "dualpipev") else "loop"


def _extras(dims: ParallelDims) -> tuple[int, int]:
    """(1 if the embedding counts as a layer of the split, 1 if the loss does)."""
    return (int(bool(dims.account_for_embedding_in_pipeline_split)),
            int(bool(dims.account_for_loss_in_pipeline_split)))


@memoize(maxsize=4096)
def _layer_chunks(num_layers: int, pp: int, virtual_stages: int, stage: int,
                  placement: str = "loop", extras: tuple[int, int] = (0, 0)) -> tuple:
    first, last = extras
    # slot -1 is the embedding, slot num_layers the loss; they take a layer's place
    slots = np.arange(-first, num_layers + last)
    if placement == "dualpipe":
        bounds = np.array_split(slots, pp)
        held = (stage, pp - 1 - stage)
    elif placement == "dualpipev":
        bounds = np.array_split(slots, 2 * pp)
        held = (stage, 2 * pp - 1 - stage)
    else:
        bounds = np.array_split(slots, pp * virtual_stages)
        held = tuple(stage + k * pp for k in range(virtual_stages))
    return tuple(tuple(int(i) for i in bounds[c] if 0 <= i < num_layers) for c in held)


def _held(pp: int, virtual_stages: int, stage: int, placement: str) -> tuple:
    """(holds chunk 0, holds the last chunk)."""
    if placement == "dualpipe":
        return stage in (0, pp - 1), stage in (0, pp - 1)
    if placement == "dualpipev":
        return stage == 0, stage == 0
    return stage == 0, stage == pp - 1


@dataclass(frozen=True)
class StageShape:
    """What one PP stage holds, per rank (counts of parameters, not bytes).

    Attributes:
        stage, layers, moe_layers: the stage and its layer counts.
        first, last: holds the embedding / the LM head.
        dense_parameters: non-expert weights on a rank (TP-sharded; embedding and head
            included where the stage holds them), an ``int``.
        expert_parameters: routed expert weights on a rank (over ep and tp), an ``int``.
        largest_layer_parameters: the most weights one of the stage's layers has on a rank
            (dense + routed experts, an ``int``): what a ZeRO-3 gather brings to full size.
        forward_flops: one micro-batch's forward FLOPs on this rank.
        attention_core_flops: of those, the attention scores and weighted sum.
        expert_forward_flops_per_layer: the routed experts' forward FLOPs of one MoE layer, at
            the busiest EP rank's load.
        expert_load: the busiest EP rank's tokens over the uniform share
            (:func:`~ringccl.planner.routing.expert_load`).
    """

    stage: int
    layers: int
    moe_layers: int
    first: bool
    last: bool
    dense_parameters: int
    expert_parameters: int
    largest_layer_parameters: int
    forward_flops: float
    attention_core_flops: float
    expert_forward_flops_per_layer: float
    expert_load: float = 1.0


def _shard(count: int, parts: int) -> int:
    """Elements of one of ``parts`` shards of ``count`` (rounded up, as Megatron pads the
    vocabulary to a multiple of tp and the parallel linear layers divide exactly)."""
    return -(-count // parts)


def stage_shapes(model: ModelConfig, dims: ParallelDims) -> tuple[StageShape, ...]:
    """Every PP stage's :class:`StageShape`, memoized as a whole (a layout search asks for the
    same stages for every ZeRO stage, recompute and schedule)."""
    load = _load(model, dims)
    return _stage_shapes(model, dims.tp, dims.ep, dims.pp, dims.virtual_stages,
                         dims.micro_batch_size, dims.cp, dims.expert_tp,
                         _placement(dims.schedule), load, _extras(dims))


@memoize(maxsize=4096)
def _stage_shapes(model, tp, ep, pp, v, mbs, cp, etp, placement, load, extras) -> tuple:
    return tuple(_stage_shape(model, tp, ep, pp, v, mbs, cp, s, etp, placement, load, extras)
                 for s in range(pp))


def _load(model: ModelConfig, dims: ParallelDims) -> float:
    return expert_load(num_experts=model.num_local_experts, top_k=model.num_experts_per_tok,
                       ep=dims.ep, capacity_factor=dims.capacity_factor,
                       routing_imbalance=dims.routing_imbalance,
                       routing_skew=dims.routing_skew) if model.moe else 1.0


def stage_shape(model: ModelConfig, dims: ParallelDims, stage: int) -> StageShape:
    """The :class:`StageShape` of PP stage ``stage`` (memoized on what it depends on: the
    model, tp, ep, etp, pp, v, the schedule's placement, the micro-batch, cp and the split's
    embedding and loss slots)."""
    return _stage_shape(model, dims.tp, dims.ep, dims.pp, dims.virtual_stages,
                        dims.micro_batch_size, dims.cp, stage, dims.expert_tp,
                        _placement(dims.schedule), _load(model, dims), _extras(dims))


@memoize(maxsize=4096)
def _stage_shape(model: ModelConfig, tp: int, ep: int, pp: int, virtual_stages: int,
                 micro_batch_size: int, cp: int, stage: int, etp: int,
                 placement: str, load: float, extras: tuple[int, int] = (0, 0)) -> StageShape:
    layers = [i for chunk in _layer_chunks(model.num_hidden_layers, pp, virtual_stages, stage,
                                           placement, extras) for i in chunk]
    first, last = _held(pp, virtual_stages, stage, placement)
    # parameter counts are integers: each TP (and EP) shard of a weight matrix rounded up;
    # the norm weights are replicated on every TP rank
    dense = experts = largest = 0
    for i in layers:
        p = model.layer_parameters(i)
        layer_dense = _shard(p["attention"] + p["mlp"], tp) + p["norms"]
        layer_experts = _shard(p["experts"], ep * etp)
        dense += layer_dense
        experts += layer_experts
        largest = max(largest, layer_dense + layer_experts)
    # the vocab-parallel embedding and LM head: V/tp rows of h each
    vocab_shard = _shard(model.vocab_size, tp) * model.hidden_size
    if first:
        dense += vocab_shard
    if last:
        dense += model.hidden_size + (
            vocab_shard if not (model.tie_word_embeddings and first) else 0)
    vh = model.vocab_size * model.hidden_size
    tokens = micro_batch_size * model.seq_length / cp
    moe = sum(model.is_moe_layer(i) for i in layers)
    # matmul parameters a token meets on this stage (routed experts: k of E, times the busiest
    # EP rank's load over the uniform share)
    active = 0.0
    routed = model.num_experts_per_tok * model.expert_parameters * load
    for i in layers:
        p = model.layer_parameters(i)
        active += p["attention"] + p["mlp"]
        if model.is_moe_layer(i):
            active += routed
    if last:
        active += vh
    per_layer_attn = model.attention_flops_per_token() / model.num_hidden_layers
    attn = tokens * per_layer_attn * len(layers) / tp
    forward = (2.0 * active * tokens / tp) + attn
    expert_fwd = 2.0 * routed * tokens / tp
    return StageShape(stage, len(layers), moe, first, last, dense, experts, largest,
                      forward, attn, expert_fwd if moe else 0.0, load)
