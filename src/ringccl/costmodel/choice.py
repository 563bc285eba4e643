"""The ringccl backend's algorithm per call: ``RINGCCL_ALGO``, else the transport's choice; its
predicted time.

``RINGCCL_ALGO`` names an algorithm per collective, as NCCL_ALGO does::

    RINGCCL_ALGO=all_reduce:ring,all_gather:direct,broadcast:binomial_tree

Collectives not named keep the transport's choice ("auto"). An entry that is not
``collective:algorithm`` with a registered pair is refused at the first collective, naming the
entry and the allowed names.

"auto" is what ``ringccl.torch``'s functions choose for the same transport: over shared memory
the measured :func:`ringccl.torch.executor.shm_algorithm` (one-shot ``direct``, ``two_shot``
all_reduce from ``SHM_TWO_SHOT_BYTES``), over gloo point-to-point the registry's
:data:`ringccl.algorithms.DEFAULTS`.

The predicted time (logged with ``RINGCCL_DEBUG=INFO``) is the α-β-γ model
(:mod:`ringccl.costmodel`) of the chosen schedule on a flat machine with the link class of the
transport in use (:data:`LINKS`):

* gloo point-to-point over TCP loopback, fitted by ``ringccl fit`` on this project's 2-process
  ring all_reduce rows (docs/benchmarks.md, "The fitted model"): α = 1.51 ms per step,
  β = 1.019 ns/B, γ = 0.267 ns/B;
* shared memory: the cost model's fitted link class
  (:data:`ringccl.costmodel.presets.SHARED_MEMORY`, ``ringccl fit`` on this transport's own
  rows; its comment has the run and the held-out error, 33%) plus its per-call ε (87 µs,
  the call's fixed cost, the same for every algorithm) — :data:`SHM_FITTED`. Until the
  integration run of issue 16 it was :data:`SHM_PROVISIONAL`, two points of a loaded run,
  kept for comparison.
"""

from __future__ import annotations

import os

from .. import caches
from ..algorithms import algorithms, default_algorithm
from ..collectives import COLLECTIVES
from .model import predictor
from .presets import SHARED_MEMORY, SHM_FIT
from .topology import two_level
from ..errors import ArgumentError

__all__ = ["parse_algo_env", "choose_algorithm", "predicted_seconds", "size_class",
           "SIZE_CLASSES", "GLOO_P2P", "SHM_PROVISIONAL", "SHM_FITTED", "LINKS", "CALL_SECONDS",
           "TRANSPORTS"]

#: the backend's transports: "shm" (every rank of the group on this host), "p2p" (gloo
#: point-to-point on the inner gloo group), "hybrid" (shm inside each host, gloo across)
TRANSPORTS = ("shm", "p2p", "hybrid")

#: (alpha [s per step], beta [s per byte sent], gamma [s per byte reduced]) of gloo
#: point-to-point on one host, from docs/benchmarks.md's fit (2 processes, TCP loopback)
GLOO_P2P = (1.51e-3, 1.019e-9, 0.267e-9)

#: the same for the shared-memory transport, provisional until the cost model's fitted shm
#: link class exists: two_shot all_reduce on 2 processes costs 2·alpha + nbytes·(beta + gamma/2);
#: through its measured 815 µs at 1 MiB and 12007 µs at 16 MiB (SHM_TWO_SHOT_BYTES's docstring)
#: that is alpha = 35 µs and beta + gamma/2 = 0.711 ns/B, split as beta = gamma (a reduce reads
#: two streams and writes one, a copy reads one and writes one: about the same memory traffic
#: per byte on this machine).
SHM_PROVISIONAL = (35e-6, 0.474e-9, 0.474e-9)

#: the fitted shared-memory link class (:data:`ringccl.costmodel.presets.SHARED_MEMORY`) as
#: (alpha, beta, gamma)
SHM_FITTED = (SHARED_MEMORY.alpha, 1.0 / SHARED_MEMORY.bandwidth, SHARED_MEMORY.gamma)

#: the link class of each transport, and whether its figures are provisional; "hybrid" is
#: priced on a two-level machine (:func:`two_level_machine`) whose intra-host link is "shm"'s
#: and inter-host link "p2p"'s
LINKS = {"p2p": (GLOO_P2P, False), "shm": (SHM_FITTED, False), "hybrid": (SHM_FITTED, False)}

#: seconds every call costs whatever it moves, by transport: the fitted ε of shared memory
#: (the front end, the plan lookup, the entry; over gloo it is inside the fitted α)
CALL_SECONDS = {"p2p": 0.0, "shm": SHM_FIT["epsilon"], "hybrid": SHM_FIT["epsilon"]}

#: all_reduce over shared memory: one-shot (``direct``: every rank reads and reduces every
#: peer's whole buffer, one step) below this many bytes, ``two_shot`` (direct reduce-scatter +
#: direct all-gather: each rank reduces its 1/N block from the peers' buffers, then copies the
#: others' blocks) from it on, per world_size (:func:`shm_two_shot_bytes`: the entry of the
#: largest world_size measured that is <= the group's). Measured with ``benchmarks/
#: bench_shm.py --nproc N --crossover-only --collectives all_reduce --sizes 256KiB,512KiB,1MiB,
#: 4MiB,16MiB,64MiB --iters 7`` (the algorithms interleaved round by round, median µs, max over
#: ranks; 2 cores, load average 2-3 from other jobs), direct / two_shot / ring:
#: 2 processes 256 KiB 164 / 153 / 155, 512 KiB 195 / 186 / 199, 1 MiB 294 / 258 / 253,
#: 4 MiB 1944 / 1195 / 1037, 16 MiB 7571 / 5954 / 6529, 64 MiB 63692 / 25902 / 25976;
#: 4 processes 256 KiB 1447 / 1628 / 1816, 512 KiB 1658 / 1604 / 1789, 1 MiB 2875 / 2166 /
#: 2198, 4 MiB 11266 / 6083 / 6732, 16 MiB 28752 / 12434 / 12233, 64 MiB 399795 / 52133 /
#: 46224. An earlier run (``-b 4KiB -e 16MiB --iters 5``, load 1-1.9) agrees below the
#: crossover: direct wins at 4-256 KiB for 2 and 4 processes (4 processes, 256 KiB: 894 /
#: 1024 / 1106). With 4 processes ring is level with two_shot from 16 MiB (0-12% faster in
#: these runs, inside the noise): not switched to on this evidence.
SHM_TWO_SHOT_BYTES_BY_WORLD = {2: 256 << 10, 4: 512 << 10}
#: the 2-process crossover (the name the first round gave it)
SHM_TWO_SHOT_BYTES = SHM_TWO_SHOT_BYTES_BY_WORLD[2]


def shm_two_shot_bytes(world_size: int) -> int:
    """all_reduce bytes from which ``two_shot`` beats ``direct`` over shared memory on
    ``world_size`` ranks (:data:`SHM_TWO_SHOT_BYTES_BY_WORLD`)."""
    known = [n for n in SHM_TWO_SHOT_BYTES_BY_WORLD if n <= world_size]
    return SHM_TWO_SHOT_BYTES_BY_WORLD[max(known) if known else min(SHM_TWO_SHOT_BYTES_BY_WORLD)]


def shm_algorithm(collective: str, world_size: int, nbytes: int) -> str:
    """The algorithm ``algorithm="auto"`` runs over shared memory for ``nbytes`` of the
    collective's buffer on ``world_size`` ranks: ``direct`` everywhere (one step: with reads
    in place a ring's N-1 dependent steps are pure synchronisation; measured best or level for
    reduce_scatter, all_gather, broadcast and all_to_all at 4 KiB-16 MiB, see docs/shm.md),
    except all_reduce from :func:`shm_two_shot_bytes` on, ``two_shot``."""
    if collective == "all_reduce" and world_size > 1 and nbytes >= shm_two_shot_bytes(world_size):
        return "two_shot"
    return "direct"


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


def _check_transport(transport: str) -> None:
    if transport not in TRANSPORTS:
        raise ArgumentError(f"transport={transport!r} must be one of "
                            f"{', '.join(map(repr, TRANSPORTS))}")


def choose_algorithm(collective: str, world_size: int, nbytes: int,
                     transport: str = "p2p", local_size: int | None = None
                     ) -> tuple[str, dict, bool]:
    """The algorithm of one call, its parameters, and whether ``RINGCCL_ALGO`` forced it.

    Args:
        collective: a name of :data:`ringccl.collectives.COLLECTIVES`.
        world_size: ranks of the group.
        nbytes: bytes of the collective's working buffer (nccl-tests' "size").
        transport: "shm", "p2p" or "hybrid" (:data:`TRANSPORTS`), the transport the call runs
            on.
        local_size: "hybrid" on hosts of equal blocks of consecutive ranks: the ranks per host
            (None: not so; the two-level schedules are then not considered).
    Returns:
        (algorithm name, parameters, forced). Not forced: over "shm" :func:`ringccl.torch.
        executor.shm_algorithm`, over "p2p" :data:`ringccl.algorithms.DEFAULTS` (ringccl.torch's
        "auto" for the same transport), over "hybrid" the faster by the cost model
        (:func:`predicted_seconds` on :func:`two_level_machine`) of the registry's default and
        the two-level ``hierarchical`` schedule with ``local_size``, where one is registered.
        A forced ``hierarchical`` gets ``local_size`` from the hosts too.
    Raises:
        ArgumentError: a malformed ``RINGCCL_ALGO`` (:func:`parse_algo_env`); another
            ``transport``.
    """
    _check_transport(transport)
    forced = parse_algo_env(os.environ.get("RINGCCL_ALGO", "")).get(collective)
    two_level = transport == "hybrid" and local_size is not None and 1 < local_size < world_size
    if forced is not None:
        params = {"local_size": local_size} if forced == "hierarchical" and two_level else {}
        return forced, params, True
    if transport == "shm":
        return shm_algorithm(collective, world_size, nbytes), {}, False
    if two_level and "hierarchical" in algorithms(collective):
        algorithm, params = _two_level_choice(collective, world_size, nbytes, local_size)
        return algorithm, params, False
    return default_algorithm(collective), {}, False


@caches.memoize(maxsize=1024)
def _two_level_choice(collective: str, world_size: int, nbytes: int, local_size: int):
    flat = default_algorithm(collective)
    two = {"local_size": local_size}
    t_flat = predicted_seconds(collective, flat, world_size, nbytes, "hybrid", {}, local_size)
    t_two = predicted_seconds(collective, "hierarchical", world_size, nbytes, "hybrid", two,
                              local_size)
    if t_two is not None and (t_flat is None or t_two < t_flat):
        return "hierarchical", two
    return flat, {}


def two_level_machine(world_size: int, local_size: int):
    """The cost model's machine for the "hybrid" transport: ``world_size / local_size`` hosts of
    ``local_size`` ranks, inside a host the shared-memory link (:data:`SHM_FITTED`'s α,
    1/β), across hosts one NIC per host with gloo point-to-point's (:data:`GLOO_P2P`), the
    ranks host-major (:func:`ringccl.costmodel.topology.two_level`)."""
    (a_shm, b_shm, _), (a_p2p, b_p2p, _) = SHM_FITTED, GLOO_P2P
    return two_level(world_size // local_size, local_size, (a_shm, 1 / b_shm),
                     (a_p2p, 1 / b_p2p), nics_per_node=1)


@caches.memoize(maxsize=256)
def _predictor(collective: str, algorithm: str, world_size: int, transport: str,
               params: tuple = (), local_size: int | None = None):
    (alpha, beta, gamma), _ = LINKS[transport]
    if transport == "hybrid" and local_size:
        # the reduction runs on the host's cores whichever link brought the bytes: shm's gamma
        return predictor(collective, algorithm, topology=two_level_machine(world_size,
                                                                           local_size),
                         gamma=gamma, **dict(params))
    return predictor(collective, algorithm, world_size, alpha=alpha, bandwidth=1 / beta,
                     gamma=gamma, **dict(params))


def predicted_seconds(collective: str, algorithm: str, world_size: int,
                      nbytes: int, transport: str = "p2p", params: dict | None = None,
                      local_size: int | None = None) -> float | None:
    """The model's seconds for one call over ``transport``'s link class (:data:`LINKS`: gloo
    point-to-point, the fitted shared-memory class plus its per-call ε, :data:`CALL_SECONDS`;
    "hybrid" with ``local_size``: the
    two-level machine of :func:`two_level_machine`); ``params``: the algorithm's. None when
    the algorithm cannot be priced without parameters the call does not give.

    Raises:
        ArgumentError: ``transport`` not in :data:`TRANSPORTS`.
    """
    _check_transport(transport)
    try:
        return CALL_SECONDS[transport] + float(_predictor(
            collective, algorithm, world_size, transport, tuple(sorted((params or {}).items())),
            local_size)(nbytes))
    except (ArgumentError, TypeError, ValueError):
        return None
