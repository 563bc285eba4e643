"""Shared-memory transport for the ranks of a group on one host (backend-neutral: numpy, os and
mmap only; docs/shm.md).

* :mod:`~ringccl.backends.shm.segment`: POSIX shm files, space reserved up front, created/attached/
  unlinked so nothing outlives the group; the launcher's sweep for a SIGKILL in the window.
* :mod:`~ringccl.backends.shm.group`: one group's control block (monotone counters, abort word, call
  entry, growth) and bounded waits that notice a dead peer.
* :mod:`~ringccl.backends.shm.transport`: the engine's transport that reads receives in place.

A backend supplies only the set-up exchange (an all-gather of small objects), its array
dialect's views of the segment, and the decision to use it (every rank of the group on this
host: :func:`host_id`). ringccl.torch uses it for CPU tensors (``transport="auto"``).
"""

from __future__ import annotations

import os
import socket

from ... import environment
from ...errors import ArgumentError
from .group import ShmGroup, check_platform, process_alive, supported_platform
from .segment import SHM_DIR, Segment, ShmSpaceError, segment_name, shm_dir, sweep
from .transport import EAGER_AREA_BYTES, EAGER_SEND_BYTES, ShmTransport

__all__ = ["ShmGroup", "ShmTransport", "Segment", "ShmSpaceError", "SHM_DIR", "shm_dir",
           "segment_name", "sweep", "check_platform", "supported_platform", "host_id",
           "transport_choice", "process_alive",
           "EAGER_AREA_BYTES", "EAGER_SEND_BYTES"]


def host_id() -> str:
    """What identifies this host: ``RINGCCL_HOST_ID`` when set (tests split one machine into
    several "hosts" with it), else the host name and the kernel's boot id (two containers with
    one host name on different machines differ in boot id)."""
    env = os.environ.get("RINGCCL_HOST_ID")
    if env:
        return env
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def transport_choice(transport: str, allowed: tuple) -> str:
    """A collective's ``transport=`` checked against ``allowed`` (which includes "auto"), with
    "auto" replaced by ``RINGCCL_TRANSPORT`` when that is set; "shm" and "hybrid" are checked
    against the platform (:func:`check_platform`). Returns the name, possibly still "auto"
    (the backend then decides from where the ranks are).

    Raises:
        ArgumentError: a value outside ``allowed`` (naming ``transport`` or
            ``RINGCCL_TRANSPORT``); BackendError: "shm"/"hybrid" on a machine that is not x86-64.
    """
    argument = "transport"
    if transport == "auto":
        transport = environment.get("RINGCCL_TRANSPORT") or "auto"
        argument = "RINGCCL_TRANSPORT"
    if transport not in allowed:
        raise ArgumentError(f"{argument}={transport!r} must be one of "
                            f"{', '.join(map(repr, allowed))}")
    if transport in ("shm", "hybrid"):
        check_platform()
    return transport
