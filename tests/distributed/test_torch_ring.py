"""ringccl.torch on 2–4 local gloo processes against torch.distributed's own collectives."""

import json

import pytest

torch = pytest.importorskip("torch")

import ringccl.cli  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from . import workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_matches_torch_distributed(nproc):
    results = launch(workers.compare_all, nproc, timeout=bounds.job(300))
    assert results == [[]] * nproc


def test_subgroup_maps_peers_to_global_ranks():
    assert launch(workers.subgroup, 4, timeout=bounds.job(120)) == [[]] * 4


def test_a_worker_that_exits_without_reporting_is_named_at_once():
    import time

    from ringccl.errors import BackendError
    start = time.monotonic()
    with pytest.raises(BackendError, match="rank 1 exited with code 0 before reporting"):
        launch(workers.exit_silently, 2, timeout=bounds.job(120))
    assert time.monotonic() - start < 60  # not the 120 s (+30) deadline


def test_bad_arguments_raise_before_data_moves():
    results = launch(workers.bad_arguments, 3, timeout=bounds.job(120))
    for messages in results:
        assert "input has 10 elements" in messages[0]
        assert "output_tensor has 5 elements" in messages[1]
        assert "op=avg needs a floating dtype" in messages[2]
        assert "op=bxor is bitwise" in messages[3]
        assert "algorithm='nope' is not available for all_reduce" in messages[4]
        assert "output_tensor.dtype=torch.int64 differs" in messages[5]
        assert messages[6] == "3.0"


def test_cli_run_matches_gloo(capsys):
    code = ringccl.cli.main(["run", "all_reduce", "--nproc", "2", "--count", "64Ki",
                             "--iters", "3", "--warmup", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["wrong"] == 0 and report["world_size"] == 2
    assert report["ringccl"]["busbw"] > 0 and report["builtin"]["busbw"] > 0
    assert report["bus_factor"] == pytest.approx(1.0)


@pytest.mark.parametrize("collective", ["reduce_scatter", "all_gather"])
def test_cli_run_other_collectives(capsys, collective):
    code = ringccl.cli.main(["run", collective, "--nproc", "3", "--count", "3000",
                             "--iters", "2", "--warmup", "0", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["wrong"] == 0


def test_under_torchrun(tmp_path):
    """The executor on torchrun's env:// process group (what users run on clusters)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ringccl.torch.launch import free_port

    script = Path(__file__).with_name("torchrun_script.py")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3",
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)],
        capture_output=True, text=True, timeout=bounds.job(300), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": OK") == 3
