"""The torch.distributed backend's per-call decisions, remembered (pg_front): every table gives
a fresh decision when what it is keyed on changes (op, dtype, collective, timeout,
RINGCCL_TIMEOUT, group, bytes, RINGCCL_ALGO, RINGCCL_DEBUG), refusals are raised at every call
with the uncached message, ringccl.clear_caches() empties each table, and answers equal the
uncached decision. Also the inline call's light Work (dispatch.DoneWork) against the
future-backed Work, and when torch.no_grad can be left out (dispatch.autograd_free)."""

from __future__ import annotations

import datetime

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import ringccl  # noqa: E402
from ringccl import frontend  # noqa: E402
from ringccl.backends.torch import dispatch, pg_front  # noqa: E402
from ringccl.costmodel import choice  # noqa: E402
from ringccl.errors import ArgumentError, PeerError  # noqa: E402
from ringccl.ops import ReduceOp  # noqa: E402


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for name in ("RINGCCL_TIMEOUT", "RINGCCL_ALGO", "RINGCCL_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    ringccl.clear_caches()
    yield
    ringccl.clear_caches()


# -- reduce_op ------------------------------------------------------------------------------------

def _refusal(kind, dtype, collective):
    with pytest.raises(RuntimeError) as info:
        pg_front._decide_op(kind, dtype, collective)
    return str(info.value)


def test_reduce_op_answers_follow_op_dtype_and_collective():
    assert pg_front.reduce_op(dist.ReduceOp.SUM, torch.float32, "all_reduce") is ReduceOp.SUM
    assert pg_front.reduce_op(dist.ReduceOp.AVG, torch.float32, "all_reduce") is ReduceOp.AVG
    assert pg_front.reduce_op(dist.ReduceOp.BXOR, torch.int32, "reduce") is ReduceOp.BXOR
    # the same op on another dtype is decided afresh: AVG on integers and BXOR on floats are
    # refused every time, with the uncached message, though the other dtype was remembered
    for _ in range(3):
        with pytest.raises(RuntimeError, match="AVG with non-floating dtype int32") as info:
            pg_front.reduce_op(dist.ReduceOp.AVG, torch.int32, "all_reduce")
        assert str(info.value) == _refusal(dist.ReduceOp.AVG, torch.int32, "all_reduce")
        with pytest.raises(RuntimeError, match="BXOR with non-integral dtype float32"):
            pg_front.reduce_op(dist.ReduceOp.BXOR, torch.float32, "reduce")
    # a ReduceOp object (opts.reduceOp) and its RedOpType share the answer
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    assert pg_front.reduce_op(opts.reduceOp, torch.float64, "all_reduce") is ReduceOp.MAX
    assert pg_front.reduce_op(dist.ReduceOp.MAX, torch.float64, "all_reduce") is ReduceOp.MAX


def test_premul_sum_is_refused_at_every_call():
    op = dist._make_nccl_premul_sum(2.0)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Cannot use ReduceOp.PREMUL_SUM with ringccl"):
            pg_front.reduce_op(op, torch.float32, "all_reduce")
    assert not any(k[0] == op.op.value for k in pg_front._op_answers)   # keyed by the int


def test_reduce_op_table_is_bounded_and_cleared():
    pg_front.reduce_op(dist.ReduceOp.SUM, torch.float32, "all_reduce")
    assert pg_front._op_answers
    ringccl.clear_caches()
    assert not pg_front._op_answers
    for i in range(pg_front.CACHE_SIZE + 5):
        pg_front.reduce_op(dist.ReduceOp.SUM, torch.float32, f"c{i}")
    assert len(pg_front._op_answers) <= pg_front.CACHE_SIZE


# -- call_options ---------------------------------------------------------------------------------

def _fresh_options(timeout):
    t = timeout if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0 \
        else None
    return frontend.options(pg_front.FRONT, None, t, None, None)


def test_call_options_follow_the_timeout_and_ringccl_timeout(monkeypatch):
    unset = dist.AllreduceOptions().timeout   # torch's "not set" (-1 ms)
    assert pg_front.call_options(unset) == _fresh_options(unset)
    assert pg_front.call_options(unset).timeout is None
    monkeypatch.setenv("RINGCCL_TIMEOUT", "5")
    assert pg_front.call_options(unset).timeout == 5.0
    monkeypatch.setenv("RINGCCL_TIMEOUT", "7.5")
    assert pg_front.call_options(unset).timeout == 7.5
    # a per-call timeout wins over the variable, each its own entry
    assert pg_front.call_options(datetime.timedelta(seconds=3)).timeout == 3.0
    assert pg_front.call_options(datetime.timedelta(seconds=4)).timeout == 4.0
    assert pg_front.call_options(None).timeout == 7.5
    monkeypatch.delenv("RINGCCL_TIMEOUT")
    assert pg_front.call_options(unset).timeout is None
    for t in (unset, None, datetime.timedelta(seconds=2)):
        assert pg_front.call_options(t) == _fresh_options(t)


def test_a_bad_ringccl_timeout_raises_at_every_call(monkeypatch):
    unset = dist.AllreduceOptions().timeout
    pg_front.call_options(unset)
    monkeypatch.setenv("RINGCCL_TIMEOUT", "soon")
    for _ in range(2):
        with pytest.raises(ArgumentError, match="RINGCCL_TIMEOUT='soon' must be a finite"):
            pg_front.call_options(unset)
    monkeypatch.setenv("RINGCCL_TIMEOUT", "2")
    assert pg_front.call_options(unset).timeout == 2.0


def test_call_options_table_is_cleared_and_bounded():
    pg_front.call_options(None)
    assert pg_front._options
    ringccl.clear_caches()
    assert not pg_front._options
    for i in range(pg_front.CACHE_SIZE + 5):
        pg_front.call_options(datetime.timedelta(seconds=i + 1))
    assert len(pg_front._options) <= pg_front.CACHE_SIZE


# -- call_algorithm -------------------------------------------------------------------------------

class _Layout:
    local_size = None


class _FakeGroup:
    """What call_algorithm reads of a dispatch.Group."""

    def __init__(self, size: int, transport: str):
        self.size, self.transport, self.rank, self.name = size, transport, 0, "fake"
        self.layout, self.logged, self.choices = _Layout(), set(), {}
        self.closed = True   # nothing for the exit hook to close
        dispatch.live.add(self)


def test_call_algorithm_follows_group_bytes_and_ringccl_algo(monkeypatch):
    shm, p2p = _FakeGroup(2, "shm"), _FakeGroup(2, "p2p")
    cross = choice.two_shot_bytes(2, "torch")
    assert pg_front.call_algorithm(shm, "all_reduce", 8) == ("direct", {})
    assert pg_front.call_algorithm(shm, "all_reduce", cross) == ("two_shot", {})
    assert pg_front.call_algorithm(p2p, "all_reduce", 8) == ("ring", {})   # another group
    monkeypatch.setenv("RINGCCL_ALGO", "all_reduce:ring")
    assert pg_front.call_algorithm(shm, "all_reduce", 8) == ("ring", {})
    monkeypatch.setenv("RINGCCL_ALGO", "all_reduce:two_shot")
    assert pg_front.call_algorithm(shm, "all_reduce", 8) == ("two_shot", {})
    monkeypatch.delenv("RINGCCL_ALGO")
    assert pg_front.call_algorithm(shm, "all_reduce", 8) == ("direct", {})
    for g in (shm, p2p):
        for n in (8, cross):
            fresh = choice.choose("all_reduce", g.size, n, g.transport, honour_env=True)
            assert pg_front.call_algorithm(g, "all_reduce", n) == (fresh.algorithm,
                                                                   dict(fresh.params))


def test_a_bad_ringccl_algo_raises_at_every_call(monkeypatch):
    g = _FakeGroup(2, "shm")
    pg_front.call_algorithm(g, "all_reduce", 8)
    monkeypatch.setenv("RINGCCL_ALGO", "all_reduce:nope")
    for _ in range(2):
        with pytest.raises(ArgumentError, match="nope"):
            pg_front.call_algorithm(g, "all_reduce", 8)


def test_ringccl_debug_decides_at_every_call(monkeypatch):
    g = _FakeGroup(2, "shm")
    monkeypatch.setenv("RINGCCL_DEBUG", "INFO")
    assert pg_front.call_algorithm(g, "all_reduce", 8) == ("direct", {})
    assert not g.choices   # logged calls are decided afresh (and log as they always did)
    assert ("all_reduce", "<1KiB") in g.logged
    monkeypatch.delenv("RINGCCL_DEBUG")
    pg_front.call_algorithm(g, "all_reduce", 8)
    assert len(g.choices) == 1


def test_call_algorithm_params_are_the_callers_own():
    g = _FakeGroup(4, "hybrid")
    g.layout = type("L", (), {"local_size": 2})()
    first = pg_front.call_algorithm(g, "all_reduce", 1 << 20)
    first[1]["spoiled"] = True
    again = pg_front.call_algorithm(g, "all_reduce", 1 << 20)
    assert "spoiled" not in again[1] and again[1] is not first[1]


def test_call_algorithm_tables_are_cleared_and_bounded():
    g = _FakeGroup(2, "shm")
    pg_front.call_algorithm(g, "all_reduce", 8)
    assert g.choices
    ringccl.clear_caches()
    assert not g.choices
    for n in range(pg_front.CACHE_SIZE + 5):
        pg_front.call_algorithm(g, "all_reduce", n)
    assert len(g.choices) <= pg_front.CACHE_SIZE


# -- the inline call's Work -----------------------------------------------------------------------

def _answers(work):
    out = {"completed": work.is_completed(), "success": work.is_success()}
    for name in ("wait", "result"):
        try:
            out[name] = getattr(work, name)()
        except Exception as exc:  # noqa: BLE001 - compared
            out[name] = (type(exc), str(exc))
    exc = work.exception()
    out["exception"] = None if exc is None else (type(exc), str(exc))
    try:
        out["future"] = work.get_future().value()
    except Exception as exc:  # noqa: BLE001 - compared (torch appends where the callback ran)
        out["future"] = (type(exc), str(exc).splitlines()[0])
    return out


@pytest.mark.parametrize("outcome", [(True, ["t"]), (True, []),
                                     (False, PeerError("rank 1 died at step 2"))])
def test_done_work_answers_as_the_future_backed_work(outcome):
    settled = torch.futures.Future()
    settled.set_result(outcome)
    light = dispatch.DoneWork(outcome)
    assert _answers(light) == _answers(dispatch.Work.of_outcome(settled))
    assert light.get_future() is light.get_future()


def test_done_work_failure_raises_the_collectives_exception():
    exc = PeerError("peer 1 stalled")
    with pytest.raises(PeerError, match="peer 1 stalled"):
        dispatch.DoneWork((False, exc)).wait()


# -- when torch.no_grad can be left out -----------------------------------------------------------

def test_autograd_free():
    plain, leaf = torch.ones(4), torch.ones(4, requires_grad=True)
    with torch.no_grad():
        quiet_view = leaf[:2]
    cases = {"plain": (plain, True), "leaf": (leaf, False), "grad view": (leaf[:2], False),
             "no_grad view": (quiet_view, False), "plain view": (plain[:2], False)}
    for name, (t, free) in cases.items():
        assert dispatch.autograd_free([t]) is free, name
        assert dispatch.autograd_free([plain, t]) is free, name
        with torch.no_grad():   # grad mode already off: nothing to enter
            assert dispatch.autograd_free([t]), name
    # what the rule rests on: in grad mode, an in-place write to a tensor it calls free
    # records nothing, and the ones it refuses are the ones autograd checks
    plain.add_(1)
    assert plain.grad_fn is None and not plain.requires_grad
    with pytest.raises(RuntimeError):
        leaf.add_(1)
    with pytest.raises(RuntimeError):
        quiet_view.add_(1)


def test_run_plain_keeps_the_callers_grad_mode():
    assert dispatch._run_plain(torch.is_grad_enabled) == (True, True)
    assert dispatch._run(torch.is_grad_enabled) == (True, False)
    ok, exc = dispatch._run_plain(lambda: 1 / 0)
    assert not ok and isinstance(exc, ZeroDivisionError)


def test_a_failed_works_future_is_failed_for_its_cpp_readers_too():
    """DDP's reducer reads a bucket's future in C++: a failure must be the future's error (a
    chained ``then`` sees it raise; ``wait()`` raises a RuntimeError naming the cause), not a
    value holding the exception (``Future.set_exception``), which C++ reads as tensors."""
    exc = PeerError("rank 1 died at step 2")
    settled = torch.futures.Future()
    settled.set_result((False, exc))
    for work in (dispatch.DoneWork((False, exc)), dispatch.Work.of_outcome(settled)):
        seen = []
        work.get_future().then(lambda f: seen.append(f.value()))
        assert seen == []   # the callback raised reading the value: no value was delivered
        with pytest.raises(RuntimeError, match="PeerError: rank 1 died at step 2"):
            work.get_future().wait()
        with pytest.raises(PeerError, match="rank 1 died at step 2"):
            work.wait()
        assert work.exception() is exc and not work.is_success()
