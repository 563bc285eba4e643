"""ringccl's environment variables as a call reads them: :func:`get`, ``os.environ.get`` without
its per-read cost.

Every collective reads a few variables (``RINGCCL_DEBUG``, ``RINGCCL_TIMEOUT``,
``RINGCCL_ALGO``, ``RINGCCL_TRANSPORT``) so that a change between two calls takes effect at the
next one. ``os.environ.get`` encodes the name and decodes the value on every read (~0.7 µs
each on this project's test machine, several per call); where CPython keeps the mapping behind
``os.environ`` (POSIX: bytes keys and values, updated by every ``os.environ`` assignment and
deletion) :func:`get` reads it directly, decoding only a value that is set. Elsewhere it is
``os.environ.get``.
"""

from __future__ import annotations

import os
from typing import Callable

__all__ = ["get", "reader", "mapping", "encoded"]

_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None
if not isinstance(_DATA, dict) or not isinstance(next(iter(_DATA), b""), bytes):
    _DATA = None
_KEYS: dict = {}


def get(name: str) -> str | None:
    """The value of environment variable ``name`` now (as ``os.environ.get(name)``)."""
    if _DATA is None:
        return os.environ.get(name)
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = os.fsencode(name)
    value = _DATA.get(key)
    return None if value is None else os.fsdecode(value)


def reader(names: tuple) -> Callable[[], tuple]:
    """A function returning the values of the variables ``names`` now, undecoded (bytes on
    POSIX, str elsewhere; None where unset): a cheap key of their state (a compiled call's
    signature includes it)."""
    if _DATA is None:
        get_ = os.environ.get
        return lambda: tuple(get_(n) for n in names)
    keys, get = encoded(names), _DATA.get
    # a tuple display costs half of tuple(map(...)) (a compiled call reads it every time)
    if len(keys) == 1:
        (a,) = keys
        return lambda: (get(a),)
    if len(keys) == 2:
        a, b = keys
        return lambda: (get(a), get(b))
    if len(keys) == 5:
        a, b, c, d, e = keys
        return lambda: (get(a), get(b), get(c), get(d), get(e))
    return lambda: tuple(map(get, keys))


def mapping() -> dict | None:
    """The mapping behind ``os.environ`` that :func:`get` reads (bytes keys and values), or
    None where it is not readable (then only ``os.environ`` is)."""
    return _DATA


def encoded(names: tuple) -> tuple:
    """``names`` as :func:`mapping`'s keys."""
    return tuple(os.fsencode(n) for n in names)
