"""Context parallelism's four designs, expert parallelism as Megatron-Core (folding), DeepSeek-V3
and DeepEP run it, and the sharded data-parallel layouts (HSDP, FSDP x TP, ZeRO-1): bytes from
their papers' formulas, groups on the rank grid, published layouts that plan, and every new
field's refusals."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import pytest

from ringccl.errors import ArgumentError
from ringccl.planner import Cluster, ModelConfig, ParallelDims, cluster_preset, frameworks, plan
from ringccl.planner import resolve_model
from ringccl.planner.routing import (ep_rank_imbalance, expert_inclusion, gpus_per_copy,
                                     nodes_per_token)

RUNS = {r["id"]: r for r in json.loads((Path(__file__).resolve().parent.parent / "benchmarks"
                                        / "published_runs.json").read_text())["runs"]}

MHA = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                  intermediate_size=11008, vocab_size=32000, seq_length=32768, name="mha")
GQA = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                  num_key_value_heads=8, intermediate_size=11008, vocab_size=32000,
                  seq_length=32768, name="gqa")
MOE = ModelConfig(num_hidden_layers=4, hidden_size=2048, num_attention_heads=16,
                  intermediate_size=5632, vocab_size=32000, num_local_experts=64,
                  num_experts_per_tok=8, moe_intermediate_size=1408, n_shared_experts=1,
                  seq_length=4096, name="moe")


def node(nodes=1):
    return Cluster(nodes=nodes, gpus_per_node=8, intra_bandwidth="450GB/s",
                   inter_bandwidth="400Gbps")


def rows(p, parallelism, stage=0, **match):
    return [e for e in p.stages[stage].entries if e.parallelism == parallelism
            and all(getattr(e, k) == v for k, v in match.items())]


def per_layer_bytes(p, parallelism, phase, layers=4, **match):
    """Bytes the busiest rank sends per layer and micro-batch in ``phase``."""
    return sum(e.bytes_sent_per_call * e.calls_per_micro_batch
               for e in rows(p, parallelism, phase=phase, **match)) / layers


# -- context parallelism ----------------------------------------------------------------------

def kv_bytes(model, tokens, tp=1):
    return 2 * model.num_key_value_heads / tp * model.head_dim * tokens * model.dtype_bytes


@pytest.mark.parametrize("model", [MHA, GQA])
def test_ring_attention_sends_cp_minus_1_kv_blocks_each_way(model):
    # Liu et al. 2023: cp - 1 steps, each passing one K/V block of T·kv bytes; the backward
    # passes the blocks again and their gradients
    cp = 8
    p = plan(model, {"cp": cp, "cp_comm_type": "p2p"}, node())
    t = model.seq_length / cp
    assert per_layer_bytes(p, "cp", "forward") == pytest.approx((cp - 1) * kv_bytes(model, t))
    assert per_layer_bytes(p, "cp", "backward") == pytest.approx(
        2 * (cp - 1) * kv_bytes(model, t))
    assert {e.overlap for e in rows(p, "cp")} == {"attention"}


def test_all_gather_cp_moves_the_same_bytes_exposed():
    # Llama 3 §3.3.2: all-gather K/V forward, reduce-scatter of their gradients backward
    cp = 8
    p = plan(GQA, {"cp": cp, "cp_comm_type": "all_gather"}, node())
    t = GQA.seq_length / cp
    fwd, = rows(p, "cp", phase="forward")
    bwd, = rows(p, "cp", phase="backward")
    assert (fwd.collective, bwd.collective) == ("all_gather", "reduce_scatter")
    assert fwd.nbytes == pytest.approx(cp * kv_bytes(GQA, t))        # the whole sequence
    assert fwd.bytes_sent_per_call == pytest.approx((cp - 1) * kv_bytes(GQA, t))
    assert fwd.overlap == bwd.overlap == "exposed"


def test_ulysses_sends_4nh_over_p_per_layer():
    # Jacobs et al. 2023 §3: all-to-alls of Q, K, V and of the output, N·h/P each per rank, of
    # which (P - 1)/P leaves it: 4·N·h/P·(P - 1)/P per layer forward, the same backward
    cp = 8
    p = plan(MHA, {"cp": cp, "cp_comm_type": "a2a"}, node())
    n, h, B = MHA.seq_length, MHA.hidden_size, MHA.dtype_bytes
    expect = 4 * n * h / cp * (cp - 1) / cp * B
    assert per_layer_bytes(p, "cp", "forward") == pytest.approx(expect)
    assert per_layer_bytes(p, "cp", "backward") == pytest.approx(expect)
    assert {e.collective for e in rows(p, "cp")} == {"all_to_all"}
    # grouped-query attention sends K and V of a_kv heads only
    g = plan(GQA, {"cp": cp, "cp_comm_type": "a2a"}, node())
    kv = GQA.num_key_value_heads / GQA.num_attention_heads
    assert per_layer_bytes(g, "cp", "forward") == pytest.approx(expect * (2 + 2 * kv) / 4)


def test_hybrid_ulysses_inside_a_node_ring_across():
    # USP (Fang & Zhao 2024), Megatron's a2a+p2p: Ulysses over the first 8 cp ranks (one node
    # at tp = 1), ring attention over the 2 groups of 8
    p = plan(GQA, {"cp": 16, "cp_comm_type": "a2a+p2p",
                   "hierarchical_context_parallel_sizes": (8, 2)}, node(2))
    a2a = rows(p, "cp", collective="all_to_all")
    ring = rows(p, "cp", collective="all_gather")
    assert a2a and {e.group for e in a2a} == {"cp_a2a"}
    assert {(e.shape.size, e.shape.nodes_spanned) for e in a2a} == {(8, 1)}
    assert {(e.group, e.shape.size, e.shape.nodes_spanned) for e in ring} == {("cp_p2p", 2, 2)}
    # after the all-to-all a rank holds 8·T tokens of 1/8 of the heads: blocks of T·kv again
    t = GQA.seq_length / 16
    assert ring[0].bytes_sent_per_call == pytest.approx(kv_bytes(GQA, t))


@pytest.mark.parametrize("layout, message", [
    ({"cp": 8, "cp_comm_type": "a2a", "tp": 1},
     r"the Ulysses degree 8 \(cp_comm_type='a2a'\) must divide the KV heads a TP rank holds, "
     r"num_key_value_heads / tp = 4 / 1 = 4"),
    ({"cp": 2, "tp": 4, "cp_comm_type": "a2a"},
     r"the Ulysses degree 2 \(cp_comm_type='a2a'\) must divide the KV heads a TP rank holds, "
     r"num_key_value_heads / tp = 4 / 4 = 1"),
])
def test_ulysses_refusals_name_the_heads(layout, message):
    gqa4 = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                       num_key_value_heads=4, intermediate_size=64, vocab_size=64,
                       seq_length=4096)
    with pytest.raises(ArgumentError, match=message):
        plan(gqa4, layout, node())


def test_cp_refusals():
    odd_heads = ModelConfig(num_hidden_layers=4, hidden_size=3072, num_attention_heads=24,
                            intermediate_size=64, vocab_size=64, seq_length=4096)
    with pytest.raises(ArgumentError, match=r"the Ulysses degree 16 .* must divide the "
                       r"attention heads a TP rank holds, num_attention_heads / tp = 24 / 1"):
        plan(odd_heads, {"cp": 16, "cp_comm_type": "a2a"}, node(2))
    with pytest.raises(ArgumentError, match=r"seq_length=4104 must be a multiple of 2 x cp = "
                       r"16 for cp_comm_type='p2p'"):
        plan(ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                         intermediate_size=64, vocab_size=64, seq_length=4104),
             {"cp": 8}, node())
    with pytest.raises(ArgumentError, match=r"hierarchical_context_parallel_sizes=\(4, 4\): "
                       r"a2a x p2p = 4 x 4 must equal cp=8"):
        ParallelDims(cp=8, cp_comm_type="a2a+p2p", hierarchical_context_parallel_sizes=(4, 4))
    with pytest.raises(ArgumentError, match=r"applies to cp_comm_type='a2a\+p2p' only"):
        ParallelDims(cp=8, hierarchical_context_parallel_sizes=(4, 2))
    with pytest.raises(ArgumentError, match=r"cp_comm_type='ring' must be one of p2p, "
                       r"all_gather, a2a, a2a\+p2p"):
        ParallelDims(cp=8, cp_comm_type="ring")


def test_llama3_128k_layout_plans_with_all_gather_cp():
    # Llama 3 report Table 4, third row: 16,384 GPUs, TP 8, CP 16, PP 16, DP 8 (see
    # benchmarks/published_runs.json for why 8 and not the printed 4), all-gather CP (§3.3.2);
    # one layer fewer on the first and last stage, one layer per chunk (v = 8, 128 chunks)
    row = RUNS["llama3-t4-16384-cp16"]
    lay = {k: row["layout"][k] for k in ("tp", "pp", "dp", "cp", "schedule", "virtual_stages",
                                         "global_batch_size", "micro_batch_size", "sp",
                                         "zero_stage")}
    p = plan(resolve_model(row["model"]), {**lay, "cp_comm_type": "all_gather",
                                           "recompute": "selective",
                                           "account_for_embedding_in_pipeline_split": True,
                                           "account_for_loss_in_pipeline_split": True},
             cluster_preset("dgx-h100", nodes=2048))
    cp = rows(p, "cp", stage=1)
    assert {(e.collective, e.group, e.shape.size) for e in cp} == {
        ("all_gather", "cp", 16), ("reduce_scatter", "cp", 16)}
    assert p.dims.world_size == 16384 and p.step_seconds > 0


# -- expert parallelism -----------------------------------------------------------------------

def test_parallel_folding_lets_ep_exceed_dp():
    # Megatron-Core's MoE parallel folding: Qwen3-235B-A22B at TP2 PP8 DP16 EP32 on 256 H100
    # (EP over tp x dp = 32 ranks of a stage), refused while ep had to divide dp
    qwen = ModelConfig(num_hidden_layers=94, hidden_size=4096, num_attention_heads=64,
                       num_key_value_heads=4, intermediate_size=12288, vocab_size=151936,
                       num_local_experts=128, num_experts_per_tok=8, moe_intermediate_size=1536,
                       seq_length=4096, name="qwen3-235b-a22b")
    p = plan(qwen, {"tp": 2, "sp": True, "pp": 8, "dp": 16, "ep": 32, "etp": 1,
                    "global_batch_size": 1024, "zero_stage": 0},
             cluster_preset("dgx-h100", nodes=32))
    ep = rows(p, "ep", stage=1)
    assert ep and {(e.group, e.shape.size, e.shape.nodes_spanned) for e in ep} == {
        ("ep", 32, 4)}
    assert p.dims.expert_dp == 1
    # expert gradients have no data-parallel peer; the dense ones reduce over 16
    assert {e.group for e in rows(p, "dp", stage=1)} == {"dp"}


def test_deepseek_style_layout_message_shows_the_arithmetic():
    with pytest.raises(ArgumentError, match=r"etp x ep = 1 x 64 = 64 must divide tp x cp x dp "
                       r"= 1 x 1 x 2 = 2: .* If dp=2 meant 2 replicas of each expert, write "
                       r"dp=128 ep=64: dp = replicas x etp x ep / \(tp x cp\) = 2 x 1 x 64 / "
                       r"\(1 x 1\) = 128, and the world is tp x cp x dp x pp = 1 x 1 x 128 x 16 "
                       r"= 2048"):
        ParallelDims(dp=2, ep=64, pp=16)
    with pytest.raises(ArgumentError, match=r"= 128 must equal the world size 1024 .*; ep is "
                       r"not a factor of the world size .* write dp=64 ep=8"):
        plan(MOE, {"dp": 8, "ep": 8, "pp": 16, "global_batch_size": 256},
             Cluster(nodes=128, gpus_per_node=8))


DSV3 = {"pp": 16, "dp": 128, "ep": 64, "schedule": "dualpipe", "global_batch_size": 15360,
        "zero_stage": 1, "recompute": "selective"}


@pytest.fixture(scope="module")
def deepseek():
    """DeepSeek-V3's published layout (§3.2, published_runs.json), node limit 4, two hops."""
    return plan("deepseek-v3", {**DSV3, "moe_router_group_topk": 4,
                                "moe_token_dispatcher_type": "flex"},
                {"preset": "h800", "nodes": 256})


def test_deepseek_v3_dispatch_leaves_a_node_at_most_m_times_per_token(deepseek):
    m_nodes, k, n = 4, 8, 8
    h, B = 7168, 2
    tokens = 4096                                    # one sequence per micro-batch, tp = 1
    inter = rows(deepseek, "ep", stage=1, group="ep_inter")
    assert inter and {(e.shape.size, e.shape.nodes_spanned) for e in inter} == {(8, 8)}
    per_token = inter[0].inter_node_bytes_per_call / (tokens * h * B)
    assert per_token <= m_nodes
    # the expected distinct nodes of 8 experts among 4 nodes of 32, 7/8 of them remote
    d = m_nodes * (1 - comb(96, k) / comb(128, k))
    assert per_token == pytest.approx(d * (n - 1) / n, rel=1e-9)
    # the same layout without the limit, one all-to-all over EP64: k·(n-1)/n per token
    flat = plan("deepseek-v3", DSV3, {"preset": "h800", "nodes": 256})
    a2a, = rows(flat, "ep", stage=1, phase="forward")
    assert (a2a.group, a2a.shape.size, a2a.shape.nodes_spanned) == ("ep", 64, 8)
    assert a2a.inter_node_bytes_per_call / (tokens * h * B) == pytest.approx(k * (n - 1) / n,
                                                                             rel=1e-9)


def test_deepseek_v3_dualpipe_bubble_per_table_2(deepseek):
    # (PP/2 - 1)(F&B + B - 3W) of one stage, B the full backward, over m/2 passes of F + B + W
    slow = max(deepseek.stages, key=lambda s: s.micro_batch_seconds)
    f, b, w = (x / 2 for x in slow.passes())          # a pass is two stages' worth
    table = (16 / 2 - 1) * ((f + b + w) + (b + w) - 3 * w)
    assert deepseek.bubble_fraction == pytest.approx(table / (120 / 2 * 2 * (f + b + w)))
    # and the two hops hide behind the other micro-batch's chunk
    assert deepseek.exposed.get("ep", 0.0) < 0.05 * deepseek.step_seconds


def test_routing_formulas():
    # hypergeometric: distinct nodes of k experts among E on n nodes
    assert nodes_per_token(256, 8, 8) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)))
    assert nodes_per_token(256, 8, 8, limit=4) <= 4
    assert nodes_per_token(64, 1, 8) == pytest.approx(1.0)
    assert gpus_per_copy(1, 8) == pytest.approx(1.0) and gpus_per_copy(3, 1) == 1.0
    # Zipf: inclusion probabilities sum to k; uniform is balanced, skew loads rank 0
    assert expert_inclusion(64, 8, 1.0).sum() == pytest.approx(8)
    assert ep_rank_imbalance(64, 8, 0.0, 8) == 1.0
    assert ep_rank_imbalance(64, 8, 1.0, 8) > 1.5


def test_routing_imbalance_and_capacity_load_the_busiest_rank():
    base = plan(MOE, {"dp": 8, "ep": 8}, node())
    skew = plan(MOE, {"dp": 8, "ep": 8, "routing_skew": 1.0}, node())
    measured = plan(MOE, {"dp": 8, "ep": 8, "routing_imbalance": 2.0}, node())
    capped = plan(MOE, {"dp": 8, "ep": 8, "capacity_factor": 1.25}, node())
    a2a = lambda p: rows(p, "ep", phase="forward")[0].nbytes       # noqa: E731
    assert a2a(measured) == pytest.approx(2 * a2a(base))
    assert a2a(capped) == pytest.approx(1.25 * a2a(base))
    assert skew.stages[0].shape.expert_load == pytest.approx(
        ep_rank_imbalance(64, 8, 1.0, 8))
    assert skew.stages[0].compute_per_micro_batch > base.stages[0].compute_per_micro_batch


def test_expert_tensor_parallel_gathers_on_its_group():
    p = plan(MOE, {"tp": 2, "sp": True, "dp": 4, "ep": 4, "etp": 2}, node())
    etp = rows(p, "ep", group="etp")
    assert {(e.collective, e.phase) for e in etp} == {
        ("all_gather", "forward"), ("reduce_scatter", "forward"), ("all_gather", "backward"),
        ("reduce_scatter", "backward")}
    assert {e.shape.size for e in etp} == {2}


TOP40 = ModelConfig(**{**MOE.__dict__, "num_experts_per_tok": 40})


@pytest.mark.parametrize("model, layout, nodes, message", [
    (MOE, {"dp": 8, "ep": 8, "moe_router_group_topk": 2}, 1,
     r"moe_router_group_topk=2 limits the nodes a token reaches, but each EP group of ep=8 "
     r"sits on one node"),
    (MOE, {"dp": 32, "ep": 32, "moe_router_group_topk": 8}, 4,
     r"moe_router_group_topk=8 is larger than the 4 nodes an EP group of ep=32 spans"),
    (TOP40, {"dp": 16, "ep": 16, "moe_router_group_topk": 1}, 2,
     r"moe_router_group_topk=1 nodes hold 1 x 32 = 32 experts, fewer than "
     r"num_experts_per_tok=40"),
])
def test_node_limit_refusals(model, layout, nodes, message):
    with pytest.raises(ArgumentError, match=message):
        plan(model, layout, node(nodes))


def test_expert_field_refusals():
    with pytest.raises(ArgumentError, match=r"moe_router_group_topk=4 limits .* it needs ep > 1"):
        ParallelDims(dp=8, moe_router_group_topk=4)
    with pytest.raises(ArgumentError, match=r"moe_token_dispatcher_type='deepep' must be one "
                       r"of alltoall, flex"):
        ParallelDims(moe_token_dispatcher_type="deepep")
    with pytest.raises(ArgumentError, match=r"give routing_imbalance \(measured\) or "
                       r"routing_skew \(Zipf\), not both"):
        ParallelDims(routing_imbalance=1.5, routing_skew=1.0)
    with pytest.raises(ArgumentError, match=r"capacity_factor=0.5 must be None \(dropless\) "
                       r"or a number >= 1"):
        ParallelDims(capacity_factor=0.5)
    with pytest.raises(ArgumentError, match=r"apply to mixture-of-experts models; gqa is dense"):
        plan(GQA, {"dp": 8, "routing_skew": 1.0}, node())
    # an expert field on a dense model would change nothing: refused, named
    for field, value in (("capacity_factor", 1.5), ("etp", 1),
                         ("moe_token_dispatcher_type", "flex")):
        with pytest.raises(ArgumentError, match=rf"{field}=.*apply to mixture-of-experts "
                           r"models; gqa is dense"):
            plan(GQA, {"dp": 8, field: value}, node())
    with pytest.raises(ArgumentError, match=r"etp=3 must divide the experts' width "
                       r"moe_intermediate_size=1408"):
        plan(MOE, {"tp": 1, "dp": 3, "ep": 1, "etp": 3}, Cluster(nodes=1, gpus_per_node=3))


# -- sharded data parallelism -----------------------------------------------------------------

def test_hsdp_shards_inside_a_group_and_all_reduces_across_replicas():
    # torchtitan's dp_shard x dp_replicate (FSDP's HYBRID_SHARD): 8 ranks of a node shard,
    # the 2 nodes replicate
    full = plan(GQA, {"dp": 16, "zero_stage": 3}, node(2))
    hsdp = plan(GQA, {"dp": 16, "zero_stage": 3, "dp_shard": 8}, node(2))
    gathers = rows(hsdp, "zero", collective="all_gather")
    assert {(e.group, e.shape.size, e.shape.nodes_spanned) for e in gathers} == {
        ("dp_shard", 8, 1)}
    rep, = rows(hsdp, "zero", collective="all_reduce")
    assert (rep.group, rep.shape.size, rep.shape.nodes_spanned) == ("dp_replicate", 2, 2)
    # each replica all-reduces its 1/8 shard of the gradients (in the framework's reduce dtype)
    per_element = frameworks.REDUCE_DTYPES[hsdp.dims.reduce_dtype]
    shard = hsdp.stages[0].shape.dense_parameters * per_element / 8
    assert rep.nbytes * rep.calls_per_step == pytest.approx(shard)
    # the optimizer states are sharded 8 ways, not 16
    assert hsdp.stages[0].memory.optimizer == pytest.approx(
        2 * full.stages[0].memory.optimizer, rel=1e-6)


def test_fsdp_with_tp_and_cp_shards_over_the_right_ranks():
    # torchtitan's 2-D FSDP2 x TP: TP inside the node, FSDP across nodes (one rank per node);
    # with CP the shard group is dp_shard x cp (its dp_shard_cp mesh)
    two_d = plan(GQA, {"tp": 8, "dp": 4, "zero_stage": 3, "sp": True}, node(4))
    g = rows(two_d, "zero", collective="all_gather")[0]
    assert (g.group, g.shape.size, g.shape.ranks_per_node, g.shape.nodes_spanned) == (
        "dp", 4, 1, 4)
    with_cp = plan(GQA, {"tp": 4, "cp": 2, "dp": 4, "zero_stage": 3, "sp": True}, node(4))
    g = rows(with_cp, "zero", collective="all_gather")[0]
    assert g.shape.size == 8                                 # cp x dp
    assert with_cp.stages[0].memory.optimizer < two_d.stages[0].memory.optimizer * 2


def test_zero1_distributed_optimizer_gather_overlaps_the_next_forward():
    p = plan(GQA, {"dp": 16, "zero_stage": 1}, node(2))
    rs, = rows(p, "zero", collective="reduce_scatter")
    ag, = rows(p, "zero", collective="all_gather")
    assert (rs.overlap, ag.overlap) == ("backward", "forward")
    assert rs.group == ag.group == "dp" and rs.shape.size == 16


def test_sharding_refusals():
    with pytest.raises(ArgumentError, match=r"dp_shard=4 shards ZeRO / FSDP states: it needs "
                       r"zero_stage 1, 2 or 3"):
        ParallelDims(dp=8, dp_shard=4, zero_stage=0)
    with pytest.raises(ArgumentError, match=r"dp_shard=3 must divide dp=8"):
        ParallelDims(dp=8, dp_shard=3, zero_stage=3)


def test_more_field_refusals():
    with pytest.raises(ArgumentError, match=r"cp_comm_type='a2a\+p2p' needs "
                       r"hierarchical_context_parallel_sizes=\(a2a size, p2p size\)"):
        ParallelDims(cp=4, cp_comm_type="a2a+p2p")
    with pytest.raises(ArgumentError, match=r"routing_imbalance=0.5 must be a number >= 1"):
        ParallelDims(routing_imbalance=0.5)
    with pytest.raises(ArgumentError, match=r"routing_skew=-1 must be a number >= 0"):
        ParallelDims(routing_skew=-1)
    with pytest.raises(ArgumentError, match=r"etp=0"):
        ParallelDims(etp=0)
    # a rank order with pp inside tp: the dense and the expert grid would cut stages apart
    with pytest.raises(ArgumentError, match=r"order='tp-pp-cp-ep-dp' puts pp at stride 2 among "
                       r"the dense ranks .* and 1 among the expert ranks"):
        plan(MOE, {"tp": 2, "sp": True, "dp": 2, "pp": 2, "ep": 2, "etp": 1,
                   "order": "tp-pp-cp-ep-dp", "global_batch_size": 8}, node())


def test_fields_that_would_change_nothing_are_refused():
    """A context-parallel design without context parallelism, and resharding without ZeRO-3,
    are refused rather than silently dropped; the framework's own preset values are not."""
    with pytest.raises(ArgumentError, match=r"cp_comm_type='a2a' .* needs cp > 1 \(got cp=1\)"):
        ParallelDims(dp=8, cp_comm_type="a2a")
    with pytest.raises(ArgumentError, match=r"reshard_after_forward=True applies to zero_stage "
                       r"3 .* got zero_stage=1"):
        ParallelDims(dp=8, zero_stage=1, reshard_after_forward=True)
    assert ParallelDims(dp=8, zero_stage=3, reshard_after_forward=False).zero_stage == 3
    for fw in ("fsdp2", "torchtitan", "deepspeed", "megatron"):
        ParallelDims(dp=8, zero_stage=0, framework=fw)   # the preset fills it: no refusal


@pytest.mark.parametrize("flag", ["account_for_embedding_in_pipeline_split",
                                  "account_for_loss_in_pipeline_split"])
def test_pipeline_split_flags_need_a_pipeline(flag):
    """A split flag with one stage has no split to change: refused, naming pp; off, or on
    with a pipeline, or on from the framework's preset (torchtitan's), it plans."""
    with pytest.raises(ArgumentError, match=rf"{flag}=True counts .* needs pp > 1 \(got pp=1\)"):
        ParallelDims(dp=8, **{flag: True})
    assert getattr(ParallelDims(dp=8, **{flag: False}), flag) is False
    assert getattr(ParallelDims(dp=4, pp=2, **{flag: True}), flag) is True
    titan = ParallelDims(dp=8, framework="torchtitan")
    assert getattr(titan, flag) is True and flag in titan.from_preset


@pytest.mark.parametrize("layout, message", [
    ({"zero_stage": 1, "zero3_gather": "parameter"},
     r"zero3_gather='parameter' applies to zero_stage 3 .* got zero_stage=1"),
    ({"zero_stage": 0, "zero3_prefetch_bucket": 5},
     r"zero3_prefetch_bucket=5 applies to zero_stage 3 with zero3_gather='parameter' .* got "
     r"zero_stage=0"),
    ({"zero_stage": 2, "fsdp_prefetch": 0, "framework": "deepspeed"},
     r"fsdp_prefetch=0 applies to zero_stage 3 with zero3_gather='layer' .* got zero_stage=2"),
    ({"zero_stage": 3, "zero3_prefetch_bucket": 5},
     r"zero3_prefetch_bucket=5 applies to zero_stage 3 with zero3_gather='parameter' .* got "
     r"zero3_gather='layer'"),
    ({"zero_stage": 3, "fsdp_prefetch": 2, "framework": "deepspeed"},
     r"fsdp_prefetch=2 applies to zero_stage 3 with zero3_gather='layer' .* got "
     r"zero3_gather='parameter'"),
])
def test_zero3_gather_fields_need_the_gathers_they_tune(layout, message):
    with pytest.raises(ArgumentError, match=message):
        ParallelDims(dp=8, **layout)


def test_zero3_gather_fields_plan_where_they_apply():
    assert ParallelDims(dp=8, zero_stage=3, zero3_gather="parameter",
                        zero3_prefetch_bucket=0).zero3_prefetch_bucket == 0
    assert ParallelDims(dp=8, zero_stage=3, fsdp_prefetch=0).fsdp_prefetch == 0
    for fw in frameworks.FRAMEWORKS:       # every preset fills all three, at any ZeRO stage
        for zero in (0, 3):
            if frameworks.family(fw) in ("fsdp2", "torchtitan") or zero == 0:
                ParallelDims(dp=8, zero_stage=zero, framework=fw)


def test_zero3_gather_fields_refused_from_a_config_file(tmp_path, capsys):
    from ringccl.cli.app import main
    toml = tmp_path / "plan.toml"
    toml.write_text('model = "llama3-8b"\ngpus = 64\n[layout]\nzero_stage = 1\n'
                    'zero3_gather = "parameter"\n')
    assert main(["plan", "--config", str(toml)]) == 2
    assert "zero3_gather='parameter' applies to zero_stage 3" in capsys.readouterr().err


def test_sequence_parallelism_without_tp_is_turned_off_with_a_note():
    """Megatron-LM turns --sequence-parallel off with a warning when tp = 1
    (megatron/training/arguments.py): the plan does the same and says so."""
    d = ParallelDims(dp=8, sp=True)
    assert d.sp is False and "sp" not in d.from_preset
    assert len(d.notes) == 1 and d.notes[0].startswith("sp=True is ignored with tp=1")
    assert "megatron/training/arguments.py" in d.notes[0]
    assert d.for_model(GQA).notes == d.notes
    p = plan(GQA, {"dp": 8, "sp": True, "global_batch_size": 8}, node())
    assert d.notes[0] in p.notes and d.notes[0] in p.to_dict()["notes"]
    assert p.dims.describe().startswith("dp=8 tp=1 pp=1")
    # with TP, or off, or from a preset: nothing to say
    assert ParallelDims(dp=4, tp=2, sp=True).notes == ()
    assert ParallelDims(dp=8, sp=False).notes == ()
    assert all(ParallelDims(dp=8, framework=fw).notes == () for fw in frameworks.FRAMEWORKS)
    # the layout given again (replace) says it again, or not, as its own tp decides
    assert d.replace(dp=4).notes == d.notes and d.replace(dp=4).sp is False
    with_tp = d.replace(tp=2, dp=4)
    assert with_tp.sp is True and with_tp.notes == ()
    assert d.replace(sp=False).notes == ()


def test_sequence_parallelism_note_on_the_command_line(capsys):
    from ringccl.cli.app import main
    assert main(["plan", "--model", "llama3-8b", "--gpus", "64", "--tp", "1", "--sp"]) == 0
    out = capsys.readouterr().out
    assert "note: sp=True is ignored with tp=1" in out
    assert "tp=1+sp" not in out
