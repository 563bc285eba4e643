"""The planner's inputs: model shapes and presets, the config.json loader, clusters and units,
and every refusal with its message."""

from __future__ import annotations

import json

import pytest

from ringccl.errors import ArgumentError
from ringccl.planner import Cluster, ModelConfig, ParallelDims, PRESETS, plan, search
from ringccl.planner.cluster import cluster_preset, load_profile, resolve_cluster
from ringccl.planner.config import cluster_for, load_plan_config, plan_config
from ringccl.planner.groups import RankGrid
from ringccl.planner.hf_config import load_config

TINY = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                   num_key_value_heads=8, intermediate_size=11008, vocab_size=32000,
                   seq_length=4096, name="tiny")
MOE = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                  intermediate_size=11008, vocab_size=32000, num_local_experts=8,
                  num_experts_per_tok=2, seq_length=4096, name="moe")


@pytest.mark.parametrize("name, total, active", [
    ("llama3-8b", 8.03e9, 8.03e9), ("llama3-70b", 70.55e9, 70.55e9),
    ("llama3-405b", 405.85e9, 405.85e9), ("mixtral-8x7b", 46.70e9, 12.88e9),
    ("deepseek-v3", 671.0e9, 37.55e9), ("gpt3-175b", 174.6e9, 174.6e9)])
def test_presets_reproduce_published_parameter_counts(name, total, active):
    m = PRESETS[name]
    assert m.num_parameters == pytest.approx(total, rel=2e-3)
    assert m.active_parameters == pytest.approx(active, rel=2e-3)


def test_flops_per_token_is_6n_plus_12lhs():
    m = PRESETS["llama3-8b"]
    n = m.num_parameters - m.vocab_size * m.hidden_size      # the lookup is not a matmul
    expected = 6 * n + 12 * m.num_hidden_layers * m.hidden_size * m.seq_length
    assert m.flops_per_token() == pytest.approx(expected, rel=1e-12)


def test_config_json_is_read_as_is(tmp_path):
    m = PRESETS["deepseek-v3"]
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
           "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
           "intermediate_size": 18432, "vocab_size": 129280, "n_routed_experts": 256,
           "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "n_shared_experts": 1,
           "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 10000}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    loaded = load_config(path, seq_length=4096)
    assert loaded.num_parameters == m.num_parameters
    assert loaded.flops_per_token() == m.flops_per_token()
    path.write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ArgumentError, match="lacks num_hidden_layers"):
        load_config(path)


def test_cluster_units_and_presets():
    c = Cluster(inter_bandwidth="400Gbps", intra_bandwidth="900GB/s")
    assert c.inter_bandwidth == 50e9 and c.intra_bandwidth == 900e9   # bits vs bytes
    assert cluster_preset("dgx-h100", nodes=2).world_size == 16
    with pytest.raises(ArgumentError, match="cluster='dgx-z' is not a preset"):
        cluster_preset("dgx-z")
    with pytest.raises(ArgumentError, match="nics_per_node=9 must be <= gpus_per_node=8"):
        Cluster(nics_per_node=9)
    with pytest.raises(ArgumentError, match="compute_efficiency"):
        Cluster(compute_efficiency=1.5)
    with pytest.raises(ArgumentError, match="unknown cluster field"):
        resolve_cluster({"gpus": 8})


def test_a_cluster_table_may_rename_its_preset_but_not_name_another():
    """``name`` labels the cluster; a preset's name given as ``name`` is refused, pointing at
    ``preset``, instead of silently planning the default preset under that label."""
    renamed = resolve_cluster({"preset": "dgx-a100", "name": "my-cluster", "nodes": 2})
    assert (renamed.name, renamed.gpu, renamed.nodes) == ("my-cluster", "a100-sxm4-80gb", 2)
    assert resolve_cluster({"preset": "dgx-a100", "name": "DGX-A100"}).gpu == "a100-sxm4-80gb"
    with pytest.raises(ArgumentError, match="name='dgx-a100' is a preset's name.*"
                                            "write preset = 'dgx-a100'"):
        resolve_cluster({"preset": "dgx-h100", "name": "dgx-a100"})
    with pytest.raises(ArgumentError, match="write preset = 'h800'"):
        resolve_cluster({"name": "h800"})


def test_a_gpu_has_one_memory_whether_named_or_from_its_cluster():
    from ringccl.planner.cluster import CLUSTER_PRESETS
    from ringccl.planner.gpus import GPU_PRESETS
    for name, values in CLUSTER_PRESETS.items():
        gpu = values["gpu"]
        assert cluster_preset(name).gpu_memory == cluster_preset(name, gpu=gpu).gpu_memory \
            == GPU_PRESETS[gpu].hbm_bytes, name
    # a datasheet's "80GB" of HBM is 80 GiB (the driver reports an A100 80GB's 81,920 MiB)
    assert GPU_PRESETS["a100-sxm4-80gb"].hbm_bytes == 81920 * 2**20


def test_describe_names_a_network_profile_instead_of_the_presets_links(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"params": {"alpha": {"value": 4e-6},
                                           "beta": {"value": 1 / 40e9}}}))
    plain = cluster_preset("dgx-h100").describe()
    assert "inter 50.00 GB/s per NIC" in plain and "network fitted" not in plain
    fitted = Cluster(network_profile=str(path)).describe()
    assert f"network fitted in {path}" in fitted and "per NIC (" not in fitted


def test_describe_says_when_an_alpha_beta_profile_prices_ringccls_algorithms(tmp_path):
    """An α-β fit of ringccl's own runs prices ringccl's algorithms (a what-if), not NCCL's:
    the cluster's one-line description says so; NCCL's default says nothing."""
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"params": {"alpha": {"value": 4e-6},
                                           "beta": {"value": 1 / 40e9}}}))
    machine = resolve_cluster({"preset": "dgx-h100", "profile": str(path)})
    assert machine.collectives == "ringccl"
    assert "collectives priced as ringccl's algorithms run them" in machine.describe()
    assert "ringccl's algorithms" not in cluster_preset("dgx-h100").describe()


def test_fitted_profile_sets_one_level(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps([{"fit": {"params": {"alpha": {"value": 4e-6},
                                                    "beta": {"value": 1 / 40e9},
                                                    "gamma": {"value": 0.0}}}}]))
    assert load_profile(path) == {"inter_alpha": 4e-6, "inter_bandwidth": 40e9, "gamma": 0.0}
    c = resolve_cluster({"preset": "dgx-h100", "nodes": 2, "profile": str(path)})
    assert c.inter_bandwidth == pytest.approx(40e9)
    path.write_text("{}")
    with pytest.raises(ArgumentError, match="has no fit"):
        load_profile(path)


def test_rank_grid_megatron_order():
    dims = ParallelDims(tp=8, pp=4, dp=32)
    grid = RankGrid(dims, 8)
    assert grid.group("tp", 9) == tuple(range(8, 16))              # one node
    assert grid.group("dp", 0) == tuple(range(0, 256, 8))         # 32 nodes, one rank each
    assert grid.group("pp", 0) == (0, 256, 512, 768)
    shape = grid.shapes("dp")[0]
    assert (shape.size, shape.ranks_per_node, shape.nodes_spanned) == (32, 1, 32)
    other = RankGrid(ParallelDims(tp=8, pp=4, dp=32, order="dp-tp-cp-ep-pp"), 8)
    assert other.group("tp", 0) == tuple(range(0, 256, 32))        # TP across nodes
    # one NIC per node: the 8 concurrent DP groups of a node share it
    assert RankGrid(dims, 8, nics_per_node=1).shapes("dp")[0].nic_sharing == 8


# every refusal, with its message
@pytest.mark.parametrize("model, layout, cluster, message", [
    (TINY, {"dp": 4}, 8, r"dp x tp x cp x pp = 4 x 1 x 1 x 1 = 4 must equal the world size 8"),
    (TINY, {"tp": 8, "sp": True}, 8, None),
    (ModelConfig(num_hidden_layers=4, hidden_size=4800, num_attention_heads=24,
                 intermediate_size=64, vocab_size=64), {"tp": 16}, 16,
     r"tp=16 must divide num_attention_heads=24"),
    (ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                 num_key_value_heads=4, intermediate_size=64, vocab_size=64), {"tp": 8}, 8,
     r"tp=8 must divide num_key_value_heads=4"),
    (MOE, {"dp": 16, "ep": 16}, 16, r"ep=16 must divide the experts num_local_experts=8"),
    (TINY, {"dp": 8, "ep": 2}, 8, r"ep=2 needs a mixture-of-experts model"),
    (MOE, {"tp": 2, "dp": 4, "sp": False}, 8, r"sp must be on with tp=2 on an MoE model"),
    (TINY, {"pp": 8}, 8, r"pp=8 x virtual_stages=1 = 8 stages is deeper than the model's "
     r"num_hidden_layers=4"),
    (TINY, {"pp": 4, "dp": 2, "schedule": "interleaved", "virtual_stages": 2,
            "global_batch_size": 8}, 8, r"pp=4 x virtual_stages=2 = 8 stages is deeper"),
])
def test_refusals_name_the_field(model, layout, cluster, message):
    c = Cluster(nodes=cluster // 8 or 1, gpus_per_node=min(cluster, 8))
    if message is None:
        plan(model, layout, c)
        return
    with pytest.raises(ArgumentError, match=message):
        plan(model, layout, c)


@pytest.mark.parametrize("fields, message", [
    ({"dp": 4, "micro_batch_size": 2, "global_batch_size": 12},
     r"global_batch_size=12 does not split into micro-batches: it must be a multiple of dp x "
     r"micro_batch_size = 4 x 2 = 8"),
    ({"dp": 4, "global_batch_size": 16, "num_micro_batches": 3},
     r"global_batch_size=16 != dp x micro_batch_size x num_micro_batches"),
    ({"pp": 4, "schedule": "interleaved", "virtual_stages": 2, "num_micro_batches": 6},
     r"num_micro_batches=6 must be a multiple of pp=4"),
    ({"dp": 6, "ep": 4}, r"etp x ep = 1 x 4 = 4 must divide tp x cp x dp = 1 x 1 x 6 = 6"),
    ({"zero_stage": 4}, r"zero_stage=4 must be 0, 1, 2 or 3"),
    ({"schedule": "zb"}, r"schedule='zb' must be one of 1f1b, interleaved, gpipe, zb-h1, "
     r"zb-h2, dualpipe, dualpipev"),
    ({"recompute": "some"}, r"recompute='some' must be one of none, selective, full"),
    ({"virtual_stages": 2}, r"virtual_stages=2 needs schedule='interleaved'"),
    ({"order": "tp-dp-pp"}, r"order='tp-dp-pp' must name each of tp, cp, ep, dp, pp once"),
    ({"tp": 0}, r"tp"),
])
def test_layout_refusals(fields, message):
    with pytest.raises(ArgumentError, match=message):
        ParallelDims(**fields)


def test_accumulation_steps_follow_from_the_batch():
    dims = ParallelDims(dp=4, micro_batch_size=2, global_batch_size=64)
    assert dims.num_micro_batches == dims.gradient_accumulation_steps == 8


def test_search_ranks_layouts_and_says_why_each_loses():
    cluster = cluster_preset("dgx-h100", nodes=2)
    seen = []
    result = search(TINY, cluster, global_batch_size=32, micro_batch_sizes=(1,),
                    recompute=("selective",), zero_stages=(0, 1),
                    progress=lambda done, total, layout: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] == result.tried
    times = [p.step_seconds for p in result.plans]
    assert times == sorted(times) and len(result.plans) <= 10
    assert result.priced + result.pruned_memory + result.pruned_slower == result.tried
    top = result.top(10)
    assert top[0][1] == "fastest" and all(why for _, why in top[1:])
    assert all(p.dims.world_size == 16 for p, _ in top)


def test_plan_config_merges_the_file_then_the_given_values(tmp_path):
    """The file gives every key; a given value wins, the layout and cluster tables field by
    field; a text straggler is parsed; the cluster's nodes follow the GPUs."""
    path = tmp_path / "step.toml"
    path.write_text('model = "llama3-8b"\nseq_length = 2048\nstraggler = "3:0.5"\n'
                    '[layout]\ndp = 4\ntp = 2\n[cluster]\npreset = "dgx-a100"\n'
                    'inter_alpha = "9us"\n')
    cfg = plan_config(str(path), layout={"dp": 2, "pp": 2}, cluster={"preset": "h800"},
                      dtype="fp16")
    assert cfg.model.seq_length == 2048 and cfg.model.dtype == "fp16"
    assert cfg.layout == {"dp": 2, "tp": 2, "pp": 2}
    assert cfg.cluster == {"preset": "h800", "inter_alpha": "9us"}
    assert cfg.straggler == (3, 0.5) and cfg.search is False and cfg.gpus is None
    machine = cluster_for(cfg.cluster, 16)
    assert (machine.name, machine.nodes, machine.inter_alpha) == ("h800", 2, 9e-6)
    assert cluster_for({}, 8).name == "dgx-h100"
    with pytest.raises(ArgumentError, match="--model is required"):
        plan_config(None, layout={"dp": 8})
    with pytest.raises(ArgumentError, match="must be RANK:FRACTION"):
        plan_config(None, model="llama3-8b", straggler="17")
    (tmp_path / "bad.json").write_text('{"modle": "llama3-8b"}')
    with pytest.raises(ArgumentError, match="unknown key.*modle.*expected cluster"):
        load_plan_config(str(tmp_path / "bad.json"))


def test_numpy_integers_are_integers_in_a_layout():
    # docs/errors.md: Python and numpy integers are accepted; dp=np.int64(4) was refused
    import numpy as np
    given = plan("llama3-8b", {"tp": np.int32(8), "dp": np.int64(4)},
                 {"preset": "dgx-a100", "nodes": 4})
    plain = plan("llama3-8b", {"tp": 8, "dp": 4}, {"preset": "dgx-a100", "nodes": 4})
    assert given.step_seconds == plain.step_seconds
    assert type(given.dims.dp) is int and type(given.dims.tp) is int


def test_a_layout_or_straggler_of_the_wrong_kind_is_refused_by_name():
    from ringccl.errors import ArgumentTypeError
    with pytest.raises(ArgumentTypeError, match=r"layout=\[\('tp', 8\), 4\] must be a "
                                                r"ParallelDims or a dict of its fields"):
        plan("llama3-8b", [("tp", 8), 4], "dgx-a100")
    with pytest.raises(ArgumentTypeError, match=r"straggler=3 must be None, a Straggler or "
                                                r"\(rank, fraction\[, link\]\)"):
        plan("llama3-8b", {"tp": 8, "dp": 4}, {"preset": "dgx-a100", "nodes": 4}, straggler=3)
