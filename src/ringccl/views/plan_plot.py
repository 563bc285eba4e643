"""A picture of one training step from the planner (matplotlib, Agg backend).

:func:`plan_chart` draws what ``ringccl plan --plot`` writes, from the plain data of
``StepEstimate.to_dict()`` (this module imports nothing of the planner, which sits above the views):

* left, one panel per rank position (the first stage, the second, a middle one and the last when
  the pipeline is deeper than four): lanes for compute (forward, backward), one lane per
  parallelism's collectives and the pipeline bubble, over one step. Solid bars are
  communication on the critical path (exposed); pale bars are communication hidden behind
  the compute it overlaps.
* right, per parallelism: the bytes the busiest rank sends per step, and the seconds per step
  (all of it, and the part exposed), the pipeline bubble included.

The timeline is the planner's model drawn to scale, not a trace. As in 1F1B, stage s starts
after the forwards of the stages before it (``Σ_{j<s} forward_j / v``) and ends its last
backward before theirs (``pipeline_s − Σ_{j<s} backward_j / v``: the first stage ends the
pipeline); its ``m`` micro-batches (each: forward, backward, then its exposed communication) are
spread evenly over that window, the rest of the window being the wait for the other stages
(drawn with the bubble; Megatron's schedule bunches it at warm-up and cool-down). After the
pipeline come the once-per-step reductions not hidden (``exposed_per_step_s``).

With a ``timeline`` (``Timeline.to_dict()`` of :mod:`ringccl.planner.timeline`: the pipeline
schedule simulated), a panel on top draws the schedule as it runs: one row per pipeline rank,
its F, B, W (or whole backward) passes and DualPipe's overlapped F&B pairs over time, each
chunk of the rank in its own shade; the idle gaps are the bubble.
"""

from __future__ import annotations

from typing import Mapping

from ..args import image_format
from .plot import _pyplot

__all__ = ["plan_chart", "picked_stages", "picked_spans", "stage_spans", "stage_window",
           "schedule_bars"]

#: lane colours: compute, then the parallelisms in the planner's order
_COLORS = {"forward": "#4c72b0", "backward": "#55a868", "tp": "#c44e52", "sp": "#dd8452",
           "cp": "#8172b3", "ep": "#937860", "pp": "#da8bc3", "dp": "#8c8c8c",
           "zero": "#ccb974", "embedding": "#64b5cd", "pp bubble": "#bbbbbb"}
_ORDER = ("tp", "sp", "cp", "ep", "pp", "dp", "zero", "embedding")


#: pass colours of the schedule panel (chunk 0; chunk 1 is drawn lighter)
_PASS_COLORS = {"F": "#4c72b0", "B": "#55a868", "BW": "#55a868", "W": "#a6d96a",
                "F&B": "#8172b3"}


def schedule_bars(timeline: Mapping) -> list[dict]:
    """The bars of the schedule panel: ``{"rank", "x0", "width", "kind", "chunk",
    "micro_batch"}`` per pass of ``timeline`` (``Timeline.to_dict()``), seconds."""
    return [{"rank": r, "x0": x["start"], "width": x["end"] - x["start"], "kind": x["kind"],
             "chunk": x["chunk"], "micro_batch": x["micro_batch"]}
            for r, passes in enumerate(timeline["passes"]) for x in passes]


def _draw_schedule(ax, timeline: Mapping) -> None:
    bars = schedule_bars(timeline)
    pp = timeline["pp"]
    label = len(bars) <= 400
    for b in bars:
        ax.barh(pp - 1 - b["rank"], b["width"], left=b["x0"], height=0.8, linewidth=0.3,
                edgecolor="white", color=_PASS_COLORS.get(b["kind"], "#999999"),
                alpha=1.0 if b["chunk"] == 0 else 0.6)
        if label and b["width"] > 0:
            ax.text(b["x0"] + b["width"] / 2, pp - 1 - b["rank"], str(b["micro_batch"]),
                    ha="center", va="center", fontsize=5, color="white")
    ticks = list(range(pp)) if pp <= 16 else [0, pp // 2, pp - 1]
    ax.set_yticks([pp - 1 - r for r in ticks], [f"rank {r}" for r in ticks], fontsize=7)
    ax.set_ylim(-0.6, pp - 0.4)
    ax.set_title(f"pipeline schedule {timeline['schedule']} as it runs: {pp} ranks, "
                 f"{timeline['num_micro_batches']} micro-batches (F blue, B green, W light "
                 "green, F&B purple; the rank's second chunk paler; gaps: the bubble)",
                 fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)


def picked_stages(pp: int) -> list[int]:
    """The stages drawn: all of them up to 4, else the first, the second, a middle one and the
    last (the distinct roles: embedding, plain, LM head)."""
    return list(range(pp)) if pp <= 4 else sorted({0, 1, pp // 2, pp - 1})


def _seconds_label(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def _size_label(nbytes: float) -> str:
    for scale, unit in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.3g} B"


def _lanes(stage: Mapping) -> list[str]:
    present = set(stage["exposed_per_micro_batch_s"]) | set(stage["exposed_per_step_s"]) | {
        c["parallelism"] for c in stage["collectives"]}
    return ["compute"] + [k for k in _ORDER if k in present] + ["pp bubble"]


def _totals(stage: Mapping, m: int, per_micro_batch: bool) -> dict:
    """parallelism -> predicted seconds of its collectives (exposed or not), per micro-batch
    (``per_micro_batch``) or once per step (those have no calls per micro-batch)."""
    out: dict = {}
    for c in stage["collectives"]:
        if (c["calls_per_micro_batch"] > 0) != per_micro_batch:
            continue
        t = c["seconds_per_step"] / (m if per_micro_batch else 1)
        out[c["parallelism"]] = out.get(c["parallelism"], 0.0) + t
    return out


def stage_spans(stage: Mapping, m: int, start: float, end: float, pipeline: float) -> list[dict]:
    """The bars of one stage's timeline (what :func:`plan_chart` and the HTML timeline of
    :mod:`.explore_plan` draw), in seconds from the step's start.

    Args:
        stage: one entry of ``StepEstimate.to_dict()["stages"]``.
        m: micro-batches per step.
        start, end: the stage's window in the pipeline (1F1B, see the module docstring).
        pipeline: when the pipeline ends (``summary["pipeline_s"]``).
    Returns:
        ``{"lane", "x0", "width", "kind"}`` per bar of positive width; ``kind`` is
        ``"forward"``, ``"backward"``, ``"exposed"`` (communication on the critical path),
        ``"hidden"`` (communication under compute) or ``"bubble"``.
    """
    lanes = _lanes(stage)
    fwd, bwd = stage["forward_per_micro_batch_s"], stage["backward_per_micro_batch_s"]
    exposed = stage["exposed_per_micro_batch_s"]
    hidden = _totals(stage, m, per_micro_batch=True)
    tau = stage["micro_batch_s"]
    out: list[dict] = []

    def span(lane, x0, width, kind):
        if width > 0:
            out.append({"lane": lane, "x0": x0, "width": width, "kind": kind})

    # the m micro-batches spread over the stage's window [start, end]: each its forward,
    # backward and exposed communication, then the wait for the other stages
    slot = max((end - start) / m, tau)
    for k in range(m):
        t0 = start + k * slot
        span("pp bubble", t0 + tau, slot - tau if k < m - 1 else 0.0, "bubble")
        span("compute", t0, fwd, "forward")
        span("compute", t0 + fwd, bwd, "backward")
        x = t0 + fwd + bwd
        for lane in lanes[1:-1]:
            t_exp = exposed.get(lane, 0.0)
            # the hidden part runs under this micro-batch's compute
            span(lane, t0, min(max(hidden.get(lane, 0.0) - t_exp, 0.0), fwd + bwd), "hidden")
            span(lane, x, t_exp, "exposed")
            x += t_exp
    busy_end = start + (m - 1) * slot + tau
    span("pp bubble", 0.0, start, "bubble")
    span("pp bubble", busy_end, max(pipeline - busy_end, 0.0), "bubble")
    # once per step: the hidden part under the last backward, the exposed part after the pipe
    per_step_total = _totals(stage, m, per_micro_batch=False)
    x = pipeline
    for lane in lanes[1:-1]:
        t_exp = stage["exposed_per_step_s"].get(lane, 0.0)
        t_hid = min(max(per_step_total.get(lane, 0.0) - t_exp, 0.0), bwd)
        span(lane, busy_end - tau + fwd, t_hid, "hidden")
        span(lane, x, t_exp, "exposed")
        x += t_exp
    return out


def stage_window(stages, stage: Mapping, pipeline: float, v: int) -> tuple[float, float]:
    """1F1B: stage s starts after the forwards of the stages before it and ends its last
    backward before theirs (the first stage ends the pipeline); returns (start, end) in s."""
    before = stages[:stage["stage"]]
    start = sum(b["forward_per_micro_batch_s"] for b in before) / v
    end = pipeline - sum(b["backward_per_micro_batch_s"] for b in before) / v
    return start, end


def picked_spans(plan: Mapping) -> list[tuple[Mapping, list[dict]]]:
    """The stages drawn of ``plan`` (``StepEstimate.to_dict()``; :func:`picked_stages`), each
    with its bars: :func:`stage_spans` in its 1F1B window (:func:`stage_window`)."""
    m, v = plan["layout"]["num_micro_batches"], plan["layout"]["virtual_stages"]
    stages, pipeline = plan["stages"], plan["summary"]["pipeline_s"]
    return [(st, stage_spans(st, m, *stage_window(stages, st, pipeline, v), pipeline))
            for st in (stages[i] for i in picked_stages(len(stages)))]


def _draw_stage(ax, stage: Mapping, spans: list[dict], m: int) -> None:
    lanes = _lanes(stage)
    y = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    tau = stage["micro_batch_s"]
    colors = {"forward": _COLORS["forward"], "backward": _COLORS["backward"]}
    for b in spans:
        color = colors.get(b["kind"], _COLORS.get(b["lane"], "#999999"))
        style = {"hidden": dict(alpha=0.3), "bubble": dict(hatch="//")}.get(b["kind"], {})
        ax.barh(y[b["lane"]], b["width"], left=b["x0"], color=color, linewidth=0, height=0.7,
                **style)
    ax.set_yticks([y[lane] for lane in lanes], lanes, fontsize=8)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    role = ", ".join(r for r, on in (("embedding", stage["first"]), ("LM head", stage["last"]))
                     if on)
    mem = stage.get("memory") or {}
    ax.set_title(f"stage {stage['stage']}: {stage['layers']} layers"
                 + (f", {role}" if role else "")
                 + f"; {m} micro-batches of {_seconds_label(tau)}"
                 + (f"; memory {_size_label(mem['total'])}" if mem else ""),
                 fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)


def plan_chart(plan: Mapping, path: str, title: str = "", timeline: Mapping | None = None
               ) -> str:
    """Write a PNG of one step: a timeline per rank position and bars per parallelism.

    Args:
        plan: ``StepEstimate.to_dict()`` of :func:`ringccl.plan` (plain data: ``summary``,
            ``layout``, ``stages`` with their ``collectives``; times in seconds, bytes in bytes).
        path: output file (PNG).
        title: figure title (default: the plan's ``describe``).
        timeline: ``StepEstimate.timeline().to_dict()``: the schedule panel on top (None: no
            panel).
    Returns:
        ``path``.
    Raises:
        RingcclError: matplotlib is not installed.
        KeyError: ``plan`` is not a ``StepEstimate.to_dict()``.
    """
    plt = _pyplot()
    from matplotlib.patches import Patch

    summary, m = plan["summary"], plan["layout"]["num_micro_batches"]
    picked = picked_spans(plan)
    lanes = [len(_lanes(s)) for s, _ in picked]
    top = 0
    if timeline is not None:
        top = 1
        lanes = [max(3, min(timeline["pp"], 16))] + lanes
    height = 2.2 + 0.42 * sum(lanes) + 0.5 * len(lanes)
    fig = plt.figure(figsize=(16, height))
    # margins in inches, whatever the height: the two-line title and the first panel's title
    # above, the x label and the legend below
    grid = fig.add_gridspec(len(lanes), 2, width_ratios=(3.2, 1), height_ratios=lanes,
                            hspace=0.55, wspace=0.18, left=0.08, right=0.98,
                            top=1 - 0.95 / height, bottom=0.8 / height)
    axes = []
    if timeline is not None:
        ax = fig.add_subplot(grid[0, 0])
        _draw_schedule(ax, timeline)
        ax.tick_params(labelbottom=False)
        axes.append(ax)
    for i, (st, spans) in enumerate(picked):
        ax = fig.add_subplot(grid[top + i, 0], sharex=axes[0] if axes else None)
        _draw_stage(ax, st, spans, m)
        ax.axvline(summary["pipeline_s"], color="black", linewidth=0.8, linestyle=":")
        axes.append(ax)
        if i < len(picked) - 1:
            ax.tick_params(labelbottom=False)
    axes[-1].set_xlabel("time in the step (s); dotted: the pipeline ends, then the "
                        "once-per-step collectives not hidden")
    axes[0].set_xlim(0, summary["step_s"] * 1.01)

    _draw_bars(fig, grid, len(lanes), summary)
    handles = [Patch(color=_COLORS["forward"], label="forward"),
               Patch(color=_COLORS["backward"], label="backward"),
               Patch(color="#777777", label="communication exposed"),
               Patch(color="#777777", alpha=0.3, label="communication hidden"),
               Patch(facecolor=_COLORS["pp bubble"], hatch="//", label="pipeline bubble")]
    fig.legend(handles=handles, loc="lower left", ncol=5, fontsize=8, frameon=False,
               bbox_to_anchor=(0.08, 0.005))
    fig.suptitle(title or f"{plan.get('describe', '')}\ntokens/s {summary['tokens_per_s']:,.0f}"
                 f", pipeline bubble {_seconds_label(summary['bubble_s'])}"
                 f", peak memory {_size_label(summary['peak_memory_bytes'])}", fontsize=11)
    fig.savefig(path, dpi=110, format=image_format(path))
    plt.close(fig)
    return path


def _draw_bars(fig, grid, rows: int, summary: Mapping) -> None:
    """The right column of :func:`plan_chart`: bytes the busiest rank sends per step, and
    seconds per step (all and exposed), per parallelism."""
    bytes_by = summary["bytes_per_step_by_parallelism"]
    seconds_by = summary["seconds_per_step_by_parallelism"]
    exposed_by = summary["exposed_s"]
    keys = [k for k in _ORDER if k in bytes_by or k in exposed_by]
    if rows > 1:
        right_top = fig.add_subplot(grid[: rows // 2, 1])
        right_bottom = fig.add_subplot(grid[rows // 2:, 1])
    else:   # one row of panels: the two charts one above the other in it, never on one axis
        halves = grid[0, 1].subgridspec(2, 1, hspace=1.1)
        right_top, right_bottom = fig.add_subplot(halves[0]), fig.add_subplot(halves[1])
    yb = list(range(len(keys)))[::-1]
    vals = [bytes_by.get(k, 0.0) / 2**30 for k in keys]
    right_top.barh(yb, vals, color=[_COLORS.get(k, "#999999") for k in keys])
    right_top.set_yticks(yb, keys, fontsize=8)
    right_top.set_title("bytes sent per step by the busiest rank (GiB)", fontsize=9)
    for yy, val, k in zip(yb, vals, keys):
        right_top.text(val, yy, " " + _size_label(bytes_by.get(k, 0.0)), va="center",
                       fontsize=7)
    right_top.set_xlim(0, max(vals + [1e-9]) * 1.45)
    ax_t = right_bottom
    tkeys = keys + (["pp bubble"] if "pp bubble" in exposed_by else [])
    yt = list(range(len(tkeys)))[::-1]
    total = [seconds_by.get(k, exposed_by.get(k, 0.0)) for k in tkeys]
    exp = [exposed_by.get(k, 0.0) for k in tkeys]
    ax_t.barh([y + 0.2 for y in yt], total, height=0.4, color="#cccccc", label="all")
    ax_t.barh([y - 0.2 for y in yt], exp, height=0.4,
              color=[_COLORS.get(k, "#999999") for k in tkeys], label="exposed")
    for yy, a, b in zip(yt, total, exp):
        ax_t.text(max(a, b), yy, f" {_seconds_label(b)} of {_seconds_label(a)}",
                  va="center", fontsize=7)
    ax_t.set_yticks(yt, tkeys, fontsize=8)
    ax_t.set_xlim(0, max(total + exp + [1e-9]) * 1.6)
    ax_t.set_title("seconds per step: all (grey) and exposed", fontsize=9)
    ax_t.set_xlabel("s", fontsize=8)
