"""The parallel dimensions of a training step: how it is split over ``world_size`` GPUs, and
the layouts that are refused (torchtitan's ``ParallelDims``: one object that validates a
layout and knows its degrees).

Megatron-LM's conventions (Narayanan et al. 2021; Megatron-Core's ``parallel_state``):

* ``world_size = tp · cp · dp · pp``; expert parallelism does not multiply the world: the ``ep``
  ranks of an expert-parallel group are carved out of the data-parallel dimension (``ep``
  divides ``dp``), and expert weights are data-parallel over the remaining ``dp / ep`` ranks;
* dense gradients are reduced over the ``dp · cp`` ranks that hold the same weights;
* the rank order names the dimensions from the fastest-varying one: Megatron's default
  ``"tp-cp-ep-dp-pp"`` puts a TP group on consecutive ranks (one node) and PP outermost;
* ``global_batch_size = dp · micro_batch_size · num_micro_batches``; with ``pp > 1`` the
  micro-batches are the pipeline's, with ``pp = 1`` they are gradient-accumulation steps
  (DDP's ``no_sync`` on all but the last, so gradients are reduced once per step either way);
* schedules ``"1f1b"`` (PipeDream-Flush, Megatron-LM 2021 §2.2.1), ``"interleaved"`` with
  ``virtual_stages`` v model chunks per rank (§2.2.2; the number of micro-batches must be a
  multiple of pp), ``"gpipe"`` (Huang et al. 2019);
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
from .precision import PRECISIONS

__all__ = ["ParallelDims", "DIMENSIONS", "DEFAULT_ORDER", "SCHEDULES", "RECOMPUTE", "ATTENTION",
           "ZERO3_GATHERS", "resolve_dims"]

#: the dimensions of the rank grid
DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
#: Megatron-Core's default order (fastest-varying first)
DEFAULT_ORDER = "tp-cp-ep-dp-pp"
SCHEDULES = ("1f1b", "interleaved", "gpipe")
RECOMPUTE = ("none", "selective", "full")
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
    pipeline schedule, ZeRO and recompute.

    Attributes:
        dp, tp, cp, pp, ep: group sizes (>= 1); ``ep`` divides ``dp``.
        sp: Megatron sequence parallelism inside the TP group.
        zero_stage: 0, 1, 2 or 3 (FSDP = 3).
        micro_batch_size: sequences per micro-batch per data-parallel rank.
        num_micro_batches: micro-batches per step (default: from global_batch_size, else 1).
        global_batch_size: sequences per step (default dp · micro_batch_size · m).
        schedule: "1f1b", "interleaved" (with virtual_stages > 1) or "gpipe".
        virtual_stages: model chunks per PP rank (interleaved only).
        recompute: "none", "selective" or "full".
        order: the rank order, e.g. "tp-cp-ep-dp-pp" (fastest-varying first).
        bucket_bytes: DDP / ZeRO gradient bucket size in bytes (PyTorch's 25 MiB).
        capacity_factor: MoE all-to-all buffer over the uniform-routing size (>= 1).
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
    capacity_factor: float = 1.0
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
        if self.virtual_stages > 1 and self.schedule != "interleaved":
            raise ArgumentError(f"virtual_stages={self.virtual_stages} needs "
                                f"schedule='interleaved' (got {self.schedule!r})")
        if isinstance(self.bucket_bytes, str):
            object.__setattr__(self, "bucket_bytes", units.size(self.bucket_bytes))
        check_int(self.bucket_bytes, "bucket_bytes", minimum=1)
        if not isinstance(self.capacity_factor, (int, float)) or not self.capacity_factor >= 1:
            raise ArgumentError(f"capacity_factor={self.capacity_factor!r} must be a number >= 1")
        self._check_knobs()
        dims = self.order.split("-") if isinstance(self.order, str) else None
        if dims is None or sorted(dims) != sorted(DIMENSIONS):
            raise ArgumentError(f"order={self.order!r} must name each of "
                                f"{', '.join(DIMENSIONS)} once, joined by '-' (Megatron's "
                                f"default {DEFAULT_ORDER!r})")
        if self.dp % self.ep:
            raise ArgumentError(f"ep={self.ep} must divide dp={self.dp} (expert-parallel groups "
                                "are carved out of the data-parallel ranks, as in Megatron-Core)")
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
        if self.schedule == "interleaved" and self.pp > 1 and m % self.pp:
            raise ArgumentError(f"num_micro_batches={m} must be a multiple of pp={self.pp} for "
                                "the interleaved schedule (Megatron-LM 2021 §2.2.2)")

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
            ArgumentError naming the field: the product tp·cp·dp·pp differs from the world size;
            tp does not divide the attention heads or the KV heads; ep does not divide the
            experts (or ep > 1 on a dense model); pp · virtual_stages exceeds the layers; sp
            off with tp > 1 on an MoE model (Megatron-Core requires it); cp not dividing the
            sequence.
        """
        if world_size is not None and self.world_size != world_size:
            raise ArgumentError(
                f"dp x tp x cp x pp = {self.dp} x {self.tp} x {self.cp} x {self.pp} = "
                f"{self.world_size} must equal the world size {world_size} (the cluster's GPUs)")
        if model.num_attention_heads % self.tp:
            raise ArgumentError(f"tp={self.tp} must divide num_attention_heads="
                                f"{model.num_attention_heads}")
        if not model.mla and model.num_key_value_heads % self.tp:
            raise ArgumentError(f"tp={self.tp} must divide num_key_value_heads="
                                f"{model.num_key_value_heads} (Megatron shards whole KV heads)")
        if self.ep > 1 and not model.moe:
            raise ArgumentError(f"ep={self.ep} needs a mixture-of-experts model; {model.name} "
                                "is dense")
        if model.moe and model.num_local_experts % self.ep:
            raise ArgumentError(f"ep={self.ep} must divide the experts num_local_experts="
                                f"{model.num_local_experts}")
        if model.moe and self.tp > 1 and not self.sp:
            raise ArgumentError(f"sp must be on with tp={self.tp} on an MoE model "
                                "(Megatron-Core requires sequence parallelism with experts)")
        chunks = self.pp * self.virtual_stages
        if chunks > model.num_hidden_layers:
            raise ArgumentError(f"pp={self.pp} x virtual_stages={self.virtual_stages} = {chunks} "
                                f"stages is deeper than the model's num_hidden_layers="
                                f"{model.num_hidden_layers}")
        if model.seq_length % (self.cp * (self.tp if self.sp else 1)):
            raise ArgumentError(f"cp={self.cp} (x tp={self.tp} with sp) must divide seq_length="
                                f"{model.seq_length}")
        return self

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
        if self.ep > 1:
            parts.append(f"ep={self.ep}")
        if self.zero_stage:
            parts.append(f"zero={self.zero_stage}")
        if self.pp > 1:
            parts.append(self.schedule + (f"(v={self.virtual_stages})"
                                          if self.virtual_stages > 1 else ""))
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
