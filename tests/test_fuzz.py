"""The simulator fuzz in CI: tests/fuzzing.py's strategy, a small number of examples (the
benchmark benchmarks/fuzz_sim.py runs the same strategy for >= 10,000)."""

from hypothesis import example, given, settings

from .fuzzing import Case, fuzz_cases, run_case

#: examples in CI (about 15 s on one core); a profile asking for more (RINGCCL_HYPOTHESIS=
#: thorough) gets its own number
CI_EXAMPLES = max(300, settings.default.max_examples)


@settings(max_examples=CI_EXAMPLES)
@given(fuzz_cases())
# a float16 average in float64 whose result is subnormal: the final rounding's absolute error
@example(Case("all_reduce", "direct", 9, 8922, "float16", "avg", 0, {}, None, 0, "float64"))
def test_simulator_matches_numpy_on_fuzzed_cases(case):
    assert run_case(case) == [], case


def test_run_case_detects_a_wrong_output(monkeypatch):
    """The reference must be able to fail: corrupt one output element of the simulator."""
    import ringccl
    real = ringccl.simulate

    def corrupt(*args, **kwargs):
        r = real(*args, **kwargs)
        r.outputs[1][2] += 1
        return r

    monkeypatch.setattr(ringccl, "simulate", corrupt)
    case = Case("all_reduce", "ring", 3, 5, "int32", "sum", 0, {}, None, 1)
    assert any("rank 1 element 2" in p for p in run_case(case))
