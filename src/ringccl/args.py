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
(a preset, a recipe) from a table.
"""

from __future__ import annotations

import numpy as np

from .errors import ArgumentError, ArgumentTypeError

__all__ = ["check_int", "check_rank", "lookup"]


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(value, argument: str, minimum: int | None = 0) -> int:
    """``value`` as an ``int`` >= ``minimum`` (None: no lower bound).

    Raises:
        ArgumentTypeError: not an integer (bool and float are refused).
        ArgumentError: below ``minimum``.
    """
    bound = "" if minimum is None else f" >= {minimum}"
    if not _is_int(value):
        raise ArgumentTypeError(f"{argument}={value!r} must be an integer{bound}, got "
                                f"{type(value).__name__}")
    if minimum is not None and value < minimum:
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
