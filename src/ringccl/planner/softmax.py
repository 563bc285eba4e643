"""The HBM passes of Megatron's scale-mask-softmax over the attention scores (unfused attention).

Megatron-LM's ``FusedScaleMaskSoftmax`` (``megatron/model/fused_softmax.py``) runs a causal
model's scores ``[b, np, sq, sk]`` of one rank (``np`` = heads per rank) through the fused
causal kernel ``ScaledUpperTriangMaskedSoftmax``
(``megatron/fused_kernels/scaled_upper_triang_masked_softmax.h``): row ``i`` of each score
matrix reads only its first ``i + 1`` elements (``local_seq = blockIdx.x + 1``; the loads are
guarded by ``element_index < local_seq``) and writes the whole row (zeros above the diagonal);
its backward reads the gradient and the saved probabilities over the same lower triangle and
writes the whole row. With 2-byte scores: forward ``2·f + 2`` bytes per score, backward
``4·f + 2``, ``f = (s + 1)/(2·s)`` the lower triangle's share of the square
(:func:`softmax_bytes`).
"""

from __future__ import annotations

__all__ = ["softmax_bytes"]


def softmax_bytes(seq: int, causal_kernel: bool = True) -> tuple[float, float]:
    """HBM bytes per score of the softmax, (forward, backward): the fused causal kernel's
    (reads over the lower triangle, writes the whole square; module doc), else every score
    read and written (read 2, write 2 forward; read 2 + 2, write 2 backward)."""
    f = (seq + 1) / (2 * seq) if causal_kernel else 1.0
    return 2.0 * f + 2.0, 4.0 * f + 2.0
