"""The planner's memory model against published figures and hand-computed cases.

Published figures: ZeRO (Rajbhandari et al. 2020) Figure 1; the Ultra-Scale Playbook's table of
model-state memory (16 and 20 bytes per parameter) and its Llama-3.1-8B activation bars (the
context-parallelism section's memory plot). Korthikanti et al. 2022 publish their activation
memory per layer as formulas (Table 2) and the totals only as bar charts, so their rows are
checked against the formulas evaluated by hand here, on the paper's model configurations.
Megatron-LM 2021 states the bubble as formulas; its schedule figures (p = 4, m = 8, v = 2) are
the hand-computed cases.
"""

import math
import re

import pytest

from ringccl.errors import ArgumentError, ArgumentTypeError
from ringccl.planner.memory import (MemoryBreakdown, activation_bytes, breakdown,
                                    communication_buffer_bytes, in_flight_micro_batches,
                                    model_state_bytes, pipeline_bubble_fraction)

GB, GiB = 1e9, 2 ** 30


def total(states):
    return states["weights"] + states["gradients"] + states["optimizer"]


# ----------------------------------------------------------------------------- model states


def test_zero_figure_1():
    # Ψ = 7.5B, N_d = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB, with GB = 1e9 bytes
    figure = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}
    for stage, expected in figure.items():
        states = model_state_bytes(7_500_000_000, dp=64, zero_stage=stage)
        assert round(total(states) / GB, 1) == expected
    # exact values behind the rounded figure: 2Ψ + 2Ψ + KΨ/N_d, 2Ψ + (2+K)Ψ/N_d, (2+2+K)Ψ/N_d
    assert total(model_state_bytes(7_500_000_000, dp=64, zero_stage=1)) == 31_406_250_000
    assert total(model_state_bytes(7_500_000_000, dp=64, zero_stage=2)) == 16_640_625_000
    assert total(model_state_bytes(7_500_000_000, dp=64, zero_stage=3)) == 1_875_000_000
    # the paper's GB is 1e9: in GiB the baseline would read 111.8
    assert round(total(model_state_bytes(7_500_000_000, dp=64, zero_stage=0)) / GiB, 1) == 111.8


def test_zero_stages_shard_what_section_5_says():
    psi, dp = 1000, 8
    s0, s1, s2, s3 = (model_state_bytes(psi, dp=dp, zero_stage=z) for z in range(4))
    assert s0 == {"weights": 2 * psi, "gradients": 2 * psi, "optimizer": 12 * psi}
    assert s1 == {"weights": 2 * psi, "gradients": 2 * psi, "optimizer": 12 * psi // dp}
    assert s2 == {"weights": 2 * psi, "gradients": 2 * psi // dp, "optimizer": 12 * psi // dp}
    assert s3 == {"weights": 2 * psi // dp, "gradients": 2 * psi // dp,
                  "optimizer": 12 * psi // dp}
    # a shard that does not divide is padded up, as DeepSpeed and FSDP pad the flat buffer
    assert model_state_bytes(10, dp=4, zero_stage=3)["weights"] == 2 * 3
    # dp = 1: every stage is the baseline
    assert all(model_state_bytes(psi, dp=1, zero_stage=z) == s0 for z in range(4))


@pytest.mark.parametrize("billions, gb16, gb20", [(1, 16, 20), (7, 112, 140),
                                                   (70, 1_120, 1_400), (405, 6_480, 8_100)])
def test_ultra_scale_playbook_model_state_table(billions, gb16, gb20):
    # bf16 weights + bf16 gradients + fp32 master, momentum and variance = 16 bytes; the 20-byte
    # column adds an fp32 copy of the gradients (grad_bytes = 2 + 4); the playbook's GB is 1e9
    psi = billions * 10 ** 9
    assert total(model_state_bytes(psi, dp=1, zero_stage=0)) == gb16 * GB
    assert total(model_state_bytes(psi, dp=1, zero_stage=0, grad_bytes=6)) == gb20 * GB
    # fp32 training (4 + 4 + 8) is the same 16 bytes
    assert total(model_state_bytes(psi, dp=1, zero_stage=0, param_bytes=4, grad_bytes=4,
                                   optimizer_bytes=8)) == gb16 * GB


# ----------------------------------------------------------------------------- activations

# Korthikanti et al. 2022, Table 3's GPT configurations (heads a, hidden h, tensor parallel t)
# at their sequence length s = 2048
CONFIGS = {"22B": (64, 6144, 8), "175B": (96, 12288, 8), "530B": (128, 20480, 8),
           "1T": (160, 25600, 8)}


def per_layer(s, b, h, a, **kw):
    return activation_bytes(seq_length=s, micro_batch_size=b, hidden_size=h,
                            num_attention_heads=a, num_layers=1, **kw)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_korthikanti_table_2_rows(name):
    a, h, t = CONFIGS[name]
    s, b = 2048, 1
    sbh, r = s * b * h, 5 * a * s / h
    rows = [
        (dict(), sbh * (34 + r)),
        (dict(tp=t), sbh * (10 + 24 / t + r / t)),
        (dict(tp=t, sp=True), sbh / t * (34 + r)),
        (dict(tp=t, recompute="selective"), sbh * (10 + 24 / t)),
        (dict(tp=t, sp=True, recompute="selective"), sbh * 34 / t),
        (dict(recompute="full"), 2 * sbh),
        (dict(tp=t, recompute="full"), 2 * sbh),
        (dict(tp=t, sp=True, recompute="full"), 2 * sbh / t),
    ]
    for kw, expected in rows:
        assert per_layer(s, b, h, a, **kw) == math.ceil(expected - 1e-6), kw
    # the paper's headline: SP + selective recompute cut tensor parallelism's activations ~5x
    ratio = per_layer(s, b, h, a, tp=t) / per_layer(s, b, h, a, tp=t, sp=True,
                                                    recompute="selective")
    assert 4.9 < ratio < 6.3


def test_gpt3_attention_term():
    # GPT-3 175B: 5·a·s/h = 5·96·2048/12288 = 80, against 34 for the rest of the layer
    a, h, s = 96, 12288, 2048
    full = per_layer(s, 1, h, a)
    assert full == s * h * (34 + 80)
    assert per_layer(s, 1, h, a, recompute="selective") == s * h * 34


def test_playbook_llama_8b_activation_bars():
    # the Ultra-Scale Playbook's Llama-3.1-8B memory plot (context-parallelism section, no CP):
    # activations of L = 32 layers, h = 4096, a = 32, b = 1, no s² term, in GiB
    bars = {1024: 4.25, 4096: 17, 16384: 68, 65536: 272, 131072: 544}
    for s, gib in bars.items():
        got = activation_bytes(seq_length=s, micro_batch_size=1, hidden_size=4096,
                               num_attention_heads=32, num_layers=32, recompute="selective")
        assert got / GiB == gib


def test_dtype_bytes_scales_tensors_not_masks():
    s, b, h, a, t = 64, 2, 32, 4, 2
    sbh, asb = s * b * h, a * s * s * b
    # 2-byte tensors 16·sbh + 2·as²b elements, 1-byte masks 2·sbh + as²b elements
    assert per_layer(s, b, h, a, dtype_bytes=4) == 4 * (16 * sbh + 2 * asb) + 2 * sbh + asb
    assert per_layer(s, b, h, a, dtype_bytes=2) == 34 * sbh + 5 * asb
    # tensor parallel: replicated 4·sbh (+ 2·sbh masks), split 12·sbh + 2·as²b (+ as²b masks)
    assert (per_layer(s, b, h, a, tp=t, dtype_bytes=4)
            == 4 * (4 * sbh + (12 * sbh + 2 * asb) // t) + 2 * sbh + asb // t)
    assert per_layer(s, b, h, a, tp=t, sp=True, dtype_bytes=1) == (16 + 2) * sbh // t + 3 * asb // t
    assert per_layer(s, b, h, a, recompute="full", dtype_bytes=4) == 4 * sbh


def test_context_parallel_divides_the_sequence():
    s, b, h, a = 4096, 1, 1024, 16
    for cp in (1, 2, 4, 8):
        for recompute in ("none", "selective", "full"):
            assert (per_layer(s, b, h, a, cp=cp, recompute=recompute)
                    == per_layer(s // cp, b, h, a, recompute=recompute))
    # selective: linear in s, so cp divides it exactly
    assert per_layer(s, b, h, a, cp=4, recompute="selective") * 4 == per_layer(
        s, b, h, a, recompute="selective")


def test_layers_and_micro_batch_scale_linearly():
    one = per_layer(128, 1, 64, 8, tp=2, sp=True)
    assert activation_bytes(seq_length=128, micro_batch_size=3, hidden_size=64,
                            num_attention_heads=8, num_layers=5, tp=2, sp=True) == 15 * one
    assert activation_bytes(seq_length=128, micro_batch_size=1, hidden_size=64,
                            num_attention_heads=8, num_layers=0) == 0


# ----------------------------------------------------------------------------- pipeline


def test_in_flight_gpipe_and_1f1b():
    p, m = 4, 8
    assert [in_flight_micro_batches(schedule="gpipe", pp=p, stage=r, num_micro_batches=m)
            for r in range(p)] == [8, 8, 8, 8]
    assert [in_flight_micro_batches(schedule="1f1b", pp=p, stage=r, num_micro_batches=m)
            for r in range(p)] == [4, 3, 2, 1]
    # fewer micro-batches than stages: all of them are in flight on the early stages
    assert [in_flight_micro_batches(schedule="1F1B", pp=p, stage=r, num_micro_batches=2)
            for r in range(p)] == [2, 2, 2, 1]
    assert in_flight_micro_batches(schedule="1f1b", pp=1, stage=0, num_micro_batches=16) == 1


@pytest.mark.parametrize("p, v", [(2, 2), (4, 2), (4, 4), (8, 3), (16, 2)])
def test_in_flight_interleaved_first_stage(p, v):
    # Korthikanti §4.2.3: the interleaved schedule's first stage holds p·(1 + (p−1)/(p·v))
    m = 4 * p
    got = in_flight_micro_batches(schedule="interleaved", pp=p, stage=0, num_micro_batches=m,
                                  virtual_stages=v)
    assert got == pytest.approx(p * (1 + (p - 1) / (p * v)))
    # Megatron's warm-up: 2·(p − r − 1) + (v − 1)·p chunk-forwards, then one more in 1F1B
    for r in range(p):
        got = in_flight_micro_batches(schedule="interleaved", pp=p, stage=r,
                                      num_micro_batches=m, virtual_stages=v)
        assert got == pytest.approx((2 * (p - r - 1) + (v - 1) * p + 1) / v)


def test_in_flight_interleaved_edge_cases():
    # m = p: Megatron runs every chunk-forward in warm-up, m·v chunks = m micro-batches
    assert [in_flight_micro_batches(schedule="interleaved", pp=4, stage=r, num_micro_batches=4,
                                    virtual_stages=2) for r in range(4)] == [4, 4, 4, 4]
    # v = 1 is plain 1F1B
    assert [in_flight_micro_batches(schedule="interleaved", pp=4, stage=r, num_micro_batches=8)
            for r in range(4)] == [4, 3, 2, 1]


def test_first_stage_of_1f1b_holds_all_layers():
    # Korthikanti §4.2.3: p in-flight micro-batches × L/p layers = L layers' worth, whatever p
    s, b, h, a, L = 2048, 1, 4096, 32, 32
    whole = activation_bytes(seq_length=s, micro_batch_size=b, hidden_size=h,
                             num_attention_heads=a, num_layers=L)
    for p in (1, 2, 4, 8):
        mem = breakdown(num_parameters=0, seq_length=s, micro_batch_size=b, hidden_size=h,
                        num_attention_heads=a, num_layers=L // p, pp=p, num_micro_batches=16)
        assert mem.activations == whole


def test_bubble_megatron_2021():
    # §2.2.1: (p − 1)/m for GPipe and 1F1B; §2.2.2: (p − 1)/(v·m) interleaved
    assert pipeline_bubble_fraction(schedule="gpipe", pp=4, num_micro_batches=8) == 3 / 8
    assert pipeline_bubble_fraction(schedule="1f1b", pp=4, num_micro_batches=8) == 3 / 8
    assert pipeline_bubble_fraction(schedule="interleaved", pp=4, num_micro_batches=8,
                                    virtual_stages=2) == 3 / 16
    # virtual stages only matter to the interleaved schedule
    assert pipeline_bubble_fraction(schedule="1f1b", pp=4, num_micro_batches=8,
                                    virtual_stages=2) == 3 / 8
    assert pipeline_bubble_fraction(schedule="interleaved", pp=1, num_micro_batches=1) == 0
    # m ≫ p makes the bubble small: p = 8, m = 64 is 7/64 < 11%
    assert pipeline_bubble_fraction(schedule="1f1b", pp=8, num_micro_batches=64) == 7 / 64


# ----------------------------------------------------------------------------- buffers


def test_communication_buffers():
    none = communication_buffer_bytes()
    assert none == {"ddp_buckets": 0, "zero3_gather": 0, "moe_all_to_all": 0}
    # DDP: one more copy of the gradients, unless .grad are views into the buckets
    assert communication_buffer_bytes(ddp_gradient_bytes=10 ** 9)["ddp_buckets"] == 10 ** 9
    assert communication_buffer_bytes(ddp_gradient_bytes=10 ** 9,
                                      gradient_as_bucket_view=True)["ddp_buckets"] == 0
    # ZeRO-3: two full-size layers of bf16 weights + one layer's bf16 gradient
    assert communication_buffer_bytes(zero3_layer_parameters=1000)["zero3_gather"] == 6000
    assert communication_buffer_bytes(zero3_layer_parameters=1000, zero3_live_layers=3,
                                      param_bytes=4, grad_bytes=4)["zero3_gather"] == 16000
    # MoE: send + receive of c·k·T rows of h values
    moe = communication_buffer_bytes(moe_tokens=4096, moe_top_k=8, moe_capacity_factor=1.25,
                                     moe_hidden_size=7168)
    assert moe["moe_all_to_all"] == 2 * int(1.25 * 8 * 4096) * 7168 * 2


# ----------------------------------------------------------------------------- breakdown


def test_breakdown_adds_its_parts():
    kw = dict(seq_length=2048, micro_batch_size=1, hidden_size=8192, num_attention_heads=64,
              tp=8, sp=True, recompute="selective")
    buffers = communication_buffer_bytes(ddp_gradient_bytes=123)
    mem = breakdown(num_parameters=10 ** 9, dp=16, zero_stage=1, num_layers=10, pp=8, stage=0,
                    num_micro_batches=32, schedule="interleaved", virtual_stages=2,
                    communication=buffers, **kw)
    states = model_state_bytes(10 ** 9, dp=16, zero_stage=1)
    one = activation_bytes(num_layers=10, **kw)
    assert (mem.weights, mem.gradients, mem.optimizer) == (states["weights"],
                                                           states["gradients"],
                                                           states["optimizer"])
    assert mem.activations == math.ceil(one * (8 + 7 / 2))
    assert mem.communication == 123
    assert mem.total == sum(states.values()) + mem.activations + 123
    assert mem.to_dict() == {**states, "activations": mem.activations, "communication": 123,
                             "total": mem.total}
    assert mem.fits(mem.total) and not mem.fits(mem.total - 1)


def test_memory_breakdown_total_and_fits():
    mem = MemoryBreakdown(weights=1, gradients=2, optimizer=3, activations=4, communication=5)
    assert mem.total == 15
    assert mem.fits(80e9) and mem.fits(15) and not mem.fits(14.5)


# ----------------------------------------------------------------------------- bad input

ACT = dict(seq_length=2048, micro_batch_size=1, hidden_size=1024, num_attention_heads=16,
           num_layers=4)
PIPE = dict(schedule="1f1b", pp=4, stage=0, num_micro_batches=8)

BAD = [
    (model_state_bytes, (-1,), dict(dp=1, zero_stage=0), ArgumentError, "num_parameters=-1"),
    (model_state_bytes, (1.5,), dict(dp=1, zero_stage=0), ArgumentTypeError,
     "num_parameters=1.5"),
    (model_state_bytes, (10,), dict(dp=0, zero_stage=0), ArgumentError, "dp=0"),
    (model_state_bytes, (10,), dict(dp=2, zero_stage=4), ArgumentError,
     "zero_stage=4 must be one of 0, 1, 2, 3"),
    (model_state_bytes, (10,), dict(dp=2, zero_stage=True), ArgumentTypeError,
     "zero_stage=True"),
    (model_state_bytes, (10,), dict(dp=2, zero_stage=1, param_bytes=-2), ArgumentError,
     "param_bytes=-2"),
    (model_state_bytes, (10,), dict(dp=2, zero_stage=1, grad_bytes="2"), ArgumentTypeError,
     "grad_bytes='2'"),
    (model_state_bytes, (10,), dict(dp=2, zero_stage=1, optimizer_bytes=float("nan")),
     ArgumentError, "optimizer_bytes=nan"),
    (activation_bytes, (), {**ACT, "seq_length": 0}, ArgumentError, "seq_length=0"),
    (activation_bytes, (), {**ACT, "micro_batch_size": 0}, ArgumentError,
     "micro_batch_size=0"),
    (activation_bytes, (), {**ACT, "hidden_size": -4}, ArgumentError, "hidden_size=-4"),
    (activation_bytes, (), {**ACT, "num_layers": -1}, ArgumentError, "num_layers=-1"),
    (activation_bytes, (), {**ACT, "tp": 0}, ArgumentError, "tp=0"),
    (activation_bytes, (), {**ACT, "tp": 3}, ArgumentError,
     "num_attention_heads=16 is not divisible by tp=3"),
    (activation_bytes, (), {**ACT, "cp": 3}, ArgumentError,
     "seq_length=2048 is not divisible by cp=3"),
    (activation_bytes, (), {**ACT, "seq_length": 2050, "tp": 4, "sp": True}, ArgumentError,
     "is not divisible by tp=4, as sequence parallelism needs"),
    (activation_bytes, (), {**ACT, "sp": 1}, ArgumentTypeError, "sp=1 must be True or False"),
    (activation_bytes, (), {**ACT, "recompute": "partial"}, ArgumentError,
     "recompute='partial' is not one of none, selective, full"),
    (activation_bytes, (), {**ACT, "dtype_bytes": 0}, ArgumentError, "dtype_bytes=0"),
    (in_flight_micro_batches, (), {**PIPE, "schedule": "zb-h3"}, ArgumentError,
     "schedule='zb-h3' is not one of 1f1b, interleaved, gpipe, zb-h1, zb-h2, dualpipe, "
     "dualpipev"),
    (in_flight_micro_batches, (), {**PIPE, "pp": 0}, ArgumentError, "pp=0"),
    (in_flight_micro_batches, (), {**PIPE, "stage": 4}, ArgumentError,
     "stage=4 is out of range for pp=4"),
    (in_flight_micro_batches, (), {**PIPE, "stage": -1}, ArgumentError, "stage=-1"),
    (in_flight_micro_batches, (), {**PIPE, "num_micro_batches": 0}, ArgumentError,
     "num_micro_batches=0"),
    (in_flight_micro_batches, (), {**PIPE, "virtual_stages": 0}, ArgumentError,
     "virtual_stages=0"),
    (pipeline_bubble_fraction, (), dict(schedule=None, pp=2, num_micro_batches=2),
     ArgumentError, "schedule=None"),
    (pipeline_bubble_fraction, (), dict(schedule="gpipe", pp=2, num_micro_batches=2.0),
     ArgumentTypeError, "num_micro_batches=2.0"),
    (communication_buffer_bytes, (), dict(ddp_gradient_bytes=-1), ArgumentError,
     "ddp_gradient_bytes=-1"),
    (communication_buffer_bytes, (), dict(gradient_as_bucket_view="yes"), ArgumentTypeError,
     "gradient_as_bucket_view='yes'"),
    (communication_buffer_bytes, (), dict(zero3_live_layers=0), ArgumentError,
     "zero3_live_layers=0"),
    (communication_buffer_bytes, (), dict(moe_top_k=0), ArgumentError, "moe_top_k=0"),
    (communication_buffer_bytes, (), dict(moe_capacity_factor=0), ArgumentError,
     "moe_capacity_factor=0"),
    (communication_buffer_bytes, (), dict(moe_tokens=-5), ArgumentError, "moe_tokens=-5"),
    (MemoryBreakdown, (), dict(weights=-1, gradients=0, optimizer=0, activations=0),
     ArgumentError, "weights=-1"),
    (breakdown, (), dict(num_parameters=1, communication={"ddp_buckets": -3}, **ACT),
     ArgumentError, "communication['ddp_buckets']=-3"),
    (breakdown, (), dict(num_parameters=1, communication="1GB", **ACT), ArgumentTypeError,
     "communication='1GB'"),
]


@pytest.mark.parametrize("fn, args, kwargs, error, message", BAD,
                         ids=[f"{row[0].__name__}-{row[4][:30]}" for row in BAD])
def test_bad_input(fn, args, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        fn(*args, **kwargs)


def test_fits_refuses_a_bad_capacity():
    mem = MemoryBreakdown(weights=1, gradients=0, optimizer=0, activations=0)
    with pytest.raises(ArgumentError, match=re.escape("gpu_memory_bytes=0")):
        mem.fits(0)
    with pytest.raises(ArgumentTypeError, match=re.escape("gpu_memory_bytes='80GB'")):
        mem.fits("80GB")
