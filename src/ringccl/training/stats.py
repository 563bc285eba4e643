"""Counting what training communicates: exact bytes this rank sends, per collective.

Bytes come from the schedule itself (:meth:`ringccl.ir.Schedule.bytes_sent`), so they are exact
for any algorithm and any count, including counts that do not split evenly into chunks. For the
ring on N ranks and a buffer of M bytes (Patarasuk & Yuan 2009):

* all-reduce sends 2(N-1)/N · M per rank,
* reduce-scatter and all-gather send (N-1)/N · M each, M being the full (N-block) buffer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..algorithms import build_schedule

__all__ = ["CommStats", "bytes_sent"]


def bytes_sent(collective: str, algorithm: str, world_size: int, rank: int, buffer_count: int,
               itemsize: int) -> int:
    """Bytes ``rank`` sends when ``algorithm`` runs ``collective`` on a working buffer of
    ``buffer_count`` elements of ``itemsize`` bytes (all-gather and reduce-scatter: the full
    N-block buffer)."""
    schedule = build_schedule(collective, algorithm, world_size)
    return int(schedule.bytes_sent(buffer_count, itemsize)[rank])


@dataclass
class CommStats:
    """Running totals of this rank's communication (thread-safe).

    Attributes:
        bytes_sent: bytes this rank sent, all collectives together.
        collectives: number of collectives launched.
        by_collective: bytes sent per collective name ("all_reduce", "reduce_scatter", ...).
    """

    bytes_sent: int = 0
    collectives: int = 0
    by_collective: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, collective: str, nbytes: int) -> None:
        with self._lock:
            self.bytes_sent += int(nbytes)
            self.collectives += 1
            self.by_collective[collective] = self.by_collective.get(collective, 0) + int(nbytes)

    def snapshot(self) -> dict:
        """A plain dict copy: ``{"bytes_sent", "collectives", "by_collective"}``."""
        with self._lock:
            return {"bytes_sent": self.bytes_sent, "collectives": self.collectives,
                    "by_collective": dict(self.by_collective)}

    def reset(self) -> None:
        with self._lock:
            self.bytes_sent = 0
            self.collectives = 0
            self.by_collective = {}
