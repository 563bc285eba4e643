"""Training pieces on a 1-rank gloo group inside the test process (no launch: fast).

With one rank every collective is the identity, so these tests pin the mechanics: bucket
assignment, hook bookkeeping, no_sync, the timeline, the background communicator, and a
ShardedOptimizer that must match its plain optimizer exactly.
"""

import contextlib

import pytest

torch = pytest.importorskip("torch")

import ringccl.torch as rt  # noqa: E402
from ringccl.errors import BackendError  # noqa: E402
from ..gloo_group import one_rank_gloo_group  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(300))]


@pytest.fixture(scope="module", autouse=True)
def one_rank_group():
    yield from one_rank_gloo_group()


def _model(seed=0):
    torch.manual_seed(seed)
    # parameter bytes in order: W1 4096, b1 256, W2 8192, b2 128, W3 640, b3 20
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 5))


def test_buckets_in_reverse_order_first_bucket_small():
    model = _model()
    b = rt.GradientBucketer(model, bucket_cap_mb=20_000 / 2 ** 20, first_bucket_mb=600 / 2 ** 20)
    try:
        params = list(model.parameters())
        # reversed: b3 (20 B), W3 (640 B) -> the first bucket closes once >= 600 B;
        # then b2, W2, b1, W1: 12672 B < 20000 B, one bucket
        assert [[id(p) for p in ps] for ps in b.bucket_params()] == [
            [id(params[5]), id(params[4])], [id(p) for p in reversed(params[:4])]]
        assert b.bucket_sizes() == [4 * (5 + 160), 4 * (32 + 2048 + 64 + 1024)]
    finally:
        b.remove()


def test_buckets_never_mix_dtypes():
    model = _model()
    model[0].double()
    b = rt.GradientBucketer(model, bucket_cap_mb=1, first_bucket_mb=1)
    try:
        dtypes = [{p.dtype for p in ps} for ps in b.bucket_params()]
        assert all(len(d) == 1 for d in dtypes) and len(dtypes) == 2
    finally:
        b.remove()


def _loss(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 16, generator=g)
    return model(x).square().mean()


def test_finish_writes_grads_and_records_a_timeline():
    model, ref = _model(), _model()
    b = rt.GradientBucketer(model, bucket_cap_mb=0.01, first_bucket_mb=0.001)
    try:
        _loss(model).backward()
        b.finish()
        _loss(ref).backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert torch.equal(p.grad, q.grad)  # world_size 1: the mean is the gradient
        (step,) = b.timeline
        assert len(step.buckets) == b.buckets >= 2
        assert step.backward_start <= step.backward_end <= step.finish_done
        for e in step.buckets:
            assert step.backward_start <= e.ready <= e.launched <= e.started <= e.done
        assert b.stats.collectives == b.buckets
    finally:
        b.remove()


def test_no_sync_accumulates_locally_and_skips_communication():
    model, ref = _model(), _model()
    b = rt.GradientBucketer(model, bucket_cap_mb=0.01, first_bucket_mb=0.001)
    try:
        with b.no_sync():
            _loss(model, 1).backward()
            b.finish()  # a no-op here
        assert b.stats.collectives == 0 and not b.timeline
        _loss(model, 2).backward()
        b.finish()
        _loss(ref, 1).backward()
        _loss(ref, 2).backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
        assert b.stats.collectives == b.buckets
    finally:
        b.remove()


def test_second_backward_without_finish_is_refused():
    model = _model()
    b = rt.GradientBucketer(model, bucket_cap_mb=0.01, first_bucket_mb=0.001)
    try:
        _loss(model).backward()
        with pytest.raises(BackendError, match="call GradientBucketer.finish"):
            _loss(model).backward()
    finally:
        b.remove()


def test_without_overlap_buckets_launch_in_finish():
    model = _model()
    b = rt.GradientBucketer(model, bucket_cap_mb=0.01, first_bucket_mb=0.001, overlap=False)
    try:
        _loss(model).backward()
        b.finish()
        (step,) = b.timeline
        assert all(e.launched >= step.backward_end for e in step.buckets)
    finally:
        b.remove()


@pytest.mark.parametrize("optimizer,kw", [(torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
                                          (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})])
def test_sharded_optimizer_on_one_rank_matches_the_plain_optimizer(optimizer, kw):
    model, ref = _model(), _model()
    opt = rt.ShardedOptimizer(model.parameters(), optimizer, **kw)
    ref_opt = optimizer(ref.parameters(), **kw)
    for step in range(5):
        opt.zero_grad()
        ref_opt.zero_grad()
        _loss(model, step).backward()
        _loss(ref, step).backward()
        assert all(p.grad is None for p in model.parameters())  # reduced into the shard
        opt.step()
        ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    assert opt.state_bytes() > 0
    assert opt.stats.by_collective == {"reduce_scatter": 0, "all_gather": 0}  # 1 rank: no bytes
    assert opt.stats.collectives == 10
    opt.remove()


def test_sharded_optimizer_no_sync_and_step_reduce_pending_grads():
    model = _model()
    opt = rt.ShardedOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    with opt.no_sync():
        _loss(model).backward()
    assert all(p.grad is not None for p in model.parameters())  # kept locally
    assert opt.stats.collectives == 0
    opt.step()  # reduces them first
    assert opt.stats.by_collective.keys() == {"reduce_scatter", "all_gather"}
    opt.remove()


def test_communicator_runs_jobs_in_order_and_reports_failures():
    order = []
    with rt.Communicator() as comm:
        futures = [comm.submit(lambda g, i=i: order.append(i) or i) for i in range(20)]
        assert [f.wait() for f in futures] == list(range(20))
        assert order == list(range(20))
        t = torch.arange(6.0)
        assert torch.equal(comm.submit(lambda g: rt.all_reduce(t, group=g)).wait(), t)
        bad = comm.submit(lambda g: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            bad.wait()
        assert comm.submit(lambda g: "still running").wait() == "still running"
    with pytest.raises(BackendError, match="closed"):
        comm.submit(lambda g: None)


def test_comm_hook_state_must_be_none_or_its_group():
    hook = rt.comm_hook()
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(_model())
        ddp.register_comm_hook(object(), hook)
        with pytest.raises(Exception, match="pass None or the process group"):
            _loss(ddp).backward()
    finally:
        hook.communicator.close()


def test_comm_hook_under_ddp_no_sync_sends_nothing():
    hook = rt.comm_hook(compression="bf16")
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(_model())
        ddp.register_comm_hook(None, hook)
        with ddp.no_sync():
            _loss(ddp).backward()
        assert hook.stats.collectives == 0
        with contextlib.nullcontext():
            _loss(ddp).backward()
        assert hook.stats.collectives >= 1 and len(hook.events) == hook.stats.collectives
    finally:
        hook.communicator.close()
