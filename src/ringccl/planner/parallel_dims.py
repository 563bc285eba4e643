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

The framework (``framework``, :mod:`.frameworks`) fills what is left out: sequence parallelism,
the ZeRO stage, recompute, the attention kernel, FSDP's resharding, and the knobs of how it
runs the step: ``overlap_grad_reduce``, ``overlap_param_gather``, ``tp_comm_overlap``,
``overlap_p2p``, ``pp_scatter_gather``, ``overlap_dgrad_reduce`` (the column-parallel layers'
input-gradient reduction behind their weight-gradient GEMM), ``gradient_accumulation_fusion``
(weight gradients accumulated inside the GEMM), ``pp_sequential_p2p`` (one blocking send or
receive at a time), ``zero3_gather`` ("layer": one all-gather per layer as
FSDP; "parameter": one per parameter tensor as DeepSpeed's ZeRO-3), ``zero3_prefetch_bucket``
(DeepSpeed's ``stage3_prefetch_bucket_size``, elements) and ``fsdp_prefetch`` (layers gathered
ahead; :mod:`ringccl.planner.overlap` says what each one hides). :meth:`ParallelDims.for_model`
adds what needs the model (the gradients' reduce dtype and bucket, and the global batch of
:func:`default_num_micro_batches` when neither it nor the number of micro-batches is given).
``from_preset`` names every value filled in so. ``precision`` is the recipe
(:data:`ringccl.planner.precision.PRECISIONS`, default bf16).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

from .. import units
from ..errors import ArgumentError, ArgumentTypeError
from . import frameworks
from .layout_checks import (check_context, check_experts, check_framework_shards,
                            check_model_context, check_model_experts, check_shards,
                            check_unread, drop_ignored, given_again)
from .model import ModelConfig
from .pipeline import SCHEDULE_NAMES, check_schedule, chunks_per_rank
from .precision import PRECISIONS

__all__ = ["ParallelDims", "DIMENSIONS", "DEFAULT_ORDER", "SCHEDULES", "RECOMPUTE", "ATTENTION",
           "ZERO3_GATHERS", "CP_COMM_TYPES", "DISPATCHERS", "resolve_dims", "check_field",
           "TOKENS_PER_STEP", "default_num_micro_batches", "BATCH_RULE"]

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
#: how attention runs: FlashAttention (the newest kernel, or FlashAttention-2), or Megatron's
#: unfused core attention (2021-2022)
ATTENTION = ("flash", "flash2", "unfused")
#: ZeRO-3's all-gather unit: a layer (FSDP's unit) or each parameter tensor (DeepSpeed)
ZERO3_GATHERS = ("layer", "parameter")
#: DeepSpeed's default stage3_prefetch_bucket_size, elements (deepspeed/runtime/zero/config.py)
ZERO3_PREFETCH_BUCKET = 50_000_000

#: PyTorch DDP's default bucket_cap_mb (25 MiB)
DDP_BUCKET_BYTES = 25 * 2**20

#: tokens per step when no global batch is given: 4M (2^22), as Llama 2 (every size; Touvron
#: et al. 2023, Table 1) and Llama 3 405B's first stage (Dubey et al. 2024, §3.4.1) trained;
#: GPT-3 175B used 3.2M (Brown et al. 2020, Table 2.1)
TOKENS_PER_STEP = 2**22
#: the rule, as the plan prints it
BATCH_RULE = ("about 4M tokens per step (Llama 2, Llama 3 405B's first stage; GPT-3 175B: 3.2M), "
              "rounded to a multiple of dp x micro_batch_size, at least 4 x pp micro-batches "
              "with PP (a 1F1B bubble (pp-1)/m under 25%), a multiple of pp when interleaved")

_INT1 = ("dp", "tp", "pp", "cp", "ep", "micro_batch_size", "virtual_stages")
_INT0 = ("zero3_prefetch_bucket", "fsdp_prefetch")
_BOOLS = ("sp", "reshard_after_forward", "account_for_embedding_in_pipeline_split",
          "account_for_loss_in_pipeline_split", "overlap_grad_reduce", "overlap_param_gather",
          "tp_comm_overlap", "overlap_p2p", "pp_scatter_gather", "overlap_dgrad_reduce",
          "gradient_accumulation_fusion", "pp_sequential_p2p")
#: the fields chosen from a list, and the list
_CHOICES = {"schedule": SCHEDULES, "recompute": RECOMPUTE, "attention": ATTENTION,
            "zero3_gather": ZERO3_GATHERS, "precision": tuple(PRECISIONS),
            "framework": frameworks.FRAMEWORKS, "reduce_dtype": tuple(frameworks.REDUCE_DTYPES),
            "cp_comm_type": CP_COMM_TYPES, "moe_token_dispatcher_type": DISPATCHERS}


def _allowed(name: str) -> str | None:
    """What field ``name`` allows, in words (None: no rule here)."""
    if name in _INT1 or name in ("num_micro_batches", "global_batch_size"):
        return "an integer >= 1"
    if name in _INT0:
        return "an integer >= 0"
    if name in _BOOLS:
        return "true or false"
    if name in _CHOICES:
        return "one of " + ", ".join(_CHOICES[name])
    return {"zero_stage": "0, 1, 2 or 3 (FSDP = 3)",
            "bucket_bytes": "a size > 0 (bytes, or a string such as '25MiB')",
            "capacity_factor": "None (dropless) or a number >= 1",
            "order": f"each of {', '.join(DIMENSIONS)} once, joined by '-'"}.get(name)


def check_field(name: str, value, show=repr):
    """``value`` if it is of the kind layout field ``name`` takes (None is refused: callers
    skip the fields they leave out); ``show`` renders the value in messages (``repr`` for
    Python, the file's syntax for a ``--config`` file).

    Raises:
        ArgumentTypeError: a wrong type (bool where a number belongs, a string for an int...).
        ArgumentError: a value out of range or not among the choices.
    """
    allowed = _allowed(name)
    if allowed is None:
        return value
    kind = type(value).__name__
    if name in _INT1 or name in _INT0 or name in ("num_micro_batches", "global_batch_size"):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ArgumentTypeError(f"{name}={show(value)} must be {allowed}, got {kind}")
        value = int(value)   # numpy's integers are integers too (docs/errors.md)
        if value < (0 if name in _INT0 else 1):
            raise ArgumentError(f"{name}={show(value)} must be {allowed}")
    elif name in _BOOLS:
        if not isinstance(value, bool):
            raise ArgumentTypeError(f"{name}={show(value)} must be {allowed}, got {kind}")
    elif name == "zero_stage":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ArgumentTypeError(f"zero_stage={show(value)} must be {allowed}, got {kind}")
        if value not in (0, 1, 2, 3):
            raise ArgumentError(f"zero_stage={show(value)} must be {allowed}")
    elif name == "capacity_factor":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ArgumentTypeError(f"capacity_factor={show(value)} must be {allowed}, got "
                                    f"{kind}")
        if not 1 <= value < math.inf:
            raise ArgumentError(f"capacity_factor={show(value)} must be {allowed}")
    elif name == "bucket_bytes":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ArgumentTypeError(f"bucket_bytes={show(value)} must be {allowed}, got {kind}")
        size = units.size(value) if isinstance(value, str) else value
        if size < 1:
            raise ArgumentError(f"bucket_bytes={show(value)} must be {allowed}")
        return size
    elif name == "order":
        dims = value.split("-") if isinstance(value, str) else None
        if dims is None or sorted(dims) != sorted(DIMENSIONS):
            raise ArgumentError(f"order={show(value)} must name {allowed} (Megatron's "
                                f"default {DEFAULT_ORDER!r})")
    else:
        choices = _CHOICES[name]
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{name}={show(value)} must be {allowed}, got {kind}")
        if value.lower() not in choices:
            raise ArgumentError(f"{name}={show(value)} must be {allowed}")
        return value.lower()
    return value


def default_num_micro_batches(*, seq_length: int, dp: int, micro_batch_size: int, pp: int,
                              schedule: str) -> int:
    """Micro-batches per step when no global batch is given (:data:`BATCH_RULE`):
    ``round(TOKENS_PER_STEP / (seq_length · dp · micro_batch_size))``, at least 1, at least
    4·pp with pipeline parallelism (the 1F1B bubble (p − 1)/m of Narayanan et al. 2021 §2.2.1
    stays under 25 %), rounded up to a multiple of pp for the interleaved schedule (its
    requirement, §2.2.2)."""
    per_step = seq_length * dp * micro_batch_size
    m = max(1, math.floor(TOKENS_PER_STEP / per_step + 0.5))
    if pp > 1:
        m = max(m, 4 * pp)
        if schedule == "interleaved":
            m = -(-m // pp) * pp
    return m


def _values(dims: "ParallelDims") -> dict:
    """The layout's fields as they are (every value is immutable): ``asdict``'s deep copy was a
    sixth of a layout search."""
    return {f.name: getattr(dims, f.name) for f in fields(dims)}


@dataclass(frozen=True)
class ParallelDims:
    """One training step's parallel layout: the degrees of each dimension, the batch, the
    pipeline schedule, ZeRO and recompute, and the framework that runs it.

    A field left None takes its framework's value (:data:`frameworks.PRESETS`); a field given
    wins over the preset. ``from_preset`` names the fields filled so (and
    ``global_batch_size`` when the batch came from :data:`BATCH_RULE`).

    Attributes:
        dp, tp, cp, pp, ep: group sizes (>= 1); ``etp · ep`` divides ``tp · cp · dp``.
        sp: Megatron sequence parallelism inside the TP group (preset).
        zero_stage: 0, 1, 2 or 3 (FSDP = 3; Megatron's distributed optimizer = 1) (preset).
        micro_batch_size: sequences per micro-batch per data-parallel rank.
        num_micro_batches: micro-batches per step (default: from global_batch_size, else the
            rule, once the model is known: :meth:`for_model`).
        global_batch_size: sequences per step (default dp · micro_batch_size · m).
        schedule: one of :data:`SCHEDULES` (:mod:`ringccl.planner.pipeline`).
        virtual_stages: model chunks per PP rank (interleaved; dualpipev's 2 is set for you).
        recompute: "none", "selective" or "full" (preset).
        order: the rank order, e.g. "tp-cp-ep-dp-pp" (fastest-varying first).
        bucket_bytes: gradient bucket size in bytes (preset, :meth:`for_model`).
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
        framework: one of :data:`frameworks.FRAMEWORKS` ("megatron", "deepspeed", "fsdp2",
            "torchtitan", or a dated one: "megatron-2021", "megatron-2022",
            "megatron-deepspeed", "composer", "torchtitan-2024"; default
            :data:`frameworks.DEFAULT_FRAMEWORK`).
        precision: the precision recipe ("bf16", "fp8-delayed", "fp8-tensorwise",
            "fp8-rowwise", "fp8-blockwise").
        attention: "flash" (FlashAttention, the architecture's newest kernel: no s x s scores
            kept), "flash2" (FlashAttention-2's kernel, as 2023's stacks ran it) or "unfused"
            (Megatron's core attention) (preset).
        overlap_grad_reduce: gradient reduction overlaps the backward (DDP's buckets,
            Megatron's --overlap-grad-reduce); else it runs after it (preset).
        overlap_param_gather: the distributed optimizer's parameter all-gather overlaps the
            next forward (Megatron's --overlap-param-gather); else it runs before it (preset).
        tp_comm_overlap: TP/SP collectives overlap the GEMMs they feed (Megatron's
            --tp-comm-overlap, torchtitan's async TP); else exposed (preset).
        overlap_p2p: PP sends and receives overlap compute (Megatron-Core's
            --overlap-p2p-communication); else exposed per micro-batch (preset).
        pp_scatter_gather: each TP rank sends 1/tp of a stage's output and the next stage
            all-gathers it (Megatron-LM 2021 §4.1; DeepSpeed's pipeline engine's partitioned
            activations and gradients); else every TP rank sends the whole output (preset).
        overlap_dgrad_reduce: the column-parallel layers' input-gradient all-reduce (with SP:
            reduce-scatter) runs asynchronously behind their weight-gradient GEMM, and with SP
            the input's re-gather behind the input-gradient GEMM (Megatron-LM since 2022,
            ``LinearWithGradAccumulationAndAsyncCommunication``); else exposed (preset).
        gradient_accumulation_fusion: the weight-gradient GEMM accumulates into the main
            gradient (Megatron's ``--gradient-accumulation-fusion``); else each micro-batch's
            weight gradients are written, then added to the accumulated ones (preset).
        pp_sequential_p2p: each PP send and receive is its own blocking call, one after the
            other (DeepSpeed's pipeline engine); else a send and a receive go together
            (Megatron's ``batch_isend_irecv``) (preset).
        zero3_gather: "layer" or "parameter" (module doc) (preset).
        zero3_prefetch_bucket: elements DeepSpeed gathers ahead (0: every gather blocks)
            (preset).
        fsdp_prefetch: layers FSDP gathers ahead (0: none; FSDP2's default 1) (preset).
        reduce_dtype: "float32", "bfloat16" or "float16": the gradients' reduction (preset,
            :meth:`for_model`).
        reshard_after_forward: ZeRO-3/FSDP frees each layer's gathered weights after its
            forward (preset).
        account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split:
            Megatron-Core's: the embedding / the loss counts as one layer of the pipeline's
            split, so the first / last stage holds one layer fewer (Llama 3's balance,
            Dubey et al. 2024 §3.3.2; torchtitan's ``pipeline_parallel_first_stage_less_layers``
            / ``..._last_stage_less_layers`` = 1) (preset).
        from_preset: the fields filled by the framework's preset or the batch rule.
        notes: what was given and turned off rather than refused (sp with tp = 1, as
            Megatron-LM does), in words; the plan prints them.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool | None = None
    zero_stage: int | None = None
    micro_batch_size: int = 1
    num_micro_batches: int | None = None
    global_batch_size: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str | None = None
    order: str = DEFAULT_ORDER
    bucket_bytes: int | str | None = None
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
    attention: str | None = None
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    tp_comm_overlap: bool | None = None
    overlap_p2p: bool | None = None
    pp_scatter_gather: bool | None = None
    overlap_dgrad_reduce: bool | None = None
    gradient_accumulation_fusion: bool | None = None
    pp_sequential_p2p: bool | None = None
    zero3_gather: str | None = None
    zero3_prefetch_bucket: int | None = None
    fsdp_prefetch: int | None = None
    # -- the framework and what its preset fills in
    framework: str | None = None
    reduce_dtype: str | None = None
    reshard_after_forward: bool | None = None
    account_for_embedding_in_pipeline_split: bool | None = None
    account_for_loss_in_pipeline_split: bool | None = None
    from_preset: tuple = field(default=(), compare=False)
    notes: tuple = field(default=(), compare=False)

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 - frozen dataclass
        for f in (*_INT1, "schedule", "order", "precision", "cp_comm_type",
                  "moe_token_dispatcher_type"):
            set_(f, check_field(f, getattr(self, f)))
        if self.capacity_factor is not None:
            set_("capacity_factor", check_field("capacity_factor", self.capacity_factor))
        if self.schedule == "dualpipev" and self.virtual_stages == 1:
            set_("virtual_stages", 2)       # its V: two chunks per rank
        filled = list(self.from_preset)
        if self.framework is None:
            filled.append("framework")
        set_("framework", frameworks.check_framework(self.framework or
                                                     frameworks.DEFAULT_FRAMEWORK))
        layout = {"tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": self.cp,
                  "schedule": self.schedule}
        for name in frameworks.LAYOUT_SETTINGS:     # in order: a rule may read those before
            if getattr(self, name) is None:
                value = frameworks.preset_values(self.framework, (name,), layout).get(name)
                if value is not None:
                    set_(name, value)
                    filled.append(name)
            elif name not in filled:
                set_(name, check_field(name, getattr(self, name)))
            layout[name] = getattr(self, name)
        for name in ("reduce_dtype", "bucket_bytes"):
            if getattr(self, name) is not None:
                set_(name, check_field(name, getattr(self, name)))
        set_("from_preset", tuple(dict.fromkeys(filled)))
        if self.virtual_stages > 1 and self.schedule not in ("interleaved", "dualpipev"):
            raise ArgumentError(f"virtual_stages={self.virtual_stages} needs "
                                f"schedule='interleaved' (got {self.schedule!r})")
        check_framework_shards(self)
        check_unread(self)
        set_("notes", tuple(dict.fromkeys(tuple(self.notes) + drop_ignored(self))))
        check_experts(self)
        check_context(self)
        check_shards(self)
        self._check_batch()

    def _check_batch(self) -> None:
        """The batch's consistency; m stays None until :meth:`for_model` when neither it nor
        the global batch is given."""
        per_step = self.dp * self.micro_batch_size
        m = self.num_micro_batches
        if m is not None:
            check_field("num_micro_batches", m)
        if self.global_batch_size is not None:
            check_field("global_batch_size", self.global_batch_size)
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
        if m is None:
            return
        object.__setattr__(self, "num_micro_batches", m)
        object.__setattr__(self, "global_batch_size", m * per_step)
        if self.pp > 1 or self.schedule != "1f1b":
            check_schedule(self.schedule, pp=self.pp, num_micro_batches=m,
                           virtual_stages=self.virtual_stages)
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

    def for_model(self, model: ModelConfig) -> "ParallelDims":
        """This layout with what needs the model filled in: the gradients' reduce dtype and
        bucket from the framework's preset (they depend on the training dtype), and the
        global batch of :func:`default_num_micro_batches` when neither the global batch nor
        the number of micro-batches was given."""
        if self.num_micro_batches is not None and all(
                getattr(self, name) is not None for name in frameworks.MODEL_SETTINGS):
            return self                 # nothing left to fill
        values = _values(self)
        filled = list(self.from_preset)
        layout = {"tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": self.cp,
                  "dtype": model.dtype}
        for name in frameworks.MODEL_SETTINGS:
            if values[name] is None:
                layout["reduce_dtype"] = values["reduce_dtype"]
                values[name] = frameworks.preset_values(self.framework, (name,), layout)[name]
                filled.append(name)
        if self.num_micro_batches is None:
            values["num_micro_batches"] = default_num_micro_batches(
                seq_length=model.seq_length, dp=self.dp, micro_batch_size=self.micro_batch_size,
                pp=self.pp, schedule=self.schedule)
            filled.append("global_batch_size")
        if len(filled) == len(self.from_preset):
            return self
        values["from_preset"] = tuple(filled)
        return ParallelDims(**values)

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
        check_model_experts(self, model)
        stages = self.pp * (1 if self.schedule == "dualpipe" else
                            chunks_per_rank(self.schedule, self.virtual_stages))
        slots = (model.num_hidden_layers + self.account_for_embedding_in_pipeline_split
                 + self.account_for_loss_in_pipeline_split)
        if stages > slots:
            raise ArgumentError(f"pp={self.pp} x virtual_stages={self.virtual_stages} = {stages} "
                                f"stages is deeper than the model's num_hidden_layers="
                                f"{model.num_hidden_layers}")
        if model.seq_length % (self.cp * (self.tp if self.sp else 1)):
            raise ArgumentError(f"cp={self.cp} (x tp={self.tp} with sp) must divide seq_length="
                                f"{model.seq_length}")
        check_model_context(self, model)
        return self

    def replace(self, **changes) -> "ParallelDims":
        """A copy with ``changes``; the batch is kept (num_micro_batches recomputed), and the
        values that came from the preset or the batch rule are derived again."""
        values = _values(self)
        for name in self.from_preset:
            if name == "framework" and "framework" not in changes:
                values["framework"] = None
            elif name == "global_batch_size":
                values["global_batch_size"] = values["num_micro_batches"] = None
            elif name not in changes:
                values[name] = None
        given_again(self, values, changes)
        values["from_preset"] = values["notes"] = ()
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
        parts.append(f"mbs={self.micro_batch_size}"
                     + (f"x{self.num_micro_batches}" if self.num_micro_batches else ""))
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
        ArgumentTypeError: ``layout`` neither a ParallelDims nor a mapping.
    """
    if isinstance(layout, ParallelDims):
        return layout
    if layout is not None and not isinstance(layout, Mapping):
        raise ArgumentTypeError(f"layout={layout!r} must be a ParallelDims or a dict of its "
                                f"fields (e.g. {{'tp': 8, 'dp': 4}}), got {type(layout).__name__}")
    values = dict(layout or {})
    known = set(ParallelDims.__dataclass_fields__) - {"from_preset", "notes"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ArgumentError(f"unknown layout field(s) {', '.join(unknown)}; expected "
                            f"{', '.join(sorted(known))}")
    return ParallelDims(**values)
