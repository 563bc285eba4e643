"""A decoder-only transformer's shape, its parameter counts and its training FLOPs per token.

:class:`ModelConfig` is the planner's one model object. Its fields carry Hugging Face
``config.json`` names (``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
``num_key_value_heads``, ``head_dim``, ``intermediate_size``, ``vocab_size``,
``tie_word_embeddings``; MoE: ``num_local_experts``, ``num_experts_per_tok``,
``moe_intermediate_size``, ``n_shared_experts``, ``shared_expert_intermediate_size``,
``first_k_dense_replace``; DeepSeek's multi-head latent attention: ``q_lora_rank``,
``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``) plus what a
family's code implies rather than writes (gated MLP, biases, norm type, learned positions,
parallel blocks), the training ``seq_length`` and ``dtype``. :mod:`.hf_config` reads any
family's config.json into it (aliases, per-family rules, refusals).

Parameter counts (d = head_dim, n_q / n_kv heads, I a MLP width, m = weights per norm:
1 for RMSNorm, 2 for LayerNorm with bias, 0 for a parameter-free norm):

* attention, grouped-query (GQA, Ainslie et al. 2023): ``h·n_q·d + 2·h·n_kv·d + n_q·d·h``,
  plus ``(n_q + 2·n_kv)·d`` for q/k/v biases and ``h`` for an output-projection bias;
  multi-head latent attention (DeepSeek-V2 §2.1): the down/up projections of q and of the
  joint k/v latent, their norms, and the output projection;
* MLP: gated (SwiGLU, Shazeer 2020; Llama, Mixtral): ``3·h·I``; plain (GPT-2/3, OPT,
  BLOOM, Falcon, Starcoder2): ``2·h·I``; biases ``2·I + h`` (gated) or ``I + h`` (plain);
* MoE layer (Fedus et al. 2022; DeepSeek-V3 §2.1.2): a router ``h·E`` (+ ``E`` with a router
  bias), ``E`` routed experts of width ``I_moe``, ``n_shared`` shared experts of width
  ``I_shared`` (+ ``h`` for Qwen2-MoE's sigmoid gate on the shared expert); which layers are
  MoE: all but the first ``first_k_dense_replace``, or the explicit ``moe_layers``;
* norms: ``norms_per_layer·m·h`` per layer (2: pre-attention and pre-MLP; 1: one shared norm
  of a parallel block; 4: Gemma-2's sandwich norms), q/k norms (``2·m·d`` per head-wise
  pair, ``m·(n_q + n_kv)·d`` across all heads), a final norm and an optional embedding norm;
* input embedding ``V·h`` plus ``P·h`` for a learned position table of P rows, LM head
  ``V·h`` (none when ``tie_word_embeddings``; + ``V`` for an output bias).

FLOPs per token of one training step (forward + backward = 3 × forward):
``6 · N_matmul + 6 · L · s · n_q · (d_qk + d_v)`` — that is 6 × the matmul parameters a
token meets (the embedding lookups are not matmuls, the LM head is) plus the attention scores
and their weighted sum, ``12 · L · s · h`` for standard attention (Megatron-LM 2021 §5.1's
``72·B·s·L·h²·(1 + s/6h + V/12hL)`` with its factor 4 of the attention term; Kaplan et al.
2020 Table 1; the Ultra-Scale Playbook's "6N + attention"). Causal masking is not
discounted, as in Megatron-LM's formula.

References:
    Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", SC21 (arXiv:2104.04473), §5.1 (FLOPs) — "Megatron-LM 2021".
    Kaplan et al., "Scaling Laws for Neural Language Models", arXiv:2001.08361, Table 1.
    Tazi et al., "The Ultra-Scale Playbook: Training LLMs on GPU Clusters", Hugging Face, 2025.
    Ainslie et al., "GQA", EMNLP 2023. DeepSeek-AI, "DeepSeek-V2", arXiv:2405.04434, §2.1.
    Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202.
    Fedus et al., "Switch Transformers", JMLR 2022. DeepSeek-AI, "DeepSeek-V3 Technical
    Report", arXiv:2412.19437, §2.1.2. Wang and Komatsuzaki, GPT-J-6B (2021) and Chowdhery
    et al., "PaLM", arXiv:2204.02311, §2 (parallel attention and MLP blocks).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

from ..args import check_int, lookup
from ..units import MAX_INT
from ..errors import ArgumentError, ArgumentTypeError

__all__ = ["ModelConfig", "PRESETS", "preset", "check_shape", "DTYPE_BYTES", "NORM_TYPES",
           "QK_NORMS", "ATTENTION_GATES", "MAX_LAYERS", "MAX_EXPERTS", "DEFAULT_SEQ_LENGTH"]

#: tokens per sequence when neither the config nor the caller gives one
DEFAULT_SEQ_LENGTH = 4096

#: bytes per element of the training dtypes
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2,
               "float8": 1, "fp8": 1}

#: weight vectors of h elements per norm: RMSNorm (a scale), LayerNorm (scale and bias),
#: LayerNorm without bias, and the parameter-free LayerNorm of OLMo (Groeneveld et al. 2024)
NORM_TYPES = {"rmsnorm": 1, "layernorm": 2, "layernorm_no_bias": 1, "parameter_free": 0}

#: q/k norms: none, one weight vector of head_dim shared by every head (Qwen3, Gemma-3), or
#: one across all heads (OLMo-2, Cohere: (n_q + n_kv)·d)
QK_NORMS = ("", "head", "all_heads")

#: a sigmoid gate on the attention output, computed from the layer input (Qiu et al. 2025,
#: "Gated Attention for Large Language Models"): none, one per element (h·n_q·d weights) or
#: one per head (h·n_q)
ATTENTION_GATES = ("", "elementwise", "headwise")

#: the most decoder layers a model may have: 10 times the deepest transformer trained (DeepNet,
#: Wang et al. 2022, arXiv:2203.00555: 1,000 layers); a plan walks its layers one by one
MAX_LAYERS = 10_000
#: the most routed experts a model may have: 2^20 = 1,048,576, as many as PEER's (He 2024,
#: "Mixture of A Million Experts", arXiv:2407.04202)
MAX_EXPERTS = 2 ** 20

_COUNTS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
           "vocab_size", "seq_length", "norms_per_layer")
_SIZES = ("num_local_experts", "num_experts_per_tok", "n_shared_experts",
          "first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
          "qk_rope_head_dim", "v_head_dim", "learned_position_embeddings", "index_n_heads",
          "index_head_dim", "sliding_window")
_OPTIONAL_COUNTS = ("num_key_value_heads", "head_dim", "moe_intermediate_size",
                    "shared_expert_intermediate_size", "embedding_size")
_FLAGS = ("tie_word_embeddings", "gated_mlp", "qkv_bias", "attention_out_bias", "mlp_bias",
          "lm_head_bias", "router_bias", "shared_expert_gate", "embedding_norm",
          "parallel_block", "final_norm")


#: the fields bounded below int64's largest value, and their bound
_MAXIMA = {"num_hidden_layers": MAX_LAYERS, "num_local_experts": MAX_EXPERTS}


def _check_count(value, label: str, minimum: int, maximum: int | None) -> None:
    """A count in [minimum, maximum] (its message states the range), or (no maximum) >= minimum
    and at most :data:`~ringccl.units.MAX_INT` (2^63 - 1: a larger one is no int64, nor always
    a float)."""
    if maximum is not None:
        check_int(value, label, minimum, maximum)
        return
    check_int(value, label, minimum)
    if value > MAX_INT:
        check_int(value, label, minimum, MAX_INT)


def check_shape(values: dict, label: Callable[[str], str] = str) -> None:
    """Check a model's fields: types, ranges and their consistency.

    ``values`` maps :class:`ModelConfig` field names to values (absent: the default);
    ``label(field)`` is how a message names a field and its value — :mod:`.hf_config` passes
    the config.json key the value came from, so the message shows the file's own words.

    Raises:
        ArgumentTypeError: a count that is not an integer, a flag that is not a bool.
        ArgumentError: a count < 1 (or < 0 where 0 means "none"), above 2^63 - 1, layers above
            :data:`MAX_LAYERS`, experts above :data:`MAX_EXPERTS`, n_q not a multiple of n_kv,
            h not a multiple of n_q without an explicit head_dim, k outside [1, E], an MoE
            layer index outside the model, an unknown dtype, norm type or q/k norm.
    """
    def name(f):
        """The field as the caller spells it, with its value (or "absent": a label that
        already holds "=", such as "num_experts_per_tok=null (read as absent)", as is)."""
        if f in values:
            return f"{label(f)}={values[f]!r}"
        return label(f) if "=" in label(f) else f"{label(f)} (absent)"

    for f in _COUNTS + _OPTIONAL_COUNTS:
        if values.get(f) is not None:
            _check_count(values[f], label(f), 1, _MAXIMA.get(f))
    for f in _SIZES:
        if f in values:
            _check_count(values[f], label(f), 0, _MAXIMA.get(f))
    for f in _FLAGS:
        if f in values and not isinstance(values[f], bool):
            raise ArgumentTypeError(f"{name(f)} must be true or false, got "
                                    f"{type(values[f]).__name__}")
    nq, nkv = values["num_attention_heads"], values.get("num_key_value_heads")
    if nkv is not None and nq % nkv:
        raise ArgumentError(f"{name('num_attention_heads')} must be a multiple of "
                            f"{name('num_key_value_heads')}")
    mla = values.get("kv_lora_rank", 0) > 0
    if values["hidden_size"] % nq and values.get("head_dim") is None and not mla:
        raise ArgumentError(f"{name('hidden_size')} must be a multiple of "
                            f"{name('num_attention_heads')} (or head_dim given)")
    experts, k = values.get("num_local_experts", 0), values.get("num_experts_per_tok", 0)
    if experts and not 1 <= k <= experts:
        raise ArgumentError(f"{name('num_experts_per_tok')} must be in "
                            f"[1, {name('num_local_experts')}]")
    layers = values["num_hidden_layers"]
    if values.get("first_k_dense_replace", 0) > layers:
        raise ArgumentError(f"{name('first_k_dense_replace')} exceeds "
                            f"{name('num_hidden_layers')}")
    rows = values.get("learned_position_embeddings")
    if rows and values.get("seq_length", DEFAULT_SEQ_LENGTH) > rows:
        raise ArgumentError(f"{name('seq_length')} exceeds {name('learned_position_embeddings')}"
                            ": a learned absolute-position table has one row per position")
    windowed = values.get("sliding_window_layers")
    if windowed is not None:
        check_int(windowed, label("sliding_window_layers"), minimum=0)
        if windowed > layers:
            raise ArgumentError(f"{name('sliding_window_layers')} exceeds "
                                f"{name('num_hidden_layers')}")
    moe_layers = values.get("moe_layers")
    if moe_layers is not None:
        if not isinstance(moe_layers, (tuple, list)) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                for i in moe_layers):
            raise ArgumentError(f"{name('moe_layers')} must list layer indices in "
                                f"[0, {name('num_hidden_layers')})")
    for f, allowed in (("dtype", DTYPE_BYTES), ("norm_type", NORM_TYPES),
                       ("qk_norm", QK_NORMS), ("attention_gate", ATTENTION_GATES)):
        if f in values and values[f] not in allowed:
            raise ArgumentError(f"{name(f)} is unknown; expected one of "
                                f"{', '.join(repr(a) for a in allowed)}")


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer (Hugging Face ``config.json`` names).

    Attributes (counts; sizes are elements, not bytes):
        num_hidden_layers (L), hidden_size (h), num_attention_heads (n_q),
        num_key_value_heads (n_kv; default n_q), head_dim (d; default h / n_q: Gemma, Qwen3
        and others set it apart), intermediate_size (dense MLP width I), vocab_size (V),
        tie_word_embeddings.
        num_local_experts: routed experts E (0: dense). num_experts_per_tok: routed experts
            per token k. moe_intermediate_size: routed expert width (default
            intermediate_size). n_shared_experts, shared_expert_intermediate_size: shared
            experts and the width of each (default the routed width); shared_expert_gate:
            Qwen2-MoE's sigmoid gate (h weights) on the shared expert's output. router_bias:
            E router biases (gpt-oss) or score-correction biases (DeepSeek-V3 §2.1.2).
        first_k_dense_replace: the first k layers are dense (DeepSeek). moe_layers: the
            0-based indices of the MoE layers, when the family places them otherwise
            (every n-th layer, listed layers); None: every layer from first_k_dense_replace.
        q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim: multi-head
            latent attention (kv_lora_rank > 0 turns it on).
        gated_mlp: a gated MLP (3 matrices: SwiGLU, GeGLU) or a plain 2-matrix MLP (GPT-3).
        qkv_bias, attention_out_bias, mlp_bias, lm_head_bias: which linear layers have biases.
        norm_type: one of :data:`NORM_TYPES`. norms_per_layer: norms in one layer.
        qk_norm: one of :data:`QK_NORMS`. embedding_norm: a norm after the input embedding
            (BLOOM). learned_position_embeddings: rows of a learned absolute-position table
            (GPT-2's n_positions; 0 with rotary or ALiBi positions).
        parallel_block: attention and MLP read the same input and their outputs are added
            (GPT-J, Falcon, GPT-NeoX's use_parallel_residual, Cohere): with tensor
            parallelism the layer's two row-parallel outputs need one all-reduce, not two.
        final_norm: a norm after the last layer (not in post-norm GPT-1 or OPT-350m).
        attention_gate: one of :data:`ATTENTION_GATES`. embedding_size: the token
            embedding's width when it differs from h (projected in and out: OPT-350m).
        index_n_heads, index_head_dim: DeepSeek-V3.2's lightning indexer (0: none).
        sliding_window: keys a query sees in a sliding-window attention layer, itself
            included (Mistral 7B, Gemma 2 and 3, gpt-oss; 0: none). sliding_window_layers:
            how many layers use it (None: every layer when sliding_window is set; Gemma 3
            keeps one global layer in six, gpt-oss one in two). Their attention is priced over
            the keys it computes; the MFU count keeps PaLM's whole-sequence convention.
        seq_length: tokens per sequence s. dtype: training dtype of weights and activations.
        name, source: what it is and where its shape was published.
    Raises (at construction):
        ArgumentTypeError, ArgumentError: as :func:`check_shape`.
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
    seq_length: int = DEFAULT_SEQ_LENGTH
    dtype: str = "bfloat16"
    name: str = "custom"
    source: str = field(default="", compare=False)
    head_dim: int | None = None
    shared_expert_intermediate_size: int | None = None
    shared_expert_gate: bool = False
    router_bias: bool = False
    moe_layers: tuple[int, ...] | None = None
    qkv_bias: bool = False
    attention_out_bias: bool = False
    mlp_bias: bool = False
    lm_head_bias: bool = False
    norm_type: str = "rmsnorm"
    norms_per_layer: int = 2
    qk_norm: str = ""
    embedding_norm: bool = False
    learned_position_embeddings: int = 0
    parallel_block: bool = False
    final_norm: bool = True
    attention_gate: str = ""
    embedding_size: int | None = None
    index_n_heads: int = 0
    index_head_dim: int = 0
    sliding_window: int = 0
    sliding_window_layers: int | None = None

    def __post_init__(self):
        if isinstance(self.moe_layers, list):
            object.__setattr__(self, "moe_layers", tuple(self.moe_layers))
        check_shape({f: getattr(self, f) for f in self.__dataclass_fields__})
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        if self.moe_layers is not None:
            object.__setattr__(self, "moe_layers", tuple(sorted(set(self.moe_layers))))

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
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.mla else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.mla else self.head_dim

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def shared_intermediate_size(self) -> int:
        """Width of one shared expert."""
        return self.shared_expert_intermediate_size or self.expert_intermediate_size

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) has experts."""
        if not self.moe:
            return False
        if self.moe_layers is not None:
            return layer in self.moe_layers
        return layer >= self.first_k_dense_replace

    def layer_kind(self, layer: int) -> str:
        """``"moe"`` or ``"dense"``: what follows the attention in layer ``layer``."""
        return "moe" if self.is_moe_layer(layer) else "dense"

    @property
    def num_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.num_hidden_layers))

    @property
    def norm_weights(self) -> int:
        """Weight vectors per norm (:data:`NORM_TYPES`)."""
        return NORM_TYPES[self.norm_type]

    @property
    def all_reduces_per_layer(self) -> int:
        """Tensor-parallel all-reduces of one layer's forward pass: 2 (after attention, after
        the MLP; Shoeybi et al. 2019 §3), 1 for a parallel block (their outputs are summed
        before one all-reduce; PaLM §2)."""
        return 1 if self.parallel_block else 2

    # -- parameters ---------------------------------------------------------------------------

    @property
    def attention_parameters(self) -> int:
        """Weights and biases of one attention block (no norms): projections, the output
        gate, and DeepSeek-V3.2's lightning indexer (DeepSeek-AI 2025, "DeepSeek-V3.2", §2.1:
        a query projection from the q latent, one key projection, a LayerNorm on the key and
        per-head weights)."""
        h, nq, nkv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        out_bias = h if self.attention_out_bias else 0
        gate = {"": 0, "elementwise": h * nq * self.value_head_dim,
                "headwise": h * nq}[self.attention_gate]
        ni, di = self.index_n_heads, self.index_head_dim
        indexer = ((self.q_lora_rank or h) * ni * di + h * di + 2 * di + h * ni) if ni else 0
        if self.mla:
            dq, dv, rope = self.qk_head_dim, self.v_head_dim, self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nq * dq
                 if self.q_lora_rank else h * nq * dq)
            kv = (h * (self.kv_lora_rank + rope) + self.kv_lora_rank
                  + self.kv_lora_rank * nq * (self.qk_nope_head_dim + dv))
            return q + kv + nq * dv * h + out_bias + gate + indexer
        d = self.head_dim
        qkv = (nq + 2 * nkv) * d
        return (h * qkv + (qkv if self.qkv_bias else 0) + nq * d * h + out_bias + gate
                + indexer)

    def _mlp(self, width: int) -> int:
        h = self.hidden_size
        matrices = 3 if self.gated_mlp else 2
        bias = ((matrices - 1) * width + h) if self.mlp_bias else 0
        return matrices * h * width + bias

    @property
    def dense_mlp_parameters(self) -> int:
        return self._mlp(self.intermediate_size)

    @property
    def expert_parameters(self) -> int:
        """Weights of one routed expert."""
        return self._mlp(self.expert_intermediate_size)

    @property
    def shared_expert_parameters(self) -> int:
        """Weights of the shared experts of one MoE layer (and their gate)."""
        gate = self.hidden_size if self.shared_expert_gate else 0
        return self.n_shared_experts * self._mlp(self.shared_intermediate_size) + gate

    @property
    def router_parameters(self) -> int:
        e = self.num_local_experts
        return self.hidden_size * e + (e if self.router_bias else 0)

    @property
    def norm_parameters(self) -> int:
        """Norm weights of one layer, q/k norms included (replicated across TP ranks)."""
        m, d = self.norm_weights, self.head_dim
        qk = {"": 0, "head": 2 * d,
              "all_heads": (self.num_attention_heads + self.num_key_value_heads) * d}
        return m * (self.norms_per_layer * self.hidden_size + qk[self.qk_norm])

    def layer_parameters(self, layer: int) -> dict[str, int]:
        """Weights of layer ``layer``: attention, mlp (dense, or shared experts + router),
        experts (routed, 0 for a dense layer), norms."""
        attn, norms = self.attention_parameters, self.norm_parameters
        if self.is_moe_layer(layer):
            return {"attention": attn, "norms": norms,
                    "mlp": self.shared_expert_parameters + self.router_parameters,
                    "experts": self.num_local_experts * self.expert_parameters}
        return {"attention": attn, "norms": norms, "mlp": self.dense_mlp_parameters,
                "experts": 0}

    @property
    def embedding_dim(self) -> int:
        """Width of the token embedding: embedding_size (OPT-350m's word_embed_proj_dim,
        projected to and from h) or h."""
        return self.embedding_size or self.hidden_size

    @property
    def _embedding_projection(self) -> int:
        e, h = self.embedding_dim, self.hidden_size
        return e * h if e != h else 0

    @property
    def embedding_lookup_parameters(self) -> int:
        """Rows looked up, not multiplied: token embedding V·e and learned positions P·h."""
        return (self.vocab_size * self.embedding_dim
                + self.learned_position_embeddings * self.hidden_size)

    @property
    def embedding_parameters(self) -> int:
        """Token embedding, learned position table, embedding norm and the projection from
        embedding_size to h."""
        norm = self.norm_weights * self.hidden_size if self.embedding_norm else 0
        return self.embedding_lookup_parameters + norm + self._embedding_projection

    @property
    def lm_head_parameters(self) -> int:
        """The LM head's own weights (none when tied to the embedding; its bias and the
        projection back to embedding_size either way)."""
        bias = self.vocab_size if self.lm_head_bias else 0
        own = 0 if self.tie_word_embeddings else self.vocab_size * self.embedding_dim
        return own + bias + self._embedding_projection

    @property
    def final_norm_parameters(self) -> int:
        return self.norm_weights * self.hidden_size if self.final_norm else 0

    @property
    def num_parameters(self) -> int:
        """Total parameters."""
        layers = sum(sum(self.layer_parameters(i).values())
                     for i in range(self.num_hidden_layers))
        return (layers + self.final_norm_parameters + self.embedding_parameters
                + self.lm_head_parameters)

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses (routed experts: k of E), embeddings included."""
        routed = self.num_moe_layers * (self.num_local_experts - self.num_experts_per_tok)
        return self.num_parameters - routed * self.expert_parameters

    @property
    def matmul_parameters_per_token(self) -> int:
        """Active parameters a token multiplies by: active minus the embedding lookups (the
        LM head multiplies, tied or not)."""
        return self.active_parameters - self.embedding_lookup_parameters + (
            self.vocab_size * self.embedding_dim if self.tie_word_embeddings else 0)

    # -- FLOPs ----------------------------------------------------------------------------------

    @property
    def windowed_layers(self) -> int:
        """Layers whose attention is a sliding window shorter than the sequence (0: none)."""
        if not self.sliding_window or self.sliding_window >= self.seq_length:
            return 0
        if self.sliding_window_layers is None:
            return self.num_hidden_layers
        return self.sliding_window_layers

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
    return lookup(PRESETS, name, "model", "a preset", " or a config.json path", lower=True)
