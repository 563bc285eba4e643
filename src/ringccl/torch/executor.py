"""Run any schedule on a torch.distributed process group with non-blocking point-to-point.

The order of operations, staging, pipelining, error attribution and the all-or-nothing rollback
are the backend-neutral engine's (:mod:`ringccl.engine`); this module is the torch transport:
``dist.isend``/``dist.irecv`` on slices of the working buffer, ``Work.wait`` bounded by the group's
timeout (or ``timeout=``), and reduction with torch's in-place ops. How the backend is driven is
chosen by what it is, never by the algorithm:

* NCCL/UCC coalesce a ``batch_isend_irecv`` into one group call: each step is one batch, waited
  for, then applied (:func:`ringccl.engine.run_lockstep`).
* gloo and MPI match independent ``isend``/``irecv``: operations are posted as soon as their data
  is ready (:func:`ringccl.engine.run_dataflow`).

Staging memory (two halves of the largest step's receives) is the engine's workspace, reused
across calls, per thread (:mod:`ringccl.engine.workspace`).
"""

from __future__ import annotations

import datetime
from typing import Sequence

import torch
import torch.distributed as dist

from .. import engine
from ..engine import trace
from ..errors import BackendError
from ..ir import Schedule
from ..ops import ReduceOp

__all__ = ["execute", "combine_fn", "release_buffers", "PIPELINING", "OPS",
           "PIPELINE_THRESHOLD_BYTES", "DEFAULT_SEGMENT_BYTES"]


def combine_fn(op: ReduceOp):
    """In-place ``dst = op(dst, src)`` on torch tensors (AVG sums; the caller divides last)."""
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        return lambda dst, src: dst.add_(src)
    if op is ReduceOp.PRODUCT:
        return lambda dst, src: dst.mul_(src)
    if op is ReduceOp.MIN:
        return lambda dst, src: torch.minimum(dst, src, out=dst)
    if op is ReduceOp.MAX:
        return lambda dst, src: torch.maximum(dst, src, out=dst)
    if op is ReduceOp.BAND:
        return lambda dst, src: dst.bitwise_and_(src)
    if op is ReduceOp.BOR:
        return lambda dst, src: dst.bitwise_or_(src)
    return lambda dst, src: dst.bitwise_xor_(src)


def _peers(group, world_size: int) -> Sequence[int]:
    if group is None or group is dist.group.WORLD:
        return range(world_size)
    return [dist.get_global_rank(group, r) for r in range(world_size)]


#: chunks of at least this many bytes are split into segments of ``DEFAULT_SEGMENT_BYTES`` so
#: the reduction of one segment overlaps the transfer of the next (and, at the switch from
#: reduce-scatter to all-gather, a reduced segment is forwarded while later ones still arrive);
#: below it every extra message costs more than the overlap saves. Measured on 2 gloo processes
#: over loopback with ``benchmarks/bench_torch_ring.py -b 8MiB -e 64MiB --segments
#: 0,512KiB,1MiB,2MiB,4MiB --runs 3 --no-restore`` (busbw ratio to gloo's all_reduce in the same
#: run, median of 3; docs/benchmarks.md): whole chunks 0.68 / 0.77 / 0.75 / 0.83 at 8 / 16 / 32 /
#: 64 MiB buffers, 2 MiB segments 0.72 / 0.91 / 0.91 / 1.00 (1 MiB: 0.73 / 0.85 / 0.88 / 0.90;
#: 4 MiB: 0.64 / 0.80 / 0.92 / 0.98).
PIPELINE_THRESHOLD_BYTES = 4 << 20
DEFAULT_SEGMENT_BYTES = 2 << 20

class TorchOps:
    """The engine's array dialect on 1-D torch tensors (:class:`ringccl.engine.ArrayOps`)."""

    @staticmethod
    def empty(like: torch.Tensor, elements: int) -> torch.Tensor:
        return like.new_empty(elements)

    @staticmethod
    def copy(dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)

    combine = staticmethod(combine_fn)

    @staticmethod
    def kind(a: torch.Tensor):
        return (a.dtype, a.device)


OPS = TorchOps()

#: the transport's measured default (see the constants above), passed in by ringccl.torch
PIPELINING = engine.Pipelining(PIPELINE_THRESHOLD_BYTES, DEFAULT_SEGMENT_BYTES)


def release_buffers() -> None:
    """Free the staging buffers, cached plans and dataflow programs kept between calls."""
    engine.clear_caches()


class _Transport:
    """The engine's transport over torch.distributed point-to-point: it moves bytes only (see
    :class:`ringccl.engine.Transport`); applying them is the engine's workspace."""

    def __init__(self, group, peers: Sequence[int], timeout: datetime.timedelta | None):
        self.group, self.peers, self.timeout = group, peers, timeout

    def isend(self, s, data):
        return dist.isend(data, self.peers[s.peer], self.group)

    def irecv(self, r, landing):
        return dist.irecv(landing, self.peers[r.peer], self.group)

    def wait(self, work) -> None:
        if self.timeout is None:
            work.wait()       # gloo bounds it by the group's timeout
        else:
            work.wait(self.timeout)

    def is_timeout(self, exc: BaseException) -> bool:
        text = str(exc).lower()
        return "timed out" in text or "timeout" in text

    def peer_name(self, peer: int) -> str:
        g = self.peers[peer]
        return str(peer) if g == peer else f"{peer} (global rank {g})"

    def batch(self, sends, recvs) -> list:
        ops = ([dist.P2POp(dist.isend, data, self.peers[s.peer], self.group)
                for s, data in sends]
               + [dist.P2POp(dist.irecv, landing, self.peers[r.peer], self.group)
                  for r, landing in recvs])
        return dist.batch_isend_irecv(ops)


def check_timeout(timeout) -> datetime.timedelta | None:
    """``timeout=`` (seconds or timedelta) or RINGCCL_TIMEOUT as a timedelta; None: the group's
    (:func:`ringccl.engine.timeout_seconds`)."""
    seconds = engine.timeout_seconds(timeout)
    return None if seconds is None else datetime.timedelta(seconds=seconds)


def execute(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp = ReduceOp.SUM,
            group=None, segment_bytes: int | None = None, bounds=None, *,
            timeout: float | datetime.timedelta | None = None,
            restore: bool = True, pipelining: engine.Pipelining | None = None) -> torch.Tensor:
    """Execute ``schedule`` in place on this rank's working ``buffer``.

    Args:
        schedule: any verified schedule whose world_size equals the group's size.
        buffer: 1-D contiguous tensor, the collective's working buffer.
        op: reduce op applied by REDUCE transfers (AVG sums here; the caller divides).
        group: process group (None = the default group).
        segment_bytes: split each transferred chunk into segments of this many bytes and move
            them as a pipeline: a segment is reduced as soon as it arrives and forwarded as soon
            as it is reduced, while later segments are in flight. None: ``pipelining`` decides.
            0: never split.
        bounds: this rank's chunk boundaries, num_chunks + 1 non-decreasing offsets into
            ``buffer``: chunk c is ``buffer[bounds[c]:bounds[c+1]]`` (from the collective's
            contract, ``Collective.chunk_sizes``; chunks this rank never touches may be empty).
            A transfer's chunk must have the same size on both ranks. None: ``chunk_bounds(
            buffer.numel(), num_chunks)``, the ``torch.tensor_split`` pieces.
        timeout: seconds (or timedelta) each wait for a peer may take; None: the
            ``RINGCCL_TIMEOUT`` environment variable if set, else the group's timeout
            (``init_process_group(timeout=...)``, which gloo applies to every wait).
        restore: save each chunk just before this rank first writes it (memory: up to one
            copy of ``buffer``, kept between calls) and restore it if the call fails, so
            ``buffer`` is either fully updated or exactly as it was. False: on failure its
            contents are undefined (as with NCCL's own collectives).
        pipelining: the policy used when ``segment_bytes`` is None (None: :data:`PIPELINING`,
            segments of DEFAULT_SEGMENT_BYTES for chunks >= PIPELINE_THRESHOLD_BYTES).

    Returns:
        ``buffer``.
    Raises:
        BackendError: the group's size or this rank does not match the schedule, bad bounds.
        PeerError: a point-to-point operation failed (a peer died or closed its connection);
            RingcclTimeout (a PeerError and TimeoutError): a wait ran past the timeout. Both
            name the collective, algorithm, step and the peer, and are raised after the
            rollback. The group must not be used again afterwards: a receive already posted to a
            stalled peer cannot be withdrawn from the backend.
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if world_size != schedule.world_size:
        raise BackendError(f"schedule is for world_size={schedule.world_size}, but the process "
                           f"group has {world_size} ranks")
    if rank < 0:
        raise BackendError("this process is not a member of the given process group")
    wait_timeout = check_timeout(timeout)
    bounds = engine.check_bounds(bounds, schedule.num_chunks, buffer.numel())
    if segment_bytes is not None:
        pipelining = engine.Pipelining.fixed(segment_bytes)
    segment_elems = (pipelining or PIPELINING).segment_elems(bounds, buffer.element_size())
    plan = engine.plan(schedule, rank, bounds, segment_elems)
    if not plan.steps:
        return buffer
    workspace = engine.Workspace(OPS, buffer, op, plan.staging_elems)
    transport = _Transport(group, _peers(group, world_size), wait_timeout)
    backend = dist.get_backend(group)
    run = engine.run_lockstep if backend in ("nccl", "ucc") else engine.run_dataflow
    seconds = None if wait_timeout is None else wait_timeout.total_seconds()
    recorder = trace.state.recorder   # None unless a trace is being taken (engine.trace)
    if recorder is None:
        run(schedule, rank, plan, transport, workspace, restore=restore, timeout=seconds)
    else:
        recorder.run(run, schedule, rank, plan, transport, workspace, restore=restore,
                     timeout=seconds, itemsize=buffer.element_size(), backend=str(backend))
    return buffer


def max_staging_elements(schedule: Schedule, rank: int, count: int, bounds=None) -> int:
    """Elements of staging memory :func:`execute` allocates on ``rank`` for a buffer of ``count``
    (chunks from ``bounds``, default ``chunk_bounds(count, num_chunks)``; whole chunks)."""
    return engine.plan(schedule, rank, engine.check_bounds(bounds, schedule.num_chunks, count),
                       0).staging_elems
