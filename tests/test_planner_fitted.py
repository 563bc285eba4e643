"""The planner's fitted constants are what ``benchmarks/fit_planner.py`` fits: the GEMM fraction
per architecture on the validation rows, and the score passes' fraction from Korthikanti et al.
2022 Table 4, a fixed point of the two (a change to the model that moves either fails here until
the fit is re-run and its output committed)."""

import sys
from pathlib import Path

import pytest

from ringccl.planner import gpus

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def fitted():
    sys.path.insert(0, str(BENCH))
    try:
        import fit_planner
        before = gpus.SCORE_PASS_EFFICIENCY
        return {**fit_planner.fit(), "before": before}
    finally:
        sys.path.remove(str(BENCH))


def test_the_committed_gemm_fractions_are_the_fit(fitted):
    for arch, gemm in fitted["gemm_efficiency"].items():
        assert gpus.FITTED[arch][0] == pytest.approx(gemm, abs=1e-3), arch
    # Blackwell has no published run: Hopper's
    assert gpus.FITTED["blackwell"] == gpus.FITTED["hopper"]


def test_the_committed_score_pass_fraction_is_the_fixed_point(fitted):
    assert gpus.SCORE_PASS_EFFICIENCY == pytest.approx(fitted["score_pass_efficiency"], abs=1e-3)
    # one round: the committed pair reproduces itself
    assert len(fitted["rounds"]) == 1
    # the fit puts back the module's constant, whatever it tried on the way
    assert gpus.SCORE_PASS_EFFICIENCY == fitted["before"]
