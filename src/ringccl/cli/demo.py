"""``ringccl demo``: the guided tour, the N=4 ring all-reduce step table, a simulation checked against
numpy, and the same schedule on real processes next to gloo's own."""

from __future__ import annotations

import importlib.util

import numpy as np

from .. import units
from ..algorithms import build_schedule
from ..check import verify
from ..ops import parse_op
from ..views.show import step_rows, step_table
from ..errors import RingcclError
from ..sim.memory import check_memory
from .common import (add_collective_args, check_nproc, count_arg, emit_json, need_torch,
                     positive_int)
from .run import measure_run, print_run, run_buffer_bytes
from .simulate import print_sim, sim_report

__all__ = ["register"]

#: virtual ranks of the simulation part
_SIM_RANKS = 8


def _cmd_demo(args) -> int:
    # every part's size before the first is printed: the simulation's memory, the processes'
    check_memory("all_reduce", _SIM_RANKS, args.sim_count, 4, names=("--sim-count", None))
    if not args.no_run and importlib.util.find_spec("torch") is not None:
        check_nproc(args, run_buffer_bytes("all_reduce", args.nproc, args.run_count, "float32"),
                    "--run-count")
    out: dict = {}
    schedule = verify(build_schedule("all_reduce", "ring", 4))
    if not args.json:
        print("1) Ring all-reduce on N=4 ranks, one row per step: at reduce-scatter"
              " step s rank r sends chunk (r-s) mod N\n   to rank r+1, which adds it in; then the"
              " complete chunks travel once more around the ring.\n")
        print(step_table(schedule))
        print("\n   verified symbolically: every rank ends with every rank's contribution to every"
              " chunk exactly once.\n")
    out["table"] = step_rows(schedule)
    sim = sim_report("all_reduce", "ring", _SIM_RANKS, args.sim_count, np.dtype("float32"),
                     parse_op("sum"))
    out["simulate"] = sim
    if not args.json:
        print(f"2) Ring all-reduce simulated on 8 virtual ranks, {sim['count']:,} float32 elements "
              "each (not divisible by 8), checked against numpy:\n")
        print_sim(sim)
        print()
    if args.no_run:
        if args.json:
            emit_json(out)
        return 0 if sim["verified"] else 1
    try:
        need_torch()
    except RingcclError:  # parts 1 and 2 need numpy only: skip the third, say why
        note = ("3) skipped: the part on real processes needs torch, which is not installed: "
                "pip install 'ringccl[torch]'")
        if args.json:
            out["run"] = None
            out["skipped"] = note
            emit_json(out)
        else:
            print(note)
        return 0 if sim["verified"] else 1
    run = measure_run("all_reduce", "ring", args.nproc, args.run_count, "float32", "sum", 5, 2,
                      300.0, oversubscribe=args.oversubscribe)
    out["run"] = run
    if args.json:
        emit_json(out)
    else:
        print(f"3) The same schedule on {args.nproc} real processes (ringccl over "
              f"{run.get('transport') or 'its transport'}, in a torch.distributed gloo group), "
              "checked against the exact result and timed against gloo's own all_reduce:\n")
        print_run(run)
        print("\n   Next: `ringccl show all_reduce --world-size 8`, `ringccl simulate all_reduce "
              "--world-size 256 --count 1Mi`,\n         `ringccl run all_reduce --nproc 4 "
              "--count 16Mi`, `ringccl algorithms`.")
    return 0 if sim["verified"] and run["wrong"] == 0 else 1


def register(sub) -> None:
    """``ringccl demo``."""
    p = sub.add_parser("demo", help="guided tour: the ring all-reduce's N=4 step table, a simulation, real "
                       "processes")
    add_collective_args(p, collective=False)
    p.add_argument("--nproc", type=positive_int, default=4, help="local processes (default 4)")
    p.add_argument("--sim-count", type=count_arg, default=100_003,
                   help="elements per rank in the simulation (default 100003)")
    p.add_argument("--run-count", type=count_arg, default=units.count("4Mi"),
                   help="elements per rank on real processes (default 4Mi)")
    p.add_argument("--no-run", action="store_true", help="skip the real-process part")
    p.add_argument("--oversubscribe", action="store_true",
                   help="start --nproc processes even beyond this machine's cores or memory")
    p.set_defaults(func=_cmd_demo)
