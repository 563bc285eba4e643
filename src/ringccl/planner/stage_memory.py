"""The memory of one rank of a pipeline stage, bytes, as its framework holds it.

:func:`stage_memory` puts together :mod:`.memory`'s formulas with what the plan's framework
keeps (:func:`~ringccl.planner.frameworks.state_bytes`): the model states per parameter, the
activations of the micro-batches in flight, and the buffers of the collectives. It is
:func:`stage_memory_parts` (what every stage alike in layers, role and placement shares) with
:func:`in_flight_activations` (what depends on the stage's index, the schedule and the batch):
the layout search prices many schedules and batches on one set of parts.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..caches import memoize
from . import frameworks, memory
from .context import StepContext
from .costing import Entry
from .parallel_dims import ParallelDims
from .pipeline import in_flight_micro_batches
from .stages import StageShape

__all__ = ["stage_memory", "stage_memory_parts", "stage_states", "in_flight_activations",
           "in_flight_counts", "model_states"]

#: the memory formulas memoized (pure functions of counts; a layout search asks again and again)
model_states = memoize(maxsize=1 << 16)(memory.model_state_bytes)
_activations = memoize(maxsize=1 << 16)(memory.activation_bytes)
_buffers = memoize(maxsize=1 << 16)(memory.communication_buffer_bytes)


def in_flight_counts(dims: ParallelDims) -> tuple[int, ...]:
    """Per stage, the in-flight count of :func:`~ringccl.planner.pipeline.in_flight_micro_batches`
    times 2·v: a whole number for every schedule (chunk-activations / v, DualPipe's halves)."""
    return _in_flight_scaled(dims.schedule if dims.pp > 1 else "1f1b", dims.pp,
                             dims.num_micro_batches, dims.virtual_stages)


@memoize(maxsize=4096)
def _in_flight_scaled(schedule: str, pp: int, m: int, v: int) -> tuple[int, ...]:
    return tuple(round(2 * v * in_flight_micro_batches(schedule=schedule, pp=pp, stage=r,
                                                       num_micro_batches=m, virtual_stages=v))
                 for r in range(pp))


def in_flight_activations(dims: ParallelDims, stage: int, per_micro_batch: int) -> int:
    """Bytes of the activations PP stage ``stage`` holds at its peak: ``per_micro_batch`` ×
    the in-flight count, rounded up (exact: integers)."""
    return -(-per_micro_batch * in_flight_counts(dims)[stage] // (2 * dims.virtual_stages))


def _zero3_buffers(ctx: StepContext, st: StageShape, sb: frameworks.StateBytes) -> dict:
    """The full-size weights and gradients ZeRO-3 / FSDP keeps alive on the stage: the
    computing and the prefetched layer, and one layer's gradient, unless the gathered weights
    stay to the backward (``reshard_after_forward`` off) or the pipeline defers the
    reduce-scatter to the last micro-batch
    (:func:`~ringccl.planner.frameworks.defers_gradient_sync`): then the stage's weights, and
    with the deferral its gradients (in the reduce dtype), are all full size."""
    dims = ctx.dims
    stage = st.dense_parameters + st.expert_parameters
    deferred = (dims.pp > 1 and ctx.micro_batches > 1
                and frameworks.defers_gradient_sync(dims.framework))
    kept = deferred or dims.reshard_after_forward is False
    return dict(zero3_layer_parameters=stage if kept else st.largest_layer_parameters,
                zero3_live_layers=1 if kept else 2,
                zero3_gradient_parameters=stage if deferred else st.largest_layer_parameters,
                param_bytes=sb.gather, grad_bytes=sb.reduce)


def stage_states(model, dims: ParallelDims, st: StageShape) -> tuple[dict, dict]:
    """The model states (weights, gradients, optimizer) of stage ``st``'s dense and routed
    expert parameters, bytes, at the framework's bytes per parameter, sharded by ZeRO
    (``dims`` completed for the model: :meth:`ParallelDims.for_model`)."""
    sb = frameworks.state_bytes(dims.framework, model.dtype_bytes, dims.reduce_dtype)
    per_param = dict(param_bytes=sb.weights, grad_bytes=sb.gradients,
                     optimizer_bytes=sb.optimizer)
    dense = model_states(st.dense_parameters,
                         dp=dims.shard_size if dims.zero_stage else dims.dp * dims.cp,
                         zero_stage=dims.zero_stage, **per_param)
    expert = model_states(st.expert_parameters, dp=dims.expert_dp,
                          zero_stage=dims.zero_stage, **per_param)
    return dense, expert


def stage_memory(ctx: StepContext, st: StageShape,
                 entries: list[Entry]) -> memory.MemoryBreakdown:
    """The memory of one rank of stage ``st``, bytes: :func:`stage_memory_parts` with
    :func:`in_flight_activations`."""
    base, per_micro_batch = stage_memory_parts(ctx, st, entries)
    return replace(base, activations=in_flight_activations(ctx.dims, st.stage,
                                                           per_micro_batch))


def stage_memory_parts(ctx: StepContext, st: StageShape, entries: list[Entry]
                       ) -> tuple[memory.MemoryBreakdown, int]:
    """(the memory of one rank of stage ``st`` without its activations, the activations of one
    pass through its layers), bytes, from :mod:`ringccl.planner.memory`.

    - model states (:func:`~ringccl.planner.memory.model_state_bytes`) at the framework's
      bytes per parameter (:func:`~ringccl.planner.frameworks.state_bytes`): the dense weights
      sharded by ZeRO over the shard group (``dp · cp``, or ``dp_shard · cp`` with HSDP), the
      routed experts over the expert-data-parallel ranks;
    - activations: :func:`~ringccl.planner.memory.activation_bytes` of one micro-batch through
      all the stage's layers (every model chunk; no scores with FlashAttention) × the
      micro-batches in flight (:func:`~ringccl.planner.memory.in_flight_micro_batches`, in
      those same units: for the interleaved schedule its chunk-activations divided by v),
      rounded up;
    - communication buffers (:func:`~ringccl.planner.memory.communication_buffer_bytes`):
      torch DDP's bucket copy of the gradients (``gradient_as_bucket_view=False``, its default;
      with ``--zero 0`` under fsdp2 or torchtitan; Megatron's gradients live in their buckets),
      ZeRO-3's full-size weights and gradients (:func:`_zero3_buffers`), the all-to-all's send
      and receive buffers (at the busiest EP rank's load); ZeRO-1/2 add their largest
      in-flight bucket twice (the gradients being reduce-scattered and the parameters being
      gathered), DeepSpeed's stage 0 one flattened bucket; context parallelism its largest
      buffer (a layer's gathered K/V, a ring's block, an all-to-all's).
    """
    model, dims = ctx.model, ctx.dims
    sb = frameworks.state_bytes(dims.framework, model.dtype_bytes, dims.reduce_dtype)
    data_parallel = dims.dp * dims.cp
    dense, expert = stage_states(model, dims, st)
    per_micro_batch = _activations(
        seq_length=model.seq_length, micro_batch_size=dims.micro_batch_size,
        hidden_size=model.hidden_size, num_attention_heads=model.num_attention_heads,
        num_layers=st.layers, tp=dims.tp, sp=dims.sp, cp=dims.cp,
        recompute=dims.recompute, dtype_bytes=model.dtype_bytes,
        flash_attention=dims.attention != "unfused")
    gradient_bytes = dense["gradients"] + expert["gradients"]
    moe_tokens = 0
    if st.moe_layers and dims.ep > 1:
        # tokens a rank routes per MoE layer and micro-batch: its sequence shard (SP splits it
        # over tp, as Megatron-Core's token dispatcher does)
        moe_tokens = (dims.micro_batch_size * model.seq_length
                      // (dims.cp * (dims.tp if dims.sp else 1)))
    torch_ddp = frameworks.family(dims.framework) in ("fsdp2", "torchtitan")
    zero3 = _zero3_buffers(ctx, st, sb) if dims.zero_stage == 3 else dict(
        param_bytes=sb.gather, grad_bytes=sb.reduce)
    buffers = _buffers(
        ddp_gradient_bytes=gradient_bytes if (dims.zero_stage == 0 and data_parallel > 1
                                              and torch_ddp) else 0,
        moe_tokens=moe_tokens, moe_top_k=max(1, model.num_experts_per_tok),
        moe_capacity_factor=st.expert_load, moe_hidden_size=model.hidden_size,
        dtype_bytes=model.dtype_bytes, **zero3)
    communication = sum(buffers.values())
    largest = {p: max((math.ceil(e.nbytes) for e in entries if e.parallelism == p), default=0)
               for p in ("zero", "dp")}
    if dims.zero_stage in (1, 2):
        communication += 2 * largest["zero"]
    elif dims.zero_stage == 0 and frameworks.family(dims.framework) == "deepspeed":
        communication += largest["dp"]
    communication += max((math.ceil(e.nbytes) for e in entries if e.parallelism == "cp"),
                         default=0)
    return memory.MemoryBreakdown(
        weights=dense["weights"] + expert["weights"],
        gradients=gradient_bytes, optimizer=dense["optimizer"] + expert["optimizer"],
        activations=0, communication=communication), per_micro_batch
