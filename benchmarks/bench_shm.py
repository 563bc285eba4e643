"""ringccl over shared memory (transport="shm", algorithm="auto") against gloo's own collectives
on one host, interleaved in the same run (issue 16).

For each collective and size: the median of ``--iters`` (>= 5) interleaved samples of ours and
gloo's (a sample: the mean of up to 64 back-to-back calls after a barrier, one call from 4 MiB
on, since ranks leave gloo's barrier up to hundreds of µs apart; ours checked against gloo's
result once per size), min–max, the ratio gloo/ours; plus the machine's memcpy bandwidth (one
process alone, and each process's with all copying at once)
measured in the same run, the zero-copy all_reduce (``shm_empty``) busbw at the largest size,
an 8-byte all_reduce latency row (µs), the per-call µs at 4 KiB, the load average before and
after, and each size's first call of ours (where the shared memory is set up or grown and the
call compiled). ``--crossover`` (or ``--crossover-only``) adds the algorithms of :data:`CROSSOVER` per
collective and size, interleaved round by round (the measurement behind
``ringccl.costmodel.choice.TWO_SHOT_BYTES``); ``--wait-policies`` compares the wait policies of
:data:`POLICIES` on all_reduce (behind ``ringccl.backends.shm.group.SPIN_POLLS``). ``--json`` prints
the raw rows; ``--png FILE`` draws the ratio against size. ``--in-place`` times
reduce_scatter in NCCL's in-place form (the output is the input's own block) per algorithm,
interleaved round by round: out of place, in place, in place as it ran before the caller's
input stopped being its working buffer (partial sums left in the other blocks), and gloo's
in place.

    python benchmarks/bench_shm.py --nproc 2 [-b 4KiB -e 64MiB | --sizes 4KiB,1MiB]
        [--iters 7] [--collectives all_reduce,...] [--json] [--png shm.png]
        [--crossover | --crossover-only | --wait-policies | --in-place]

Figures for the note only; never timed asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from ringccl import units  # noqa: E402

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
       "all_gather": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
       "all_to_all": lambda n: (n - 1) / n}


def _sizes(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 4
    return out


#: ``--crossover``: the algorithms compared per collective over shm (the measurement behind
#: ringccl.costmodel.choice.TWO_SHOT_BYTES)
CROSSOVER = {"all_reduce": ("direct", "two_shot", "ring"),
             "reduce_scatter": ("direct", "ring"), "all_gather": ("direct", "ring"),
             "broadcast": ("direct", "ring"), "all_to_all": ("direct", "pairwise")}


def _calls(collective, nbytes, rank, n, algorithm=None, restore=None):
    """(ours, gloo's, result) closures on fresh float32 buffers of ``nbytes`` (the collective's
    size: one rank's buffer for all_reduce/broadcast, the whole N-block buffer otherwise);
    ours runs ``algorithm`` (None: "auto") with ``restore`` (None: ringccl's default, the
    caller's tensors all or nothing; False: as gloo and NCCL, whose failed calls leave partial
    results)."""
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt

    count = max(n, nbytes // 4 // n * n)
    x = torch.randint(-8, 8, (count,)).float()
    kw = dict(algorithm=algorithm, restore=restore)
    if collective == "all_reduce":
        a, b = x.clone(), x.clone()
        return (lambda: rt.all_reduce(a, **kw), lambda: dist.all_reduce(b),
                lambda: (a, b))
    if collective == "broadcast":
        a, b = x.clone(), x.clone()
        return (lambda: rt.broadcast(a, 0, **kw), lambda: dist.broadcast(b, 0),
                lambda: (a, b))
    if collective == "reduce_scatter":
        oa, ob = torch.empty(count // n), torch.empty(count // n)
        return (lambda: rt.reduce_scatter_tensor(oa, x, **kw),
                lambda: dist.reduce_scatter_tensor(ob, x), lambda: (oa, ob))
    if collective == "all_gather":
        block = x[:count // n].clone()
        oa, ob = torch.empty(count // n * n), torch.empty(count // n * n)
        return (lambda: rt.all_gather_into_tensor(oa, block, **kw),
                lambda: dist.all_gather_into_tensor(ob, block), lambda: (oa, ob))
    oa, ob = torch.empty(count), torch.empty(count)
    return (lambda: rt.all_to_all_single(oa, x, **kw),
            lambda: dist.all_to_all_single(ob, x), lambda: (oa, ob))


def _time(fn, barrier, reps: int = 1) -> float:
    """Seconds per call of ``reps`` back-to-back calls of ``fn`` after ``barrier()``."""
    barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def _reps(nbytes: int) -> int:
    """Back-to-back calls per timed sample: ranks leave gloo's barrier up to hundreds of µs
    apart, which one call of a few µs would measure instead of itself; from 4 MiB on, one."""
    return max(1, min(64, (4 << 20) // max(nbytes, 1)))


def _memcpy_bandwidth(nbytes: int = 64 << 20, concurrent: bool = False,
                      rank: int = 0) -> float:
    """Bytes/s of a ``nbytes`` tensor copy, the median of 5 after a barrier: on rank 0 alone
    while the others wait in the next barrier (``concurrent=False``: one process's memcpy), or
    on every rank at once (``concurrent=True``: what each of N processes gets when all copy, as
    in a collective; the ranks share the memory bus)."""
    import torch
    import torch.distributed as dist
    a, b = torch.empty(nbytes // 4), torch.empty(nbytes // 4)
    b.copy_(a)
    times = []
    for _ in range(5):
        dist.barrier()
        if concurrent or rank == 0:
            times.append(_time(lambda: b.copy_(a), lambda: None))
    dist.barrier()
    return nbytes / statistics.median(times) if times else 0.0


#: the wait policies ``--wait-policies`` compares: (tight polls, seconds of sched_yield polls
#: before the sleeps[, longest sleep]) (ringccl.backends.shm.group.SPIN_POLLS, YIELD_SECONDS,
#: NAP_SECONDS; default 1 ms)
POLICIES = {"spin200+yield1ms": (200, 1e-3), "yield_now": (0, 1e-3), "spin20+yield1ms": (20, 1e-3),
            "spin2000+yield1ms": (2000, 1e-3), "sleep_now": (0, 0.0),
            "spin20+yield100us": (20, 1e-4), "yield_now+100us": (0, 1e-4),
            "spin20+yield100us+nap100us": (20, 1e-4, 1e-4),
            "spin20+yield1ms+nap100us": (20, 1e-3, 1e-4)}


def policy_worker(rank, world_size, sizes, iters):
    """all_reduce per size: every wait policy of POLICIES and gloo, interleaved round by round
    (one iteration of each per round), on every rank alike."""
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt
    from ringccl.backends.shm import group as shm_group

    rows = []
    load = os.getloadavg()
    for nbytes in sizes:
        x = torch.ones(max(world_size, nbytes // 4))
        times = {name: [] for name in (*POLICIES, "gloo")}
        rt.all_reduce(x), dist.all_reduce(x)
        reps = _reps(nbytes)
        for _ in range(iters):
            for name, (polls, yield_s, *nap) in POLICIES.items():
                shm_group.SPIN_POLLS, shm_group.YIELD_SECONDS = polls, yield_s
                shm_group.NAP_SECONDS = nap[0] if nap else 1e-3
                times[name].append(_time(lambda: rt.all_reduce(x), dist.barrier, reps))
            times["gloo"].append(_time(lambda: dist.all_reduce(x), dist.barrier, reps))
        rows.append(dict(nbytes=nbytes, times=times))
    return dict(rows=rows, load_before=load, load_after=os.getloadavg())


#: ``--in-place``: the reduce_scatter algorithms compared (direct: "auto" over shm)
IN_PLACE_ALGORITHMS = ("direct", "ring")


def in_place_worker(rank, world_size, sizes, iters, algorithms=IN_PLACE_ALGORITHMS,
                    transports=("shm", "p2p")):
    """reduce_scatter per transport, size and algorithm: out of place, in place (the output the
    input's own block), in place as it ran before (the same call with the layout saying that
    the input may be the working buffer, ``Layout.writes_only_output``: the rest of it is left
    with partial sums), and gloo's in place; interleaved round by round, every rank alike."""
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt
    from ringccl import frontend

    n, rows = world_size, []
    load = os.getloadavg()
    plan = frontend._plan

    def as_before(*args, **kwargs):   # the flow before: the input is the working buffer
        return plan(*args, **kwargs)._replace(writes_only_output=True)

    def before_call(fn):
        def call():
            frontend._plan = as_before
            try:
                fn()
            finally:
                frontend._plan = plan
        return call

    for transport, nbytes, algorithm in [(t, s, a) for t in transports for s in sizes
                                     for a in algorithms]:
        k = max(1, nbytes // 4 // n)
        x = torch.randint(-8, 8, (n * k,)).float()
        kw = dict(algorithm=algorithm, transport=transport)
        inp, inp_before, inp_gloo = x.clone(), x.clone(), x.clone()
        out = torch.empty(k)
        calls = {
            "out_of_place": lambda: rt.reduce_scatter_tensor(out, x, **kw),
            "in_place": lambda: rt.reduce_scatter_tensor(inp[rank * k:(rank + 1) * k],
                                                         inp, **kw),
            "in_place_before": before_call(lambda: rt.reduce_scatter_tensor(
                inp_before[rank * k:(rank + 1) * k], inp_before, **kw)),
            "gloo_in_place": lambda: dist.reduce_scatter_tensor(
                inp_gloo[rank * k:(rank + 1) * k], inp_gloo)}
        for fn in calls.values():
            fn()                   # warm-up: set-up, growth, plans
        inp.copy_(x)
        rt.reduce_scatter_tensor(inp[rank * k:(rank + 1) * k], inp, **kw)
        untouched = bool(torch.equal(torch.cat([inp[:rank * k], inp[(rank + 1) * k:]]),
                                     torch.cat([x[:rank * k], x[(rank + 1) * k:]])))
        t = {c: [] for c in calls}
        reps = _reps(nbytes)
        for _ in range(iters):
            for c, fn in calls.items():
                t[c].append(_time(fn, dist.barrier, reps))
        rows.append(dict(nbytes=n * k * 4, algorithm=algorithm, transport=transport, times=t,
                         rest_untouched=untouched))
    return dict(rows=rows, load_before=load, load_after=os.getloadavg())


def _cells(results, i: int, iters: int) -> list[str]:
    """Row ``i``'s variants as "name median (min-max)" µs, per iteration the slowest rank's."""
    cells = []
    for name in results[0]["rows"][i]["times"]:
        t = [max(r["rows"][i]["times"][name][k] for r in results) for k in range(iters)]
        cells.append(f"{name} {statistics.median(t) * 1e6:.0f} ({min(t) * 1e6:.0f}-"
                     f"{max(t) * 1e6:.0f})")
    return cells


def _in_place(args, sizes) -> None:
    from ringccl.torch.launch import launch

    results = launch(in_place_worker, args.nproc, sizes, args.iters, timeout=1200,
                     worker_bytes=8 * sizes[-1])
    r0 = results[0]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{args.nproc} processes; load {r0['load_before']} -> {r0['load_after']}; "
          "reduce_scatter, median us of the slowest rank per iteration (min-max); "
          "before = the input as the working buffer (the rest of it left with partial sums)")
    for i, row in enumerate(r0["rows"]):
        cells = _cells(results, i, args.iters)
        ok = all(r["rows"][i]["rest_untouched"] for r in results)
        print(f"{row['transport']:<4}{units.format_size(row['nbytes']):>8} "
              f"{row['algorithm']:<8}: "
              + "; ".join(cells) + f"; in place leaves the rest of the input: {ok}")


def _policies(args, sizes) -> None:
    from ringccl.torch.launch import launch

    results = launch(policy_worker, args.nproc, sizes, args.iters, timeout=1200,
                     worker_bytes=8 * sizes[-1])
    r0 = results[0]
    print(f"{args.nproc} processes; load {r0['load_before']} -> {r0['load_after']}; all_reduce "
          "median us (min-max) per wait policy, max over ranks per iteration")
    for i, row in enumerate(r0["rows"]):
        print(f"{units.format_size(row['nbytes']):>8}: " + "; ".join(
            _cells(results, i, args.iters)))


def worker(rank, world_size, sizes, iters, crossover, collectives=COLLECTIVES):
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt

    barrier = dist.barrier
    rows, n = [], world_size
    load = os.getloadavg()
    memcpy = _memcpy_bandwidth(rank=rank)                       # rank 0's figure is read
    memcpy_all = _memcpy_bandwidth(concurrent=True, rank=rank)
    if crossover != "only":   # --crossover-only: just the algorithms per size
        for collective in collectives:
            for nbytes in sizes:
                ours, gloo, result = _calls(collective, nbytes, rank, n)
                ours_nr, gloo_nr, result_nr = _calls(collective, nbytes, rank, n,
                                                     restore=False)
                first = _time(ours, barrier)   # the first call: set-up, growth, plans
                ours_nr(), gloo(), gloo_nr()   # warm-up
                (a, b), (a_nr, b_nr) = result(), result_nr()
                correct = bool(torch.equal(a, b)) and bool(torch.equal(a_nr, b_nr))
                t_ours, t_nr, t_gloo = [], [], []
                reps = _reps(nbytes)
                for _ in range(iters):
                    t_ours.append(_time(ours, barrier, reps))
                    t_nr.append(_time(ours_nr, barrier, reps))
                    t_gloo.append(_time(gloo, barrier, reps))
                rows.append(dict(collective=collective, nbytes=nbytes, correct=correct,
                                 ours_s=t_ours, ours_no_restore_s=t_nr, gloo_s=t_gloo,
                                 first_s=first))
        # latency: 8-byte all_reduce, many calls, per call
        x = torch.ones(2)
        for fn, name in ((lambda: rt.all_reduce(x), "ours"), (lambda: dist.all_reduce(x), "gloo")):
            fn()
            reps = 200
            barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            rows.append(dict(collective="latency_8B", who=name,
                             us_per_call=(time.perf_counter() - t0) / reps * 1e6))
        # per-call overhead at 4 KiB, back to back
        x = torch.ones(1024)
        for fn, name in ((lambda: rt.all_reduce(x), "ours"), (lambda: dist.all_reduce(x), "gloo")):
            fn()
            barrier()
            t0 = time.perf_counter()
            for _ in range(500):
                fn()
            rows.append(dict(collective="per_call_4KiB", who=name,
                             us_per_call=(time.perf_counter() - t0) / 500 * 1e6))
        # zero copy: the buffer already lives in the segment
        big = sizes[-1] // 4
        z = rt.shm_empty((big,))
        z.fill_(1.0)
        for restore in (None, False):   # restore: the rollback's saved copy of every chunk
            rt.all_reduce(z, restore=restore)
            t = [_time(lambda: rt.all_reduce(z, restore=restore), barrier)
                 for _ in range(iters)]
            med = statistics.median(t)
            rows.append(dict(collective="zero_copy_all_reduce", nbytes=big * 4, seconds=t,
                             restore=restore, busbw=big * 4 / med * BUS["all_reduce"](n)))
    if crossover:
        for collective in collectives:
            algorithms = CROSSOVER[collective]
            for nbytes in sizes:
                calls = {a: _calls(collective, nbytes, rank, n, algorithm=a)[0]
                         for a in algorithms}
                rec = dict(collective="crossover", of=collective, nbytes=nbytes)
                for fn in calls.values():
                    fn()
                t = {a: [] for a in algorithms}
                reps = _reps(nbytes)
                for _ in range(iters):    # the algorithms interleaved round by round
                    for a, fn in calls.items():
                        t[a].append(_time(fn, barrier, reps))
                rec.update(t)
                rows.append(rec)
    return dict(rows=rows, load_before=load, load_after=os.getloadavg(), memcpy=memcpy,
                memcpy_concurrent=memcpy_all)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("-b", "--begin", default="4KiB")
    parser.add_argument("-e", "--end", default="64MiB")
    parser.add_argument("--iters", type=int, default=7)
    parser.add_argument("--crossover", action="store_true")
    parser.add_argument("--collectives", default=None,
                        help=f"comma-separated subset of {','.join(COLLECTIVES)}")
    parser.add_argument("--crossover-only", action="store_true",
                        help="only the algorithms per collective and size (CROSSOVER)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--png", default=None)
    parser.add_argument("--wait-policies", action="store_true",
                        help="all_reduce under each wait policy (POLICIES) and gloo, interleaved: "
                        "the measurement behind "
                        "ringccl.backends.shm.group.SPIN_POLLS/YIELD_SECONDS")
    parser.add_argument("--in-place", action="store_true",
                        help="reduce_scatter in NCCL's in-place form against out of place, "
                        "the input as the working buffer (before) and gloo, per algorithm")
    parser.add_argument("--sizes", default=None,
                        help="comma-separated sizes instead of -b..-e by powers of 4")
    args = parser.parse_args()
    if args.iters < 5:
        parser.error(f"--iters={args.iters}: at least 5 (the median of >= 5 iterations)")
    from ringccl.torch.launch import launch

    sizes = (_sizes(units.size(args.begin), units.size(args.end)) if args.sizes is None
             else [units.size(v) for v in args.sizes.split(",")])
    if args.wait_policies:
        _policies(args, sizes)
        return
    if args.in_place:
        _in_place(args, sizes)
        return
    crossover = "only" if args.crossover_only else args.crossover
    collectives = COLLECTIVES if args.collectives is None else tuple(args.collectives.split(","))
    unknown = [c for c in collectives if c not in COLLECTIVES]
    if unknown:
        parser.error(f"--collectives: {unknown} not in {COLLECTIVES}")
    results = launch(worker, args.nproc, sizes, args.iters, crossover, collectives,
                     timeout=1200,
                     worker_bytes=8 * sizes[-1])
    # a call ends when its slowest rank ends: per iteration, the max over ranks
    r0 = results[0]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    n = args.nproc
    print(f"{n} processes; load {r0['load_before']} -> {r0['load_after']}; memcpy "
          f"{r0['memcpy'] / 1e9:.1f} GB/s (one process), "
          f"{r0['memcpy_concurrent'] / 1e9:.1f} GB/s each with all {n} copying at once")
    print("ours: ringccl's default (restore=True: the caller's tensors all or nothing); "
          "r=F: restore=False (as gloo: a failed call leaves partial results); ratio = gloo / "
          "ours; times: median over iterations of the slowest rank's")
    print(f"{'collective':<16}{'size':>10}{'ours us':>12}{'r=F us':>12}{'gloo us':>12}"
          f"{'ratio':>8}{'ratio r=F':>10}{'ours min-max':>22}{'gloo min-max':>22}"
          f"{'1st call us':>12}  ok")
    plot = {}
    for i, row in enumerate(r0["rows"]):
        c = row["collective"]
        if "ours_s" in row:
            ours = [max(r["rows"][i]["ours_s"][k] for r in results) for k in range(args.iters)]
            nr = [max(r["rows"][i]["ours_no_restore_s"][k] for r in results)
                  for k in range(args.iters)]
            gloo = [max(r["rows"][i]["gloo_s"][k] for r in results) for k in range(args.iters)]
            mo, mn, mg = statistics.median(ours), statistics.median(nr), statistics.median(gloo)
            ok = all(r["rows"][i]["correct"] for r in results)
            plot.setdefault(c, []).append((row["nbytes"], mg / mo, mg / mn))
            print(f"{c:<16}{units.format_size(row['nbytes']):>10}{mo * 1e6:>12.1f}"
                  f"{mn * 1e6:>12.1f}{mg * 1e6:>12.1f}{mg / mo:>8.2f}{mg / mn:>10.2f}"
                  f"{min(ours) * 1e6:>11.1f}-{max(ours) * 1e6:<10.1f}"
                  f"{min(gloo) * 1e6:>11.1f}-{max(gloo) * 1e6:<10.1f}"
                  f"{max(r['rows'][i]['first_s'] for r in results) * 1e6:>12.0f}  {ok}")
        elif "us_per_call" in row:
            print(f"{c:<16}{row['who']:>10}{row['us_per_call']:>12.1f} us per call")
        elif c == "zero_copy_all_reduce":
            print(f"zero-copy all_reduce {units.format_size(row['nbytes'])}, restore="
                  f"{row['restore'] is not False}: busbw {row['busbw'] / 1e9:.2f} GB/s = "
                  f"{row['busbw'] / r0['memcpy']:.0%} of one process's memcpy, "
                  f"{row['busbw'] / r0['memcpy_concurrent']:.0%} of the concurrent one")
        elif c == "crossover":
            algorithms = CROSSOVER[row["of"]]
            med = {a: statistics.median(max(r["rows"][i][a][k] for r in results)
                                        for k in range(args.iters)) for a in algorithms}
            print(f"crossover {row['of']:<15}{units.format_size(row['nbytes']):>10}: "
                  + ", ".join(f"{a} {med[a] * 1e6:.1f} us" for a in algorithms)
                  + f"  (best {min(med, key=med.get)})")
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(9, 4))
        for c, pts in plot.items():
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=c)
            ax.plot([p[0] for p in pts], [p[2] for p in pts], marker="x", ls="--",
                    color=line.get_color(), label=f"{c}, restore=False")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(2.0, color="grey", lw=0.8, ls=":", label="2x (issue 16's target from 1 MiB)")
        ax.set_xlabel("bytes")
        ax.set_ylabel("gloo time / ringccl shm time")
        ax.set_title(f"ringccl shm vs gloo, {n} processes")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)


if __name__ == "__main__":
    main()
