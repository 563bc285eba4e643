"""The one place buffers are split into chunks (``numpy.array_split`` semantics)."""

from __future__ import annotations

import numpy as np

from .args import check_int

__all__ = ["chunk_bounds"]


def chunk_bounds(count: int, num_chunks: int) -> np.ndarray:
    """Chunk boundaries of a ``count``-element buffer split into ``num_chunks`` chunks.

    ``numpy.array_split`` / ``torch.tensor_split`` semantics: the first ``count % num_chunks``
    chunks get one extra element; chunks may be empty.

    Returns:
        int64 array of shape (num_chunks + 1,): chunk c is ``[bounds[c], bounds[c + 1])``.
    Raises:
        ArgumentError: count < 0 or num_chunks < 1; ArgumentTypeError: not integers.
    """
    count = check_int(count, "count")
    num_chunks = check_int(num_chunks, "num_chunks", minimum=1)
    base, extra = divmod(count, num_chunks)
    sizes = np.full(num_chunks, base, dtype=np.int64)
    sizes[:extra] += 1
    bounds = np.zeros(num_chunks + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return bounds
