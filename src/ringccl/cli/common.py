"""What the commands share: tables and JSON out, status lines and progress bars, argparse types
for human units (``1Mi`` elements, ``4MiB``, seconds), the collective/algorithm/root options, and
the checks made before any input is built or any process started."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import math
import os
import sys
from typing import Sequence

import numpy as np

from .. import resources, units
from ..algorithms import algorithms, bounded, get_algorithm
from ..args import HTML_SUFFIXES, IMAGE_SUFFIXES, output_problem
from ..collectives import COLLECTIVES, check_root, get_collective
from ..costmodel.model import parse_gamma
from ..costmodel.topology import parse_link
from ..errors import ArgumentError, RingcclError
from ..ops import check_accumulate_dtype, check_op_dtype
from ..sim import default_algorithm, resolve_root
from . import limits
from .interrupt import INTERRUPTED, interrupted
from .parser import Parser
from .progress import Progress
from .sizes import MAX_SIZES, entries, size_list
from .sizes import refuse_negative as _refuse_negative

__all__ = ["table", "TABLE_FORMATS", "stderr_console", "add_format_option", "add_launch_options",
           "check_nproc", "interrupted", "INTERRUPTED", "status", "progress", "emit_json",
           "schedule_params", "check_call", "check_call_args", "check_root_arg", "takes_root",
           "need_torch", "add_collective_args", "add_accumulate_option", "positive_int",
           "nonnegative_int", "seconds_arg", "widths_arg", "size_arg", "count_arg", "size_list",
           "MAX_SIZES", "int_list", "name_list", "checked", "nonnegative", "link_arg",
           "output_path", "HTML_SUFFIXES", "IMAGE_SUFFIXES", "add_flat_link_args",
           "add_node_link_args", "Parser", "Given", "GivenFlag", "refuse_unused"]


# -- output ---------------------------------------------------------------------------------------

#: ``--format`` of the commands that print tables: auto (rich on a terminal wide enough for the
#: table, else plain), plain (fixed-width text, never truncated), rich (boxes; never truncated
#: either: the table gets the width its rows need)
TABLE_FORMATS = ("auto", "plain", "rich")


def add_format_option(p, extra: Sequence[str] = (), help_extra: str = "") -> None:
    """``--format auto|plain|rich`` (and ``extra`` choices, e.g. nccl-tests) for :func:`table`."""
    p.add_argument("--format", choices=list(TABLE_FORMATS) + list(extra), default="auto",
                   help="auto (default): rich tables on a terminal wide enough for them, plain "
                   "fixed-width text when piped or narrower; plain; rich. Numbers are never "
                   "truncated" + help_extra)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]],
          fmt: str = "auto") -> None:
    """Print a table; no cell is ever truncated or wrapped.

    ``fmt``: "plain" (aligned fixed-width text: first column left-aligned, the others right,
    a title line, a rule under the header), "rich" (boxes, when rich is installed; as wide as
    the rows need, whatever the terminal), or "auto": rich on a terminal at least as wide as
    the table, else plain (output that is piped, captured or read by a program: rich would
    squeeze the columns into 80 and cut numbers, e.g. ``5929…``).
    """
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    need = sum(widths) + 3 * len(widths) + 1  # rich's borders and one space of padding a side
    if fmt == "auto":
        fmt = "rich" if _terminal_columns() >= need else "plain"
    if fmt == "rich":
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            fmt = "plain"
    if fmt != "rich":
        left = [i == 0 or len(headers) == 2 for i in range(len(headers))]
        line = lambda r: "  ".join(c.ljust(w) if lf else c.rjust(w)  # noqa: E731
                                   for c, w, lf in zip(r, widths, left)).rstrip()
        print(title)
        print(line(cells[0]))
        print("  ".join("-" * w for w in widths))
        for r in cells[1:]:
            print(line(r))
        return
    grid = Table(title=title, title_justify="left")
    for i, h in enumerate(headers):
        grid.add_column(str(h), justify="left" if i == 0 or len(headers) == 2 else "right",
                        no_wrap=True)
    for r in rows:
        grid.add_row(*(str(c) for c in r))
    console = Console()
    if not console.is_terminal or _unknown_width():  # forced rich, piped: no colour codes
        console = Console(width=max(need, 160), force_terminal=False)
    elif console.width < need:  # forced rich, narrow terminal: lines wrap, numbers stay whole
        console = Console(width=need)
    console.print(grid)


def _terminal_columns() -> int:
    """Columns of the terminal stdout writes to (COLUMNS overrides, as for rich and shutil);
    0 when stdout is not a terminal (piped, captured) or reports no size (mpirun's pty)."""
    try:
        if not os.isatty(sys.stdout.fileno()):
            return 0
    except (OSError, ValueError, AttributeError):  # no fileno (captured)
        return 0
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except OSError:
        return 0


def _unknown_width() -> bool:
    """True on a terminal that reports 0 columns (mpirun gives its processes such a pty)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns == 0
    except (OSError, ValueError, AttributeError):  # not a terminal, or no fileno (captured)
        return False


def status(message: str):
    """A spinner on stderr while something slow runs (rich, on a terminal); nothing on a pipe
    or a log (rich would still write a blank line when the spinner ends); a plain line without
    rich."""
    try:
        importlib.import_module("rich")
    except ImportError:
        print(message, file=sys.stderr)
        return contextlib.nullcontext()
    console = stderr_console()
    return console.status(message) if console is not None else contextlib.nullcontext()


def stderr_console():
    """A rich Console on stderr when rich is installed and stderr is a terminal, else None."""
    try:
        from rich.console import Console
    except ImportError:
        return None
    console = Console(stderr=True)
    return console if console.is_terminal else None


def progress(total: int, description: str):
    """(context manager, advance(row) callback) for a sweep of ``total`` rows, each row a dict
    with ``algorithm`` and ``size`` (bytes): :class:`.progress.Progress` on stderr."""
    shown = Progress()
    task = shown.task(description, total)

    def advance(row: dict) -> None:
        task.update(advance=1, last=f"{row['algorithm']} {units.format_size(row['size'])}")
    return shown, advance


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


def emit_json(obj) -> None:
    """Print ``obj`` as indented strict JSON (NaN and ±inf as null)."""
    print(json.dumps(_strict(obj), indent=2, allow_nan=False, default=str))


# -- a schedule's options, and the checks before any work ----------------------------------------

def add_collective_args(p, collective: bool = True) -> None:
    """The collective and its algorithm, root and builder options (when ``collective``), and
    --json."""
    if collective:
        p.add_argument("collective", choices=list(COLLECTIVES), help="collective to use")
        p.add_argument("--algorithm", "-a", default=None,
                       help="algorithm name (see `ringccl algorithms`, which marks each "
                       "collective's default with *: ring, or direct where there is no ring)")
        p.add_argument("--src", type=int, default=None,
                       help="root of broadcast and scatter (default 0)")
        p.add_argument("--dst", type=int, default=None,
                       help="root of reduce and gather (default 0)")
        p.add_argument("--root", type=int, default=None,
                       help="root of any rooted collective or algorithm (e.g. master)")
        p.add_argument("--segments", type=positive_int, default=None,
                       help="segments of pipelined algorithms (e.g. ring broadcast/reduce)")
        p.add_argument("--param", action="append", metavar="NAME=INT",
                       help="any other builder parameter (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def schedule_params(args) -> dict:
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


def check_call_args(args, world_size: int, dtype: np.dtype, op, params: dict) -> None:
    """Refuse the arguments the simulator or the workers would refuse, before any input is made
    or any process started: op × dtype, --accumulate-dtype (normalized in place: "f4" ->
    "float32"), the root (named as the user gave it). :func:`check_call` also builds."""
    spec = get_collective(args.collective)
    if spec.reduces:
        check_op_dtype(op, dtype)
    args.accumulate_dtype = check_accumulate_dtype(args.accumulate_dtype, dtype, args.collective,
                                                   spec.reduces, "--accumulate-dtype")
    check_root_arg(args, params, world_size)


def check_call(args, world_size: int, dtype: np.dtype, op, params: dict,
               world_flag: str = "-N/--world-size") -> None:
    """:func:`check_call_args`, then the schedule, built as the simulator or the workers would
    build it (its parameters refused as they would be), refused first when this machine's
    memory cannot hold it (:func:`ringccl.algorithms.bounded.build`, naming ``world_flag``: the
    option that sets ``world_size``)."""
    check_call_args(args, world_size, dtype, op, params)
    bounded.build(args.collective, args.algorithm, world_size, params,
                  limits.size_flags(args, world_flag, world_size))


def check_root_arg(args, params: dict, world_size: int) -> None:
    """The root, named as the user gave it (src, dst or root): --root on an algorithm without
    one does not apply (as --src on all_reduce does not), and a root out of range says the
    range."""
    if "root" in params:
        if getattr(args, "root", None) is not None and not takes_root(args.collective,
                                                                       args.algorithm):
            takers = [a for a in algorithms(args.collective) if takes_root(args.collective, a)]
            raise ArgumentError(
                f"root={args.root!r} does not apply to {args.algorithm} {args.collective}, which "
                "has no root" + (f" (of the {args.collective} algorithms, {', '.join(takers)} "
                                 f"take{'s' if len(takers) == 1 else ''} one)" if takers else ""))
        given = next((name for name in ("src", "dst") if getattr(args, name, None) is not None),
                     "root")
        check_root(params["root"], world_size, given)


def takes_root(collective: str, algorithm: str) -> bool:
    """True if the algorithm's builder takes ``root`` (or any keyword)."""
    try:
        parameters = inspect.signature(get_algorithm(collective, algorithm).builder).parameters
    except (TypeError, ValueError):  # no signature: let the builder decide
        return True
    return "root" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def need_torch() -> None:
    """Raise RingcclError (with the install command) where torch is missing."""
    try:
        importlib.import_module("torch")
    except ImportError:
        raise RingcclError("this command needs torch: pip install 'ringccl[torch]'") from None


# -- processes: resources, failures, interrupts ------------------------------------------------

def add_launch_options(p) -> None:
    """``--oversubscribe`` and ``--verbose`` of the commands that start worker processes."""
    p.add_argument("--oversubscribe", action="store_true",
                   help="start --nproc processes even beyond what this machine's cores and "
                   "memory can hold (default: refuse up front, naming the limit)")
    p.add_argument("--verbose", action="store_true",
                   help="a failed worker's full traceback (default: one line naming its rank "
                   "and the cause)")


def check_nproc(args, buffer_bytes: int = 0, size_flag: str | None = None, *,
                worker_bytes: int | None = None, hint: str | None = None,
                value: object = None) -> None:
    """Refuse ``--nproc`` processes this machine cannot hold, before any starts
    (:func:`ringccl.resources.check_processes`: cores, and memory for an idle torch worker plus
    :func:`ringccl.resources.run_worker_bytes` of a ``buffer_bytes`` buffer, or plus
    ``worker_bytes`` where the caller knows its workers' own bytes), unless ``--oversubscribe``;
    and, even with it, data that do not fit in the available memory for one worker alone.

    Raises:
        ArgumentError: naming --nproc, its value, the limit and --oversubscribe; when memory is
            the limit, also ``hint`` (what to lower), or ``size_flag`` (the option that sets
            the buffer) and the buffer. Data one worker cannot hold: naming ``size_flag`` and
            its ``value`` (when given), the bytes, the memory and ``hint``, not --oversubscribe
            (more processes per byte cannot help).
    """
    extra = resources.run_worker_bytes(buffer_bytes) if worker_bytes is None else worker_bytes
    if hint is None and size_flag is not None and buffer_bytes:
        hint = (f"a smaller {size_flag} (the collective's buffer is "
                f"{units.format_size(buffer_bytes)} per rank, peaking at about "
                f"{resources.RUN_BUFFER_FACTOR}x that in each worker)")
    within_cores = args.nproc <= resources.MAX_PROCESSES_PER_CORE * resources.usable_cores()
    if hint is not None and (within_cores or getattr(args, "oversubscribe", False)):
        # beyond the cores, --nproc is what to change first (check_processes names it)
        _check_one_worker(extra, hint, size_flag if value is None else f"{size_flag} {value}")
    try:
        resources.check_processes(args.nproc, resources.WORKER_BYTES + extra,
                                  oversubscribe=getattr(args, "oversubscribe", False),
                                  what="--nproc")
    except ArgumentError as exc:
        if "available" not in str(exc) or hint is None:
            raise
        raise ArgumentError(f"{exc}; or {hint}") from None


def _check_one_worker(extra: int, hint: str, given: str | None) -> None:
    """Refuse data (``extra`` bytes beyond an idle worker) that one worker cannot hold in this
    machine's available memory, where an idle worker alone would fit."""
    memory = resources.available_memory()
    per = resources.WORKER_BYTES + extra
    if memory is None or extra <= 0 or not resources.WORKER_BYTES <= memory < per:
        return
    raise ArgumentError(f"{given + ': ' if given else ''}one worker process needs about "
                        f"{units.format_size(per)}, more than this machine's "
                        f"{units.format_size(memory)} available, so not even one fits; use "
                        f"{hint}")


# -- argparse types ------------------------------------------------------------------------------

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


positive_int = _int_at_least(1)
nonnegative_int = _int_at_least(0)


def seconds_arg(text: str) -> float:
    """A finite number of seconds > 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of seconds > 0")
    return value


def widths_arg(text: str) -> tuple:
    """Hidden-layer widths: a comma list of integers >= 1 (argparse type)."""
    try:
        widths = tuple(int(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers") from None
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: widths must be >= 1")
    return widths


def int_list(text: str) -> list[int]:
    """``8,64,1024``: integers >= 1 (argparse type); an empty entry is refused, as in a list of
    sizes (:func:`.sizes.entries`)."""
    return [positive_int(s) for s in _entries(text, "integers", "an integer >= 1 (e.g. 8,64)")]


def name_list(text: str) -> list[str]:
    """``ring,direct``: comma-separated names (argparse type); an empty entry is refused."""
    return _entries(text, "names", "a name (e.g. ring,direct)")


def _entries(text: str, noun: str, allowed: str) -> list[str]:
    try:
        return entries(text, noun, allowed)
    except ArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def nonnegative(parse, noun: str, allowed: str):
    """An argparse type from a ringccl parser of a quantity that cannot be negative: ``noun``
    names it, ``allowed`` says what it must be (``nonnegative(units.duration, "latency",
    ">= 0 s (e.g. 5us)")``)."""
    def convert(text: str):
        _refuse_negative(text, noun, allowed)
        return checked(parse)(text)
    convert.__name__ = parse.__name__
    return convert


def checked(parse):
    """An argparse type from a ringccl parser: errors become usage errors."""
    def convert(text: str):
        try:
            return parse(text)
        except RingcclError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = parse.__name__
    return convert


#: a link's ``ALPHA,BANDWIDTH``, e.g. ``5us,900GB/s`` -> (seconds, bytes/s) (argparse type)
link_arg = checked(parse_link)


def output_path(suffixes: Sequence[str] = (), what: str = "a file"):
    """An argparse type for a file a command writes when it is done: refused when the option is
    read, before any work (:func:`ringccl.args.output_problem`: an empty name, a missing or
    unwritable directory, a directory, a suffix not in ``suffixes``, the file being ``what``,
    a place no file can be opened for writing)."""
    def parse(text: str) -> str:
        problem = output_problem(text, suffixes, what)
        if problem:
            raise argparse.ArgumentTypeError(f"{text!r}{problem}")
        return text
    parse.__name__ = what
    return parse


#: bytes: ``4KiB``, ``4KB``, ``4096`` (argparse type; >= 0)
size_arg = nonnegative(units.size, "size", ">= 0 bytes (e.g. 4096, 4KiB, 1MiB)")
#: elements: ``1M`` = 10^6, ``1Mi`` = 2^20 (argparse type; >= 0)
count_arg = nonnegative(units.count, "count", ">= 0 elements (e.g. 1000, 1M, 1Mi)")


def add_accumulate_option(p, note: str = "") -> None:
    """--accumulate-dtype, checked by :func:`check_call` (ringccl.ops.check_accumulate_dtype)."""
    p.add_argument("--accumulate-dtype", metavar="DTYPE", default=None,
                   help="reducing collectives (all_reduce, reduce_scatter, reduce) on a floating "
                   "--dtype: hold the working buffer in this floating dtype, at least as wide "
                   "(float16 inputs: float16, float32 or float64; float32: float32 or float64; "
                   "float64: float64), so each result is rounded to --dtype once; what travels "
                   "is then this dtype's bytes. Default: reduce in --dtype." + note)


def _gamma(text: str) -> float:
    """``--gamma``: seconds per byte (a number) or a reduction rate such as ``100GB/s``."""
    try:
        return parse_gamma(float(text))
    except ValueError:
        return parse_gamma(text)


class Given(argparse.Action):
    """Store the value, and remember the flag was given (``args.given``: dest -> flag as typed),
    so that :func:`refuse_unused` can refuse one that the rest of the command line ignores."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = {**(getattr(namespace, "given", None) or {}),
                           self.dest: option_string}


class GivenFlag(Given):
    """``store_true`` that, like :class:`Given`, remembers the flag was given."""

    def __init__(self, option_strings, dest, default=False, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, True, option_string)


def refuse_unused(args, dests, why: str) -> None:
    """Refuse flags (:class:`Given` ones, by ``dest``) that have no effect here: ``why`` says
    when (``"without --nodes (a flat machine)"``).

    Raises:
        ArgumentError: naming the flags given.
    """
    given = getattr(args, "given", None) or {}
    flags = [given[d] for d in dests if d in given]
    if flags:
        raise ArgumentError(f"{', '.join(flags)} {'has' if len(flags) == 1 else 'have'} no "
                            f"effect {why}")


def add_flat_link_args(p) -> None:
    """``--alpha``, ``--bandwidth``, ``--gamma``: the flat machine's link, the same flags in
    ``ringccl model``/``tune`` and ``ringccl explore`` (``p``: a parser or argument group)."""
    p.add_argument("--alpha", default="5us", action=Given,
                   type=nonnegative(units.duration, "latency", ">= 0 s (e.g. 5us)"),
                   help="flat: latency per step (default 5us)")
    p.add_argument("--bandwidth", default="50GB/s", action=Given,
                   type=nonnegative(units.bandwidth, "bandwidth", "> 0 (e.g. 50GB/s)"),
                   help="flat: per direction, 50GB/s or 400Gbps (default 50GB/s)")
    p.add_argument("--gamma", default=0.0, action=Given, type=nonnegative(
        _gamma, "gamma", ">= 0 s per byte, or a rate > 0 (e.g. 100GB/s)"),
        help="seconds per byte reduced, or a reduction rate such as 100GB/s (default 0)")


def add_node_link_args(p) -> None:
    """``--intra`` and ``--inter``: a two-level machine's links as ALPHA,BANDWIDTH (one parser,
    :func:`ringccl.costmodel.topology.parse_link`), the same flags in ``ringccl model``/``tune``
    and ``ringccl explore``."""
    p.add_argument("--intra", default="5us,900GB/s", action=Given, type=link_arg,
                   metavar="ALPHA,BANDWIDTH",
                   help="two-level: latency and bandwidth of a GPU's NVLink port, e.g. "
                   "5us,900GB/s (default)")
    p.add_argument("--inter", default="5us,50GB/s", action=Given, type=link_arg,
                   metavar="ALPHA,BANDWIDTH",
                   help="two-level: latency and bandwidth of one NIC, e.g. 5us,50GB/s "
                   "(default) or 5us,400Gbps")
