"""van de Geijn's broadcast: binomial-tree scatter, then ring all-gather.

MPICH's broadcast for long messages. The root's buffer is cut into N chunks; relabel rank r as
logical v = (r - root) mod N, and let chunk (v + root) mod N belong to logical rank v.

1. scatter (⌈log2 N⌉ steps, binomial tree): at the step of distance d = 2^k (k from
   ⌈log2 N⌉-1 down to 0) every logical rank v that is a multiple of 2d and holds the chunks of
   [v, v + 2d) sends those of [v + d, v + 2d) ∩ [0, N) to v + d. Afterwards rank r holds chunk r.
2. all-gather (N-1 steps, ring): at step s rank r sends chunk (r - s) mod N to r + 1, except into
   the root, which has every chunk already.

The root sends 2(N-1)/N · M in all against a binomial broadcast's ⌈log2 N⌉ · M, at the price of
⌈log2 N⌉ + N - 1 steps. With count < N some chunks are empty: the schedule is the same and stays
correct (executors skip empty chunks).

References:
    Barnett, Gupta, Payne, Shuler, van de Geijn & Watts, "Interprocessor collective
    communication library (InterCom)", SHPCC 1994; Thakur, Rabenseifner & Gropp, IJHPCA 19(1),
    2005, section 4.2 (broadcast: scatter + all-gather).
"""

from __future__ import annotations

import numpy as np

from ..collectives import check_root
from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers, ceil_log2

__all__ = ["broadcast"]


def broadcast(world_size: int, root: int = 0) -> Schedule:
    """Broadcast by binomial scatter and ring all-gather (van de Geijn).

    Pre:  ``root`` holds the buffer (N chunks). Post: every rank holds it.
    Cost: ⌈log2 N⌉ + N - 1 steps; the root sends 2(N-1)/N · M, the most of any rank;
          T = Σ_{k<⌈log2 N⌉} (alpha + min(2^k, N-2^k)·M/N·beta) + (N-1)·(alpha + M/N·beta).
    Raises: ArgumentError: root out of range.
    """
    n = world_size
    root = check_root(root, n)
    t, phases = Transfers(), []
    to_rank = lambda v: (v + root) % n  # noqa: E731
    for k in reversed(range(ceil_log2(n))):
        d = 1 << k
        v = np.arange(0, n, 2 * d)
        v = v[v + d < n]
        lo, hi = v + d, np.minimum(v + 2 * d, n)
        sizes = hi - lo
        chunk = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]) if len(v) else lo
        t.add(len(phases), to_rank(np.repeat(v, sizes)), to_rank(np.repeat(v + d, sizes)),
              to_rank(chunk))
        phases.append("scatter")
    r = np.arange(n)
    into_root = (r + 1) % n == root
    for s in range(n - 1 if n > 1 else 0):
        t.add(len(phases), r[~into_root], (r[~into_root] + 1) % n, (r[~into_root] - s) % n)
        phases.append("all-gather")
    return t.schedule("broadcast", "scatter_allgather", n, n, phases, params={"root": root})


def _time(n, nbytes, alpha, beta, gamma):
    block = nbytes / n
    scatter = sum(alpha + min(1 << k, n - (1 << k)) * block * beta for k in range(ceil_log2(n)))
    return scatter + (n - 1) * (alpha + block * beta)


register(Algorithm(collective="broadcast", name="scatter_allgather", builder=broadcast,
                   num_steps=lambda n: ceil_log2(n) + n - 1,
                   bytes_sent=lambda n, b: 2 * (n - 1) / n * b,
                   steps_formula="⌈log2 N⌉ + N-1", bytes_formula="2(N-1)/N·M",
                   reference="van de Geijn (InterCom 1994); Thakur et al. 2005, §4.2",
                   time=_time))
