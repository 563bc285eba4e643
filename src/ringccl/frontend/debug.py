"""``RINGCCL_DEBUG=INFO`` / ``TRACE``: a log line per collective call (logger ``"ringccl"``).

Every collective's flow runs its schedule through :func:`execute` (the front end's one call of
the backend's executor), so this is the one place that sees every call. One line per call (per
schedule run), not per (collective, size, group) as NCCL's INFO summary: a rank that hangs or
slows down is then visible at the call it happened. Format, to stderr unless the application
configured the ``"ringccl"`` logger itself::

    ringccl INFO host:pid [rank 0] all_reduce algorithm=ring dtype=float32 count=65536
        bytes=262144 segment_bytes=0 time_us=812.4

(one line; ``segment_bytes=0``: whole chunks). ``TRACE`` adds, per call, one DEBUG line per
step: its phase, sends and receives, and the time spent posting, waiting and reducing/copying,
measured by :mod:`ringccl.engine.trace`. With ``RINGCCL_DEBUG`` unset this costs one
environment lookup per call.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from typing import Any

import numpy as np

from .. import consistency
from ..engine import trace
from ..engine.staged import Staged

__all__ = ["execute", "logger"]

logger = logging.getLogger("ringccl")
_configured: list = []


def configure(level: str) -> None:
    """Send the logger's records to stderr at the level asked for, once per process, unless
    the application gave the logger a handler of its own."""
    if _configured:
        return
    _configured.append(level)
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("ringccl %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.DEBUG if level == "trace" else logging.INFO)


def _itemsize(b, dtype) -> int:
    size = getattr(dtype, "itemsize", None)
    return int(size) if size is not None else np.dtype(b.dtype_name(dtype)).itemsize


def execute(b, schedule, work, op, g, bounds: tuple, opts, restore: bool) -> None:
    """``b.execute(...)`` (the backend's executor; ``work``: the working buffer or a
    :class:`ringccl.engine.Staged` one), logged when ``RINGCCL_DEBUG`` is INFO or
    TRACE (:func:`ringccl.consistency.debug_level`)."""
    level = consistency.debug_level()
    if level not in ("info", "trace"):
        b.execute(schedule, work, op, g, bounds, opts, restore)
        return
    configure(level)
    described = isinstance(work, Staged)
    dtype = b.dtype(work.like if described else work)
    itemsize = _itemsize(b, dtype)
    count = work.numel if described else b.numel(work)
    rank = b.rank(g)
    recorder = None
    if level == "trace" and trace.state.recorder is None:
        recorder = trace.Recorder()
    t0 = time.perf_counter()
    if recorder is None:
        b.execute(schedule, work, op, g, bounds, opts, restore)
    else:
        with trace.tracing(recorder):
            b.execute(schedule, work, op, g, bounds, opts, restore)
    seconds = time.perf_counter() - t0
    # the policy the executor ran (over shared memory its own); None: whole chunks
    policy = getattr(b, "call_pipelining", None)
    pipelining = opts.pipelining if policy is None else policy(g, schedule.collective, opts)
    segment = pipelining.segment_elems(bounds, itemsize) * itemsize if pipelining else 0
    where = f"{socket.gethostname()}:{os.getpid()} [rank {rank}]"
    logger.info("%s %s algorithm=%s dtype=%s count=%d bytes=%d segment_bytes=%d time_us=%.1f",
                where, schedule.collective, schedule.algorithm, b.dtype_name(dtype), count,
                count * itemsize, segment, seconds * 1e6)
    if recorder is not None:
        for call in recorder.calls:
            _log_steps(where, call)


def _log_steps(where: str, call: Any) -> None:
    """One DEBUG line per step of a traced call: operations and measured times."""
    steps: dict[int, dict] = {}
    for lane, _, t0, t1, args in call.events:
        k = args.get("step")
        if k is None:
            continue
        st = steps.setdefault(k, {"send": 0, "recv": 0, "post": 0, "wait": 0, "reduce": 0,
                                  "start": t0, "end": t1})
        st["start"], st["end"] = min(st["start"], t0), max(st["end"], t1)
        if lane in ("send", "recv"):
            st[lane] += 1
            st["post"] += t1 - t0
        elif lane in ("wait", "reduce"):
            st[lane] += t1 - t0
    phases = call.schedule.phase_names
    for k in sorted(steps):
        st = steps[k]
        logger.debug("%s %s step %d%s: sends=%d recvs=%d post_us=%.1f wait_us=%.1f "
                     "reduce_us=%.1f span_us=%.1f", where, call.info["collective"], k,
                     f" ({phases[k]})" if phases[k] else "", st["send"], st["recv"],
                     st["post"] / 1e3, st["wait"] / 1e3, st["reduce"] / 1e3,
                     (st["end"] - st["start"]) / 1e3)
