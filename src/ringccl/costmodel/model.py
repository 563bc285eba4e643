"""The alpha-beta-gamma cost model: a schedule walked step by step on a topology.

Per step, every transfer moves one chunk of ``nbytes / num_chunks`` bytes (chunks are fluid, as
in the textbook formulas) over the links its topology routes it through; then

    step time = max over links l in use of (alpha_l + bytes on l / bandwidth_l)
                + gamma * (bytes reduced by the busiest rank in the step)

and the collective takes the sum over steps. Transfers sharing a link in one step add their bytes
on it, so they slow each other (a rank sending two chunks at once, a NIC shared by a node's
ring hops, an oversubscribed uplink). A step without transfers costs nothing.

On :func:`ringccl.costmodel.topology.flat` every rank has one full-duplex port, and this reduces to
``T = sum over steps [alpha + beta * max over ranks max(bytes out, bytes in) + gamma * max bytes
reduced]``, which each algorithm's closed form (``Algorithm.time``) states in a line; the tests
hold walk and closed form equal for world sizes up to 256. Above :data:`WALK_LIMIT` ranks on a flat
machine, :func:`cost` uses the closed form (a 1M-rank ring costs microseconds, not a schedule of
2·10^12 transfers).

The walk is vectorised: for a block of steps, one ``numpy.bincount`` over (step, link) counts the
chunks on every link; per step only the busiest link of each kind of link matters, so a walk
reduces to a (steps x kinds) table of chunk counts that is then priced for any message size.

Machine assumption: single-port (a rank's concurrent transfers share its port), full-duplex,
homogeneous links of each kind, fluid chunks, no overlap between steps (BSP).

References:
    R. Hockney, "The communication challenge for MPP: Intel Paragon and Meiko CS-2", Parallel
    Computing 20(3), 1994: T = alpha + beta * m.
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
    IJHPCA 19(1), 2005, section 2: alpha, beta, gamma (per byte reduced).
    nccl-tests, doc/PERFORMANCE.md: algbw and busbw (:mod:`ringccl.bench.metrics`).
"""

from __future__ import annotations

import collections
import inspect
import math
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

import numpy as np

from .. import units
from ..algorithms import Algorithm, build_schedule, get_algorithm
from ..collectives import get_collective
from ..errors import ArgumentError, ArgumentTypeError
from ..ir import Schedule
from .topology import Topology, TwoLevel, flat

__all__ = ["cost", "walk", "predictor", "Predictor", "CostResult", "StepCost", "WALK_LIMIT",
           "parse_gamma", "resolve_topology"]

#: On a flat machine, above this many ranks :func:`cost` uses the closed form instead of walking.
WALK_LIMIT = 256

_BLOCK_CELLS = 1 << 22  # (steps x links) cells per bincount block: ~32 MB of float64


class StepCost(NamedTuple):
    """One step of a walked schedule, priced.

    ``seconds = latency_seconds + bandwidth_seconds + reduction_seconds``; ``link`` names the
    link that set the step's time and ``link_bytes`` the bytes it carried in the step.
    """

    index: int
    phase: str
    seconds: float
    latency_seconds: float
    bandwidth_seconds: float
    reduction_seconds: float
    link: str
    link_bytes: float


@dataclass(frozen=True)
class CostResult:
    """Predicted time of one collective call.

    Attributes:
        collective, algorithm, world_size: what was costed.
        nbytes: bytes of one rank's working buffer (nccl-tests' "size").
        seconds: total = latency_seconds + bandwidth_seconds + reduction_seconds.
        latency_seconds: sum over steps of the alpha of the link that set each step's time.
        bandwidth_seconds: sum over steps of that link's bytes / bandwidth.
        reduction_seconds: sum over steps of gamma x bytes reduced by the busiest rank.
        num_steps: steps of the schedule.
        method: "walk" or "closed_form".
        steps: per-step breakdown (:class:`StepCost`), None for the closed form.
        link_bytes: (num_links,) bytes each link carries over the whole call (walk only).
        max_link_bytes: link kind -> bytes carried by the busiest link of that kind (the closed
            form knows only "port out", from ``Algorithm.bytes_sent``).
        topology: the machine.
    """

    collective: str
    algorithm: str
    world_size: int
    nbytes: float
    seconds: float
    latency_seconds: float
    bandwidth_seconds: float
    reduction_seconds: float
    num_steps: int
    method: str
    steps: tuple[StepCost, ...] | None = field(repr=False)
    link_bytes: np.ndarray | None = field(repr=False)
    max_link_bytes: dict = field(repr=False)
    topology: Topology = field(repr=False)

    @property
    def algbw(self) -> float:
        """nbytes / seconds, bytes/s (inf for a zero-time call)."""
        return self.nbytes / self.seconds if self.seconds > 0 else float("inf")

    @property
    def busbw(self) -> float:
        """algbw x the collective's bus factor, bytes/s (nccl-tests doc/PERFORMANCE.md)."""
        return self.algbw * get_collective(self.collective).bus_factor(self.world_size)

    def by_phase(self) -> dict[str, float]:
        """Seconds per phase name, in schedule order (walk only).

        Raises:
            ArgumentError: the result came from the closed form (no steps).
        """
        if self.steps is None:
            raise ArgumentError("by_phase needs a walked result; call cost(..., method='walk')")
        out: dict[str, float] = {}
        for s in self.steps:
            out[s.phase] = out.get(s.phase, 0.0) + s.seconds
        return out


# -- argument parsing -----------------------------------------------------------------------------

def parse_gamma(gamma) -> float:
    """gamma in seconds per byte reduced: a number, or a reduction rate such as ``"100GB/s"``.

    Raises:
        ArgumentError: negative, not finite, or a malformed rate.
    """
    if isinstance(gamma, str):
        return 1.0 / units.bandwidth(gamma)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating, np.integer)):
        raise ArgumentTypeError(f"gamma={gamma!r} must be seconds per byte or a rate such as "
                                "'100GB/s'")
    if not np.isfinite(gamma) or gamma < 0:
        raise ArgumentError(f"gamma={gamma!r} must be a finite number of seconds per byte >= 0")
    return float(gamma)


def _nbytes(nbytes) -> float:
    if isinstance(nbytes, str):
        return float(units.size(nbytes))
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float, np.integer, np.floating)):
        raise ArgumentTypeError(f"nbytes={nbytes!r} must be a number of bytes or a size such as "
                                "'4MiB'")
    try:
        value = float(nbytes)     # a Python int past int64 (10**30) is no numpy number
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or value < 0:
        raise ArgumentError(f"nbytes={nbytes!r} must be a finite number of bytes >= 0")
    return value


def resolve_topology(world_size, topology, alpha, bandwidth) -> Topology:
    """The machine described either by ``topology`` or by ``alpha`` and ``bandwidth`` (flat).

    Raises:
        ArgumentError: both or neither given, or world_size differing from the topology's.
    """
    if topology is None:
        if alpha is None or bandwidth is None:
            raise ArgumentError("give a topology, or alpha and bandwidth for a flat machine "
                                f"(got alpha={alpha!r}, bandwidth={bandwidth!r})")
        if world_size is None:
            raise ArgumentError("world_size is required without a topology")
        return flat(world_size, alpha, bandwidth)
    if not isinstance(topology, Topology):
        raise ArgumentTypeError(f"topology={topology!r} must be a "
                                "ringccl.costmodel.topology.Topology")
    if alpha is not None or bandwidth is not None:
        raise ArgumentError("alpha and bandwidth describe a flat machine; with a topology they "
                            "come from its links (got both)")
    if world_size is not None and world_size != topology.world_size:
        raise ArgumentError(f"world_size={world_size!r} differs from the topology's "
                            f"{topology.world_size} ranks")
    return topology


# names under which a two-level algorithm (e.g. hierarchical all_reduce) takes the node shape
_LOCAL_NAMES = ("local", "local_size", "ranks_per_node", "gpus_per_node", "devices_per_node")
_NODES_NAMES = ("nodes", "num_nodes")


def _topology_params(algorithm: Algorithm, topology: Topology, params: dict) -> dict:
    """Fill a two-level algorithm's node-shape parameters from a node-major two-level machine."""
    if not isinstance(topology, TwoLevel) or not np.array_equal(
            topology.placement, np.arange(topology.world_size)):
        return params
    try:
        names = inspect.signature(algorithm.builder).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
        return params
    out = dict(params)
    for group, value in ((_LOCAL_NAMES, topology.local), (_NODES_NAMES, topology.nodes)):
        for name in group:
            if name in names and name not in out:
                out[name] = value
    return out


# -- the walk -------------------------------------------------------------------------------------

class _Profile:
    """A schedule on a topology reduced to chunk counts: what pricing any nbytes needs.

    Attributes:
        units: (num_steps, K) chunks on the busiest link of each link class (0 = class unused).
        argmax_link: (num_steps, K) that busiest link.
        reduce_units: (num_steps,) chunks reduced by the busiest rank.
        link_units: (num_links,) chunks each link carries over the whole schedule.
        class_alpha, class_bandwidth: (K,) per class; a class is a distinct (alpha, bandwidth).
    """

    def __init__(self, schedule: Schedule, topology: Topology):
        if schedule.world_size != topology.world_size:
            raise ArgumentError(f"schedule has world_size={schedule.world_size}, topology "
                                f"{topology.world_size} ranks")
        self.num_steps, self.num_chunks = schedule.num_steps, schedule.num_chunks
        # bytes of M per chunk: M/num_chunks, or M/N for all_to_all (see Collective.chunk_nbytes)
        self.chunk_divisor = 1.0 / get_collective(schedule.collective).chunk_nbytes(
            schedule.world_size, schedule.num_chunks, 1.0)
        self.phases = schedule.phase_names
        self.topology = topology
        n_steps, n_links, n = self.num_steps, topology.num_links, schedule.world_size
        # only the links the ranks can reach are counted (a sparse group on a large machine)
        used = topology.used_links()
        to_used = np.full(n_links, -1, dtype=np.int64)
        to_used[used] = np.arange(used.size)
        pairs = np.stack([topology.link_alpha[used], topology.link_bandwidth[used]], axis=1)
        classes, link_class = np.unique(pairs, axis=0, return_inverse=True)
        link_class = link_class.ravel()
        self.class_alpha, self.class_bandwidth = classes[:, 0], classes[:, 1]
        members = [np.nonzero(link_class == k)[0] for k in range(len(classes))]
        self.units = np.zeros((n_steps, len(classes)))
        self.argmax_link = np.zeros((n_steps, len(classes)), dtype=np.int64)
        self.reduce_units = np.zeros(n_steps)
        counted = np.zeros(used.size)
        ptr = schedule.step_ptr
        block = max(1, _BLOCK_CELLS // max(used.size, n))
        for s0 in range(0, n_steps, block):
            s1 = min(n_steps, s0 + block)
            t0, t1 = int(ptr[s0]), int(ptr[s1])
            if t0 == t1:
                continue
            local_step = np.repeat(np.arange(s1 - s0, dtype=np.int64), np.diff(ptr[s0:s1 + 1]))
            links = topology.route(schedule.src[t0:t1], schedule.dst[t0:t1])
            on = links >= 0
            idx = to_used[links[on]]
            if (idx < 0).any():   # pragma: no cover - a topology whose used_links is wrong
                raise RuntimeError(f"{type(topology).__name__}.used_links() misses a link its "
                                   "route uses")
            keys = np.broadcast_to(local_step[:, None], links.shape)[on] * used.size + idx
            counts = np.bincount(keys, minlength=(s1 - s0) * used.size).reshape(
                s1 - s0, used.size)
            counted += counts.sum(axis=0)
            for k, cols in enumerate(members):
                sub = counts if cols.size == used.size else counts[:, cols]
                arg = sub.argmax(axis=1)
                self.argmax_link[s0:s1, k] = used[cols[arg]]
                self.units[s0:s1, k] = sub[np.arange(s1 - s0), arg]
            red = schedule.reduce[t0:t1]
            if red.any():
                rkeys = local_step[red] * n + schedule.dst[t0:t1][red]
                self.reduce_units[s0:s1] = np.bincount(rkeys, minlength=(s1 - s0) * n).reshape(
                    s1 - s0, n).max(axis=1)
        self.link_units = np.zeros(n_links)
        self.link_units[used] = counted

    def price(self, nbytes: np.ndarray, gamma: float):
        """Per-step components for each size: arrays (m, num_steps) and the winning class."""
        x = np.asarray(nbytes, dtype=float).reshape(-1, 1, 1) / self.chunk_divisor
        used = self.units > 0
        bw_part = self.units[None] * x / self.class_bandwidth
        t = np.where(used[None], self.class_alpha + bw_part, -np.inf)
        k = t.argmax(axis=2)                                        # (m, S) winning class
        any_used = used.any(axis=1)[None]                           # (1, S)
        lat = np.where(any_used, self.class_alpha[k], 0.0)
        bw = np.where(any_used, np.take_along_axis(bw_part, k[..., None], axis=2)[..., 0], 0.0)
        red = gamma * self.reduce_units[None] * x[..., 0]
        return lat, bw, red, k

    def seconds(self, nbytes, gamma: float) -> np.ndarray:
        lat, bw, red, _ = self.price(nbytes, gamma)
        return (lat + bw + red).sum(axis=1)


_PROFILES: "collections.OrderedDict[tuple, _Profile]" = collections.OrderedDict()


def _profile(schedule: Schedule, topology: Topology, key: tuple | None) -> _Profile:
    if key is None:
        return _Profile(schedule, topology)
    if key in _PROFILES:
        _PROFILES.move_to_end(key)
        return _PROFILES[key]
    prof = _PROFILES[key] = _Profile(schedule, topology)
    if len(_PROFILES) > 16:
        _PROFILES.popitem(last=False)
    return prof


def _walk_result(prof: _Profile, collective: str, algorithm: str, nbytes: float,
                 gamma: float) -> CostResult:
    lat, bw, red, k = (a[0] for a in prof.price(np.array([nbytes]), gamma))
    topo = prof.topology
    x = nbytes / prof.chunk_divisor
    steps_idx = np.arange(prof.num_steps)
    link = prof.argmax_link[steps_idx, k]
    link_units = prof.units[steps_idx, k]
    steps = tuple(StepCost(i, prof.phases[i], float(lat[i] + bw[i] + red[i]), float(lat[i]),
                           float(bw[i]), float(red[i]),
                           topo.link_name(int(link[i])) if prof.units[i].any() else "",
                           float(link_units[i] * x))
                  for i in range(prof.num_steps))
    link_bytes = prof.link_units * x
    max_link: dict[str, float] = {}
    for kind_id, name in enumerate(topo.kinds):
        on = link_bytes[topo.link_kind == kind_id]
        if on.size and on.max() > 0:
            max_link[name] = float(on.max())
    return CostResult(collective, algorithm, topo.world_size, nbytes,
                      float(lat.sum() + bw.sum() + red.sum()), float(lat.sum()), float(bw.sum()),
                      float(red.sum()), prof.num_steps, "walk", steps, link_bytes, max_link, topo)


def walk(schedule: Schedule, nbytes, topology: Topology | None = None, *, alpha=None,
         bandwidth=None, gamma=0.0) -> CostResult:
    """Price any schedule (a registered one or your own) by walking it on a topology.

    Args:
        schedule: the :class:`~ringccl.ir.Schedule`.
        nbytes: bytes of one rank's working buffer (number, or a size such as ``"4MiB"``); each
            transfer moves ``nbytes / schedule.num_chunks`` bytes.
        topology: the machine; or ``alpha`` (s) and ``bandwidth`` (bytes/s) for a flat one.
        gamma: seconds per byte reduced, or a reduction rate such as ``"100GB/s"``.
    Returns:
        a :class:`CostResult` with ``method == "walk"`` and a per-step breakdown.
    Raises:
        ArgumentError: bad sizes or rates, world sizes that differ, both or neither of topology
            and alpha/bandwidth.
    """
    if not isinstance(schedule, Schedule):
        raise ArgumentTypeError(f"schedule={schedule!r} must be a ringccl Schedule")
    topo = resolve_topology(schedule.world_size, topology, alpha, bandwidth)
    prof = _profile(schedule, topo, None)
    return _walk_result(prof, schedule.collective, schedule.algorithm, _nbytes(nbytes),
                        parse_gamma(gamma))


# -- the public entry points ----------------------------------------------------------------------

class Predictor:
    """Seconds as a function of nbytes for one collective, algorithm and machine.

    Built by :func:`predictor`; walks the schedule once (cached) or uses the closed form, then
    prices any number of sizes cheaply: ``p(nbytes_array) -> seconds_array``.

    Attributes:
        method: "walk" or "closed_form". algorithm: the registry entry. topology: the machine.
    """

    def __init__(self, collective: str, algorithm: str, topology: Topology, gamma: float,
                 method: str, params: Mapping[str, object]):
        self.collective, self.name = collective, algorithm
        self.algorithm = get_algorithm(collective, algorithm)
        self.topology, self.gamma, self.params = topology, gamma, dict(params)
        n = topology.world_size
        if method not in ("auto", "walk", "closed_form"):
            raise ArgumentError(f"method={method!r} must be 'auto', 'walk' or 'closed_form'")
        closed_ok = topology.uniform and self.algorithm.time is not None and not self.params
        if method == "closed_form" and not closed_ok:
            why = ("the closed form holds on a flat machine only" if not topology.uniform else
                   f"{algorithm} has no closed form" if self.algorithm.time is None else
                   "the closed form takes no algorithm parameters")
            raise ArgumentError(f"method='closed_form' is not available: {why}")
        self.method = ("closed_form" if method == "closed_form" or
                       (method == "auto" and closed_ok and n > WALK_LIMIT) else "walk")
        self._profile = None
        if self.method == "walk":
            params = _topology_params(self.algorithm, topology, self.params)
            try:
                schedule = build_schedule(collective, algorithm, n, **params)
            except MemoryError:   # one of the builder's arrays is past what can be allocated
                raise ArgumentError(
                    f"the {algorithm} {collective} schedule on {n} ranks does not fit in memory "
                    "to be walked (a two-level machine is priced step by step); use fewer "
                    "ranks") from None
            key = (collective, algorithm, n, tuple(sorted(params.items())), topology.key)
            self._profile = _profile(schedule, topology, key)
            self.num_steps = schedule.num_steps
        else:
            self.num_steps = self.algorithm.num_steps(n)

    def __getstate__(self):
        # the registry entry holds its builder's lambdas: pickle its name, look it up again
        return {**self.__dict__, "algorithm": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.algorithm = get_algorithm(self.collective, self.name)

    def _closed(self, nbytes: float, alpha: float, beta: float, gamma: float) -> float:
        return float(self.algorithm.time(self.topology.world_size, nbytes, alpha, beta, gamma))

    def __call__(self, nbytes):
        """Seconds for each size in ``nbytes`` (a number or an array of bytes)."""
        x = np.asarray(nbytes, dtype=float)
        if self.method == "walk":
            out = self._profile.seconds(x.ravel(), self.gamma).reshape(x.shape)
        else:
            topo = self.topology
            out = np.array([self._closed(v, topo.alpha, 1 / topo.bandwidth, self.gamma)
                            for v in x.ravel()]).reshape(x.shape)
        return float(out) if out.ndim == 0 else out

    def result(self, nbytes) -> CostResult:
        """The full :class:`CostResult` for one size."""
        nbytes = _nbytes(nbytes)
        if self.method == "walk":
            return _walk_result(self._profile, self.collective, self.name, nbytes, self.gamma)
        topo, n = self.topology, self.topology.world_size
        beta = 1 / topo.bandwidth
        lat = self._closed(nbytes, topo.alpha, 0.0, 0.0)
        bw = self._closed(nbytes, 0.0, beta, 0.0)
        red = self._closed(nbytes, 0.0, 0.0, self.gamma)
        # the closed forms are linear in (alpha, beta, gamma), so the three parts add up
        return CostResult(self.collective, self.name, n, nbytes, lat + bw + red, lat, bw, red,
                          self.num_steps, "closed_form", None, None,
                          {"port out": float(self.algorithm.bytes_sent(n, nbytes))}, topo)


def predictor(collective: str, algorithm: str, world_size: int | None = None,
              topology: Topology | None = None, *, alpha=None, bandwidth=None, gamma=0.0,
              method: str = "auto", **params) -> Predictor:
    """A :class:`Predictor` (seconds as a function of nbytes); arguments as for :func:`cost`."""
    topo = resolve_topology(world_size, topology, alpha, bandwidth)
    return Predictor(collective, algorithm, topo, parse_gamma(gamma), method, params)


def cost(collective: str, algorithm: str, world_size: int | None, nbytes,
         topology: Topology | None = None, *, alpha=None, bandwidth=None, gamma=0.0,
         method: str = "auto", **params) -> CostResult:
    """Predicted time of one collective call on a machine, with its latency/bandwidth split.

    Example::

        r = ringccl.cost("all_reduce", "ring", 1024, "4MiB", alpha="5us", bandwidth="300GB/s")
        r.seconds, r.latency_seconds, r.bandwidth_seconds   # 10.26 ms, 10.23 ms, 0.028 ms

    Args:
        collective, algorithm: registry names (``ringccl.algorithms(collective)``).
        world_size: ranks N; may be None when ``topology`` is given.
        nbytes: bytes of one rank's working buffer, nccl-tests' "size" (all_reduce: the
            buffer; all_gather/reduce_scatter: the whole N-block buffer); a number or a string
            such as ``"4MiB"``. Chunks are fluid: each transfer moves nbytes / num_chunks.
        topology: a :mod:`ringccl.costmodel.topology` machine; or ``alpha`` (seconds per step, e.g.
            ``"5us"``) and ``bandwidth`` (bytes/s per direction, e.g. ``"50GB/s"``,
            ``"400Gbps"``) for :func:`ringccl.costmodel.topology.flat`.
        gamma: seconds per byte reduced (number), or a reduction rate such as ``"100GB/s"``.
        method: ``"auto"`` (closed form on a flat machine above :data:`WALK_LIMIT` ranks when
            the algorithm has one, else walk), ``"walk"`` or ``"closed_form"``.
        **params: algorithm parameters (root, segments, ...) passed to its builder. On a
            node-major two-level machine, a builder's node-shape parameter (``local``,
            ``local_size``, ``ranks_per_node``, ``nodes``...) defaults to the machine's.
    Returns:
        :class:`CostResult`.
    Raises:
        ArgumentError: unknown names, bad sizes or rates, world size differing from the
            topology's, closed form requested where it does not hold.
    """
    return predictor(collective, algorithm, world_size, topology, alpha=alpha,
                     bandwidth=bandwidth, gamma=gamma, method=method, **params).result(nbytes)
