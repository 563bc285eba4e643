"""The one algorithm chooser: which algorithm a call runs when none is named ("auto").

Every executor asks it (ringccl.torch's and ringccl.mpi's functions with ``algorithm=None`` or
"auto", the torch.distributed backend per call, the hybrid transport's two-level choice), so the
same call on the same transport gets the same algorithm wherever it is issued. Like NCCL's
tuning (a table of (collective, algorithm) costs and its argmin, NCCL's ``src/graph/tuning.cc``),
it is data and one rule per transport:

* ``"shm"`` (every rank on one host, reads in place): ``direct`` for every collective (one
  step: with reads in place a ring's N-1 dependent steps are pure synchronisation; measured
  best or level for reduce_scatter, all_gather, broadcast and all_to_all at 4 KiB-16 MiB,
  docs/shm.md), except all_reduce from the measured crossover of :data:`TWO_SHOT_BYTES` (per
  backend: its array dialect's copies and reductions differ) on: ``two_shot``;
* ``"p2p"`` (torch.distributed or MPI point-to-point): the registry's
  :data:`ringccl.algorithms.DEFAULTS` (ring where the bandwidth-optimal ring exists);
* ``"hybrid"`` (shared memory inside each host, point-to-point across): the argmin of the
  α-β-γ model (:func:`predicted_seconds` on :func:`two_level_machine`) over the registry's
  default and the two-level ``hierarchical`` schedule with ``local_size`` = ranks per host,
  where one is registered and the hosts hold equal blocks of consecutive ranks.

``RINGCCL_ALGO`` (the torch.distributed backend's override, as NCCL_ALGO is NCCL's; the
library functions take ``algorithm=`` instead) names an algorithm per collective::

    RINGCCL_ALGO=all_reduce:ring,all_gather:direct,broadcast:tree

Collectives not named keep the transport's choice. An entry that is not
``collective:algorithm`` with a registered pair is refused at the first collective, naming the
entry and the allowed names (:func:`parse_algo_env`, the one parser; memoized per value).

The predicted time (the hybrid choice; the backend's ``RINGCCL_DEBUG=INFO`` line) is the α-β-γ
model (:mod:`ringccl.costmodel`) of the schedule with the link class of the transport in use
(:data:`LINKS`):

* gloo point-to-point over TCP loopback, fitted by ``ringccl fit`` on this project's 2-process
  ring all_reduce rows (docs/benchmarks.md, "The fitted model"): α = 1.51 ms per step,
  β = 1.019 ns/B, γ = 0.267 ns/B;
* shared memory: the cost model's fitted link class
  (:data:`ringccl.costmodel.presets.SHARED_MEMORY`, ``ringccl fit`` on this transport's own
  rows; its comment has the run and the held-out error, 33%) plus its per-call ε (87 µs,
  the call's fixed cost, the same for every algorithm) — :data:`SHM_FITTED`
  (:data:`SHM_PROVISIONAL`: the two points of a loaded run it replaced, kept for comparison).
"""

from __future__ import annotations

from typing import NamedTuple

from .. import caches, environment
from ..algorithms import algorithms, default_algorithm
from ..collectives import COLLECTIVES
from ..errors import ArgumentError
from .model import predictor
from .presets import SHARED_MEMORY, SHM_FIT
from .topology import two_level

__all__ = ["choose", "Choice", "TWO_SHOT_BYTES", "two_shot_bytes", "parse_algo_env",
           "predicted_seconds", "two_level_machine", "TRANSPORTS", "BACKENDS", "GLOO_P2P",
           "SHM_PROVISIONAL", "SHM_FITTED", "LINKS", "CALL_SECONDS"]

#: the transports a call runs on: "shm" (every rank of the group on this host), "p2p"
#: (point-to-point: torch.distributed, the backend's inner gloo group, MPI), "hybrid" (shm
#: inside each host, point-to-point across)
TRANSPORTS = ("shm", "p2p", "hybrid")

#: the backends, whose shared-memory data paths differ (torch: numpy views with torch's
#: reductions; MPI: numpy throughout) and so were measured apart
BACKENDS = ("torch", "mpi")

#: (alpha [s per step], beta [s per byte sent], gamma [s per byte reduced]) of gloo
#: point-to-point on one host, from docs/benchmarks.md's fit (2 processes, TCP loopback)
GLOO_P2P = (1.51e-3, 1.019e-9, 0.267e-9)

#: the same for the shared-memory transport, provisional until the cost model's fitted shm
#: link class exists: two_shot all_reduce on 2 processes costs 2·alpha + nbytes·(beta + gamma/2);
#: through its measured 815 µs at 1 MiB and 12007 µs at 16 MiB (an earlier two_shot run)
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
#: others' blocks) from it on, per (backend, transport) and world_size
#: (:func:`two_shot_bytes`: the entry of the largest world_size measured that is <= the
#: group's; below the smallest, the smallest's).
#:
#: ("torch", "shm"): measured with ``benchmarks/bench_shm.py --nproc N --crossover-only
#: --collectives all_reduce --sizes 256KiB,512KiB,1MiB,4MiB,16MiB,64MiB --iters 7`` (the
#: algorithms interleaved round by round, median µs, max over ranks; 2 cores, load average 2-3
#: from other jobs), direct / two_shot / ring:
#: 2 processes 256 KiB 164 / 153 / 155, 512 KiB 195 / 186 / 199, 1 MiB 294 / 258 / 253,
#: 4 MiB 1944 / 1195 / 1037, 16 MiB 7571 / 5954 / 6529, 64 MiB 63692 / 25902 / 25976;
#: 4 processes 256 KiB 1447 / 1628 / 1816, 512 KiB 1658 / 1604 / 1789, 1 MiB 2875 / 2166 /
#: 2198, 4 MiB 11266 / 6083 / 6732, 16 MiB 28752 / 12434 / 12233, 64 MiB 399795 / 52133 /
#: 46224. An earlier run (``-b 4KiB -e 16MiB --iters 5``, load 1-1.9) agrees below the
#: crossover: direct wins at 4-256 KiB for 2 and 4 processes (4 processes, 256 KiB: 894 /
#: 1024 / 1106). With 4 processes ring is level with two_shot from 16 MiB (0-12% faster in
#: these runs, inside the noise): not switched to on this evidence.
#:
#: ("mpi", "shm"): numpy's copies and reductions are cheaper per call than torch's on small
#: buffers, and eager sends (small sends complete at once, docs/shm.md) made one-shot's single
#: step cheaper still (the crossover moved up from 32 KiB). Measured with ``benchmarks/
#: bench_mpi_shm.py --nproc 2 --crossover --iters 5`` (2-core machine, load average 2.0-2.1
#: from other jobs; median µs direct / two_shot, several runs): 16 KiB 29.5 / 33.8, 57.9 /
#: 53.3; 32 KiB 36.5 / 39.8, 66.8 / 76.4, 33.5 / 37.6; 64 KiB 39.0 / 43.7, 40.0 / 43.3,
#: 61.1 / 67.4, 92.3 / 88.4; 128 KiB 59.6 / 50.6, 84.9 / 68.8, 66.2 / 52.2; 256 KiB 91.5 /
#: 68.3, 125.0 / 96.7 (before eager sends: 4 KiB 27.1 / 30.3, 64 KiB 42.4 / 39.7, 256 KiB
#: 92.9 / 69.2). 4 processes (``--nproc 4 --crossover``, same runs, 4 ranks on 2 cores):
#: 32 KiB 358.9 / 521.7, 258.2 / 296.4, 233.0 / 250.2; 64 KiB 587.3 / 647.9, 289.0 / 358.5;
#: 128 KiB 463.1 / 638.6, 331.4 / 340.9, 327.3 / 352.0; 256 KiB 518.0 / 500.4, 601.4 /
#: 610.2 (even).
TWO_SHOT_BYTES = {
    ("torch", "shm"): {2: 256 << 10, 4: 512 << 10},
    ("mpi", "shm"): {2: 128 << 10, 4: 256 << 10},
}


class Choice(NamedTuple):
    """What :func:`choose` picked: the algorithm, its parameters (``local_size`` for a
    two-level schedule), and whether ``RINGCCL_ALGO`` forced it."""

    algorithm: str
    params: dict
    forced: bool = False


def two_shot_bytes(world_size: int, backend: str = "torch") -> int:
    """all_reduce bytes from which ``two_shot`` runs over shared memory for ``world_size``
    ranks of ``backend`` (:data:`TWO_SHOT_BYTES`; looked up once per (backend, world_size):
    this runs on every call)."""
    hit = _two_shot.get((backend, world_size))
    if hit is None:
        by_world = TWO_SHOT_BYTES[backend, "shm"]
        known = [n for n in by_world if n <= world_size]
        hit = _two_shot[backend, world_size] = by_world[max(known) if known else min(by_world)]
    return hit


_two_shot: dict = {}   # (backend, world_size) -> two_shot_bytes's answer


def choose(collective: str, world_size: int, nbytes: int, transport: str = "p2p", *,
           backend: str = "torch", local_size: int | None = None,
           honour_env: bool = False) -> Choice:
    """The algorithm of one call with no algorithm named (module docstring).

    Args:
        collective: a name of :data:`ringccl.collectives.COLLECTIVES`.
        world_size: ranks of the group.
        nbytes: bytes of the collective's working buffer (nccl-tests' "size").
        transport: "shm", "p2p" or "hybrid" (:data:`TRANSPORTS`), the transport the call runs
            on.
        backend: "torch" or "mpi" (:data:`BACKENDS`): whose measured crossovers apply.
        local_size: "hybrid" on hosts of equal blocks of consecutive ranks: the ranks per host
            (None: not so; the two-level schedules are then not considered).
        honour_env: apply ``RINGCCL_ALGO`` first (the torch.distributed backend); a forced
            ``hierarchical`` gets ``local_size`` from the hosts too.
    Returns:
        :class:`Choice`. Same arguments, same answer on every rank.
    Raises:
        ArgumentError: a malformed ``RINGCCL_ALGO`` (:func:`parse_algo_env`); another
            ``transport`` or ``backend``.
    """
    if transport not in TRANSPORTS or backend not in BACKENDS:
        _check(transport, backend)
    two_level = transport == "hybrid" and local_size is not None and 1 < local_size < world_size
    if honour_env:
        forced = parse_algo_env((environment.get("RINGCCL_ALGO") or "")).get(collective)
        if forced is not None:
            params = {"local_size": local_size} if forced == "hierarchical" and two_level else {}
            return Choice(forced, params, True)
    if transport == "shm":
        if collective == "all_reduce" and world_size > 1 and \
                nbytes >= (_two_shot.get((backend, world_size))
                           or two_shot_bytes(world_size, backend)):
            return Choice("two_shot", {})
        return Choice("direct", {})
    if two_level and "hierarchical" in algorithms(collective):
        pick = _two_level_choice(collective, world_size, nbytes, local_size)
        return Choice(pick.algorithm, dict(pick.params))   # not the memoized dict
    return Choice(default_algorithm(collective), {})


@caches.memoize(maxsize=1024)
def _two_level_choice(collective: str, world_size: int, nbytes: int, local_size: int) -> Choice:
    """The cheaper by the model of the registry's default and ``hierarchical``."""
    flat = default_algorithm(collective)
    two = {"local_size": local_size}
    t_flat = predicted_seconds(collective, flat, world_size, nbytes, "hybrid", {}, local_size)
    t_two = predicted_seconds(collective, "hierarchical", world_size, nbytes, "hybrid", two,
                              local_size)
    if t_two is not None and (t_flat is None or t_two < t_flat):
        return Choice("hierarchical", two)
    return Choice(flat, {})


def _check(transport: str, backend: str = "torch") -> None:
    if transport not in TRANSPORTS:
        raise ArgumentError(f"transport={transport!r} must be one of "
                            f"{', '.join(map(repr, TRANSPORTS))}")
    if backend not in BACKENDS:
        raise ArgumentError(f"backend={backend!r} must be one of "
                            f"{', '.join(map(repr, BACKENDS))}")


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
    _check(transport)
    try:
        return CALL_SECONDS[transport] + float(_predictor(
            collective, algorithm, world_size, transport, tuple(sorted((params or {}).items())),
            local_size)(nbytes))
    except (ArgumentError, TypeError, ValueError):
        return None
