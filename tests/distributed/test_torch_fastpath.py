"""A small all_reduce on the calls' fast paths (the lane replayed without torch.no_grad for
tensors autograd never sees; the backend's inline call with its light Work): the same bits,
version-counter steps, requires_grad and errors in grad mode as under torch.no_grad, and as
the general path (the lane off), for plain tensors, leaves that require grad and views
(of either kind), with SUM and AVG (AVG's divide is a torch write after the lane)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ringccl.torch.launch import launch  # noqa: E402

from .. import bounds  # noqa: E402
from . import fastpath_workers  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(300))]


def test_grad_mode_changes_nothing_on_the_fast_paths():
    runs = launch(fastpath_workers.grad_modes, 2, backend="ringccl", timeout=bounds.job(200))
    for rank, run in enumerate(runs):
        records = run["records"]
        assert run["compiled"] > 0, rank   # the lane did run
        assert run["done_work"], (rank, run["inline_work"])
        for (path, kind, op, on, grad), record in records.items():
            assert len(record) == fastpath_workers.REPEATS
            if not grad:
                continue
            # grad mode on gives what torch.no_grad gives, lane on gives the lane off's
            assert record == records[path, kind, op, on, False], (rank, path, kind, op, on)
            assert record == records[path, kind, op, False, True], (rank, path, kind, op)
            # every call succeeded and repeats gave the same bits
            assert all(isinstance(r, tuple) and r[0] for r in record), (path, kind, record)
            assert len({r[1] for r in record}) == 1
    # the ranks agree bitwise
    assert runs[0]["records"] == runs[1]["records"]
