"""Binary-tree reduce, broadcast and all-reduce, and the double binary tree (NCCL's trees).

**The tree.** The in-order binary tree NCCL builds over ranks 0 … N-1 (logical ranks; a ``root``
other than 0 relabels rank r as (r - root) mod N). Rank 0 is the root and has one child,
2^(D-1) with D = ⌈log2 N⌉. A rank v >= 1 whose lowest set bit is 2^h (its *height*) has the left
child v - 2^(h-1) and, as right child, v + 2^j for the largest j < h with v + 2^j < N. Odd ranks
are the leaves; the tree has depth D, and the left subtree of any rank is perfect.

**Steps.** A rank v sends its partial sum of segment k to its parent at step u(v) + k, after it
has absorbed its children's segment k; both children may deliver the same segment in one step
(the IR combines several reduces into one slot in ascending rank), so u(v) is the height
of v's subtree: leaves start at step 0 and the reduce phase takes U(N) + S steps with
U(N) = D - 1. Broadcast: a rank at depth δ forwards segment k to both children at step k + δ
(D + S - 1 steps). all_reduce pipelines the two: the root starts broadcasting segment k the step
after it has reduced it, so all_reduce takes U(N) + S + D = 2D - 1 + S steps (2⌈log2 N⌉ for
S = 1, as NCCL's tree: 20 for N = 1024 against the ring's 2046).

Bandwidth: a rank with two children receives 2M in the reduce phase and sends 2M in the
broadcast; a single tree's all_reduce moves 3M through its busiest rank (ring: 2(N-1)/N · M).

**Double binary tree** (Sanders, Speck & Träff 2009; NCCL 2.4): the buffer is halved and each
half is all-reduced over its own tree, both trees in the same steps. Tree A is the tree above;
tree B is tree A with rank r playing the role of rank N-1-r (mirror, N even) or of rank r-1 mod N
(shift, N odd). The leaves of A are the odd ranks, the leaves of B the even ones (N even; for
odd N only rank 0 is interior in both), so every rank is interior in one tree and a leaf in the
other: it sends and receives about M in each phase, 2M in all — the ring's volume at O(log N)
steps.

References:
    Sanders, Speck & Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and
    scan", Parallel Computing 35(12), 2009.
    NVIDIA, "Massively Scale Your Deep Learning Training with NCCL 2.4" (double binary trees),
    2019; NCCL's trees.cc (in-order tree, mirror/shift for the second tree).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..args import check_int
from ..caches import memoize
from ..collectives import check_root
from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers, ceil_log2

__all__ = ["reduce", "broadcast", "all_reduce", "double_binary_tree_all_reduce", "BinaryTree",
           "binary_tree", "second_tree_roles", "reduce_start", "num_steps", "time"]

_SANDERS = "Sanders, Speck & Träff, Parallel Computing 35(12) 2009"
_NCCL_TREE = "in-order binary tree (NCCL); Sanders et al. 2009"
_TREE_STEPS = "2⌈log2 N⌉"


@dataclass(frozen=True)
class BinaryTree:
    """NCCL's in-order binary tree over logical ranks 0 … N-1 (root 0).

    Attributes (int64 arrays of shape (N,), -1 where absent):
        parent, left, right: tree links.
        depth: distance from the root.
        start: u(v), the step at which v sends segment 0 to its parent (root: -1).
    """

    parent: np.ndarray
    left: np.ndarray
    right: np.ndarray
    depth: np.ndarray
    start: np.ndarray


@memoize(maxsize=16)
def binary_tree(world_size: int) -> BinaryTree:
    """The in-order binary tree of ``world_size`` ranks with its reduce start steps."""
    n = world_size
    parent = np.full(n, -1, dtype=np.int64)
    left = np.full(n, -1, dtype=np.int64)
    right = np.full(n, -1, dtype=np.int64)
    height = np.zeros(n, dtype=np.int64)
    if n >= 2:
        top = 1 << (ceil_log2(n) - 1)
        left[0], parent[top] = top, 0          # the root's only child
    for v in range(1, n):
        h = (v & -v).bit_length() - 1
        height[v] = h
        if h == 0:
            continue
        left[v] = v - (1 << (h - 1))
        parent[left[v]] = v
        for j in range(h - 1, -1, -1):
            if v + (1 << j) < n:
                right[v] = v + (1 << j)
                parent[right[v]] = v
                break
    # reduce start steps, children before parents (heights ascending)
    start = np.full(n, -1, dtype=np.int64)
    for v in sorted(range(1, n), key=lambda x: height[x]):
        if left[v] < 0:
            start[v] = 0
            continue
        # both children may deliver segment k in the same step (several reduces into one slot
        # per step combine in ascending rank: the IR's order), so a rank starts once its deeper
        # child did
        start[v] = max(start[left[v]], start[right[v]] if right[v] >= 0 else -1) + 1
    depth = np.zeros(n, dtype=np.int64)
    for v in sorted(range(1, n), key=lambda x: -height[x]):  # parents before children
        depth[v] = depth[parent[v]] + 1
    for arr in (parent, left, right, depth, start):
        arr.flags.writeable = False
    return BinaryTree(parent, left, right, depth, start)


def reduce_start(world_size: int) -> int:
    """U(N) = ⌈log2 N⌉ - 1: the step at which the root's child sends segment 0.

    A rank's start is the height of its subtree (the left subtree is perfect and at least as
    deep as the right one), and the root's only child 2^(D-1) has height D - 1.
    """
    return ceil_log2(world_size) - 1 if world_size >= 2 else 0


# -- the three phases as transfers ----------------------------------------------------------------

def _reduce_up(t: Transfers, tree: BinaryTree, label: np.ndarray, segments: int,
               chunk0: int = 0) -> None:
    """Every non-root v reduces segment k into its parent at step start(v) + k."""
    v = np.nonzero(tree.parent >= 0)[0]
    k = np.arange(segments)
    t.add((tree.start[v][:, None] + k).ravel(), np.repeat(label[v], segments),
          np.repeat(label[tree.parent[v]], segments), np.tile(chunk0 + k, len(v)),
          reduce=True)


def _broadcast_down(t: Transfers, tree: BinaryTree, label: np.ndarray, segments: int,
                    first_step: int, chunk0: int = 0) -> None:
    """Every v at depth δ copies segment k to its children at step first_step + k + δ."""
    v = np.nonzero(tree.parent >= 0)[0]            # receivers
    k = np.arange(segments)
    sender = tree.parent[v]
    t.add((first_step + tree.depth[sender][:, None] + k).ravel(),
          np.repeat(label[sender], segments), np.repeat(label[v], segments),
          np.tile(chunk0 + k, len(v)))


def _logical_to_rank(n: int, root: int) -> np.ndarray:
    return (np.arange(n) + root) % n


def reduce(world_size: int, root: int = 0, segments: int = 1) -> Schedule:
    """Binary-tree reduce to ``root``, pipelined in ``segments`` segments.

    Pre:  every rank holds its buffer (``segments`` chunks).
    Post: ``root`` holds the reduction of all buffers.
    Cost: U(N) + S steps (U from :func:`reduce_start`); every non-root rank sends M once;
          S = 1: T = (U+1)·(alpha + M·(beta+gamma)).
    Raises: ArgumentError: root out of range, segments < 1.
    """
    n = world_size
    root, s = check_root(root, n), check_int(segments, "segments", minimum=1)
    tree, t = binary_tree(n), Transfers()
    _reduce_up(t, tree, _logical_to_rank(n, root), s)
    steps = reduce_start(n) + s if n > 1 else 0
    return t.schedule("reduce", "tree", n, s, ["tree reduce"] * steps,
                      params={"root": root, "segments": s})


def broadcast(world_size: int, root: int = 0, segments: int = 1) -> Schedule:
    """Binary-tree broadcast from ``root``, pipelined in ``segments`` segments.

    Pre:  ``root`` holds the buffer. Post: every rank holds it.
    Cost: D + S - 1 steps (D = ⌈log2 N⌉); a rank with two children sends 2M;
          S = 1: T = Σ_{δ<D} (alpha + c_δ·M·beta), c_δ the most children of a rank at depth δ.
    Raises: ArgumentError: root out of range, segments < 1.
    """
    n = world_size
    root, s = check_root(root, n), check_int(segments, "segments", minimum=1)
    tree, t = binary_tree(n), Transfers()
    _broadcast_down(t, tree, _logical_to_rank(n, root), s, 0)
    steps = ceil_log2(n) + s - 1 if n > 1 else 0
    return t.schedule("broadcast", "tree", n, s, ["tree broadcast"] * steps,
                      params={"root": root, "segments": s})


def _all_reduce_phases(n: int, s: int) -> list[str]:
    if n == 1:
        return []
    first = reduce_start(n) + 1                  # the root broadcasts segment 0
    return (["tree reduce"] * first + ["tree reduce + broadcast"] * (s - 1)
            + ["tree broadcast"] * ceil_log2(n))


def all_reduce(world_size: int, segments: int = 1) -> Schedule:
    """Binary-tree all-reduce: reduce to rank 0, then broadcast, pipelined in segments.

    Segment k goes back down as soon as the root has reduced it, so the broadcast of early
    segments overlaps the reduction of later ones.

    Pre:  every rank holds its buffer (``segments`` chunks). Post: every rank holds the reduction.
    Cost: U(N) + S + D steps; the busiest rank sends 3M (N >= 4);
          S = 1: T = (U+1)·(alpha + M·(beta+gamma)) + Σ_{δ<D} (alpha + c_δ·M·beta).
    Raises: ArgumentError: segments < 1.
    """
    n = world_size
    s = check_int(segments, "segments", minimum=1)
    tree, t = binary_tree(n), Transfers()
    label = np.arange(n)
    _reduce_up(t, tree, label, s)
    _broadcast_down(t, tree, label, s, reduce_start(n) + 1)
    return t.schedule("all_reduce", "tree", n, s, _all_reduce_phases(n, s),
                      params={"segments": s})


def second_tree_roles(world_size: int) -> np.ndarray:
    """role[r]: the rank of tree A whose place rank r takes in tree B (mirror or shift)."""
    r = np.arange(world_size)
    return world_size - 1 - r if world_size % 2 == 0 else (r - 1) % world_size


def double_binary_tree_all_reduce(world_size: int, segments: int = 1) -> Schedule:
    """NCCL's double binary tree all-reduce: each half of the buffer over its own tree.

    Chunks 0 … S-1 (first half) go up and down tree A, chunks S … 2S-1 over tree B (see the
    module docstring); both trees use the same steps.

    Pre:  every rank holds its buffer (2·``segments`` chunks). Post: every rank holds the
          reduction.
    Cost: U(N) + S + D steps, as one tree; the busiest rank sends 2M (N >= 4), 1.5M (N = 3);
          S = 1: T = (U+1)·(alpha + M/2·(beta+gamma)) + Σ_{δ<D} (alpha + c_δ·M/2·beta): in no
          step do the two trees together load a rank's port more than one tree loads its
          busiest rank, so each step costs what one tree's half costs (the tests walk it).
    References: Sanders, Speck & Träff 2009; NCCL 2.4.
    Raises: ArgumentError: segments < 1.
    """
    n = world_size
    s = check_int(segments, "segments", minimum=1)
    tree, t = binary_tree(n), Transfers()
    first = reduce_start(n) + 1
    label_a = np.arange(n)
    label_b = np.argsort(second_tree_roles(n))     # A-role x is played by rank label_b[x]
    for label, chunk0 in ((label_a, 0), (label_b, s)):
        _reduce_up(t, tree, label, s, chunk0)
        _broadcast_down(t, tree, label, s, first, chunk0)
    return t.schedule("all_reduce", "double_binary_tree", n, 2 * s, _all_reduce_phases(n, s),
                      params={"segments": s})


# -- closed forms ---------------------------------------------------------------------------------

def _children_at_depth(n: int) -> list[int]:
    """c_δ for δ = 0 … D-1: the most children any rank at depth δ has."""
    d = ceil_log2(n)
    c = [1] + [2] * (d - 1)
    if d >= 2 and n < (1 << (d - 1)) + 2:
        c[1] = 1           # 2^(D-1) has no right child
    return c


def num_steps(collective: str, world_size: int, segments: int = 1) -> int:
    """Steps of the tree schedules: reduce U+S, broadcast D+S-1, all_reduce U+S+D (N >= 2)."""
    n, s = world_size, segments
    if n == 1:
        return 0
    return {"reduce": reduce_start(n) + s, "broadcast": ceil_log2(n) + s - 1,
            "all_reduce": reduce_start(n) + s + ceil_log2(n)}[collective]


def time(collective: str, world_size: int, nbytes: float, alpha: float, beta: float,
         gamma: float) -> float:
    """Seconds on a flat network for segments = 1 (the registered default)."""
    n = world_size
    if n == 1:
        return 0.0
    # step t < D-1: ranks of height t+1 absorb two children at once iff 2^(t+1) + 2^t < N
    # (the smallest such rank has its right child); step D-1: the root absorbs its one child
    d = ceil_log2(n)
    up = sum(alpha + (2 if 3 * (1 << t) < n else 1) * nbytes * (beta + gamma)
             for t in range(d - 1)) + alpha + nbytes * (beta + gamma)
    down = sum(alpha + c * nbytes * beta for c in _children_at_depth(n))
    return {"reduce": up, "broadcast": down, "all_reduce": up + down}[collective]


def _bytes(collective: str, n: int, nbytes: float) -> float:
    """Bytes the busiest rank sends: up M once, down M per child."""
    most_children = 0 if n == 1 else max(_children_at_depth(n))
    if collective == "reduce":
        return nbytes if n > 1 else 0.0
    if collective == "broadcast":
        return most_children * nbytes
    # all_reduce: a rank with two children also sends up (N >= 4); N = 3 is a chain
    return 0.0 if n == 1 else nbytes * (1 + most_children if n >= 4 else n - 1)


def _dbt_bytes(n: int, nbytes: float) -> float:
    return {1: 0.0, 2: nbytes, 3: 1.5 * nbytes}.get(n, 2 * nbytes)


register(Algorithm(collective="all_reduce", name="tree", builder=all_reduce,
                   num_steps=lambda n: num_steps("all_reduce", n),
                   bytes_sent=lambda n, b: _bytes("all_reduce", n, b), steps_formula=_TREE_STEPS,
                   bytes_formula="3M", reference=_NCCL_TREE,
                   time=lambda n, b, alpha, beta, gamma: time("all_reduce", n, b, alpha, beta,
                                                              gamma)))
register(Algorithm(collective="all_reduce", name="double_binary_tree",
                   builder=double_binary_tree_all_reduce,
                   num_steps=lambda n: num_steps("all_reduce", n), bytes_sent=_dbt_bytes,
                   steps_formula=_TREE_STEPS, bytes_formula="2M", reference=_SANDERS,
                   time=lambda n, b, alpha, beta, gamma: time("all_reduce", n, b / 2, alpha,
                                                              beta, gamma)))
register(Algorithm(collective="reduce", name="tree", builder=reduce,
                   num_steps=lambda n: num_steps("reduce", n),
                   bytes_sent=lambda n, b: _bytes("reduce", n, b), steps_formula="⌈log2 N⌉",
                   bytes_formula="M", reference=_NCCL_TREE,
                   time=lambda n, b, alpha, beta, gamma: time("reduce", n, b, alpha, beta, gamma)))
register(Algorithm(collective="broadcast", name="tree", builder=broadcast,
                   num_steps=lambda n: num_steps("broadcast", n),
                   bytes_sent=lambda n, b: _bytes("broadcast", n, b), steps_formula="⌈log2 N⌉",
                   bytes_formula="2M", reference=_NCCL_TREE,
                   time=lambda n, b, alpha, beta, gamma: time("broadcast", n, b, alpha, beta,
                                                              gamma)))
