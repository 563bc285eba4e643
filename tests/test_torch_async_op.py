"""``async_op=`` on ringccl.torch's functions: torch.distributed's first argument people port.
Refused plainly for True (before any process group is looked at), accepted for False."""

import pytest

torch = pytest.importorskip("torch")

import ringccl.torch as rt  # noqa: E402
from ringccl.errors import ArgumentError  # noqa: E402

t = torch.zeros(4)
CALLS = {
    "all_reduce": lambda **kw: rt.all_reduce(t, **kw),
    "broadcast": lambda **kw: rt.broadcast(t, 0, **kw),
    "reduce": lambda **kw: rt.reduce(t, 0, **kw),
    "reduce_scatter_tensor": lambda **kw: rt.reduce_scatter_tensor(t[:2], t, **kw),
    "all_gather_into_tensor": lambda **kw: rt.all_gather_into_tensor(t, t[:2], **kw),
    "scatter": lambda **kw: rt.scatter(t, None, 0, **kw),
    "gather": lambda **kw: rt.gather(t, None, 0, **kw),
    "all_to_all_single": lambda **kw: rt.all_to_all_single(t, t.clone(), **kw),
    "all_to_all": lambda **kw: rt.all_to_all([t], [t], **kw),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_async_op_true_is_refused_plainly(name):
    with pytest.raises(ArgumentError) as info:
        CALLS[name](async_op=True)
    message = str(info.value)
    assert f"ringccl.torch.{name}: async_op=True is not supported" in message
    assert "ringccl.torch.Communicator" in message and "takes the parameters" not in message


@pytest.mark.parametrize("name", sorted(CALLS))
def test_async_op_false_means_what_it_always_does(name):
    # accepted: the call then fails only for want of a process group, not for async_op
    with pytest.raises(Exception) as info:
        CALLS[name](async_op=False)
    assert "async_op" not in str(info.value)
