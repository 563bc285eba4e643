"""The compute of one micro-batch through one PP stage, kernel by kernel.

Every operation of a transformer layer on one rank (Megatron-LM's tensor parallelism: QKV and
the MLP's first GEMM column-parallel, the attention output and the MLP's second GEMM
row-parallel, Shoeybi et al. 2019 §3; sequence parallelism runs the norms and residual adds on
``s/t`` tokens, Korthikanti et al. 2022 §4.2.2), timed by :mod:`ringccl.planner.kernels`:

=================== ========================================= ===================================
operation           forward                                   backward
=================== ========================================= ===================================
each linear layer   GEMM [T, k]·[k, n]                         data gradient [T, n]·[n, k] and
                                                               weight gradient [k, T]·[T, n]
                                                               (fp32 accumulation: 4-byte output)
bias (where the                                                the bias gradient, a column sum of
layer has one)                                                 the output gradient: read T·n
                                                               (row-parallel: T_r·h); none under
                                                               Transformer Engine (fused)
attention, flash    FlashAttention forward                    its backward (2.5 × the FLOPs)
attention, unfused  QKᵀ and P·V batched GEMMs; the fused       four batched GEMMs; softmax and
(Megatron 2021-22)  scale-mask-softmax and dropout on the      dropout backward
                    a/t · b · s² scores (memory-bound; the
                    causal kernel reads the lower triangle,
                    else an fp32 fallback: :mod:`.softmax`;
                    at :data:`~.gpus.SCORE_PASS_EFFICIENCY`
                    of HBM bandwidth)
norms               read + write T_r·h                         read x and dy, write dx
residual add        read 2, write 1 × T_r·h                    read + write; and the gradient
                                                               sum where the residual forks
                                                               (autograd adds the two branches'
                                                               gradients): read 2, write 1
activation          GeLU: read + write T·I/t; SwiGLU: read 2,  GeLU: 3 passes; SwiGLU: 5
                    write 1
rotary (RoPE)       read + write q and k                       the same
MoE                 router GEMM, permute and unpermute         their backward
                    (read + write T·k·h), each expert's GEMMs
                    on its tokens ``T·k·ep/E`` (one grouped
                    launch), shared experts as a dense MLP
FP8 recipes         casts of each GEMM's input and weight      casts of each output gradient
=================== ========================================= ===================================

``T = b·s/c`` tokens per rank, ``T_r = T/t`` with sequence parallelism (else T), 2-byte
activations. The residual stream forks twice per layer (into a norm and around its block), so
the backward sums two gradients into the stream twice per layer (torch's
``torch/csrc/autograd/input_buffer.cpp`` ``InputBuffer::add``: a second gradient arriving for
an input is added to the first). The first stage adds the embedding lookup, the last the final
norm, the LM head GEMM (BF16 in every recipe) and the vocabulary-parallel cross-entropy, pass
by pass as Megatron's code runs it (:data:`CROSS_ENTROPY_BYTES`: 38 bytes per logit forward,
14 backward). Recompute adds to the backward what it recomputes: ``full`` the whole
layer's forward, ``selective`` the attention core's forward (Korthikanti et al. 2022 §5).

Once per step (:func:`optimizer_seconds`): under a dated Megatron-LM preset, its optimizer's
passes one by one (:mod:`.optimizer_passes`: the gradient buffer zeroed, the gradients copied
to fp32 and unscaled where they need it, their norm and clipping, FusedAdam, the fp32 weights
copied back: 50 bytes per parameter with bf16); elsewhere the Adam step over the rank's sharded
fp32 states (read parameter, gradient, two moments; write three and the BF16 copy: 30 bytes per
parameter) and the gradients' cast to fp32 (6 bytes per parameter held); and, with Transformer
Engine's FP8, the weights' casts (cached across the step's micro-batches).

Which models use RoPE: gated-MLP (Llama-family) and multi-head-latent-attention models; GPT-3's
learned positions cost one add on the first stage, folded into the embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..caches import memoize
from .frameworks import REDUCE_DTYPES
from . import gpus
from .gpus import GPU
from .kernels import (causal_pairs_flops, flash_attention_seconds, gemm_seconds,
                      memory_seconds)
from .model import ModelConfig
from .optimizer_passes import MEGATRON_ERAS, megatron_optimizer_bytes
from .parallel_dims import ParallelDims
from .precision import Precision, precision_recipe
from .softmax import MAX_SEQ, fused_max_seq, fused_softmax_available, softmax_bytes

__all__ = ["Op", "LayerCompute", "StageCompute", "CROSS_ENTROPY_BYTES", "layer_compute",
           "head_compute", "embedding_compute", "optimizer_seconds",
           "gradient_accumulation_seconds", "stage_compute", "compute_precision",
           "bias_grad_fused", "TRANSFORMER_ENGINE_FRAMEWORKS"]

_ACT = 2.0  # bytes per activation element (BF16)

#: HBM bytes per logit of the vocabulary-parallel cross-entropy, (forward, backward), as
#: Megatron's unfused code makes its passes (Megatron-Core r0.8.0
#: ``megatron/core/tensor_parallel/cross_entropy.py``, the default: ``--cross-entropy-loss-
#: fusion`` is off; Megatron-LM 2021 ``megatron/mpu/cross_entropy.py`` with ``output.float()``
#: in ``megatron/model/gpt_model.py``, the same passes). Forward: the BF16 logits cast to fp32
#: (read 2, write 4), the max over the vocabulary (read 4), the max subtracted in place (read
#: 4, write 4), ``exp`` in place (4 + 4), the sum (4), the division in place to the softmax
#: kept for the backward (4 + 4): 38. Backward: the softmax scaled in place by the output
#: gradient (4 + 4), its cast back to BF16 (read 4, write 2): 14. The same count serves the
#: other frameworks (torch's ``F.cross_entropy`` under autocast: a cast, the log-softmax and
#: its backward, about as many passes).
CROSS_ENTROPY_BYTES = (38.0, 14.0)


@dataclass(frozen=True)
class Op:
    """One operation of a layer on one rank, for one micro-batch.

    Attributes:
        name: e.g. "qkv", "attention", "mlp_down", "norm".
        kind: "gemm", "attention" or "memory".
        forward_s, backward_s: seconds.
        flops: forward FLOPs (0 for a memory-bound operation).
        core: part of the attention core (what selective recompute re-runs).
        expert: a routed expert's GEMM (what the EP all-to-all overlaps).
        column: a column-parallel linear layer (its input gradient is reduced over TP).
        weight_grad_s: of ``backward_s``, the weight-gradient GEMM's seconds.
    """

    name: str
    kind: str
    forward_s: float
    backward_s: float
    flops: float = 0.0
    core: bool = False
    expert: bool = False
    column: bool = False
    weight_grad_s: float = 0.0


@dataclass(frozen=True)
class LayerCompute:
    """One layer (or the embedding / head) on one rank, one micro-batch.

    Attributes:
        ops: its :class:`Op` rows.
        weight_cast_s: FP8 casts of its weights, once per step (Transformer Engine's cache) or
            already in the ops (torchao: every micro-batch).
    """

    ops: tuple[Op, ...]
    weight_cast_s: float = 0.0

    @property
    def forward(self) -> float:
        return sum(o.forward_s for o in self.ops)

    @property
    def backward(self) -> float:
        return sum(o.backward_s for o in self.ops)

    @property
    def core_forward(self) -> float:
        """The attention core's forward (selective recompute re-runs it)."""
        return sum(o.forward_s for o in self.ops if o.core)

    @property
    def expert_forward(self) -> float:
        """The routed experts' forward GEMMs."""
        return sum(o.forward_s for o in self.ops if o.expert)

    @property
    def flops(self) -> float:
        return sum(o.flops for o in self.ops)

    @property
    def column_weight_grad(self) -> float:
        """The column-parallel layers' weight-gradient GEMMs (what their input-gradient
        reduction hides behind)."""
        return sum(o.weight_grad_s for o in self.ops if o.column)

    @property
    def column_input_grad(self) -> float:
        """The column-parallel layers' input-gradient GEMMs (what SP's re-gather of their
        input hides behind)."""
        return sum(o.backward_s - o.weight_grad_s for o in self.ops if o.column)

    def recompute(self, mode: str) -> float:
        """What recompute ``mode`` ("none", "selective", "full") adds to the backward."""
        return {"none": 0.0, "selective": self.core_forward, "full": self.forward}[mode]

    def to_dict(self) -> dict:
        return {"forward_s": self.forward, "backward_s": self.backward,
                "weight_cast_s": self.weight_cast_s,
                "ops": [dict(vars(o)) for o in self.ops]}


class _Builder:
    """Collects a layer's ops: GEMMs timed together (one vectorised call), memory passes."""

    def __init__(self, gpu: GPU, prec: Precision, tokens: float, bias_fused: bool = False):
        self.gpu, self.prec, self.tokens = gpu, prec, tokens
        self.bias_fused = bias_fused
        self.ops: list[Op] = []
        self.weight_cast = 0.0

    def memory(self, name: str, fwd_bytes: float, bwd_bytes: float, core: bool = False):
        self.ops.append(Op(name, "memory", float(memory_seconds(fwd_bytes, self.gpu)),
                           float(memory_seconds(bwd_bytes, self.gpu)), core=core))

    def linear(self, name: str, n: float, k: float, *, m: float | None = None, batch: int = 1,
               fp8_ok: bool = True, expert: bool = False, column: bool = False,
               bias: bool = False, bias_tokens: float | None = None):
        """A linear layer ``[m, k]·[k, n]`` (m = the layer's tokens unless given), ``batch`` of
        them in one grouped launch: forward, data-gradient and weight-gradient GEMMs, and the
        recipe's casts; ``column``: column-parallel (Shoeybi et al. 2019 §3).

        ``bias``: the layer has a bias, whose gradient is the output gradient summed over the
        tokens, one reduction reading ``[bias_tokens, n]`` (default m) and writing n values
        (:meth:`bias_grad`)."""
        m = self.tokens if m is None else m
        fp8 = fp8_ok and self.prec.fp8_gemms
        ib = 1.0 if fp8 else 2.0
        g = self.gpu
        fwd = gemm_seconds(m, n, k, g, fp8=fp8, batch=batch, in_bytes=ib)
        dgrad = gemm_seconds(m, k, n, g, fp8=fp8, batch=batch, in_bytes=ib)
        wgrad = gemm_seconds(k, n, m, g, fp8=fp8, batch=batch, in_bytes=ib, out_bytes=4.0)
        fwd, bwd = float(fwd), float(dgrad + wgrad)
        if fp8:
            act = float(memory_seconds(self.prec.cast_bytes(batch * m * k, True), g))
            grad = float(memory_seconds(self.prec.cast_bytes(batch * m * n, True), g))
            weight = float(memory_seconds(self.prec.cast_bytes(batch * k * n, True), g))
            fwd += act + (weight if self.prec.weight_cast_per_micro_batch else 0.0)
            bwd += grad
            if not self.prec.weight_cast_per_micro_batch:
                self.weight_cast += weight
        self.ops.append(Op(name, "gemm", fwd, bwd, 2.0 * batch * m * n * k, expert=expert,
                           column=column, weight_grad_s=float(wgrad)))
        if bias:
            self.bias_grad(name, m if bias_tokens is None else bias_tokens, n, batch)

    def bias_grad(self, name: str, tokens: float, n: float, batch: int = 1):
        """The bias gradient of linear layer ``name`` (``batch`` of them: grouped experts): the
        output gradient ``[tokens, n]`` (2-byte) summed over the tokens, one column-sum
        reduction (read ``tokens·n·2``, write ``n·2``), a backward pass of its own: Megatron-LM's ``megatron/mpu/layers.py``
        ``LinearWithGradAccumulationAndAsyncCommunication.backward`` (2022:
        ``grad_output.sum(dim=0)``), autograd's ``sum_to_size`` of a broadcast bias (the
        ``skip_bias_add`` layers' bias added in ``bias_gelu`` / ``bias_dropout_add``; torch's
        ``linear`` backward). None where Transformer Engine fuses it (:attr:`bias_fused`:
        ``transformer_engine/pytorch/module/linear.py`` ``_Linear.backward``, the bias
        gradient from the weight-gradient GEMM's epilogue, or ``cast_transpose_bgrad`` under
        FP8)."""
        if self.bias_fused:
            return
        self.memory(f"{name}_bias_grad", 0.0, batch * (tokens * n + n) * _ACT)

    def build(self) -> LayerCompute:
        return LayerCompute(tuple(self.ops), self.weight_cast)


def _attention(b: _Builder, model: ModelConfig, heads: int, batch: int, seq: int, cp: int,
               kernel: str, max_seq: int = MAX_SEQ):
    """The attention core of ``heads`` heads (per rank) × ``batch`` sequences of ``seq``
    tokens, the queries split over ``cp`` ranks (causal); unfused, the softmax's passes as
    Megatron's fused causal kernel or its fp32 fallback makes them (:mod:`.softmax`, the
    kernel taking keys up to ``max_seq``)."""
    g, dq, dv = b.gpu, model.qk_head_dim, model.value_head_dim
    bh = batch * heads
    if kernel in ("flash", "flash2"):
        # with CP each ring step's kernel sees seq/cp queries and keys (its measured rate's
        # length); the whole causal square's FLOPs shared over the cp ranks
        def priced(window: int) -> tuple[float, float, float]:
            fwd = flash_attention_seconds(bh, seq, seq, dq, dv, True, g, kernel=kernel,
                                          length=seq // cp, window=window) / cp
            bwd = flash_attention_seconds(bh, seq, seq, dq, dv, True, g, backward=True,
                                          kernel=kernel, length=seq // cp, window=window) / cp
            # half the square's (query, key) pairs; with a window, the pairs it keeps
            pairs = (2.0 * (dq + dv) * seq * seq / 2 if not window else
                     causal_pairs_flops(seq, seq, dq, dv, 0, window))
            return fwd, bwd, bh * pairs / cp

        fwd, bwd, flops = priced(0)
        if model.windowed_layers:
            # the layer stands for all L: sliding-window layers in their share
            share = model.windowed_layers / model.num_hidden_layers
            wf, wb, wflops = priced(model.sliding_window)
            fwd, bwd = fwd + share * (wf - fwd), bwd + share * (wb - bwd)
            flops += share * (wflops - flops)
        b.ops.append(Op("attention", "attention", fwd, bwd, flops, core=True))
        return
    # Megatron's core attention: baddbmm QKᵀ, fused scale-mask-softmax, dropout, bmm P·V,
    # the whole s × s square (no causal skipping)
    sq = seq // cp
    scores = bh * sq * seq
    qk = gemm_seconds(sq, seq, dq, g, batch=bh)
    pv = gemm_seconds(sq, dv, seq, g, batch=bh)
    qk_bwd = gemm_seconds(sq, dq, seq, g, batch=bh) + gemm_seconds(seq, dq, sq, g, batch=bh)
    pv_bwd = gemm_seconds(sq, seq, dv, g, batch=bh) + gemm_seconds(seq, dv, sq, g, batch=bh)
    b.ops.append(Op("attention_scores", "gemm", float(qk), float(qk_bwd),
                    2.0 * scores * dq, core=True))
    fused = fused_softmax_available(seq, heads, batch, max_seq=max_seq,
                                    float16=model.dtype not in ("float32", "fp32"))
    if cp > 1:   # no unfused-era code splits the sequence: every score read and written
        fwd_bytes, bwd_bytes = 2 * _ACT, 3 * _ACT
    else:
        fwd_bytes, bwd_bytes = softmax_bytes(seq, fused)
    # the score passes run at SCORE_PASS_EFFICIENCY of HBM bandwidth, never faster than a
    # streaming kernel: their bytes count that much more against memory_seconds' rate
    slow = scores * max(1.0, g.memory_efficiency / gpus.SCORE_PASS_EFFICIENCY)
    b.memory("softmax" if fused or cp > 1 else "softmax_fp32_fallback", slow * fwd_bytes,
             slow * bwd_bytes, core=True)
    b.memory("attention_dropout", slow * (2 * _ACT + 1), slow * (2 * _ACT + 1), core=True)
    b.ops.append(Op("attention_values", "gemm", float(pv), float(pv_bwd),
                    2.0 * scores * dv, core=True))


def _mla_projections(b: _Builder, model: ModelConfig, tp: int):
    """Multi-head latent attention's projections (DeepSeek-V2 §2.1): the down-projections
    replicated on every TP rank, the up-projections and the output split by heads."""
    h, nq = model.hidden_size, model.num_attention_heads
    dq, rope = model.qk_head_dim, model.qk_rope_head_dim
    if model.q_lora_rank:
        b.linear("q_down", model.q_lora_rank, h)
        b.memory("q_norm", 2 * b.tokens * model.q_lora_rank * _ACT,
                 3 * b.tokens * model.q_lora_rank * _ACT)
        b.linear("q_up", nq * dq / tp, model.q_lora_rank, column=True)
    else:
        b.linear("q", nq * dq / tp, h, column=True)
    b.linear("kv_down", model.kv_lora_rank + rope, h)
    b.memory("kv_norm", 2 * b.tokens * model.kv_lora_rank * _ACT,
             3 * b.tokens * model.kv_lora_rank * _ACT)
    b.linear("kv_up", nq * (model.qk_nope_head_dim + model.v_head_dim) / tp, model.kv_lora_rank,
             column=True)


def _mlp(b: _Builder, model: ModelConfig, width: float, name: str,
         region: float | None = None, **gemm):
    """A dense (or shared-expert) MLP of ``width`` columns per rank; ``region``: the tokens
    the row-parallel output's bias is added on (``s/t`` with sequence parallelism)."""
    gated = model.gated_mlp
    bias = model.mlp_bias
    b.linear(f"{name}_up", (2 if gated else 1) * width, model.hidden_size, column=True,
             bias=bias, **gemm)
    m = gemm.get("m", b.tokens) * gemm.get("batch", 1)
    fwd, bwd = (3, 5) if gated else (2, 3)
    b.memory(f"{name}_activation", fwd * m * width * _ACT, bwd * m * width * _ACT)
    b.linear(f"{name}_down", model.hidden_size, width, bias=bias, bias_tokens=region, **gemm)


def _moe(b: _Builder, model: ModelConfig, tp: int, ep: int, routed_tokens: float):
    """A MoE layer's router, token permutation and experts (module doc)."""
    h, E, k = model.hidden_size, model.num_local_experts, model.num_experts_per_tok
    b.linear("router", E, h, m=routed_tokens, fp8_ok=False)
    moved = routed_tokens * k * h * _ACT
    b.memory("permute", 2 * moved, 2 * moved)
    local = max(1, E // ep)
    per_expert = b.tokens * k * ep / E
    _mlp(b, model, model.expert_intermediate_size / tp, "experts", m=per_expert, batch=local,
         expert=True)
    b.memory("unpermute", 2 * moved, 2 * moved)
    if model.n_shared_experts:
        _mlp(b, model, model.n_shared_experts * model.shared_intermediate_size / tp,
             "shared_expert", region=routed_tokens)


@memoize(maxsize=4096)
def layer_compute(model: ModelConfig, moe: bool, tp: int, sp: bool, cp: int, ep: int,
                  micro_batch_size: int, attention: str, precision: str, gpu: GPU,
                  bias_grad_fused: bool = False, softmax_max_seq: int = MAX_SEQ) -> LayerCompute:
    """One transformer layer's operations on one rank for one micro-batch (module doc).

    Args:
        model: the model. moe: a MoE layer (else dense).
        tp, sp, cp, ep: the rank's parallel degrees. micro_batch_size: b.
        attention: "flash", "flash2" or "unfused". precision: a recipe of
            :data:`~ringccl.planner.precision.PRECISIONS`. gpu: the GPU.
        bias_grad_fused: the linear layers' bias gradients come out of their GEMMs
            (Transformer Engine, :func:`bias_grad_fused`), else a reduction pass each.
        softmax_max_seq: the longest key sequence Megatron's fused softmax takes (unfused
            attention, :mod:`.softmax`).
    """
    prec = precision_recipe(precision)
    s, h = model.seq_length, model.hidden_size
    tokens = micro_batch_size * s / cp
    region = tokens / tp if sp else tokens      # tokens of the norms and residual adds
    b = _Builder(gpu, prec, tokens, bias_grad_fused)
    nq, nkv, d = model.num_attention_heads, model.num_key_value_heads, model.head_dim
    b.memory("input_norm", 2 * region * h * _ACT, 3 * region * h * _ACT)
    if model.mla:
        _mla_projections(b, model, tp)
    else:
        b.linear("qkv", (nq + 2 * nkv) * d / tp, h, column=True, bias=model.qkv_bias)
    if model.gated_mlp or model.mla:
        rope = model.qk_rope_head_dim if model.mla else d
        rot = 2 * tokens * (nq + (1 if model.mla else nkv)) * rope / tp * _ACT
        b.memory("rotary", rot, rot)
    _attention(b, model, nq // tp, micro_batch_size, s, cp, attention, softmax_max_seq)
    b.linear("attention_out", h, nq * model.value_head_dim / tp,
             bias=model.attention_out_bias, bias_tokens=region)
    b.memory("residual_add", 3 * region * h * _ACT, 2 * region * h * _ACT)
    b.memory("residual_grad_sum", 0.0, 3 * region * h * _ACT)
    b.memory("post_attention_norm", 2 * region * h * _ACT, 3 * region * h * _ACT)
    if moe:
        _moe(b, model, tp, ep, region)
    else:
        _mlp(b, model, model.intermediate_size / tp, "mlp", region=region)
    b.memory("residual_add_2", 3 * region * h * _ACT, 2 * region * h * _ACT)
    b.memory("residual_grad_sum_2", 0.0, 3 * region * h * _ACT)
    return b.build()


@memoize(maxsize=1024)
def head_compute(model: ModelConfig, tp: int, sp: bool, cp: int, micro_batch_size: int,
                 gpu: GPU, bias_grad_fused: bool = False) -> LayerCompute:
    """The last stage's final norm, LM head GEMM (BF16) and vocabulary-parallel
    cross-entropy on one rank, one micro-batch (``bias_grad_fused``: as
    :func:`layer_compute`'s, for an LM head with a bias)."""
    tokens = micro_batch_size * model.seq_length / cp
    region = tokens / tp if sp else tokens
    h = model.hidden_size
    b = _Builder(gpu, precision_recipe("bf16"), tokens, bias_grad_fused)
    b.memory("final_norm", 2 * region * h * _ACT, 3 * region * h * _ACT)
    vocab = -(-model.vocab_size // tp)
    b.linear("lm_head", vocab, h, bias=model.lm_head_bias)
    logits = tokens * vocab
    b.memory("cross_entropy", CROSS_ENTROPY_BYTES[0] * logits, CROSS_ENTROPY_BYTES[1] * logits)
    return b.build()


@memoize(maxsize=1024)
def embedding_compute(model: ModelConfig, tp: int, cp: int, micro_batch_size: int,
                      gpu: GPU) -> LayerCompute:
    """The first stage's embedding lookup (read + write T·h) and its gradient's
    scatter-add into an fp32 buffer, one micro-batch."""
    tokens = micro_batch_size * model.seq_length / cp
    nbytes = tokens * model.hidden_size * _ACT
    b = _Builder(gpu, precision_recipe("bf16"), tokens)
    b.memory("embedding", 2 * nbytes, 2 * nbytes + 2 * tokens * model.hidden_size * 4)
    return b.build()


def gradient_accumulation_seconds(parameters: float, dims: ParallelDims, dtype_bytes: int,
                                  gpu: GPU) -> float:
    """One micro-batch's gradient accumulation outside the GEMM: each weight gradient written
    in the training dtype is read again with the accumulated gradient (``reduce_dtype``) and
    the sum written back, ``parameters · (B + 2·B_acc)`` bytes at HBM bandwidth (Megatron-LM
    2021's ``main_grad.add_(grad)`` after every micro-batch, autograd's ``.grad`` accumulation
    from the second; both counted on every micro-batch). None with ``gradient_accumulation_
    fusion`` (the weight-gradient GEMM adds into the fp32 main gradient: Megatron-LM since
    2022, ``wgrad_gemm_accum_fp32``) or where the gradients are sharded before they are
    accumulated (ZeRO-2, ZeRO-3)."""
    if dims.gradient_accumulation_fusion or dims.zero_stage >= 2:
        return 0.0
    acc = REDUCE_DTYPES[dims.reduce_dtype] if dims.reduce_dtype else dtype_bytes
    return float(memory_seconds(parameters * (dtype_bytes + 2 * acc), gpu))


def optimizer_seconds(parameters: float, sharded_parameters: float, gpu: GPU, *,
                      framework: str | None = None, dtype_bytes: int = 2,
                      grad_bytes: int | None = None, loss_scaling: bool = False) -> float:
    """Once per step, the optimizer's HBM passes.

    Under a dated Megatron-LM preset (:data:`~ringccl.planner.optimizer_passes.MEGATRON_ERAS`)
    pass by pass as its ``Float16OptimizerWithFloat16Params.step`` runs them
    (:func:`~ringccl.planner.optimizer_passes.megatron_optimizer_bytes`: e.g. 50 bytes per
    parameter with bf16, 60 with 2021's fp16 ``.grad``), the gradient buffer's zeroing over the
    ``parameters`` the rank holds, the rest over its ``sharded_parameters``. Elsewhere the
    generic count: the gradients' cast to fp32 (6 bytes per parameter held) and the Adam step
    over the sharded fp32 states (read parameter, gradient, two moments, write three and the
    16-bit copy: 30 bytes per sharded parameter).

    Args:
        framework: the plan's framework preset. dtype_bytes: the training dtype's bytes.
        grad_bytes: the gradient buffer's (the ``reduce_dtype``; default ``dtype_bytes``).
        loss_scaling: fp16 training (a grad scaler's unscale pass).
    """
    if framework in MEGATRON_ERAS:
        held, updated = megatron_optimizer_bytes(
            framework, dtype_bytes, dtype_bytes if grad_bytes is None else grad_bytes,
            loss_scaling)
        return float(memory_seconds(held * parameters + updated * sharded_parameters, gpu))
    return float(memory_seconds(6.0 * parameters + 30.0 * sharded_parameters, gpu))


#: frameworks whose linear layers are Transformer Engine's (Megatron-Core's default
#: ``--transformer-impl transformer_engine``, megatron/training/arguments.py)
TRANSFORMER_ENGINE_FRAMEWORKS = ("megatron",)


def bias_grad_fused(framework: str | None, precision: str) -> bool:
    """Whether the linear layers' bias gradients come out of their GEMMs: Transformer Engine's
    ``_Linear.backward`` (``transformer_engine/pytorch/module/linear.py``: the weight-gradient
    GEMM with ``use_bias`` returns the bias gradient from cuBLASLt's epilogue; under FP8
    ``cast_transpose_bgrad``). Transformer Engine runs the linear layers of the current
    Megatron-Core preset (:data:`TRANSFORMER_ENGINE_FRAMEWORKS`) and of the ``fp8-delayed``
    recipe (:mod:`.precision`); elsewhere (Megatron-LM 2021-2022, DeepSpeed, FSDP, torchtitan)
    the bias gradient is a reduction pass of its own (:meth:`_Builder.bias_grad`)."""
    return framework in TRANSFORMER_ENGINE_FRAMEWORKS or precision == "fp8-delayed"


@dataclass(frozen=True)
class StageCompute:
    """One PP stage's compute on one rank (seconds).

    Attributes:
        forward, backward: one micro-batch through the stage (backward with what recompute
            adds).
        layer_forward, layer_backward: its heaviest layer's (a ZeRO-3 gather's window).
        attention_forward: one layer's attention core forward (context parallelism's window).
        expert_forward: one MoE layer's routed experts' forward GEMMs (the all-to-all's window).
        per_step: once per step: the optimizer and the cached FP8 weight casts.
        layers: "dense", "moe", "embedding", "head" -> :class:`LayerCompute` (those present).
        column_weight_grad, column_input_grad: one micro-batch's column-parallel weight- and
            input-gradient GEMMs over the stage's layers (the windows of the asynchronous TP
            backward, ``overlap_dgrad_reduce``).
        gradient_accumulation: of ``backward``, the pass adding one micro-batch's weight
            gradients to the accumulated ones (:func:`gradient_accumulation_seconds`).
    """

    forward: float
    backward: float
    layer_forward: float
    layer_backward: float
    attention_forward: float
    expert_forward: float
    per_step: float
    layers: dict
    column_weight_grad: float = 0.0
    column_input_grad: float = 0.0
    gradient_accumulation: float = 0.0

    def to_dict(self) -> dict:
        return {"forward_s": self.forward, "backward_s": self.backward,
                "per_step_s": self.per_step,
                "layers": {k: v.to_dict() for k, v in self.layers.items()}}


def compute_precision(model: ModelConfig, dims: ParallelDims) -> str:
    """The recipe the GEMMs run in: ``dims.precision``, or ``fp8-tensorwise`` for a model whose
    ``dtype`` is float8 under the default ``bf16`` recipe."""
    if dims.precision == "bf16" and model.dtype in ("float8", "fp8"):
        return "fp8-tensorwise"
    return dims.precision


def stage_compute(model: ModelConfig, dims: ParallelDims, gpu: GPU, *, layers: int,
                  moe_layers: int, first: bool, last: bool, parameters: float,
                  sharded_parameters: float) -> StageCompute:
    """The compute of a stage holding ``layers`` layers (``moe_layers`` of them MoE), the
    embedding (``first``) and the LM head (``last``), whose rank holds ``parameters`` and
    updates ``sharded_parameters`` (module doc)."""
    prec = compute_precision(model, dims)
    fused = bias_grad_fused(dims.framework, prec)
    key = (model, dims.tp, dims.sp, dims.cp, dims.ep, dims.micro_batch_size, dims.attention,
           prec, gpu, fused, fused_max_seq(dims.framework))
    parts, counts = {}, {}
    if layers - moe_layers:
        parts["dense"], counts["dense"] = layer_compute(*key[:1], False, *key[1:]), \
            layers - moe_layers
    if moe_layers:
        parts["moe"], counts["moe"] = layer_compute(*key[:1], True, *key[1:]), moe_layers
    if first:
        parts["embedding"] = embedding_compute(model, dims.tp, dims.cp, dims.micro_batch_size,
                                               gpu)
        counts["embedding"] = 1
    if last:
        parts["head"] = head_compute(model, dims.tp, dims.sp, dims.cp, dims.micro_batch_size,
                                     gpu, fused)
        counts["head"] = 1
    fwd = sum(parts[k].forward * n for k, n in counts.items())
    bwd = sum((parts[k].backward + (parts[k].recompute(dims.recompute)
                                    if k in ("dense", "moe") else 0.0)) * n
              for k, n in counts.items())
    accumulate = gradient_accumulation_seconds(parameters, dims, model.dtype_bytes, gpu)
    bwd += accumulate
    blocks = [parts[k] for k in ("dense", "moe") if k in parts]
    layer_fwd = max((p.forward for p in blocks), default=0.0)
    layer_bwd = max((p.backward + p.recompute(dims.recompute) for p in blocks), default=0.0)
    casts = sum(parts[k].weight_cast_s * n for k, n in counts.items())
    return StageCompute(
        fwd, bwd, layer_fwd, layer_bwd,
        max((p.core_forward for p in blocks), default=0.0),
        parts["moe"].expert_forward if "moe" in parts else 0.0,
        optimizer_seconds(parameters, sharded_parameters, gpu, framework=dims.framework,
                          dtype_bytes=model.dtype_bytes,
                          grad_bytes=(REDUCE_DTYPES[dims.reduce_dtype] if dims.reduce_dtype
                                      else model.dtype_bytes),
                          loss_scaling=model.dtype in ("float16", "fp16")) + casts, parts,
        column_weight_grad=sum(parts[k].column_weight_grad * counts[k] for k in counts),
        column_input_grad=sum(parts[k].column_input_grad * counts[k] for k in counts),
        gradient_accumulation=accumulate)
