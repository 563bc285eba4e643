"""The planner's step timeline as an interactive page (``ringccl plan ... --html``).

The same picture as :func:`ringccl.views.plan_plot.plan_chart` (one timeline per picked rank
position, the bars per parallelism), from the same plain data (``StepEstimate.to_dict()``) and the
same geometry (:func:`~ringccl.views.plan_plot.stage_spans`), drawn by plotly: hover a bar for
its lane, what it is, its start and duration; zoom into a micro-batch. One self-contained HTML
file (plotly.js inlined, no network needed); no script of ringccl's own.
"""

from __future__ import annotations

import html
from typing import Mapping

from .explore_html import _plotly
from .plan_plot import _COLORS, _ORDER, _lanes, _seconds_label, _size_label, picked_spans

__all__ = ["plan_page", "plan_figures"]

_KIND_TEXT = {"forward": "forward", "backward": "backward", "exposed": "exposed (critical path)",
              "hidden": "hidden under compute", "bubble": "pipeline bubble / wait"}


def plan_figures(plan: Mapping):
    """(timeline figure, per-parallelism figure) of one ``StepEstimate.to_dict()``.

    Raises:
        RingcclError: plotly is not installed.
        KeyError: ``plan`` is not a ``StepEstimate.to_dict()``.
    """
    go, _ = _plotly()
    return _timeline_figure(go, plan), _bars_figure(go, plan["summary"])


def _timeline_figure(go, plan: Mapping):
    """One timeline per picked stage: compute, collectives (exposed, hidden), the bubble."""
    from plotly.subplots import make_subplots

    summary, m = plan["summary"], plan["layout"]["num_micro_batches"]
    picked = picked_spans(plan)
    heights = [len(_lanes(s)) for s, _ in picked]
    titles = [f"stage {s['stage']}: {s['layers']} layers; {m} micro-batches of "
              f"{_seconds_label(s['micro_batch_s'])}" for s, _ in picked]
    timeline = make_subplots(rows=len(picked), cols=1, shared_xaxes=True,
                             row_heights=[h / sum(heights) for h in heights],
                             vertical_spacing=0.06, subplot_titles=titles)
    shown_kinds: set = set()
    for row, (st, spans) in enumerate(picked, start=1):
        lanes = _lanes(st)
        for kind in ("forward", "backward", "exposed", "hidden", "bubble"):
            group = [b for b in spans if b["kind"] == kind]
            if not group:
                continue
            colors = [_COLORS[kind] if kind in ("forward", "backward") else
                      _COLORS.get(b["lane"], "#999999") for b in group]
            timeline.add_trace(go.Bar(
                orientation="h", y=[b["lane"] for b in group],
                x=[b["width"] for b in group], base=[b["x0"] for b in group],
                name=_KIND_TEXT[kind], legendgroup=kind, showlegend=kind not in shown_kinds,
                marker=dict(color=colors, opacity=0.3 if kind == "hidden" else 1.0,
                            pattern=dict(shape="/" if kind == "bubble" else "")),
                hovertext=[f"stage {st['stage']} {b['lane']}: {_KIND_TEXT[kind]}<br>from "
                           f"{_seconds_label(b['x0'])} for {_seconds_label(b['width'])}"
                           for b in group], hoverinfo="text"), row=row, col=1)
            shown_kinds.add(kind)
        timeline.update_yaxes(categoryorder="array", categoryarray=lanes[::-1], row=row, col=1)
        timeline.add_vline(x=summary["pipeline_s"], line=dict(color="black", dash="dot", width=1), row=row,
                           col=1)
    timeline.update_xaxes(range=[0, summary["step_s"] * 1.01], gridcolor="#eeeeee")
    timeline.update_xaxes(title_text="time in the step (s); dotted: the pipeline ends, then the "
                          "once-per-step collectives not hidden", row=len(picked), col=1)
    timeline.update_layout(
        barmode="overlay", height=160 + 34 * sum(heights) + 40 * len(picked),
        plot_bgcolor="white", margin=dict(l=90, r=20, t=40, b=60),
        legend=dict(orientation="h", x=0, y=-0.08, yanchor="top"))
    return timeline


def _bars_figure(go, summary: Mapping):
    """Bytes the busiest rank sends and seconds (all, exposed) per step, per parallelism."""
    from plotly.subplots import make_subplots

    bytes_by = summary["bytes_per_step_by_parallelism"]
    seconds_by = summary["seconds_per_step_by_parallelism"]
    exposed_by = summary["exposed_s"]
    keys = [k for k in _ORDER if k in bytes_by or k in exposed_by]
    tkeys = keys + (["pp bubble"] if "pp bubble" in exposed_by else [])
    bars = make_subplots(rows=1, cols=2, subplot_titles=(
        "bytes sent per step by the busiest rank", "seconds per step: all and exposed"))
    bars.add_trace(go.Bar(orientation="h", y=keys, x=[bytes_by.get(k, 0.0) for k in keys],
                          marker_color=[_COLORS.get(k, "#999999") for k in keys],
                          name="bytes", showlegend=False,
                          hovertext=[f"{k}: {_size_label(bytes_by.get(k, 0.0))}" for k in keys],
                          hoverinfo="text"), row=1, col=1)
    total = [seconds_by.get(k, exposed_by.get(k, 0.0)) for k in tkeys]
    exp = [exposed_by.get(k, 0.0) for k in tkeys]
    bars.add_trace(go.Bar(orientation="h", y=tkeys, x=total, name="all", marker_color="#cccccc",
                          hovertext=[f"{k}: {_seconds_label(a)} in all" for k, a in
                                     zip(tkeys, total)], hoverinfo="text"), row=1, col=2)
    bars.add_trace(go.Bar(orientation="h", y=tkeys, x=exp, name="exposed",
                          marker_color=[_COLORS.get(k, "#999999") for k in tkeys],
                          hovertext=[f"{k}: {_seconds_label(b)} exposed of {_seconds_label(a)}"
                                     for k, a, b in zip(tkeys, total, exp)], hoverinfo="text"),
                 row=1, col=2)
    bars.update_yaxes(autorange="reversed")
    # plotly's default exponent format writes 1.5e11 as "150B" (billions), read as bytes
    bars.update_xaxes(title_text="bytes (G = 10⁹)", exponentformat="SI", row=1, col=1)
    bars.update_xaxes(title_text="s", row=1, col=2)
    bars.update_layout(height=140 + 26 * max(len(tkeys), 1), barmode="group",
                       plot_bgcolor="white", margin=dict(l=90, r=20, t=50, b=40))
    return bars


def plan_page(plan: Mapping, path: str, title: str = "") -> int:
    """Write the plan's interactive timeline page (self-contained HTML, works offline).

    Args:
        plan: ``StepEstimate.to_dict()`` of :func:`ringccl.plan`.
        path: output file.
        title: the page's heading (default: the plan's ``describe``).
    Returns:
        the page's size in bytes.
    Raises:
        RingcclError: plotly is not installed.
        KeyError: ``plan`` is not a ``StepEstimate.to_dict()``.
        OSError: ``path`` cannot be written.
    """
    timeline, bars = plan_figures(plan)
    summary = plan["summary"]
    heading = title or plan.get("describe", "ringccl plan")
    facts = (f"step {_seconds_label(summary['step_s'])}; tokens/s "
             f"{summary['tokens_per_s']:,.0f}; pipeline bubble "
             f"{_seconds_label(summary['bubble_s'])}; peak memory "
             f"{_size_label(summary['peak_memory_bytes'])}")
    body = (timeline.to_html(full_html=False, include_plotlyjs=True, div_id="plan-timeline",
                             config={"displaylogo": False})
            + bars.to_html(full_html=False, include_plotlyjs=False, div_id="plan-bars",
                           config={"displaylogo": False}))
    text = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(heading)}</title><style>body {{ font: 13px system-ui, "
            f"sans-serif; margin: 12px 18px; }} h1 {{ font-size: 16px; }} p {{ color: #555; }}"
            f"</style></head><body><h1>{html.escape(heading)}</h1><p>{html.escape(facts)}. The "
            "planner's model drawn to scale, not a trace: solid communication is on the "
            "critical path, pale communication is hidden under compute; hover a bar for its "
            f"times, drag to zoom.</p>{body}</body></html>\n")
    data = text.encode("utf-8")
    with open(path, "wb") as f:
        f.write(data)
    return len(data)
