"""Algorithm choice from the cost model: the fastest algorithm per size, crossovers, and the table
nccl-tests would print for a described cluster.

NCCL picks an algorithm per call by filling a cost table per (collective, algorithm, protocol)
and taking the argmin (its tuning model); :func:`tune` does the same with ringccl's walked
schedules, over a grid of sizes, and refines every change of winner to the size where the two
algorithms cost the same (bisection on the size: each algorithm's time is continuous in it).

References:
    NCCL, src/graph/tuning.cc (per-algorithm latency + size / bandwidth, argmin per call).
    nccl-tests, doc/PERFORMANCE.md (time, algbw, busbw columns).
    Thakur, Rabenseifner & Gropp, IJHPCA 19(1), 2005, section 4 (switching algorithms by size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from .. import units
from ..algorithms import algorithms as registered
from ..algorithms import get_algorithm
from ..collectives import get_collective
from .model import Predictor, resolve_topology, parse_gamma
from ..errors import ArgumentError, RingcclError
from ..ops import check_dtype
from .topology import Topology

__all__ = ["tune", "TuneResult", "Crossover", "Range", "default_sizes", "predict_table",
           "predictors"]


class Crossover(NamedTuple):
    """Below ``nbytes`` algorithm ``below`` is fastest, above it ``above``."""

    nbytes: float
    below: str
    above: str


class Range(NamedTuple):
    """``algorithm`` is fastest for sizes in [low, high] bytes (ends: a crossover or the grid)."""

    algorithm: str
    low: float
    high: float


def default_sizes(low: float = 4, high: float = 16 * 2**30) -> np.ndarray:
    """Powers of two from ``low`` to ``high`` bytes (nccl-tests' -b/-e with -f 2)."""
    lo, hi = math.ceil(math.log2(low)), math.floor(math.log2(high))
    return 2.0 ** np.arange(lo, hi + 1)


def predictors(collective: str, world_size: int | None = None, topology: Topology | None = None,
               *, alpha=None, bandwidth=None, gamma=0.0, algorithms: Sequence[str] | None = None,
               params: Mapping[str, Mapping] | None = None, method: str = "auto"
               ) -> tuple[dict[str, Predictor], dict[str, str]]:
    """A :class:`~ringccl.costmodel.Predictor` per algorithm of ``collective`` that can run here.

    Returns:
        (predictors by name in registry order, {name: reason} for the algorithms skipped because
        their builder refused this world size or parameters).
    Raises:
        ArgumentError: unknown collective or algorithm, bad machine description.
    """
    topo = resolve_topology(world_size, topology, alpha, bandwidth)
    gamma = parse_gamma(gamma)
    if method not in ("auto", "walk", "closed_form"):
        raise ArgumentError(f"method={method!r} must be 'auto', 'walk' or 'closed_form'")
    if algorithms is None:
        names = registered(collective)
    else:
        # one name is one algorithm (a string is not iterated letter by letter)
        names = [algorithms] if isinstance(algorithms, str) else list(algorithms)
        for name in names:
            get_algorithm(collective, name)  # unknown -> ArgumentError listing the valid names
    params = dict(params or {})
    for name in params:   # a misspelt name would be ignored: refuse it as an unknown algorithm
        get_algorithm(collective, name)
    out: dict[str, Predictor] = {}
    skipped: dict[str, str] = {}
    for name in names:
        try:
            out[name] = Predictor(collective, name, topo, gamma, method,
                                  dict(params.get(name, {})))
        except RingcclError as exc:  # e.g. a builder that refuses this world size
            skipped[name] = str(exc)
    return out, skipped


@dataclass(frozen=True)
class TuneResult:
    """Fastest algorithm per size.

    Attributes:
        collective, world_size, topology: what was tuned.
        sizes: (m,) bytes of the grid.
        algorithms: names compared (registry order).
        seconds: (len(algorithms), m) predicted seconds.
        best: fastest algorithm at each grid size (ties: registry order).
        crossovers: where the fastest algorithm changes, refined between grid points.
        ranges: the size ranges in which each algorithm wins, in increasing size.
        skipped: algorithms that could not be costed here, with the reason.
    """

    collective: str
    world_size: int
    topology: Topology
    sizes: np.ndarray
    algorithms: tuple[str, ...]
    seconds: np.ndarray
    best: tuple[str, ...]
    crossovers: tuple[Crossover, ...]
    ranges: tuple[Range, ...]
    skipped: dict
    _predictors: dict = field(repr=False, compare=False)

    def time_at(self, nbytes: float, algorithm: str) -> float:
        """Predicted seconds of ``algorithm`` at ``nbytes`` (any size, not only grid points)."""
        if algorithm not in self._predictors:
            raise ArgumentError(f"algorithm={algorithm!r} was not compared; expected one of "
                                f"{', '.join(self.algorithms)}")
        return float(self._predictors[algorithm](float(nbytes)))

    def best_at(self, nbytes: float) -> str:
        """The fastest algorithm at ``nbytes`` (any size, not only grid points)."""
        times = [self._predictors[a](float(nbytes)) for a in self.algorithms]
        return self.algorithms[int(np.argmin(times))]


def _crossing(f_a: Predictor, f_b: Predictor, lo: float, hi: float, iters: int = 80) -> float:
    """Size in [lo, hi] where f_a - f_b changes sign (f_a faster at lo); bisection on log size."""
    lo, hi = max(lo, 1e-9), max(hi, 1e-9)
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        if f_a(mid) <= f_b(mid):
            lo = mid
        else:
            hi = mid
        if hi / lo - 1 < 1e-12:
            break
    return math.sqrt(lo * hi)


def tune(collective: str, world_size: int | None = None, sizes: Sequence[float] | None = None,
         topology: Topology | None = None, *, alpha=None, bandwidth=None, gamma=0.0,
         algorithms: Sequence[str] | None = None, params: Mapping[str, Mapping] | None = None,
         method: str = "auto") -> TuneResult:
    """Fastest registered algorithm of ``collective`` for each size, and the crossovers.

    Example::

        t = ringccl.tune("all_reduce", 1024, alpha="5us", bandwidth="50GB/s")
        for r in t.ranges: print(r.algorithm, r.low, r.high)

    Args:
        collective: collective name.
        world_size, topology, alpha, bandwidth, gamma, method: the machine, as for
            :func:`ringccl.cost`.
        sizes: bytes (nccl-tests' size); default :func:`default_sizes` (4 B … 16 GiB, x2).
        algorithms: names to compare (default: every registered one; those whose builder refuses
            this world size are listed in ``skipped``).
        params: per-algorithm builder parameters, ``{"tree": {"segments": 8}}``.
    Returns:
        :class:`TuneResult`.
    Raises:
        ArgumentError: unknown names, no algorithm can be costed, sizes not positive.
    """
    grid = default_sizes() if sizes is None else np.asarray(
        [units.size(s) if isinstance(s, str) else s for s in sizes], dtype=float)
    if grid.ndim != 1 or grid.size == 0 or not np.all((grid > 0) & np.isfinite(grid)):
        raise ArgumentError(f"sizes must be a non-empty list of finite sizes > 0 bytes, got "
                            f"{sizes!r}")
    grid = np.unique(grid)
    preds, skipped = predictors(collective, world_size, topology, alpha=alpha,
                                bandwidth=bandwidth, gamma=gamma, algorithms=algorithms,
                                params=params, method=method)
    if not preds:
        raise ArgumentError(f"no algorithm of {collective} can be costed here: {skipped}")
    names = tuple(preds)
    seconds = np.stack([np.atleast_1d(preds[a](grid)) for a in names])
    best_idx = seconds.argmin(axis=0)
    best = tuple(names[i] for i in best_idx)
    crossovers = []
    for i in np.nonzero(best_idx[1:] != best_idx[:-1])[0]:
        a, b = best[i], best[i + 1]
        crossovers.append(Crossover(_crossing(preds[a], preds[b], grid[i], grid[i + 1]), a, b))
    edges = [float(grid[0])] + [c.nbytes for c in crossovers] + [float(grid[-1])]
    winners = [best[0]] + [c.above for c in crossovers]
    ranges = tuple(Range(w, edges[k], edges[k + 1]) for k, w in enumerate(winners))
    topo = next(iter(preds.values())).topology
    return TuneResult(collective, topo.world_size, topo, grid, names, seconds, best,
                      tuple(crossovers), ranges, skipped, preds)


def predict_table(collective: str, world_size: int | None = None,
                  sizes: Sequence[float] | None = None, topology: Topology | None = None, *,
                  alpha=None, bandwidth=None, gamma=0.0, algorithms: Sequence[str] | None = None,
                  params: Mapping[str, Mapping] | None = None, dtype: str = "float32",
                  method: str = "auto") -> tuple[list[dict], dict[str, str]]:
    """The table nccl-tests would print, as ringccl predicts it, per algorithm.

    One row per (size, algorithm) with nccl-tests' columns — ``size`` (bytes), ``count``
    (elements of ``dtype``), ``type``, ``time_s``, ``algbw`` and ``busbw`` (bytes/s) — plus
    ``latency_fraction``, ``max_link_bytes`` (link kind -> bytes on its busiest link, which shows
    why tree or hierarchical busbw can exceed a NIC's rate: busbw assumes every byte of a
    2(N-1)/N ring crosses one NIC, and those algorithms put fewer bytes on it), ``num_steps``,
    ``method`` and ``best`` (fastest at that size).

    Returns:
        (rows, skipped algorithms with reasons).
    """
    dt = check_dtype(dtype)
    spec = get_collective(collective)
    grid = default_sizes(4, 2**30) if sizes is None else [
        units.size(s) if isinstance(s, str) else s for s in sizes]
    preds, skipped = predictors(collective, world_size, topology, alpha=alpha,
                                bandwidth=bandwidth, gamma=gamma, algorithms=algorithms,
                                params=params, method=method)
    if not preds:
        raise ArgumentError(f"no algorithm of {collective} can be costed here: {skipped}")
    rows = []
    for size in grid:
        results = {a: p.result(size) for a, p in preds.items()}
        fastest = min(results, key=lambda a: results[a].seconds)
        for a, r in results.items():
            rows.append({"size": float(size), "count": int(size // dt.itemsize),
                         "type": dt.name, "algorithm": a, "world_size": r.world_size,
                         "time_s": r.seconds, "algbw": r.algbw,
                         "busbw": r.algbw * spec.bus_factor(r.world_size),
                         "latency_fraction": r.latency_seconds / r.seconds if r.seconds else 0.0,
                         "max_link_bytes": dict(r.max_link_bytes), "num_steps": r.num_steps,
                         "method": r.method, "best": a == fastest})
    return rows, skipped
