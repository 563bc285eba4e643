"""algbw and busbw, as nccl-tests defines them (nccl-tests doc/PERFORMANCE.md).

algbw = size / time, where size is one rank's buffer for all_reduce and the whole N-block buffer
for reduce_scatter and all_gather; busbw = algbw × bus factor, the bus factor being the fraction
of the data each rank must move over its busiest link in an optimal algorithm: 2(N-1)/N for
all_reduce, (N-1)/N for reduce_scatter and all_gather. Units: bytes and seconds in, bytes/s out.
"""

from __future__ import annotations

import math

from ..args import check_int
from ..collectives import get_collective
from ..errors import ArgumentError, ArgumentTypeError

__all__ = ["algbw", "busbw"]


def _number(value, argument: str) -> float:
    if isinstance(value, bool):
        raise ArgumentTypeError(f"{argument}={value!r} must be a number, got bool")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ArgumentTypeError(f"{argument}={value!r} must be a number") from None


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth in bytes/s: ``nbytes / seconds``.

    Raises:
        ArgumentError: nbytes not a finite number >= 0, seconds not a finite number > 0.
    """
    size, time = _number(nbytes, "nbytes"), _number(seconds, "seconds")
    if not (math.isfinite(size) and size >= 0):
        raise ArgumentError(f"nbytes={nbytes!r} must be a finite number of bytes >= 0")
    if not (math.isfinite(time) and time > 0):
        raise ArgumentError(f"seconds={seconds!r} must be a finite number > 0")
    return size / time


def busbw(collective: str, nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth in bytes/s: ``algbw × bus_factor(world_size)`` (nccl-tests).

    Raises:
        ArgumentError: as :func:`algbw`; world_size not an integer >= 1; unknown collective.
    """
    n = check_int(world_size, "world_size", 1)
    return algbw(nbytes, seconds) * get_collective(collective).bus_factor(n)
