"""Frameworks as published runs ran them: Megatron-LM in 2021 and in 2022–2023, the
Megatron-DeepSpeed stack of 2021–2022, and MosaicML Composer's FSDP of 2023 (``--framework
megatron-2021``, ``megatron-2022``, ``megatron-deepspeed``, ``composer``).

The behaviour that sets a step's time changed across versions: FlashAttention exists only from
2022 (Dao et al., arXiv:2205.14135) and Megatron-LM's argument for it from January 2023;
Megatron-LM made the column-parallel layers' input-gradient reduction asynchronous and fused
the gradient accumulation into the weight-gradient GEMM in February 2022 (commit 83b1e42f,
"gradient accumulation fusion"), added sequence parallelism and selective recompute in May
2022 (Korthikanti et al. 2022) and overlapped the data-parallel reduction only from August
2023 (``--overlap-grad-reduce``, commit 2d5220a4). One table per version (:data:`ERA_PRESETS`),
each value with the file and argument it comes from at the commit or tag read; the tables'
form is :class:`Setting`'s, the same as the current frameworks' (:mod:`.frameworks`).

What each dated framework could not run at all is refused (:data:`ERA_LIMITS`: a layout
field's values it runs, each with its source), so a plan never prices a layout of a later
framework under an earlier one's name.

Versions read (paths below are relative to these):

* Megatron-LM ``aed2f75e`` (2021-04-11, the code of Narayanan et al., SC21, arXiv April 2021);
* Megatron-LM ``2755bcb8`` (2022-06-24, with Korthikanti et al. 2022's sequence parallelism
  and selective recompute); the behaviour holds to ``285068c8`` (2023-01-11, MegaScale's
  baseline, NSDI'24 §6.1), which adds only options that are off by default: FlashAttention
  (``--use-flash-attn``) and Transformer Engine's FP8 (``--fp8-hybrid``);
* DeepSpeed ``v0.3.15`` (2021-04-19, ZeRO-3 as SC21 Table 2 ran it) and ``v0.5.4`` (2021-10,
  the pipeline engine MT-NLG and BLOOM ran; unchanged in its sends and receives since);
* Composer ``v0.17.0`` (2023-11-14; ``composer/trainer/dist_strategy.py``,
  ``mosaic_fsdp_utils.py``) over PyTorch 2.1's FullyShardedDataParallel, as llm-foundry's
  benchmarks ran it (``scripts/train/benchmarking/sweep.py`` at ``5e85bd62``, 2024-01-06).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["Setting", "Limit", "REDUCE_DTYPES", "ERA_PRESETS", "ERA_FAMILY", "ERA_LIMITS",
           "PREFETCH_BUCKET"]

#: the dtypes gradients may be reduced in, and their bytes per element
REDUCE_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}

_M21 = "Megatron-LM aed2f75e"
_M22 = "Megatron-LM 2755bcb8"
_DS03 = "DeepSpeed v0.3.15"
_DS05 = "DeepSpeed v0.5.4"
_COMPOSER = "Composer v0.17.0"
_FOUNDRY = "llm-foundry 5e85bd62 scripts/train/benchmarking/sweep.py"
_TORCH21 = "PyTorch 2.1 FullyShardedDataParallel"


@dataclass(frozen=True)
class Setting:
    """One preset value and where the framework defines it.

    Attributes:
        value: the value, or (with ``rule``) how it follows from the layout, in words.
        source: the framework's file and argument (or document) at the version read.
        rule: the value from the layout: called with a dict of the layout's resolved fields
            (``tp``, ``pp``, ``dp``, ``cp``) and, for the model settings, ``dtype`` (the
            model's training dtype) and ``reduce_dtype``.
        note: where the framework's bare argument default differs, and other caveats.
    """

    value: object
    source: str
    rule: Callable[[dict], object] | None = None
    note: str = ""

    def resolve(self, layout: dict):
        return self.value if self.rule is None else self.rule(layout)


def megatron_reduce(layout: dict) -> str:
    """Megatron-LM's gradient dtype: --bf16 forces fp32 main gradients, fp16 keeps fp16 ones,
    fp32 training reduces in fp32 (the same rule since 2021)."""
    return "float16" if layout["dtype"] in ("float16", "fp16") else "float32"


#: a model dtype's name -> the dtype its gradients have (8-bit training keeps 16-bit weights)
GRAD_DTYPE = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16",
              "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
              "float8": "bfloat16", "fp8": "bfloat16"}


def model_dtype_reduce(layout: dict) -> str:
    return GRAD_DTYPE[layout["dtype"]]


def float32_reduce(layout: dict) -> str:
    """Gradients reduced in float32 whatever the model's dtype (FSDP's mixed precision)."""
    return "float32"


#: one call of the whole gradient buffer (no bucketing), bytes
WHOLE_BUFFER = 2**50


def _whole_buffer(layout: dict) -> int:
    return WHOLE_BUFFER


def deepspeed_bucket(layout: dict) -> int:
    """DeepSpeed's reduce_bucket_size, 5e8 elements of the reduce dtype (since v0.3)."""
    return 500_000_000 * REDUCE_DTYPES[layout["reduce_dtype"]]


#: DeepSpeed's stage3_prefetch_bucket_size (deepspeed/runtime/zero/config.py), elements; the
#: value where a framework has no such setting (it is read only with zero3_gather="parameter")
PREFETCH_BUCKET = 50_000_000

#: zero3_prefetch_bucket of the FSDP presets, current and dated
FSDP_PREFETCH_BUCKET = Setting(PREFETCH_BUCKET, "not an FSDP setting")


def _not_set(what: str) -> Setting:
    return Setting(None, f"not a setting of {what}")


def _megatron_era(tag: str, **changes: Setting) -> dict[str, Setting]:
    """The settings Megatron-LM kept from 2021 to mid-2023, with ``changes``."""
    base = {
        "sp": Setting(False, f"{tag}: no sequence parallelism (added 2022-05)"),
        "zero_stage": Setting(0, f"{tag}: no distributed optimizer (added 2022-02)"),
        "recompute": Setting("none", f"{tag} megatron/arguments.py --checkpoint-activations "
                             "(store_true: off)"),
        "attention": Setting("unfused", f"{tag} megatron/model/transformer.py ParallelAttention:"
                             " baddbmm, FusedScaleMaskSoftmax, dropout, bmm over the whole "
                             "s x s scores (FlashAttention is of 2022)"),
        "reshard_after_forward": _not_set("Megatron-LM"),
        "reduce_dtype": Setting("float32 with bf16 or fp32, float16 with fp16",
                                f"{tag} megatron/arguments.py: bfloat16 sets "
                                "accumulate_allreduce_grads_in_fp32", megatron_reduce),
        "bucket_bytes": Setting("the whole gradient buffer", f"{tag} megatron/model/"
                                "distributed.py allreduce_gradients: one all-reduce of each "
                                "dtype's contiguous buffer", _whole_buffer),
        "overlap_grad_reduce": Setting(False, f"{tag} megatron/training.py train_step: the "
                                       "gradients are reduced after forward_backward_func "
                                       "returns (Korthikanti et al. 2022 §6.3: not "
                                       "overlapped)"),
        "overlap_param_gather": Setting(False, f"{tag}: no parameter all-gather overlap "
                                        "(added 2023-11)"),
        "tp_comm_overlap": Setting(False, f"{tag}: no userbuffers TP overlap (Megatron-Core, "
                                   "2023)"),
        "overlap_p2p": Setting(False, f"{tag} megatron/p2p_communication.py _communicate: "
                               "batch_isend_irecv, then torch.cuda.synchronize()"),
        "pp_scatter_gather": Setting(True, f"{tag} megatron/arguments.py "
                                     "--no-scatter-gather-tensors-in-pipeline (store_false: "
                                     "on; Narayanan et al. 2021 §4.1)"),
        "zero3_gather": Setting("layer", "not a Megatron-LM setting (no ZeRO-3)"),
        "zero3_prefetch_bucket": Setting(PREFETCH_BUCKET, "not a Megatron-LM setting"),
        "fsdp_prefetch": Setting(1, "not a Megatron-LM setting"),
        "overlap_dgrad_reduce": Setting(False, f"{tag} megatron/mpu/layers.py: the "
                                        "column-parallel layer's input-gradient all-reduce "
                                        "runs after its backward (synchronous)"),
        "gradient_accumulation_fusion": Setting(False, f"{tag}: each micro-batch's weight "
                                                "gradient is written, then added to the "
                                                "accumulated one (autograd's .grad, or "
                                                "megatron/model/distributed.py "
                                                "_make_param_hook main_grad.add_)"),
        "pp_sequential_p2p": Setting(False, f"{tag} megatron/p2p_communication.py: a send and "
                                     "a receive in one batch_isend_irecv"),
        "account_for_embedding_in_pipeline_split": Setting(
            False, f"{tag} megatron/model/transformer.py ParallelTransformer: num_layers / "
            "pipeline size layers on every stage, no slot for the embedding"),
        "account_for_loss_in_pipeline_split": Setting(
            False, f"{tag} megatron/model/transformer.py ParallelTransformer: no slot for the "
            "loss"),
        "schedule": Setting("1f1b; interleaved with --num-layers-per-virtual-pipeline-stage",
                            f"{tag} megatron/schedules.py get_forward_backward_func"),
        "num_micro_batches": Setting("global batch / (micro-batch x dp)",
                                     f"{tag} megatron/arguments.py --global-batch-size"),
    }
    return {**base, **changes}


#: DeepSpeed's engine under Megatron-LM's GPT model (Megatron-DeepSpeed), 2021-2022
_MEGATRON_DEEPSPEED = {
    **_megatron_era(_M21),
    "zero_stage": Setting(0, f"{_DS05} deepspeed/runtime/zero/constants.py "
                          "ZERO_OPTIMIZATION_STAGE_DEFAULT = 0"),
    "recompute": Setting("none", f"{_DS05} deepspeed/runtime/activation_checkpointing: "
                         "applied by the model's code only"),
    "reshard_after_forward": Setting(True, f"{_DS03} deepspeed/runtime/zero/stage3.py "
                                     "release_sub_module: a module's gathered parameters "
                                     "are freed after it runs"),
    "reduce_dtype": Setting("the model's dtype", f"{_DS05} deepspeed/runtime/engine.py: "
                            "gradients all-reduced as the model holds them",
                            model_dtype_reduce),
    "bucket_bytes": Setting("reduce_bucket_size 5e8 elements", f"{_DS05} deepspeed/runtime/"
                            "zero/constants.py ZERO_OPTIMIZATION_REDUCE_BUCKET_SIZE_DEFAULT",
                            deepspeed_bucket),
    "overlap_grad_reduce": Setting(False, f"{_DS05} deepspeed/runtime/pipe/engine.py "
                                   "_exec_reduce_grads after the last micro-batch; "
                                   "zero/constants.py ZERO_OPTIMIZATION_OVERLAP_COMM_DEFAULT "
                                   "= False"),
    "overlap_p2p": Setting(False, f"{_DS05} deepspeed/runtime/pipe/p2p.py send and recv: "
                           "async_op must be False"),
    "pp_scatter_gather": Setting(True, f"{_DS05} deepspeed/runtime/pipe/engine.py: "
                                 "is_pipe_partitioned and is_grad_partitioned = "
                                 "is_model_parallel, so with TP _exec_forward_pass sends "
                                 "each TP rank's 1/tp PartitionedTensor of the output (and "
                                 "_exec_send_grads of the input gradient), the receiver "
                                 "all-gathers it over the slice (TP) group (PartitionedTensor"
                                 ".full, runtime/utils.py)"),
    "zero3_gather": Setting("parameter", f"{_DS03} deepspeed/runtime/zero/"
                            "partition_parameters.py _allgather_param: one list-based "
                            "all_gather per parameter tensor"),
    "zero3_prefetch_bucket": Setting(0, f"{_DS03} partition_parameters.py _allgather_param: "
                                     "torch.cuda.synchronize() before each gather, so the "
                                     "device drains before every gather is issued",
                                     note="stage3_prefetch_bucket_size = 5e7 is read; "
                                     "stage3.py's prefetch (from the second step) goes "
                                     "through the same synchronised gather"),
    "pp_sequential_p2p": Setting(True, f"{_DS05} deepspeed/runtime/pipe/engine.py: "
                                 "SendActivation, RecvActivation, SendGrad and RecvGrad are "
                                 "separate instructions; p2p.py: each a blocking send or recv"),
    "account_for_embedding_in_pipeline_split": Setting(
        False, "Megatron-DeepSpeed megatron/model/gpt_model.py GPTModelPipe: PipelineModule("
        "partition_method='type:transformer'), the transformer layers balanced over the stages, "
        "the embedding not counted"),
    "account_for_loss_in_pipeline_split": Setting(
        False, "Megatron-DeepSpeed gpt_model.py GPTModelPipe: partition_method="
        "'type:transformer', the loss not counted"),
    "schedule": Setting("1f1b", f"{_DS05} deepspeed/runtime/pipe/schedule.py TrainSchedule"),
    "num_micro_batches": Setting("gradient_accumulation_steps (default 1)",
                                 f"{_DS05} deepspeed/runtime/config.py "
                                 "_set_batch_related_parameters"),
}

_NO_TP = f"{_COMPOSER}: no tensor parallelism"
_NO_PP = f"{_COMPOSER}: no pipeline parallelism"

#: Composer's FSDP (PyTorch 2.1's FullyShardedDataParallel) as llm-foundry's benchmarks ran it
_COMPOSER_FSDP = {
    "sp": Setting(False, _NO_TP),
    "zero_stage": Setting(3, f"{_COMPOSER} composer/trainer/dist_strategy.py "
                          "sharding_strategy = FULL_SHARD",
                          note="SHARD_GRAD_OP: zero_stage 3 with reshard_after_forward off"),
    "recompute": Setting("none", f"{_COMPOSER} dist_strategy.py activation_checkpointing = "
                         "False"),
    "attention": Setting("flash2", f"{_FOUNDRY} --attn_impl flash: FlashAttention-2 (2023; "
                         "triton for 13b and 30b: llm-foundry's Triton FlashAttention)"),
    "reshard_after_forward": Setting(True, f"{_TORCH21} ShardingStrategy.FULL_SHARD frees "
                                     "each unit's gathered parameters after its forward"),
    "reduce_dtype": Setting("float32", f"{_COMPOSER} composer/trainer/mosaic_fsdp_utils.py "
                            "get_mixed_precision: mixed_precision 'DEFAULT' -> reduce_dtype "
                            "float32 (parameters gathered in the autocast dtype)",
                            float32_reduce, "llm-foundry's benchmark table prints MP Mode DEFAULT"),
    "bucket_bytes": Setting(25 * 2**20, f"{_TORCH21}: one reduce-scatter per FSDP unit (DDP's "
                            "25 MiB bucket_cap_mb with --zero 0)"),
    "overlap_grad_reduce": Setting(True, f"{_TORCH21} _runtime_utils.py _post_backward_hook: "
                                   "the unit's reduce-scatter on the post-backward stream"),
    "overlap_param_gather": Setting(True, f"{_TORCH21} _runtime_utils.py _unshard: the "
                                    "all-gather on the unshard stream"),
    "tp_comm_overlap": Setting(False, _NO_TP),
    "overlap_p2p": Setting(False, _NO_PP),
    "pp_scatter_gather": Setting(True, _NO_PP),
    "zero3_gather": Setting("layer", f"{_COMPOSER} dist_strategy.py: one FSDP unit per "
                            "block (the model's fsdp_wrap_fn)"),
    "zero3_prefetch_bucket": FSDP_PREFETCH_BUCKET,
    "fsdp_prefetch": Setting(1, f"{_FOUNDRY} --fsdp_config_forward_prefetch true "
                             "--fsdp_config_backward_prefetch BACKWARD_PRE "
                             "--fsdp_config_limit_all_gathers true (one unit ahead)",
                             note="Composer's own defaults: forward_prefetch False, "
                             "BACKWARD_POST"),
    "overlap_dgrad_reduce": Setting(False, _NO_TP),
    "gradient_accumulation_fusion": Setting(False, f"{_TORCH21}: autograd writes each "
                                            "weight gradient, FSDP accumulates it"),
    "pp_sequential_p2p": Setting(False, _NO_PP),
    "account_for_embedding_in_pipeline_split": Setting(False, _NO_PP),
    "account_for_loss_in_pipeline_split": Setting(False, _NO_PP),
    "schedule": Setting("1f1b", _NO_PP),
    "num_micro_batches": Setting("global batch / (device_train_microbatch_size x dp)",
                                 f"{_COMPOSER} composer/trainer/trainer.py"),
}

#: each dated framework's settings (the fields of frameworks.LAYOUT_SETTINGS and
#: MODEL_SETTINGS, and the schedule and batch convention in words)
ERA_PRESETS: dict[str, dict[str, Setting]] = {
    "megatron-2021": _megatron_era(_M21),
    "megatron-2022": _megatron_era(
        _M22,
        sp=Setting(False, f"{_M22} megatron/arguments.py --sequence-parallel (store_true)"),
        zero_stage=Setting(0, f"{_M22} megatron/arguments.py --use-distributed-optimizer "
                           "(store_true)", note="its reduce-scatter and all-gather of the "
                           "whole buffer run after the backward and after the optimizer "
                           "(megatron/optimizer/distrib_optimizer.py reduce_model_grads, "
                           "gather_model_params)"),
        recompute=Setting("none", f"{_M22} megatron/arguments.py --recompute-granularity "
                          "None"),
        attention=Setting("unfused", f"{_M22} megatron/model/transformer.py CoreAttention "
                          "(baddbmm, FusedScaleMaskSoftmax, dropout, bmm)",
                          note="285068c8 (2023-01) adds --use-flash-attn, off by default"),
        overlap_dgrad_reduce=Setting(True, f"{_M22} megatron/mpu/layers.py "
                                     "LinearWithGradAccumulationAndAsyncCommunication: the "
                                     "input-gradient all-reduce (SP: reduce-scatter) with "
                                     "async_op=True behind the weight-gradient GEMM, SP's "
                                     "input re-gather behind the input-gradient GEMM; "
                                     "megatron/arguments.py "
                                     "--no-async-tensor-model-parallel-allreduce "
                                     "(store_false: on)"),
        gradient_accumulation_fusion=Setting(True, f"{_M22} megatron/mpu/layers.py "
                                             "fused_dense_cuda.wgrad_gemm_accum_fp32; "
                                             "megatron/arguments.py "
                                             "--no-gradient-accumulation-fusion "
                                             "(store_false: on)"),
    ),
    "megatron-deepspeed": _MEGATRON_DEEPSPEED,
    "composer": _COMPOSER_FSDP,
}

#: which current framework each dated one holds state like (bytes per parameter, what it
#: refuses): Megatron-LM's main gradients, ZeRO's 16 bytes, FSDP's fp32 flat parameters
ERA_FAMILY = {"megatron-2021": "megatron", "megatron-2022": "megatron",
              "megatron-deepspeed": "deepspeed", "composer": "fsdp2"}


@dataclass(frozen=True)
class Limit:
    """The values of one layout field a framework runs; any other is refused.

    Attributes:
        allowed: the values it runs.
        source: the framework's file and argument at the version read (or when the feature
            came), as the refusal cites it.
    """

    allowed: tuple
    source: str

    def words(self) -> str:
        """The allowed values as a refusal lists them: ``1``, ``'none' or 'full'``."""
        shown = [repr(v) for v in self.allowed]
        return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


_MEGATRON_CP = "Megatron-LM's --context-parallel-size came with Megatron-Core in 2023-10"
_MEGATRON_EP = "--expert-model-parallel-size came with Megatron-Core in 2023-10"
_MEGATRON_SCHEDULES = ("megatron/schedules.py get_forward_backward_func: no pipelining, 1F1B "
                       "(forward_backward_pipelining_without_interleaving) or interleaved")


def _megatron_limits(tag: str, **changes: Limit | None) -> dict[str, Limit]:
    """What Megatron-LM of 2021 and 2022 could not run, with ``changes`` (None: no limit)."""
    base = {
        "cp": Limit((1,), f"{tag}: no context parallelism ({_MEGATRON_CP})"),
        "ep": Limit((1,), f"{tag}: no expert parallelism ({_MEGATRON_EP})"),
        "sp": Limit((False,), f"{tag} megatron/arguments.py: no --sequence-parallel (added "
                    "2022-05)"),
        "zero_stage": Limit((0,), f"{tag} megatron/arguments.py: no --use-distributed-optimizer "
                            "(added 2022-02), no ZeRO-2 or ZeRO-3"),
        "recompute": Limit(("none", "full"), f"{tag} megatron/arguments.py "
                           "--checkpoint-activations recomputes whole layers; selective "
                           "recompute is of 2022-05"),
        "attention": Limit(("unfused",), f"{tag} megatron/model/transformer.py "
                           "ParallelAttention: Megatron's core attention only (FlashAttention "
                           "is of 2022, Megatron-LM's --use-flash-attn of 2023-01)"),
        "schedule": Limit(("1f1b", "interleaved"), f"{tag} {_MEGATRON_SCHEDULES}"),
        "precision": Limit(("bf16",), f"{tag} megatron/arguments.py --fp16 / --bf16: 16-bit "
                           "GEMMs only (Megatron-LM's FP8, --fp8-hybrid, is of 2023-01)"),
    }
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


#: what each dated framework runs, for the layout fields where it could not run every value
#: (a field not named runs every value): each refusal cites its source
ERA_LIMITS: dict[str, dict[str, Limit]] = {
    "megatron-2021": _megatron_limits(_M21),
    "megatron-2022": _megatron_limits(
        _M22,
        ep=Limit((1,), f"{_M22} megatron/model/transformer.py SwitchMLP (--num-experts): every "
                 f"expert on every rank, no expert parallelism ({_MEGATRON_EP})"),
        sp=None,            # megatron/arguments.py --sequence-parallel
        zero_stage=Limit((0, 1), f"{_M22} megatron/arguments.py --use-distributed-optimizer "
                         "shards the optimizer states (ZeRO-1); no ZeRO-2 or ZeRO-3"),
        recompute=None,     # megatron/arguments.py --recompute-granularity
        attention=Limit(("unfused",), f"{_M22} megatron/model/transformer.py CoreAttention; "
                        "285068c8 (2023-01) adds --use-flash-attn, FlashAttention-1's "
                        "flash_attn_unpadded_func, a kernel not modelled (flash2 is "
                        "FlashAttention-2, of 2023-07; flash is a later one)"),
        precision=Limit(("bf16", "fp8-delayed"), f"{_M22} megatron/arguments.py --fp16 / "
                        "--bf16; 285068c8 (2023-01) adds --fp8-hybrid with --transformer-impl "
                        "transformer_engine (Transformer Engine's delayed scaling)"),
    ),
    "megatron-deepspeed": {
        "cp": Limit((1,), f"{_DS05}: no context parallelism (DeepSpeed-Ulysses, "
                    "sequence_parallel_size, is of 2023-08)"),
        "sp": Limit((False,), f"Megatron-DeepSpeed of 2021-2022, {_M21}'s layers: no "
                    "--sequence-parallel (Megatron-LM's of 2022-05 came with its upstream merge "
                    "of 2023-07, 9e72d571)"),
        "recompute": Limit(("none", "full"), "Megatron-DeepSpeed megatron/arguments.py "
                           "--checkpoint-activations (DeepSpeed's activation checkpointing of "
                           "whole layers); --recompute-granularity selective came with the "
                           "upstream merge of 2023-07"),
        "attention": Limit(("unfused",), f"{_M21} megatron/model/transformer.py "
                           "ParallelAttention: Megatron's core attention only (FlashAttention "
                           "is of 2022)"),
        "schedule": Limit(("1f1b",), f"{_DS05} deepspeed/runtime/pipe/schedule.py "
                          "TrainSchedule: 1F1B only"),
        "precision": Limit(("bf16",), f"{_DS05} and Megatron-DeepSpeed of 2021-2022: fp16 or "
                           "bf16 mixed precision only (FP8 came with Transformer Engine in "
                           "2023)"),
    },
    "composer": {
        "tp": Limit((1,), f"{_COMPOSER}: no tensor parallelism (Composer's tp_config came in "
                    "v0.23.0, 2024-06)"),
        "pp": Limit((1,), f"{_COMPOSER} composer/trainer/dist_strategy.py: FSDP or DDP, no "
                    "pipeline parallelism"),
        "cp": Limit((1,), f"{_COMPOSER}: no context parallelism"),
        "attention": Limit(("flash2", "unfused"), f"{_FOUNDRY} --attn_impl flash or triton "
                           "(FlashAttention-2) or torch (unfused); not the flash kernel of "
                           "Hopper (cuDNN's fused attention, FlashAttention-3)"),
        "precision": Limit(("bf16", "fp8-delayed"), f"{_COMPOSER} composer/core/precision.py: "
                           "amp_bf16, amp_fp16, or amp_fp8 (Transformer Engine's delayed "
                           "scaling)"),
    },
}
