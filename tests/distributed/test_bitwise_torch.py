"""One result on every rank through ringccl.torch on 4 local gloo processes: every
collective whose result every rank receives × every algorithm × dtype (bfloat16 included), and
the training tools (DDP's comm_hook, GradientBucketer): every rank's bytes equal rank 0's."""

import pytest

torch = pytest.importorskip("torch")

from ringccl.algorithms import algorithms  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from . import bitwise_workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


def test_every_rank_receives_the_same_bytes():
    results = launch(bitwise_workers.compare_collectives, 4, timeout=bounds.job(500))
    failures, checked = results[0]
    assert checked == len(bitwise_workers.pairs()) * len(bitwise_workers.DTYPES) * 6
    assert len(bitwise_workers.pairs()) >= 17
    assert failures == [], "\n".join(failures[:20])
    assert all(r == results[0] for r in results)


def test_replicas_trained_with_direct_stay_bitwise_equal():
    # direct first: the algorithm whose ranks used to round differently
    names = ["direct"] + [a for a in algorithms("all_reduce") if a != "direct"]
    results = launch(bitwise_workers.compare_training, 4, names, timeout=bounds.job(500))
    assert results[0] == [], "\n".join(results[0][:20])
    assert all(r == results[0] for r in results)
