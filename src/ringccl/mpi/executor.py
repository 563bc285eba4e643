"""Run any schedule on an MPI communicator with mpi4py non-blocking point-to-point.

The executor knows nothing about algorithms: it walks ``schedule.program(rank)``, whose per-step
sends and receives come in the schedule's canonical order, identical on every rank, so messages
between a pair of ranks are posted in the same order on both sides and MPI's non-overtaking rule
(same source, tag and communicator) matches them. Operations are posted as soon as their data is
ready (dataflow, as the torch executor does for gloo): the next step's receives go out while this
step is applied, and with segments a reduced segment is forwarded while later segments are still
arriving. No rank blocks in a send before its peer posted the receive.

Everything is moved as raw bytes (``MPI.BYTE``), so every numpy dtype works, float16 and bool
included. Receives that reduce land in a staging buffer (two halves, so consecutive steps do not
collide) that is kept between calls; the per-rank plan (chunk and segment offsets) is cached per
(schedule, count, dtype, segment size), so a call allocates neither index arrays nor buffers.
Messages go over a private duplicate of the caller's communicator, so they never match the
caller's own point-to-point traffic.

References:
    MPI 4.0 standard, section 3.5 (non-overtaking order of messages) and 3.7 (non-blocking
    communication).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from ..errors import BackendError
from ..ir import Kind, Schedule, chunk_bounds
from ..ops import ReduceOp, ufunc

__all__ = ["execute", "release_buffers"]

_TAG = 0  # order, not tags, matches messages: posting order per peer is the same on both sides

_staging_cache: dict = {}
_comm_cache: dict = {}


class _Send(NamedTuple):
    chunk: int
    segment: int
    lo: int          # byte range of the caller's buffer it sends
    hi: int
    peer: int


class _Recv(NamedTuple):
    chunk: int
    segment: int
    lo: int          # byte range of the caller's buffer it updates
    hi: int
    stage: int       # byte offset in the staging buffer where it lands, or -1: lands in place
    reduce: bool
    peer: int


class _StepPlan(NamedTuple):
    index: int
    phase: str
    sends: tuple
    recvs: tuple
    writes: frozenset    # chunks this step writes
    peers: tuple


class _Plan(NamedTuple):
    steps: tuple
    staging_bytes: int


def _segments(lo: int, hi: int, segment_bytes: int) -> list[tuple[int, int]]:
    if segment_bytes <= 0 or hi - lo <= segment_bytes:
        return [(lo, hi)]
    return [(a, min(a + segment_bytes, hi)) for a in range(lo, hi, segment_bytes)]


@functools.lru_cache(maxsize=64)
def _plan(schedule: Schedule, rank: int, bounds: tuple, itemsize: int,
          segment_bytes: int) -> _Plan:
    """Per step, this rank's segment-level sends and receives (byte offsets), canonical order.

    Staged receives (reduces, and copies into a chunk the step also sends) use half ``k % 2`` of
    the staging buffer at step k, so step k+1 can post its receives while step k is applied.
    ``bounds``: chunk offsets in elements; ``segment_bytes`` is a multiple of ``itemsize``
    (0: whole chunks).
    """
    program = schedule.program(rank)
    bounds = [b * itemsize for b in bounds]
    longest = max((bounds[c + 1] - bounds[c] for c in range(schedule.num_chunks)), default=0)
    half = max((len(s.recvs) for s in program.steps), default=0) * longest
    steps = []
    for k, step in enumerate(program.steps):
        sending = {s.chunk for s in step.sends}
        sends = tuple(_Send(s.chunk, i, lo, hi, s.peer) for s in step.sends
                      for i, (lo, hi) in enumerate(_segments(bounds[s.chunk], bounds[s.chunk + 1],
                                                             segment_bytes)) if hi > lo)
        recvs = []
        offset = (k % 2) * half
        for r in step.recvs:
            lo, hi = bounds[r.chunk], bounds[r.chunk + 1]
            if hi == lo:
                continue
            reduce = r.kind is Kind.REDUCE
            staged = reduce or r.chunk in sending
            for i, (a, b) in enumerate(_segments(lo, hi, segment_bytes)):
                recvs.append(_Recv(r.chunk, i, a, b, offset + a - lo if staged else -1, reduce,
                                   r.peer))
            if staged:
                offset += hi - lo
        peers = tuple(sorted({s.peer for s in step.sends} | {r.peer for r in step.recvs}))
        steps.append(_StepPlan(step.index, step.phase, sends, tuple(recvs),
                               frozenset(r.chunk for r in recvs), peers))
    return _Plan(tuple(steps), 2 * half)


@functools.lru_cache(maxsize=64)
def _uniform(count: int, num_chunks: int) -> tuple:
    return tuple(chunk_bounds(count, num_chunks).tolist())


def _staging(nbytes: int) -> np.ndarray:
    """A reusable byte buffer of at least ``nbytes``, 64-byte aligned, kept between calls.

    Allocating (and page-faulting) a fresh staging buffer per call costs as much as the transfer
    itself for large buffers.
    """
    cached = _staging_cache.get("bytes")
    if cached is None or cached.nbytes < nbytes:
        raw = np.empty(nbytes + 64, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64
        cached = raw[start:start + nbytes]
        _staging_cache["bytes"] = cached
    return cached


def _private(comm) -> "MPI.Comm":
    """A duplicate of ``comm`` kept for ringccl's messages (created collectively on first use)."""
    key = MPI.Comm.py2f(comm)
    dup = _comm_cache.get(key)
    if dup is None:
        dup = comm.Dup()
        _comm_cache[key] = dup
    return dup


def release_buffers() -> None:
    """Free the staging buffer, the cached plans and the private communicators.

    Collective over every communicator ringccl used: call it on every rank.
    """
    _staging_cache.clear()
    _plan.cache_clear()
    for comm in _comm_cache.values():
        comm.Free()
    _comm_cache.clear()


def execute(schedule: Schedule, buffer: np.ndarray, op: ReduceOp = ReduceOp.SUM, comm=None,
            segment_bytes: int | None = None, bounds=None) -> np.ndarray:
    """Execute ``schedule`` in place on this rank's working ``buffer``.

    Args:
        schedule: any verified schedule whose world_size equals the communicator's size.
        buffer: 1-D C-contiguous numpy array, the collective's working buffer (L elements).
        op: reduce op applied by REDUCE transfers (AVG sums here; the caller divides).
        comm: an mpi4py intracommunicator (None = ``MPI.COMM_WORLD``).
        segment_bytes: split each transferred chunk into segments of this many bytes and move
            them as a pipeline: a segment is reduced as soon as it arrives and forwarded as soon
            as it is final, while later segments are in flight. None: segments of
            ``ringccl.mpi.DEFAULT_SEGMENT_BYTES`` for chunks >= ``ringccl.mpi.
            PIPELINE_THRESHOLD_BYTES`` (never when that is None, the measured default), else
            whole chunks. 0: never split.
        bounds: this rank's chunk boundaries, num_chunks + 1 non-decreasing element offsets into
            ``buffer`` (from the collective's contract, ``Collective.chunk_sizes``); a
            transfer's chunk must have the same size on both ranks. None:
            ``ringccl.chunk_bounds(L, num_chunks)``, the ``numpy.array_split`` pieces.

    Returns:
        ``buffer``.
    Raises:
        BackendError: the communicator's size does not match the schedule, or an MPI operation
            failed (the message names the step and the peers).
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    rank, world_size = comm.Get_rank(), comm.Get_size()
    if world_size != schedule.world_size:
        raise BackendError(f"schedule is for world_size={schedule.world_size}, but the "
                           f"communicator has {world_size} ranks")
    itemsize = buffer.itemsize
    count = buffer.shape[0]
    if bounds is None:
        bounds = _uniform(count, schedule.num_chunks)
    else:
        bounds = tuple(int(b) for b in bounds)
        if len(bounds) != schedule.num_chunks + 1 or any(
                b < a for a, b in zip(bounds, bounds[1:])) or bounds[0] < 0 or bounds[-1] > count:
            raise BackendError(f"bounds must be {schedule.num_chunks + 1} non-decreasing offsets "
                               f"within the buffer's {count} elements")
    if segment_bytes is None:  # the package-level parameters, read now so users can set them
        from . import DEFAULT_SEGMENT_BYTES, PIPELINE_THRESHOLD_BYTES
        longest = max(b - a for a, b in zip(bounds, bounds[1:])) * itemsize
        segment_bytes = (DEFAULT_SEGMENT_BYTES if PIPELINE_THRESHOLD_BYTES is not None
                         and longest >= PIPELINE_THRESHOLD_BYTES else 0)
    segment_bytes = max(itemsize, segment_bytes - segment_bytes % itemsize) if segment_bytes else 0
    plan = _plan(schedule, rank, bounds, itemsize, segment_bytes)
    if not plan.steps:
        return buffer
    staging = _staging(plan.staging_bytes)
    try:
        _run_dataflow(plan.steps, buffer.view(np.uint8), staging, buffer.dtype, ufunc(op),
                      _private(comm))
    except _StepFailed as failed:
        step, exc = failed.args
        raise BackendError(
            f"{schedule.algorithm} {schedule.collective} failed at step {step.index}"
            f" ({step.phase}) on rank {rank} exchanging with ranks {list(step.peers)}: {exc}"
        ) from exc
    return buffer


class _StepFailed(Exception):
    """Internal: (step plan, exception) of the step whose MPI operation failed."""


def _run_dataflow(steps, data: np.ndarray, staging: np.ndarray, dtype, combine, comm) -> None:
    """Post every operation as soon as its data is ready (the torch executor's dataflow order).

    * step k+1's receives are posted while step k is still running (staged ones land in the
      other staging half; in-place ones wait until nothing of step k writes their chunk);
    * a send of step k+1 is posted as soon as step k has finished writing its segment;
    * a chunk is overwritten only after every earlier send reading it completed.
    Posting order per peer and direction stays the canonical one (step-major, then the step's
    order, segment-minor) on both sides, so messages match: an operation that must wait holds
    back the later ones to the same peer.
    """
    in_flight: dict[int, list] = {}   # chunk -> send requests that may still read it
    BYTE = MPI.BYTE

    def drain(chunk: int) -> None:
        reqs = in_flight.pop(chunk, None)
        if reqs:
            MPI.Request.Waitall(reqs)

    def post_send(s: _Send) -> None:
        in_flight.setdefault(s.chunk, []).append(
            comm.Isend([data[s.lo:s.hi], BYTE], s.peer, _TAG))

    def post_recv(r: _Recv):
        if r.stage < 0:
            drain(r.chunk)
            return comm.Irecv([data[r.lo:r.hi], BYTE], r.peer, _TAG)
        return comm.Irecv([staging[r.stage:r.stage + r.hi - r.lo], BYTE], r.peer, _TAG)

    def apply(r: _Recv) -> None:
        if r.stage < 0:
            return
        drain(r.chunk)  # sends may still read the chunk being updated
        dst = data[r.lo:r.hi].view(dtype)
        src = staging[r.stage:r.stage + r.hi - r.lo].view(dtype)
        if r.reduce:
            combine(dst, src, out=dst)
        else:
            dst[...] = src

    step = steps[0]
    try:
        recv_reqs = {0: [post_recv(r) for r in steps[0].recvs]}
        for s in steps[0].sends:
            post_send(s)
        for k, step in enumerate(steps):
            nxt = steps[k + 1] if k + 1 < len(steps) else None
            # sends of step k+1 held back, per peer in posting order: [send, ready?]
            held: dict[int, list[list]] = {}
            pending: dict[tuple[int, int], list[list]] = {}  # segment -> its held entries
            # the last receive into each segment (several reduces may target one segment)
            last = {(r.chunk, r.segment): i for i, r in enumerate(step.recvs)}

            def flush(peer: int) -> None:
                queue = held[peer]
                while queue and queue[0][1]:
                    post_send(queue.pop(0)[0])

            if nxt is not None:
                # receives of step k+1 that cannot disturb step k go out now; once one from a
                # peer must wait, the later ones from that peer wait too (order matches them)
                late, late_peers = [], set()
                for r in nxt.recvs:
                    wait = r.peer in late_peers or (r.stage < 0 and r.chunk in step.writes)
                    if wait:
                        late_peers.add(r.peer)
                    late.append(wait)
                recv_reqs[k + 1] = [None if wait else post_recv(r)
                                    for r, wait in zip(nxt.recvs, late)]
                for s in nxt.sends:
                    blocked = s.chunk in step.writes
                    if blocked or held.get(s.peer):
                        entry = [s, not blocked]
                        held.setdefault(s.peer, []).append(entry)
                        if blocked:
                            pending.setdefault((s.chunk, s.segment), []).append(entry)
                    else:
                        post_send(s)
            for i, (r, req) in enumerate(zip(step.recvs, recv_reqs.pop(k))):
                req.Wait()
                apply(r)
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
                reqs = recv_reqs[k + 1]
                for i, r in enumerate(nxt.recvs):
                    if reqs[i] is None:
                        reqs[i] = post_recv(r)
        for chunk in list(in_flight):
            drain(chunk)
    except MPI.Exception as exc:
        raise _StepFailed(step, exc) from exc
