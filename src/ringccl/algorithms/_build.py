"""Small helpers shared by the algorithm families: logarithms and a transfer accumulator.

Builders describe a schedule as a few vectorized groups of transfers ("at step s every rank r
sends chunk f(r, s) to g(r, s)"); :class:`Transfers` collects those groups as numpy arrays and
hands them to :meth:`Schedule.from_arrays` once, so no builder loops over single transfers.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..ir import Schedule

__all__ = ["ceil_log2", "floor_log2", "Transfers"]


def ceil_log2(n: int) -> int:
    """⌈log2 n⌉ for n >= 1 (0 for n = 1)."""
    return (int(n) - 1).bit_length()


def floor_log2(n: int) -> int:
    """⌊log2 n⌋ for n >= 1."""
    return int(n).bit_length() - 1


class Transfers:
    """Accumulates groups of transfers (numpy arrays or scalars, broadcast together)."""

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, ...]] = []

    def add(self, step, src, dst, src_chunk, dst_chunk=None, reduce=False) -> None:
        """Add transfers; ``dst_chunk`` defaults to ``src_chunk``; empty groups are fine."""
        if dst_chunk is None:
            dst_chunk = src_chunk
        arrays = np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in
                                       (step, src, dst, src_chunk, dst_chunk)),
                                     np.asarray(reduce, dtype=bool))
        self._parts.append(tuple(np.ravel(a) for a in arrays))

    def schedule(self, collective: str, algorithm: str, world_size: int, num_chunks: int,
                 phases: Sequence[str], params: Mapping[str, object] | None = None) -> Schedule:
        """The schedule of everything added, with one phase name per step."""
        if self._parts:
            st, s, d, sc, dc, red = (np.concatenate(col) for col in zip(*self._parts))
        else:
            st = s = d = sc = dc = np.zeros(0, dtype=np.int64)
            red = np.zeros(0, dtype=bool)
        return Schedule.from_arrays(collective, algorithm, world_size, num_chunks, step=st,
                                    src=s, dst=d, src_chunk=sc, dst_chunk=dc, reduce=red,
                                    phases=list(phases), num_steps=len(phases), params=params)
