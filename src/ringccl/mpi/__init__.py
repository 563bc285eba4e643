"""ringccl collectives under ``mpirun``: every schedule on numpy buffers over mpi4py.

Requires the ``mpi`` extra (mpi4py) and an MPI library (Open MPI or MPICH). The functions mirror
:mod:`ringccl.torch` (same argument order, ``op`` names and ``algorithm`` names) with numpy arrays
in place of tensors and an mpi4py communicator in place of a process group; every algorithm of
``ringccl.algorithms(collective)`` runs unchanged.

Example (``mpirun -np 4 python script.py``)::

    import numpy as np, ringccl.mpi as rm
    x = np.ones(1 << 20, dtype=np.float32)
    rm.all_reduce(x)                      # ring all-reduce, in place, like MPI_Allreduce(IN_PLACE)

Inputs must be C-contiguous numpy arrays of a dtype in ``ringccl.ops.SUPPORTED_DTYPES``, with the
same shape and dtype on every rank (as MPI requires; not checked across ranks).

Importing this package does not import mpi4py (which initializes MPI); the first collective does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..algorithms import REGISTRY, build_schedule
from ..args import check_int
from ..collectives import get_collective
from ..errors import ArgumentError, ArgumentTypeError
from ..ops import SUPPORTED_DTYPES, ReduceOp, check_dtype, check_op_dtype, parse_op

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "run_schedule", "release_buffers",
           "ReduceOp", "PIPELINE_THRESHOLD_BYTES", "DEFAULT_SEGMENT_BYTES"]

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


def _comm(comm):
    from mpi4py import MPI
    return MPI.COMM_WORLD if comm is None else comm


def _execute(*args, **kwargs):
    from .executor import execute
    return execute(*args, **kwargs)


_bounds_cache: dict = {}
_schedule_cache: dict = {}


def _schedule(collective: str, algorithm: str, world_size: int):
    """``build_schedule``, remembered: its argument checks cost microseconds on every call
    (keyed by the registry entry too, so re-registering a name is seen)."""
    key = (collective, algorithm, world_size)
    entry = REGISTRY.get((collective, algorithm))
    cached = _schedule_cache.get(key)
    if cached is not None and cached[0] is entry:
        return cached[1]
    schedule = build_schedule(collective, algorithm, world_size)
    if len(_schedule_cache) > 64:
        _schedule_cache.clear()
    _schedule_cache[key] = (entry, schedule)
    return schedule


def _bounds(collective: str, schedule, rank: int, m: int) -> tuple:
    """This rank's chunk offsets for a working buffer of ``m`` elements, from the collective's
    contract (``Collective.chunk_sizes``: blocked collectives split each rank's block)."""
    key = (collective, schedule.algorithm, schedule.world_size, schedule.num_chunks,
           tuple(sorted(schedule.params.items())), rank, m)
    if key not in _bounds_cache:
        if len(_bounds_cache) > 256:
            _bounds_cache.clear()
        sizes = get_collective(collective).chunk_sizes(schedule.world_size, schedule.num_chunks,
                                                       m, schedule.params)[rank]
        _bounds_cache[key] = (0,) + tuple(np.cumsum(sizes).tolist())
    return _bounds_cache[key]


def release_buffers() -> None:
    """Free the buffers, plans and private communicators kept between calls (collective: call it
    on every rank)."""
    from .executor import release_buffers as release
    release()
    _scratch_cache.clear()
    _bounds_cache.clear()
    _checked_ops.clear()
    _schedule_cache.clear()


_DTYPES = frozenset(np.dtype(d) for d in SUPPORTED_DTYPES)


def _check_array(a: Any, argument: str) -> np.ndarray:
    if (type(a) is np.ndarray and a.dtype in _DTYPES and a.flags.c_contiguous
            and a.flags.writeable):
        return a  # the common case, checked cheaply: this runs on every call
    if not isinstance(a, np.ndarray):
        raise ArgumentTypeError(f"{argument} must be a numpy.ndarray, got {type(a).__name__}")
    check_dtype(a.dtype, f"{argument}.dtype")
    if not a.flags.c_contiguous:
        raise ArgumentError(f"{argument} (shape {a.shape}, strides {a.strides}) must be "
                            "C-contiguous, as MPI buffers are (use numpy.ascontiguousarray)")
    if not a.flags.writeable:
        raise ArgumentError(f"{argument} (shape {a.shape}) is read-only; it must be writeable")
    return a


def _check_segment_bytes(segment_bytes: Any) -> None:
    if segment_bytes is not None:
        check_int(segment_bytes, "segment_bytes")


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


def all_reduce(buffer: np.ndarray, op: Any = ReduceOp.SUM, comm=None, algorithm: str = "ring",
               segment_bytes: int | None = None) -> np.ndarray:
    """Reduce ``buffer`` across all ranks of ``comm``, in place (``MPI_Allreduce(MPI_IN_PLACE)``).

    Args:
        buffer: C-contiguous array, any shape, same shape and dtype on every rank.
        op: ``ReduceOp`` or a name ("sum", "max", ...); AVG needs floats, bitwise ops integers or
            bool.
        comm: mpi4py communicator (None = ``MPI.COMM_WORLD``).
        algorithm: a name from ``ringccl.algorithms("all_reduce")``.
        segment_bytes: pipelining segment size in bytes (None: :data:`PIPELINE_THRESHOLD_BYTES`
            decides, 0: never split).

    Returns:
        ``buffer`` (modified in place).
    Raises:
        ArgumentError, ArgumentTypeError: bad argument, before any data moves.
        BackendError: a failed transfer.
    """
    comm = _comm(comm)
    _check_array(buffer, "buffer")
    _check_segment_bytes(segment_bytes)
    reduce_op = _check_op(op, buffer.dtype)
    world_size = comm.Get_size()
    schedule = _schedule("all_reduce", algorithm, world_size)
    work = buffer.reshape(-1)
    _execute(schedule, work, reduce_op, comm, segment_bytes,
             bounds=_bounds("all_reduce", schedule, comm.Get_rank(), work.size))
    if reduce_op is ReduceOp.AVG:
        np.divide(work, world_size, out=work)
    return buffer


def reduce_scatter(output: np.ndarray, input: np.ndarray, op: Any = ReduceOp.SUM, comm=None,
                   algorithm: str = "ring", segment_bytes: int | None = None) -> np.ndarray:
    """Reduce ``input`` across ranks and leave block ``rank`` in ``output``
    (``MPI_Reduce_scatter_block``; ``torch.distributed.reduce_scatter_tensor``).

    Args:
        output: ``input.size // world_size`` elements, same dtype as ``input``.
        input: world_size · output.size elements; not modified. ``output`` may be the view
            ``input[rank * output.size:(rank + 1) * output.size]`` (in place, as nccl-tests
            does); ``input`` is then modified.
        op, comm, algorithm, segment_bytes: as :func:`all_reduce`
            (``ringccl.algorithms("reduce_scatter")``).

    Returns:
        ``output``.
    Raises:
        ArgumentError: sizes that do not match, dtype mismatch, bad op.
    """
    comm = _comm(comm)
    _check_array(output, "output")
    _check_array(input, "input")
    _check_segment_bytes(segment_bytes)
    if output.dtype != input.dtype:
        raise ArgumentTypeError(f"output.dtype={output.dtype} differs from "
                                f"input.dtype={input.dtype}")
    world_size, rank = comm.Get_size(), comm.Get_rank()
    if input.size != world_size * output.size:
        raise ArgumentError(f"input has {input.size} elements; reduce_scatter needs "
                            f"world_size * output.size = {world_size} * {output.size}")
    reduce_op = _check_op(op, input.dtype)
    schedule = _schedule("reduce_scatter", algorithm, world_size)
    flat = input.reshape(-1)
    block = slice(rank * output.size, (rank + 1) * output.size)
    in_place = np.shares_memory(output, input)
    if in_place and not np.shares_memory(output.reshape(-1), flat[block]):
        raise ArgumentError("output overlaps input but is not input's block rank "
                            f"(elements {block.start}:{block.stop})")
    work = flat if in_place else _scratch(flat)
    _execute(schedule, work, reduce_op, comm, segment_bytes,
             bounds=_bounds("reduce_scatter", schedule, rank, flat.size))
    result = work[block]
    if reduce_op is ReduceOp.AVG:
        np.divide(result, world_size, out=result)
    if not in_place:
        output.reshape(-1)[...] = result
    return output


def all_gather(output: np.ndarray, input: np.ndarray, comm=None, algorithm: str = "ring",
               segment_bytes: int | None = None) -> np.ndarray:
    """Gather every rank's ``input`` into ``output`` on every rank, in rank order
    (``MPI_Allgather``; ``torch.distributed.all_gather_into_tensor``).

    Args:
        output: world_size · input.size elements, same dtype. ``input`` may be the view
            ``output[rank * input.size:(rank + 1) * input.size]`` (in place).
        input: this rank's block.
        comm, algorithm, segment_bytes: as :func:`all_reduce`
            (``ringccl.algorithms("all_gather")``).

    Returns:
        ``output``.
    Raises:
        ArgumentError: sizes that do not match, dtype mismatch.
    """
    comm = _comm(comm)
    _check_array(output, "output")
    _check_array(input, "input")
    _check_segment_bytes(segment_bytes)
    if output.dtype != input.dtype:
        raise ArgumentTypeError(f"output.dtype={output.dtype} differs from "
                                f"input.dtype={input.dtype}")
    world_size, rank = comm.Get_size(), comm.Get_rank()
    if output.size != world_size * input.size:
        raise ArgumentError(f"output has {output.size} elements; all_gather needs "
                            f"world_size * input.size = {world_size} * {input.size}")
    schedule = _schedule("all_gather", algorithm, world_size)
    work = output.reshape(-1)
    mine = work[rank * input.size:(rank + 1) * input.size]
    if not np.shares_memory(mine, input):
        mine[...] = input.reshape(-1)
    _execute(schedule, work, ReduceOp.SUM, comm, segment_bytes,
             bounds=_bounds("all_gather", schedule, rank, work.size))
    return output


_scratch_cache: dict = {}


def _scratch(flat: np.ndarray) -> np.ndarray:
    """A copy of ``flat`` in a buffer kept between calls (reduce_scatter must not modify its
    input; allocating per call costs page faults on every call)."""
    key = flat.dtype
    cached = _scratch_cache.get(key)
    if cached is None or cached.size < flat.size:
        cached = np.empty(flat.size, dtype=flat.dtype)
        _scratch_cache[key] = cached
    work = cached[:flat.size]
    work[...] = flat
    return work
