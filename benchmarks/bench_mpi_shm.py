"""ringccl.mpi over shared memory (transport="shm") against ``MPI_Allreduce`` (Open MPI's own
shared-memory path, vader/CMA) on one host, interleaved in the same run.

For each size: the median of ``--iters`` (>= 5) interleaved iterations of ringccl's all_reduce
(``algorithm="auto"`` over shm: one-shot ``direct`` below
``ringccl.costmodel.choice.two_shot_bytes(world_size, "mpi")``, ``two_shot`` from it on) and
``MPI_Allreduce``
(``MPI_IN_PLACE``, float32, sum), min-max of each, and the ratio MPI / ours (> 1: ours is
faster); the same call on a ``ringccl.mpi.shm_empty`` array (zero copy: no copy in or out) and
MPI / zero-copy; every size's result is checked against MPI's once. Also the 8-byte all_reduce latency
(µs) of both, the load average before and after, and with ``--crossover`` one-shot vs two-shot
per size (the measurement behind ``ringccl.costmodel.choice.TWO_SHOT_BYTES``). ``--json``
prints the raw rows.

"ours" is the compiled lane (:mod:`ringccl.backends.shm.lane`: a signature's later calls replay
its first, in C where ``_lanec`` is built; large sends read in place from the sender's memory,
:mod:`ringccl.backends.shm.peer_memory`); "python" the same lane replayed in Python
(``lane.set_native(False)``); "general" the same call with the lane off; "slot copy" the lane
with every send copied into the sender's slot (compiled with ``peer_memory`` off, on a
duplicate of the communicator), all interleaved; "1st call"
the first call of the signature (compiling it). ``--cold`` gives every timed call a buffer of
its own, round-robin from a pool of >= 64 MiB taken untimed (:class:`measure.BufferPool`), as
the Open MPI XHC authors warn that reused buffers stay cache-hot (the zero-copy column keeps
its one buffer: it lives in the segment).
"8 B back to back": 200 calls in a row, µs per call (a training loop's pattern).

The floor of any Python-level shared-memory collective, timed the same way (single calls
between barriers, max over ranks), after the rows above: ``shm enter/leave`` is
the communicator's ``ShmGroup.enter`` + ``leave`` with no data (one synchronisation of every
rank through the control block, the least a collective must do), ``numpy 4 KiB`` this rank's
local work of a 4 KiB one-shot all_reduce without any synchronisation (copy in, one reduce per
peer, copy out), ``flag one way`` half a round trip of a word between ranks 0 and 1 over
shared memory (Python polls; the mean over a batch of round trips), and ``memcpy`` / ``add``
a pass over a buffer of the largest size with every rank at once, cold with ``--cold`` (what
bounds the large sizes: docs/shm.md; the flag and the passes are :mod:`measure`'s, shared with
``bench_shm.py``). The ``MPI_Allreduce`` column is itself a Python call of mpi4py's
``comm.Allreduce``.

    python benchmarks/bench_mpi_shm.py --nproc 2 [-b 4KiB -e 64MiB] [--iters 7] [--crossover]
        [--cold] [--single-copy-min SIZE] [--json]

The script starts itself under mpirun (``ringccl.backends.mpi.launch.mpirun_command``).
Figures for the note only; never timed asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")
sys.path[:0] = [SRC, HERE]

import measure  # noqa: E402
from ringccl import units  # noqa: E402
from ringccl.errors import ArgumentError  # noqa: E402


def floor(comm, reps: int, timed, nbytes: int, cold: bool = False) -> dict:
    """The floor rows (module docstring): shm enter/leave with no data and the local numpy work
    of a 4 KiB one-shot all_reduce, interleaved round by round; then half a flag round trip
    between ranks 0 and 1, and memcpy / in-place add of ``nbytes`` (every rank at once, on
    ``cold`` buffers in a cold run: :mod:`measure`)."""
    import numpy as np

    from ringccl.backends.mpi import executor
    from ringccl.backends.shm import call

    n = comm.Get_size()
    state, _ = executor.shm_state(comm)
    lazy = n >= call.LAZY_ENTRY_MIN_WORLD   # the call entry ringccl.mpi uses

    def barrier():
        state.enter(8, lazy=lazy)   # 8 bytes: the working area holds them, no growth
        state.leave()

    x = np.ones(1024, dtype=np.float32)
    work = np.empty_like(x)
    peer = np.ones_like(x)

    def local():
        work[...] = x
        for _ in range(n - 1):
            np.add(work, peer, out=work)
        x[...] = work

    variants = {"shm_enter_leave": barrier, "numpy_4KiB": local}
    times: dict = {k: [] for k in variants}
    for _ in range(2):
        for fn in variants.values():
            fn()
    for _ in range(reps):
        for k, fn in variants.items():
            times[k].append(timed(fn))
    row = {"kind": "floor", "world_size": n, "iters": reps, "cold": cold}
    row.update({k: measure.summary(ts) for k, ts in times.items()})
    row["flag_one_way"] = measure.flag_one_way(comm.Get_rank(), n, lambda o: comm.bcast(o, 0),
                                               comm.Barrier, reps)
    # memory bandwidth, every rank at once, on a buffer of the largest size: what bounds the
    # large sizes (the shm path's copy in, reduce and copy out are passes over the buffer);
    # after the small ones: the large passes leave the cache full of dirty lines whose
    # write-back slowed the small ones tenfold when they alternated
    row.update(measure.passes(nbytes, timed, reps, ("memcpy", "add"), cold=cold))
    return row


def worker(sizes, iters, crossover, cold=False, single_copy_min=None) -> None:
    import numpy as np
    from mpi4py import MPI

    import ringccl.mpi as rm
    from ringccl.backends.shm import lane, peer_memory

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    assert rm.resolve_transport(comm, "auto") == "shm", "not every rank on this host"
    # the baseline of in-place sends: the same lane on a communicator of its own, compiled
    # with every send copied into the slot (peer_memory off while it compiles)
    slot_comm = comm.Dup()
    if single_copy_min is not None:   # the threshold's measurement: ours against slot copy
        peer_memory.MIN_BYTES = single_copy_min

    def timed(fn, prepare=None) -> float:
        arg = prepare() if prepare is not None else None
        comm.Barrier()
        t0 = time.perf_counter()
        fn() if prepare is None else fn(arg)
        return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

    def general(fn):
        """``fn`` with the compiled lane off (the general path: the baseline)."""
        def run(*a):
            lane.set_enabled(False)
            try:
                fn(*a)
            finally:
                lane.set_enabled(True)
        return run

    def python(fn):
        """``fn`` with the lane replayed in Python (the C loop off)."""
        def run(*a):
            lane.set_native(False)
            try:
                fn(*a)
            finally:
                lane.set_native(True)
        return run

    rows = []
    load_before = os.getloadavg()
    for label, nbytes in [("latency", 8)] + [("size", s) for s in sizes]:
        count = max(2 * n, nbytes // 4)
        x = np.random.default_rng(rank).integers(-8, 8, count).astype(np.float32)
        ours, theirs = x.copy(), x.copy()
        first = timed(lambda: rm.all_reduce(ours, transport="shm"))   # compiles the lane
        comm.Allreduce(MPI.IN_PLACE, theirs, op=MPI.SUM)
        wrong = not np.array_equal(ours, theirs)
        zero = rm.shm_empty((count,), np.float32)   # zero copy: the array lives in the slot
        zero[:] = x
        rm.all_reduce(zero, transport="shm")
        wrong = wrong or not np.array_equal(zero, theirs)
        base = x.copy()
        general(lambda: rm.all_reduce(base, transport="shm"))()
        wrong = wrong or not np.array_equal(base, theirs)
        copied = x.copy()
        peer_memory.set_enabled(False)
        rm.all_reduce(copied, transport="shm", comm=slot_comm)   # compiles: sends copied
        peer_memory.set_enabled(True)
        wrong = wrong or not np.array_equal(copied, theirs)
        # --cold: a buffer of its own per call, taken untimed (reused ones stay cache-hot)
        fresh = measure.BufferPool(count, cold=True).take if cold else None

        def on(buf):
            return lambda b=None: rm.all_reduce(buf if b is None else b, transport="shm")
        variants = {"ringccl": (on(ours), fresh),
                    "python": (python(on(ours)), fresh),
                    "general": (general(on(ours)), fresh),
                    "slot_copy": ((lambda b=None: rm.all_reduce(
                        copied if b is None else b, transport="shm", comm=slot_comm)), fresh),
                    "mpi": ((lambda b=None: comm.Allreduce(MPI.IN_PLACE,
                                                           theirs if b is None else b,
                                                           op=MPI.SUM)), fresh),
                    "zero_copy": (lambda: rm.all_reduce(zero, transport="shm"), None)}
        if crossover:
            variants["direct"] = (lambda: rm.all_reduce(ours, algorithm="direct",
                                                        transport="shm"), None)
            variants["two_shot"] = (lambda: rm.all_reduce(ours, algorithm="two_shot",
                                                          transport="shm"), None)
        times = {k: [] for k in variants}
        reps = iters if nbytes >= 1 << 20 else iters * 5   # small sizes: more samples
        for _ in range(2):   # warm-up
            for fn, prepare in variants.values():
                fn() if prepare is None else fn(prepare())
        for _ in range(reps):
            for k, (fn, prepare) in variants.items():   # interleaved: the same load for all
                times[k].append(timed(fn, prepare))
        row = {"kind": label, "nbytes": count * 4, "world_size": n, "wrong": wrong,
               "iters": reps, "cold": cold, "first_call_s": first}
        row.update({k: measure.summary(ts) for k, ts in times.items()})
        row["ratio"] = row["mpi"]["median_s"] / row["ringccl"]["median_s"]
        row["ratio_general"] = row["mpi"]["median_s"] / row["general"]["median_s"]
        row["ratio_zero_copy"] = row["mpi"]["median_s"] / row["zero_copy"]["median_s"]
        row["ratio_slot_copy"] = row["mpi"]["median_s"] / row["slot_copy"]["median_s"]
        rows.append(row)
    rows.append(back_to_back(comm, iters, general, python))
    # last: its large buffers must not disturb the rows above
    rows.append(floor(comm, iters * 5, timed, max(sizes), cold))
    if rank == 0:
        print("JSON " + json.dumps({"rows": rows, "cold": cold, "load_before": load_before,
                                    "load_after": os.getloadavg()}), flush=True)


def back_to_back(comm, rounds: int, general, python, calls: int = 200) -> dict:
    """8-byte all_reduce issued back to back (as a training loop does): µs per call over
    ``calls`` calls, the lane (in C, in Python), the general path and ``MPI_Allreduce``
    interleaved round by
    round, median and min-max over ``rounds`` rounds (max over ranks)."""
    import numpy as np
    from mpi4py import MPI

    import ringccl.mpi as rm

    a, b = np.ones(2, np.float32), np.ones(2, np.float32)

    def loop(fn):
        def run():
            for _ in range(calls):
                fn()
        return run
    variants = {"ringccl": loop(lambda: rm.all_reduce(a, transport="shm")),
                "python": python(loop(lambda: rm.all_reduce(a, transport="shm"))),
                "general": general(loop(lambda: rm.all_reduce(a, transport="shm"))),
                "mpi": loop(lambda: comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM))}
    times = {k: [] for k in variants}
    for fn in variants.values():
        fn()
    for _ in range(rounds):
        for k, fn in variants.items():
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            times[k].append(comm.allreduce((time.perf_counter() - t0) / calls, op=MPI.MAX))
    row = {"kind": "back_to_back", "nbytes": 8, "calls": calls, "rounds": rounds}
    row.update({k: measure.summary(ts) for k, ts in times.items()})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("-b", "--begin", default="4KiB")
    parser.add_argument("-e", "--end", default="64MiB")
    parser.add_argument("--iters", type=int, default=7)
    parser.add_argument("--crossover", action="store_true")
    parser.add_argument("--cold", action="store_true",
                        help="a fresh buffer for every timed call (made untimed)")
    parser.add_argument("--single-copy-min", default=None, metavar="SIZE",
                        help="read sends in place from this size on (default: "
                             "ringccl.backends.shm.peer_memory.MIN_BYTES; measures it)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.iters < 5:
        parser.error(f"--iters {args.iters}: at least 5 (the medians need them)")
    try:
        sizes = measure.powers_of_4(units.size(args.begin), units.size(args.end))
    except ArgumentError as exc:
        parser.error(f"-b {args.begin} -e {args.end}: {exc}")
    if not sizes:
        parser.error(f"-b {args.begin} -e {args.end}: no size (-b must be <= -e)")
    single_copy_min = None
    if args.single_copy_min is not None:
        try:
            single_copy_min = units.size(args.single_copy_min)
        except ArgumentError as exc:
            parser.error(f"--single-copy-min {args.single_copy_min}: {exc}")
    if args.worker:
        worker(sizes, args.iters, args.crossover, args.cold, single_copy_min)
        return
    from ringccl.backends.mpi.launch import mpirun_command
    cmd = mpirun_command(args.nproc, [sys.executable, os.path.abspath(__file__), "--worker",
                                      "-b", args.begin, "-e", args.end, "--iters",
                                      str(args.iters)] + (["--crossover"] * args.crossover)
                          + (["--cold"] * args.cold)
                          + (["--single-copy-min", str(single_copy_min)]
                             if single_copy_min is not None else []))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (os.path.abspath(SRC), os.environ.get("PYTHONPATH")) if p))
    if "--oversubscribe" in cmd:  # Open MPI: pass the variable on explicitly
        cmd[1:1] = ["-x", "PYTHONPATH"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("JSON ")]
    if proc.returncode or not lines:
        sys.exit(f"mpirun failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    data = json.loads(lines[-1][5:])
    if args.json:
        print(json.dumps(data, indent=1))
        return
    _print(data, args)


def _print(data: dict, args) -> None:
    """The tables of one run (``data``: what ``--json`` prints)."""
    print(f"ringccl.mpi (shm, algorithm auto) vs MPI_Allreduce, {args.nproc} processes, float32 "
          f"sum{', cold buffers' if args.cold else ''}; load average "
          f"{data['load_before'][0]:.1f} -> {data['load_after'][0]:.1f}; ours: the compiled "
          "lane (C loop), python: the lane replayed in Python, general: the lane off")
    head = (f"{'size':>9} {'ours us (min-max)':>24} {'python us':>10} {'general us':>11}"
            f" {'MPI us (min-max)':>24}"
            f" {'MPI/ours':>8} {'MPI/gen':>7} {'slot copy us':>12} {'MPI/slot':>8}"
            f" {'zero-copy us':>13} {'MPI/zc':>7} {'1st call us':>11}")
    if args.crossover:
        head += f" {'direct us':>10} {'two_shot us':>11}"
    print(head)
    rows = data["rows"]
    floor_row = next((r for r in rows if r["kind"] == "floor"), None)
    b2b = next((r for r in rows if r["kind"] == "back_to_back"), None)
    rows = [r for r in rows if r["kind"] not in ("floor", "back_to_back")]
    for r in rows:
        def us(v):
            return (f"{v['median_s'] * 1e6:8.1f} ({v['min_s'] * 1e6:.0f}-"
                    f"{v['max_s'] * 1e6:.0f})")
        size = "8 B" if r["kind"] == "latency" else units.format_size(r["nbytes"])
        line = (f"{size:>9} {us(r['ringccl']):>24} {r['python']['median_s'] * 1e6:10.1f}"
                f" {r['general']['median_s'] * 1e6:11.1f}"
                f" {us(r['mpi']):>24} {r['ratio']:8.2f} {r['ratio_general']:7.2f}"
                f" {r['slot_copy']['median_s'] * 1e6:12.1f} {r['ratio_slot_copy']:8.2f}"
                f" {r['zero_copy']['median_s'] * 1e6:13.1f} {r['ratio_zero_copy']:7.2f}"
                f" {r['first_call_s'] * 1e6:11.1f}")
        if args.crossover:
            line += (f" {r['direct']['median_s'] * 1e6:10.1f} "
                     f"{r['two_shot']['median_s'] * 1e6:11.1f}")
        print(line + ("  WRONG" if r["wrong"] else ""))
    if b2b is not None:
        print(f"8 B back to back ({b2b['calls']} calls x {b2b['rounds']} rounds), us per call: "
              + ", ".join(f"{k} {b2b[k]['median_s'] * 1e6:.1f} ({b2b[k]['min_s'] * 1e6:.1f}-"
                          f"{b2b[k]['max_s'] * 1e6:.1f})" for k in ("ringccl", "python", "general",
                                                          "mpi")))
    if floor_row is not None:
        for k, label in (("shm_enter_leave", "floor: shm enter/leave, no data"),
                         ("numpy_4KiB", "floor: numpy work of a 4 KiB one-shot, no sync")):
            v = floor_row[k]
            print(f"{label:>40} {v['median_s'] * 1e6:8.1f} us ({v['min_s'] * 1e6:.1f}-"
                  f"{v['max_s'] * 1e6:.1f})")
        flag = floor_row["flag_one_way"]
        if flag is not None:
            f_us = {k: measure.fmt(flag[k] * 1e6) for k in ("median_s", "min_s", "max_s")}
            print(f"{'floor: flag one way, rank 0 <-> 1':>40} {f_us['median_s']:>8} us "
                  f"({f_us['min_s']}-{f_us['max_s']}; half a round trip over shared memory, "
                  f"Python polls, mean of {flag['trips']})")
        size = units.format_size(floor_row["nbytes"])
        for k in ("memcpy", "add"):
            v = floor_row[k]
            print(f"{'floor: ' + k + ' ' + size + ', every rank at once':>40} "
                  + ("(cold) " if floor_row["cold"] else "") +
                  f"{v['median_s'] * 1e6:8.1f} us = {floor_row['nbytes'] / v['median_s'] / 1e9:.1f}"
                  f" GB/s per rank (best {floor_row['nbytes'] / v['min_s'] / 1e9:.1f})")


if __name__ == "__main__":
    main()
