"""ringccl collectives under ``mpirun``: every schedule on numpy buffers over mpi4py.

Requires the ``mpi`` extra (mpi4py) and an MPI library (Open MPI or MPICH). The functions mirror
:mod:`ringccl.torch` (same argument order, defaults, ``op`` names, ``algorithm`` names and
algorithm keyword parameters) with numpy arrays in place of tensors and an mpi4py communicator in
place of a process group; every algorithm of ``ringccl.algorithms(collective)`` runs unchanged:

============== ===================================================== =========================
function       ringccl.torch / torch.distributed                     MPI
============== ===================================================== =========================
all_reduce     all_reduce(tensor, op)                                MPI_Allreduce (in place)
reduce_scatter reduce_scatter_tensor(output, input, op)              MPI_Reduce_scatter_block
all_gather     all_gather_into_tensor(output, input)                 MPI_Allgather
broadcast      broadcast(tensor, src)                                MPI_Bcast
reduce         reduce(tensor, dst, op)                               MPI_Reduce (in place)
scatter        scatter(tensor, scatter_list, src)                    MPI_Scatter
gather         gather(tensor, gather_list, dst)                      MPI_Gather
all_to_all     all_to_all_single(output, input, output_split_sizes,  MPI_Alltoall,
               input_split_sizes)                                    MPI_Alltoallv
============== ===================================================== =========================

Example (``mpirun -np 4 python script.py``)::

    import numpy as np, ringccl.mpi as rm
    x = np.ones(1 << 20, dtype=np.float32)
    rm.all_reduce(x)                      # ring all-reduce, in place, like MPI_Allreduce(IN_PLACE)
    rm.broadcast(x, src=0, algorithm="tree", segments=8)

Roots (``src``, ``dst``, default 0) are ranks of ``comm``, as MPI's root. Each function maps the
collective's contract onto a working buffer with :mod:`ringccl.layout` (the same mapping as
:mod:`ringccl.torch`) and runs it with :func:`ringccl.mpi.executor.execute`; none knows any
algorithm. Arrays must be numpy arrays of a dtype in ``ringccl.ops.SUPPORTED_DTYPES``, with the
same shape and dtype on every rank (as MPI requires; not checked across ranks); the arrays a
function updates in place (all_reduce's buffer, reduce_scatter's and all_gather's output,
scatter's buffer) must be C-contiguous, any other array may have any layout (copied). Every
argument is checked before any data moves (ArgumentError, ArgumentTypeError naming the argument
and its value); a check that fails on some ranks only (a root-only list) leaves the others
waiting, as in torch.distributed: run scripts with ``python -m mpi4py script.py`` so that an
uncaught exception aborts the whole job.

Failures: MPI has no timeouts and aborts the job when a process dies. With ``RINGCCL_TIMEOUT``
(seconds) set, every wait (and the first call's duplication of ``comm``) polls ``MPI_Test`` until
the deadline and raises :class:`ringccl.errors.RingcclTimeout` naming the step and the peer, with
the caller's buffers restored; then end the job with ``comm.Abort()`` (see
:func:`ringccl.mpi.executor.execute`). There is no cross-rank consistency check here.

Importing this package does not import mpi4py (which initializes MPI); the first collective does.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from .. import engine
from ..algorithms import REGISTRY, build_schedule, params_key
from ..args import check_int
from ..collectives import check_root
from ..errors import ArgumentError, ArgumentTypeError
from ..layout import all_to_all_sizes, clear_cache, layout, rooted, split_rows
from ..ops import (SUPPORTED_DTYPES, ReduceOp, check_accumulate_dtype, check_dtype,
                   check_op_dtype, parse_op)

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "scatter",
           "gather", "all_to_all", "run_schedule", "release_buffers", "ReduceOp",
           "PIPELINE_THRESHOLD_BYTES", "DEFAULT_SEGMENT_BYTES"]

#: Pipelining (``segment_bytes=None``): chunks of at least PIPELINE_THRESHOLD_BYTES are moved
#: in segments of DEFAULT_SEGMENT_BYTES. None: never split by default. Measured with
#: benchmarks/bench_mpi.py --segments on 2 Open MPI 4.1 processes over shared memory (vader,
#: CMA single copy): segments of 64 KiB–32 MiB were slower than whole chunks at every size from
#: 1 MiB to 256 MiB (e.g. 64 MiB: 1 MiB segments 0.46x, 4 MiB segments 0.65x the busbw of
#: whole chunks), because every message is a rendezvous in which both processes must be
#: running, and the receiver's single copy leaves no transfer to overlap with the reduction
#: (docs/benchmarks.md). Pass segment_bytes to pipeline anyway, e.g. across nodes.
PIPELINE_THRESHOLD_BYTES: int | None = None
DEFAULT_SEGMENT_BYTES = 4 << 20


_mpi: list = []  # the mpi4py.MPI module, imported on first use (importing it starts MPI)


def _comm(comm):
    if not _mpi:
        from mpi4py import MPI
        _mpi.append(MPI)
    MPI = _mpi[0]
    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Intracomm):
        raise ArgumentTypeError(f"comm must be an mpi4py intracommunicator (MPI.Intracomm) or "
                                f"None, got {type(comm).__name__}")
    return comm


_executor: list = []


def _execute(*args, **kwargs):
    if not _executor:  # imported on first use: importing it imports mpi4py, which starts MPI
        from .executor import execute
        _executor.append(execute)
    return _executor[0](*args, **kwargs)


_schedule_cache: dict = {}


def _schedule(collective: str, algorithm: str, world_size: int, params: dict | None = None):
    """``build_schedule``, remembered: its argument checks cost microseconds on every call
    (keyed by the registry entry too, so re-registering a name is seen). ``params``: the
    algorithm's keyword parameters (root included for rooted collectives)."""
    if params and "timeout" in params:  # ringccl.torch's keyword: say where MPI's is
        raise ArgumentError(f"ringccl.mpi.{collective} takes no timeout= (got "
                            f"{params['timeout']!r}); set the RINGCCL_TIMEOUT environment "
                            "variable (seconds) to bound every wait")
    try:
        key = (collective, algorithm, world_size, params_key(params) if params else ())
        hash(key)
    except TypeError:  # unhashable names or parameters: build_schedule refuses or builds them
        return build_schedule(collective, algorithm, world_size, **(params or {}))
    entry = REGISTRY.get((collective, algorithm))
    cached = _schedule_cache.get(key)
    if cached is not None and cached[0] is entry:
        return cached[1]
    schedule = build_schedule(collective, algorithm, world_size, **(params or {}))
    if len(_schedule_cache) > 64:
        _schedule_cache.clear()
    _schedule_cache[key] = (entry, schedule)
    return schedule


def _check_segment_bytes(segment_bytes: Any) -> None:
    if segment_bytes is None or (type(segment_bytes) is int and segment_bytes >= 0):
        return  # the common case, without a call
    check_int(segment_bytes, "segment_bytes")  # 0: never split


def release_buffers() -> None:
    """Free the buffers, plans and private communicators kept between calls (collective: call it
    on every rank)."""
    from .executor import release_buffers as release
    release()
    _scratch_cache.clear()
    clear_cache()
    _checked_ops.clear()
    _schedule_cache.clear()


_DTYPES = frozenset(np.dtype(d) for d in SUPPORTED_DTYPES)


def _check_array(a: Any, argument: str, writable: bool = True,
                 contiguous: bool = True) -> np.ndarray:
    """``a`` if it is a numpy array of a supported dtype (C-contiguous and writable unless
    told otherwise: arrays only read, or written through a copy, may be neither)."""
    if (type(a) is np.ndarray and a.dtype in _DTYPES and a.flags.c_contiguous
            and a.flags.writeable):
        return a  # the common case, checked cheaply: this runs on every call
    if not isinstance(a, np.ndarray):
        raise ArgumentTypeError(f"{argument} must be a numpy.ndarray, got {type(a).__name__}")
    check_dtype(a.dtype, f"{argument}.dtype")
    # read-only first: a broadcast (stride-0) view is both, and a copy would not be the output
    if writable and not a.flags.writeable:
        raise ArgumentError(f"{argument} (shape {a.shape}) is read-only; it must be writeable")
    if contiguous and not a.flags.c_contiguous:
        raise ArgumentError(f"{argument} (shape {a.shape}, strides {a.strides}) must be "
                            "C-contiguous, as MPI buffers are (use numpy.ascontiguousarray)")
    return a


def _check_pair(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.dtype != b.dtype:
        raise ArgumentTypeError(f"{name_a}.dtype={a.dtype} differs from {name_b}.dtype={b.dtype}")


_checked_ops: dict = {}


def _check_op(op: Any, dtype: np.dtype) -> ReduceOp:
    try:
        return _checked_ops[op, dtype]
    except (KeyError, TypeError):  # TypeError: an unhashable op, parsed (and refused) below
        pass
    reduce_op = parse_op(op)
    check_op_dtype(reduce_op, dtype)
    if isinstance(op, (str, ReduceOp)):
        _checked_ops[op, dtype] = reduce_op
    return reduce_op


def run_schedule(schedule, buffer: np.ndarray, op: Any = ReduceOp.SUM, comm=None,
                 segment_bytes: int | None = None, bounds=None) -> np.ndarray:
    """Execute any ``schedule`` in place on this rank's 1-D working ``buffer``
    (``bounds``: this rank's chunk offsets; see :func:`ringccl.mpi.executor.execute`)."""
    _check_array(buffer, "buffer")
    _check_segment_bytes(segment_bytes)
    if buffer.ndim != 1:
        raise ArgumentError(f"buffer must be 1-D, got shape {buffer.shape}")
    return _execute(schedule, buffer, _check_op(op, buffer.dtype), _comm(comm), segment_bytes,
                    bounds=bounds)


def _accumulate(accumulate_dtype: Any, dtype: np.dtype, collective: str) -> np.dtype | None:
    """The numpy dtype to reduce in (None: the buffer's own), validated
    (:func:`ringccl.ops.check_accumulate_dtype`)."""
    name = check_accumulate_dtype(accumulate_dtype, dtype, collective, True)
    return None if name is None or np.dtype(name) == dtype else np.dtype(name)


def all_reduce(buffer: np.ndarray, op: Any = ReduceOp.SUM, comm=None, algorithm: str = "ring",
               segment_bytes: int | None = None, accumulate_dtype: Any = None,
               **params) -> np.ndarray:
    """Reduce ``buffer`` across all ranks of ``comm``, in place (``MPI_Allreduce(MPI_IN_PLACE)``).

    Args:
        buffer: C-contiguous array, any shape, same shape and dtype on every rank.
        op: ``ReduceOp`` or a name ("sum", "max", ...); AVG needs floats, bitwise ops integers or
            bool.
        comm: mpi4py communicator (None = ``MPI.COMM_WORLD``).
        algorithm: a name from ``ringccl.algorithms("all_reduce")``.
        segment_bytes: pipelining segment size in bytes (None: :data:`PIPELINE_THRESHOLD_BYTES`
            decides, 0: never split).
        accumulate_dtype: floating buffers only: None, or a floating dtype at least as wide
            ("float32", np.float32): the working buffer is a copy in that dtype (what travels),
            the result is cast back once (error bound: :func:`ringccl.sim.fp_error_bound`).
        params: the algorithm's keyword parameters (e.g. ``segments=8`` for tree,
            ``local_size=`` for hierarchical, ``root=`` for master).

    Returns:
        ``buffer`` (modified in place).
    Raises:
        ArgumentError, ArgumentTypeError: bad argument, before any data moves.
        BackendError: a failed transfer.
    """
    comm = _comm(comm)
    _check_array(buffer, "buffer")
    reduce_op = _check_op(op, buffer.dtype)
    acc = _accumulate(accumulate_dtype, buffer.dtype, "all_reduce")
    _check_segment_bytes(segment_bytes)
    world_size = comm.Get_size()
    schedule = _schedule("all_reduce", algorithm, world_size, params)
    work = buffer.reshape(-1) if acc is None else buffer.reshape(-1).astype(acc)
    _execute(schedule, work, reduce_op, comm, segment_bytes,
             bounds=layout(schedule, comm.Get_rank(), work.size).offsets)
    if reduce_op is ReduceOp.AVG:
        np.divide(work, world_size, out=work)
    if acc is not None:
        buffer.reshape(-1)[...] = work  # one rounding back to the buffer's dtype
    return buffer


def reduce_scatter(output: np.ndarray, input: np.ndarray, op: Any = ReduceOp.SUM, comm=None,
                   algorithm: str = "ring", segment_bytes: int | None = None,
                   accumulate_dtype: Any = None, **params) -> np.ndarray:
    """Reduce ``input`` across ranks and leave block ``rank`` in ``output``
    (``MPI_Reduce_scatter_block``; ``torch.distributed.reduce_scatter_tensor``).

    Args:
        output: ``input.size // world_size`` elements, same dtype as ``input``; C-contiguous.
        input: world_size · output.size elements, any layout; not modified. ``output`` may be
            the view
            ``input[rank * output.size:(rank + 1) * output.size]`` (in place, as nccl-tests
            does); ``input`` is then modified.
        op, comm, algorithm, segment_bytes, accumulate_dtype, params: as :func:`all_reduce`
            (``ringccl.algorithms("reduce_scatter")``).

    Returns:
        ``output``.
    Raises:
        ArgumentError: sizes that do not match, dtype mismatch, bad op.
    """
    comm = _comm(comm)
    _check_array(output, "output")
    _check_array(input, "input", writable=False, contiguous=False)
    _check_pair(output, input, "output", "input")
    world_size, rank = comm.Get_size(), comm.Get_rank()
    if input.size != world_size * output.size:
        raise ArgumentError(f"input has {input.size} elements; reduce_scatter needs "
                            f"world_size * output.size = {world_size} * {output.size}")
    reduce_op = _check_op(op, input.dtype)
    acc = _accumulate(accumulate_dtype, input.dtype, "reduce_scatter")
    _check_segment_bytes(segment_bytes)
    schedule = _schedule("reduce_scatter", algorithm, world_size, params)
    flat = input.reshape(-1)
    block = slice(rank * output.size, (rank + 1) * output.size)
    in_place = np.shares_memory(output, input)
    if in_place and not (input.flags.c_contiguous and _is_block(output.reshape(-1), flat, rank)):
        raise ArgumentError("output overlaps input but is not exactly input's block rank "
                            f"(elements {block.start}:{block.stop} of a C-contiguous input); "
                            "pass that view, or arrays that do not overlap")
    if acc is not None:
        work = flat.astype(acc)
    else:
        work = flat if in_place else _scratch(flat)
    _execute(schedule, work, reduce_op, comm, segment_bytes,
             bounds=layout(schedule, rank, flat.size).offsets)
    result = work[block]
    if reduce_op is ReduceOp.AVG:
        np.divide(result, world_size, out=result)
    if not in_place or acc is not None:
        output.reshape(-1)[...] = result
    return output


def all_gather(output: np.ndarray, input: np.ndarray, comm=None, algorithm: str = "ring",
               segment_bytes: int | None = None, **params) -> np.ndarray:
    """Gather every rank's ``input`` into ``output`` on every rank, in rank order
    (``MPI_Allgather``; ``torch.distributed.all_gather_into_tensor``).

    Args:
        output: world_size · input.size elements, same dtype; C-contiguous. ``input`` may be
            the view
            ``output[rank * input.size:(rank + 1) * input.size]`` (in place).
        input: this rank's block, any layout; not modified.
        comm, algorithm, segment_bytes, params: as :func:`all_reduce`
            (``ringccl.algorithms("all_gather")``).

    Returns:
        ``output``.
    Raises:
        ArgumentError: sizes that do not match, dtype mismatch.
    """
    comm = _comm(comm)
    _check_array(output, "output")
    _check_array(input, "input", writable=False, contiguous=False)
    _check_pair(output, input, "output", "input")
    world_size, rank = comm.Get_size(), comm.Get_rank()
    if output.size != world_size * input.size:
        raise ArgumentError(f"output has {output.size} elements; all_gather needs "
                            f"world_size * input.size = {world_size} * {input.size}")
    _check_segment_bytes(segment_bytes)
    schedule = _schedule("all_gather", algorithm, world_size, params)
    work = output.reshape(-1)
    mine = work[rank * input.size:(rank + 1) * input.size]
    in_place = np.shares_memory(output, input)
    if in_place and not (input.flags.c_contiguous and _is_block(input.reshape(-1), work, rank)):
        raise ArgumentError("input overlaps output but is not exactly output's block rank "
                            f"(elements {rank * input.size}:{(rank + 1) * input.size}); pass "
                            "that view, or arrays that do not overlap")
    with _kept(mine):
        if not in_place:
            mine[...] = input.reshape(-1)
        _execute(schedule, work, ReduceOp.SUM, comm, segment_bytes,
                 bounds=layout(schedule, rank, work.size).offsets)
    return output


@contextlib.contextmanager
def _kept(view: np.ndarray):
    """Put ``view`` of a caller's array back if the body raises, when a failure can be
    survived (a timeout is in effect, ``RINGCCL_TIMEOUT``: the executor then restores what it
    overwrote too, and this covers what the caller's code copied in before it ran)."""
    saved = view.copy() if engine.timeout_seconds(None) is not None else None
    try:
        yield
    except BaseException:
        if saved is not None:
            view[...] = saved
        raise


_scratch_cache: dict = {}


def _workspace(size: int, dtype: np.dtype) -> np.ndarray:
    """A working buffer of ``size`` elements kept between calls (contents undefined):
    allocating per call costs page faults on every call."""
    cached = _scratch_cache.get(dtype)
    if cached is None or cached.size < size:
        cached = np.empty(size, dtype=dtype)
        _scratch_cache[dtype] = cached
    return cached[:size]


def _scratch(flat: np.ndarray) -> np.ndarray:
    """A copy of ``flat`` in the working buffer kept between calls (reduce_scatter must not
    modify its input)."""
    work = _workspace(flat.size, flat.dtype)
    work[...] = flat
    return work


def _copy_runs(work: np.ndarray, runs: tuple, pieces: list, into_work: bool) -> None:
    """Copy between the ranges ``runs`` of ``work`` and the 1-D arrays ``pieces``, both taken
    concatenated, without concatenating either (a range may span pieces and vice versa).
    Overlapping source and destination are fine (numpy copies through a buffer then)."""
    i, at = 0, 0
    for a, b in runs:
        while a < b:
            piece = pieces[i]
            if at == piece.size:
                i, at = i + 1, 0
                continue
            k = min(b - a, piece.size - at)
            if into_work:
                work[a:a + k] = piece[at:at + k]
            else:
                piece[at:at + k] = work[a:a + k]
            a, at = a + k, at + k


def _copy_in(work: np.ndarray, runs: tuple, sources: list) -> None:
    """Copy the arrays ``sources`` (any shape and layout, C order), concatenated, into the
    ranges ``runs`` of ``work``."""
    _copy_runs(work, runs, [s.reshape(-1) for s in sources], True)


def _copy_out(work: np.ndarray, runs: tuple, targets: list) -> None:
    """Copy the ranges ``runs`` of ``work``, concatenated, into the arrays ``targets`` (any
    shape and layout, filled in C order)."""
    flat = [t.reshape(-1) if t.flags.c_contiguous else np.empty(t.size, dtype=t.dtype)
            for t in targets]
    _copy_runs(work, runs, flat, False)
    for t, f in zip(targets, flat):
        if not t.flags.c_contiguous:
            t[...] = f.reshape(t.shape)


def _is_block(a: np.ndarray, buffer: np.ndarray, index: int) -> bool:
    """True if ``a`` is exactly block ``index`` (of a.size elements) of the 1-D ``buffer``."""
    if not a.flags.c_contiguous or not np.may_share_memory(a, buffer):
        return False
    block = buffer[index * a.size:(index + 1) * a.size]
    return (a.__array_interface__["data"][0] == block.__array_interface__["data"][0]
            and a.size == block.size)


def _check_blocks(blocks: Any, argument: str, world_size: int, like: np.ndarray,
                  writable: bool) -> list:
    """A root's scatter_list/gather_list: world_size arrays of like.size elements each, or one
    array of world_size·like.size elements (MPI's send/receive buffer, blocks in rank order)."""
    if isinstance(blocks, np.ndarray):
        _check_array(blocks, argument, writable=writable, contiguous=False)
        _check_pair(blocks, like, argument, "buffer")
        if blocks.size != world_size * like.size:
            raise ArgumentError(f"{argument} has {blocks.size} elements; one array must have "
                                f"world_size * buffer.size = {world_size} * {like.size}")
        return [blocks]
    if not isinstance(blocks, (list, tuple)) or len(blocks) != world_size:
        raise ArgumentError(f"{argument} must be a list of world_size={world_size} arrays (or "
                            f"one array of world_size * buffer.size elements), got "
                            f"{type(blocks).__name__}"
                            + (f" of length {len(blocks)}" if hasattr(blocks, "__len__") else ""))
    for i, b in enumerate(blocks):
        _check_array(b, f"{argument}[{i}]", writable=writable, contiguous=False)
        _check_pair(b, like, f"{argument}[{i}]", "buffer")
        if b.size != like.size:
            raise ArgumentError(f"{argument}[{i}] has {b.size} elements; every array must have "
                                f"buffer.size={like.size}")
    return list(blocks)


def _no_blocks(blocks: Any, argument: str, rank: int, root_arg: str, root: int) -> None:
    if blocks is None or (isinstance(blocks, (list, tuple)) and not blocks):
        return
    raise ArgumentError(f"{argument} must be None on ranks other than {root_arg}={root} (this is "
                        f"rank {rank}), as in torch.distributed")


def _in_place(collective: str, buffer: np.ndarray, op: ReduceOp, comm, schedule,
              segment_bytes, copy: bool) -> None:
    """Run a collective whose working buffer is the whole buffer (broadcast, reduce); ``copy``:
    work on a copy and leave ``buffer`` unchanged."""
    rank = comm.Get_rank()
    contiguous = buffer.flags.c_contiguous
    if copy or not contiguous:
        work = _workspace(buffer.size, buffer.dtype)
        _copy_in(work, ((0, buffer.size),), [buffer])
    else:
        work = buffer.reshape(-1)
    _execute(schedule, work, op, comm, segment_bytes,
             bounds=layout(schedule, rank, buffer.size).offsets)
    if copy:
        return
    if op is ReduceOp.AVG and collective == "reduce":
        np.divide(work, comm.Get_size(), out=work)
    if not contiguous:
        buffer[...] = work.reshape(buffer.shape)


def broadcast(buffer: np.ndarray, src: int = 0, comm=None, algorithm: str = "ring",
              segment_bytes: int | None = None, **params) -> np.ndarray:
    """Copy ``src``'s ``buffer`` into ``buffer`` on every rank, in place (``MPI_Bcast``;
    ``torch.distributed.broadcast``).

    Args:
        buffer: any shape, same shape and dtype on every rank; sent from ``src``, overwritten
            elsewhere. A non-contiguous array is handled through a contiguous copy.
        src: rank of the source in ``comm`` (MPI's root).
        comm: mpi4py communicator (None = ``MPI.COMM_WORLD``).
        algorithm: a name from ``ringccl.algorithms("broadcast")`` (default the pipelined ring
            chain).
        segment_bytes, params: as :func:`all_reduce` (e.g. ``segments=8``; the root is ``src``,
            not ``root=``).

    Returns:
        ``buffer``.
    Raises:
        ArgumentError: src out of range, unknown algorithm; ArgumentTypeError: dtype, comm.
    """
    comm = _comm(comm)
    _check_array(buffer, "buffer", contiguous=False)
    world_size = comm.Get_size()
    root = check_root(src, world_size, "src")
    _check_segment_bytes(segment_bytes)
    schedule = _schedule("broadcast", algorithm, world_size, rooted(params, root))
    _in_place("broadcast", buffer, ReduceOp.SUM, comm, schedule, segment_bytes, copy=False)
    return buffer


def reduce(buffer: np.ndarray, dst: int = 0, op: Any = ReduceOp.SUM, comm=None,
           algorithm: str = "ring", segment_bytes: int | None = None, **params) -> np.ndarray:
    """Reduce ``buffer`` of every rank into ``dst``'s ``buffer``, in place there
    (``MPI_Reduce`` with ``MPI_IN_PLACE`` at the root; ``torch.distributed.reduce``).

    Only ``dst``'s buffer receives the result; the other ranks' buffers are left unchanged (the
    schedule runs on a copy there, as MPI leaves their send buffers).

    Args:
        buffer: any shape, same shape and dtype on every rank. A non-contiguous array is handled
            through a contiguous copy.
        dst: rank of the destination in ``comm`` (MPI's root).
        op: as :func:`all_reduce` (AVG: the sum divided by the number of ranks, at ``dst``).
        comm: mpi4py communicator (None = ``MPI.COMM_WORLD``).
        algorithm: a name from ``ringccl.algorithms("reduce")`` (default the pipelined ring
            chain).
        segment_bytes, params: as :func:`all_reduce` (the root is ``dst``, not ``root=``).

    Returns:
        ``buffer``.
    Raises:
        ArgumentError: dst out of range, bad op, unknown algorithm; ArgumentTypeError: dtype.
    """
    comm = _comm(comm)
    _check_array(buffer, "buffer", contiguous=False)
    reduce_op = _check_op(op, buffer.dtype)
    world_size = comm.Get_size()
    root = check_root(dst, world_size, "dst")
    _check_segment_bytes(segment_bytes)
    schedule = _schedule("reduce", algorithm, world_size, rooted(params, root))
    _in_place("reduce", buffer, reduce_op, comm, schedule, segment_bytes,
              copy=comm.Get_rank() != root)
    return buffer


def scatter(buffer: np.ndarray, scatter_list: Any = None, src: int = 0, comm=None,
            algorithm: str = "binomial", segment_bytes: int | None = None,
            **params) -> np.ndarray:
    """Send block r of ``src``'s ``scatter_list`` to rank r's ``buffer`` (``MPI_Scatter``;
    ``torch.distributed.scatter``).

    Args:
        buffer: this rank's output, any shape, same size on every rank; C-contiguous, writable.
        scatter_list: on ``src``: world_size arrays of buffer.size elements each, or one array of
            world_size · buffer.size elements (MPI's send buffer: block r = elements
            r·buffer.size …); same dtype as ``buffer``, any layout, not modified. On the other
            ranks None (torch.distributed's rule). ``buffer`` may be ``src``'s own block of it
            (``MPI_IN_PLACE``).
        src: rank of the source in ``comm`` (MPI's root).
        comm: mpi4py communicator (None = ``MPI.COMM_WORLD``).
        algorithm: a name from ``ringccl.algorithms("scatter")`` (default binomial tree).
        segment_bytes, params: as :func:`all_reduce` (the root is ``src``, not ``root=``).

    Returns:
        ``buffer``.
    Raises:
        ArgumentError: a missing or malformed scatter_list on src, one given elsewhere, src out
            of range; ArgumentTypeError: dtype. (An error raised on some ranks only, such as
            src's malformed scatter_list, leaves the other ranks waiting, as in
            torch.distributed: run scripts with ``python -m mpi4py`` so that one rank's uncaught
            exception aborts the job.)
    """
    comm = _comm(comm)
    _check_array(buffer, "buffer")
    world_size, rank = comm.Get_size(), comm.Get_rank()
    root = check_root(src, world_size, "src")
    _check_segment_bytes(segment_bytes)
    schedule = _schedule("scatter", algorithm, world_size, rooted(params, root))
    if rank == root:  # every rank refused a bad algorithm alike before the root-only checks
        blocks = _check_blocks(scatter_list, "scatter_list", world_size, buffer, writable=False)
    else:
        _no_blocks(scatter_list, "scatter_list", rank, "src", root)
    plan = layout(schedule, rank, world_size * buffer.size)
    work = _workspace(plan.numel, buffer.dtype)
    if rank == root:
        _copy_in(work, plan.input_runs, blocks)
    _execute(schedule, work, ReduceOp.SUM, comm, segment_bytes, bounds=plan.offsets)
    _copy_out(work, plan.output_runs, [buffer])
    return buffer


def gather(buffer: np.ndarray, gather_list: Any = None, dst: int = 0, comm=None,
           algorithm: str = "binomial", segment_bytes: int | None = None, **params):
    """Collect every rank's ``buffer`` into ``gather_list`` on rank ``dst`` (``MPI_Gather``;
    ``torch.distributed.gather``).

    Args:
        buffer: this rank's input, any shape and layout, same size on every rank; not modified.
        gather_list: on ``dst``: world_size writable arrays of buffer.size elements each (entry
            r receives rank r's buffer), or one array of world_size · buffer.size elements (MPI's
            receive buffer; block r from rank r); same dtype as ``buffer``. On the other ranks
            None. ``buffer`` may be ``dst``'s own block of it (``MPI_IN_PLACE``).
        dst: rank of the destination in ``comm`` (MPI's root).
        comm: mpi4py communicator (None = ``MPI.COMM_WORLD``).
        algorithm: a name from ``ringccl.algorithms("gather")`` (default binomial tree).
        segment_bytes, params: as :func:`all_reduce` (the root is ``dst``, not ``root=``).

    Returns:
        ``gather_list`` on ``dst``, None on the other ranks (torch.distributed returns None).
    Raises:
        ArgumentError: a missing or malformed gather_list on dst, one given elsewhere, dst out
            of range; ArgumentTypeError: dtype. (Root-only errors leave the other ranks
            waiting, as in :func:`scatter`.)
    """
    comm = _comm(comm)
    _check_array(buffer, "buffer", writable=False, contiguous=False)
    world_size, rank = comm.Get_size(), comm.Get_rank()
    root = check_root(dst, world_size, "dst")
    _check_segment_bytes(segment_bytes)
    schedule = _schedule("gather", algorithm, world_size, rooted(params, root))
    if rank == root:
        blocks = _check_blocks(gather_list, "gather_list", world_size, buffer, writable=True)
    else:
        _no_blocks(gather_list, "gather_list", rank, "dst", root)
    plan = layout(schedule, rank, world_size * buffer.size)
    direct = rank == root and len(blocks) == 1 and blocks[0].flags.c_contiguous
    # the root touches every chunk, so a contiguous receive buffer is the working buffer itself
    work = blocks[0].reshape(-1) if direct else _workspace(plan.numel, buffer.dtype)
    own = work[root * buffer.size:(root + 1) * buffer.size] if direct else work[:0]
    with _kept(own):  # the root's own block of the caller's gather_list
        if not (direct and _is_block(buffer, work, root)):  # in place: already there
            _copy_in(work, plan.input_runs, [buffer])
        _execute(schedule, work, ReduceOp.SUM, comm, segment_bytes, bounds=plan.offsets)
    if rank != root:
        return None
    if not direct:
        _copy_out(work, plan.output_runs, blocks)
    return gather_list


def all_to_all(output: np.ndarray, input: np.ndarray, output_split_sizes=None,
               input_split_sizes=None, comm=None, algorithm: str = "direct",
               segment_bytes: int | None = None, **params) -> np.ndarray:
    """Split ``input`` along dim 0 and send piece j to rank j; piece i of ``output`` comes from
    rank i (``MPI_Alltoall``, or ``MPI_Alltoallv`` with split sizes;
    ``torch.distributed.all_to_all_single``).

    Args:
        output: receives the pieces; writable, same dtype and trailing dims (beyond dim 0) as
            ``input``, any layout. May be ``input`` itself (``MPI_IN_PLACE``).
        input: any layout; not modified (unless it is ``output``).
        output_split_sizes, input_split_sizes: rows (dim 0) per rank, world_size integers >= 0
            (zeros allowed; the counts of ``MPI_Alltoallv`` divided by the row size), or None
            for equal pieces (dim 0 divisible by world_size). Rank r's input_split_sizes[j] must
            equal rank j's output_split_sizes[r] (not checked: as MPI requires).
        comm: mpi4py communicator (None = ``MPI.COMM_WORLD``).
        algorithm: a name from ``ringccl.algorithms("all_to_all")``. Algorithms with scratch
            chunks (bruck) need equal pieces on every rank; for them the ranks agree on the
            piece size with one small ``MPI_Allreduce`` before data moves.
        segment_bytes, params: as :func:`all_reduce`.

    Returns:
        ``output``.
    Raises:
        ArgumentError: split sizes that do not match the arrays, unequal pieces for a scratch
            algorithm (on every rank), trailing dims that differ; ArgumentTypeError: dtype.
    """
    comm = _comm(comm)
    _check_array(output, "output", contiguous=False)
    _check_array(input, "input", writable=False, contiguous=False)
    _check_pair(output, input, "output", "input")
    world_size, rank = comm.Get_size(), comm.Get_rank()
    in_rows = input.shape[0] if input.ndim else 1
    out_rows = output.shape[0] if output.ndim else 1
    row = math.prod(input.shape[1:])
    if math.prod(output.shape[1:]) != row:
        raise ArgumentError(f"output.shape={output.shape} and input.shape={input.shape} differ "
                            "beyond dim 0")
    ins = split_rows(input_split_sizes, "input_split_sizes", world_size, in_rows, "input")
    outs = split_rows(output_split_sizes, "output_split_sizes", world_size, out_rows, "output")
    _check_segment_bytes(segment_bytes)
    schedule = _schedule("all_to_all", algorithm, world_size, params)

    def agree(largest: int, neg_smallest: int) -> tuple[int, int]:
        from mpi4py import MPI
        t = np.array([largest, neg_smallest], dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, t, op=MPI.MAX)
        return int(t[0]), int(t[1])

    sizes = all_to_all_sizes(schedule, [k * row for k in ins], [k * row for k in outs], agree)
    plan = layout(schedule, rank, sizes=sizes)
    work = _workspace(plan.numel, input.dtype)
    _copy_in(work, plan.input_runs, [input])
    _execute(schedule, work, ReduceOp.SUM, comm, segment_bytes, bounds=plan.offsets)
    _copy_out(work, plan.output_runs, [output])
    return output
