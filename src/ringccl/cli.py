"""The ``ringccl`` command: demo, show, simulate, run, bench, fit, algorithms.

Human units in and out: counts ``1M`` = 10^6 and ``1Mi`` = 2^20 elements; sizes ``4MB`` and
``4MiB``; bandwidths printed in GB/s = 1e9 bytes/s as nccl-tests does. Every command takes
``--json``. ringccl errors exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import numpy as np

from . import units
from .algorithms import REGISTRY, algorithms, build_schedule, get_algorithm
from .check import verify
from .collectives import COLLECTIVES, get_collective
from .errors import RingcclError
from .ops import SUPPORTED_DTYPES, check_dtype, parse_op
from .show import step_rows
from .sim import reference_tolerance, simulate

__all__ = ["main"]


# -- output helpers -------------------------------------------------------------------------------

def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a table with rich when it is installed, else as aligned plain text."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
        print(title)
        for r in cells:
            print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        return
    table = Table(title=title, title_justify="left")
    for i, h in enumerate(headers):
        table.add_column(str(h), justify="left" if i == 0 or len(headers) == 2 else "right",
                         no_wrap=len(headers) > 2)
    for r in rows:
        table.add_row(*(str(c) for c in r))
    console = Console()
    if not console.is_terminal:  # piped or captured: never squeeze numbers into 80 columns
        console = Console(width=max(console.width, 160))
    console.print(table)


def _status(message: str):
    """A spinner while something slow runs (rich), or a plain line."""
    try:
        from rich.console import Console
        return Console(stderr=True).status(message)
    except ImportError:
        print(message, file=sys.stderr)
        import contextlib
        return contextlib.nullcontext()


def _emit_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=lambda o: o.tolist() if hasattr(o, "tolist")
                     else str(o)))


# -- commands -------------------------------------------------------------------------------------

def _cmd_show(args) -> int:
    schedule = verify(build_schedule(args.collective, args.algorithm, args.world_size))
    if args.json:
        _emit_json({"collective": schedule.collective, "algorithm": schedule.algorithm,
                    "world_size": schedule.world_size, "num_chunks": schedule.num_chunks,
                    "num_steps": schedule.num_steps, "rows": step_rows(schedule, args.max_steps)})
    else:
        print(schedule.table(max_steps=args.max_steps))
    return 0


def _random_inputs(world_size: int, count: int, dtype: np.dtype, seed: int) -> np.ndarray:
    """Random integers in [-8, 8) (bools for bool): exact in every dtype's sums at our sizes."""
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=(world_size, count), dtype=np.int8).astype(bool)
    low = 0 if dtype.kind == "u" else -8
    return rng.integers(low, 8, size=(world_size, count), dtype=np.int8).astype(dtype)


def _sim_report(collective: str, algorithm: str, world_size: int, count: int, dtype, op,
                seed: int = 0) -> dict:
    x = _random_inputs(world_size, count, dtype, seed)
    t0 = time.perf_counter()
    result = simulate(collective, x, op=op, algorithm=algorithm)
    seconds = time.perf_counter() - t0
    spec = get_collective(collective)
    algo = get_algorithm(collective, algorithm)
    buffer_bytes = spec.buffer_count(world_size, count) * dtype.itemsize
    sent = result.stats.bytes_sent
    return {"collective": collective, "algorithm": algorithm, "world_size": world_size,
            "count": count, "dtype": dtype.name, "op": str(op), "steps": result.stats.steps,
            "steps_formula": algo.steps_formula, "bytes_formula": algo.bytes_formula,
            "buffer_bytes": buffer_bytes, "bytes_sent_max": int(sent.max()),
            "bytes_sent_min": int(sent.min()),
            "bytes_received_max": int(result.stats.bytes_received.max()),
            "bytes_sent_closed_form": algo.bytes_sent(world_size, buffer_bytes),
            "bytes_sent": sent.tolist() if world_size <= 16 else None,
            "verified": bool(result.matches_reference), "mismatches": result.mismatches,
            "tolerance": reference_tolerance(op, dtype, world_size), "seconds": seconds}


def _print_sim(r: dict) -> None:
    k = r["buffer_bytes"]
    rows = [("steps", f"{r['steps']}  (= {r['steps_formula']})"),
            ("buffer per rank", f"{units.format_size(k)}  ({r['count']:,} × {r['dtype']})"),
            ("bytes sent per rank (max)", f"{r['bytes_sent_max']:,}  "
             f"({r['bytes_sent_max'] / k if k else 0:.4f} × buffer; {r['bytes_formula']} = "
             f"{r['bytes_sent_closed_form']:,.0f})"),
            ("bytes sent per rank (min)", f"{r['bytes_sent_min']:,}"),
            ("verified against numpy", f"{'yes' if r['verified'] else 'NO'} "
             f"({r['mismatches']} mismatches; tolerance: {r['tolerance']})"),
            ("simulator time", units.format_duration(r["seconds"]))]
    _table(f"simulated {r['algorithm']} {r['collective']} on {r['world_size']} ranks, "
           f"op={r['op']}", ["", "value"], rows)


def _cmd_simulate(args) -> int:
    dtype = check_dtype(args.dtype)
    op = parse_op(args.op)
    get_algorithm(args.collective, args.algorithm)
    with _status(f"simulating {args.world_size} ranks …"):
        r = _sim_report(args.collective, args.algorithm, args.world_size, args.count, dtype, op,
                        args.seed)
    if args.json:
        _emit_json(r)
    else:
        _print_sim(r)
    return 0 if r["verified"] else 1


def _run_rows(collective, algorithm, nproc, count, dtype, op, iters, warmup, timeout) -> dict:
    from .torch.launch import launch
    from .torch.runner import measure
    with _status(f"running {algorithm} {collective} on {nproc} local gloo processes …"):
        rows = launch(measure, nproc, collective, algorithm, count, dtype, op, iters, warmup,
                      timeout=timeout)
    return rows[0]


def _print_run(r: dict) -> None:
    headers = ["impl", "size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
               "min (us)", "p90 (us)", "#wrong"]
    rows = []
    for name in ("ringccl", "builtin"):
        m = r[name]
        label = f"ringccl {r['algorithm']}" if name == "ringccl" else "gloo (builtin)"
        rows.append([label, units.format_size(r["size_bytes"]), r["count"], r["dtype"],
                     f"{m['time_s'] * 1e6:.1f}", f"{m['algbw'] / 1e9:.3f}",
                     f"{m['busbw'] / 1e9:.3f}", f"{m['min_s'] * 1e6:.1f}",
                     f"{m['p90_s'] * 1e6:.1f}", r["wrong"] if name == "ringccl" else "-"])
    _table(f"{r['collective']} on {r['world_size']} local gloo processes, op={r['op']}, "
           f"median of {r['iters']} iterations (max over ranks)", headers, rows)
    print(f"busbw ratio ringccl/gloo: {r['busbw_ratio']:.2f}   "
          f"result {'matches' if r['wrong'] == 0 else 'DIFFERS FROM'} gloo's own "
          f"{r['collective']} ({r['wrong']} elements differ)")


def _cmd_run(args) -> int:
    _need_torch()
    dtype = check_dtype(args.dtype)
    op = parse_op(args.op)
    get_algorithm(args.collective, args.algorithm)
    r = _run_rows(args.collective, args.algorithm, args.nproc, args.count, dtype.name, op.value,
                  args.iters, args.warmup, args.timeout)
    if args.json:
        _emit_json(r)
    else:
        _print_run(r)
    return 0 if r["wrong"] == 0 else 1


def _cmd_algorithms(args) -> int:
    rows = [{"collective": a.collective, "algorithm": a.name, "steps": a.steps_formula,
             "bytes_sent_per_rank": a.bytes_formula, "reference": a.reference}
            for a in REGISTRY.values()
            if args.collective is None or a.collective == args.collective]
    if args.json:
        _emit_json(rows)
    else:
        _table("algorithms (N = world_size, M = buffer bytes)",
               ["collective", "algorithm", "steps", "bytes sent per rank", "reference"],
               [list(r.values()) for r in rows])
    return 0


def _need_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise RingcclError("this command needs torch: pip install 'ringccl[torch]'") from None


def _cmd_demo(args) -> int:
    out: dict = {}
    schedule = verify(build_schedule("all_reduce", "ring", 4))
    if not args.json:
        print("1) The seed's ring all-reduce on N=4 ranks (seed 000, section 2): at reduce-scatter"
              " step s rank r sends chunk (r-s) mod N\n   to rank r+1, which adds it in; then the"
              " complete chunks travel once more around the ring.\n")
        print(schedule.table())
        print("\n   verified symbolically: every rank ends with every rank's contribution to every"
              " chunk exactly once.\n")
    out["table"] = step_rows(schedule)
    sim = _sim_report("all_reduce", "ring", 8, args.sim_count, np.dtype("float32"),
                      parse_op("sum"))
    out["simulate"] = sim
    if not args.json:
        print(f"2) Ring all-reduce simulated on 8 virtual ranks, {sim['count']:,} float32 elements "
              "each (not divisible by 8), checked against numpy:\n")
        _print_sim(sim)
        print()
    if args.no_run:
        if args.json:
            _emit_json(out)
        return 0 if sim["verified"] else 1
    _need_torch()
    run = _run_rows("all_reduce", "ring", args.nproc, args.run_count, "float32", "sum", 5, 2,
                    300.0)
    out["run"] = run
    if args.json:
        _emit_json(out)
    else:
        print(f"3) The same schedule on {args.nproc} real processes (gloo over 127.0.0.1), "
              "checked against gloo's own all_reduce:\n")
        _print_run(run)
        print("\n   Next: `ringccl show all_reduce --world-size 8`, `ringccl simulate all_reduce "
              "--world-size 256 --count 1Mi`,\n         `ringccl run all_reduce --nproc 4 "
              "--count 16Mi`, `ringccl algorithms`.")
    return 0 if sim["verified"] and run["wrong"] == 0 else 1


def _progress(total: int, description: str):
    """(context manager, advance(row) callback): a rich progress bar on stderr, or nothing."""
    import contextlib
    try:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
    except ImportError:
        return contextlib.nullcontext(), lambda row: None
    from rich.console import Console
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[last]}"),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task(description, total=total, last="")

    def advance(row: dict) -> None:
        bar.update(task, advance=1, last=f"{row['algorithm']} {units.format_size(row['size'])}")
    return bar, advance


def _bench_rows(spec, args) -> tuple[list[dict], int, bool]:
    """Run the sweep the way the command line asks: (rows, world_size, print here?)."""
    from .bench import row_count
    total = row_count(spec)
    if args.nproc:
        bar, advance = _progress(total, f"{spec.collective} on {args.nproc} {spec.backend} "
                                 "processes")
        with bar:
            if spec.backend == "mpi":
                from .mpi.launch import launch_bench
                rows = launch_bench(spec, args.nproc, advance, args.timeout)
            else:
                _need_torch()
                from .torch.runner import launch_sweep
                rows = launch_sweep(spec, args.nproc, advance, args.timeout)
        return rows, args.nproc, True
    import os
    if spec.backend == "mpi":
        from .mpi.launch import under_mpirun
        if under_mpirun():
            from mpi4py import MPI

            from .mpi.runner import sweep
            rank = MPI.COMM_WORLD.Get_rank()
            bar, advance = _progress(total, spec.collective) if rank == 0 else (None, None)
            import contextlib
            with bar or contextlib.nullcontext():
                rows = sweep(spec, emit=advance)
            return rows, MPI.COMM_WORLD.Get_size(), rank == 0
    elif "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:  # torchrun (env://)
        _need_torch()
        import torch.distributed as dist

        from .torch.runner import sweep
        dist.init_process_group(spec.backend)
        try:
            rank, world_size = dist.get_rank(), dist.get_world_size()
            bar, advance = _progress(total, spec.collective)
            import contextlib
            queue = _Callback(advance) if rank == 0 else None
            with bar if rank == 0 else contextlib.nullcontext():
                rows = sweep(rank, world_size, spec.to_dict(), queue)
        finally:
            dist.destroy_process_group()
        return rows, world_size, rank == 0
    raise RingcclError(f"ringccl bench needs processes: give --nproc N, or start it under "
                       f"{'mpirun' if spec.backend == 'mpi' else 'torchrun'}")


class _Callback:
    """A queue-like object whose ``put`` calls a function (sweep's progress in-process)."""

    def __init__(self, fn):
        self.put = fn


def _print_bench(rows: list[dict], spec, world_size: int) -> None:
    from .bench import BUILTIN, row_label
    builtin = {(r["size"], r["placement"]): r["busbw"] for r in rows
               if r["algorithm"] == BUILTIN}
    headers = ["size", "count", "type", "redop", "root", "algorithm", "placement", "time (us)",
               "algbw", "busbw", "#wrong", "min (us)", "p90 (us)", "vs builtin"]
    out = []
    for r in rows:
        if r["kind"] != "collective":
            continue
        ref = builtin.get((r["size"], r["placement"]))
        ratio = (f"{r['busbw'] / ref:.2f}x" if ref and r["algorithm"] != BUILTIN else "")
        out.append([units.format_size(r["size"]), r["count"], r["type"], r["redop"], r["root"],
                    row_label(r), r["placement"], f"{r['time_s'] * 1e6:.1f}",
                    f"{r['algbw'] / 1e9:.3f}", f"{r['busbw'] / 1e9:.3f}",
                    "-" if r["wrong"] is None else r["wrong"], f"{r['min_s'] * 1e6:.1f}",
                    f"{r['p90_s'] * 1e6:.1f}", ratio])
    _table(f"{spec.collective} on {world_size} {spec.backend} processes: median of {spec.iters} "
           f"iterations (max over ranks) after {spec.warmup} warm-up; algbw, busbw in GB/s "
           "(1e9 B/s); vs builtin = busbw / builtin's busbw (same size and placement)",
           headers, out)


def _segment_list(text: str | None) -> tuple:
    if text is None:
        return (None,)
    out = []
    for part in text.split(","):
        part = part.strip()
        out.append(None if part == "auto" else units.size(part))
    return tuple(out)


def _cmd_bench(args) -> int:
    from .bench import PLACEMENTS, BenchSpec, Sweep, format_csv, format_nccl_tests, \
        parse_algorithms, plot_busbw
    dtype = _NCCL_DTYPES.get(args.dtype, args.dtype)
    spec = BenchSpec(
        args.collective, parse_algorithms(args.collective, args.algorithm), args.minbytes,
        args.maxbytes, args.stepfactor, args.iters, args.warmup_iters, bool(args.check), dtype,
        args.op, args.root, _segment_list(args.segment_bytes),
        PLACEMENTS if args.placement == "both" else (args.placement,), args.backend,
        not args.no_calibrate).validate(args.nproc)
    rows, world_size, printer = _bench_rows(spec, args)
    if not printer:
        return 0
    wrong = sum(r["wrong"] or 0 for r in rows)
    if args.json:
        _emit_json(Sweep(spec, world_size, rows).to_json())
    elif args.csv:
        print(format_csv(rows), end="")
    elif args.format == "nccl-tests":
        print(format_nccl_tests(rows, spec, world_size), end="")
    else:
        _print_bench(rows, spec, world_size)
    if args.plot:
        plot_busbw(rows, args.plot, f"{spec.collective}, {world_size} {spec.backend} processes")
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0 if wrong == 0 else 1


def _fmt_param(name: str, value: float) -> str:
    """α and δ in µs, β and γ in ns per byte."""
    if not np.isfinite(value):
        return "-"
    return f"{value * 1e6:.3f} us" if name in ("alpha", "delta") else f"{value * 1e9:.4f} ns/B"


def _print_fit(fit, held, args) -> None:
    from .fit import PARAMS
    names = {"alpha": "α (per step)", "beta": "β (per byte sent)",
             "gamma": "γ (per byte reduced)", "delta": "δ (per local-reduce call)"}
    rows = []
    for i, name in enumerate(PARAMS):
        if name == "delta" and name not in fit.free:
            continue
        lo, hi = fit.ci95[i]
        free = name in fit.free
        rows.append([names[name], _fmt_param(name, fit.params[i]),
                     _fmt_param(name, fit.stderr[i]) if free else "held at 0",
                     f"[{_fmt_param(name, lo)}, {_fmt_param(name, hi)}]"
                     if free and np.isfinite(lo) else "-",
                     f"{1e-9 / fit.params[i]:.3f} GB/s" if name in ("beta", "gamma")
                     and fit.params[i] > 0 else ""])
    _table(f"α-β-γ fit, backend {fit.backend or '?'}: {len(fit.rows)} rows, least squares on "
           f"relative error; R² = {fit.r2_log:.4f} (log time), {fit.r2:.4f} (time)",
           ["parameter", "estimate", "std. error", "95% confidence interval", "as a rate"], rows)
    for note in fit.notes:
        print(f"  note: {note}")
    from .fit import LOCAL_REDUCE, sweep_key, sweep_label
    res = []
    for r, p in zip(fit.rows, fit.predicted):
        label = LOCAL_REDUCE if r.get("kind") == LOCAL_REDUCE else sweep_label(sweep_key(r))
        res.append([label, units.format_size(r["size"]), f"{r['time_s'] * 1e6:.1f}",
                    f"{p * 1e6:.1f}", f"{(p / r['time_s'] - 1) * 100:+.1f}%"])
    if args.residuals:
        _table("residuals (predicted / measured - 1)",
               ["rows", "size", "measured (us)", "predicted (us)", "error"], res)
    for label, points in held.sweeps.items():
        _table(f"held out: {label}, predicted from {held.train}",
               ["size", "measured (us)", "predicted (us)", "error"],
               [[units.format_size(s), f"{m * 1e6:.1f}", f"{p * 1e6:.1f}", f"{e * 100:+.1f}%"]
                for s, m, p, e in points])
    med = held.median_error(args.min_size)
    print(f"held-out median |error| for sizes >= {units.format_size(args.min_size)}: "
          f"{med * 100:.1f}%  (fit on {held.train}: α = {_fmt_param('alpha', held.fit.alpha)}, "
          f"β = {_fmt_param('beta', held.fit.beta)}, γ = {_fmt_param('gamma', held.fit.gamma)})"
          "\n")


def _predictions(fit, args, data_rows) -> list[dict]:
    from .algorithms import REGISTRY
    from .collectives import get_collective
    collectives = (args.collective.split(",") if args.collective
                   else list(dict.fromkeys(r["collective"] for r in data_rows)))
    out = []
    for collective in collectives:
        spec = get_collective(collective)
        names = ([a.strip() for a in args.algorithm.split(",")] if args.algorithm
                 else [a for (c, a), algo in REGISTRY.items()
                       if c == collective and algo.time is not None])
        for n in args.world_size:
            for size in args.sizes:
                for name in names:
                    t = fit.time(collective, name, n, size)
                    out.append({"backend": fit.backend, "collective": collective,
                                "algorithm": name, "world_size": n, "size": size, "time_s": t,
                                "busbw": size / t * spec.bus_factor(n) if t > 0 else None})
    return out


def _cmd_fit(args) -> int:
    from .fit import by_backend, held_out, load_rows
    rows = load_rows(args.files)
    placement = None if args.placement == "any" else args.placement
    report = []
    for backend, group in by_backend(rows).items():
        held = held_out(group, args.train, backend, placement)
        from .fit import fit_rows
        fit = fit_rows(group, backend, placement)
        preds = _predictions(fit, args, group) if args.predict else []
        if args.json:
            report.append({"fit": fit.to_json(), "held_out": {
                "train": held.train, "method": held.method, "fit": held.fit.to_json()["params"],
                "median_abs_error": held.median_error(args.min_size),
                "min_size": args.min_size,
                "sweeps": {k: [dict(zip(("size", "measured_s", "predicted_s",
                                         "relative_error"), p)) for p in v]
                           for k, v in held.sweeps.items()}}, "predictions": preds})
            continue
        _print_fit(fit, held, args)
        if preds:
            _table(f"predicted with the fit of backend {backend} (closed forms, flat network)",
                   ["collective", "algorithm", "world_size", "size", "time", "busbw (GB/s)"],
                   [[p["collective"], p["algorithm"], p["world_size"],
                     units.format_size(p["size"]), units.format_duration(p["time_s"]),
                     f"{p['busbw'] / 1e9:.3f}" if p["busbw"] else "-"] for p in preds])
    if args.json:
        _emit_json(report)
    return 0


#: nccl-tests' -d names, accepted next to numpy's
_NCCL_DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32"}


# -- argument parsing -----------------------------------------------------------------------------

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def _size(text: str) -> int:
    try:
        return units.size(text)
    except RingcclError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    try:
        return units.count(text)
    except RingcclError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringccl", description="Collective-communication algorithms as data: see, check, "
        "simulate and run them.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    collectives = list(COLLECTIVES)

    def common(p, collective=True):
        if collective:
            p.add_argument("collective", choices=collectives, help="collective to use")
            p.add_argument("--algorithm", "-a", default="ring",
                           help="algorithm name (see `ringccl algorithms`; default ring)")
        p.add_argument("--json", action="store_true", help="print JSON instead of tables")

    p = sub.add_parser("demo", help="guided tour: the seed's table, a simulation, real processes")
    common(p, collective=False)
    p.add_argument("--nproc", type=_positive_int, default=4, help="local processes (default 4)")
    p.add_argument("--sim-count", type=_count, default=100_003,
                   help="elements per rank in the simulation (default 100003)")
    p.add_argument("--run-count", type=_count, default=units.count("4Mi"),
                   help="elements per rank on real processes (default 4Mi)")
    p.add_argument("--no-run", action="store_true", help="skip the real-process part")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("show", help="print a schedule's step table")
    common(p)
    p.add_argument("--world-size", "-N", type=_positive_int, default=4)
    p.add_argument("--max-steps", type=_positive_int, default=200)
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("simulate", help="simulate on N virtual ranks and check against numpy")
    common(p)
    p.add_argument("--world-size", "-N", type=_positive_int, default=8)
    p.add_argument("--count", "-c", type=_count, default=units.count("1Mi"),
                   help="elements per rank: 1M = 10^6, 1Mi = 2^20 (default 1Mi)")
    p.add_argument("--dtype", default="float32", choices=SUPPORTED_DTYPES)
    p.add_argument("--op", default="sum", help="sum, prod, min, max, avg, band, bor, bxor")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("run", help="run on local gloo processes and compare with gloo's own")
    common(p)
    p.add_argument("--nproc", "-n", type=_positive_int, default=4)
    p.add_argument("--count", "-c", type=_count, default=units.count("16Mi"),
                   help="elements per rank (reduce_scatter: whole input), default 16Mi")
    p.add_argument("--dtype", default="float32",
                   choices=[d for d in SUPPORTED_DTYPES])
    p.add_argument("--op", default="sum")
    p.add_argument("--iters", type=_positive_int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds before giving up")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "bench", help="nccl-tests-style sweep: every algorithm against the backend's own",
        description="Measure ringccl's algorithms and the backend's own collective (builtin) "
        "over a range of sizes, nccl-tests style: per size and algorithm time, algbw, busbw "
        "(GB/s = 1e9 B/s), #wrong and the spread over iterations. Starts --nproc local "
        "processes itself, or runs under torchrun / mpirun.")
    p.add_argument("collective", choices=collectives)
    p.add_argument("-b", "--minbytes", type=_size, default=units.size("4KiB"),
                   help="smallest size, e.g. 4KiB (default 4KiB)")
    p.add_argument("-e", "--maxbytes", type=_size, default=units.size("64MiB"),
                   help="largest size (default 64MiB)")
    p.add_argument("-f", "--stepfactor", type=int, default=4,
                   help="multiply the size by this between rows (default 4)")
    p.add_argument("-n", "--iters", type=_positive_int, default=20,
                   help="timed iterations per row (default 20; the median is reported)")
    p.add_argument("-w", "--warmup-iters", type=int, default=5,
                   help="untimed iterations first (default 5)")
    p.add_argument("-c", "--check", type=int, choices=[0, 1], default=1,
                   help="count wrong elements against the exact result (default 1)")
    p.add_argument("-d", "--dtype", default="float32",
                   choices=list(SUPPORTED_DTYPES) + list(_NCCL_DTYPES),
                   help="element type (numpy or nccl-tests names; default float32)")
    p.add_argument("-o", "--op", default="sum", help="sum, prod, min, max, avg, band, bor, bxor")
    p.add_argument("-r", "--root", type=int, default=0, help="root rank of rooted collectives")
    p.add_argument("--algorithm", "-a", default="all",
                   help="comma-separated algorithms and/or builtin (the backend's own); "
                   "'all' (default) = every registered algorithm and builtin")
    p.add_argument("--backend", choices=["gloo", "nccl", "mpi"], default="gloo")
    p.add_argument("--nproc", "-p", type=_positive_int,
                   help="start this many local processes (else run under torchrun/mpirun)")
    p.add_argument("--segment-bytes", metavar="LIST",
                   help="pipelining segments for ringccl algorithms, one sweep per entry: "
                   "auto (the executor's threshold), 0 (never split) or a size, e.g. "
                   "'0,1MiB' (default auto)")
    p.add_argument("--placement", choices=["both", "out-of-place", "in-place"], default="both")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip the local-reduce rows (the gamma calibration for ringccl fit)")
    p.add_argument("--format", choices=["table", "nccl-tests"], default="table",
                   help="table (default) or nccl-tests' text layout")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON (input of ringccl fit)")
    out.add_argument("--csv", action="store_true", help="print CSV")
    p.add_argument("--plot", metavar="PNG", help="also write busbw vs size to this PNG")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before giving up")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser(
        "fit", help="fit alpha, beta, gamma to `ringccl bench --json` rows and predict",
        description="Least-squares fit (relative errors, parameters >= 0) of the α-β-γ model "
        "through every algorithm's closed form, per backend, with R², confidence intervals, "
        "residuals and a held-out check: fit on one sweep, predict the others.")
    p.add_argument("files", nargs="+", help="JSON files written by `ringccl bench --json`")
    p.add_argument("--train", help="sweep to fit the held-out check on: collective:algorithm"
                   "[:world_size] (default: the sweep with the most rows)")
    p.add_argument("--placement", choices=["in-place", "out-of-place", "any"],
                   default="in-place", help="rows to use (default in-place)")
    p.add_argument("--min-size", type=_size, default=units.size("64KiB"),
                   help="held-out summary over sizes >= this (default 64KiB)")
    p.add_argument("--residuals", action="store_true", help="print every row's residual")
    p.add_argument("--predict", action="store_true",
                   help="print predicted times for --sizes × --world-size × algorithms")
    p.add_argument("--sizes", type=lambda t: [units.size(x) for x in t.split(",")],
                   default=[units.size(x) for x in ("64KiB", "1MiB", "16MiB", "256MiB", "1GiB")],
                   help="sizes to predict (default 64KiB,1MiB,16MiB,256MiB,1GiB)")
    p.add_argument("--world-size", type=lambda t: [int(x) for x in t.split(",")],
                   default=[2, 8, 64, 1024], help="world sizes to predict (default 2,8,64,1024)")
    p.add_argument("--collective", help="collectives to predict (default: those measured)")
    p.add_argument("--algorithm", "-a", help="algorithms to predict (default: all with a "
                   "closed form)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser("algorithms", help="list collectives × algorithms with their costs")
    p.add_argument("collective", nargs="?", choices=collectives)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_algorithms)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ringccl`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RingcclError as exc:
        print(f"ringccl: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
