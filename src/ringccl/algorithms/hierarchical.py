"""Two-level (hierarchical) all-reduce for ``nodes × local_size`` ranks.

The lecture's question 4 (seed 001, section 9.3): 128 servers × 8 GPUs, NVLink inside a server,
InfiniBand between servers. Consecutive ranks share a node: rank r is local rank r % L of node
r // L (L = ``local_size``). Three phases, each a ring:

1. intra-node reduce-scatter (L-1 steps): the buffer is cut into L groups of ``nodes`` chunks;
   local rank l ends owning group l reduced over its node (torch's order: l keeps group l);
2. inter-node all-reduce (2(nodes-1) steps): the ``nodes`` ranks with the same local rank l form
   a ring over the nodes and all-reduce group l (seed order: reduce-scatter, then all-gather).
   The L rings run at the same time, one per local rank, so every NIC of a rail-aligned node is
   busy and each carries only 1/L of the data;
3. intra-node all-gather (L-1 steps) of the groups.

On a flat network the volume equals the flat ring's, 2(N-1)/N · M per rank, but only 2(nodes-1)
of the 2(L-1) + 2(nodes-1) steps cross nodes, and each inter-node transfer is M/N while a flat
ring's node-crossing ranks move M/N in every one of its 2(N-1) steps.

``local_size`` default: the largest divisor of N that is at most 8 (an 8-GPU server; N = 1024
gives 128 × 8, the lecture's machine). An explicit ``local_size`` must divide N. With L = 1 or
L = N the schedule degenerates to a single ring all-reduce.

References:
    Jia et al., "Highly Scalable Deep Learning Training System with Mixed-Precision: Training
    ImageNet in Four Minutes", arXiv:1807.11205, 2018 (hierarchical all-reduce);
    Patarasuk & Yuan, JPDC 69(2), 2009 (the rings).
"""

from __future__ import annotations

import numpy as np

from ..args import check_int
from ..errors import ArgumentError
from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers

__all__ = ["all_reduce", "default_local_size", "DEFAULT_MAX_LOCAL_SIZE"]

#: ranks per node when ``local_size`` is not given: 8-GPU servers (DGX/HGX class)
DEFAULT_MAX_LOCAL_SIZE = 8


def default_local_size(world_size: int) -> int:
    """The largest divisor of ``world_size`` that is at most :data:`DEFAULT_MAX_LOCAL_SIZE`."""
    return max(d for d in range(1, min(world_size, DEFAULT_MAX_LOCAL_SIZE) + 1)
               if world_size % d == 0)


def _local_size(world_size: int, local_size) -> int:
    if local_size is None:
        return default_local_size(world_size)
    local_size = check_int(local_size, "local_size", minimum=1)
    if world_size % local_size:
        raise ArgumentError(f"local_size={local_size} must divide world_size={world_size} "
                            "(consecutive ranks fill nodes of local_size ranks)")
    return local_size


def all_reduce(world_size: int, local_size: int | None = None) -> Schedule:
    """Hierarchical all-reduce: intra-node reduce-scatter, inter-node all-reduce, intra-node
    all-gather (all three rings).

    Pre:  rank r holds its buffer, split into N chunks (L groups of ``nodes`` chunks).
    Post: every rank holds the reduction of all N buffers.
    Cost: 2(L-1) + 2(nodes-1) steps; every rank sends 2(N-1)/N · M;
          T = (L-1)·(2·alpha + M/L·(2·beta + gamma)) + (nodes-1)·(2·alpha + M/N·(2·beta + gamma)).

    Args:
        world_size: N = nodes · local_size.
        local_size: ranks per node L (consecutive ranks); default: see the module docstring.
    Returns:
        Schedule with num_chunks == N and params {"local_size": L}.
    Raises:
        ArgumentError: local_size not a positive divisor of world_size.
    """
    n = world_size
    loc = _local_size(n, local_size)
    nodes = n // loc
    r = np.arange(n)
    node, lr = r // loc, r % loc
    t, phases = Transfers(), []

    def groups(g):  # chunks of group g (per sending rank): shape (N, nodes)
        return (g[:, None] * nodes + np.arange(nodes)[None, :])

    nxt_local = node * loc + (lr + 1) % loc
    for s in range(loc - 1):  # after this phase local rank l owns group l of its node
        t.add(len(phases), r[:, None], nxt_local[:, None], groups((lr - 1 - s) % loc),
              reduce=True)
        phases.append("intra-node reduce-scatter")
    nxt_node = ((node + 1) % nodes) * loc + lr
    for s in range(nodes - 1):  # ring over nodes on group l, seed order
        t.add(len(phases), r, nxt_node, lr * nodes + (node - s) % nodes, reduce=True)
        phases.append("inter-node reduce-scatter")
    for s in range(nodes - 1):
        t.add(len(phases), r, nxt_node, lr * nodes + (node + 1 - s) % nodes)
        phases.append("inter-node all-gather")
    for s in range(loc - 1):
        t.add(len(phases), r[:, None], nxt_local[:, None], groups((lr - s) % loc))
        phases.append("intra-node all-gather")
    return t.schedule("all_reduce", "hierarchical", n, n, phases, params={"local_size": loc})


def num_steps(world_size: int, local_size: int | None = None) -> int:
    """2(L-1) + 2(N/L - 1)."""
    loc = _local_size(world_size, local_size)
    return 2 * (loc - 1) + 2 * (world_size // loc - 1)


def time(world_size: int, nbytes: float, alpha: float, beta: float, gamma: float,
         local_size: int | None = None) -> float:
    """Seconds on a flat network (see :func:`all_reduce`'s Cost line)."""
    n = world_size
    loc = _local_size(n, local_size)
    nodes = n // loc
    return ((loc - 1) * (2 * alpha + nbytes / loc * (2 * beta + gamma))
            + (nodes - 1) * (2 * alpha + nbytes / n * (2 * beta + gamma)))


register(Algorithm(collective="all_reduce", name="hierarchical", builder=all_reduce,
                   num_steps=num_steps, bytes_sent=lambda n, b: 2 * (n - 1) / n * b,
                   steps_formula="2(L-1) + 2(N/L-1)", bytes_formula="2(N-1)/N·M",
                   reference="Jia et al. arXiv:1807.11205 2018; the collective-communication lecture, §9.3 (hierarchical question)",
                   time=lambda n, b, alpha, beta, gamma: time(n, b, alpha, beta, gamma)))
