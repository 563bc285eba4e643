"""Sliding-window attention: which layers use it, read from Hugging Face configs as
transformers' own config classes decide it, and the attention the planner prices for them."""

from __future__ import annotations

import pytest
from transformers import (Gemma2Config, Gemma3TextConfig, GptOssConfig, MistralConfig,
                          Phi3Config, Qwen2Config, Starcoder2Config)

from ringccl.errors import ArgumentError
from ringccl.planner import ModelConfig, plan
from ringccl.planner.compute import layer_compute
from ringccl.planner.hf_config import from_dict


def _windowed_by_transformers(config) -> int:
    """Layers transformers' model runs with a sliding window: its config's layer_types, or
    every layer where the class has no layer_types and sets sliding_window (Mistral, Phi-3,
    Starcoder2 pass it to every attention layer)."""
    types = getattr(config, "layer_types", None)
    if types:
        return sum(t == "sliding_attention" for t in types)
    return config.num_hidden_layers if config.sliding_window else 0


@pytest.mark.parametrize("config", [
    MistralConfig(), Gemma2Config(), Gemma3TextConfig(), GptOssConfig(), Qwen2Config(),
    Qwen2Config(use_sliding_window=True, sliding_window=4096, max_window_layers=20),
    Phi3Config(sliding_window=2047), Starcoder2Config(sliding_window=4096)],
    ids=lambda c: f"{c.model_type}-{getattr(c, 'sliding_window', None)}")
@pytest.mark.parametrize("drop_layer_types", [False, True])
def test_the_windowed_layers_are_the_config_classes(config, drop_layer_types):
    """As the class writes the file, and as an older file without layer_types holds it (the
    family's rule then stands in for the list)."""
    values = config.to_dict()
    if drop_layer_types:
        values.pop("layer_types", None)
    model = from_dict(values, seq_length=1 << 20)   # longer than every window
    assert model.windowed_layers == _windowed_by_transformers(config)
    if model.windowed_layers:
        assert model.sliding_window == config.sliding_window


def test_a_window_as_long_as_the_sequence_changes_nothing():
    base = dict(num_hidden_layers=4, hidden_size=2048, num_attention_heads=16,
                intermediate_size=8192, vocab_size=32000, seq_length=4096)
    assert ModelConfig(**base, sliding_window=4096).windowed_layers == 0
    assert ModelConfig(**base, sliding_window=1024, sliding_window_layers=3).windowed_layers == 3
    with pytest.raises(ArgumentError, match="sliding_window_layers=5 exceeds"):
        ModelConfig(**base, sliding_window=1024, sliding_window_layers=5)


def test_windowed_layers_price_their_share_of_the_attention():
    """The one layer the planner prices stands for all L: with w of s keys on 5 of 6 layers
    its attention is 1/6 of the full one plus 5/6 of the windowed one; the unfused kernel,
    which has no window, prices the whole square either way."""
    from ringccl.planner.gpus import gpu_preset
    base = dict(num_hidden_layers=6, hidden_size=4096, num_attention_heads=32,
                intermediate_size=14336, vocab_size=32000, seq_length=32768)
    full = ModelConfig(**base)
    windowed = ModelConfig(**base, sliding_window=4096, sliding_window_layers=5)
    every = ModelConfig(**base, sliding_window=4096)
    h100 = gpu_preset("h100")

    def core(model, attention="flash"):
        layer = layer_compute(model, False, 8, True, 1, 1, 1, attention, "bf16", h100)
        return [op for op in layer.ops if op.core]
    a_full, a_every, a_mixed = (core(m)[0] for m in (full, every, windowed))
    assert a_every.forward_s < 0.4 * a_full.forward_s
    assert a_mixed.forward_s == pytest.approx(a_full.forward_s / 6 + 5 * a_every.forward_s / 6)
    assert a_mixed.backward_s == pytest.approx(a_full.backward_s / 6
                                               + 5 * a_every.backward_s / 6)
    unfused = [(op.forward_s, op.backward_s) for op in core(full, "unfused")]
    assert [(op.forward_s, op.backward_s) for op in core(windowed, "unfused")] == unfused
    p = plan(windowed, {"tp": 8}, "dgx-h100")
    assert any(n.startswith("sliding-window attention (4096 keys per query) on 5 of 6")
               for n in p.notes)
    assert plan(windowed, {"tp": 8}, "dgx-h100").step_seconds < \
        plan(full, {"tp": 8}, "dgx-h100").step_seconds
