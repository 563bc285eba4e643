"""``ringccl bench`` on local gloo processes: started by --nproc, and under torchrun."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import ringccl  # noqa: E402
from ringccl.cli import main  # noqa: E402
from ringccl.torch.launch import free_port  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


def test_bench_all_reduce_ring_and_builtin(capsys):
    assert main(["bench", "all_reduce", "--nproc", "2", "-b", "4KiB", "-e", "64KiB", "-f", "4",
                 "--iters", "3", "-w", "1", "--algorithm", "ring,builtin", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    coll = [r for r in report["rows"] if r["kind"] == "collective"]
    assert report["world_size"] == 2 and report["spec"]["backend"] == "gloo"
    for size in (4096, 16384, 65536):
        at = {(r["algorithm"], r["placement"]) for r in coll if r["size"] == size}
        assert at == {(a, p) for a in ("ring", "builtin") for p in ("out-of-place", "in-place")}
    assert all(r["wrong"] == 0 and r["busbw"] > 0 and len(r["times_s"]) == 3 for r in coll)
    assert len([r for r in report["rows"] if r["kind"] == "local-reduce"]) == 3


def test_bench_no_restore(capsys):
    from ringccl import bench
    spec = bench.BenchSpec("all_reduce", ("ring",), 1024, 1024, 2, 1, 0, restore=False)
    assert bench.BenchSpec.from_dict(spec.to_dict()).restore is False
    assert main(["bench", "all_reduce", "--nproc", "2", "-b", "1KiB", "-e", "1KiB", "--iters", "1",
                 "-w", "0", "--algorithm", "ring", "--no-restore", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["spec"]["restore"] is False
    assert report["rows"] and all(r["wrong"] == 0 for r in report["rows"]
                                  if r["kind"] == "collective")


@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "reduce"])
def test_bench_accumulate_dtype(capsys, collective):
    # float16 inputs reduced in float32 by ringccl (not by builtin); sizes count float16 bytes
    assert main(["bench", collective, "--nproc", "2", "-b", "4KiB", "-e", "4KiB", "--iters", "2",
                 "-w", "0", "-d", "half", "--algorithm", "ring,builtin", "--accumulate-dtype",
                 "f4", "--no-calibrate", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["spec"]["accumulate_dtype"] == "float32"
    acc = {r["algorithm"]: r["accumulate_dtype"] for r in report["rows"]}
    assert acc == {"ring": "float32", "builtin": None}
    assert all(r["wrong"] == 0 and r["size"] == 4096 and r["dtype"] == "float16"
               for r in report["rows"])


@pytest.mark.parametrize("collective,extra", [
    ("reduce_scatter", ["-d", "int32", "-o", "max", "--segment-bytes", "auto,256B"]),
    ("all_gather", ["-d", "float64", "--placement", "in-place"]),
])
def test_bench_nccl_tests_format_and_plot(capsys, tmp_path, collective, extra):
    png = tmp_path / "busbw.png"
    assert main(["bench", collective, "--nproc", "3", "-b", "3KiB", "-e", "12KiB", "-f", "4",
                 "--iters", "2", "-w", "0", "--format", "nccl-tests", "--plot", str(png)]
                + extra) == 0
    lines = capsys.readouterr().out.splitlines()
    data = [line.split() for line in lines if line and not line.startswith("#")]
    # every registered algorithm (per segment setting) and builtin: new algorithms join in
    settings = 2 if "--segment-bytes" in extra else 1
    assert len(data) == 2 * (settings * len(ringccl.algorithms(collective)) + 1)
    for f in data:
        assert len(f) == 13 and f[2] == ("int32" if "int32" in extra else "double")
        assert (f[8], f[12]) == (("N/A", "0") if "in-place" in extra else ("0", "0"))
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_bench_under_torchrun():
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]
                                                          / "src"),
                                                      os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "ringccl",
         "bench", "all_reduce", "-b", "1KiB", "-e", "1KiB", "--iters", "2", "-w", "0", "--csv"],
        capture_output=True, text=True, timeout=bounds.job(300), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    rows = 2 * (len(ringccl.algorithms("all_reduce")) + 1) + 1  # × placements, + local-reduce
    assert lines[0].startswith("collective,backend") and len(lines) == 1 + rows
