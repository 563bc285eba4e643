"""Ring algorithms: reduce-scatter, all-gather and all-reduce (= reduce-scatter + all-gather).

The ranks form a ring; at every step each rank sends one chunk to its ``next_rank = (r + 1) % N``
and receives one from ``prev_rank = (r - 1) % N``. The buffer is split into N chunks.

All-reduce is the bandwidth-optimal ring of Patarasuk & Yuan (JPDC 69(2), 2009), in this chunk
order:

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

Broadcast and reduce run as a pipelined chain around the ring (Thakur et al. 2005, section 3;
NCCL's ring broadcast/reduce): the buffer is cut into S segments (chunks) that flow down the
chain one link per step, so segment s crosses link p at step p + s. Broadcast: root → root+1 →
… → root+N-1 (each rank copies and forwards). Reduce: root+1 → root+2 → … → root+N-1 → root (each
rank adds the segment into its own and forwards; the root adds the last). N-2+S steps for N >= 2;
every rank but the chain's last sends M; each step moves one segment per link:
T = (N-2+S)·(α + M/S·β [+ M/S·γ for reduce]). Default S = N, so the pipeline's fill (N-2 steps)
is about as long as its drain and T ≈ 2(N-1)·α + 2(N-1)/N·M·β, like ring all-reduce; the best S
for given α, β, M is about sqrt((N-2)·M·β/α).

References:
    Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
    J. Parallel Distrib. Comput. 69(2), 2009.
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
    MPICH", IJHPCA 19(1), 2005, section 4.
"""

from __future__ import annotations

import numpy as np

from ..collectives import check_root
from ..args import check_int
from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers

__all__ = ["reduce_scatter", "all_gather", "all_reduce", "broadcast", "reduce"]

_PATARASUK = "Patarasuk & Yuan, JPDC 69(2) 2009"
_THAKUR = "Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005 (pipelined chain)"


def _ring_phases(collective: str, world_size: int,
                 phases: list[tuple[int, bool, str]]) -> Schedule:
    """Consecutive ring phases of N-1 steps each, on N chunks.

    For a phase (offset, reduce, name), at its step s every rank r sends chunk
    (r + offset - s) mod N to next_rank = (r + 1) mod N, which reduces or copies it.
    """
    n = world_size
    # one group of shape (phase, step within the phase, sending rank r), broadcast together
    k = np.arange(len(phases))[:, None, None]
    offset = np.array([p[0] for p in phases])[:, None, None]
    reduce = np.array([p[1] for p in phases])[:, None, None]
    s = np.arange(n - 1)[None, :, None]
    r = np.arange(n)
    t = Transfers()
    t.add(k * (n - 1) + s, r, (r + 1) % n, (r + offset - s) % n, reduce=reduce)
    return t.schedule(collective, "ring", n, n, [name for (_, _, name) in phases
                                                for _ in range(n - 1)])


def all_reduce(world_size: int) -> Schedule:
    """Ring all-reduce in the chunk order above: ring reduce-scatter, then ring all-gather.

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
    return _ring_phases("all_reduce", world_size,
                        [(0, True, "reduce-scatter"), (1, False, "all-gather")])


def reduce_scatter(world_size: int) -> Schedule:
    """Ring reduce-scatter with torch.distributed's output order: rank r ends with block r.

    Pre:  rank r holds N blocks. Post: rank r holds block r reduced over all ranks.
    Cost: N-1 steps; each rank sends (N-1)/N · nbytes (nbytes = the whole N-block input).
    """
    return _ring_phases("reduce_scatter", world_size, [(-1, True, "reduce-scatter")])


def all_gather(world_size: int) -> Schedule:
    """Ring all-gather: rank r starts with block r; every rank ends with all N blocks.

    Cost: N-1 steps; each rank sends (N-1)/N · nbytes (nbytes = the whole N-block output).
    """
    return _ring_phases("all_gather", world_size, [(0, False, "all-gather")])


def _chain(collective: str, world_size: int, root: int, segments: int | None) -> Schedule:
    """Pipelined chain: ``order[p]`` sends segment s to ``order[p+1]`` at step p + s."""
    n = world_size
    root = check_root(root, n)
    segments = _segments(n, segments)
    reduce = collective == "reduce"
    # broadcast starts at the root; reduce ends at it
    order = (root + (1 if reduce else 0) + np.arange(n)) % n
    p = np.arange(n - 1)[:, None]                # link (rows)
    s = np.arange(segments)                      # segment (columns)
    steps = n - 2 + segments if n > 1 else 0
    t = Transfers()
    t.add(p + s, order[p], order[p + 1], s, reduce=reduce)
    return t.schedule(collective, "ring", n, segments, [collective] * steps,
                      params={"root": root, "segments": segments})


def _segments(world_size: int, segments: int | None) -> int:
    if segments is None:
        return world_size
    return check_int(segments, "segments", minimum=1)


def broadcast(world_size: int, root: int = 0, segments: int | None = None) -> Schedule:
    """Pipelined chain broadcast: root → root+1 → … → root+N-1, the buffer in S segments.

    Pre: the root holds the buffer. Post: every rank holds it.
    Cost: N-2+S steps (N >= 2); every rank but root+N-1 sends M;
    T = (N-2+S)·(α + M/S·β).

    Args:
        world_size: N (>= 1).
        root: the rank that has the data (torch's ``src``).
        segments: S, chunks the buffer is cut into (default N).
    Returns:
        Schedule with num_chunks == S and params {"root", "segments"}.
    """
    return _chain("broadcast", world_size, root, segments)


def reduce(world_size: int, root: int = 0, segments: int | None = None) -> Schedule:
    """Pipelined chain reduce: root+1 → root+2 → … → root+N-1 → root, the buffer in S segments;
    each rank adds the arriving segment into its own before forwarding it.

    Pre: every rank holds its buffer. Post: the root holds the reduction (in chain order).
    Cost: N-2+S steps (N >= 2); every rank but the root sends M;
    T = (N-2+S)·(α + M/S·(β + γ)).
    """
    return _chain("reduce", world_size, root, segments)


def _chain_steps(n: int, segments: int | None = None) -> int:
    """N-2+S for N >= 2 (S defaults to N), else 0."""
    return n - 2 + _segments(n, segments) if n > 1 else 0


def _chain_bytes(n: int, nbytes: float, segments: int | None = None) -> float:
    """M: every rank but the chain's last sends every segment once."""
    return float(nbytes) if n > 1 else 0.0


def _chain_time(reduces: bool):
    def time(n: int, nbytes: float, alpha: float, beta: float, gamma: float,
             segments: int | None = None) -> float:
        """(N-2+S)·(α + M/S·β [+ M/S·γ]) (Thakur et al. 2005, section 3)."""
        s = _segments(n, segments)
        per = nbytes / s
        return _chain_steps(n, s) * (alpha + per * beta + (per * gamma if reduces else 0.0))
    return time


def _all_reduce_time(n: int, nbytes: float, alpha: float, beta: float, gamma: float) -> float:
    """2(N-1)·α + 2(N-1)/N·M·β + (N-1)/N·M·γ (Thakur et al. 2005, section 4)."""
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta + (n - 1) / n * nbytes * gamma


def _half_time(reduces: bool):
    def time(n: int, nbytes: float, alpha: float, beta: float, gamma: float) -> float:
        """(N-1)·α + (N-1)/N·M·β [+ (N-1)/N·M·γ when reducing]; M = the whole N-block buffer."""
        return (n - 1) * alpha + (n - 1) / n * nbytes * (beta + (gamma if reduces else 0.0))
    return time


register(Algorithm(collective="all_reduce", name="ring", builder=all_reduce,
                   num_steps=lambda n: 2 * (n - 1), bytes_sent=lambda n, b: 2 * (n - 1) / n * b,
                   steps_formula="2(N-1)", bytes_formula="2(N-1)/N·M", reference=_PATARASUK,
                   time=_all_reduce_time))
register(Algorithm(collective="reduce_scatter", name="ring", builder=reduce_scatter,
                   num_steps=lambda n: n - 1, bytes_sent=lambda n, b: (n - 1) / n * b,
                   steps_formula="N-1", bytes_formula="(N-1)/N·M", reference=_PATARASUK,
                   time=_half_time(True)))
register(Algorithm(collective="all_gather", name="ring", builder=all_gather,
                   num_steps=lambda n: n - 1, bytes_sent=lambda n, b: (n - 1) / n * b,
                   steps_formula="N-1", bytes_formula="(N-1)/N·M", reference=_PATARASUK,
                   time=_half_time(False)))
register(Algorithm(collective="broadcast", name="ring", builder=broadcast,
                   num_steps=_chain_steps, bytes_sent=_chain_bytes,
                   steps_formula="N-2+S (S=N)", bytes_formula="M", reference=_THAKUR,
                   time=_chain_time(False)))
register(Algorithm(collective="reduce", name="ring", builder=reduce,
                   num_steps=_chain_steps, bytes_sent=_chain_bytes,
                   steps_formula="N-2+S (S=N)", bytes_formula="M", reference=_THAKUR,
                   time=_chain_time(True)))
