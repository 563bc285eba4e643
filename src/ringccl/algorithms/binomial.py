"""Binomial-tree scatter and gather, for any world size N and any root.

Ranks are renumbered relative to the root, v = (r - root) mod N, so the root is v = 0; block b
(chunk b, as in the collective's contract) belongs to relative rank (b - root) mod N. With
L = ⌈log2 N⌉ steps:

* scatter (MPICH's binomial scatter; Thakur et al. 2005, section 4): at the step with mask
  m = 2^(L-1), …, 2, 1 every v that is a multiple of 2m and has v + m < N sends the blocks of
  relative ranks [v + m, min(v + 2m, N)) — the subtree of v + m — to v + m;
* gather is the mirror image: at mask m = 1, 2, …, 2^(L-1) every v ≡ m (mod 2m) sends the blocks
  [v, min(v + m, N)) it has collected to v - m.

Cost (M = the whole N-block buffer, blocks of M/N): L steps; at mask m the root sends (scatter)
or receives (gather) min(m, N - m) blocks, and no rank moves more in that step, which sums to
N-1 blocks for any N: T = ⌈log2 N⌉·α + (N-1)/N·M·β. Bytes sent by the busiest rank: the root's
(N-1)/N·M for scatter; for gather the largest subtree below the root,
max(N - 2^(L-1), 2^(L-2))·M/N (M/N for N = 2).

References:
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
    MPICH", IJHPCA 19(1), 2005, section 4 (scatter, gather: binomial tree).
"""

from __future__ import annotations

import numpy as np

from ..collectives import check_root
from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers

__all__ = ["scatter", "gather"]

_THAKUR = "Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005, section 4"


def _levels(n: int) -> int:
    """L = ⌈log2 N⌉ (0 for N = 1)."""
    return (n - 1).bit_length()


def _tree(collective: str, world_size: int, root: int) -> Schedule:
    n = world_size
    root = check_root(root, n)
    levels = _levels(n)
    t = Transfers()
    for k in range(levels):
        # scatter walks the masks down from the top, gather up from 1
        m = 1 << (levels - 1 - k if collective == "scatter" else k)
        parent = np.arange(0, n - m, 2 * m)          # relative ranks with a child at +m
        child = parent + m
        size = np.minimum(m, n - child)               # blocks in the child's subtree
        # one transfer per block of the subtree [child, child + size)
        first = np.repeat(child, size)
        block = first + (np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size))
        sender, receiver = ((np.repeat(parent, size), first) if collective == "scatter"
                            else (first, np.repeat(parent, size)))
        t.add(k, (sender + root) % n, (receiver + root) % n, (block + root) % n)
    return t.schedule(collective, "binomial", n, n, [collective] * levels,
                      params={"root": root})


def scatter(world_size: int, root: int = 0) -> Schedule:
    """Binomial-tree scatter from ``root`` (torch's ``src``).

    Pre: the root holds N blocks (chunk b = block b). Post: rank r holds block r.
    Cost: ⌈log2 N⌉ steps; the root sends (N-1)/N·M; T = ⌈log2 N⌉·α + (N-1)/N·M·β.
    """
    return _tree("scatter", world_size, root)


def gather(world_size: int, root: int = 0) -> Schedule:
    """Binomial-tree gather to ``root`` (torch's ``dst``).

    Pre: rank r holds block r. Post: the root holds all N blocks.
    Cost: ⌈log2 N⌉ steps; the root receives (N-1)/N·M; T = ⌈log2 N⌉·α + (N-1)/N·M·β.
    """
    return _tree("gather", world_size, root)


def _gather_bytes(n: int, nbytes: float) -> float:
    """max(N - 2^(L-1), 2^(L-2))·M/N: the largest subtree below the root sends it all at once."""
    levels = _levels(n)
    if levels == 0:
        return 0.0
    if levels == 1:
        return nbytes / n
    return max(n - (1 << (levels - 1)), 1 << (levels - 2)) * nbytes / n


def _time(n: int, nbytes: float, alpha: float, beta: float, gamma: float) -> float:
    """⌈log2 N⌉·α + (N-1)/N·M·β (Thakur et al. 2005, section 4)."""
    return _levels(n) * alpha + (n - 1) / n * nbytes * beta


register(Algorithm(collective="scatter", name="binomial", builder=scatter, num_steps=_levels,
                   bytes_sent=lambda n, m: (n - 1) / n * m, steps_formula="⌈log2 N⌉",
                   bytes_formula="(N-1)/N·M (root)", reference=_THAKUR, time=_time))
register(Algorithm(collective="gather", name="binomial", builder=gather, num_steps=_levels,
                   bytes_sent=_gather_bytes, steps_formula="⌈log2 N⌉",
                   bytes_formula="max(N-2^(L-1), 2^(L-2))·M/N, L=⌈log2 N⌉", reference=_THAKUR,
                   time=_time))
