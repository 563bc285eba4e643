"""``dist.all_reduce`` through the "ringccl" backend next to gloo's; DDP and FSDP2 training steps.

All in one launch of ``--nproc`` processes (one host: the backend runs over shared memory)
whose default group is ringccl's, with a gloo group and three more ringccl groups over the same
ranks — every call on the worker (``RINGCCL_BACKEND_INLINE_BYTES=0``), every call in the
caller's thread (``RINGCCL_BACKEND_THREAD=0``), forced onto gloo point-to-point
(``RINGCCL_TRANSPORT=p2p``) — so every variant is measured under the same machine load,
interleaved: per repetition, every variant once at each size, then the next repetition.
Variants:

* ``gloo``: gloo's own ``dist.all_reduce``.
* ``ringccl``: ``dist.all_reduce`` on the ringccl group (shared memory, the default dispatch
  policy: inline when the worker is idle and the call moves at most 256 KiB, else the worker;
  a signature seen before replays its compiled call, :mod:`ringccl.backends.shm.lane`).
* ``ringccl-general``: the same with the compiled lane switched off (every call on the general
  path: front end, engine, the shared-memory call), the baseline of the lane.
* ``ringccl-python``: the same with the lane replayed in Python (``lane.set_native(False)``;
  ``ringccl`` replays in C where ``_lanec`` is built); ``rt python``: ``ringccl.torch`` so.
* ``ringccl-thread``: every call handed to the worker thread (the policy before small calls
  ran inline).
* ``ringccl-inline``: every call run in the calling thread (completed Work).
* ``ringccl-p2p``: the backend over gloo point-to-point (what it runs across hosts).
* ``ringccl.torch``: ``ringccl.torch.all_reduce(t, group=gloo, transport="shm")`` (the same
  algorithm choice and transport, no torch.distributed dispatch, no worker thread): the
  backend's dispatch overhead is ``ringccl`` minus this (``dispatch``; ``disp.thr`` and
  ``disp.inl`` for the other two policies). The worker hand-off is ``disp.thr - disp.inl``.

The DDP step (forward, backward with DDP's bucketed all-reduce, SGD step) uses a model of about
25M float32 parameters (``--ddp-model``: an MLP, or an embedding table whose backward is cheap,
so the gradient all-reduce of ~100 MB is most of the step: :data:`MODELS`), for each batch size of
``--ddp-batch``; its ``floor`` row is the same step on DDP under ``no_sync()`` (no gradient
all-reduce at all), the lower bound of any backend's step: ``gloo/floor`` is the most any
backend can gain over gloo on that step. The FSDP2 step (``fully_shard`` on each layer and the
model: all-gathers of the parameters, reduce-scatters of the gradients) uses the same model and
the first batch size. ``--cold``: every call of the all_reduce sweep gets a buffer of its own,
taken untimed, round-robin from a pool of at least 64 MiB (:class:`measure.BufferPool`, shared
with ``bench_shm.py`` and ``bench_mpi_shm.py``), so no call finds its buffer in cache (the
Open MPI XHC authors' warning about reused, cache-hot buffers). ``first`` is each variant's
first call at each size (the lane compiles there; the very first size also sets the group's
shared memory up). Figures are medians of ``--reps`` (steps: of ``--ddp-rounds`` ×
``--ddp-steps``; min–max kept in the JSON), with the load average before and after the run;
each timed batch is back-to-back calls lasting at least :data:`BATCH_SECONDS` (the count set
by the warm-up repetition); the physical floors of the same run follow the table (half a flag
round trip over shared memory, a memcpy of the largest size: :func:`measure.torch_floors`);
never timed asserts. The DDP variants hold one model at a time, so they are interleaved by
round (every variant once per round), not per step; the two FSDP2 variants run one after the
other.

    python benchmarks/bench_backend.py [--nproc 4] [--reps 5] [--sizes 4KiB:64MiB] [--cold]
        [--ddp-steps 5] [--ddp-batch 8,1] [--ddp-rounds 3] [--ddp-model mlp|embedding]
        [--no-fsdp] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import measure  # noqa: E402


def _sizes(spec: str) -> list[int]:
    from ringccl import units
    lo, _, hi = spec.partition(":")
    return measure.powers_of_4(int(units.size(lo)), int(units.size(hi or lo)))


#: ``--ddp-model``: "mlp", 3 layers of width² (backward costs ~2 matrix products per layer:
#: on this CPU about as long as gloo's all-reduce of its gradients), or "embedding", a
#: bag-of-tokens classifier whose ~25M parameters are nearly all one embedding table
#: (``nn.EmbeddingBag``, dense gradients, as in recommendation models and the input embedding
#: of a language model): its backward is cheap, so the gradient all-reduce is most of the step
MODELS = ("mlp", "embedding")
EMBEDDING_DIM, EMBEDDING_TOKENS, EMBEDDING_CLASSES = 256, 64, 16


def _model(kind: str, h: int):
    """(model, make_input(batch)) for ``--ddp-model`` ``kind`` of size ``h`` (MLP width; for
    "embedding" the table has 3h² / EMBEDDING_DIM rows: about the MLP's 3h² parameters)."""
    import torch
    torch.manual_seed(0)
    if kind == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(h, h), torch.nn.ReLU(),
                                    torch.nn.Linear(h, h), torch.nn.ReLU(),
                                    torch.nn.Linear(h, h))
        return model, lambda batch: torch.randn(batch, h)
    vocab = 3 * h * h // EMBEDDING_DIM
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(vocab, EMBEDDING_DIM, mode="mean"),
                                torch.nn.Linear(EMBEDDING_DIM, EMBEDDING_CLASSES))
    gen = torch.Generator().manual_seed(1)
    return model, lambda batch: torch.randint(0, vocab, (batch, EMBEDDING_TOKENS),
                                              generator=gen)


def _summary(ts: list, parameters: int) -> dict:
    return {"seconds": statistics.median(ts), "min": min(ts), "max": max(ts), "steps": len(ts),
            "parameters": parameters}


def _step_seconds(model, opt, x, steps: int, barrier, context=contextlib.nullcontext) -> list:
    """Seconds of each of ``steps`` training steps (one more first, as warm-up); forward and
    backward run inside ``context()`` (DDP's ``no_sync`` for the floor)."""
    ts = []
    for step in range(steps + 1):
        barrier()
        t0 = time.perf_counter()
        with context():
            model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if step:
            ts.append(time.perf_counter() - t0)
    return ts


#: a timed batch of back-to-back calls lasts at least this long (up to MAX_CALLS calls): the
#: ranks leave the barrier before it tens of microseconds apart, which a batch of 20 8-byte
#: calls (~5-25 us each) would count as a fifth of its time
BATCH_SECONDS = 2e-3
MAX_CALLS = 400


def _lane_off(lane, fn, t):
    """``fn(t)`` with the compiled lane switched off (the general path)."""
    lane.set_enabled(False)
    try:
        fn(t)
    finally:
        lane.set_enabled(True)


def _python_replay(lane, fn, t, **kw):
    """``fn(t)`` with the lane replayed in Python (the C loop off)."""
    lane.set_native(False)
    try:
        fn(t, **kw)
    finally:
        lane.set_native(True)


def _worker(rank, world_size, sizes, reps, ddp_steps, ddp_hidden, fsdp, ddp_batches,
            ddp_rounds, ddp_model="mlp", cold=False):
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt
    from ringccl.backends.shm import lane

    gloo = dist.new_group(backend="gloo")
    # both read when the group is created
    os.environ["RINGCCL_BACKEND_THREAD"] = "0"
    inline = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_BACKEND_THREAD"]
    os.environ["RINGCCL_BACKEND_INLINE_BYTES"] = "0"
    thread = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_BACKEND_INLINE_BYTES"]
    os.environ["RINGCCL_TRANSPORT"] = "p2p"   # read when the group is created
    p2p = dist.new_group(backend="ringccl")
    del os.environ["RINGCCL_TRANSPORT"]
    transports = [dist.distributed_c10d._get_default_group().transport, inline.transport,
                  p2p.transport]
    variants = {
        "gloo": lambda t: dist.all_reduce(t, group=gloo),
        "ringccl": lambda t: dist.all_reduce(t),
        "ringccl-general": lambda t: _lane_off(lane, dist.all_reduce, t),
        "ringccl-thread": lambda t: dist.all_reduce(t, group=thread),
        "ringccl-inline": lambda t: dist.all_reduce(t, group=inline),
        "ringccl-p2p": lambda t: dist.all_reduce(t, group=p2p),
        "ringccl.torch": lambda t: rt.all_reduce(t, group=gloo, transport="shm"),
        "ringccl-python": lambda t: _python_replay(lane, dist.all_reduce, t),
        "ringccl.torch-python": lambda t: _python_replay(lane, rt.all_reduce, t, group=gloo,
                                                         transport="shm"),
    }
    times = {(v, n): [] for v in variants for n in sizes}
    first = {}
    calls = {}   # (variant, size) -> calls per timed batch, from the warm-up repetition
    pools = {n: measure.BufferPool(max(1, n // 4), cold=cold, wrap=torch.from_numpy)
             for n in sizes}   # --cold: a buffer of its own per call, round-robin >= 64 MiB
    for rep in range(reps + 1):            # repetition 0 warms up (connections, caches)
        for n in sizes:
            pool = pools[n]
            for name, fn in variants.items():
                iters = calls.get((name, n)) or max(1, min(20, (1 << 22) // n))
                buffers = [pool.take() for _ in range(iters)]   # untimed
                dist.barrier(group=gloo)
                if not rep:                # the first call of this variant at this size
                    t0 = time.perf_counter()
                    fn(pool.take())
                    first[(name, n)] = time.perf_counter() - t0
                    dist.barrier(group=gloo)
                t0 = time.perf_counter()
                for buffer in buffers:
                    fn(buffer)
                seconds = (time.perf_counter() - t0) / iters
                if rep:
                    times[(name, n)].append(seconds)
                else:   # batches of >= BATCH_SECONDS: the barrier's exit skew amortised;
                    # one count for every rank (the ranks' own would differ: a hang)
                    count = torch.tensor([max(iters, min(MAX_CALLS,
                                                         int(BATCH_SECONDS / seconds)))])
                    dist.all_reduce(count, op=dist.ReduceOp.MAX, group=gloo)
                    calls[(name, n)] = int(count)
    rows = [{"variant": v, "nbytes": n, "seconds": statistics.median(ts), "min": min(ts),
             "max": max(ts), "first_call_seconds": first[(v, n)]}
            for (v, n), ts in times.items()]
    # the physical floors of the same run: a flag hand-off, a memcpy of the largest size
    floors = measure.torch_floors(rank, world_size, max(sizes), reps, cold)
    # DDP step, ~25M parameters (--ddp-model), per batch size; "floor" is the same step under
    # no_sync() (no gradient all-reduce at all): no backend's step can be shorter
    steps, fsdp_steps = {}, {}
    barrier = lambda: dist.barrier(group=gloo)   # noqa: E731
    counted, make_input = _model(ddp_model, ddp_hidden)   # one model built to count
    parameters = sum(p.numel() for p in counted.parameters())
    del counted
    x = make_input(ddp_batches[0])
    if ddp_steps:
        from torch.nn.parallel import DistributedDataParallel as DDP
        ddp_variants = (("floor", gloo), ("gloo", gloo), ("ringccl", None),
                        ("ringccl-thread", thread), ("ringccl-inline", inline),
                        ("ringccl-p2p", p2p))
        for batch in ddp_batches:
            xb = make_input(batch)
            seen = {name: [] for name, _ in ddp_variants}
            # one model at a time (~300 MB each with its buckets), so the variants are
            # interleaved by round: every variant once per round, ddp_steps steps each
            for _ in range(ddp_rounds):
                for name, group in ddp_variants:
                    model = DDP(_model(ddp_model, ddp_hidden)[0], process_group=group)
                    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
                    context = model.no_sync if name == "floor" else contextlib.nullcontext
                    seen[name] += _step_seconds(model, opt, xb, ddp_steps, barrier, context)
                    del model, opt
            for name, ts in seen.items():
                steps[f"{name} batch={batch}"] = dict(_summary(ts, parameters), variant=name,
                                                      batch=batch)
    if ddp_steps and fsdp:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
        for name, group in (("gloo", gloo), ("ringccl", dist.group.WORLD)):
            mesh = DeviceMesh.from_group(group, "cpu")
            model = _model(ddp_model, ddp_hidden)[0]
            for layer in model:
                if any(True for _ in layer.parameters()):
                    fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            fsdp_steps[name] = _summary(_step_seconds(model, opt, x, ddp_steps, barrier),
                                        parameters)
            del model, opt
    return ({"rows": rows, "ddp": steps, "fsdp2": fsdp_steps, "transports": transports,
             "ddp_model": ddp_model, "floors": floors} if rank == 0 else None)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes", default="4KiB:64MiB",
                        help="LO:HI, bytes: LO, 4 LO, 16 LO, ... up to HI (e.g. 8:64KiB)")
    parser.add_argument("--ddp-steps", type=int, default=5)
    parser.add_argument("--ddp-model", choices=MODELS, default="mlp",
                        help="the DDP/FSDP2 model (MODELS): an MLP, or an embedding table "
                             "whose gradient all-reduce is most of the step")
    parser.add_argument("--ddp-hidden", type=int, default=2900,
                        help="model size: MLP width, 3 layers of width^2 (2900: 25.2M "
                             "parameters); the embedding model has as many")
    parser.add_argument("--ddp-batch", default="8",
                        help="batch sizes of the DDP step, comma-separated (e.g. 8,1); the "
                             "FSDP2 step uses the first")
    parser.add_argument("--ddp-rounds", type=int, default=3,
                        help="rounds of the DDP variants (each: every variant, --ddp-steps "
                             "steps); the medians are over all rounds' steps")
    parser.add_argument("--no-fsdp", action="store_true", help="skip the FSDP2 step")
    parser.add_argument("--cold", action="store_true",
                        help="a buffer of its own for every all_reduce call (a pool of >= 64 MiB)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from ringccl.torch.launch import launch
    try:
        batches = [int(b) for b in args.ddp_batch.split(",") if b.strip()]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        parser.error(f"--ddp-batch={args.ddp_batch!r}: give positive batch sizes, e.g. 8,1")
    for name in ("nproc", "reps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)}: at least 1")
    from ringccl.errors import ArgumentError
    try:
        sizes = _sizes(args.sizes)
    except ArgumentError as exc:
        parser.error(f"--sizes={args.sizes!r}: {exc}")
    if not sizes:
        parser.error(f"--sizes={args.sizes!r}: LO is above HI")
    load_before = os.getloadavg()
    result = launch(_worker, args.nproc, sizes, args.reps, args.ddp_steps,
                    args.ddp_hidden, not args.no_fsdp, batches, max(1, args.ddp_rounds),
                    args.ddp_model, args.cold, backend="ringccl",
                    timeout=3000, worker_bytes=6 * 4 * 3 * args.ddp_hidden ** 2)[0]
    result["nproc"] = args.nproc
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    result["ddp_ratios"] = _ddp_ratios(result["ddp"], batches)
    result["reps"] = args.reps
    result["cold"] = args.cold
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print_tables(result)


def print_tables(result: dict) -> None:
    """The text tables of one run's result (what ``--json`` prints, as a dict)."""
    by = {(r["variant"], r["nbytes"]): r["seconds"] for r in result["rows"]}
    print(f"dist.all_reduce, {result['nproc']} processes, median of {result['reps']} (µs; "
          "ratio gloo/x); "
          f"transports (ringccl, inline, p2p group): {result['transports']}; load average "
          f"before {result['load_average']['before'][0]:.1f}, after "
          f"{result['load_average']['after'][0]:.1f}")
    firsts = {(r["variant"], r["nbytes"]): r["first_call_seconds"] for r in result["rows"]}
    if result.get("cold"):
        print("--cold: a buffer of its own for every call")
    print(f"{'size':>10} {'gloo':>9} {'ringccl':>9} {'general':>9} {'thread':>9} {'inline':>9} "
          f"{'p2p':>9} {'rt shm':>9} {'gloo/ringccl':>12} {'gloo/p2p':>8} {'dispatch':>9} "
          f"{'disp.thr':>9} {'disp.inl':>9} {'first':>9} {'py':>9} {'rt py':>9}")
    for n in sorted({r["nbytes"] for r in result["rows"]}):
        g, r, gen, t, i, p, d = (by[(v, n)] for v in ("gloo", "ringccl", "ringccl-general",
                                                       "ringccl-thread", "ringccl-inline",
                                                       "ringccl-p2p", "ringccl.torch"))
        print(f"{n:>10} {g * 1e6:>9.1f} {r * 1e6:>9.1f} {gen * 1e6:>9.1f} {t * 1e6:>9.1f} "
              f"{i * 1e6:>9.1f} {p * 1e6:>9.1f} {d * 1e6:>9.1f} {g / r:>12.2f} {g / p:>8.2f} "
              f"{(r - d) * 1e6:>9.1f} {(t - d) * 1e6:>9.1f} {(i - d) * 1e6:>9.1f} "
              f"{firsts[('ringccl', n)] * 1e6:>9.0f}"
              f" {by.get(('ringccl-python', n), float('nan')) * 1e6:>9.1f}"
              f" {by.get(('ringccl.torch-python', n), float('nan')) * 1e6:>9.1f}")
    measure.print_floors(result["floors"])
    for name, s in result["ddp"].items():
        print(f"DDP step ({result['ddp_model']}, {s['parameters'] / 1e6:.1f}M parameters) {name}: "
              f"{s['seconds'] * 1e3:.0f} ms (min {s['min'] * 1e3:.0f}, "
              f"max {s['max'] * 1e3:.0f}; {s['steps']} steps)")
    for batch, ratios in result["ddp_ratios"].items():
        print(f"DDP step batch={batch}: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    for name, s in result["fsdp2"].items():
        print(f"FSDP2 step ({result['ddp_model']}, {s['parameters'] / 1e6:.1f}M parameters) {name}: "
              f"{s['seconds'] * 1e3:.0f} ms (min {s['min'] * 1e3:.0f}, "
              f"max {s['max'] * 1e3:.0f})")


def _ddp_ratios(ddp: dict, batches) -> dict:
    """Per batch size: gloo / floor (the most any backend can gain on this step: if it is below
    1.5, no backend can be 1.5x faster than gloo there) and gloo / x for each ringccl variant."""
    out = {}
    for batch in batches:
        sec = {s["variant"]: s["seconds"] for s in ddp.values() if s["batch"] == batch}
        if "gloo" not in sec:
            continue
        out[str(batch)] = {f"gloo/{v}": sec["gloo"] / t for v, t in sec.items() if v != "gloo"}
    return out


if __name__ == "__main__":
    main()
