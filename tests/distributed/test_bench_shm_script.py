"""benchmarks/bench_shm.py and its shared helpers (benchmarks/measure.py) at tiny sizes: the
cold-buffer pool, the floors, and the report's fields (``--cold``, first calls, floors,
``--json``). No timing asserts: only that the rows and fields exist and the values are
positive; afterwards no segment is left (the ``shm_dir`` fixture)."""

import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from .. import bounds  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
_spec = importlib.util.spec_from_file_location("bench_measure", BENCH / "measure.py")
measure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measure)

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


def test_cold_pool_gives_distinct_line_aligned_buffers_over_64_mib():
    pool = measure.BufferPool(3, cold=True)          # 12 bytes: one cache line apart
    assert pool.stride == measure.LINE_BYTES and pool.slab_bytes >= measure.COLD_POOL_BYTES
    first = [pool.take() for _ in range(pool.positions)]
    starts = [a.ctypes.data for a in first[:1000]]
    assert all(s % measure.LINE_BYTES == 0 for s in starts)
    assert len(set(starts)) == len(starts) and all(a.shape == (3,) for a in first[:10])
    assert np.all(first[0] == 1)                       # written when made
    assert pool.take().ctypes.data == starts[0]        # round-robin: back to the first
    big = measure.BufferPool(3 << 20, cold=True)     # 12 MiB each: 6 of them
    assert big.positions == 6 and big.positions * big.nbytes >= measure.COLD_POOL_BYTES
    warm = measure.BufferPool(1024)
    assert warm.positions == 1 and warm.take() is warm.take()
    with pytest.raises(ValueError, match="count=0"):
        measure.BufferPool(0)


def test_passes_and_fmt():
    def timed(fn):
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    for cold in (False, True):
        out = measure.passes(4096, timed, 3, ("memcpy", "add"), cold=cold, batch=4)
        assert out["nbytes"] == 4096
        for k in ("memcpy", "add"):
            assert 0 < out[k]["min_s"] <= out[k]["median_s"] <= out[k]["max_s"]
            assert out[k]["bytes_per_s"] > 0 and out[k]["best_bytes_per_s"] > 0
    assert [measure.fmt(v) for v in (0.0412, 12.3456, 1234.5, 0.4, 0.0)] == [
        "0.0412", "12.3", "1234.5", "0.400", "0.0"]
    assert measure.powers_of_4(8, 4096) == [8, 32, 128, 512, 2048]


def _bench(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(BENCH / "bench_shm.py"), "--nproc", "2",
                           "--sizes", "8,4KiB", "--iters", "5", "--collectives", "all_reduce",
                           *args], capture_output=True, text=True, timeout=bounds.job(300))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def _positive(summary: dict) -> None:
    assert 0 < summary["min_s"] <= summary["median_s"] <= summary["max_s"]


def test_bench_shm_cold_json_carries_first_calls_and_floors(shm_dir):
    report = json.loads(_bench("--cold", "--json").stdout)
    assert report["cold"] is True and report["nproc"] == 2 and len(report["ranks"]) == 2
    main = [r for r in report["rows"] if "first_call_s" in r]
    assert [(r["collective"], r["nbytes"]) for r in main] == [("all_reduce", 8),
                                                               ("all_reduce", 4096)]
    for row in main:
        assert row["correct"] is True and row["cold"] is True
        assert set(row["first_call_s"]) == {"ours", "ours_no_restore", "gloo"}
        assert all(v > 0 for v in row["first_call_s"].values())
        for name in ("ours", "ours_no_restore", "gloo"):
            _positive(row[name])
            assert len(row[name]["samples_s"]) == 5
        assert row["ratio"] > 0 and row["ratio_no_restore"] > 0
    per_call = {(r["collective"], r["who"]) for r in report["rows"] if "us_per_call" in r}
    assert per_call == {(c, w) for c in ("latency_8B", "per_call_4KiB") for w in ("ours", "gloo")}
    floors = report["floors"]
    _positive(floors["flag_one_way"])
    assert floors["flag_one_way"]["trips"] > 0
    for key in ("memcpy_every_rank", "memcpy_alone"):
        _positive(floors[key])
        assert floors[key]["nbytes"] == 4096 and floors[key]["bytes_per_s"] > 0


def test_bench_shm_table_reports_warm_run_floors_and_first_calls(shm_dir):
    out = _bench().stdout
    assert "warm: each variant's calls reuse one buffer" in out
    assert "floor: flag one way" in out and "floor: memcpy 4.00 KiB (numpy), every rank" in out
    first = out.split("first call of each signature")[1].splitlines()
    assert [line.split()[0] for line in first[2:4]] == ["all_reduce", "all_reduce"]
    assert not re.search(r"\d[eE][+-]?\d", out)     # no number in exponent form


def test_bench_shm_rejects_cold_with_wait_policies():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_shm.py"), "--cold",
                           "--wait-policies"], capture_output=True, text=True,
                          timeout=bounds.job(60))
    assert proc.returncode == 2 and "--cold" in proc.stderr and "--wait-policies" in proc.stderr


@pytest.mark.parametrize("script", ["bench_shm.py", "bench_shm_seeded.py"])
def test_bench_sizes_are_read_as_ringccl_reads_size_lists(script):
    # one parser for lists of sizes: an empty entry is refused, not skipped or misread
    proc = subprocess.run([sys.executable, str(BENCH / script), "--sizes", "8,,4KiB"],
                          capture_output=True, text=True, timeout=bounds.job(60))
    assert proc.returncode == 2
    assert "sizes '8,,4KiB': entry 2 of 3 is empty" in proc.stderr
