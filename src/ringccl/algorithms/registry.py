"""Algorithm registry: (collective, algorithm) -> schedule builder.

Each family lives in its own module and registers its builders with :func:`register`. A builder
takes ``world_size`` (and keyword parameters such as ``root``) and returns a
:class:`~ringccl.ir.Schedule`; it never touches data, numpy buffers of user data or torch. The
built-in builders all use one style, :class:`ringccl.algorithms._build.Transfers`.

Adding an algorithm is one new module that calls ``register`` (see docs/contributing.md,
"Adding an algorithm"), imported by :mod:`ringccl.algorithms` or by the user before use
(``ringccl --import FILE`` for the CLI). :data:`DEFAULTS` holds the one default algorithm of
each collective. An entry is written with keywords only, so the nine fields cannot be swapped
silently::

    register(Algorithm(collective="all_gather", name="ring", builder=all_gather,
                       num_steps=lambda n: n - 1, bytes_sent=lambda n, m: (n - 1) / n * m,
                       steps_formula="N-1", bytes_formula="(N-1)/N·M", reference="...",
                       time=lambda n, m, alpha, beta, gamma: (n - 1) * (alpha + m / n * beta)))
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from ..args import check_int
from ..caches import memoize
from ..collectives import get_collective
from ..errors import ArgumentError, ArgumentTypeError
from ..ir import Schedule

__all__ = ["Algorithm", "register", "get_algorithm", "algorithms", "build_schedule", "params_key",
           "REGISTRY", "DEFAULTS", "default_algorithm", "SCHEDULE_CACHE_BYTES",
           "schedule_nbytes"]


@dataclass(frozen=True, kw_only=True)
class Algorithm:
    """A registered algorithm for one collective (keyword arguments only: ``Algorithm("ring", ...)``
    raises TypeError).

    Attributes:
        collective, name: registry key.
        builder: ``builder(world_size, **params) -> Schedule``.
        num_steps: closed form, world_size -> number of steps.
        bytes_sent: closed form, (world_size, nbytes) -> bytes the busiest rank sends, with chunks
            treated as fluid (nbytes / num_chunks each); exact when the count divides evenly.
        steps_formula, bytes_formula: the same, as text for listings.
        reference: paper or source of the algorithm.
        time: closed-form seconds on a flat network (every rank one full-duplex port to a
            non-blocking switch), ``time(world_size, nbytes, alpha, beta, gamma)`` with alpha in
            s per step, beta in s per byte, gamma in s per byte reduced; must equal the cost
            model's walk of the schedule (chunks treated as fluid). None: always walk.
    """

    collective: str
    name: str
    builder: Callable[..., Schedule]
    num_steps: Callable[[int], int]
    bytes_sent: Callable[[int, float], float]
    steps_formula: str
    bytes_formula: str
    reference: str = ""
    time: Callable[[int, float, float, float, float], float] | None = None

    # Closed forms may take the builder's keyword parameters (e.g. ``segments``); these pass on
    # the ones each function accepts, so callers can hand over ``schedule.params`` as they are.

    def steps_for(self, world_size: int, **params) -> int:
        """``num_steps`` for ``params`` (those the closed form does not take are ignored)."""
        return self.num_steps(world_size, **_accepted(self.num_steps, params))

    def bytes_for(self, world_size: int, nbytes: float, **params) -> float:
        """``bytes_sent`` for ``params`` (see :meth:`steps_for`)."""
        return self.bytes_sent(world_size, nbytes, **_accepted(self.bytes_sent, params))

    def time_for(self, world_size: int, nbytes: float, alpha: float, beta: float, gamma: float,
                 **params) -> float | None:
        """``time`` for ``params`` (see :meth:`steps_for`); None when there is no closed form."""
        if self.time is None:
            return None
        return self.time(world_size, nbytes, alpha, beta, gamma, **_accepted(self.time, params))


def _accepted(fn: Callable, params: dict) -> dict:
    """The entries of ``params`` that ``fn`` takes as keywords."""
    if not params:
        return {}
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return dict(params)
    return {k: v for k, v in params.items() if k in sig.parameters}


REGISTRY: dict[tuple[str, str], Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` to the registry (replacing an entry with the same key); returns it.

    Raises:
        ArgumentTypeError: ``algorithm`` is not an :class:`Algorithm`, or its builder is not
            callable.
        ArgumentError: unknown collective, an empty or non-string name.
    """
    if not isinstance(algorithm, Algorithm):
        raise ArgumentTypeError(f"register takes an Algorithm(collective=..., name=..., "
                                f"builder=..., ...), got {algorithm!r}")
    get_collective(algorithm.collective)  # unknown collective -> ArgumentError
    if not isinstance(algorithm.name, str) or not algorithm.name.strip():
        raise ArgumentError(f"Algorithm name={algorithm.name!r} must be a non-empty string")
    if not callable(algorithm.builder):
        raise ArgumentTypeError(f"Algorithm builder={algorithm.builder!r} must be callable "
                                "(world_size, **params) -> Schedule")
    # no cache to clear: schedules are memoized per entry object, so the new entry builds anew
    REGISTRY[(algorithm.collective, algorithm.name)] = algorithm
    return algorithm


def algorithms(collective: str) -> list[str]:
    """Names of the algorithms registered for ``collective``.

    Raises:
        ArgumentError: unknown collective.
    """
    get_collective(collective)
    return [name for (coll, name) in REGISTRY if coll == collective]


#: The one default algorithm of each collective: what ``ringccl.schedule``, ``ringccl.simulate``,
#: the CLI and the executors use when no algorithm is named (``ringccl algorithms`` marks it).
#: ring where the bandwidth-optimal ring exists; direct where there is no ring (scatter, gather,
#: all_to_all: the root, or every rank, sends each block straight to its owner, which is what
#: the simulator and the CLI have always used there).
DEFAULTS: Mapping[str, str] = {
    "all_reduce": "ring", "reduce_scatter": "ring", "all_gather": "ring", "broadcast": "ring",
    "reduce": "ring", "scatter": "direct", "gather": "direct", "all_to_all": "direct",
}


def default_algorithm(collective: str) -> str:
    """The default algorithm of ``collective`` (:data:`DEFAULTS`); when that entry has been
    taken out of the registry, the collective's first registered algorithm.

    Raises:
        ArgumentError: unknown collective, or no algorithm registered for it.
    """
    name = DEFAULTS.get(collective)
    if (collective, name) in REGISTRY:  # the common case, one lookup: this runs on every call
        return name
    names = algorithms(collective)
    if not names:
        raise ArgumentError(f"no algorithm is registered for {collective}")
    return names[0]


def get_algorithm(collective: str, algorithm: str) -> Algorithm:
    """The registry entry for (collective, algorithm).

    Raises:
        ArgumentError: unknown collective or algorithm (the message lists the valid names).
    """
    names = algorithms(collective)
    if (collective, algorithm) not in REGISTRY:
        raise ArgumentError(f"algorithm={algorithm!r} is not available for {collective}; "
                            f"expected one of {', '.join(names) or '(none)'}")
    return REGISTRY[(collective, algorithm)]


def params_key(params: Mapping[str, object]) -> tuple:
    """``params`` as a cache key: (name, type, value) in name order. The type is in the key
    because 2.0 == 2 and True == 1, but builders refuse floats and bools, so a schedule cached
    for segments=2 must not answer segments=2.0. Unhashable values make ``hash()`` of it fail."""
    return tuple((k, type(v), v) for k, v in sorted(params.items()))


def _build(algo: Algorithm, world_size: int, params: dict) -> Schedule:
    """``algo.builder(world_size, **params)`` after checking the parameter names against the
    builder's signature (values are the builder's to check)."""
    try:
        inspect.signature(algo.builder).bind(world_size, **params)
    except TypeError:
        takes = [p.name for p in list(inspect.signature(algo.builder).parameters.values())[1:]]
        raise ArgumentError(f"{algo.name} {algo.collective} takes the parameters "
                            f"{', '.join(takes) or '(none)'}; got {', '.join(sorted(params))}") \
            from None
    except ValueError:  # no signature to check against: let the builder decide
        pass
    schedule = algo.builder(world_size, **params)
    # what the registry promises its callers: a schedule of this collective on these ranks
    if not isinstance(schedule, Schedule) or (schedule.collective, schedule.world_size) != (
            algo.collective, world_size):
        got = (f"{schedule.collective} on world_size={schedule.world_size}"
               if isinstance(schedule, Schedule) else type(schedule).__name__)
        raise ArgumentError(f"the builder of {algo.name!r}, registered for {algo.collective}, "
                            f"returned {got} for world_size={world_size}; it must return a "
                            f"{algo.collective} Schedule of world_size={world_size}")
    return schedule


#: bytes of built schedules (:func:`schedule_nbytes`) that each schedule cache keeps, on top of
#: its count: this one and :func:`ringccl.schedule`'s (which holds mostly the same objects). A
#: schedule's arrays grow as world_size² (ring all_gather: 285 MB on 4,096 ranks), so 64 by
#: count alone could hold ~18 GB; 1 GiB still keeps the few largest a plan search walks at once
#: (up to 4,096 ranks) and every small one. Read at each insert, so it may be changed at run time.
SCHEDULE_CACHE_BYTES = 1 << 30


def schedule_nbytes(schedule: Schedule) -> int:
    """Bytes of ``schedule``'s arrays: its transfers (src, dst, src_chunk, dst_chunk, reduce),
    step_ptr, and the statistics it has memoized on itself so far (chunk_sends, chunk_recvs)."""
    kept = list(getattr(schedule, "_cache", {}).values())   # a copy: another thread may add
    return sum(a.nbytes for a in (schedule.src, schedule.dst, schedule.src_chunk,
                                  schedule.dst_chunk, schedule.reduce, schedule.step_ptr, *kept)
               if isinstance(a, np.ndarray))


@memoize(maxsize=64, maxbytes=lambda: SCHEDULE_CACHE_BYTES, nbytes=schedule_nbytes)
def _build_cached(algo: Algorithm, world_size: int,
                  params: tuple[tuple[str, type, object], ...]) -> Schedule:
    # keyed by the registry entry itself, not its name: a name registered again (or removed
    # and added back) is a new entry and builds anew, while a hit costs one hash and skips the
    # signature check its first build passed
    return _build(algo, world_size, {k: v for k, _, v in params})


def build_schedule(collective: str, algorithm: str, world_size: int, **params) -> Schedule:
    """Build (or fetch from a small cache: 64 schedules, :data:`SCHEDULE_CACHE_BYTES` of them)
    the schedule of ``algorithm`` for ``collective``.

    A cache hit costs about a microsecond (one dict lookup and one LRU lookup), so callers need
    no cache of their own; :func:`ringccl.clear_caches` empties it.

    Raises:
        ArgumentError: unknown names, world_size not an int >= 1, a parameter the builder does
            not take, or a builder that returned no schedule of this collective and world size.
        ArgumentTypeError: world_size not an integer.
    """
    try:
        algo = REGISTRY.get((collective, algorithm))
    except TypeError:  # an unhashable name: get_algorithm says what is allowed
        algo = None
    if algo is None:
        algo = get_algorithm(collective, algorithm)  # raises, listing the valid names
    if type(world_size) is not int or world_size < 1:
        world_size = check_int(world_size, "world_size", minimum=1)
    key = params_key(params) if params else ()
    try:
        return _build_cached(algo, world_size, key)
    except TypeError:
        try:
            hash(key)
        except TypeError:  # an unhashable value (a list, an array): the builder checks it
            return _build(algo, world_size, params)
        raise
