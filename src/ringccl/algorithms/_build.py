"""Small helpers shared by the algorithm families: logarithms and a transfer accumulator.

The one builder style of the library: a builder describes its schedule as a few vectorized
groups of transfers ("at step s every rank r sends chunk f(r, s) to g(r, s)"), one
:meth:`Transfers.add` per group (arrays broadcast together, so a group is often one call over a
(step, rank) grid), and ends with :meth:`Transfers.schedule`, which names the phase of every step
and hands everything to :meth:`Schedule.from_arrays` once. No builder loops over single
transfers, concatenates arrays itself or calls ``Schedule.from_arrays`` directly; a user's
algorithm may do the latter (docs/contributing.md, "Adding an algorithm").

Example (ring all-gather: at step s rank r sends block (r - s) mod N to r + 1)::

    t, r, s = Transfers(), np.arange(n), np.arange(n - 1)[:, None]
    t.add(s, r, (r + 1) % n, (r - s) % n)
    return t.schedule("all_gather", "ring", n, n, ["all-gather"] * (n - 1))
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from ..ir import Schedule

__all__ = ["ceil_log2", "floor_log2", "Transfers", "transfer_limit"]

#: [limit, transfers added so far, refusal] of the :func:`transfer_limit` in effect, or None
_LIMIT: contextvars.ContextVar = contextvars.ContextVar("ringccl_transfer_limit", default=None)


@contextlib.contextmanager
def transfer_limit(limit: float, refuse: Callable[[], Exception]) -> Iterator[None]:
    """Inside it, :meth:`Transfers.add` raises ``refuse()`` instead of making the arrays of a
    group that would take the transfers added in all past ``limit`` (every builder called
    inside counts, a composite's parts included; a refused group is not counted): a caller
    bounds the memory of schedules it cannot count before building them (~20-80 bytes per
    transfer while one is built)."""
    token = _LIMIT.set([limit, 0, refuse])
    try:
        yield
    finally:
        _LIMIT.reset(token)


def ceil_log2(n: int) -> int:
    """⌈log2 n⌉ for n >= 1 (0 for n = 1)."""
    return (int(n) - 1).bit_length()


def floor_log2(n: int) -> int:
    """⌊log2 n⌋ for n >= 1."""
    return int(n).bit_length() - 1


#: dtypes of (step, src, dst, src_chunk, dst_chunk, reduce) as Transfers keeps them
_DTYPES = (np.int64, np.int32, np.int32, np.int32, np.int32, np.bool_)


class Transfers:
    """Accumulates groups of transfers (numpy arrays or scalars, broadcast together).

    Ranks and chunks are kept as int32, the IR's own dtype (:class:`~ringccl.ir.Schedule` stores
    int32 arrays), so they are copied once here and not converted again by the schedule.
    """

    def __init__(self) -> None:
        self._parts: list[tuple[np.ndarray, ...]] = []

    def add(self, step, src, dst, src_chunk, dst_chunk=None, reduce=False) -> None:
        """Add transfers; ``dst_chunk`` defaults to ``src_chunk``; empty groups are fine.

        Args:
            step, src, dst, src_chunk, dst_chunk: integer arrays or scalars, broadcast together:
                one transfer per element (the step index, sending rank, receiving rank, chunk
                read at src, chunk written at dst).
            reduce: bool array or scalar: True where the receiver reduces, False where it copies.
        Raises:
            what :func:`transfer_limit`'s ``refuse`` returns, beyond its limit.
        """
        if dst_chunk is None:
            dst_chunk = src_chunk
        given = [np.asarray(a) for a in (step, src, dst, src_chunk, dst_chunk)]
        given.append(np.asarray(reduce, dtype=bool))
        limit = _LIMIT.get()
        if limit is not None:  # counted before the (broadcast, copied) arrays exist
            count = math.prod(np.broadcast_shapes(*(a.shape for a in given)))
            if limit[1] + count > limit[0]:
                raise limit[2]()  # not counted: a smaller schedule may still be built inside
            limit[1] += count
        arrays = np.broadcast_arrays(*given)
        # astype copies (a broadcast view is not ours to keep) and ravel then returns a view;
        # steps stay int64, as Schedule sorts them, the indices become the IR's int32
        self._parts.append(tuple(a.astype(dtype, order="C").ravel()
                                 for a, dtype in zip(arrays, _DTYPES)))

    def schedule(self, collective: str, algorithm: str, world_size: int, num_chunks: int,
                 phases: Sequence[str], params: Mapping[str, object] | None = None) -> Schedule:
        """The schedule of everything added, with one phase name per step (``len(phases)``
        steps; a step may have no transfers).

        Raises:
            ScheduleError, ArgumentError: as :meth:`Schedule.from_arrays`.
        """
        if len(self._parts) == 1:
            st, s, d, sc, dc, red = self._parts[0]
        elif self._parts:
            st, s, d, sc, dc, red = (np.concatenate(col) for col in zip(*self._parts))
        else:
            st, s, d, sc, dc, red = (np.zeros(0, dtype=dtype) for dtype in _DTYPES)
        return Schedule.from_arrays(collective, algorithm, world_size, num_chunks, step=st,
                                    src=s, dst=d, src_chunk=sc, dst_chunk=dc, reduce=red,
                                    phases=list(phases), num_steps=len(phases), params=params)
