"""algbw and busbw, as nccl-tests defines them (nccl-tests doc/PERFORMANCE.md).

algbw = size / time, where size is one rank's buffer for all_reduce and the whole N-block buffer
for reduce_scatter and all_gather; busbw = algbw × bus factor, the bus factor being the fraction
of the data each rank must move over its busiest link in an optimal algorithm: 2(N-1)/N for
all_reduce, (N-1)/N for reduce_scatter and all_gather. Units: bytes and seconds in, bytes/s out.
"""

from __future__ import annotations

from ..collectives import get_collective
from ..errors import ArgumentError

__all__ = ["algbw", "busbw"]


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: ``nbytes / seconds``.

    Raises:
        ArgumentError: seconds <= 0.
    """
    if seconds <= 0:
        raise ArgumentError(f"seconds={seconds!r} must be > 0")
    return nbytes / seconds


def busbw(collective: str, nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth in bytes/s: ``algbw × bus_factor(world_size)`` (nccl-tests)."""
    return algbw(nbytes, seconds) * get_collective(collective).bus_factor(world_size)
