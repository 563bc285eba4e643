"""One cache story: every memo table of ringccl registers here, and :func:`clear_caches` empties
them all.

Schedules, layouts, per-rank plans and compiled dataflow programs are pure functions of their
arguments, so they are memoized (:func:`memoize`, an ``functools.lru_cache`` that registers
itself); buffers kept between calls (staging, backups) register their own clear function with
:func:`register`. Nothing here is collective: freeing per-communicator state (MPI duplicates)
stays with the backend's ``release_buffers``, which calls :func:`clear_caches`.
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

__all__ = ["memoize", "register", "clear_caches"]

F = TypeVar("F", bound=Callable)

_clearers: list[Callable[[], None]] = []


def register(clear: Callable[[], None]) -> Callable[[], None]:
    """Add ``clear`` (no arguments) to what :func:`clear_caches` calls; returns it."""
    _clearers.append(clear)
    return clear


def memoize(maxsize: int = 128) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)`` whose table :func:`clear_caches` empties."""
    def decorate(fn: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        register(cached.cache_clear)
        return cached
    return decorate


def clear_caches() -> None:
    """Forget every memoized schedule, layout, plan and program, and every buffer kept between
    calls (the next call rebuilds what it needs). Safe at any time between collectives; local to
    this process."""
    for clear in _clearers:
        clear()
