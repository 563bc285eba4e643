"""benchmarks/bench_backend.py at tiny sizes: ``--json`` carries every variant's row (the
ranks agree on each batch's call count, or the run would hang), the first calls and the
floors of the same run; the table prints them; bad ``--sizes`` is refused before any process
starts. No timing asserts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from .. import bounds  # noqa: E402

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "bench_backend.py"), "--nproc", "2",
                           "--no-fsdp", "--ddp-steps", "0", "--reps", "2", *args],
                          capture_output=True, text=True, timeout=bounds.job(300))


def test_bench_backend_json_rows_first_calls_and_floors(shm_dir):
    proc = _bench("--sizes", "8:32", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    variants = {r["variant"] for r in report["rows"]}
    assert {"gloo", "ringccl", "ringccl-general", "ringccl.torch"} <= variants
    assert {r["nbytes"] for r in report["rows"]} == {8, 32}
    for row in report["rows"]:
        assert 0 < row["min"] <= row["seconds"] <= row["max"]
        assert row["first_call_seconds"] > 0
    floors = report["floors"]
    assert 0 < floors["flag_one_way"]["median_s"] and floors["flag_one_way"]["trips"] > 0
    for key in ("memcpy_every_rank", "memcpy_alone"):
        assert floors[key]["nbytes"] == 32 and floors[key]["bytes_per_s"] > 0


def test_bench_backend_table_prints_the_floors(shm_dir):
    proc = _bench("--sizes", "8:8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "floor: flag one way" in proc.stdout
    assert "floor: memcpy 8.00 B (numpy), every rank at once" in proc.stdout


@pytest.mark.parametrize("sizes, says", [("8,64", "is not a size"), ("64:8", "LO is above HI")])
def test_bench_backend_refuses_bad_sizes(sizes, says):
    proc = _bench("--sizes", sizes)
    assert proc.returncode == 2 and f"--sizes={sizes!r}" in proc.stderr and says in proc.stderr
