"""How much memory a simulation needs, and a guard that refuses one that cannot fit.

The figures: the N × count inputs plus about 1.5 × N × M elements (M = the collective's buffer,
``Collective.buffer_count``) for the simulator's storage, outputs and check, measured by
benchmarks/bench_memory.py (tracemalloc; tests/test_sim_memory.py holds the simulator's own peak
at most 3× the input array).
"""

from __future__ import annotations

import os

from ..collectives import get_collective
from ..errors import ArgumentError
from ..units import format_size

__all__ = ["simulation_bytes", "available_bytes", "check_memory"]

#: the simulator's storage, outputs and check, in elements per rank per element of M
#: (benchmarks/bench_memory.py)
_WORKING_FACTOR = 1.5

#: a container's memory limit: cgroup v2, then v1
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def simulation_bytes(collective: str, world_size: int, count: int, itemsize: int) -> float:
    """Bytes a simulation of ``collective`` on ``world_size`` ranks × ``count`` elements of
    ``itemsize`` bytes needs: the inputs plus about 1.5 × N × M elements.

    Raises:
        ArgumentError: an unknown collective.
    """
    m = get_collective(collective).buffer_count(world_size, count)
    return itemsize * (world_size * count + _WORKING_FACTOR * world_size * m)


def available_bytes() -> int | None:
    """This machine's physical memory in bytes, or its container's limit when lower; None where
    the system does not say (not POSIX)."""
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    for limit in _CGROUP_LIMITS:
        try:
            with open(limit) as f:
                have = min(have, int(f.read().strip()))
            break
        except (OSError, ValueError):  # absent, or "max" (no limit)
            continue
    return have


def check_memory(collective: str, world_size: int, count: int, itemsize: int,
                 names: tuple[str, str] = ("count", "world_size")) -> None:
    """Refuse a simulation that cannot fit in this machine's memory, before any input is made
    (instead of being killed by the kernel half-way).

    Args:
        itemsize: bytes per element of the widest array held (the dtype or the accumulate dtype).
        names: how the caller names count and world_size in the advice (the CLI: its options).
    Raises:
        ArgumentError: :func:`simulation_bytes` exceeds :func:`available_bytes`. Nothing is
            checked where the system does not say its memory (numpy's MemoryError speaks then).
    """
    need = simulation_bytes(collective, world_size, count, itemsize)
    have = available_bytes()
    if have is not None and need > have:
        raise ArgumentError(f"simulating {collective} on {world_size} ranks x count={count} "
                            f"needs about {format_size(need)}, more than this machine's "
                            f"{format_size(have)} of memory (or its container's limit): "
                            f"use a smaller {names[0]} or {names[1]}")
