"""Run any schedule on a torch.distributed process group with non-blocking point-to-point.

The executor knows nothing about algorithms: it walks ``schedule.program(rank)``. For every step
it posts all of the rank's sends and receives at once with ``dist.batch_isend_irecv`` (so no rank
ever blocks in a send before its peer posts the matching receive, which would deadlock a ring),
waits for them, then applies the received chunks. The post order comes from the schedule's
canonical transfer order, identical on every rank, which gloo and NCCL both require for
matching operations between the same pair of ranks.

Receives that reduce land in one preallocated staging buffer (``max receives per step × largest
chunk`` elements, allocated once per call) and are then combined in place into the caller's
buffer; receives that copy land directly in their destination chunk unless that chunk is also
being sent in the same step (BSP: a step's sends read the pre-step state).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..errors import BackendError
from ..ir import Kind, Schedule, chunk_bounds
from ..ops import ReduceOp

__all__ = ["execute", "combine_fn"]


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


def execute(schedule: Schedule, buffer: torch.Tensor, op: ReduceOp = ReduceOp.SUM,
            group=None) -> torch.Tensor:
    """Execute ``schedule`` in place on this rank's working ``buffer``.

    Args:
        schedule: any verified schedule whose world_size equals the group's size.
        buffer: 1-D contiguous tensor, the collective's working buffer (L elements); chunks are
            ``torch.tensor_split`` pieces, the same boundaries as ``ringccl.chunk_bounds``.
        op: reduce op applied by REDUCE transfers (AVG sums here; the caller divides).
        group: process group (None = the default group).

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
    bounds = chunk_bounds(buffer.numel(), schedule.num_chunks).tolist()
    chunks = [buffer[bounds[c]:bounds[c + 1]] for c in range(schedule.num_chunks)]
    longest = max((bounds[c + 1] - bounds[c] for c in range(schedule.num_chunks)), default=0)
    staged_per_step = max((len(s.recvs) for s in program.steps), default=0)
    staging = buffer.new_empty(staged_per_step * longest) if staged_per_step and longest else None
    combine = combine_fn(op)
    peer = _peers(group, world_size)

    for step in program.steps:
        sending = {s.chunk for s in step.sends}
        ops = [dist.P2POp(dist.isend, chunks[s.chunk], peer[s.peer], group)
               for s in step.sends if chunks[s.chunk].numel()]
        staged = []
        offset = 0
        for r in step.recvs:
            target = chunks[r.chunk]
            if not target.numel():
                continue
            if r.kind is Kind.REDUCE or r.chunk in sending:
                tmp = staging[offset:offset + target.numel()]
                offset += target.numel()
                staged.append((r, tmp))
                target = tmp
            ops.append(dist.P2POp(dist.irecv, target, peer[r.peer], group))
        if not ops:
            continue
        try:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        except RuntimeError as exc:  # gloo/NCCL report a dead peer or timeout as RuntimeError
            peers = sorted({s.peer for s in step.sends} | {r.peer for r in step.recvs})
            raise BackendError(
                f"{schedule.algorithm} {schedule.collective} failed at step {step.index}"
                f" ({step.phase}) on rank {rank} exchanging with ranks {peers}: {exc}") from exc
        for r, tmp in staged:
            if r.kind is Kind.REDUCE:
                combine(chunks[r.chunk], tmp)
            else:
                chunks[r.chunk].copy_(tmp)
    return buffer


def max_staging_elements(schedule: Schedule, rank: int, count: int) -> int:
    """Elements of staging memory :func:`execute` allocates on ``rank`` for a buffer of ``count``."""
    program = schedule.program(rank)
    longest = int(np.diff(chunk_bounds(count, schedule.num_chunks)).max(initial=0))
    return max((len(s.recvs) for s in program.steps), default=0) * longest
