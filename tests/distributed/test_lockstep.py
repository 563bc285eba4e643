"""The lockstep driver (one batch_isend_irecv per step: what NCCL and UCC get) on gloo.

No GPU here, so the driver NCCL uses is exercised on gloo, which also accepts
``batch_isend_irecv``: the executor is made to believe the backend is NCCL.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from . import faults  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = pytest.mark.timeout(bounds.job(300))

CASES = [("all_reduce", "ring"), ("all_reduce", "double_binary_tree"),
         ("all_reduce", "halving_doubling"), ("reduce_scatter", "ring"),
         ("all_gather", "recursive_doubling"), ("broadcast", "ring"), ("reduce", "tree"),
         ("scatter", "binomial"), ("gather", "binomial"), ("all_to_all", "bruck")]


def _lockstep(rank, world_size, cases):
    import torch.distributed as dist

    from ringccl.ops import parse_op
    from ringccl.backends.torch import executor, transport
    from .calls import collective_calls as _calls

    # the executor asks the group's backend, the transport batches the step's operations
    executor.dist = transport.dist = _Nccl(dist)
    # a group that reads "nccl" but holds CPU tensors would pick shared memory under "auto":
    # this test is about the point-to-point lockstep driver
    os.environ["RINGCCL_TRANSPORT"] = "p2p"
    wrong = {}
    for collective, algorithm in cases:
        for count in (0, world_size, 5 * world_size, 12 * world_size):
            # 16-byte segments: several operations per peer per step
            calls = _calls(collective, algorithm, parse_op("sum"), world_size, count,
                           torch.float64, rank, {"segment_bytes": 16})
            x, out = calls.make_in(), calls.make_out()
            calls.builtin(x, out)
            expected = calls.result(x, out).clone()
            x, out = calls.make_in(), calls.make_out()
            calls.ours(x, out)
            if not torch.equal(calls.result(x, out), expected):
                wrong[(collective, algorithm, count)] = True
    return wrong, executor.dist.batches


class _Nccl:
    """torch.distributed, except that the default group's backend reads "nccl"."""

    def __init__(self, dist):
        self._dist, self.batches = dist, 0

    def get_backend(self, group=None):
        return "nccl"

    def batch_isend_irecv(self, ops):
        self.batches += 1
        return self._dist.batch_isend_irecv(ops)

    def __getattr__(self, name):
        return getattr(self._dist, name)


@pytest.mark.parametrize("world_size", [3, 4])
def test_lockstep_driver_matches_gloo(world_size):
    out = faults.run_ranks(_lockstep, world_size, CASES, timeout=60)
    assert sorted(out) == list(range(world_size)), out
    for rank, (ok, value) in out.items():
        assert ok, value
        wrong, batches = value
        assert not wrong, f"rank {rank}: wrong results for {sorted(wrong)}"
        assert batches > 0, "the lockstep driver was not used"
