"""A transformer's shape, its parameter counts and its training FLOPs per token.

:class:`ModelConfig` takes Hugging Face ``config.json`` field names as they are
(``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``,
``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``; MoE: ``num_local_experts``
(Mixtral) or ``n_routed_experts`` (DeepSeek), ``num_experts_per_tok``,
``moe_intermediate_size``, ``n_shared_experts``, ``first_k_dense_replace``; DeepSeek's
multi-head latent attention: ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
``qk_rope_head_dim``, ``v_head_dim``), plus the training ``seq_length`` and ``dtype``.

Parameter counts (biases are left out: they are < 0.1% of any preset):

* attention, grouped-query (GQA, Ainslie et al. 2023): ``h·(n_q·d) + 2·h·(n_kv·d) + (n_q·d)·h``
  with ``d = h / n_q``; multi-head latent attention (DeepSeek-V2 §2.1): the down/up projections
  of q and of the joint k/v latent, and the output projection;
* MLP: gated (SwiGLU, as Llama and Mixtral use): ``3·h·I``; GPT-3's plain MLP: ``2·h·I``;
* MoE layer: a router ``h·E``, ``E`` routed experts and ``n_shared`` shared experts of
  ``3·h·I_moe`` each (Mixtral: ``I_moe = intermediate_size``); the first
  ``first_k_dense_replace`` layers are dense (DeepSeek-V3);
* two RMSNorm/LayerNorm weight vectors per layer and a final one;
* input embedding ``V·h`` and LM head ``V·h`` (one matrix when ``tie_word_embeddings``).

FLOPs per token of one training step (forward + backward = 3 × forward):
``6 · N_matmul + 6 · L · s · n_q · (d_qk + d_v)`` — that is 6 × the matmul parameters a
token meets (the embedding lookup is not a matmul, the LM head is) plus the attention scores and
their weighted sum, ``12 · L · s · h`` for standard attention (Megatron-LM 2021 §5.1's
``72·B·s·L·h²·(1 + s/6h + V/12hL)`` with its factor 4 of the attention term; Kaplan et al. 2020
Table 1; the Ultra-Scale Playbook's "6N + attention"). Causal masking is not discounted, as in
Megatron-LM's formula.

References:
    Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", SC21 (arXiv:2104.04473), §5.1 (FLOPs) — "Megatron-LM 2021".
    Kaplan et al., "Scaling Laws for Neural Language Models", arXiv:2001.08361, Table 1.
    Tazi et al., "The Ultra-Scale Playbook: Training LLMs on GPU Clusters", Hugging Face, 2025.
    Ainslie et al., "GQA", EMNLP 2023. DeepSeek-AI, "DeepSeek-V2", arXiv:2405.04434, §2.1.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..args import check_int
from ..errors import ArgumentError, ArgumentTypeError

__all__ = ["ModelConfig", "PRESETS", "preset", "load_config", "resolve_model", "DTYPE_BYTES"]

#: bytes per element of the training dtypes
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
               "float8": 1, "fp8": 1}


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer (Hugging Face ``config.json`` names).

    Attributes (counts; sizes are elements, not bytes):
        num_hidden_layers (L), hidden_size (h), num_attention_heads (n_q),
        num_key_value_heads (n_kv; default n_q), intermediate_size (dense MLP width I),
        vocab_size (V), tie_word_embeddings.
        num_local_experts: routed experts E (0: dense); ``n_routed_experts`` is accepted too.
        num_experts_per_tok: routed experts per token k. moe_intermediate_size: expert width
            (default intermediate_size). n_shared_experts, first_k_dense_replace: DeepSeek's.
        q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim: multi-head
            latent attention (kv_lora_rank > 0 turns it on).
        gated_mlp: SwiGLU (3 matrices) or a plain 2-matrix MLP (GPT-3).
        seq_length: tokens per sequence s. dtype: training dtype of weights and activations.
        name, source: what it is and where its shape was published.
    Raises (at construction):
        ArgumentError: a count < 1, n_q not a multiple of n_kv, k > E, unknown dtype.
    """

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    num_key_value_heads: int | None = None
    tie_word_embeddings: bool = False
    num_local_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int | None = None
    n_shared_experts: int = 0
    first_k_dense_replace: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    gated_mlp: bool = True
    seq_length: int = 4096
    dtype: str = "bfloat16"
    name: str = "custom"
    source: str = field(default="", compare=False)

    def __post_init__(self):
        for f in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                  "vocab_size", "seq_length"):
            check_int(getattr(self, f), f, minimum=1)
        for f in ("num_local_experts", "num_experts_per_tok", "n_shared_experts",
                  "first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                  "qk_rope_head_dim", "v_head_dim"):
            check_int(getattr(self, f), f, minimum=0)
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        check_int(self.num_key_value_heads, "num_key_value_heads", minimum=1)
        if self.num_attention_heads % self.num_key_value_heads:
            raise ArgumentError(f"num_attention_heads={self.num_attention_heads} must be a "
                                f"multiple of num_key_value_heads={self.num_key_value_heads}")
        if self.hidden_size % self.num_attention_heads and not self.mla:
            raise ArgumentError(f"hidden_size={self.hidden_size} must be a multiple of "
                                f"num_attention_heads={self.num_attention_heads}")
        if self.num_local_experts and not 1 <= self.num_experts_per_tok <= self.num_local_experts:
            raise ArgumentError(f"num_experts_per_tok={self.num_experts_per_tok} must be in "
                                f"[1, num_local_experts={self.num_local_experts}]")
        if self.first_k_dense_replace > self.num_hidden_layers:
            raise ArgumentError(f"first_k_dense_replace={self.first_k_dense_replace} exceeds "
                                f"num_hidden_layers={self.num_hidden_layers}")
        if self.dtype not in DTYPE_BYTES:
            raise ArgumentError(f"dtype={self.dtype!r} is unknown; expected one of "
                                f"{', '.join(DTYPE_BYTES)}")

    # -- shape --------------------------------------------------------------------------------

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def moe(self) -> bool:
        return self.num_local_experts > 0

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.mla else self.head_dim

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def num_moe_layers(self) -> int:
        return self.num_hidden_layers - self.first_k_dense_replace if self.moe else 0

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) has experts."""
        return self.moe and layer >= self.first_k_dense_replace

    # -- parameters ---------------------------------------------------------------------------

    @property
    def attention_parameters(self) -> int:
        """Weights of one attention block (no norms)."""
        h, nq, nkv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        if self.mla:
            dq, dv, rope = self.qk_head_dim, self.v_head_dim, self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nq * dq
                 if self.q_lora_rank else h * nq * dq)
            kv = (h * (self.kv_lora_rank + rope) + self.kv_lora_rank
                  + self.kv_lora_rank * nq * (self.qk_nope_head_dim + dv))
            return q + kv + nq * dv * h
        d = self.head_dim
        return h * nq * d + 2 * h * nkv * d + nq * d * h

    def _mlp(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * width

    @property
    def dense_mlp_parameters(self) -> int:
        return self._mlp(self.intermediate_size)

    @property
    def expert_parameters(self) -> int:
        """Weights of one routed (or shared) expert."""
        return self._mlp(self.expert_intermediate_size)

    @property
    def router_parameters(self) -> int:
        return self.hidden_size * self.num_local_experts

    def layer_parameters(self, layer: int) -> dict[str, int]:
        """Weights of layer ``layer``: attention, mlp (dense or shared experts + router),
        experts (routed, 0 for a dense layer), norms."""
        attn, norms = self.attention_parameters, 2 * self.hidden_size
        if self.is_moe_layer(layer):
            return {"attention": attn, "norms": norms,
                    "mlp": self.n_shared_experts * self.expert_parameters + self.router_parameters,
                    "experts": self.num_local_experts * self.expert_parameters}
        return {"attention": attn, "norms": norms, "mlp": self.dense_mlp_parameters,
                "experts": 0}

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_parameters(self) -> int:
        """The LM head's own weights (0 when tied to the embedding)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def num_parameters(self) -> int:
        """Total parameters."""
        layers = sum(sum(self.layer_parameters(i).values())
                     for i in range(self.num_hidden_layers))
        return layers + self.hidden_size + self.embedding_parameters + self.lm_head_parameters

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses (routed experts: k of E), embedding included."""
        per_expert = self.expert_parameters
        routed = self.num_moe_layers * (self.num_local_experts - self.num_experts_per_tok)
        return self.num_parameters - routed * per_expert

    @property
    def matmul_parameters_per_token(self) -> int:
        """Active parameters a token multiplies by: active minus the embedding lookup (the LM
        head multiplies, tied or not)."""
        return self.active_parameters - self.embedding_parameters + (
            self.vocab_size * self.hidden_size if self.tie_word_embeddings else 0)

    # -- FLOPs ----------------------------------------------------------------------------------

    def attention_flops_per_token(self, seq_length: int | None = None) -> float:
        """Forward FLOPs per token of the score (Q·K^T) and weighted-sum (·V) matmuls over all
        layers: ``2·L·s·n_q·(d_qk + d_v)`` = ``4·L·s·h`` for standard attention."""
        s = self.seq_length if seq_length is None else seq_length
        return 2.0 * self.num_hidden_layers * s * self.num_attention_heads * (
            self.qk_head_dim + self.value_head_dim)

    def flops_per_token(self, seq_length: int | None = None) -> float:
        """Training (forward + backward) FLOPs per token: ``6·N_matmul + 12·L·s·h``."""
        return 3.0 * (2.0 * self.matmul_parameters_per_token
                      + self.attention_flops_per_token(seq_length))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(num_parameters=self.num_parameters, active_parameters=self.active_parameters,
                 flops_per_token=self.flops_per_token())
        return d


# -- presets --------------------------------------------------------------------------------------

_LLAMA3 = ("Dubey et al., 'The Llama 3 Herd of Models', arXiv:2407.21783, Table 3; "
           "meta-llama/Meta-Llama-3{}/config.json")

#: published shapes, as their config.json (or paper) gives them
PRESETS: dict[str, ModelConfig] = {
    "gpt3-175b": ModelConfig(
        num_hidden_layers=96, hidden_size=12288, num_attention_heads=96, intermediate_size=49152,
        vocab_size=50257, tie_word_embeddings=True, gated_mlp=False, seq_length=2048,
        name="gpt3-175b", source="Brown et al., 'Language Models are Few-Shot Learners', "
        "arXiv:2005.14165, Table 2.1 (n_layers 96, d_model 12288, n_heads 96, n_ctx 2048; "
        "d_ff = 4 d_model; GPT-2's tied embeddings and vocabulary)"),
    "llama3-8b": ModelConfig(
        num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, vocab_size=128256, seq_length=8192, name="llama3-8b",
        source=_LLAMA3.format("-8B")),
    "llama3-70b": ModelConfig(
        num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
        intermediate_size=28672, vocab_size=128256, seq_length=8192, name="llama3-70b",
        source=_LLAMA3.format("-70B")),
    "llama3-405b": ModelConfig(
        num_hidden_layers=126, hidden_size=16384, num_attention_heads=128,
        num_key_value_heads=8, intermediate_size=53248, vocab_size=128256, seq_length=8192,
        name="llama3-405b", source=_LLAMA3.format(".1-405B")),
    "mixtral-8x7b": ModelConfig(
        num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, vocab_size=32000, num_local_experts=8, num_experts_per_tok=2,
        seq_length=4096, name="mixtral-8x7b",
        source="Jiang et al., 'Mixtral of Experts', arXiv:2401.04088, Table 1; "
        "mistralai/Mixtral-8x7B-v0.1/config.json"),
    "deepseek-v3": ModelConfig(
        num_hidden_layers=61, hidden_size=7168, num_attention_heads=128,
        num_key_value_heads=128, intermediate_size=18432, vocab_size=129280,
        num_local_experts=256, num_experts_per_tok=8, moe_intermediate_size=2048,
        n_shared_experts=1, first_k_dense_replace=3, q_lora_rank=1536, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, seq_length=4096,
        name="deepseek-v3", source="DeepSeek-AI, 'DeepSeek-V3 Technical Report', "
        "arXiv:2412.19437, §4.2; deepseek-ai/DeepSeek-V3/config.json (multi-token prediction "
        "module not counted)"),
}


def preset(name: str) -> ModelConfig:
    """The preset ``name`` (one of :data:`PRESETS`).

    Raises:
        ArgumentError: unknown name, listing the presets.
    """
    try:
        return PRESETS[name.lower()]
    except (KeyError, AttributeError):
        raise ArgumentError(f"model={name!r} is not a preset; expected one of "
                            f"{', '.join(PRESETS)} or a config.json path") from None


_ALIASES = {"n_routed_experts": "num_local_experts", "n_layer": "num_hidden_layers",
            "max_seq_len": "seq_length"}


def from_dict(config: dict, *, seq_length: int | None = None, dtype: str | None = None,
              name: str = "custom", source: str = "") -> ModelConfig:
    """A :class:`ModelConfig` from a Hugging Face config dictionary; unknown keys are ignored
    (a config.json has many), ``torch_dtype`` gives the dtype unless ``dtype`` is given.

    Raises:
        ArgumentError: a required field missing, or a bad value.
    """
    if not isinstance(config, dict):
        raise ArgumentTypeError(f"a model config must be a JSON object, got {type(config).__name__}")
    known = {f.name for f in fields(ModelConfig)}
    kwargs = {}
    for key, value in config.items():
        key = _ALIASES.get(key, key)
        if key in known and value is not None:
            kwargs[key] = value
    if "hidden_act" in config and config["hidden_act"] in ("gelu", "gelu_new", "relu"):
        kwargs.setdefault("gated_mlp", False)
    kwargs.setdefault("dtype", {"float32": "float32", "float16": "float16"}.get(
        config.get("torch_dtype"), "bfloat16"))
    if seq_length is not None:
        kwargs["seq_length"] = seq_length
    if dtype is not None:
        kwargs["dtype"] = dtype
    kwargs.setdefault("name", name)
    kwargs.setdefault("source", source)
    missing = [f for f in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                           "intermediate_size", "vocab_size") if f not in kwargs]
    if missing:
        raise ArgumentError(f"model config lacks {', '.join(missing)} (Hugging Face config.json "
                            "field names)")
    return ModelConfig(**kwargs)


def load_config(path, *, seq_length: int | None = None, dtype: str | None = None) -> ModelConfig:
    """Read a Hugging Face ``config.json`` file as is.

    Raises:
        ArgumentError: unreadable or not JSON, missing fields, bad values.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ArgumentError(f"model={str(path)!r}: cannot read a config.json ({exc})") from None
    return from_dict(data, seq_length=seq_length, dtype=dtype, name=p.parent.name or p.stem,
                     source=str(p))


def resolve_model(model, *, seq_length: int | None = None, dtype: str | None = None
                  ) -> ModelConfig:
    """A :class:`ModelConfig` from a config, a preset name, a config.json path or a dict;
    ``seq_length`` / ``dtype`` override the model's.

    Raises:
        ArgumentError: unknown preset, unreadable file, bad fields.
    """
    if isinstance(model, ModelConfig):
        cfg = model
    elif isinstance(model, dict):
        cfg = from_dict(model)
    elif isinstance(model, (str, Path)):
        text = str(model)
        if text.lower() in PRESETS:
            cfg = preset(text)
        elif text.endswith(".json") or Path(text).exists():
            cfg = load_config(text)
        else:
            cfg = preset(text)  # raises, listing the presets
    else:
        raise ArgumentTypeError(f"model={model!r} must be a ModelConfig, a preset name, a "
                                "config.json path or a dict")
    changes = {}
    if seq_length is not None:
        changes["seq_length"] = check_int(seq_length, "seq_length", minimum=1)
    if dtype is not None:
        changes["dtype"] = dtype
    if changes:
        values = {f.name: getattr(cfg, f.name) for f in fields(cfg)}
        values.update(changes)
        cfg = ModelConfig(**values)
    return cfg

