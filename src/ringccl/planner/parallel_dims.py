"""The parallel dimensions of a training step: how it is split over ``world_size`` GPUs, and
the layouts that are refused (torchtitan's ``ParallelDims``: one object that validates a
layout and knows its degrees).

Megatron-LM's conventions (Narayanan et al. 2021; Megatron-Core's ``parallel_state``):

* ``world_size = tp · cp · dp · pp``; expert parallelism does not multiply the world: the
  expert grid ``etp · ep · edp`` (expert tensor, expert and expert-data parallelism) is laid
  over the same ``tp · cp · dp`` ranks of each pipeline stage (Megatron-Core's MoE parallel
  folding, Liu et al. 2025, arXiv:2504.14960), so ``etp · ep`` divides ``tp · cp · dp`` and
  expert weights are data-parallel over the remaining ``edp = tp·cp·dp / (etp·ep)`` ranks
  (DeepSeek-V3's "EP64 with 2 expert replicas" on 2,048 GPUs at pp = 16 is dp = 128, ep = 64);
* dense gradients are reduced over the ``dp · cp`` ranks that hold the same weights;
* the rank order names the dimensions from the fastest-varying one: Megatron's default
  ``"tp-cp-ep-dp-pp"`` puts a TP group on consecutive ranks (one node) and PP outermost;
* ``global_batch_size = dp · micro_batch_size · num_micro_batches``; with ``pp > 1`` the
  micro-batches are the pipeline's, with ``pp = 1`` they are gradient-accumulation steps
  (DDP's ``no_sync`` on all but the last, so gradients are reduced once per step either way);
* pipeline schedules (:mod:`ringccl.planner.pipeline`): ``"1f1b"``, ``"interleaved"`` with
  ``virtual_stages`` v model chunks per rank, ``"gpipe"``, the zero-bubble ``"zb-h1"`` and
  ``"zb-h2"`` (Qi et al. 2024), ``"dualpipe"`` and ``"dualpipev"`` (DeepSeek-V3 §3.2.1);
* context parallelism as Megatron-Core's ``cp_comm_type`` names it: ``"p2p"`` (ring attention),
  ``"all_gather"`` (Llama 3 §3.3.2), ``"a2a"`` (DeepSpeed-Ulysses), ``"a2a+p2p"`` (Ulysses
  inside ``hierarchical_context_parallel_sizes[0]`` ranks, a ring across the rest);
* MoE dispatch: ``moe_token_dispatcher_type`` ``"alltoall"`` (one all-to-all over the EP group)
  or ``"flex"`` (DeepEP: across nodes once per destination node, then NVLink);
  ``moe_router_group_topk`` limits each token to that many nodes (DeepSeek-V3 §2.1.2);
  ``capacity_factor`` None is dropless, else each expert takes at most that multiple of its
  uniform share (GShard); ``routing_imbalance`` (measured max/mean load of an EP rank) or
  ``routing_skew`` (a Zipf exponent, as ``ringccl moe --skew``) loads the busiest EP rank;
* ``dp_shard``: ZeRO / FSDP shard over ``dp_shard · cp`` ranks and replicate over
  ``dp / dp_shard`` (torchtitan's ``dp_shard`` / ``dp_replicate``, HSDP);
* ZeRO stage 0 (DDP), 1 (optimizer states sharded), 2 (+ gradients), 3 (+ weights, = FSDP);
* recompute ``"none"``, ``"selective"`` (attention core, Korthikanti et al. 2022 §5), ``"full"``.

The knobs of how a framework runs the step (set by the framework presets; defaults keep the
plain behaviour: overlapped gradient reduce and parameter gather, nothing else overlapped):
``precision`` (:data:`ringccl.planner.precision.PRECISIONS`), ``attention`` (FlashAttention or
Megatron's unfused core attention), ``overlap_grad_reduce``, ``overlap_param_gather``,
``tp_comm_overlap``, ``overlap_p2p``, ``pp_scatter_gather``, ``zero3_gather`` ("layer": one all-gather per layer as
FSDP; "parameter": one per parameter tensor as DeepSpeed's ZeRO-3), ``zero3_prefetch_bucket``
(DeepSpeed's ``stage3_prefetch_bucket_size``, elements) and ``fsdp_prefetch`` (layers gathered
ahead); :mod:`ringccl.planner.overlap` says what each one hides.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import units
from ..args import check_int
from ..errors import ArgumentError, ArgumentTypeError
from .model import ModelConfig
from .pipeline import SCHEDULE_NAMES, check_schedule, chunks_per_rank
from .precision import PRECISIONS

__all__ = ["ParallelDims", "DIMENSIONS", "DEFAULT_ORDER", "SCHEDULES", "RECOMPUTE", "ATTENTION",
           "ZERO3_GATHERS", "CP_COMM_TYPES", "DISPATCHERS", "resolve_dims"]

#: the dimensions of the rank grid
DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
#: Megatron-Core's default order (fastest-varying first)
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
SCHEDULES = SCHEDULE_NAMES
RECOMPUTE = ("none", "selective", "full")
#: Megatron-Core's ``--cp-comm-type`` values
CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")
#: Megatron-Core's ``--moe-token-dispatcher-type`` values modelled here
DISPATCHERS = ("alltoall", "flex")
#: how attention runs: FlashAttention, or Megatron's unfused core attention (2021-2022)
ATTENTION = ("flash", "unfused")
#: ZeRO-3's all-gather unit: a layer (FSDP's unit) or each parameter tensor (DeepSpeed)
ZERO3_GATHERS = ("layer", "parameter")
#: DeepSpeed's default stage3_prefetch_bucket_size, elements (deepspeed/runtime/zero/config.py)
ZERO3_PREFETCH_BUCKET = 50_000_000

#: PyTorch DDP's default bucket_cap_mb (25 MiB)
DDP_BUCKET_BYTES = 25 * 2**20


@dataclass(frozen=True)
class ParallelDims:
    """One training step's parallel layout: the degrees of each dimension, the batch, the
    pipeline schedule, ZeRO, recompute, and how context and expert parallelism communicate.

    Attributes:
        dp, tp, cp, pp, ep: group sizes (>= 1); ``etp · ep`` divides ``tp · cp · dp``.
        sp: Megatron sequence parallelism inside the TP group.
        zero_stage: 0, 1, 2 or 3 (FSDP = 3).
        micro_batch_size: sequences per micro-batch per data-parallel rank.
        num_micro_batches: micro-batches per step (default: from global_batch_size, else 1).
        global_batch_size: sequences per step (default dp · micro_batch_size · m).
        schedule: one of :data:`SCHEDULES` (:mod:`ringccl.planner.pipeline`).
        virtual_stages: model chunks per PP rank (interleaved; dualpipev's 2 is set for you).
        recompute: "none", "selective" or "full".
        order: the rank order, e.g. "tp-cp-ep-dp-pp" (fastest-varying first).
        bucket_bytes: DDP / ZeRO gradient bucket size in bytes (PyTorch's 25 MiB).
        capacity_factor: None (dropless, Megatron-Core's default) or c >= 1: each expert takes
            at most c × its uniform share, buffers padded to it (GShard §2.2).
        etp: expert tensor-parallel size (None: tp, Megatron-Core's default).
        cp_comm_type: "p2p", "all_gather", "a2a" or "a2a+p2p" (Megatron-Core's names).
        hierarchical_context_parallel_sizes: (a2a size, p2p size), product cp, for "a2a+p2p".
        moe_token_dispatcher_type: "alltoall" or "flex" (DeepEP's two hops).
        moe_router_group_topk: each token to experts on at most this many nodes (None: no
            limit; DeepSeek-V3's M = 4).
        routing_imbalance: measured tokens of the busiest EP rank over the mean (>= 1).
        routing_skew: Zipf exponent of expert popularity (0: uniform), as ``ringccl moe``.
        dp_shard: ranks of the dp dimension a ZeRO / FSDP shard spans (None: all dp; HSDP when
            smaller: the shards are replicated over dp / dp_shard).
        precision: the precision recipe ("bf16", "fp8-delayed", "fp8-tensorwise",
            "fp8-rowwise", "fp8-blockwise").
        attention: "flash" (FlashAttention) or "unfused" (Megatron's core attention).
        overlap_grad_reduce: gradient reduction overlaps the backward (DDP's buckets,
            Megatron's --overlap-grad-reduce); else it runs after it.
        overlap_param_gather: the distributed optimizer's parameter all-gather overlaps the
            next forward (Megatron's --overlap-param-gather); else it runs before it.
        tp_comm_overlap: TP/SP collectives overlap the GEMMs they feed (Megatron's
            --tp-comm-overlap, torchtitan's async TP); else exposed.
        overlap_p2p: PP sends and receives overlap compute (Megatron-Core's
            --overlap-p2p-communication); else exposed per micro-batch.
        pp_scatter_gather: each TP rank sends 1/tp of a stage's output and the next stage
            all-gathers it (Megatron-LM 2021 §4.1); else every TP rank sends the whole output
            (DeepSpeed's pipeline engine).
        zero3_gather: "layer" or "parameter" (module doc).
        zero3_prefetch_bucket: elements DeepSpeed gathers ahead (0: every gather blocks).
        fsdp_prefetch: layers FSDP gathers ahead (0: none; FSDP2's default 1).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    zero_stage: int = 0
    micro_batch_size: int = 1
    num_micro_batches: int | None = None
    global_batch_size: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "none"
    order: str = DEFAULT_ORDER
    bucket_bytes: int = DDP_BUCKET_BYTES
    capacity_factor: float | None = None
    etp: int | None = None
    cp_comm_type: str = "p2p"
    hierarchical_context_parallel_sizes: tuple | None = None
    moe_token_dispatcher_type: str = "alltoall"
    moe_router_group_topk: int | None = None
    routing_imbalance: float | None = None
    routing_skew: float = 0.0
    dp_shard: int | None = None
    precision: str = "bf16"
    attention: str = "flash"
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = False
    overlap_p2p: bool = False
    pp_scatter_gather: bool = True
    zero3_gather: str = "layer"
    zero3_prefetch_bucket: int = ZERO3_PREFETCH_BUCKET
    fsdp_prefetch: int = 1

    def __post_init__(self):
        for f in ("dp", "tp", "pp", "cp", "ep", "micro_batch_size", "virtual_stages"):
            check_int(getattr(self, f), f, minimum=1)
        if not isinstance(self.sp, bool):
            raise ArgumentTypeError(f"sp={self.sp!r} must be true or false")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ArgumentError(f"zero_stage={self.zero_stage!r} must be 0, 1, 2 or 3 (FSDP = 3)")
        if self.schedule not in SCHEDULES:
            raise ArgumentError(f"schedule={self.schedule!r} must be one of "
                                f"{', '.join(SCHEDULES)}")
        if self.recompute not in RECOMPUTE:
            raise ArgumentError(f"recompute={self.recompute!r} must be one of "
                                f"{', '.join(RECOMPUTE)}")
        if self.schedule == "dualpipev" and self.virtual_stages == 1:
            object.__setattr__(self, "virtual_stages", 2)     # its V: two chunks per rank
        if self.virtual_stages > 1 and self.schedule not in ("interleaved", "dualpipev"):
            raise ArgumentError(f"virtual_stages={self.virtual_stages} needs "
                                f"schedule='interleaved' (got {self.schedule!r})")
        if isinstance(self.bucket_bytes, str):
            object.__setattr__(self, "bucket_bytes", units.size(self.bucket_bytes))
        check_int(self.bucket_bytes, "bucket_bytes", minimum=1)
        if self.capacity_factor is not None and (
                isinstance(self.capacity_factor, bool)
                or not isinstance(self.capacity_factor, (int, float))
                or not 1 <= self.capacity_factor < float("inf")):
            raise ArgumentError(f"capacity_factor={self.capacity_factor!r} must be None "
                                "(dropless) or a number >= 1")
        self._check_knobs()
        dims = self.order.split("-") if isinstance(self.order, str) else None
        if dims is None or sorted(dims) != sorted(DIMENSIONS):
            raise ArgumentError(f"order={self.order!r} must name each of "
                                f"{', '.join(DIMENSIONS)} once, joined by '-' (Megatron's "
                                f"default {DEFAULT_ORDER!r})")
        self._check_experts()
        self._check_context()
        if self.dp_shard is not None:
            check_int(self.dp_shard, "dp_shard", minimum=1)
            if self.dp % self.dp_shard:
                raise ArgumentError(f"dp_shard={self.dp_shard} must divide dp={self.dp} (HSDP "
                                    f"shards over dp_shard and replicates over dp / dp_shard)")
            if self.zero_stage == 0:
                raise ArgumentError(f"dp_shard={self.dp_shard} shards ZeRO / FSDP states: it "
                                    "needs zero_stage 1, 2 or 3 (zero_stage=0 replicates all)")
        self._set_batch()

    def _check_experts(self) -> None:
        """Refuse expert fields that do not fit (MoE parallel folding, DeepSeek-V3 routing)."""
        if self.etp is not None:
            check_int(self.etp, "etp", minimum=1)
        dense = self.tp * self.cp * self.dp
        if dense % (self.expert_tp * self.ep):
            raise ArgumentError(
                f"etp x ep = {self.expert_tp} x {self.ep} = {self.expert_tp * self.ep} must "
                f"divide tp x cp x dp = {self.tp} x {self.cp} x {self.dp} = {dense}: the expert "
                "grid (etp x ep x expert-dp) is laid over the same ranks of each pipeline stage "
                "as tp x cp x dp (Megatron-Core's MoE parallel folding), so ep does not multiply "
                f"the world size. {self._expert_hint()}")
        if self.moe_token_dispatcher_type not in DISPATCHERS:
            raise ArgumentError(f"moe_token_dispatcher_type={self.moe_token_dispatcher_type!r} "
                                f"must be one of {', '.join(DISPATCHERS)}")
        if self.moe_router_group_topk is not None:
            check_int(self.moe_router_group_topk, "moe_router_group_topk", minimum=1)
            if self.ep == 1:
                raise ArgumentError(f"moe_router_group_topk={self.moe_router_group_topk} limits "
                                    "the nodes a token's experts sit on: it needs ep > 1")
        if self.routing_imbalance is not None:
            if isinstance(self.routing_imbalance, bool) or not isinstance(
                    self.routing_imbalance, (int, float)) or not (
                    1 <= self.routing_imbalance < float("inf")):
                raise ArgumentError(f"routing_imbalance={self.routing_imbalance!r} must be a "
                                    "number >= 1 (tokens of the busiest EP rank over the mean)")
            if self.routing_skew:
                raise ArgumentError("give routing_imbalance (measured) or routing_skew (Zipf), "
                                    f"not both (got {self.routing_imbalance!r} and "
                                    f"{self.routing_skew!r})")
        if isinstance(self.routing_skew, bool) or not isinstance(
                self.routing_skew, (int, float)) or not 0 <= self.routing_skew < float("inf"):
            raise ArgumentError(f"routing_skew={self.routing_skew!r} must be a number >= 0 "
                                "(0: uniform; 1: Zipf)")

    def _check_context(self) -> None:
        """Refuse context-parallel fields that do not fit."""
        if self.cp_comm_type not in CP_COMM_TYPES:
            raise ArgumentError(f"cp_comm_type={self.cp_comm_type!r} must be one of "
                                f"{', '.join(CP_COMM_TYPES)} (Megatron-Core's names)")
        sizes = self.hierarchical_context_parallel_sizes
        if self.cp_comm_type == "a2a+p2p":
            if sizes is None or len(tuple(sizes)) != 2:
                raise ArgumentError("cp_comm_type='a2a+p2p' needs "
                                    "hierarchical_context_parallel_sizes=(a2a size, p2p size)")
            sizes = tuple(check_int(x, "hierarchical_context_parallel_sizes", minimum=1)
                          for x in sizes)
            object.__setattr__(self, "hierarchical_context_parallel_sizes", sizes)
            if sizes[0] * sizes[1] != self.cp:
                raise ArgumentError(f"hierarchical_context_parallel_sizes={sizes}: a2a x p2p = "
                                    f"{sizes[0]} x {sizes[1]} must equal cp={self.cp}")
        elif sizes is not None:
            raise ArgumentError(f"hierarchical_context_parallel_sizes={sizes!r} applies to "
                                f"cp_comm_type='a2a+p2p' only (got {self.cp_comm_type!r})")

    def _set_batch(self) -> None:
        per_step = self.dp * self.micro_batch_size
        m = self.num_micro_batches
        if m is not None:
            check_int(m, "num_micro_batches", minimum=1)
        if self.global_batch_size is not None:
            check_int(self.global_batch_size, "global_batch_size", minimum=1)
            if self.global_batch_size % per_step:
                raise ArgumentError(
                    f"global_batch_size={self.global_batch_size} does not split into "
                    f"micro-batches: it must be a multiple of dp x micro_batch_size = "
                    f"{self.dp} x {self.micro_batch_size} = {per_step}")
            if m is not None and m * per_step != self.global_batch_size:
                raise ArgumentError(
                    f"global_batch_size={self.global_batch_size} != dp x micro_batch_size x "
                    f"num_micro_batches = {self.dp} x {self.micro_batch_size} x {m}")
            m = self.global_batch_size // per_step
        m = 1 if m is None else m
        object.__setattr__(self, "num_micro_batches", m)
        object.__setattr__(self, "global_batch_size", m * per_step)
        if self.pp > 1 or self.schedule != "1f1b":
            check_schedule(self.schedule, pp=self.pp, num_micro_batches=m,
                           virtual_stages=self.virtual_stages)

    def _expert_hint(self) -> str:
        """The layout to write when dp was given as the expert replicas (DeepSeek-V3's report
        writes "EP64" and 2 replicas of each expert on 2,048 GPUs at pp = 16)."""
        ranks = self.dp * self.expert_tp * self.ep
        if ranks % (self.tp * self.cp):
            return (f"Choose dp so that tp x cp x dp is a multiple of etp x ep = "
                    f"{self.expert_tp * self.ep}.")
        dp = ranks // (self.tp * self.cp)
        return (f"If dp={self.dp} meant {self.dp} replicas of each expert, write dp={dp} "
                f"ep={self.ep}: dp = replicas x etp x ep / (tp x cp) = {self.dp} x "
                f"{self.expert_tp} x {self.ep} / ({self.tp} x {self.cp}) = {dp}, and the world is "
                f"tp x cp x dp x pp = {self.tp} x {self.cp} x {dp} x {self.pp} = "
                f"{self.tp * self.cp * dp * self.pp}.")

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size: ``etp``, or tp when not given (Megatron-Core)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size: tp·cp·dp / (etp·ep) ranks hold the same experts."""
        return self.tp * self.cp * self.dp // (self.expert_tp * self.ep)

    @property
    def cp_a2a_size(self) -> int:
        """Ranks of a Ulysses all-to-all: cp for "a2a", the first hierarchical size for
        "a2a+p2p", else 1."""
        if self.cp_comm_type == "a2a":
            return self.cp
        if self.cp_comm_type == "a2a+p2p":
            return self.hierarchical_context_parallel_sizes[0]
        return 1

    @property
    def dp_replicate(self) -> int:
        """Replicas of each ZeRO / FSDP shard (HSDP): dp / dp_shard."""
        return self.dp // (self.dp_shard or self.dp)

    @property
    def shard_size(self) -> int:
        """Ranks a ZeRO / FSDP shard of the dense states spans: dp_shard · cp (all dp · cp by
        default)."""
        return (self.dp_shard or self.dp) * self.cp

    def _check_knobs(self) -> None:
        for f in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap",
                  "overlap_p2p", "pp_scatter_gather"):
            if not isinstance(getattr(self, f), bool):
                raise ArgumentTypeError(f"{f}={getattr(self, f)!r} must be true or false")
        for f, allowed in (("precision", tuple(PRECISIONS)), ("attention", ATTENTION),
                           ("zero3_gather", ZERO3_GATHERS)):
            if getattr(self, f) not in allowed:
                raise ArgumentError(f"{f}={getattr(self, f)!r} must be one of "
                                    f"{', '.join(allowed)}")
        check_int(self.zero3_prefetch_bucket, "zero3_prefetch_bucket", minimum=0)
        check_int(self.fsdp_prefetch, "fsdp_prefetch", minimum=0)

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(self.order.split("-"))

    @property
    def gradient_accumulation_steps(self) -> int:
        """Micro-batches per step a DP rank accumulates before its gradients are reduced."""
        return self.num_micro_batches

    @property
    def fsdp(self) -> bool:
        return self.zero_stage == 3

    def check(self, model: ModelConfig, world_size: int | None = None) -> "ParallelDims":
        """Refuse a layout that cannot run ``model`` on ``world_size`` GPUs.

        Raises:
            ArgumentError naming the field: the product tp·cp·dp·pp differs from the world size
            (with the layout to write when ep was multiplied in); tp does not divide the
            attention heads or the KV heads; ep does not divide the experts (or ep > 1 on a dense
            model); etp does not divide the expert width; the pipeline has more stages than the
            model has layers; sp off with tp > 1 on an MoE model (Megatron-Core requires it); cp
            not dividing the sequence (2·cp for the load-balanced causal chunks of p2p and
            all_gather); a Ulysses degree not dividing the heads or KV heads a TP rank holds.
        """
        if world_size is not None and self.world_size != world_size:
            hint = ""
            if self.ep > 1 and self.world_size * self.ep == world_size:
                hint = (f"; ep is not a factor of the world size (its ranks are carved out of "
                        f"tp x cp x dp, Megatron-Core's convention): for {world_size} GPUs write "
                        f"dp={self.dp * self.ep} ep={self.ep} (each expert then on "
                        f"{self.dp * self.ep * self.tp * self.cp // (self.ep * self.expert_tp)} "
                        "ranks of expert data parallelism)")
            raise ArgumentError(
                f"dp x tp x cp x pp = {self.dp} x {self.tp} x {self.cp} x {self.pp} = "
                f"{self.world_size} must equal the world size {world_size} (the cluster's GPUs)"
                + hint)
        if model.num_attention_heads % self.tp:
            raise ArgumentError(f"tp={self.tp} must divide num_attention_heads="
                                f"{model.num_attention_heads}")
        if not model.mla and model.num_key_value_heads % self.tp:
            raise ArgumentError(f"tp={self.tp} must divide num_key_value_heads="
                                f"{model.num_key_value_heads} (Megatron shards whole KV heads)")
        self._check_model_experts(model)
        stages = self.pp * (1 if self.schedule == "dualpipe" else
                            chunks_per_rank(self.schedule, self.virtual_stages))
        if stages > model.num_hidden_layers:
            raise ArgumentError(f"pp={self.pp} x virtual_stages={self.virtual_stages} = {stages} "
                                f"stages is deeper than the model's num_hidden_layers="
                                f"{model.num_hidden_layers}")
        if model.seq_length % (self.cp * (self.tp if self.sp else 1)):
            raise ArgumentError(f"cp={self.cp} (x tp={self.tp} with sp) must divide seq_length="
                                f"{model.seq_length}")
        self._check_model_context(model)
        return self

    def _check_model_experts(self, model: ModelConfig) -> None:
        if self.ep > 1 and not model.moe:
            raise ArgumentError(f"ep={self.ep} needs a mixture-of-experts model; {model.name} "
                                "is dense")
        if model.moe and model.num_local_experts % self.ep:
            raise ArgumentError(f"ep={self.ep} must divide the experts num_local_experts="
                                f"{model.num_local_experts}")
        if model.moe and self.tp > 1 and not self.sp:
            raise ArgumentError(f"sp must be on with tp={self.tp} on an MoE model "
                                "(Megatron-Core requires sequence parallelism with experts)")
        if model.moe and model.expert_intermediate_size % self.expert_tp:
            raise ArgumentError(f"etp={self.expert_tp} must divide the experts' width "
                                f"moe_intermediate_size={model.expert_intermediate_size}")
        if not model.moe and (self.moe_router_group_topk is not None or self.routing_skew
                              or self.routing_imbalance is not None):
            raise ArgumentError(f"moe_router_group_topk, routing_imbalance and routing_skew "
                                f"apply to mixture-of-experts models; {model.name} is dense")

    def _check_model_context(self, model: ModelConfig) -> None:
        if self.cp == 1:
            return
        ring = self.cp // self.cp_a2a_size
        if self.cp_comm_type != "a2a" and model.seq_length % (2 * ring * self.cp_a2a_size):
            raise ArgumentError(
                f"seq_length={model.seq_length} must be a multiple of 2 x cp = {2 * self.cp} "
                f"for cp_comm_type={self.cp_comm_type!r}: each rank takes two of the 2·cp "
                "chunks (i and 2·cp − 1 − i) to balance the causal mask (Megatron-Core; Llama 3 "
                "§3.3.2)")
        u = self.cp_a2a_size
        if u == 1:
            return
        heads = model.num_attention_heads // self.tp
        kv = heads if model.mla else model.num_key_value_heads // self.tp
        if heads % u:
            raise ArgumentError(
                f"the Ulysses degree {u} (cp_comm_type={self.cp_comm_type!r}) must divide the "
                f"attention heads a TP rank holds, num_attention_heads / tp = "
                f"{model.num_attention_heads} / {self.tp} = {heads} (DeepSpeed-Ulysses shards "
                "heads after its all-to-all); use p2p or all_gather, or a2a+p2p with a smaller "
                "a2a size")
        if kv % u:
            raise ArgumentError(
                f"the Ulysses degree {u} (cp_comm_type={self.cp_comm_type!r}) must divide the "
                f"KV heads a TP rank holds, num_key_value_heads / tp = "
                f"{model.num_key_value_heads} / {self.tp} = {kv} (grouped-query attention: "
                "whole KV heads per rank); use p2p or all_gather, or a2a+p2p with an a2a size "
                f"dividing {kv}")

    def replace(self, **changes) -> "ParallelDims":
        """A copy with ``changes``; the batch is kept (num_micro_batches recomputed)."""
        values = asdict(self)
        if "global_batch_size" not in changes and ("dp" in changes or
                                                    "micro_batch_size" in changes):
            values["num_micro_batches"] = None
        if "num_micro_batches" in changes:
            values["global_batch_size"] = None
        values.update(changes)
        return ParallelDims(**values)

    def describe(self) -> str:
        parts = [f"dp={self.dp}", f"tp={self.tp}" + ("+sp" if self.sp else ""),
                 f"pp={self.pp}"]
        if self.cp > 1:
            parts.append(f"cp={self.cp}")
        if self.cp > 1 and self.cp_comm_type != "p2p":
            parts[-1] += f"({self.cp_comm_type}" + (
                f" {self.hierarchical_context_parallel_sizes[0]}x"
                f"{self.hierarchical_context_parallel_sizes[1]})"
                if self.cp_comm_type == "a2a+p2p" else ")")
        if self.ep > 1:
            parts.append(f"ep={self.ep}" + (f" etp={self.expert_tp}" if self.expert_tp != self.tp
                                             else ""))
            if self.moe_router_group_topk:
                parts.append(f"nodes/token<={self.moe_router_group_topk}")
            if self.moe_token_dispatcher_type != "alltoall":
                parts.append(self.moe_token_dispatcher_type)
        if self.zero_stage:
            parts.append(f"zero={self.zero_stage}" + (f"(shard {self.dp_shard})"
                                                      if self.dp_replicate > 1 else ""))
        if self.pp > 1:
            parts.append(self.schedule + (f"(v={self.virtual_stages})"
                                          if self.schedule == "interleaved"
                                          and self.virtual_stages > 1 else ""))
        parts.append(f"mbs={self.micro_batch_size}x{self.num_micro_batches}")
        if self.recompute != "none":
            parts.append(f"recompute={self.recompute}")
        if self.precision != "bf16":
            parts.append(self.precision)
        return " ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_dims(layout) -> ParallelDims:
    """A :class:`ParallelDims` from one, or from a dictionary of its fields (a config file's
    ``layout`` table).

    Raises:
        ArgumentError: an unknown key (naming the valid ones) or a bad value.
    """
    if isinstance(layout, ParallelDims):
        return layout
    values = dict(layout or {})
    known = set(ParallelDims.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ArgumentError(f"unknown layout field(s) {', '.join(unknown)}; expected "
                            f"{', '.join(sorted(known))}")
    return ParallelDims(**values)
