"""The ``ringccl`` command: demo, show, compare, simulate, run, bench, fit, algorithms, model,
tune, train.

Human units in and out: counts ``1M`` = 10^6 and ``1Mi`` = 2^20 elements; sizes ``4MB`` and
``4MiB``; bandwidths printed in GB/s = 1e9 bytes/s as nccl-tests does. Every command takes
``--json``. ringccl errors exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import math
import os
import sys
import time
from typing import Sequence

import numpy as np

from .. import units
from ..algorithms import REGISTRY, algorithms, build_schedule, get_algorithm
from ..check import verify
from ..collectives import COLLECTIVES, check_root, get_collective
from ..errors import ArgumentError, RingcclError
from ..ops import SUPPORTED_DTYPES, check_accumulate_dtype, check_dtype, check_op_dtype, parse_op
from ..views.show import step_rows
from ..sim import default_algorithm, reference_tolerance, resolve_root, simulate

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
    if not console.is_terminal or _unknown_width():
        # piped, captured, or a pty without a size (mpirun's): never squeeze numbers into 80
        # wide tables (ringccl model) get the width their rows need
        widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
        console = Console(width=max(console.width, 160, sum(widths) + 3 * len(widths) + 1),
                          force_terminal=False)  # and no colour codes in a log
    console.print(table)


def _unknown_width() -> bool:
    """True on a terminal that reports 0 columns (mpirun gives its processes such a pty)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns == 0
    except (OSError, ValueError, AttributeError):  # not a terminal, or no fileno (captured)
        return False


def _status(message: str):
    """A spinner while something slow runs (rich), or a plain line."""
    try:
        from rich.console import Console
        return Console(stderr=True).status(message)
    except ImportError:
        print(message, file=sys.stderr)
        import contextlib
        return contextlib.nullcontext()


def _strict(obj):
    """``obj`` with NaN and ±inf as None (null): strict JSON parsers (jq, JavaScript) refuse
    them, and world_size 1 gives algbw = inf, busbw = nan."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return _strict(obj.tolist())
    return obj


def _emit_json(obj) -> None:
    print(json.dumps(_strict(obj), indent=2, allow_nan=False, default=str))


# -- commands -------------------------------------------------------------------------------------

def _params(args) -> dict:
    """Builder parameters from --param/--segments/--root/--src/--dst (root resolved as
    :func:`ringccl.simulate` does: src/dst only where torch.distributed takes them)."""
    params: dict = {}
    for item in args.param or ():
        name, _, value = item.partition("=")
        try:
            params[name.strip()] = int(value)
        except ValueError:
            raise RingcclError(f"--param {item!r} must be NAME=INTEGER") from None
    if args.segments is not None:
        params["segments"] = args.segments
    if args.root is not None:
        params["root"] = args.root
    args.algorithm = args.algorithm or default_algorithm(args.collective)
    return resolve_root(get_collective(args.collective), params, args.src, args.dst)


def _cmd_show(args) -> int:
    params = _params(args)
    _check_root_arg(args, params, args.world_size)
    schedule = verify(build_schedule(args.collective, args.algorithm, args.world_size, **params))
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(schedule.to_chrome_trace(), f)
        print(f"wrote {args.trace}: Chrome/Perfetto trace, one track per rank "
              "(open in https://ui.perfetto.dev)", file=sys.stderr)
    if args.msccl_xml:
        with open(args.msccl_xml, "w") as f:
            f.write(schedule.to_msccl_xml() + "\n")
        print(f"wrote {args.msccl_xml}: MSCCL XML", file=sys.stderr)
    if args.json:
        _emit_json({"collective": schedule.collective, "algorithm": schedule.algorithm,
                    "world_size": schedule.world_size, "num_chunks": schedule.num_chunks,
                    "num_steps": schedule.num_steps, "params": schedule.params,
                    "rows": step_rows(schedule, args.max_steps)})
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
                seed: int = 0, params: dict | None = None,
                accumulate_dtype: str | None = None) -> dict:
    x = _random_inputs(world_size, count, dtype, seed)
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


def _print_sim(r: dict) -> None:
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
    _table(f"simulated {r['algorithm']} {r['collective']} on {r['world_size']} ranks"
           f"{op}{extra}", ["", "value"], rows)


def _check_call(args, world_size: int, dtype: np.dtype, op, params: dict) -> None:
    """Refuse what the simulator or the workers would refuse, before any input is made or any
    process started: op × dtype, --accumulate-dtype (normalized in place: "f4" -> "float32"),
    the root (named as the user gave it), the builder parameters."""
    spec = get_collective(args.collective)
    if spec.reduces:
        check_op_dtype(op, dtype)
    args.accumulate_dtype = check_accumulate_dtype(args.accumulate_dtype, dtype, args.collective,
                                                   spec.reduces, "--accumulate-dtype")
    _check_root_arg(args, params, world_size)
    build_schedule(args.collective, args.algorithm, world_size, **params)


def _check_root_arg(args, params: dict, world_size: int) -> None:
    """The root's range, named as the user gave it (src, dst or root)."""
    if "root" in params:
        given = next((name for name in ("src", "dst") if getattr(args, name, None) is not None),
                     "root")
        check_root(params["root"], world_size, given)


def _check_sim_memory(collective: str, world_size: int, count: int, itemsize: int) -> None:
    """Refuse a simulation that cannot fit in this machine's memory (instead of being killed
    by the kernel half-way): the N × count inputs plus about 1.5 × N × M elements for the
    simulator's storage, outputs and check (docs: benchmarks/bench_memory.py figures)."""
    m = get_collective(collective).buffer_count(world_size, count)
    need = itemsize * (world_size * count + 1.5 * world_size * m)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: let numpy's MemoryError speak
        return
    for limit in ("/sys/fs/cgroup/memory.max",  # a container's limit (cgroup v2, then v1)
                  "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit) as f:
                have = min(have, int(f.read().strip()))
            break
        except (OSError, ValueError):  # absent, or "max" (no limit)
            continue
    if need > have:
        raise ArgumentError(f"simulating {collective} on {world_size} ranks x count={count} "
                            f"needs about {units.format_size(need)}, more than this machine's "
                            f"{units.format_size(have)} of memory (or its container's limit): "
                            "use a smaller --count or --world-size")


def _cmd_simulate(args) -> int:
    dtype = check_dtype(args.dtype)
    op = parse_op(args.op)
    params = _params(args)
    get_algorithm(args.collective, args.algorithm)
    _check_call(args, args.world_size, dtype, op, params)
    _check_sim_memory(args.collective, args.world_size, args.count,
                      max(dtype.itemsize, np.dtype(args.accumulate_dtype or dtype).itemsize))
    with _status(f"simulating {args.world_size} ranks …"):
        r = _sim_report(args.collective, args.algorithm, args.world_size, args.count, dtype, op,
                        args.seed, params, args.accumulate_dtype)
    if args.json:
        _emit_json(r)
    else:
        _print_sim(r)
    return 0 if r["verified"] else 1


def _run_rows(collective, algorithm, nproc, count, dtype, op, iters, warmup, timeout,
              params=None, accumulate_dtype=None) -> dict:
    from ..torch.launch import launch
    from ..torch.runner import measure
    with _status(f"running {algorithm} {collective} on {nproc} local gloo processes …"):
        rows = launch(measure, nproc, collective, algorithm, count, dtype, op, iters, warmup,
                      params or {}, accumulate_dtype, timeout=timeout)
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
    extra = "".join(f", {k}={v}" for k, v in r.get("params", {}).items())
    extra += f", accumulate_dtype={r['accumulate_dtype']}" if r.get("accumulate_dtype") else ""
    op = f", op={r['op']}" if get_collective(r["collective"]).reduces else ""
    _table(f"{r['collective']} on {r['world_size']} local gloo processes{op}{extra}, "
           f"median of {r['iters']} iterations (max over ranks)", headers, rows)
    ratio = r["busbw_ratio"]
    print(f"busbw ratio ringccl/gloo: {'n/a' if ratio is None else f'{ratio:.2f}'}   "
          f"result {'matches' if r['wrong'] == 0 else 'DIFFERS FROM'} gloo's own "
          f"{r['collective']} ({r['wrong']} elements differ)")


def _cmd_run(args) -> int:
    _need_torch()
    dtype = check_dtype(args.dtype)
    op = parse_op(args.op)
    params = _params(args)
    get_algorithm(args.collective, args.algorithm)
    _check_call(args, args.nproc, dtype, op, params)  # in this process, before any worker starts
    r = _run_rows(args.collective, args.algorithm, args.nproc, args.count, dtype.name, op.value,
                  args.iters, args.warmup, args.timeout, params, args.accumulate_dtype)
    if args.json:
        _emit_json(r)
    else:
        _print_run(r)
    return 0 if r["wrong"] == 0 else 1


def _builder_params(algo, args) -> dict:
    """Keyword arguments the CLI passes to a builder: ``root`` if it takes one and it is set."""
    params = {}
    if getattr(args, "root", None) is not None and "root" in inspect.signature(
            algo.builder).parameters:
        params["root"] = args.root
    return params


def _precision(collective: str, schedule, x: np.ndarray) -> tuple[float, float]:
    """Max absolute and max relative error of ``schedule``'s outputs on ``x`` (float32)
    against the float64 reduction, over every rank's output elements (copies: 0, 0).

    Rank r's output is the slice of the reduced buffer its output chunks cover; outputs in
    another layout fall back to the simulator's own max abs error (relative: nan)."""
    spec = get_collective(collective)
    if not spec.reduces:
        return 0.0, 0.0
    n, count = x.shape
    result = simulate(collective, x, op="sum", schedule=schedule, check=False)
    c = schedule.num_chunks
    sizes = np.asarray(spec.chunk_sizes(n, c, spec.buffer_count(n, count), schedule.params))
    outs = spec.output_chunks(n, c, schedule.params)
    ref = x.astype(np.float64).sum(axis=0)
    wants = []
    for r in range(n):  # rank r's output: its output chunks of the reduced buffer, in order
        starts = np.concatenate([[0], np.cumsum(sizes[r])])
        wants.append(np.concatenate([ref[starts[k]:starts[k + 1]] for k in outs[r]])
                     if len(outs[r]) else ref[:0])
    per_rank = [np.asarray(o) for o in result.outputs] if len(result.outputs) == n else []
    if [o.size for o in per_rank] != [w.size for w in wants]:
        checked = simulate(collective, x, op="sum", schedule=schedule)
        return checked.max_abs_error, float("nan")
    max_abs = max_rel = 0.0
    for r in range(n):
        want = wants[r]
        got = per_rank[r].astype(np.float64).reshape(-1)
        if not want.size:
            continue
        err = np.abs(got - want)
        max_abs = max(max_abs, float(err.max()))
        nonzero = want != 0
        if nonzero.any():
            max_rel = max(max_rel, float((err[nonzero] / np.abs(want[nonzero])).max()))
    return max_abs, max_rel


def _compare_rows(collective: str, world_size: int, count: int, dtype, args) -> list[dict]:
    spec = get_collective(collective)
    buffer_count = spec.buffer_count(world_size, count)
    k = buffer_count * dtype.itemsize
    x = None
    if args.precision:
        x = np.random.default_rng(args.seed).standard_normal((world_size, count)).astype(
            np.float32)
    rows = []
    for name in algorithms(collective):
        algo = get_algorithm(collective, name)
        schedule = build_schedule(collective, name, world_size, **_builder_params(algo, args))
        sent = schedule.bytes_sent(buffer_count, dtype.itemsize)
        through = sent + schedule.bytes_received(buffer_count, dtype.itemsize)
        row = {"algorithm": name, "steps": schedule.num_steps, "steps_formula": algo.steps_formula,
               "bytes_sent_max": int(sent.max()),
               "bytes_sent_per_buffer": float(sent.max()) / k if k else 0.0,
               "bytes_through_max": int(through.max()),
               "busiest_rank": int(np.argmax(through))}
        if x is not None:
            row["max_abs_error"], row["max_rel_error"] = _precision(collective, schedule, x)
        rows.append(row)
    return rows


def _cmd_compare(args) -> int:
    dtype = check_dtype(args.dtype)
    what = "simulating every algorithm …" if args.precision else "building schedules …"
    with _status(what):
        rows = _compare_rows(args.collective, args.world_size, args.count, dtype, args)
    spec = get_collective(args.collective)
    k = spec.buffer_count(args.world_size, args.count) * dtype.itemsize
    if args.json:
        _emit_json({"collective": args.collective, "world_size": args.world_size,
                    "count": args.count, "dtype": dtype.name, "buffer_bytes": k,
                    "rows": rows})
        return 0
    headers = ["algorithm", "steps", "bytes sent/rank (max)", "× buffer",
               "through busiest rank (sent+recv)"]
    if args.precision:
        headers += ["max abs error", "max rel error"]
    body = []
    for r in rows:
        line = [r["algorithm"], f"{r['steps']:,}",
                units.format_size(r["bytes_sent_max"]), f"{r['bytes_sent_per_buffer']:.3f}",
                f"{units.format_size(r['bytes_through_max'])} (R{r['busiest_rank']})"]
        if args.precision:
            line += [f"{r['max_abs_error']:.3g}", f"{r['max_rel_error']:.3g}"]
        body.append(line)
    _table(f"{args.collective} on {args.world_size} ranks, {args.count:,} × {dtype.name} per "
           f"rank (buffer {units.format_size(k)}); bytes counted from each schedule",
           headers, body)
    print("step and byte formulas: `ringccl algorithms " + args.collective + "`")
    if args.precision:
        print(f"errors: float32 inputs ~ N(0, 1) (seed {args.seed}) against their float64 sum; "
              "relative error is per element (large where the sum nearly cancels); each "
              "algorithm adds in its own order.")
    return 0


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
        importlib.import_module("torch")
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
#: runs that differ only in summation order (measured: <= 2.1e-4 after 220 steps on 4 ranks)
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

    from ..torch.launch import launch
    from ..torch.train import MODES, TrainConfig, load_digits, plot_training, train_worker

    modes = list(MODES) if args.mode == "all" else [m.strip() for m in args.mode.split(",")]
    if args.compression and "ddp" not in modes:
        raise ArgumentError(f"compression={args.compression!r} applies to mode 'ddp' only")
    configs = [dataclasses.asdict(TrainConfig(
        mode=m, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay, hidden=tuple(args.hidden), seed=args.seed,
        algorithm=args.algorithm, accumulation=args.accumulation,
        sync_micro_batches=args.sync_micro_batches, bucket_cap_mb=args.bucket_cap_mb,
        first_bucket_mb=args.first_bucket_mb, max_norm=args.max_norm,
        compression=args.compression if m == "ddp" else None,
        plot=None if args.no_plot else args.plot).validate()) for m in modes]
    data = load_digits(args.seed)  # once here: importing scikit-learn costs seconds per process
    TrainConfig(batch_size=args.batch_size).check_data(args.nproc, len(data["y_train"]))
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
        model = (expected["all_reduce"] if "all_reduce" in expected  # 0 on one rank
                 else expected["reduce_scatter"] + expected["all_gather"])
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
    print("bytes per rank: sent/step measured from the schedules (torch mode: not measured); "
          "model/round = 2(N-1)/N x gradient bytes (zero: reduce-scatter + all-gather).")
    if len(runs) > 1:
        print(f"final losses {'agree' if report['losses_agree'] else 'DIFFER'} within relative "
              f"tolerance {report['loss_rtol']:g}")
    if report["plot"]:
        print(f"wrote {report['plot']} (loss curves, bucket timeline)")


# -- cost model: model, tune ----------------------------------------------------------------------

def _ms(seconds: float) -> str:
    """Milliseconds as the seeds print them: 2 decimals, 3 below 1 ms."""
    ms = seconds * 1e3
    return f"{ms:.2f}" if abs(ms) >= 1 else f"{ms:.3f}"


def _machines(args) -> list:
    """The machines the command line describes: one per world size (flat) or one two-level."""
    from ..costmodel.topology import flat, two_level
    if args.nodes is not None:
        topo = two_level(args.nodes, args.local, intra=args.intra, inter=args.inter,
                         nics_per_node=args.nics_per_node,
                         oversubscription=args.oversubscription, placement=args.placement)
        if args.world_size and args.world_size != [topo.world_size]:
            raise ArgumentError(f"--world-size {args.world_size} differs from --nodes x --local "
                                f"= {topo.world_size}")
        return [topo]
    return [flat(n, args.alpha, args.bandwidth) for n in (args.world_size or [8])]


def _link_bytes_text(max_link_bytes: dict) -> str:
    return ", ".join(f"{kind} {units.format_size(b)}" for kind, b in max_link_bytes.items()
                     if kind.endswith("out")) or "-"


def _model_report(args) -> dict:
    from ..costmodel.tuning import predict_table, tune
    tables = []
    for topo in _machines(args):
        rows, skipped = predict_table(args.collective, None, args.size, topo, gamma=args.gamma,
                                      algorithms=args.algorithm, dtype=args.dtype)
        t = tune(args.collective, None, args.size, topo, gamma=args.gamma,
                 algorithms=args.algorithm)
        crossovers = [{"nbytes": c.nbytes, "below": c.below, "above": c.above,
                       "seconds": t.time_at(c.nbytes, c.below)} for c in t.crossovers]
        tables.append({"world_size": topo.world_size, "machine": topo.describe(), "rows": rows,
                       "skipped": skipped, "crossovers": crossovers})
    return {"collective": args.collective, "tables": tables}


def _print_model(report: dict) -> None:
    headers = ["size", "count", "type", "algorithm", "time (us)", "algbw (GB/s)",
               "busbw (GB/s)", "latency", "busiest link out (bytes)", "steps", ""]
    for t in report["tables"]:
        rows = [[units.format_size(r["size"]), r["count"], r["type"], r["algorithm"],
                 f"{r['time_s'] * 1e6:.2f}", f"{r['algbw'] / 1e9:.3f}", f"{r['busbw'] / 1e9:.3f}",
                 f"{100 * r['latency_fraction']:.1f}%", _link_bytes_text(r["max_link_bytes"]),
                 r["num_steps"], "fastest" if r["best"] else ""] for r in t["rows"]]
        _table(f"predicted {report['collective']} (nccl-tests columns), {t['machine']}",
               headers, rows)
        for c in t["crossovers"]:
            print(f"  crossover: {c['below']} -> {c['above']} at "
                  f"{units.format_size(c['nbytes'])} ({c['seconds'] * 1e6:.2f} us)")
        for name, why in t["skipped"].items():
            print(f"  skipped {name}: {why}")
        print()


def _plot_model(report: dict, path: str) -> None:
    from ..views.plot import model_chart
    charts = []
    for t in report["tables"]:
        algos = list(dict.fromkeys(r["algorithm"] for r in t["rows"]))
        sizes = sorted({r["size"] for r in t["rows"]})
        by = {(r["algorithm"], r["size"]): r for r in t["rows"]}
        charts.append({"world_size": t["world_size"], "sizes": sizes,
                       "seconds": {a: [by[a, s]["time_s"] for s in sizes] for a in algos},
                       "busbw": {a: [by[a, s]["busbw"] for s in sizes] for a in algos},
                       "crossovers": t["crossovers"]})
    machines = "; ".join(dict.fromkeys(t["machine"].split(":")[0] for t in report["tables"]))
    model_chart(charts, path, title=f"ringccl model {report['collective']} ({machines}; "
                f"{report['tables'][0]['machine'].split(', ', 1)[-1]})")


def _print_seed(fig: dict) -> None:
    _table("seed 000 §5: ring all_reduce bytes sent per rank (K = one rank's buffer)",
           ["N", "bytes per rank", "vs naive (N-1)K", "vs lower bound 2K"],
           [[r["world_size"], f"{r['bytes_per_rank_K']:.3f} K", f"{r['vs_direct']:.3f} x",
             f"{r['vs_lower_bound']:.3f} x"] for r in fig["per_rank_bytes"]])
    print()
    _table("seed 000 §5: ring all_reduce, alpha = 5 us, 300 GB/s, float32",
           ["ranks", "elements", "size", "total (ms)", "latency (ms)", "latency share",
            "bandwidth (ms)"],
           [[r["world_size"], units.format_count(r["count"]), units.format_size(r["nbytes"]),
             _ms(r["seconds"]), _ms(r["latency_seconds"]), f"{100 * r['latency_fraction']:.1f}%",
             _ms(r["bandwidth_seconds"])] for r in fig["ring_latency"]])
    print()
    rows = fig["experiment3"]
    walked = list(rows[0]["ringccl"])
    _table("seed 001 §7.3 experiment 3: all_reduce of 100 MiB, 50 GB/s, 5 us (ms); "
           "lecture's formulas | ringccl's walked schedules",
           ["P", "master", "ring", "tree", "|"] + [f"ringccl {a}" for a in walked],
           [[r["world_size"]] + [_ms(r["lecture"][a]) for a in ("master", "ring", "tree")]
            + ["|"] + ["-" if r["ringccl"][a] is None else _ms(r["ringccl"][a]) for a in walked]
            for r in rows])
    missing = [a for a in walked if rows[0]["ringccl"][a] is None]
    if missing:
        print(f"  (-: {', '.join(missing)} not registered in this build)")
    print()
    h = fig["hierarchical"]
    hw = h["hierarchical_walked"]
    _table(f"seed 001 q.4: all_reduce of {units.format_size(h['nbytes'])} on {h['nodes']} nodes x "
           f"{h['local']} GPUs, NVLink {units.format_bandwidth(h['nvlink_bandwidth'])}, "
           f"{units.format_bandwidth(h['nic_bandwidth'])} per NIC, alpha 5 us",
           ["algorithm", "time (ms)", "bytes out of the busiest NIC", "NICs used per node"],
           [["flat ring (walked)", _ms(h["flat_ring"]["seconds"]),
             units.format_size(h["flat_ring"]["nic_bytes"]), h["flat_ring"]["nics_used_per_node"]],
            ["hierarchical (formula)", _ms(h["hierarchical_formula"]["seconds"]),
             units.format_size(h["hierarchical_formula"]["nic_bytes"]),
             h["hierarchical_formula"]["nics_used_per_node"]]]
           + ([["hierarchical (walked)", _ms(hw["seconds"]), units.format_size(hw["nic_bytes"]),
                hw["nics_used_per_node"]]] if hw else []))
    print(f"  speed-up of hierarchical over flat ring: {h['speedup_formula']:.2f}x (formula)"
          + (f", {hw['speedup']:.2f}x (walked)" if hw else "")
          + f"; bytes per NIC {h['nic_bytes_ratio']:.2f}x fewer")


def _cmd_model(args) -> int:
    if args.preset == "seed":
        from ..costmodel.presets import seed_figures
        with _status("computing the seeds' figures …"):
            fig = seed_figures()
        if args.json:
            _emit_json(fig)
        else:
            _print_seed(fig)
        return 0
    report = _model_report(args)
    if args.plot:
        _plot_model(report, args.plot)
    if args.json:
        _emit_json(report)
    else:
        _print_model(report)
        if args.plot:
            print(f"chart written to {args.plot}")
    return 0


def _bucket_report(args, topo) -> dict | None:
    from ..costmodel.buckets import (DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, best_bucket_size,
                          bucket_plan, gpt2_gradient_sizes)
    if args.bucket_model is None and args.tensor_sizes is None:
        return None
    sizes = (gpt2_gradient_sizes(args.bucket_model) if args.tensor_sizes is None
             else args.tensor_sizes)
    kw = dict(collective=args.collective, algorithm=args.bucket_algorithm, gamma=args.gamma,
              backward_seconds=args.backward)
    best, plans = best_bucket_size(sizes, None, topo, **kw)
    ddp = bucket_plan(sizes, DDP_BUCKET_BYTES, None, topo,
                      first_bucket_bytes=DDP_FIRST_BUCKET_BYTES, **kw)
    row = (lambda label, p: {"plan": label, "bucket_bytes": p.bucket_bytes,
                             "buckets": p.num_buckets, "comm_s": p.comm_seconds,
                             "finish_s": p.finish_seconds, "exposed_s": p.exposed_seconds})
    rows = [row("one by one" if p.bucket_bytes == 0 else "", p) for p in plans]
    rows.append(row("DDP default (1 MiB first, 25 MiB)", ddp))
    return {"model": args.bucket_model or "tensor sizes", "tensors": len(sizes),
            "total_bytes": int(sum(sizes)), "backward_s": args.backward,
            "algorithm": args.bucket_algorithm, "best_bucket_bytes": best.bucket_bytes,
            "rows": rows}


def _cmd_tune(args) -> int:
    from ..costmodel.tuning import tune
    topo = _machines(args)
    if len(topo) != 1:
        raise ArgumentError(f"tune takes one --world-size, got {args.world_size}")
    topo = topo[0]
    t = tune(args.collective, None, args.size, topo, gamma=args.gamma, algorithms=args.algorithm)
    ranges = [{"algorithm": r.algorithm, "low": r.low, "high": r.high,
               "seconds_low": t.time_at(r.low, r.algorithm),
               "seconds_high": t.time_at(r.high, r.algorithm)} for r in t.ranges]
    report = {"collective": args.collective, "machine": topo.describe(),
              "algorithms": list(t.algorithms), "ranges": ranges,
              "crossovers": [c._asdict() for c in t.crossovers], "skipped": t.skipped,
              "buckets": _bucket_report(args, topo)}
    if args.json:
        _emit_json(report)
        return 0
    _table(f"fastest {args.collective} algorithm by size, {topo.describe()} "
           f"(compared: {', '.join(t.algorithms)})",
           ["from", "to", "fastest", "time at from", "time at to"],
           [[units.format_size(r["low"]), units.format_size(r["high"]), r["algorithm"],
             units.format_duration(r["seconds_low"]), units.format_duration(r["seconds_high"])]
            for r in ranges])
    for c in t.crossovers:
        print(f"  crossover: {c.below} -> {c.above} at {units.format_size(c.nbytes)} "
              f"({c.nbytes:,.0f} bytes)")
    for name, why in t.skipped.items():
        print(f"  skipped {name}: {why}")
    b = report["buckets"]
    if b:
        print()
        _table(f"bucketing {b['model']}: {b['tensors']} tensors, "
               f"{units.format_size(b['total_bytes'])}, backward "
               f"{units.format_duration(b['backward_s'])}, {b['algorithm']} {args.collective}",
               ["bucket size", "buckets", "comm time", "finish", "exposed", ""],
               [[units.format_size(r["bucket_bytes"]) if r["bucket_bytes"] else "0",
                 r["buckets"], units.format_duration(r["comm_s"]),
                 units.format_duration(r["finish_s"]), units.format_duration(r["exposed_s"]),
                 " ".join(x for x in (r["plan"], "best" if r["bucket_bytes"] ==
                                      b["best_bucket_bytes"] and not r["plan"].startswith("DDP")
                                      else "") if x)]
                for r in b["rows"]])
    return 0


def _size_list(text: str) -> list[float]:
    """``4KiB:1GiB`` (powers of two between), ``4KiB:1GiB:4`` (factor 4), or ``1KiB,4MiB``."""
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) not in (2, 3):
                raise ArgumentError(f"size range {text!r} must be LOW:HIGH or LOW:HIGH:FACTOR")
            lo, hi = units.size(parts[0]), units.size(parts[1])
            factor = float(parts[2]) if len(parts) == 3 else 2.0
            if lo <= 0 or hi < lo or factor <= 1:
                raise ArgumentError(f"size range {text!r} needs 0 < LOW <= HIGH and FACTOR > 1")
            out = [float(lo)]
            while out[-1] * factor <= hi * (1 + 1e-12):
                out.append(out[-1] * factor)
            return out
        return [float(units.size(s)) for s in text.split(",") if s.strip()]
    except RingcclError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_list(text: str) -> list[int]:
    return [_positive_int(s) for s in text.split(",") if s.strip()]


def _names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _checked(parse):
    """An argparse type from a ringccl parser: errors become usage errors."""
    def convert(text: str):
        try:
            return parse(text)
        except RingcclError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = parse.__name__
    return convert


def _gamma(text: str) -> float:
    """``--gamma``: seconds per byte (a number) or a reduction rate such as ``100GB/s``."""
    from ..costmodel.model import parse_gamma
    try:
        return parse_gamma(float(text))
    except ValueError:
        return parse_gamma(text)


def _add_machine_args(p) -> None:
    g = p.add_argument_group("machine (flat by default; --nodes for two-level)")
    g.add_argument("--world-size", "-N", type=_int_list, default=None,
                   help="ranks, or a list: 8,64,1024 (flat machine; default 8)")
    g.add_argument("--alpha", default="5us", type=_checked(units.duration),
                   help="flat: latency per step (default 5us)")
    g.add_argument("--bandwidth", default="50GB/s", type=_checked(units.bandwidth),
                   help="flat: per direction, 50GB/s or 400Gbps (default 50GB/s)")
    g.add_argument("--gamma", default=0.0, type=_checked(_gamma),
        help="seconds per byte reduced, or a reduction rate such as 100GB/s (default 0)")
    g.add_argument("--nodes", type=_positive_int, help="two-level: number of nodes")
    g.add_argument("--local", type=_positive_int, default=8, help="two-level: GPUs per node")
    g.add_argument("--intra", default="5us,900GB/s", help="two-level: ALPHA,BANDWIDTH of NVLink")
    g.add_argument("--inter", default="5us,50GB/s", help="two-level: ALPHA,BANDWIDTH of one NIC")
    g.add_argument("--nics-per-node", type=_positive_int, help="two-level: default --local")
    g.add_argument("--oversubscription", type=float, default=1.0,
                   help="two-level: inter-node fabric oversubscription (>= 1)")
    g.add_argument("--placement", default="node_major", choices=["node_major", "round_robin"],
                   help="two-level: rank placement")


def _add_cost_parsers(sub, collectives) -> None:
    p = sub.add_parser("model", help="predict time, algbw, busbw per algorithm (cost model)")
    p.add_argument("collective", nargs="?", default="all_reduce", choices=collectives)
    p.add_argument("--algorithm", "-a", type=_names, default=None,
                   help="algorithms to compare, comma-separated (default: all registered)")
    p.add_argument("--size", "-s", type=_size_list, default=_size_list("4KiB:1GiB"),
                   help="bytes per rank: 4KiB:1GiB (x2), 4KiB:1GiB:4, or 1MiB,1GiB")
    p.add_argument("--dtype", default="float32", choices=SUPPORTED_DTYPES,
                   help="element type for the count column")
    _add_machine_args(p)
    p.add_argument("--plot", metavar="PNG", help="write a chart: time and busbw vs size")
    p.add_argument("--preset", choices=["seed"], help="seed: print the seeds' figures")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_model)

    p = sub.add_parser("tune", help="fastest algorithm per size, crossovers, bucket size")
    p.add_argument("collective", choices=collectives)
    p.add_argument("--algorithm", "-a", type=_names, default=None,
                   help="algorithms to compare, comma-separated (default: all registered)")
    p.add_argument("--size", "-s", type=_size_list, default=_size_list("4B:16GiB"),
                   help="size grid (default 4B:16GiB, x2); crossovers are refined between")
    _add_machine_args(p)
    p.add_argument("--bucket-model", choices=["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"],
                   help="also find the best gradient bucket size for this model")
    p.add_argument("--tensor-sizes", type=_size_list,
                   help="gradient sizes in backward order, instead of --bucket-model")
    p.add_argument("--backward", type=_checked(units.duration), default=0.0,
                   help="backward time the buckets overlap with (default 0)")
    p.add_argument("--bucket-algorithm", default="ring", help="algorithm for each bucket")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_tune)


# -- bench and fit --------------------------------------------------------------------------------

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
    from ..bench.harness import row_count
    total = row_count(spec)
    if args.nproc:
        bar, advance = _progress(total, f"{spec.collective} on {args.nproc} {spec.backend} "
                                 "processes")
        with bar:
            if spec.backend == "mpi":
                from ..mpi.launch import launch_bench
                rows = launch_bench(spec, args.nproc, advance, args.timeout)
            else:
                _need_torch()
                from ..torch.runner import launch_sweep
                rows = launch_sweep(spec, args.nproc, advance, args.timeout)
        return rows, args.nproc, True
    import os
    if spec.backend == "mpi":
        from ..mpi.launch import under_mpirun
        if under_mpirun():
            from mpi4py import MPI

            from ..mpi.runner import sweep
            rank = MPI.COMM_WORLD.Get_rank()
            bar, advance = _progress(total, spec.collective) if rank == 0 else (None, None)
            import contextlib
            with bar or contextlib.nullcontext():
                rows = sweep(spec, emit=advance)
            return rows, MPI.COMM_WORLD.Get_size(), rank == 0
    elif "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:  # torchrun (env://)
        _need_torch()
        import torch.distributed as dist

        from ..torch.runner import sweep
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
    from ..bench.harness import BUILTIN, row_label
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
    from ..bench.harness import PLACEMENTS, BenchSpec, Sweep, format_csv, format_nccl_tests, \
        parse_algorithms, plot_busbw
    dtype = _NCCL_DTYPES.get(args.dtype, args.dtype)
    spec = BenchSpec(
        args.collective, parse_algorithms(args.collective, args.algorithm), args.minbytes,
        args.maxbytes, args.stepfactor, args.iters, args.warmup_iters, bool(args.check), dtype,
        args.op, args.root, _segment_list(args.segment_bytes),
        PLACEMENTS if args.placement == "both" else (args.placement,), args.backend,
        not args.no_calibrate, not args.no_restore, args.accumulate_dtype).validate(args.nproc)
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
    from ..costmodel.fit import PARAMS
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
    from ..costmodel.fit import LOCAL_REDUCE, sweep_key, sweep_label
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
    from ..algorithms import REGISTRY
    from ..collectives import get_collective
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
    from ..costmodel.fit import by_backend, held_out, load_rows
    rows = load_rows(args.files)
    placement = None if args.placement == "any" else args.placement
    report = []
    for backend, group in by_backend(rows).items():
        held = held_out(group, args.train, backend, placement)
        from ..costmodel.fit import fit_rows
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

def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
        return value
    parse.__name__ = f"integer >= {minimum}"
    return parse


_positive_int = _int_at_least(1)
_nonnegative_int = _int_at_least(0)


def _seconds(text: str) -> float:
    """A finite number of seconds > 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of seconds > 0")
    return value


def _widths(text: str) -> tuple:
    try:
        widths = tuple(int(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers") from None
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: widths must be >= 1")
    return widths


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


def _accumulate_option(p, note: str = "") -> None:
    """--accumulate-dtype, checked by :func:`_check_call` (ringccl.ops.check_accumulate_dtype)."""
    p.add_argument("--accumulate-dtype", metavar="DTYPE", default=None,
                   help="reducing collectives (all_reduce, reduce_scatter, reduce) on a floating "
                   "--dtype: hold the working buffer in this floating dtype, at least as wide "
                   "(float16 inputs: float16, float32 or float64; float32: float32 or float64; "
                   "float64: float64), so each result is rounded to --dtype once; what travels "
                   "is then this dtype's bytes. Default: reduce in --dtype." + note)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ringccl", description="Collective-communication algorithms as data: see, check, "
        "simulate and run them.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    collectives = list(COLLECTIVES)

    def common(p, collective=True):
        if collective:
            p.add_argument("collective", choices=collectives, help="collective to use")
            p.add_argument("--algorithm", "-a", default=None,
                           help="algorithm name (see `ringccl algorithms`; default ring, or the "
                           "collective's first algorithm)")
            p.add_argument("--src", type=int, default=None,
                           help="root of broadcast and scatter (default 0)")
            p.add_argument("--dst", type=int, default=None,
                           help="root of reduce and gather (default 0)")
            p.add_argument("--root", type=int, default=None,
                           help="root of any rooted collective or algorithm (e.g. master)")
            p.add_argument("--segments", type=_positive_int, default=None,
                           help="segments of pipelined algorithms (e.g. ring broadcast/reduce)")
            p.add_argument("--param", action="append", metavar="NAME=INT",
                           help="any other builder parameter (repeatable)")
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
    p.add_argument("--world-size", "-N", type=_positive_int, default=4,
                   help="ranks N (default 4, the seed's table)")
    p.add_argument("--max-steps", type=_positive_int, default=200,
                   help="print at most this many steps (default 200)")
    p.add_argument("--trace", metavar="OUT.json",
                   help="also write a Chrome/Perfetto trace (one track per rank)")
    p.add_argument("--msccl-xml", metavar="OUT.xml", help="also write the schedule as MSCCL XML")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("compare", help="every algorithm of a collective side by side")
    p.add_argument("collective", choices=collectives, help="collective to compare")
    p.add_argument("--world-size", "-N", type=_positive_int, default=8, help="ranks N (default 8)")
    p.add_argument("--count", "-c", type=_count, default=units.count("1Mi"),
                   help="elements per rank: 1M = 10^6, 1Mi = 2^20 (default 1Mi)")
    p.add_argument("--dtype", default="float32", choices=SUPPORTED_DTYPES,
                   help="element type for the byte counts (default float32)")
    p.add_argument("--root", type=int, default=None, help="root rank of rooted collectives")
    p.add_argument("--precision", action="store_true",
                   help="simulate each algorithm on the same random float32 inputs and report "
                   "its error against a float64 reference (needs N × count × 4 bytes per array)")
    p.add_argument("--seed", type=_nonnegative_int, default=0, help="random seed (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("simulate", help="simulate on N virtual ranks and check against numpy")
    common(p)
    p.add_argument("--world-size", "-N", type=_positive_int, default=8, help="ranks N (default 8)")
    p.add_argument("--count", "-c", type=_count, default=units.count("1Mi"),
                   help="elements per rank: 1M = 10^6, 1Mi = 2^20 (default 1Mi)")
    p.add_argument("--dtype", default="float32", choices=SUPPORTED_DTYPES)
    p.add_argument("--op", default="sum", help="sum, prod, min, max, avg, band, bor, bxor")
    _accumulate_option(p)
    p.add_argument("--seed", type=_nonnegative_int, default=0, help="random seed (default 0)")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("run", help="run on local gloo processes and compare with gloo's own")
    common(p)
    p.add_argument("--nproc", "-n", type=_positive_int, default=4)
    p.add_argument("--count", "-c", type=_count, default=units.count("16Mi"),
                   help="elements per rank (reduce_scatter, scatter: the whole N-block input; "
                   "rounded down to a multiple of N for those and all_to_all), default 16Mi")
    p.add_argument("--dtype", default="float32",
                   choices=[d for d in SUPPORTED_DTYPES])
    p.add_argument("--op", default="sum")
    _accumulate_option(p, " ringccl's result is still compared with gloo's element for "
                       "element: exact for the default integer inputs' sums")
    p.add_argument("--iters", type=_positive_int, default=10)
    p.add_argument("--warmup", type=_nonnegative_int, default=3)
    p.add_argument("--timeout", type=_seconds, default=300.0, help="seconds before giving up")
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
    p.add_argument("--no-restore", action="store_true",
                   help="gloo/nccl: skip ringccl's all-or-nothing backup copy (restore=False), "
                   "as the backends' own collectives do")
    _accumulate_option(p, " Applies to ringccl's algorithms, not to builtin; sizes and "
                       "bandwidths still count --dtype's bytes (mpi: all_reduce, reduce_scatter).")
    p.add_argument("--format", choices=["table", "nccl-tests"], default="table",
                   help="table (default) or nccl-tests' text layout")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON (input of ringccl fit)")
    out.add_argument("--csv", action="store_true",
                     help="print CSV in SI units: bytes, seconds, algbw/busbw in bytes/s")
    p.add_argument("--plot", metavar="PNG", help="also write busbw vs size to this PNG")
    p.add_argument("--timeout", type=_seconds, default=900.0, help="seconds before giving up")
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
    p.add_argument("--seed", type=_nonnegative_int, default=0, help="random seed (default 0)")
    p.add_argument("--plot", default="ringccl_train.png", help="output image (default %(default)s)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--timeout", type=_seconds, default=600.0, help="seconds before giving up")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_train)
    _add_cost_parsers(sub, collectives)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ringccl`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except RingcclError as exc:
        print(f"ringccl: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        print(f"ringccl: error: not enough memory ({exc or 'MemoryError'}); use a smaller "
              "--count or --world-size", file=sys.stderr)
        return 2
    except OSError as exc:  # an output path that cannot be written, ...
        print(f"ringccl: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
