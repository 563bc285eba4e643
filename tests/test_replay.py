"""The step file (``ringccl plan --emit``) and the replay's mapping and re-prediction,
without processes: the schema and its refusals, the groups kept on 4 local processes, the
byte scaling, and the fit-then-predict on rows made from known α, β, γ."""

import json

import numpy as np
import pytest

import ringccl
from ringccl.algorithms import REGISTRY, get_algorithm
from ringccl.errors import ArgumentError
from ringccl.planner.emit import (STEP_FORMAT, STEP_VERSION, load_step_file, replay_calls,
                                  step_file, write_step_file)
from ringccl.planner.replay import (CALIBRATION_MIN_BYTES, calibration_sweeps, repredict,
                                    simulated_bytes)

CLUSTER = {"preset": "dgx-h100", "nodes": 1, "gpus_per_node": 4}
# DDP's all-reduce and plain TP (the Megatron preset would run its distributed optimizer and SP)
DENSE = ("llama3-8b", {"dp": 2, "tp": 2, "sp": False, "zero_stage": 0})
MOE = ("mixtral-8x7b", {"dp": 4, "ep": 4})


def _plan(which):
    model, layout = which
    return ringccl.plan(model, layout, CLUSTER)


@pytest.fixture
def dense_file(tmp_path):
    return write_step_file(_plan(DENSE), tmp_path / "dense.json")


def test_step_file_lists_every_collective_in_order():
    p = _plan(DENSE)
    d = step_file(p)
    assert d["format"] == STEP_FORMAT and d["version"] == STEP_VERSION
    assert d["world_size"] == 4
    entries = p.entries()
    assert [c["order"] for c in d["collectives"]] == list(range(len(entries)))
    for c, (stage, e) in zip(d["collectives"], entries):
        assert (c["stage"], c["collective"], c["group"], c["nbytes"], c["calls_per_step"],
                c["priced_as"]) == (stage, e.collective, e.group, e.nbytes, e.calls_per_step,
                                    e.algorithm)
        # NCCL's choice (priced_as, "ring/Simple") is replayed by the ringccl schedule that
        # stands for it
        coll = "broadcast" if c["collective"] == "send_recv" else c["collective"]
        assert (coll, c["algorithm"]) in REGISTRY
        assert c["group_ranks"] == list(e.shape.example)
    json.dumps(d, allow_nan=False)  # strict JSON


def test_load_refuses_another_version(dense_file, tmp_path):
    data = json.loads(open(dense_file).read())
    data["version"] = STEP_VERSION + 1
    bad = tmp_path / "v2.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ArgumentError, match=rf"version {STEP_VERSION + 1}.*reads version "
                       rf"{STEP_VERSION} only"):
        load_step_file(bad)


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(format="other"), "not a ringccl step file"),
    (lambda d: d["collectives"][0].pop("nbytes"), r"collectives\[0\]\.nbytes"),
    (lambda d: d["collectives"][0].update(algorithm="nope"), "not registered"),
    (lambda d: d["collectives"][0].update(group_size=99), "outside a world of 4"),
    (lambda d: d.update(world_size=0), "world_size=0"),
    (lambda d: d["collectives"][0].update(group_ranks=[0, 9]), r"group_ranks=\[0, 9\] must be "
                                                               r"group_size=2 distinct ranks"),
    (lambda d: d["collectives"][0].update(group_ranks=[1, 1]), "distinct ranks in"),
    (lambda d: d["collectives"][0].update(group_ranks=[[0], [1]]), "distinct ranks in"),
    (lambda d: d["collectives"][0].update(nbytes=1e300), "is beyond any collective"),
])
def test_load_refuses_malformed_files(dense_file, tmp_path, edit, match):
    data = json.loads(open(dense_file).read())
    edit(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ArgumentError, match=match):
        load_step_file(bad)


def test_load_refuses_what_is_not_json(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(ArgumentError, match="cannot read it as JSON"):
        load_step_file(bad)


def test_dense_layout_keeps_its_groups_on_4_processes(dense_file):
    rmap = replay_calls(load_step_file(dense_file), 4, 4 << 20)
    groups = {c.group: c.groups for c in rmap.calls}
    assert groups["tp"] == [[0, 1], [2, 3]]   # tp fastest in the rank order
    assert groups["dp"] == [[0, 2], [1, 3]]


def test_moe_layout_keeps_one_ep_group_of_4(tmp_path):
    path = write_step_file(_plan(MOE), tmp_path / "moe.json")
    rmap = replay_calls(load_step_file(path), 4, 4 << 20)
    ep = [c for c in rmap.calls if c.group == "ep"]
    assert ep and all(c.groups == [[0, 1, 2, 3]] and c.collective == "all_to_all" for c in ep)


def test_split_cp_and_hsdp_groups_keep_their_ranks(tmp_path):
    # the step file's grid fields rebuild the split dimensions: Ulysses over cp ranks {0, 1},
    # the ring across; ZeRO-3 shards over pairs of dp ranks, replicated across them
    plan = ringccl.plan("llama3-8b", {"cp": 4, "cp_comm_type": "a2a+p2p",
                                      "hierarchical_context_parallel_sizes": (2, 2),
                                      "zero_stage": 3, "sp": False},
                        {"preset": "dgx-h100", "nodes": 1, "gpus_per_node": 4},
                        seq_length=8192)
    path = write_step_file(plan, tmp_path / "cp.json")
    groups = {c.group: c.groups for c in replay_calls(load_step_file(path), 4, 4 << 20).calls}
    assert groups["cp_a2a"] == [[0, 1], [2, 3]] and groups["cp_p2p"] == [[0, 2], [1, 3]]
    hsdp = ringccl.plan("llama3-8b", {"dp": 4, "zero_stage": 3, "dp_shard": 2},
                        {"preset": "dgx-h100", "nodes": 1, "gpus_per_node": 4})
    path = write_step_file(hsdp, tmp_path / "hsdp.json")
    groups = {c.group: c.groups for c in replay_calls(load_step_file(path), 4, 4 << 20).calls}
    assert groups["dp_shard"] == [[0, 1], [2, 3]] and groups["dp_replicate"] == [[0, 2], [1, 3]]


def test_bytes_scaled_by_one_power_of_two(dense_file):
    step = load_step_file(dense_file)
    rmap = replay_calls(step, 4, 4 << 20)
    largest = max(c["nbytes"] for c in step["collectives"])
    assert rmap.scale < 1 and np.log2(1 / rmap.scale) % 1 == 0
    assert max(c.nbytes for c in rmap.calls) <= 4 << 20
    assert largest * rmap.scale > 2 << 20        # the smallest power that fits
    for c in rmap.calls:                         # every call by the same factor (to elements)
        assert abs(c.nbytes - c.plan_nbytes * rmap.scale) <= 4 * c.group_size
    assert any("scaled by 1/" in n for n in rmap.notes)


def test_other_world_sizes_map_to_blocks(tmp_path):
    plan = ringccl.plan("llama3-8b", {"dp": 4, "tp": 2}, {"preset": "dgx-h100", "nodes": 1})
    rmap = replay_calls(load_step_file(write_step_file(plan, tmp_path / "s.json")), 4, 1 << 20)
    assert {c.group: c.groups for c in rmap.calls} == {"tp": [[0, 1], [2, 3]],
                                                       "dp": [[0, 1, 2, 3]]}
    assert any("8 ranks replayed on 4" in n for n in rmap.notes)


def test_a_pipeline_transfer_runs_from_its_source_in_every_group(tmp_path):
    """A send_recv's root is a position in each local group (its source's, as the step file
    has it in group_ranks), not a global rank: on blocks {0,1} {2,3} both run from their first
    rank; on the plan's own pair it is the source's place in that pair."""
    plan = ringccl.plan("llama3-8b", {"tp": 2, "pp": 2, "dp": 2, "global_batch_size": 16},
                        {"preset": "dgx-h100", "nodes": 1})
    step = load_step_file(write_step_file(plan, tmp_path / "pp.json"))
    pp = [c for c in replay_calls(step, 4, 16 << 10).calls if c.parallelism == "pp"]
    assert pp and all(c.collective == "broadcast" and c.params == {"root": 0}
                      and c.groups == [[0, 1], [2, 3]] for c in pp)
    entry = next(c for c in step["collectives"] if c["collective"] == "send_recv")
    entry["group_ranks"] = entry["group_ranks"][::-1]   # the source is rank 4 of the pair 0, 4
    call = next(c for c in replay_calls(step, 8, 16 << 10).calls if c.order == entry["order"])
    assert call.groups == [[0, 4]] and call.params == {"root": 1}


def test_a_prime_nproc_above_the_group_is_refused_not_replayed_on_single_ranks(tmp_path):
    # 8 ranks (tp 2) on 3 processes: the only divisor of 3 up to 2 is 1, which would make every
    # group one rank (nothing sent, a fit of 0 bytes): refused before anything starts
    plan = ringccl.plan("llama3-8b", {"dp": 4, "tp": 2}, {"preset": "dgx-h100", "nodes": 1})
    step = load_step_file(write_step_file(plan, tmp_path / "s.json"))
    with pytest.raises(ArgumentError, match=r"nproc=3: a group of 2 ranks cannot be laid over 3 "
                                            r"processes .* use an nproc such as 2, 4"):
        replay_calls(step, 3, 1 << 20)
    rmap = replay_calls(step, 6, 1 << 20)   # 6 = 2 x 3: pairs for tp, blocks of 3 for dp
    assert {c.group: c.groups for c in rmap.calls} == {"tp": [[0, 1], [2, 3], [4, 5]],
                                                       "dp": [[0, 1, 2], [3, 4, 5]]}


@pytest.mark.parametrize("nproc,max_bytes,match", [(1, 1 << 20, "nproc=1"),
                                                    (4, 100, "max_bytes=100")])
def test_replay_calls_refuses(dense_file, nproc, max_bytes, match):
    with pytest.raises(ArgumentError, match=match):
        replay_calls(load_step_file(dense_file), nproc, max_bytes)


def _row(collective, algorithm, n, size, seconds, **extra):
    return {"collective": collective, "algorithm": algorithm, "world_size": n, "size": size,
            "time_s": seconds, "kind": "collective", "placement": "in-place", "params": {},
            "backend": "gloo", "wrong": 0, "segment_bytes": None, **extra}


def test_repredict_recovers_known_parameters(dense_file):
    alpha, beta, gamma = 50e-6, 1e-9, 2e-10
    rmap = replay_calls(load_step_file(dense_file), 4, 1 << 20)
    rows = []
    for i, s in enumerate(calibration_sweeps(rmap)):
        algo = get_algorithm(s["collective"], s["algorithm"])
        size = s["min_bytes"]
        while size <= s["max_bytes"]:
            t = algo.time_for(s["group_size"], size, alpha, beta, gamma)
            rows.append(_row(s["collective"], s["algorithm"], s["group_size"], size, t,
                             replay={"calibration": i}))
            rows.append(dict(_row(s["collective"], "local-reduce", s["group_size"], size,
                                  1e-6 + gamma * size / 2, reduced_bytes=size / 2),
                             kind="local-reduce", replay={"calibration": i}))
            size *= 4
    for c in rmap.calls:
        t = get_algorithm(c.collective, c.algorithm).time_for(c.group_size, c.nbytes, alpha,
                                                             beta, gamma)
        for g in c.groups:   # two concurrent groups: the slower one counts
            rows.append(_row(c.collective, c.algorithm, c.group_size, c.nbytes,
                             t * (1.1 if g == c.groups[-1] else 1.0),
                             replay={"call": c.order, "group": g}))
    report = repredict(rmap, rows)
    assert report.fit.alpha == pytest.approx(alpha, rel=1e-6)
    assert report.fit.beta == pytest.approx(beta, rel=1e-6)
    for r in report.rows:
        assert r["error"] == pytest.approx(1 / 1.1 - 1, abs=1e-6)
    assert report.median_error == pytest.approx(1 - 1 / 1.1, abs=1e-6)
    assert report.total_error == pytest.approx(1 / 1.1 - 1, abs=1e-6)


def test_calibration_sweeps_span_two_sizes_at_least(dense_file):
    rmap = replay_calls(load_step_file(dense_file), 4, 4 << 20)
    sweeps = calibration_sweeps(rmap)
    assert {(s["collective"], s["group_size"]) for s in sweeps} == {("all_reduce", 2)}
    assert all(s["max_bytes"] >= 4 * CALIBRATION_MIN_BYTES for s in sweeps)


def test_simulated_bytes_follow_the_schedule(tmp_path):
    rmap = replay_calls(load_step_file(write_step_file(_plan(MOE), tmp_path / "m.json")), 4,
                        1 << 20)
    a2a = next(c for c in rmap.calls if c.collective == "all_to_all")
    # direct all_to_all: each rank sends its 3 foreign blocks of M/4
    assert simulated_bytes(a2a) == 3 * a2a.nbytes // 4
