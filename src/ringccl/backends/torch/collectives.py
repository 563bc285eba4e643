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
all-reduce), and, keyword-only and in this order in every function (as in :mod:`ringccl.mpi`),
the executor's options (see :func:`executor.execute`): ``segment_bytes=`` (pipelining; None lets
its measured threshold, ``executor.PIPELINING``, decide), ``timeout=`` (seconds each wait for a
peer may take; default the group's timeout) and ``restore=`` (None: True). ``check=True`` (or the
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

Every function is the backend-neutral flow of :mod:`ringccl.frontend` (build the named
algorithm's schedule, map the collective's contract onto a working buffer, run it with
:func:`executor.execute`) with torch's array dialect and process groups; none knows any
algorithm. Roots (``src``, ``dst``) are global ranks, as in torch.distributed. Chunks a
rank never touches get no memory (non-root ranks of scatter and gather hold only their subtree's
blocks). Every tensor argument, input or output (list entries included), may be
non-contiguous: handled through a contiguous copy written back. Arguments are checked before any
data moves (docs/errors.md); a call that raises on some ranks only
(e.g. ``scatter_list`` given on a non-source rank, as torch.distributed also refuses) leaves the
others waiting, as torch.distributed does, and if the refusing rank then issues another
collective on the group, the waiting ranks can take its data for this call's and return a
wrong result: after such an error, end the job or stop using the group.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist

from ... import frontend
from ...args import check_int, check_rank
from ...costmodel import choice
from ...errors import ArgumentError, ArgumentTypeError, BackendError, PeerError
from ...layout import check_own_block, rooted
from ...ops import ReduceOp
from ...engine import trace
from ..shm import lane
from . import executor
from .dialect import TorchArrays, check_tensor
from .transport import layout_of, resolve_transport


def _no_grad(fn):
    """``fn`` under ``torch.no_grad()``, refusing torch.distributed's ``async_op=True``.

    Collectives write tensors that may require grad (parameters, their views), as
    torch.distributed's do: below autograd, so in-place writes to a leaf are allowed. People
    porting torch code pass ``async_op=`` first: every function here returns when its
    collective is done, so ``async_op=False`` means what it always does and is accepted, and
    ``async_op=True`` is refused by name (it would otherwise reach the algorithm's parameters).
    """
    inner = torch.no_grad()(fn)
    name = fn.__name__.lstrip("_")

    @functools.wraps(fn)
    def collective(*args, **kwargs):
        if "async_op" in kwargs and kwargs.pop("async_op") is not False:
            raise _async_refused(name)
        return inner(*args, **kwargs)
    return collective


def _async_refused(name: str) -> ArgumentError:
    """The error of ``async_op=True`` given to ``ringccl.torch.<name>``."""
    return ArgumentError(
        f"ringccl.torch.{name}: async_op=True is not supported: ringccl.torch's "
        "functions return when the collective is done (there is no Work handle to "
        "wait on). For overlap, run the collectives on a background thread with "
        "ringccl.torch.Communicator (its submit returns a torch.futures.Future), or use "
        "the torch.distributed backend when it comes")


__all__ = ["all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "broadcast",
           "reduce", "scatter", "gather", "all_to_all_single", "all_to_all", "run_schedule",
           "ReduceOp"]

class _Torch(TorchArrays):
    """ringccl.torch's :class:`ringccl.frontend.Backend`: the tensor dialect
    (:class:`~ringccl.backends.torch.dialect.TorchArrays`), torch.distributed process groups
    (:class:`ringccl.frontend.GroupAdapter`), the executor of :mod:`.executor` with the call's
    transport (:class:`ringccl.frontend.Executor`)."""

    name = "ringccl.torch"
    pipelining = executor.PIPELINING

    # -- group adapter --------------------------------------------------------------------------
    @staticmethod
    def group(group):
        if not dist.is_available() or not dist.is_initialized():
            raise BackendError("torch.distributed is not initialized: call "
                               "torch.distributed.init_process_group first (or run under "
                               "torchrun, or use ringccl.torch.launch.launch)")
        if group is not None and not isinstance(group, dist.ProcessGroup):
            raise ArgumentTypeError(f"group={group!r} must be a torch.distributed ProcessGroup "
                                    f"(e.g. from dist.new_group) or None, got "
                                    f"{type(group).__name__}")
        return group

    size = staticmethod(dist.get_world_size)
    rank = staticmethod(dist.get_rank)

    @staticmethod
    def root(group, rank: int, argument: str, world_size: int) -> int:
        """torch.distributed's global ``rank`` (src/dst) as a rank of ``group``."""
        if group is None or group is dist.group.WORLD:
            return check_rank(rank, world_size, argument)
        rank = check_int(rank, argument, minimum=0)
        try:
            return dist.get_group_rank(group, rank)
        except (RuntimeError, ValueError):
            raise ArgumentError(f"{argument}={rank} is not a member of the given process "
                                "group") from None

    @staticmethod
    def key(group):
        return id(group if group is not None else dist.group.WORLD)

    @staticmethod
    def gather_objects(group, obj, collective: str, algorithm: str, timeout=None) -> list:
        # bounded by the group's timeout (gloo applies it to every wait)
        everyone: list = [None] * dist.get_world_size(group)
        try:
            dist.all_gather_object(everyone, obj, group=group)
        except RuntimeError as exc:
            # the peers are not in the same check: it is on for some ranks only, or they called
            # something else (or died); the exchange is bounded by the group's timeout
            raise PeerError(f"the cross-rank check of {algorithm} {collective} (check=True or "
                            f"RINGCCL_DEBUG) failed on rank {dist.get_rank(group)}: the other "
                            "ranks did not join it; is the check on for every rank, and are "
                            f"they all calling a ringccl collective? ({exc})",
                            collective=collective, algorithm=algorithm,
                            rank=dist.get_rank(group)) from exc
        return everyone

    @staticmethod
    def max2(group, a: int, b: int) -> tuple[int, int]:
        t = torch.tensor([a, b], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return int(t[0]), int(t[1])

    @staticmethod
    def default_restore(timeout) -> bool:
        return True     # gloo's waits are always bounded: a failure can always be survived

    @staticmethod
    def stages(group, opts) -> bool:
        """Over shared memory a private working buffer lives in this rank's slot: the
        executor takes it as its sources and targets (:mod:`ringccl.engine.staged`)."""
        return opts.transport == "shm"

    @staticmethod
    def call_pipelining(group, collective: str, opts):
        """The policy the executor runs ``collective`` with (over shm its own)."""
        return executor.call_pipelining(collective, opts.pipelining, opts.transport)

    @staticmethod
    def execute(schedule, work, op, group, bounds, opts, restore: bool) -> None:
        executor.execute(schedule, work, op, group, bounds=bounds, timeout=opts.timeout,
                         restore=restore, pipelining=opts.pipelining,
                         transport=opts.transport or "p2p")

    @staticmethod
    def choose(collective: str, world_size: int, count: int, dtype, opts) -> str:
        """algorithm=None/"auto": the one chooser's pick for the call's transport
        (:func:`ringccl.costmodel.choice.choose`; over "hybrid" without the hosts' layout:
        the functions that have a two-level schedule ask it with one, :func:`_auto`)."""
        return choice.choose(collective, world_size, count * dtype.itemsize,
                             opts.transport or "p2p").algorithm


_T = _Torch()

def _options(group, tensor, segment_bytes, timeout, restore, check, transport):
    return frontend.options(_T, segment_bytes, timeout, restore, check,
                            resolve_transport(group, transport, tensor))


def _auto(collective: str, group, algorithm: str | None, params: dict,
          tensor: torch.Tensor) -> tuple[str | None, dict]:
    """``(algorithm, params)`` over the hybrid transport of a collective with a two-level
    schedule: with no algorithm and no parameters named, the one chooser's pick for
    ``tensor``'s bytes with the hosts' ``local_size`` (:func:`ringccl.costmodel.choice.choose`:
    the model's cheaper of the collective's default and ``hierarchical``;
    :func:`~ringccl.backends.torch.transport.layout_of` is collective on its first use per
    group), else as given."""
    if algorithm not in (None, "auto") or params:
        return algorithm, params
    pick = choice.choose(collective, dist.get_world_size(group),
                         tensor.numel() * tensor.element_size(), "hybrid",
                         local_size=layout_of(group).local_size)
    return pick.algorithm, dict(pick.params)


@_no_grad
def run_schedule(schedule, buffer: torch.Tensor, op: Any = ReduceOp.SUM, group=None,
                 bounds=None, segment_bytes: int | None = None, *, timeout=None,
                 restore: bool | None = None, pipelining=None) -> torch.Tensor:
    """Execute any ``schedule`` in place on this rank's 1-D contiguous working ``buffer``
    (``bounds``: this rank's chunk offsets; ``segment_bytes``: pipelining; ``timeout``,
    ``restore``: failures; see :func:`executor.execute`)."""
    return frontend.run_schedule(_T, schedule, buffer, op, group, bounds, segment_bytes, timeout,
                                 restore, pipelining)

def all_reduce(tensor: torch.Tensor, op: Any = ReduceOp.SUM, group=None,
               algorithm: str | None = None, accumulate_dtype: Any = None, *,
               segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> torch.Tensor:
    """Reduce ``tensor`` across all ranks of ``group``, in place (as ``dist.all_reduce``).

    Args:
        tensor: any shape, same shape and dtype on every rank. Non-contiguous tensors are handled
            through a contiguous copy that is written back.
        op: ``ReduceOp``/``torch.distributed.ReduceOp``/name; AVG needs floats, bitwise ops
            integers or bool.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("all_reduce")`` (None or "auto": the
            transport's choice, :func:`ringccl.costmodel.choice.choose`: over shared memory
            direct, or two_shot from its measured crossover; over point-to-point the
            collective's default, ring; over hybrid the model's cheaper of ring and
            ``hierarchical``).
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
    # a signature seen before replays its compiled shared-memory call (shm.lane); the key
    # holds every argument, so no other call can hit it. A tensor autograd never sees
    # (dispatch.autograd_free) replays without entering torch.no_grad: the lane writes only
    # its memory
    if params and "async_op" in params and params.pop("async_op") is not False:
        raise _async_refused("all_reduce")
    key = None
    if not params and accumulate_dtype is None and not check and type(tensor) is torch.Tensor \
            and trace.state.recorder is None:
        parts = ("all_reduce", id(group), tensor.shape, tensor.dtype, tensor.device, op,
                 algorithm, segment_bytes, timeout, restore, check, transport)
        if tensor.requires_grad or tensor._is_view():
            key = lane.signature(*parts)   # replayed under no_grad (_all_reduce)
        else:
            key = lane.call(parts, group, tensor)
            if key is True:
                return tensor
    return _all_reduce(key, tensor, op, group, algorithm, accumulate_dtype,
                       segment_bytes=segment_bytes, timeout=timeout, restore=restore, check=check,
                       transport=transport, **params)


@_no_grad
def _all_reduce(key, tensor, op, group, algorithm, accumulate_dtype, *, segment_bytes, timeout,
                restore, check, transport, **params) -> torch.Tensor:
    """:func:`all_reduce` under ``torch.no_grad``: the replay of ``key`` for a tensor autograd
    may see, else the general path (compiling ``key``'s lane on the way)."""
    if key is not None and (tensor.requires_grad or tensor._is_view()) and \
            lane.replay(key, group, tensor):
        return tensor

    def general() -> None:
        g = _T.group(group)
        check_tensor(tensor, "tensor", written=True)
        reduce_op = _T.check_op(op, tensor.dtype)
        acc = _T.accumulate(accumulate_dtype, tensor.dtype, "all_reduce")
        opts = _options(g, tensor, segment_bytes, timeout, restore, check, transport)
        algo, more = algorithm, params
        if opts.transport == "hybrid":   # the two-level schedules need the hosts' layout
            algo, more = _auto("all_reduce", g, algorithm, params, tensor)
        frontend.in_place(_T, "all_reduce", tensor, reduce_op, g, algo, more, opts,
                          accumulate=acc)
    lane.first_call(key, group, general, lambda: lane.finisher(_T, group, op, tensor.dtype))
    return tensor


@_no_grad
def broadcast(tensor: torch.Tensor, src: int, group=None, algorithm: str | None = None, *,
              segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> torch.Tensor:
    """Copy ``src``'s ``tensor`` into ``tensor`` on every rank, in place (as ``dist.broadcast``).

    Args:
        tensor: any shape, same shape and dtype on every rank; sent from ``src``, overwritten
            elsewhere. Non-contiguous: handled.
        src: global rank of the source.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("broadcast")`` (None or "auto": direct over
            shared memory, the pipelined ring chain over point-to-point).

    Returns:
        ``tensor``.
    Raises:
        ArgumentError: src not in the group, unknown algorithm; ArgumentTypeError: dtype.
    """
    group = _T.group(group)
    check_tensor(tensor, "tensor", written=True)
    root = _T.root(group, src, "src", dist.get_world_size(group))
    opts = _options(group, tensor, segment_bytes, timeout, restore, check, transport)
    frontend.in_place(_T, "broadcast", tensor, ReduceOp.SUM, group, algorithm,
                      rooted(params, root), opts)
    return tensor

@_no_grad
def reduce(tensor: torch.Tensor, dst: int, op: Any = ReduceOp.SUM, group=None,
           algorithm: str | None = None, accumulate_dtype: Any = None, *,
           segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> torch.Tensor:
    """Reduce ``tensor`` of every rank into ``dst``'s ``tensor`` (as ``dist.reduce``).

    Only ``dst``'s tensor receives the result; the other ranks' tensors are left unchanged
    (the schedule runs on a copy there; torch.distributed leaves them unspecified, gloo
    overwrites them with partial results).

    Args:
        tensor: any shape, same shape and dtype on every rank. Non-contiguous: handled.
        dst: global rank of the destination.
        op, group, accumulate_dtype: as :func:`all_reduce`.
        algorithm: a name from ``ringccl.algorithms("reduce")`` (None or "auto": direct over
            shared memory, the pipelined ring chain over point-to-point).

    Returns:
        ``tensor``.
    Raises:
        ArgumentError, ArgumentTypeError: bad argument, before any data moves.
    """
    group = _T.group(group)
    check_tensor(tensor, "tensor", written=True)
    reduce_op = _T.check_op(op, tensor.dtype)
    acc = _T.accumulate(accumulate_dtype, tensor.dtype, "reduce")
    root = _T.root(group, dst, "dst", dist.get_world_size(group))
    opts = _options(group, tensor, segment_bytes, timeout, restore, check, transport)
    frontend.in_place(_T, "reduce", tensor, reduce_op, group, algorithm, rooted(params, root),
                      opts, copy=dist.get_rank(group) != root, accumulate=acc)
    return tensor

@_no_grad
def reduce_scatter_tensor(output: torch.Tensor, input: torch.Tensor, op: Any = ReduceOp.SUM,
                          group=None, algorithm: str | None = None, accumulate_dtype: Any = None, *,
                          segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> torch.Tensor:
    """Reduce ``input`` across ranks and leave block ``rank`` in ``output``
    (as ``dist.reduce_scatter_tensor``).

    Args:
        output: ``input.numel() // world_size`` elements, same dtype and device as ``input``.
            May be ``input[rank * k:(rank + 1) * k]`` of a contiguous ``input`` (NCCL's
            in-place form): ``input`` then changes in that block only. Any other overlap of
            the two is refused (:mod:`ringccl.frontend.aliasing`).
        input: world_size · output.numel() elements; not modified. Non-contiguous: handled.
        op, group, algorithm, accumulate_dtype: as :func:`all_reduce`
            (``ringccl.algorithms("reduce_scatter")``).

    Returns:
        ``output``.
    Raises:
        ArgumentError: sizes that do not match, dtype/device mismatch, bad op.
    """
    group = _T.group(group)
    check_tensor(output, "output", written=True)
    check_tensor(input, "input")
    _T.check_pair(output, input, "output", "input")
    reduce_op = _T.check_op(op, input.dtype)
    acc = _T.accumulate(accumulate_dtype, input.dtype, "reduce_scatter")
    opts = _options(group, input, segment_bytes, timeout, restore, check, transport)
    if opts.transport == "hybrid":   # the two-level schedules need the hosts' layout
        algorithm, params = _auto("reduce_scatter", group, algorithm, params, input)
    frontend.reduce_scatter(_T, output, input, reduce_op, group, algorithm, params, opts, acc,
                            "reduce_scatter_tensor")
    return output

@_no_grad
def all_gather_into_tensor(output_tensor: torch.Tensor, input_tensor: torch.Tensor, group=None,
                           algorithm: str | None = None, *, segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto",
                           **params) -> torch.Tensor:
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
    group = _T.group(group)
    check_tensor(output_tensor, "output_tensor", written=True)
    check_tensor(input_tensor, "input_tensor")
    _T.check_pair(output_tensor, input_tensor, "output_tensor", "input_tensor")
    opts = _options(group, output_tensor, segment_bytes, timeout, restore, check, transport)
    if opts.transport == "hybrid":   # the two-level schedules need the hosts' layout
        algorithm, params = _auto("all_gather", group, algorithm, params, output_tensor)
    frontend.all_gather(_T, output_tensor, input_tensor, group, algorithm, params, opts,
                        "all_gather_into_tensor", ("output_tensor", "input_tensor"))
    return output_tensor

@_no_grad
def scatter(tensor: torch.Tensor, scatter_list: list | None = None, src: int = 0, group=None,
            algorithm: str | None = None, *, segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto",
            **params) -> torch.Tensor:
    """Send ``scatter_list[r]`` of rank ``src`` to rank r's ``tensor`` (as ``dist.scatter``).

    Args:
        tensor: this rank's output, any shape, same numel on every rank. Non-contiguous: handled.
        scatter_list: on ``src``: world_size tensors with tensor.numel() elements each, same
            dtype and device; on the other ranks None (torch.distributed's rule).
        src: global rank of the source.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("scatter")`` (None or "auto": the
            transport's choice; direct on shared memory and point-to-point alike).

    Returns:
        ``tensor``.
    Raises:
        ArgumentError: a missing or malformed scatter_list on src, one given elsewhere, src not
            in the group; ArgumentTypeError: dtype.
    """
    group = _T.group(group)
    check_tensor(tensor, "tensor", written=True)
    opts = _options(group, tensor, segment_bytes, timeout, restore, check, transport)
    frontend.scatter(_T, tensor, scatter_list, src, group, algorithm, params, opts)
    return tensor

@_no_grad
def gather(tensor: torch.Tensor, gather_list: list | None = None, dst: int = 0, group=None,
           algorithm: str | None = None, *, segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto",
           **params) -> None:
    """Collect every rank's ``tensor`` into ``gather_list`` on rank ``dst`` (as ``dist.gather``).

    Args:
        tensor: this rank's input, same numel on every rank; not modified. Non-contiguous: handled.
        gather_list: on ``dst``: world_size tensors with tensor.numel() elements each; entry r
            receives rank r's tensor. On the other ranks None.
        dst: global rank of the destination.
        group: process group (None = default group).
        algorithm: a name from ``ringccl.algorithms("gather")`` (None or "auto": the
            transport's choice; direct on shared memory and point-to-point alike).

    Returns:
        None (as torch.distributed).
    Raises:
        ArgumentError: a missing or malformed gather_list on dst, one given elsewhere, dst not in
            the group; ArgumentTypeError: dtype.
    """
    group = _T.group(group)
    check_tensor(tensor, "tensor")
    opts = _options(group, tensor, segment_bytes, timeout, restore, check, transport)
    frontend.gather(_T, tensor, gather_list, dst, group, algorithm, params, opts)
    return None

@_no_grad
def all_to_all_single(output: torch.Tensor, input: torch.Tensor, output_split_sizes=None,
                      input_split_sizes=None, group=None, algorithm: str | None = None, *,
                      segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> torch.Tensor:
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
    group = _T.group(group)
    check_tensor(output, "output", written=True)
    check_tensor(input, "input")
    _T.check_pair(output, input, "output", "input")
    opts = _options(group, input, segment_bytes, timeout, restore, check, transport)
    frontend.all_to_all(_T, output, input, output_split_sizes, input_split_sizes, group,
                        algorithm, params, opts)
    return output

@_no_grad
def all_to_all(output_tensor_list: list, input_tensor_list: list, group=None,
               algorithm: str | None = None, *, segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto",
               **params) -> list:
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
    group = _T.group(group)
    world_size = dist.get_world_size(group)
    first = _T.check_blocks(input_tensor_list, "input_tensor_list", world_size, None, False,
                            "input_tensor_list[0]", same_numel=False)[0]
    _T.check_blocks(output_tensor_list, "output_tensor_list", world_size, first, True,
                    "input_tensor_list[0]", same_numel=False)
    rank = dist.get_rank(group)
    check_own_block(rank, input_tensor_list[rank].numel(), output_tensor_list[rank].numel(),
                    "input_tensor_list[{}].numel()", "output_tensor_list[{}].numel()", "elements")
    opts = _options(group, input_tensor_list[0], segment_bytes, timeout, restore, check, transport)
    frontend.exchange(_T, list(input_tensor_list), [t.numel() for t in input_tensor_list],
                      [t.numel() for t in output_tensor_list], group, algorithm, params, opts,
                      list(output_tensor_list))
    return output_tensor_list
