"""The layout search: its pricing equals the full step estimate, its bounds never exceed the
price, pruning loses neither the fastest layout nor the Pareto front, and the layouts papers
run are found (Megatron-LM SC21 Table 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringccl.errors import ArgumentError
from ringccl.planner import (ModelConfig, ParallelDims, cluster_preset, estimate_step, plan,
                             resolve_model)
from ringccl.planner.search import (SearchSpace, candidates, lower_bounds, price, search)

SMALL = ModelConfig(num_hidden_layers=8, hidden_size=2048, num_attention_heads=16,
                    num_key_value_heads=8, intermediate_size=5632, vocab_size=32000,
                    seq_length=4096, name="small")
MOE = ModelConfig(num_hidden_layers=8, hidden_size=2048, num_attention_heads=16,
                  intermediate_size=5632, vocab_size=32000, num_local_experts=32,
                  num_experts_per_tok=4, moe_intermediate_size=1408, n_shared_experts=1,
                  first_k_dense_replace=1, seq_length=4096, name="moe")
SPACE = SearchSpace(micro_batch_sizes=(1, 2), cps=(1, 2), recompute=("none", "full"))


def _layouts(model, gpus, every):
    cluster = cluster_preset("dgx-h100", nodes=gpus // 8)
    lays = list(candidates(model, gpus, 8, global_batch_size=64, space=SPACE))
    return cluster, lays[::every]


@pytest.mark.parametrize("model, gpus, every", [(SMALL, 32, 7), (MOE, 32, 23)])
def test_price_equals_the_full_estimate(model, gpus, every):
    cluster, lays = _layouts(model, gpus, every)
    assert len({d.schedule for d in lays}) >= 4 and len({d.zero_stage for d in lays}) == 4
    cache: dict = {}
    for dims in lays:
        full = estimate_step(model, dims, cluster)
        got = price(model, dims, cluster, cache)
        assert got.step_seconds == full.step_seconds, dims.describe()
        assert got.peak_memory == full.peak_memory, dims.describe()
        assert got.fits == full.fits_memory
        # the bounds never exceed the price
        time, states = lower_bounds(model, dims, cluster)
        assert time <= got.step_seconds * (1 + 1e-12) and states <= got.peak_memory


def test_pruning_keeps_the_fastest_and_the_pareto_front():
    cluster = cluster_preset("dgx-h100", nodes=4)
    kw = dict(global_batch_size=64, space=SPACE)
    pruned = search(SMALL, cluster, **kw)
    every = search(SMALL, cluster, prune=False, **kw)
    assert pruned.pruned_memory + pruned.pruned_slower > 0
    assert pruned.priced + pruned.pruned_memory + pruned.pruned_slower == pruned.tried
    assert every.priced == every.tried
    assert pruned.plans[0].dims == every.plans[0].dims
    front = lambda r: [(p.step_seconds, p.peak_memory) for p in r.pareto]     # noqa: E731
    assert front(pruned) == front(every)
    # the front: faster points need more memory
    points = front(every)
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(points, points[1:]))


def test_search_ranks_the_new_layouts():
    cluster = cluster_preset("dgx-h100", nodes=4)
    seen = []
    narrow = SearchSpace(micro_batch_sizes=(1,), cps=(1, 2), recompute=("none",),
                         zero_stages=(0, 1))
    result = search(MOE, cluster, global_batch_size=64, space=narrow,
                    progress=lambda done, total, layout: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] == result.tried
    layouts = list(candidates(MOE, 32, 8, global_batch_size=64, space=SPACE))
    assert {d.schedule for d in layouts} >= {"1f1b", "interleaved", "zb-h1", "zb-h2",
                                            "dualpipe", "dualpipev"}
    assert {d.cp_comm_type for d in layouts} >= {"p2p", "all_gather", "a2a"}
    assert any(d.dp_shard for d in layouts) and any(d.ep > d.dp for d in layouts)
    times = [p.step_seconds for p in result.plans]
    assert times == sorted(times)
    out = result.to_dict()
    assert out["priced"] == result.priced and out["pareto"]


def test_search_refusals():
    with pytest.raises(ArgumentError, match=r"schedules gpipe are not searched; choose from "
                       r"1f1b, interleaved, zb-h1, zb-h2, dualpipe, dualpipev"):
        SearchSpace(schedules=("1f1b", "gpipe"))
    shallow = ModelConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=2,
                          intermediate_size=512, vocab_size=1000, name="shallow")
    # tp <= 2 heads, pp <= 2 layers: dp >= 8 never divides a batch of 3
    with pytest.raises(ArgumentError, match=r"no valid layout of shallow on 32 GPUs with "
                       r"global_batch_size=3"):
        search(shallow, cluster_preset("dgx-h100", nodes=4), global_batch_size=3)


def test_search_takes_the_model_and_cluster_as_plan_does():
    by_name = search("llama3-8b", {"preset": "dgx-h100", "nodes": 1}, global_batch_size=16)
    by_object = search(resolve_model("llama3-8b"), cluster_preset("dgx-h100", nodes=1),
                       global_batch_size=16)
    assert [p.dims.describe() for p in by_name.plans] == \
        [p.dims.describe() for p in by_object.plans]
    with pytest.raises(ArgumentError, match="cluster='dgx-z' is not a preset"):
        search("llama3-8b", "dgx-z")
    with pytest.raises(ArgumentError, match="llama-z"):
        search("llama-z", "dgx-h100")


def test_search_finds_a_layout_no_slower_than_megatron_sc21_table_2():
    # Narayanan et al. 2021, Table 2: GPT-3 175B on 1,536 A100s with PTD-P (tp 8, pp 12,
    # dp 16, interleaved, full recompute; benchmarks/published_runs.json)
    row = next(r for r in json.loads((Path(__file__).resolve().parent.parent / "benchmarks"
                                      / "published_runs.json").read_text())["runs"]
               if r["id"] == "sc21-t2-ptdp-175b-1536")
    model, cluster = resolve_model(row["model"]), cluster_preset("dgx-a100", nodes=192)
    lay = {k: row["layout"][k] for k in ("tp", "pp", "dp", "schedule", "virtual_stages",
                                         "global_batch_size", "micro_batch_size", "recompute",
                                         "zero_stage", "sp")}
    published = plan(model, lay, cluster)
    space = SearchSpace(micro_batch_sizes=(1,), zero_stages=(0, 1), recompute=("selective",
                                                                               "full"),
                        schedules=("1f1b", "interleaved", "zb-h2"), virtual_stages=(2,),
                        hsdp=False)
    best = search(model, cluster, global_batch_size=1536, space=space, top=1).plans[0]
    assert best.step_seconds <= published.step_seconds


def test_memoized_builders_match_fresh_plans_and_plans_keep_their_own_entries():
    """Builder results are shared by the layouts whose fields a builder reads are the same
    (inventory.BUILDER_FIELDS), stage compute by those whose compute fields are
    (step.compute_of): every plan and every search price equals the one from empty caches,
    and planning or pricing another layout (other overlap knobs, other framework presets)
    leaves an earlier plan's entries as they were."""
    import ringccl
    cluster = cluster_preset("dgx-h100", nodes=4)
    base = {"pp": 2, "tp": 2, "sp": True, "dp": 8, "global_batch_size": 64}
    layouts = [base, {**base, "tp_comm_overlap": True}, {**base, "overlap_p2p": True},
               {**base, "zero_stage": 1}, {**base, "recompute": "full"},
               {**base, "schedule": "zb-h2"},
               {**base, "schedule": "dualpipe", "zero_stage": 2, "pp_scatter_gather": False},
               {**base, "tp_comm_overlap": True, "micro_batch_size": 2},
               {**base, "overlap_dgrad_reduce": False},
               {**base, "sp": False}, {**base, "sp": False, "overlap_dgrad_reduce": False},
               {**base, "gradient_accumulation_fusion": False},
               {**base, "pp_sequential_p2p": True}, {**base, "attention": "flash2"},
               {**base, "sp": False, "framework": "megatron-2021"},
               {**base, "sp": False, "framework": "megatron-deepspeed", "zero_stage": 1}]
    first = plan(SMALL, base, cluster)
    warm = []
    for lay in layouts:
        # the search's pricing reads (and marks) the memoized entries themselves
        priced = price(SMALL, ParallelDims(**lay), cluster, {}).step_seconds
        warm.append((json.dumps(plan(SMALL, lay, cluster).to_dict(), sort_keys=True), priced))
    # read after the others were planned over the same memoized builder results
    assert json.dumps(first.to_dict(), sort_keys=True) == warm[0][0]
    for lay, (text, priced) in zip(layouts, warm):
        ringccl.clear_caches()
        assert json.dumps(plan(SMALL, lay, cluster).to_dict(), sort_keys=True) == text, lay
        ringccl.clear_caches()
        assert price(SMALL, ParallelDims(**lay), cluster, {}).step_seconds == priced, lay


@pytest.mark.parametrize("framework, allowed", [
    # FSDP2: DDP or fully_shard, any TP/PP the search tries
    ("fsdp2", lambda d: d.zero_stage in (0, 3)),
    # Composer v0.17.0: FSDP or DDP, no TP, no pipeline
    ("composer", lambda d: d.tp == 1 and d.pp == 1 and d.zero_stage in (0, 3)),
    # Megatron-LM of 2021: no distributed optimizer, no SP, no selective recompute
    ("megatron-2021", lambda d: d.zero_stage == 0 and not d.sp and d.recompute != "selective"
     and d.schedule in ("1f1b", "interleaved")),
])
def test_search_ranks_the_layouts_a_framework_runs_under_its_preset(framework, allowed):
    cluster = cluster_preset("dgx-h100", nodes=2)
    lays = list(candidates(SMALL, 16, 8, global_batch_size=64, space=SPACE,
                           framework=framework))
    assert lays and all(d.framework == framework and allowed(d) for d in lays)
    every = list(candidates(SMALL, 16, 8, global_batch_size=64, space=SPACE))
    assert all(d.framework == "megatron" for d in every) and len(lays) < len(every)
    result = search(SMALL, cluster, global_batch_size=64, framework=framework, space=SPACE)
    best = result.plans[0]
    assert best.dims.framework == framework and "framework" not in best.dims.from_preset
    # priced as that framework runs the layout: the same as planning it under the framework
    again = plan(SMALL, {k: getattr(best.dims, k) for k in (
        "tp", "sp", "cp", "pp", "dp", "zero_stage", "micro_batch_size", "global_batch_size",
        "recompute", "schedule", "virtual_stages", "dp_shard")} | {"framework": framework},
                 cluster)
    assert again.step_seconds == pytest.approx(best.step_seconds)
    with pytest.raises(ArgumentError, match="framework='nemo' must be one of megatron"):
        search(SMALL, cluster, global_batch_size=64, framework="nemo")


def test_plan_search_takes_the_framework(capsys):
    from ringccl.cli.app import main
    assert main(["plan", "--model", "llama3-8b", "--seq-length", "2048", "--search", "--gpus",
                 "8", "--global-batch-size", "16", "--framework", "composer", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["top"] and all(t["layout"]["framework"] == "composer" and
                              t["layout"]["tp"] == t["layout"]["pp"] == 1 for t in out["top"])
    assert main(["plan", "--model", "llama3-8b", "--search", "--gpus", "8", "--tp", "2"]) == 2
    assert ("--framework and --global-batch-size apply to every layout it ranks"
            in capsys.readouterr().err)


# -- collectives="ringccl": groups beyond the walk's limit ------------------------------------

NARROW = SearchSpace(micro_batch_sizes=(1,), recompute=("none",), zero_stages=(0, 1))


@pytest.fixture
def walk_limit(monkeypatch):
    """The walk's limit lowered to ``n`` ranks (caches emptied around it)."""
    import ringccl
    from ringccl.planner import costing

    def lower(n):
        ringccl.clear_caches()
        monkeypatch.setattr(costing, "WALK_MAX_RANKS", n)
    yield lower
    ringccl.clear_caches()


def test_search_skips_the_layouts_the_walk_cannot_price_and_ranks_the_rest(walk_limit):
    cluster = cluster_preset("dgx-h100", nodes=2, collectives="ringccl")
    walk_limit(8)         # a dp group of 16 ranks is beyond it; tp >= 2 keeps groups of 8
    pruned = search(SMALL, cluster, global_batch_size=64, space=NARROW)
    every = search(SMALL, cluster, global_batch_size=64, space=NARROW, prune=False)
    for r in (pruned, every):
        assert r.skipped_walk_limit > 0 and r.priced > 0 and r.plans
        assert (r.priced + r.pruned_memory + r.pruned_slower + r.skipped_walk_limit
                == r.tried)
        # what is ranked has groups of at most 8 ranks (HSDP's dp=16 shards 8, replicates 2)
        assert all(e.shape.size <= 8 for p in r.plans + r.pareto for st in p.stages
                   for e in st.entries)
        assert not any(p.dims.dp == 16 and not p.dims.dp_shard for p in r.plans + r.pareto)
        assert ("groups of at most 8 ranks" in r.skipped_why and "dp group of 16 ranks"
                in r.skipped_why and "--collectives nccl" in r.skipped_why)
        out = r.to_dict()
        assert (out["skipped_walk_limit"], out["skipped_why"]) == (r.skipped_walk_limit,
                                                                   r.skipped_why)
    # skipping keeps the bounds sound: the fastest and the front of what can be priced
    assert pruned.plans[0].dims == every.plans[0].dims
    front = lambda r: [(p.step_seconds, p.peak_memory) for p in r.pareto]     # noqa: E731
    assert front(pruned) == front(every)
    # with nccl's pricing nothing is skipped
    nccl = search(SMALL, cluster_preset("dgx-h100", nodes=2), global_batch_size=64,
                  space=NARROW)
    assert nccl.skipped_walk_limit == 0 and nccl.skipped_why is None
    assert nccl.to_dict()["skipped_walk_limit"] == 0


def test_search_with_every_layout_beyond_the_walk_is_refused(walk_limit):
    walk_limit(1)         # every layout of 16 GPUs has a group of 2 ranks or more
    cluster = cluster_preset("dgx-h100", nodes=2, collectives="ringccl")
    with pytest.raises(ArgumentError, match=r"collectives='ringccl' prices none of the \d+ "
                       r"layouts of small on 16 GPUs: \d+ have a dp group of 16 ranks.*beyond "
                       r"the 1 ranks its walk prices.*--collectives nccl"):
        search(SMALL, cluster, global_batch_size=64, space=NARROW)


def test_one_plan_beyond_the_walk_is_still_refused(walk_limit):
    walk_limit(8)
    cluster = cluster_preset("dgx-h100", nodes=2, collectives="ringccl")
    with pytest.raises(ArgumentError, match=r"over the dp group's 16 ranks .* beyond the 8 "
                       r"ranks it prices .* collectives='nccl'"):
        plan(SMALL, {"dp": 16, "global_batch_size": 64}, cluster)
    assert plan(SMALL, {"dp": 8, "tp": 2, "global_batch_size": 64}, cluster).step_seconds > 0


def test_plan_search_cli_reports_the_layouts_it_skips(walk_limit, capsys):
    from ringccl.cli.app import main
    args = ["plan", "--model", "llama3-8b", "--seq-length", "2048", "--gpus", "16",
            "--global-batch-size", "16", "--collectives", "ringccl"]
    walk_limit(8)
    assert main(args + ["--search", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["skipped_walk_limit"] > 0 and out["top"]
    assert "groups of at most 8 ranks" in out["skipped_why"]
    assert (out["priced"] + out["pruned_memory"] + out["pruned_slower"]
            + out["skipped_walk_limit"] == out["tried"])
    assert all(t["layout"]["dp"] <= 8 or t["layout"].get("dp_shard") for t in out["top"])
    assert main(args + ["--search"]) == 0
    text = capsys.readouterr().out
    assert f"{out['skipped_walk_limit']} skipped" in text and "--collectives nccl" in text
    # every layout beyond the limit: refused, naming it; one plan beyond it: refused as before
    walk_limit(1)
    assert main(args + ["--search"]) == 2
    assert "beyond the 1 ranks its walk prices" in capsys.readouterr().err
    walk_limit(8)
    assert main(args + ["--dp", "16"]) == 2
    assert "beyond the 8 ranks it prices" in capsys.readouterr().err
