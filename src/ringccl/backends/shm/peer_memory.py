"""Sends read in place from the sender's own memory: one copy instead of two for large sends.

A shared-memory send normally copies its bytes into the sender's slot of a shared segment and
the receiver reads them there: every byte crosses memory twice. Linux lets a process read
another's memory directly (``process_vm_readv``, "cross memory attach", Linux 3.2): the
sender publishes the address of its bytes (a descriptor whose serial word is
:data:`PEER_MEMORY`), the receiver copies them into place (or reduces them block by block from
a cached buffer) in one pass, and the sender must not change them, nor end its call, before
the receiver released them. Open MPI's shared-memory transport uses the same mechanism for its
large messages (the ``vader``/``sm`` BTL's ``single_copy_mechanism``, "cma").

Who may read whom is the kernel's ptrace access check (same user, and Yama's
``ptrace_scope``, or a container's seccomp profile): each rank probes every peer once, at the
group's set-up (:func:`probe`), and publishes whether it could read them all; a rank sends in
place only in a group whose every rank said so. The compiled lane's C loop sends this way
(sends of at least :data:`MIN_BYTES`); every receiver understands such a descriptor: the C
loop, the lane's Python replay and the general path (:func:`read`).
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
from typing import Any

import numpy as np

__all__ = ["PEER_MEMORY", "MIN_BYTES", "read", "failure", "error", "probe", "probe_word",
           "address", "set_enabled", "enabled", "ReadError"]

#: a descriptor's serial word for bytes in the sender's own memory (shared segments' serials
#: are positive); the offset word is then the sender's address
PEER_MEMORY = -1

#: a send of at least this many bytes is read in place where the peers can (the lane's C
#: loop); below it the copy into the slot costs less than the system call and the page pinning.
#: Measured on 2 processes with every send read in place against every send copied (docs/shm.md,
#: "Single-copy sends: measured"): a 4 MiB all_reduce (2 MiB sends, in cache) 1,487 µs against
#: 1,444 copied, 16 MiB 4,443 against 6,834.
MIN_BYTES = 4 << 20

_state = {"enabled": True}
_MAGIC = 0x52494E47504D454D   # what a probe word holds (then the pid)


class ReadError(ConnectionError):
    """A peer's memory could not be read (it died, or its bytes went away)."""


class _IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_readv = getattr(_libc, "process_vm_readv", None)
if _readv is not None:
    _readv.restype = ctypes.c_ssize_t
    _readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong,
                       ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.c_ulong]

# this process's probe word: [magic, pid], at a fixed address for the process's life
_probe = np.array([_MAGIC, os.getpid()], dtype=np.int64)
_probe_pid = os.getpid()


def set_enabled(on: bool) -> None:
    """Send in place (where peers can read) or always through the slot (benchmarks' baseline;
    takes effect for lanes compiled afterwards: ``ringccl.clear_caches()``)."""
    _state["enabled"] = bool(on)


def enabled() -> bool:
    """Whether compiled lanes send large sends in place (:func:`set_enabled`)."""
    return _state["enabled"] and _readv is not None


def address(a: Any) -> int:
    """Where array ``a`` (numpy or torch, contiguous) starts in this process."""
    face = getattr(a, "__array_interface__", None)
    return face["data"][0] if face is not None else a.data_ptr()


def probe_word() -> int:
    """The address of this process's probe word (published at set-up, read by :func:`probe`)."""
    global _probe, _probe_pid
    if _probe_pid != os.getpid():   # a forked child: its own word
        _probe, _probe_pid = np.array([_MAGIC, os.getpid()], dtype=np.int64), os.getpid()
    return address(_probe)


def _readv_into(pid: int, at: int, nbytes: int, into: int) -> int:
    """0, or the errno of reading ``nbytes`` at ``at`` in process ``pid`` to ``into``."""
    if _readv is None:
        return _errno.ENOSYS
    while nbytes > 0:
        here, there = _IOVec(into, nbytes), _IOVec(at, nbytes)
        k = _readv(pid, ctypes.byref(here), 1, ctypes.byref(there), 1, 0)
        if k <= 0:
            return ctypes.get_errno() if k < 0 else _errno.EIO
        at, into, nbytes = at + k, into + k, nbytes - k
    return 0


def probe(pid: int, word: int) -> bool:
    """Whether this process can read process ``pid``'s probe word at ``word`` (and it is one)."""
    got = np.zeros(2, dtype=np.int64)
    if not word or _readv_into(pid, word, got.nbytes, address(got)):
        return False
    return int(got[0]) == _MAGIC and int(got[1]) == pid


def read(pid: int, at: int, into: Any, peer: str) -> Any:
    """Copy ``into``'s size in bytes from address ``at`` of process ``pid`` (rank ``peer``)
    into the contiguous array ``into``; returns it. Raises :class:`ReadError` naming the rank
    when the read fails (``ProcessLookupError``'s errno: the process is gone)."""
    e = _readv_into(pid, at, into.nbytes, address(into))
    if e:
        raise error(e, peer, pid)
    return into


def failure(pid: int, at: int, peer: str) -> ReadError:
    """The :class:`ReadError` of a read at address ``at`` of process ``pid`` (rank ``peer``)
    that failed elsewhere (the C loop): its errno found again by reading one byte there."""
    got = np.zeros(1, dtype=np.uint8)
    return error(_readv_into(pid, at, 1, address(got)) or _errno.EIO, peer, pid)


def error(e: int, peer: str, pid: int) -> ReadError:
    """The :class:`ReadError` for errno ``e`` reading rank ``peer`` (pid ``pid``)."""
    what = "is gone" if e == _errno.ESRCH else f"could not be read ({os.strerror(e)})"
    return ReadError(f"rank {peer} (pid {pid}) {what} while this rank read its send in place")
