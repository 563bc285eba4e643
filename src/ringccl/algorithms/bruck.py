"""Bruck's algorithms: all-gather and all-to-all in ⌈log2 N⌉ steps for any N.

**all_gather** (Bruck et al. 1997, section 3, the "concatenation" algorithm): at step k rank r
sends every block it holds, blocks r, r+1, …, r+2^k-1 (mod N), to rank r - 2^k and receives blocks
r+2^k, …, r+2^(k+1)-1 from rank r + 2^k; the last step sends only the N - 2^k blocks still
missing. The paper keeps blocks at positions relative to r and rotates them at the end; here a
chunk keeps its block index, so no rotation is needed. N-1 blocks per rank, like the ring, in
⌈log2 N⌉ steps instead of N-1.

**all_to_all** (section 4, the "index" algorithm, radix 2): the block rank o sends to rank
o + i (mod N) has *offset* i. At step k every block whose offset has bit k set moves 2^k ranks
forward: rank r sends those blocks to r + 2^k. A block with offset i is thus at rank
o + (i mod 2^k) after step k-1 and at its destination o + i at the end. About N/2 blocks move at
every step: (N/2)·log2 N blocks per rank instead of N-1, in log2 N steps instead of N-1 — the
latency/bandwidth trade-off of the paper.

Buffer slots for all_to_all (the contract of ``ringccl.collectives``: chunks 0…N-1 are the input
blocks, N…2N-1 the output blocks, chunk N+i receiving the block from rank i; rank r's own block
stays in chunk r): a block with offset i that is still travelling is kept, on whichever rank holds
it, in that rank's input slot (rank + i) mod N. That slot held the rank's own offset-i block,
which leaves in the very step the first foreign offset-i block arrives (both move at the step of
i's lowest set bit; BSP lets a step send a slot and overwrite it). At its last move (i's highest
set bit) a block is written straight into the output slot N + origin. No scratch is needed.

References:
    Bruck, Ho, Kipnis, Upfal & Weathersby, "Efficient algorithms for all-to-all
    communications in multiport message-passing systems", IEEE TPDS 8(11), 1997.
"""

from __future__ import annotations

import numpy as np

from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers, ceil_log2

__all__ = ["all_gather", "all_to_all", "offsets_with_bit"]

_BRUCK = "Bruck et al., IEEE TPDS 8(11) 1997"


def all_gather(world_size: int) -> Schedule:
    """Bruck all-gather in ⌈log2 N⌉ steps.

    Pre:  rank r holds block r. Post: every rank holds all N blocks.
    Cost: ⌈log2 N⌉ steps; every rank sends (N-1)/N · M (M = the whole N-block output);
          T = Σ_{k < ⌈log2 N⌉} (alpha + min(2^k, N - 2^k)·M/N·beta).
    References: Bruck et al. 1997, section 3.
    """
    n = world_size
    t, phases = Transfers(), []
    r = np.arange(n)
    for k in range(ceil_log2(n)):
        m = min(1 << k, n - (1 << k))         # blocks sent at this step
        j = np.arange(m)
        t.add(k, np.repeat(r, m), np.repeat((r - (1 << k)) % n, m),
              ((r[:, None] + j[None, :]) % n).ravel())
        phases.append("all-gather")
    return t.schedule("all_gather", "bruck", n, n, phases)


def offsets_with_bit(world_size: int, k: int) -> np.ndarray:
    """Offsets i in [1, N) with bit k set: the blocks each rank sends at Bruck step k."""
    i = np.arange(1, world_size)
    return i[(i >> k) & 1 == 1]


def all_to_all(world_size: int) -> Schedule:
    """Bruck (index) all-to-all in ⌈log2 N⌉ steps.

    Pre:  rank r's chunk j < N holds the block for rank j.
    Post: rank r's chunk N+i (i ≠ r) holds rank i's block for r; chunk r keeps r's own block.
    Cost: ⌈log2 N⌉ steps; at step k every rank sends c_k = |{1 <= i < N : bit k of i}| blocks;
          bytes per rank Σ_k c_k · M/N (M = one rank's N-block input), about M/2·log2 N;
          T = Σ_k (alpha + c_k·M/N·beta).
    References: Bruck et al. 1997, section 4.
    """
    n = world_size
    t, phases = Transfers(), []
    r = np.arange(n)
    for k in range(ceil_log2(n)):
        i = offsets_with_bit(n, k)
        holder = r[:, None]                                  # (N, 1) rank holding the block
        origin = (holder - (i & ((1 << k) - 1))[None, :]) % n
        dst = (holder + (1 << k)) % n
        last = (i >> (k + 1)) == 0                           # k is i's highest set bit
        src_chunk = (holder + i[None, :]) % n
        dst_chunk = np.where(last[None, :], n + origin, (dst + i[None, :]) % n)
        t.add(k, np.broadcast_to(holder, src_chunk.shape), np.broadcast_to(dst, src_chunk.shape),
              src_chunk, dst_chunk)
        phases.append("all-to-all")
    return t.schedule("all_to_all", "bruck", n, 2 * n, phases)


def _steps(n: int) -> int:
    return ceil_log2(n)


def _a2a_blocks(n: int) -> int:
    return sum(len(offsets_with_bit(n, k)) for k in range(ceil_log2(n)))


def _ag_time(n, nbytes, alpha, beta, gamma):
    return sum(alpha + min(1 << k, n - (1 << k)) * nbytes / n * beta
               for k in range(ceil_log2(n)))


def _a2a_time(n, nbytes, alpha, beta, gamma):
    return sum(alpha + len(offsets_with_bit(n, k)) * nbytes / n * beta
               for k in range(ceil_log2(n)))


register(Algorithm(collective="all_gather", name="bruck", builder=all_gather, num_steps=_steps,
                   bytes_sent=lambda n, b: (n - 1) / n * b, steps_formula="⌈log2 N⌉",
                   bytes_formula="(N-1)/N·M", reference=_BRUCK, time=_ag_time))
register(Algorithm(collective="all_to_all", name="bruck", builder=all_to_all, num_steps=_steps,
                   bytes_sent=lambda n, b: _a2a_blocks(n) * b / n, steps_formula="⌈log2 N⌉",
                   bytes_formula="Σ_k |{i<N: bit k of i}|·M/N ≈ M/2·log2 N", reference=_BRUCK,
                   time=_a2a_time))
