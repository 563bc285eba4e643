"""The explorer page's own CSS and JavaScript (see :mod:`.explore`), kept small: every number it
shows was computed in Python and arrives as JSON; plotly.js draws the charts.

What the script does, per explorer: draw the rank graph and the cost chart once (plotly), make
one box per drawn chunk, then on every slider move (``show(position)``) replay the precomputed
buffer writes up to that step, repaint the boxes that changed, put the step's transfers on the
arrow traces (``Plotly.react``), highlight the step's table row and cost bar, and write the DOM
hooks (``data-position``, ``data-step``, ``data-transfers`` of ``.state``; ``data-owners``,
``data-color`` of each ``.chunk``). Play/pause steps on a timer; ← → Home End and space act on
the explorer last clicked (the first by default).
"""

from __future__ import annotations

__all__ = ["CSS", "JS", "LEGEND", "MODEL_LEGEND"]

MODEL_LEGEND = ("The α-β-γ cost model's prediction per algorithm: time and busbw against the "
                "message size, with the sizes where the fastest algorithm changes (crossovers, "
                "black dots). Hover a point for its values; drag to zoom, double-click to "
                "reset; click a legend entry to hide its algorithm.")

LEGEND = ("Move the slider (or ← → Home End, space to play) to run the schedule one step at a "
          "time. Arrows: the step's transfers, labelled with their chunk (blue copy, orange "
          "reduce). Buffers: each rank's chunks coloured by whose contributions they hold, from "
          "the symbolic checker — every rank has a hue, a chunk takes the mean hue of its "
          "contributors, darker with more of them, black when it holds every rank once, "
          "light grey when empty (hover a chunk for its ranks). The table has one row per "
          "step and one column per rank; the bars are the α-β-γ cost model's time per step.")

CSS = """
body { font: 13px/1.35 system-ui, sans-serif; margin: 12px 18px; color: #222; }
h1 { font-size: 18px; margin: 0 0 4px; }
h2 { font-size: 14px; margin: 0 0 2px; }
.help, .meta, .note, .caption { color: #555; font-size: 12px; margin: 2px 0 6px; }
.explorers.side-by-side { display: flex; gap: 16px; align-items: flex-start; }
.explorers.side-by-side .explorer { flex: 1 1 0; min-width: 0; }
.explorer { border: 1px solid #ddd; border-radius: 6px; padding: 8px 10px; margin-bottom: 12px; }
.explorer.active { border-color: #88a; }
.controls { display: flex; gap: 10px; align-items: center; margin: 4px 0; }
.controls .slider { flex: 1 1 auto; }
.controls .state { min-width: 16em; font-variant-numeric: tabular-nums; }
.row { display: flex; gap: 10px; align-items: flex-start; }
.graph { flex: 1 1 55%; min-width: 0; }
.buffers-box { flex: 1 1 45%; min-width: 0; max-height: 460px; overflow: auto; }
.buffers { display: grid; grid-template-columns: auto repeat(var(--chunks), var(--cell));
           grid-auto-rows: var(--row); gap: var(--gap); align-items: stretch;
           justify-content: start; }
.buffers .rank { font-size: 10px; color: #666; padding-right: 4px; line-height: var(--row); }
.chunk { display: block; background: #f0f0f0; }
.table-box { position: relative; max-height: 220px; overflow: auto; margin-top: 6px;
             border-top: 1px solid #eee; }
table.steps { border-collapse: collapse; font: 11px/1.3 ui-monospace, monospace; }
table.steps th, table.steps td { padding: 1px 8px; text-align: left; white-space: nowrap; }
table.steps thead th { position: sticky; top: 0; background: #fafafa; }
table.steps tr.holds { color: #777; border-bottom: 1px solid #ddd; }
table.steps tr.current { background: #ffe9a8; }
.model { border-top: 1px solid #ddd; padding-top: 8px; }
"""

JS = r"""
(function () {
  "use strict";
  const explorers = JSON.parse(document.getElementById("explore-data").textContent);
  const model = JSON.parse(document.getElementById("model-data").textContent);
  const config = {displayModeBar: false, responsive: true};
  const views = [];
  let active = 0;

  document.querySelectorAll("section.explorer").forEach(function (section, k) {
    views.push(explorer(explorers[k], section, k));
    section.addEventListener("mousedown", function () { activate(k); });
    section.addEventListener("focusin", function () { activate(k); });
  });
  if (model) Plotly.newPlot("model", model.data, model.layout, config);
  if (views.length) activate(0);

  function activate(k) {
    active = k;
    document.querySelectorAll("section.explorer").forEach(function (s, j) {
      s.classList.toggle("active", j === k);
    });
  }

  document.addEventListener("keydown", function (e) {
    const v = views[active];
    // the slider moves itself on arrows, and a focused button clicks itself on space
    if (!v || e.target.tagName === "INPUT" || e.target.tagName === "BUTTON") return;
    const moves = {ArrowRight: v.pos + 1, ArrowLeft: v.pos - 1, Home: 0, End: v.last};
    if (e.key in moves) { v.show(moves[e.key]); e.preventDefault(); }
    else if (e.key === " ") { v.toggle(); e.preventDefault(); }
  });

  function explorer(d, section, k) {
    const graph = section.querySelector(".graph");
    const costDiv = section.querySelector(".cost");
    const slider = section.querySelector(".slider");
    const state = section.querySelector(".state");
    const play = section.querySelector(".play");
    const tableBox = section.querySelector(".table-box");
    Plotly.newPlot(graph, d.graph.data, d.graph.layout, config);
    if (d.cost) Plotly.newPlot(costDiv, d.cost.data, d.cost.layout, config);

    // one box per drawn chunk, rank by rank (the grid puts a label before each row)
    const box = section.querySelector(".buffers");
    const frag = document.createDocumentFragment();
    const cells = [];
    d.shown_ranks.forEach(function (r) {
      const label = document.createElement("span");
      label.className = "rank";
      label.textContent = d.shown_ranks.length <= 64 ? "R" + r : "";
      frag.appendChild(label);
      for (let c = 0; c < d.num_chunks; c++) {
        const el = document.createElement("span");
        el.className = "chunk";
        el.dataset.rank = r;
        el.dataset.chunk = c;
        cells.push(el);
        frag.appendChild(el);
      }
    });
    box.appendChild(frag);
    box.addEventListener("mouseover", function (e) {
      const el = e.target;
      if (!el.classList.contains("chunk")) return;
      el.title = "R" + el.dataset.rank + " slot c" + el.dataset.chunk + ": " +
        (el.dataset.owners ? "chunk c" + el.dataset.chunkId + " with the contributions of " +
         "ranks " + el.dataset.owners : "empty");
    });

    // buffer state after the first `at` steps, replayed from the precomputed writes
    let color, owner, chunk, at;
    function reset() {
      color = d.init_color.slice(); owner = d.init_owner.slice();
      chunk = d.init_chunk ? d.init_chunk.slice() : null;  // null: slot c holds chunk c
      at = 0;
    }
    function paint(i) {
      const el = cells[i];
      el.style.background = d.colors[color[i]];
      el.dataset.color = d.colors[color[i]];
      el.dataset.owners = d.owners[owner[i]];
      el.dataset.chunkId = chunk ? chunk[i] : i % d.num_chunks;
    }
    function advanceTo(pos) {
      const changed = [];
      if (pos < at) { reset(); for (let i = 0; i < cells.length; i++) changed.push(i); }
      for (; at < pos; at++) {
        for (let w = d.w_ptr[at]; w < d.w_ptr[at + 1]; w++) {
          const i = d.w_cell[w];
          color[i] = d.w_color[w]; owner[i] = d.w_owner[w];
          if (chunk) chunk[i] = d.w_chunk[w];
          changed.push(i);
        }
      }
      changed.forEach(paint);
    }
    reset();
    for (let i = 0; i < cells.length; i++) paint(i);

    let currentRow = null;
    const v = {pos: 0, last: d.num_steps, timer: null};
    v.show = function (pos) {
      pos = Math.max(0, Math.min(d.num_steps, pos | 0));
      v.pos = pos;
      slider.value = pos;
      advanceTo(pos);
      const step = pos - 1;  // the step whose transfers are drawn (-1: before the first)
      const lo = step >= 0 ? d.step_ptr[step] : 0, hi = step >= 0 ? d.step_ptr[step + 1] : 0;
      const arrows = [[[], [], [], []], [[], [], [], []]];  // copy, reduce: x, y, size, hover
      const labels = [[], [], []], byPair = {};
      const hooks = [];
      for (let t = lo; t < hi; t++) {
        const red = d.reduce[t], sc = d.src_chunk[t], dc = d.dst_chunk[t];
        const name = "c" + sc + (dc !== sc ? ">c" + dc : "");
        const a = arrows[red], p = d.pair[t];
        a[0].push(d.ax0[p], d.ax1[p], null); a[1].push(d.ay0[p], d.ay1[p], null);
        a[2].push(0, d.arrow_size, 0);
        const what = "R" + d.src[t] + " → R" + d.dst[t] + ": " + name +
          (red ? " (reduce)" : " (copy)");
        a[3].push(what, what, "");
        if (hi - lo <= d.label_limit) {  // one label per arrow: "c6,c7" when it carries two
          if (p in byPair) labels[2][byPair[p]] += "," + name;
          else {
            byPair[p] = labels[2].length;
            labels[0].push(d.lx[p]); labels[1].push(d.ly[p]); labels[2].push(name);
          }
        }
        hooks.push((red ? "+" : "") + d.src[t] + ">" + d.dst[t] + ":" + name);
      }
      const data = d.graph.data;
      [1, 2].forEach(function (j) {
        const a = arrows[j - 1];
        data[j] = Object.assign({}, data[j], {x: a[0], y: a[1], hovertext: a[3],
          marker: Object.assign({}, data[j].marker, {size: a[2]})});
      });
      data[3] = Object.assign({}, data[3], {x: labels[0], y: labels[1], text: labels[2]});
      Plotly.react(graph, data, d.graph.layout, config);
      if (d.cost) {
        Plotly.relayout(costDiv, {"shapes[0].x0": pos - 0.5, "shapes[0].x1": pos + 0.5,
                                  "shapes[0].visible": step >= 0});
      }
      if (currentRow) currentRow.classList.remove("current");
      currentRow = tableBox.querySelector('tr[data-step="' + step + '"]');
      if (currentRow) {
        currentRow.classList.add("current");
        const top = currentRow.offsetTop - tableBox.clientHeight / 2;
        tableBox.scrollTop = Math.max(0, top);
      }
      state.dataset.position = pos;
      state.dataset.step = step;
      state.dataset.transfers = hooks.join(",");
      state.textContent = step < 0 ? "before step 1 of " + d.num_steps :
        "step " + (step + 1) + " of " + d.num_steps + " (" + d.phases[step] + "): " +
        (hi - lo) + " transfer" + (hi - lo === 1 ? "" : "s");
    };
    v.toggle = function () {
      if (v.timer) {
        clearInterval(v.timer); v.timer = null; play.textContent = "▶ play";
        return;
      }
      if (v.pos >= d.num_steps) v.show(0);
      play.textContent = "❚❚ pause";
      const ms = Math.max(60, Math.min(700, 20000 / Math.max(1, d.num_steps)));
      v.timer = setInterval(function () {
        if (v.pos >= d.num_steps) { v.toggle(); return; }
        v.show(v.pos + 1);
      }, ms);
    };
    slider.addEventListener("input", function () { v.show(+slider.value); });
    play.addEventListener("click", function () { v.toggle(); });
    v.show(0);
    return v;
  }
})();
"""
