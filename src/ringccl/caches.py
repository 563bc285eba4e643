"""One cache story: every memo table of ringccl registers here, and :func:`clear_caches` empties
them all.

Schedules, layouts, per-rank plans and compiled dataflow programs are pure functions of their
arguments, so they are memoized (:func:`memoize`, an ``functools.lru_cache`` that registers
itself, or with ``maxbytes`` a table bounded by its values' bytes too); buffers kept between
calls (staging, backups) register their own clear function with :func:`register`. Nothing here
is collective: freeing per-communicator state (MPI duplicates) stays with the backend's
``release_buffers``, which calls :func:`clear_caches`.
"""

from __future__ import annotations

import collections
import functools
import threading
from typing import Callable, TypeVar

__all__ = ["memoize", "register", "clear_caches", "CacheInfo"]

F = TypeVar("F", bound=Callable)

_clearers: list[Callable[[], None]] = []

#: what ``cache_info()`` of a table bounded by bytes returns: ``functools.lru_cache``'s four
#: counters, then its byte budget and the bytes its values hold (as last measured)
CacheInfo = collections.namedtuple("CacheInfo",
                                   "hits misses maxsize currsize maxbytes currbytes")


def register(clear: Callable[[], None]) -> Callable[[], None]:
    """Add ``clear`` (no arguments) to what :func:`clear_caches` calls; returns it."""
    _clearers.append(clear)
    return clear


def memoize(maxsize: int | None = 128, *, maxbytes: int | Callable[[], int] | None = None,
            nbytes: Callable[[object], int] | None = None) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)`` whose table :func:`clear_caches` empties.

    With ``maxbytes`` (and ``nbytes``, the bytes a value holds), the table is also bounded by
    the bytes of its values: a count alone does not bound memory when a value's size depends
    on the arguments (a schedule's arrays grow as world_size², 285 MB for ring all_gather on
    4,096 ranks). See :func:`_memoize_bytes`.
    """
    if maxbytes is not None:
        if nbytes is None:
            raise TypeError("memoize(maxbytes=...) needs nbytes=, the bytes a value holds")
        return lambda fn: _memoize_bytes(fn, maxsize, maxbytes, nbytes)

    def decorate(fn: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        register(cached.cache_clear)
        return cached
    return decorate


_KWARGS = object()  # separates positional from keyword arguments in a key


def _memoize_bytes(fn: F, maxsize: int | None, maxbytes: int | Callable[[], int],
                   nbytes: Callable[[object], int]) -> F:
    """``fn`` memoized by its arguments (keys as ``functools.lru_cache``'s: equal arguments
    hit, an unhashable one raises TypeError; a raised exception is not kept), keeping the
    most recently used values while there are at most ``maxsize`` of them and their
    ``nbytes`` add up to at most ``maxbytes`` (an int, or a function read at each insert, so
    a module constant can be changed after the decoration). A value beyond the whole budget
    is returned and not kept.

    Sizes are measured again at each insert, not only once: a value may grow after it is
    kept (a schedule memoizes its statistics on itself). A hit costs a lock and a dict
    lookup; the value is computed outside the lock (the library runs threads), and when two
    threads compute the same key, both get the value kept first.
    """
    table: collections.OrderedDict = collections.OrderedDict()   # key -> [value, bytes]
    lock = threading.Lock()
    counts = [0, 0, 0]   # hits, misses, bytes held (as last measured)
    budget = maxbytes if callable(maxbytes) else (lambda: maxbytes)

    @functools.wraps(fn)
    def cached(*args, **kwargs):
        key = args + (_KWARGS,) + tuple(kwargs.items()) if kwargs else args
        with lock:
            entry = table.get(key)   # TypeError for an unhashable argument, as lru_cache
            if entry is not None:
                table.move_to_end(key)
                counts[0] += 1
                return entry[0]
            counts[1] += 1
        value = fn(*args, **kwargs)
        size = int(nbytes(value))
        limit = int(budget())
        with lock:
            entry = table.get(key)
            if entry is not None:   # another thread kept it meanwhile: one object per key
                table.move_to_end(key)
                return entry[0]
            if size > limit:
                return value        # would push out everything else and still not fit
            total = size
            for held in table.values():
                held[1] = int(nbytes(held[0]))
                total += held[1]
            table[key] = [value, size]
            while table and (total > limit or (maxsize is not None and len(table) > maxsize)):
                total -= table.popitem(last=False)[1][1]
            counts[2] = total
        return value

    def cache_info() -> CacheInfo:
        with lock:
            return CacheInfo(counts[0], counts[1], maxsize, len(table), int(budget()), counts[2])

    def cache_clear() -> None:
        with lock:
            table.clear()
            counts[:] = [0, 0, 0]

    cached.cache_info = cache_info
    cached.cache_clear = cache_clear
    register(cache_clear)
    return cached


def clear_caches() -> None:
    """Forget every memoized schedule, layout, plan and program, and every buffer kept between
    calls (the next call rebuilds what it needs). Safe at any time between collectives; local to
    this process."""
    for clear in _clearers:
        clear()
