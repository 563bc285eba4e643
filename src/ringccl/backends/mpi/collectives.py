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
:mod:`ringccl.torch`) and runs it with :func:`ringccl.backends.mpi.executor.execute`; none knows any
algorithm. Arrays must be numpy arrays of a dtype in ``ringccl.ops.SUPPORTED_DTYPES``, with the
same shape and dtype on every rank (as MPI requires; not checked across ranks); the arrays a
function updates in place (all_reduce's buffer, reduce_scatter's and all_gather's output,
scatter's buffer) must be C-contiguous, any other array may have any layout (copied). Every
argument is checked before any data moves (ArgumentError, ArgumentTypeError naming the argument
and its value); a check that fails on some ranks only (a root-only list) leaves the others
waiting, as in torch.distributed (and if that rank goes on to another collective on the
communicator, the waiting ranks can take its data for this call's and return a wrong result):
run scripts with ``python -m mpi4py script.py`` so that an uncaught exception aborts the whole
job.

Every function takes, keyword-only and in this order (as :mod:`ringccl.torch`),
``segment_bytes=`` (pipelining; None: the transport's measured policy,
``ringccl.backends.mpi.executor.PIPELINING``, which never splits; 0: never split), ``timeout=``,
``restore=``, ``check=`` and ``transport=``; the flow is :mod:`ringccl.frontend`'s, shared with
ringccl.torch.

``transport="auto"`` (the default; :func:`resolve_transport`) runs over the communicator's
shared memory (:mod:`ringccl.backends.shm`, docs/shm.md) when every rank is on this host
(``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`` spans the communicator, no ``RINGCCL_HOST_ID``
splits it) on x86-64, else over MPI point-to-point; "shm" and "p2p" force one. Over shared
memory ``algorithm=None`` (or "auto") is the measured choice
(:func:`ringccl.costmodel.choice.choose`: one-shot ``direct``, ``two_shot`` for large
all_reduces); an explicit name still runs that algorithm.

Failures: MPI has no timeouts and aborts the job when a process dies. With ``timeout=`` (seconds)
or ``RINGCCL_TIMEOUT`` set, every wait (and the first call's duplication of ``comm``) polls
``MPI_Test`` until the deadline and raises :class:`ringccl.errors.RingcclTimeout` naming the step
and the peer, with the caller's buffers restored (``restore=None``: only when a timeout is in
effect); then end the job with ``comm.Abort()`` (see :func:`ringccl.backends.mpi.executor.execute`).
``check=True`` (or ``RINGCCL_DEBUG=1`` on every rank) first compares a fingerprint of the call
across ranks through the communicator (:mod:`ringccl.consistency`).

Importing this package does not import mpi4py (which initializes MPI); the first collective does.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from ... import frontend
from .. import shm
from ..shm import lane
from ...collectives import check_root
from ...costmodel import choice
from ...engine import trace
from ...errors import ArgumentTypeError, RingcclTimeout
from ...layout import rooted
from ...ops import ReduceOp
from .dialect import NumpyArrays, check_array, clear_checked_ops

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "scatter",
           "gather", "all_to_all", "run_schedule", "release_buffers", "resolve_transport",
           "shm_empty", "ReduceOp", "TRANSPORTS"]


_mpi: list = []  # the mpi4py.MPI module, imported on first use (importing it starts MPI)
_executor: list = []   # [executor.execute_call], imported on first use


def _load_executor() -> None:
    """Import :mod:`ringccl.backends.mpi.executor` (it imports mpi4py) once; a function-level import
    at every call cost a lookup per call."""
    from .executor import execute_call
    _executor[:] = [execute_call]


def _MPI():
    if not _mpi:
        from mpi4py import MPI
        _mpi.append(MPI)
    return _mpi[0]


def release_buffers() -> None:
    """Free the buffers, plans and private communicators kept between calls (collective: call it
    on every rank)."""
    from .executor import release_buffers as release
    release()
    clear_checked_ops()


def shm_empty(shape, dtype=np.float32, comm=None) -> np.ndarray:
    """A numpy array of ``shape`` and ``dtype`` in this rank's slot of ``comm``'s shared
    memory: collectives on it over shared memory skip the copy in and out (zero copy;
    :func:`ringccl.backends.mpi.executor.shm_empty`, which documents it). Collective."""
    from .executor import shm_empty as allocate
    return allocate(shape, dtype, comm)


class _Numpy(NumpyArrays):
    """ringccl.mpi's :class:`ringccl.frontend.Backend`: the numpy dialect
    (:class:`~ringccl.backends.mpi.dialect.NumpyArrays`), mpi4py communicators
    (:class:`ringccl.frontend.GroupAdapter`), the executor of :mod:`.executor` with the call's
    transport (:class:`ringccl.frontend.Executor`)."""

    name = "ringccl.mpi"
    #: mirrors ringccl.backends.mpi.executor.PIPELINING (not imported here: that imports mpi4py);
    #: None: the executor's measured default
    pipelining = None

    # -- group adapter --------------------------------------------------------------------------
    @staticmethod
    def group(comm):
        MPI = _mpi[0] if _mpi else _MPI()
        if comm is None:
            return MPI.COMM_WORLD
        if not isinstance(comm, MPI.Intracomm):
            raise ArgumentTypeError(f"comm must be an mpi4py intracommunicator (MPI.Intracomm) "
                                    f"or None, got {type(comm).__name__}")
        return comm

    @staticmethod
    def size(comm) -> int:
        return comm.Get_size()

    @staticmethod
    def rank(comm) -> int:
        return comm.Get_rank()

    @staticmethod
    def root(comm, root, argument: str, world_size: int) -> int:
        return check_root(root, world_size, argument)

    key = staticmethod(id)   # as ringccl.torch: the communicator object's identity

    @staticmethod
    def gather_objects(comm, obj, collective: str, algorithm: str, timeout=None) -> list:
        if timeout is None:
            return comm.allgather(obj)  # MPI has no timeouts: a rank not in the check hangs
        # bounded: the pickled objects' lengths, then their bytes, each a non-blocking
        # all-gather polled until the deadline (comm.allgather cannot be bounded)
        from .executor import wait_request
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        sizes = np.empty(comm.Get_size(), dtype=np.int64)
        try:
            wait_request(comm.Iallgather(np.array([data.size], dtype=np.int64), sizes), timeout)
            everything = np.empty(int(sizes.sum()), dtype=np.uint8)
            wait_request(comm.Iallgatherv(data, [everything, sizes]), timeout)
        except TimeoutError as exc:
            rank = comm.Get_rank()
            raise RingcclTimeout(
                f"the cross-rank check of {algorithm} {collective} (check=True or "
                f"RINGCCL_DEBUG) timed out after {timeout:g} s on rank {rank}: the other ranks "
                "did not join it; is the check on for every rank, and are they all calling a "
                "ringccl collective? End the job with comm.Abort()",
                collective=collective, algorithm=algorithm, rank=rank) from exc
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        return [pickle.loads(everything[a:b].tobytes())
                for a, b in zip(offsets[:-1], offsets[1:])]

    @staticmethod
    def max2(comm, a: int, b: int) -> tuple[int, int]:
        t = np.array([a, b], dtype=np.int64)
        comm.Allreduce(_MPI().IN_PLACE, t, op=_MPI().MAX)
        return int(t[0]), int(t[1])

    @staticmethod
    def default_restore(timeout) -> bool:
        # without a timeout an MPI failure aborts the job: nothing to restore for
        return timeout is not None

    @staticmethod
    def execute(schedule, work, op, comm, bounds, opts, restore: bool) -> None:
        if not _executor:  # imported on first use: importing it imports mpi4py
            _load_executor()
        # opts.timeout is in seconds already (frontend.options read RINGCCL_TIMEOUT once)
        _executor[0](schedule, work, op, comm, None, bounds, opts.timeout, restore,
                     opts.pipelining, opts.transport or "p2p")

    @staticmethod
    def choose(collective: str, world_size: int, count: int, dtype, opts) -> str:
        """algorithm=None/"auto": the one chooser's pick for the call's transport with
        ringccl.mpi's measured crossovers (:func:`ringccl.costmodel.choice.choose`)."""
        return choice.choose(collective, world_size, count * dtype.itemsize,
                             opts.transport or "p2p", backend="mpi").algorithm


_B = _Numpy()

#: the transports ringccl.mpi's calls accept (``transport=``, ``RINGCCL_TRANSPORT``)
TRANSPORTS = ("auto", "shm", "p2p")


def resolve_transport(comm, transport: Any, timeout: float | None = None) -> str:
    """``transport=`` ("auto", "shm", "p2p") as the transport this call runs on.

    "auto" (the default; ``RINGCCL_TRANSPORT`` overrides it): "shm" when the communicator has
    more than one rank, this is an x86-64 machine and every rank shares this host's memory
    (:func:`ringccl.backends.mpi.executor.shm_possible`:
    ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`` spans ``comm`` and no ``RINGCCL_HOST_ID``
    splits it; asked once per communicator, a collective call), else "p2p" (MPI
    point-to-point). The same answer on every rank when they
    pass the same ``transport``.

    Raises:
        ArgumentError: another value; BackendError: "shm" on a machine that is not x86-64.
        RingcclTimeout: with ``timeout`` (seconds or a timedelta; None: ``RINGCCL_TIMEOUT``), a
            peer that did not join the first "auto" call on ``comm`` within it.
    """
    transport = shm.transport_choice(transport, TRANSPORTS)
    if transport != "auto":
        return transport
    if comm.Get_size() == 1 or not shm.supported_platform():
        return "p2p"
    from .executor import shm_possible
    return "shm" if shm_possible(comm, timeout) else "p2p"


def _options(comm, segment_bytes, timeout, restore, check, transport):
    # "auto"'s first call on comm meets the peers: within the call's timeout
    return frontend.options(_B, segment_bytes, timeout, restore, check,
                            resolve_transport(comm, transport, timeout))


def run_schedule(schedule, buffer: np.ndarray, op: Any = ReduceOp.SUM, comm=None, bounds=None,
                 segment_bytes: int | None = None, *, timeout=None,
                 restore: bool | None = None, pipelining=None) -> np.ndarray:
    """Execute any ``schedule`` in place on this rank's 1-D working ``buffer``
    (``bounds``: this rank's chunk offsets; see :func:`ringccl.backends.mpi.executor.execute`)."""
    return frontend.run_schedule(_B, schedule, buffer, op, comm, bounds, segment_bytes, timeout,
                                 restore, pipelining)


def all_reduce(buffer: np.ndarray, op: Any = ReduceOp.SUM, comm=None, algorithm: str | None = None,
               accumulate_dtype: Any = None, *, segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> np.ndarray:
    """Reduce ``buffer`` across all ranks of ``comm``, in place (``MPI_Allreduce(MPI_IN_PLACE)``).

    Args:
        buffer: C-contiguous array, any shape, same shape and dtype on every rank.
        op: ``ReduceOp`` or a name ("sum", "max", ...); AVG needs floats, bitwise ops integers or
            bool.
        comm: mpi4py communicator (None = ``MPI.COMM_WORLD``).
        algorithm: a name from ``ringccl.algorithms("all_reduce")`` (None or "auto": over
            shared memory the measured choice, ``ringccl.costmodel.choice.choose``, else
            the collective's default, ``ringccl.algorithms.DEFAULTS``: ring).
        segment_bytes: pipelining segment size in bytes (None: the transport's measured policy,
            ``ringccl.backends.mpi.executor.PIPELINING``, decides: never split; 0: never split).
        transport: "auto" (shared memory when every rank is on this host, else MPI
            point-to-point: :func:`resolve_transport`), "shm" or "p2p"; the same on every
            rank. Every function takes it.
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
    # a signature seen before replays its compiled shared-memory call (shm.lane); the key
    # holds every argument, so no other call can hit it
    key = None
    if not params and accumulate_dtype is None and not check and type(buffer) is np.ndarray and \
            trace.state.recorder is None:
        key = lane.call(("all_reduce", id(comm), buffer.shape, buffer.dtype, op, algorithm,
                         segment_bytes, timeout, restore, check, transport), comm, buffer)
        if key is True:
            return buffer

    def general() -> None:
        g = _B.group(comm)
        check_array(buffer, "buffer")
        reduce_op = _B.check_op(op, buffer.dtype)
        acc = _B.accumulate(accumulate_dtype, buffer.dtype, "all_reduce")
        opts = _options(g, segment_bytes, timeout, restore, check, transport)
        frontend.in_place(_B, "all_reduce", buffer, reduce_op, g, algorithm, params, opts,
                          accumulate=acc)
    lane.first_call(key, comm, general, lambda: lane.finisher(_B, comm, op, buffer.dtype))
    return buffer


def reduce_scatter(output: np.ndarray, input: np.ndarray, op: Any = ReduceOp.SUM, comm=None,
                   algorithm: str | None = None, accumulate_dtype: Any = None, *,
                   segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> np.ndarray:
    """Reduce ``input`` across ranks and leave block ``rank`` in ``output``
    (``MPI_Reduce_scatter_block``; ``torch.distributed.reduce_scatter_tensor``).

    Args:
        output: ``input.size // world_size`` elements, same dtype as ``input``; C-contiguous.
        input: world_size · output.size elements, any layout; not modified. ``output`` may be
            the view ``input[rank * output.size:(rank + 1) * output.size]`` of a C-contiguous
            ``input`` (in place, NCCL's in-place form, as nccl-tests does): ``input`` then
            changes in that block only. Any other overlap of the two is refused
            (:mod:`ringccl.frontend.aliasing`).
        op, comm, algorithm, segment_bytes, accumulate_dtype, params: as :func:`all_reduce`
            (``ringccl.algorithms("reduce_scatter")``).

    Returns:
        ``output``.
    Raises:
        ArgumentError: sizes that do not match, dtype mismatch, bad op.
    """
    comm = _B.group(comm)
    check_array(output, "output")
    check_array(input, "input", writable=False, contiguous=False)
    _B.check_pair(output, input, "output", "input")
    reduce_op = _B.check_op(op, input.dtype)
    acc = _B.accumulate(accumulate_dtype, input.dtype, "reduce_scatter")
    opts = _options(comm, segment_bytes, timeout, restore, check, transport)
    frontend.reduce_scatter(_B, output, input, reduce_op, comm, algorithm, params, opts, acc,
                            "reduce_scatter")
    return output


def all_gather(output: np.ndarray, input: np.ndarray, comm=None, algorithm: str | None = None, *,
               segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> np.ndarray:
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
    comm = _B.group(comm)
    check_array(output, "output")
    check_array(input, "input", writable=False, contiguous=False)
    _B.check_pair(output, input, "output", "input")
    opts = _options(comm, segment_bytes, timeout, restore, check, transport)
    frontend.all_gather(_B, output, input, comm, algorithm, params, opts, "all_gather",
                        ("output", "input"))
    return output


def broadcast(buffer: np.ndarray, src: int = 0, comm=None, algorithm: str | None = None, *,
              segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> np.ndarray:
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
    comm = _B.group(comm)
    check_array(buffer, "buffer", contiguous=False)
    root = check_root(src, comm.Get_size(), "src")
    opts = _options(comm, segment_bytes, timeout, restore, check, transport)
    frontend.in_place(_B, "broadcast", buffer, ReduceOp.SUM, comm, algorithm,
                      rooted(params, root), opts)
    return buffer


def reduce(buffer: np.ndarray, dst: int = 0, op: Any = ReduceOp.SUM, comm=None,
           algorithm: str | None = None, accumulate_dtype: Any = None, *,
           segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> np.ndarray:
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
    comm = _B.group(comm)
    check_array(buffer, "buffer", contiguous=False)
    reduce_op = _B.check_op(op, buffer.dtype)
    acc = _B.accumulate(accumulate_dtype, buffer.dtype, "reduce")
    root = check_root(dst, comm.Get_size(), "dst")
    opts = _options(comm, segment_bytes, timeout, restore, check, transport)
    frontend.in_place(_B, "reduce", buffer, reduce_op, comm, algorithm, rooted(params, root),
                      opts, copy=comm.Get_rank() != root, accumulate=acc)
    return buffer


def scatter(buffer: np.ndarray, scatter_list: Any = None, src: int = 0, comm=None,
            algorithm: str | None = None, *, segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None,
            transport: str = "auto", **params) -> np.ndarray:
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
        algorithm: a name from ``ringccl.algorithms("scatter")`` (None or "auto": the
            transport's choice; direct on shared memory and point-to-point alike).
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
    comm = _B.group(comm)
    check_array(buffer, "buffer")
    opts = _options(comm, segment_bytes, timeout, restore, check, transport)
    frontend.scatter(_B, buffer, scatter_list, src, comm, algorithm, params, opts)
    return buffer


def gather(buffer: np.ndarray, gather_list: Any = None, dst: int = 0, comm=None,
           algorithm: str | None = None, *, segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params):
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
        algorithm: a name from ``ringccl.algorithms("gather")`` (None or "auto": the
            transport's choice; direct on shared memory and point-to-point alike).
        segment_bytes, params: as :func:`all_reduce` (the root is ``dst``, not ``root=``).

    Returns:
        ``gather_list`` on ``dst``, None on the other ranks (torch.distributed returns None).
    Raises:
        ArgumentError: a missing or malformed gather_list on dst, one given elsewhere, dst out
            of range; ArgumentTypeError: dtype. (Root-only errors leave the other ranks
            waiting, as in :func:`scatter`.)
    """
    comm = _B.group(comm)
    check_array(buffer, "buffer", writable=False, contiguous=False)
    opts = _options(comm, segment_bytes, timeout, restore, check, transport)
    is_root = frontend.gather(_B, buffer, gather_list, dst, comm, algorithm, params, opts)
    return gather_list if is_root else None


def all_to_all(output: np.ndarray, input: np.ndarray, output_split_sizes=None,
               input_split_sizes=None, comm=None, algorithm: str | None = None, *,
               segment_bytes: int | None = None, timeout=None, restore: bool | None = None,
        check: bool | None = None, transport: str = "auto", **params) -> np.ndarray:
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
    comm = _B.group(comm)
    check_array(output, "output", contiguous=False)
    check_array(input, "input", writable=False, contiguous=False)
    _B.check_pair(output, input, "output", "input")
    opts = _options(comm, segment_bytes, timeout, restore, check, transport)
    frontend.all_to_all(_B, output, input, output_split_sizes, input_split_sizes, comm,
                        algorithm, params, opts)
    return output
