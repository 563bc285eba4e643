"""ringccl over shared memory (transport="shm", algorithm="auto") against gloo's own collectives
on one host, interleaved in the same run.

For each collective and size: the median of ``--iters`` (>= 5) interleaved samples of ours and
gloo's (a sample: the mean of up to 64 back-to-back calls after a barrier, one call from 4 MiB
on, since ranks leave gloo's barrier up to hundreds of µs apart; ours checked against gloo's
result once per size), min–max, the ratio gloo/ours; the zero-copy all_reduce
(``shm_empty``) busbw at the largest size, an 8-byte all_reduce latency row (µs), the per-call
µs at 4 KiB, the load average before and after.

Apart from those steady-state figures: the first call of each signature (per collective and
size, ours with each ``restore`` and gloo's; ours sets the shared memory up or grows it and
compiles the call's lane there), and the physical floors measured after the rows
(:mod:`measure`): half a flag round trip between ranks 0 and 1 over shared memory, a memcpy of
the largest size (numpy, per rank) with every rank copying at once and one process alone.

``--cold``: every timed call gets a buffer of its own, round-robin from a pool of >= 64 MiB
(:class:`measure.BufferPool`), as reused buffers stay cache-hot (the Open MPI XHC authors warn
about this); the zero-copy row keeps its one buffer (it lives in the segment). The report says
whether the run was cold.

``--crossover`` (or ``--crossover-only``) adds the algorithms of :data:`CROSSOVER` per
collective and size, interleaved round by round (the measurement behind
``ringccl.costmodel.choice.TWO_SHOT_BYTES``); ``--wait-policies`` compares the wait policies of
:data:`POLICIES` on all_reduce (behind ``ringccl.backends.shm.group.SPIN_POLLS``). ``--json``
prints the report as the tables show it (slowest rank per iteration, medians, first calls,
floors, ``cold``) with every rank's raw rows; ``--png FILE`` draws the ratio against size.
``--in-place`` times reduce_scatter in NCCL's in-place form (the output is the input's own
block) per algorithm, interleaved round by round: out of place, in place, in place as it ran
before the caller's input stopped being its working buffer (partial sums left in the other
blocks), and gloo's in place (its ``--json``: the raw rows of every rank).

    python benchmarks/bench_shm.py --nproc 2 [-b 4KiB -e 64MiB | --sizes 4KiB,1MiB]
        [--iters 7] [--collectives all_reduce,...] [--cold] [--json] [--png shm.png]
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "src"), HERE]

import measure  # noqa: E402
from ringccl import units  # noqa: E402
from ringccl.cli.sizes import size_list  # noqa: E402

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
       "all_gather": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
       "all_to_all": lambda n: (n - 1) / n}

#: ``--crossover``: the algorithms compared per collective over shm (the measurement behind
#: ringccl.costmodel.choice.TWO_SHOT_BYTES)
CROSSOVER = {"all_reduce": ("direct", "two_shot", "ring"),
             "reduce_scatter": ("direct", "ring"), "all_gather": ("direct", "ring"),
             "broadcast": ("direct", "ring"), "all_to_all": ("direct", "pairwise")}
#: the steady-state variants of the main rows: ours (restore default / False) and gloo's
VARIANTS = ("ours", "ours_no_restore", "gloo")


def _layout(collective: str, nbytes: int, n: int):
    """(elements, split): one call's float32 buffers as one flat array of ``elements`` for the
    collective's size ``nbytes`` (one rank's buffer for all_reduce/broadcast, the whole N-block
    buffer otherwise), and ``split(flat)`` -> its (output, input) views (in place: the same)."""
    count = max(n, nbytes // 4 // n * n)
    k = count // n
    if collective in ("all_reduce", "broadcast"):
        return count, lambda f: (f, f)
    if collective == "reduce_scatter":
        return k + count, lambda f: (f[:k], f[k:])
    if collective == "all_gather":
        return count + k, lambda f: (f[:count], f[count:])
    return 2 * count, lambda f: (f[:count], f[count:])


def _call(collective: str, ours: bool = True, algorithm=None, restore=None):
    """``fn(output, input)``: ours (ringccl.torch; ``algorithm`` None: "auto"; ``restore`` None:
    ringccl's default, the caller's tensors all or nothing; False: as gloo and NCCL, whose
    failed calls leave partial results) or gloo's ``collective``."""
    import torch.distributed as dist

    import ringccl.torch as rt

    if not ours:
        return {"all_reduce": lambda o, i: dist.all_reduce(o),
                "broadcast": lambda o, i: dist.broadcast(o, 0),
                # torch 2.13's successors of the two deprecated names, where it has them
                "reduce_scatter": getattr(dist, "reduce_scatter_single", None)
                or dist.reduce_scatter_tensor,
                "all_gather": getattr(dist, "all_gather_single", None)
                or dist.all_gather_into_tensor,
                "all_to_all": dist.all_to_all_single}[collective]
    kw = dict(algorithm=algorithm, restore=restore)
    return {"all_reduce": lambda o, i: rt.all_reduce(o, **kw),
            "broadcast": lambda o, i: rt.broadcast(o, 0, **kw),
            "reduce_scatter": lambda o, i: rt.reduce_scatter_tensor(o, i, **kw),
            "all_gather": lambda o, i: rt.all_gather_into_tensor(o, i, **kw),
            "all_to_all": lambda o, i: rt.all_to_all_single(o, i, **kw)}[collective]


def _pool(collective: str, nbytes: int, n: int, cold: bool):
    """``take()`` -> the next call's (output, input) tensors: always the same (warm) or, with
    ``cold``, a buffer of its own from a pool of >= 64 MiB (:class:`measure.BufferPool`)."""
    import torch
    elements, split = _layout(collective, nbytes, n)
    pool = measure.BufferPool(elements, cold=cold, wrap=torch.from_numpy)
    fixed = None if cold else split(pool.take())
    return (lambda: split(pool.take())) if cold else (lambda: fixed)


def _time(fn, barrier, reps: int = 1, take=None) -> float:
    """Seconds per call of ``reps`` back-to-back calls of ``fn`` after ``barrier()``; with
    ``take``, call i is ``fn(*take())``, its buffers taken before the barrier (untimed)."""
    args = [take() if take is not None else () for _ in range(reps)]
    barrier()
    t0 = time.perf_counter()
    for a in args:
        fn(*a)
    return (time.perf_counter() - t0) / reps


def _first_calls(collective: str, nbytes: int, n: int, calls: dict, barrier):
    """Each call of ``calls`` (name -> fn(output, input)) once, between barriers, on its own
    copy of one random input: ({name: this rank's seconds}, whether every output equals
    gloo's). For a size seen first, ours sets up or grows the shared memory and compiles."""
    import torch
    elements, split = _layout(collective, nbytes, n)
    x = torch.randint(-8, 8, (elements,)).float()
    first, outputs = {}, {}
    for name, fn in calls.items():
        out, inp = split(x.clone())
        first[name] = _time(lambda: fn(out, inp), barrier)
        outputs[name] = out
    return first, all(bool(torch.equal(o, outputs["gloo"])) for o in outputs.values())


def _sweep(collectives, sizes, n, iters, cold, barrier) -> list:
    """The main rows: per collective and size, the first calls (checked against gloo's), then
    ``iters`` samples of each of VARIANTS, interleaved."""
    rows = []
    for collective in collectives:
        for nbytes in sizes:
            calls = dict(zip(VARIANTS, (_call(collective), _call(collective, restore=False),
                                        _call(collective, ours=False))))
            first, correct = _first_calls(collective, nbytes, n, calls, barrier)
            take = _pool(collective, nbytes, n, cold)
            for fn in calls.values():
                fn(*take())                   # warm-up on the timed buffers
            times = {name: [] for name in calls}
            reps = measure.batch_calls(nbytes)
            for _ in range(iters):
                for name, fn in calls.items():
                    times[name].append(_time(fn, barrier, reps, take))
            rows.append(dict(collective=collective, nbytes=nbytes, correct=correct, cold=cold,
                             first_call_s=first, **{f"{k}_s": t for k, t in times.items()}))
    return rows


def _back_to_back(n, cold, barrier) -> list:
    """all_reduce of 8 bytes (200 calls) and 4 KiB (500 calls) back to back, µs per call, ours
    and gloo's."""
    import torch
    rows = []
    for label, count, calls in (("latency_8B", 2, 200), ("per_call_4KiB", 1024, 500)):
        pool = measure.BufferPool(count, cold=cold, wrap=torch.from_numpy)
        for name, fn in (("ours", _call("all_reduce")), ("gloo", _call("all_reduce", False))):
            fn(pool.take(), None)
            seconds = _time(fn, barrier, calls, lambda: (pool.take(), None))
            rows.append(dict(collective=label, who=name, us_per_call=seconds * 1e6, cold=cold))
    return rows


def _zero_copy(n, nbytes, iters, barrier) -> list:
    """all_reduce of ``nbytes`` on a buffer that lives in the segment already (``shm_empty``:
    one buffer, whatever ``--cold``), with each ``restore``."""
    import ringccl.torch as rt
    rows, big = [], nbytes // 4
    z = rt.shm_empty((big,))
    z.fill_(1.0)
    for restore in (None, False):   # restore: the rollback's saved copy of every chunk
        rt.all_reduce(z, restore=restore)
        t = [_time(lambda: rt.all_reduce(z, restore=restore), barrier) for _ in range(iters)]
        med = statistics.median(t)
        rows.append(dict(collective="zero_copy_all_reduce", nbytes=big * 4, seconds=t,
                         restore=restore, busbw=big * 4 / med * BUS["all_reduce"](n),
                         cold=False))
    return rows


def _crossover(collectives, sizes, n, iters, cold, barrier) -> list:
    """Per collective and size, the algorithms of CROSSOVER, interleaved round by round."""
    rows = []
    for collective in collectives:
        calls = {a: _call(collective, algorithm=a) for a in CROSSOVER[collective]}
        for nbytes in sizes:
            take = _pool(collective, nbytes, n, cold)
            for fn in calls.values():
                fn(*take())
            t = {a: [] for a in calls}
            reps = measure.batch_calls(nbytes)
            for _ in range(iters):    # the algorithms interleaved round by round
                for a, fn in calls.items():
                    t[a].append(_time(fn, barrier, reps, take))
            rows.append(dict(collective="crossover", of=collective, nbytes=nbytes, cold=cold,
                             **t))
    return rows


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
        reps = measure.batch_calls(nbytes)
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
            "gloo_in_place": lambda: (getattr(dist, "reduce_scatter_single", None)
                                      or dist.reduce_scatter_tensor)(
                inp_gloo[rank * k:(rank + 1) * k], inp_gloo)}
        for fn in calls.values():
            fn()                   # warm-up: set-up, growth, plans
        inp.copy_(x)
        rt.reduce_scatter_tensor(inp[rank * k:(rank + 1) * k], inp, **kw)
        untouched = bool(torch.equal(torch.cat([inp[:rank * k], inp[(rank + 1) * k:]]),
                                     torch.cat([x[:rank * k], x[(rank + 1) * k:]])))
        t = {c: [] for c in calls}
        reps = measure.batch_calls(nbytes)
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



def worker(rank, world_size, sizes, iters, crossover, collectives=COLLECTIVES, cold=False):
    import torch.distributed as dist

    barrier = dist.barrier
    rows, n = [], world_size
    load = os.getloadavg()
    if crossover != "only":   # --crossover-only: just the algorithms per size
        rows += _sweep(collectives, sizes, n, iters, cold, barrier)
        rows += _back_to_back(n, cold, barrier)
        rows += _zero_copy(n, sizes[-1], iters, barrier)
    if crossover:
        rows += _crossover(collectives, sizes, n, iters, cold, barrier)
    # last: its large buffers must not disturb the rows above
    floors = measure.torch_floors(rank, n, sizes[-1], iters, cold)
    return dict(rows=rows, load_before=load, load_after=os.getloadavg(), floors=floors,
                cold=cold)


def _report(results, args, sizes, collectives) -> dict:
    """The run as the tables show it (what ``--json`` prints): per row, each iteration's
    slowest rank, their median and min-max; first calls the slowest rank's; the back-to-back
    and zero-copy rows rank 0's; the floors; every rank's raw rows under "ranks"."""
    r0, iters = results[0], args.iters
    rows = []
    for i, row in enumerate(r0["rows"]):
        per = [r["rows"][i] for r in results]
        c = row["collective"]
        if "ours_s" in row:
            out = dict(collective=c, nbytes=row["nbytes"], cold=row["cold"],
                       correct=all(p["correct"] for p in per))
            for name in VARIANTS:
                samples = [max(p[f"{name}_s"][k] for p in per) for k in range(iters)]
                out[name] = dict(measure.summary(samples), samples_s=samples)
            out["ratio"] = out["gloo"]["median_s"] / out["ours"]["median_s"]
            out["ratio_no_restore"] = out["gloo"]["median_s"] / out["ours_no_restore"]["median_s"]
            out["first_call_s"] = {k: max(p["first_call_s"][k] for p in per) for k in VARIANTS}
        elif c == "crossover":
            out = {k: row[k] for k in ("collective", "of", "nbytes", "cold")}
            for a in CROSSOVER[row["of"]]:
                out[a] = measure.summary([max(p[a][k] for p in per) for k in range(iters)])
            out["best"] = min(CROSSOVER[row["of"]], key=lambda a: out[a]["median_s"])
        else:
            out = dict(row)
        rows.append(out)
    return dict(nproc=args.nproc, iters=iters, cold=args.cold, sizes=sizes,
                collectives=list(collectives), load_before=r0["load_before"],
                load_after=r0["load_after"], floors=r0["floors"], rows=rows, ranks=results)


def _print_first_calls(rows: list) -> None:
    main = [r for r in rows if "first_call_s" in r]
    if not main:
        return
    print("first call of each signature (us, slowest rank; not in the steady-state figures "
          "above: ours sets the shared memory up or grows it and compiles the call's lane)")
    print(f"{'collective':<16}{'size':>10}{'ours':>12}{'ours r=F':>12}{'gloo':>12}"
          f"{'ours 1st/median':>17}")
    for r in main:
        f = r["first_call_s"]
        print(f"{r['collective']:<16}{units.format_size(r['nbytes']):>10}"
              f"{measure.fmt(f['ours'] * 1e6):>12}{measure.fmt(f['ours_no_restore'] * 1e6):>12}"
              f"{measure.fmt(f['gloo'] * 1e6):>12}"
              f"{measure.fmt(f['ours'] / r['ours']['median_s']):>17}")


def _print(report: dict) -> None:
    n, floors = report["nproc"], report["floors"]
    print(f"{n} processes; load {report['load_before']} -> {report['load_after']}; "
          + ("cold: every timed call its own buffer, round-robin over >= "
             f"{units.format_size(measure.COLD_POOL_BYTES)}" if report["cold"] else
             "warm: each variant's calls reuse one buffer (cache-hot)"))
    print("ours: ringccl's default (restore=True: the caller's tensors all or nothing); "
          "r=F: restore=False (as gloo: a failed call leaves partial results); ratio = gloo / "
          "ours; times: median over iterations of the slowest rank's")
    print(f"{'collective':<16}{'size':>10}{'ours us':>12}{'r=F us':>12}{'gloo us':>12}"
          f"{'ratio':>8}{'ratio r=F':>10}{'ours min-max':>22}{'gloo min-max':>22}  ok")
    for row in report["rows"]:
        c = row["collective"]
        if "first_call_s" in row:
            o, nr, g = row["ours"], row["ours_no_restore"], row["gloo"]
            print(f"{c:<16}{units.format_size(row['nbytes']):>10}{o['median_s'] * 1e6:>12.1f}"
                  f"{nr['median_s'] * 1e6:>12.1f}{g['median_s'] * 1e6:>12.1f}"
                  f"{row['ratio']:>8.2f}{row['ratio_no_restore']:>10.2f}"
                  f"{o['min_s'] * 1e6:>11.1f}-{o['max_s'] * 1e6:<10.1f}"
                  f"{g['min_s'] * 1e6:>11.1f}-{g['max_s'] * 1e6:<10.1f}  {row['correct']}")
        elif "us_per_call" in row:
            print(f"{c:<16}{row['who']:>10}{row['us_per_call']:>12.1f} us per call")
        elif c == "zero_copy_all_reduce":
            every, alone = floors["memcpy_every_rank"], floors["memcpy_alone"]
            print(f"zero-copy all_reduce {units.format_size(row['nbytes'])}, restore="
                  f"{row['restore'] is not False}: busbw {row['busbw'] / 1e9:.2f} GB/s = "
                  f"{row['busbw'] / alone['bytes_per_s']:.0%} of one process's memcpy, "
                  f"{row['busbw'] / every['bytes_per_s']:.0%} of the concurrent one "
                  f"({units.format_size(every['nbytes'])}, floors below)"
                  + ("; one buffer (it lives in the segment): not cold" if report["cold"]
                     else ""))
        elif c == "crossover":
            med = {a: row[a]["median_s"] for a in CROSSOVER[row["of"]]}
            print(f"crossover {row['of']:<15}{units.format_size(row['nbytes']):>10}: "
                  + ", ".join(f"{a} {m * 1e6:.1f} us" for a, m in med.items())
                  + f"  (best {row['best']})")
    measure.print_floors(floors)
    _print_first_calls(report["rows"])


def _png(report: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plot: dict = {}
    for r in report["rows"]:
        if "first_call_s" in r:
            plot.setdefault(r["collective"], []).append((r["nbytes"], r["ratio"],
                                                         r["ratio_no_restore"]))
    fig, ax = plt.subplots(figsize=(9, 4))
    for c, pts in plot.items():
        line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=c)
        ax.plot([p[0] for p in pts], [p[2] for p in pts], marker="x", ls="--",
                color=line.get_color(), label=f"{c}, restore=False")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhline(2.0, color="grey", lw=0.8, ls=":", label="2x (the target from 1 MiB)")
    ax.set_xlabel("bytes")
    ax.set_ylabel("gloo time / ringccl shm time")
    ax.set_title(f"ringccl shm vs gloo, {report['nproc']} processes"
                 + (", cold buffers" if report["cold"] else ""))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


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
    parser.add_argument("--cold", action="store_true",
                        help="every timed call gets a buffer of its own, round-robin from a "
                        "pool of >= 64 MiB (reused buffers stay cache-hot)")
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
                        type=lambda text: size_list(text, whole_bytes=True),
                        help="comma-separated sizes instead of -b..-e by powers of 4 (as "
                        "ringccl's --size lists: 4KiB,1MiB or a range 4KiB:1MiB:4)")
    args = parser.parse_args()
    if args.iters < 5:
        parser.error(f"--iters={args.iters}: at least 5 (the median of >= 5 iterations)")
    if args.cold and (args.wait_policies or args.in_place):
        parser.error("--cold: applies to the main rows and --crossover/--crossover-only, not "
                     f"to {'--wait-policies' if args.wait_policies else '--in-place'}")
    from ringccl.torch.launch import launch

    sizes = (measure.powers_of_4(units.size(args.begin), units.size(args.end))
             if args.sizes is None else args.sizes)
    if not sizes:
        parser.error(f"-b {args.begin} -e {args.end}: no size (-b must be <= -e)")
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
    results = launch(worker, args.nproc, sizes, args.iters, crossover, collectives, args.cold,
                     timeout=1200,
                     worker_bytes=8 * sizes[-1] + 2 * measure.COLD_POOL_BYTES * args.cold)
    report = _report(results, args, sizes, collectives)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        _print(report)
    if args.png:
        _png(report, args.png)


if __name__ == "__main__":
    main()
