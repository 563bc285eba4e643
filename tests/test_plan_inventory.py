"""The textbook statements about DDP, TP and ZeRO traffic (Rajbhandari et al. 2020 §7; Shoeybi
et al. 2019 §3) hold in the planner's inventory, and every inventory's bytes are what the
simulator counts for the same collective and group."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ringccl
from ringccl.collectives import get_collective
from ringccl.costmodel.topology import two_level
from ringccl.planner import Cluster, ModelConfig, Straggler, estimate_step
from ringccl.planner import context, inventory

#: those statements are about PyTorch DDP, Megatron TP without SP and 2-byte gradients:
#: these fields, unless a test gives its own, instead of the Megatron preset's distributed
#: optimizer, SP and fp32 gradient reduction
TEXTBOOK = {"sp": False, "zero_stage": 0, "reduce_dtype": "bfloat16"}


def plan(model, layout, cluster, **kw):
    return ringccl.planner.plan(model, {**TEXTBOOK, **layout}, cluster, **kw)

# a 4-layer model of Llama-2-7B's width: activations of 32 MiB, so the tuner picks
# bandwidth-optimal algorithms (at a few hundred KiB a one-step direct all-reduce wins, and it
# sends (N-1)·M per rank: the textbook 2(N-1)/N is a statement about those algorithms)
SMALL = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                    num_key_value_heads=8, intermediate_size=11008, vocab_size=32000,
                    seq_length=4096, name="small")
SMALL_MOE = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                        num_key_value_heads=8, intermediate_size=11008, vocab_size=32000,
                        num_local_experts=8, num_experts_per_tok=2, seq_length=4096,
                        name="small-moe")


def node(nodes=1, **kw):
    # these tests state the textbook identities about ringccl's own schedules (ring,
    # hierarchical): price the what-if, not NCCL's choice
    kw.setdefault("collectives", "ringccl")
    return Cluster(nodes=nodes, gpus_per_node=8, intra_bandwidth="450GB/s",
                   inter_bandwidth="400Gbps", **kw)


def rows(p, parallelism, collective=None, phase=None, stage=0):
    return [e for e in p.stages[stage].entries if e.parallelism == parallelism
            and (collective is None or e.collective == collective)
            and (phase is None or e.phase == phase)]


def calls(p, parallelism, collective, phase, stage=0):
    return sum(e.calls_per_micro_batch for e in rows(p, parallelism, collective, phase, stage))


def test_megatron_tp_two_all_reduces_per_layer_each_way():
    # the first stage adds one all-reduce after its vocab-parallel embedding, so compare a
    # 4-layer and an 8-layer model: 4 more layers, 8 more all-reduces each way
    small = plan(SMALL, {"tp": 8}, node())
    deep = plan(SMALL.__class__(**{**SMALL.__dict__, "num_hidden_layers": 8}), {"tp": 8},
                node())
    for phase in ("forward", "backward"):
        assert calls(deep, "tp", "all_reduce", phase) - calls(small, "tp", "all_reduce",
                                                               phase) == 2 * 4
    # + the embedding's output forward, + the LM head's input gradient backward
    assert calls(small, "tp", "all_reduce", "forward") == 2 * 4 + 1
    assert calls(small, "tp", "all_reduce", "backward") == 2 * 4 + 1
    # full recompute repeats the layers' forward two in the backward
    full = plan(SMALL, {"tp": 8, "recompute": "full"}, node())
    assert calls(full, "tp", "all_reduce", "backward") == 4 * 4 + 1


def test_embedding_and_lm_head_collectives_sit_on_their_own_stages():
    # two stages of two layers: the vocab-parallel embedding's reduction is the first stage's
    # (forward; under SP its scatter's gradient gathered backward), the LM head's the last's
    # (Megatron-LM parallel_lm_logits: its input's gradient all-reduced backward; under SP its
    # input gathered forward, its input gradient reduce-scattered backward)
    layout = {"tp": 8, "pp": 2, "num_micro_batches": 2}
    tp = plan(SMALL, layout, node(2))
    assert [calls(tp, "tp", "all_reduce", "forward", s) for s in (0, 1)] == [2 * 2 + 1, 2 * 2]
    assert [calls(tp, "tp", "all_reduce", "backward", s) for s in (0, 1)] == [2 * 2, 2 * 2 + 1]
    sp = plan(SMALL, {**layout, "sp": True, "overlap_dgrad_reduce": False}, node(2))
    got = {(c, ph): [calls(sp, "sp", c, ph, s) for s in (0, 1)]
           for c in ("all_gather", "reduce_scatter") for ph in ("forward", "backward")}
    assert got == {("all_gather", "forward"): [2 * 2 + 1, 2 * 2 + 1],
                   ("reduce_scatter", "forward"): [2 * 2 + 1, 2 * 2],
                   ("all_gather", "backward"): [2 * 2 + 1, 2 * 2],
                   ("reduce_scatter", "backward"): [2 * 2, 2 * 2 + 1]}


def test_sp_replaces_each_all_reduce_with_all_gather_plus_reduce_scatter_of_equal_bytes():
    # one micro-batch: calls per step are calls per micro-batch; Korthikanti et al. 2022
    # §4.2.2's identity, without Megatron's re-gather of the column-parallel input
    layout = {"tp": 8, "num_micro_batches": 1, "overlap_dgrad_reduce": False}
    tp = plan(SMALL, layout, node())
    sp = plan(SMALL, {**layout, "sp": True}, node())
    assert not rows(sp, "tp")
    # the layers' and the LM head's backward, and the embedding's all-reduce (counted as an
    # all-gather + a reduce-scatter), pair up; the LM head's forward gather has no pair
    for phase, unpaired in (("forward", 1), ("backward", 0)):
        ag, rs = (calls(sp, "sp", c, phase) for c in ("all_gather", "reduce_scatter"))
        assert ag == rs + unpaired
    # bytes of the layers' collectives: equal (2(N-1)/N M = (N-1)/N M + (N-1)/N M)
    ar_bytes = sum(e.bytes_sent_per_call for e in rows(tp, "tp", phase="backward")) * 8
    sp_bytes = sum(e.bytes_sent_per_call for e in rows(sp, "sp", phase="backward")) * 8
    assert sp_bytes == pytest.approx(ar_bytes, rel=1e-12)
    ar = rows(tp, "tp", phase="backward")[0]
    assert ar.calls_per_step == calls(sp, "sp", "all_gather", "backward")
    # Megatron's implementation keeps only the input's sequence shard and gathers it again
    # for the weight gradients: one more all-gather per column-parallel layer, behind the
    # input-gradient GEMM (megatron/core/tensor_parallel/layers.py)
    megatron = plan(SMALL, {**layout, "sp": True, "overlap_dgrad_reduce": True}, node())
    again = [e for e in rows(megatron, "sp", "all_gather", "backward")
             if e.overlap == "input gradients"]
    assert len(again) == 1 and again[0].calls_per_step == ar.calls_per_step


def test_zero3_moves_one_and_a_half_times_ddp_bytes():
    # one micro-batch per step: ZeRO §7.2 counts one forward and backward per reduction
    ddp = plan(SMALL, {"dp": 16, "num_micro_batches": 1}, node(2))
    z3 = plan(SMALL, {"dp": 16, "zero_stage": 3, "num_micro_batches": 1}, node(2))
    b_ddp = sum(e.bytes_sent_per_step for e in rows(ddp, "dp"))
    b_z3 = sum(e.bytes_sent_per_step for e in rows(z3, "zero"))
    assert b_z3 / b_ddp == pytest.approx(1.5, rel=1e-12)          # 3Ψ against 2Ψ
    kinds = sorted((e.collective, e.phase) for e in rows(z3, "zero"))
    assert kinds == [("all_gather", "backward"), ("all_gather", "forward"),
                     ("reduce_scatter", "backward")]
    z1 = plan(SMALL, {"dp": 16, "zero_stage": 1}, node(2))
    assert sorted(e.collective for e in rows(z1, "zero")) == ["all_gather", "reduce_scatter"]


@pytest.mark.parametrize("layout", [{"dp": 8}, {"dp": 16}, {"tp": 8, "dp": 2}, {"dp": 32}])
def test_all_reduce_bytes_per_rank_are_2_n_minus_1_over_n_of_the_buffer(layout):
    p = plan(SMALL, layout, node(4 if layout.get("dp") == 32 else
                                 2 if layout.get("dp", 1) * layout.get("tp", 1) == 16 else 1))
    ars = [e for s, e in p.entries() if e.collective == "all_reduce"]
    assert ars
    for e in ars:
        n = e.shape.size
        assert e.bytes_sent_per_call == pytest.approx(2 * (n - 1) / n * e.nbytes, rel=1e-12)


def test_hierarchical_inter_node_bytes_on_128x8_are_the_flat_rings_over_local_size():
    cluster = ringccl.planner.cluster_preset("two-level-128x8", collectives="ringccl")
    model = ringccl.planner.PRESETS["llama3-8b"]
    # one bucket of all 16 GB of gradients: the question's big buffer
    p0 = plan(model, {"dp": 1024, "global_batch_size": 1024, "bucket_bytes": "16GB"}, cluster)
    ar = rows(p0, "dp", "all_reduce")[0]
    assert ar.algorithm == "hierarchical" and ar.shape.nodes_spanned == 128
    n, nodes, local, m = 1024, 128, 8, ar.nbytes
    topo = two_level(128, 8, ("2us", "900GB/s"), ("5us", "50GB/s"))
    ring = ringccl.cost("all_reduce", "ring", None, m, topo)
    # flat ring: the node-crossing rank sends 2(N-1)/N M through its NIC
    assert ring.max_link_bytes["nic out"] == pytest.approx(2 * (n - 1) / n * m, rel=1e-9)
    # hierarchical: each of the 8 rail rings carries M/8 over 128 nodes
    assert ar.inter_node_bytes_per_call == pytest.approx(2 * (nodes - 1) / nodes * m / local,
                                                         rel=1e-9)
    ratio = ring.max_link_bytes["nic out"] / ar.inter_node_bytes_per_call
    assert ratio == pytest.approx(local * (1 - 1 / n) / (1 - 1 / nodes), rel=1e-9)  # ≈ 8
    assert ar.seconds_per_call < ar.ring_seconds_per_call
    assert ar.ring_seconds_per_call == pytest.approx(ring.seconds, rel=1e-9)


def test_pipeline_bubble_and_interleaving():
    m = {"global_batch_size": 8, "micro_batch_size": 1}
    one = plan(SMALL, {"pp": 4, "dp": 2, **m}, node())
    inter = plan(SMALL.__class__(**{**SMALL.__dict__, "num_hidden_layers": 8}),
                 {"pp": 4, "dp": 2, "schedule": "interleaved", "virtual_stages": 2, **m}, node())
    assert one.dims.num_micro_batches == 4
    assert one.bubble_fraction == pytest.approx(3 / 4)
    assert inter.bubble_fraction == pytest.approx(3 / 8)
    assert one.bubble_seconds > 0
    pp = rows(one, "pp", stage=1)[0]
    assert pp.collective == "send_recv" and pp.calls_per_micro_batch == 2


def test_moe_two_all_to_alls_per_moe_layer_each_way():
    p = plan(SMALL_MOE, {"dp": 8, "ep": 8}, node())
    for phase in ("forward", "backward"):
        assert calls(p, "ep", "all_to_all", phase) == 2 * 4
    assert all(e.overlap == "expert compute" for e in rows(p, "ep"))
    # expert gradients are reduced over dp / ep ranks: 1 here, so only dense gradients move
    assert [e.what for e in rows(p, "dp")] == ["dense gradients (DDP buckets)"]


def test_straggler_paces_the_ring():
    cluster = node(4)
    base = plan(SMALL, {"dp": 32}, cluster)
    slow = plan(SMALL, {"dp": 32}, cluster, straggler=Straggler(rank=3, fraction=0.1))
    a, b = rows(base, "dp")[0], rows(slow, "dp")[0]
    assert b.seconds_per_call > a.seconds_per_call
    assert slow.step_seconds > base.step_seconds
    with pytest.raises(ringccl.ArgumentError, match="straggler fraction"):
        Straggler(rank=3, fraction=0)
    with pytest.raises(ringccl.ArgumentError, match="straggler rank=99"):
        plan(SMALL, {"dp": 32}, cluster, straggler=(99, 0.5))


def test_to_dict_is_strict_json():
    p = plan(SMALL_MOE, {"dp": 4, "ep": 2, "tp": 2, "sp": True, "pp": 2, "cp": 1,
                         "global_batch_size": 16}, node(2))
    text = json.dumps(p.to_dict(), allow_nan=False)
    back = json.loads(text)
    assert back["summary"]["step_s"] == p.step_seconds
    assert {c["parallelism"] for s in back["stages"] for c in s["collectives"]} >= {
        "sp", "ep", "pp", "dp"}


def _simulated_bytes(entry) -> float:
    """The busiest rank's bytes as ringccl.simulate counts them, scaled to the entry's size."""
    collective = "broadcast" if entry.collective == "send_recv" else entry.collective
    params = dict(entry.params)
    extra = {"src": params.pop("root")} if "root" in params else {}
    n = entry.shape.size
    sched = ringccl.schedule(collective, entry.algorithm, n, **params)
    count = n * sched.num_chunks * 2          # every chunk the same size
    x = np.arange(n * count, dtype=np.int64).reshape(n, count)
    r = ringccl.simulate(collective, x, algorithm=entry.algorithm, **extra, **params)
    total = get_collective(collective).buffer_count(n, count) * x.itemsize
    return float(r.stats.bytes_sent.max()) * entry.nbytes / total


def test_inventory_bytes_agree_with_the_simulator():
    plans = [plan(SMALL, {"tp": 8}, node()), plan(SMALL, {"tp": 4, "sp": True, "dp": 4},
                                                  node(2)),
             plan(SMALL_MOE, {"dp": 8, "ep": 8, "zero_stage": 3}, node()),
             plan(SMALL, {"pp": 2, "dp": 8, "global_batch_size": 16, "zero_stage": 1},
                  node(2)),
             plan(SMALL, {"dp": 64}, node(8))]
    seen = set()
    for p in plans:
        for _, e in p.entries():
            key = (e.collective, e.algorithm, e.shape.size, tuple(sorted(e.params.items())))
            if key in seen:
                continue
            seen.add(key)
            assert _simulated_bytes(e) == pytest.approx(e.bytes_sent_per_call, rel=1e-12), key
    assert {k[0] for k in seen} >= {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                    "send_recv"}
    assert "hierarchical" in {k[1] for k in seen}


DEEP = ModelConfig(num_hidden_layers=12, hidden_size=1024, num_attention_heads=16,
                   num_key_value_heads=4, intermediate_size=2816, vocab_size=32000,
                   seq_length=1024, name="deep")
DEEP_MOE = ModelConfig(num_hidden_layers=10, hidden_size=1024, num_attention_heads=16,
                       intermediate_size=2816, vocab_size=32000, num_local_experts=8,
                       num_experts_per_tok=2, first_k_dense_replace=1, seq_length=1024,
                       tie_word_embeddings=True, name="deep-moe")


@pytest.mark.parametrize("model, layout, nodes, straggler", [
    (DEEP, {"pp": 8, "dp": 4, "tp": 2, "global_batch_size": 32}, 8, None),   # uneven layers
    (DEEP, {"pp": 4, "dp": 4, "tp": 2, "sp": True, "schedule": "interleaved",
            "virtual_stages": 3, "global_batch_size": 16, "zero_stage": 1}, 4, None),
    (DEEP, {"pp": 4, "dp": 8, "global_batch_size": 32}, 4, (9, 0.25)),       # straggler
    # pp fastest: a node holds ranks of several stages, none is a shift of another by nodes
    (DEEP, {"pp": 4, "dp": 8, "global_batch_size": 32, "order": "pp-tp-cp-ep-dp"}, 4, None),
    (DEEP_MOE, {"pp": 5, "dp": 8, "ep": 4, "global_batch_size": 40, "zero_stage": 2}, 5,
     None),
])
def test_stages_planned_once_equal_every_stage_planned(model, layout, nodes, straggler):
    """Stages alike in layers, role and placement are planned once: the plan's every field,
    memory and collective included, is what planning each stage on its own gives."""
    cfg, dims = ringccl.planner.resolve_model(model), ringccl.planner.resolve_dims(layout)
    slow = None if straggler is None else Straggler(*straggler)
    shared = estimate_step(cfg, dims, node(nodes), slow).to_dict()
    ringccl.clear_caches()
    each = estimate_step(cfg, dims, node(nodes), slow, share_stages=False).to_dict()
    assert json.dumps(shared, sort_keys=True) == json.dumps(each, sort_keys=True)
    assert len({json.dumps(s["collectives"]) for s in shared["stages"]}) == len(
        shared["stages"])   # every stage's example ranks are its own


def test_the_split_flags_are_part_of_the_inventory_memo_key():
    """A plan whose embedding / loss take a layer's place in the split holds other layers on
    its first and last stages: planned after the same layout without them, it is what it is
    planned alone (the builders' memo key carries both flags)."""
    cfg = ringccl.planner.resolve_model(DEEP)
    lay = {"pp": 4, "dp": 2, "tp": 2, "global_batch_size": 16}
    split = ringccl.planner.resolve_dims({**lay, "account_for_embedding_in_pipeline_split": True,
                                          "account_for_loss_in_pipeline_split": True})
    ringccl.clear_caches()
    alone = estimate_step(cfg, split, node(2)).to_dict()
    ringccl.clear_caches()
    estimate_step(cfg, ringccl.planner.resolve_dims(lay), node(2))
    after = estimate_step(cfg, split, node(2)).to_dict()
    assert [s["layers"] for s in after["stages"]] == [3, 4, 3, 2]   # 14 slots: 4, 4, 3, 3
    assert json.dumps(after, sort_keys=True) == json.dumps(alone, sort_keys=True)


def test_one_plan_lays_out_its_ranks_and_stages_once(monkeypatch):
    """The rank grid and the stage shapes are derived once per plan (in its StepContext) and
    read by the inventory, the step and the memory; every stage's entries are its builders'
    rows, in BUILDERS order."""
    seen = {"rank_grid": 0, "stage_shapes": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            seen[name] += 1
            return fn(*args, **kwargs)
        return wrapper
    for name in seen:
        monkeypatch.setattr(context, name, counted(name, getattr(context, name)))
    dims = {"pp": 4, "dp": 2, "tp": 2, "global_batch_size": 16, "order": "pp-tp-cp-ep-dp"}
    p = plan(SMALL, dims, node(2))
    assert seen == {"rank_grid": 1, "stage_shapes": 1}
    ctx = context.step_context(p.model, p.dims, p.cluster)
    for s in p.stages:
        built = [e for build in inventory.BUILDERS for e in build(ctx, ctx.stages[s.stage])]
        assert [e.to_dict() for e in built] == [e.to_dict() for e in s.entries]
        assert s.shape == ctx.stages[s.stage]


def test_ringccl_pricing_refuses_a_group_too_large_to_walk(monkeypatch, capsys):
    """collectives='ringccl' walks each schedule step by step (about N(N - 1) transfers over N
    ranks): a data-parallel group beyond WALK_MAX_RANKS is refused in one line naming the
    option, the group and its size, and the default pricing that takes it, before any
    schedule of that group is built."""
    from ringccl.cli.app import main
    from ringccl.planner import costing

    limit = costing.WALK_MAX_RANKS
    real = costing._choice

    def guarded(collective, placement, *args):
        assert len(placement) <= limit, "a group beyond the limit was walked"
        return real(collective, placement, *args)
    monkeypatch.setattr(costing, "_choice", guarded)
    n = 2 * limit
    code = main(["plan", "--model", "llama3-8b", "--tp", "1", "--dp", str(n), "--nodes",
                 str(n // 8), "--collectives", "ringccl", "--zero", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert "--collectives" in line and f"dp group's {n:,} ranks" in line
    assert f"{n * (n - 1):,} transfers" in line and "--collectives nccl" in line
    # the same layout under the default pricing plans
    assert main(["plan", "--model", "llama3-8b", "--tp", "1", "--dp", str(n), "--nodes",
                 str(n // 8), "--zero", "3", "--json"]) == 0
