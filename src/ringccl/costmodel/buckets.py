"""Gradient bucketing: many small all-reduces fused into few large ones, overlapped with backward.

PyTorch DDP (Li et al., VLDB 13(12), 2020, §3.2) puts gradients into buckets (25 MB by default) as backward produces them
and starts a bucket's all_reduce as soon as it is full, while earlier layers still compute. A
small tensor alone pays the collective's whole latency (2(N-1) alpha for a ring); fused, the
latency is paid once per bucket. Too large a bucket, though, waits for more of backward before its
communication can start, so the best capacity lies in between — this module finds it.

Model:

* bucket assignment follows torch's ``_compute_bucket_assignment_by_size`` (DDP's reducer): walk
  the tensors in the order their gradients become ready, add each to the open bucket, close the
  bucket once its size reaches the capacity (so a bucket may exceed it by its last tensor; a
  tensor larger than the capacity is a bucket by itself). DDP uses a first bucket of 1 MiB and
  25 MiB after it (``bucket_cap_mb=25``, MiB in torch's code);
* backward produces the gradients one after another, tensor i taking ``backward_seconds`` x its
  share of the bytes (or the given per-tensor times); a bucket is ready with its last tensor;
* the all_reduces run one at a time in bucket order on their own stream, each costing what
  :func:`ringccl.cost` predicts for its size: start = max(ready, end of the previous one).

References:
    Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB
    13(12), 2020, section 3.2 (gradient bucketing, overlap with backward).
    torch.nn.parallel.DistributedDataParallel (bucket_cap_mb; first bucket
    torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from .. import units
from .model import Predictor, predictor
from ..errors import ArgumentError
from .topology import Topology

__all__ = ["assign_buckets", "bucket_plan", "best_bucket_size", "BucketPlan", "Bucket",
           "DDP_BUCKET_BYTES", "DDP_FIRST_BUCKET_BYTES", "gpt2_gradient_sizes", "GPT2_CONFIGS"]

#: torch DDP's default bucket capacity: bucket_cap_mb=25, in MiB (torch/nn/parallel/distributed.py)
DDP_BUCKET_BYTES = 25 * 2**20
#: torch DDP's default first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)
DDP_FIRST_BUCKET_BYTES = 2**20


class Bucket(NamedTuple):
    """Tensors [first, last) fused into one collective of ``nbytes``; times in seconds."""

    first: int
    last: int
    nbytes: int
    ready_seconds: float
    start_seconds: float
    end_seconds: float


@dataclass(frozen=True)
class BucketPlan:
    """One bucket capacity on one model.

    Attributes:
        bucket_bytes: capacity (0: every tensor alone, "one by one").
        buckets: the buckets in launch order.
        comm_seconds: sum of the buckets' collective times.
        backward_seconds: when backward ends.
        finish_seconds: when the last bucket's collective ends.
        exposed_seconds: finish - backward: communication not hidden behind backward.
    """

    bucket_bytes: int
    buckets: tuple[Bucket, ...]
    comm_seconds: float
    backward_seconds: float
    finish_seconds: float

    @property
    def exposed_seconds(self) -> float:
        return self.finish_seconds - self.backward_seconds

    @property
    def num_buckets(self) -> int:
        return len(self.buckets)


def _sizes(tensor_sizes) -> np.ndarray:
    out = np.asarray([units.size(s) if isinstance(s, str) else s for s in tensor_sizes],
                     dtype=np.int64)
    if out.ndim != 1 or out.size == 0 or (out < 0).any():
        raise ArgumentError(f"tensor_sizes must be a non-empty list of byte counts >= 0, got "
                            f"{tensor_sizes!r}")
    return out


def assign_buckets(tensor_sizes: Sequence[int], bucket_bytes: int,
                   first_bucket_bytes: int | None = None) -> list[tuple[int, int]]:
    """Split tensors, in ready order, into buckets as DDP's reducer does.

    Args:
        tensor_sizes: bytes of each tensor, in the order its gradient becomes ready.
        bucket_bytes: capacity; a bucket closes once its size reaches it (0: one by one).
        first_bucket_bytes: capacity of the first bucket (default ``bucket_bytes``).
    Returns:
        [(first, last)] tensor index ranges, last exclusive.
    """
    sizes = _sizes(tensor_sizes)
    caps = [int(first_bucket_bytes if first_bucket_bytes is not None else bucket_bytes),
            int(bucket_bytes)]
    if min(caps) < 0:
        raise ArgumentError(f"bucket sizes must be >= 0, got {caps}")
    out, first, filled = [], 0, 0
    for i, s in enumerate(sizes.tolist()):
        filled += s
        if filled >= caps[min(len(out), 1)]:
            out.append((first, i + 1))
            first, filled = i + 1, 0
    if first < sizes.size:
        out.append((first, int(sizes.size)))
    return out


def _ready_times(sizes: np.ndarray, backward_seconds) -> np.ndarray:
    """When each tensor's gradient is ready: cumulative backward time."""
    if np.ndim(backward_seconds) == 0:
        total = float(backward_seconds)
        if total < 0:
            raise ArgumentError(f"backward_seconds={backward_seconds!r} must be >= 0")
        share = sizes / sizes.sum() if sizes.sum() else np.full(sizes.size, 1 / sizes.size)
        per = total * share
    else:
        per = np.asarray(backward_seconds, dtype=float)
        if per.shape != sizes.shape or (per < 0).any():
            raise ArgumentError("backward_seconds must be one number or one time >= 0 per "
                                f"tensor ({sizes.size}), got {backward_seconds!r}")
    return np.cumsum(per)


def _plan(sizes: np.ndarray, ready: np.ndarray, predict: Predictor, bucket_bytes: int,
          first_bucket_bytes: int | None) -> BucketPlan:
    ranges = assign_buckets(sizes, bucket_bytes, first_bucket_bytes)
    nbytes = np.array([sizes[a:b].sum() for a, b in ranges], dtype=float)
    seconds = np.atleast_1d(predict(nbytes))
    buckets, end = [], 0.0
    for (a, b), m, t in zip(ranges, nbytes, seconds):
        start = max(float(ready[b - 1]), end)
        end = start + float(t)
        buckets.append(Bucket(a, b, int(m), float(ready[b - 1]), start, end))
    return BucketPlan(int(bucket_bytes), tuple(buckets), float(seconds.sum()),
                      float(ready[-1]), end)


def bucket_plan(tensor_sizes: Sequence[int], bucket_bytes, world_size: int | None = None,
                topology: Topology | None = None, *, collective: str = "all_reduce",
                algorithm: str = "ring", alpha=None, bandwidth=None, gamma=0.0,
                backward_seconds=0.0, first_bucket_bytes=None, **params) -> BucketPlan:
    """Cost of gradients all-reduced in buckets of ``bucket_bytes`` (0: one tensor at a time).

    Args:
        tensor_sizes: bytes per gradient tensor (numbers or sizes such as ``"4MiB"``), in the
            order backward produces them (reverse of the parameters' order).
        bucket_bytes: capacity (bytes or a size string).
        world_size, topology, alpha, bandwidth, gamma, **params: as for :func:`ringccl.cost`.
        collective, algorithm: what each bucket runs.
        backward_seconds: total backward time, spread over tensors by bytes, or one time per
            tensor; 0 (default) = all gradients ready at once, so finish = comm_seconds.
        first_bucket_bytes: capacity of the first bucket (DDP: 1 MiB); default bucket_bytes.
    Returns:
        :class:`BucketPlan`.
    """
    sizes = _sizes(tensor_sizes)
    predict = predictor(collective, algorithm, world_size, topology, alpha=alpha,
                        bandwidth=bandwidth, gamma=gamma, **params)
    return _plan(sizes, _ready_times(sizes, backward_seconds), predict, units.size(bucket_bytes),
                 None if first_bucket_bytes is None else units.size(first_bucket_bytes))


def best_bucket_size(tensor_sizes: Sequence[int], world_size: int | None = None,
                     topology: Topology | None = None, *, candidates: Sequence | None = None,
                     collective: str = "all_reduce", algorithm: str = "ring", alpha=None,
                     bandwidth=None, gamma=0.0, backward_seconds=0.0,
                     **params) -> tuple[BucketPlan, list[BucketPlan]]:
    """The bucket capacity that finishes communication earliest for this model.

    Args:
        candidates: capacities to try (default: 0 and every power of two from 1 KiB up to the
            model's total size, plus DDP's 25 MiB); every bucket, the first included, gets it.
        tensor_sizes, world_size, topology, collective, algorithm, alpha, bandwidth, gamma,
            backward_seconds, **params: as for :func:`bucket_plan`.
    Returns:
        (the best plan — earliest finish, then fewest buckets — and all plans by capacity).
    """
    sizes = _sizes(tensor_sizes)
    total = int(sizes.sum())
    if candidates is None:
        top = max(10, int(np.ceil(np.log2(max(total, 1)))))
        caps = sorted({0, DDP_BUCKET_BYTES, *(2**k for k in range(10, top + 1))})
    else:
        caps = sorted({units.size(c) for c in candidates})
    predict = predictor(collective, algorithm, world_size, topology, alpha=alpha,
                        bandwidth=bandwidth, gamma=gamma, **params)
    ready = _ready_times(sizes, backward_seconds)
    plans = [_plan(sizes, ready, predict, c, None) for c in caps]
    best = min(plans, key=lambda p: (p.finish_seconds, p.num_buckets))
    return best, plans


#: nanoGPT's GPT-2 configurations: (n_layer, n_head, n_embd); vocab 50257, context 1024.
GPT2_CONFIGS = {"gpt2": (12, 12, 768), "gpt2-medium": (24, 16, 1024),
                "gpt2-large": (36, 20, 1280), "gpt2-xl": (48, 25, 1600)}


def gpt2_gradient_sizes(name: str = "gpt2", itemsize: int = 4) -> list[int]:
    """Bytes of every gradient of a GPT-2 (nanoGPT layout, tied lm_head), in backward order.

    nanoGPT's parameter order is wte, wpe, then per block ln_1 (w, b), attn.c_attn (w, b),
    attn.c_proj (w, b), ln_2 (w, b), mlp.c_fc (w, b), mlp.c_proj (w, b), then ln_f (w, b);
    gradients become ready roughly in reverse. "gpt2" has 124,439,808 parameters.

    Raises:
        ArgumentError: unknown name (the message lists GPT2_CONFIGS).
    """
    if name not in GPT2_CONFIGS:
        raise ArgumentError(f"model={name!r} is unknown; expected one of "
                            f"{', '.join(GPT2_CONFIGS)}")
    n_layer, _, d = GPT2_CONFIGS[name]
    block = [d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d]
    params = [50257 * d, 1024 * d] + block * n_layer + [d, d]
    return [p * itemsize for p in reversed(params)]
