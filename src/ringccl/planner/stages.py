"""What each PP stage holds, per rank: its layers, parameters and forward FLOPs.

The L layers split as evenly as possible into pp·v model chunks, stage s holding chunks
s, s + pp, s + 2·pp, ... (Megatron-LM 2021 §2.2.2); each weight matrix is sharded over tp (and
the routed experts over ep · tp), the vocabulary-parallel embedding and LM head sit on the first
and the last stage. FLOPs per token are :meth:`ModelConfig.flops_per_token`'s, split by layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..caches import memoize
from .model import ModelConfig
from .parallel_dims import ParallelDims

__all__ = ["StageShape", "stage_shape", "stage_layers"]


def stage_layers(model: ModelConfig, dims: ParallelDims, stage: int) -> list[list[int]]:
    """The layers of PP stage ``stage``, one list per model chunk (``virtual_stages`` of them):
    the L layers split as evenly as possible into pp·v chunks (the first chunks take one more),
    stage s holding chunks s, s + pp, s + 2·pp, ... (Megatron-LM 2021 §2.2.2)."""
    return [list(chunk) for chunk in _layer_chunks(model.num_hidden_layers, dims.pp,
                                                    dims.virtual_stages, stage)]


@memoize(maxsize=4096)
def _layer_chunks(num_layers: int, pp: int, virtual_stages: int, stage: int) -> tuple:
    bounds = np.array_split(np.arange(num_layers), pp * virtual_stages)
    return tuple(tuple(map(int, bounds[stage + k * pp])) for k in range(virtual_stages))


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
        expert_forward_flops_per_layer: the routed experts' forward FLOPs of one MoE layer.
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


def _shard(count: int, parts: int) -> int:
    """Elements of one of ``parts`` shards of ``count`` (rounded up, as Megatron pads the
    vocabulary to a multiple of tp and the parallel linear layers divide exactly)."""
    return -(-count // parts)


def stage_shape(model: ModelConfig, dims: ParallelDims, stage: int) -> StageShape:
    """The :class:`StageShape` of PP stage ``stage`` (memoized on what it depends on: the
    model, tp, ep, pp, v, the micro-batch and cp)."""
    return _stage_shape(model, dims.tp, dims.ep, dims.pp, dims.virtual_stages,
                        dims.micro_batch_size, dims.cp, stage)


@memoize(maxsize=4096)
def _stage_shape(model: ModelConfig, tp: int, ep: int, pp: int, virtual_stages: int,
                 micro_batch_size: int, cp: int, stage: int) -> StageShape:
    layers = [i for chunk in _layer_chunks(model.num_hidden_layers, pp, virtual_stages, stage)
              for i in chunk]
    first, last = stage == 0, stage == pp - 1
    # parameter counts are integers: each TP (and EP) shard of a weight matrix rounded up;
    # the norm weights are replicated on every TP rank
    dense = experts = largest = 0
    for i in layers:
        p = model.layer_parameters(i)
        layer_dense = _shard(p["attention"] + p["mlp"], tp) + p["norms"]
        layer_experts = _shard(p["experts"], ep * tp)
        dense += layer_dense
        experts += layer_experts
        largest = max(largest, layer_dense + layer_experts)
    # the vocab-parallel embedding and LM head: V/tp rows of h each
    vocab_shard = _shard(model.vocab_size, tp) * model.hidden_size
    if first:
        dense += vocab_shard
    if last:
        dense += model.hidden_size + (
            vocab_shard if (not model.tie_word_embeddings or pp > 1) else 0)
    vh = model.vocab_size * model.hidden_size
    tokens = micro_batch_size * model.seq_length / cp
    moe = sum(model.is_moe_layer(i) for i in layers)
    # matmul parameters a token meets on this stage (routed experts: k of E)
    active = 0.0
    for i in layers:
        p = model.layer_parameters(i)
        active += p["attention"] + p["mlp"]
        if model.is_moe_layer(i):
            active += model.num_experts_per_tok * model.expert_parameters
    if last:
        active += vh
    per_layer_attn = model.attention_flops_per_token() / model.num_hidden_layers
    attn = tokens * per_layer_attn * len(layers) / tp
    forward = (2.0 * active * tokens / tp) + attn
    expert_fwd = 2.0 * model.num_experts_per_tok * model.expert_parameters * tokens / tp
    return StageShape(stage, len(layers), moe, first, last, dense, experts, largest,
                      forward, attn, expert_fwd if moe else 0.0)
