"""transformers' own causal-LM classes, built on the meta device, and their parameter counts.

Used by tests/test_hf_models.py. Every model type in transformers'
``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` is one case: its config class's defaults
(``AutoConfig.for_model``), a few fields changed where the defaults do not build a model
(:data:`BUILD_FIXES`, each with why), the config written as ``save_pretrained`` writes
config.json, and the real model built with ``AutoModelForCausalLM.from_config`` under
``torch.device("meta")`` (shapes only: no memory, nothing downloaded).

Counting the real model (what the planner's counts are compared with):

* total: every parameter of the model's language model — for a multimodal wrapper (a config
  with a ``text_config``) the modules under ``language_model`` and the LM head, not the
  vision or audio towers the planner does not plan;
* active (what one token uses): the total minus, for every module named ``experts`` (routed
  experts: fused ``(E, ...)`` tensors or a list of E modules), the share ``(E - k)/E`` of its
  parameters; E is the module's own expert count (its list length or its tensors' first
  dimension, or its own ``num_experts`` attribute) and k the ``top_k`` (or
  ``num_experts_per_tok``) attribute of its MoE block or that block's router —
  transformers' own reading of the config, not the planner's.
"""

from __future__ import annotations

import json
import warnings

import torch
import transformers
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

transformers.logging.set_verbosity_error()

#: every model type transformers maps to a causal-LM class, in its own order
MODEL_TYPES = list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)

#: fields changed where a class's defaults do not build its model, and why
BUILD_FIXES: dict[str, tuple[dict, str]] = {
    "dbrx": ({"attn_config": {"kv_n_heads": 1, "rope_theta": 10000.0}},
             "the default attn_config lacks rope_theta, which the attention reads"),
    "dots1": ({"n_routed_experts": 128, "num_experts_per_tok": 6, "n_shared_experts": 2,
               "first_k_dense_replace": 1}, "the default expert counts are null"),
    "deepseek_v2": ({"num_experts_per_tok": 6}, "the default num_experts_per_tok is null"),
    "hunyuan_v1_dense": ({"head_dim": 128}, "the default head_dim is null"),
    "hunyuan_v1_moe": ({"head_dim": 128}, "the default head_dim is null"),
    "ministral": ({"head_dim": 128}, "the default head_dim is null"),
    "nemotron": ({"num_key_value_heads": 48}, "the default num_key_value_heads is null"),
    "cohere_compass_text": ({"rope_parameters": {"full_attention": {
        "rope_theta": 10000.0, "rope_type": "default"}}},
        "the default rope_parameters lack the full_attention entry"),
    "gemma4_assistant": ({"text_config": {"hidden_size_per_layer_input": 0,
                                          "vocab_size_per_layer_input": 0}},
                         "the default text_config fails the class's own validation"),
}

_TOP_K = ("top_k", "num_experts_per_tok", "topk", "moe_top_k", "num_selected_experts")


def config_for(model_type: str, **changes):
    """transformers' config object: the class defaults, :data:`BUILD_FIXES`, ``changes``."""
    fixes = dict(BUILD_FIXES.get(model_type, ({}, ""))[0])
    fixes.update(changes)
    return AutoConfig.for_model(model_type, **fixes)


def as_written(cfg) -> dict:
    """The config as ``save_pretrained`` writes config.json (values that differ from the
    base class's defaults, nested configs included)."""
    return json.loads(cfg.to_json_string(use_diff=True))


def config_dict(model_type: str, **changes) -> dict:
    return as_written(config_for(model_type, **changes))


def build(cfg) -> nn.Module:
    """The real model on the meta device (no memory, no initialisation)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg)


def _language_model(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters of the language model: a wrapper's ``language_model`` and LM head, or
    the whole model."""
    params = list(model.named_parameters())
    lm = [(n, p) for n, p in params if ".language_model." in f".{n}"]
    if not lm:
        return params
    return lm + [(n, p) for n, p in params if n.startswith("lm_head.")]


def _top_k(model: nn.Module, experts_name: str) -> int:
    """The k of the MoE block holding ``experts_name``: an attribute of the block or of one of
    its direct children (the router)."""
    parent = model.get_submodule(experts_name.rsplit(".", 1)[0])
    for mod in [parent, *parent.children()]:
        for attr in _TOP_K:
            value = getattr(mod, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    raise LookupError(f"no top-k attribute found near {experts_name}")


def _num_experts(mod: nn.Module) -> int:
    if isinstance(mod, nn.ModuleList):
        return len(mod)
    for attr in ("num_experts", "num_local_experts"):
        value = getattr(mod, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    firsts = {p.shape[0] for p in mod.parameters(recurse=False)}
    if len(firsts) != 1:
        raise LookupError(f"cannot tell the expert count of {type(mod).__name__}: {firsts}")
    return firsts.pop()


def counts(model: nn.Module) -> tuple[int, int]:
    """(total, active) parameters of the model's language model (module docstring)."""
    params = _language_model(model)
    names = {n for n, _ in params}
    total = sum(p.numel() for _, p in params)
    inactive = 0.0
    for name, mod in model.named_modules():
        if name.rsplit(".", 1)[-1] != "experts" or not any(
                n.startswith(name + ".") for n in names):
            continue
        size = sum(p.numel() for p in mod.parameters())
        experts, k = _num_experts(mod), _top_k(model, name)
        inactive += size * (experts - k) / experts
    return total, round(total - inactive)


def real_counts(model_type: str, **changes) -> list[int]:
    """[total, active] of ``model_type``'s real model (its defaults + fixes + ``changes``)."""
    return list(counts(build(config_for(model_type, **changes))))
