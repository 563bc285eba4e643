"""The top-level parser, the dispatch to a command, and the mapping of errors to exit codes.

Each command group registers its own subparser (``register*`` in :mod:`.schedules`,
:mod:`.simulate`, :mod:`.run`, :mod:`.model`, :mod:`.train`, :mod:`.demo`); :data:`COMMANDS` lists
them in the order ``ringccl --help`` shows them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..errors import RingcclError
from . import demo, model, run, schedules, simulate, train
from . import plan as plan_cmd

__all__ = ["build_parser", "main", "COMMANDS"]

#: (command, registers its subparser) in ``ringccl --help`` order
COMMANDS = (("demo", demo.register), ("show", schedules.register_show),
            ("compare", schedules.register_compare), ("simulate", simulate.register),
            ("run", run.register_run), ("bench", run.register_bench),
            ("fit", model.register_fit), ("algorithms", schedules.register_algorithms),
            ("train", train.register), ("model", model.register_model),
            ("tune", model.register_tune), ("plan", plan_cmd.register))


def build_parser() -> argparse.ArgumentParser:
    """The ``ringccl`` parser: one subparser per command, each with ``func`` its handler."""
    parser = argparse.ArgumentParser(
        prog="ringccl", description="Collective-communication algorithms as data: see, check, "
        "simulate and run them.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for _, register in COMMANDS:
        register(sub)
    return parser


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
    except KeyboardInterrupt:  # anywhere: simulate's numpy loop, importing torch, a launch
        print(f"interrupted: ringccl {args.command} stopped before it finished",
              file=sys.stderr, flush=True)
        return 130
