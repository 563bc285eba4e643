"""Memory per rank of one training step: model states, activations, communication buffers.

Pure functions of explicit numbers (no model, layout or cluster objects): the planner computes
how many parameters and layers a rank holds and passes them in. Every result is in bytes (an
``int``, rounded up where a shard or a fraction does not come out whole); every count is an
element count. A bad value raises :class:`~ringccl.errors.ArgumentError` (a
:class:`~ringccl.errors.ArgumentTypeError` for a wrong type) naming the argument and the value.

The formulas, their sources and what they leave out are collected in docs/planner.md.

References:
    Rajbhandari, Rasley, Ruwase & He, "ZeRO: Memory Optimizations Toward Training Trillion
        Parameter Models", SC20 (arXiv:1910.02054), §3.1 (mixed-precision model states, K = 12),
        §5 (P_os, P_g, P_p), Figure 1.
    Korthikanti, Casper, Lym, McAfee, Andersch, Shoeybi & Catanzaro, "Reducing Activation
        Recomputation in Large Transformer Models", MLSys 2023 (arXiv:2205.05198), §4 (activation
        memory per layer, Table 2), §4.2.3 (pipeline parallelism), §5 (selective recomputation).
    Narayanan, Shoeybi, Casper, LeGresley, Patwary, Korthikanti, Vainbrand, Kashinkunti,
        Bernauer, Catanzaro, Phanishayee & Zaharia, "Efficient Large-Scale Language Model Training
        on GPU Clusters Using Megatron-LM", SC21 (arXiv:2104.04473), §2.2 (GPipe, 1F1B and the
        interleaved schedule; the bubble).
    Tazi, Mom, Zhao, Nguyen, Mekkouri, von Werra & Wolf, "The Ultra-Scale Playbook: Training LLMs on
        GPU Clusters" (Hugging Face, 2025), "Memory usage in Transformers".
    PyTorch, torch/csrc/distributed/c10d/reducer.cpp (``Reducer::initialize_buckets``) and the
        ``DistributedDataParallel`` documentation (``bucket_cap_mb``, ``gradient_as_bucket_view``).
    PyTorch, ``FullyShardedDataParallel`` documentation (``limit_all_gathers``: memory of at
        most two consecutive FSDP units, the computing one and the prefetched one); Zhao et al.,
        "PyTorch FSDP", VLDB 2023 (arXiv:2304.11277).
    Lepikhin et al., "GShard", ICLR 2021 (arXiv:2006.16668), §2.2; Fedus, Zoph & Shazeer,
        "Switch Transformers", JMLR 2022 (arXiv:2101.03961), §2.1 (expert capacity).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from numbers import Real
from typing import Mapping

from ..args import check_int
from ..errors import ArgumentError, ArgumentTypeError
from .pipeline import SCHEDULE_NAMES, in_flight_micro_batches, pipeline_bubble_fraction

__all__ = [
    "SCHEDULES",
    "RECOMPUTE_MODES",
    "ZERO_STAGES",
    "MASK_BYTES",
    "model_state_bytes",
    "activation_bytes",
    "in_flight_micro_batches",
    "pipeline_bubble_fraction",
    "communication_buffer_bytes",
    "MemoryBreakdown",
    "breakdown",
]

#: Pipeline schedules (:mod:`ringccl.planner.pipeline`, which holds their bubble and in-flight
#: formulas; ``in_flight_micro_batches`` and ``pipeline_bubble_fraction`` are its own)
SCHEDULES = SCHEDULE_NAMES
#: Activation recomputation: store everything, recompute the attention core (Korthikanti §5),
#: or keep only each layer's input and recompute the whole layer.
RECOMPUTE_MODES = ("none", "selective", "full")
#: ZeRO stages: 0 = plain data parallelism, 1 = P_os, 2 = P_os+g, 3 = P_os+g+p (= FSDP full shard).
ZERO_STAGES = (0, 1, 2, 3)
#: Bytes per element of a dropout mask: Korthikanti et al. count masks as 1 byte per element
#: (§4.1), whatever the activations' dtype.
MASK_BYTES = 1

def _check_real(value, argument: str, *, positive: bool = False) -> float:
    """``value`` as a finite real number >= 0 (> 0 when ``positive``); bool is refused."""
    bound = "> 0" if positive else ">= 0"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ArgumentTypeError(f"{argument}={value!r} must be a real number {bound}, got "
                                f"{type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ArgumentError(f"{argument}={value!r} must be a finite real number {bound}")
    return value


def _check_bool(value, argument: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{argument}={value!r} must be True or False, got "
                                f"{type(value).__name__}")
    return value


def _check_choice(value, argument: str, allowed) -> str:
    if not isinstance(value, str) or value.lower() not in allowed:
        raise ArgumentError(f"{argument}={value!r} is not one of {', '.join(allowed)}")
    return value.lower()


def _bytes(elements, bytes_per_element) -> int:
    """Bytes of ``elements`` values of ``bytes_per_element`` each, rounded up; exact arithmetic
    (Fraction), so 7.5e9 parameters at 12 bytes over 64 ranks is 1,406,250,000, not a float."""
    return math.ceil(Fraction(elements) * Fraction(bytes_per_element))


# --------------------------------------------------------------------------- model states


def model_state_bytes(num_parameters: int, *, dp: int, zero_stage: int, param_bytes=2,
                      grad_bytes=2, optimizer_bytes=12) -> dict:
    """Weights, gradients and optimizer state of one rank, with ZeRO sharding over ``dp``.

    Mixed-precision Adam keeps, per parameter, the fp16/bf16 weight (2 bytes), its gradient
    (2 bytes) and K = 12 bytes of optimizer state: the fp32 master weight, momentum and variance
    (ZeRO §3.1), 16Ψ in all. ZeRO §5 shards these over the N_d = ``dp`` data-parallel ranks:

        stage 0:  (2 + 2 + K)·Ψ                 stage 2 (P_os+g):    2Ψ + (2 + K)·Ψ/N_d
        stage 1 (P_os):  2Ψ + 2Ψ + K·Ψ/N_d      stage 3 (P_os+g+p): (2 + 2 + K)·Ψ/N_d

    A sharded state takes ceil(Ψ/N_d) elements per rank (DeepSpeed and FSDP pad the flat buffer
    to a multiple of N_d). With Ψ = 7.5e9, N_d = 64 this gives ZeRO's Figure 1: 120, 31.4, 16.6
    and 1.9 GB with GB = 1e9 bytes (2³⁰ would give 111.8 GiB for the baseline).

    The Ultra-Scale Playbook's 20 bytes per parameter (its "BF16 with FP32 grads" column) keeps an
    fp32 copy of the gradients for accumulation besides the bf16 ones: ``grad_bytes=6``
    (2 + 4); its 16 bytes are the defaults here (or fp32 training: 4 + 4 + 8).

    Args:
        num_parameters: Ψ, the parameters this rank holds before data-parallel sharding (after
            tensor, pipeline and expert parallelism have split the model), >= 0.
        dp: N_d, the data-parallel group size ZeRO shards over (>= 1).
        zero_stage: 0, 1, 2 or 3 (FSDP full shard = 3).
        param_bytes, grad_bytes, optimizer_bytes: bytes per parameter of the working weights,
            the gradients and the optimizer state (reals >= 0; defaults 2, 2, 12).

    Returns:
        ``{"weights": int, "gradients": int, "optimizer": int}`` in bytes.

    Raises:
        ArgumentError: a negative count, ``dp`` < 1, a stage not in 0-3, a negative byte size.
        ArgumentTypeError: a count or stage that is not an integer, a byte size not a number.
    """
    num_parameters = check_int(num_parameters, "num_parameters", 0)
    dp = check_int(dp, "dp", 1)
    zero_stage = check_int(zero_stage, "zero_stage", 0)
    if zero_stage not in ZERO_STAGES:
        raise ArgumentError(f"zero_stage={zero_stage} must be one of 0, 1, 2, 3")
    param_bytes = _check_real(param_bytes, "param_bytes")
    grad_bytes = _check_real(grad_bytes, "grad_bytes")
    optimizer_bytes = _check_real(optimizer_bytes, "optimizer_bytes")
    shard = -(-num_parameters // dp)           # ceil(Ψ / N_d): the padded shard
    # stage s shards the optimizer from s >= 1, the gradients from s >= 2, the weights at s = 3
    return {
        "weights": _bytes(shard if zero_stage >= 3 else num_parameters, param_bytes),
        "gradients": _bytes(shard if zero_stage >= 2 else num_parameters, grad_bytes),
        "optimizer": _bytes(shard if zero_stage >= 1 else num_parameters, optimizer_bytes),
    }


# --------------------------------------------------------------------------- activations


def activation_bytes(*, seq_length: int, micro_batch_size: int, hidden_size: int,
                     num_attention_heads: int, num_layers: int, tp: int = 1, sp: bool = False,
                     cp: int = 1, recompute: str = "none", dtype_bytes=2,
                     flash_attention: bool = False) -> int:
    """Activations that ``num_layers`` transformer layers keep for the backward pass of one
    micro-batch, on one rank (Korthikanti et al. 2022, §4 and Table 2).

    With s = ``seq_length``, b = ``micro_batch_size``, h = ``hidden_size``,
    a = ``num_attention_heads``, t = ``tp``, per layer, in bytes, for 2-byte activations:

        no parallelism                 s·b·h·(34 + 5·a·s/h)
        tensor parallel                s·b·h·(10 + 24/t + 5·a·s/(h·t))
        tensor + sequence parallel     s·b·h/t·(34 + 5·a·s/h)
        + selective recompute          the same without the 5·a·s/h term (§5: the softmax
                                       output, its dropout mask and output are recomputed)
        full recompute                 2·s·b·h (only the layer's input; /t with sequence
                                       parallelism, whose layer input is the sequence shard)

    **dtype_bytes.** The constants include bytes: every stored tensor is 2 bytes per element
    except the two dropout masks of a layer (s·b·h each) and the attention-dropout mask
    (a·s²·b), 1 byte per element (§4.1). This function keeps that split and scales only the
    tensors: per layer (no parallelism) it counts dtype_bytes·(16·s·b·h + 2·a·s²·b) +
    1·(2·s·b·h + a·s²·b), which is the paper's 34·s·b·h + 5·a·s²·b at dtype_bytes = 2; with
    tensor parallelism the replicated part is dtype_bytes·4·s·b·h + 2·s·b·h (two layer-norm
    inputs, the inputs of the QKV and first MLP GEMMs; both dropout masks) and the split part
    dtype_bytes·(12·s·b·h + 2·a·s²·b)/t + a·s²·b/t. Full recompute keeps dtype_bytes·s·b·h.

    **cp.** Context parallelism gives each rank s/cp tokens, so s becomes s/cp everywhere,
    including the score term a·(s/cp)²·b: a rank keeps one (s/cp × s/cp) block of scores per
    head, as blockwise (ring) attention computes them. With a fused attention kernel
    (FlashAttention, which Megatron's context parallelism requires) the scores are never
    stored: ``flash_attention=True``.

    **flash_attention.** FlashAttention (Dao et al. 2022, §3.1 and Algorithm 2) keeps no s x s
    score, softmax or dropout tensors: its backward recomputes them from Q, K, V, the output
    and the softmax statistics (s·b·a values, dropped like Korthikanti's s·b terms). The 5·a·s/h
    term goes, as with selective recompute (the count is then that row's).

    **Ignored** (as in the paper's per-layer count): the embedding layer's dropout output and
    mask, the final layer norm, the output layer's logits and the cross-entropy's fp32 copy
    (all on the first or last pipeline stage only), optimizer and allocator workspace, and any
    difference of modern blocks: the formula is the GPT block (4h MLP with GeLU, multi-head
    attention, dropout); grouped-query attention, SwiGLU MLPs and MoE layers are counted as
    that block.

    Args:
        seq_length: s, tokens per sequence (>= 1, divisible by ``cp``; s/cp divisible by
            ``tp`` when ``sp``).
        micro_batch_size: b, sequences per micro-batch (>= 1).
        hidden_size: h (>= 1).
        num_attention_heads: a (>= 1, divisible by ``tp``).
        num_layers: transformer layers this rank holds (>= 0).
        tp: tensor-parallel size t (>= 1).
        sp: sequence parallelism on (Megatron's SP shards the layer-norm and dropout regions).
        cp: context-parallel size (>= 1).
        recompute: "none", "selective" or "full".
        dtype_bytes: bytes per element of a stored activation (real > 0; 2 for fp16/bf16).
        flash_attention: the attention kernel keeps no scores (FlashAttention).

    Returns:
        Bytes (``int``, rounded up) for one micro-batch through ``num_layers`` layers.

    Raises:
        ArgumentError: a value out of range, a divisibility listed above, an unknown
            ``recompute``.
        ArgumentTypeError: a wrong type (``sp`` must be a bool).
    """
    s = check_int(seq_length, "seq_length", 1)
    b = check_int(micro_batch_size, "micro_batch_size", 1)
    h = check_int(hidden_size, "hidden_size", 1)
    a = check_int(num_attention_heads, "num_attention_heads", 1)
    num_layers = check_int(num_layers, "num_layers", 0)
    t = check_int(tp, "tp", 1)
    sp = _check_bool(sp, "sp")
    cp = check_int(cp, "cp", 1)
    recompute = _check_choice(recompute, "recompute", RECOMPUTE_MODES)
    dtype_bytes = Fraction(_check_real(dtype_bytes, "dtype_bytes", positive=True))
    flash_attention = _check_bool(flash_attention, "flash_attention")
    if a % t:
        raise ArgumentError(f"num_attention_heads={a} is not divisible by tp={t}")
    if s % cp:
        raise ArgumentError(f"seq_length={s} is not divisible by cp={cp}")
    s //= cp                                   # each context-parallel rank holds s/cp tokens
    if sp and s % t:
        raise ArgumentError(f"seq_length={s * cp} / cp={cp} = {s} tokens is not divisible by "
                            f"tp={t}, as sequence parallelism needs")
    sbh = Fraction(s * b * h)
    asb = Fraction(a * s * s * b)              # one attention-score matrix per head, all heads
    if recompute == "full":
        # only the layer input is kept: 2·s·b·h bytes at 2-byte activations
        tensors, masks = (sbh / t if sp else sbh), Fraction(0)
    else:
        if sp:
            # SP shards the layer norms and dropouts too: everything divides by t
            tensors, masks = 16 * sbh / t, 2 * sbh / t
        else:
            # layer-norm inputs, QKV and MLP inputs and the two dropout masks are replicated
            tensors, masks = 4 * sbh + 12 * sbh / t, 2 * sbh
        if recompute == "none" and not flash_attention:
            # softmax output and dropout output (2-byte), attention-dropout mask (1-byte)
            tensors += 2 * asb / t
            masks += asb / t
    per_layer = dtype_bytes * tensors + MASK_BYTES * masks
    return math.ceil(num_layers * per_layer)


# --------------------------------------------------------------------------- buffers


def communication_buffer_bytes(*, ddp_gradient_bytes: int = 0,
                               gradient_as_bucket_view: bool = False,
                               zero3_layer_parameters: int = 0, zero3_live_layers: int = 2,
                               zero3_gradient_parameters: int | None = None,
                               param_bytes=2, grad_bytes=2, moe_tokens: int = 0,
                               moe_top_k: int = 1, moe_capacity_factor=1.0,
                               moe_hidden_size: int = 0, dtype_bytes=2) -> dict:
    """Memory the collectives of a step need beyond the model states and activations.

    - **DDP buckets** (``ddp_buckets``): torch's ``Reducer::initialize_buckets``
      (torch/csrc/distributed/c10d/reducer.cpp) allocates one flat ``gradients`` tensor for
      *every* bucket when DDP is built, and copies each ``.grad`` into it before the bucket's
      all-reduce. ``bucket_cap_mb`` (25 MiB by default; the first bucket 1 MiB) sets the size
      of each bucket, not their total, so the buckets add one more copy of the rank's gradients:
      ``ddp_gradient_bytes``. With ``gradient_as_bucket_view=True`` the ``.grad`` tensors are
      views into the buckets and this copy disappears (the torch documentation: the saving
      equals the total gradient size; PR #41954). Megatron's DDP, whose gradients live in a
      contiguous buffer, is the ``gradient_as_bucket_view=True`` case.
    - **ZeRO-3 / FSDP gathers** (``zero3_gather``): before a layer runs, its weights are
      all-gathered to full size into a fresh buffer, and the next layer's gather is prefetched
      while it computes; FSDP's ``limit_all_gathers`` keeps at most two units unsharded (the
      computing one and the prefetched one; torch's FSDP documentation), DeepSpeed bounds them with ``stage3_max_live_parameters``. In backward each
      layer's full-size gradient exists until its reduce-scatter. So
      ``zero3_live_layers · zero3_layer_parameters · param_bytes +
      zero3_gradient_parameters · grad_bytes`` (the gradient of one layer unless more stay
      unsharded: a pipeline that defers FSDP's reduce-scatter to the last micro-batch keeps
      the stage's).
    - **MoE all-to-all** (``moe_all_to_all``): the dispatch sends each of the rank's T =
      ``moe_tokens`` tokens to its k = ``moe_top_k`` experts; with capacity factor c each of E
      experts takes at most c·T·k/E tokens (GShard §2.2, Switch Transformer §2.1), so the send
      buffer holds c·k·T rows of h = ``moe_hidden_size`` values and the receive buffer as many:
      2·c·k·T·h·dtype_bytes. The combine all-to-all reuses the same shapes; the expert inputs
      kept for backward are activations, not counted here.

    Args:
        ddp_gradient_bytes: bytes of this rank's gradients that DDP all-reduces (>= 0).
        gradient_as_bucket_view: DDP's option of that name.
        zero3_layer_parameters: parameters of the largest layer ZeRO-3 gathers (before
            sharding; >= 0; 0 when ZeRO-3 is off).
        zero3_live_layers: full-size layers alive at once (>= 1; 2 = current + prefetched).
        zero3_gradient_parameters: parameters whose full-size gradients are alive at once
            (>= 0; default ``zero3_layer_parameters``).
        param_bytes, grad_bytes: bytes per gathered weight and per unsharded gradient.
        moe_tokens: tokens this rank routes per MoE layer and micro-batch (>= 0; 0 when there
            is no MoE).
        moe_top_k: experts per token k (>= 1).
        moe_capacity_factor: c (real > 0; GShard's and Switch's 1.0-2.0).
        moe_hidden_size: values per token row (the model's hidden size; >= 0).
        dtype_bytes: bytes per value of a dispatched token (real > 0).

    Returns:
        ``{"ddp_buckets": int, "zero3_gather": int, "moe_all_to_all": int}`` in bytes.

    Raises:
        ArgumentError: a negative size, a count below its minimum.
        ArgumentTypeError: a wrong type.
    """
    ddp_gradient_bytes = check_int(ddp_gradient_bytes, "ddp_gradient_bytes", 0)
    gradient_as_bucket_view = _check_bool(gradient_as_bucket_view, "gradient_as_bucket_view")
    zero3_layer_parameters = check_int(zero3_layer_parameters, "zero3_layer_parameters", 0)
    zero3_live_layers = check_int(zero3_live_layers, "zero3_live_layers", 1)
    zero3_gradient_parameters = (zero3_layer_parameters if zero3_gradient_parameters is None
                                 else check_int(zero3_gradient_parameters,
                                                "zero3_gradient_parameters", 0))
    param_bytes = _check_real(param_bytes, "param_bytes")
    grad_bytes = _check_real(grad_bytes, "grad_bytes")
    moe_tokens = check_int(moe_tokens, "moe_tokens", 0)
    moe_top_k = check_int(moe_top_k, "moe_top_k", 1)
    moe_capacity_factor = _check_real(moe_capacity_factor, "moe_capacity_factor", positive=True)
    moe_hidden_size = check_int(moe_hidden_size, "moe_hidden_size", 0)
    dtype_bytes = _check_real(dtype_bytes, "dtype_bytes", positive=True)
    rows = math.ceil(Fraction(moe_capacity_factor) * moe_top_k * moe_tokens)
    return {
        "ddp_buckets": 0 if gradient_as_bucket_view else ddp_gradient_bytes,
        "zero3_gather": (_bytes(zero3_live_layers * zero3_layer_parameters, param_bytes)
                         + _bytes(zero3_gradient_parameters, grad_bytes)),
        "moe_all_to_all": 2 * _bytes(rows * moe_hidden_size, dtype_bytes),
    }


# --------------------------------------------------------------------------- breakdown


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one rank needs at its peak, by kind (all ``int`` >= 0).

    Attributes:
        weights, gradients, optimizer: model states after ZeRO sharding.
        activations: activations of the in-flight micro-batches.
        communication: buffers of the collectives (DDP buckets, ZeRO-3 gathers, all-to-all).
    """

    weights: int
    gradients: int
    optimizer: int
    activations: int
    communication: int = 0

    def __post_init__(self):
        for name in ("weights", "gradients", "optimizer", "activations", "communication"):
            check_int(getattr(self, name), name, 0)

    @property
    def total(self) -> int:
        """The sum of every kind, bytes."""
        return (self.weights + self.gradients + self.optimizer + self.activations
                + self.communication)

    def fits(self, gpu_memory_bytes) -> bool:
        """Whether :attr:`total` is at most ``gpu_memory_bytes`` (a real > 0, bytes).

        Raises:
            ArgumentError, ArgumentTypeError: ``gpu_memory_bytes`` not a real > 0.
        """
        return self.total <= _check_real(gpu_memory_bytes, "gpu_memory_bytes", positive=True)

    def to_dict(self) -> dict:
        """The five kinds and ``total``, bytes (a JSON-ready dict of ints)."""
        return {**asdict(self), "total": self.total}


def breakdown(*, num_parameters: int, dp: int = 1, zero_stage: int = 0, seq_length: int,
              micro_batch_size: int, hidden_size: int, num_attention_heads: int, num_layers: int,
              tp: int = 1, sp: bool = False, cp: int = 1, recompute: str = "none",
              schedule: str = "1f1b", pp: int = 1, stage: int = 0, num_micro_batches: int = 1,
              virtual_stages: int = 1, param_bytes=2, grad_bytes=2, optimizer_bytes=12,
              dtype_bytes=2, communication: int | Mapping[str, int] = 0,
              flash_attention: bool = False) -> MemoryBreakdown:
    """One rank's memory: :func:`model_state_bytes` + :func:`activation_bytes` ×
    :func:`in_flight_micro_batches` + the communication buffers.

    Args:
        num_parameters: parameters this rank holds before data-parallel sharding.
        num_layers: transformer layers on this rank's pipeline stage (all its model chunks).
        communication: bytes of communication buffers, or the dict
            :func:`communication_buffer_bytes` returns (its values are summed).
        The others: as in :func:`model_state_bytes`, :func:`activation_bytes` and
            :func:`in_flight_micro_batches`.

    Returns:
        A :class:`MemoryBreakdown`; activations are rounded up to whole bytes.

    Raises:
        ArgumentError, ArgumentTypeError: as the functions it calls; ``communication`` not a
            byte count or a mapping of byte counts.
    """
    states = model_state_bytes(num_parameters, dp=dp, zero_stage=zero_stage,
                               param_bytes=param_bytes, grad_bytes=grad_bytes,
                               optimizer_bytes=optimizer_bytes)
    per_micro_batch = activation_bytes(
        seq_length=seq_length, micro_batch_size=micro_batch_size, hidden_size=hidden_size,
        num_attention_heads=num_attention_heads, num_layers=num_layers, tp=tp, sp=sp, cp=cp,
        recompute=recompute, dtype_bytes=dtype_bytes, flash_attention=flash_attention)
    in_flight = in_flight_micro_batches(schedule=schedule, pp=pp, stage=stage,
                                        num_micro_batches=num_micro_batches,
                                        virtual_stages=virtual_stages)
    if isinstance(communication, Mapping):
        buffers = sum(check_int(value, f"communication[{key!r}]", 0)
                      for key, value in communication.items())
    else:
        buffers = check_int(communication, "communication", 0)
    return MemoryBreakdown(
        weights=states["weights"], gradients=states["gradients"], optimizer=states["optimizer"],
        # in_flight is a multiple of 1/v: exact as a Fraction
        activations=math.ceil(per_micro_batch * Fraction(in_flight).limit_denominator(1 << 20)),
        communication=buffers)
