"""Two-level (hierarchical) all-reduce, reduce-scatter and all-gather for ``nodes × local_size``
ranks.

The machine it is for: servers of several GPUs (e.g. 128 servers × 8), NVLink inside a server,
InfiniBand between servers. Consecutive ranks share a node: rank r is local rank r % L of node
r // L (L = ``local_size``, P = N / L nodes). Every phase is a ring, either inside a node
(next_rank = the next local rank of the same node) or across nodes (next_rank = the rank of
the same local rank on the next node: the L rings of one phase run at the same time, one per
local rank, so every NIC of a rail-aligned node is busy and each carries 1/L of the data).
M is the collective's buffer (nbytes: all_reduce's input, reduce_scatter's whole N-block
input, all_gather's whole N-block output); the buffer has N chunks.

all_reduce, three phases:

1. intra-node reduce-scatter (L-1 steps): the buffer is cut into L groups of P consecutive
   chunks; local rank l ends owning group l reduced over its node (torch's order: l keeps
   group l);
2. inter-node all-reduce (2(P-1) steps; the only steps that cross nodes): the P ranks with
   local rank l all-reduce group l over a ring of the nodes (the ring all-reduce's order:
   reduce-scatter, then all-gather);
3. intra-node all-gather (L-1 steps) of the groups.

reduce_scatter (rank r ends with block r = chunk r reduced over all ranks), two phases:

1. intra-node reduce-scatter (L-1 steps): group l is the P blocks owned by the ranks of local
   rank l, chunks {l, L + l, 2L + l, ...} (strided: the contract fixes block r to rank r);
   local rank l ends with group l reduced over its node;
2. inter-node reduce-scatter (P-1 steps; the only steps that cross nodes) of group l among the
   ranks of local rank l: node m ends with chunk m·L + l, i.e. rank r with block r.

all_gather (rank r starts with block r; every rank ends with all N blocks), the mirror:

1. inter-node all-gather (P-1 steps; the only steps that cross nodes) among the ranks of local
   rank l: each ends with group l (the blocks of local rank l of every node);
2. intra-node all-gather (L-1 steps) of the groups.

Per-rank volume: all_reduce sends 2(N-1)/N · M, reduce_scatter and all_gather (N-1)/N · M, as
the flat rings do, but only the inter-node phase leaves a node: 2(P-1)/N · M (all_reduce) or
(P-1)/N · M (reduce_scatter, all_gather) per rank, where a flat ring's node-crossing ranks
move M/N in each of its 2(N-1) or N-1 steps. The order of the two reduce_scatter phases (and
of all_gather's, mirrored) is what keeps the inter-node volume that small: gathering across
nodes first would send L times more over the NICs.

``local_size`` default: the largest divisor of N that is at most 8 (an 8-GPU server; N = 1024
gives 128 × 8). An explicit ``local_size`` must divide N. With L = 1 or
L = N each schedule degenerates to the single flat ring of its collective (with the steps of
the empty phase absent).

References:
    Jia et al., "Highly Scalable Deep Learning Training System with Mixed-Precision: Training
    ImageNet in Four Minutes", arXiv:1807.11205, 2018 (hierarchical all-reduce);
    Patarasuk & Yuan, JPDC 69(2), 2009 (the rings);
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
    MPICH", IJHPCA 19(1), 2005, section 4 (the α-β-γ cost of a ring reduce-scatter and
    all-gather, summed here over the two phases).
"""

from __future__ import annotations

import numpy as np

from ..args import check_int
from ..errors import ArgumentError
from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "default_local_size",
           "DEFAULT_MAX_LOCAL_SIZE"]

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
    for s in range(nodes - 1):  # ring over nodes on group l, ring all-reduce order
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
                   reference="Jia et al. arXiv:1807.11205 2018 (hierarchical all-reduce)",
                   time=time))


# -- reduce_scatter and all_gather ------------------------------------------------------------

def _two_level(world_size: int, local_size):
    """``(L, P, r, node, local rank, next local rank, next node's rank)`` of every rank r."""
    loc = _local_size(world_size, local_size)
    nodes = world_size // loc
    r = np.arange(world_size)
    node, lr = r // loc, r % loc
    return (loc, nodes, r, node, lr, node * loc + (lr + 1) % loc,
            ((node + 1) % nodes) * loc + lr)


def _strided_groups(g: np.ndarray, loc: int, nodes: int) -> np.ndarray:
    """Chunks of group ``g`` (any shape): the blocks of the ranks of local rank g, one per node,
    {g, L + g, 2L + g, ...}; a new last axis of length P."""
    return g[..., None] + loc * np.arange(nodes)


def reduce_scatter(world_size: int, local_size: int | None = None) -> Schedule:
    """Hierarchical reduce-scatter: intra-node ring reduce-scatter of strided groups, then
    inter-node ring reduce-scatter among the ranks of equal local rank.

    Pre:  rank r holds N blocks (one chunk each).
    Post: rank r holds block r reduced over all N ranks (torch's reduce_scatter_tensor).
    Cost: (L-1) + (P-1) steps, P = N/L; every rank sends (N-1)/N · M (M = the whole N-block
          input), of which (P-1)/N · M crosses nodes;
          T = (L-1)·(alpha + M/L·(beta + gamma)) + (P-1)·(alpha + M/N·(beta + gamma)).

    Args:
        world_size: N = P · local_size.
        local_size: ranks per node L (consecutive ranks); default: see the module docstring.
    Returns:
        Schedule with num_chunks == N and params {"local_size": L}.
    Raises:
        ArgumentError: local_size not a positive divisor of world_size.
    References:
        Thakur, Rabenseifner & Gropp 2005, section 4 (each phase's ring); Jia et al. 2018 (the
        two levels).
    """
    n = world_size
    loc, nodes, r, node, lr, nxt_local, nxt_node = _two_level(n, local_size)
    t = Transfers()
    # intra-node, steps s = 0 … L-2: local rank l sends group (l-1-s) mod L, P chunks, to l+1,
    # which adds it into its own copy; after step L-2 local rank l holds group l (the blocks
    # of the ranks with local rank l) reduced over its node
    s = np.arange(loc - 1)[:, None]
    t.add(s[..., None], r[:, None], nxt_local[:, None],
          _strided_groups((lr - 1 - s) % loc, loc, nodes), reduce=True)
    # inter-node, steps s = 0 … P-2, one ring per local rank l over the nodes: node m sends
    # block ((m-1-s) mod P)·L + l to node m+1; afterwards node m holds block m·L + l = its rank
    s = np.arange(nodes - 1)[:, None]
    t.add(loc - 1 + s, r, nxt_node, ((node - 1 - s) % nodes) * loc + lr, reduce=True)
    phases = (["intra-node reduce-scatter"] * (loc - 1)
              + ["inter-node reduce-scatter"] * (nodes - 1))
    return t.schedule("reduce_scatter", "hierarchical", n, n, phases, params={"local_size": loc})


def all_gather(world_size: int, local_size: int | None = None) -> Schedule:
    """Hierarchical all-gather, the mirror of :func:`reduce_scatter`: inter-node ring all-gather
    among the ranks of equal local rank, then intra-node ring all-gather of strided groups.

    Pre:  rank r holds block r (one chunk).
    Post: every rank holds all N blocks in rank order (torch's all_gather_into_tensor).
    Cost: (P-1) + (L-1) steps, P = N/L; every rank sends (N-1)/N · M (M = the whole N-block
          output), of which (P-1)/N · M crosses nodes;
          T = (P-1)·(alpha + M/N·beta) + (L-1)·(alpha + M/L·beta).

    Args:
        world_size: N = P · local_size.
        local_size: ranks per node L (consecutive ranks); default: see the module docstring.
    Returns:
        Schedule with num_chunks == N and params {"local_size": L}.
    Raises:
        ArgumentError: local_size not a positive divisor of world_size.
    References:
        Thakur, Rabenseifner & Gropp 2005, section 4 (each phase's ring); Jia et al. 2018 (the
        two levels).
    """
    n = world_size
    loc, nodes, r, node, lr, nxt_local, nxt_node = _two_level(n, local_size)
    t = Transfers()
    # inter-node, steps s = 0 … P-2, one ring per local rank l over the nodes: node m forwards
    # block ((m-s) mod P)·L + l to node m+1; afterwards every rank holds its group l
    s = np.arange(nodes - 1)[:, None]
    t.add(s, r, nxt_node, ((node - s) % nodes) * loc + lr)
    # intra-node, steps s = 0 … L-2: local rank l forwards group (l-s) mod L to l+1; after
    # step L-2 every rank holds all L groups, i.e. all N blocks
    s = np.arange(loc - 1)[:, None]
    t.add(nodes - 1 + s[..., None], r[:, None], nxt_local[:, None],
          _strided_groups((lr - s) % loc, loc, nodes))
    phases = ["inter-node all-gather"] * (nodes - 1) + ["intra-node all-gather"] * (loc - 1)
    return t.schedule("all_gather", "hierarchical", n, n, phases, params={"local_size": loc})


def one_way_num_steps(world_size: int, local_size: int | None = None) -> int:
    """Steps of :func:`reduce_scatter` and of :func:`all_gather`: (L-1) + (N/L - 1)."""
    loc = _local_size(world_size, local_size)
    return (loc - 1) + (world_size // loc - 1)


def reduce_scatter_time(world_size: int, nbytes: float, alpha: float, beta: float,
                        gamma: float, local_size: int | None = None) -> float:
    """Seconds on a flat network (see :func:`reduce_scatter`'s Cost line); nbytes = the whole
    N-block input."""
    loc = _local_size(world_size, local_size)
    nodes = world_size // loc
    return ((loc - 1) * (alpha + nbytes / loc * (beta + gamma))
            + (nodes - 1) * (alpha + nbytes / world_size * (beta + gamma)))


def all_gather_time(world_size: int, nbytes: float, alpha: float, beta: float, gamma: float,
                    local_size: int | None = None) -> float:
    """Seconds on a flat network (see :func:`all_gather`'s Cost line; gamma unused: nothing is
    reduced); nbytes = the whole N-block output."""
    loc = _local_size(world_size, local_size)
    nodes = world_size // loc
    return ((nodes - 1) * (alpha + nbytes / world_size * beta)
            + (loc - 1) * (alpha + nbytes / loc * beta))


_ONE_WAY_REFERENCE = ("Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005, §4 (the ring costs); "
                      "Jia et al. arXiv:1807.11205 2018 (the two levels)")

register(Algorithm(collective="reduce_scatter", name="hierarchical", builder=reduce_scatter,
                   num_steps=one_way_num_steps, bytes_sent=lambda n, b: (n - 1) / n * b,
                   steps_formula="(L-1) + (N/L-1)", bytes_formula="(N-1)/N·M",
                   reference=_ONE_WAY_REFERENCE, time=reduce_scatter_time))
register(Algorithm(collective="all_gather", name="hierarchical", builder=all_gather,
                   num_steps=one_way_num_steps, bytes_sent=lambda n, b: (n - 1) / n * b,
                   steps_formula="(N/L-1) + (L-1)", bytes_formula="(N-1)/N·M",
                   reference=_ONE_WAY_REFERENCE, time=all_gather_time))
