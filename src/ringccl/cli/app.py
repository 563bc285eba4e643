"""The top-level parser, the dispatch to a command, and the mapping of errors to exit codes.

Each command group registers its own subparser (``register*`` in :mod:`.schedules`,
:mod:`.simulate`, :mod:`.run`, :mod:`.model`, :mod:`.train`, :mod:`.demo`, :mod:`.moe`,
:mod:`.replay`, :mod:`.explore`); :data:`COMMANDS` lists them in the order ``ringccl --help``
shows them.

Global options: ``--version``; ``--import MODULE`` (repeatable; a module name or a ``.py`` path,
also ``$RINGCCL_IMPORT``, comma-separated) imports the user's modules before the command runs,
so the algorithms they register can be named everywhere (:mod:`ringccl.plugins`). The parser
is :class:`.common.Parser`, which reads ``--size -1MiB`` as an option and its value.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata
from typing import Sequence

from .. import __version__, plugins
from ..errors import RingcclError
from . import (calibrate, demo, explore, model, moe, network, replay, run, schedules, simulate,
               train)
from . import plan as plan_cmd
from .common import Parser
from .interrupt import interrupted

__all__ = ["build_parser", "main", "COMMANDS", "version"]

#: (command, registers its subparser) in ``ringccl --help`` order
COMMANDS = (("demo", demo.register), ("show", schedules.register_show),
            ("compare", schedules.register_compare), ("simulate", simulate.register),
            ("run", run.register_run), ("bench", run.register_bench),
            ("fit", model.register_fit), ("algorithms", schedules.register_algorithms),
            ("train", train.register), ("model", model.register_model),
            ("tune", model.register_tune), ("nccl", network.register_nccl),
            ("calibrate", calibrate.register),
            ("plan", plan_cmd.register),
            ("moe", moe.register), ("replay", replay.register),
            ("explore", explore.register))


def version() -> str:
    """The installed distribution's version (importlib.metadata), else ``ringccl.__version__``
    (a source tree on PYTHONPATH that was never installed)."""
    try:
        return metadata.version("ringccl")
    except metadata.PackageNotFoundError:
        return __version__


def build_parser() -> argparse.ArgumentParser:
    """The ``ringccl`` parser: one subparser per command, each with ``func`` its handler."""
    parser = Parser(
        prog="ringccl", description="Collective-communication algorithms as data: see, check, "
        "simulate and run them.")
    parser.add_argument("--version", action="version", version=f"ringccl {version()}")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        metavar="MODULE",
                        help="import this module (a name on PYTHONPATH, or a path to a .py "
                        "file) before the command runs, so the algorithms it registers can be "
                        "named with --algorithm; repeatable. Worker processes import it too "
                        f"(through ${plugins.ENV_VAR}, comma-separated, which is also read "
                        "when set by hand)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for _, register in COMMANDS:
        register(sub)
    return parser


#: the options that size each command's work, named when it runs out of memory (default:
#: the count and the world size)
_SIZE_FLAGS = {"plan": "--seq-length, --global-batch-size or --gpus",
               "moe": "--tokens, --hidden-size, --ffn-hidden-size or --experts",
               "train": "--hidden or --batch-size", "run": "-c/--count or -n/--nproc",
               "bench": "-e/--maxbytes or --nproc", "replay": "--max-bytes or --nproc",
               "calibrate": "--memory-bytes, --seq-length, --hidden-size or "
                            "--micro-batch-size"}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ringccl`` command; returns the exit code.

    0: done (and every check passed); 1: a check failed (a wrong element, a simulation that
    differs from numpy, training modes that disagree); 2: bad input or a failure, reported as
    one ``ringccl: error:`` line on stderr (RingcclError, MemoryError, OSError); argparse's own
    usage errors also exit with 2; 130: interrupted (Ctrl-C, SIGINT; SIGTERM during a launch),
    reported as one ``interrupted:`` line, no traceback (the commands that start processes
    print what was measured before it and say so themselves).
    """
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except RingcclError as exc:
        print(f"ringccl: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError as exc:
        print(f"ringccl: error: not enough memory ({exc or 'MemoryError'}); use a smaller "
              f"{_SIZE_FLAGS.get(args.command, '-c/--count or -N/--world-size')}",
              file=sys.stderr)
        return 2
    except BrokenPipeError:  # ``ringccl algorithms | head -1``: the reader has gone; say nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit would raise again
        return 141  # 128 + SIGPIPE, what the shell reports for a writer killed by the pipe
    except OSError as exc:  # an output path that cannot be written, ...
        print(f"ringccl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # anywhere: simulate's numpy loop, importing torch, a launch
        return interrupted(f"ringccl {args.command} stopped before it finished")


def _run(args) -> int:
    """Import the user's modules (``$RINGCCL_IMPORT``, then ``--import``), then run the command.

    The environment variable is set to every module imported here, files as absolute paths, so
    that the workers ``run``/``bench``/``train`` start (they inherit the environment, whatever
    their working directory) import the same ones before building any schedule.
    """
    specs = plugins.parse_env(os.environ.get(plugins.ENV_VAR)) + list(args.imports)
    if specs:
        plugins.import_user_modules(specs)
        os.environ[plugins.ENV_VAR] = ",".join(dict.fromkeys(
            os.path.abspath(os.path.expanduser(s)) if plugins.is_file_spec(s) else s
            for s in specs))
    return args.func(args)
