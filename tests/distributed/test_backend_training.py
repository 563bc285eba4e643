"""Unmodified DDP and FSDP2 on backend "ringccl" match the same training on gloo.

One launch of 4 processes trains every variant on both backends (backend_train_workers). The
two backends differ only in the order of floating-point sums (ringccl's ring vs gloo's own
all-reduce), so float32 losses agree to ~1e-6 relative; the tolerances leave room for that
rounding compounding over 8 steps, never for a wrong answer (a misplaced bucket or a missing
rank changes the loss by far more).
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from ringccl.torch.launch import launch  # noqa: E402

from . import backend_train_workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]


@pytest.fixture(scope="module")
def runs():
    return launch(backend_train_workers.everything, 4, backend="ringccl", timeout=bounds.job(500))


VARIANTS = ["ddp", "ddp_hook", "ddp_no_sync", "fsdp2",
            # RINGCCL_BACKEND_INLINE_BYTES=0 (every call on the worker) and 8 KiB (mixed)
            "ddp_thread", "ddp_mixed", "fsdp2_thread", "fsdp2_mixed"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_ringccl_matches_gloo(runs, variant):
    for rank, r in enumerate(runs):
        mine_loss, mine_params = (np.array(a) for a in r[f"{variant}/ringccl"])
        ref_loss, ref_params = (np.array(a) for a in r[f"{variant}/gloo"])
        assert len(mine_loss) == backend_train_workers.STEPS
        np.testing.assert_allclose(mine_loss, ref_loss, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{variant} rank {rank}")
        np.testing.assert_allclose(mine_params, ref_params, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{variant} rank {rank}")
        # the training really trained (a comparison of two unchanged models would pass)
        assert mine_loss[-1] < mine_loss[0]


def test_replicas_agree(runs):
    for variant in VARIANTS:
        first = np.array(runs[0][f"{variant}/ringccl"][1])
        for r in runs[1:]:
            np.testing.assert_allclose(np.array(r[f"{variant}/ringccl"][1]), first, rtol=1e-6,
                                       atol=1e-7)
