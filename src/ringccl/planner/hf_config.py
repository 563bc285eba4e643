"""Reading Hugging Face ``config.json`` files as they are, in every family's own words.

A config.json names a model's shape in its family's spelling (GPT-2's ``n_embd``, MPT's
``d_model``, DBRX's nested ``ffn_config.moe_num_experts``) and leaves out what the family's
code implies (GPT-2's 4h MLP and biases, BLOOM's embedding LayerNorm, Falcon's parallel
block). :func:`from_dict` reads one into a :class:`~.model.ModelConfig`:

1. a multimodal wrapper's language model is its ``text_config`` (its LM head tied or not by
   the wrapper's own ``tie_word_embeddings``);
2. the family table (:mod:`.hf_families`, keyed by ``model_type``) says what the family's
   code implies, or that the planner refuses it: one kind of :data:`~.hf_families.REFUSED`,
   named with the config field that shows it; refusing fields and a ``layer_types`` entry
   that is not attention are refused the same way in any family;
3. every field is read from the first of its spellings (the family's own, then
   :data:`~.hf_families.ALIASES`) that the file gives a value: ``null`` is absent;
4. the MoE layers come from whichever placement field the file has (:func:`_moe_layers`);
5. a few families need code, not data (:data:`_HOOKS`: Falcon's heads and norms, OPT's
   final norm, LFM2's MLP width, Moshi's fused MLP width);
6. every value is checked (:func:`~.model.check_shape`) and a message names the field as
   the file spells it, with the value the file holds.

An unknown ``model_type`` (or none) is read as a Llama-style decoder: gated MLP, RMSNorm,
biases where ``attention_bias`` / ``mlp_bias`` say so.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

from ..args import check_int, not_text
from ..errors import ArgumentError, ArgumentTypeError
from ..units import MAX_INT
from .hf_families import (ALIASES, ATTENTION_LAYERS, FAMILIES, LLAMA, REFUSED, REFUSING_FIELDS,
                          Family, refuses)
from .model import DEFAULT_SEQ_LENGTH, MAX_LAYERS, PRESETS, ModelConfig, check_shape, preset

__all__ = ["from_dict", "load_config", "resolve_model"]


def _get(config: dict, key: str):
    value = config
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _holds_null(config: dict, key: str) -> bool:
    parent, _, last = key.rpartition(".")
    holder = _get(config, parent) if parent else config
    return isinstance(holder, dict) and last in holder and holder[last] is None


class _Reader:
    """One config dict and its family: values read so far and the key each came from."""

    def __init__(self, config: dict, family: Family, prefix: str):
        self.config, self.family, self.prefix = config, family, prefix
        self.values: dict = {}
        self.labels: dict = {}

    def label(self, f: str) -> str:
        return self.labels.get(f, f)

    def value(self, key: str):
        v = _get(self.config, key)
        return self.family.defaults.get(key) if v is None else v

    def truth(self, source) -> bool:
        """A flag: True/False as is, a key's value ("not k": negated), or the first of
        several keys the file has."""
        if isinstance(source, bool):
            return source
        if isinstance(source, tuple):
            given = [k for k in source if _get(self.config, k) is not None]
            return self.truth(given[0] if given else source[-1])
        negate = source.startswith("not ")
        key = source[4:] if negate else source
        v = self.value(key)
        if v is None:
            v = False
        if not isinstance(v, bool):
            raise ArgumentTypeError(f"{self.prefix}{key}={v!r} must be true or false, got "
                                    f"{type(v).__name__}")
        return v != negate

    def read(self, f: str):
        """Field ``f`` from the first spelling the file gives a value for (null is absent)."""
        keys = self.family.aliases.get(f, ()) + ALIASES.get(f, ())
        for key in keys:
            v = _get(self.config, key)
            if v is not None:
                self.values[f], self.labels[f] = v, self.prefix + key
                return v
        nulls = [k for k in keys if _holds_null(self.config, k)]
        if nulls:   # named as the file holds it: "num_experts_per_tok=null"
            self.labels[f] = f"{self.prefix}{nulls[0]}=null (read as absent)"
        return None

    def set(self, f: str, value, label: str | None = None):
        self.values[f] = value
        if label is not None:
            self.labels[f] = label


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:56] + " ..."


def _refusal(key: str, value, kind: str, note: str = "") -> ArgumentError:
    what = f" ({note})" if note else ""
    return ArgumentError(
        f"{key}={_shown(value)}: {kind}{what}: {REFUSED[kind]}; the planner does not plan "
        "this model (docs/planner.md, 'Models the planner reads')")


def _check_refused(r: _Reader, wrapper: dict) -> None:
    """Raise for a refused kind: the wrapper's or the language model's family, a refusing
    field, a layer_types entry that is not attention."""
    for config, prefix in ((wrapper, ""), (r.config, r.prefix)):
        family = FAMILIES.get(config.get("model_type"))
        if family is not None and family.refuse:
            kind, key, note = family.refuse
            key = key if _get(config, key) is not None else "model_type"
            raise _refusal(prefix + key, config.get(key), kind, note)
    for key, kind, note in REFUSING_FIELDS:
        v = r.config.get(key)
        if refuses(key, v):
            raise _refusal(r.prefix + key, v, kind, note)
    types = r.config.get("layer_types")
    if isinstance(types, list):
        for i, t in enumerate(types):
            if t not in ATTENTION_LAYERS:
                raise _refusal(f"{r.prefix}layer_types[{i}]", t, "not attention")


def _moe_layers(r: _Reader, layers: int):
    """(moe_layers, first_k_dense_replace) from whichever placement fields the file has:
    ``mlp_layer_types`` ("sparse" entries), ``moe_layers``, ``first_k_dense_replace`` (or
    ``num_dense_layers``), ``decoder_sparse_step`` and ``interleave_moe_layer_step`` (layer i
    is MoE when (i + 1) % step == 0: Qwen2-MoE, Llama-4), ``moe_layer_freq`` (i % freq == 0,
    DeepSeek's own code), ERNIE-4.5's ``moe_layer_start_index`` / ``moe_layer_end_index`` /
    ``moe_layer_interval``, ``mlp_only_layers`` (dense). None: all from first_k."""
    types = r.value("mlp_layer_types")
    if isinstance(types, list):
        r.labels["moe_layers"] = f"moe_layers (the sparse entries of {r.prefix}mlp_layer_types)"
        return tuple(i for i, t in enumerate(types) if t in ("sparse", "moe")), 0
    explicit = r.value("moe_layers")
    if isinstance(explicit, list):
        r.labels["moe_layers"] = r.prefix + "moe_layers"
        return explicit, 0                  # as written: checked, then made a tuple
    first_k = r.read("first_k_dense_replace") or 0
    if not isinstance(first_k, int) or isinstance(first_k, bool) or first_k < 0:
        return None, first_k                # check_shape names it
    moe = set(range(first_k, layers))
    for key in ("decoder_sparse_step", "interleave_moe_layer_step"):
        step = r.value(key)
        if step is not None:
            check_int(step, r.prefix + key, minimum=1)
            moe = {i for i in moe if (i + 1) % step == 0}
    freq = r.value("moe_layer_freq")
    if isinstance(freq, int) and not isinstance(freq, bool) and freq >= 1:
        moe = {i for i in moe if i % freq == 0}
    start, end = r.value("moe_layer_start_index"), r.value("moe_layer_end_index")
    if isinstance(start, int) and isinstance(end, int):
        end = layers - 1 if end == -1 else end
        interval = r.value("moe_layer_interval") or 1
        moe = {i for i in moe if start <= i <= end and (i + 1) % interval == 0}
    only = r.value("mlp_only_layers")
    if isinstance(only, list):
        moe -= set(only)
    if moe == set(range(first_k, layers)):
        return None, first_k
    return tuple(sorted(moe)), 0


def _read_moe(r: _Reader) -> None:
    for f in ("num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
              "n_shared_experts", "shared_expert_intermediate_size"):
        if f not in r.family.ignore:
            r.read(f)
    v = r.values
    if not v.get("num_local_experts"):
        for f in ("num_local_experts", "num_experts_per_tok", "n_shared_experts"):
            v.pop(f, None)
        return
    if not v.get("shared_expert_intermediate_size"):
        v.pop("shared_expert_intermediate_size", None)      # 0: no shared expert (Granite)
    elif "n_shared_experts" not in v:
        v["n_shared_experts"] = 1          # Qwen2-MoE: one shared expert of that width
    if r.family.shared_experts and "n_shared_experts" not in v:
        v["n_shared_experts"] = r.family.shared_experts
    layers = v["num_hidden_layers"]
    if not isinstance(layers, int) or isinstance(layers, bool) or not 1 <= layers <= MAX_LAYERS:
        return                              # check_shape names it (before any layer is read)
    moe_layers, first_k = _moe_layers(r, v["num_hidden_layers"])
    v["first_k_dense_replace"] = first_k
    if moe_layers is not None:
        v["moe_layers"] = moe_layers
        r.labels.setdefault("moe_layers", "moe_layers (from the placement fields)")
    v["shared_expert_gate"] = r.family.shared_expert_gate and bool(v.get("n_shared_experts"))
    v["router_bias"] = r.family.router_bias


def _read_shape(r: _Reader) -> None:
    """Sizes, widths and the family's implied structure into ``r.values``."""
    fam, v = r.family, r.values
    for f in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "intermediate_size", "vocab_size", "tie_word_embeddings",
              "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
              "v_head_dim", "embedding_size"):
        r.read(f)
    h = v.get("hidden_size")
    if isinstance(h, int) and h > MAX_INT:
        h = None                            # check_shape names it (a width from it overflows)
    if "intermediate_size" not in v and fam.width is not None and isinstance(h, int):
        factor = fam.width if isinstance(fam.width, (int, float)) else r.value(fam.width)
        if isinstance(factor, (int, float)) and not isinstance(factor, bool):
            width_key = fam.width if isinstance(fam.width, str) else str(fam.width)
            r.set("intermediate_size", int(factor * h),
                  f"intermediate_size ({width_key} x {r.label('hidden_size')})")
    v.setdefault("tie_word_embeddings", True)   # transformers' default when the file omits it
    for f, source in fam.biases.items():
        v[f] = r.truth(source)
    v["gated_mlp"] = fam.mlp == "gated"
    norm = fam.norm
    if fam.norm_bias and norm.startswith("layernorm"):
        norm = "layernorm" if r.truth(fam.norm_bias) else "layernorm_no_bias"
    v["norm_type"], v["norms_per_layer"] = norm, fam.norms
    v["final_norm"], v["embedding_norm"] = fam.final_norm, fam.embedding_norm
    qk = fam.qk_norm
    if isinstance(qk, tuple):
        qk = qk[1] if r.truth(qk[0]) else ""
    elif not qk and r.value("use_qk_norm") is True:
        qk = "head"
    v["qk_norm"] = qk
    v["parallel_block"] = r.truth(fam.parallel)
    v["attention_gate"] = fam.attention_gate
    if fam.positions:
        rows = r.value(fam.positions)
        if isinstance(rows, int) and not isinstance(rows, bool):
            r.set("learned_position_embeddings", rows + fam.position_offset,
                  f"{r.prefix}{fam.positions}")
    if fam.head_dim_floor and isinstance(h, int) and isinstance(
            v.get("num_attention_heads"), int) and (
            "head_dim" not in v and v["num_attention_heads"] > 0
            and h % v["num_attention_heads"] and not v.get("kv_lora_rank")):
        # transformers' Llama-style attention: head_dim = hidden_size // num_attention_heads
        r.set("head_dim", h // v["num_attention_heads"],
              f"head_dim ({r.label('hidden_size')} // {r.label('num_attention_heads')})")


def _falcon(r: _Reader) -> None:
    """Falcon: one K/V head with ``multi_query`` (unless ``new_decoder_architecture``); the
    new architecture's parallel block has ``num_ln_in_parallel_attn`` norms (default 2), the
    old one input_layernorm only; ``parallel_attn`` false: two sequential norms."""
    v = r.values
    new = r.truth("new_decoder_architecture")
    if not new and r.truth("multi_query"):
        r.set("num_key_value_heads", 1, f"{r.prefix}multi_query=True: num_key_value_heads")
    elif not new:
        v.pop("num_key_value_heads", None)
    if new:
        v["parallel_block"] = True
    if v["parallel_block"]:
        lns = r.value("num_ln_in_parallel_attn")
        v["norms_per_layer"] = (lns or 2) if new else 1


def _opt(r: _Reader) -> None:
    """OPT: no final norm without ``do_layer_norm_before`` (OPT-350m); norms without
    parameters unless ``layer_norm_elementwise_affine``."""
    v = r.values
    if r.value("do_layer_norm_before") is False or r.value("_remove_final_layer_norm") is True:
        v["final_norm"] = False
    if r.value("layer_norm_elementwise_affine") is False:
        v["norm_type"] = "parameter_free"


def _lfm2(r: _Reader) -> None:
    """LFM2's MLP width: 2/3 of intermediate_size, times block_ffn_dim_multiplier, rounded
    up to block_multiple_of, when block_auto_adjust_ff_dim (its modeling code)."""
    v = r.values
    width = v.get("intermediate_size")
    if not isinstance(width, int) or width > MAX_INT or not r.truth(
            "block_auto_adjust_ff_dim"):
        return                              # check_shape names a width beyond int64
    width = int(2 * width / 3)
    mult = r.value("block_ffn_dim_multiplier")
    if isinstance(mult, (int, float)) and not isinstance(mult, bool):
        width = int(mult * width)
    step = r.value("block_multiple_of") or 1
    r.set("intermediate_size", step * ((width + step - 1) // step),
          f"intermediate_size (auto-adjusted from {r.label('intermediate_size')})")


def _moshi(r: _Reader) -> None:
    """Moshi's ffn_dim is the gated MLP's two up-projections together."""
    width = r.values.get("intermediate_size")
    if isinstance(width, int) and not isinstance(width, bool):
        r.set("intermediate_size", width // 2, f"intermediate_size ({r.label('intermediate_size')}"
              " / 2)")


_HOOKS = {"falcon": _falcon, "opt": _opt, "lfm2": _lfm2, "moshi": _moshi}

#: the layers of a family that use its sliding window when the file has no ``layer_types``
#: (the config classes' own rule, L layers): Gemma 2 and gpt-oss every other layer from the
#: first, Gemma 3 all but every ``sliding_window_pattern``-th (6 when the file has none),
#: Qwen2's layers from ``max_window_layers``
_WINDOWED = {
    "gemma2": lambda r, L: ((L + 1) // 2, "every other layer (Gemma 2)"),
    "gpt_oss": lambda r, L: ((L + 1) // 2, "every other layer (gpt-oss)"),
    "gemma3_text": lambda r, L: (L - L // _pattern(r), "all but every "
                                 f"{_pattern(r)}th layer (Gemma 3's sliding_window_pattern)"),
    "qwen2": lambda r, L: (max(0, L - r.value("max_window_layers")),
                           "the layers from max_window_layers on (Qwen2)")
    if isinstance(r.value("max_window_layers"), int) else (None, ""),
}


def _pattern(r: _Reader) -> int:
    p = r.value("sliding_window_pattern")
    return p if isinstance(p, int) and not isinstance(p, bool) and p > 0 else 6


def _read_window(r: _Reader, model_type) -> None:
    """A causal sliding window: ``sliding_window`` keys per query, unless
    ``use_sliding_window`` is false (Qwen2's switch); the layers that use it are the
    ``layer_types`` entries "sliding_attention", else a family's rule (:data:`_WINDOWED`),
    else every layer (Mistral 7B v0.1, Phi-3, Starcoder2)."""
    if r.config.get("use_sliding_window") is False or r.read("sliding_window") is None:
        return
    types = r.config.get("layer_types")
    if isinstance(types, list):
        r.set("sliding_window_layers", sum(t == "sliding_attention" for t in types),
              f"{r.prefix}layer_types (its sliding_attention entries)")
        return
    layers = r.values.get("num_hidden_layers")
    rule = _WINDOWED.get(model_type)
    if rule is not None and isinstance(layers, int):
        count, why = rule(r, layers)
        if count is not None:
            r.set("sliding_window_layers", count, f"sliding_window_layers ({why})")


def _language_model(config: dict) -> tuple[dict, str]:
    """The config that describes the language model, and its key prefix."""
    text = config.get("text_config")
    if isinstance(text, dict) and not any(_get(config, k) is not None
                                          for k in ALIASES["num_hidden_layers"]):
        return text, "text_config."
    return config, ""


def from_dict(config: dict, *, seq_length: int | None = None, dtype: str | None = None,
              name: str = "custom", source: str = "") -> ModelConfig:
    """A :class:`~.model.ModelConfig` from a Hugging Face config dictionary (the module's
    docstring says how); ``torch_dtype`` / ``dtype`` give the dtype unless ``dtype`` is given.
    A dictionary without ``model_type`` may also use the ModelConfig field names themselves.

    Raises:
        ArgumentTypeError: not a dict; a field of the wrong type (named as the file spells it).
        ArgumentError: a refused kind of model (the kind, its reason and the field that shows
            it), a required field missing or null, a negative or inconsistent value.
    """
    if not isinstance(config, dict):
        raise ArgumentTypeError(f"a model config must be a JSON object, got "
                                f"{type(config).__name__}")
    wrapper = config
    config, prefix = _language_model(config)
    model_type = config.get("model_type")
    family = FAMILIES.get(model_type, LLAMA) if isinstance(model_type, str) else LLAMA
    r = _Reader(config, family, prefix)
    _check_refused(r, wrapper)
    _read_shape(r)
    if prefix and isinstance(wrapper.get("tie_word_embeddings"), bool):
        # the wrapper's LM head is tied (or not) by the wrapper's own flag
        r.set("tie_word_embeddings", wrapper["tie_word_embeddings"], "tie_word_embeddings")
    _read_moe(r)
    _read_window(r, model_type)
    hook = _HOOKS.get(model_type)
    if hook:
        hook(r)
    v = r.values
    types = config.get("layer_types")
    if _get(config, "index_n_heads") and (not isinstance(types, list) or "indexed_attention"
                                          in types):
        # DeepSeek-V3.2's indexer: on every layer (the refused families mix it)
        r.read("index_n_heads")
        r.read("index_head_dim")
    if not isinstance(model_type, str):
        _planner_fields(config, v)
    if "intermediate_size" not in v and v.get("num_local_experts") and v.get(
            "moe_layers") is None and not v.get("first_k_dense_replace"):
        # every layer is MoE: no dense width to read (Solar-Open)
        v["intermediate_size"] = v.get("moe_intermediate_size")
    _read_dtype(config, v, dtype)
    _read_seq_length(r, seq_length)
    v.setdefault("name", name)
    v.setdefault("source", source)
    required = ["num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"]
    if v.get("hidden_size") is not None or family.width is None:
        required.insert(3, "intermediate_size")     # else implied by the missing hidden_size
    missing = [r.label(f) for f in required if v.get(f) is None]
    if missing:
        kind = f" (model_type={model_type!r})" if model_type else ""
        raise ArgumentError(f"model config{kind} lacks {', '.join(missing)}: Hugging Face "
                            "config.json field names, or their family's spellings "
                            "(docs/planner.md, 'Models the planner reads')")
    check_shape(v, r.label)
    return ModelConfig(**v)


def _read_seq_length(r: _Reader, seq_length: int | None) -> None:
    """``seq_length`` if given. A learned absolute-position table (GPT-2's ``n_positions``,
    OPT's ``max_position_embeddings``) holds one row per position, so a sequence is at most
    that long: a longer ``seq_length`` is refused, and without one the model's default length
    is capped at the table's."""
    v, fam = r.values, r.family
    rows = v.get("learned_position_embeddings")
    usable = rows - fam.position_offset if fam.positions and isinstance(rows, int) else None
    if seq_length is not None:
        if usable is not None and isinstance(seq_length, int) and seq_length > usable:
            raise ArgumentError(
                f"seq_length={seq_length!r} exceeds {r.prefix}{fam.positions}={usable}: the "
                f"model's learned position table has one row per position, so its sequences "
                f"are at most {usable} tokens")
        v["seq_length"] = seq_length
    elif usable is not None and "seq_length" not in v:
        v["seq_length"] = min(DEFAULT_SEQ_LENGTH, usable)


def _planner_fields(config: dict, values: dict) -> None:
    """A hand-written config (no model_type) may use ModelConfig's own field names."""
    known = {f.name for f in fields(ModelConfig)}
    for key, v in config.items():
        key = {"max_seq_len": "seq_length"}.get(key, key)
        if key in known and v is not None and key not in ("name", "source"):
            values[key] = v
    if "tie_word_embeddings" not in config:
        values["tie_word_embeddings"] = False


def _read_dtype(config: dict, values: dict, dtype: str | None) -> None:
    """``dtype`` if given; else a hand-written dtype (a ModelConfig name in a config without
    model_type), else the file's ``torch_dtype`` / ``dtype`` when float32 or float16 (the
    training dtype of mixed precision otherwise: bfloat16)."""
    if dtype is not None:
        values["dtype"] = dtype
    elif "dtype" not in values:
        written = config.get("torch_dtype") or config.get("dtype")
        values["dtype"] = written if written in ("float32", "float16") else "bfloat16"


def load_config(path, *, seq_length: int | None = None, dtype: str | None = None) -> ModelConfig:
    """Read a Hugging Face ``config.json`` file as is (:func:`from_dict`).

    Raises:
        ArgumentError: unreadable, binary or not JSON, missing fields, bad values, a refused
            model.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except UnicodeDecodeError as exc:
        raise ArgumentError(f"model={str(path)!r}: cannot read a config.json "
                            f"({not_text(exc)})") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ArgumentError(f"model={str(path)!r}: cannot read a config.json ({exc})") from None
    return from_dict(data, seq_length=seq_length, dtype=dtype, name=p.parent.name or p.stem,
                     source=str(p))


def resolve_model(model, *, seq_length: int | None = None, dtype: str | None = None
                  ) -> ModelConfig:
    """A :class:`~.model.ModelConfig` from a config, a preset name, a config.json path or a
    dict; ``seq_length`` / ``dtype`` override the model's (a config's ``seq_length`` is read
    with it: a learned position table bounds it, :func:`from_dict`).

    Raises:
        ArgumentError: unknown preset, unreadable file, bad fields, a refused model, a
            ``seq_length`` beyond the model's learned positions.
    """
    if seq_length is not None:
        seq_length = check_int(seq_length, "seq_length", minimum=1)
    if isinstance(model, ModelConfig):
        cfg = model
    elif isinstance(model, dict):
        cfg = from_dict(model, seq_length=seq_length)
    elif isinstance(model, (str, Path)):
        text = str(model)
        if text.lower() in PRESETS:
            cfg = preset(text)
        elif text.endswith(".json") or Path(text).exists():
            cfg = load_config(text, seq_length=seq_length)
        else:
            cfg = preset(text)  # raises, listing the presets
    else:
        raise ArgumentTypeError(f"model={model!r} must be a ModelConfig, a preset name, a "
                                "config.json path or a dict")
    changes = {}
    if seq_length is not None and seq_length != cfg.seq_length:
        changes["seq_length"] = seq_length
    if dtype is not None:
        changes["dtype"] = dtype
    return replace(cfg, **changes) if changes else cfg
