"""The planner reads every causal-LM config class of the installed transformers as the real model
counts its parameters, or refuses it by kind as docs/planner.md lists ("Models the planner
reads"); published shapes and the presets against the real classes; every bad field named as
the file writes it.

The real models are built on the meta device from each class's defaults, at full size
(tests/hf_models.py says how they are built and counted). A class a later transformers adds is
one more case here: it is read within 0.1% or fails by name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from transformers import AutoConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from ringccl.errors import ArgumentError, ArgumentTypeError
from ringccl.planner import PRESETS
from ringccl.planner.hf_config import from_dict, load_config
from ringccl.planner.hf_families import FAMILIES, REFUSED

from .hf_models import (BUILD_FIXES, MODEL_TYPES, as_written, build, config_dict, counts,
                        real_counts)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "planner.md"
TOLERANCE = 1e-3        # 0.1%, total and active


def _documented_refusals() -> dict[str, str]:
    """model_type -> kind, from the refused table of docs/planner.md's "Models the planner
    reads" section: the one list of what the planner refuses."""
    text = DOCS.read_text()
    section = text[text.index("Models the planner reads"):]
    section = section[:section.index("\n## ")]
    refused = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in REFUSED:
            for model_type in re.findall(r"`([^`]+)`", cells[2]):
                refused[model_type] = cells[0]
    return refused


REFUSALS = _documented_refusals()


def test_the_documented_list_is_the_planners():
    kinds = set(REFUSALS.values())
    assert kinds == set(REFUSED), "docs/planner.md's refused kinds differ from hf_families.REFUSED"
    stale = sorted(set(REFUSALS) - set(MODEL_TYPES))
    assert not stale, f"docs/planner.md lists model types transformers does not map: {stale}"
    unknown = sorted(set(FAMILIES) - set(CONFIG_MAPPING_NAMES))
    assert not unknown, f"FAMILIES names model types transformers does not know: {unknown}"


def _within(got: int, real: int) -> bool:
    return abs(got - real) <= TOLERANCE * real


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_every_causal_lm_class_is_read_or_refused(model_type):
    config = config_dict(model_type)
    kind = REFUSALS.get(model_type)
    if kind is not None:
        with pytest.raises(ArgumentError) as refusal:
            from_dict(config)
        message = str(refusal.value)
        assert f": {kind}" in message and REFUSED[kind] in message
        # the field that shows it, as the file holds it
        key = re.match(r"(text_config\.)?([A-Za-z_0-9]+)(\[(\d+)\])?=", message)
        assert key, message
        holder = config["text_config"] if key.group(1) else config
        assert key.group(2) in holder, message
        shown = holder[key.group(2)]
        if key.group(4) is not None:
            shown = shown[int(key.group(4))]
        assert message[key.end():].startswith(repr(shown)[:56])
        return
    model = from_dict(config)
    total, active = real_counts(model_type)
    assert _within(model.num_parameters, total), (
        f"{model_type}: planner {model.num_parameters:,} parameters, real {total:,}")
    assert _within(model.active_parameters, active), (
        f"{model_type}: planner {model.active_parameters:,} active, real {active:,}")


def _llama(p):
    return AutoConfig.for_model(
        "llama", hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers, num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads, vocab_size=p.vocab_size,
        tie_word_embeddings=p.tie_word_embeddings)


def _mixtral(p):
    return AutoConfig.for_model(
        "mixtral", hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers, num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads, vocab_size=p.vocab_size,
        num_local_experts=p.num_local_experts, num_experts_per_tok=p.num_experts_per_tok)


def _deepseek_v3(p):
    return AutoConfig.for_model(
        "deepseek_v3", hidden_size=p.hidden_size, intermediate_size=p.intermediate_size,
        moe_intermediate_size=p.moe_intermediate_size, num_hidden_layers=p.num_hidden_layers,
        num_attention_heads=p.num_attention_heads, num_key_value_heads=p.num_key_value_heads,
        n_routed_experts=p.num_local_experts, num_experts_per_tok=p.num_experts_per_tok,
        n_shared_experts=p.n_shared_experts, first_k_dense_replace=p.first_k_dense_replace,
        q_lora_rank=p.q_lora_rank, kv_lora_rank=p.kv_lora_rank,
        qk_nope_head_dim=p.qk_nope_head_dim, qk_rope_head_dim=p.qk_rope_head_dim,
        v_head_dim=p.v_head_dim, vocab_size=p.vocab_size, tie_word_embeddings=False)


def _gpt3(p):
    # GPT-3 is GPT-2's architecture at this size (Brown et al. 2020, §2.1)
    return AutoConfig.for_model(
        "gpt2", n_embd=p.hidden_size, n_layer=p.num_hidden_layers, n_head=p.num_attention_heads,
        n_inner=p.intermediate_size, n_positions=p.seq_length, vocab_size=p.vocab_size)


PRESET_CLASSES = {"llama3-8b": _llama, "llama3-70b": _llama, "llama3-405b": _llama,
                  "mixtral-8x7b": _mixtral, "deepseek-v3": _deepseek_v3, "gpt3-175b": _gpt3}


def test_every_preset_is_checked():
    assert set(PRESET_CLASSES) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESET_CLASSES))
def test_presets_match_the_real_class(name):
    preset = PRESETS[name]
    total, active = counts(build(PRESET_CLASSES[name](preset)))
    assert _within(preset.num_parameters, total), (name, preset.num_parameters, total)
    assert _within(preset.active_parameters, active), (name, preset.active_parameters, active)


# published configs, as their config.json files write them
PUBLISHED = {
    "gpt2-xl": ("gpt2", {"n_embd": 1600, "n_layer": 48, "n_head": 25, "n_positions": 1024,
                         "vocab_size": 50257}),
    "opt-175b": ("opt", {"hidden_size": 12288, "num_hidden_layers": 96,
                         "num_attention_heads": 96, "ffn_dim": 49152,
                         "max_position_embeddings": 2048, "vocab_size": 50272,
                         "word_embed_proj_dim": 12288}),
    "opt-350m": ("opt", {"hidden_size": 1024, "num_hidden_layers": 24,
                         "num_attention_heads": 16, "ffn_dim": 4096,
                         "max_position_embeddings": 2048, "vocab_size": 50272,
                         "word_embed_proj_dim": 512, "do_layer_norm_before": False}),
    "falcon-40b": ("falcon", {"hidden_size": 8192, "num_hidden_layers": 60,
                              "num_attention_heads": 128, "num_kv_heads": 8,
                              "new_decoder_architecture": True, "vocab_size": 65024}),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_configs_read_as_the_real_model(name):
    model_type, fields = PUBLISHED[name]
    cfg = AutoConfig.for_model(model_type, **fields)
    model = from_dict(as_written(cfg))
    total, active = counts(build(cfg))
    assert _within(model.num_parameters, total), (name, model.num_parameters, total)
    assert _within(model.active_parameters, active), (name, model.active_parameters, active)


def test_parallel_blocks_and_biases_are_recorded():
    gptj = from_dict(config_dict("gptj"))
    assert gptj.parallel_block and gptj.all_reduces_per_layer == 1 and gptj.norms_per_layer == 1
    assert not gptj.gated_mlp and gptj.mlp_bias and not gptj.qkv_bias and gptj.lm_head_bias
    neox = from_dict(config_dict("gpt_neox", use_parallel_residual=False))
    assert not neox.parallel_block and neox.all_reduces_per_layer == 2
    llama = from_dict(config_dict("llama"))
    assert llama.gated_mlp and not llama.parallel_block and llama.norm_type == "rmsnorm"
    bloom = from_dict(config_dict("bloom"))
    assert bloom.embedding_norm and bloom.norm_type == "layernorm"
    assert bloom.intermediate_size == 4 * bloom.hidden_size


def test_moe_layer_placement():
    qwen = from_dict(config_dict("qwen2_moe", decoder_sparse_step=2, mlp_only_layers=[1]))
    assert [qwen.is_moe_layer(i) for i in range(6)] == [False, False, False, True, False, True]
    llama4 = from_dict(config_dict("llama4_text", interleave_moe_layer_step=2, moe_layers=None))
    assert llama4.layer_kind(0) == "dense" and llama4.layer_kind(1) == "moe"
    deepseek = from_dict(config_dict("deepseek_v3"))
    assert deepseek.moe_layers is None and deepseek.first_k_dense_replace == 3
    assert deepseek.num_moe_layers == deepseek.num_hidden_layers - 3


def test_to_dict_is_json():
    model = from_dict(config_dict("llama4_text", interleave_moe_layer_step=2, moe_layers=None))
    data = json.loads(json.dumps(model.to_dict()))
    assert data["moe_layers"] == list(range(1, 48, 2)) and data["head_dim"] == 128
    assert data["num_parameters"] == model.num_parameters


def test_wrapper_reads_its_language_model():
    wrapped = from_dict(config_dict("gemma3"))
    assert wrapped == from_dict(config_dict("gemma3_text"))


def test_config_json_file(tmp_path):
    path = tmp_path / "gpt2-xl" / "config.json"
    path.parent.mkdir()
    path.write_text(AutoConfig.for_model("gpt2", **PUBLISHED["gpt2-xl"][1]).to_json_string())
    model = load_config(path)
    assert model.name == "gpt2-xl" and model.learned_position_embeddings == 1024
    assert model.hidden_size == 1600 and model.intermediate_size == 6400


# every bad field, named as the file writes it
@pytest.mark.parametrize("model_type, changes, error, message", [
    ("gpt2", {"n_embd": None}, ArgumentError, r"lacks n_embd=null \(read as absent\)$|"
     r"lacks n_embd=null \(read as absent\):"),
    ("gpt2", {"n_embd": -768}, ArgumentError, r"^n_embd=-768 must be an integer >= 1$"),
    ("gpt2", {"n_layer": "12"}, ArgumentTypeError,
     r"^n_layer='12' must be an integer in \[1, 10000\], got str$"),
    ("gpt2", {"n_embd": 770}, ArgumentError,
     r"^n_embd=770 must be a multiple of n_head=12 \(or head_dim given\)$"),
    ("llama", {"num_key_value_heads": 5}, ArgumentError,
     r"^num_attention_heads=32 must be a multiple of num_key_value_heads=5$"),
    ("mixtral", {"num_experts_per_tok": 9}, ArgumentError,
     r"^num_experts_per_tok=9 must be in \[1, num_local_experts=8\]$"),
    ("qwen2_moe", {"num_experts_per_tok": None}, ArgumentError,
     r"^num_experts_per_tok=null \(read as absent\) must be in \[1, num_experts=60\]$"),
    ("mpt", {"no_bias": "yes"}, ArgumentTypeError,
     r"^no_bias='yes' must be true or false, got str$"),
    ("dbrx", {"ffn_config": {"moe_num_experts": -4, "moe_top_k": 1}}, ArgumentError,
     r"^ffn_config.moe_num_experts=-4 must be an integer in \[0, 1048576\]$"),
    ("deepseek_v3", {"first_k_dense_replace": 62}, ArgumentError,
     r"^first_k_dense_replace=62 exceeds num_hidden_layers=61$"),
    ("llama4_text", {"moe_layers": [0, 48]}, ArgumentError,
     r"^moe_layers=\[0, 48\] must list layer indices in \[0, num_hidden_layers=48\)$"),
    ("gemma3", {"text_config": {"hidden_size": 0}}, ArgumentError,
     r"^text_config.hidden_size=0 must be an integer >= 1$"),
])
def test_bad_fields_are_named_as_written(model_type, changes, error, message):
    config = config_dict(model_type)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    with pytest.raises(error, match=message):
        from_dict(config)


def test_default_deepseek_v2_names_the_null_it_holds():
    # transformers' own default: num_experts_per_tok is null (the test builds it with 6)
    assert "deepseek_v2" in BUILD_FIXES
    config = as_written(AutoConfig.for_model("deepseek_v2"))
    assert config["num_experts_per_tok"] is None
    with pytest.raises(ArgumentError, match=r"^num_experts_per_tok=null \(read as absent\) "
                       r"must be in \[1, n_routed_experts=64\]$"):
        from_dict(config)


def test_not_a_dict_and_unknown_types():
    with pytest.raises(ArgumentTypeError, match="must be a JSON object, got list"):
        from_dict([1, 2])
    custom = dict(config_dict("llama"), model_type="my_llama")   # unknown: read Llama-style
    assert from_dict(custom).num_parameters == from_dict(config_dict("llama")).num_parameters


@pytest.mark.parametrize("model_type, field, rows", [("gpt2", "n_positions", 1024),
                                                     ("opt", "max_position_embeddings", 2048),
                                                     ("gpt_neo", "max_position_embeddings",
                                                      2048)])
def test_learned_positions_bound_the_sequence(model_type, field, rows):
    """A learned absolute-position table has one row per position (OPT's two extra rows are
    an offset, not positions): without a seq_length the model's sequence is the table's length
    when that is shorter than the default, one token more is refused naming the file's field,
    and the table's length itself is read."""
    config = AutoConfig.for_model(model_type).to_dict()
    assert config[field] == rows
    assert from_dict(config).seq_length == min(rows, 4096)
    assert from_dict(config, seq_length=rows).seq_length == rows
    with pytest.raises(ArgumentError, match=rf"^seq_length={rows + 1} exceeds {field}={rows}: "):
        from_dict(config, seq_length=rows + 1)


def test_a_rotary_model_keeps_the_default_sequence_and_takes_a_longer_one():
    """Rotary positions have no table: max_position_embeddings bounds nothing here."""
    config = AutoConfig.for_model("llama", max_position_embeddings=2048).to_dict()
    assert from_dict(config).seq_length == 4096
    assert from_dict(config, seq_length=8192).seq_length == 8192


def test_resolve_model_and_the_command_line_refuse_a_sequence_beyond_the_table(tmp_path,
                                                                                capsys):
    from ringccl.cli.app import main
    from ringccl.planner import ModelConfig
    from ringccl.planner.hf_config import resolve_model

    path = tmp_path / "gpt2" / "config.json"
    path.parent.mkdir()
    path.write_text(AutoConfig.for_model("gpt2").to_json_string())
    assert resolve_model(str(path)).seq_length == 1024
    with pytest.raises(ArgumentError, match=r"seq_length=2048 exceeds n_positions=1024"):
        resolve_model(str(path), seq_length=2048)
    assert main(["plan", "--model", str(path), "--gpus", "8", "--seq-length", "4096"]) == 2
    assert "seq_length=4096 exceeds n_positions=1024" in capsys.readouterr().err
    with pytest.raises(ArgumentError, match=r"seq_length=2048 exceeds "
                                            r"learned_position_embeddings=1024"):
        ModelConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                    intermediate_size=256, vocab_size=100, learned_position_embeddings=1024,
                    seq_length=2048)
