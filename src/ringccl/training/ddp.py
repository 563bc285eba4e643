"""A DDP communication hook that all-reduces each gradient bucket with a ringccl schedule.

``DistributedDataParallel`` fuses gradients into buckets (25 MiB by default, the first one
1 MiB) and hands each bucket to the communication hook as soon as all of its gradients are
ready, while backward goes on computing earlier layers (Li et al., VLDB 2020, §3.2). The hook
returns a ``torch.futures.Future``; DDP waits for all of them at the end of backward and copies
the results back into ``param.grad``. Our hook runs the collective on a background
:class:`~ringccl.training.background.Communicator`, so the overlap is kept.

Example::

    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(None, ringccl.torch.comm_hook("ring", compression="fp16"))

References: Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel
Training", VLDB 13(12), 2020 (buckets, overlap, hooks); torch's own
``ddp_comm_hooks/default_hooks.py`` (the fp16/bf16 compression contract).
"""

from __future__ import annotations

import collections
import time

import torch
import torch.distributed as dist

from ..algorithms import get_algorithm
from ..errors import ArgumentError
from ..backends.torch.collectives import all_reduce
from .background import Communicator
from .stats import CommStats, bytes_sent

__all__ = ["comm_hook"]

_COMPRESSION = {None: None, "fp16": torch.float16, "bf16": torch.bfloat16}


def _value(future: torch.futures.Future):
    """A chained future's callback: the value, or the failure raised (the chained future's
    error)."""
    return future.value()


def comm_hook(algorithm: str = "ring", compression: str | None = None, group=None,
              communicator: Communicator | None = None):
    """A DDP communication hook: ringccl all-reduce of every bucket, averaged over ranks.

    Call it on every rank, in the same order (it creates a private process group for its
    background thread unless ``communicator`` is given). Register the result with
    ``ddp.register_comm_hook(state, hook)``; ``state`` must be None or ``group``, as with
    torch's default hooks, whose state is the process group.

    Each bucket (1-D, the gradients' dtype) is divided by world_size *before* the sum, as
    torch's hooks do: with fp16 compression the sum of N gradients could overflow 65504 where
    their mean does not. With ``compression`` the division happens in the gradient's own dtype,
    then the bucket is cast to fp16/bf16, all-reduced in that dtype (half the bytes of fp32),
    and cast back into the bucket.

    Args:
        algorithm: an all_reduce algorithm of ``ringccl.algorithms("all_reduce")``.
        compression: None, "fp16" or "bf16".
        group: the process group DDP uses (None: the default group).
        communicator: share an existing background communicator (its group must have the same
            ranks as ``group``).

    Returns:
        ``hook(state, bucket) -> torch.futures.Future[torch.Tensor]``, with attributes
        ``stats`` (:class:`~ringccl.training.stats.CommStats`, bytes this rank sent) and
        ``communicator`` and ``events`` (the last 4096 buckets: dicts with ``bucket`` index,
        ``nbytes`` all-reduced (after compression), ``launched``, ``started``, ``done`` in
        ``time.perf_counter()`` seconds).
    Raises:
        ArgumentError: unknown algorithm or compression.
        BackendError: torch.distributed is not initialized.
    """
    get_algorithm("all_reduce", algorithm)
    if compression not in _COMPRESSION:
        raise ArgumentError(f"compression={compression!r} is not supported; expected None, "
                            f"'fp16' or 'bf16'")
    wire_dtype = _COMPRESSION[compression]
    comm = communicator if communicator is not None else Communicator(group)
    world_size, rank = dist.get_world_size(group), dist.get_rank(group)
    stats = CommStats()
    events: collections.deque = collections.deque(maxlen=4096)

    # (no annotations: under `from __future__ import annotations` they are strings, which
    # DDP's signature check rejects)
    def ringccl_allreduce_hook(state, bucket):
        if state is not None and state is not group:
            raise ArgumentError(f"state={state!r}: pass None or the process group given to "
                                f"comm_hook(group=...)")
        buffer = bucket.buffer()
        buffer.div_(world_size)  # mean = sum of (x / N): divide first, see docstring
        compressed = wire_dtype is not None and buffer.dtype != wire_dtype
        wire = buffer.to(wire_dtype) if compressed else buffer
        stats.add("all_reduce", bytes_sent("all_reduce", algorithm, world_size, rank,
                                           wire.numel(), wire.element_size()))
        event = {"bucket": bucket.index(), "nbytes": wire.numel() * wire.element_size(),
                 "launched": time.perf_counter()}
        events.append(event)

        def job(g):
            event["started"] = time.perf_counter()
            # a gradient bucket is scratch: a failed step is abandoned, no rollback copy needed
            all_reduce(wire, group=g, algorithm=algorithm, restore=False)
            event["done"] = time.perf_counter()
            return wire

        future = comm.submit(job)
        if not compressed:
            # chained, so that a failure is the returned future's own error, which DDP reads
            # in C++ as one; the Communicator's future holds it as a value (set_exception),
            # which DDP would try to cast to a tensor
            return future.then(_value)

        def decompress(fut: torch.futures.Future) -> torch.Tensor:
            buffer.copy_(fut.value())
            return buffer

        return future.then(decompress)

    ringccl_allreduce_hook.stats = stats
    ringccl_allreduce_hook.communicator = comm
    ringccl_allreduce_hook.events = events
    return ringccl_allreduce_hook

