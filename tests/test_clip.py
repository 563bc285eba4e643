"""ringccl.torch.clip_grad_norm_ in one process (no process group): torch's semantics, float32
norms for half-precision gradients, argument errors. The multi-rank cases (different shards,
identical coefficients) are in tests/distributed/test_training.py."""

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import ringccl.torch as rt  # noqa: E402
from ringccl.training import clip  # noqa: E402
from ringccl.errors import ArgumentError, ArgumentTypeError  # noqa: E402


def _params(shapes, seed, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
        p.grad = (torch.randn(shape, generator=g) * scale).to(dtype)
        params.append(p)
    return params


@settings(max_examples=40, deadline=None)
@given(shapes=st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=3), min_size=1,
                       max_size=5),
       seed=st.integers(0, 2 ** 16), max_norm=st.floats(0.0, 20.0),
       norm_type=st.sampled_from([2.0, math.inf]))
def test_matches_torch_clip_grad_norm(shapes, seed, max_norm, norm_type):
    # torch refuses the inf norm of an empty tensor (no identity); ours treats it as 0
    assume(norm_type == 2.0 or all(math.prod(s) for s in shapes))
    ours, ref = _params(shapes, seed), _params(shapes, seed)
    total = rt.clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    expected = torch.nn.utils.clip_grad_norm_(ref, max_norm, norm_type=norm_type)
    assert total.dtype == torch.float32
    assert total.item() == pytest.approx(expected.item(), rel=1e-6, abs=1e-7)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-7)


def test_half_precision_gradients_are_normed_in_float32():
    # 300^2 = 9e4 overflows float16 (max 65504): a norm in float16 would be inf
    params = [torch.nn.Parameter(torch.zeros(1000, dtype=torch.float16))]
    params[0].grad = torch.full((1000,), 300.0, dtype=torch.float16)
    total = rt.clip_grad_norm_(params, max_norm=1.0)
    assert total.item() == pytest.approx(300.0 * math.sqrt(1000), rel=1e-6)
    assert torch.isfinite(params[0].grad).all()
    clipped = params[0].grad.float()
    assert clipped.norm().item() == pytest.approx(1.0, rel=1e-3)


def test_bf16_norm_equals_float32_norm_of_the_same_values():
    params = _params([(4096,)], seed=3, dtype=torch.bfloat16)
    as_float = params[0].grad.float()
    total = rt.clip_grad_norm_(params, max_norm=1e9)  # no clipping: coefficient 1
    assert total.item() == pytest.approx(as_float.norm().item(), rel=1e-6)


def test_float64_gradients_keep_float64():
    params = _params([(10, 10)], seed=1, dtype=torch.float64)
    ref = _params([(10, 10)], seed=1, dtype=torch.float64)
    total = rt.clip_grad_norm_(params, 0.5)
    expected = torch.nn.utils.clip_grad_norm_(ref, 0.5)
    assert total.dtype == torch.float64
    assert total.item() == pytest.approx(expected.item(), rel=1e-14)


def test_params_without_grad_and_single_tensor():
    p = torch.nn.Parameter(torch.ones(3))
    q = torch.nn.Parameter(torch.ones(4))
    q.grad = torch.full((4,), 2.0)
    assert rt.clip_grad_norm_([p, q], 1.0).item() == pytest.approx(4.0)
    q.grad = torch.full((4,), 2.0)
    assert rt.clip_grad_norm_(q, 100.0).item() == pytest.approx(4.0)
    assert torch.equal(q.grad, torch.full((4,), 2.0))  # below max_norm: unchanged


def test_clip_coefficient_formula():
    assert clip.clip_coefficient(torch.tensor(4.0), 1.0).item() == pytest.approx(1 / (4 + 1e-6))
    assert clip.clip_coefficient(torch.tensor(0.5), 1.0).item() == 1.0


@pytest.mark.parametrize("call,error,text", [
    (lambda ps: rt.clip_grad_norm_(ps, -1.0), ArgumentError,
     "max_norm=-1.0 must be a number >= 0"),
    (lambda ps: rt.clip_grad_norm_(ps, "1"), ArgumentError, "max_norm='1' must be a number >= 0"),
    (lambda ps: rt.clip_grad_norm_(ps, 1.0, norm_type="x"), ArgumentError,
     "norm_type='x' is not supported; expected 2.0 or inf"),
    (lambda ps: rt.clip_grad_norm_(ps, float("nan")), ArgumentError, "max_norm=nan"),
    (lambda ps: rt.clip_grad_norm_(ps, 1.0, norm_type=3), ArgumentError, "norm_type=3.0"),
    (lambda ps: rt.clip_grad_norm_(ps, 1.0, sharded=[True]), ArgumentError, "one bool per"),
    (lambda ps: rt.clip_grad_norm_([1.0], 1.0), ArgumentTypeError, "parameters[0] must be"),
])
def test_bad_arguments(call, error, text):
    with pytest.raises(error, match=text.replace("[", r"\[").replace("]", r"\]")):
        call(_params([(3,), (2,)], 0))
