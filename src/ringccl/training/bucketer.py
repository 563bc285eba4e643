"""Gradient buckets with overlap, without DDP: what DDP's reducer does, in a page of Python.

Backward produces gradients roughly in reverse parameter order. Fusing them into buckets turns
many latency-bound small all-reduces into a few bandwidth-bound ones (a ring all-reduce costs
2(N-1) steps whatever its size: Patarasuk & Yuan 2009), and launching each bucket as soon as its
last gradient is ready hides its communication behind the backward of earlier layers (Li et
al., VLDB 2020, §3.2).

Life of one synchronized step::

    loss.backward()      # post-accumulate-grad hooks copy each grad into its bucket; a full
                         # bucket (and every full bucket after it, in index order) is handed to
                         # the background communicator while backward goes on
    bucketer.finish()    # launch what is left, wait for all, write the averaged grads back
    optimizer.step()

Buckets are launched strictly in bucket-index order on every rank, whatever order their
gradients became ready in, so the background communicator's FIFO runs the same collective
at the same position on every rank (see :mod:`ringccl.training.background` for why it cannot
deadlock).

References: Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
VLDB 13(12), 2020, sections 3.2-3.3 (bucketing, overlap, no_sync); Sergeev & Del Balso,
"Horovod", arXiv:1802.05799, 2018 (tensor fusion).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..algorithms import get_algorithm
from ..errors import ArgumentError, ArgumentTypeError, BackendError
from ..backends.torch.collectives import all_reduce
from .background import Communicator
from .stats import CommStats, bytes_sent

__all__ = ["GradientBucketer", "StepTimeline", "BucketEvent"]

_MB = 1024 * 1024  # DDP's bucket_cap_mb counts MiB


def check_cap_mb(value, argument: str) -> None:
    """A bucket cap: a finite number of MiB > 0, else ArgumentError naming ``argument``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise ArgumentError(f"{argument}={value!r} must be a finite number of MiB > 0")


@dataclass
class BucketEvent:
    """One bucket in one step; times are ``time.perf_counter()`` seconds.

    ready: its last gradient was copied in; launched: handed to the communicator;
    started/done: the collective ran on the background thread between these.
    """

    index: int
    nbytes: int
    num_params: int
    ready: float = float("nan")
    launched: float = float("nan")
    started: float = float("nan")
    done: float = float("nan")


@dataclass
class StepTimeline:
    """One synchronized step: backward and the buckets' communication.

    backward_start: the model output's gradient arrived (backward entered the model);
    backward_end: :meth:`GradientBucketer.finish` was called; finish_done: it returned.
    """

    backward_start: float = float("nan")
    backward_end: float = float("nan")
    finish_done: float = float("nan")
    buckets: list = field(default_factory=list)

    @property
    def exposed_comm_s(self) -> float:
        """Seconds spent waiting for communication after backward ended."""
        return self.finish_done - self.backward_end

    @property
    def comm_s(self) -> float:
        """Seconds the communicator was busy with this step's buckets."""
        return sum(b.done - b.started for b in self.buckets)

    def as_dict(self) -> dict:
        return {"backward_start": self.backward_start, "backward_end": self.backward_end,
                "finish_done": self.finish_done, "exposed_comm_s": self.exposed_comm_s,
                "comm_s": self.comm_s, "buckets": [vars(b).copy() for b in self.buckets]}


class _Bucket:
    def __init__(self, index: int, params: list, dtype, device):
        self.index, self.params = index, params
        self.offsets = []
        total = 0
        for p in params:
            self.offsets.append(total)
            total += p.numel()
        self.buffer = torch.zeros(total, dtype=dtype, device=device)
        self.nbytes = total * self.buffer.element_size()
        self.reset()

    def reset(self) -> None:
        self.ready = [False] * len(self.params)
        self.pending = len(self.params)
        self.future = None
        self.event = BucketEvent(self.index, self.nbytes, len(self.params))

    def slot(self, i: int) -> torch.Tensor:
        p = self.params[i]
        return self.buffer[self.offsets[i]:self.offsets[i] + p.numel()]


class GradientBucketer:
    """All-reduce (average) a model's gradients bucket by bucket, overlapped with backward.

    Parameters that require grad are taken in *reverse* ``model.parameters()`` order and packed
    into buckets; a bucket is closed as soon as its size reaches its cap - ``first_bucket_mb``
    MiB for the first (small, so communication starts early), ``bucket_cap_mb`` MiB for the
    others - as DDP's assignment does: a bucket may exceed its cap by its last tensor, the last
    bucket holds what is left, and no bucket mixes dtypes or devices. Each bucket keeps a flat
    buffer (one extra copy of the gradients, as DDP's buckets). Every rank must construct it
    on the same model (same parameter order and shapes) at the same point (it may create a
    process group).

    Args:
        model: the replicated ``torch.nn.Module``.
        bucket_cap_mb: cap of every bucket after the first, MiB (> 0).
        first_bucket_mb: cap of the first bucket, MiB (> 0).
        algorithm: an all_reduce algorithm of ``ringccl.algorithms("all_reduce")``.
        group: process group (None: the default group).
        overlap: True launches each bucket when full; False launches all of them in
            :meth:`finish` (same buckets, communication after backward: the baseline).
        communicator: share an existing :class:`~ringccl.training.background.Communicator`.

    Attributes:
        buckets: number of buckets; ``bucket_sizes()`` gives their bytes.
        stats: :class:`~ringccl.training.stats.CommStats`, bytes this rank sent.
        timeline: one :class:`StepTimeline` per synchronized step (the last ``keep_timeline``).

    Raises:
        ArgumentTypeError: model is not a torch.nn.Module.
        ArgumentError: caps <= 0, unknown algorithm, no parameter requires grad.
    """

    def __init__(self, model: torch.nn.Module, bucket_cap_mb: float = 25,
                 first_bucket_mb: float = 1, algorithm: str = "ring", group=None,
                 overlap: bool = True, communicator: Communicator | None = None,
                 keep_timeline: int = 100):
        if not isinstance(model, torch.nn.Module):
            raise ArgumentTypeError(f"model must be a torch.nn.Module, got "
                                    f"{type(model).__name__}")
        check_cap_mb(bucket_cap_mb, "bucket_cap_mb")
        check_cap_mb(first_bucket_mb, "first_bucket_mb")
        get_algorithm("all_reduce", algorithm)
        params, seen = [], set()
        for p in reversed(list(model.parameters())):
            if p.requires_grad and id(p) not in seen:  # shared parameters count once
                seen.add(id(p))
                params.append(p)
        if not params:
            raise ArgumentError("model has no parameter that requires grad")
        self.algorithm, self.group, self.overlap = algorithm, group, overlap
        self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self._owns_communicator = communicator is None
        self.communicator = communicator if communicator is not None else Communicator(group)
        self._buckets = self._assign(params, int(first_bucket_mb * _MB), int(bucket_cap_mb * _MB))
        self._where = {id(p): (b, i) for b in self._buckets for i, p in enumerate(b.params)}
        self._next = 0               # first bucket not launched yet in this step
        self._sync = True
        self._step = StepTimeline()
        self.stats = CommStats()
        self.timeline: list[StepTimeline] = []
        self._keep = keep_timeline
        self._handles = [p.register_post_accumulate_grad_hook(self._on_grad_ready)
                         for p in params]
        self._handles.append(model.register_forward_hook(self._on_forward))

    @staticmethod
    def _assign(params, first_cap: int, cap: int) -> list[_Bucket]:
        buckets, current, size = [], [], 0
        for p in params:
            if current and (p.dtype != current[0].dtype or p.device != current[0].device):
                buckets.append(current)
                current, size = [], 0
            current.append(p)
            size += p.numel() * p.element_size()
            if size >= (first_cap if not buckets else cap):
                buckets.append(current)
                current, size = [], 0
        if current:
            buckets.append(current)
        return [_Bucket(i, ps, ps[0].dtype, ps[0].device) for i, ps in enumerate(buckets)]

    # -- public ---------------------------------------------------------------------------------

    @property
    def buckets(self) -> int:
        return len(self._buckets)

    def bucket_sizes(self) -> list[int]:
        """Bytes of each bucket, in launch order."""
        return [b.nbytes for b in self._buckets]

    def bucket_params(self) -> list[list[torch.Tensor]]:
        """The parameters of each bucket, in launch order."""
        return [list(b.params) for b in self._buckets]

    @contextlib.contextmanager
    def no_sync(self):
        """Skip communication: gradients accumulate locally in ``param.grad`` and
        :meth:`finish` returns at once. The first synchronized backward after it reduces the
        accumulated sum (one all-reduce per bucket for k micro-batches instead of k)."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def finish(self) -> None:
        """Launch the buckets not launched yet, wait for all, write averaged grads back.

        Parameters whose hook did not fire this step (unused in this backward) contribute their
        current ``grad`` or zeros; on return every parameter's ``grad`` holds the mean over
        ranks. A no-op inside :meth:`no_sync`.

        Raises:
            BackendError: a bucket's collective failed.
        """
        if not self._sync:
            return
        self._step.backward_end = time.perf_counter()
        while self._next < len(self._buckets):
            bucket = self._buckets[self._next]
            for i, ready in enumerate(bucket.ready):
                if not ready:
                    self._copy_in(bucket, i)
            self._launch(bucket)
        errors = []
        for bucket in self._buckets:
            try:
                bucket.future.wait()
            except Exception as exc:  # keep waiting for the others: they share the FIFO
                errors.append(f"bucket {bucket.index}: {exc}")
        if errors:
            self._reset()
            raise BackendError("gradient all-reduce failed: " + "; ".join(errors))
        with torch.no_grad():
            for bucket in self._buckets:
                for i, p in enumerate(bucket.params):
                    averaged = bucket.slot(i).view_as(p)
                    if p.grad is None:
                        p.grad = averaged.clone()
                    else:
                        p.grad.copy_(averaged)
        self._step.finish_done = time.perf_counter()
        self._step.buckets = [bucket.event for bucket in self._buckets]
        self.timeline.append(self._step)
        del self.timeline[:-self._keep]
        self._reset()

    def remove(self) -> None:
        """Remove the hooks and stop the background thread (if this bucketer created it)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._owns_communicator:
            self.communicator.close()

    # -- hooks ----------------------------------------------------------------------------------

    def _reset(self) -> None:
        for bucket in self._buckets:
            bucket.reset()
        self._next = 0
        self._step = StepTimeline()

    def _on_forward(self, module, inputs, output) -> None:
        if not (self._sync and torch.is_grad_enabled()):
            return
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        for t in outputs:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(self._on_backward_start)

    def _on_backward_start(self, grad):
        if self._step.backward_start != self._step.backward_start:  # still NaN
            self._step.backward_start = time.perf_counter()

    def _on_grad_ready(self, p: torch.Tensor) -> None:
        if not self._sync:
            return
        bucket, i = self._where[id(p)]
        if bucket.ready[i] or bucket.future is not None:
            raise BackendError("a gradient became ready twice in one step: call "
                               "GradientBucketer.finish() after every synchronized backward, or "
                               "run the extra backward under no_sync()")
        self._copy_in(bucket, i)
        if bucket.pending == 0:
            bucket.event.ready = time.perf_counter()
            if self.overlap:
                # launch in index order only: every rank's FIFO then holds the same sequence
                while (self._next < len(self._buckets)
                       and self._buckets[self._next].pending == 0):
                    self._launch(self._buckets[self._next])

    def _copy_in(self, bucket: _Bucket, i: int) -> None:
        p = bucket.params[i]
        slot = bucket.slot(i)
        if p.grad is None:
            slot.zero_()
        else:
            slot.copy_(p.grad.detach().reshape(-1))
        bucket.ready[i] = True
        bucket.pending -= 1

    def _launch(self, bucket: _Bucket) -> None:
        buffer, n, algorithm, event = bucket.buffer, self.world_size, self.algorithm, bucket.event

        def job(group):
            event.started = time.perf_counter()
            buffer.div_(n)  # mean = sum of (x / N), as DDP does
            # a gradient bucket is scratch: a failed step is abandoned, no rollback copy needed
            all_reduce(buffer, group=group, algorithm=algorithm, restore=False)
            event.done = time.perf_counter()

        self.stats.add("all_reduce", bytes_sent("all_reduce", algorithm, n, self.rank,
                                                buffer.numel(), buffer.element_size()))
        event.launched = time.perf_counter()
        if event.ready != event.ready:  # NaN: launched by finish(), not by its last gradient
            event.ready = event.launched
        bucket.future = self.communicator.submit(job)
        self._next += 1
