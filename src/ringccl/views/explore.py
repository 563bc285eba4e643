"""The schedule explorer: one self-contained HTML page that plays a schedule step by step.

:func:`explorer_data` turns a schedule into plain data (computed here, in Python, once); the
page's JavaScript (:mod:`.explore_page`) only draws it:

* the ranks laid out by the schedule's shape (:func:`rank_layout`: a ring, a tree, a grid for
  hypercube exchanges, boxes for the nodes of a two-level machine, a circle otherwise), the
  step's transfers as arrows labelled with their chunk (blue: copy, orange: reduce);
* every rank's buffer as chunks coloured by whose contributions they hold, from the symbolic
  checker (:class:`ringccl.check.SymbolicState`), see :func:`owner_colors`;
* the step table of :func:`ringccl.views.show.step_rows` (one row per step, one column per rank) with
  the current row highlighted;
* the α-β-γ cost of every step as a bar coloured by the kind of link that pays (``step_costs``,
  computed by the caller: the cost model sits above the views).

:func:`write_page` writes one page holding one or more explorers side by side and optionally
the cost model's crossover chart (:func:`model_figure`). plotly's Python package builds every
chart and ``include_plotlyjs`` inlines plotly.js (about 4.8 MB): the page needs no network.

DOM hooks (read by the browser tests): each explorer is ``<section class="explorer"
id="explorer-K" data-algorithm=...>``; its ``.state`` element carries ``data-position`` (slider
position, 0 = before the first step), ``data-step`` (index of the step shown, -1 before any) and
``data-transfers`` (the step's transfers, ``"src>dst:cS"`` or ``"src>dst:cS>cD"`` with ``+``
for a reduce, comma-separated in canonical order); every drawn chunk is a ``.chunk`` element with
``data-rank``, ``data-chunk``, ``data-owners`` (ranks whose contributions it holds, as
``"0-3,5"``; empty: none) and ``data-color``; the highlighted table row has class ``current``.
"""

from __future__ import annotations

import colorsys
import html
import json
import math
from typing import Mapping, Sequence

import numpy as np

from ..check import SymbolicState
from ..errors import ArgumentError, RingcclError
from ..ir import Schedule
from .explore_page import CSS, JS, LEGEND, MODEL_LEGEND
from .show import _ranges, step_rows

__all__ = ["explorer_data", "rank_layout", "owner_colors", "transfer_text", "write_page",
           "model_figure", "page_html", "require_plotly", "MAX_CELLS", "MAX_TRANSFERS",
           "EMPTY_COLOR", "FULL_COLOR"]

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
#: arrows: copy and reduce transfers
COPY_COLOR, REDUCE_COLOR = "#1f77b4", "#ff7f0e"
#: label arrows with their chunk up to this many transfers per step (beyond: hover only)
LABEL_LIMIT = 64


def require_plotly() -> None:
    """Raise RingcclError (naming the extra to install) where plotly is missing; the commands
    call it before any work."""
    _plotly()


def _plotly():
    try:
        import plotly.graph_objects as go
        import plotly.offline as offline
    except ImportError:
        raise RingcclError("the explorer needs plotly: pip install 'ringccl[explore]'") from None
    return go, offline


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
        "shown_ranks": shown, "colors": colors.items, "owners": owners.items,
        "init_color": init_color, "init_owner": init_owner, "init_chunk": init_chunk,
        "w_ptr": w_ptr, "w_cell": w_cell, "w_color": w_color, "w_owner": w_owner,
        "w_chunk": w_chunk,
        "table": {"ranks": table_ranks, "rows": step_rows(schedule, schedule.num_steps,
                                                           table_ranks)},
        "costs": None if step_costs is None else [dict(s) for s in step_costs],
        "machine": machine, "nbytes": nbytes,
    }


# -- figures (plotly) -----------------------------------------------------------------------------

def _graph_figure(data: dict, height: int):
    """The ranks and the (empty) arrow traces the page fills per step."""
    go, _ = _plotly()
    lay, n = data["layout"], data["world_size"]
    x, y = np.asarray(lay["x"]), np.asarray(lay["y"])
    pairs = sorted(_edges(np.asarray(data["src"]), np.asarray(data["dst"])))
    ex, ey = [], []
    for a, b in pairs:  # every pair the schedule ever uses, faint
        ex += [x[a], x[b], None]
        ey += [y[a], y[b], None]
    size = float(max(5, min(26, 500 / n)))
    text = [f"R{r}" for r in range(n)]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                             line=dict(color="#dddddd", width=1)))
    for name, color in (("copy", COPY_COLOR), ("reduce", REDUCE_COLOR)):
        fig.add_trace(go.Scatter(x=[], y=[], mode="lines+markers", name=name,
                                 line=dict(color=color, width=2), hoverinfo="text",
                                 marker=dict(symbol="arrow", angleref="previous", size=[],
                                             color=color)))
    fig.add_trace(go.Scatter(x=[], y=[], mode="text", text=[], hoverinfo="skip",
                             showlegend=False, textfont=dict(size=10, color="#333333")))
    fig.add_trace(go.Scatter(x=x.tolist(), y=y.tolist(), mode="markers+text" if n <= 32
                             else "markers", text=text, textposition="middle center",
                             hovertext=[f"rank {r}" for r in range(n)], hoverinfo="text",
                             showlegend=False, textfont=dict(size=max(7, size / 2.6)),
                             marker=dict(size=size, color="white",
                                         line=dict(color="#555555", width=1))))
    shapes = [dict(type="rect", x0=b["x0"], y0=b["y0"], x1=b["x1"], y1=b["y1"], layer="below",
                   line=dict(color="#999999", dash="dot"), fillcolor="rgba(0,0,0,0.02)")
              for b in lay.get("boxes", [])]
    annotations = [dict(x=(b["x0"] + b["x1"]) / 2, y=b["y1"], text=f"node {b['node']}",
                        showarrow=False, yanchor="bottom", font=dict(size=10, color="#777"))
                   for b in lay.get("boxes", [])]
    pad = 0.15 * max(np.ptp(x), np.ptp(y), 1.0)
    fig.update_layout(height=height, margin=dict(l=5, r=5, t=25, b=5), shapes=shapes,
                      annotations=annotations, plot_bgcolor="white",
                      legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"),
                      xaxis=dict(visible=False, range=[x.min() - pad, x.max() + pad]),
                      yaxis=dict(visible=False, range=[y.min() - pad, y.max() + pad + 0.15 *
                                                       bool(shapes)], scaleanchor="x"))
    return fig


def _arrow_geometry(data: dict) -> dict:
    """The arrow of every rank pair the schedule uses, and which pair each transfer takes.

    An arrow starts and ends short of its ranks and is shifted to the right of its direction
    (so both directions of a pair stay visible); its label sits beside its middle. Computed
    once per distinct (src, dst) pair: a 256-rank ring has 256 pairs for 130,560 transfers.

    Returns:
        ``pair`` (per transfer, an index into the per-pair lists) and per pair ``ax0``,
        ``ay0``, ``ax1``, ``ay1`` (arrow ends) and ``lx``, ``ly`` (label).
    """
    x, y = np.asarray(data["layout"]["x"]), np.asarray(data["layout"]["y"])
    n = len(x)
    s, d = np.asarray(data["src"], dtype=np.int64), np.asarray(data["dst"], dtype=np.int64)
    if s.size == 0:
        return {"pair": [], "ax0": [], "ay0": [], "ax1": [], "ay1": [], "lx": [], "ly": []}
    pairs, pair = np.unique(s * n + d, return_inverse=True)
    ps, pd = pairs // n, pairs % n
    pts = np.stack([x, y], axis=1)
    # arrows stop short of the ranks by a fraction of the closest spacing of two ranks
    if n <= 2048:
        dist = np.hypot(pts[:, None, 0] - pts[None, :, 0], pts[:, None, 1] - pts[None, :, 1])
        np.fill_diagonal(dist, np.inf)
        spacing = float(dist.min())
    else:  # pragma: no cover - no registered layout is drawn this large
        spacing = 2 * math.pi / n
    p0, p1 = pts[ps], pts[pd]
    vec = p1 - p0
    length = np.maximum(np.hypot(vec[:, 0], vec[:, 1]), 1e-12)
    unit = vec / length[:, None]
    normal = np.stack([unit[:, 1], -unit[:, 0]], axis=1)  # to the right of the direction
    cut = np.minimum(0.3 * spacing, (0.3 if n <= 64 else 0.12) * length)[:, None]
    side = normal * (0.08 * spacing)
    a0, a1 = p0 + unit * cut + side, p1 - unit * cut + side
    mid = (a0 + a1) / 2 + normal * (0.08 * spacing)
    r = lambda a: np.round(a, 4).tolist()  # noqa: E731 - 4 decimals keep the page small
    return {"pair": pair.ravel().tolist(), "ax0": r(a0[:, 0]), "ay0": r(a0[:, 1]),
            "ax1": r(a1[:, 0]), "ay1": r(a1[:, 1]), "lx": r(mid[:, 0]), "ly": r(mid[:, 1])}


#: colours of the link kinds in the cost chart and of the algorithms in the model chart
#: (plotly's default qualitative palette: ten distinct colours)
_LINK_COLORS = ["#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692",
                "#b6e880", "#ff97ff", "#fecb52"]


def _cost_figure(data: dict, height: int):
    """Seconds per step, one bar trace per kind of link that pays (hover: the link, split)."""
    go, _ = _plotly()
    costs = data["costs"]
    kinds = list(dict.fromkeys(s.get("link_kind") or "none" for s in costs))
    fig = go.Figure()
    for i, kind in enumerate(kinds):
        idx = [k for k, s in enumerate(costs) if (s.get("link_kind") or "none") == kind]
        fig.add_trace(go.Bar(
            x=[k + 1 for k in idx], y=[costs[k]["seconds"] * 1e6 for k in idx], name=kind,
            showlegend=True,
            marker_color=_LINK_COLORS[i % len(_LINK_COLORS)],
            hovertext=[f"step {k + 1} ({costs[k].get('phase', data['phases'][k])})<br>"
                       f"{costs[k]['seconds'] * 1e6:.3f} us: latency "
                       f"{costs[k]['latency_seconds'] * 1e6:.3f}, bandwidth "
                       f"{costs[k]['bandwidth_seconds'] * 1e6:.3f}, reduction "
                       f"{costs[k]['reduction_seconds'] * 1e6:.3f}<br>paid by "
                       f"{costs[k].get('link') or '-'}" for k in idx], hoverinfo="text"))
    fig.update_layout(height=height, margin=dict(l=45, r=5, t=30, b=30), barmode="overlay",
                      bargap=0.1, plot_bgcolor="white",
                      title=dict(text="α-β-γ time per step (us), coloured by the link that "
                                 "pays", font=dict(size=12), x=0),
                      legend=dict(orientation="h", x=0, y=-0.25),
                      xaxis=dict(title=None, range=[0.5, data["num_steps"] + 0.5]),
                      yaxis=dict(title="us", gridcolor="#eeeeee"),
                      # the current step (1-based, as the page names steps), moved by the page
                      shapes=[dict(type="rect", xref="x", yref="paper", x0=0.5, x1=1.5, y0=0,
                                   y1=1, fillcolor="rgba(255,190,0,0.25)",
                                   line=dict(color="#e6a100", width=2), layer="above",
                                   visible=False)])
    return fig


def model_figure(charts: Sequence[Mapping], title: str = ""):
    """The cost model's crossover chart: time vs size (log-log) and busbw vs size.

    Args:
        charts: one per world size, as :func:`ringccl.views.plot.model_chart` takes them:
            ``world_size``, ``sizes`` (bytes), ``seconds`` and ``busbw`` ({algorithm: list over
            sizes}; seconds, bytes/s) and ``crossovers`` ([{"nbytes", "seconds", "below",
            "above"}]).
        title: the chart's title.
    Returns:
        a plotly Figure (hover: algorithm, size, time, busbw).
    """
    go, _ = _plotly()
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("time vs size (● crossover)",
                                                        "busbw vs size (nccl-tests busbw)"))
    algos = list(dict.fromkeys(a for t in charts for a in t["seconds"]))
    dashes = ["solid", "dash", "dot", "dashdot"]
    for j, t in enumerate(charts):
        sizes = list(t["sizes"])
        for a in t["seconds"]:
            color = _LINK_COLORS[algos.index(a) % len(_LINK_COLORS)]
            name = a if len(charts) == 1 else f"{a} N={t['world_size']}"
            hover = [f"{a}, N={t['world_size']}<br>{_size_text(s)}: {sec * 1e6:.3f} us, busbw "
                     f"{(bw or 0) / 1e9:.3f} GB/s" for s, sec, bw in
                     zip(sizes, t["seconds"][a], t["busbw"][a])]
            line = dict(color=color, dash=dashes[j % len(dashes)])
            fig.add_trace(go.Scatter(x=sizes, y=[v * 1e3 for v in t["seconds"][a]], name=name,
                                     legendgroup=name, line=line, hovertext=hover,
                                     hoverinfo="text", mode="lines+markers",
                                     marker=dict(size=4)), row=1, col=1)
            fig.add_trace(go.Scatter(x=sizes, y=[(v or 0) / 1e9 for v in t["busbw"][a]],
                                     name=name, legendgroup=name, showlegend=False, line=line,
                                     hovertext=hover, hoverinfo="text", mode="lines+markers",
                                     marker=dict(size=4)), row=1, col=2)
        cross = t["crossovers"]
        if cross:
            fig.add_trace(go.Scatter(
                x=[c["nbytes"] for c in cross], y=[c["seconds"] * 1e3 for c in cross],
                mode="markers", name=f"crossover N={t['world_size']}",
                marker=dict(color="black", size=8),
                hovertext=[f"crossover N={t['world_size']}: {c['below']} → {c['above']} at "
                           f"{_size_text(c['nbytes'])} ({c['seconds'] * 1e6:.2f} us)"
                           for c in cross], hoverinfo="text"), row=1, col=1)
    ticks = [4.0 ** k for k in range(0, 21)]
    for col in (1, 2):
        fig.update_xaxes(type="log", title_text="message size (bytes per rank)",
                         tickvals=ticks, ticktext=[_size_text(v) for v in ticks],
                         gridcolor="#eeeeee", row=1, col=col)
    fig.update_yaxes(type="log", title_text="predicted time (ms)", gridcolor="#eeeeee",
                     dtick=1, row=1, col=1)  # one tick per decade
    fig.update_yaxes(title_text="busbw (GB/s)", gridcolor="#eeeeee", row=1, col=2)
    fig.update_layout(height=460, title=dict(text=title, font=dict(size=13)),
                      plot_bgcolor="white", margin=dict(l=60, r=20, t=70, b=60),
                      hovermode="closest")
    return fig


def _size_text(nbytes: float) -> str:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.4g} B"


# -- the page ------------------------------------------------------------------------------------

def _table_html(data: dict) -> str:
    t = data["table"]
    head = "".join(f"<th>R{r}</th>" for r in t["ranks"])
    rows = []
    for row in t["rows"]:
        cells = "".join(f"<td>{html.escape(c)}</td>" for c in row["cells"])
        if row["kind"] == "step":
            rows.append(f'<tr data-step="{row["index"]}"><th>{html.escape(row["phase"])} '
                        f'{row["step"]}</th>{cells}</tr>')
        else:
            rows.append(f'<tr class="holds"><th>after {html.escape(row["phase"])}</th>'
                        f"{cells}</tr>")
    note = ("" if len(t["ranks"]) == data["world_size"] else
            f'<p class="note">columns: ranks {_ranges(t["ranks"])} of {data["world_size"]}</p>')
    return (f'<table class="steps"><thead><tr><th>step</th>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{note}')


def _section_html(k: int, data: dict) -> str:
    n, c = data["world_size"], data["num_chunks"]
    params = ", ".join(f"{a}={b}" for a, b in data["params"].items())
    total = (f"; predicted {sum(s['seconds'] for s in data['costs']) * 1e6:,.2f} us for "
             f"{_size_text(data['nbytes'])} per rank on {html.escape(data['machine'])}"
             if data["costs"] is not None and data["nbytes"] is not None else "")
    shown = data["shown_ranks"]
    buffers_note = ("" if len(shown) == n else
                    f" (ranks {_ranges(shown)}: {len(shown)} of {n})")
    cost_div = (f'<div class="cost" id="cost-{k}"></div>' if data["costs"] is not None else "")
    # chunk boxes: square, as large as 460 px across the buffer allows (2 px at least)
    cell = max(2, min(22, 460 // max(c, 1)))
    gap = 1 if cell >= 6 else 0
    style = f"--chunks:{c};--cell:{cell}px;--row:{max(cell, 2 if len(shown) > 64 else 8)}px;" \
        f"--gap:{gap}px"
    return f"""
<section class="explorer" id="explorer-{k}" data-algorithm="{html.escape(data['algorithm'])}"
 data-collective="{data['collective']}" data-world-size="{n}" data-num-steps="{data['num_steps']}"
 tabindex="0">
 <h2>{html.escape(data['algorithm'])} {data['collective']}: {n} ranks, {c} chunks per rank,
  {data['num_steps']} steps, {html.escape(data['layout']['shape'])} layout
  {('(' + html.escape(params) + ')') if params else ''}</h2>
 <p class="meta">{total.lstrip('; ')}</p>
 <div class="controls">
  <button class="play" type="button" title="play / pause (space)">▶ play</button>
  <input class="slider" type="range" min="0" max="{data['num_steps']}" value="0" step="1"
   aria-label="step">
  <span class="state" data-position="0" data-step="-1" data-transfers=""></span>
 </div>
 <div class="row">
  <div class="graph" id="graph-{k}"></div>
  <div class="buffers-box"><div class="caption">buffers{buffers_note}: one row per rank, one
   box per chunk; colour = whose contributions it holds</div>
   <div class="buffers" style="{style}"></div></div>
 </div>
 {cost_div}
 <div class="table-box">{_table_html(data)}</div>
</section>"""


def page_html(explorers: Sequence[Mapping], model=None, title: str = "ringccl explore") -> str:
    """The whole page as text (see :func:`write_page`)."""
    go, offline = _plotly()

    payload = []
    for k, data in enumerate(explorers):
        height = 430 if len(explorers) == 1 else 360
        item = {key: data[key] for key in (
            "world_size", "num_chunks", "num_steps", "phases", "src", "dst", "src_chunk",
            "dst_chunk", "reduce", "step_ptr", "shown_ranks", "colors", "owners",
            "init_color", "init_owner", "init_chunk", "w_ptr", "w_cell", "w_color", "w_owner",
            "w_chunk")}
        item.update(_arrow_geometry(data))
        item["label_limit"] = LABEL_LIMIT
        item["arrow_size"] = 11 if data["world_size"] <= 64 else 6
        item["graph"] = _graph_figure(data, height).to_plotly_json()
        item["cost"] = (_cost_figure(data, 220).to_plotly_json() if data["costs"] is not None
                        else None)
        payload.append(item)
    sections = "".join(_section_html(k, d) for k, d in enumerate(explorers))
    model_div = ""
    model_json = "null"
    if model is not None:
        model_div = '<section class="model"><div id="model"></div></section>'
        model_json = json.dumps(model.to_plotly_json(), cls=_encoder())
    side = " side-by-side" if len(explorers) > 1 else ""
    data_json = json.dumps(payload, cls=_encoder(), separators=(",", ":"))
    # "</" inside a script would end it early; JSON allows "<\/"
    data_json, model_json = (s.replace("</", "<\\/") for s in (data_json, model_json))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{CSS}</style>
<script>{offline.get_plotlyjs()}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p class="help">{LEGEND if explorers else MODEL_LEGEND}</p>
<div class="explorers{side}">{sections}</div>
{model_div}
<script id="explore-data" type="application/json">{data_json}</script>
<script id="model-data" type="application/json">{model_json}</script>
<script>{JS}</script>
</body></html>
"""


def _encoder():
    """plotly's JSON encoder class (numpy arrays, NaN as null), imported when needed."""
    from plotly.utils import PlotlyJSONEncoder
    return PlotlyJSONEncoder


def write_page(path: str, explorers: Sequence[Mapping], model=None,
               title: str = "ringccl explore") -> int:
    """Write the explorer page: one self-contained HTML file that works offline.

    Args:
        path: output file.
        explorers: :func:`explorer_data` results, drawn side by side (at least one, unless
            ``model`` is given).
        model: a :func:`model_figure` to add under them (the crossover chart), or None.
        title: the page's title.
    Returns:
        the page's size in bytes.
    Raises:
        RingcclError: plotly is not installed.
        ValueError: neither explorers nor a model.
        OSError: ``path`` cannot be written.
    """
    if not explorers and model is None:
        raise ValueError("write_page needs at least one explorer or a model chart")
    text = page_html(explorers, model, title)
    data = text.encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)
    return len(data)
