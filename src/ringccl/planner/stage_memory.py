"""The memory of one rank of a pipeline stage, bytes, as its framework holds it.

:func:`stage_memory` puts together :mod:`.memory`'s formulas with what the plan's framework
keeps (:func:`~ringccl.planner.frameworks.state_bytes`): the model states per parameter, the
activations of the micro-batches in flight, and the buffers of the collectives.
"""

from __future__ import annotations

import math
from fractions import Fraction

from . import frameworks, memory
from .context import StepContext
from .costing import Entry
from .stages import StageShape

__all__ = ["stage_memory"]


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


def stage_memory(ctx: StepContext, st: StageShape,
                 entries: list[Entry]) -> memory.MemoryBreakdown:
    """The memory of one rank of stage ``st``, bytes, from :mod:`ringccl.planner.memory`.

    - model states (:func:`~ringccl.planner.memory.model_state_bytes`) at the framework's
      bytes per parameter (:func:`~ringccl.planner.frameworks.state_bytes`): the dense weights
      sharded by ZeRO over the ``dp · cp`` ranks that hold them, the routed experts over
      ``dp · cp / ep``;
    - activations: :func:`~ringccl.planner.memory.activation_bytes` of one micro-batch through
      all the stage's layers (every model chunk; no scores with FlashAttention) × the
      micro-batches in flight (:func:`~ringccl.planner.memory.in_flight_micro_batches`, in
      those same units: for the interleaved schedule its chunk-activations divided by v),
      rounded up;
    - communication buffers (:func:`~ringccl.planner.memory.communication_buffer_bytes`):
      torch DDP's bucket copy of the gradients (``gradient_as_bucket_view=False``, its default;
      with ``--zero 0`` under fsdp2 or torchtitan; Megatron's gradients live in their buckets),
      ZeRO-3's full-size weights and gradients (:func:`_zero3_buffers`), the all-to-all's send
      and receive buffers; ZeRO-1/2 add their largest in-flight bucket twice (the gradients
      being reduce-scattered and the parameters being gathered), DeepSpeed's stage 0 one
      flattened bucket.

    Returns:
        A :class:`~ringccl.planner.memory.MemoryBreakdown` (it sums its own ``total``).
    """
    model, dims = ctx.model, ctx.dims
    sb = frameworks.state_bytes(dims.framework, model.dtype_bytes, dims.reduce_dtype)
    per_param = dict(param_bytes=sb.weights, grad_bytes=sb.gradients,
                     optimizer_bytes=sb.optimizer)
    data_parallel = dims.dp * dims.cp
    dense = memory.model_state_bytes(st.dense_parameters, dp=data_parallel,
                                     zero_stage=dims.zero_stage, **per_param)
    expert = memory.model_state_bytes(st.expert_parameters,
                                      dp=max(1, data_parallel // dims.ep),
                                      zero_stage=dims.zero_stage, **per_param)
    per_micro_batch = memory.activation_bytes(
        seq_length=model.seq_length, micro_batch_size=dims.micro_batch_size,
        hidden_size=model.hidden_size, num_attention_heads=model.num_attention_heads,
        num_layers=st.layers, tp=dims.tp, sp=dims.sp, cp=dims.cp,
        recompute=dims.recompute, dtype_bytes=model.dtype_bytes,
        flash_attention=dims.attention != "unfused")
    in_flight = memory.in_flight_micro_batches(
        schedule=dims.schedule if dims.pp > 1 else "1f1b", pp=dims.pp, stage=st.stage,
        num_micro_batches=dims.num_micro_batches, virtual_stages=dims.virtual_stages)
    # in_flight is a whole number, or chunk-activations / v for the interleaved schedule:
    # exact as a fraction of denominator v
    activations = math.ceil(per_micro_batch * Fraction(in_flight).limit_denominator(
        dims.virtual_stages))
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
    buffers = memory.communication_buffer_bytes(
        ddp_gradient_bytes=gradient_bytes if (dims.zero_stage == 0 and data_parallel > 1
                                              and torch_ddp) else 0,
        moe_tokens=moe_tokens, moe_top_k=max(1, model.num_experts_per_tok),
        moe_capacity_factor=dims.capacity_factor, moe_hidden_size=model.hidden_size,
        dtype_bytes=model.dtype_bytes, **zero3)
    communication = sum(buffers.values())
    largest = {p: max((math.ceil(e.nbytes) for e in entries if e.parallelism == p), default=0)
               for p in ("zero", "dp")}
    if dims.zero_stage in (1, 2):
        communication += 2 * largest["zero"]
    elif dims.zero_stage == 0 and frameworks.family(dims.framework) == "deepspeed":
        communication += largest["dp"]
    return memory.MemoryBreakdown(
        weights=dense["weights"] + expert["weights"],
        gradients=gradient_bytes, optimizer=dense["optimizer"] + expert["optimizer"],
        activations=activations, communication=communication)
