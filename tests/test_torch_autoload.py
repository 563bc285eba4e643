"""The ``torch.backends`` entry point: torch loads it inside its own ``import torch``, which may
itself run inside ``import ringccl.torch`` — so importing ringccl.torch first must work, and a
script that never imports ringccl gets the backend by name."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

pytest.importorskip("torch")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def _entry_point_installed() -> bool:
    try:
        eps = metadata.distribution("ringccl").entry_points
    except metadata.PackageNotFoundError:
        return False
    return any(ep.group == "torch.backends" and ep.name == "ringccl" for ep in eps)


def test_import_ringccl_torch_first_works():
    # with the entry point installed this import runs torch's autoload half-way through it
    r = _run("import ringccl.torch, torch.distributed as dist; "
             "assert 'ringccl' in dist.Backend.backend_list")
    assert r.returncode == 0, r.stderr


def test_a_script_that_never_imports_ringccl_gets_the_backend_by_name(tmp_path):
    if not _entry_point_installed():
        pytest.skip("ringccl is not installed with its torch.backends entry point "
                    "(pip install -e . installs it)")
    code = f"""
import sys, datetime, torch, torch.distributed as dist
assert 'ringccl.torch' not in sys.modules      # registered lazily: nothing of ringccl.torch yet
store = dist.FileStore({str(tmp_path / 'store')!r}, 1)
dist.init_process_group('ringccl', store=store, rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=30))
t = torch.arange(5.0)
dist.all_reduce(t)
assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
assert type(dist.group.WORLD).__name__ == 'RingcclProcessGroup', type(dist.group.WORLD)
dist.destroy_process_group()
print('ok')
"""
    r = _run(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
