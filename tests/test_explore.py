"""The schedule explorer's data and pages, without a browser (tests/browser/ opens the pages).

The page's data is checked against the symbolic checker directly: replaying the per-step
buffer writes gives, after every step, the contributions SymbolicState holds; the layout comes
from the transfers (ring, tree, grid, nodes, circle); the page carries no reference to the
network; the CLI writes it and refuses bad input in one line.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

import ringccl
from ringccl.check import SymbolicState
from ringccl.cli import main
from ringccl.errors import ArgumentError
from ringccl.views.show import _ranges

pytest.importorskip("plotly")

from ringccl.views import explore as ex  # noqa: E402  (needs plotly only when drawing)
from ringccl.views import explore_html  # noqa: E402
from ringccl.views import explore_plan  # noqa: E402
from ringccl.views.plan_plot import stage_spans, stage_window  # noqa: E402


@pytest.mark.parametrize("algorithm, n, node_of, shape", [
    ("ring", 8, None, "ring"),
    ("tree", 8, None, "tree"),
    ("master", 6, None, "tree"),                # a star: a tree around the master
    ("double_binary_tree", 8, None, "tree"),    # chunk 0's tree
    ("recursive_doubling", 8, None, "grid"),    # hypercube partners
    ("halving_doubling", 16, None, "grid"),
    ("direct", 5, None, "circle"),
    ("ring", 8, [r // 4 for r in range(8)], "nodes"),
    ("ring", 1, None, "single"),
])
def test_layout_is_derived_from_the_transfers(algorithm, n, node_of, shape):
    s = ringccl.schedule("all_reduce", algorithm, world_size=n)
    lay = ex.rank_layout(s, node_of)
    assert lay["shape"] == shape
    assert len(lay["x"]) == len(lay["y"]) == n
    points = set(zip(np.round(lay["x"], 6), np.round(lay["y"], 6)))
    assert len(points) == n  # no two ranks drawn on one spot


@pytest.mark.parametrize("collective, algorithm", [
    ("reduce_scatter", "direct"), ("all_to_all", "pairwise")])
def test_dense_graphs_are_circles_though_each_chunk_travels_a_tree(collective, algorithm):
    s = ringccl.schedule(collective, algorithm, world_size=6)
    assert ex.rank_layout(s)["shape"] == "circle"


def test_ring_layout_follows_the_ring_clockwise():
    lay = ex.rank_layout(ringccl.schedule("all_reduce", "ring", world_size=6))
    angles = np.degrees(np.arctan2(lay["y"], lay["x"]))
    # R0 at the top, then R1, R2, ... clockwise (decreasing angle)
    assert angles[0] == pytest.approx(90)
    steps = (angles[:-1] - angles[1:]) % 360
    assert np.allclose(steps, 60)


def test_tree_layout_puts_the_root_on_top():
    s = ringccl.schedule("all_reduce", "master", world_size=5)
    lay = ex.rank_layout(s)
    assert lay["y"][0] == max(lay["y"]) and sorted(lay["y"]).count(lay["y"][0]) == 1


def test_nodes_layout_boxes_hold_their_ranks():
    s = ringccl.schedule("all_reduce", "hierarchical", world_size=8, local_size=4)
    lay = ex.rank_layout(s, [r // 4 for r in range(8)])
    assert [b["node"] for b in lay["boxes"]] == [0, 1]
    for r in range(8):
        b = lay["boxes"][r // 4]
        assert b["x0"] < lay["x"][r] < b["x1"] and b["y0"] < lay["y"][r] < b["y1"]


def test_layout_refuses_node_of_of_the_wrong_length():
    with pytest.raises(ValueError, match="node_of"):
        ex.rank_layout(ringccl.schedule("all_reduce", "ring", world_size=4), [0, 1])


def test_owner_colors():
    n = 4
    owners = np.zeros((4, n), bool)
    owners[1, 0] = True
    owners[2, :] = True
    owners[3, [0, 1]] = True
    c = ex.owner_colors(owners)
    assert c[0] == ex.EMPTY_COLOR and c[2] == ex.FULL_COLOR
    assert c[1] != c[3] and all(re.fullmatch("#[0-9a-f]{6}", x) for x in c)
    # one contributor: that rank's hue; the same set always gets the same colour
    assert ex.owner_colors(owners[[1, 1]]) == [c[1], c[1]]


def _replay(data: dict, position: int):
    """The drawn cells' (colour, owner text, chunk id) after ``position`` steps, from the page
    data, as the page's script computes them."""
    color, owner = list(data["init_color"]), list(data["init_owner"])
    c = data["num_chunks"]
    chunk = list(data["init_chunk"]) if data["init_chunk"] is not None else None
    for step in range(position):
        for w in range(data["w_ptr"][step], data["w_ptr"][step + 1]):
            i = data["w_cell"][w]
            color[i], owner[i] = data["w_color"][w], data["w_owner"][w]
            if chunk is not None:
                chunk[i] = data["w_chunk"][w]
    if chunk is None:
        chunk = [i % c for i in range(len(color))]
    return ([data["colors"][k] for k in color], [data["owners"][k] for k in owner], chunk)


@pytest.mark.parametrize("collective, algorithm, n", [
    ("all_reduce", "ring", 5), ("all_reduce", "double_binary_tree", 7),
    ("all_gather", "ring", 4), ("all_to_all", "bruck", 5), ("broadcast", "tree", 6),
    ("reduce_scatter", "halving_doubling", 8),
])
def test_buffer_writes_replay_the_symbolic_state(collective, algorithm, n):
    s = ringccl.schedule(collective, algorithm, world_size=n)
    data = ex.explorer_data(s)
    assert data["shown_ranks"] == list(range(n))
    state = SymbolicState(s)
    for position in range(s.num_steps + 1):
        if position:
            state.apply(position - 1)
        colors, owners, chunks = _replay(data, position)
        want_owners = [_ranges(state.ranks_in(r, k).tolist()) for r in range(n)
                       for k in range(s.num_chunks)]
        assert owners == want_owners, position
        held = np.array([[r in state.ranks_in(rr, k) for r in range(n)]
                         for rr in range(n) for k in range(s.num_chunks)]).reshape(-1, n)
        assert colors == ex.owner_colors(held)
        assert chunks == state.chunk_id.reshape(-1).tolist()


def test_large_schedules_show_evenly_spaced_ranks_and_refuse_too_many_transfers():
    s = ringccl.schedule("all_gather", "direct", world_size=300)  # 300 x 300 chunks > MAX_CELLS
    data = ex.explorer_data(s)
    shown = data["shown_ranks"]
    assert len(shown) * s.num_chunks <= ex.MAX_CELLS and shown[0] == 0 and shown[-1] == 299
    assert len(data["init_color"]) == len(shown) * s.num_chunks
    with pytest.raises(ArgumentError, match="at most 300,000"):
        ex.explorer_data(ringccl.schedule("all_reduce", "ring", world_size=400))


def test_step_costs_must_match_the_steps():
    s = ringccl.schedule("all_reduce", "ring", world_size=4)
    with pytest.raises(ValueError, match="3 entries for 6 steps"):
        ex.explorer_data(s, [{}] * 3)


def test_transfer_text():
    assert ex.transfer_text(0, 1, 3, 3, False) == "0>1:c3"
    assert ex.transfer_text(2, 0, 1, 4, True) == "+2>0:c1>c4"


def _scripts(text: str) -> list[str]:
    return re.findall(r"<script[^>]*>", text)


def test_page_is_self_contained(tmp_path):
    s = ringccl.schedule("all_reduce", "ring", world_size=4)
    path = tmp_path / "p.html"
    size = explore_html.write_page(str(path), [ex.explorer_data(s)])
    text = path.read_text()
    assert size == path.stat().st_size and size > 3_000_000  # plotly.js inlined
    assert not any("src=" in tag for tag in _scripts(text))
    # outside plotly.js (which names its CDN for features these pages do not use: maps,
    # MathJax; the browser tests check that no request leaves), no link to anything
    from plotly.offline import get_plotlyjs
    ours = text.replace(get_plotlyjs(), "")
    assert len(ours) < len(text) - 3_000_000
    assert "<link" not in ours and "http" not in ours
    data = json.loads(re.search(r'<script id="explore-data" type="application/json">(.*?)'
                                r"</script>", text, re.S).group(1))
    assert data[0]["world_size"] == 4 and len(data[0]["pair"]) == s.num_transfers
    with pytest.raises(ValueError, match="at least one explorer"):
        explore_html.write_page(str(path), [])


def test_cli_writes_the_page_and_reports_it(tmp_path, capsys):
    out = tmp_path / "e.html"
    assert main(["explore", "all_reduce", "-a", "ring,double_binary_tree", "-N", "8",
                 "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["path"] == str(out) and report["bytes"] == out.stat().st_size
    assert [e["algorithm"] for e in report["explorers"]] == ["ring", "double_binary_tree"]
    assert [e["layout"] for e in report["explorers"]] == ["ring", "tree"]
    assert report["model"]["algorithms"] == ["ring", "double_binary_tree"]
    text = out.read_text()
    assert text.count('class="explorer"') == 2 and 'id="model"' in text
    # the seconds are the cost model's
    want = ringccl.walk(ringccl.schedule("all_reduce", "ring", world_size=8), 4 * 2**20,
                        alpha="5us", bandwidth="50GB/s").seconds
    assert report["explorers"][0]["seconds"] == pytest.approx(want)


def test_cli_two_level_lays_out_nodes_and_fills_the_node_shape(tmp_path, capsys):
    out = tmp_path / "h.html"
    assert main(["explore", "all_reduce", "-a", "hierarchical", "--topology", "2x4",
                 "-o", str(out), "--json"]) == 0
    e = json.loads(capsys.readouterr().out)["explorers"][0]
    assert e["world_size"] == 8 and e["layout"] == "nodes"
    assert "local_size=4" in out.read_text()


def test_cli_model_page_and_default_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["explore", "all_reduce", "--model", "-a", "ring,tree", "-s", "4KiB:1MiB"]) == 0
    line = capsys.readouterr().out
    assert str(tmp_path / "explore-all_reduce.html") in line and "MiB" in line
    text = (tmp_path / "explore-all_reduce.html").read_text()
    assert 'class="explorer"' not in text and 'id="model"' in text


@pytest.mark.parametrize("argv, message", [
    (["--topology", "3y"], "--topology '3y' must be 'flat' or NODESxLOCAL"),
    (["--topology", "2x4", "-N", "6"], "--world-size 6 differs from --topology 2x4 = 8"),
    (["-a", "nope"], "algorithm='nope' is not available for all_reduce; expected one of"),
    (["-a", "ring,tree,direct,master"], "at most 3 side by side"),
    # refused before it is built: extrapolated far beyond the page's bound, or counted
    (["-N", "1024"], "-N/--world-size 1024: the ring all_reduce schedule on 1024 ranks would "
     "have about 2,200,827 transfers and 1,024 chunks per rank (extrapolated from 32 and 64 "
     "ranks); the explorer draws at most 300,000"),
    (["-N", "400"], "-N/--world-size 400: the ring all_reduce schedule on 400 ranks has "),
    (["--root", "1"], "root=1 does not apply to ring all_reduce"),
])
def test_cli_refuses_bad_input_in_one_line(tmp_path, capsys, argv, message):
    assert main(["explore", "all_reduce", "-o", str(tmp_path / "x.html")] + argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "x.html").exists()


def _plan_dict():
    from ringccl.planner import plan, resolve_cluster, resolve_dims, resolve_model
    lay = resolve_dims({"dp": 2, "tp": 2, "pp": 2, "global_batch_size": 8})
    cluster = resolve_cluster({"preset": "dgx-h100", "nodes": 1})
    return plan(resolve_model("llama3-8b"), lay, cluster).to_dict()


def test_plan_spans_tile_each_stage_window():
    p = _plan_dict()
    m, v = p["layout"]["num_micro_batches"], p["layout"]["virtual_stages"]
    pipeline = p["summary"]["pipeline_s"]
    for st in p["stages"]:
        start, end = stage_window(p["stages"], st, pipeline, v)
        spans = stage_spans(st, m, start, end, pipeline)
        compute = [b for b in spans if b["lane"] == "compute"]
        assert len(compute) == 2 * m and all(b["width"] > 0 for b in spans)
        assert sum(b["width"] for b in compute) == pytest.approx(
            m * (st["forward_per_micro_batch_s"] + st["backward_per_micro_batch_s"]))


def test_plan_html(tmp_path, capsys):
    out = tmp_path / "plan.html"
    assert main(["plan", "--model", "llama3-8b", "--dp", "2", "--tp", "2", "--pp", "2",
                 "--global-batch-size", "8", "--nodes", "1", "--html", str(out)]) == 0
    assert f"interactive timeline written to {out}" in capsys.readouterr().out
    text = out.read_text()
    assert 'id="plan-timeline"' in text and 'id="plan-bars"' in text
    assert not any("src=" in tag for tag in _scripts(text))
    size = explore_plan.plan_page(_plan_dict(), str(tmp_path / "again.html"))
    assert size == (tmp_path / "again.html").stat().st_size


def test_plan_bars_write_bytes_with_si_prefixes():
    """plotly's default writes 1.5e11 as "150B" (billions), which reads as 150 bytes."""
    import plotly.graph_objects as go
    bars = explore_plan._bars_figure(go, _plan_dict()["summary"])
    assert bars.layout.xaxis.exponentformat == "SI"
    assert bars.layout.xaxis.title.text == "bytes (G = 10⁹)"


@pytest.mark.parametrize("argv", [
    ["explore", "all_reduce"],
    ["plan", "--model", "llama3-8b", "--dp", "2", "--nodes", "1", "--html", "x.html"],
])
def test_missing_plotly_is_one_line_naming_the_extra(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m.split(".")[0] == "plotly"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly fails
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs plotly: pip install 'ringccl[explore]'" in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())
