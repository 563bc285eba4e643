"""The schedule explorer's data: a schedule turned into plain data (computed here, in Python,
once) that the page (:mod:`.explore_html`, :mod:`.explore_page`) only draws.

:func:`explorer_data` gives

* the ranks laid out by the schedule's shape (:func:`rank_layout`: a ring, a tree, a grid for
  hypercube exchanges, boxes for the nodes of a two-level machine, a circle otherwise), and
  every step's transfers (drawn as arrows labelled with their chunk: blue copy, orange reduce);
* every rank's buffer as chunks coloured by whose contributions they hold, from the symbolic
  checker (:class:`ringccl.check.SymbolicState`), see :func:`owner_colors`;
* the step table of :func:`ringccl.views.show.step_rows` (one row per step, one column per
  rank);
* the α-β-γ cost of every step by the kind of link that pays (``step_costs``, computed by the
  caller: the cost model sits above the views).
"""

from __future__ import annotations

import colorsys
import math
from typing import Mapping, Sequence

import numpy as np

from ..check import SymbolicState
from ..errors import ArgumentError
from ..ir import Schedule
from .show import _ranges, step_rows

__all__ = ["explorer_data", "rank_layout", "owner_colors", "transfer_text", "MAX_CELLS",
           "MAX_TRANSFERS", "EMPTY_COLOR", "FULL_COLOR"]

#: at most this many buffer chunks (shown ranks x chunks) are drawn; beyond it, evenly spaced
#: ranks are shown (a 256-rank ring's 256 x 256 chunks are drawn whole)
MAX_CELLS = 65536
#: at most this many transfers on one page (a 256-rank ring all-reduce has 130,560: a page of
#: about 11 MB); beyond it the page would be too heavy to stay usable
MAX_TRANSFERS = 300_000
#: rank columns of the step table (one column per rank, the first this many)
TABLE_RANKS = 8
#: colour of a slot holding nothing, and of one holding every rank's contribution once
EMPTY_COLOR = "#f0f0f0"
FULL_COLOR = "#202020"


# -- layout --------------------------------------------------------------------------------------

def _edges(src: np.ndarray, dst: np.ndarray) -> set[tuple[int, int]]:
    a, b = np.minimum(src, dst).astype(np.int64), np.maximum(src, dst).astype(np.int64)
    return set(zip(a.tolist(), b.tolist()))


def _adjacency(n: int, edges) -> list[list[int]]:
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b in sorted(edges):
        adj[a].append(b)
        adj[b].append(a)
    return adj


def _bfs(adj, root: int) -> list[int]:
    """Depth of every rank from ``root`` (-1: unreachable)."""
    depth = [-1] * len(adj)
    depth[root], frontier = 0, [root]
    while frontier:
        nxt = []
        for u in frontier:
            for v in adj[u]:
                if depth[v] < 0:
                    depth[v] = depth[u] + 1
                    nxt.append(v)
        frontier = nxt
    return depth


def _ring_order(adj, first_hop: int | None) -> list[int] | None:
    """Ranks along the cycle through every rank, from R0 (towards ``first_hop`` when it is a
    neighbour of R0); None if the graph is not one such cycle."""
    n = len(adj)
    if n < 3 or any(len(a) != 2 for a in adj):
        return None
    order, prev = [0], 0
    cur = first_hop if first_hop in adj[0] else adj[0][0]
    while cur != 0 and len(order) <= n:
        order.append(cur)
        a, b = adj[cur]
        prev, cur = cur, (b if a == prev else a)
    return order if len(order) == n else None


def _tree_positions(adj) -> tuple[list[float], list[float]] | None:
    """Layered drawing of a spanning tree rooted at its centre; None if ``adj`` is no tree."""
    n = len(adj)
    if sum(len(a) for a in adj) != 2 * (n - 1) or min(_bfs(adj, 0)) < 0:
        return None
    # the root: a centre (least eccentricity), lowest rank on ties: the reduction's root for
    # the binary and star trees
    ecc = [max(_bfs(adj, r)) for r in range(n)]
    root = ecc.index(min(ecc))
    depth = _bfs(adj, root)
    kids = [[v for v in adj[u] if depth[v] == depth[u] + 1] for u in range(n)]
    # leaves left to right in depth-first order, each parent above its children's middle
    # (an explicit stack: a chain of n ranks would recurse n deep)
    preorder, stack = [], [root]
    while stack:
        u = stack.pop()
        preorder.append(u)
        stack.extend(reversed(kids[u]))
    x = [0.0] * n
    leaf = 0
    for u in preorder:
        if not kids[u]:
            x[u], leaf = float(leaf), leaf + 1
    for u in reversed(preorder):
        if kids[u]:
            x[u] = sum(x[v] for v in kids[u]) / len(kids[u])
    return x, [-float(d) for d in depth]


def rank_layout(schedule: Schedule, node_of: Sequence[int] | None = None) -> dict:
    """Where each rank is drawn, derived from the schedule's transfers (and the machine's nodes).

    Rules, in order: ``node_of`` placing ranks on at least two nodes gives ``"nodes"`` (a box
    per node, its ranks on a small circle inside); otherwise the graph of rank pairs that
    exchange anything decides: one cycle through every rank is a ``"ring"`` (drawn in cycle
    order, the first step's direction clockwise), a tree is a ``"tree"`` (layered from its
    centre), every pair differing in one bit of the rank (a hypercube, world_size a power of 2)
    is a ``"grid"``; where the whole graph is none of these but has at most 2(N-1) pairs and
    chunk 0 alone travels along a spanning tree (the double binary tree), that ``"tree"``;
    otherwise a ``"circle"`` in rank order.

    Args:
        schedule: any schedule.
        node_of: (world_size,) node of each rank, or None.
    Returns:
        ``{"shape", "x", "y"}`` (lists of world_size floats) and, for ``"nodes"``, ``"boxes"``:
        ``[{"node", "x0", "y0", "x1", "y1"}]``.
    """
    n = schedule.world_size
    if n == 1:
        return {"shape": "single", "x": [0.0], "y": [0.0]}
    if node_of is not None:
        node_of = np.asarray(node_of, dtype=np.int64)
        if node_of.shape != (n,):
            raise ValueError(f"node_of has shape {node_of.shape}, expected ({n},)")
        if np.unique(node_of).size >= 2:
            return _nodes_layout(node_of)
    edges = _edges(schedule.src, schedule.dst)
    adj = _adjacency(n, edges)
    first = int(schedule.dst[0]) if schedule.num_transfers and schedule.src[0] == 0 else None
    order = _ring_order(adj, first)
    if order is not None:
        angle = {r: math.pi / 2 - 2 * math.pi * k / n for k, r in enumerate(order)}
        return {"shape": "ring", "x": [math.cos(angle[r]) for r in range(n)],
                "y": [math.sin(angle[r]) for r in range(n)]}
    tree = _tree_positions(adj)
    if tree is not None:
        return {"shape": "tree", "x": tree[0], "y": tree[1]}
    if n & (n - 1) == 0 and edges and all(((a ^ b) & ((a ^ b) - 1)) == 0 for a, b in edges):
        cols = 1 << ((n.bit_length() - 1 + 1) // 2)
        return {"shape": "grid", "x": [float(r % cols) for r in range(n)],
                "y": [-float(r // cols) for r in range(n)]}
    # a sparse graph (at most two trees' edges) whose chunk 0 travels along a spanning tree:
    # drawn as that tree (the double binary tree); dense ones (direct: every pair) stay circles
    zero = schedule.src_chunk == 0
    tree = (_tree_positions(_adjacency(n, _edges(schedule.src[zero], schedule.dst[zero])))
            if len(edges) <= 2 * (n - 1) else None)
    if tree is not None:
        return {"shape": "tree", "x": tree[0], "y": tree[1]}
    angle = [math.pi / 2 - 2 * math.pi * r / n for r in range(n)]
    return {"shape": "circle", "x": [math.cos(a) for a in angle],
            "y": [math.sin(a) for a in angle]}


def _nodes_layout(node_of: np.ndarray) -> dict:
    """A box per node on a grid (node-major, left to right); its ranks on a circle inside."""
    nodes = np.unique(node_of)
    cols = math.ceil(math.sqrt(nodes.size))
    x, y = [0.0] * node_of.size, [0.0] * node_of.size
    boxes = []
    for i, node in enumerate(nodes.tolist()):
        cx, cy = 1.2 * (i % cols), -1.2 * (i // cols)
        members = np.nonzero(node_of == node)[0].tolist()
        for k, r in enumerate(members):
            a = math.pi / 2 - 2 * math.pi * k / len(members)
            radius = 0.4 if len(members) > 1 else 0.0
            x[r], y[r] = cx + radius * math.cos(a), cy + radius * math.sin(a)
        boxes.append({"node": int(node), "x0": cx - 0.55, "y0": cy - 0.55, "x1": cx + 0.55,
                      "y1": cy + 0.55})
    return {"shape": "nodes", "x": x, "y": y, "boxes": boxes}


# -- buffers: who holds what ----------------------------------------------------------------------

def owner_colors(owners: np.ndarray) -> list[str]:
    """The colour of slots holding the contributions ``owners`` (bool, (k, world_size)).

    Every rank has a hue on the colour wheel (rank r: 360·r/N degrees); a slot is drawn in the
    circular mean of its contributors' hues (grey where they are spread evenly round the wheel
    and have no mean), lighter with few contributions and darker with many; a slot holding
    every rank is :data:`FULL_COLOR`, an empty one :data:`EMPTY_COLOR`.
    Hue and lightness are quantized (5 degrees, 2 %) so pages carry a small palette.

    Returns:
        k colours as ``"#rrggbb"``.
    """
    owners = np.asarray(owners, dtype=bool)
    k, n = owners.shape
    count = owners.sum(axis=1)
    angle = 2 * np.pi * np.arange(n) / max(n, 1)
    sx, cx = owners @ np.sin(angle), owners @ np.cos(angle)
    # contributors spread evenly round the wheel ({R0, R2} of 4) have no mean hue: grey. The
    # rounding keeps the result independent of summation order at the quantization steps.
    balanced = np.hypot(sx, cx) < 1e-6 * np.maximum(count, 1)
    hue = np.round(np.degrees(np.arctan2(sx, cx)) % 360, 3)
    frac = (count - 1) / max(n - 1, 1)
    light = 0.72 - 0.34 * frac
    out = []
    for i in range(k):
        if count[i] == 0:
            out.append(EMPTY_COLOR)
        elif count[i] == n and n > 1:
            out.append(FULL_COLOR)
        else:
            h = round(hue[i] / 5) * 5 / 360
            lum = round(light[i] * 50) / 50
            r, g, b = colorsys.hls_to_rgb(h % 1.0, lum, 0.0 if balanced[i] else 0.75)
            out.append(f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}")
    return out


def _owners_of(state: SymbolicState, slots: np.ndarray) -> np.ndarray:
    """bool (len(slots), world_size): contributions held by the flat slots ``slots``."""
    n = state.schedule.world_size
    rows = state.bits.reshape(-1, state.words)[slots]
    return np.unpackbits(rows.view(np.uint8), axis=1, bitorder="little")[:, :n].astype(bool)


class _Palette:
    """Distinct strings numbered in order of first use (colours, owner texts)."""

    def __init__(self):
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def add(self, item: str) -> int:
        if item not in self._index:
            self._index[item] = len(self.items)
            self.items.append(item)
        return self._index[item]


def _cells(state: SymbolicState, slots: np.ndarray, colors: _Palette, owners: _Palette):
    """(colour ids, owner-text ids, logical chunk ids) of the flat ``slots``."""
    held = _owners_of(state, slots)
    # identical owner sets recur (a ring's ranges): format each distinct one once
    packed = np.packbits(held, axis=1)
    uniq, inverse = np.unique(packed, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    sets = np.unpackbits(uniq, axis=1)[:, :held.shape[1]].astype(bool)
    ucolor = [colors.add(c) for c in owner_colors(sets)]
    utext = [owners.add(_ranges(np.nonzero(s)[0].tolist())) for s in sets]
    cid = state.chunk_id.reshape(-1)[slots]
    return ([ucolor[i] for i in inverse.tolist()], [utext[i] for i in inverse.tolist()],
            cid.tolist())


def transfer_text(src: int, dst: int, src_chunk: int, dst_chunk: int, reduce: bool) -> str:
    """A transfer as the page's ``data-transfers`` writes it: ``"0>1:c3"``, ``"0>1:c3>c5"``,
    with a leading ``+`` for a reduce."""
    chunk = f"c{src_chunk}" + (f">c{dst_chunk}" if dst_chunk != src_chunk else "")
    return f"{'+' if reduce else ''}{src}>{dst}:{chunk}"


def _shown_ranks(n: int, c: int) -> list[int]:
    if n * c <= MAX_CELLS:
        return list(range(n))
    keep = max(1, MAX_CELLS // c)
    return sorted(set(np.linspace(0, n - 1, keep).round().astype(int).tolist()))


# -- one explorer's data --------------------------------------------------------------------------

def _buffer_states(schedule: Schedule, shown: list[int]) -> dict:
    """The shown ranks' buffers before the first step and what each step writes into them:
    ``colors`` and ``owners`` palettes, ``init_color``/``init_owner``/``init_chunk`` per shown
    cell, ``w_ptr``/``w_cell``/``w_color``/``w_owner``/``w_chunk`` per step (chunk lists None
    when every slot holds its own chunk), from the symbolic checker.

    Raises:
        VerificationError: a step of the schedule is faulty.
    """
    n, c = schedule.world_size, schedule.num_chunks
    # flat slot id (rank * C + chunk) -> position among the drawn cells (-1: not drawn)
    cell_of = np.full(n * c, -1, dtype=np.int64)
    shown_slots = (np.asarray(shown, dtype=np.int64)[:, None] * c + np.arange(c)).ravel()
    cell_of[shown_slots] = np.arange(shown_slots.size)
    colors, owners = _Palette(), _Palette()
    state = SymbolicState(schedule)
    init_color, init_owner, init_chunk = _cells(state, shown_slots, colors, owners)
    w_ptr, w_cell, w_color, w_owner, w_chunk = [0], [], [], [], []
    dst_slot = schedule.dst.astype(np.int64) * c + schedule.dst_chunk
    for index in range(schedule.num_steps):
        state.apply(index)
        lo, hi = int(schedule.step_ptr[index]), int(schedule.step_ptr[index + 1])
        written = np.unique(dst_slot[lo:hi])
        written = written[cell_of[written] >= 0]
        if written.size:
            col, own, cid = _cells(state, written, colors, owners)
            w_cell += cell_of[written].tolist()
            w_color += col
            w_owner += own
            w_chunk += cid
        w_ptr.append(len(w_cell))
    # a slot's logical chunk is usually its own index (all_reduce): then say so once
    slot_chunk = shown_slots % c
    if (np.asarray(init_chunk) == slot_chunk).all() and (
            np.asarray(w_chunk, dtype=np.int64) == shown_slots[w_cell] % c).all():
        init_chunk = w_chunk = None
    return {"colors": colors.items, "owners": owners.items, "init_color": init_color,
            "init_owner": init_owner, "init_chunk": init_chunk, "w_ptr": w_ptr,
            "w_cell": w_cell, "w_color": w_color, "w_owner": w_owner, "w_chunk": w_chunk}


def explorer_data(schedule: Schedule, step_costs: Sequence[Mapping] | None = None, *,
                  node_of: Sequence[int] | None = None, machine: str = "",
                  nbytes: float | None = None) -> dict:
    """Everything one explorer draws, as plain data (lists, strings, numbers).

    Args:
        schedule: the schedule (it must pass :func:`ringccl.verify`'s steps: a faulty step
            raises VerificationError here too).
        step_costs: per step ``{"seconds", "latency_seconds", "bandwidth_seconds",
            "reduction_seconds", "link", "link_kind"}`` (seconds; the link that sets the step's
            time and its kind), e.g. from :func:`ringccl.walk`; None: no cost chart.
        node_of: (world_size,) node of each rank (a two-level machine), or None.
        machine: one line describing the machine the costs are for.
        nbytes: bytes of one rank's buffer the costs are for.
    Returns:
        a dict: schedule arrays (``src``, ``dst``, ``src_chunk``, ``dst_chunk``, ``reduce``,
        ``step_ptr``), ``layout`` (:func:`rank_layout`), ``shown_ranks``, buffer states
        (``colors`` and ``owners`` palettes; ``init_*`` per shown cell and per-step writes
        ``w_ptr``/``w_cell``/``w_color``/``w_owner``/``w_chunk``; the chunk lists are None when
        every slot holds its own chunk), ``table`` (step rows) and ``costs``.
    Raises:
        VerificationError: a step of the schedule is faulty.
        ValueError: ``step_costs`` or ``node_of`` do not match the schedule.
        ArgumentError: more than :data:`MAX_TRANSFERS` transfers.
    """
    n, c = schedule.world_size, schedule.num_chunks
    if schedule.num_transfers > MAX_TRANSFERS:
        raise ArgumentError(
            f"{schedule.algorithm} {schedule.collective} on world_size={n} has "
            f"{schedule.num_transfers:,} transfers; the explorer draws at most "
            f"{MAX_TRANSFERS:,} (a 256-rank ring all-reduce has 130,560): use fewer ranks")
    if step_costs is not None and len(step_costs) != schedule.num_steps:
        raise ValueError(f"step_costs has {len(step_costs)} entries for "
                         f"{schedule.num_steps} steps")
    shown = _shown_ranks(n, c)
    states = _buffer_states(schedule, shown)
    table_ranks = shown[:TABLE_RANKS] if len(shown) > TABLE_RANKS else shown
    return {
        "collective": schedule.collective, "algorithm": schedule.algorithm,
        "world_size": n, "num_chunks": c, "num_steps": schedule.num_steps,
        "params": {k: v for k, v in schedule.params.items()
                   if isinstance(v, (int, float, str))},
        "phases": list(schedule.phase_names),
        "src": schedule.src.tolist(), "dst": schedule.dst.tolist(),
        "src_chunk": schedule.src_chunk.tolist(), "dst_chunk": schedule.dst_chunk.tolist(),
        "reduce": schedule.reduce.astype(int).tolist(), "step_ptr": schedule.step_ptr.tolist(),
        "layout": rank_layout(schedule, node_of),
        "shown_ranks": shown, **states,
        "table": {"ranks": table_ranks, "rows": step_rows(schedule, schedule.num_steps,
                                                           table_ranks)},
        "costs": None if step_costs is None else [dict(s) for s in step_costs],
        "machine": machine, "nbytes": nbytes,
    }
