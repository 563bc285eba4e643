"""A large shared-memory all_reduce (``restore=False``, as ``dist.all_reduce`` on the ringccl
backend) with each rank's copies and reductions split over threads (``RINGCCL_SHM_THREADS``)
against one thread per rank and gloo's all_reduce, interleaved in the same run.

Per size: ``--iters`` (>= 5) samples of each variant round by round (a sample: one call after
a barrier; the slowest rank's time per sample), their median and min-max, algbw and busbw
(nccl-tests' definitions: S / t and 2 (N-1)/N S / t), and one check that every variant's
result is bitwise the one-thread result and equals gloo's (small integers in float32: exact in
any order). The compiled call's signature includes ``RINGCCL_SHM_THREADS``, so each variant
replays its own compiled call.

Floors, measured after the rows: the C helper's float32 sum of the largest size (``_lanec``
``combine``, the loop the lane reduces with) on 1 thread and on each ``--threads`` count, by
rank 0 alone and by every rank at once: the memory bandwidth threads can add on this machine.
With more threads than cores (``--nproc`` times the count above the cores) the figures
measure the oversubscription, and the report prints the machine's cores.

    python benchmarks/bench_shm_threads.py [--nproc 2] [--threads 2,4] [-b 1MiB -e 64MiB]
        [--iters 7] [--cold] [--json]

Figures for the notes only; never timed asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "src"), HERE]

import measure  # noqa: E402
from ringccl import units  # noqa: E402


def _threads_call(threads: int):
    """``fn(tensor)``: ringccl.torch's all_reduce over shm with ``threads`` per rank, with
    ``restore=False`` as ``dist.all_reduce`` on the ringccl backend runs it (an all-or-nothing
    call this large runs the general path: ``lane.RESTORE_MAX_BYTES``)."""
    import ringccl.torch as rt

    def call(t):
        os.environ["RINGCCL_SHM_THREADS"] = str(threads)
        rt.all_reduce(t, transport="shm", restore=False)
    return call


def _combine_floor(nbytes: int, counts: list, iters: int, alone: bool, barrier) -> dict:
    """Seconds of the C float32 sum over ``nbytes`` per thread count (median of ``iters``
    interleaved samples): rank 0 alone (the others wait at the barrier) or every rank."""
    import numpy as np
    import torch.distributed as dist

    from ringccl.backends.shm import _lanec
    a, b = np.ones(nbytes // 4, np.float32), np.ones(nbytes // 4, np.float32)
    mine = not alone or dist.get_rank() == 0
    times: dict = {t: [] for t in counts}
    for _ in range(iters):
        for t in counts:
            barrier()
            if mine:
                t0 = time.perf_counter()
                _lanec.combine(0, 0, 0, False, a, b, None, -1, 0, t)
                times[t].append(time.perf_counter() - t0)
    return {str(t): measure.summary(v) if v else None for t, v in times.items()}


def worker(rank, world_size, sizes, counts, iters, cold) -> dict:
    import torch
    import torch.distributed as dist

    from ringccl.backends.shm import _lanec
    barrier = dist.barrier
    variants = {f"threads_{t}": _threads_call(t) for t in [1] + counts}
    variants["gloo"] = dist.all_reduce
    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        x = torch.randint(-8, 8, (count,), generator=torch.Generator().manual_seed(rank))
        results = {}
        for name, fn in variants.items():   # first calls (compile), checked
            y = x.float()
            fn(y)
            results[name] = y
        one = results["threads_1"].view(torch.int32)
        correct = all(r.view(torch.int32).equal(one) for r in results.values())
        pool = measure.BufferPool(count, cold=cold, wrap=torch.from_numpy)
        times: dict = {name: [] for name in variants}
        for _ in range(iters):
            for name, fn in variants.items():
                t = pool.take()
                barrier()
                t0 = time.perf_counter()
                fn(t)
                times[name].append(time.perf_counter() - t0)
        rows.append(dict(nbytes=nbytes, correct=correct, times_s=times))
    floors = {"alone": _combine_floor(sizes[-1], [1] + counts, iters, True, barrier),
              "all_ranks": _combine_floor(sizes[-1], [1] + counts, iters, False, barrier)}
    return dict(rows=rows, floors=floors, workers=_lanec.workers())


def _report(results, args, sizes, counts) -> dict:
    from ringccl.resources import usable_cores
    n, rows = args.nproc, []
    for i, row in enumerate(results[0]["rows"]):
        per = [r["rows"][i] for r in results]
        out = dict(nbytes=row["nbytes"], correct=all(p["correct"] for p in per))
        for name in row["times_s"]:
            samples = [max(p["times_s"][name][k] for p in per) for k in range(args.iters)]
            s = measure.summary(samples)
            s["algbw_GBps"] = row["nbytes"] / s["median_s"] / 1e9
            s["busbw_GBps"] = s["algbw_GBps"] * 2 * (n - 1) / n
            out[name] = s
        base = out["threads_1"]["median_s"]
        for t in counts:
            out[f"speedup_{t}"] = base / out[f"threads_{t}"]["median_s"]
        out["gloo_over_threads_1"] = out["gloo"]["median_s"] / base
        rows.append(out)
    return dict(nproc=n, threads=counts, iters=args.iters, cold=args.cold, cores=usable_cores(),
                load=os.getloadavg(), rows=rows, floors=results[0]["floors"],
                workers=[r["workers"] for r in results], ranks=results)


def _print(report: dict) -> None:
    counts = report["threads"]
    print(f"all_reduce over shm, {report['nproc']} processes on {report['cores']} usable "
          f"cores, threads per rank 1 vs {counts}, median of {report['iters']} interleaved "
          f"samples (slowest rank){', cold buffers' if report['cold'] else ''}")
    head = f"{'size':>8} {'1 thread us':>12}" + "".join(
        f" {f'{t} threads us':>13} {'speedup':>8}" for t in counts) + \
        f" {'gloo us':>10} {'gloo/1':>7} {'busbw GB/s (1)':>14} {'ok':>3}"
    print(head)
    for r in report["rows"]:
        line = f"{units.format_size(r['nbytes']):>8} {r['threads_1']['median_s'] * 1e6:12.1f}"
        for t in counts:
            line += f" {r[f'threads_{t}']['median_s'] * 1e6:13.1f} {r[f'speedup_{t}']:8.2f}"
        line += (f" {r['gloo']['median_s'] * 1e6:10.1f} {r['gloo_over_threads_1']:7.2f}"
                 f" {r['threads_1']['busbw_GBps']:14.2f} {'yes' if r['correct'] else 'NO':>3}")
        print(line)
    nbytes = report["rows"][-1]["nbytes"]
    for where, floor in report["floors"].items():
        cells = ", ".join(f"{t} thread(s) {v['median_s'] * 1e3:.2f} ms "
                          f"({3 * nbytes / v['median_s'] / 1e9:.1f} GB/s)"
                          for t, v in floor.items())
        print(f"floor: C float32 sum of {units.format_size(nbytes)}, "
              f"{'rank 0 alone' if where == 'alone' else 'every rank at once'}: {cells}")
    print(f"pool workers started per rank: {report['workers']}; load average "
          f"{report['load'][0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--threads", default="2",
                        help="thread counts per rank compared with 1 (comma-separated)")
    parser.add_argument("-b", "--begin", default="1MiB")
    parser.add_argument("-e", "--end", default="64MiB")
    parser.add_argument("--iters", type=int, default=7)
    parser.add_argument("--cold", action="store_true",
                        help="a buffer of its own per timed call (>= 64 MiB pool)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.iters < 5:
        parser.error(f"--iters={args.iters}: at least 5 (the median of >= 5 iterations)")
    try:
        counts = [int(v) for v in args.threads.split(",")]
    except ValueError:
        counts = []
    if not counts or any(not 2 <= t <= 64 for t in counts):
        parser.error(f"--threads={args.threads!r}: comma-separated integers from 2 to 64")
    sizes = measure.powers_of_4(units.size(args.begin), units.size(args.end))
    if not sizes:
        parser.error(f"-b {args.begin} -e {args.end}: no size (-b must be <= -e)")
    from ringccl.torch.launch import launch
    results = launch(worker, args.nproc, sizes, counts, args.iters, args.cold, timeout=1200,
                     worker_bytes=6 * sizes[-1] + 2 * measure.COLD_POOL_BYTES * args.cold)
    report = _report(results, args, sizes, counts)
    print(json.dumps(report, indent=1) if args.json else "", end="")
    if not args.json:
        _print(report)


if __name__ == "__main__":
    main()
