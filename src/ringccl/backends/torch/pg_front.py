"""The front end's :class:`ringccl.frontend.Backend` for a ringccl process group
(:class:`Front`): ringccl.torch's tensor dialect with the group's own adapter and executor, and
each call's algorithm (:func:`call_algorithm`: the one chooser, ``RINGCCL_ALGO`` honoured) with
its ``RINGCCL_DEBUG=INFO`` line (one per collective, size class and group, as NCCL_DEBUG=INFO
prints its choices once; the per-call lines are :mod:`ringccl.frontend.debug`'s).
"""

from __future__ import annotations

import datetime
import os
import socket

import torch

from ... import frontend
from ...args import check_rank
from ...consistency import debug_level
from ...costmodel import choice
from ...frontend import debug
from ...ops import ReduceOp
from . import executor
from .dialect import TorchArrays
from .dispatch import Group
from .transport import GlooTransport

__all__ = ["Front", "FRONT", "call_options", "call_algorithm", "nbytes", "SIZE_CLASSES",
           "size_class", "BACKEND_NAME"]

#: the name given to ``init_process_group`` / ``new_group(backend=...)``
BACKEND_NAME = "ringccl"


class Front(TorchArrays):
    """ringccl.torch's tensor dialect (:class:`~ringccl.backends.torch.dialect.TorchArrays`)
    with a :class:`~ringccl.backends.torch.dispatch.Group` as the group: its size and rank, its
    inner gloo group for the small exchanges and the schedules' messages. Roots arrive as group
    ranks (torch converts a global ``src``/``dst`` before calling the backend)."""

    name = "ringccl backend"
    pipelining = executor.PIPELINING

    @staticmethod
    def group(g):
        return g

    @staticmethod
    def size(g) -> int:
        return g.size

    @staticmethod
    def rank(g) -> int:
        return g.rank

    @staticmethod
    def root(g, rank, argument: str, world_size: int) -> int:
        return check_rank(rank, world_size, argument)

    @staticmethod
    def key(g):
        return id(g)

    @staticmethod
    def gather_objects(g, obj, collective: str, algorithm: str, timeout=None) -> list:
        return g.all_gather_object(obj)

    @staticmethod
    def max2(g, a: int, b: int) -> tuple[int, int]:
        x, y = g.allreduce_max([a, b])
        return x, y

    @staticmethod
    def default_restore(timeout) -> bool:
        """False: torch.distributed promises nothing of a failed collective's tensors (gloo
        and NCCL leave partial results), so the backend does not pay for ringccl.torch's
        all-or-nothing (a saved copy of every chunk over p2p; over shared memory the results
        copied out only after the call's last wait, where final receives may land in the
        caller's tensor directly: :mod:`ringccl.engine.staged`)."""
        return False

    @staticmethod
    def stages(g, opts) -> bool:
        return g.transport == "shm"   # as ringccl.torch's: the slot holds private buffers

    @staticmethod
    def call_pipelining(g, collective: str, opts):
        return executor.call_pipelining(collective, opts.pipelining, g.transport)

    @staticmethod
    def execute(schedule, work, op, g, bounds, opts, restore: bool) -> None:
        _execute(schedule, work, op, g, bounds, opts, restore)


def _execute(schedule, buffer: torch.Tensor, op: ReduceOp, g: Group, bounds, opts,
             restore: bool) -> None:
    """The executor's run (:func:`ringccl.backends.torch.executor.run`) on the group's
    transport, with its set-ups: over shared memory the group's
    :class:`~ringccl.backends.torch.shm.ShmSetup`, over hybrid its
    :class:`~ringccl.backends.torch.hybrid.HybridSetup`, else point-to-point over the inner
    gloo group."""
    wait_timeout = executor.check_timeout(opts.timeout)

    def p2p():
        return (GlooTransport(g.inner, g.global_ranks, wait_timeout),
                (wait_timeout or g.timeout).total_seconds(), False, BACKEND_NAME)
    executor.run(schedule, buffer, op, g, bounds, transport=g.transport,
                 pipelining=opts.pipelining, wait_timeout=wait_timeout, restore=restore,
                 rank=g.rank, p2p=p2p,
                 setup=g.shm_setup if g.transport == "shm" else g.hybrid_setup)


FRONT = Front()


def call_options(opts_timeout=None) -> frontend.Options:
    """The executor options of one call: the per-call ``opts.timeout`` when torch set one.
    (The transport is the group's, read by :func:`_execute` from the group.)"""
    timeout = None
    if isinstance(opts_timeout, datetime.timedelta) and opts_timeout.total_seconds() > 0:
        timeout = opts_timeout
    return frontend.options(FRONT, None, timeout, None, None)


def _log_choice(g: Group, collective: str, algorithm: str, params: dict, nbytes: int,
                forced: bool) -> None:
    """``RINGCCL_DEBUG=INFO``: one line per (collective, size class, group), as NCCL_DEBUG=INFO
    prints its choices once; the per-call lines are :mod:`ringccl.frontend.debug`'s."""
    level = debug_level()
    if level not in ("info", "trace"):
        return
    key = (collective, size_class(nbytes))
    if key in g.logged:
        return
    g.logged.add(key)
    debug.configure(level)
    seconds = choice.predicted_seconds(collective, algorithm, g.size, nbytes, g.transport,
                                       params, g.layout.local_size or None)
    predicted = "n/a" if seconds is None else f"{seconds * 1e6:.1f}"
    if choice.LINKS[g.transport][1]:   # the cost model has no fitted class for it yet
        predicted += " (provisional link figures)"
    debug.logger.info("%s:%d [rank %d] backend group=%s size=%d %s size_class=%s "
                      "algorithm=%s (%s) transport=%s predicted_us=%s", socket.gethostname(),
                      os.getpid(), g.rank, g.name, g.size, collective, key[1], algorithm,
                      "RINGCCL_ALGO" if forced else "auto", _TRANSPORT_NAMES[g.transport],
                      predicted)


#: upper bounds (bytes, exclusive) of the size classes of the log lines, NCCL-style powers of 4
SIZE_CLASSES = tuple(4 ** k for k in range(5, 17))   # 1 KiB ... 4 GiB


def size_class(nbytes: int) -> str:
    """The size class of a ``nbytes`` buffer as text: ``"<1KiB"``, ``"4KiB-16KiB"``, …"""
    lower = 0
    for upper in SIZE_CLASSES:
        if nbytes < upper:
            return f"{_human(lower)}-{_human(upper)}" if lower else f"<{_human(upper)}"
        lower = upper
    return f">={_human(lower)}"


def _human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"


#: the transports as the INFO lines name them
_TRANSPORT_NAMES = {"shm": "shm", "p2p": "gloo-p2p", "hybrid": "shm+gloo-p2p"}


def call_algorithm(g: Group, collective: str, nbytes: int) -> tuple[str, dict]:
    """(algorithm, its parameters) of one call (the one chooser,
    :func:`ringccl.costmodel.choice.choose`, with ``RINGCCL_ALGO`` honoured), logged once per
    (collective, size class) with ``RINGCCL_DEBUG=INFO``."""
    algorithm, params, forced = choice.choose(collective, g.size, nbytes, g.transport,
                                              local_size=g.layout.local_size or None,
                                              honour_env=True)
    _log_choice(g, collective, algorithm, params, nbytes, forced)
    return algorithm, dict(params)


def nbytes(t: torch.Tensor) -> int:
    """The bytes of ``t``."""
    return t.numel() * t.element_size()


