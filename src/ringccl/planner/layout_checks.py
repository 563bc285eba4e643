"""The refusals of the layout fields that say how context and expert parallelism communicate
and how ZeRO shards (:class:`~ringccl.planner.parallel_dims.ParallelDims` calls them): MoE
parallel folding, node-limited routing, the expert load, the CP designs, HSDP, the ZeRO stages
a framework cannot run, what a dated framework could not run yet
(:data:`~ringccl.planner.frameworks.LIMITS`), and a field given where the layout would not
read it (a ZeRO-3 gather setting below ZeRO-3, a pipeline-split flag without a pipeline). Each
raises :class:`~ringccl.errors.ArgumentError` naming the field, its value and what is allowed.
Sequence parallelism asked with tp = 1 is not refused but turned off with a note, as Megatron-LM
does (:func:`drop_ignored`).

Sources: Megatron-Core (MoE parallel folding, Liu et al. 2025, arXiv:2504.14960;
``--cp-comm-type``, ``--hierarchical-context-parallel-sizes``); DeepSeek-V3 §2.1.2 (node-limited
routing); DeepSpeed-Ulysses (Jacobs et al. 2023: heads divisible by the sequence-parallel
degree); torchtitan (``dp_shard``).
"""

from __future__ import annotations

from ..args import check_int
from ..errors import ArgumentError
from .frameworks import LIMITS, family
from .model import ModelConfig

__all__ = ["check_experts", "check_context", "check_shards", "check_framework_shards",
           "check_unread", "drop_ignored", "given_again", "expert_hint", "check_model_experts",
           "check_model_context"]


def check_framework_shards(dims) -> None:
    """Refuse a value the framework could not run (:data:`~ringccl.planner.frameworks.LIMITS`:
    a dated preset's, citing its source), and a ZeRO stage the framework (or the current one a
    dated preset became, :func:`~ringccl.planner.frameworks.family`) cannot run."""
    for name, limit in LIMITS[dims.framework].items():
        value = getattr(dims, name)
        if value not in limit.allowed:
            only = " only" if len(limit.allowed) == 1 else ""
            raise ArgumentError(f"{name}={value!r}: {dims.framework} runs {name} "
                                f"{limit.words()}{only} ({limit.source})")
    kind = family(dims.framework)
    if kind in ("fsdp2", "torchtitan") and dims.zero_stage in (1, 2):
        raise ArgumentError(
            f"zero_stage={dims.zero_stage} is not how {dims.framework} shards: it runs 0 "
            "(replicated, DDP) or 3 (fully_shard); reshard_after_forward=false keeps the "
            "gathered weights to the backward (FSDP's SHARD_GRAD_OP)")
    if kind == "deepspeed" and dims.pp > 1 and dims.zero_stage >= 2:
        raise ArgumentError(
            f"zero_stage={dims.zero_stage} with pp={dims.pp}: DeepSpeed's pipeline engine "
            "refuses ZeRO-2 and ZeRO-3 (deepspeed/runtime/pipe/engine.py, PipelineEngine: "
            "zero_optimization_stage() < 2); use zero_stage 0 or 1 with PP, or pp=1")


def _zero3_gathers(gather: str | None):
    """Whether a layout gathers ZeRO-3's weights (of ``gather``: "layer", "parameter"; None:
    either), and what it has instead, in words."""
    def reads(dims) -> tuple[bool, str]:
        if dims.zero_stage != 3:
            return False, f"zero_stage={dims.zero_stage}"
        return gather in (None, dims.zero3_gather), f"zero3_gather={dims.zero3_gather!r}"
    return reads


#: fields only some layouts read: the field, whether a layout reads it (and what it has
#: instead) and what it needs, in words; given elsewhere they would change nothing
_READ_ONLY_WITH = (
    ("reshard_after_forward", _zero3_gathers(None), "zero_stage 3 (FSDP's gathered weights)"),
    ("zero3_gather", _zero3_gathers(None), "zero_stage 3 (the unit ZeRO-3 gathers weights in)"),
    ("zero3_prefetch_bucket", _zero3_gathers("parameter"), "zero_stage 3 with "
     "zero3_gather='parameter' (DeepSpeed's stage3_prefetch_bucket_size)"),
    ("fsdp_prefetch", _zero3_gathers("layer"), "zero_stage 3 with zero3_gather='layer' "
     "(the layers FSDP gathers ahead)"),
)

#: the pipeline-split flags and what each counts as a layer of the split
_SPLIT_FLAGS = (("account_for_embedding_in_pipeline_split", "the embedding"),
                ("account_for_loss_in_pipeline_split", "the loss"))


def check_unread(dims) -> None:
    """Refuse a field given where the layout would not read it (:data:`_READ_ONLY_WITH`; a
    pipeline-split flag on with pp = 1), rather than drop it; the framework's own preset values
    are not the user's and are kept."""
    for name, reads, needs in _READ_ONLY_WITH:
        value = getattr(dims, name)
        if value is None or name in dims.from_preset:
            continue
        ok, got = reads(dims)
        if not ok:
            raise ArgumentError(f"{name}={value!r} applies to {needs}; got {got}")
    for name, what in _SPLIT_FLAGS:
        if dims.pp == 1 and getattr(dims, name) and name not in dims.from_preset:
            raise ArgumentError(f"{name}=True counts {what} as a layer of the pipeline's "
                                "split; it needs pp > 1 (got pp=1)")


#: Megatron-LM's warning when it turns sequence parallelism off for tp = 1
_SP_WITHOUT_TP = ("sp=True is ignored with tp=1: sequence parallelism splits the sequence over "
                  "the tensor-parallel group, and there is none; planned with sp off, as "
                  "Megatron-LM runs it (megatron/training/arguments.py: \"Disabling sequence "
                  "parallelism because tensor model parallelism is disabled\")")


def drop_ignored(dims) -> tuple[str, ...]:
    """Turn off what the framework turns off rather than refuse: sequence parallelism given
    with tp = 1 (Megatron-LM sets ``sequence_parallel = False`` with a warning). Returns the
    notes saying so (the plan prints them)."""
    if dims.sp and dims.tp == 1 and "sp" not in dims.from_preset:
        object.__setattr__(dims, "sp", False)
        return (_SP_WITHOUT_TP,)
    return ()


def given_again(dims, values: dict, changes: dict) -> None:
    """``values`` (the fields of a copy of ``dims`` with ``changes``) with what
    :func:`drop_ignored` turned off given again, to be turned off again or not as the copy's
    own layout decides."""
    if _SP_WITHOUT_TP in dims.notes and "sp" not in changes:
        values["sp"] = True


def check_shards(dims) -> None:
    """Refuse a ZeRO / FSDP shard group that does not fit (HSDP)."""
    if dims.dp_shard is None:
        return
    check_int(dims.dp_shard, "dp_shard", minimum=1)
    if dims.dp % dims.dp_shard:
        raise ArgumentError(f"dp_shard={dims.dp_shard} must divide dp={dims.dp} (HSDP "
                            f"shards over dp_shard and replicates over dp / dp_shard)")
    if dims.zero_stage == 0:
        raise ArgumentError(f"dp_shard={dims.dp_shard} shards ZeRO / FSDP states: it "
                            "needs zero_stage 1, 2 or 3 (zero_stage=0 replicates all)")


def check_experts(dims) -> None:
    """Refuse expert fields that do not fit (MoE parallel folding, DeepSeek-V3 routing)."""
    if dims.etp is not None:
        check_int(dims.etp, "etp", minimum=1)
    dense = dims.tp * dims.cp * dims.dp
    if dense % (dims.expert_tp * dims.ep):
        raise ArgumentError(
            f"etp x ep = {dims.expert_tp} x {dims.ep} = {dims.expert_tp * dims.ep} must "
            f"divide tp x cp x dp = {dims.tp} x {dims.cp} x {dims.dp} = {dense}: the expert "
            "grid (etp x ep x expert-dp) is laid over the same ranks of each pipeline stage "
            "as tp x cp x dp (Megatron-Core's MoE parallel folding), so ep does not multiply "
            f"the world size. {expert_hint(dims)}")
    if dims.moe_router_group_topk is not None:
        check_int(dims.moe_router_group_topk, "moe_router_group_topk", minimum=1)
        if dims.ep == 1:
            raise ArgumentError(f"moe_router_group_topk={dims.moe_router_group_topk} limits "
                                "the nodes a token's experts sit on: it needs ep > 1")
    if dims.routing_imbalance is not None:
        if isinstance(dims.routing_imbalance, bool) or not isinstance(
                dims.routing_imbalance, (int, float)) or not (
                1 <= dims.routing_imbalance < float("inf")):
            raise ArgumentError(f"routing_imbalance={dims.routing_imbalance!r} must be a "
                                "number >= 1 (tokens of the busiest EP rank over the mean)")
        if dims.routing_skew:
            raise ArgumentError("give routing_imbalance (measured) or routing_skew (Zipf), "
                                f"not both (got {dims.routing_imbalance!r} and "
                                f"{dims.routing_skew!r})")
    if isinstance(dims.routing_skew, bool) or not isinstance(
            dims.routing_skew, (int, float)) or not 0 <= dims.routing_skew < float("inf"):
        raise ArgumentError(f"routing_skew={dims.routing_skew!r} must be a number >= 0 "
                            "(0: uniform; 1: Zipf)")


def check_context(dims) -> None:
    """Refuse context-parallel fields that do not fit."""
    sizes = dims.hierarchical_context_parallel_sizes
    if dims.cp == 1 and dims.cp_comm_type != "p2p":
        raise ArgumentError(f"cp_comm_type={dims.cp_comm_type!r} says how context parallelism "
                            "communicates; it needs cp > 1 (got cp=1)")
    if dims.cp_comm_type == "a2a+p2p":
        if sizes is None or len(tuple(sizes)) != 2:
            raise ArgumentError("cp_comm_type='a2a+p2p' needs "
                                "hierarchical_context_parallel_sizes=(a2a size, p2p size)")
        sizes = tuple(check_int(x, "hierarchical_context_parallel_sizes", minimum=1)
                      for x in sizes)
        object.__setattr__(dims, "hierarchical_context_parallel_sizes", sizes)
        if sizes[0] * sizes[1] != dims.cp:
            raise ArgumentError(f"hierarchical_context_parallel_sizes={sizes}: a2a x p2p = "
                                f"{sizes[0]} x {sizes[1]} must equal cp={dims.cp}")
    elif sizes is not None:
        raise ArgumentError(f"hierarchical_context_parallel_sizes={sizes!r} applies to "
                            f"cp_comm_type='a2a+p2p' only (got {dims.cp_comm_type!r})")

def expert_hint(dims) -> str:
    """The layout to write when dp was given as the expert replicas (DeepSeek-V3's report
    writes "EP64" and 2 replicas of each expert on 2,048 GPUs at pp = 16)."""
    ranks = dims.dp * dims.expert_tp * dims.ep
    if ranks % (dims.tp * dims.cp):
        return (f"Choose dp so that tp x cp x dp is a multiple of etp x ep = "
                f"{dims.expert_tp * dims.ep}.")
    dp = ranks // (dims.tp * dims.cp)
    return (f"If dp={dims.dp} meant {dims.dp} replicas of each expert, write dp={dp} "
            f"ep={dims.ep}: dp = replicas x etp x ep / (tp x cp) = {dims.dp} x "
            f"{dims.expert_tp} x {dims.ep} / ({dims.tp} x {dims.cp}) = {dp}, and the world is "
            f"tp x cp x dp x pp = {dims.tp} x {dims.cp} x {dp} x {dims.pp} = "
            f"{dims.tp * dims.cp * dp * dims.pp}.")


def check_model_experts(dims, model: ModelConfig) -> None:
    if dims.ep > 1 and not model.moe:
        raise ArgumentError(f"ep={dims.ep} needs a mixture-of-experts model; {model.name} "
                            "is dense")
    if model.moe and model.num_local_experts % dims.ep:
        raise ArgumentError(f"ep={dims.ep} must divide the experts num_local_experts="
                            f"{model.num_local_experts}")
    if model.moe and dims.tp > 1 and not dims.sp:
        raise ArgumentError(f"sp must be on with tp={dims.tp} on an MoE model "
                            "(Megatron-Core requires sequence parallelism with experts)")
    if model.moe and model.expert_intermediate_size % dims.expert_tp:
        raise ArgumentError(f"etp={dims.expert_tp} must divide the experts' width "
                            f"moe_intermediate_size={model.expert_intermediate_size}")
    if not model.moe:
        given = [f"{name}={value!r}" for name, value, unset in (
            ("moe_router_group_topk", dims.moe_router_group_topk, None),
            ("routing_imbalance", dims.routing_imbalance, None),
            ("routing_skew", dims.routing_skew, 0.0),
            ("capacity_factor", dims.capacity_factor, None),
            ("etp", dims.etp, None),
            ("moe_token_dispatcher_type", dims.moe_token_dispatcher_type, "alltoall"))
            if value != unset]
        if given:
            raise ArgumentError(f"{', '.join(given)}: expert fields apply to "
                                f"mixture-of-experts models; {model.name} is dense")


def check_model_context(dims, model: ModelConfig) -> None:
    if dims.cp == 1:
        return
    ring = dims.cp // dims.cp_a2a_size
    if dims.cp_comm_type != "a2a" and model.seq_length % (2 * ring * dims.cp_a2a_size):
        raise ArgumentError(
            f"seq_length={model.seq_length} must be a multiple of 2 x cp = {2 * dims.cp} "
            f"for cp_comm_type={dims.cp_comm_type!r}: each rank takes two of the 2·cp "
            "chunks (i and 2·cp − 1 − i) to balance the causal mask (Megatron-Core; Llama 3 "
            "§3.3.2)")
    u = dims.cp_a2a_size
    if u == 1:
        return
    heads = model.num_attention_heads // dims.tp
    kv = heads if model.mla else model.num_key_value_heads // dims.tp
    if heads % u:
        raise ArgumentError(
            f"the Ulysses degree {u} (cp_comm_type={dims.cp_comm_type!r}) must divide the "
            f"attention heads a TP rank holds, num_attention_heads / tp = "
            f"{model.num_attention_heads} / {dims.tp} = {heads} (DeepSpeed-Ulysses shards "
            "heads after its all-to-all); use p2p or all_gather, or a2a+p2p with a smaller "
            "a2a size")
    if kv % u:
        raise ArgumentError(
            f"the Ulysses degree {u} (cp_comm_type={dims.cp_comm_type!r}) must divide the "
            f"KV heads a TP rank holds, num_key_value_heads / tp = "
            f"{model.num_key_value_heads} / {dims.tp} = {kv} (grouped-query attention: "
            "whole KV heads per rank); use p2p or all_gather, or a2a+p2p with an a2a size "
            f"dividing {kv}")
