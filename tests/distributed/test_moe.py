"""MoE expert parallelism on 4 local gloo processes: the EP layer against the same
layer in one process (outputs and gradients, skewed routing, ranks that receive nothing, a rank
with no tokens, capacity drops), the refusals before any data moves, the micro-chunked pipeline
against the unsplit run, and the 4 x 4 token matrix transposed.

Everything runs in ONE launch (``moe_workers.all_cases``). Tolerance: float64, the EP run and
the reference differ only in summation order (measured: <= 7e-16).
"""

import pytest

torch = pytest.importorskip("torch")

from ringccl.torch.launch import launch  # noqa: E402

from . import moe_workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]

NPROC = 4
EXACT = 1e-12


@pytest.fixture(scope="module")
def runs():
    return launch(moe_workers.all_cases, NPROC, timeout=bounds.job(500))


@pytest.mark.parametrize("case", ["uniform", "skewed", "empty_ranks", "capacity"])
def test_expert_parallel_equals_single_process(runs, case):
    for r in runs:
        diffs = r["equivalence"][case]["diffs"]
        # every local expert's gradient is compared, plus output, input and router gradients
        assert len(diffs) == 3 + moe_workers.EXPERTS // NPROC * 4, diffs
        assert max(diffs.values()) < EXACT, (case, r["equivalence"][case]["rank"], diffs)


def test_skewed_routing_leaves_ranks_empty(runs):
    received = [r["equivalence"]["skewed"]["received"] for r in runs]
    assert received[0] > 3 * max(received[2:]), received   # Zipf: the first experts win
    empty = [r["equivalence"]["empty_ranks"]["received"] for r in runs]
    assert empty[0] == 2 * NPROC * moe_workers.TOKENS and empty[1:] == [0, 0, 0], empty
    # the gradients still flow on the empty ranks (through the router and the tokens)
    assert all(r["equivalence"]["empty_ranks"]["grad_norm"] > 0 for r in runs)


def test_capacity_drops_what_the_reference_drops(runs):
    c = [r["equivalence"]["capacity"] for r in runs]
    assert c[0]["dropped"] > 0
    assert all(x["dropped"] == c[0]["dropped_ref"] for x in c)
    assert c[1]["grad_norm"] == 0.0   # rank 1 had no tokens


def test_bad_input_refused_before_data_moves(runs):
    for r in runs:
        bad = r["bad"]
        assert "out of range" in bad["expert id out of range"] and "[0, 8)" in bad[
            "expert id out of range"]
        assert "holds -1" in bad["negative expert id"]
        assert "probs.shape=(4, 3)" in bad["probs wrong shape"]
        assert "capacity_factor=0 " in bad["capacity 0"]
        assert "capacity_factor=-1.0" in bad["capacity negative"]
        assert "multiple" in bad["experts not a multiple"]
        assert bad["group still works"] == sum(range(NPROC))


def test_pipelined_equals_unsplit(runs):
    for r in runs:
        for chunks, (diff, lanes) in r["overlap"]["diffs"].items():
            assert diff < EXACT, (chunks, diff)
            assert lanes == ["comm", "compute"]
    assert sum(r["overlap"]["dropped"] for r in runs) > 0


def test_token_matrix_transposes_the_token_matrix(runs):
    for dst, r in enumerate(runs):
        assert r["token_matrix"] == [f"Token_G{src}->E{dst}" for src in range(NPROC)]
