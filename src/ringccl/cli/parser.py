"""The command line's ArgumentParser (:class:`Parser`, which :mod:`.common` re-exports): one-line
errors, and values that look like negative numbers read as values."""

from __future__ import annotations

import argparse
import re
import sys

__all__ = ["Parser"]


#: a value that starts like a negative number (-1MiB, -1us, -.5): argparse alone takes these for
#: options, unless they are plain numbers (-1, -0.5), and answers "expected one argument"
_NEGATIVE = re.compile(r"-\.?\d")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that reads ``--size -1MiB`` as the option and its (negative) value, so
    the option's type can refuse it by name ("argument --size/-s: '-1MiB' is negative: a size
    must be > 0") instead of argparse's "expected one argument". Subparsers are of this class
    too (argparse makes them of the parent's class)."""

    def error(self, message: str):
        """One line, as every other CLI error (argparse prints its usage block first), with
        where to look: ``ringccl show: error: argument --world-size/-N: 0 must be >= 1 (see
        ringccl show --help)``."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

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
