"""The ringccl backend's algorithm per call: ``RINGCCL_ALGO``, else the default; its predicted time.

``RINGCCL_ALGO`` names an algorithm per collective, as NCCL_ALGO does::

    RINGCCL_ALGO=all_reduce:ring,all_gather:direct,broadcast:binomial_tree

Collectives not named keep the default. An entry that is not ``collective:algorithm`` with a
registered pair is refused at the first collective, naming the entry and the allowed names.

The default today is the registry's :data:`ringccl.algorithms.DEFAULTS` (what
``ringccl.torch``'s functions use); :func:`choose_algorithm` is the one place that becomes the
tuner's choice for the transport in use once the shared-memory transport (issue 16) lands.

The predicted time (logged with ``RINGCCL_DEBUG=INFO``) is the α-β-γ model
(:mod:`ringccl.costmodel`) of the chosen schedule on a flat machine with the link class of the
transport: gloo point-to-point over TCP loopback, fitted by ``ringccl fit`` on this project's
2-process ring all_reduce rows (docs/benchmarks.md, "The fitted model"): α = 1.51 ms per step,
β = 1.019 ns/B, γ = 0.267 ns/B.
"""

from __future__ import annotations

import os

from .. import caches
from ..algorithms import algorithms, default_algorithm
from ..collectives import COLLECTIVES
from ..costmodel import predictor
from ..errors import ArgumentError

__all__ = ["parse_algo_env", "choose_algorithm", "predicted_seconds", "size_class",
           "SIZE_CLASSES", "GLOO_P2P"]

#: (alpha [s per step], beta [s per byte sent], gamma [s per byte reduced]) of gloo
#: point-to-point on one host, from docs/benchmarks.md's fit (2 processes, TCP loopback)
GLOO_P2P = (1.51e-3, 1.019e-9, 0.267e-9)

#: upper bounds (bytes, exclusive) of the size classes of the log lines, NCCL-style powers of 4
SIZE_CLASSES = tuple(4 ** k for k in range(5, 17))   # 1 KiB ... 4 GiB


def size_class(nbytes: int) -> str:
    """The size class of a ``nbytes`` buffer as text: ``"<1KiB"``, ``"4KiB-16KiB"``, …"""
    lower = 0
    for upper in SIZE_CLASSES:
        if nbytes < upper:
            return f"{_human(lower)}-{_human(upper)}" if lower else f"<{_human(upper)}"
        lower = upper
    return f">={_human(lower)}"


def _human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


@caches.memoize(maxsize=16)
def parse_algo_env(value: str) -> dict[str, str]:
    """``RINGCCL_ALGO``'s value as {collective: algorithm}.

    Raises:
        ArgumentError: an entry that is not ``collective:algorithm``, an unknown collective or
            an algorithm not registered for it (the message names the entry and lists the
            allowed names).
    """
    chosen: dict[str, str] = {}
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        collective, sep, algorithm = (p.strip() for p in entry.partition(":"))
        if not sep or not collective or not algorithm:
            raise ArgumentError(f"RINGCCL_ALGO entry {entry!r} must be collective:algorithm, "
                                "e.g. all_reduce:ring")
        if collective not in COLLECTIVES:
            raise ArgumentError(f"RINGCCL_ALGO entry {entry!r}: unknown collective "
                                f"{collective!r}; expected one of {', '.join(COLLECTIVES)}")
        allowed = algorithms(collective)
        if algorithm not in allowed:
            raise ArgumentError(f"RINGCCL_ALGO entry {entry!r}: {collective} has no algorithm "
                                f"{algorithm!r}; expected one of {', '.join(allowed)}")
        chosen[collective] = algorithm
    return chosen


def choose_algorithm(collective: str, world_size: int, nbytes: int) -> tuple[str, bool]:
    """The algorithm of one call and whether ``RINGCCL_ALGO`` forced it.

    Args:
        collective: a name of :data:`ringccl.collectives.COLLECTIVES`.
        world_size: ranks of the group.
        nbytes: bytes of the collective's working buffer (nccl-tests' "size").
    Returns:
        (algorithm name, forced).
    Raises:
        ArgumentError: a malformed ``RINGCCL_ALGO`` (:func:`parse_algo_env`).
    """
    forced = parse_algo_env(os.environ.get("RINGCCL_ALGO", "")).get(collective)
    if forced is not None:
        return forced, True
    # until the shared-memory transport's tuner ("auto") lands: the registry's default, the
    # same as ringccl.torch's functions; world_size and nbytes are what the tuner will read
    return default_algorithm(collective), False


@caches.memoize(maxsize=256)
def _predictor(collective: str, algorithm: str, world_size: int):
    alpha, beta, gamma = GLOO_P2P
    return predictor(collective, algorithm, world_size, alpha=alpha, bandwidth=1 / beta,
                     gamma=gamma)


def predicted_seconds(collective: str, algorithm: str, world_size: int,
                      nbytes: int) -> float | None:
    """The model's seconds for one call over gloo point-to-point (:data:`GLOO_P2P`); None when
    the algorithm cannot be priced without parameters the call does not give."""
    try:
        return float(_predictor(collective, algorithm, world_size)(nbytes))
    except (ArgumentError, TypeError, ValueError):
        return None
