"""Precision recipes: which GEMMs run at the FP8 peak, what the casts cost, what stays in BF16
and what travels in FP8.

* ``bf16``: every GEMM at the BF16 peak; weights, activations and gradients 2 bytes.
* ``fp8-delayed``: Transformer Engine's ``DelayedScaling`` (per-tensor scales from an amax
  history, NVIDIA Transformer Engine documentation, "Using FP8 with Transformer Engine"): the
  linear layers' three GEMMs (forward, data gradient, weight gradient) in FP8 (E4M3 forward,
  E5M2 gradients, the ``HYBRID`` format); the cast to FP8 is fused with the amax and with the
  transpose the weight-gradient GEMM needs (``cast_transpose``); the FP8 weight is cached across
  the micro-batches of a step. Attention, the LM head and the embedding stay in BF16.
* ``fp8-tensorwise``: torchao's ``Float8Linear`` with dynamic tensor-wise scales (torchao
  float8 README; torchtitan's ``float8`` converter): the same three GEMMs in FP8; each cast
  reads its BF16 tensor once for the amax and once to cast (unless ``torch.compile`` fuses the
  amax into the producer), and the weight is cast every micro-batch.
* ``fp8-rowwise``: torchao's row-wise scales (one per row of each operand; torchtitan's
  Llama 3 405B preset): as tensor-wise, one amax per row.
* ``fp8-blockwise``: DeepSeek-V3 (arXiv:2412.19437, §3.3.1-3.3.2): activations scaled per
  1 × 128 tile, weights per 128 × 128 block, all three linear GEMMs in FP8 with FP32 promotion
  every 128 elements of K; the embedding, the output head, the MoE gating, the norms and the
  attention in BF16/FP32; the MoE dispatch sent in FP8 and the combine in BF16 (§3.3.3).

A cast of ``e`` BF16 elements reads ``2e`` bytes and writes ``e`` (plus ``e`` more for a
transposed copy); a dynamic scale's separate amax pass reads ``2e`` more.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..args import lookup

__all__ = ["Precision", "PRECISIONS", "precision_recipe"]


@dataclass(frozen=True)
class Precision:
    """One recipe (module doc).

    Attributes:
        name: the recipe's key.
        fp8_gemms: the linear layers' GEMMs run at the FP8 peak with 1-byte operands.
        amax_pass: a separate read of each cast tensor for its scale (dynamic scaling).
        weight_cast_per_micro_batch: the FP8 weight is cast again every micro-batch (torchao)
            rather than once per step (Transformer Engine's cache).
        fp8_dispatch: the MoE dispatch all-to-all carries FP8 (1 byte + scales).
        source: where the recipe is described.
    """

    name: str
    fp8_gemms: bool
    amax_pass: bool = False
    weight_cast_per_micro_batch: bool = False
    fp8_dispatch: bool = False
    source: str = ""

    @property
    def gemm_bytes(self) -> float:
        """Bytes per operand element of the linear layers' GEMMs."""
        return 1.0 if self.fp8_gemms else 2.0

    def cast_bytes(self, elements: float, transpose: bool) -> float:
        """HBM bytes of casting ``elements`` BF16 values to FP8 (0 without FP8 GEMMs)."""
        if not self.fp8_gemms:
            return 0.0
        return elements * (3.0 + (1.0 if transpose else 0.0) + (2.0 if self.amax_pass else 0.0))


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("bf16", False, source="BF16 mixed precision"),
    Precision("fp8-delayed", True, source="NVIDIA Transformer Engine, DelayedScaling "
              "(per-tensor, amax history; cast_transpose fused; FP8 weights cached per step)"),
    Precision("fp8-tensorwise", True, amax_pass=True, weight_cast_per_micro_batch=True,
              source="torchao float8 Float8Linear, dynamic tensor-wise scaling"),
    Precision("fp8-rowwise", True, amax_pass=True, weight_cast_per_micro_batch=True,
              source="torchao float8 Float8Linear, row-wise scaling"),
    Precision("fp8-blockwise", True, fp8_dispatch=True, source="DeepSeek-V3 Technical Report "
              "(arXiv:2412.19437) §3.3: 1x128 activation tiles, 128x128 weight blocks, FP8 "
              "dispatch"),
)}


def precision_recipe(name: str) -> Precision:
    """The recipe ``name`` (a key of :data:`PRECISIONS`).

    Raises:
        ArgumentError: unknown name, listing the recipes.
    """
    return lookup(PRECISIONS, name, "precision", "a recipe")
