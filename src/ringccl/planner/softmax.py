"""The HBM passes of Megatron's scale-mask-softmax over the attention scores (unfused attention).

Megatron-LM's ``FusedScaleMaskSoftmax`` (``megatron/model/fused_softmax.py``) runs a causal
model's scores ``[b, np, sq, sk]`` of one rank (``np`` = heads per rank) through one of two
paths:

* **the fused causal kernel** ``ScaledUpperTriangMaskedSoftmax``
  (``megatron/fused_kernels/scaled_upper_triang_masked_softmax.h``): row ``i`` of each score
  matrix reads only its first ``i + 1`` elements (``local_seq = blockIdx.x + 1``; the loads are
  guarded by ``element_index < local_seq``) and writes the whole row (zeros above the
  diagonal); its backward reads the gradient and the saved probabilities over the same lower
  triangle and writes the whole row. With 2-byte scores: forward ``2·f + 2`` bytes per score,
  backward ``4·f + 2``, ``f = (s + 1)/(2·s)`` the lower triangle's share of the square
  (:func:`softmax_bytes`);
* **the fallback**, where the kernel's constraints fail: the scores cast to fp32
  (``softmax_in_fp32``, forced on by the default ``--apply-query-key-layer-scaling``,
  ``megatron/model/transformer.py``; read 2, write 4), scaled (``input * self.scale``, read 4
  write 4), masked in place (``attention_mask_func``: ``masked_fill_``, read 4 write 4),
  ``torch.nn.Softmax`` (read 4 write 4) and cast back (read 4 write 2): 36 bytes per score
  forward; autograd's backward of the same five ops (the cast to 4 bytes, read 2 write 4;
  softmax's backward reading the gradient and the output, writing 4; the mask's and the
  scale's, read 4 write 4 each; the cast to 2 bytes, read 4 write 2): 40
  (:data:`FALLBACK_BYTES`; the mask itself, ``[b, 1, s, s]`` broadcast over the heads, not
  counted).

The constraints (:func:`fused_softmax_available`), as the code checks them: 2-byte input,
``16 < sk <= max_seq`` (2048 at Megatron-LM aed2f75e of April 2021, SC21's code; 4096 from
2755bcb8 of 2022 to 285068c8 of 2023), ``sq % 4 == 0`` and ``b·np % 4 == 0`` (the 2022 code
also ``sk % 4 == 0`` and, for the causal kernel, ``b·np`` a multiple of the kernel's batches
per block, ``get_batch_per_block``: 4 above 128 keys, 8 at 128 and below).
"""

from __future__ import annotations

__all__ = ["FALLBACK_BYTES", "MAX_SEQ", "SOFTMAX_MAX_SEQ", "fused_max_seq",
           "fused_softmax_available", "softmax_bytes"]

#: HBM bytes per score of the unfused fp32 fallback, (forward, backward) (module doc)
FALLBACK_BYTES = (36.0, 40.0)

#: the longest key sequence the fused kernels take (Megatron-LM 2755bcb8 and 285068c8
#: ``FusedScaleMaskSoftmax.is_kernel_available``)
MAX_SEQ = 4096
#: ... where a framework preset's code took another (module doc)
SOFTMAX_MAX_SEQ = {"megatron-2021": 2048}


def fused_max_seq(framework: str | None) -> int:
    """The longest key sequence the fused softmax of ``framework``'s code takes."""
    return SOFTMAX_MAX_SEQ.get(framework, MAX_SEQ)


def fused_softmax_available(seq: int, heads_per_rank: int, batch: int, *,
                            max_seq: int = MAX_SEQ, float16: bool = True) -> bool:
    """Whether Megatron's fused causal softmax runs for ``batch`` sequences of ``seq`` tokens
    and ``heads_per_rank`` heads (self-attention, ``sq = sk = seq``), as the code of the
    ``max_seq`` era checks it (module doc): Megatron-LM aed2f75e's ``custom_kernel_constraint``
    (``max_seq`` 2048), 2755bcb8's ``is_kernel_available`` (4096)."""
    attn_batches = batch * heads_per_rank
    if not (float16 and 16 < seq <= max_seq and seq % 4 == 0 and attn_batches % 4 == 0):
        return False
    if max_seq > 2048:   # the 2022 code's batches per block
        return attn_batches % (8 if seq <= 128 else 4) == 0
    return True


def softmax_bytes(seq: int, causal_kernel: bool = True) -> tuple[float, float]:
    """HBM bytes per score of the softmax, (forward, backward): the fused causal kernel's
    (reads over the lower triangle, writes the whole square; module doc), else the fp32
    fallback's (:data:`FALLBACK_BYTES`)."""
    if not causal_kernel:
        return FALLBACK_BYTES
    f = (seq + 1) / (2 * seq)
    return 2.0 * f + 2.0, 4.0 * f + 2.0
