"""Every non-ring all_reduce, reduce_scatter and all_gather algorithm on 2–4 local gloo
processes against torch.distributed's own collectives (one launch per world size)."""

import pytest

torch = pytest.importorskip("torch")

from ringccl.torch.launch import launch  # noqa: E402

from . import algo_workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_algorithms_match_torch_distributed(nproc):
    results = launch(algo_workers.compare_algorithms, nproc, timeout=bounds.job(400))
    expected = len(algo_workers.algorithms())
    assert expected >= 9
    assert results == [([], expected)] * nproc
