"""ringccl collectives on real processes, with torch.distributed's names, arguments and shapes.

Requires the ``torch`` extra and an initialized process group (``init_process_group``, torchrun,
or :func:`ringccl.torch.launch.launch`). Every backend with point-to-point works: gloo for CPU
tensors, NCCL for CUDA tensors, MPI.

Example (under ``torchrun --nproc-per-node 4 script.py``)::

    import torch, torch.distributed as dist, ringccl.torch as rt
    dist.init_process_group("gloo")
    t = torch.ones(1 << 20)
    rt.all_reduce(t)                       # ring all-reduce, in place, like dist.all_reduce
    rt.broadcast(t, src=0, algorithm="direct")

Every function takes ``algorithm=`` (a name from ``ringccl.algorithms(collective)``) and the
algorithm's keyword parameters (e.g. ``segments=8`` for the ring chain, ``root=`` for master
all-reduce), and the executor's options (see :func:`executor.execute`): ``segment_bytes=``
(pipelining; None lets its measured threshold decide), ``timeout=`` (seconds each wait for a peer
may take; default the group's timeout) and ``restore=`` (default True). ``check=True`` (or the
environment variable ``RINGCCL_DEBUG=1`` on every rank) first compares a fingerprint of the call
across ranks (:mod:`ringccl.consistency`).

Failures: a peer that dies or stalls makes every waiting rank raise
:class:`ringccl.errors.PeerError` / :class:`ringccl.errors.RingcclTimeout` naming the collective,
algorithm, step and peer, within the timeout. The caller's tensors are then exactly as they were
before the call (all or nothing): functions whose working buffer is a private copy write the
caller's tensors only after success; those that work in the caller's tensor (all_reduce,
broadcast, reduce on dst, all_gather_into_tensor) restore every chunk they had written. After
such an error the group must not be used again: destroy it (a receive already posted to a
stalled peer cannot be withdrawn from the backend).

Every function builds the
named algorithm's schedule, maps the collective's contract (``ringccl.collectives``) onto a
working buffer and runs it with :func:`executor.execute`; none
knows any algorithm. Roots (``src``, ``dst``) are global ranks, as in torch.distributed. Chunks a
rank never touches get no memory (non-root ranks of scatter and gather hold only their subtree's
blocks). Every tensor argument, input or output (list entries included), may be
non-contiguous: handled through a contiguous copy written back. Arguments are checked before any
data moves (README, "Errors"); a call that raises on some ranks only
(e.g. ``scatter_list`` given on a non-source rank, as torch.distributed also refuses) leaves the
others waiting, as torch.distributed does.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..algorithms import build_schedule, get_algorithm
from .. import consistency
from ..args import check_int, check_rank
from ..errors import ArgumentError, ArgumentTypeError, BackendError, ConsistencyError, PeerError
from ..layout import Layout, all_to_all_sizes, check_own_block, layout, rooted, split_rows
from ..ops import ReduceOp, check_accumulate_dtype, check_op_dtype, parse_op
from .executor import check_timeout, execute

# Collectives write tensors that may require grad (parameters, their views), as
# torch.distributed's do: below autograd, so in-place writes to a leaf are allowed.
_no_grad = torch.no_grad()

__all__ = ["all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "broadcast",
           "reduce", "scatter", "gather", "all_to_all_single", "all_to_all", "run_schedule",
           "ReduceOp"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SUPPORTED = _FLOATS + (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                        torch.bool)


def _group_size(group) -> int:
    if not dist.is_available() or not dist.is_initialized():
        raise BackendError("torch.distributed is not initialized: call "
                           "torch.distributed.init_process_group first (or run under torchrun, "
                           "or use ringccl.torch.launch.launch)")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise ArgumentTypeError(f"group={group!r} must be a torch.distributed ProcessGroup "
                                f"(e.g. from dist.new_group) or None, got {type(group).__name__}")
    return dist.get_world_size(group)


def _check_tensor(t: Any, argument: str, written: bool = False) -> torch.Tensor:
    """A tensor of a supported dtype; ``written``: the call writes into it, so no two of its
    elements may share memory (an ``expand``ed view). Any strides are fine otherwise:
    non-contiguous tensors are handled through a contiguous copy that is written back."""
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(f"{argument} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _SUPPORTED:
        raise ArgumentTypeError(f"{argument}.dtype={t.dtype} is not supported; expected one of "
                                f"{', '.join(str(d).replace('torch.', '') for d in _SUPPORTED)}")
    if written and any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape)):
        raise ArgumentError(f"{argument} (shape {tuple(t.shape)}, stride {t.stride()}) has "
                            "elements that share memory (an expanded view) and cannot be written; "
                            "pass a tensor with its own storage (e.g. .clone())")
    return t


def _check_op(op: Any, dtype: torch.dtype, argument: str = "op") -> ReduceOp:
    reduce_op = parse_op(op)
    check_op_dtype(reduce_op, dtype, argument)
    return reduce_op


def _check_pair(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    if a.dtype != b.dtype:
        raise ArgumentTypeError(f"{name_a}.dtype={a.dtype} differs from {name_b}.dtype={b.dtype}; "
                                "they must be the same")
    if a.device != b.device:
        raise ArgumentError(f"{name_a}.device={a.device} differs from {name_b}.device={b.device}; "
                            "they must be the same")


def _group_rank(group, rank: int, argument: str, world_size: int) -> int:
    """torch.distributed's global ``rank`` (src/dst) as a rank of ``group``."""
    if group is None or group is dist.group.WORLD:
        return check_rank(rank, world_size, argument)
    rank = check_int(rank, argument, minimum=0)
    try:
        return dist.get_group_rank(group, rank)
    except (RuntimeError, ValueError):
        raise ArgumentError(f"{argument}={rank} is not a member of the given process group") \
            from None


class _Plan(NamedTuple):
    """A schedule mapped onto this rank's working buffer (:class:`ringccl.layout.Layout`) and
    the executor's pipelining setting."""

    layout: Layout
    options: dict           # the executor's options (segment_bytes, timeout, restore)

    @property
    def schedule(self):
        return self.layout.schedule

    @property
    def bounds(self) -> np.ndarray:
        return self.layout.bounds

    @property
    def numel(self) -> int:
        return self.layout.numel


def _plan(collective: str, algorithm: str, world_size: int, rank: int,
          buffer_count: int | None = None, **params) -> _Plan:
    """Build the schedule and this rank's layout from the collective's contract
    (:func:`ringccl.layout.layout`) for a size of ``buffer_count`` elements.

    The executor's options (``_EXECUTOR_OPTIONS``) in ``params`` go to the executor; ``check``
    must have been taken out by :func:`_agree`.
    """
    options = _executor_options(collective, params)
    schedule = build_schedule(collective, algorithm, world_size, **params)
    return _Plan(layout(schedule, rank, buffer_count=buffer_count), options)


def _executor_options(collective: str, params: dict) -> dict:
    """Take the executor's options (and ``accumulate_dtype``, which the reducing functions take
    as an argument) out of ``params`` and check them; returns the options."""
    options = {k: params.pop(k) for k in _EXECUTOR_OPTIONS if k in params}
    if "restore" in options and not isinstance(options["restore"], bool):
        raise ArgumentTypeError(f"restore={options['restore']!r} must be True or False")
    if "accumulate_dtype" in params:  # the reducing functions take it as an argument
        check_accumulate_dtype(params.pop("accumulate_dtype"), "float32", collective, False)
    if options.get("segment_bytes") is not None:
        options["segment_bytes"] = check_int(options["segment_bytes"], "segment_bytes")
    check_timeout(options.get("timeout"))
    return options


_EXECUTOR_OPTIONS = ("segment_bytes", "timeout", "restore")
_sequence: dict = {}   # id(group) -> ringccl collectives called on it so far


def _agree(group, collective: str, algorithm: str, params: dict, op: ReduceOp | None,
           dtype: torch.dtype, count: int, splits=None) -> None:
    """Count this call and, with ``check=True`` in ``params`` (taken out) or RINGCCL_DEBUG set,
    compare its fingerprint across the group's ranks before any data moves.

    Every rank receives every fingerprint and raises the same :class:`ConsistencyError` if they
    disagree (see :mod:`ringccl.consistency`).
    """
    check = params.pop("check", None)
    if check is not None and not isinstance(check, bool):
        raise ArgumentTypeError(f"check={check!r} must be True, False or None (None: "
                                "RINGCCL_DEBUG decides)")
    key = id(group if group is not None else dist.group.WORLD)
    seq = _sequence.get(key, 0)
    _sequence[key] = seq + 1
    if not consistency.enabled(check):
        return
    mine = consistency.fingerprint(
        seq, collective, algorithm, {k: v for k, v in params.items()
                                     if k not in _EXECUTOR_OPTIONS},
        None if op is None else op.value, str(dtype).replace("torch.", ""), count, splits)
    everyone: list = [None] * dist.get_world_size(group)
    try:
        dist.all_gather_object(everyone, mine, group=group)
    except RuntimeError as exc:
        # the peers are not in the same check: it is on for some ranks only, or they called
        # something else (or died); the exchange is bounded by the group's timeout
        raise PeerError(f"the cross-rank check of {algorithm} {collective} (check=True or "
                        f"RINGCCL_DEBUG) failed on rank {dist.get_rank(group)}: the other ranks "
                        "did not join it; is the check on for every rank, and are they all "
                        f"calling a ringccl collective? ({exc})",
                        collective=collective, algorithm=algorithm,
                        rank=dist.get_rank(group)) from exc
    problem = consistency.compare(everyone)
    if problem:
        raise ConsistencyError(f"ranks of the group call different collectives: {problem}",
                               everyone)


def _execute(plan: _Plan, work: torch.Tensor, op: ReduceOp, group, restore: bool) -> None:
    """Run ``plan`` on ``work``; ``restore``: ``work`` is the caller's tensor (all or nothing),
    unless the caller passed ``restore=False``."""
    options = dict(plan.options)
    options["restore"] = restore and options.get("restore", True)
    execute(plan.schedule, work, op, group, bounds=plan.bounds, **options)


def _write(work: torch.Tensor, plan: _Plan, data: torch.Tensor) -> None:
    """Copy this rank's input ``data`` into its input chunks of ``work``."""
    at = 0
    for a, b in plan.layout.input_runs:
        work[a:b].copy_(data[at:at + b - a])
        at += b - a


def _read(work: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """This rank's output chunks of ``work``, concatenated (a view when they are adjacent)."""
    parts = [work[a:b] for a, b in plan.layout.output_runs]
    return parts[0] if len(parts) == 1 else torch.cat(parts) if parts else work[:0]


@_no_grad
def run_schedule(schedule, buffer: torch.Tensor, op: Any = ReduceOp.SUM, group=None,
                 bounds=None, segment_bytes: int | None = None, *, timeout=None,
                 restore: bool = True) -> torch.Tensor:
    """Execute any ``schedule`` in place on this rank's 1-D contiguous working ``buffer``
    (``bounds``: this rank's chunk offsets; ``segment_bytes``: pipelining; ``timeout``,
    ``restore``: failures; see :func:`executor.execute`)."""
    _group_size(group)
    _check_tensor(buffer, "buffer")
    if buffer.dim() != 1 or not buffer.is_contiguous():
        raise ArgumentError(f"buffer must be 1-D and contiguous, got shape {tuple(buffer.shape)}, "
                            f"stride {buffer.stride()}")
    return execute(schedule, buffer, _check_op(op, buffer.dtype), group,
                   segment_bytes=segment_bytes, bounds=bounds, timeout=timeout, restore=restore)


def _accumulate(accumulate_dtype: Any, dtype: torch.dtype, collective: str,
                op: ReduceOp) -> torch.dtype | None:
    """The torch dtype to reduce in (None: the tensor's own), validated
    (:func:`ringccl.ops.check_accumulate_dtype`)."""
    name = check_accumulate_dtype(accumulate_dtype, dtype, collective, True)
    if name is None:
        return None
    acc = getattr(torch, name)
    return None if acc == dtype else acc


def _in_place(collective: str, tensor: torch.Tensor, op: ReduceOp, group, algorithm: str,
              copy: bool = False, accumulate: torch.dtype | None = None, **params) -> None:
    """Run a collective whose working buffer is the whole tensor (all_reduce, broadcast, reduce);
    ``copy``: work on a copy and leave ``tensor`` unchanged; ``accumulate``: hold the working
    buffer in this dtype (the tensor is cast in, the result cast back once)."""
    world_size = dist.get_world_size(group)
    _agree(group, collective, algorithm, params, None if collective == "broadcast" else op,
           accumulate or tensor.dtype, tensor.numel())
    plan = _plan(collective, algorithm, world_size, dist.get_rank(group),
                 buffer_count=tensor.numel(), **params)
    private = copy or accumulate is not None or not tensor.is_contiguous()
    if accumulate is not None:
        work = tensor.reshape(-1).to(accumulate)  # a new contiguous buffer, the wider dtype
    elif copy:
        work = tensor.reshape(-1).clone()
    else:
        work = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    _execute(plan, work, op, group, restore=not private)
    if copy:
        return
    if op is ReduceOp.AVG and collective != "broadcast":
        work.div_(world_size)
    if work.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(work.view(tensor.shape))


@_no_grad
def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group=None,
               algorithm: str = "ring", accumulate_dtype: Any = None,
               **params) -> torch.Tensor:
    """Reduce ``tensor`` across all ranks of ``group``, in place (as ``dist.all_reduce``).

    Args:
        tensor: any shape, same shape and dtype on every rank. Non-contiguous tensors are handled
            through a contiguous copy that is written back.
        op: ``ReduceOp``/``torch.distributed.ReduceOp``/name; AVG needs floats, bitwise ops
            integers or bool.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("all_reduce")``.
        accumulate_dtype: floating tensors only: None, or a floating dtype at least as wide as
            the tensor's (torch.float32, "float32", np.float32). The working buffer (and what
            travels) is then held in it: ``tensor`` is cast in, every step reduces in it, and
            the result is cast back once, so a float16 sum over N ranks is rounded to float16
            once instead of N − 1 times. Costs one buffer of the wider dtype and its bytes on
            the wire. Error bound: :func:`ringccl.sim.fp_error_bound`.
        params: the algorithm's parameters, and ``segment_bytes``, ``timeout`` (seconds),
            ``restore`` (default True), ``check`` (see the module docstring).

    Numerics: integer sums wrap modulo 2^bits as torch and numpy do; NaN and ±inf follow IEEE
    (NaN anywhere gives NaN; +inf + -inf = NaN; max/min propagate NaN like torch.maximum).

    Returns:
        ``tensor`` (also modified in place).
    Raises:
        ArgumentError, ArgumentTypeError: bad argument, before any data moves.
        BackendError: no process group.
        PeerError, RingcclTimeout: a peer died or stalled (named step and peer; ``tensor`` is
            restored). ConsistencyError: with ``check=True``, the ranks' calls differ. The other
            functions raise these too (module docstring).
    """
    _group_size(group)
    _check_tensor(tensor, "tensor", written=True)
    reduce_op = _check_op(op, tensor.dtype)
    acc = _accumulate(accumulate_dtype, tensor.dtype, "all_reduce", reduce_op)
    _in_place("all_reduce", tensor, reduce_op, group, algorithm, accumulate=acc, **params)
    return tensor


@_no_grad
def broadcast(tensor: torch.Tensor, src: int, group=None, algorithm: str = "ring",
              **params) -> torch.Tensor:
    """Copy ``src``'s ``tensor`` into ``tensor`` on every rank, in place (as ``dist.broadcast``).

    Args:
        tensor: any shape, same shape and dtype on every rank; sent from ``src``, overwritten
            elsewhere. Non-contiguous: handled.
        src: global rank of the source.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("broadcast")`` (default the pipelined ring
            chain).

    Returns:
        ``tensor``.
    Raises:
        ArgumentError: src not in the group, unknown algorithm; ArgumentTypeError: dtype.
    """
    world_size = _group_size(group)
    _check_tensor(tensor, "tensor", written=True)
    root = _group_rank(group, src, "src", world_size)
    _in_place("broadcast", tensor, ReduceOp.SUM, group, algorithm, **rooted(params, root))
    return tensor


@_no_grad
def reduce(tensor: torch.Tensor, dst: int, op: Any = ReduceOp.SUM, group=None,
           algorithm: str = "ring", accumulate_dtype: Any = None, **params) -> torch.Tensor:
    """Reduce ``tensor`` of every rank into ``dst``'s ``tensor`` (as ``dist.reduce``).

    Only ``dst``'s tensor receives the result; the other ranks' tensors are left unchanged
    (the schedule runs on a copy there; torch.distributed leaves them unspecified, gloo
    overwrites them with partial results).

    Args:
        tensor: any shape, same shape and dtype on every rank. Non-contiguous: handled.
        dst: global rank of the destination.
        op, group, accumulate_dtype: as :func:`all_reduce`.
        algorithm: a name from ``ringccl.algorithms("reduce")`` (default the pipelined ring
            chain).

    Returns:
        ``tensor``.
    Raises:
        ArgumentError, ArgumentTypeError: bad argument, before any data moves.
    """
    world_size = _group_size(group)
    _check_tensor(tensor, "tensor", written=True)
    reduce_op = _check_op(op, tensor.dtype)
    acc = _accumulate(accumulate_dtype, tensor.dtype, "reduce", reduce_op)
    root = _group_rank(group, dst, "dst", world_size)
    _in_place("reduce", tensor, reduce_op, group, algorithm,
              copy=dist.get_rank(group) != root, accumulate=acc, **rooted(params, root))
    return tensor


@_no_grad
def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor, op: Any = ReduceOp.SUM,
                          group=None, algorithm: str = "ring", accumulate_dtype: Any = None,
                          **params) -> torch.Tensor:
    """Reduce ``input`` across ranks and leave block ``rank`` in ``output``
    (as ``dist.reduce_scatter_tensor``).

    Args:
        output: ``input.numel() // world_size`` elements, same dtype and device as ``input``.
        input: world_size · output.numel() elements; not modified. Non-contiguous: handled.
        op, group, algorithm, accumulate_dtype: as :func:`all_reduce`
            (``ringccl.algorithms("reduce_scatter")``).

    Returns:
        ``output``.
    Raises:
        ArgumentError: sizes that do not match, dtype/device mismatch, bad op.
    """
    world_size = _group_size(group)
    _check_tensor(output, "output", written=True)
    _check_tensor(input, "input")
    _check_pair(output, input, "output", "input")
    if input.numel() != world_size * output.numel():
        raise ArgumentError(f"input has {input.numel()} elements; reduce_scatter_tensor needs "
                            f"world_size * output.numel() = {world_size} * {output.numel()}")
    reduce_op = _check_op(op, input.dtype)
    acc = _accumulate(accumulate_dtype, input.dtype, "reduce_scatter", reduce_op)
    _agree(group, "reduce_scatter", algorithm, params, reduce_op, acc or input.dtype,
           input.numel())
    plan = _plan("reduce_scatter", algorithm, world_size, dist.get_rank(group),
                 buffer_count=input.numel(), **params)
    work = input.new_empty(plan.numel, dtype=acc or input.dtype)  # copy_ below casts in
    _write(work, plan, input.reshape(-1))  # the caller's input stays as it is
    _execute(plan, work, reduce_op, group, restore=False)
    block = _read(work, plan)
    if reduce_op is ReduceOp.AVG:
        block = block / world_size
    output.copy_(block.view(output.shape))
    return output


@_no_grad
def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group=None,
                           algorithm: str = "ring", **params) -> torch.Tensor:
    """Gather every rank's ``input_tensor`` into ``output_tensor`` on every rank, in rank order
    (as ``dist.all_gather_into_tensor``).

    Args:
        output_tensor: world_size · input_tensor.numel() elements, same dtype and device.
        input_tensor: this rank's block. Non-contiguous: handled.
        group, algorithm: as :func:`all_reduce` (``ringccl.algorithms("all_gather")``).

    Returns:
        ``output_tensor``.
    Raises:
        ArgumentError: sizes that do not match, dtype/device mismatch.
    """
    world_size = _group_size(group)
    _check_tensor(output_tensor, "output_tensor", written=True)
    _check_tensor(input_tensor, "input_tensor")
    _check_pair(output_tensor, input_tensor, "output_tensor", "input_tensor")
    if output_tensor.numel() != world_size * input_tensor.numel():
        raise ArgumentError(f"output_tensor has {output_tensor.numel()} elements; "
                            f"all_gather_into_tensor needs world_size * input_tensor.numel() = "
                            f"{world_size} * {input_tensor.numel()}")
    _check_in_place_block(output_tensor, input_tensor, dist.get_rank(group))
    _agree(group, "all_gather", algorithm, params, None, input_tensor.dtype,
           output_tensor.numel())
    plan = _plan("all_gather", algorithm, world_size, dist.get_rank(group),
                 buffer_count=output_tensor.numel(), **params)
    # every chunk is part of the output, so the working buffer is output_tensor itself
    contiguous = output_tensor.is_contiguous()
    work = output_tensor.view(-1) if contiguous else output_tensor.new_empty(output_tensor.numel())
    restore = contiguous and plan.options.get("restore", True)
    runs = plan.layout.input_runs if restore else ()
    before = [work[a:b].clone() for a, b in runs]  # this rank's block, written before the run
    _write(work, plan, input_tensor.reshape(-1))
    try:
        _execute(plan, work, ReduceOp.SUM, group, restore=restore)
    except PeerError:
        for (a, b), saved in zip(runs, before):
            work[a:b].copy_(saved)  # the other chunks were restored by the executor
        raise
    if not contiguous:
        output_tensor.copy_(work.view(output_tensor.shape))
    return output_tensor


def _check_in_place_block(output: torch.Tensor, input: torch.Tensor, rank: int) -> None:
    """``input`` may share memory with ``output`` only as output's block ``rank`` (in place, as
    torch.distributed allows); any other overlap would be overwritten while it is read."""
    if not input.numel() or input.untyped_storage().data_ptr() != \
            output.untyped_storage().data_ptr():
        return
    k = input.numel()
    if output.is_contiguous() and input.is_contiguous():
        lo_in, lo_out = input.storage_offset(), output.storage_offset()
        if lo_in == lo_out + rank * k:
            return  # exactly output's block rank: in place
        if lo_in + k <= lo_out or lo_out + output.numel() <= lo_in:
            return  # same storage, disjoint ranges
    raise ArgumentError(
        f"input_tensor shares memory with output_tensor but is not output_tensor's block "
        f"rank {rank} (elements {rank * k}:{(rank + 1) * k} of the flattened output); "
        "pass that exact view for in place, or a separate tensor")


def _check_list(tensors: Any, argument: str, world_size: int, like: torch.Tensor | None,
                like_name: str = "tensor", written: bool = False,
                same_numel: bool = True) -> list:
    """A list of world_size tensors with ``like``'s dtype and device (None: the first entry's)
    and, with ``same_numel``, its numel; ``written``: as :func:`_check_tensor`."""
    if tensors is None:  # missing, e.g. scatter_list=None on the source rank
        raise ArgumentError(f"{argument} must be a list of world_size={world_size} tensors, got "
                            "NoneType")
    if not isinstance(tensors, (list, tuple)):
        raise ArgumentTypeError(f"{argument} must be a list of world_size={world_size} tensors, "
                                f"got {type(tensors).__name__}")
    if len(tensors) != world_size:
        raise ArgumentError(f"{argument} must be a list of world_size={world_size} tensors, got "
                            f"{type(tensors).__name__} of length {len(tensors)}")
    for i, t in enumerate(tensors):
        _check_tensor(t, f"{argument}[{i}]", written)
        _check_pair(t, tensors[0] if like is None else like, f"{argument}[{i}]", like_name)
        if same_numel and t.numel() != like.numel():
            raise ArgumentError(f"{argument}[{i}] has {t.numel()} elements; every tensor must "
                                f"have tensor.numel()={like.numel()}")
    return list(tensors)


@_no_grad
def scatter(tensor: torch.Tensor, scatter_list: list | None = None, src: int = 0, group=None,
            algorithm: str = "binomial", **params) -> torch.Tensor:
    """Send ``scatter_list[r]`` of rank ``src`` to rank r's ``tensor`` (as ``dist.scatter``).

    Args:
        tensor: this rank's output, any shape, same numel on every rank. Non-contiguous: handled.
        scatter_list: on ``src``: world_size tensors with tensor.numel() elements each, same
            dtype and device; on the other ranks None (torch.distributed's rule).
        src: global rank of the source.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("scatter")`` (default binomial tree).

    Returns:
        ``tensor``.
    Raises:
        ArgumentError: a missing or malformed scatter_list on src, one given elsewhere, src not
            in the group; ArgumentTypeError: dtype.
    """
    world_size = _group_size(group)
    _check_tensor(tensor, "tensor", written=True)
    root = _group_rank(group, src, "src", world_size)
    get_algorithm("scatter", algorithm)  # every rank refuses alike, before the root-only checks
    rank = dist.get_rank(group)
    if rank == root:
        scatter_list = _check_list(scatter_list, "scatter_list", world_size, tensor)
    elif scatter_list:
        raise ArgumentError("scatter_list must be None on non-source ranks (rank "
                            f"{dist.get_rank()} is not src={src})")
    params = rooted(params, root)
    _agree(group, "scatter", algorithm, params, None, tensor.dtype, world_size * tensor.numel())
    plan = _plan("scatter", algorithm, world_size, rank,
                 buffer_count=world_size * tensor.numel(), **params)
    work = tensor.new_empty(plan.numel)
    if rank == root:
        _write(work, plan, torch.cat([t.reshape(-1) for t in scatter_list]))
    _execute(plan, work, ReduceOp.SUM, group, restore=False)
    tensor.copy_(_read(work, plan).view(tensor.shape))
    return tensor


@_no_grad
def gather(tensor: torch.Tensor, gather_list: list | None = None, dst: int = 0, group=None,
           algorithm: str = "binomial", **params) -> None:
    """Collect every rank's ``tensor`` into ``gather_list`` on rank ``dst`` (as ``dist.gather``).

    Args:
        tensor: this rank's input, same numel on every rank; not modified. Non-contiguous: handled.
        gather_list: on ``dst``: world_size tensors with tensor.numel() elements each; entry r
            receives rank r's tensor. On the other ranks None.
        dst: global rank of the destination.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("gather")`` (default binomial tree).

    Returns:
        None (as torch.distributed).
    Raises:
        ArgumentError: a missing or malformed gather_list on dst, one given elsewhere, dst not in
            the group; ArgumentTypeError: dtype.
    """
    world_size = _group_size(group)
    _check_tensor(tensor, "tensor")
    root = _group_rank(group, dst, "dst", world_size)
    get_algorithm("gather", algorithm)  # every rank refuses alike, before the root-only checks
    rank = dist.get_rank(group)
    if rank == root:
        gather_list = _check_list(gather_list, "gather_list", world_size, tensor, written=True)
    elif gather_list:
        raise ArgumentError("gather_list must be None on non-destination ranks (rank "
                            f"{dist.get_rank()} is not dst={dst})")
    params = rooted(params, root)
    _agree(group, "gather", algorithm, params, None, tensor.dtype, world_size * tensor.numel())
    plan = _plan("gather", algorithm, world_size, rank,
                 buffer_count=world_size * tensor.numel(), **params)
    work = tensor.new_empty(plan.numel)
    _write(work, plan, tensor.reshape(-1))
    _execute(plan, work, ReduceOp.SUM, group, restore=False)
    if rank == root:
        flat = _read(work, plan)
        for i, t in enumerate(gather_list):
            t.copy_(flat[i * tensor.numel():(i + 1) * tensor.numel()].view(t.shape))
    return None


def _exchange(input_flat: torch.Tensor, in_sizes: Sequence[int], out_sizes: Sequence[int],
              group, algorithm: str, params: dict) -> torch.Tensor:
    """all_to_all on element counts: returns this rank's output blocks concatenated."""
    world_size, rank = dist.get_world_size(group), dist.get_rank(group)
    params = dict(params)
    _agree(group, "all_to_all", algorithm, params, None, input_flat.dtype,
           int(sum(in_sizes)), (list(in_sizes), list(out_sizes)))
    schedule = build_schedule("all_to_all", algorithm, world_size,
                              **{k: v for k, v in params.items() if k not in _EXECUTOR_OPTIONS})

    def agree(largest: int, neg_smallest: int) -> tuple[int, int]:
        t = torch.tensor([largest, neg_smallest], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return int(t[0]), int(t[1])

    sizes = all_to_all_sizes(schedule, in_sizes, out_sizes, agree)
    # the layout takes this rank's chunk sizes, and the schedule built above (once per call)
    options = _executor_options("all_to_all", params)
    plan = _Plan(layout(schedule, rank, sizes=sizes), options)
    work = input_flat.new_empty(plan.numel)
    _write(work, plan, input_flat)
    _execute(plan, work, ReduceOp.SUM, group, restore=False)
    return _read(work, plan)


@_no_grad
def all_to_all_single(output: torch.Tensor, input: torch.Tensor, output_split_sizes=None,
                      input_split_sizes=None, group=None, algorithm: str = "direct",
                      **params) -> torch.Tensor:
    """Split ``input`` along dim 0 and send piece j to rank j; piece i of ``output`` comes from
    rank i (as ``dist.all_to_all_single``).

    Args:
        output: receives the pieces, same dtype, device and trailing dims as ``input``.
        input: not modified. Non-contiguous: handled.
        output_split_sizes, input_split_sizes: rows (dim 0) per rank, world_size integers >= 0
            (zeros allowed), or None for equal pieces (dim 0 divisible by world_size). Rank r's
            input_split_sizes[j] must equal rank j's output_split_sizes[r].
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("all_to_all")``. Algorithms with scratch
            chunks need equal pieces on every rank (checked across ranks before data moves).

    Returns:
        ``output``.
    Raises:
        ArgumentError: split sizes that do not match the tensors, unequal pieces for a scratch
            algorithm, trailing dims that differ; ArgumentTypeError: dtype.
    """
    world_size = _group_size(group)
    _check_tensor(output, "output", written=True)
    _check_tensor(input, "input")
    _check_pair(output, input, "output", "input")
    in_rows = input.shape[0] if input.dim() else 1
    out_rows = output.shape[0] if output.dim() else 1
    row = math.prod(input.shape[1:])
    if math.prod(output.shape[1:]) != row:
        raise ArgumentError(f"output.shape={tuple(output.shape)} and input.shape="
                            f"{tuple(input.shape)} differ beyond dim 0")
    ins = split_rows(input_split_sizes, "input_split_sizes", world_size, in_rows, "input")
    outs = split_rows(output_split_sizes, "output_split_sizes", world_size, out_rows, "output")
    rank = dist.get_rank(group)
    check_own_block(rank, ins[rank], outs[rank], "input_split_sizes[{}]",
                    "output_split_sizes[{}]", "rows")
    result = _exchange(input.reshape(-1), [k * row for k in ins], [k * row for k in outs], group,
                       algorithm, params)
    output.copy_(result.view(output.shape))
    return output


@_no_grad
def all_to_all(output_tensor_list: list, input_tensor_list: list, group=None,
               algorithm: str = "direct", **params) -> list:
    """Send ``input_tensor_list[j]`` to rank j; ``output_tensor_list[i]`` receives rank i's
    (as ``dist.all_to_all``). Tensors may have different sizes (rank r's input j must have the
    size of rank j's output r).

    Args:
        output_tensor_list, input_tensor_list: world_size tensors each, one dtype and device.
            Non-contiguous: handled.
        group, algorithm: as :func:`all_to_all_single`.

    Returns:
        ``output_tensor_list``.
    Raises:
        ArgumentError, ArgumentTypeError: malformed lists, dtype or device mismatch.
    """
    world_size = _group_size(group)
    first = _check_list(input_tensor_list, "input_tensor_list", world_size, None,
                        "input_tensor_list[0]", same_numel=False)[0]
    _check_list(output_tensor_list, "output_tensor_list", world_size, first,
                "input_tensor_list[0]", written=True, same_numel=False)
    rank = dist.get_rank(group)
    check_own_block(rank, input_tensor_list[rank].numel(), output_tensor_list[rank].numel(),
                    "input_tensor_list[{}].numel()", "output_tensor_list[{}].numel()", "elements")
    flat = torch.cat([t.reshape(-1) for t in input_tensor_list])
    result = _exchange(flat, [t.numel() for t in input_tensor_list],
                       [t.numel() for t in output_tensor_list], group, algorithm, params)
    at = 0
    for t in output_tensor_list:
        t.copy_(result[at:at + t.numel()].view(t.shape))
        at += t.numel()
    return output_tensor_list


# -- training integration (issue 7): imported last, these modules use the collectives above -----
from .background import Communicator  # noqa: E402
from .bucketer import GradientBucketer  # noqa: E402
from .clip import clip_grad_norm_  # noqa: E402
from .ddp import comm_hook  # noqa: E402
from .zero import ShardedOptimizer  # noqa: E402

__all__ += ["comm_hook", "GradientBucketer", "ShardedOptimizer", "clip_grad_norm_",
            "Communicator"]
