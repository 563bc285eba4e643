"""Pairwise-exchange all-to-all: N-1 steps, one block to one peer per step.

At step k = 1 … N-1 every rank sends exactly the block its peer needs and receives its own from
another rank, so every port carries one block per step and the total is the minimum (N-1)/N · M
per rank (MPICH's algorithm for long messages):

* N a power of two: partner r XOR k, so the two ranks of a pair exchange with each other;
* otherwise: rank r sends to (r + k) mod N and receives from (r - k) mod N (a shift).

Block layout (the all_to_all contract): rank r's chunk j < N is its block for rank j; chunk N + i
receives rank i's block for r; rank r's own block stays in chunk r.

References:
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
    MPICH", IJHPCA 19(1), 2005, section 5 (all_to_all: pairwise exchange).
"""

from __future__ import annotations

import numpy as np

from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers

__all__ = ["all_to_all"]


def all_to_all(world_size: int) -> Schedule:
    """Pairwise-exchange all-to-all.

    Pre:  rank r's chunk j < N holds its block for rank j.
    Post: rank r's chunk N+i (i ≠ r) holds rank i's block for r.
    Cost: N-1 steps; every rank sends (N-1)/N · M (M = one rank's N-block input);
          T = (N-1)·(alpha + M/N·beta).
    References: Thakur et al. 2005, section 5.
    """
    n = world_size
    r = np.arange(n)
    k = np.arange(1, n)[:, None]                               # (N-1, 1): step k-1
    dst = (r[None, :] ^ k) if n & (n - 1) == 0 else (r[None, :] + k) % n
    t = Transfers()
    t.add(k - 1, np.broadcast_to(r, dst.shape), dst, dst, n + r[None, :])
    return t.schedule("all_to_all", "pairwise", n, 2 * n, ["pairwise exchange"] * (n - 1))


register(Algorithm(collective="all_to_all", name="pairwise", builder=all_to_all,
                   num_steps=lambda n: n - 1, bytes_sent=lambda n, b: (n - 1) / n * b,
                   steps_formula="N-1", bytes_formula="(N-1)/N·M",
                   reference="Thakur et al., IJHPCA 19(1) 2005, §5",
                   time=lambda n, b, alpha, beta, gamma: (n - 1) * (alpha + b / n * beta)))
