"""Ring algorithms: reduce-scatter, all-gather and all-reduce (= reduce-scatter + all-gather).

The ranks form a ring; at every step each rank sends one chunk to its ``next_rank = (r + 1) % N``
and receives one from ``prev_rank = (r - 1) % N``. The buffer is split into N chunks.

All-reduce follows the seed's walk-through (seed 000, section 2, and its pseudo-code):

* reduce-scatter phase, step s = 0 … N-2: rank r sends chunk (r - s) mod N to r + 1, which adds
  it into its own chunk (r - s) mod N = ((r+1) - 1 - s) mod N. Afterwards rank r owns the complete
  reduction of chunk (r + 1) mod N.
* all-gather phase, step s = 0 … N-2: rank r sends chunk (r + 1 - s) mod N, complete, to r + 1,
  which copies it.

Standalone reduce_scatter follows torch.distributed (rank r ends with block r), so its ring is
shifted by one: rank r sends chunk (r - 1 - s) mod N. Standalone all_gather starts from rank r
holding block r and sends chunk (r - s) mod N.

Cost (each rank, buffer of nbytes): 2(N-1) steps, sends 2(N-1)/N · nbytes for all-reduce; N-1
steps and (N-1)/N · buffer bytes for reduce-scatter and all-gather; γ applies to (N-1)/N · nbytes
reduced per rank.

References:
    Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
    J. Parallel Distrib. Comput. 69(2), 2009.
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
    MPICH", IJHPCA 19(1), 2005, section 4.
"""

from __future__ import annotations

import numpy as np

from ..ir import Schedule
from . import Algorithm, register

__all__ = ["reduce_scatter", "all_gather", "all_reduce"]

_PATARASUK = "Patarasuk & Yuan, JPDC 69(2) 2009"


def _ring_phases(world_size: int, phases: list[tuple[int, bool, str]]) -> dict:
    """Arrays for consecutive ring phases of N-1 steps each.

    For a phase (offset, reduce, name), at its step s every rank r sends chunk
    (r + offset - s) mod N to next_rank = (r + 1) mod N, which reduces or copies it.
    """
    n = world_size
    s = np.repeat(np.arange(n - 1), n)            # step within the phase, per transfer
    r = np.tile(np.arange(n), n - 1)              # sending rank
    parts = [(p * (n - 1) + s, (r + offset - s) % n, np.full(s.shape, reduce))
             for p, (offset, reduce, _) in enumerate(phases)]
    return dict(step=np.concatenate([p[0] for p in parts]),
                src=np.tile(r, len(phases)), dst=np.tile((r + 1) % n, len(phases)),
                src_chunk=np.concatenate([p[1] for p in parts]),
                reduce=np.concatenate([p[2] for p in parts]),
                phases=[name for (_, _, name) in phases for _ in range(n - 1)])


def all_reduce(world_size: int) -> Schedule:
    """Ring all-reduce in the seed's chunk order: ring reduce-scatter, then ring all-gather.

    Pre:  rank r holds its buffer, split into N = world_size chunks.
    Post: every rank holds the elementwise reduction of all N buffers; after the reduce-scatter
          phase rank r owns the complete chunk (r + 1) mod N.
    Cost: 2(N-1) steps; each rank sends 2(N-1)/N · nbytes;
          T = 2(N-1)·alpha + 2(N-1)/N·nbytes·beta + (N-1)/N·nbytes·gamma.

    Args:
        world_size: number of ranks N (>= 1).
    Returns:
        Schedule with num_chunks == world_size.
    References:
        Patarasuk & Yuan 2009; Thakur, Rabenseifner & Gropp 2005 (section 4).
    """
    return Schedule.from_arrays("all_reduce", "ring", world_size, world_size, **_ring_phases(
        world_size, [(0, True, "reduce-scatter"), (1, False, "all-gather")]))


def reduce_scatter(world_size: int) -> Schedule:
    """Ring reduce-scatter with torch.distributed's output order: rank r ends with block r.

    Pre:  rank r holds N blocks. Post: rank r holds block r reduced over all ranks.
    Cost: N-1 steps; each rank sends (N-1)/N · nbytes (nbytes = the whole N-block input).
    """
    return Schedule.from_arrays("reduce_scatter", "ring", world_size, world_size,
                                **_ring_phases(world_size, [(-1, True, "reduce-scatter")]))


def all_gather(world_size: int) -> Schedule:
    """Ring all-gather: rank r starts with block r; every rank ends with all N blocks.

    Cost: N-1 steps; each rank sends (N-1)/N · nbytes (nbytes = the whole N-block output).
    """
    return Schedule.from_arrays("all_gather", "ring", world_size, world_size,
                                **_ring_phases(world_size, [(0, False, "all-gather")]))


def _all_reduce_time(n: int, nbytes: float, alpha: float, beta: float, gamma: float) -> float:
    """2(N-1)·α + 2(N-1)/N·M·β + (N-1)/N·M·γ (Thakur et al. 2005, section 4)."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta + (n - 1) / n * nbytes * gamma


def _half_time(reduces: bool):
    def time(n: int, nbytes: float, alpha: float, beta: float, gamma: float) -> float:
        """(N-1)·α + (N-1)/N·M·β [+ (N-1)/N·M·γ when reducing]; M = the whole N-block buffer."""
        return (n - 1) * alpha + (n - 1) / n * nbytes * (beta + (gamma if reduces else 0.0))
    return time


register(Algorithm("all_reduce", "ring", all_reduce, lambda n: 2 * (n - 1),
                   lambda n, b: 2 * (n - 1) / n * b, "2(N-1)", "2(N-1)/N·M", _PATARASUK,
                   _all_reduce_time))
register(Algorithm("reduce_scatter", "ring", reduce_scatter, lambda n: n - 1,
                   lambda n, b: (n - 1) / n * b, "N-1", "(N-1)/N·M", _PATARASUK,
                   _half_time(True)))
register(Algorithm("all_gather", "ring", all_gather, lambda n: n - 1,
                   lambda n, b: (n - 1) / n * b, "N-1", "(N-1)/N·M", _PATARASUK,
                   _half_time(False)))
