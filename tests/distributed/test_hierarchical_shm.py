"""Hierarchical on real processes: 2 "hosts" x 2 ranks on this machine
(``RINGCCL_HOST_ID`` per rank), shared memory inside a host and gloo point-to-point across
(``transport="hybrid"``, :mod:`ringccl.backends.shm.hierarchical`).

* ``transport="auto"`` picks "hybrid" for this layout, and all_reduce, reduce_scatter_tensor
  and all_gather_into_tensor with no other argument run the two-level ``hierarchical``
  schedule (local_size 2: what the algorithm chooser picks here at every size, tests/
  test_choice.py);
* reduce_scatter_tensor and all_gather_into_tensor, auto and ``algorithm="hierarchical"``,
  against torch.distributed's own results (bit for bit but for float reduce_scatter, which
  stays within the summation-order bound);
* all_reduce (hierarchical, and every other all_reduce algorithm), reduce_scatter_tensor and
  all_gather_into_tensor (every algorithm) over hybrid against torch.distributed's gloo result
  on exact integer data in several dtypes and counts (0, 1, < N, not divisible);
* on floats over three decades, hybrid against p2p with the same schedule bit for bit (the
  schedule fixes the reduction order), the same bytes on every rank;
* each host has a segment of its own, and nothing is left in the shared-memory directory.

Workers return failure strings instead of raising, so every rank reaches every collective.
"""

from __future__ import annotations

import hashlib
import os
import tempfile

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402

from ringccl.algorithms import REGISTRY, build_schedule  # noqa: E402
from ringccl.ops import parse_op  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from .calls import collective_calls  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(300))]

DTYPES = [torch.float32, torch.bfloat16, torch.int32]
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


def _digest(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _one_way_against_torch(rank, n):
    """reduce_scatter_tensor and all_gather_into_tensor over hybrid, with no algorithm (auto:
    the two-level ``hierarchical``, local_size 2, seen in a trace of the call) and with
    ``algorithm="hierarchical"`` (local_size 2, and the default local_size: 4, one ring),
    against torch.distributed's own collectives: bit for bit for all_gather and for integer
    reduce_scatter; floats within twice the bound (N-1)·eps·Σ|x| of either summation order."""
    import ringccl.torch as rt
    from ringccl.engine import trace

    failures = []
    variants = [{}, {"algorithm": "hierarchical", "local_size": 2},
                {"algorithm": "hierarchical"}]
    cases = [(torch.int32, "sum"), (torch.int64, "max"), (torch.uint8, "sum"),
             (torch.float32, "sum"), (torch.float64, "sum"), (torch.bfloat16, "sum")]
    for dtype, op in cases:
        torch_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op]
        for count in (0, 1, 3, 1001, 65537):      # elements of one rank's block
            gen = torch.Generator().manual_seed(count * 7 + rank)
            if dtype.is_floating_point:
                x = (torch.randn(n * count, generator=gen, dtype=torch.float64)
                     * 10.0 ** torch.randint(-2, 3, (n * count,), generator=gen)).to(dtype)
            else:
                x = torch.randint(0 if dtype == torch.uint8 else -100, 100, (n * count,),
                                  generator=gen).to(dtype)
            rs_ref = torch.empty(count, dtype=dtype)
            dist.reduce_scatter_tensor(rs_ref, x.clone(), torch_op)
            ag_ref = torch.empty(n * count, dtype=dtype)
            dist.all_gather_into_tensor(ag_ref, x[:count].clone())
            bound = None
            if dtype.is_floating_point:
                bound = torch.empty(count, dtype=torch.float64)
                dist.reduce_scatter_tensor(bound, x.double().abs())
                bound *= 2 * (n - 1) * torch.finfo(dtype).eps
            for kw in variants:
                label = f"{dtype} {op} count={count} {kw or 'auto'}"
                rs, ag = torch.full((count,), 3, dtype=dtype), torch.empty(n * count, dtype=dtype)
                x_before = x.clone()
                with trace.tracing() as rec:
                    rt.reduce_scatter_tensor(rs, x, op, transport="hybrid", **kw)
                    rt.all_gather_into_tensor(ag, x[:count], transport="hybrid", **kw)
                if not torch.equal(x, x_before):
                    failures.append(f"reduce_scatter wrote its input: {label}")
                if bound is None:
                    if not torch.equal(rs, rs_ref):
                        failures.append(f"reduce_scatter {label}")
                elif not ((rs.double() - rs_ref.double()).abs() <= bound).all():
                    failures.append(f"reduce_scatter {label}: "
                                    f"{(rs.double() - rs_ref.double()).abs().max()}")
                if not torch.equal(ag, ag_ref):
                    failures.append(f"all_gather {label}")
                ran = [(c.info["collective"], c.info["algorithm"], c.info["backend"],
                        dict(c.schedule.params)) for c in rec.calls]
                local = kw.get("local_size", 4 if kw else 2)
                expected = [(c, "hierarchical", "hybrid", {"local_size": local})
                            for c in ("reduce_scatter", "all_gather")]
                if count and ran != expected:
                    failures.append(f"{label}: ran {ran}")
    return failures


def two_hosts(rank, world_size, shm_dir):
    import ringccl
    import ringccl.torch as rt
    from ringccl.backends.shm import registry
    from ringccl.backends.torch import hybrid
    from ringccl.backends.torch.transport import resolve_transport
    from ringccl.engine import trace

    os.environ["RINGCCL_HOST_ID"] = f"host{rank // 2}"   # ranks 0, 1 | 2, 3
    n, failures, calls = world_size, [], 0
    probe = torch.ones(4)
    if resolve_transport(None, "auto", probe) != "hybrid":
        failures.append(f"auto picked {resolve_transport(None, 'auto', probe)}, not hybrid")
    # all_reduce with no other argument: the two-level schedule over hybrid (the chooser's
    # pick on this layout, seen in a trace of the call), gloo's result
    for count in (0, 1, 3, 5, 1001, 100003):
        gen = torch.Generator().manual_seed(count * 10 + rank)
        x = torch.randint(-8, 8, (count,), generator=gen).float()
        ref = x.clone()
        with trace.tracing() as rec:
            rt.all_reduce(x)
        dist.all_reduce(ref)
        calls += 1
        if not torch.equal(x, ref):
            failures.append(f"default all_reduce count={count}")
        ran = [(c.info["algorithm"], c.info["backend"], dict(c.schedule.params))
               for c in rec.calls]
        if count and ran != [("hierarchical", "hybrid", {"local_size": 2})]:
            failures.append(f"default all_reduce count={count} ran {ran}")
    failures += _one_way_against_torch(rank, n)
    calls += 1
    layout, state, _ = hybrid.hybrid_state(None)
    if layout.local_ranks != ((0, 1) if rank < 2 else (2, 3)) or state.world_size != 2:
        failures.append(f"host layout {layout}")
    uids = [None] * n
    dist.all_gather_object(uids, state.uid)
    if uids[0] != uids[1] or uids[2] != uids[3] or uids[0] == uids[2]:
        failures.append(f"segments per host: {uids}")
    # every algorithm of the three collectives over hybrid vs gloo, exact integers
    for collective, algorithm in sorted(k for k in REGISTRY if k[0] in COLLECTIVES):
        params = {"local_size": 2} if algorithm == "hierarchical" else {}
        try:
            build_schedule(collective, algorithm, n, **params)
        except Exception:      # noqa: BLE001 - an algorithm for other world sizes
            continue
        params["transport"] = "hybrid"
        blocked = collective == "reduce_scatter"
        counts = [0, n, 3 * n, 1000 * n] if blocked else [0, 1, n - 1, n + 1, 1001]
        for dtype in DTYPES:
            for count in counts:
                c = collective_calls(collective, algorithm, parse_op("sum"), n, count, dtype,
                                     rank, params)
                x, out = c.make_in(), c.make_out()
                xr, outr = c.make_in(), c.make_out()
                try:
                    c.ours(x, out)
                    c.builtin(xr, outr)
                except Exception as exc:   # noqa: BLE001 - reported, not raised
                    failures.append(f"{algorithm} {collective} {dtype} {count}: "
                                    f"{type(exc).__name__}: {exc}")
                    return failures, calls
                calls += 1
                if not torch.equal(c.result(x, out), c.result(xr, outr)):
                    failures.append(f"{algorithm} {collective} {dtype} count={count}")
    # floats: hybrid and p2p run the same schedule, so the same bits, on every rank
    for algorithm in ("hierarchical", "ring", "two_shot"):
        params = {"local_size": 2} if algorithm == "hierarchical" else {}
        gen = torch.Generator().manual_seed(7 + rank)
        x = torch.randn(40001, generator=gen) * 10.0 ** torch.randint(-1, 2, (40001,),
                                                                      generator=gen)
        a, b = x.clone(), x.clone()
        rt.all_reduce(a, algorithm=algorithm, transport="hybrid", **params)
        rt.all_reduce(b, algorithm=algorithm, transport="p2p", **params)
        calls += 2
        if not torch.equal(a, b):
            failures.append(f"{algorithm}: hybrid and p2p differ on floats")
        digests = [None] * n
        dist.all_gather_object(digests, _digest(a))
        if len(set(digests)) != 1:
            failures.append(f"{algorithm}: ranks hold different bytes")
    del os.environ["RINGCCL_HOST_ID"]
    ringccl.clear_caches()   # every rank at once: frees every host's segment
    if registry.groups("hybrid"):
        failures.append("clear_caches kept the hybrid state")
    dist.barrier()
    left = [f for f in os.listdir(shm_dir) if f.startswith("ringccl-")]
    if left:
        failures.append(f"left in {shm_dir}: {left}")
    return failures, calls


def test_two_hosts_of_two_ranks_shm_inside_gloo_across(monkeypatch):
    with tempfile.TemporaryDirectory(prefix="ringccl-test-shm.", dir="/dev/shm") as d:
        monkeypatch.setenv("RINGCCL_SHM_DIR", d)
        results = launch(two_hosts, 4, d, timeout=bounds.job(240))
        assert not os.listdir(d), os.listdir(d)
    assert all(calls > 50 for _, calls in results), results
    assert [f for f, _ in results] == [[]] * 4


def test_host_layout_and_when_auto_uses_hybrid():
    """No processes: the layout every rank derives from the exchanged host identities."""
    from ringccl.backends.shm.hierarchical import host_layout
    two_by_two = host_layout(["a", "a", "b", "b"], 2)
    assert two_by_two.local_ranks == (2, 3) and two_by_two.local_rank == 0
    assert two_by_two.local_of == (None, None, 0, 1) and two_by_two.local_size == 2
    assert two_by_two.balanced and two_by_two.spans_hosts and two_by_two.shares_hosts
    # interleaved hosts: hybrid still routes by host, but the schedule's blocks do not match
    interleaved = host_layout(["a", "b", "a", "b"], 1)
    assert interleaved.local_ranks == (1, 3) and interleaved.local_size is None
    assert interleaved.balanced
    # a rank alone on its host (test_shm's 3-rank split) or one host: not hybrid
    assert not host_layout(["h0", "h1", "h0"], 0).balanced
    assert not host_layout(["h"] * 4, 0).balanced
    assert not host_layout(["a", "b", "c"], 0).balanced
