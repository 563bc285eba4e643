"""Argument checks shared by every entry point (simulator, schedules, cost model, torch, MPI, CLI).

One rule for integers everywhere: Python ``int`` and numpy integers (``np.int64(3)``) are
accepted and returned as ``int``; ``bool`` (also ``np.bool_``), floats (even ``2.0``), strings
and everything else are refused with :class:`~ringccl.errors.ArgumentTypeError`. A value out of
range raises :class:`~ringccl.errors.ArgumentError`. Every message names the argument, its value
and what is allowed.

The other checks live next to what they check: ``ringccl.collectives.get_collective`` (unknown
collective), ``ringccl.algorithms.get_algorithm`` (unknown algorithm), ``ringccl.ops.parse_op``,
``check_dtype`` and ``check_op_dtype`` (ops and dtypes), ``ringccl.collectives.split_sizes``
(all_to_all split sizes of the simulator). :func:`lookup` is the one way to take a named entry
(a preset, a recipe) from a table. :func:`output_problem` (and :func:`check_output_path`) is the
one check of a file a command or a run will write when it is done, made before the work.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from .errors import ArgumentError, ArgumentTypeError

__all__ = ["check_int", "check_rank", "lookup", "output_problem", "check_output_path",
           "not_text", "image_format", "HTML_SUFFIXES", "IMAGE_SUFFIXES", "JSON_SUFFIXES"]

#: suffixes of a page a browser opens
HTML_SUFFIXES = (".html", ".htm")
#: the suffix of a JSON file a command writes (a step file, a profile)
JSON_SUFFIXES = (".json",)
#: suffixes matplotlib writes (its format follows the suffix; "": no suffix, written as PNG)
IMAGE_SUFFIXES = (".png", ".svg", ".svgz", ".pdf", ".ps", ".eps", ".pgf", ".jpg", ".jpeg",
                  ".tif", ".tiff", ".webp", ".raw", ".rgba", "")


def image_format(path) -> str | None:
    """matplotlib's ``savefig(format=)`` for ``path``: None (the suffix decides), or "png" for a
    name without a suffix, which savefig would otherwise write to ``path + ".png"``."""
    return None if os.path.splitext(str(path))[1] else "png"


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(value, argument: str, minimum: int | None = 0,
              maximum: int | None = None) -> int:
    """``value`` as an ``int`` >= ``minimum`` (None: no lower bound) and <= ``maximum`` (None:
    no upper bound).

    Raises:
        ArgumentTypeError: not an integer (bool and float are refused).
        ArgumentError: below ``minimum`` or above ``maximum``.
    """
    if maximum is None:
        bound = "" if minimum is None else f" >= {minimum}"
    else:
        bound = f" <= {maximum}" if minimum is None else f" in [{minimum}, {maximum}]"
    if not _is_int(value):
        raise ArgumentTypeError(f"{argument}={value!r} must be an integer{bound}, got "
                                f"{type(value).__name__}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ArgumentError(f"{argument}={value!r} must be an integer{bound}")
    return int(value)


def check_rank(value, world_size: int, argument: str = "root") -> int:
    """``value`` as an ``int`` rank in ``[0, world_size)`` (``argument``: root, src, dst, ...).

    Raises:
        ArgumentTypeError: not an integer.
        ArgumentError: out of range.
    """
    if not _is_int(value):
        raise ArgumentTypeError(f"{argument}={value!r} must be an integer rank in "
                                f"[0, {world_size}), got {type(value).__name__}")
    if not 0 <= value < world_size:
        raise ArgumentError(f"{argument}={int(value)} is out of range for world_size={world_size}; "
                            f"{argument} must be an integer rank in [0, {world_size})")
    return int(value)


def lookup(table, name, argument: str, what: str, hint: str = "", lower: bool = False):
    """``table[name]`` (``name`` lower-cased first with ``lower``) for a name a caller gave.

    Raises:
        ArgumentError: ``name`` is no key of ``table`` (or not hashable): "``argument``=``name``
            is not ``what``; expected one of" the keys, then ``hint``.
    """
    key = name.lower() if lower and isinstance(name, str) else name
    try:
        return table[key]
    except (KeyError, TypeError):
        raise ArgumentError(f"{argument}={name!r} is not {what}; expected one of "
                            f"{', '.join(table)}{hint}") from None


def output_problem(path: str, suffixes: Sequence[str] = (), what: str = "a file") -> str | None:
    """Why no file can be written at ``path``, as words that follow the path in a message
    (``": directory '/x' does not exist"``), or None: an empty name, its directory missing or
    not writable, the path a directory, (``suffixes`` given; ``""``: no suffix) another
    suffix, the file being ``what`` ("an image"), or a file this process cannot open for
    writing there (/proc, a read-only file: it is opened to append, and removed again when
    the check created it, so an existing file is left as it was)."""
    if not str(path).strip():
        return " is no file name"
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return " is a directory; give a file name in it"
    if not os.path.isdir(directory):
        return f": directory {directory!r} does not exist"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f": directory {directory!r} is not writable"
    if suffixes and os.path.splitext(path)[1].lower() not in suffixes:
        listed = ", ".join(x or "no suffix" for x in suffixes)
        return f" is written as {what}: its name must end in {listed}"
    existed = os.path.lexists(path)
    try:  # O_APPEND: an existing file is left as it is; O_NONBLOCK: a FIFO does not block
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK))
    except OSError as exc:
        return f": cannot write it ({exc.strerror})"
    if not existed:
        try:
            os.unlink(path)
        except OSError:
            pass
    return None


def check_output_path(path, argument: str, suffixes: Sequence[str] = (),
                      what: str = "a file") -> str:
    """``path`` if a file can be written there (:func:`output_problem`).

    Raises:
        ArgumentTypeError: not a path. ArgumentError: ``"{argument}={path!r}"`` and the problem.
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ArgumentTypeError(f"{argument}={path!r} must be a file path")
    path = os.fspath(path)
    problem = output_problem(path, suffixes, what)
    if problem:
        raise ArgumentError(f"{argument}={path!r}{problem}")
    return path


def not_text(exc: UnicodeDecodeError) -> str:
    """Why a file read as text is none: its first byte that is not UTF-8."""
    return (f"a binary file, not text: byte {exc.object[exc.start]:#04x} at offset {exc.start} "
            "is not UTF-8")
