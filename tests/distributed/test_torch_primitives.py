"""Every primitive and every registered algorithm on 2–4 local gloo processes, against
torch.distributed's own broadcast, reduce, scatter, gather, all_to_all_single, all_to_all,
all_reduce, reduce_scatter_tensor and all_gather_into_tensor. gloo has all of them, except that
its all_to_all (tensor lists) needs equal tensors: uneven lists are compared with gloo's
all_to_all_single on the same split sizes."""

import pytest

torch = pytest.importorskip("torch")

from ringccl.torch.launch import launch  # noqa: E402

from . import primitive_workers as workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(900))]


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_rooted_collectives_match_torch_distributed(nproc):
    assert launch(workers.rooted, nproc, timeout=bounds.job(600)) == [[]] * nproc


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_exchanges_and_reductions_match_torch_distributed(nproc):
    assert launch(workers.exchange, nproc, timeout=bounds.job(600)) == [[]] * nproc


def test_roots_are_global_ranks_in_a_subgroup():
    assert launch(workers.subgroup, 4, timeout=bounds.job(120)) == [[]] * 4


def test_bad_arguments_raise_on_every_rank_before_data_moves():
    results = launch(workers.bad_arguments, 3, timeout=bounds.job(120))
    for messages in results:
        assert "src=3 is out of range for world_size=3" in messages[0]
        assert "op=avg needs a floating dtype" in messages[1]
        assert "src=-1 is out of range" in messages[2]
        assert "tensor.dtype=torch.complex64 is not supported" in messages[3]
        assert "input_split_sizes sums to 3, but input has 12 rows" in messages[4]
        assert "input has 4 rows (dim 0), not divisible by world_size=3" in messages[5]
        assert "dtype=torch.float32 differs" in messages[6]
        assert "algorithm='ring' is not available for scatter" in messages[7]
        assert messages[8] == "2.0"


def test_root_only_lists_are_checked():
    messages = launch(workers.root_only_arguments, 1, timeout=bounds.job(60))[0]
    assert "scatter_list[0] has 3 elements; every tensor must have tensor.numel()=2" in messages[0]
    assert "scatter_list must be a list of world_size=1 tensors, got NoneType" in messages[1]
    assert "gather_list must be a list of world_size=1 tensors, got list of length 2" in messages[2]
    assert messages[3] == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("argv", [
    ["broadcast", "--src", "2", "--segments", "4"],
    ["reduce", "--dst", "1", "-a", "direct", "--op", "max"],
    ["scatter", "--src", "1"],
    ["gather", "--dst", "2", "-a", "direct"],
    ["all_to_all"],
    ["all_reduce", "-a", "master", "--root", "1"],
    ["reduce_scatter", "--dtype", "float16", "--accumulate-dtype", "float32"],
], ids=lambda argv: argv[0] + ("-" + argv[argv.index("-a") + 1] if "-a" in argv else "")
    + ("-accumulate" if "--accumulate-dtype" in argv else ""))
def test_cli_run_matches_gloo(capsys, argv):
    import json

    import ringccl.cli
    code = ringccl.cli.main(["run", *argv, "--nproc", "3", "--count", "3000", "--iters", "2",
                             "--warmup", "0", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["wrong"] == 0 and report["world_size"] == 3
    assert report["ringccl"]["busbw"] > 0 and report["builtin"]["busbw"] > 0
    if "--accumulate-dtype" in argv:
        assert report["accumulate_dtype"] == argv[argv.index("--accumulate-dtype") + 1]


def test_tensors_that_require_grad_are_written_like_dist_does():
    assert launch(workers.requires_grad, 3, timeout=bounds.job(120)) == [[]] * 3
