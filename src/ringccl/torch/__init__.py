"""ringccl collectives on real processes, with torch.distributed's names, arguments and shapes.

Requires the ``torch`` extra and an initialized process group (``init_process_group``, torchrun,
or :func:`ringccl.torch.launch.launch`). Every backend with point-to-point works: gloo for CPU
tensors, NCCL for CUDA tensors, MPI.

Example (under ``torchrun --nproc-per-node 4 script.py``)::

    import torch, torch.distributed as dist, ringccl.torch as rt
    dist.init_process_group("gloo")
    t = torch.ones(1 << 20)
    rt.all_reduce(t)                       # ring all-reduce, in place, like dist.all_reduce
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..algorithms import build_schedule
from ..errors import ArgumentError, ArgumentTypeError, BackendError
from ..ops import ReduceOp, parse_op
from .executor import execute

__all__ = ["all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "run_schedule",
           "ReduceOp"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SUPPORTED = _FLOATS + (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                        torch.bool)


def _group_size(group) -> int:
    if not dist.is_available() or not dist.is_initialized():
        raise BackendError("torch.distributed is not initialized: call "
                           "torch.distributed.init_process_group first (or run under torchrun, "
                           "or use ringccl.torch.launch.launch)")
    return dist.get_world_size(group)


def _check_tensor(t: Any, argument: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(f"{argument} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _SUPPORTED:
        raise ArgumentTypeError(f"{argument}.dtype={t.dtype} is not supported; expected one of "
                                f"{', '.join(str(d).replace('torch.', '') for d in _SUPPORTED)}")
    return t


def _check_op(op: Any, dtype: torch.dtype, argument: str = "op") -> ReduceOp:
    reduce_op = parse_op(op)
    is_float = dtype in _FLOATS
    if reduce_op is ReduceOp.AVG and not is_float:
        raise ArgumentError(f"{argument}=avg needs a floating dtype, got {dtype}")
    if reduce_op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and is_float:
        raise ArgumentError(f"{argument}={reduce_op.value} is bitwise and needs an integer or bool "
                            f"dtype, got {dtype}")
    return reduce_op


def run_schedule(schedule, buffer: torch.Tensor, op: Any = ReduceOp.SUM, group=None,
                 segment_bytes: int | None = None) -> torch.Tensor:
    """Execute any ``schedule`` in place on this rank's 1-D contiguous working ``buffer``
    (``segment_bytes``: see :func:`ringccl.torch.executor.execute`)."""
    _group_size(group)
    _check_tensor(buffer, "buffer")
    if buffer.dim() != 1 or not buffer.is_contiguous():
        raise ArgumentError(f"buffer must be 1-D and contiguous, got shape {tuple(buffer.shape)}")
    return execute(schedule, buffer, _check_op(op, buffer.dtype), group, segment_bytes)


def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group=None,
               algorithm: str = "ring", segment_bytes: int | None = None) -> torch.Tensor:
    """Reduce ``tensor`` across all ranks of ``group``, in place (as ``dist.all_reduce``).

    Args:
        tensor: any shape, same shape and dtype on every rank. Non-contiguous tensors are handled
            through a contiguous copy that is written back.
        op: ``ReduceOp``/``torch.distributed.ReduceOp``/name; AVG needs floats, bitwise ops
            integers or bool.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("all_reduce")``.
        segment_bytes: pipelining segment size in bytes (None: automatic, 0: never split; see
            :data:`ringccl.torch.executor.PIPELINE_THRESHOLD_BYTES`).

    Returns:
        ``tensor`` (also modified in place).
    Raises:
        ArgumentError, ArgumentTypeError: bad argument, before any data moves.
        BackendError: no process group, or a failed transfer.
    """
    world_size = _group_size(group)
    _check_tensor(tensor, "tensor")
    reduce_op = _check_op(op, tensor.dtype)
    schedule = build_schedule("all_reduce", algorithm, world_size)
    work = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    execute(schedule, work, reduce_op, group, segment_bytes)
    if reduce_op is ReduceOp.AVG:
        work.div_(world_size)
    if work.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(work.view(tensor.shape))
    return tensor


def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor, op: Any = ReduceOp.SUM,
                          group=None, algorithm: str = "ring",
                          segment_bytes: int | None = None) -> torch.Tensor:
    """Reduce ``input`` across ranks and leave block ``rank`` in ``output``
    (as ``dist.reduce_scatter_tensor``).

    Args:
        output: ``input.numel() // world_size`` elements, same dtype and device as ``input``.
        input: world_size · output.numel() elements; not modified, unless ``output`` is the
            view ``input.reshape(-1)[rank * n:(rank + 1) * n]`` (in place, as nccl-tests does):
            then input is the working buffer.
        op, group, algorithm, segment_bytes: as :func:`all_reduce`
            (``ringccl.algorithms("reduce_scatter")``).

    Returns:
        ``output``.
    Raises:
        ArgumentError: sizes that do not match, dtype/device mismatch, bad op.
    """
    world_size = _group_size(group)
    _check_tensor(output, "output")
    _check_tensor(input, "input")
    if output.dtype != input.dtype:
        raise ArgumentTypeError(f"output.dtype={output.dtype} differs from input.dtype={input.dtype}")
    if output.device != input.device:
        raise ArgumentError(f"output.device={output.device} differs from input.device={input.device}")
    if input.numel() != world_size * output.numel():
        raise ArgumentError(f"input has {input.numel()} elements; reduce_scatter_tensor needs "
                            f"world_size * output.numel() = {world_size} * {output.numel()}")
    reduce_op = _check_op(op, input.dtype)
    schedule = build_schedule("reduce_scatter", algorithm, world_size)
    rank = dist.get_rank(group)
    lo = rank * output.numel()
    flat = input.reshape(-1)
    if (output.is_contiguous() and flat.data_ptr() == input.data_ptr()
            and output.data_ptr() == flat[lo:].data_ptr()):
        work = flat  # output is input's block rank (in place, as nccl-tests): no copy
    else:
        # the schedule reduces in place; the caller's input stays. The copy goes to a buffer
        # kept between calls: a fresh clone per call paid its page faults every time.
        work = _scratch(flat)
    execute(schedule, work, reduce_op, group, segment_bytes)
    block = work[lo:lo + output.numel()]
    if reduce_op is ReduceOp.AVG:
        block.div_(world_size)
    if block.data_ptr() != output.data_ptr():
        output.copy_(block.view(output.shape))
    return output


_scratch_cache: dict = {}


def _scratch(flat: torch.Tensor) -> torch.Tensor:
    """A copy of ``flat`` in a buffer kept between calls (per dtype and device)."""
    key = (flat.dtype, flat.device)
    cached = _scratch_cache.get(key)
    if cached is None or cached.numel() < flat.numel():
        cached = torch.empty(flat.numel(), dtype=flat.dtype, device=flat.device)
        _scratch_cache[key] = cached
    work = cached[:flat.numel()]
    work.copy_(flat)
    return work


def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group=None,
                           algorithm: str = "ring",
                           segment_bytes: int | None = None) -> torch.Tensor:
    """Gather every rank's ``input_tensor`` into ``output_tensor`` on every rank, in rank order
    (as ``dist.all_gather_into_tensor``).

    Args:
        output_tensor: world_size · input_tensor.numel() elements, same dtype and device.
        input_tensor: this rank's block.
        group, algorithm, segment_bytes: as :func:`all_reduce`
            (``ringccl.algorithms("all_gather")``).

    Returns:
        ``output_tensor``.
    Raises:
        ArgumentError: sizes that do not match, dtype/device mismatch.
    """
    world_size = _group_size(group)
    _check_tensor(output_tensor, "output_tensor")
    _check_tensor(input_tensor, "input_tensor")
    if output_tensor.dtype != input_tensor.dtype:
        raise ArgumentTypeError(f"output_tensor.dtype={output_tensor.dtype} differs from "
                                f"input_tensor.dtype={input_tensor.dtype}")
    if output_tensor.device != input_tensor.device:
        raise ArgumentError(f"output_tensor.device={output_tensor.device} differs from "
                            f"input_tensor.device={input_tensor.device}")
    if output_tensor.numel() != world_size * input_tensor.numel():
        raise ArgumentError(f"output_tensor has {output_tensor.numel()} elements; "
                            f"all_gather_into_tensor needs world_size * input_tensor.numel() = "
                            f"{world_size} * {input_tensor.numel()}")
    schedule = build_schedule("all_gather", algorithm, world_size)
    contiguous = output_tensor.is_contiguous()
    work = output_tensor.view(-1) if contiguous else torch.empty_like(output_tensor).view(-1)
    rank, n = dist.get_rank(group), input_tensor.numel()
    work[rank * n:(rank + 1) * n].copy_(input_tensor.reshape(-1))
    execute(schedule, work, ReduceOp.SUM, group, segment_bytes)
    if not contiguous:
        output_tensor.copy_(work.view(output_tensor.shape))
    return output_tensor
