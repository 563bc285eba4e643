"""MIN/MAX on signed zeros and NaN payloads through ringccl.torch on 2 and 3 real processes
(tests/ties.py): every all_reduce algorithm with its parameters, float32 and float64, over shared
memory with the lane off, compiled and replayed (torch's minimum/maximum stay in the Python
replay: the C loop cannot match them), over gloo point-to-point, and over the two-level hybrid
transport (``RINGCCL_HOST_ID`` splits the ranks into two "hosts"): every rank gets the same bytes
(gathered with torch.distributed's own all_gather: no arithmetic). torch's minimum and maximum
keep one operand of a tie in full vectors and the other in the remainder, so the simulator
(numpy) is not the reference here; tests/mpi/test_operand_order_mpi.py holds ringccl.mpi to
it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from .. import bounds  # noqa: E402
from . import faults  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]

#: (label, lane on, transport) of each call
RUNS = (("lane off", False, "shm"), ("compiling", True, "shm"), ("replay", True, "shm"),
        ("p2p", False, "p2p"), ("hybrid", False, "hybrid"))


def _min_max(rank, world_size):
    import os

    import numpy as np

    import ringccl
    import ringccl.torch as rt
    from ringccl.backends.shm import lane

    from .. import ties
    from .bitwise_workers import differing_ranks

    problems, checked = [], 0
    for label, on, transport in RUNS:
        if transport == "hybrid":   # two "hosts": {0} {1} or {0, 1} {2}
            os.environ["RINGCCL_HOST_ID"] = f"host{2 * rank // world_size}"
        seed = 0
        for collective, algorithm, kw in ties.cases(world_size):
            if collective != "all_reduce":
                continue
            for op in ties.OPS:
                for dtype in ties.DTYPES:
                    for count in (1, 2 * world_size + 1, 67, 1000):
                        seed += 1
                        x = ties.inputs(np.random.default_rng(seed), world_size, count, dtype)
                        lane.set_enabled(on)
                        y = torch.from_numpy(x[rank].copy())
                        rt.all_reduce(y, op, algorithm=algorithm, transport=transport, **kw)
                        lane.set_enabled(True)
                        checked += 1
                        differ = differing_ranks(y)
                        if differ:
                            problems.append(f"{label} {algorithm} {kw} {op} {dtype} "
                                            f"count={count}: ranks {differ} differ from rank 0")
    compiled = lane.compiled()
    del os.environ["RINGCCL_HOST_ID"]
    ringccl.clear_caches()   # every rank at once: frees every host's segment
    return problems, checked, compiled


@pytest.mark.parametrize("world_size", [2, 3])
def test_min_max_give_every_rank_the_same_bits(world_size):
    from .. import ties
    out = faults.run_ranks(_min_max, world_size, timeout=bounds.job(120))
    assert len(out) == world_size, out
    cases = sum(1 for c, _, _ in ties.cases(world_size) if c == "all_reduce")
    for rank in range(world_size):
        ok, value = out[rank]
        assert ok, value
        problems, checked, compiled = value
        assert not problems, problems[:5]
        assert checked == len(RUNS) * cases * len(ties.OPS) * len(ties.DTYPES) * 4
        assert compiled > 0
