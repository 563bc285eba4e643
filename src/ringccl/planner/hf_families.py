"""The table of Hugging Face model families: how each spells its fields, what its code
implies, which kinds of model the planner refuses and why.

Data for :mod:`.hf_config`, which reads a config.json with it. A family's rules come from its
modeling file in transformers (``models/<model_type>/modeling_<model_type>.py``); a
``model_type`` absent from :data:`FAMILIES` is read as a Llama-style decoder (gated MLP,
RMSNorm, biases where ``attention_bias`` / ``mlp_bias`` say so). docs/planner.md ("Models
the planner reads") summarises the aliases and lists the refused kinds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType

__all__ = ["ALIASES", "ATTENTION_LAYERS", "FAMILIES", "Family", "LLAMA", "REFUSED",
           "REFUSING_FIELDS", "refuses"]

#: ModelConfig field -> the config keys that spell it, tried in order ("a.b": nested)
ALIASES: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads",
                            "attention_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv",
                            "multi_query_group_num", "attn_config.kv_n_heads"),
    "head_dim": ("head_dim", "kv_channels"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size",
                          "dff", "dense_intermediate_size"),
    "vocab_size": ("vocab_size",),
    "tie_word_embeddings": ("tie_word_embeddings",),
    "num_local_experts": ("num_local_experts", "num_experts", "n_routed_experts",
                          "moe_num_experts", "ffn_config.moe_num_experts"),
    "num_experts_per_tok": ("num_experts_per_tok", "num_experts_per_token", "moe_top_k",
                            "moe_topk", "moe_k", "top_k_experts", "ffn_config.moe_top_k"),
    "moe_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size",
                              "ffn_config.ffn_hidden_size"),
    "n_shared_experts": ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"),
    "shared_expert_intermediate_size": ("shared_expert_intermediate_size",
                                        "shared_intermediate_size"),
    "first_k_dense_replace": ("first_k_dense_replace", "num_dense_layers", "first_k_dense"),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "index_n_heads": ("index_n_heads",),
    "index_head_dim": ("index_head_dim",),
    "embedding_size": ("word_embed_proj_dim",),
    "sliding_window": ("sliding_window",),
}

#: the kinds of model the planner refuses, and why (docs/planner.md, "Models the planner
#: reads"); FAMILIES and the layer_types check name the config field that shows the kind
REFUSED = MappingProxyType({
    "cross-attention decoder": "the decoder half of an encoder-decoder model: its layers "
    "attend to an encoder's output, which is not part of the plan",
    "bidirectional encoder": "an encoder family (BERT-style: token-type embeddings, a "
    "masked-LM head) used as a decoder; the planner plans decoder-only language models",
    "not attention": "state-space (Mamba), linear-attention, recurrent or convolution layers: "
    "their parameters, FLOPs and parallelism are not modelled",
    "widened residual stream": "hyper-connections, AltUp or per-layer input embeddings: the "
    "residual stream carries more than hidden_size values per token",
    "layers that differ in shape": "attention whose head count or head size changes from "
    "layer to layer, or layers without their own key/value projections",
    "layers applied more than once": "weights shared across depth (looped or recurrent-depth "
    "blocks)",
    "expert variants": "mixtures of attention experts or zero-computation experts, whose "
    "active parameters are not k of E MLP experts",
    "built-in modality encoders": "vision, audio or byte encoders inside the causal-LM class "
    "(no text_config to plan apart)",
    "other block designs": "a block with parts the planner has no terms for (named in the "
    "message)",
})

#: layer_types entries that are softmax attention (any other entry is refused)
ATTENTION_LAYERS = frozenset({"full_attention", "sliding_attention", "chunked_attention",
                              "attention", "global", "local", "indexed_attention"})


# Llama-style: q/k/v/o biases with attention_bias (the output's own attention_out_bias when
# the file has one), MLP biases with mlp_bias
_LLAMA_BIASES = MappingProxyType({
    "qkv_bias": "attention_bias", "attention_out_bias": ("attention_out_bias", "attention_bias"),
    "mlp_bias": "mlp_bias", "lm_head_bias": "lm_head_bias"})


@dataclass(frozen=True)
class Family:
    """What a family's code implies beyond its config fields.

    Values named by a string are read from that config key (``"not k"``: its negation),
    with ``defaults`` for keys the file leaves out (the config class's own defaults).

    Attributes:
        mlp: "gated" or "plain". norm: a :data:`~.model.NORM_TYPES` key; norm_bias: a key
            whose truth turns a LayerNorm's bias on or off. norms: norms per layer;
            final_norm, embedding_norm.
        biases: ModelConfig bias flag -> True/False, a key, or keys (the first the file has).
        qk_norm: "" / "head" / "all_heads", or (key, kind): that kind when the key is true.
        parallel: True/False or a key (GPT-NeoX's use_parallel_residual).
        width: the MLP width when the file gives none, as a multiple of hidden_size (a
            number or a key: MPT's expansion_ratio).
        positions: the key of a learned position table's size; position_offset: rows the
            code adds (OPT: 2).
        aliases: spellings tried before :data:`ALIASES`; ignore: fields this family's code
            does not read (Doge's num_experts without is_moe).
        attention_gate: "" / "elementwise" / "headwise" (a sigmoid gate on the attention
            output: h·n_q·d or h·n_q weights). shared_experts: shared experts the code builds
            when the file does not count them; shared_expert_gate, router_bias.
        head_dim_floor: without head_dim, d = h // n_q even when n_q does not divide h
            (Llama-style code); False: the code refuses it (GPT-2-era families).
        refuse: (kind of :data:`REFUSED`, the config key that shows it, what it is).
    """

    mlp: str = "gated"
    norm: str = "rmsnorm"
    norm_bias: str = ""
    norms: int = 2
    final_norm: bool = True
    embedding_norm: bool = False
    biases: dict = field(default_factory=lambda: dict(_LLAMA_BIASES))
    qk_norm: str = ""
    parallel: object = False
    width: object = None
    positions: str = ""
    position_offset: int = 0
    aliases: dict = field(default_factory=dict)
    ignore: tuple = ()
    defaults: dict = field(default_factory=dict)
    attention_gate: str = ""
    shared_experts: int = 0
    shared_expert_gate: bool = False
    router_bias: bool = False
    head_dim_floor: bool = True
    refuse: tuple = ()


_ALL = {"qkv_bias": True, "attention_out_bias": True, "mlp_bias": True}
_NONE: dict = {}
_GPT2 = Family(mlp="plain", norm="layernorm", biases=_ALL, width=4, positions="n_positions",
               head_dim_floor=False)
_BART_LIKE = Family(mlp="plain", norm="layernorm", biases=_ALL, head_dim_floor=False)
_QKV = {"qkv_bias": True}
_GPTJ = Family(mlp="plain", norm="layernorm", norms=1, parallel=True, width=4,
               biases={"mlp_bias": True, "lm_head_bias": True}, head_dim_floor=False)


_COHERE = Family(norm="layernorm_no_bias", norms=1, parallel=True,
                 qk_norm=("use_qk_norm", "all_heads"))


def _refuse(kind: str, key: str = "model_type", note: str = "") -> Family:
    return Family(refuse=(kind, key, note))


_DECODER_OF = "cross-attention decoder"
_ENCODER = "bidirectional encoder"
_NOT_ATTENTION = "not attention"
_OTHER = "other block designs"
_SHAPES = "layers that differ in shape"
_LOOPED = "layers applied more than once"
_EXPERTS = "expert variants"
_WIDE = "widened residual stream"

#: fields that show a refused kind in any family: (key, kind, what it is); a field refuses
#: when the file gives it a value other than null, false, 0 or empty (hc_mult, altup: > 1)
REFUSING_FIELDS = (
    ("is_encoder_decoder", _DECODER_OF, ""), ("add_cross_attention", _DECODER_OF, ""),
    ("cross_attention_layers", _DECODER_OF, "layers that attend to image features"),
    ("state_size", _NOT_ATTENTION, "Mamba"), ("mamba_d_state", _NOT_ATTENTION, "Mamba"),
    ("mamba_d_ssm", _NOT_ATTENTION, "Mamba"),
    ("attn_layer_period", _NOT_ATTENTION, "attention every n-th layer, Mamba between"),
    ("layers_block_type", _NOT_ATTENTION, ""), ("block_types", _NOT_ATTENTION, ""),
    ("hybrid_override_pattern", _NOT_ATTENTION, ""),
    ("hc_mult", _WIDE, "hyper-connections"), ("altup_num_inputs", _WIDE, "AltUp"),
    ("hidden_size_per_layer_input", _WIDE, "per-layer input embeddings"),
    ("per_layer_config", _SHAPES, "per-layer attention shapes"),
    ("num_kv_shared_layers", _SHAPES, "layers that reuse another layer's keys and values"),
    ("n_recurrent_loops", _LOOPED, "recurrent-depth loops"),
    ("loop_num_passes", _LOOPED, "layers looped over several passes"),
    ("zero_expert_num", _EXPERTS, "zero-computation experts"),
    ("is_moe", _EXPERTS, "product-key experts"),
)
_MORE_THAN_ONE = ("hc_mult", "altup_num_inputs")


def refuses(key: str, value) -> bool:
    """Whether a :data:`REFUSING_FIELDS` key with this value shows its kind."""
    if value is None or value is False or value == 0 or value == [] or value == {}:
        return False
    return not (key in _MORE_THAN_ONE and isinstance(value, int) and value <= 1)

#: model_type -> what its code implies (families absent here are read as Llama-style)
FAMILIES: dict[str, Family] = {
    # GPT-2 and its kin: plain 4h MLP, LayerNorm, biases everywhere, learned positions
    "gpt2": _GPT2, "gpt-sw3": _GPT2, "gpt_bigcode": _GPT2,
    "openai-gpt": replace(_GPT2, final_norm=False),
    "gpt_neo": replace(_GPT2, positions="max_position_embeddings",
                       biases={"attention_out_bias": True, "mlp_bias": True}),
    "gptj": _GPTJ, "codegen": _GPTJ,
    "bloom": replace(_BART_LIKE, width=4, embedding_norm=True),
    "falcon": replace(_BART_LIKE, width=4, parallel="parallel_attn",
                      biases={"qkv_bias": "bias", "attention_out_bias": "bias",
                              "mlp_bias": "bias"},
                     defaults={"parallel_attn": True, "multi_query": True}),
    "mpt": replace(_BART_LIKE, norm_bias="not no_bias", width="expansion_ratio",
                   defaults={"no_bias": True, "expansion_ratio": 4},
                   biases={"qkv_bias": "not no_bias", "attention_out_bias": "not no_bias",
                           "mlp_bias": "not no_bias"}),
    "dbrx": Family(norm="layernorm_no_bias", biases=_NONE,
                   aliases={"intermediate_size": ("ffn_config.ffn_hidden_size",)}),
    "gpt_neox": replace(_BART_LIKE, parallel="use_parallel_residual",
                        biases={"qkv_bias": "attention_bias", "attention_out_bias":
                                "attention_bias", "mlp_bias": True},
                        defaults={"use_parallel_residual": True, "attention_bias": True}),
    "gpt_neox_japanese": replace(_BART_LIKE, biases=_NONE, width="intermediate_multiple_size",
                                 defaults={"intermediate_multiple_size": 4}),
    "phi": Family(mlp="plain", norm="layernorm", norms=1, parallel=True,
                  qk_norm=("qk_layernorm", "head"), biases=dict(_ALL, lm_head_bias=True)),
    "persimmon": Family(mlp="plain", norm="layernorm", biases=_ALL,
                        qk_norm=("qk_layernorm", "head")),
    "stablelm": Family(norm="layernorm", biases={"qkv_bias": "use_qkv_bias"},
                       qk_norm=("qk_layernorm", "head"), parallel="use_parallel_residual"),
    "starcoder2": Family(mlp="plain", norm="layernorm",
                         biases={"qkv_bias": "use_bias", "attention_out_bias": "use_bias",
                                 "mlp_bias": "use_bias"}),
    "apertus": Family(mlp="plain", qk_norm="head"),
    "apertus1p5_text": Family(mlp="plain", qk_norm="head"),
    "arcee": Family(mlp="plain"),
    "jais2": Family(mlp="plain", norm="layernorm"),
    "nanochat": Family(mlp="plain", norm="parameter_free"),
    "nemotron": Family(mlp="plain", norm="layernorm"),
    "opt": replace(_BART_LIKE, positions="max_position_embeddings", position_offset=2,
                   biases={"qkv_bias": "enable_bias", "attention_out_bias": "enable_bias",
                           "mlp_bias": "enable_bias"}, defaults={"enable_bias": True}),
    "biogpt": replace(_BART_LIKE, positions="max_position_embeddings", position_offset=2),
    "xglm": _BART_LIKE,
    "ctrl": replace(_BART_LIKE, biases=dict(_ALL, lm_head_bias=True)),
    # attention and MLP side by side: one norm (Cohere: LayerNorm without bias, q/k norms
    # per head over (heads, head_dim))
    "cohere": _COHERE, "cohere2": _COHERE, "cohere2_moe": _COHERE,
    "cohere_compass_text": _COHERE,
    # norms: OLMo's LayerNorm has no parameters; OLMo-2's q/k norms span all heads;
    # Gemma-2/3's sandwich norms
    "olmo": Family(norm="parameter_free"),
    "olmo2": Family(qk_norm="all_heads"), "olmo3": Family(qk_norm="all_heads"),
    "flex_olmo": Family(qk_norm="all_heads"),
    "gemma2": Family(norms=4), "gemma3_text": Family(norms=4, qk_norm="head"),
    "glm4": Family(norms=4, biases={"qkv_bias": "attention_bias"}),
    "glm": Family(biases={"qkv_bias": "attention_bias"}),
    "kolibri1": Family(norms=4, qk_norm="head"),
    **{t: Family(qk_norm="head") for t in (
        "qwen3", "qwen3_moe", "exaone4", "exaone_moe", "mellum", "hy_v3", "minimax_m3_vl_text",
        "flint", "dots1")},
    "olmoe": Family(qk_norm="all_heads"), "minimax_m2": Family(qk_norm="all_heads"),
    "phimoe": Family(norm="layernorm"),
    # q/k/v biases without an output bias (Qwen2)
    "qwen2": Family(biases=_QKV), "got_ocr2": Family(biases=_QKV),
    "qwen2_moe": Family(biases=_QKV, shared_expert_gate=True),
    # MoE routers with biases, attention output gates
    "gpt_oss": Family(router_bias=True, biases={"qkv_bias": "attention_bias",
                                                "attention_out_bias": "attention_bias",
                                                "mlp_bias": True}),
    "afmoe": Family(norms=4, qk_norm="head", attention_gate="elementwise", router_bias=True),
    "laguna": Family(qk_norm="head", attention_gate="headwise", router_bias=True),
    "beam": Family(norms=4, qk_norm="head", attention_gate="elementwise"),
    "ernie4_5_moe": Family(router_bias=True, biases={"qkv_bias": "use_bias",
                                                     "attention_out_bias": "use_bias"}),
    # Llama-4: dense layers intermediate_size_mlp wide; experts and the shared expert
    # intermediate_size
    # (its use_qk_norm is an L2 norm without weights)
    "llama4_text": Family(shared_experts=1, aliases={
        "intermediate_size": ("intermediate_size_mlp",),
        "moe_intermediate_size": ("intermediate_size",)}),
    "hunyuan_v1_dense": Family(qk_norm="head"),
    "hunyuan_v1_moe": Family(qk_norm="head", shared_experts=1),
    "doge": Family(qk_norm="head", ignore=("num_local_experts", "num_experts_per_tok")),
    # refused, with the field that says so
    **{t: _refuse(_DECODER_OF) for t in (
        "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "mvp",
        "pegasus", "plbart", "prophetnet", "trocr", "whisper", "musicgen", "musicgen_melody")},
    **{t: _refuse(_ENCODER) for t in (
        "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra",
        "ernie", "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert",
        "roformer", "xlm-roberta", "xlm-roberta-xl", "xmod", "xlm")},
    "xlnet": _refuse(_OTHER, "mem_len", "two-stream relative attention with a memory"),
    "reformer": _refuse(_OTHER, "attn_layers", "LSH attention and reversible layers"),
    "rwkv": _refuse(_NOT_ATTENTION), "xlstm": _refuse(_NOT_ATTENTION),
    "lfm2_moe": _refuse(_NOT_ATTENTION, "conv_L_cache"),
    "mimo_v2_flash": _refuse(_SHAPES, "layer_types", "its sliding_attention layers have "
                             "twice the key/value heads of its full_attention layers"),
    "dots3_note_text": _refuse(_SHAPES, "layer_types", "its indexed_attention layers have "
                               "other latent ranks than its sliding_attention layers"),
    "hrm_text": _refuse(_LOOPED, "num_layers_per_stack", "two stacks applied in a loop"),
    "jetmoe": _refuse(_EXPERTS, "kv_channels", "a mixture of attention experts"),
    "git": _refuse("built-in modality encoders", "vision_config"),
    "phi4_multimodal": _refuse("built-in modality encoders", "audio_config"),
    "blt": _refuse("built-in modality encoders", "patcher_config"),
    "cpmant": _refuse(_OTHER, "segment_types",
                      "segment embeddings and a learned relative position bias"),
    "modernbert-decoder": _refuse(_OTHER, "classifier_activation",
                                  "a dense + norm prediction head before the LM head"),
    "axk2": _refuse(_OTHER, "gated_norm_rank", "norms with their own gating MLPs"),
}

#: what a model_type absent from FAMILIES is read as
LLAMA = Family()
