"""The shared-memory transport on real processes: every collective and algorithm over
shm against torch.distributed's own gloo result, dtypes, ops, counts 0, 1, < N and not
divisible; bitwise identical results across ranks; growth of the working area; the zero-copy
``shm_empty`` path; two groups never sharing a segment; ``transport="p2p"``; a
``RINGCCL_HOST_ID`` split making "auto" pick p2p; a hypothesis property test in one job; a
too-small tmpfs refused at set-up; nothing left in the shared-memory directory afterwards.

Every launch runs with ``RINGCCL_SHM_DIR`` set to a fresh directory, so "nothing left" is
checked by listing it. Workers return failure strings instead of raising, so every rank reaches
every collective.
"""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402

from ringccl.algorithms import REGISTRY, build_schedule  # noqa: E402
from ringccl.ops import parse_op  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from .calls import collective_calls  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(300))]

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.bool]
REDUCING = ("all_reduce", "reduce", "reduce_scatter")


def _params(collective, algorithm, n):
    params = {}
    if algorithm == "hierarchical":
        params["local_size"] = 2 if n % 2 == 0 else 1
    if "root" in __import__("inspect").signature(REGISTRY[(collective, algorithm)].builder) \
            .parameters:
        params["root"] = n - 1
    return params


def _ops(collective, dtype):
    if collective not in REDUCING:
        return ["sum"]
    if dtype == torch.bool:
        return ["max"]
    if dtype == torch.int8:
        return ["sum", "bxor"]
    return ["sum", "max"]


def every_algorithm(rank, world_size):
    """Every registered (collective, algorithm) over shm vs gloo, several dtypes/ops/counts."""
    n = world_size
    failures, calls = [], 0
    for (collective, algorithm) in sorted(REGISTRY):
        params = _params(collective, algorithm, n)
        try:
            build_schedule(collective, algorithm, n, **params)
        except Exception:      # e.g. a power-of-two-only algorithm on 3 ranks
            continue
        params["transport"] = "shm"
        blocked = collective in ("reduce_scatter", "scatter", "all_to_all")
        counts = [0, n, 3 * n] if blocked else [0, 1, n - 1, n + 1, 1001]
        # restore=False: final receives land in the caller's arrays (ringccl.engine.staged)
        for dtype, restore in [(d, None) for d in DTYPES] + [(torch.float32, False),
                                                             (torch.int8, False)]:
            params["restore"] = restore
            for op in _ops(collective, dtype):
                for count in counts:
                    c = collective_calls(collective, algorithm, parse_op(op), n, count, dtype,
                                         rank, params)
                    c_ref = collective_calls(collective, algorithm, parse_op(op), n, count,
                                             dtype, rank, {k: v for k, v in params.items()
                                                           if k == "root"})
                    x, out = c.make_in(), c.make_out()
                    xr, outr = c_ref.make_in(), c_ref.make_out()
                    try:
                        c.ours(x, out)
                        c_ref.builtin(xr, outr)
                    except Exception as exc:   # noqa: BLE001 - reported, not raised
                        failures.append(f"{algorithm} {collective} {dtype} {op} {count}: "
                                        f"{type(exc).__name__}: {exc}")
                        return failures, calls
                    calls += 1
                    if not torch.equal(c.result(x, out), c_ref.result(xr, outr)):
                        failures.append(f"{algorithm} {collective} {dtype} {op} count={count} "
                                        f"restore={restore}")
    return failures, calls


def staged_forms(rank, world_size):
    """The private-buffer collectives over shm given as sources and targets
    (ringccl.engine.staged): list forms, uneven sizes, non-contiguous targets, a target that is
    a source (the scratch path), AVG, restore True and False, each against gloo; and that
    no scratch buffer was used where the slot holds the call."""
    import ringccl
    import ringccl.torch as rt
    from ringccl.engine import workspace

    n, failures = world_size, []

    def scratch_used():
        return any(key[1] == "work" for key in workspace._kept)

    for restore in (None, False):
        kw = dict(transport="shm", restore=restore)
        ringccl.clear_caches()
        dist.barrier()
        # all_to_all (lists, uneven sizes: rank i sends i + j + 1 rows of 3 to rank j)
        ins = [torch.arange((rank + j + 1) * 3, dtype=torch.float32) + 100 * rank
               for j in range(n)]
        outs = [torch.empty((i + rank + 1) * 3) for i in range(n)]
        rt.all_to_all(outs, ins, **kw)   # gloo's list form needs equal sizes: the known values
        refs = [torch.arange((i + rank + 1) * 3, dtype=torch.float32) + 100 * i
                for i in range(n)]
        if not all(torch.equal(a, b) for a, b in zip(outs, refs)):
            failures.append(f"all_to_all lists restore={restore}")
        # all_to_all_single into a non-contiguous output (a transposed view)
        x = torch.arange(n * 4 * 5, dtype=torch.int32).reshape(n * 4, 5) * (rank + 1)
        base = torch.empty(5, n * 4, dtype=torch.int32)
        out, ref = base.t(), torch.empty(n * 4, 5, dtype=torch.int32)
        rt.all_to_all_single(out, x, **kw)
        dist.all_to_all_single(ref, x)
        if not torch.equal(out, ref):
            failures.append(f"all_to_all_single non-contiguous restore={restore}")
        if scratch_used():
            failures.append(f"a scratch buffer was used over shm (restore={restore})")
        # in place: the output is the input (the scratch path keeps it right)
        y = torch.arange(n * 6, dtype=torch.float64) + rank
        yr = y.clone()
        rt.all_to_all_single(y, y, **kw)
        dist.all_to_all_single(yr, yr.clone())
        if not torch.equal(y, yr):
            failures.append(f"all_to_all_single in place restore={restore}")
        # scatter from the last rank, whose own tensor is one of its scatter_list
        root = n - 1
        t = torch.full((7,), -1.0)
        blocks = [torch.arange(7.0) + 10 * j for j in range(n)]
        if rank == root:
            blocks[root] = t
            blocks[root].copy_(torch.arange(7.0) + 10 * root)
        rt.scatter(t, [b.clone() if b is t else b for b in blocks] if rank == root else None,
                   src=root, **kw)
        if not torch.equal(t, torch.arange(7.0) + 10 * rank):
            failures.append(f"scatter restore={restore}")
        # gather into a list of separate tensors on rank 0
        mine = torch.arange(9, dtype=torch.int64) * (rank + 2)
        got = [torch.empty(9, dtype=torch.int64) for _ in range(n)] if rank == 0 else None
        want = [torch.empty(9, dtype=torch.int64) for _ in range(n)] if rank == 0 else None
        rt.gather(mine, got, dst=0, **kw)
        dist.gather(mine, want, dst=0)
        if rank == 0 and not all(torch.equal(a, b) for a, b in zip(got, want)):
            failures.append(f"gather restore={restore}")
        # reduce_scatter, AVG, into a non-contiguous output
        g = torch.Generator().manual_seed(rank)
        inp = torch.randn(n * 6, generator=g)
        out2 = torch.empty(2, 3).t()
        ref2 = torch.empty(6)
        rt.reduce_scatter_tensor(out2, inp, op="avg", **kw)
        dist.reduce_scatter_tensor(ref2, inp, dist.ReduceOp.AVG)
        flat = out2.contiguous().view(-1)   # the output's elements in C order
        if not torch.allclose(flat, ref2, atol=1e-6):
            failures.append(f"reduce_scatter avg non-contiguous restore={restore}")
        # segments: lazy sends copied into the slot as they are posted (a 12 MiB broadcast
        # runs in 2 MiB segments by default; the others with an explicit segment size)
        big = torch.arange(3 << 20, dtype=torch.float32) + 7 * rank
        ref3 = big.clone()
        rt.broadcast(big, 1, **kw)
        dist.broadcast(ref3, 1)
        if not torch.equal(big, ref3):
            failures.append(f"segmented broadcast restore={restore}")
        x4 = torch.arange(n * 5000, dtype=torch.int32) * (rank + 1)
        o4, r4 = torch.empty_like(x4), torch.empty_like(x4)
        rt.all_to_all_single(o4, x4, segment_bytes=4096, **kw)
        dist.all_to_all_single(r4, x4)
        a5 = torch.randint(-8, 8, (30011,), generator=torch.Generator().manual_seed(rank))
        r5 = a5.clone()
        rt.all_reduce(a5, algorithm="two_shot", segment_bytes=8192, **kw)
        dist.all_reduce(r5)
        if not (torch.equal(o4, r4) and torch.equal(a5, r5)):
            failures.append(f"segmented all_to_all / two_shot restore={restore}")
    return failures


def _digest(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def features(rank, world_size, shm_dir):
    """Bitwise identity across ranks, growth, zero copy, two groups, p2p, host split."""
    import ringccl
    import ringccl.torch as rt
    from ringccl.backends.shm import registry
    from ringccl.backends.torch import executor, shm

    failures = []
    # bitwise identical on every rank for a shared result, float data (order matters)
    for algorithm in [a for (c, a) in REGISTRY if c == "all_reduce"]:
        if algorithm == "hierarchical":
            continue
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(1003, generator=g)
        try:
            rt.all_reduce(x, algorithm=algorithm, transport="shm")
        except Exception as exc:   # noqa: BLE001
            if "power of two" in str(exc) or "world_size" in str(exc):
                continue
            raise
        everyone = [None] * world_size
        dist.all_gather_object(everyone, _digest(x))
        if len(set(everyone)) != 1:
            failures.append(f"{algorithm}: ranks' bits differ")
    # growth: small, big, small (the working area grows once, results stay right)
    state, _ = shm.shm_state(None)
    sizes = []
    for count in (10, 300_000, 10):
        x = torch.full((count,), float(rank + 1))
        rt.all_reduce(x)
        if not torch.equal(x, torch.full((count,), world_size * (world_size + 1) / 2)):
            failures.append(f"growth: wrong result at count {count}")
        sizes.append(state.work_slot)
    if not (sizes[0] < sizes[1] == sizes[2]) or sizes[1] < 300_000 * 4:
        failures.append(f"growth: slot sizes {sizes}")
    # zero copy: a shm_empty tensor is reduced where it lies (the working area does not grow)
    before = state.work_slot
    z = rt.shm_empty((1 << 21,), dtype=torch.float32)
    z.fill_(rank + 1)
    ref = z.clone()
    dist.all_reduce(ref)
    rt.all_reduce(z)
    if not torch.equal(z, ref):
        failures.append("zero copy: wrong result")
    if state.work_slot != before or state.locate(z.data_ptr(), z.numel() * z.element_size()) is None:
        failures.append(f"zero copy: it was copied (slot {before} -> {state.work_slot})")
    try:
        rt.shm_empty((-1,))
        failures.append("shm_empty((-1,)) was accepted")
    except ValueError:
        pass
    try:
        rt.shm_empty((4,), torch.complex64)
        failures.append("shm_empty(complex64) was accepted")
    except TypeError as exc:
        if "complex64" not in str(exc):
            failures.append(f"shm_empty(complex64) refused without naming it: {exc}")
    if z.untyped_storage().nbytes() != (1 << 21) * 4:   # its own bytes, not the segment
        failures.append(f"shm_empty storage {z.untyped_storage().nbytes()} bytes")
    # two groups at once never share a segment
    sub = dist.new_group([0, 1])
    if rank in (0, 1):
        y = torch.ones(5)
        rt.all_reduce(y, group=sub)
        if not torch.equal(y, torch.full((5,), 2.0)):
            failures.append("subgroup: wrong result")
        sub_state, _ = shm.shm_state(sub)
        if sub_state.uid == state.uid or sub_state is state:
            failures.append("two groups share a segment")
    # transport="p2p" still works; "auto" picks shm here
    y = torch.ones(7)
    rt.all_reduce(y, transport="p2p")
    if not torch.equal(y, torch.full((7,), float(world_size))):
        failures.append("p2p: wrong result")
    from ringccl.backends.torch.transport import resolve_transport
    if resolve_transport(None, "auto", y) != "shm":
        failures.append("auto did not pick shm on one host")
    # RINGCCL_HOST_ID split into two "hosts": auto picks p2p on a new group
    os.environ["RINGCCL_HOST_ID"] = f"host{rank % 2}"
    split = dist.new_group(list(range(world_size)))
    if resolve_transport(split, "auto", y) != "p2p":
        failures.append("auto did not pick p2p across hosts")
    rt.all_reduce(y, group=split)
    del os.environ["RINGCCL_HOST_ID"]
    ringccl.clear_caches()   # every rank at once: frees every group's shared memory
    if registry.groups("torch"):
        failures.append("clear_caches kept shared memory")
    dist.barrier()
    left = [f for f in os.listdir(shm_dir) if f.startswith("ringccl-")]
    if left:
        failures.append(f"left in {shm_dir}: {left}")
    # the shm_empty tensor outlives clear_caches as valid memory (no longer zero copy)
    z.fill_(float(rank + 1))
    ref = z.clone()
    dist.all_reduce(ref)
    rt.all_reduce(z)
    if not torch.equal(z, ref):
        failures.append("shm_empty tensor after clear_caches: wrong result")
    # a dtype the shm data path does not hold: refused by name on every rank, nothing moves
    from ringccl.errors import ArgumentTypeError
    try:
        executor.execute(ringccl.schedule("all_reduce", "direct", world_size),
                         torch.zeros(4, dtype=torch.complex64), transport="shm")
        failures.append("complex64 over shm was not refused")
    except ArgumentTypeError as exc:
        if "complex64" not in str(exc):
            failures.append(f"complex64 refusal does not name the dtype: {exc}")
    ringccl.clear_caches()
    return failures


def one_rank_grows(rank, world_size):
    """Calls where only some ranks need a larger working area (the others enter lazily and
    join the growth inside a wait or when they leave the call), checked against gloo."""
    import ringccl.torch as rt
    from ringccl.backends.torch import shm

    failures = []
    group = dist.new_group(list(range(world_size)))   # a fresh group: a fresh working area
    x = torch.ones(4)
    rt.all_reduce(x, group=group)
    state, _ = shm.shm_state(group)
    before = state.work_slot
    for k, root in ((100_000, 0), (300_000, 2), (12, 1)):   # the root's buffer is N blocks
        block = torch.arange(k, dtype=torch.float32) + rank
        got = [torch.empty(k) for _ in range(world_size)] if rank == root else None
        ref = [torch.empty(k) for _ in range(world_size)] if rank == root else None
        rt.gather(block, got, dst=root, group=group)
        dist.gather(block, ref, dst=root, group=group)
        if rank == root and not all(torch.equal(a, b) for a, b in zip(got, ref)):
            failures.append(f"gather k={k} root={root}: wrong result")
    sizes = []
    dist.all_gather_object(sizes := [None] * world_size, state.work_slot, group=group)
    if len(set(sizes)) != 1 or sizes[0] <= before:
        failures.append(f"the ranks' working areas differ or did not grow: {sizes}, {before}")
    # uneven all_to_all: rank 0 sends and receives much more than the others
    rows = [[50_000 if 0 in (i, j) else 3 for j in range(world_size)]
            for i in range(world_size)]
    ins, outs = rows[rank], [rows[j][rank] for j in range(world_size)]
    inp = torch.arange(sum(ins), dtype=torch.float32) * (rank + 1)
    a, b = torch.empty(sum(outs)), torch.empty(sum(outs))
    rt.all_to_all_single(a, inp, outs, ins, group=group)
    dist.all_to_all_single(b, inp, outs, ins, group=group)
    if not torch.equal(a, b):
        failures.append("uneven all_to_all: wrong result")
    return failures


def hypothesis_job(rank, world_size):
    """A property test over (count, dtype, op) in one job: every rank draws the same examples
    (derandomized), ours over shm must equal gloo's."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import ringccl.torch as rt

    failures = []
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}

    @settings(derandomize=True, max_examples=40, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(count=st.integers(0, 5000), dtype=st.sampled_from(DTYPES[:4]),
           op=st.sampled_from(sorted(ops)))
    def prop(count, dtype, op):
        g = torch.Generator().manual_seed(count * 31 + rank)
        x = torch.randint(-8, 8, (count,), generator=g).to(dtype)
        ref = x.clone()
        dist.all_reduce(ref, ops[op])
        rt.all_reduce(x, op=op)
        if not torch.equal(x, ref):
            failures.append(f"count={count} {dtype} {op}")

    prop()
    return failures


def test_every_collective_and_algorithm_over_shm_matches_gloo(shm_dir):
    results = launch(every_algorithm, 3, timeout=bounds.job(240))
    assert all(calls > 100 for _, calls in results), results
    assert [f for f, _ in results] == [[]] * 3


def test_private_buffer_collectives_given_as_sources_and_targets(shm_dir):
    assert launch(staged_forms, 3, timeout=bounds.job(200)) == [[], [], []]


def test_growth_zero_copy_groups_and_transport_choice(shm_dir):
    results = launch(features, 3, shm_dir, timeout=bounds.job(200))
    assert results == [[]] * 3


def test_growth_asked_by_one_rank_only(shm_dir):
    assert launch(one_rank_grows, 3, timeout=bounds.job(200)) == [[], [], []]
    assert not os.listdir(shm_dir)


def test_hypothesis_property_over_shm(shm_dir):
    assert launch(hypothesis_job, 2, timeout=bounds.job(200)) == [[], []]


def too_small(rank, world_size):
    import ringccl.torch as rt
    from ringccl.errors import BackendError

    try:
        rt.all_reduce(torch.ones(1 << 20), transport="shm")   # 4 MiB per rank
    except BackendError as exc:
        return type(exc).__name__, str(exc)
    return None


def test_too_small_tmpfs_is_a_clear_error_at_set_up(tmp_path, monkeypatch):
    d = tmp_path / "tiny"
    d.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], check=True,
                       capture_output=True, timeout=bounds.job(10))
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a 1 MiB tmpfs here (needs root/CAP_SYS_ADMIN): {exc}")
    try:
        monkeypatch.setenv("RINGCCL_SHM_DIR", str(d))
        results = launch(too_small, 2, timeout=bounds.job(120))
        assert results[0][0] == "ShmSpaceError", results
        assert "needs 8388608 bytes" in results[0][1] and str(d) in results[0][1]
        assert "RINGCCL_SHM_DIR" in results[0][1]
        assert results[1][0] in ("BackendError", "ShmSpaceError"), results
        assert not os.listdir(d), os.listdir(d)
    finally:
        subprocess.run(["umount", str(d)], capture_output=True, timeout=bounds.job(10))


def killed_in_the_window(rank, world_size):
    """Rank 0 creates a segment and is SIGKILLed before it could unlink it."""
    import signal

    from ringccl.backends.shm import Segment, segment_name
    if rank == 0:
        Segment.create(segment_name("deadbeef", 0), 4096)
        os.kill(os.getpid(), signal.SIGKILL)
    return None


def test_launch_sweeps_what_a_sigkilled_worker_left(shm_dir):
    from ringccl.errors import BackendError

    with pytest.raises(BackendError, match="rank 0 exited"):
        launch(killed_in_the_window, 2, timeout=bounds.job(60))
    assert not os.listdir(shm_dir)   # also checked by the fixture
