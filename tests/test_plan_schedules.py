"""Pipeline schedules: the closed forms of ringccl.planner.pipeline against their papers, the
schedule simulator (ringccl.planner.timeline) against the closed forms, their refusals, and a
step planned with each."""

from __future__ import annotations

import pytest

from ringccl.errors import ArgumentError
from ringccl.planner import Cluster, ModelConfig, plan
from ringccl.planner.pipeline import (SCHEDULE_NAMES, bubble_seconds, check_schedule,
                                      in_flight_micro_batches, passes_per_step,
                                      pipeline_bubble_fraction, pipeline_seconds)
from ringccl.planner.timeline import rank_orders, simulate

CASES = [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 8, 24, 1), ("interleaved", 4, 8, 2),
         ("interleaved", 4, 12, 3), ("interleaved", 4, 4, 2), ("zb-h1", 4, 8, 1),
         ("zb-h1", 8, 32, 1), ("zb-h2", 4, 8, 1), ("zb-h2", 8, 15, 1), ("dualpipe", 8, 20, 1),
         ("dualpipe", 16, 120, 1), ("dualpipe", 4, 8, 1), ("dualpipev", 4, 10, 2),
         ("dualpipev", 8, 16, 2), ("dualpipev", 3, 6, 2)]


def _equal_times(p, f=1.0, b=1.0, w=1.0):
    return [(f, b, w)] * p


# -- the papers' formulas ------------------------------------------------------------------

def test_zb_h1_bubble_is_a_third_of_1f1b_at_the_same_memory():
    # Qi et al. 2024 §2.1: with T_F = T_B = T_W, ZB-H1's bubble (p-1)(T_F+T_B-T_W) is a third
    # of 1F1B's (p-1)(T_F+T_B+T_W), and its peak in-flight activations are 1F1B's (p·M_B)
    for p, m in ((4, 8), (8, 32), (16, 64)):
        one = bubble_seconds("1f1b", pp=p, forward=1, backward_input=1, backward_weight=1)
        zb = bubble_seconds("zb-h1", pp=p, forward=1, backward_input=1, backward_weight=1)
        assert one == 3 * (p - 1) and zb == pytest.approx(one / 3)
        assert [in_flight_micro_batches(schedule="zb-h1", pp=p, stage=r, num_micro_batches=m)
                for r in range(p)] == [in_flight_micro_batches(
                    schedule="1f1b", pp=p, stage=r, num_micro_batches=m) for r in range(p)]
        assert pipeline_bubble_fraction(schedule="zb-h1", pp=p, num_micro_batches=m) == \
            pytest.approx(pipeline_bubble_fraction(schedule="1f1b", pp=p,
                                                   num_micro_batches=m) / 3)


def test_zb_h2_is_zero_bubble_with_2p_minus_1_in_flight():
    # Qi et al. §2.2: (p-1)(T_F+T_B-2T_W) = 0 at equal times, peak memory (2p-1)·M_B
    for p in (2, 4, 8):
        assert bubble_seconds("zb-h2", pp=p, forward=1, backward_input=1,
                              backward_weight=1) == 0
        assert in_flight_micro_batches(schedule="zb-h2", pp=p, stage=0,
                                       num_micro_batches=4 * p) == 2 * p - 1
    # W shorter than (F + B)/2 leaves a bubble of (p-1)(F+B-2W)
    assert bubble_seconds("zb-h2", pp=4, forward=1, backward_input=1.2,
                          backward_weight=0.8) == pytest.approx(3 * 0.6)


def test_dualpipe_bubble_and_memory_per_deepseek_v3_table_2():
    # DeepSeek-V3 Table 2: bubble (PP/2-1)(F&B + B - 3W) with B the full backward and F&B the
    # overlapped pair (compute F + B); parameters 2x; activations PP + 1 stages per device
    f, b, w = 1.0, 1.0, 1.0                 # one stage's forward, input and weight backward
    full = b + w
    for p in (4, 8, 16):
        table = (p / 2 - 1) * ((f + full) + full - 3 * w)
        # a DualPipe pass carries two micro-batches, each through one of the rank's two stages
        got = bubble_seconds("dualpipe", pp=p, forward=2 * f, backward_input=2 * b,
                             backward_weight=2 * w)
        assert got == pytest.approx(table)
        assert in_flight_micro_batches(schedule="dualpipe", pp=p, stage=0,
                                       num_micro_batches=2 * p) * 2 == p + 1
    # DualPipeV: the same table with PP = 2p stages on p ranks, 2p + 1 chunk-activations
    for p in (4, 8):
        table = (2 * p / 2 - 1) * ((f + full) + full - 3 * w)
        assert bubble_seconds("dualpipev", pp=p, forward=2 * f, backward_input=2 * b,
                              backward_weight=2 * w) == pytest.approx(table)
        assert in_flight_micro_batches(schedule="dualpipev", pp=p, stage=1,
                                       num_micro_batches=2 * p) * 2 == 2 * p + 1


def test_megatron_bubbles_unchanged():
    # Narayanan et al. 2021 §2.2: (p-1)/m and (p-1)/(v·m) whatever F, B, W
    assert pipeline_bubble_fraction(schedule="1f1b", pp=4, num_micro_batches=8, forward=2,
                                    backward_input=1, backward_weight=0.5) == 3 / 8
    assert pipeline_bubble_fraction(schedule="interleaved", pp=4, num_micro_batches=8,
                                    virtual_stages=2) == 3 / 16


def test_unequal_stages_keep_1f1b_formula():
    # the slowest stage paces the passes; the fill and drain go through the others
    stages = [(1.0, 1.0, 1.0), (2.0, 1.5, 1.5), (1.0, 1.0, 1.0)]
    total, bubble = pipeline_seconds("1f1b", num_micro_batches=6, virtual_stages=1,
                                     stages=stages)
    assert bubble == pytest.approx(3 + 3) and total == pytest.approx(6 * 5 + 6)


# -- the simulator runs each schedule's order and reproduces the closed forms -------------

@pytest.mark.parametrize("name, p, m, v", CASES)
def test_simulated_bubble_and_memory_equal_the_closed_forms(name, p, m, v):
    t = simulate(name, pp=p, num_micro_batches=m, virtual_stages=v, times=_equal_times(p))
    closed = bubble_seconds(name, pp=p, virtual_stages=v, forward=1, backward_input=1,
                            backward_weight=1)
    assert max(t.idle(r) for r in range(p)) == pytest.approx(closed, abs=1e-9)
    # every rank does its own work once: m passes (m/2 DualPipe pairs) of F + B + W
    for r in range(p):
        assert t.busy(r) == pytest.approx(3 * passes_per_step(name, m))
    # peak in-flight chunks, over the chunks per rank, is the formula's
    chunks = v if name == "interleaved" else 2 if name.startswith("dualpipe") else 1
    for r in range(p):
        expect = in_flight_micro_batches(schedule=name, pp=p, stage=r, num_micro_batches=m,
                                         virtual_stages=v)
        assert t.peak_in_flight(r) / chunks == pytest.approx(expect)


@pytest.mark.parametrize("name, f, b, w", [("zb-h1", 1, 1.2, 0.8), ("zb-h1", 2, 1, 1),
                                           ("zb-h2", 1, 1.2, 0.8), ("zb-h2", 1, 1.5, 1),
                                           ("1f1b", 2, 1, 0.5)])
def test_split_backward_formulas_hold_for_unequal_passes(name, f, b, w):
    p, m = 8, 32
    t = simulate(name, pp=p, num_micro_batches=m, times=_equal_times(p, f, b, w))
    assert t.idle(0) == pytest.approx(bubble_seconds(name, pp=p, forward=f, backward_input=b,
                                                     backward_weight=w))


def test_orders_run_every_pass_once():
    for name, p, m, v in CASES:
        orders, _ = rank_orders(name, p, m, v)
        for ops in orders:
            parts = [x for op in ops for x in op]
            fwd = [x for x in parts if x[0] == "F"]
            chunks = {"interleaved": v, "dualpipev": 2}.get(name, 1)
            assert len(fwd) == len(set(fwd)) == m * chunks
            # each F has its backward: one BW, or one B and one W
            back = sorted(x[1:] for x in parts if x[0] in ("B", "BW"))
            assert back == sorted(x[1:] for x in fwd)
            split = sorted(x[1:] for x in parts if x[0] == "B")
            assert sorted(x[1:] for x in parts if x[0] == "W") == split
            assert bool(split) == name.startswith(("zb", "dualpipe"))


def test_p2p_latency_lengthens_the_fill():
    base = simulate("1f1b", pp=4, num_micro_batches=8, times=_equal_times(4))
    slow = simulate("1f1b", pp=4, num_micro_batches=8, times=_equal_times(4), p2p_seconds=0.1)
    assert slow.makespan > base.makespan


# -- refusals ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(schedule="dualpipe", pp=5, num_micro_batches=20),
     r"pp=5 is odd: dualpipe needs an even number of pipeline ranks \(DeepSeek-V3 §3.2.1"),
    (dict(schedule="dualpipe", pp=4, num_micro_batches=9),
     r"num_micro_batches=9 is odd: dualpipe feeds half the micro-batches from each end"),
    (dict(schedule="dualpipe", pp=8, num_micro_batches=10),
     r"num_micro_batches=10 is too few for dualpipe at pp=8: it needs at least 2·pp = 16"),
    (dict(schedule="dualpipev", pp=4, num_micro_batches=6, virtual_stages=2),
     r"num_micro_batches=6 is too few for dualpipev at pp=4"),
    (dict(schedule="dualpipev", pp=4, num_micro_batches=8, virtual_stages=3),
     r"virtual_stages=3: dualpipev holds exactly 2 chunks per rank"),
    (dict(schedule="zb-h2", pp=4, num_micro_batches=6),
     r"num_micro_batches=6 is too few for zb-h2 at pp=4: its warm-up runs 2·pp − 1 = 7"),
    (dict(schedule="zb-h1", pp=4, num_micro_batches=8, virtual_stages=2),
     r"virtual_stages=2 needs schedule='interleaved' \(got 'zb-h1'\)"),
    (dict(schedule="interleaved", pp=4, num_micro_batches=6, virtual_stages=2),
     r"num_micro_batches=6 must be a multiple of pp=4"),
    (dict(schedule="zb", pp=4, num_micro_batches=8), r"schedule='zb' is not one of"),
])
def test_schedule_refusals(kwargs, message):
    with pytest.raises(ArgumentError, match=message):
        check_schedule(**kwargs)


# -- a step with each schedule ---------------------------------------------------------------

MODEL = ModelConfig(num_hidden_layers=16, hidden_size=2048, num_attention_heads=16,
                    intermediate_size=5632, vocab_size=32000, seq_length=2048, name="m16")


def _node(nodes):
    return Cluster(nodes=nodes, gpus_per_node=8, intra_bandwidth="450GB/s",
                   inter_bandwidth="400Gbps")


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_each_schedule_plans_and_its_timeline_matches(name):
    layout = {"pp": 4, "dp": 2, "tp": 2, "global_batch_size": 32, "schedule": name}
    if name == "interleaved":
        layout["virtual_stages"] = 2
    p = plan(MODEL, layout, _node(2))
    t = p.timeline()
    assert t is not None and len(t.passes) == 4
    # the simulated step and the closed form agree within the spread of unequal stages
    assert t.makespan == pytest.approx(p.pipeline_seconds, rel=0.1)
    assert p.bubble_seconds >= 0


def test_zero_bubble_and_dualpipe_beat_1f1b_in_a_step():
    base = {"pp": 4, "dp": 2, "tp": 2, "global_batch_size": 32}
    one = plan(MODEL, {**base, "schedule": "1f1b"}, _node(2))
    zb1 = plan(MODEL, {**base, "schedule": "zb-h1"}, _node(2))
    zb2 = plan(MODEL, {**base, "schedule": "zb-h2"}, _node(2))
    assert zb2.bubble_seconds < zb1.bubble_seconds < one.bubble_seconds
    # ZB-H1 keeps 1F1B's memory, ZB-H2 pays for its warm-up
    assert zb1.stages[0].memory.activations == one.stages[0].memory.activations
    assert zb2.stages[0].memory.activations > one.stages[0].memory.activations


def test_dualpipe_holds_two_stages_and_all_reduces_them_with_its_mirror():
    base = {"pp": 4, "dp": 2, "tp": 2, "global_batch_size": 32}
    one = plan(MODEL, {**base, "schedule": "1f1b"}, _node(2))
    dual = plan(MODEL, {**base, "schedule": "dualpipe"}, _node(2))
    # rank 1 holds stages 1 and 2: twice the layers' weights of a 1F1B rank
    assert dual.stages[1].shape.layers == 2 * one.stages[1].shape.layers
    assert dual.stages[1].memory.weights == pytest.approx(2 * one.stages[1].memory.weights,
                                                          rel=0.01)
    mirror = [e for e in dual.stages[1].entries if e.group == "pp_mirror"]
    assert mirror and mirror[0].collective == "all_reduce" and mirror[0].shape.size == 2
    assert {r // 4 for r in mirror[0].shape.example} == {1, 2}     # stages 1 and pp - 1 - 1
    # the same compute per step: m/2 passes through twice the layers
    assert dual.stages[1].compute_per_micro_batch * 8 == pytest.approx(
        one.stages[1].compute_per_micro_batch * 16, rel=1e-9)
