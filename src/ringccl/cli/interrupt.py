"""The one line and the exit code of an interrupted command (Ctrl-C, SIGINT or SIGTERM). A
module of its own, importing nothing of ringccl, so the entry point (:mod:`ringccl.cli`) can
print the line while the command's modules are still loading."""

from __future__ import annotations

import sys

__all__ = ["INTERRUPTED", "interrupted"]

#: exit code after an interrupt (Ctrl-C, SIGINT or SIGTERM), as shells report a SIGINT death
INTERRUPTED = 130


def interrupted(what: str) -> int:
    """Print the one line of an interrupted command (``interrupted: <what>``) on stderr and
    return :data:`INTERRUPTED` (130)."""
    print(f"interrupted: {what}", file=sys.stderr, flush=True)
    return INTERRUPTED
