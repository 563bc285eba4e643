"""How far a long command is, on stderr: a rich bar on a terminal; in a pipe or a log file (CI,
``nohup``, a batch job's output) one plain line at most every :data:`LOG_EVERY_S` seconds, and
none for a run shorter than that, so a log shows a long search or sweep is alive and where it is.

Usage::

    with Progress() as shown:
        task = shown.task("searching layouts", total=len(layouts))
        for ...:
            task.update(advance=1, last="tp 8 pp 4")

The lines read ``searching layouts: 120/1,317 (9%), 10 s, tp 8 pp 4``. stdout is left to the
command's table or JSON.
"""

from __future__ import annotations

import contextlib
import sys
import time

__all__ = ["Progress", "Task", "LOG_EVERY_S"]

#: seconds between two lines of progress when stderr is not a terminal
LOG_EVERY_S = 10.0


class Task:
    """One counted piece of work of a :class:`Progress` (created by :meth:`Progress.task`)."""

    def __init__(self, owner: Progress, description: str, total: int | None, key):
        self.owner, self.description, self.total, self.key = owner, description, total, key
        self.completed, self.last = 0, ""

    def update(self, *, completed: int | None = None, advance: int = 0,
               total: int | None = None, last: str | None = None) -> None:
        """Set ``completed`` (or add ``advance``), the ``total`` when it becomes known, and
        ``last``: a few words on the item just done."""
        self.completed = (self.completed if completed is None else completed) + advance
        if total is not None:
            self.total = total
        if last is not None:
            self.last = last
        self.owner._show(self)


class Progress:
    """Progress on stderr (module doc); a context manager. Nothing is shown when ``enabled`` is
    false (the command's own ``--json`` runs, say, where the caller chooses so).

    Args:
        enabled: show anything at all.
        stream: where lines go when it is no terminal (default: ``sys.stderr`` when entered).
        every: seconds between two lines there (default :data:`LOG_EVERY_S`).
        clock: seconds, monotonic (tests pass their own).
        terminal: force the kind of output (default: a rich bar when rich is installed and
            stderr is a terminal).
    """

    def __init__(self, enabled: bool = True, *, stream=None, every: float | None = None,
                 clock=time.monotonic, terminal: bool | None = None):
        self.enabled, self.stream, self.clock = enabled, stream, clock
        self.every = LOG_EVERY_S if every is None else every
        self.bar = None
        self._context = contextlib.nullcontext()
        if enabled and (terminal if terminal is not None else _stderr_is_terminal()):
            self.bar = _rich_bar()
            self._context = self.bar if self.bar is not None else self._context
        self._start = self._printed = None

    def __enter__(self) -> Progress:
        self._start = self._printed = self.clock()
        self._context.__enter__()
        return self

    def __exit__(self, *exc) -> bool | None:
        return self._context.__exit__(*exc)

    def task(self, description: str, total: int | None = None) -> Task:
        """A new counted piece of work (``total`` may come later, with ``update``)."""
        key = None
        if self.bar is not None:
            key = self.bar.add_task(description, total=total, last="")
        return Task(self, description, total, key)

    def _show(self, task: Task) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(task.key, completed=task.completed, total=task.total,
                            last=task.last)
            return
        now = self.clock()
        if self._start is None:     # used without ``with``: time from the first update
            self._start = self._printed = now
        if now - self._printed < self.every:
            return
        self._printed = now
        done = f"{task.completed:,}"
        if task.total:
            done += f"/{task.total:,} ({100 * task.completed // task.total}%)"  # 100% when done
        line = f"{task.description}: {done}, {now - self._start:.0f} s"
        stream = self.stream or sys.stderr
        print(line + (f", {task.last}" if task.last else ""), file=stream, flush=True)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):    # replaced or closed
        return False


def _rich_bar():
    try:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, TextColumn,
                                   TimeElapsedColumn)
        from rich.progress import Progress as RichProgress
    except ImportError:
        return None
    console = Console(stderr=True)
    if not console.is_terminal:
        return None
    return RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("{task.fields[last]}"),
                        console=console, transient=True)
