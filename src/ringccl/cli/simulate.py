"""``ringccl simulate``: a schedule on N virtual ranks in this process, checked against numpy.
:func:`sim_report` and :func:`print_sim` also serve ``ringccl demo``."""

from __future__ import annotations

import time

import numpy as np

from .. import units
from ..algorithms import algorithms, build_schedule, get_algorithm
from ..bench.inputs import random_inputs
from ..collectives import get_collective, split_safe
from ..errors import ArgumentError
from ..ops import SUPPORTED_DTYPES, check_dtype, parse_op
from ..sim import reference_tolerance, simulate
from ..sim.memory import check_memory
from .common import (add_accumulate_option, add_collective_args, check_call, count_arg,
                     emit_json, nonnegative_int, positive_int, schedule_params, status, table)

__all__ = ["register", "sim_report", "print_sim"]


def sim_report(collective: str, algorithm: str, world_size: int, count: int, dtype, op,
               seed: int = 0, params: dict | None = None,
               accumulate_dtype: str | None = None) -> dict:
    """Simulate ``collective`` on :func:`ringccl.bench.random_inputs` and report what it
    moved against its closed forms, its check against numpy, and the simulator's time (s)."""
    x = random_inputs(world_size, count, dtype, seed)
    t0 = time.perf_counter()
    result = simulate(collective, x, op=op, algorithm=algorithm,
                      accumulate_dtype=accumulate_dtype, **(params or {}))
    seconds = time.perf_counter() - t0
    spec = get_collective(collective)
    algo = get_algorithm(collective, algorithm)
    buffer_bytes = spec.buffer_count(world_size, count) * dtype.itemsize
    # what travels: with an accumulate dtype the working buffer (and every message) is held in it
    wire_itemsize = np.dtype(accumulate_dtype or dtype).itemsize
    wire_bytes = spec.buffer_count(world_size, count) * wire_itemsize
    sent = result.stats.bytes_sent
    used = result.schedule.params
    return {"collective": collective, "algorithm": algorithm, "world_size": world_size,
            "count": count, "dtype": dtype.name, "op": str(op) if spec.reduces else None,
            "params": used,
            "accumulate_dtype": accumulate_dtype, "wire_bytes": wire_bytes,
            "steps": result.stats.steps, "steps_closed_form": algo.steps_for(world_size, **used),
            "steps_formula": algo.steps_formula, "bytes_formula": algo.bytes_formula,
            "buffer_bytes": buffer_bytes, "bytes_sent_max": int(sent.max()),
            "bytes_sent_min": int(sent.min()),
            "bytes_received_max": int(result.stats.bytes_received.max()),
            "bytes_sent_closed_form": algo.bytes_for(world_size, wire_bytes, **used),
            "bytes_sent": sent.tolist() if world_size <= 16 else None,
            "verified": bool(result.matches_reference), "mismatches": result.mismatches,
            "tolerance": (reference_tolerance(op, dtype, world_size, accumulate_dtype)
                          if spec.reduces else "exact"),  # copies must match bit for bit
            "seconds": seconds}


def print_sim(r: dict) -> None:
    """Print :func:`sim_report`'s dict as a table."""
    k, acc = r["buffer_bytes"], r.get("accumulate_dtype")
    wire = r.get("wire_bytes", k)  # the byte counts and the formula's M: the buffer as sent
    rows = [("steps", f"{r['steps']}  (= {r['steps_formula']})"),
            ("buffer per rank", f"{units.format_size(k)}  "
             f"({k // np.dtype(r['dtype']).itemsize:,} × {r['dtype']})"
             + (f"; {units.format_size(wire)} on the wire in {acc}" if acc else "")),
            ("bytes sent per rank (max)", f"{r['bytes_sent_max']:,}  "
             f"({r['bytes_sent_max'] / wire if wire else 0:.4f} × buffer"
             f"{' on the wire' if acc else ''}; {r['bytes_formula']} = "
             f"{r['bytes_sent_closed_form']:,.0f})"),
            ("bytes sent per rank (min)", f"{r['bytes_sent_min']:,}"),
            ("verified against numpy", f"{'yes' if r['verified'] else 'NO'} "
             f"({r['mismatches']} mismatches; tolerance: {r['tolerance']})"),
            ("simulator time", units.format_duration(r["seconds"]))]
    extra = "".join(f", {k}={v}" for k, v in r["params"].items())
    extra += f", accumulate_dtype={acc}" if acc else ""
    op = f", op={r['op']}" if r["op"] else ""  # copy collectives reduce nothing
    table(f"simulated {r['algorithm']} {r['collective']} on {r['world_size']} ranks"
          f"{op}{extra}", ["", "value"], rows)


def _check_equal_blocks(args, params: dict) -> None:
    """all_to_all whose schedule relays blocks through other ranks' slots (bruck): --count must
    split into N equal blocks; say so in the user's terms before the simulator speaks of splits.
    """
    n, count = args.world_size, args.count
    if args.collective != "all_to_all" or count % n == 0:
        return
    schedule = build_schedule(args.collective, args.algorithm, n, **params)
    if split_safe(schedule):
        return  # direct, pairwise: every block goes straight to its slot, any sizes run
    safe = [a for a in algorithms("all_to_all")
            if split_safe(build_schedule("all_to_all", a, n))]
    lower, upper = count // n * n, (count // n + 1) * n
    raise ArgumentError(
        f"--count {count} is not divisible by --world-size N={n}: {args.algorithm} all_to_all "
        f"relays blocks through other ranks' slots, so it needs N equal blocks; pass a "
        f"multiple of {n} ({', '.join(str(c) for c in (lower, upper) if c > 0)}) or an "
        f"algorithm that sends every block straight to its owner ({', '.join(safe)})")


def _cmd_simulate(args) -> int:
    dtype = check_dtype(args.dtype)
    op = parse_op(args.op)
    params = schedule_params(args)
    get_algorithm(args.collective, args.algorithm)
    check_call(args, args.world_size, dtype, op, params)
    _check_equal_blocks(args, params)
    check_memory(args.collective, args.world_size, args.count,
                 max(dtype.itemsize, np.dtype(args.accumulate_dtype or dtype).itemsize),
                 names=("-c/--count", "-N/--world-size"))
    with status(f"simulating {args.world_size} ranks …"):
        r = sim_report(args.collective, args.algorithm, args.world_size, args.count, dtype, op,
                       args.seed, params, args.accumulate_dtype)
    if args.json:
        emit_json(r)
    else:
        print_sim(r)
    return 0 if r["verified"] else 1


def register(sub) -> None:
    """``ringccl simulate``."""
    p = sub.add_parser("simulate", help="simulate on N virtual ranks and check against numpy")
    add_collective_args(p)
    p.add_argument("--world-size", "-N", type=positive_int, default=8, help="ranks N (default 8)")
    p.add_argument("--count", "-c", type=count_arg, default=units.count("1Mi"),
                   help="elements per rank: 1M = 10^6, 1Mi = 2^20 (default 1Mi)")
    p.add_argument("--dtype", default="float32", choices=SUPPORTED_DTYPES)
    p.add_argument("--op", default="sum", help="sum, prod, min, max, avg, band, bor, bxor")
    add_accumulate_option(p)
    p.add_argument("--seed", type=nonnegative_int, default=0, help="random seed (default 0)")
    p.set_defaults(func=_cmd_simulate)
