"""``ringccl run/bench --trace``: a measured Chrome/Perfetto trace of real processes (gloo, and
MPI when mpi4py and mpirun are here): valid JSON, both ranks, every send and receive of the
schedule, durations >= 0, each apply after the wait of its receive."""

import json
import shutil

import pytest

import ringccl
from ringccl.cli import main

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


def _check(path, collective, algorithm, world_size, calls_per_rank=1):
    with open(path) as f:
        t = json.load(f)
    events = t["traceEvents"]
    assert {e["pid"] for e in events} == set(range(world_size))
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
    s = ringccl.schedule(collective, algorithm, world_size)
    for rank in range(world_size):
        mine = [e for e in events if e["pid"] == rank and e["ph"] == "X"]
        prog = s.program(rank)
        # whole chunks: these sizes are below both transports' pipelining thresholds
        sends = sum(len(st.sends) for st in prog.steps) * calls_per_rank
        recvs = sum(len(st.recvs) for st in prog.steps) * calls_per_rank
        assert len([e for e in mine if e["cat"] == "send"]) == sends
        assert len([e for e in mine if e["cat"] == "recv"]) == recvs
        assert len([e for e in mine if e["cat"] == "wait"]) == sends + recvs
        assert len([e for e in mine if e["cat"] == "collective"]) == calls_per_rank
        waited = {}
        for e in sorted(mine, key=lambda e: e["ts"]):
            a = e["args"]
            key = (a.get("step"), a.get("chunk"), a.get("segment"), a.get("src"))
            if e["cat"] == "wait" and e["name"].startswith("wait recv"):
                waited[key] = e["ts"] + e["dur"]
            elif e["cat"] == "reduce":
                assert key in waited and waited[key] <= e["ts"] + 1e-3
    assert len([e for e in events if e["ph"] == "s"]) == s.num_transfers * calls_per_rank
    return t


def test_run_trace_gloo(tmp_path, capsys):
    pytest.importorskip("torch")
    path = tmp_path / "t.json"
    assert main(["run", "all_reduce", "-n", "2", "-c", "64Ki", "--iters", "2", "--warmup", "1",
                 "--trace", str(path)]) == 0
    assert "wrote" in capsys.readouterr().err
    t = _check(path, "all_reduce", "ring", 2)
    assert t["otherData"]["collectives"] == ["ring all_reduce"]


def test_bench_trace_gloo_two_iterations(tmp_path, capsys):
    pytest.importorskip("torch")
    path = tmp_path / "t.json"
    assert main(["bench", "all_gather", "-n", "2", "-b", "4KiB", "-e", "4KiB", "--iters", "3",
                 "-w", "0", "-a", "ring,builtin", "--placement", "in-place",
                 "--trace", str(path), "--trace-iters", "2"]) == 0
    _check(path, "all_gather", "ring", 2, calls_per_rank=2)


def test_bench_trace_mpi(tmp_path, capsys):
    pytest.importorskip("mpi4py")
    if not (shutil.which("mpirun") or shutil.which("mpiexec")):
        pytest.skip("no mpirun")
    path = tmp_path / "t.json"
    assert main(["bench", "all_reduce", "--backend", "mpi", "-n", "2", "-b", "64KiB", "-e",
                 "64KiB", "--iters", "2", "-w", "1", "-a", "ring", "--placement", "in-place",
                 "--no-calibrate", "--trace", str(path)]) == 0
    _check(path, "all_reduce", "ring", 2)


def _run_logged(debug, args=("all_reduce", "-n", "2", "-c", "1Ki")):
    import os
    import subprocess
    import sys
    from pathlib import Path
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHONPATH=str(Path(ringccl.__file__).resolve().parents[1]))
    env.pop("RINGCCL_DEBUG", None)
    if debug is not None:
        env["RINGCCL_DEBUG"] = debug
    p = subprocess.run([sys.executable, "-m", "ringccl", "run", *args, "--iters", "1",
                        "--warmup", "0"], capture_output=True, text=True, env=env, timeout=bounds.job(300))
    assert p.returncode == 0, p.stderr
    return [line for line in p.stderr.splitlines() if line.startswith("ringccl ")]


def test_ringccl_debug_info_logs_each_call_per_rank():
    lines = _run_logged("INFO")
    # ringccl's row is called twice per rank (the check, one timed iteration); gloo's own not
    for rank in (0, 1):
        mine = [line for line in lines if f"[rank {rank}]" in line]
        assert len(mine) == 2, lines
        for line in mine:
            assert line.startswith("ringccl INFO ")
            for field in ("all_reduce", "algorithm=ring", "dtype=float32", "count=1024",
                          "bytes=4096", "segment_bytes=0", "time_us="):
                assert field in line
    assert not [line for line in lines if " DEBUG " in line]


def test_ringccl_debug_trace_logs_steps_and_unset_logs_nothing():
    lines = _run_logged("TRACE")
    steps = ringccl.schedule("all_reduce", "ring", 2).num_steps
    assert len([line for line in lines if " DEBUG " in line and " step " in line]) == \
        2 * 2 * steps   # 2 ranks x 2 calls x steps
    assert _run_logged(None) == []


def test_ringccl_debug_info_logs_the_segment_size_the_shm_executor_ran():
    # over shared memory a large all_reduce runs whole chunks and a broadcast from 8 MiB in
    # 2 MiB segments (executor.call_pipelining), not the p2p default the options carry
    for args, segment in ((("all_reduce", "-a", "two_shot"), 0), (("broadcast",), 2 << 20)):
        lines = _run_logged("INFO", (*args, "-n", "2", "-c", "4Mi"))
        mine = [line for line in lines if f" {args[0]} algorithm=" in line]
        assert mine and all(f"segment_bytes={segment} " in line for line in mine), lines
