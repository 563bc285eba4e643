"""Run any schedule on a torch.distributed process group: point-to-point, or shared memory.

The order of operations, staging, pipelining, error attribution and the all-or-nothing rollback
are the backend-neutral engine's (:mod:`ringccl.engine`); the torch transport is
:class:`~ringccl.backends.torch.transport.P2PTransport` (``dist.isend``/``dist.irecv`` on slices
of the working buffer, ``Work.wait`` bounded by the group's timeout or ``timeout=``), reductions
torch's in-place ops (:mod:`ringccl.backends.torch.dialect`). How the backend is driven is
chosen by what it is, never by the algorithm:

* NCCL/UCC coalesce a ``batch_isend_irecv`` into one group call: each step is one batch, waited
  for, then applied (:func:`ringccl.engine.run_lockstep`).
* gloo and MPI match independent ``isend``/``irecv``: operations are posted as soon as their data
  is ready (:func:`ringccl.engine.run_dataflow`).

``transport="shm"`` (CPU tensors, every rank of the group on this host) runs the one
shared-memory call instead (:mod:`ringccl.backends.torch.shm`), ``transport="hybrid"`` shared
memory inside each host and point-to-point across (:mod:`ringccl.backends.torch.hybrid`);
:func:`execute` routes a call to its transport, with the transport's measured pipelining
(:func:`call_pipelining`).

Staging memory (two halves of the largest step's receives) is the engine's workspace, reused
across calls, per thread (:mod:`ringccl.engine.workspace`).
"""

from __future__ import annotations

import datetime
from typing import Callable

import torch
import torch.distributed as dist

from ... import engine
from ...engine import staged, trace
from ...errors import BackendError
from ...ir import Schedule
from ...ops import ReduceOp
from . import hybrid, shm
from .dialect import OPS
from .transport import P2PTransport, peers

__all__ = ["execute", "run", "run_p2p", "release_buffers", "call_pipelining", "check_timeout",
           "max_staging_elements", "PIPELINING", "PIPELINE_THRESHOLD_BYTES",
           "DEFAULT_SEGMENT_BYTES"]


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

#: the transport's measured default (see the constants above), passed in by ringccl.torch
PIPELINING = engine.Pipelining(PIPELINE_THRESHOLD_BYTES, DEFAULT_SEGMENT_BYTES)


def release_buffers() -> None:
    """Free the staging buffers, cached plans and dataflow programs kept between calls."""
    engine.clear_caches()


def call_pipelining(collective: str, pipelining: engine.Pipelining | None,
                    transport: str | None) -> engine.Pipelining:
    """The pipelining policy a call of ``collective`` runs with: ``pipelining`` as asked, but
    over shared memory (``transport`` "shm", or "hybrid": shm inside each host) the p2p
    default (:data:`PIPELINING`, or None) becomes :func:`~ringccl.backends.torch.shm.
    shm_pipelining`'s."""
    if transport in ("shm", "hybrid") and (pipelining is None or pipelining is PIPELINING):
        return shm.shm_pipelining(collective)
    return pipelining or PIPELINING

def check_timeout(timeout) -> datetime.timedelta | None:
    """``timeout=`` (seconds or timedelta) or RINGCCL_TIMEOUT as a timedelta; None: the group's
    (:func:`ringccl.engine.timeout_seconds`)."""
    seconds = engine.timeout_seconds(timeout)
    return None if seconds is None else datetime.timedelta(seconds=seconds)


def execute(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp = ReduceOp.SUM,
            group=None, segment_bytes: int | None = None, bounds=None, *,
            timeout: float | datetime.timedelta | None = None,
            restore: bool = True, pipelining: engine.Pipelining | None = None,
            transport: str = "p2p") -> torch.Tensor:
    """Execute ``schedule`` in place on this rank's working ``buffer``.

    Args:
        schedule: any verified schedule whose world_size equals the group's size.
        buffer: 1-D contiguous tensor, the collective's working buffer; with
            ``transport="shm"`` also a :class:`ringccl.engine.Staged` (a private working
            buffer given as its sources and targets: the front end's, see
            :mod:`ringccl.engine.staged`).
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
            segments of DEFAULT_SEGMENT_BYTES for chunks >= PIPELINE_THRESHOLD_BYTES; over
            shared memory :func:`.shm.shm_pipelining`, whole chunks but a large broadcast's,
            replaces the p2p default).
        transport: "p2p" (torch.distributed point-to-point), "shm" (the group's shared
            memory: CPU tensors, every rank on this host, x86-64; set up on first use) or
            "hybrid" (shared memory inside each host, p2p across: :mod:`.hybrid`).

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
    if isinstance(buffer, staged.Staged) and transport != "shm":
        raise BackendError(f"a described working buffer (ringccl.engine.Staged) needs "
                           f"transport='shm', not {transport!r}")
    if segment_bytes is not None:
        pipelining = engine.Pipelining.fixed(segment_bytes)

    def p2p():
        backend = dist.get_backend(group)
        return (P2PTransport(group, peers(group, world_size), wait_timeout),
                None if wait_timeout is None else wait_timeout.total_seconds(),
                backend in ("nccl", "ucc"), str(backend))
    return run(schedule, buffer, op, group, bounds, transport=transport, pipelining=pipelining,
               wait_timeout=wait_timeout, restore=restore, rank=rank, p2p=p2p)


def run(schedule: Schedule, buffer, op: ReduceOp, group, bounds, *, transport: str,
        pipelining: engine.Pipelining | None, wait_timeout: datetime.timedelta | None,
        restore: bool, rank: int, p2p: Callable[[], tuple], setup=None):
    """A checked call on its ``transport``, the one routing of ringccl.torch's :func:`execute`
    and the ringccl process group's: the transport's pipelining (:func:`call_pipelining`),
    then the shared-memory call (:func:`.shm.execute_shm`), the hybrid one
    (:func:`.hybrid.execute_hybrid`; both with ``setup`` for a group-like ``group``) or
    :func:`run_p2p` over ``p2p()``'s ``(transport, timeout_s, lockstep, backend name)``.

    Raises:
        BackendError: bad bounds, another ``transport``; as :func:`execute`.
    """
    numel = buffer.numel if isinstance(buffer, staged.Staged) else buffer.numel()
    bounds = engine.check_bounds(bounds, schedule.num_chunks, numel)
    pipelining = call_pipelining(schedule.collective, pipelining, transport)
    if transport in ("shm", "hybrid"):   # hybrid: shm inside each host, p2p across
        call = shm.execute_shm if transport == "shm" else hybrid.execute_hybrid
        return call(schedule, buffer, op, group, bounds,
                    lambda itemsize: pipelining.segment_elems(bounds, itemsize),
                    None if wait_timeout is None else wait_timeout.total_seconds(), restore,
                    setup)
    if transport != "p2p":
        raise BackendError(f"transport={transport!r} must be 'p2p', 'shm' or 'hybrid' here")
    messages, timeout_s, lockstep, backend = p2p()
    return run_p2p(schedule, buffer, op, rank, bounds,
                   pipelining.segment_elems(bounds, buffer.element_size()), messages,
                   timeout_s=timeout_s, restore=restore, lockstep=lockstep, backend=backend)


def run_p2p(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp, rank: int, bounds,
            segment_elems: int, transport, *, timeout_s: float | None, restore: bool,
            lockstep: bool = False, backend: str = "gloo") -> torch.Tensor:
    """:func:`execute`'s run over a point-to-point ``transport`` (any
    :class:`ringccl.engine.Transport`: :func:`execute`'s torch.distributed one, the ringccl
    backend's raw gloo group): the engine's plan for ``rank``, its workspace (torch's in-place
    ops), the lockstep (``lockstep``: NCCL/UCC's grouped calls) or dataflow driver, the trace
    recorder when one is on.

    Args:
        schedule, buffer, op, bounds: as for :func:`execute` (``bounds`` checked already).
        rank: this rank in the schedule.
        segment_elems: elements per pipelined segment (0: whole chunks).
        transport: the transport object.
        timeout_s: seconds per wait, for the engine's messages (None: the transport's bound).
        restore: as for :func:`execute`.
        backend: the name traces record.
    Returns:
        ``buffer``. Raises: as :func:`execute`.
    """
    plan = engine.plan(schedule, rank, bounds, segment_elems)
    if not plan.steps:
        return buffer
    workspace = engine.Workspace(OPS, buffer, op, plan.staging_elems)
    trace.drive(engine.run_lockstep if lockstep else engine.run_dataflow, schedule, rank, plan,
                transport, workspace, restore=restore, timeout=timeout_s,
                itemsize=buffer.element_size(), backend=backend)
    return buffer


def max_staging_elements(schedule: Schedule, rank: int, count: int, bounds=None) -> int:
    """Elements of staging memory :func:`execute` allocates on ``rank`` for a buffer of ``count``
    (chunks from ``bounds``, default ``chunk_bounds(count, num_chunks)``; whole chunks)."""
    return engine.plan(schedule, rank, engine.check_bounds(bounds, schedule.num_chunks, count),
                       0).staging_elems
