"""The front end's :class:`ringccl.frontend.Backend` for a ringccl process group
(:class:`Front`): ringccl.torch's tensor dialect with the group's own adapter and executor, and
each call's algorithm (:func:`call_algorithm`: the one chooser, ``RINGCCL_ALGO`` honoured) with
its ``RINGCCL_DEBUG=INFO`` line (one per collective, size class and group, as NCCL_DEBUG=INFO
prints its choices once; the per-call lines are :mod:`ringccl.frontend.debug`'s), and the
checks of its ops and dtypes (:func:`reduce_op`, :func:`check_dtype`, gloo's errors).

What an identical call would decide again is remembered (bounded tables, keyed by everything
the decision reads, emptied by :func:`ringccl.clear_caches`): :func:`reduce_op`'s answer per
(op, dtype, collective), :func:`call_options`' per (timeout, ``RINGCCL_TIMEOUT``),
:func:`call_algorithm`'s per (group, collective, bytes, ``RINGCCL_ALGO``, ``RINGCCL_DEBUG``).
Refusals are never remembered: a bad op, dtype or variable raises at every call, before any
data moves, with the same message.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Sequence

import torch
import torch.distributed as dist

from ... import caches, environment, frontend
from ...args import check_rank
from ...consistency import debug_level
from ...costmodel import choice
from ...frontend import debug
from ...ops import ReduceOp
from . import executor
from .dialect import SUPPORTED_DTYPES, TorchArrays
from .dispatch import Group, live
from .transport import GlooTransport

__all__ = ["Front", "FRONT", "call_options", "call_algorithm", "reduce_op", "check_dtype",
           "real_views", "nbytes", "SIZE_CLASSES", "size_class", "BACKEND_NAME", "CACHE_SIZE"]

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


#: bound of each per-call decision cache below (emptied when full: a loop's calls come back)
CACHE_SIZE = 256

# (opts.timeout, RINGCCL_TIMEOUT's value) -> call_options's answer (an immutable Options)
_options: dict = {}
caches.register(_options.clear)
_timeout_env = environment.reader(("RINGCCL_TIMEOUT",))


def call_options(opts_timeout=None) -> frontend.Options:
    """The executor options of one call: the per-call ``opts.timeout`` when torch set one.
    (The transport is the group's, read by :func:`_execute` from the group.) Remembered per
    (``opts_timeout``, ``RINGCCL_TIMEOUT``'s value): the answer is a function of the two; a
    value that raises is never remembered, so it raises at every call.

    Raises:
        ArgumentError: a malformed ``RINGCCL_TIMEOUT`` (:func:`ringccl.engine.transport.
            timeout_seconds`).
    """
    try:
        key = (opts_timeout, _timeout_env())
        hit = _options.get(key)
    except TypeError:   # an unhashable timeout: decided afresh
        key = hit = None
    if hit is not None:
        return hit
    timeout = None
    if isinstance(opts_timeout, datetime.timedelta) and opts_timeout.total_seconds() > 0:
        timeout = opts_timeout
    answer = frontend.options(FRONT, None, timeout, None, None)
    if key is not None:
        if len(_options) >= CACHE_SIZE:
            _options.clear()
        _options[key] = answer
    return answer


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


_algo_env = environment.reader(("RINGCCL_ALGO", "RINGCCL_DEBUG"))


def _forget_choices() -> None:
    for g in list(live):
        g.choices.clear()


caches.register(_forget_choices)


def call_algorithm(g: Group, collective: str, nbytes: int) -> tuple[str, dict]:
    """(algorithm, its parameters) of one call (the one chooser,
    :func:`ringccl.costmodel.choice.choose`, with ``RINGCCL_ALGO`` honoured), logged once per
    (collective, size class) with ``RINGCCL_DEBUG=INFO``.

    The choice is a function of the group (its size, transport and hosts, fixed at its
    creation), ``collective``, ``nbytes`` and ``RINGCCL_ALGO``: remembered in the group's
    ``choices`` per (collective, nbytes, ``RINGCCL_ALGO``, ``RINGCCL_DEBUG``) while
    ``RINGCCL_DEBUG`` is unset or empty (set, every call decides afresh and logs as it always
    did). At most :data:`CACHE_SIZE` entries per group; :func:`ringccl.clear_caches` empties
    every group's.

    Raises:
        ArgumentError: a malformed ``RINGCCL_ALGO`` (never remembered: raised at every call).
    """
    env = _algo_env()
    key = (collective, nbytes) + env
    hit = g.choices.get(key)
    if hit is None:
        algorithm, params, forced = choice.choose(collective, g.size, nbytes, g.transport,
                                                  local_size=g.layout.local_size or None,
                                                  honour_env=True)
        _log_choice(g, collective, algorithm, params, nbytes, forced)
        if env[1]:   # RINGCCL_DEBUG set: nothing remembered
            return algorithm, dict(params)
        if len(g.choices) >= CACHE_SIZE:
            g.choices.clear()
        hit = g.choices[key] = (algorithm, dict(params))
    algorithm, params = hit
    return algorithm, dict(params) if params else {}   # a dict of the caller's own


# torch.distributed's RedOpType -> ringccl's ReduceOp (PREMUL_SUM, and anything newer, absent)
_OPS = {dist.ReduceOp.SUM: ReduceOp.SUM, dist.ReduceOp.PRODUCT: ReduceOp.PRODUCT,
        dist.ReduceOp.MIN: ReduceOp.MIN, dist.ReduceOp.MAX: ReduceOp.MAX,
        dist.ReduceOp.AVG: ReduceOp.AVG, dist.ReduceOp.BAND: ReduceOp.BAND,
        dist.ReduceOp.BOR: ReduceOp.BOR, dist.ReduceOp.BXOR: ReduceOp.BXOR}


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


# (RedOpType's value, dtype, collective) -> _reduce_op's answer (refusals are never
# remembered); a kind of another type is keyed (kind, dtype, collective, None)
_op_answers: dict = {}
_RED_OP_TYPE = type(dist.ReduceOp.SUM)
caches.register(_op_answers.clear)
_SUPPORTED = frozenset(SUPPORTED_DTYPES)


def reduce_op(opts_op, dtype, collective: str) -> ReduceOp:
    """torch's ``opts.reduceOp`` as ringccl's ReduceOp, refused (RuntimeError, as gloo's
    "Cannot use ReduceOp.PREMUL_SUM with Gloo") where ringccl cannot reduce it on ``dtype``.
    An accepted answer is remembered per (op, dtype, collective); a refusal is decided (and
    its message written) at every call."""
    kind = getattr(opts_op, "op", opts_op)   # a ReduceOp object carries its RedOpType in .op
    # keyed by the enum's int: hashing and comparing torch's enum objects (a new one per
    # access) costs ~0.6 us a call, the int's ~0.1
    key = ((kind.value, dtype, collective) if type(kind) is _RED_OP_TYPE
           else (kind, dtype, collective, None))
    op = _op_answers.get(key)
    if op is None:
        op = _decide_op(kind, dtype, collective)
        if len(_op_answers) >= CACHE_SIZE:
            _op_answers.clear()
        _op_answers[key] = op
    return op


def _decide_op(kind, dtype, collective: str) -> ReduceOp:
    """:func:`reduce_op`'s decision for the RedOpType ``kind``."""
    op = _OPS.get(kind)
    if op is None:
        name = str(kind).rsplit(".", 1)[-1]
        raise RuntimeError(f"Cannot use ReduceOp.{name} with ringccl ({collective}, dtype "
                           f"{_dtype_name(dtype)}); ringccl reduces with SUM, PRODUCT, MIN, MAX, "
                           "AVG, BAND, BOR, BXOR")
    is_float = dtype.is_floating_point
    if op is ReduceOp.AVG and not is_float:
        raise RuntimeError(f"Cannot use ReduceOp.AVG with non-floating dtype "
                           f"{_dtype_name(dtype)} ({collective}) on ringccl")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and is_float:
        name = str(kind).rsplit(".", 1)[-1]
        raise RuntimeError(f"Cannot use ReduceOp.{name} with non-integral dtype "
                           f"{_dtype_name(dtype)} ({collective}) on ringccl")
    return op


def check_dtype(tensors: Sequence[torch.Tensor], collective: str, same: bool = False) -> None:
    """Refuse, as gloo's "Invalid scalar type" RuntimeError, dtypes and devices ringccl does not
    move, and with ``same`` (a collective whose inputs and outputs are one array type) tensors
    of different dtypes, as gloo's "invalid tensor type" (ringccl.torch's functions refuse them
    too); named."""
    for t in tensors:
        if t.dtype in _SUPPORTED and t.is_cpu:
            continue
        if t.dtype not in SUPPORTED_DTYPES:
            allowed = ", ".join(_dtype_name(d) for d in SUPPORTED_DTYPES)
            raise RuntimeError(f"ringccl {collective}: dtype {_dtype_name(t.dtype)} is not "
                               f"supported (Invalid scalar type); expected one of {allowed}")
        if t.device.type != "cpu":
            raise RuntimeError(f"ringccl {collective}: tensors must be on the CPU, got device "
                               f"{t.device} (the backend is registered for devices ['cpu'])")
    dtypes = {t.dtype for t in tensors} if same else ()
    if len(dtypes) > 1:
        raise RuntimeError(f"ringccl {collective}: invalid tensor type: the input and output "
                           f"tensors must have one dtype, got "
                           f"{', '.join(sorted(_dtype_name(d) for d in dtypes))}")


def real_views(tensors: Sequence[torch.Tensor], opts_op, collective: str) -> list:
    """``tensors`` with each complex one as its real view (``torch.view_as_real``: shape
    (..., 2) of the real dtype, the same memory), as gloo reduces complex tensors: SUM and AVG
    act on the real and imaginary parts apart. Other ops are refused on complex tensors, as
    torch's all_reduce refuses them (``supports_complex``).

    Raises:
        RuntimeError: another op on a complex tensor, or complex and real tensors mixed.
    """
    complex_ = [t.is_complex() for t in tensors]
    if not any(complex_):
        return list(tensors)
    kind = getattr(opts_op, "op", opts_op)
    if kind not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
        name = str(kind).rsplit(".", 1)[-1]
        raise RuntimeError(f"ringccl {collective}: ReduceOp.{name} is not supported on complex "
                           "tensors (SUM and AVG are, on the real and imaginary parts)")
    if not all(complex_):
        raise RuntimeError(f"ringccl {collective}: invalid tensor type: complex and real "
                           "tensors mixed")
    return [torch.view_as_real(t) for t in tensors]


def nbytes(t: torch.Tensor) -> int:
    """The bytes of ``t``."""
    return t.numel() * t.element_size()


