"""The dated framework presets (``ringccl.planner.framework_eras``): Megatron-LM of 2021 and of
2022, the Megatron-DeepSpeed stack, Composer's FSDP; each against the code it cites, and the
step behaviours they switch (the gradient accumulation pass, FlashAttention-2's rate on Hopper,
the asynchronous TP backward, DeepSpeed's one-at-a-time pipeline sends, its ZeRO-1's
all-reduced gradient buckets)."""

import dataclasses

import pytest

from ringccl.costmodel.nccl import price
from ringccl.errors import ArgumentError
from ringccl.planner import ModelConfig, ParallelDims, plan
from ringccl.planner.compute import gradient_accumulation_seconds
from ringccl.planner.costing import KERNEL_LAUNCH_SECONDS, nccl_machine_of
from ringccl.planner.framework_eras import ERA_FAMILY, ERA_LIMITS, ERA_PRESETS, WHOLE_BUFFER
from ringccl.planner.frameworks import (FRAMEWORKS, LIMITS, all_reduces_zero1_gradients,
                                        family, state_bytes)
from ringccl.planner.parallel_dims import check_field
from ringccl.planner.gpus import gpu_preset
from ringccl.planner.kernels import (FLASH2_EFFICIENCY, FLASH_EFFICIENCY,
                                     flash_attention_seconds, memory_seconds)

SMALL = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                    num_key_value_heads=8, intermediate_size=11008, vocab_size=32000,
                    seq_length=4096, name="small")
A100 = {"preset": "dgx-a100", "nodes": 1}


def test_every_dated_preset_is_a_framework_with_a_family():
    assert set(ERA_PRESETS) <= set(FRAMEWORKS)
    assert set(ERA_FAMILY) == set(ERA_PRESETS)
    assert family("megatron-2021") == "megatron" and family("composer") == "fsdp2"
    assert family("deepspeed") == "deepspeed"


def test_megatron_2021_is_sc21s_code():
    # Megatron-LM aed2f75e (2021-04-11): no SP, no distributed optimizer, core attention, one
    # all-reduce of the gradient buffer after the backward, synchronous TP backward, weight
    # gradients added to the main gradient after each micro-batch
    d = ParallelDims(tp=8, dp=4, framework="megatron-2021").for_model(SMALL)
    assert (d.sp, d.zero_stage, d.attention) == (False, 0, "unfused")
    assert (d.overlap_grad_reduce, d.overlap_dgrad_reduce,
            d.gradient_accumulation_fusion, d.pp_sequential_p2p) == (False,) * 4
    assert d.bucket_bytes == WHOLE_BUFFER and d.pp_scatter_gather is True
    # --bf16 forces fp32 main gradients, fp16 keeps fp16 ones (megatron/arguments.py)
    assert d.reduce_dtype == "float32"
    fp16 = ParallelDims(dp=4, framework="megatron-2021").for_model(
        dataclasses.replace(SMALL, dtype="float16"))
    assert fp16.reduce_dtype == "float16"


def test_megatron_2022_adds_the_asynchronous_tp_backward_and_the_fused_accumulation():
    # Megatron-LM 2755bcb8 (2022-06-24): --no-async-tensor-model-parallel-allreduce and
    # --no-gradient-accumulation-fusion are store_false (on); SP and the distributed optimizer
    # are store_true (off); still no FlashAttention
    d = ParallelDims(tp=8, dp=4, framework="megatron-2022")
    assert (d.overlap_dgrad_reduce, d.gradient_accumulation_fusion) == (True, True)
    assert (d.sp, d.zero_stage, d.attention, d.overlap_grad_reduce) == (False, 0, "unfused",
                                                                        False)


def test_megatron_deepspeed_is_deepspeeds_engine_under_megatrons_gpt():
    d = ParallelDims(tp=8, pp=4, dp=2, framework="megatron-deepspeed")
    # DeepSpeed v0.5.4 pipe/p2p.py: blocking send and recv; engine.py: with TP each rank
    # sends its 1/tp PartitionedTensor of the output and the receiver all-gathers it
    assert (d.pp_sequential_p2p, d.pp_scatter_gather, d.overlap_p2p) == (True, True, False)
    assert (d.attention, d.zero_stage, d.gradient_accumulation_fusion) == ("unfused", 0, False)
    # DeepSpeed v0.3.15 partition_parameters.py: a synchronize before each per-parameter gather
    z3 = ParallelDims(dp=8, zero_stage=3, framework="megatron-deepspeed")
    assert (z3.zero3_gather, z3.zero3_prefetch_bucket) == ("parameter", 0)
    # ZeRO's 16 bytes per parameter; the pipeline engine refuses ZeRO-2/3 (DeepSpeed's rule)
    assert state_bytes("megatron-deepspeed", 2, "bfloat16").total == 16
    with pytest.raises(ArgumentError, match="DeepSpeed's pipeline engine refuses"):
        ParallelDims(pp=2, zero_stage=3, framework="megatron-deepspeed")


def test_megatron_deepspeeds_zero1_all_reduces_flattened_buckets():
    # DeepSpeed v0.5.4 engine.py _configure_zero_optimizer: contiguous_gradients off at stage 1,
    # so zero/stage2.py reduce_ipg_grads -> buffered_reduce_fallback -> allreduce_and_copy
    # (flatten, divide, all_reduce, copy back); step(): dist.all_gather(shard_list, ...) with one
    # tensor per rank. Current DeepSpeed keeps contiguous gradients and reduce-scatters.
    assert all_reduces_zero1_gradients("megatron-deepspeed")
    assert not any(all_reduces_zero1_gradients(f) for f in ("deepspeed", "megatron",
                                                            "megatron-2022", "composer"))
    two_nodes = {"preset": "dgx-a100", "nodes": 2}
    layout = {"dp": 16, "zero_stage": 1}
    old = plan(SMALL, {**layout, "framework": "megatron-deepspeed"}, two_nodes)
    new = plan(SMALL, {**layout, "framework": "deepspeed"}, two_nodes)
    zero = lambda p: {e.collective: e for e in p.stages[0].entries  # noqa: E731
                      if e.parallelism == "zero"}
    o, n = zero(old), zero(new)
    assert set(o) == {"all_reduce", "all_gather"} and set(n) == {"reduce_scatter", "all_gather"}
    grads = o["all_reduce"]
    # the same buckets (reduce_bucket_size 5e8 elements), once per step, after the backward
    assert (grads.nbytes, grads.calls_per_step) == (n["reduce_scatter"].nbytes,
                                                   n["reduce_scatter"].calls_per_step)
    assert grads.phase == "step" and grads.overlap == "exposed" and grads.buffer_passes == 3
    gpu = old.cluster.gpu_spec
    machine = nccl_machine_of(old.cluster)
    ppn, nodes = grads.shape.ranks_per_node, grads.shape.nodes_spanned
    expected = (price("all_reduce", grads.nbytes, ppn, nodes, machine).seconds
                + float(memory_seconds(6 * grads.nbytes, gpu)))
    assert grads.seconds_per_call == pytest.approx(expected)
    # an all-reduce moves twice the reduce-scatter's bytes
    assert grads.seconds_per_call > 1.5 * n["reduce_scatter"].seconds_per_call
    # the list-based gather: a copy per rank and the tensor read and written once more
    gather = o["all_gather"]
    assert gather.list_collective and not n["all_gather"].list_collective
    assert gather.seconds_per_call - n["all_gather"].seconds_per_call == pytest.approx(
        16 * KERNEL_LAUNCH_SECONDS + float(memory_seconds(2 * gather.nbytes, gpu)))
    assert old.step_seconds > new.step_seconds


def test_composer_is_fsdp1_with_fp32_reduction_and_flashattention_2():
    # Composer v0.17.0 mosaic_fsdp_utils.py: mixed_precision DEFAULT -> reduce_dtype float32
    d = ParallelDims(dp=8, framework="composer").for_model(SMALL)
    assert (d.zero_stage, d.reduce_dtype, d.attention, d.fsdp_prefetch) == (3, "float32",
                                                                            "flash2", 1)
    assert state_bytes("composer", 2, "float32").total == 16        # fp32 flat parameters
    with pytest.raises(ArgumentError, match="zero_stage=2 is not how composer shards"):
        ParallelDims(dp=8, zero_stage=2, framework="composer")


def test_gradient_accumulation_pass_reads_the_gradient_and_the_accumulator_writes_it_back():
    gpu = gpu_preset("a100")
    params = 1e9
    d21 = ParallelDims(dp=4, framework="megatron-2021").for_model(SMALL)     # fp32 main grads
    expected = float(memory_seconds(params * (2 + 2 * 4), gpu))
    assert gradient_accumulation_seconds(params, d21, 2, gpu) == pytest.approx(expected)
    # fused into the weight-gradient GEMM (Megatron-LM since 2022), or sharded first (ZeRO-2/3)
    d22 = ParallelDims(dp=4, framework="megatron-2022").for_model(SMALL)
    assert gradient_accumulation_seconds(params, d22, 2, gpu) == 0.0
    z2 = ParallelDims(dp=4, zero_stage=2, framework="megatron-deepspeed").for_model(SMALL)
    assert gradient_accumulation_seconds(params, z2, 2, gpu) == 0.0
    # and it lengthens each micro-batch's backward of the step
    p = plan(SMALL, {"dp": 8, "framework": "megatron-2021", "num_micro_batches": 2}, A100)
    c = p.stages[0].compute
    assert c.gradient_accumulation > 0
    q = plan(SMALL, {"dp": 8, "framework": "megatron-2021", "num_micro_batches": 2,
                     "gradient_accumulation_fusion": True}, A100)
    assert c.backward - q.stages[0].compute.backward == pytest.approx(c.gradient_accumulation)


def test_flashattention_2_on_hopper_runs_at_its_own_rate():
    # FlashAttention-3 (arXiv:2407.08608) Figure 4, causal forward, head dim 128, 4k: the
    # FlashAttention-2 bar 319 TFLOP/s, cuDNN's (Transformer Engine's kernel on Hopper) 518
    h100 = gpu_preset("h100")
    assert FLASH2_EFFICIENCY["ampere"] == FLASH_EFFICIENCY["ampere"]   # FA2 is Ampere's kernel
    bh, s = 32 * 132, 4096                        # a whole number of waves of 128-row blocks
    t2 = flash_attention_seconds(bh, s, s, 128, 128, True, h100, kernel="flash2")
    t3 = flash_attention_seconds(bh, s, s, 128, 128, True, h100)
    assert t2 / t3 == pytest.approx(518 / 319)
    # the attention kernel a step runs follows the framework's era
    old = plan(SMALL, {"dp": 8, "framework": "composer"}, {"preset": "dgx-h100", "nodes": 1})
    new = plan(SMALL, {"dp": 8, "framework": "fsdp2"}, {"preset": "dgx-h100", "nodes": 1})
    attn = lambda p: next(o for o in p.stages[0].compute.layers["dense"].ops  # noqa: E731
                          if o.name == "attention")
    assert attn(old).forward_s == pytest.approx(attn(new).forward_s * 518 / 319)
    assert attn(old).backward_s == pytest.approx(attn(new).backward_s * 499 / 310)


def test_torchtitan_2024_is_torchtitan_with_sdpas_flashattention_2():
    # torchtitan 9dec370's Llama calls torch SDPA, whose flash backend is FlashAttention-2;
    # everything else is torchtitan's (FSDP2 state, fp32 reduction, deferred gradient sync)
    new = ParallelDims(dp=8, framework="torchtitan").for_model(SMALL)
    old = ParallelDims(dp=8, framework="torchtitan-2024").for_model(SMALL)
    assert "torchtitan-2024" in FRAMEWORKS and family("torchtitan-2024") == "torchtitan"
    assert (new.attention, old.attention) == ("flash", "flash2")
    keep = ("zero_stage", "reduce_dtype", "recompute", "fsdp_prefetch", "reshard_after_forward",
            "overlap_grad_reduce", "bucket_bytes")
    assert all(getattr(new, k) == getattr(old, k) for k in keep)
    assert state_bytes("torchtitan-2024", 2, "float32") == state_bytes("torchtitan", 2,
                                                                      "float32")
    with pytest.raises(ArgumentError, match="zero_stage=2 is not how torchtitan-2024 shards"):
        ParallelDims(dp=8, zero_stage=2, framework="torchtitan-2024")
    h100 = {"preset": "dgx-h100", "nodes": 1}
    t_old = plan(SMALL, {"dp": 8, "framework": "torchtitan-2024"}, h100).step_seconds
    t_new = plan(SMALL, {"dp": 8, "framework": "torchtitan"}, h100).step_seconds
    assert t_old > t_new            # FlashAttention-2 runs at 35% of H100's peak, not 75%


# -- what a dated framework could not run -----------------------------------------------------

@pytest.mark.parametrize("framework, layout, message", [
    # context parallelism came to Megatron-LM with Megatron-Core (2023-10)
    ("megatron-2021", {"tp": 8, "cp": 2, "dp": 4},
     r"cp=2: megatron-2021 runs cp 1 only \(Megatron-LM aed2f75e: no context parallelism "
     r"\(Megatron-LM's --context-parallel-size came with Megatron-Core in 2023-10\)\)"),
    ("megatron-2021", {"tp": 8, "dp": 8, "zero_stage": 3},
     r"zero_stage=3: megatron-2021 runs zero_stage 0 only \(Megatron-LM aed2f75e "
     r"megatron/arguments.py: no --use-distributed-optimizer"),
    ("megatron-2021", {"dp": 8, "zero_stage": 1}, r"zero_stage=1: megatron-2021 runs zero_stage 0"),
    ("megatron-2021", {"tp": 2, "dp": 4, "sp": True},
     r"sp=True: megatron-2021 runs sp False only .*no --sequence-parallel \(added 2022-05\)"),
    ("megatron-2021", {"dp": 8, "recompute": "selective"},
     r"recompute='selective': megatron-2021 runs recompute 'none' or 'full' "),
    ("megatron-2021", {"dp": 8, "attention": "flash2"},
     r"attention='flash2': megatron-2021 runs attention 'unfused' only"),
    ("megatron-2021", {"pp": 4, "dp": 2, "schedule": "zb-h1"},
     r"schedule='zb-h1': megatron-2021 runs schedule '1f1b' or 'interleaved' "),
    ("megatron-2021", {"dp": 8, "precision": "fp8-delayed"},
     r"precision='fp8-delayed': megatron-2021 runs precision 'bf16' only"),
    # FlashAttention: 285068c8's --use-flash-attn is FlashAttention-1, not modelled
    ("megatron-2022", {"tp": 8, "dp": 1, "attention": "flash"},
     r"attention='flash': megatron-2022 runs attention 'unfused' only \(Megatron-LM 2755bcb8 "
     r"megatron/model/transformer.py CoreAttention; 285068c8 \(2023-01\) adds "
     r"--use-flash-attn, FlashAttention-1's flash_attn_unpadded_func"),
    ("megatron-2022", {"dp": 8, "attention": "flash2"}, r"attention='flash2': megatron-2022"),
    ("megatron-2022", {"tp": 8, "cp": 2, "dp": 4}, r"cp=2: megatron-2022 runs cp 1 only"),
    ("megatron-2022", {"dp": 8, "zero_stage": 2},
     r"zero_stage=2: megatron-2022 runs zero_stage 0 or 1 \(.*--use-distributed-optimizer"),
    ("megatron-2022", {"dp": 8, "ep": 2},
     r"ep=2: megatron-2022 runs ep 1 only \(Megatron-LM 2755bcb8 .*SwitchMLP"),
    ("megatron-2022", {"dp": 8, "precision": "fp8-tensorwise"},
     r"precision='fp8-tensorwise': megatron-2022 runs precision 'bf16' or 'fp8-delayed' "),
    # Composer v0.17.0: FSDP only, no TP (tp_config: v0.23.0) and no pipeline
    ("composer", {"tp": 8, "pp": 4, "dp": 2},
     r"tp=8: composer runs tp 1 only \(Composer v0.17.0: no tensor parallelism"),
    ("composer", {"pp": 4, "dp": 2},
     r"pp=4: composer runs pp 1 only \(Composer v0.17.0 composer/trainer/dist_strategy.py: "
     r"FSDP or DDP, no pipeline parallelism\)"),
    ("composer", {"dp": 8, "attention": "flash"}, r"attention='flash': composer runs attention "
     r"'flash2' or 'unfused'"),
    ("megatron-deepspeed", {"tp": 2, "pp": 2, "dp": 2, "schedule": "interleaved",
                            "virtual_stages": 2},
     r"schedule='interleaved': megatron-deepspeed runs schedule '1f1b' only \(DeepSpeed "
     r"v0.5.4 deepspeed/runtime/pipe/schedule.py TrainSchedule"),
    ("megatron-deepspeed", {"tp": 8, "cp": 2, "dp": 4}, r"cp=2: megatron-deepspeed runs cp 1"),
])
def test_a_dated_framework_refuses_what_it_could_not_run(framework, layout, message):
    with pytest.raises(ArgumentError, match=message):
        ParallelDims(**layout, framework=framework)


def test_the_limits_are_a_table_of_valid_values_with_sources():
    assert set(LIMITS) == set(FRAMEWORKS)
    assert {fw for fw, limits in LIMITS.items() if limits} == set(ERA_LIMITS)
    for fw, limits in LIMITS.items():
        for name, limit in limits.items():
            assert name in ParallelDims.__dataclass_fields__, (fw, name)
            assert limit.source.strip() and limit.allowed, (fw, name)
            for value in limit.allowed:
                assert check_field(name, value) == value, (fw, name, value)


@pytest.mark.parametrize("framework", sorted(ERA_LIMITS))
def test_a_dated_preset_runs_its_own_values_and_every_allowed_one(framework):
    limits = LIMITS[framework]
    shape = {"tp": 2, "pp": 2, "dp": 2}
    shape = {k: v for k, v in shape.items() if k not in limits or v in limits[k].allowed}
    d = ParallelDims(**shape, framework=framework)
    for name, limit in limits.items():
        assert getattr(d, name) in limit.allowed, name
        for value in limit.allowed:
            ParallelDims(**{**shape, name: value}, framework=framework)


def test_the_published_runs_of_the_dated_presets_still_plan():
    """The rows benchmarks/validate_planner.py plans with a dated preset are layouts that
    framework ran: none is refused."""
    import importlib.util
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parent.parent / "benchmarks" / "validate_planner.py"
    spec = importlib.util.spec_from_file_location("validate_planner", bench)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("validate_planner", module)
    spec.loader.exec_module(module)
    dated = [r for r in module.DATA["runs"] if module.framework_preset(r) in ERA_LIMITS]
    assert len(dated) >= 20
    for row in dated:
        module.planner_inputs(row)          # raises on a refused layout


def test_docs_list_every_limit_with_its_source():
    """docs/planner.md §0.1's table of what a dated preset runs is the table in the code."""
    from pathlib import Path
    docs = (Path(__file__).resolve().parent.parent / "docs" / "planner.md").read_text()
    for fw, limits in ERA_LIMITS.items():
        for name, limit in limits.items():
            row = (f"| `{fw}` | `{name}` | {limit.words().replace(chr(39), '')} | "
                   f"{limit.source} |")
            assert row in docs, row
