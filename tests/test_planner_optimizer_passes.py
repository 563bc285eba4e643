"""The optimizer step pass by pass under the dated Megatron-LM presets
(ringccl.planner.optimizer_passes), the residual stream's gradient sum and the linear layers'
bias-gradient reduction in the backward (ringccl.planner.compute)."""

import dataclasses

import pytest

from ringccl.planner import ModelConfig, plan
from ringccl.planner.compute import (bias_grad_fused, head_compute, layer_compute,
                                     optimizer_seconds)
from ringccl.planner.gpus import gpu_preset
from ringccl.planner.kernels import memory_seconds
from ringccl.planner.optimizer_passes import (ADAM_BYTES, megatron_optimizer_bytes,
                                              megatron_optimizer_passes)

A100 = gpu_preset("a100")
# a GPT with Megatron's biases (qkv, attention output, MLP) and a biased LM head
GPT = ModelConfig(num_hidden_layers=4, hidden_size=2048, num_attention_heads=16,
                  intermediate_size=8192, vocab_size=51200, seq_length=2048, gated_mlp=False,
                  tie_word_embeddings=True, qkv_bias=True, attention_out_bias=True,
                  mlp_bias=True, name="gpt-biased")
NO_BIAS = dataclasses.replace(GPT, qkv_bias=False, attention_out_bias=False, mlp_bias=False,
                              name="gpt-unbiased")
CLUSTER = {"preset": "dgx-a100", "nodes": 1}


def _passes(framework, dtype_bytes, grad_bytes, loss_scaling):
    return {p.name: p.bytes_per_parameter
            for p in megatron_optimizer_passes(framework, dtype_bytes, grad_bytes, loss_scaling)}


def test_megatron_optimizer_bytes_per_parameter_are_the_pass_table():
    # 2022 bf16: zero the fp32 buffer 4, no cast (already fp32), no grad scaler, norm 4,
    # clip 8, FusedAdam 28, fp32 -> bf16 copy 6
    assert _passes("megatron-2022", 2, 4, False) == {
        "zero_grad_buffer": 4, "copy_grads": 0, "unscale": 0, "grad_norm": 4, "clip": 8,
        "adam": ADAM_BYTES, "copy_params": 6}
    assert megatron_optimizer_bytes("megatron-2022", 2, 4, False) == (4, 46)
    # fp16 with loss scaling: the unscale pass; a fp16 buffer adds its cast to fp32
    assert sum(megatron_optimizer_bytes("megatron-2022", 2, 4, True)) == 58
    assert sum(megatron_optimizer_bytes("megatron-2022", 2, 2, True)) == 62
    # 2021 fp16: autograd's .grad set to None (no zeroing), cast 2 -> 4, unscale
    assert megatron_optimizer_bytes("megatron-2021", 2, 2, True) == (0, 60)
    assert _passes("megatron-2021", 2, 2, True)["copy_grads"] == 6
    # fp32 training (FP32Optimizer): no copies, no unscale
    assert sum(megatron_optimizer_bytes("megatron-2022", 4, 4, False)) == 44
    with pytest.raises(ValueError, match="megatron-2021"):
        megatron_optimizer_passes("deepspeed", 2, 2, False)


def test_optimizer_seconds_counts_megatron_passes_only_under_its_eras():
    held, updated = 1e9, 2.5e8
    generic = optimizer_seconds(held, updated, A100)
    assert generic == pytest.approx(float(memory_seconds(6 * held + 30 * updated, A100)))
    assert optimizer_seconds(held, updated, A100, framework="megatron") == generic
    m22 = optimizer_seconds(held, updated, A100, framework="megatron-2022", dtype_bytes=2,
                            grad_bytes=4)
    assert m22 == pytest.approx(float(memory_seconds(4 * held + 46 * updated, A100)))


def test_the_plan_charges_the_eras_optimizer_and_keys_its_cache_on_the_framework():
    common = {"dp": 8, "zero_stage": 0, "attention": "unfused", "sp": False,
              "overlap_dgrad_reduce": False, "gradient_accumulation_fusion": True,
              "reduce_dtype": "float32", "recompute": "none", "overlap_grad_reduce": False}
    m22 = plan(GPT, {**common, "framework": "megatron-2022"}, CLUSTER).stages[0].compute
    ds = plan(GPT, {**common, "framework": "megatron-deepspeed"}, CLUSTER).stages[0].compute
    # the same stage, the same parameters (no ZeRO: held = updated): 50 bytes against 36
    assert m22.per_step / ds.per_step == pytest.approx(50 / 36)
    assert m22.layers == ds.layers


def test_bias_gradient_is_a_reduction_pass_except_under_transformer_engine():
    t, b = 4, 2
    tokens = b * GPT.seq_length
    plain = {o.name: o for o in layer_compute(GPT, False, t, True, 1, 1, b, "unfused", "bf16",
                                              A100).ops}
    fused = {o.name: o for o in layer_compute(GPT, False, t, True, 1, 1, b, "unfused", "bf16",
                                              A100, True).ops}
    h, qkv = GPT.hidden_size, 3 * GPT.hidden_size // t
    # column-parallel QKV: the output gradient [T, 3h/t] read once, the bias written
    assert plain["qkv_bias_grad"].forward_s == 0
    assert plain["qkv_bias_grad"].backward_s == pytest.approx(
        float(memory_seconds(tokens * qkv * 2 + qkv * 2, A100)))
    # row-parallel output: its bias is added after the reduce-scatter, on T/t tokens (SP)
    assert plain["attention_out_bias_grad"].backward_s == pytest.approx(
        float(memory_seconds(tokens / t * h * 2 + h * 2, A100)))
    assert {"mlp_up_bias_grad", "mlp_down_bias_grad"} <= set(plain)
    assert not [n for n in fused if n.endswith("_bias_grad")]
    unbiased = layer_compute(NO_BIAS, False, t, True, 1, 1, b, "unfused", "bf16", A100)
    assert not [o for o in unbiased.ops if o.name.endswith("_bias_grad")]
    # grouped experts: each of the rank's experts reduces its own tokens' output gradient
    moe = ModelConfig(num_hidden_layers=2, hidden_size=1024, num_attention_heads=8,
                      intermediate_size=2048, vocab_size=32000, num_local_experts=8,
                      num_experts_per_tok=2, seq_length=1024, mlp_bias=True, name="moe-bias")
    ops = {o.name: o for o in layer_compute(moe, True, 1, False, 1, 4, 1, "flash", "bf16",
                                            A100).ops}
    per_expert, local, width = 1024 * 2 * 4 / 8, 2, 2 * 2048     # T·k·ep/E tokens, gated
    assert ops["experts_up_bias_grad"].backward_s == pytest.approx(
        float(memory_seconds(local * (per_expert * width + width) * 2, A100)))
    head = {o.name for o in head_compute(dataclasses.replace(GPT, lm_head_bias=True), t, True,
                                         1, b, A100).ops}
    assert "lm_head_bias_grad" in head
    # Transformer Engine: Megatron-Core's preset and its FP8 recipe; not Megatron-LM 2021-22
    assert bias_grad_fused("megatron", "bf16") and bias_grad_fused("fsdp2", "fp8-delayed")
    assert not bias_grad_fused("megatron-2022", "bf16")
    assert not bias_grad_fused("torchtitan", "fp8-tensorwise")


def test_the_plan_drops_the_bias_pass_under_megatron_core():
    common = {"tp": 2, "dp": 4, "sp": True, "attention": "unfused", "recompute": "none"}
    core = plan(GPT, {**common, "framework": "megatron"}, CLUSTER).stages[0].compute
    m22 = plan(GPT, {**common, "framework": "megatron-2022"}, CLUSTER).stages[0].compute
    assert not [o for o in core.layers["dense"].ops if o.name.endswith("_bias_grad")]
    assert len([o for o in m22.layers["dense"].ops if o.name.endswith("_bias_grad")]) == 4


def test_the_residual_gradient_sum_is_a_backward_pass_twice_per_layer():
    t, b = 4, 2
    for sp in (False, True):
        lc = layer_compute(NO_BIAS, False, t, sp, 1, 1, b, "unfused", "bf16", A100)
        sums = [o for o in lc.ops if o.name.startswith("residual_grad_sum")]
        region = b * GPT.seq_length / (t if sp else 1)
        assert len(sums) == 2
        for o in sums:       # read the two branches' gradients, write their sum
            assert o.forward_s == 0
            assert o.backward_s == pytest.approx(
                float(memory_seconds(3 * region * GPT.hidden_size * 2, A100)))
