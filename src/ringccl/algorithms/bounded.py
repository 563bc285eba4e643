"""What may be built before it is built: a schedule's steps and transfers, and the memory of its
symbolic check, against this machine's available memory
(:func:`ringccl.resources.available_memory`) and a caller's own bound (the explorer page's
transfers), each refused naming the arguments that set the size (the command line's flags, or
``ringccl.schedule``'s keywords), before the work starts.

A schedule's size is known only once it is built (each algorithm has its own shape), so
:func:`build` checks in three stages:

1. the steps, from the algorithm's closed form (``--segments`` raises them);
2. the transfers, chunks per rank and busiest step, extrapolated from the same algorithm built
   at :data:`PROBES` ranks (a power law between the two; the built-in algorithms grow as N,
   N² or N² log N, which it meets or over-estimates: bruck all_to_all's N²·log2(N)/2 by 1.7x
   at 10,000 ranks): refused when beyond :data:`MARGIN` times the bound;
3. the build itself under :func:`ringccl.algorithms.transfer_limit` (refused before the arrays
   of the group of transfers that passes the bound are made) and, on the command line,
   :func:`ringccl.resources.address_space_bound` (whatever a builder allocates beyond the
   available memory fails at once), then the exact memory of the check
   (:func:`ringccl.check.verify_bytes`) before it runs.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator

from .. import resources, units
from ..check import verify, verify_bytes
from ..errors import ArgumentError, RingcclError
from ..ir import Schedule
from ..caches import memoize
from ._build import transfer_limit
from . import registry
from .registry import build_schedule, get_algorithm, params_key, schedule_nbytes

__all__ = ["BUILD_BYTES_PER_TRANSFER", "BUILD_BYTES_PER_STEP", "PROBES", "MARGIN",
           "estimate", "build", "check_verify", "bounded", "library_build"]

#: peak bytes per transfer while a schedule is built (the builder's arrays, their concatenation,
#: the canonical sort, the schedule's own arrays). Measured (peak resident memory, one Linux
#: machine): ring all_reduce N=2048 34, direct all_reduce N=2048 50, hierarchical all_reduce
#: N=2048 60, bruck all_to_all N=1024 81, tree reduce N=64 with 300000 segments 57; 96 is
#: above every one
BUILD_BYTES_PER_TRANSFER = 96
#: bytes per step beyond its transfers (phase names, the step index, a builder's per-step
#: arrays): the steps of ``--segments 1000000000`` are refused before any is made
BUILD_BYTES_PER_STEP = 64
#: world sizes the schedule is built at to extrapolate its size at a larger one
PROBES = (32, 64)
#: transfers (and steps) a probe may have, its memory that many times BUILD_BYTES_PER_TRANSFER
#: (a probe beyond them gives no extrapolation: stage 3 decides)
PROBE_TRANSFERS = 1 << 20
#: an extrapolated size is refused only beyond this many times the bound; nearer it, stage 3
#: decides on the exact size
MARGIN = 2


class _ProbeTooLarge(RingcclError):
    """A probe has more than PROBE_TRANSFERS transfers."""


def _busiest(schedule: Schedule) -> int:
    return int(max(schedule.step_ptr[1:] - schedule.step_ptr[:-1], default=0))


def _space(bytes_: int | None, address_space: bool):
    """:func:`ringccl.resources.address_space_bound` where the caller owns its process (the
    command line), else nothing: a library call leaves the process's limits alone."""
    return (resources.address_space_bound(bytes_) if address_space else
            contextlib.nullcontext())


def estimate(collective: str, algorithm: str, world_size: int, params: dict, *,
             address_space: bool = True) -> tuple[float, float, float] | None:
    """(transfers, chunks per rank, transfers of the busiest step) of the schedule on
    ``world_size`` ranks, extrapolated from it built at :data:`PROBES` ranks (a root taken
    modulo the probe's size: it moves transfers, it does not add any). None when
    ``world_size`` is not above the probes or a probe cannot be built (a parameter it cannot
    take, more than :data:`PROBE_TRANSFERS` transfers)."""
    small, large = PROBES
    if world_size <= large:
        return None
    sizes = []
    for n in PROBES:
        given = {k: (v % n if k == "root" and isinstance(v, int) else v)
                 for k, v in params.items()}
        try:
            if get_algorithm(collective, algorithm).steps_for(n, **given) > PROBE_TRANSFERS:
                return None  # --segments: a builder's per-step arrays would be large already
            with transfer_limit(PROBE_TRANSFERS, _ProbeTooLarge), \
                    _space(PROBE_TRANSFERS * BUILD_BYTES_PER_TRANSFER, address_space):
                s = build_schedule(collective, algorithm, n, **given)
        except Exception:  # noqa: BLE001 - any builder's refusal (or memory): no extrapolation
            return None
        sizes.append((s.num_transfers, s.num_chunks, _busiest(s)))
    grow = world_size / large

    def extrapolate(a: float, b: float) -> float:
        exponent = math.log(b / a) / math.log(large / small) if a > 0 and b > a else 0.0
        return b * grow ** exponent
    return tuple(extrapolate(a, b) for a, b in zip(*sizes))


def _check_steps(collective: str, algorithm: str, world_size: int, params: dict,
                 flags: tuple[str, str], memory: int | None) -> int:
    """Stage 1 of :func:`build`: the steps (the closed form; 0 where it cannot say), refused
    when they alone cannot fit."""
    try:  # a parameter the closed form cannot take is the builder's to refuse
        steps = int(get_algorithm(collective, algorithm).steps_for(world_size, **params))
    except (RingcclError, TypeError, ValueError, OverflowError):
        return 0
    if memory is not None and steps * BUILD_BYTES_PER_STEP > memory:
        given, names = flags
        raise ArgumentError(
            f"{given}: the {algorithm} {collective} schedule has {steps:,} steps, which need "
            f"about {units.format_size(steps * BUILD_BYTES_PER_STEP)}, more than this "
            f"machine's {units.format_size(memory)} available; use a smaller {names}")
    return steps


def _check_estimate(collective: str, algorithm: str, world_size: int, params: dict,
                    flags: tuple[str, str], memory: int | None, limit: int | None, why: str,
                    checked: bool, address_space: bool) -> None:
    """Stage 2 of :func:`build`: refuse an extrapolated size clearly beyond a bound."""
    guess = estimate(collective, algorithm, world_size, params, address_space=address_space)
    if guess is None:
        return
    transfers, chunks, busiest = guess
    given, names = flags
    shape = (f"the {algorithm} {collective} schedule on {world_size} ranks would have about "
             f"{transfers:,.0f} transfers" + (f" and {chunks:,.0f} chunk"
                                               f"{'' if round(chunks) == 1 else 's'} per rank"
                                               if checked else "")
             + f" (extrapolated from {PROBES[0]} and {PROBES[1]} ranks)")
    if limit is not None and transfers > MARGIN * limit:
        raise ArgumentError(f"{given}: {shape}; {why}; use a smaller {names}")
    need = transfers * BUILD_BYTES_PER_TRANSFER
    if checked:  # verify_bytes' terms
        words = (world_size + 63) // 64
        need += 18 * world_size * chunks * words + 48 * transfers + 24 * words * busiest
    if memory is not None and need > MARGIN * memory:
        work = "building and checking" if checked else "building"
        raise ArgumentError(f"{given}: {shape}; {work} it needs about "
                            f"{units.format_size(need)}, more than this machine's "
                            f"{units.format_size(memory)} available; use a smaller {names}")


def build(collective: str, algorithm: str, world_size: int, params: dict,
          flags: tuple[str, str], *, checked: bool = False, limit: int | None = None,
          why: str = "", address_space: bool = True) -> Schedule:
    """:func:`ringccl.algorithms.build_schedule` (and with ``checked``,
    :func:`ringccl.verify`), refused before what it would make cannot fit in this machine's
    available memory or has more than ``limit`` transfers (the module docstring's stages; no
    memory bound where it cannot be read).

    Args:
        flags: the arguments that size the schedule, as given and as names
            (``("-N/--world-size 10000", "-N/--world-size")``: ``ringccl.cli.limits.size_flags``;
            ``("world_size=10000", "world_size")``).
        limit: the caller's own bound on transfers (None: memory only); ``why`` says why.
        address_space: also bound the process's address space while building (stage 3); a
            library call, sharing its process, passes False.
    Raises:
        ArgumentError: naming the flags as given, the size, the bound and the flags to lower.
        What build_schedule and verify raise.
    """
    given, names = flags
    memory = resources.available_memory()
    steps = _check_steps(collective, algorithm, world_size, params, flags, memory)
    _check_estimate(collective, algorithm, world_size, params, flags, memory, limit, why,
                    checked, address_space)
    by_memory = (None if memory is None else
                 (memory - steps * BUILD_BYTES_PER_STEP) // BUILD_BYTES_PER_TRANSFER)
    bound = min(b for b in (limit, by_memory, math.inf) if b is not None)
    room = ("memory" if memory is None else
            f"this machine's {units.format_size(memory)} of available memory")
    reason = why if bound == limit else (f"at ~{BUILD_BYTES_PER_TRANSFER} bytes each while it "
                                         f"is built they need more than {room}")

    def refuse() -> ArgumentError:
        return ArgumentError(f"{given}: the {algorithm} {collective} schedule on {world_size} "
                             f"ranks has more than {bound:,} transfers; {reason}; use a smaller "
                             f"{names}")
    try:
        with transfer_limit(bound, refuse), _space(memory, address_space):
            schedule = build_schedule(collective, algorithm, world_size, **params)
    except MemoryError:  # beyond the address-space bound (or a tighter one of the process)
        raise ArgumentError(f"{given}: building the {algorithm} {collective} schedule on "
                            f"{world_size} ranks ran out of memory before it was built ({room} "
                            f"at the start); use a smaller {names}") from None
    if limit is not None and schedule.num_transfers > limit:  # built before, without a bound
        raise ArgumentError(f"{given}: the {algorithm} {collective} schedule on {world_size} "
                            f"ranks has {schedule.num_transfers:,} transfers; {why}; use a "
                            f"smaller {names}")
    if checked:
        check_verify(schedule, flags)
        verify(schedule)
    return schedule


def library_build(collective: str, algorithm: str, world_size: int, params: dict) -> Schedule:
    """:func:`build` for a library call (``ringccl.schedule``): refusals name its keywords
    (``world_size=30000``), the process's address-space limit is left alone, and a schedule
    built once is returned again without the checks (a hit costs about a microsecond, as
    :func:`~ringccl.algorithms.registry.build_schedule`'s; both caches keep at most
    :data:`~ringccl.algorithms.registry.SCHEDULE_CACHE_BYTES` of schedules, and
    :func:`ringccl.clear_caches` empties both).

    Raises:
        ArgumentError: as :func:`build`.
    """
    try:
        key = params_key(params)
        hash(key)
    except TypeError:   # an unhashable value: the builder refuses or takes it, unmemoized
        return _library_build(collective, algorithm, world_size, params)
    return _library_build_cached(collective, algorithm, world_size, key)


def _library_build(collective: str, algorithm: str, world_size: int, params: dict) -> Schedule:
    given = " ".join(f"{k}={v!r}" for k, v in {"world_size": world_size, **params}.items())
    names = " or ".join(["world_size", *params])
    return build(collective, algorithm, world_size, params, (given, names), address_space=False)


@memoize(maxsize=128, maxbytes=lambda: registry.SCHEDULE_CACHE_BYTES, nbytes=schedule_nbytes)
def _library_build_cached(collective: str, algorithm: str, world_size: int,
                          key: tuple) -> Schedule:
    return _library_build(collective, algorithm, world_size, {k: v for k, _, v in key})


@contextlib.contextmanager
def bounded(flags: tuple[str, str], what: str) -> Iterator[None]:
    """Inside it, the schedules built by work that builds them itself (``what``: the cost
    model's walks of ``model`` and ``tune``, which take closed forms where they can) are bound
    by stage 3 of :func:`build`: this machine's available memory in transfers and in address
    space.

    Raises:
        ArgumentError: naming the flags as given, ``what``, the bound and the flags to lower.
    """
    memory = resources.available_memory()
    if memory is None:
        yield
        return
    given, names = flags
    bound = memory // BUILD_BYTES_PER_TRANSFER
    room = f"this machine's {units.format_size(memory)} of available memory"

    def refuse() -> ArgumentError:
        return ArgumentError(f"{given}: {what} builds a schedule with more than {bound:,} "
                             f"transfers; at ~{BUILD_BYTES_PER_TRANSFER} bytes each they need "
                             f"more than {room}; use a smaller {names}")
    try:
        with transfer_limit(bound, refuse), resources.address_space_bound(memory):
            yield
    except MemoryError:
        raise ArgumentError(f"{given}: {what} ran out of memory ({room} at the start); use a "
                            f"smaller {names}") from None


def check_verify(schedule: Schedule, flags: tuple[str, str]) -> None:
    """Refuse the symbolic check of ``schedule`` (:func:`ringccl.verify`) when what it needs
    (:func:`ringccl.check.verify_bytes`) is more than this machine's available memory.

    Raises:
        ArgumentError: naming the flags as given, the schedule's size, the memory and the
            flags to lower.
    """
    need, memory = verify_bytes(schedule), resources.available_memory()
    if memory is None or need <= memory:
        return
    given, names = flags
    raise ArgumentError(
        f"{given}: checking the {schedule.algorithm} {schedule.collective} schedule "
        f"({schedule.world_size} ranks, {schedule.num_chunks:,} chunks per rank, "
        f"{schedule.num_transfers:,} transfers) needs about {units.format_size(need)}, more "
        f"than this machine's {units.format_size(memory)} available; use a smaller {names}")
