"""Each collective's contract: what every rank holds before and after, independent of algorithm.

A collective works on a per-rank *working buffer* of ``buffer_count(world_size, count)`` elements
split into the schedule's chunks. The contract says which chunks a rank's input fills
(``input_chunks``), which chunks form its output (``output_chunks``) and what the output chunks
must contain. The checker and the simulator test every algorithm of a collective through the
same contract, so a new algorithm needs no new test code.

Semantics and shapes follow torch.distributed (``count`` = elements of one rank's input):

============== ========================= =================================== ===================
collective     working buffer            input of rank r fills               output of rank r
============== ========================= =================================== ===================
all_reduce     count                     all chunks                          all chunks: Σ ranks
reduce_scatter count (N blocks)          all chunks                          block r: Σ ranks
all_gather     N · count (N blocks)      block r                             all chunks
============== ========================= =================================== ===================

Blocks: with N ranks and C chunks (C a multiple of N), block b is chunks [b·C/N, (b+1)·C/N).
For reduce_scatter with a count not divisible by N, block r is ``numpy.array_split``'s piece r.

Bus factors convert algbw into busbw as nccl-tests does (doc/PERFORMANCE.md): all_reduce
2(N-1)/N; reduce_scatter and all_gather (N-1)/N, with size = the full N-block buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from .errors import ArgumentError

__all__ = ["Collective", "COLLECTIVES", "get_collective", "ALL", "ANY"]

#: expected-content codes used by :meth:`Collective.expected`
ANY, ALL, ORIGIN = 0, 1, 2


def _blocks(world_size: int, num_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    if num_chunks % world_size:
        raise ArgumentError(f"num_chunks={num_chunks} must be a multiple of "
                            f"world_size={world_size} for a blocked collective")
    per = num_chunks // world_size
    lo = np.arange(world_size, dtype=np.int64) * per
    return lo, lo + per


def _everything(world_size: int, num_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    return (np.zeros(world_size, dtype=np.int64), np.full(world_size, num_chunks, dtype=np.int64))


@dataclass(frozen=True)
class Collective:
    """The contract of one collective.

    Attributes:
        name: torch.distributed-style name.
        reduces: True if outputs hold the reduction of every rank's contribution; False if they
            hold copies of single ranks' data (gathers, broadcasts).
        buffer_count: (world_size, count) -> working-buffer elements per rank.
        input_chunks: (world_size, num_chunks, params) -> (lo, hi) int arrays (world_size,):
            rank r's input fills chunks [lo[r], hi[r]) in order.
        output_chunks: same shape; rank r's output is chunks [lo[r], hi[r]) concatenated.
        bus_factor: world_size -> busbw / algbw (nccl-tests).
        size_is_buffer: True if nccl-tests' "size" is the whole working buffer (reduce_scatter,
            all_gather) rather than one rank's input.
        summary: one line for listings.
    """

    name: str
    reduces: bool
    buffer_count: Callable[[int, int], int]
    input_chunks: Callable[[int, int, Mapping], tuple[np.ndarray, np.ndarray]]
    output_chunks: Callable[[int, int, Mapping], tuple[np.ndarray, np.ndarray]]
    bus_factor: Callable[[int], float]
    size_is_buffer: bool
    summary: str

    def pre(self, world_size: int, num_chunks: int, params: Mapping | None = None):
        """Symbolic precondition: (chunk_id, origin) int arrays of shape (world_size, num_chunks).

        ``chunk_id[r, c]`` is the logical chunk in slot (r, c) (-1 = empty) and ``origin[r, c]``
        the rank whose contribution it carries.
        """
        lo, hi = self.input_chunks(world_size, num_chunks, params or {})
        cols = np.arange(num_chunks)[None, :]
        filled = (cols >= lo[:, None]) & (cols < hi[:, None])
        chunk_id = np.where(filled, cols, -1).astype(np.int32)
        origin = np.where(filled, np.arange(world_size)[:, None], -1).astype(np.int32)
        return chunk_id, origin

    def expected(self, world_size: int, num_chunks: int, params: Mapping | None = None):
        """Symbolic postcondition: (kind, chunk_id, origin) arrays of shape (world_size, num_chunks).

        ``kind`` is ANY (not part of the output), ALL (must hold every rank's contribution to
        ``chunk_id`` exactly once) or ORIGIN (must hold exactly ``origin``'s ``chunk_id``).
        """
        params = params or {}
        lo, hi = self.output_chunks(world_size, num_chunks, params)
        cols = np.arange(num_chunks)[None, :]
        out = (cols >= lo[:, None]) & (cols < hi[:, None])
        kind = np.where(out, ALL if self.reduces else ORIGIN, ANY).astype(np.int8)
        chunk_id = np.broadcast_to(cols, (world_size, num_chunks)).astype(np.int32)
        origin = np.full((world_size, num_chunks), -1, dtype=np.int32)
        if not self.reduces:
            # a copied chunk comes from the rank whose input filled it
            ilo, ihi = self.input_chunks(world_size, num_chunks, params)
            for r in range(world_size):
                origin[:, ilo[r]:ihi[r]] = r
        return kind, chunk_id, origin


COLLECTIVES: dict[str, Collective] = {
    "all_reduce": Collective(
        "all_reduce", True, lambda n, count: count,
        lambda n, c, p: _everything(n, c), lambda n, c, p: _everything(n, c),
        lambda n: 2 * (n - 1) / n, False,
        "every rank ends with the reduction of all ranks' buffers"),
    "reduce_scatter": Collective(
        "reduce_scatter", True, lambda n, count: count,
        lambda n, c, p: _everything(n, c), lambda n, c, p: _blocks(n, c),
        lambda n: (n - 1) / n, True,
        "rank r ends with block r of the reduction (reduce_scatter_tensor)"),
    "all_gather": Collective(
        "all_gather", False, lambda n, count: n * count,
        lambda n, c, p: _blocks(n, c), lambda n, c, p: _everything(n, c),
        lambda n: (n - 1) / n, True,
        "every rank ends with all ranks' buffers concatenated (all_gather_into_tensor)"),
}


def get_collective(name: str) -> Collective:
    """The contract of ``name``.

    Raises:
        ArgumentError: unknown collective (the message lists the known ones).
    """
    try:
        return COLLECTIVES[name]
    except (KeyError, TypeError):
        raise ArgumentError(f"collective={name!r} is unknown; expected one of "
                            f"{', '.join(COLLECTIVES)}") from None
