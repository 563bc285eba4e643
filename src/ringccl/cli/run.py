"""Commands on real processes: ``run`` (one size, ringccl's algorithm against the backend's
own) and ``bench`` (an nccl-tests-style sweep). Both are the same harness
(:mod:`ringccl.bench`): one spec, one timing loop, one input generator, one ``#wrong``; ``run``
is a one-size bench (:func:`ringccl.bench.one_size`)."""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import socket
import sys
import tempfile

from .. import units
from ..args import JSON_SUFFIXES
from ..algorithms import bounded, get_algorithm
from ..bench import (BUILTIN, PLACEMENTS, BenchSpec, Sweep, buffer_elements, format_csv,
                     format_nccl_tests, one_size, parse_algorithms, plot_busbw, rank_places,
                     row_count, row_label, run_count, run_report, sweep_sizes)
from ..collectives import COLLECTIVES, get_collective
from ..sim import default_algorithm
from ..engine import trace
from ..errors import ArgumentError, Interrupted, RingcclError
from ..backends.mpi.launch import launch_bench, under_mpirun
from ..ops import SUPPORTED_DTYPES, check_dtype, parse_op
from ..resources import run_worker_bytes
from . import limits
from .baselines import check_builtin_dtype
from .common import (IMAGE_SUFFIXES, Given, add_accumulate_option, add_collective_args,
                     add_format_option, add_launch_options, check_call_args, check_nproc,
                     count_arg, emit_json, interrupted, name_list, need_torch, nonnegative_int,
                     output_path, positive_int, progress, refuse_unused, schedule_params,
                     seconds_arg, size_arg, status, table)
from .sizes import entries

__all__ = ["register_run", "register_bench", "measure_run", "print_run"]


def run_buffer_bytes(collective: str, nproc: int, count: int, dtype: str,
                     accumulate_dtype: str | None = None) -> int:
    """Bytes of the buffer one ``ringccl run`` worker measures: the collective's buffer M
    (``buffer_count``) of the count as measured (:func:`ringccl.bench.spec.run_count`), in the
    wider of dtype and accumulate_dtype."""
    itemsize = max(check_dtype(dtype).itemsize, check_dtype(accumulate_dtype or dtype).itemsize)
    return get_collective(collective).buffer_count(
        nproc, run_count(collective, count, nproc)) * itemsize


def measure_run(collective: str, algorithm: str, nproc: int, count: int, dtype: str, op: str,
                iters: int, warmup: int, timeout: float, params: dict | None = None,
                accumulate_dtype: str | None = None, *, oversubscribe: bool = False,
                verbose: bool = False) -> dict:
    """``ringccl run``: the bench harness at one size (:func:`ringccl.bench.one_size`), ringccl's
    ``algorithm`` against gloo's own on ``nproc`` local processes; returns
    :func:`ringccl.bench.run_report`'s dict.

    Raises:
        ArgumentError: nproc processes with this buffer beyond the machine's cores or memory
            (unless ``oversubscribe``: the caller checked). WorkerError: a worker raised (one
            line; the traceback with ``verbose``). Interrupted: Ctrl-C (``partial``: the rows
            done, at most 2).
    """
    from ..backends.torch.runner import launch_sweep
    spec = one_size(collective, algorithm, count, nproc, dtype=dtype, op=op, iters=iters,
                    warmup=warmup, params=params, accumulate_dtype=accumulate_dtype)
    worker_bytes = run_worker_bytes(run_buffer_bytes(collective, nproc, count, dtype,
                                                     accumulate_dtype))
    with status(f"running {algorithm} {collective} on {nproc} local processes …"):
        rows = launch_sweep(spec, nproc, timeout=timeout, oversubscribe=oversubscribe,
                            worker_bytes=worker_bytes, verbose=verbose)
    return run_report(rows, spec, count, params)


def check_run_count(collective: str, count: int, nproc: int) -> int:
    """The count ``ringccl run`` measures (:func:`ringccl.bench.spec.run_count`); one line on
    stderr when it differs from the one given.

    Raises:
        ArgumentError: a count > 0 that rounds down to 0 elements (naming --count).
    """
    measured = run_count(collective, count, nproc)
    if measured == count:
        return count
    why = (f"the input of {collective} is world_size equal blocks, one per rank")
    if measured == 0:
        raise ArgumentError(f"--count {count} rounds down to 0 elements for {collective} on "
                            f"--nproc {nproc} ({why}); give a multiple of {nproc}, at least "
                            f"{nproc}")
    print(f"count {count} rounded down to {measured} = world_size × {measured // nproc} for "
          f"{collective}: {why}", file=sys.stderr)
    return measured


def print_run(r: dict, fmt: str = "auto") -> None:
    """Print :func:`measure_run`'s dict: one row for ringccl, one for gloo, the busbw ratio."""
    headers = ["impl", "size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
               "min (us)", "p90 (us)", "#wrong"]
    rows = []
    for name in ("ringccl", "builtin"):
        m = r[name]
        label = f"ringccl {r['algorithm']}" if name == "ringccl" else "gloo (builtin)"
        rows.append([label, units.format_size(r["size_bytes"]), r["count"], r["dtype"],
                     f"{m['time_s'] * 1e6:.1f}", f"{m['algbw'] / 1e9:.3f}",
                     f"{m['busbw'] / 1e9:.3f}", f"{m['min_s'] * 1e6:.1f}",
                     f"{m['p90_s'] * 1e6:.1f}", m["wrong"]])
    extra = "".join(f", {k}={v}" for k, v in r.get("params", {}).items())
    extra += f", accumulate_dtype={r['accumulate_dtype']}" if r.get("accumulate_dtype") else ""
    op = f", op={r['op']}" if get_collective(r["collective"]).reduces else ""
    over = f"ringccl over {r['transport']}, " if r.get("transport") else ""
    table(f"{r['collective']} on {r['world_size']} local processes ({over}gloo's own as the "
          f"baseline){op}{extra}, median of {r['iters']} iterations (max over ranks)", headers,
          rows, fmt)
    ratio = r["busbw_ratio"]
    print(f"busbw ratio ringccl/gloo: {'n/a' if ratio is None else f'{ratio:.2f}'}   "
          f"result {'matches' if r['wrong'] == 0 else 'DIFFERS FROM'} the exact "
          f"{r['collective']} ({r['wrong']} elements differ; gloo's own: "
          f"{r['builtin']['wrong']})")


def _check_trace(args) -> None:
    """``--trace PATH`` needs ``--nproc`` (its directory is checked as the option is read), and
    ``--trace-iters`` at most the timed iterations (the workers keep the last N calls).

    Raises:
        ArgumentError: naming --trace and --nproc, or --trace-iters and the iterations, or
            --trace-iters without --trace.
    """
    refuse_unused(args, ("trace_iters",) if args.trace is None else (),
                  "without --trace (it sets how many timed iterations --trace records)")
    if args.trace is not None and not getattr(args, "nproc", None):
        raise ArgumentError("--trace needs --nproc (the workers write their events for this "
                            "process to merge; under torchrun/mpirun there is no such parent)")
    if args.trace is not None and args.trace_iters > args.iters:
        raise ArgumentError(f"--trace-iters {args.trace_iters} must be <= --iters {args.iters} "
                            "(it traces the last timed iterations; more would trace warm-up "
                            "calls)")


def _refuse_unused_call_flags(args) -> None:
    """Refuse the op of a collective that does not reduce, and the root (bench's -r) of one
    that has no root: the harness would ignore them."""
    spec = get_collective(args.collective)
    if not spec.reduces:
        takers = ", ".join(c for c in COLLECTIVES if get_collective(c).reduces)
        refuse_unused(args, ("op",), f"on {args.collective}, which does not reduce (it applies "
                      f"to {takers})")
    if not spec.root_arg:
        takers = ", ".join(c for c in COLLECTIVES if get_collective(c).root_arg)
        refuse_unused(args, ("root",), f"on {args.collective}, which has no root (it applies "
                      f"to {takers})")


@contextlib.contextmanager
def _traced(args, title: str):
    """With ``--trace``: the workers started inside trace the last ``--trace-iters`` timed
    iterations of every ringccl row and write their events to a temporary directory
    (:class:`ringccl.engine.trace.LastCalls`, told through the environment, which the torch
    and mpirun launchers pass on); after the block they are merged into one Chrome/Perfetto
    trace at ``--trace`` (:func:`ringccl.engine.trace.chrome_trace`)."""
    if args.trace is None:
        yield
        return
    saved = {k: os.environ.get(k) for k in (trace.TRACE_DIR_ENV, trace.TRACE_ITERS_ENV)}
    with tempfile.TemporaryDirectory(prefix="ringccl-trace-") as folder:
        os.environ[trace.TRACE_DIR_ENV] = folder
        os.environ[trace.TRACE_ITERS_ENV] = str(args.trace_iters)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        dumps = []
        for path in sorted(glob.glob(os.path.join(folder, "rank*.json"))):
            with open(path) as f:
                dumps.append(json.load(f))
    merged = trace.chrome_trace(dumps, title)
    with open(args.trace, "w") as f:
        json.dump(merged, f)
    calls = sum(len(d["calls"]) for d in dumps)
    print(f"wrote {args.trace}: {len(merged['traceEvents'])} events, {calls} traced calls on "
          f"{len(dumps)} ranks (open in https://ui.perfetto.dev)", file=sys.stderr)


def _cmd_run(args) -> int:
    need_torch()
    _check_trace(args)
    _refuse_unused_call_flags(args)
    dtype = check_dtype(args.dtype)
    op = parse_op(args.op)
    params = schedule_params(args)
    get_algorithm(args.collective, args.algorithm)
    check_builtin_dtype("gloo", dtype.name, "--dtype", "run checks ringccl's result against "
                        f"gloo's; ringccl bench -a {args.algorithm} -d {dtype.name} measures "
                        "ringccl's algorithm alone")
    # in this process, before any worker starts: the arguments, the machine's limits, then
    # the schedule for --nproc ranks (built after the limits: -n 10000 names the cores)
    check_call_args(args, args.nproc, dtype, op, params)
    check_run_count(args.collective, args.count, args.nproc)
    check_nproc(args, run_buffer_bytes(args.collective, args.nproc, args.count, dtype.name,
                                       args.accumulate_dtype), "--count", value=args.count)
    bounded.build(args.collective, args.algorithm, args.nproc, params,
                  limits.size_flags(args, "-n/--nproc", args.nproc))
    try:
        with _traced(args, f"ringccl run {args.algorithm} {args.collective}, "
                     f"--nproc {args.nproc} --count {args.count}"):
            r = measure_run(args.collective, args.algorithm, args.nproc, args.count,
                            dtype.name, op.value, args.iters, args.warmup, args.timeout,
                            params, args.accumulate_dtype, oversubscribe=True,
                            verbose=args.verbose)
    except Interrupted as exc:  # the two rows come together at the end: nothing to report
        return interrupted(f"ringccl run stopped; {len(exc.partial)} of 2 rows measured, "
                           "every worker ended")
    if args.json:
        emit_json(r)
    else:
        print_run(r, args.format)
    return 0 if r["wrong"] == 0 else 1


#: nccl-tests' -d names, accepted next to numpy's
_NCCL_DTYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32"}


def _placements(args) -> tuple:
    """``--placement``; "both" (the default) is out of place only for all_to_all on a torch
    backend, whose all_to_all_single has no in-place form."""
    if args.placement != "both":
        return (args.placement,)
    if args.collective == "all_to_all" and args.backend != "mpi":
        return ("out-of-place",)
    return PLACEMENTS


def _device_name(backend: str, index: int) -> str:
    """The device a rank ran on as nccl-tests names it: the GPU's name under NCCL, else CPU."""
    if backend == "nccl":
        import torch
        if torch.cuda.is_available():
            return torch.cuda.get_device_name(index % torch.cuda.device_count())
    return "CPU"


def _here(backend: str, index: int) -> tuple:
    """(host, process id, device name) of this process, running rank ``index`` of its host."""
    return socket.gethostname(), os.getpid(), _device_name(backend, index)


def _places(gathered) -> list:
    """:func:`ringccl.bench.rank_places` of every rank's (host, pid, device name)."""
    return rank_places([(h, pid) for h, pid, _ in gathered], [n for *_, n in gathered])


def _bench_rows(spec, args) -> tuple[list[dict], int, bool, list | None]:
    """Run the sweep the way the command line asks: (rows, world_size, print here?, where
    each rank ran: :class:`ringccl.bench.RankPlace`; under --nproc every rank on this host,
    with the pid of this process, which starts them)."""
    total = row_count(spec)
    if args.nproc:
        # refused here, before anything starts; the launchers then need not check again
        largest = _largest_buffer(spec, args.nproc)
        check_nproc(args, largest, "-e/--maxbytes", value=args.maxbytes)
        worker_bytes = run_worker_bytes(largest)
        bar, advance = progress(total, f"{spec.collective} on {args.nproc} {spec.backend} "
                                "processes")
        title = f"ringccl bench {spec.collective} on {args.nproc} {spec.backend} processes"
        with _traced(args, title), bar:
            if spec.backend == "mpi":
                rows = launch_bench(spec, args.nproc, advance, args.timeout, oversubscribe=True,
                                    worker_bytes=worker_bytes, verbose=args.verbose)
            else:
                need_torch()
                from ..backends.torch.runner import launch_sweep
                rows = launch_sweep(spec, args.nproc, advance, args.timeout, oversubscribe=True,
                                    worker_bytes=worker_bytes, verbose=args.verbose)
        return rows, args.nproc, True, _places([_here(spec.backend, i)
                                                for i in range(args.nproc)])
    if spec.backend == "mpi":
        if under_mpirun():
            from mpi4py import MPI

            from ..backends.mpi.runner import sweep
            rank = MPI.COMM_WORLD.Get_rank()
            bar, advance = progress(total, spec.collective) if rank == 0 else (None, None)
            with bar or contextlib.nullcontext():
                rows = sweep(spec, emit=advance)
            local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
            gathered = MPI.COMM_WORLD.gather(_here("mpi", local), root=0)
            return rows, MPI.COMM_WORLD.Get_size(), rank == 0, gathered and _places(gathered)
    elif "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:  # torchrun (env://)
        need_torch()
        import torch.distributed as dist

        from ..backends.torch.runner import sweep
        dist.init_process_group(spec.backend)
        try:
            rank, world_size = dist.get_rank(), dist.get_world_size()
            bar, advance = progress(total, spec.collective)
            queue = _Callback(advance) if rank == 0 else None
            with bar if rank == 0 else contextlib.nullcontext():
                rows = sweep(rank, world_size, spec.to_dict(), queue)
            gathered = [None] * world_size
            dist.all_gather_object(gathered, _here(spec.backend,
                                                   int(os.environ.get("LOCAL_RANK", rank))))
        finally:
            dist.destroy_process_group()
        return rows, world_size, rank == 0, _places(gathered)
    raise RingcclError(f"ringccl bench needs processes: give --nproc N, or start it under "
                       f"{'mpirun' if spec.backend == 'mpi' else 'torchrun'}")


def _largest_buffer(spec: BenchSpec, nproc: int) -> int:
    """Bytes of the collective's buffer at the sweep's largest size (nccl-tests' size is the
    buffer M; a ringccl ``accumulate_dtype`` holds it in the wider dtype)."""
    sizes = sweep_sizes(spec.min_bytes, spec.max_bytes, spec.factor) or [0]
    itemsize = check_dtype(spec.dtype).itemsize
    wide = check_dtype(spec.accumulate_dtype or spec.dtype).itemsize
    return buffer_elements(spec.collective, max(sizes), itemsize, nproc) * max(itemsize, wide)


class _Callback:
    """A queue-like object whose ``put`` calls a function (sweep's progress in-process)."""

    def __init__(self, fn):
        self.put = fn


def _print_bench(rows: list[dict], spec, world_size: int, fmt: str = "auto") -> None:
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
    table(f"{spec.collective} on {world_size} {spec.backend} processes: median of {spec.iters} "
          f"iterations (max over ranks) after {spec.warmup} warm-up; algbw, busbw in GB/s "
          "(1e9 B/s); vs builtin = busbw / builtin's busbw (same size and placement)",
          headers, out, fmt)


#: what each entry of --segment-bytes may be
_SEGMENT_ENTRIES = "auto (the executor's threshold), 0 (never split) or a size such as 1MiB"


def _segment_list(text: str) -> tuple:
    """``--segment-bytes``: comma-separated entries, none empty (:func:`.sizes.entries`), each
    auto (None), 0 or a size in bytes (argparse type: a refusal names the option and says what
    an entry may be)."""
    try:
        parts = entries(text, "segment sizes", _SEGMENT_ENTRIES)
    except RingcclError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    out = []
    for part in parts:
        if part == "auto":
            out.append(None)
            continue
        if part.startswith("-"):
            raise argparse.ArgumentTypeError(f"segment size {part!r} is negative: each entry "
                                             f"must be {_SEGMENT_ENTRIES}")
        try:
            out.append(units.size(part))
        except RingcclError as exc:
            raise argparse.ArgumentTypeError(f"{exc}; each entry must be {_SEGMENT_ENTRIES}") \
                from None
    return tuple(out)


def _step_factor(text: str) -> int:
    """``-f/--stepfactor`` (argparse type): an integer, as nccl-tests' ``-f`` (whose strtol
    reads 1.5 as 1, and then steps by ``-i`` bytes instead), so every size is whole bytes; a
    factor < 2 is refused by :func:`_check_sizes`."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"step factor {text!r} must be an integer >= 2 "
                                         "(nccl-tests' -f: sizes -b, -b·f, -b·f², ... whole "
                                         "bytes)") from None


def _check_sizes(args, dtype: str) -> None:
    """The size flags, named as the user typed them (BenchSpec's own checks name its fields),
    and a note on stderr for a size that holds no whole element."""
    if args.maxbytes < args.minbytes:
        raise ArgumentError(f"-b/--minbytes {args.minbytes} B is larger than -e/--maxbytes "
                            f"{args.maxbytes} B")
    if args.stepfactor < 2:
        raise ArgumentError(f"-f/--stepfactor {args.stepfactor} must be an integer >= 2")
    itemsize = check_dtype(dtype).itemsize
    if 0 < args.minbytes < itemsize:
        print(f"ringccl bench: note: -b/--minbytes {args.minbytes} B holds no whole {dtype} "
              f"element ({itemsize} B); that row measures 0 elements", file=sys.stderr)


def _cmd_bench(args) -> int:
    _check_trace(args)
    _refuse_unused_call_flags(args)
    dtype = _NCCL_DTYPES.get(args.dtype, args.dtype)
    _check_sizes(args, dtype)
    names = parse_algorithms(args.collective, ",".join(args.algorithm))
    if BUILTIN in names:
        ours = [a for a in names if a != BUILTIN and args.algorithm != ["all"]]
        check_builtin_dtype(args.backend, check_dtype(dtype).name, "-d/--dtype",
                            f"leave builtin out of -a to measure ringccl's algorithms alone "
                            f"(-a {','.join(ours or [default_algorithm(args.collective)])})")
    spec = BenchSpec(
        args.collective, names, args.minbytes,
        args.maxbytes, args.stepfactor, args.iters, args.warmup_iters, bool(args.check), dtype,
        args.op, args.root, args.segment_bytes or (None,),
        _placements(args), args.backend,
        not args.no_calibrate, not args.no_restore, args.accumulate_dtype).validate(args.nproc)
    stopped = None
    try:
        rows, world_size, printer, places = _bench_rows(spec, args)
    except Interrupted as exc:  # the rows measured before it are reported as usual
        rows, world_size, printer, places = list(exc.partial), args.nproc, True, None
        stopped = f"{len(rows)} of {row_count(spec)} rows measured, every worker ended"
    if not printer:
        return 0
    wrong = sum(r["wrong"] or 0 for r in rows)
    if args.json:
        emit_json(Sweep(spec, world_size, rows, interrupted=stopped is not None).to_json())
    elif args.csv:
        print(format_csv(rows), end="")
    elif args.format == "nccl-tests":
        print(format_nccl_tests(rows, spec, world_size, places), end="")
    elif rows or stopped is None:
        _print_bench(rows, spec, world_size, "auto" if args.format == "table" else args.format)
    if stopped is not None:  # no plot of a partial sweep
        return interrupted(stopped)
    if args.plot:
        plot_busbw(rows, args.plot, f"{spec.collective}, {world_size} {spec.backend} processes")
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0 if wrong == 0 else 1


def add_trace_options(p) -> None:
    """``--trace PATH`` and ``--trace-iters N`` of run and bench."""
    p.add_argument("--trace", metavar="JSON", type=output_path(JSON_SUFFIXES, "a JSON trace"),
                   help="write a Chrome/Perfetto trace of what every rank did (each send, "
                   "receive, wait, reduce, with measured times) in the last timed iteration(s) "
                   "of each ringccl row; open it in https://ui.perfetto.dev")
    p.add_argument("--trace-iters", type=positive_int, default=1, metavar="N", action=Given,
                   help="with --trace: trace the last N timed iterations of each row (default 1)")


def register_run(sub) -> None:
    """``ringccl run``."""
    p = sub.add_parser("run", help="run on local processes and compare with gloo's own")
    add_collective_args(p)
    p.add_argument("--nproc", "-n", type=positive_int, default=4,
                   help="local processes, one rank each (default 4)")
    p.add_argument("--count", "-c", type=count_arg, default=units.count("16Mi"),
                   help="elements per rank (reduce_scatter, scatter: the whole N-block input; "
                   "rounded down to a multiple of N for those and all_to_all, said on stderr; "
                   "a count that rounds to 0 is refused), default 16Mi")
    p.add_argument("--dtype", default="float32",
                   choices=[d for d in SUPPORTED_DTYPES])
    p.add_argument("--op", default="sum", action=Given,
                   help="reduce op of the reducing collectives: sum, prod, min, max, avg, band, "
                   "bor, bxor (default sum)")
    add_accumulate_option(p, " ringccl's result is still compared with the exact result "
                          "element for element: the inputs are small integers, whose sums are "
                          "exact")
    p.add_argument("--iters", type=positive_int, default=10,
                   help="timed calls of each (ringccl's and gloo's, interleaved; default 10)")
    p.add_argument("--warmup", type=nonnegative_int, default=3,
                   help="untimed calls of each before them (default 3)")
    p.add_argument("--timeout", type=seconds_arg, default=300.0, help="seconds before giving up")
    add_launch_options(p)
    add_trace_options(p)
    add_format_option(p)
    p.set_defaults(func=_cmd_run)


def _no_count(text: str):
    """bench's -c: refused, since -c is --count elsewhere and bench sweeps sizes instead."""
    raise argparse.ArgumentTypeError(
        f"bench takes no count (it sweeps sizes: -b/-e/-f); -c is --count in run and simulate. "
        f"For nccl-tests' -c (check) write --check {text}")


class _OnceAction(argparse.Action):
    """--nproc given once: ``bench --nproc 2 -n 5`` (-n was --iters before it meant --nproc
    in every command) is refused rather than read as 5 processes."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "_nproc_given", None):
            parser.error(f"argument {option_string}: --nproc given twice ({namespace.nproc}, "
                         f"then {values}); -n is --nproc, iterations are --iters")
        namespace._nproc_given = True
        setattr(namespace, self.dest, values)


def register_bench(sub) -> None:
    """``ringccl bench``."""
    p = sub.add_parser(
        "bench", help="nccl-tests-style sweep: every algorithm against the backend's own",
        description="Measure ringccl's algorithms and the backend's own collective (builtin) "
        "over a range of sizes, nccl-tests style: per size and algorithm time, algbw, busbw "
        "(GB/s = 1e9 B/s), #wrong and the spread over iterations. Starts --nproc local "
        "processes itself, or runs under torchrun / mpirun.")
    p.add_argument("collective", choices=list(COLLECTIVES))
    p.add_argument("-b", "--minbytes", type=size_arg, default=units.size("4KiB"),
                   help="smallest size, e.g. 4KiB (default 4KiB)")
    p.add_argument("-e", "--maxbytes", type=size_arg, default=units.size("64MiB"),
                   help="largest size (default 64MiB)")
    p.add_argument("-f", "--stepfactor", type=_step_factor, default=4,
                   help="multiply the size by this between rows: an integer >= 2, as "
                   "nccl-tests' -f, so every size is whole bytes (default 4)")
    # -n and -c mean --nproc and --count in every command (nccl-tests' -n iters and -c check
    # are long options only here): -n is --nproc below, -c is refused by name
    p.add_argument("--iters", type=positive_int, default=20,
                   help="timed iterations per row (default 20; the median is reported)")
    p.add_argument("-w", "--warmup-iters", type=nonnegative_int, default=5,
                   help="untimed iterations first (default 5)")
    p.add_argument("--check", type=int, choices=[0, 1], default=1,
                   help="count wrong elements against the exact result (default 1)")
    p.add_argument("-c", dest="count_flag", type=_no_count, help=argparse.SUPPRESS)
    p.add_argument("-d", "--dtype", default="float32",
                   choices=list(SUPPORTED_DTYPES) + list(_NCCL_DTYPES),
                   help="element type (numpy or nccl-tests names; default float32)")
    p.add_argument("-o", "--op", default="sum", action=Given,
                   help="reducing collectives: sum, prod, min, max, avg, band, bor, bxor")
    p.add_argument("-r", "--root", type=int, default=0, action=Given,
                   help="root rank of rooted collectives (default 0)")
    p.add_argument("--algorithm", "-a", default="all", type=name_list,
                   help="comma-separated algorithms and/or builtin (the backend's own); "
                   "'all' (default) = every registered algorithm and builtin")
    p.add_argument("--backend", choices=["gloo", "nccl", "mpi"], default="gloo")
    p.add_argument("--nproc", "-n", "-p", type=positive_int, action=_OnceAction,
                   help="start this many local processes (else run under torchrun/mpirun)")
    p.add_argument("--segment-bytes", metavar="LIST", type=_segment_list,
                   help="pipelining segments for ringccl algorithms, one sweep per entry: "
                   "auto (the executor's threshold), 0 (never split) or a size, e.g. "
                   "'0,1MiB' (default auto)")
    p.add_argument("--placement", choices=["both", "out-of-place", "in-place"], default="both")
    p.add_argument("--no-calibrate", action="store_true",
                   help="skip the local-reduce rows (the gamma calibration for ringccl fit)")
    p.add_argument("--no-restore", action="store_true",
                   help="gloo/nccl: skip ringccl's all-or-nothing backup copy (restore=False), "
                   "as the backends' own collectives do")
    add_accumulate_option(p, " Applies to ringccl's algorithms, not to builtin; sizes and "
                          "bandwidths still count --dtype's bytes (mpi: all_reduce, "
                          "reduce_scatter).")
    add_format_option(p, ("table", "nccl-tests"),
                      "; table: the same as auto; nccl-tests: nccl-tests' own text layout, one "
                      "block per algorithm (what people paste into issues)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print JSON (input of ringccl fit)")
    out.add_argument("--csv", action="store_true",
                     help="print CSV in SI units: bytes, seconds, algbw/busbw in bytes/s")
    p.add_argument("--plot", metavar="PNG", type=output_path(IMAGE_SUFFIXES, "an image"),
                   help="also write busbw vs size to this PNG")
    p.add_argument("--timeout", type=seconds_arg, default=900.0, help="seconds before giving up")
    add_launch_options(p)
    add_trace_options(p)
    p.set_defaults(func=_cmd_bench)
