"""What each training framework holds and does when a plan names it: ``--framework megatron``,
``deepspeed``, ``fsdp2`` or ``torchtitan``.

One table per framework (:data:`PRESETS`): each setting's value and where the framework
defines it (repository path and argument, at the version read). A :class:`ParallelDims` field
left out (None) takes its framework's value; a field given explicitly wins, and the plan says
which values came from the preset (``ParallelDims.from_preset``).

Versions read (paths below are relative to these):

* Megatron-LM ``d98e8a64ddf34856e74b24714e3bedb2f5a39553`` (Megatron-Core 0.20.0 in
  development; newest tag core_v0.19.0). Many command-line flags are generated from
  ``ModelParallelConfig`` / ``TransformerConfig`` fields (``megatron/training/argument_utils.py``).
* DeepSpeed ``edaa7221267243c7be7fb49c5d5f5c4fb97b4641`` (0.19.6 in development).
* PyTorch 2.13.0 (``cf30153c4c131c8164ee7798e5022d810682e2cb``): ``fully_shard`` (FSDP2),
  ``DistributedDataParallel``, ``torch.distributed.pipelining``.
* torchtitan ``b5bcd76c66d0acb1a08b176d9639425bc55e0b2a`` (its configuration dataclasses in
  ``torchtitan/config/configs.py``); release v0.2.2 where it differs.

**Which value a preset takes.** The framework's documented recommendation for multi-GPU
training where its documentation makes one, else its argument's default. So Megatron's preset
runs the distributed optimizer ("recommended for all multi-GPU training") and sequence
parallelism with TP ("always enable when using TP"), both in
``docs/user-guide/parallelism-guide.md`` and set by every example script, though its argument
parser leaves both off; DeepSpeed's ZeRO stage is its configuration default, 0.

**The default framework** is :data:`DEFAULT_FRAMEWORK` (:data:`DEFAULT_WHY`).

Bytes per parameter held (:func:`state_bytes`), the training dtype being the model's:

* Megatron-LM with bf16 keeps fp32 main gradients (``--accumulate-allreduce-grads-in-fp32`` is
  forced on by ``--bf16`` unless ``--grad-reduce-in-bf16``): 2 + 4 + 12 = 18 B, and
  6 + 12/d with the distributed optimizer; with 16-bit gradients (fp16, or
  ``--grad-reduce-in-bf16``) the optimizer copies them to fp32 main gradients: 2 + 2 + 16 = 20,
  4 + 16/d; fp32: 4 + 4 + 8 = 16, 8 + 8/d (``docs/user-guide/features/dist_optimizer.md``; the
  in-code estimator ``megatron/training/theoretical_memory_usage.py``).
* DeepSpeed: ZeRO's 2 + 2 + 12 = 16 B in 16-bit (Rajbhandari et al. 2020 §3.1, K = 12),
  sharded by stage; fp32: 4 + 4 + 8.
* FSDP2 and torchtitan: the sharded parameters stay in their original dtype, fp32, and are the
  optimizer's master weights; the reduce-scattered gradient is cast back to it: 4 + 4 + 8 =
  16/N (``torch/distributed/fsdp/_fully_shard/_fsdp_api.py`` ``MixedPrecisionPolicy``
  docstring; ``_fsdp_collectives.py``, the reduce output cast to the original dtype). The
  unsharded working copy is in the policy's ``param_dtype`` (the model's dtype), counted with
  the gathers (:func:`ringccl.planner.memory.communication_buffer_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError
from .framework_eras import (ERA_FAMILY, ERA_LIMITS, ERA_PRESETS, FSDP_PREFETCH_BUCKET,
                             PREFETCH_BUCKET as _PREFETCH, REDUCE_DTYPES, Limit, Setting,
                             deepspeed_bucket, float32_reduce as _float32_reduce,
                             megatron_reduce as _megatron_reduce,
                             model_dtype_reduce as _model_dtype_reduce)

__all__ = ["FRAMEWORKS", "DEFAULT_FRAMEWORK", "DEFAULT_WHY", "Setting", "PRESETS", "Limit",
           "LIMITS", "LAYOUT_SETTINGS", "MODEL_SETTINGS", "REDUCE_DTYPES", "StateBytes",
           "state_bytes", "preset_values", "check_framework", "defers_gradient_sync",
           "all_reduces_zero1_gradients", "family"]

FRAMEWORKS = ("megatron", "deepspeed", "fsdp2", "torchtitan", *ERA_PRESETS, "torchtitan-2024")
DEFAULT_FRAMEWORK = "megatron"
DEFAULT_WHY = ("the layout's terms are Megatron-Core's: the tp-cp-ep-dp-pp rank order, the "
               "interleaved schedule's virtual stages, ep folded over tp x cp x dp, sequence "
               "parallelism, the distributed optimizer as ZeRO-1; and 54 of the 104 published "
               "runs in benchmarks/published_runs.json ran Megatron-LM or Megatron-Core")

_MEGATRON = "Megatron-LM d98e8a64"
_DEEPSPEED = "DeepSpeed edaa7221"
_TORCH = "PyTorch 2.13.0"
_TITAN = "torchtitan b5bcd76c"


def _sp_with_tp(layout: dict) -> bool:
    return layout["tp"] > 1


def _megatron_bucket(layout: dict) -> int:
    # max(40M, 1M x dp.cp) parameters (elements) per bucket, of reduce-dtype gradients
    elements = max(40_000_000, 1_000_000 * layout["dp"] * layout["cp"])
    return elements * REDUCE_DTYPES[layout["reduce_dtype"]]


def _not_pp(layout: dict) -> bool:
    return layout["pp"] == 1


def _interleaved(layout: dict) -> bool:
    return layout["schedule"] == "interleaved"


def _zero3(layout: dict) -> bool:
    return layout["zero_stage"] == 3


#: the ParallelDims fields a preset fills from the layout alone (in this order: a rule reads
#: the fields before it), and those that need the model
LAYOUT_SETTINGS = ("sp", "zero_stage", "recompute", "attention", "reshard_after_forward",
                   "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                   "overlap_p2p", "pp_scatter_gather", "zero3_gather", "zero3_prefetch_bucket",
                   "fsdp_prefetch", "overlap_dgrad_reduce", "gradient_accumulation_fusion",
                   "pp_sequential_p2p", "account_for_embedding_in_pipeline_split",
                   "account_for_loss_in_pipeline_split")
MODEL_SETTINGS = ("reduce_dtype", "bucket_bytes")

#: what torch's fully_shard and pipelining overlap, for fsdp2 and torchtitan alike
_FULLY_SHARD = {
    "overlap_grad_reduce": Setting(True, f"{_TORCH} _fully_shard.py: each group's "
                                   "reduce-scatter in its post-backward on a separate stream"),
    "overlap_param_gather": Setting(True, f"{_TORCH} _fsdp_param_group.py: the next group's "
                                    "all-gather on the all-gather stream"),
    "overlap_p2p": Setting(False, f"{_TORCH} torch/distributed/pipelining/schedules.py: the "
                           "schedule waits on each step's sends and receives"),
    "zero3_prefetch_bucket": FSDP_PREFETCH_BUCKET,
    "overlap_dgrad_reduce": Setting(False, f"{_TORCH} torch/distributed/tensor/parallel: "
                                    "DTensor's TP reduces the input gradient in the autograd "
                                    "graph, not behind the weight gradient"),
    "gradient_accumulation_fusion": Setting(False, f"{_TORCH}: autograd writes each weight "
                                            "gradient, FSDP accumulates it "
                                            "(_fsdp_param.py to_accumulated_grad_if_needed)"),
    "pp_sequential_p2p": Setting(False, f"{_TORCH} torch/distributed/pipelining/schedules.py "
                                 "_batch_p2p: a step's sends and receives in one "
                                 "batch_isend_irecv"),
}

#: each framework's settings: the ParallelDims fields of LAYOUT_SETTINGS and MODEL_SETTINGS,
#: and what the framework does that no field carries (the schedule, the batch convention).
PRESETS: dict[str, dict[str, Setting]] = {
    "megatron": {
        "sp": Setting("on with tp > 1", f"{_MEGATRON} docs/user-guide/parallelism-guide.md "
                      "(\"Always enable when using TP\"); every example script sets "
                      "--sequence-parallel", _sp_with_tp,
                      "argument default off: megatron/core/model_parallel_config.py "
                      "sequence_parallel = False; required with --tp-comm-overlap and for MoE "
                      "with TP (megatron/core/transformer/moe/moe_layer.py)"),
        "zero_stage": Setting(1, f"{_MEGATRON} --use-distributed-optimizer, docs/user-guide/"
                              "parallelism-guide.md (\"Recommended for all multi-GPU "
                              "training\"): fp32 main weights and Adam moments sharded over "
                              "dp, gradients reduce-scattered, parameters all-gathered",
                              note="argument default off (megatron/training/arguments.py "
                              "--use-distributed-optimizer; DistributedDataParallelConfig."
                              "use_distributed_optimizer = False): --zero 0 for 18 B/param"),
        "recompute": Setting("none", f"{_MEGATRON} megatron/core/transformer/"
                             "transformer_config.py recompute_granularity = None"),
        "attention": Setting("flash", f"{_MEGATRON} transformer_config.py attention_backend = "
                             "AttnBackend.auto (Transformer Engine picks its flash or fused "
                             "cuDNN kernel; no s x s scores kept)"),
        "reshard_after_forward": Setting(None, "not an option of Megatron's distributed "
                                         "optimizer (parameters are gathered once per step)"),
        "reduce_dtype": Setting("float32 with bf16 or fp32, float16 with fp16",
                                f"{_MEGATRON} megatron/training/arguments.py: --bf16 sets "
                                "accumulate_allreduce_grads_in_fp32 unless "
                                "--grad-reduce-in-bf16", _megatron_reduce),
        "bucket_bytes": Setting("max(40M, 1M x dp x cp) parameters of reduce_dtype gradients",
                                f"{_MEGATRON} megatron/training/training.py "
                                "resolve_ddp_bucket_size (--ddp-bucket-size None)",
                                _megatron_bucket,
                                "with --overlap-grad-reduce; without it one bucket per model "
                                "chunk; on PP stage 0, model chunk 0 only (other chunks one "
                                "bucket)"),
        "overlap_grad_reduce": Setting(True, f"{_MEGATRON} --overlap-grad-reduce, "
                                       "docs/user-guide/parallelism-guide.md \"Communication "
                                       "Overlap\"", note="argument default off"),
        "overlap_param_gather": Setting(True, f"{_MEGATRON} --overlap-param-gather (needs the "
                                        "distributed optimizer), parallelism-guide.md",
                                        note="argument default off"),
        "tp_comm_overlap": Setting(False, f"{_MEGATRON} model_parallel_config.py "
                                   "tp_comm_overlap = False (needs Transformer Engine "
                                   "userbuffers and SP)"),
        "overlap_p2p": Setting("on with the interleaved schedule", f"{_MEGATRON} "
                               "megatron/training/arguments.py --no-overlap-p2p-communication "
                               "(store_false: on), turned off for non-interleaved schedules",
                               _interleaved, "ModelParallelConfig.overlap_p2p_comm = False"),
        "pp_scatter_gather": Setting(True, f"{_MEGATRON} arguments.py "
                                     "--no-scatter-gather-tensors-in-pipeline (store_false: "
                                     "on; Megatron-LM 2021 §4.1)"),
        "zero3_gather": Setting("layer", "Megatron-FSDP (--use-megatron-fsdp) gathers per "
                                "module, as FSDP"),
        "zero3_prefetch_bucket": Setting(_PREFETCH, "not a Megatron setting (read only with "
                                         "zero3_gather=\"parameter\")"),
        "fsdp_prefetch": Setting(1, "one module ahead, as FSDP"),
        "overlap_dgrad_reduce": Setting(True, f"{_MEGATRON} megatron/core/tensor_parallel/"
                                        "layers.py LinearWithGradAccumulationAndAsync"
                                        "Communication.backward: the input-gradient all-reduce "
                                        "(SP: reduce-scatter) with async_op=True behind the "
                                        "weight-gradient GEMM, SP's input re-gather behind the "
                                        "input-gradient GEMM (Transformer Engine's Linear "
                                        "likewise)"),
        "gradient_accumulation_fusion": Setting(True, f"{_MEGATRON} megatron/training/"
                                                "arguments.py --no-gradient-accumulation-"
                                                "fusion (store_false: on; "
                                                "wgrad_gemm_accum_fp32 into main_grad)"),
        "pp_sequential_p2p": Setting(False, f"{_MEGATRON} megatron/core/"
                                     "model_parallel_config.py batch_p2p_comm = True: a send "
                                     "and a receive in one batch_isend_irecv"),
        "account_for_embedding_in_pipeline_split": Setting(
            False, f"{_MEGATRON} megatron/core/transformer/transformer_config.py "
            "account_for_embedding_in_pipeline_split = False"),
        "account_for_loss_in_pipeline_split": Setting(
            False, f"{_MEGATRON} transformer_config.py account_for_loss_in_pipeline_split = "
            "False"),
        "align_param_gather": Setting(True, f"{_MEGATRON} arguments.py --no-align-param-gather"
                                      " (store_false): every PP stage launches its parameter "
                                      "all-gathers together"),
        "schedule": Setting("1f1b; interleaved with --num-layers-per-virtual-pipeline-stage",
                            f"{_MEGATRON} megatron/core/pipeline_parallel/schedules.py "
                            "get_forward_backward_func"),
        "num_micro_batches": Setting("global batch / (micro-batch x dp)",
                                     f"{_MEGATRON} --global-batch-size (default micro x dp: one "
                                     "micro-batch)"),
    },
    "deepspeed": {
        "sp": Setting(False, f"{_DEEPSPEED}: no Megatron-style sequence parallelism (its "
                      "Ulysses SP is a different design, deepspeed/runtime/config.py "
                      "sequence_parallel_size)"),
        "zero_stage": Setting(0, f"{_DEEPSPEED} deepspeed/runtime/zero/config.py stage = 0"),
        "recompute": Setting("none", f"{_DEEPSPEED} docs/_pages/config-json.md "
                             "activation_checkpointing: applied by the model's code only "
                             "(partition_activations false); transformers' TrainingArguments "
                             "gradient_checkpointing off"),
        "attention": Setting("flash", "the model's code; with transformers 5.24.0, "
                             "modeling_utils.py get_correct_attn_implementation: "
                             "attn_implementation None -> \"sdpa\" (torch's flash or "
                             "memory-efficient kernel)"),
        "reshard_after_forward": Setting(True, f"{_DEEPSPEED} ZeRO-3 releases a layer's "
                                         "gathered parameters after use (zero/config.py "
                                         "stage3_max_live_parameters 1e9, "
                                         "stage3_max_reuse_distance 1e9)"),
        "reduce_dtype": Setting("the model's dtype", f"{_DEEPSPEED} deepspeed/runtime/"
                                "engine.py get_data_types: data_types.grad_accum_dtype None "
                                "= the model's dtype", _model_dtype_reduce),
        "bucket_bytes": Setting("reduce_bucket_size 5e8 elements", f"{_DEEPSPEED} "
                                "deepspeed/runtime/zero/config.py reduce_bucket_size = 5e8",
                                deepspeed_bucket, "allgather_bucket_size 5e8 too"),
        "overlap_grad_reduce": Setting("with ZeRO-3 only", f"{_DEEPSPEED} zero/config.py "
                                       "overlap_comm = None -> True for stage 3, else False "
                                       "(validator overlap_comm_valid)", _zero3,
                                       "the configuration docs say false; the code wins"),
        "overlap_param_gather": Setting(False, f"{_DEEPSPEED} deepspeed/runtime/zero/"
                                        "stage_1_and_2.py step(): the updated parameters are "
                                        "all-gathered after the optimizer step"),
        "tp_comm_overlap": Setting(False, f"{_DEEPSPEED} docs tensor_parallel.tp_overlap_comm "
                                   "false"),
        "overlap_p2p": Setting(False, f"{_DEEPSPEED} deepspeed/runtime/pipe/engine.py: "
                               "blocking sends and receives between the schedule's steps"),
        "pp_scatter_gather": Setting(True, f"{_DEEPSPEED} deepspeed/runtime/pipe/engine.py: "
                                     "with TP (the grid's model axis > 1) each TP rank sends "
                                     "its 1/tp PartitionedTensor of the stage output and of "
                                     "the input gradient, the receiver all-gathers it over "
                                     "the slice (TP) group; runtime/config.py pipeline "
                                     "pipe_partitioned and grad_partitioned = True"),
        "zero3_gather": Setting("parameter", f"{_DEEPSPEED} deepspeed/runtime/zero/"
                                "partitioned_param_coordinator.py fetch_sub_module: one "
                                "all-gather per parameter tensor"),
        "zero3_prefetch_bucket": Setting(_PREFETCH, f"{_DEEPSPEED} zero/config.py "
                                         "stage3_prefetch_bucket_size = 5e7",
                                         note="the configuration docs say 5e8; the code wins"),
        "fsdp_prefetch": Setting(1, "not a DeepSpeed setting (stage3_prefetch_bucket_size "
                                 "is)"),
        "overlap_dgrad_reduce": Setting(False, f"{_DEEPSPEED}: tensor parallelism is the "
                                        "model code's (no asynchronous input-gradient "
                                        "reduction of its own)"),
        "gradient_accumulation_fusion": Setting(False, f"{_DEEPSPEED} deepspeed/runtime/"
                                                "engine.py backward: autograd accumulates "
                                                "each micro-batch's weight gradient"),
        "pp_sequential_p2p": Setting(True, f"{_DEEPSPEED} deepspeed/runtime/pipe/p2p.py send "
                                     "and recv: async_op must be False, one call each "
                                     "(v0.3.15 to 2025)"),
        "account_for_embedding_in_pipeline_split": Setting(
            False, f"{_DEEPSPEED} deepspeed/runtime/pipe/module.py PipelineModule "
            "partition_method = 'parameters': stages balanced by parameter count, no layer "
            "slot for the embedding", note="the embedding's parameters weigh in that count; "
            "not modelled"),
        "account_for_loss_in_pipeline_split": Setting(
            False, f"{_DEEPSPEED} pipe/module.py: the loss_fn runs on the last stage beside "
            "its layers, no layer slot of its own"),
        "zero3_param_persistence_threshold": Setting("1e5 elements", f"{_DEEPSPEED} "
                                                     "zero/config.py stage3_param_persistence"
                                                     "_threshold (smaller ones replicated)"),
        "schedule": Setting("1f1b", f"{_DEEPSPEED} deepspeed/runtime/pipe/schedule.py "
                            "TrainSchedule"),
        "num_micro_batches": Setting("gradient_accumulation_steps (default 1)",
                                     f"{_DEEPSPEED} deepspeed/runtime/pipe/engine.py; "
                                     "runtime/config.py _set_batch_related_parameters"),
    },
    "fsdp2": {
        "sp": Setting(False, f"{_TORCH}: fully_shard has no tensor parallelism; a TP plan "
                      "(torch.distributed.tensor.parallel) chooses its own"),
        "zero_stage": Setting(3, f"{_TORCH} torch.distributed.fsdp.fully_shard: parameters, "
                              "gradients and optimizer states sharded"),
        "recompute": Setting("none", f"{_TORCH}: activation checkpointing is the model "
                             "code's (torch.utils.checkpoint)"),
        "attention": Setting("flash", f"{_TORCH} scaled_dot_product_attention (flash or "
                             "memory-efficient backend where available)"),
        "reshard_after_forward": Setting(True, f"{_TORCH} torch/distributed/fsdp/"
                                         "_fully_shard/_fully_shard.py reshard_after_forward "
                                         "= None: True for every module but the root"),
        "reduce_dtype": Setting("the model's dtype", f"{_TORCH} _fsdp_api.py "
                                "MixedPrecisionPolicy.reduce_dtype = None: reduce in the "
                                "gradient's dtype (param_dtype)", _model_dtype_reduce),
        "bucket_bytes": Setting(25 * 2**20, f"{_TORCH} torch/nn/parallel/distributed.py "
                                "bucket_cap_mb = 25 MiB (DDP, with --zero 0; fully_shard "
                                "reduces one group per call)"),
        **_FULLY_SHARD,
        "tp_comm_overlap": Setting(False, f"{_TORCH}: no async TP without torch.compile"),
        "pp_scatter_gather": Setting(True, "sends a stage's output as its TP ranks hold it "
                                     "(sequence shards with SP); no TP in fully_shard alone"),
        "zero3_gather": Setting("layer", f"{_TORCH} _fully_shard.py: one all-gather per "
                                "fully_shard group (a transformer block)"),
        "fsdp_prefetch": Setting(1, f"{_TORCH} _fsdp_param_group.py (implicit forward "
                                 "prefetch of one group on the all-gather stream; "
                                 "_backward_prefetch one group)"),
        "account_for_embedding_in_pipeline_split": Setting(
            False, f"{_TORCH} torch/distributed/pipelining: the caller splits the model into "
            "stages (no split rule of its own)"),
        "account_for_loss_in_pipeline_split": Setting(
            False, f"{_TORCH} torch/distributed/pipelining: the caller's split"),
        "schedule": Setting("1f1b", f"{_TORCH} torch/distributed/pipelining/schedules.py "
                            "Schedule1F1B"),
    },
    "torchtitan": {
        "sp": Setting("on with tp > 1", f"{_TITAN} torchtitan/config/configs.py "
                      "parallelism.enable_sequence_parallel = True", _sp_with_tp,
                      "v0.2.2 had no switch: always on with TP"),
        "zero_stage": Setting(3, f"{_TITAN} configs.py parallelism.data_parallel_shard_degree "
                              "= -1 (every leftover rank shards: FSDP2)"),
        "recompute": Setting("selective", f"{_TITAN} torchtitan/trainer.py activation "
                             "checkpointing SelectiveAC (per-op: saves matmul, attention and "
                             "communication outputs)",
                             note="per-op selective checkpointing keeps more than Korthikanti's "
                             "selective recompute (every second matmul is recomputed); counted "
                             "as selective; v0.2.2: full checkpointing of every second block"),
        "attention": Setting("flash", f"{_TITAN} torchtitan/models/llama3/__init__.py "
                             "attn_backend = \"flex\" (v0.2.2: sdpa)"),
        "reshard_after_forward": Setting("off with pp > 1, else on", f"{_TITAN} "
                                         "torchtitan/distributed/fsdp.py "
                                         "get_fsdp_reshard_after_forward_policy (\"default\": "
                                         "not pp_enabled)", _not_pp,
                                         "the final [norm, output] group is never resharded"),
        "reduce_dtype": Setting("float32", f"{_TITAN} configs.py "
                                "training.mixed_precision_reduce = \"float32\" (only choice); "
                                "all-gathers in mixed_precision_param = \"bfloat16\"",
                                _float32_reduce),
        "bucket_bytes": Setting(100 * 2**20, f"{_TITAN} v0.2.2 models/llama3/infra/"
                                "parallelize.py replicate(bucket_cap_mb=100) (data parallelism "
                                "without sharding, --zero 0)"),
        **_FULLY_SHARD,
        "tp_comm_overlap": Setting(False, f"{_TITAN} configs.py "
                                   "compile.enable_async_tensor_parallel = False"),
        "pp_scatter_gather": Setting(True, "sends a stage's output as its TP ranks hold it "
                                     "(sequence shards with SP, on by default)"),
        "zero3_gather": Setting("layer", f"{_TITAN} torchtitan/distributed/fsdp.py "
                                "apply_fsdp_to_decoder: one fully_shard group per block"),
        "fsdp_prefetch": Setting(1, f"{_TITAN} torchtitan/distributed/fsdp.py: torch's "
                                 "implicit one-block prefetch (explicit one-block lists only "
                                 "with EP)"),
        "account_for_embedding_in_pipeline_split": Setting(
            True, f"{_TITAN} configs.py parallelism.pipeline_parallel_first_stage_less_layers "
            "= 1; torchtitan/distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part: "
            "tok_embeddings weighs one layer of the split (input_weight)",
            note="torchtitan before its 2025 split rewrite: see torchtitan-2024"),
        "account_for_loss_in_pipeline_split": Setting(
            True, f"{_TITAN} configs.py parallelism.pipeline_parallel_last_stage_less_layers "
            "= 1; pipeline_parallel.py: norm and lm_head weigh one layer (output_weight)"),
        "schedule": Setting("1f1b", f"{_TITAN} configs.py "
                            "parallelism.pipeline_parallel_schedule = \"1F1B\""),
        "num_micro_batches": Setting("1", f"{_TITAN} configs.py "
                                     "parallelism.num_pp_microbatches = 1",
                                     note="v0.2.2: local batch 8 / micro-batch 1 = 8"),
    },
}
PRESETS.update(ERA_PRESETS)

_TITAN24 = "torchtitan 9dec370 (2024-12-26)"

#: torchtitan as its December 2024 runs ran it (``--framework torchtitan-2024``): the current
#: preset but for the attention kernel and the pipeline split. Its Llama calls torch's
#: scaled_dot_product_attention (``torchtitan/models/llama/model.py``, ``is_causal=True``),
#: and torch's SDPA of that time tries FlashAttention-2 first
#: (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` ``priority_order``: flash,
#: efficient, math, cuDNN last, from PyTorch 2.5.1 to 2025);
#: with context parallelism torchtitan allows only the flash and memory-efficient backends
#: (``torchtitan/utils.py`` ``get_train_context``: ``sdpa_kernel([FLASH_ATTENTION,
#: EFFICIENT_ATTENTION])``). So FlashAttention-2's kernel, not FlashAttention-3's.
#: And the pipeline split: its ``generate_split_points``
#: (``torchtitan/parallelisms/pipelining_utils.py``) gave every stage num_layers // stages
#: layers, the embedding and the output not counted (torchtitan counts them since 2025).
PRESETS["torchtitan-2024"] = {
    **PRESETS["torchtitan"],
    "attention": Setting("flash2", f"{_TITAN24} torchtitan/models/llama/model.py "
                         "F.scaled_dot_product_attention (torch SDPA: FlashAttention-2 "
                         "first; torchtitan/utils.py restricts CP to flash / efficient)"),
    "account_for_embedding_in_pipeline_split": Setting(
        False, f"{_TITAN24} torchtitan/parallelisms/pipelining_utils.py generate_split_points: "
        "num_layers // (pp x stages per rank) layers a stage, no slot for the embedding",
        note="its leftover layers go to the middle stages; the planner's split gives them to "
        "the first ones"),
    "account_for_loss_in_pipeline_split": Setting(
        False, f"{_TITAN24} pipelining_utils.py generate_split_points: no slot for the norm "
        "and output"),
}


#: the layout values each framework runs, for the fields where it cannot run every value
#: (:class:`Limit`, each with its source; refused by
#: :func:`~ringccl.planner.layout_checks.check_framework_shards`): the dated presets' (what
#: the framework of that date had not yet, :data:`ERA_LIMITS`); the current frameworks run
#: every value of these fields (their ZeRO rules are that function's own)
LIMITS: dict[str, dict[str, Limit]] = {name: ERA_LIMITS.get(name, {}) for name in FRAMEWORKS}


#: the current framework each dated preset holds state like (:data:`ERA_FAMILY`, and
#: torchtitan-2024's)
_FAMILY = {**ERA_FAMILY, "torchtitan-2024": "torchtitan"}


def family(framework: str) -> str:
    """The current framework ``framework`` holds state and refuses layouts like: itself, or
    for a dated preset (:mod:`.framework_eras`) the one it became."""
    return _FAMILY.get(framework, framework)


def check_framework(framework) -> str:
    """``framework`` lower-cased, if it is one of :data:`FRAMEWORKS`.

    Raises:
        ArgumentError: anything else, naming the value and the choices.
    """
    if not isinstance(framework, str) or framework.lower() not in FRAMEWORKS:
        raise ArgumentError(f"framework={framework!r} must be one of {', '.join(FRAMEWORKS)}")
    return framework.lower()


def preset_values(framework: str, names, layout: dict) -> dict:
    """``{name: value}`` of ``framework``'s preset for each of ``names`` it sets (a value of
    None means the framework has no such setting), from the resolved ``layout`` fields."""
    table = PRESETS[check_framework(framework)]
    return {name: table[name].resolve(layout) for name in names if name in table}


def defers_gradient_sync(framework: str) -> bool:
    """Whether the framework's pipeline keeps FSDP's gradients unsharded (and its parameters
    gathered) from the first micro-batch's backward to the last: torch.distributed.pipelining
    runs every backward but the last with ``set_requires_gradient_sync(False)`` and
    ``set_reshard_after_backward(False)`` (``torch/distributed/pipelining/stage.py``
    ``backward_maybe_with_nosync``), and the unsharded gradient accumulates in
    ``reduce_dtype`` (``_fsdp_param.py`` ``to_accumulated_grad_if_needed``)."""
    return framework in ("fsdp2", "torchtitan", "torchtitan-2024")


def all_reduces_zero1_gradients(framework: str) -> bool:
    """Whether the framework's ZeRO stage 1 all-reduces the gradients in flattened buckets,
    where the distributed optimizer reduce-scatters them to their shard owners, and all-gathers
    the updated parameters with a list-based call (one output tensor per rank).

    DeepSpeed v0.5.4 (``--framework megatron-deepspeed``): ``deepspeed/runtime/engine.py``
    ``_configure_zero_optimizer`` turns ``contiguous_gradients`` off at stage 1 ("Overlap and
    contiguous grads are meaningless in stage 1 and are ignored"), so ``zero/stage2.py``
    ``reduce_ipg_grads`` takes ``buffered_reduce_fallback``: each bucket of up to
    ``reduce_bucket_size`` elements is flattened, divided by the data-parallel size and
    all-reduced (``allreduce_bucket``: ``dist.all_reduce``), then copied back into the
    gradients (``allreduce_and_copy``); ``step()`` gathers the updated partitions with
    ``dist.all_gather(shard_list, ...)``, one tensor per rank. DeepSpeed v0.7.0's pipeline
    engine with its bf16 optimizer reduces the same way (``pipe/engine.py``
    ``_bf16_reduce_grads`` -> ``buffered_allreduce_fallback``). Current DeepSpeed keeps
    ``contiguous_gradients`` (default on) at stage 1 and reduce-scatters (``deepspeed``)."""
    return framework == "megatron-deepspeed"


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter a rank holds before ZeRO sharding: the working ``weights``, the
    ``gradients``, the ``optimizer`` state (fp32 master weights when separate, fp32 main
    gradients when the optimizer copies them, Adam's moments), and the bytes per element of
    a parameter all-gather (``gather``) and of a gradient reduction (``reduce``)."""

    weights: float
    gradients: float
    optimizer: float
    gather: float
    reduce: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def state_bytes(framework: str, dtype_bytes: int, reduce_dtype: str) -> StateBytes:
    """The :class:`StateBytes` of ``framework`` training in a ``dtype_bytes``-byte dtype with
    gradients reduced in ``reduce_dtype`` (the module docstring gives the sources).

    Raises:
        ArgumentError: an unknown framework or reduce dtype.
    """
    framework = family(check_framework(framework))
    if reduce_dtype not in REDUCE_DTYPES:
        raise ArgumentError(f"reduce_dtype={reduce_dtype!r} must be one of "
                            f"{', '.join(REDUCE_DTYPES)}")
    g = REDUCE_DTYPES[reduce_dtype]
    w = min(max(dtype_bytes, 2), 4)          # 8-bit training keeps 16-bit weights
    if framework in ("fsdp2", "torchtitan") or w == 4:
        # fp32 weights are their own master copy: weight, gradient, Adam's two moments
        return StateBytes(4, 4, 8, gather=w, reduce=g)
    if framework == "megatron" and g < 4:
        # 16-bit gradients are copied to fp32 main gradients for the optimizer (sharded with it)
        return StateBytes(w, g, 16, gather=w, reduce=g)
    return StateBytes(w, g, 12, gather=w, reduce=g)
