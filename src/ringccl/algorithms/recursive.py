"""Recursive doubling and recursive halving: log2 steps between XOR partners.

With P = 2^L ranks, at the step of distance d rank v works with partner v XOR d:

* ``recursive_doubling`` all_reduce: partners exchange and reduce the whole buffer, d = 1, 2, …,
  P/2 (L steps, L·M bytes per rank; latency-optimal, MPICH's choice for short messages).
* ``recursive_doubling`` all_gather: d = 1, 2, …, P/2; v sends every block its aligned group of
  d ranks holds, so the blocks held double each step ((P-1)/P · M bytes).
* ``halving_doubling`` (Rabenseifner): reduce-scatter by recursive halving, d = P/2, …, 1, where v
  sends the half of its current block range that belongs to the partner's side and reduces the
  half it keeps (after the last step v holds block v, torch's order); then all-gather by
  recursive doubling. all_reduce: 2L steps, 2(P-1)/P · M bytes per rank, the ring's volume in
  logarithmically many steps.

**N not a power of two** (the fold of Thakur, Rabenseifner & Gropp 2005, section 4): with
P = 2^⌊log2 N⌋ and R = N - P, the *extra* ranks P … N-1 first fold into partners: extra P + i
sends to rank i (reducing its whole buffer, or copying its own block for all_gather). The P ranks
0 … P-1 then run the power-of-two algorithm as *virtual* ranks, virtual rank v standing for ranks
{v, v + P if v < R}. A last step unfolds: rank i sends the extra P + i its result. That costs two
extra steps and up to M more bytes for the partners; Bruck's all_gather avoids it.

For all_reduce halving_doubling splits the buffer into P chunks (chunk w is finished by virtual
rank w). For reduce_scatter and all_gather the buffer has N blocks (chunk b = block b), and
virtual rank v owns blocks {v, v + P if v < R}, so the halves exchanged are as uneven as the extras
are: a group of d virtual ranks starting at g holds d + |[g, g+d) ∩ [0, R)| blocks.

References:
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
    MPICH", IJHPCA 19(1), 2005, sections 4.1 (recursive doubling all_gather), 4.4 (all_reduce,
    Rabenseifner's algorithm and the non-power-of-two fold).
    Rabenseifner, "Optimization of Collective Reduction Operations", ICCS 2004.
"""

from __future__ import annotations

import numpy as np

from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers, floor_log2

__all__ = ["recursive_doubling_all_reduce", "recursive_doubling_all_gather",
           "halving_doubling_all_reduce", "halving_doubling_reduce_scatter",
           "halving_doubling_all_gather"]

_THAKUR = "Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005, §4"
_RABENSEIFNER = "Rabenseifner, ICCS 2004; Thakur et al. 2005, §4.4"


def _fold_sizes(n: int) -> tuple[int, int, int]:
    """(P, L, R): the largest power of two P = 2^L <= n and the R = n - P extra ranks."""
    lg = floor_log2(n)
    return 1 << lg, lg, n - (1 << lg)


def _owned(groups_lo: np.ndarray, size: int, p: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Blocks owned by the aligned virtual-rank groups [lo, lo + size), one row per group.

    Returns (index of the group, block) pairs: blocks lo…lo+size-1 and, for members w < R, the
    extra's block w + P.
    """
    members = groups_lo[:, None] + np.arange(size)[None, :]          # (groups, size)
    row = np.repeat(np.arange(len(groups_lo)), size)
    flat = members.ravel()
    extra = flat < r
    return (np.concatenate([row, row[extra]]), np.concatenate([flat, flat[extra] + p]))


# -- all_reduce -----------------------------------------------------------------------------------

def recursive_doubling_all_reduce(world_size: int) -> Schedule:
    """Recursive-doubling all-reduce: XOR partners exchange and reduce the whole buffer.

    Pre:  rank r holds its buffer (one chunk). Post: every rank holds the reduction.
    Cost: L + 2[R>0] steps (L = ⌊log2 N⌋, R = N - 2^L); the busiest rank sends (L + [R>0])·M;
          T = (L + 2[R>0])·(alpha + M·beta) + (L + [R>0])·M·gamma.
    References: Thakur et al. 2005, section 4.4 (short messages).
    """
    n = world_size
    p, lg, r = _fold_sizes(n)
    t, phases = Transfers(), []
    if r:
        t.add(0, np.arange(p, n), np.arange(r), 0, reduce=True)
        phases.append("fold")
    v = np.arange(p)
    for k in range(lg):
        t.add(len(phases), v, v ^ (1 << k), 0, reduce=True)
        phases.append("recursive doubling")
    if r:
        t.add(len(phases), np.arange(r), np.arange(p, n), 0)
        phases.append("unfold")
    return t.schedule("all_reduce", "recursive_doubling", n, 1, phases)


def halving_doubling_all_reduce(world_size: int) -> Schedule:
    """Rabenseifner's all-reduce: recursive-halving reduce-scatter, recursive-doubling all-gather.

    Pre:  rank r holds its buffer, split into P = 2^⌊log2 N⌋ chunks.
    Post: every rank holds the reduction; after the halving phase virtual rank v owns chunk v.
    Cost: 2L + 2[R>0] steps; the busiest rank sends (2(P-1)/P + [R>0])·M;
          T = (2L + 2[R>0])·alpha + (2(P-1)/P + 2[R>0])·M·beta + ((P-1)/P + [R>0])·M·gamma.
    References: Rabenseifner 2004; Thakur et al. 2005, section 4.4.
    """
    n = world_size
    p, lg, r = _fold_sizes(n)
    t, phases = Transfers(), []
    chunks = np.arange(p)
    if r:  # every extra reduces its whole buffer into its partner
        t.add(0, np.repeat(np.arange(p, n), p), np.repeat(np.arange(r), p), np.tile(chunks, r),
              reduce=True)
        phases.append("fold")
    v = np.arange(p)
    for k in reversed(range(lg)):  # halving: d = P/2 … 1; send the partner's half of my range
        d = 1 << k
        partner = v ^ d
        lo = (partner >> k) << k            # the partner's half: chunks [lo, lo + d)
        t.add(len(phases), np.repeat(v, d), np.repeat(partner, d),
              (lo[:, None] + np.arange(d)).ravel(), reduce=True)
        phases.append("reduce-scatter")
    for k in range(lg):  # doubling: d = 1 … P/2; send the d chunks my aligned group finished
        d = 1 << k
        lo = (v >> k) << k
        t.add(len(phases), np.repeat(v, d), np.repeat(v ^ d, d),
              (lo[:, None] + np.arange(d)).ravel())
        phases.append("all-gather")
    if r:
        t.add(len(phases), np.repeat(np.arange(r), p), np.repeat(np.arange(p, n), p),
              np.tile(chunks, r))
        phases.append("unfold")
    return t.schedule("all_reduce", "halving_doubling", n, p, phases)


# -- reduce_scatter and all_gather (N blocks) -----------------------------------------------------

def halving_doubling_reduce_scatter(world_size: int) -> Schedule:
    """Recursive-halving reduce-scatter with torch's order: rank r ends with block r.

    Pre:  rank r holds N blocks. Post: rank r holds block r reduced over all ranks.
    Cost: L + 2[R>0] steps; every non-extra rank sends N-1 blocks and an extra sends all N, so
          the busiest rank sends M if R > 0, else (N-1)/N · M (M = the whole N-block input);
          T = [R>0]·(2·alpha + M·(beta+gamma) + M/N·beta)
              + Σ_{d = 2^k < P} (alpha + (d + min(d, R))·M/N·(beta+gamma)).
    References: Thakur et al. 2005, section 4.3 (recursive halving) and 4.4 (fold).
    """
    n = world_size
    p, lg, r = _fold_sizes(n)
    t, phases = Transfers(), []
    if r:
        t.add(0, np.repeat(np.arange(p, n), n), np.repeat(np.arange(r), n),
              np.tile(np.arange(n), r), reduce=True)
        phases.append("fold")
    v = np.arange(p)
    for k in reversed(range(lg)):
        d = 1 << k
        partner = v ^ d
        row, blocks = _owned((partner >> k) << k, d, p, r)
        t.add(len(phases), v[row], partner[row], blocks, reduce=True)
        phases.append("reduce-scatter")
    if r:
        t.add(len(phases), np.arange(r), np.arange(p, n), np.arange(p, n))
        phases.append("unfold")
    return t.schedule("reduce_scatter", "halving_doubling", n, n, phases)


def _doubling_all_gather(world_size: int, name: str) -> Schedule:
    n = world_size
    p, lg, r = _fold_sizes(n)
    t, phases = Transfers(), []
    if r:
        t.add(0, np.arange(p, n), np.arange(r), np.arange(p, n))
        phases.append("fold")
    v = np.arange(p)
    for k in range(lg):
        d = 1 << k
        row, blocks = _owned((v >> k) << k, d, p, r)
        t.add(len(phases), v[row], (v ^ d)[row], blocks)
        phases.append("all-gather")
    if r:  # each extra gets every block but its own
        ext = np.arange(p, n)
        others = np.arange(n)[None, :] != ext[:, None]                 # (R, N)
        row, blocks = np.nonzero(others)
        t.add(len(phases), row, ext[row], blocks)
        phases.append("unfold")
    return t.schedule("all_gather", name, n, n, phases)


def recursive_doubling_all_gather(world_size: int) -> Schedule:
    """Recursive-doubling all-gather: the blocks each rank holds double every step.

    Pre:  rank r holds block r. Post: every rank holds all N blocks.
    Cost: L + 2[R>0] steps; the busiest rank (rank 0) sends
          (P-1 + Σ_{k<L} min(2^k, R) + (N-1)·[R>0]) blocks of M/N (M = the whole output);
          T = [R>0]·(2·alpha + N·M/N·beta) + Σ_{d = 2^k < P} (alpha + (d + min(d, R))·M/N·beta).
    References: Thakur et al. 2005, section 4.1.
    """
    return _doubling_all_gather(world_size, "recursive_doubling")


def halving_doubling_all_gather(world_size: int) -> Schedule:
    """The all-gather half of Rabenseifner's algorithm: recursive doubling (d = 1 … P/2).

    The same schedule as ``recursive_doubling`` all_gather, registered under this name so that
    a reduce_scatter + all_gather pair (as in ZeRO/FSDP) can name one family for both halves.
    """
    return _doubling_all_gather(world_size, "halving_doubling")


# -- closed forms ---------------------------------------------------------------------------------

def _rd_all_reduce_time(n, nbytes, alpha, beta, gamma):
    _, lg, r = _fold_sizes(n)
    x = 1 if r else 0
    return (lg + 2 * x) * (alpha + nbytes * beta) + (lg + x) * nbytes * gamma


def _hd_all_reduce_time(n, nbytes, alpha, beta, gamma):
    p, lg, r = _fold_sizes(n)
    x = 1 if r else 0
    return ((2 * lg + 2 * x) * alpha + (2 * (p - 1) / p + 2 * x) * nbytes * beta
            + ((p - 1) / p + x) * nbytes * gamma)


def _level_blocks(n: int) -> list[int]:
    """Blocks the largest group exchanges at each distance d = 2^k < P: d + min(d, R)."""
    p, lg, r = _fold_sizes(n)
    return [(1 << k) + min(1 << k, r) for k in range(lg)]


def _hd_reduce_scatter_time(n, nbytes, alpha, beta, gamma):
    _, _, r = _fold_sizes(n)
    block = nbytes / n
    t = sum(alpha + b * block * (beta + gamma) for b in _level_blocks(n))
    if r:
        t += alpha + nbytes * (beta + gamma) + alpha + block * beta
    return t


def _rd_all_gather_time(n, nbytes, alpha, beta, gamma):
    _, _, r = _fold_sizes(n)
    block = nbytes / n
    t = sum(alpha + b * block * beta for b in _level_blocks(n))
    if r:
        t += alpha + block * beta + alpha + (n - 1) * block * beta
    return t


def _rd_all_gather_bytes(n: int, nbytes: float) -> float:
    p, lg, r = _fold_sizes(n)
    blocks = p - 1 + sum(min(1 << k, r) for k in range(lg)) + ((n - 1) if r else 0)
    return blocks * nbytes / n


def _steps(phases_per_level: int):
    def num_steps(n: int) -> int:
        _, lg, r = _fold_sizes(n)
        return phases_per_level * lg + (2 if r else 0)
    return num_steps


register(Algorithm(
    collective="all_reduce", name="recursive_doubling", builder=recursive_doubling_all_reduce,
    num_steps=_steps(1),
    bytes_sent=lambda n, b: (_fold_sizes(n)[1] + (1 if _fold_sizes(n)[2] else 0)) * b,
    steps_formula="⌊log2 N⌋ + 2[N≠2^k]", bytes_formula="(⌊log2 N⌋ + [N≠2^k])·M",
    reference=_THAKUR, time=_rd_all_reduce_time))
register(Algorithm(
    collective="all_reduce", name="halving_doubling", builder=halving_doubling_all_reduce,
    num_steps=_steps(2),
    bytes_sent=lambda n, b: (2 * (_fold_sizes(n)[0] - 1) / _fold_sizes(n)[0]
                             + (1 if _fold_sizes(n)[2] else 0)) * b,
    steps_formula="2⌊log2 N⌋ + 2[N≠2^k]",
    bytes_formula="2(P-1)/P·M (+M if N≠2^k), P=2^⌊log2 N⌋", reference=_RABENSEIFNER,
    time=_hd_all_reduce_time))
register(Algorithm(
    collective="reduce_scatter", name="halving_doubling", builder=halving_doubling_reduce_scatter,
    num_steps=_steps(1), bytes_sent=lambda n, b: b if _fold_sizes(n)[2] else (n - 1) / n * b,
    steps_formula="⌊log2 N⌋ + 2[N≠2^k]", bytes_formula="(N-1)/N·M (M if N≠2^k)",
    reference=_RABENSEIFNER, time=_hd_reduce_scatter_time))
for _name, _builder in (("recursive_doubling", recursive_doubling_all_gather),
                        ("halving_doubling", halving_doubling_all_gather)):
    register(Algorithm(
        collective="all_gather", name=_name, builder=_builder, num_steps=_steps(1),
        bytes_sent=_rd_all_gather_bytes, steps_formula="⌊log2 N⌋ + 2[N≠2^k]",
        bytes_formula="(N-1)/N·M if N=2^k (partners of extras send more)", reference=_THAKUR,
        time=_rd_all_gather_time))
