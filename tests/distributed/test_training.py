"""Training integration on 4 local gloo processes: equivalence, accumulation, clipping.

All variants run in ONE launch (``train_workers.everything``; each launch costs seconds here) and
the tests below check its parts. Tolerances: variants differ from the single-process reference
only in floating-point summation order; in float64 after 50 AdamW steps that leaves < 1e-12
(measured: <= 3e-16). fp16/bf16 compression rounds every bucket, so those only have to stay
close (measured: 9e-5 and 9e-3 after 50 steps).
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ringccl.cli  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from . import train_workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(900))]

NPROC = 4
EXACT = 1e-12  # float64, summation order only


@pytest.fixture(scope="module")
def runs():
    return launch(train_workers.everything, NPROC, timeout=bounds.job(800))


def _max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


@pytest.mark.parametrize("variant", ["torch_ddp", "ddp_hook", "bucketer", "bucketer_after",
                                     "zero", "bucketer_recursive_doubling",
                                     "zero_halving_doubling"])
def test_fifty_steps_equal_single_process_full_batch(runs, variant):
    single = runs[0]["single"]
    for rank, r in enumerate(runs):
        assert _max_diff(r[variant], single) < EXACT, (variant, rank)
        assert np.array_equal(r[variant], runs[0][variant]), f"{variant}: replicas differ"


def test_training_moved_the_parameters(runs):
    # guard against a vacuous comparison: 50 steps change the weights a lot more than EXACT
    initial = train_workers.flat(train_workers.make_model())
    assert _max_diff(runs[0]["single"], initial) > 0.1


@pytest.mark.parametrize("variant,tolerance", [("ddp_hook_fp16", 1e-3), ("ddp_hook_bf16", 5e-2)])
def test_compressed_hook_stays_close(runs, variant, tolerance):
    assert _max_diff(runs[0][variant], runs[0]["single"]) < tolerance
    assert _max_diff(runs[0][variant], runs[0]["single"]) > 0  # it really was compressed
    for r in runs:
        assert np.array_equal(r[variant], runs[0][variant])


def test_bucketer_made_several_buckets_and_a_timeline(runs):
    info = runs[0]["bucketer_info"]
    assert info["buckets"] >= 2
    assert sum(info["sizes"]) == train_workers.flat(train_workers.make_model()).nbytes
    for step in info["timeline"]:
        assert [b["index"] for b in step["buckets"]] == list(range(info["buckets"]))
        for b in step["buckets"]:
            assert b["ready"] <= b["launched"] <= b["started"] <= b["done"] <= step["finish_done"]
        assert step["exposed_comm_s"] >= 0


def test_sharded_optimizer_state_is_a_quarter(runs):
    state = runs[0]["zero_state"]
    n_params = train_workers.flat(train_workers.make_model()).size
    shard = -(-n_params // NPROC)
    # AdamW: exp_avg and exp_avg_sq per element (float64) plus one step counter per tensor
    assert state["sharded"] == 2 * shard * 8 + 4
    assert state["sharded"] / state["unsharded"] == pytest.approx(1 / NPROC, rel=0.01)


@pytest.mark.parametrize("kind", ["bucketer", "zero", "ddp"])
def test_accumulation_with_no_sync_equals_the_big_batch(runs, kind):
    acc = runs[0]["accumulation"][kind]
    big, _ = acc["big_batch"]
    for mode in ("no_sync", "sync_every"):
        params, _ = acc[mode]
        assert _max_diff(params, big) < EXACT, mode


@pytest.mark.parametrize("kind", ["bucketer", "zero", "ddp"])
def test_no_sync_divides_gradient_bytes_by_the_accumulation_factor(runs, kind):
    acc = runs[0]["accumulation"][kind]
    k = 4
    for rank, r in enumerate(runs):
        a = r["accumulation"][kind]
        no_sync, every = a["no_sync"][1], a["sync_every"][1]
        assert all(b > 0 for b in no_sync)
        assert [k * b for b in no_sync] == every, rank
        assert no_sync == a["big_batch"][1]  # one reduction per optimizer step, as big batches
    # ring bytes per rank for the whole model: 2(N-1)/N x (padded) gradient bytes
    grad_bytes = train_workers.flat(train_workers.make_model()).nbytes
    per_step = acc["no_sync"][1][0]
    if kind == "zero":  # reduce-scatter only: (N-1)/N x the padded flat gradient
        padded = -(-grad_bytes // (8 * NPROC)) * NPROC * 8
        assert per_step == (NPROC - 1) * padded // NPROC
    else:
        assert per_step == pytest.approx(2 * (NPROC - 1) / NPROC * grad_bytes, rel=0.01)


@pytest.mark.parametrize("variant", ["bucketer_clipped", "zero_clipped"])
def test_clipped_update_equals_unsharded_clipped_update(runs, variant):
    clipped = runs[0]["single_clipped"]
    # clipping really acted: the clipped run differs from the unclipped one
    assert _max_diff(clipped, runs[0]["single"]) > 1e-3
    # norms are computed per tensor and summed in another order: float64 rounding only
    assert _max_diff(runs[0][variant], clipped) < 1e-10
    for r in runs:
        assert np.array_equal(r[variant], runs[0][variant])


@pytest.mark.parametrize("dtype", ["torch.float32", "torch.bfloat16", "torch.float16"])
def test_clip_coefficient_identical_on_ranks_with_different_shards(runs, dtype):
    per_rank = [r["clip"][dtype] for r in runs]
    assert len({c["norm_bits"] for c in per_rank}) == 1
    assert len({c["coef_bits"] for c in per_rank}) == 1
    c = per_rank[0]
    # the global norm equals the unsharded float32 norm of the same values
    assert c["norm"] == pytest.approx(c["ref_norm"], rel=1e-6)
    # the clipped shard equals the slice of the unsharded clipped gradient, up to the rounding
    # of one multiplication in the gradient's dtype
    eps = {"torch.float32": 2 ** -23, "torch.bfloat16": 2 ** -8, "torch.float16": 2 ** -10}[dtype]
    for r in per_rank:
        assert r["shard_err"] <= 2 * eps * r["shard_scale"]
        assert r["inf"] == r["ref_inf"]


def test_bad_arguments_raise_before_anything_moves(runs):
    messages = runs[0]["bad_arguments"]
    assert "compression='int8' is not supported" in messages[0]
    assert "bucket_cap_mb=0 must be a finite number of MiB > 0" in messages[1]
    assert "bucket_cap_mb=inf must be a finite number of MiB > 0" in messages[2]
    assert "params[0].dtype=torch.int64 cannot be optimized" in messages[3]
    assert "algorithm='nope' is not available" in messages[4]
    assert "params is empty" in messages[5]
    assert messages[6].startswith("ArgumentTypeError: optimizer_class must be")
    assert "norm_type=1.0 is not supported" in messages[7]
    assert "sharded must be a bool or one bool per parameter" in messages[8]


def test_zero_leaves_frozen_parameters_alone_as_torch_optim_does(runs):
    for r in runs:
        diff, frozen_moved = r["zero_frozen"]
        assert diff < EXACT and frozen_moved == 0.0


def test_zero_rank_without_backward_still_pairs_its_collectives(runs):
    assert all(r["zero_one_rank_backward"] < EXACT for r in runs)


def test_zero_a_skipped_step_does_not_unpair_the_next(runs):
    assert all(r["zero_skipped_step"] < EXACT for r in runs)


def test_zero_grad_to_zeros_steps_as_torch_optim(runs):
    assert all(r["zero_grad_to_zeros"] < EXACT for r in runs)


def test_inf_norm_is_nan_when_any_rank_has_a_nan(runs):
    assert all(np.isnan(r["inf_norm_nan_elsewhere"]) for r in runs)


def test_private_groups_inherit_the_group_timeout(runs):
    # launch's group timeout is its own bound (bounds.job(800), as the runs fixture passes)
    assert all(r["communicator_timeout"] == pytest.approx(bounds.job(800), abs=1e-3)
               for r in runs)


def test_cli_train_all_modes(capsys, tmp_path):
    """The acceptance run, shortened: DDP + ringccl hook >= 90% test accuracy, and the same
    final loss (relative 1e-3) as the bucketer, ZeRO and torch DDP with gloo's all-reduce."""
    pytest.importorskip("sklearn")
    plot = tmp_path / "train.png"
    code = ringccl.cli.main(["train", "--nproc", str(NPROC), "--mode", "all", "--epochs", "8",
                             "--plot", str(plot), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    runs = {r["mode"]: r for r in report["runs"]}
    assert set(runs) == {"ddp", "bucketer", "zero", "torch"}
    assert runs["ddp"]["final_test_acc"] >= 0.90
    assert report["losses_agree"]
    for r in runs.values():
        assert r["replicas_identical"]
        assert abs(r["final_train_loss"] - runs["torch"]["final_train_loss"]) <= (
            report["loss_rtol"] * runs["torch"]["final_train_loss"])
    # ZeRO keeps 1/N of AdamW's state; bytes per step as the ring's closed forms say
    assert runs["zero"]["optimizer_state_bytes"] < runs["ddp"]["optimizer_state_bytes"] / 3.9
    expected = runs["ddp"]["expected_bytes"]["all_reduce"]
    assert runs["ddp"]["bytes_per_step"] == pytest.approx(expected, rel=1e-3)
    assert runs["bucketer"]["bytes_per_step"] == pytest.approx(expected, rel=1e-3)
    assert plot.exists() and plot.stat().st_size > 10_000
