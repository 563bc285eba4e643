"""``ringccl moe --nproc 4`` and ``ringccl plan --emit`` + ``ringccl replay --nproc 4`` on
local gloo processes, small sizes. No timed asserts: the numbers are reported, the
tests check their shape and the transposed token matrix."""

import json

import pytest

pytest.importorskip("torch")

from ringccl.cli.app import main  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


def test_moe_prints_the_token_matrix_and_the_run_at_scale(capsys, tmp_path):
    png = tmp_path / "moe.png"
    assert main(["moe", "--nproc", "4", "--tokens", "256", "--hidden-size", "32",
                 "--ffn-hidden-size", "64", "--iters", "2", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "GPU 0 (one token for each expert): ['Token_G0->E0', 'Token_G0->E1', " \
        "'Token_G0->E2', 'Token_G0->E3']" in out
    assert "GPU 3, expert 3 (tokens from every GPU): ['Token_G0->E3', 'Token_G1->E3', " \
        "'Token_G2->E3', 'Token_G3->E3']" in out
    assert "transpose verified" in out
    assert "imbalance:" in out and "dropped" in out and "planner's overlap model" in out
    assert png.stat().st_size > 0


def test_moe_json(capsys):
    assert main(["moe", "--nproc", "4", "--tokens", "128", "--hidden-size", "16",
                 "--ffn-hidden-size", "32", "--iters", "1", "--skew", "2", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["token_matrix"][2] == [f"Token_G{s}->E2" for s in range(4)]
    assert len(r["per_rank"]) == 4 and r["imbalance"] > 1
    assert 0 < r["dropped"] < r["assignments"]
    assert r["speedup"] > 0 and r["model_pipelined_s"] > 0


def test_plan_emit_then_replay(capsys, tmp_path):
    step = tmp_path / "step.json"
    assert main(["plan", "--model", "mixtral-8x7b", "--dp", "4", "--ep", "4", "--nodes", "1",
                 "--gpus-per-node", "4", "--emit", str(step)]) == 0
    capsys.readouterr()
    png = tmp_path / "replay.png"
    assert main(["replay", str(step), "--nproc", "4", "--max-bytes", "256KiB", "--iters", "3",
                 "--plot", str(png), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    emitted = {c["collective"] for c in json.loads(step.read_text())["collectives"]}
    # Megatron's default keeps the distributed optimizer (ZeRO-1): gradients reduce-scattered,
    # weights all-gathered, beside the experts' all-to-all.
    assert emitted == {"all_to_all", "reduce_scatter", "all_gather"}
    assert {row["collective"] for row in r["rows"]} == emitted
    assert all(row["groups"] == [[0, 1, 2, 3]] for row in r["rows"])
    assert all(row["wrong"] == 0 and row["measured_s"] > 0 and row["predicted_s"] > 0
               for row in r["rows"])
    assert r["scale"] < 1 and any("scaled by 1/" in n for n in r["notes"])
    assert r["median_error"] >= 0 and r["measured_total_s"] > 0
    assert png.stat().st_size > 0


def test_replay_without_warmup(capsys, tmp_path):
    """``--warmup 0`` times every call, the first included, as ``bench -w 0`` does."""
    step = tmp_path / "step.json"
    assert main(["plan", "--model", "llama3-8b", "--dp", "4", "--tp", "2", "--emit",
                 str(step)]) == 0
    capsys.readouterr()
    assert main(["replay", str(step), "--nproc", "2", "--max-bytes", "64KiB", "--iters", "1",
                 "--warmup", "0", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["rows"] and all(row["wrong"] == 0 and row["measured_s"] > 0 for row in r["rows"])


def test_a_pipeline_step_replays_on_blocks_of_local_ranks(capsys, tmp_path):
    """A plan of 8 ranks (tp 2, pp 2, dp 2) on 4 processes: every group of 2 becomes the blocks
    {0,1} and {2,3}, the pipeline's send_recv a broadcast from each block's own first rank (its
    source), not from global rank 0, which is in one block only."""
    step = tmp_path / "pp_step.json"
    assert main(["plan", "--model", "llama3-8b", "--tp", "2", "--pp", "2", "--dp", "2",
                 "--nodes", "1", "--global-batch-size", "16", "--emit", str(step)]) == 0
    capsys.readouterr()
    assert main(["replay", str(step), "-n", "4", "--iters", "1", "--warmup", "0",
                 "--max-bytes", "16KiB", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    pp = [row for row in r["rows"] if row["parallelism"] == "pp"]
    assert pp and all(row["collective"] == "broadcast" and row["params"] == {"root": 0}
                      and row["groups"] == [[0, 1], [2, 3]] for row in pp)
    assert all(row["wrong"] == 0 and row["measured_s"] > 0 for row in r["rows"])


def test_rooted_calls_run_from_the_root_of_each_group():
    """A replayed call's root is a position in each of its groups: root 1 on the blocks {0,1}
    and {2,3} is rank 1 in one, rank 3 in the other, and both give the expected result."""
    from ringccl.backends.torch.replay import replay_worker
    from ringccl.torch.launch import launch

    calls = [{"order": i, "collective": coll, "algorithm": algorithm, "params": {"root": 1},
              "groups": [[0, 1], [2, 3]], "nbytes": 4096}
             for i, (coll, algorithm) in enumerate([("broadcast", "direct"), ("reduce", "ring"),
                                                     ("broadcast", "builtin")])]
    per_rank = launch(replay_worker, 4, calls, [], 1, 0, timeout=bounds.job(120),
                      oversubscribe=True)
    rows = [row for rows in per_rank for row in rows]
    assert sorted((row["replay"]["call"], tuple(row["replay"]["group"])) for row in rows) == \
        [(i, g) for i in range(3) for g in ((0, 1), (2, 3))]
    assert all(row["wrong"] == 0 and row["root"] == 1 for row in rows)
