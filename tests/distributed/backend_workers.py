"""Worker bodies for the "ringccl" torch.distributed backend tests.

Every worker runs under ``launch(..., backend="ringccl")``: the default group is ringccl's, and a
gloo group over the same ranks (``dist.new_group(backend="gloo")``) is the reference. Each check
runs the same torch.distributed call on both groups with the same inputs and records where they
differ; the tests assert the records are empty.
"""

import os

import numpy as np
import torch
import torch.distributed as dist
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import ringccl.torch  # noqa: F401  (registers "ringccl")

assert ringccl.torch.backend.BACKEND_NAME == "ringccl"  # the import is the point

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int32": torch.int32, "int64": torch.int64,
          "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG, "band": dist.ReduceOp.BAND,
       "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}


def _allowed(op: str, dtype) -> bool:
    if op == "avg":
        return dtype.is_floating_point
    if op in ("band", "bor", "bxor"):
        return not dtype.is_floating_point
    if dtype is torch.bool:
        return op in ("sum", "min", "max")    # gloo reduces bool as uint8 would wrap otherwise
    return True


def _input(seed: int, count: int, dtype, shape_rows: int = 0) -> torch.Tensor:
    """The same pseudo-random tensor on every rank for the same seed; small integers so that
    sums and products are exact in every dtype (products of 4 values in [1, 2] fit int8)."""
    g = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        t = torch.randint(0, 2, (count,), generator=g).bool()
    elif dtype.is_floating_point:
        t = torch.randint(1, 3, (count,), generator=g).to(dtype)
    else:
        t = torch.randint(1, 3, (count,), generator=g).to(dtype)
    return t


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        return bool(torch.allclose(a.double(), b.double(), rtol=1e-3, atol=1e-3, equal_nan=True))
    return bool(torch.equal(a, b))


def collectives_vs_gloo(rank, world_size, max_examples):
    """Every collective on "ringccl" (default group) against gloo, hypothesis over count, dtype,
    op and root; identical examples on every rank (derandomized, no shrinking: the ranks must
    issue the same calls). Returns the list of mismatches."""
    gloo = dist.new_group(backend="gloo")
    mismatches = []
    calls = {"n": 0}

    def both(fn):
        """fn(group) -> tensors to compare, on ringccl then gloo."""
        mine, ref = fn(None), fn(gloo)
        for i, (a, b) in enumerate(zip(mine, ref)):
            if a.shape != b.shape or not _same(a, b):
                mismatches.append((calls["n"], i, a.tolist()[:8], b.tolist()[:8]))

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate])
    @given(collective=st.sampled_from(["all_reduce", "all_reduce_coalesced", "broadcast",
                                       "reduce", "all_gather", "all_gather_into_tensor",
                                       "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
                                       "all_to_all_single", "gather", "scatter"]),
           count=st.integers(0, 70), dtype=st.sampled_from(sorted(DTYPES)),
           op=st.sampled_from(sorted(OPS)), root=st.integers(0, 3), seed=st.integers(0, 999),
           async_op=st.booleans())
    def check(collective, count, dtype, op, root, seed, async_op):
        calls["n"] += 1
        dt, root = DTYPES[dtype], root % world_size
        if not _allowed(op, dt):
            op = "max"
        rop = OPS[op]
        x = _input(seed * world_size + rank, count, dt)

        def done(work):
            if async_op:
                work.wait()

        def run(group):
            y = x.clone()
            if collective == "all_reduce":
                done(dist.all_reduce(y, op=rop, group=group, async_op=async_op))
                return [y]
            if collective == "all_reduce_coalesced":
                z = (x[: count // 2] + 1).clone()
                with dist._coalescing_manager(group=group, async_ops=False):
                    dist.all_reduce(y, op=rop, group=group)
                    dist.all_reduce(z, op=rop, group=group)
                return [y, z]
            if collective == "broadcast":
                done(dist.broadcast(y, src=root, group=group, async_op=async_op))
                return [y]
            if collective == "reduce":
                done(dist.reduce(y, dst=root, op=rop, group=group, async_op=async_op))
                return [y] if rank == root else []   # elsewhere unspecified (gloo: partials)
            if collective == "all_gather":
                outs = [torch.empty_like(x) for _ in range(world_size)]
                done(dist.all_gather(outs, y, group=group, async_op=async_op))
                return outs
            if collective == "all_gather_into_tensor":
                out = x.new_empty(world_size * count)
                done(dist.all_gather_into_tensor(out, y, group=group, async_op=async_op))
                return [out]
            if collective == "reduce_scatter":
                ins = [_input(seed + 7 * r + rank, count, dt) for r in range(world_size)]
                out = torch.empty_like(x)
                done(dist.reduce_scatter(out, ins, op=rop, group=group, async_op=async_op))
                return [out]
            if collective == "reduce_scatter_tensor":
                inp = _input(seed + rank, world_size * count, dt)
                out = x.new_empty(count)
                done(dist.reduce_scatter_tensor(out, inp, op=rop, group=group,
                                                async_op=async_op))
                return [out]
            if collective == "all_to_all":
                # gloo's alltoall needs equal sizes (uneven ones: all_to_all_single below)
                ins = [_input(seed + 3 * r + rank, count % 9, dt) for r in range(world_size)]
                outs = [x.new_empty(count % 9) for r in range(world_size)]
                done(dist.all_to_all(outs, ins, group=group, async_op=async_op))
                return outs
            if collective == "all_to_all_single":
                # uneven splits: rank r sends (r + j + count) % 5 rows of 3 to rank j
                ins = [(rank + j + count) % 5 for j in range(world_size)]
                outs = [(j + rank + count) % 5 for j in range(world_size)]
                inp = _input(seed + rank, 3 * sum(ins), dt).view(-1, 3)
                out = inp.new_empty(sum(outs), 3)
                done(dist.all_to_all_single(out, inp, outs, ins, group=group,
                                            async_op=async_op))
                return [out]
            if collective == "gather":
                blocks = [torch.empty_like(x) for _ in range(world_size)] if rank == root else None
                done(dist.gather(y, blocks, dst=root, group=group, async_op=async_op))
                return blocks or []
            blocks = ([_input(seed + r, count, dt) for r in range(world_size)]
                      if rank == root else None)
            done(dist.scatter(y, blocks, src=root, group=group, async_op=async_op))
            return [y]

        both(run)

    check()
    return {"mismatches": mismatches, "calls": calls["n"]}


def futures_and_subgroups(rank, world_size):
    """async_op futures (values as gloo's, then-callbacks), issue order of async calls,
    barrier, point-to-point incl. batch_isend_irecv, subgroups with global-rank src/dst, the
    refused ops. Returns a dict of observations."""
    out = {}
    gloo = dist.new_group(backend="gloo")
    # futures: the value is the list of output tensors, as gloo's
    t = torch.full((5,), float(rank + 1))
    fut = dist.all_reduce(t, async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    value = fut.wait()
    out["future_value"] = [type(value).__name__, len(value), value[0] is t]
    out["chained"] = chained.wait().tolist()
    ref = torch.full((5,), float(rank + 1))
    gvalue = dist.all_reduce(ref, group=gloo, async_op=True).get_future().wait()
    out["gloo_future_value"] = [type(gvalue).__name__, len(gvalue), gvalue[0] is ref]
    # many async calls in flight, waited for in reverse: issue order is kept
    ts = [torch.full((1000,), float(rank * 10 + i)) for i in range(6)]
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    for w in reversed(works):
        w.wait()
    out["in_flight"] = [float(x[0]) for x in ts]
    dist.barrier()
    # point to point, user tags, batch_isend_irecv
    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    send, recv = torch.full((4,), float(rank)), torch.empty(4)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt),
                                   dist.P2POp(dist.irecv, recv, prv)])
    for r in reqs:
        r.wait()
    out["ring_recv"] = recv.tolist()
    if rank == 0:
        dist.send(torch.arange(3.0), 1, tag=5)
    elif rank == 1:
        got = torch.empty(3)
        dist.recv(got, 0, tag=5)
        out["tagged"] = got.tolist()
    # subgroups: odd ranks, src/dst given as global ranks
    odd = dist.new_group([1, 3], backend="ringccl")
    even = dist.new_group([0, 2], backend="ringccl")
    if rank in (1, 3):
        b = torch.full((3,), float(rank))
        dist.broadcast(b, src=3, group=odd)
        out["sub_broadcast"] = b.tolist()
        r = torch.full((3,), float(rank))
        dist.reduce(r, dst=3, group=odd)
        out["sub_reduce"] = r.tolist() if rank == 3 else None
        gl = [torch.empty(2) for _ in range(2)] if rank == 1 else None
        dist.gather(torch.full((2,), float(rank)), gl, dst=1, group=odd)
        out["sub_gather"] = [x.tolist() for x in gl] if gl else None
        out["sub_rank"] = [dist.get_rank(odd), dist.get_world_size(odd)]
    else:
        s = torch.full((2,), float(rank))
        dist.all_reduce(s, group=even)
        out["sub_all_reduce"] = s.tolist()
    # refused: the same error class as gloo's
    refused = {}
    for name, call in [
            ("premul_sum", lambda g: dist.all_reduce(torch.ones(3), group=g,
                                                     op=dist._make_nccl_premul_sum(2.0))),
            ("band_float", lambda g: dist.all_reduce(torch.ones(3), group=g,
                                                     op=dist.ReduceOp.BAND)),
            ("complex_min", lambda g: dist.all_reduce(torch.ones(3, dtype=torch.complex64),
                                                      group=g, op=dist.ReduceOp.MIN)),
            ("uint16", lambda g: dist.all_reduce(torch.ones(3, dtype=torch.uint16), group=g)),
            ("gather_mixed_dtypes", lambda g: dist.all_gather_into_tensor(
                torch.empty(3 * world_size, dtype=torch.float64), torch.ones(3), group=g)),
            ("reduce_scatter_mixed_dtypes", lambda g: dist.reduce_scatter_tensor(
                torch.empty(3, dtype=torch.float64), torch.ones(3 * world_size), group=g)),
            ("all_to_all_short_list", lambda g: dist.all_to_all(
                [torch.empty(2) for _ in range(world_size - 1)],
                [torch.ones(2) for _ in range(world_size - 1)], group=g))]:
        row = []
        for g in (None, gloo):
            try:
                call(g)
                row.append(("ok", ""))
            except Exception as exc:  # the class and message are what is compared
                row.append((type(exc).__name__, str(exc)))
        refused[name] = row
    out["refused"] = refused
    # complex SUM goes through torch's view_as_real to ringccl
    c = torch.full((3,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(c)
    out["complex_sum"] = [c[0].real.item(), c[0].imag.item()]
    dist.barrier()
    dist.destroy_process_group(odd if rank % 2 else even)   # a member's own group only
    return out


def _two_threads(group, calls, rank):
    """Issue ``calls`` (a list of (thread, count)) on ``group`` from two threads, "A" and "B",
    in list order: each thread waits until every call before its next one has taken its place
    in the group's issue order (``_Group.issued``), so the order is the same on every rank while
    the other thread's call (inline or queued) may still be running. Returns, per call, its
    result and whether its Work was complete when the call returned."""
    import threading
    g = group._group if hasattr(group, "_group") else None
    base = g.issued
    tensors = [torch.arange(count, dtype=torch.float64) + 1000 * i + rank
               for i, (_, count) in enumerate(calls)]
    works, completed, errors = [None] * len(calls), [None] * len(calls), []

    def run(name):
        try:
            for i, (thread, _) in enumerate(calls):
                if thread != name:
                    continue
                while g.issued < base + i:   # the calls before it are placed (or placing)
                    threading.Event().wait(0.0005)
                works[i] = dist.all_reduce(tensors[i], group=group, async_op=True)
                completed[i] = works[i].is_completed()
        except Exception as exc:  # reported, not lost in the thread
            errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(n,)) for n in ("A", "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in works:
        if w is not None:
            w.wait()
    return tensors, completed, errors


def dispatch_order(rank, world_size):
    """The dispatch policy (inline when the worker is idle and the call is small, else the
    worker): issue order across threads and mixed inline/queued calls, against gloo's results
    for the same calls; the same on a RINGCCL_BACKEND_THREAD=0 group and an
    RINGCCL_BACKEND_INLINE_BYTES=0 group."""
    gloo = dist.new_group(backend="gloo")
    os.environ["RINGCCL_BACKEND_THREAD"] = "0"   # read when the group is created
    inline_group = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_BACKEND_THREAD"]
    os.environ["RINGCCL_BACKEND_INLINE_BYTES"] = "0"
    thread_group = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_BACKEND_INLINE_BYTES"]
    default = dist.distributed_c10d._get_default_group()
    threshold = default._group.inline_bytes
    small, large = 100, threshold // 8 + 1000   # float64: 800 B, and above the threshold
    out = {"threshold": threshold}
    # idle worker, small call: inline, so its Work is complete on return
    t = torch.full((small,), float(rank + 1))
    w = dist.all_reduce(t, async_op=True)
    out["idle_small_completed"] = w.is_completed()
    w.wait()
    out["idle_small_value"] = float(t[0])
    calls = [("A", small), ("B", small), ("A", large), ("B", small), ("A", small),
             ("B", large), ("B", small), ("A", small), ("A", large), ("B", small)]
    # the reference: the same calls, in the same order, on gloo
    expected = [torch.arange(c, dtype=torch.float64) + 1000 * i + rank
                for i, (_, c) in enumerate(calls)]
    for x in expected:
        dist.all_reduce(x, group=gloo)
    for name, group in (("default", default), ("thread0", inline_group),
                        ("inline0", thread_group)):
        for repeat in range(3):
            got, completed, errors = _two_threads(group, calls, rank)
            key = f"{name}/{repeat}"
            out[key] = {"equal": [bool(torch.equal(a, b)) for a, b in zip(got, expected)],
                        "completed": completed, "errors": errors}
    # one thread, mixed: small, large (queued), small (behind it), waited for in reverse
    ts = [torch.arange(c, dtype=torch.float64) + 7 * i + rank
          for i, c in enumerate([small, large, small, large, small])]
    ref = [x.clone() for x in ts]
    for x in ref:
        dist.all_reduce(x, group=gloo)
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    for w in reversed(works):
        w.wait()
    out["one_thread_mixed"] = [bool(torch.equal(a, b)) for a, b in zip(ts, ref)]
    dist.barrier()
    return out


def debug_lines(rank, world_size):
    """RINGCCL_ALGO and RINGCCL_DEBUG=INFO: the forced algorithm is used, and one choice line
    per (collective, size class, group); a malformed RINGCCL_ALGO is refused by name."""
    import io
    import logging

    from ringccl.frontend import debug
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    debug.logger.addHandler(handler)
    debug.logger.propagate = False
    os.environ["RINGCCL_DEBUG"] = "INFO"
    os.environ["RINGCCL_ALGO"] = "all_reduce:recursive_doubling,all_gather:direct"
    for _ in range(3):
        dist.all_reduce(torch.ones(1000))
    dist.all_reduce(torch.ones(100000))
    out = torch.empty(world_size * 10)
    dist.all_gather_into_tensor(out, torch.ones(10))
    os.environ["RINGCCL_ALGO"] = "all_reduce:nope"
    try:
        dist.all_reduce(torch.ones(3))
        error = None
    except Exception as exc:  # compared by message
        error = f"{type(exc).__name__}: {exc}"
    del os.environ["RINGCCL_ALGO"]
    # not forced: 1 MiB of float32 (a size class not logged yet) takes the transport's choice
    dist.all_reduce(torch.ones(1 << 18))
    del os.environ["RINGCCL_DEBUG"]
    debug.logger.removeHandler(handler)
    lines = [ln for ln in stream.getvalue().splitlines() if "backend group=" in ln]
    return {"lines": lines[:3], "auto_line": lines[3] if len(lines) > 3 else "",
            "calls": [ln for ln in stream.getvalue().splitlines() if "time_us=" in ln],
            "error": error, "transport": dist.distributed_c10d._get_default_group().transport}


def np_allclose(a, b):
    return bool(np.allclose(a, b))


def hybrid_vs_gloo(rank, world_size):
    """A "ringccl" group over 2 "hosts" x 2 ranks (RINGCCL_HOST_ID, read when the group is
    created): the hybrid transport, the cost model's two-level choice (RINGCCL_DEBUG=INFO
    lines), and every result against a gloo group on the same inputs."""
    import io
    import logging

    from ringccl.frontend import debug
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    debug.logger.addHandler(handler)
    debug.logger.propagate = False
    os.environ["RINGCCL_HOST_ID"] = f"host{rank // 2}"
    group = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_HOST_ID"]
    gloo = dist.new_group(backend="gloo")
    os.environ["RINGCCL_DEBUG"] = "INFO"
    mismatches, calls = [], 0
    n = world_size
    for count in (0, 1, 7, 1000, 200_003):
        for dtype in (torch.float32, torch.int64):
            ops = [dist.ReduceOp.SUM, dist.ReduceOp.MAX] + \
                ([dist.ReduceOp.AVG] if dtype.is_floating_point else [])
            for op in ops:
                x = _input(count * 7 + rank, count, dtype)
                a, b = x.clone(), x.clone()
                dist.all_reduce(a, op, group=group)
                dist.all_reduce(b, op, group=gloo)
                calls += 1
                if not _same(a, b):
                    mismatches.append(f"all_reduce {count} {dtype} {op}")
            k = max(1, count // n)
            x = _input(count + 3 * rank, n * k, dtype)
            outs = [torch.empty(k, dtype=dtype) for _ in range(2)]
            dist.reduce_scatter_tensor(outs[0], x, group=group)
            dist.reduce_scatter_tensor(outs[1], x, group=gloo)
            block = _input(count + 5 * rank, k, dtype)
            gathered = [torch.empty(n * k, dtype=dtype) for _ in range(2)]
            dist.all_gather_into_tensor(gathered[0], block, group=group)
            dist.all_gather_into_tensor(gathered[1], block, group=gloo)
            y = [_input(count + 11, count, dtype) if rank == 1 else torch.zeros(count, dtype=dtype)
                 for _ in range(2)]
            dist.broadcast(y[0], 1, group=group)
            dist.broadcast(y[1], 1, group=gloo)
            z = [torch.empty(n * k, dtype=dtype) for _ in range(2)]
            dist.all_to_all_single(z[0], x, group=group)
            dist.all_to_all_single(z[1], x, group=gloo)
            calls += 4
            for name, (p, q) in (("reduce_scatter", outs), ("all_gather", gathered),
                                 ("broadcast", y), ("all_to_all", z)):
                if not _same(p, q):
                    mismatches.append(f"{name} {count} {dtype}")
    del os.environ["RINGCCL_DEBUG"]
    debug.logger.removeHandler(handler)
    lines = [ln for ln in stream.getvalue().splitlines() if "backend group=" in ln]
    transport = group.transport
    dist.destroy_process_group(group)
    return {"mismatches": mismatches, "calls": calls, "transport": transport, "lines": lines}


def transport_mismatch(rank, world_size):
    """RINGCCL_TRANSPORT set on rank 1 only: group creation is refused on every rank."""
    if rank == 1:
        os.environ["RINGCCL_TRANSPORT"] = "p2p"
    try:
        dist.new_group(backend="ringccl")
        outcome = None
    except Exception as exc:  # compared by message
        outcome = f"{type(exc).__name__}: {exc}"
    os.environ.pop("RINGCCL_TRANSPORT", None)
    return outcome


def bad_lists_then_good(rank, world_size):
    """List arguments gloo refuses before any data moves (pieces of the wrong size; a block to
    itself that does not fit), refused here too with nothing written, and the group still in
    step afterwards; the async all_gather's future value beside gloo's."""
    gloo = dist.new_group(backend="gloo")
    out = {}

    def refused(name, call, *watched):
        before = [t.clone() for t in watched]
        try:
            call()
            out[name] = ("ok", "", True)
        except Exception as exc:  # the class and message are what is compared
            out[name] = (type(exc).__name__, str(exc),
                         all(torch.equal(a, b) for a, b in zip(before, watched)))

    r = float(rank)
    piece = torch.full((4,), -1.0)
    refused("reduce_scatter_uneven", lambda: dist.reduce_scatter(
        piece, [torch.arange(3.0) + r] + [torch.arange(5.0) + r] * (world_size - 1)), piece)
    outs = [torch.full((4,), -1.0) for _ in range(world_size)]
    ins = [torch.ones(4) for _ in range(world_size)]
    ins[rank] = torch.ones(5)   # this rank's block to itself does not fit its slot
    refused("all_to_all_self_block", lambda: dist.all_to_all(outs, ins), *outs)
    gathered = [torch.full((4,), -1.0)] + [torch.full((5,), -1.0)] * (world_size - 1)
    refused("all_gather_wrong_size", lambda: dist.all_gather(gathered, torch.ones(4)),
            *gathered)
    mine = [torch.empty(3) for _ in range(world_size)]
    theirs = [torch.empty(3) for _ in range(world_size)]
    value = dist.all_gather(mine, torch.full((3,), r), async_op=True).get_future().wait()
    gvalue = dist.all_gather(theirs, torch.full((3,), r), group=gloo,
                             async_op=True).get_future().wait()
    out["future"] = [type(value).__name__, len(value), value[0] is mine[0]]
    out["gloo_future"] = [type(gvalue).__name__, len(gvalue), gvalue[0] is theirs[0]]
    s = torch.full((2,), r + 1)
    dist.all_reduce(s)   # still in step
    out["after"] = s.tolist()
    dist.barrier()
    return out


def complex_reductions_vs_gloo(rank, world_size):
    """reduce, reduce_scatter and reduce_scatter_tensor of complex64 (SUM, AVG) on ringccl and on
    gloo, bit for bit, the futures' values the caller's complex tensors; MAX refused."""
    gloo = dist.new_group(backend="gloo")
    gen = torch.Generator().manual_seed(rank)
    out = {"equal": [], "value_is_given": []}
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
        # whole parts: every order of the sum gives the same bits (gloo's order is its own)
        parts = torch.randint(-50, 50, (2, 6 * world_size), generator=gen).float()
        data = torch.complex(parts[0], parts[1])
        results = []
        for group in (None, gloo):
            red = data.clone()
            if op == dist.ReduceOp.SUM:   # gloo's reduce takes SUM, not AVG
                dist.reduce(red, dst=1, op=op, group=group)
            rs = torch.empty(6, dtype=torch.complex64)
            dist.reduce_scatter(rs, list(data.clone().chunk(world_size)), op=op, group=group)
            rst = torch.empty(6, dtype=torch.complex64)
            work = dist.reduce_scatter_tensor(rst, data.clone(), op=op, group=group,
                                              async_op=True)
            if group is None:   # gloo's Work here has no future
                out["value_is_given"].append(work.get_future().wait()[0] is rst)
            else:
                work.wait()
            results.append((red, rs, rst))
        # reduce's result is the root's (elsewhere gloo leaves partial sums)
        same = [bool(torch.equal(a, b)) for a, b in zip(*results)]
        out["equal"].append([same[0] or rank != 1] + same[1:])
    try:
        dist.reduce_scatter_tensor(torch.empty(6, dtype=torch.complex64),
                                   torch.ones(6 * world_size, dtype=torch.complex64),
                                   op=dist.ReduceOp.MAX)
        out["max"] = "ok"
    except RuntimeError as exc:
        out["max"] = str(exc)
    s = torch.full((2,), float(rank + 1))
    dist.all_reduce(s)   # still in step
    out["after"] = s.tolist()
    return out
