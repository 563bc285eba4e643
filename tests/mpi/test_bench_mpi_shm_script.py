"""benchmarks/bench_mpi_shm.py's worker under mpirun at a tiny size with ``--cold``: every row
and the floor row (with the flag round trip and the memory passes of benchmarks/measure.py)
has its fields, the values positive, every result right. No timing asserts.

Skipped, with the reason, where mpirun or mpi4py is missing (scripts/install_mpi.sh).
"""

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
    pytest.skip("no mpirun/mpiexec on PATH (run scripts/install_mpi.sh)", allow_module_level=True)
if importlib.util.find_spec("mpi4py") is None:
    pytest.skip("mpi4py is not installed (pip install 'ringccl[mpi]')", allow_module_level=True)

from .. import bounds  # noqa: E402
from . import mpirun  # noqa: E402

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(bounds.job(300))]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_mpi_shm.py"


def _positive(v: dict) -> None:
    assert 0 < v["min_s"] <= v["median_s"] <= v["max_s"]


def test_bench_mpi_shm_cold_rows_and_floors(monkeypatch):
    job = f"benchmpishm{os.getpid()}"
    monkeypatch.delenv("RINGCCL_TRANSPORT", raising=False)
    proc = mpirun.run(2, [sys.executable, str(SCRIPT), "--worker", "-b", "4KiB", "-e", "4KiB",
                          "--iters", "5", "--cold"], seconds=240, env={"RINGCCL_SHM_JOB": job})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("JSON ")][-1][5:])
    assert data["cold"] is True
    rows = {r["kind"]: r for r in data["rows"]}
    assert set(rows) == {"latency", "size", "back_to_back", "floor"}
    for kind in ("latency", "size"):
        r = rows[kind]
        assert r["cold"] is True and r["wrong"] is False and r["first_call_s"] > 0
        for k in ("ringccl", "python", "general", "mpi", "zero_copy", "slot_copy"):
            _positive(r[k])
    floor = rows["floor"]
    assert floor["cold"] is True and floor["nbytes"] == 4096
    for k in ("shm_enter_leave", "numpy_4KiB", "flag_one_way", "memcpy", "add"):
        _positive(floor[k])
    assert floor["memcpy"]["bytes_per_s"] > 0 and floor["add"]["bytes_per_s"] > 0
    from ringccl.backends.shm import shm_dir
    assert not [f for f in os.listdir(shm_dir()) if f.startswith(f"ringccl-{job}-")]
