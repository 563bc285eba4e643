"""The parameter tensors of one layer, as Megatron-LM registers them: what a per-parameter
ZeRO-3 (DeepSpeed) gathers and reduces one tensor at a time.

Megatron's GPT layer (``megatron/model/transformer.py``, ``ParallelTransformerLayer``):
``input_layernorm`` (weight, bias), ``self_attention.query_key_value`` (weight, bias),
``self_attention.dense`` (weight, bias), ``post_attention_layernorm`` (weight, bias),
``mlp.dense_h_to_4h`` (weight, bias), ``mlp.dense_4h_to_h`` (weight, bias): 12 tensors. A gated
(SwiGLU, Llama-style) model without biases and with RMSNorm has 6, its gate and up projections
fused in one weight (Megatron-Core's ``linear_fc1``). The model's own fields say which biases
and norm weights there are (``qkv_bias``, ``attention_out_bias``, ``mlp_bias``, ``norm_type``,
``norms_per_layer``). A MoE layer adds a router weight and two weights per expert (and its
shared experts); multi-head latent attention its down- and up-projections and two latent norms.
"""

from __future__ import annotations

from collections import Counter

from .model import ModelConfig

__all__ = ["layer_tensors"]


def _attention(model: ModelConfig) -> list[tuple[str, int]]:
    h, nq = model.hidden_size, model.num_attention_heads
    if model.mla:
        dq, rope = model.qk_head_dim, model.qk_rope_head_dim
        out = [("kv_down", h * (model.kv_lora_rank + rope)), ("kv_norm", model.kv_lora_rank),
               ("kv_up", model.kv_lora_rank * nq * (model.qk_nope_head_dim + model.v_head_dim))]
        if model.q_lora_rank:
            out += [("q_down", h * model.q_lora_rank), ("q_norm", model.q_lora_rank),
                    ("q_up", model.q_lora_rank * nq * dq)]
        else:
            out.append(("q", h * nq * dq))
        return out + [("dense", nq * model.v_head_dim * h)]
    qkv = (nq + 2 * model.num_key_value_heads) * model.head_dim
    out = [("query_key_value", h * qkv), ("dense", nq * model.head_dim * h)]
    if model.qkv_bias:
        out.append(("query_key_value_bias", qkv))
    if model.attention_out_bias:
        out.append(("dense_bias", h))
    return out


def _mlp(model: ModelConfig, width: int, prefix: str) -> list[tuple[str, int]]:
    h = model.hidden_size
    up = (2 if model.gated_mlp else 1) * width
    out = [(f"{prefix}fc1", h * up), (f"{prefix}fc2", width * h)]
    if model.mlp_bias:
        out += [(f"{prefix}fc1_bias", up), (f"{prefix}fc2_bias", h)]
    return out


def layer_tensors(model: ModelConfig, layer: int) -> tuple[dict[int, int], dict[int, int]]:
    """The tensors of layer ``layer`` (0-based) as two maps, element count -> number of
    tensors of that size: the dense ones (router and shared experts included) and the routed
    experts' (module doc)."""
    h = model.hidden_size
    norms = [("norm", h)] * (model.norms_per_layer * model.norm_weights)
    tensors = norms + _attention(model)
    experts: list[tuple[str, int]] = []
    if model.is_moe_layer(layer):
        tensors.append(("router", h * model.num_local_experts))
        width = model.expert_intermediate_size
        for _ in range(model.num_local_experts):
            experts += _mlp(model, width, "expert_")
        for _ in range(model.n_shared_experts):
            tensors += _mlp(model, model.shared_intermediate_size, "shared_")
    else:
        tensors += _mlp(model, model.intermediate_size, "")
    return (dict(Counter(n for _, n in tensors)), dict(Counter(n for _, n in experts)))
