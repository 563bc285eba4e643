"""Run any schedule on a torch.distributed process group with non-blocking point-to-point.

The executor knows nothing about algorithms: it walks ``schedule.program(rank)``, whose
per-step sends and receives come in the schedule's canonical order, identical on every rank, so
operations between a pair of ranks are posted in the same order on both sides. No rank ever
blocks in a send before its peer has posted the matching receive (that deadlocks a ring).

Two ways to drive the backend, chosen by what it is, never by the algorithm:

* NCCL/UCC coalesce a ``batch_isend_irecv`` into one group call: each step is one batch, waited
  for, then applied (lockstep).
* gloo and MPI match independent ``isend``/``irecv``: operations are posted as soon as their data
  is ready (dataflow): the next step's receives go out while this step is applied, and with
  segments a reduced segment is forwarded while later segments are still arriving.

Receives that reduce land in a staging buffer (two halves, so consecutive steps do not collide;
reused across calls) and are then combined in place into the caller's buffer, several reduces into
one chunk in canonical (ascending source rank) order, as the simulator; receives that copy
land directly in their destination chunk unless the step also sends that chunk (BSP: a step's
sends read the pre-step state). A chunk is overwritten only after every send reading it is done.
"""

from __future__ import annotations

import threading
from typing import NamedTuple, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..errors import BackendError
from ..ir import Kind, Schedule, chunk_bounds
from ..ops import ReduceOp

__all__ = ["execute", "combine_fn", "release_buffers", "PIPELINE_THRESHOLD_BYTES",
           "DEFAULT_SEGMENT_BYTES"]


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
#: the reduction of one segment overlaps the transfer of the next; below it every extra message
#: costs more (a rendezvous per message on gloo) than the overlap saves. Measured on 2 gloo
#: processes over loopback with benchmarks/bench_torch_ring.py --segments 0,1MiB,4MiB (median
#: of 3 runs, each against gloo's all_reduce in the same run; docs/benchmarks.md): segments
#: gave 0.93–1.12x the busbw of whole chunks for 4–32 MiB chunks (8–64 MiB buffers), no
#: consistent gain, and 4 MiB segments 1.09x for 64 MiB chunks (128 MiB buffers).
PIPELINE_THRESHOLD_BYTES = 64 << 20
DEFAULT_SEGMENT_BYTES = 4 << 20

_staging_cache: dict = {}


def _staging(buffer: torch.Tensor, elements: int) -> torch.Tensor:
    """A reusable staging tensor of at least ``elements`` (same dtype/device as ``buffer``).

    Reused across calls: allocating (and page-faulting) a fresh buffer per call cost as much as
    the transfer itself for 64 MiB all-reduces on gloo. Kept per thread: a background
    communicator (:mod:`ringccl.torch.background`) may run a collective while the caller's thread
    runs another, and the two must not share staging memory.
    """
    key = (threading.get_ident(), buffer.dtype, buffer.device)
    cached = _staging_cache.get(key)
    if cached is None or cached.numel() < elements:
        cached = buffer.new_empty(elements)
        _staging_cache[key] = cached
    return cached[:elements]


def release_buffers() -> None:
    """Free the staging buffers kept between calls."""
    _staging_cache.clear()


def _segments(t: torch.Tensor, segment_elems: int) -> list[torch.Tensor]:
    if segment_elems <= 0 or t.numel() <= segment_elems:
        return [t]
    return list(torch.split(t, segment_elems))


class _Send(NamedTuple):
    chunk: int
    segment: int
    tensor: torch.Tensor
    peer: int


class _Recv(NamedTuple):
    chunk: int
    segment: int
    dst: torch.Tensor            # the segment of the caller's buffer it updates
    landing: torch.Tensor        # where it is received: dst itself or a staging segment
    staged: bool
    kind: Kind
    peer: int


class _StepPlan(NamedTuple):
    index: int
    phase: str
    sends: list
    recvs: list
    writes: frozenset            # chunks this step writes
    peers: list


def _plan(program, chunks, staging, segment_elems, peer) -> list[_StepPlan]:
    """Per step, the segment-level sends and receives of this rank, in canonical order.

    Staged receives (reduces, and copies into a chunk the step also sends) use half ``k % 2`` of
    the staging buffer at step k, so step k+1 can post its receives while step k is applied.
    """
    plans = []
    half = staging.numel() // 2 if staging is not None else 0
    for k, step in enumerate(program.steps):
        sending = {s.chunk for s in step.sends}
        sends = [_Send(s.chunk, i, seg, peer[s.peer]) for s in step.sends
                 for i, seg in enumerate(_segments(chunks[s.chunk], segment_elems))
                 if seg.numel()]
        recvs = []
        offset = (k % 2) * half
        for r in step.recvs:
            target = chunks[r.chunk]
            if not target.numel():
                continue
            staged = r.kind is Kind.REDUCE or r.chunk in sending
            dst_segs = _segments(target, segment_elems)
            if staged:
                land = _segments(staging[offset:offset + target.numel()], segment_elems)
                offset += target.numel()
            else:
                land = dst_segs
            recvs += [_Recv(r.chunk, i, d, l, staged, r.kind, peer[r.peer])
                      for i, (d, l) in enumerate(zip(dst_segs, land))]
        peers = sorted({s.peer for s in step.sends} | {r.peer for r in step.recvs})
        plans.append(_StepPlan(step.index, step.phase, sends, recvs,
                               frozenset(r.chunk for r in recvs), peers))
    return plans


def execute(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp = ReduceOp.SUM,
            group=None, segment_bytes: int | None = None, bounds=None) -> torch.Tensor:
    """Execute ``schedule`` in place on this rank's working ``buffer``.

    Args:
        schedule: any verified schedule whose world_size equals the group's size.
        buffer: 1-D contiguous tensor, the collective's working buffer.
        bounds: this rank's chunk boundaries, num_chunks + 1 non-decreasing offsets into
            ``buffer``: chunk c is ``buffer[bounds[c]:bounds[c+1]]`` (from the collective's
            contract, ``Collective.chunk_sizes``; chunks this rank never touches may be empty).
            A transfer's chunk must have the same size on both ranks. None: ``chunk_bounds(
            buffer.numel(), num_chunks)``, the ``torch.tensor_split`` pieces.
        op: reduce op applied by REDUCE transfers (AVG sums here; the caller divides).
        group: process group (None = the default group).
        segment_bytes: split each transferred chunk into segments of this many bytes and move
            them as a pipeline: a segment is reduced as soon as it arrives and forwarded as soon
            as it is reduced, while later segments are in flight. None: segments of
            DEFAULT_SEGMENT_BYTES for chunks >= PIPELINE_THRESHOLD_BYTES, else whole chunks.
            0: never split.

    Returns:
        ``buffer``.
    Raises:
        BackendError: the group's size or this rank does not match the schedule, or a
            point-to-point operation failed (the message names the step and the peers).
    """
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    if world_size != schedule.world_size:
        raise BackendError(f"schedule is for world_size={schedule.world_size}, but the process "
                           f"group has {world_size} ranks")
    if rank < 0:
        raise BackendError("this process is not a member of the given process group")
    program = schedule.program(rank)
    bounds = (chunk_bounds(buffer.numel(), schedule.num_chunks) if bounds is None
              else np.asarray(bounds, dtype=np.int64))
    if bounds.shape != (schedule.num_chunks + 1,) or (np.diff(bounds) < 0).any() or (
            bounds.size and (bounds[0] < 0 or bounds[-1] > buffer.numel())):
        raise BackendError(f"bounds must be {schedule.num_chunks + 1} non-decreasing offsets "
                           f"within the buffer's {buffer.numel()} elements")
    bounds = bounds.tolist()
    chunks = [buffer[bounds[c]:bounds[c + 1]] for c in range(schedule.num_chunks)]
    longest = max((bounds[c + 1] - bounds[c] for c in range(schedule.num_chunks)), default=0)
    itemsize = buffer.element_size()
    if segment_bytes is None:
        segment_bytes = (DEFAULT_SEGMENT_BYTES if longest * itemsize >= PIPELINE_THRESHOLD_BYTES
                         else 0)
    segment_elems = max(1, segment_bytes // itemsize) if segment_bytes else 0
    per_step = max((len(s.recvs) for s in program.steps), default=0) * longest
    staging = _staging(buffer, 2 * per_step) if per_step else None
    plans = _plan(program, chunks, staging, segment_elems, _peers(group, world_size))
    if not plans:
        return buffer
    backend = dist.get_backend(group)
    coalescing = backend == "nccl" or (hasattr(dist, "Backend") and backend == "ucc")
    run = _run_lockstep if coalescing else _run_dataflow
    try:
        run(plans, combine_fn(op), group)
    except _StepFailed as failed:
        plan, exc = failed.args
        raise BackendError(
            f"{schedule.algorithm} {schedule.collective} failed at step {plan.index}"
            f" ({plan.phase}) on rank {rank} exchanging with ranks {plan.peers}: {exc}") from exc
    return buffer


class _StepFailed(Exception):
    """Internal: (plan, exception) of the step whose point-to-point operation failed."""


def _apply(recv: _Recv, combine) -> None:
    if recv.kind is Kind.REDUCE:
        combine(recv.dst, recv.landing)
    elif recv.staged:
        recv.dst.copy_(recv.landing)


def _run_lockstep(plans, combine, group) -> None:
    """One ``batch_isend_irecv`` per step, wait for all of it, then apply (NCCL, UCC: they
    coalesce a batch into one group call, which is what keeps a ring from deadlocking)."""
    for plan in plans:
        ops = ([dist.P2POp(dist.isend, s.tensor, s.peer, group) for s in plan.sends]
               + [dist.P2POp(dist.irecv, r.landing, r.peer, group) for r in plan.recvs])
        if not ops:
            continue
        try:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        except RuntimeError as exc:
            raise _StepFailed(plan, exc) from exc
        for r in plan.recvs:
            _apply(r, combine)


def _run_dataflow(plans, combine, group) -> None:
    """Post every operation as soon as its data is ready (gloo, MPI: each isend/irecv is
    independent and matched in posting order per pair of ranks).

    * step k+1's receives are posted while step k is still running (staged ones land in the
      other staging half; direct ones wait until nothing of step k writes their chunk);
    * a send of step k+1 is posted as soon as step k has finished writing its segment;
    * a chunk is overwritten only after every earlier send reading it completed.
    Posting order per peer and direction stays the canonical one (step-major, then the step's
    order, segment-minor) on both sides, so messages match: an operation that must wait holds
    back the later ones to the same peer.
    """
    in_flight: dict[int, list] = {}   # chunk -> sends that may still read it

    def drain(chunk: int) -> None:
        for work in in_flight.pop(chunk, ()):
            work.wait()

    def post_send(s: _Send) -> None:
        in_flight.setdefault(s.chunk, []).append(dist.isend(s.tensor, s.peer, group))

    def post_recv(r: _Recv):
        if not r.staged:
            drain(r.chunk)
        return dist.irecv(r.landing, r.peer, group)

    recv_works = {0: [post_recv(r) for r in plans[0].recvs]}
    for s in plans[0].sends:
        post_send(s)
    for k, plan in enumerate(plans):
        nxt = plans[k + 1] if k + 1 < len(plans) else None
        # sends of step k+1 held back, per peer in posting order: (send, ready?)
        held: dict[int, list[list]] = {}
        pending: dict[tuple[int, int], list[list]] = {}  # segment -> its held entries
        # the last receive into each segment (several reduces may target one segment)
        last = {(r.chunk, r.segment): i for i, r in enumerate(plan.recvs)}

        def flush(peer: int) -> None:
            queue = held[peer]
            while queue and queue[0][1]:
                post_send(queue.pop(0)[0])

        if nxt is not None:
            # receives of step k+1 that cannot disturb step k go out now; once one from a peer
            # must wait, the later ones from that peer wait too (messages match in order)
            late, late_peers = [], set()
            for r in nxt.recvs:
                wait = r.peer in late_peers or (not r.staged and r.chunk in plan.writes)
                if wait:
                    late_peers.add(r.peer)
                late.append(wait)
            recv_works[k + 1] = [None if wait else post_recv(r)
                                 for r, wait in zip(nxt.recvs, late)]
            for s in nxt.sends:
                blocked = s.chunk in plan.writes
                if blocked or held.get(s.peer):
                    entry = [s, not blocked]
                    held.setdefault(s.peer, []).append(entry)
                    if blocked:
                        pending.setdefault((s.chunk, s.segment), []).append(entry)
                else:
                    post_send(s)
        try:
            for i, (r, work) in enumerate(zip(plan.recvs, recv_works.pop(k))):
                work.wait()
                if r.staged:
                    drain(r.chunk)  # sends may still read the chunk being updated
                    _apply(r, combine)
                if last[(r.chunk, r.segment)] == i:
                    # the segment is final for this step: forward it
                    for entry in pending.pop((r.chunk, r.segment), ()):
                        entry[1] = True
                        flush(entry[0].peer)
            for peer, queue in held.items():
                for entry in queue:
                    entry[1] = True
                flush(peer)
            if nxt is not None:
                works = recv_works[k + 1]
                for i, r in enumerate(nxt.recvs):
                    if works[i] is None:
                        works[i] = post_recv(r)
        except RuntimeError as exc:
            raise _StepFailed(plan, exc) from exc
    try:
        for chunk in list(in_flight):
            drain(chunk)
    except RuntimeError as exc:
        raise _StepFailed(plans[-1], exc) from exc


def max_staging_elements(schedule: Schedule, rank: int, count: int, bounds=None) -> int:
    """Elements of staging memory :func:`execute` allocates on ``rank`` for a buffer of ``count``
    (chunks from ``bounds``, default ``chunk_bounds(count, num_chunks)``)."""
    program = schedule.program(rank)
    bounds = chunk_bounds(count, schedule.num_chunks) if bounds is None else np.asarray(bounds)
    longest = int(np.diff(bounds).max(initial=0))
    return 2 * max((len(s.recvs) for s in program.steps), default=0) * longest
