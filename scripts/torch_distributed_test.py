"""Run torch's own ``DistributedTest`` cases against a backend: an external check of it.

torch ships ``torch.testing._internal.distributed.distributed_test``; its test runner,
``test/distributed/test_distributed_spawn.py``, is not installed, so this script rebuilds it:
the same environment (BACKEND, WORLD_SIZE, TEMP_DIR, INIT_METHOD=env:// with a file-based
barrier directory) and the same class, ``TestDistBackend`` + ``DistributedTest._DistTestBase``,
with every test spawning WORLD_SIZE processes. The spawned processes re-import this file, which
imports ringccl.torch, so BACKEND=ringccl is registered in each.

    python scripts/torch_distributed_test.py --backend ringccl --world-size 2 \
        -k all_reduce -k broadcast ... [--json counts.json]

Prints passed / failed / skipped / errors and the failing cases' names; not part of pytest.

Many cases are gated on the backend's *name*, not on what it can do: decorators evaluated when
``distributed_test`` is imported, e.g. ``skip_but_pass_in_sandcastle_if(BACKEND not in
DistTestCases.backend_feature["subgroup"], ...)`` (the sets list nccl, gloo, ucc) or
``BACKEND != "gloo"``. A third-party backend is skipped there whatever it supports.
``--claim ddp --claim subgroup`` adds the backend to those feature sets first (in this process
and, through ``RINGCCL_SUITE_CLAIM``, in every spawned rank), so those cases run against it too;
cases gated on ``BACKEND == "gloo"`` itself stay skipped (they test gloo's own behaviour).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import unittest

DEFAULT_PATTERNS = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all",
                    "gather", "scatter", "barrier", "DistributedDataParallel"]


def _env(backend: str, world_size: int) -> None:
    os.environ.setdefault("BACKEND", backend)
    os.environ.setdefault("WORLD_SIZE", str(world_size))
    os.environ.setdefault("INIT_METHOD", "env://")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29571")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if "TEMP_DIR" not in os.environ:
        os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="ringccl-torch-suite-")
        for sub in ("barrier", "test_dir", "init_dir"):
            os.makedirs(os.path.join(os.environ["TEMP_DIR"], sub), exist_ok=True)


def _suite():
    import ringccl.torch  # registers "ringccl" here and in every spawned rank
    assert ringccl.torch.backend.BACKEND_NAME == "ringccl"
    from torch.testing._internal.common_distributed import DistTestCases
    for feature in filter(None, os.environ.get("RINGCCL_SUITE_CLAIM", "").split(",")):
        if feature not in DistTestCases.backend_feature:
            raise SystemExit(f"--claim {feature!r}: torch's DistTestCases.backend_feature has "
                             f"{sorted(DistTestCases.backend_feature)}")
        # before distributed_test is imported: its skip decorators read the sets then
        DistTestCases.backend_feature[feature].add(os.environ["BACKEND"])
    from torch.testing._internal.distributed.distributed_test import (DistributedTest,
                                                                     TestDistBackend)

    class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._spawn_processes()
    # spawned ranks unpickle the test case by name: it must be this module's global
    TestDistBackendWithSpawn.__qualname__ = "TestDistBackendWithSpawn"
    TestDistBackendWithSpawn.__module__ = __name__
    return TestDistBackendWithSpawn


if os.environ.get("BACKEND"):   # a spawned rank re-importing this file: the class must exist
    TestDistBackendWithSpawn = _suite()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="ringccl")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("-k", action="append", dest="patterns", help="substring of test names")
    parser.add_argument("--json", help="write the counts and failing names here")
    parser.add_argument("--claim", action="append", default=[],
                        help="a DistTestCases.backend_feature set to add the backend to "
                             "(ddp, subgroup, ...): runs the cases gated on it by name")
    args = parser.parse_args(argv)
    _env(args.backend, args.world_size)
    os.environ["RINGCCL_SUITE_CLAIM"] = ",".join(args.claim)
    cls = _suite()
    globals()["TestDistBackendWithSpawn"] = cls
    patterns = args.patterns or DEFAULT_PATTERNS
    names = [n for n in unittest.TestLoader().getTestCaseNames(cls)
             if any(p in n for p in patterns) and "cuda" not in n.lower()
             and "gpu" not in n.lower() and "nccl" not in n.lower()]
    suite = unittest.TestSuite(cls(n) for n in names)
    result = unittest.TextTestRunner(verbosity=1, stream=sys.stderr).run(suite)
    failed = sorted(t.id().rsplit(".", 1)[-1] for t, _ in result.failures + result.errors)
    counts = {"backend": args.backend, "world_size": args.world_size, "claim": args.claim,
              "selected": len(names),
              "passed": result.testsRun - len(failed) - len(result.skipped),
              "failed": len(failed), "skipped": len(result.skipped), "failing": failed,
              "reasons": {t.id().rsplit(".", 1)[-1]: tb.strip().splitlines()[-1][:300]
                          for t, tb in result.failures + result.errors},
              "skipped_cases": {t.id().rsplit(".", 1)[-1]: why[:200]
                                for t, why in result.skipped}}
    print(json.dumps(counts, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(counts, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
