"""The schedule explorer's page: one self-contained HTML file that plays a schedule step by step.

:func:`write_page` writes one page holding one or more explorers (:func:`ringccl.views.explore.
explorer_data`) side by side and optionally the cost model's crossover chart
(:func:`model_figure`). plotly's Python package builds every chart and ``include_plotlyjs``
inlines plotly.js (about 4.8 MB): the page needs no network. The page's JavaScript and CSS are
:mod:`.explore_page`; they only draw the data.

DOM hooks (read by the browser tests): each explorer is ``<section class="explorer"
id="explorer-K" data-algorithm=...>``; its ``.state`` element carries ``data-position`` (slider
position, 0 = before the first step), ``data-step`` (index of the step shown, -1 before any) and
``data-transfers`` (the step's transfers, ``"src>dst:cS"`` or ``"src>dst:cS>cD"`` with ``+``
for a reduce, comma-separated in canonical order); every drawn chunk is a ``.chunk`` element with
``data-rank``, ``data-chunk``, ``data-owners`` (ranks whose contributions it holds, as
``"0-3,5"``; empty: none) and ``data-color``; the highlighted table row has class ``current``.
"""

from __future__ import annotations

import html
import json
import math
from typing import Mapping, Sequence

import numpy as np

from ..errors import RingcclError
from .explore import _edges
from .explore_page import CSS, JS, LEGEND, MODEL_LEGEND
from .show import _ranges

__all__ = ["write_page", "model_figure", "page_html", "require_plotly", "COPY_COLOR",
           "REDUCE_COLOR", "LABEL_LIMIT"]

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
