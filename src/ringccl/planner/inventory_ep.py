"""Expert parallelism's collectives, per MoE layer and micro-batch, as Megatron-Core, DeepSeek-V3
and DeepEP run them.

T = the tokens a rank routes per micro-batch (b·s/cp, ÷ tp with sequence parallelism), k
experts per token, h·B bytes per token, λ the busiest EP rank's load over the uniform share
(:func:`~ringccl.planner.routing.expert_load`: the capacity factor, a measured imbalance or a
Zipf skew).

* ``alltoall`` (Megatron-Core's ``MoEAlltoAllTokenDispatcher``; GShard): per layer a dispatch
  all-to-all of T·k·h·B·λ over the EP group and a combine of the same size back, each again in
  the backward: one copy per chosen expert, wherever it sits.
* ``flex`` (DeepEP, DeepSeek-V3 §3.2.2): two hops. A token goes once over the NIC to each node
  its experts sit on — d nodes, :func:`~ringccl.planner.routing.nodes_per_token`, at most the
  node limit M of ``moe_router_group_topk`` (§2.1.2) — to the GPU with the same local index
  (group ``ep_inter``: an all-to-all of T·d·h·B·λ, (n − 1)/n of it leaving the node), then over
  NVLink to the GPUs holding its experts there (group ``ep_intra``: T·d·u·h·B·λ, u GPUs per copy,
  :func:`~ringccl.planner.routing.gpus_per_copy`). The combine runs the hops in reverse. An EP
  group inside one node has only the NVLink hop: the flat all-to-all.
* expert tensor parallelism (``etp`` > 1; Megatron-Core): the tokens a rank received are
  all-gathered over its etp group before the expert GEMMs and reduce-scattered after them
  (etp·T·k·h·B·λ), each again in the backward.

A recipe with FP8 dispatch (DeepSeek-V3 §3.3.3; ``precision`` "fp8-blockwise") sends the
forward dispatch and the backward's gradient dispatch in FP8 (1 byte and an fp32 scale per 128
values), the combines in BF16.

Overlap (:mod:`ringccl.planner.overlap`): each all-to-all hides behind its layer's routed
experts' compute (at the load λ), cut into micro-chunks; with DualPipe the dispatch and combine
of one micro-batch hide behind the other micro-batch's chunk
(:data:`ringccl.planner.pipeline.SCHEDULES`' ``hidden_sends``).
"""

from __future__ import annotations

from .compute import compute_precision
from .context import StepContext
from .costing import Entry
from .entries import recompute_factor, slowest
from .precision import precision_recipe
from .routing import gpus_per_copy, nodes_per_token
from .stages import StageShape

__all__ = ["expert_parallel", "dispatch_copies"]

#: micro-chunks an all-to-all is cut into against the expert GEMMs
CHUNKS = 4


def _tokens(ctx: StepContext) -> float:
    dims = ctx.dims
    return ctx.tokens / (dims.tp if dims.sp else 1)


def dispatch_copies(ctx: StepContext) -> tuple[float, float]:
    """(d, u): nodes a token's copies reach and GPUs per node copy, for the ``flex``
    dispatcher (the EP group's nodes from the rank grid)."""
    model, dims, grid = ctx.model, ctx.dims, ctx.grid
    nodes, local = grid.sizes["ep_inter"], grid.sizes["ep_intra"]
    d = nodes_per_token(model.num_local_experts, model.num_experts_per_tok, nodes,
                        dims.moe_router_group_topk)
    return d, gpus_per_copy(model.num_experts_per_tok / d, local)


def _a2a(ctx: StepContext, st: StageShape, group: str, nbytes: float, what: str) -> list[Entry]:
    """The dispatch and combine on ``group``, ``nbytes`` each in the model's dtype, per MoE
    layer forward and backward; an FP8 dispatch as its own row (module doc)."""
    values = nbytes / ctx.model.dtype_bytes
    fp8 = precision_recipe(compute_precision(ctx.model, ctx.dims)).fp8_dispatch
    kinds = ((("dispatch (FP8)", values * (1 + 4 / 128)), ("combine", nbytes)) if fp8
             else (("dispatch, combine", nbytes),))
    calls = 2 * st.moe_layers
    rows: list[Entry] = []
    for phase, n in (("forward", calls), ("backward", calls * recompute_factor(ctx))):
        for kind, size in kinds:
            rows += slowest(ctx, st.stage, group, parallelism="ep", collective="all_to_all",
                            phase=phase, what=f"{what} ({kind})", nbytes=size,
                            calls_per_step=n // len(kinds) * ctx.micro_batches,
                            overlap="expert compute", chunks=CHUNKS)
    return rows


def expert_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """The stage's dispatch and combine (and the expert-TP gathers)."""
    dims, model = ctx.dims, ctx.model
    if not (model.moe and st.moe_layers and dims.ep * dims.expert_tp > 1):
        return []
    row = _tokens(ctx) * model.hidden_size * model.dtype_bytes * st.expert_load
    k = model.num_experts_per_tok
    rows: list[Entry] = []
    if dims.ep > 1:
        two_hops = dims.moe_token_dispatcher_type == "flex" and ctx.grid.sizes["ep_inter"] > 1
        if two_hops:
            d, u = dispatch_copies(ctx)
            rows += _a2a(ctx, st, "ep_inter", row * d,
                         f"tokens to {d:.2f} nodes over the NIC, one copy per node")
            rows += _a2a(ctx, st, "ep_intra", row * d * u,
                         f"tokens on to {u:.2f} GPUs of each node over NVLink")
        else:
            rows += _a2a(ctx, st, "ep", row * k, "routed tokens, one copy per expert")
    if dims.expert_tp > 1:
        gathered = row * k * dims.expert_tp
        for phase, n in (("forward", st.moe_layers),
                         ("backward", st.moe_layers * recompute_factor(ctx))):
            for collective, what in (("all_gather", "received tokens to the expert-TP ranks"),
                                     ("reduce_scatter", "expert outputs back to their owners")):
                rows += slowest(ctx, st.stage, "etp", parallelism="ep", collective=collective,
                                phase=phase, what=what, nbytes=gathered,
                                calls_per_step=n * ctx.micro_batches,
                                overlap="expert compute", chunks=CHUNKS)
    return rows
