"""Algorithm registry: (collective, algorithm) -> schedule builder.

Each family lives in its own module and registers its builders with :func:`register`. A builder
takes ``world_size`` (and keyword parameters such as ``root``) and returns a
:class:`~ringccl.ir.Schedule`; it never touches data, numpy buffers of user data or torch.

Adding an algorithm is one new module that calls ``register`` (see README, "Adding an algorithm"),
imported here or by the user before use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from ..collectives import get_collective
from ..errors import ArgumentError
from ..ir import Schedule

__all__ = ["Algorithm", "register", "get_algorithm", "algorithms", "build_schedule", "REGISTRY"]


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm for one collective.

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


REGISTRY: dict[tuple[str, str], Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` to the registry (replacing an entry with the same key)."""
    get_collective(algorithm.collective)  # unknown collective -> ArgumentError
    REGISTRY[(algorithm.collective, algorithm.name)] = algorithm
    _build_cached.cache_clear()
    return algorithm


def algorithms(collective: str) -> list[str]:
    """Names of the algorithms registered for ``collective``.

    Raises:
        ArgumentError: unknown collective.
    """
    get_collective(collective)
    return [name for (coll, name) in REGISTRY if coll == collective]


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


@functools.lru_cache(maxsize=32)
def _build_cached(collective: str, algorithm: str, world_size: int,
                  params: tuple[tuple[str, object], ...]) -> Schedule:
    return REGISTRY[(collective, algorithm)].builder(world_size, **dict(params))


def build_schedule(collective: str, algorithm: str, world_size: int, **params) -> Schedule:
    """Build (or fetch from a small cache) the schedule of ``algorithm`` for ``collective``.

    Raises:
        ArgumentError: unknown names, or world_size not an int >= 1.
    """
    get_algorithm(collective, algorithm)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ArgumentError(f"world_size={world_size!r} must be an integer >= 1")
    return _build_cached(collective, algorithm, world_size, tuple(sorted(params.items())))


from . import ring  # noqa: E402,F401  (registers the ring family)
from . import (tree, recursive, bruck, pairwise, hierarchical,  # noqa: E402,F401
               scatter_allgather)
