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
import re
import sys
from typing import Sequence

import numpy as np

from .. import units
from ..algorithms import algorithms, build_schedule, get_algorithm
from ..collectives import COLLECTIVES, check_root, get_collective
from ..errors import ArgumentError, RingcclError
from ..ops import check_accumulate_dtype, check_op_dtype
from ..sim import default_algorithm, resolve_root

__all__ = ["table", "status", "progress", "emit_json", "schedule_params", "check_call",
           "check_root_arg", "takes_root", "need_torch", "add_collective_args", "add_accumulate_option",
           "positive_int", "nonnegative_int", "seconds_arg", "widths_arg", "size_arg",
           "count_arg", "size_list", "int_list", "name_list", "checked", "nonnegative",
           "Parser"]


# -- output ---------------------------------------------------------------------------------------

def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
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
    grid = Table(title=title, title_justify="left")
    for i, h in enumerate(headers):
        grid.add_column(str(h), justify="left" if i == 0 or len(headers) == 2 else "right",
                        no_wrap=len(headers) > 2)
    for r in rows:
        grid.add_row(*(str(c) for c in r))
    console = Console()
    if not console.is_terminal or _unknown_width():
        # piped, captured, or a pty without a size (mpirun's): never squeeze numbers into 80
        # wide tables (ringccl model) get the width their rows need
        widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
        console = Console(width=max(console.width, 160, sum(widths) + 3 * len(widths) + 1),
                          force_terminal=False)  # and no colour codes in a log
    console.print(grid)


def _unknown_width() -> bool:
    """True on a terminal that reports 0 columns (mpirun gives its processes such a pty)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns == 0
    except (OSError, ValueError, AttributeError):  # not a terminal, or no fileno (captured)
        return False


def status(message: str):
    """A spinner while something slow runs (rich), or a plain line."""
    try:
        from rich.console import Console
        return Console(stderr=True).status(message)
    except ImportError:
        print(message, file=sys.stderr)
        return contextlib.nullcontext()


def progress(total: int, description: str):
    """(context manager, advance(row) callback): a rich progress bar on stderr, or nothing."""
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


def check_call(args, world_size: int, dtype: np.dtype, op, params: dict) -> None:
    """Refuse what the simulator or the workers would refuse, before any input is made or any
    process started: op × dtype, --accumulate-dtype (normalized in place: "f4" -> "float32"),
    the root (named as the user gave it), the builder parameters."""
    spec = get_collective(args.collective)
    if spec.reduces:
        check_op_dtype(op, dtype)
    args.accumulate_dtype = check_accumulate_dtype(args.accumulate_dtype, dtype, args.collective,
                                                   spec.reduces, "--accumulate-dtype")
    check_root_arg(args, params, world_size)
    build_schedule(args.collective, args.algorithm, world_size, **params)


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


# -- argparse types ------------------------------------------------------------------------------

#: a value that starts like a negative number (-1MiB, -1us, -.5): argparse alone takes these for
#: options, unless they are plain numbers (-1, -0.5), and answers "expected one argument"
_NEGATIVE = re.compile(r"-\.?\d")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that reads ``--size -1MiB`` as the option and its (negative) value, so
    the option's type can refuse it by name ("argument --size/-s: '-1MiB' is negative: a size
    must be > 0") instead of argparse's "expected one argument". Subparsers are of this class
    too (argparse makes them of the parent's class)."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(self._attach_negative_values(args), namespace)

    def _attach_negative_values(self, args: list[str]) -> list[str]:
        """``[--size, -1MiB]`` -> ``[--size=-1MiB]`` for this parser's options that take one
        value (the form argparse reads as a value whatever it looks like)."""
        takes_value = {opt: action for action in self._actions if action.nargs is None
                       and action.option_strings for opt in action.option_strings}
        out, i = [], 0
        while i < len(args):
            token = args[i]
            if token == "--":
                out.extend(args[i:])
                break
            action = takes_value.get(token)
            if (action is not None and i + 1 < len(args) and _NEGATIVE.match(args[i + 1])
                    and args[i + 1] not in self._option_string_actions):
                long = next((o for o in action.option_strings if o.startswith("--")), None)
                out.append(f"{long}={args[i + 1]}" if long else token + args[i + 1])
                i += 2
                continue
            out.append(token)
            i += 1
        return out


def _refuse_negative(text: str, noun: str, allowed: str) -> None:
    """ArgumentTypeError naming ``text`` when it is negative: "count '-1' is negative: must be
    >= 0 elements" (``noun``: what the value is; ``allowed``: what it must be)."""
    if str(text).strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"{noun} {text!r} is negative: must be {allowed}")


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


def size_arg(text: str) -> int:
    """Bytes: ``4KiB``, ``4KB``, ``4096`` (argparse type; >= 0)."""
    _refuse_negative(text, "size", ">= 0 bytes (e.g. 4096, 4KiB, 1MiB)")
    try:
        return units.size(text)
    except RingcclError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def count_arg(text: str) -> int:
    """Elements: ``1M`` = 10^6, ``1Mi`` = 2^20 (argparse type; >= 0)."""
    _refuse_negative(text, "count", ">= 0 elements (e.g. 1000, 1M, 1Mi)")
    try:
        return units.count(text)
    except RingcclError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_list(text: str) -> list[float]:
    """``4KiB:1GiB`` (powers of two between), ``4KiB:1GiB:4`` (factor 4), or ``1KiB,4MiB``;
    every size > 0."""
    for part in re.split("[:,]", text)[:2] if ":" in text else text.split(","):
        _refuse_negative(part, "size", "> 0 bytes (e.g. 4KiB, 1MiB, 4KiB:1GiB)")
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


def int_list(text: str) -> list[int]:
    """``8,64,1024``: integers >= 1 (argparse type)."""
    return [positive_int(s) for s in text.split(",") if s.strip()]


def name_list(text: str) -> list[str]:
    """``ring,direct``: comma-separated names."""
    return [s.strip() for s in text.split(",") if s.strip()]


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


def add_accumulate_option(p, note: str = "") -> None:
    """--accumulate-dtype, checked by :func:`check_call` (ringccl.ops.check_accumulate_dtype)."""
    p.add_argument("--accumulate-dtype", metavar="DTYPE", default=None,
                   help="reducing collectives (all_reduce, reduce_scatter, reduce) on a floating "
                   "--dtype: hold the working buffer in this floating dtype, at least as wide "
                   "(float16 inputs: float16, float32 or float64; float32: float32 or float64; "
                   "float64: float64), so each result is rounded to --dtype once; what travels "
                   "is then this dtype's bytes. Default: reduce in --dtype." + note)
