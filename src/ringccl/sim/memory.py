"""How much memory a simulation needs, and a guard that refuses one that cannot fit.

The estimate of what ``ringccl simulate`` needs: the interpreter, the N × count inputs, and f × N × M
elements (M = the collective's buffer, ``Collective.buffer_count``) for the simulator's storage,
outputs and reference check, with a factor f per collective calibrated to the measured peak
resident memory (below), plus the schedule's own arrays for large N. It errs on the high side:
a refused simulation would have come within ~25% of the machine's memory.
"""

from __future__ import annotations

import os

from ..collectives import get_collective
from ..errors import ArgumentError
from ..units import format_size

__all__ = ["simulation_bytes", "available_bytes", "check_memory"]

#: Elements per rank per element of M held besides the inputs (storage, outputs, the check),
#: per collective, with the check on (``ringccl simulate``'s default). Calibrated to the peak
#: resident memory (``/usr/bin/time -f %M``) of ``ringccl simulate C -N N -c COUNT``, float32,
#: default algorithm, minus the interpreter and inputs, per N·M (one 2-core Linux machine):
#: all_reduce 1.38 (N=8, 2Mi; ~0.4 of it fixed import overhead) / 1.01 (N=64, 4Mi);
#: reduce_scatter 1.36 / 1.02 (N=64, 2Mi); all_gather 1.94 (N=8, 256Ki) / 1.12 (N=64, 64Ki);
#: all_to_all 4.78 / 4.11 (N=64, 1Mi) / 4.10 (N=64, 4Mi); broadcast 2.00; reduce 3.00;
#: scatter 1.49; gather 2.03 (N=8). Each factor keeps the estimate at or above every
#: measurement; the largest case is ~8% above.
_WORKING_FACTOR = {"all_reduce": 1.1, "reduce_scatter": 1.1, "all_gather": 1.7,
                   "all_to_all": 4.5, "broadcast": 2.0, "reduce": 3.0, "scatter": 1.3,
                   "gather": 1.8}

#: the interpreter with numpy and ringccl imported (45 MB measured) and ~40 MB of temporaries a
#: small simulation peaks at beyond its factor (all_reduce N=8 × 1Mi: 133 MiB measured)
_BASE_BYTES = 96 << 20

#: the schedule's transfer arrays and the simulator's compiled plan, per transfer (upper bound:
#: five int32 arrays plus the plan's index arrays), times ~2·N² transfers of a ring all_reduce
_SCHEDULE_BYTES_PER_RANK2 = 64

#: a container's memory limit: cgroup v2, then v1
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def simulation_bytes(collective: str, world_size: int, count: int, itemsize: int) -> float:
    """Bytes a simulation of ``collective`` on ``world_size`` ranks × ``count`` elements of
    ``itemsize`` bytes needs (peak resident memory of the process): the interpreter, the inputs,
    f × N × M elements (:data:`_WORKING_FACTOR`) and the schedule's arrays (~64 · N² bytes).

    Raises:
        ArgumentError: an unknown collective.
    """
    m = get_collective(collective).buffer_count(world_size, count)
    factor = _WORKING_FACTOR.get(collective, max(_WORKING_FACTOR.values()))
    return (_BASE_BYTES + _SCHEDULE_BYTES_PER_RANK2 * world_size ** 2
            + itemsize * (world_size * count + factor * world_size * m))


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
                 names: tuple[str, str | None] = ("count", "world_size")) -> None:
    """Refuse a simulation that cannot fit in this machine's memory, before any input is made
    (instead of being killed by the kernel half-way).

    Args:
        itemsize: bytes per element of the widest array held (the dtype or the accumulate dtype).
        names: how the caller names count and world_size in the advice (the CLI: its options,
            ``("-c/--count", "-N/--world-size")``; None: the world size is not the caller's).
    Raises:
        ArgumentError: :func:`simulation_bytes` exceeds :func:`available_bytes`: naming the
            count, its value, the largest count that fits on ``world_size`` ranks (the estimate
            grows linearly with it) and the flags to lower. Nothing is checked where the system
            does not say its memory (numpy's MemoryError speaks then).
    """
    need = simulation_bytes(collective, world_size, count, itemsize)
    have = available_bytes()
    if have is None or need <= have:
        return
    fixed = simulation_bytes(collective, world_size, 0, itemsize)
    per_element = simulation_bytes(collective, world_size, 1, itemsize) - fixed
    fit = int((have - fixed) // per_element) if have > fixed and per_element > 0 else 0
    world = f"{names[1]} {world_size}" if names[1] else f"{world_size} ranks"
    allowed = (f"at most {fit:,} fit on {world}" if fit else f"none fit on {world}")
    raise ArgumentError(f"{names[0]} {count} is too large: simulating {collective} on "
                        f"{world_size} ranks x count={count} needs about {format_size(need)}, "
                        f"more than this machine's {format_size(have)} of memory (or its "
                        f"container's limit); {allowed}: use a smaller {names[0]}"
                        + (f" or {names[1]}" if names[1] else ""))
