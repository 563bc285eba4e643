"""Memory of the simulator and of the torch executor.

(a) Simulator: peak memory of ``ringccl.simulate`` measured with tracemalloc (numpy reports its
    data allocations to it), as a ratio to the input array's nbytes and to the collective's
    working buffer (N · buffer_count elements: for all_gather N² · count, the output), with the
    reference check off and on.
(b) torch executor on 2 local gloo processes: the extra memory of one call of
    ``ringccl.torch.all_reduce`` etc. beyond the caller's tensors, measured two ways:
    * ``peak RSS growth``: the resident set sampled every 0.2 ms during the call, its peak
      minus its value before, for the first call after ``release_buffers()`` (cold: allocates
      the staging buffer it keeps) and the next (warm: staging reused);
    * ``allocated``: bytes torch allocates during the call (torch.profiler, profile_memory=True),
      cold and warm (staging reused);
    next to ``max_staging_elements`` (the executor's staging: two halves, each the staged
    receives of one step), the rollback backup (``restore=True`` on calls that work in the
    caller's tensor: the chunks the rank overwrites) and the API layer's own working copies.

    python benchmarks/bench_memory.py [--json] [--skip-torch] [--count 16Mi]
"""

from __future__ import annotations

import argparse
import json
import tracemalloc

import numpy as np

import ringccl
from ringccl.units import count as parse_count

SIM_CASES = [  # (collective, algorithm, world_size, count per rank)
    ("all_reduce", "ring", 64, 1 << 20), ("all_reduce", "ring", 256, 1 << 18),
    ("reduce_scatter", "ring", 64, 1 << 20), ("reduce_scatter", "ring", 256, 1 << 18),
    ("all_gather", "ring", 64, (1 << 20) // 64), ("all_gather", "ring", 256, (1 << 18) // 256),
    ("all_reduce", "tree", 64, 1 << 20), ("all_reduce", "recursive_doubling", 64, 1 << 20),
    ("all_reduce", "halving_doubling", 64, 1 << 20), ("all_reduce", "direct", 64, 1 << 20),
    ("all_to_all", "pairwise", 64, 1 << 20), ("all_to_all", "bruck", 64, 1 << 20),
]


def sim_peak(collective: str, algorithm: str, n: int, count: int, check: bool) -> dict:
    x = np.random.default_rng(0).standard_normal((n, count)).astype(np.float32)
    ringccl.schedule(collective, algorithm, world_size=n)  # build outside the measurement
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        r = ringccl.simulate(collective, x, algorithm=algorithm, check=check)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    buffer = n * ringccl.get_collective(collective).buffer_count(n, count) * x.itemsize
    assert check is False or r.matches_reference
    return {"collective": collective, "algorithm": algorithm, "world_size": n, "count": count,
            "check": check, "input_bytes": x.nbytes, "buffer_bytes": buffer, "peak_bytes": peak,
            "peak_over_input": peak / x.nbytes, "peak_over_buffer": peak / buffer}


# -- torch -----------------------------------------------------------------------------------------

def _rss() -> int:
    """Resident set size of this process in bytes (Linux /proc/self/statm)."""
    import os
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_growth(fn) -> int:
    """Largest growth of the resident set over its value before ``fn``, sampled every 0.2 ms by a
    thread while ``fn`` runs (torch frees large CPU tensors back to the OS at once)."""
    import threading
    import time
    before, peak, done = _rss(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.0002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        fn()
    finally:
        done.set()
        t.join()
    return max(peak[0], _rss()) - before


def _profiled_bytes(fn) -> int:
    """Bytes torch allocates while ``fn`` runs: the sum over profiled ops of their positive self
    memory usage (torch.profiler, profile_memory=True)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return sum(max(e.self_cpu_memory_usage, 0) for e in prof.events())


def torch_worker(rank: int, world_size: int, count: int) -> list:
    import torch
    import torch.distributed as dist

    import ringccl.torch as rt
    from ringccl.algorithms import build_schedule
    from ringccl.layout import layout
    from ringccl.backends.torch import executor

    rows = []
    cases = [("all_reduce", "ring", torch.float32, None, True),
             ("all_reduce", "ring", torch.float32, None, False),
             ("all_reduce", "tree", torch.float32, None, True),
             ("all_reduce", "recursive_doubling", torch.float32, None, True),
             ("all_reduce", "ring", torch.float16, torch.float32, True),
             ("reduce_scatter", "ring", torch.float32, None, True),
             ("all_gather", "ring", torch.float32, None, True),
             ("all_gather", "ring", torch.float32, None, False)]
    small = torch.ones(world_size * 8)
    rt.all_reduce(small)  # gloo connections up before anything is measured
    for collective, algorithm, dtype, acc, restore in cases:
        kw = {"algorithm": algorithm, "restore": restore}
        if acc is not None:
            kw["accumulate_dtype"] = acc
        if collective == "all_reduce":
            t = torch.ones(count, dtype=dtype)
            call = lambda: rt.all_reduce(t, **kw)  # noqa: E731
            caller = t.numel() * t.element_size()
            buffer_count = count
        elif collective == "reduce_scatter":
            inp = torch.ones(count, dtype=dtype)
            out = torch.empty(count // world_size, dtype=dtype)
            call = lambda: rt.reduce_scatter_tensor(out, inp, **kw)  # noqa: E731
            caller = (inp.numel() + out.numel()) * inp.element_size()
            buffer_count = count
        else:
            inp = torch.ones(count // world_size, dtype=dtype)
            out = torch.empty(count, dtype=dtype)
            call = lambda: rt.all_gather_into_tensor(out, inp, **kw)  # noqa: E731
            caller = (inp.numel() + out.numel()) * inp.element_size()
            buffer_count = count
        work_dtype = acc or dtype
        itemsize = torch.empty(0, dtype=work_dtype).element_size()
        # this rank's working buffer for the call (ringccl.frontend maps every call this way)
        plan = layout(build_schedule(collective, algorithm, world_size), rank,
                      buffer_count=buffer_count)
        staging = executor.max_staging_elements(plan.schedule, rank, plan.numel,
                                                plan.bounds) * itemsize
        # the API layer's own working copy: reduce_scatter_tensor copies its input (it must
        # not modify it); accumulate_dtype holds the buffer in the wider dtype
        api_copy = (plan.numel * itemsize if collective == "reduce_scatter" or acc is not None
                    else 0)
        # restore=True on a call that works in the caller's tensor: the chunks it overwrites
        # are saved first (kept between calls, like staging)
        written = {c for step in executor.engine.plan(plan.schedule, rank,
                                                      tuple(int(b) for b in plan.bounds), 0).steps
                   for c in step.writes}
        backup = (sum(int(plan.bounds[c + 1] - plan.bounds[c]) for c in written) * itemsize
                  if restore and not api_copy else 0)
        executor.release_buffers()
        dist.barrier()
        rss_cold = _peak_rss_growth(call)
        dist.barrier()
        rss_warm = _peak_rss_growth(call)
        dist.barrier()
        executor.release_buffers()
        cold = _profiled_bytes(call)
        warm = _profiled_bytes(call)
        chunk = int(np.diff(np.asarray(plan.bounds)).max()) * itemsize
        rows.append({"collective": collective, "algorithm": algorithm,
                     "dtype": str(dtype).replace("torch.", ""),
                     "accumulate_dtype": None if acc is None else str(acc).replace("torch.", ""),
                     "world_size": world_size, "rank": rank, "count": count,
                     "caller_bytes": caller, "largest_chunk_bytes": chunk,
                     "restore": restore, "staging_bytes": staging, "backup_bytes": backup,
                     "api_copy_bytes": api_copy,
                     "expected_extra_bytes": staging + backup + api_copy,
                     "peak_rss_growth_cold": rss_cold, "peak_rss_growth_warm": rss_warm,
                     "allocated_cold": cold,
                     "allocated_warm": warm})
        dist.barrier()
    return rows


def torch_rows(count: int, nproc: int = 2) -> list:
    from ringccl.torch.launch import launch
    per_rank = launch(torch_worker, nproc, count, timeout=600)
    return [row for rows in per_rank for row in rows]


def _mib(b: float) -> str:
    return f"{b / 2 ** 20:,.1f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--skip-torch", action="store_true", help="simulator only")
    p.add_argument("--skip-sim", action="store_true", help="torch only")
    p.add_argument("--count", default="16Mi",
                   help="torch: elements of the working buffer per rank (default 16Mi)")
    args = p.parse_args(argv)
    count = parse_count(args.count)
    result = {"simulator": [], "torch": []}
    if not args.skip_sim:
        for case in SIM_CASES:
            for check in (False, True):
                result["simulator"].append(sim_peak(*case, check=check))
    if not args.skip_torch:
        result["torch"] = torch_rows(count)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table
    console = Console(width=200)
    if result["simulator"]:
        t = Table(title="simulator peak memory (tracemalloc), float32")
        for col in ("collective", "algorithm", "N", "count", "check", "input MiB", "peak MiB",
                    "peak/input", "peak/buffer"):
            t.add_column(col, justify="left" if col in ("collective", "algorithm") else "right")
        for r in result["simulator"]:
            t.add_row(r["collective"], r["algorithm"], str(r["world_size"]), f"{r['count']:,}",
                      str(r["check"]), _mib(r["input_bytes"]), _mib(r["peak_bytes"]),
                      f"{r['peak_over_input']:.2f}", f"{r['peak_over_buffer']:.2f}")
        console.print(t)
    if result["torch"]:
        t = Table(title="ringccl.torch extra memory per call, 2 gloo processes (rank 0 / rank 1)")
        for col in ("call", "dtype", "restore", "caller MiB", "chunk MiB", "staging MiB",
                    "backup MiB", "API copy MiB",
                    "RSS peak +, cold", "RSS peak +, warm", "allocated, cold",
                    "allocated, warm"):
            t.add_column(col, justify="left" if col in ("call", "dtype") else "right")
        keyed = {}
        for r in result["torch"]:
            keyed.setdefault((r["collective"], r["algorithm"], r["dtype"],
                              r["accumulate_dtype"], r["restore"]), []).append(r)
        for (c, a, d, acc, restore), rs in keyed.items():
            rs = sorted(rs, key=lambda r: r["rank"])

            def both(key):
                return " / ".join(_mib(r[key]) for r in rs)

            t.add_row(f"{c} {a}", d + (f"→{acc}" if acc else ""), str(restore),
                      _mib(rs[0]["caller_bytes"]), both("largest_chunk_bytes"),
                      both("staging_bytes"), both("backup_bytes"), both("api_copy_bytes"),
                      both("peak_rss_growth_cold"), both("peak_rss_growth_warm"),
                      both("allocated_cold"),
                      both("allocated_warm"))
        console.print(t)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
