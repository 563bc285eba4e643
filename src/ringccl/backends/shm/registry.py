"""Every group's shared memory on this rank, kept between calls: one registry for all backends.

A backend sets a group's shared memory up on its first call over it (a collective exchange
through the group) and finds it here on the next ones, under a ``kind`` of its own ("torch" for
torch.distributed groups, "owned" for groups whose owner frees them, the torch.distributed
backend's; "mpi" for communicators, "hybrid" for the hybrid transport's host groups) and a
``key`` (``id`` of the group object, with the object as ``owner``, so a new object that reuses
an old id is not mistaken for it; or a handle, MPI's ``py2f``, with no owner). An owner is
held by a weak reference only: a group kept alive past ``destroy_process_group`` would keep
gloo's threads running into the interpreter's exit, where one that releases a finished
operation's tensors after finalization began aborts the process; :func:`forget_with_owner`
frees a group's memory when its object goes.
``ringccl.clear_caches()`` closes every one (:func:`release_shm`); the zero-copy arrays
(``shm_empty``) stay valid memory, their views hold the mapping exported.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import numpy as np

from ... import caches
from ...args import check_int
from ...errors import ArgumentTypeError
from .group import ShmGroup, check_platform
from .transport import ShmTransport

__all__ = ["find", "setup", "keep", "forget_with_owner", "groups", "release", "release_shm",
           "release_dead", "allocate", "check_shape"]

_states: dict = {}   # (kind, key) -> (weak reference to the owner, ShmGroup, transport)
_lock = threading.Lock()


def _no_owner() -> None:
    return None


def _ref(owner: Any) -> Callable[[], Any]:
    """``owner`` as a weak reference (None: a callable returning None)."""
    return _no_owner if owner is None else weakref.ref(owner)


def find(kind: str, key: Any, owner: Any = None) -> tuple | None:
    """``(ShmGroup, transport)`` kept under ``(kind, key)`` for ``owner`` (the object kept
    with it; None for a handle), or None (none yet, released, or closed)."""
    hit = _states.get((kind, key))
    if hit is not None and hit[0]() is owner and not hit[1].closed:
        return hit[1], hit[2]
    return None


def setup(kind: str, key: Any, owner: Any, rank: int, world_size: int,
          exchange: Callable[[Any], list], timeout: float,
          peer_name: Callable[[int], str] = str) -> tuple:
    """Set up and keep the shared memory of a group (collective: ``exchange`` is the group's
    all-gather of a small object) under ``(kind, key)``: ``(ShmGroup, ShmTransport)``.

    Raises:
        BackendError: not x86-64, or the set-up failed (ShmSpaceError: the shared-memory
            directory is too small: the message names the bytes needed and available).
    """
    check_platform()
    state = ShmGroup(rank, world_size, exchange, timeout)
    transport = ShmTransport(state, peer_name)
    keep(kind, key, owner, state, transport)
    return state, transport


def keep(kind: str, key: Any, owner: Any, state: ShmGroup, transport: Any) -> None:
    """Keep ``(state, transport)`` under ``(kind, key)`` (a transport built on ``state``: the
    shared-memory one, or the hybrid one)."""
    with _lock:
        _states[kind, key] = (_ref(owner), state, transport)


def forget_with_owner(kind: str, key: Any, owner: Any) -> None:
    """Close and forget what is kept under ``(kind, key)`` when ``owner`` is collected (a
    torch.distributed group's end: ``destroy_process_group`` dropping its last reference)."""
    weakref.finalize(owner, _forget, kind, key)


def _forget(kind: str, key: Any) -> None:
    """The finalizer of an owner: drop and close the state kept for it."""
    with _lock:
        hit = _states.get((kind, key))
        if hit is None or hit[0]() is not None:   # gone already, or the id is another's now
            return
        del _states[kind, key]
    _close(hit)


def groups(kind: str | None = None) -> list[ShmGroup]:
    """The group states kept (under ``kind``, or all)."""
    with _lock:
        return [hit[1] for k, hit in _states.items() if kind is None or k[0] == kind]


def _close(hit: tuple) -> None:
    _, state, transport = hit
    close = getattr(transport, "close", None)   # the hybrid transport's helper thread
    if close is not None:
        close()
    state.close()


def release(kind: str, key: Any, owner: Any = None) -> None:
    """Close and forget the shared memory under ``(kind, key)`` (``owner``'s), if any (its
    owner's teardown: ``destroy_process_group`` of a ringccl-backend group)."""
    with _lock:
        hit = _states.get((kind, key))
        if hit is None or hit[0]() is not owner:
            return
        del _states[kind, key]
    _close(hit)


def release_dead(kind: str, live: set) -> None:
    """Close the shared memory of ``kind``'s groups whose key is not in ``live`` (torch.
    distributed groups destroyed since: their objects are gone from torch's map)."""
    with _lock:
        dead = [_states.pop(key) for key in [k for k in _states if k[0] == kind
                                             and k[1] not in live]]
    for hit in dead:
        _close(hit)


@caches.register
def release_shm(kind: str | None = None) -> None:
    """Close every group's shared memory on this rank (``kind``: only those kept under it),
    ``ringccl.clear_caches``. Collective in effect: call it on every rank of a group between
    the same two collectives (the next call sets the group's shared memory up again, a
    collective exchange)."""
    with _lock:
        keys = [k for k in _states if kind is None or k[0] == kind]
        hits = [_states.pop(k) for k in keys]
    for hit in hits:
        _close(hit)


def check_shape(shape, sequences: tuple = (tuple, list)) -> tuple:
    """``shm_empty``'s ``shape``: an int or a sequence (``sequences``) of ints >= 0, as a
    tuple.

    Raises:
        ArgumentTypeError, ArgumentError: naming ``shape``.
    """
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    if not isinstance(shape, sequences):
        raise ArgumentTypeError(f"shape={shape!r} must be an int or a tuple of ints")
    return tuple(check_int(n, "shape", minimum=0) for n in shape)


def allocate(state: ShmGroup, count: int, itemsize: int, what: str) -> np.ndarray:
    """``count`` elements of ``itemsize`` bytes in this rank's slot of ``state``'s zero-copy
    area (``shm_empty``), as a uint8 numpy array of just those bytes, 64-byte aligned: its
    storage is its own bytes (not the whole segment: pickling, ``torch.save``), and the view
    holds the mapping exported, so closing the segment (``clear_caches``) leaves it valid
    memory (an array from ``torch.frombuffer`` on the mapping would not be). Collective: every
    rank asks for the same sizes in the same order (``what`` names the call in errors)."""
    nbytes = -(-count * itemsize // 64) * 64
    serial, offset = state.allocate(nbytes, what)
    return np.frombuffer(state.segments[serial].map, dtype=np.uint8, count=nbytes, offset=offset)
