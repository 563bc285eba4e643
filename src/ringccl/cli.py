"""The ``ringccl`` command: demo, show, simulate, run, algorithms, train.

Human units in and out: counts ``1M`` = 10^6 and ``1Mi`` = 2^20 elements; sizes ``4MB`` and
``4MiB``; bandwidths printed in GB/s = 1e9 bytes/s as nccl-tests does. Every command takes
``--json``. ringccl errors exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Sequence

import numpy as np

from . import units
from .algorithms import REGISTRY, algorithms, build_schedule, get_algorithm
from .check import verify
from .collectives import COLLECTIVES, get_collective
from .errors import ArgumentError, RingcclError
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


# -- train ----------------------------------------------------------------------------------------

#: |final loss of a mode - final loss of the first mode| allowed, relative to the first: float32
#: training whose runs differ only in summation order (measured differences: see issue 7 notes)
TRAIN_LOSS_RTOL = 1e-3


def _train_progress(queue, runner, modes, epochs, quiet: bool) -> None:
    """Show rank 0's progress events until ``runner`` (a thread running launch) ends."""
    import queue as queue_mod
    try:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    except ImportError:
        progress = None
    tasks = {}
    context = progress if progress is not None else contextlib.nullcontext()
    with context:
        while runner.is_alive() or not queue.empty():
            try:
                event = queue.get(timeout=0.2)
            except (queue_mod.Empty, OSError, EOFError):
                continue
            if event[0] == "step" and progress is not None:
                _, mode, done, total = event
                if mode not in tasks:
                    tasks[mode] = progress.add_task(f"training ({mode})", total=total)
                progress.update(tasks[mode], completed=done)
            elif event[0] == "epoch" and not quiet:
                _, mode, h = event
                print(f"[{mode:>8}] epoch {h['epoch']:>3}/{epochs}  batch loss "
                      f"{h['batch_loss']:.4f}  train loss {h['train_loss']:.4f}  train acc "
                      f"{h['train_acc']:6.2%}  test acc {h['test_acc']:6.2%}  "
                      f"({h['seconds']:.2f} s)", flush=True)


def _cmd_train(args) -> int:
    _need_torch()
    import dataclasses
    import threading

    import torch.multiprocessing as mp

    from .torch.launch import launch
    from .torch.train import MODES, TrainConfig, load_digits, plot_training, train_worker

    modes = list(MODES) if args.mode == "all" else [m.strip() for m in args.mode.split(",")]
    if args.compression and "ddp" not in modes:
        raise ArgumentError(f"compression={args.compression!r} applies to mode 'ddp' only")
    configs = [dataclasses.asdict(TrainConfig(
        mode=m, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, hidden=tuple(args.hidden), seed=args.seed,
        algorithm=args.algorithm, accumulation=args.accumulation,
        sync_micro_batches=args.sync_micro_batches, bucket_cap_mb=args.bucket_cap_mb,
        first_bucket_mb=args.first_bucket_mb, max_norm=args.max_norm,
        compression=args.compression if m == "ddp" else None).validate()) for m in modes]
    data = load_digits(args.seed)  # once here: importing scikit-learn costs seconds per process
    queue = mp.get_context("spawn").Queue()
    outcome: dict = {}

    def run():
        try:
            outcome["results"] = launch(train_worker, args.nproc, configs, data, queue,
                                        timeout=args.timeout)
        except BaseException as exc:  # re-raised in the main thread
            outcome["error"] = exc

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    _train_progress(queue, runner, modes, args.epochs, quiet=args.json)
    runner.join()
    if "error" in outcome:
        raise outcome["error"]
    results = outcome["results"][0]  # rank 0's view; every rank checked replicas_identical
    first = results[0]["final_train_loss"]
    for r in results:
        r["loss_rel_diff"] = abs(r["final_train_loss"] - first) / max(abs(first), 1e-12)
    agree = all(r["loss_rel_diff"] <= TRAIN_LOSS_RTOL for r in results)
    plot = None if args.no_plot else plot_training(results, args.plot)
    report = {"runs": results, "loss_rtol": TRAIN_LOSS_RTOL, "losses_agree": agree,
              "plot": plot}
    if args.json:
        _emit_json(report)
    else:
        _print_train(report, args)
    ok = agree and all(r["replicas_identical"] for r in results)
    return 0 if ok else 1


def _print_train(report: dict, args) -> None:
    rows = []
    for r in report["runs"]:
        expected = r["expected_bytes"]
        model = (expected.get("all_reduce") or expected["reduce_scatter"] + expected["all_gather"])
        per_step = r["bytes_per_step"]
        rows.append([r["mode"], f"{r['final_train_loss']:.5f}", f"{r['loss_rel_diff']:.1e}",
                     f"{r['final_test_acc']:.2%}",
                     "-" if per_step is None else units.format_size(per_step),
                     units.format_size(model), units.format_size(r["optimizer_state_bytes"]),
                     f"{r['step_seconds'] * 1e3:.1f}",
                     "yes" if r["replicas_identical"] else "NO"])
    runs = report["runs"]
    _table(f"digits MLP ({runs[0]['parameters']:,} parameters) on {runs[0]['world_size']} local "
           f"gloo processes, {runs[0]['steps']} steps, accumulation {args.accumulation}",
           ["mode", "final loss", "rel. diff", "test acc", "sent/step", "model/round",
            "opt. state", "ms/step", "replicas equal"], rows)
    print(f"bytes per rank: sent/step measured from the schedules (torch mode: not measured); "
          f"model/round = 2(N-1)/N x gradient bytes (zero: reduce-scatter + all-gather).")
    if len(runs) > 1:
        print(f"final losses {'agree' if report['losses_agree'] else 'DIFFER'} within relative "
              f"tolerance {report['loss_rtol']:g}")
    if report["plot"]:
        print(f"wrote {report['plot']} (loss curves, bucket timeline)")


# -- argument parsing -----------------------------------------------------------------------------

def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def _widths(text: str) -> tuple:
    try:
        widths = tuple(int(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers") from None
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: widths must be >= 1")
    return widths


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

    p = sub.add_parser("algorithms", help="list collectives × algorithms with their costs")
    p.add_argument("collective", nargs="?", choices=collectives)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_algorithms)

    p = sub.add_parser("train", help="data-parallel training of an MLP on the digits data set")
    p.add_argument("--nproc", "-n", type=_positive_int, default=4, help="local processes")
    p.add_argument("--mode", default="ddp",
                   help="ddp (DDP + ringccl hook), bucketer, zero, torch (DDP + gloo), a comma "
                   "list, or all; several modes run one after the other in one launch")
    p.add_argument("--epochs", type=_positive_int, default=20)
    p.add_argument("--batch-size", type=_positive_int, default=32, help="per rank and step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=1e-2)
    p.add_argument("--hidden", type=_widths, default=(256, 256),
                   help="hidden widths, e.g. 256,256")
    p.add_argument("--accumulation", type=_positive_int, default=1,
                   help="micro-batches per optimizer step (no_sync on all but the last)")
    p.add_argument("--sync-micro-batches", action="store_true",
                   help="communicate after every micro-batch (no no_sync), to compare bytes")
    p.add_argument("--algorithm", "-a", default="ring")
    p.add_argument("--bucket-cap-mb", type=float, default=0.125, help="MiB (default 0.125)")
    p.add_argument("--first-bucket-mb", type=float, default=0.03, help="MiB (bucketer)")
    p.add_argument("--max-norm", type=float, default=None, help="clip by the global norm")
    p.add_argument("--compression", choices=["fp16", "bf16"], default=None,
                   help="mode ddp: all-reduce buckets in fp16/bf16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default="ringccl_train.png", help="output image (default %(default)s)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before giving up")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_train)
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
