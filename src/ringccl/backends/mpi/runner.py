"""Measure ringccl collectives against MPI's own under ``mpirun`` (``ringccl bench --backend mpi``).

:class:`MpiBackend` implements :class:`ringccl.bench.Backend` on an mpi4py communicator; the
builtin is MPI's collective (``MPI_Allreduce``, ``MPI_Reduce_scatter_block``, ``MPI_Allgather``,
``MPI_Bcast``, ``MPI_Reduce``, ``MPI_Scatter``, ``MPI_Gather``, ``MPI_Alltoall``) with
``MPI_IN_PLACE`` for the in-place placement, and ringccl's side is the matching
:mod:`ringccl.mpi` function with the same aliasing. :func:`main` (``python -m
ringccl.backends.mpi.runner SPEC_JSON``) is what ``ringccl bench --backend mpi --nproc N`` runs
under mpirun: rank 0 writes one JSON line per finished row to stdout, prefixed with ``ROW``.

MPI has no AVG: the builtin AVG is MPI_SUM followed by a division, timed together. Open MPI 4.1
has no float16 reduction type; such rows raise BackendError naming the datatype.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from . import collectives as rm
from ...bench.inputs import Case
from ...bench.spec import BUILTIN, BenchSpec
from ...bench.sweep import Prepared, run_sweep
from ...collectives import get_collective
from ...engine import trace
from ...errors import BackendError
from ...ops import ReduceOp, parse_op, ufunc
from ...plugins import import_user_modules
from .launch import ROW_PREFIX

__all__ = ["MpiBackend", "sweep", "main", "ROW_PREFIX"]


_MPI_OPS = {ReduceOp.SUM: "SUM", ReduceOp.AVG: "SUM", ReduceOp.PRODUCT: "PROD",
            ReduceOp.MIN: "MIN", ReduceOp.MAX: "MAX", ReduceOp.BAND: "BAND", ReduceOp.BOR: "BOR",
            ReduceOp.BXOR: "BXOR"}
# MPI reduces C_BOOL with logical ops only (MPI 4.0, section 6.9.2)
_MPI_BOOL_OPS = {ReduceOp.SUM: "LOR", ReduceOp.MAX: "LOR", ReduceOp.BOR: "LOR",
                 ReduceOp.PRODUCT: "LAND", ReduceOp.MIN: "LAND", ReduceOp.BAND: "LAND",
                 ReduceOp.BXOR: "LXOR"}


class MpiBackend:
    """:class:`ringccl.bench.Backend` on an mpi4py communicator (default ``MPI.COMM_WORLD``)."""

    name = "mpi"

    def __init__(self, comm=None, tracer: trace.LastCalls | None = None):
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.tracer = tracer   # ``--trace``: the last iterations of ringccl's rows are traced
        self.rank = self.comm.Get_rank()
        self.world_size = self.comm.Get_size()
        #: what ringccl's rows run on (transport="auto": shm on one host; RINGCCL_TRANSPORT
        #: forces one); written into every row of ringccl's
        self.transport = rm.resolve_transport(self.comm, "auto")

    def barrier(self) -> None:
        self.comm.Barrier()

    def max_over_ranks(self, values: list[float]) -> list[float]:
        t = np.array(values, dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, t, op=MPI.MAX)
        return t.tolist()

    def sum_over_ranks(self, value: int) -> int:
        return int(self.comm.allreduce(int(value), op=MPI.SUM))

    def prepare(self, collective: str, algorithm: str, placement: str, case: Case,
                spec: BenchSpec, segment_bytes: int | None) -> Prepared:
        dtype = np.dtype(spec.dtype)
        op = parse_op(spec.op)
        inp = (np.zeros(case.m, dtype=dtype) if case.input is None
               else np.ascontiguousarray(case.input).copy())
        if algorithm == BUILTIN:
            if collective not in _BUILTIN:
                raise BackendError(f"no MPI builtin for {collective} in ringccl bench")
            mpi_type = _mpi_type(dtype)
            mpi_op = getattr(MPI, (_MPI_BOOL_OPS if dtype.kind == "b" else _MPI_OPS)[op])
            run, reset, result = _BUILTIN[collective](self, inp, case, placement, mpi_type,
                                                      mpi_op, spec.root)
            if op is ReduceOp.AVG:
                call, n = run, self.world_size
                run = lambda: (call(), np.divide(result(), n, out=result()))  # noqa: E731
        else:
            if collective not in _RINGCCL:
                raise BackendError(f"ringccl.mpi has no {collective} yet")
            kw = {"comm": self.comm, "algorithm": algorithm, "segment_bytes": segment_bytes,
                  **spec.params}
            if spec.accumulate_dtype is not None:
                kw["accumulate_dtype"] = spec.accumulate_dtype
            if get_collective(collective).reduces:
                kw["op"] = op
            run, reset, result = _RINGCCL[collective](rm, kw, self, inp, case, placement,
                                                      spec.root)
            if self.tracer is not None:
                # how often run_sweep calls it: the check, the warm-up, the timed iterations
                calls = int(bool(spec.check)) + spec.warmup + spec.iters
                seg = "" if segment_bytes is None else f", segment_bytes={segment_bytes}"
                run = self.tracer.wrap(run, calls, f"{algorithm} {collective} {case.m} × "
                                       f"{spec.dtype} {placement}{seg}")
        return Prepared(run, reset, result)

    def local_reduce(self, count: int, spec: BenchSpec) -> Prepared:
        """The elementwise reduction of two ``count``-element arrays (what a ring step does)."""
        dtype = np.dtype(spec.dtype)
        a, b = np.ones(count, dtype=dtype), np.ones(count, dtype=dtype)
        combine = ufunc(parse_op(spec.op))
        return Prepared(lambda: combine(a, b, out=a), lambda: None, lambda: None)


def _mpi_type(dtype: np.dtype):
    """The predefined MPI datatype of ``dtype`` (reductions need a predefined one)."""
    try:
        t = MPI.Datatype.fromcode(dtype.char)
        if t == MPI.DATATYPE_NULL or t.Get_size() != dtype.itemsize:
            raise ValueError("no such predefined datatype")
        return t
    except (MPI.Exception, ValueError, KeyError) as exc:
        raise BackendError(f"this MPI library has no predefined datatype for {dtype.name} "
                           f"({exc}); use another --dtype with --backend mpi") from None


def _nothing() -> None:
    return None


# -- MPI's own collectives: (backend, input, case, placement, datatype, op, root) -> callables -----

def _allreduce(be, inp, case, placement, t, op, root):
    buf = np.empty_like(inp)
    if placement == "in-place":
        return (lambda: be.comm.Allreduce(MPI.IN_PLACE, [buf, t], op),
                lambda: np.copyto(buf, inp), lambda: buf)
    return lambda: be.comm.Allreduce([inp, t], [buf, t], op), _nothing, lambda: buf


def _reduce_scatter_block(be, inp, case, placement, t, op, root):
    if placement == "in-place":
        # MPI_IN_PLACE: the input is the receive buffer; the result lands in its first block
        x = np.empty_like(inp)
        return (lambda: be.comm.Reduce_scatter_block(MPI.IN_PLACE, [x, t], op),
                lambda: np.copyto(x, inp), lambda: x[:case.block])
    out = np.empty(case.block, dtype=inp.dtype)
    return (lambda: be.comm.Reduce_scatter_block([inp, t], [out, t], op), _nothing,
            lambda: out)


def _allgather(be, inp, case, placement, t, op, root):
    out = np.empty(case.m, dtype=inp.dtype)
    if placement == "in-place":
        lo = be.rank * case.block
        return (lambda: be.comm.Allgather(MPI.IN_PLACE, [out, t]),
                lambda: np.copyto(out[lo:lo + case.block], inp), lambda: out)
    return lambda: be.comm.Allgather([inp, t], [out, t]), _nothing, lambda: out


def _bcast(be, inp, case, placement, t, op, root):
    buf = np.empty_like(inp)
    if placement == "in-place":
        return (lambda: be.comm.Bcast([buf, t], root), lambda: np.copyto(buf, inp),
                lambda: buf)
    return (lambda: (np.copyto(buf, inp), be.comm.Bcast([buf, t], root)), _nothing,
            lambda: buf)


def _reduce(be, inp, case, placement, t, op, root):
    out = np.empty_like(inp)
    is_root = be.rank == root
    if placement == "in-place":
        send = MPI.IN_PLACE if is_root else [out, t]
        return (lambda: be.comm.Reduce(send, [out, t], op, root), lambda: np.copyto(out, inp),
                (lambda: out) if is_root else _nothing)
    return (lambda: be.comm.Reduce([inp, t], [out, t], op, root), _nothing,
            (lambda: out) if is_root else _nothing)


def _scatter(be, inp, case, placement, t, op, root):
    out = np.empty(case.block, dtype=inp.dtype)
    is_root = be.rank == root
    if placement == "in-place" and is_root:
        mine = inp[root * case.block:(root + 1) * case.block]
        return lambda: be.comm.Scatter([inp, t], MPI.IN_PLACE, root), _nothing, lambda: mine
    return lambda: be.comm.Scatter([inp, t], [out, t], root), _nothing, lambda: out


def _gather(be, inp, case, placement, t, op, root):
    out = np.empty(case.m, dtype=inp.dtype)
    is_root = be.rank == root
    if placement == "in-place" and is_root:
        lo = root * case.block
        return (lambda: be.comm.Gather(MPI.IN_PLACE, [out, t], root),
                lambda: np.copyto(out[lo:lo + case.block], inp), lambda: out)
    return (lambda: be.comm.Gather([inp, t], [out, t], root), _nothing,
            (lambda: out) if is_root else _nothing)


def _alltoall(be, inp, case, placement, t, op, root):
    out = np.empty_like(inp)
    if placement == "in-place":
        return (lambda: be.comm.Alltoall(MPI.IN_PLACE, [out, t]), lambda: np.copyto(out, inp),
                lambda: out)
    return lambda: be.comm.Alltoall([inp, t], [out, t]), _nothing, lambda: out


_BUILTIN = {"all_reduce": _allreduce, "reduce_scatter": _reduce_scatter_block,
            "all_gather": _allgather, "broadcast": _bcast, "reduce": _reduce,
            "scatter": _scatter, "gather": _gather, "all_to_all": _alltoall}


# -- ringccl.mpi: (module, kwargs, backend, input, case, placement, root) -> callables -------------
#    placements as the MPI builtins above: in-place aliases input and output as MPI_IN_PLACE does

def _rc_all_reduce(rm, kw, be, inp, case, placement, root):
    buf = np.empty_like(inp)
    if placement == "in-place":
        return lambda: rm.all_reduce(buf, **kw), lambda: np.copyto(buf, inp), lambda: buf
    return lambda: (np.copyto(buf, inp), rm.all_reduce(buf, **kw)), _nothing, lambda: buf


def _rc_reduce_scatter(rm, kw, be, inp, case, placement, root):
    if placement == "in-place":
        x = np.empty_like(inp)
        lo = be.rank * case.block
        out = x[lo:lo + case.block]
        return lambda: rm.reduce_scatter(out, x, **kw), lambda: np.copyto(x, inp), lambda: out
    out = np.empty(case.block, dtype=inp.dtype)
    return lambda: rm.reduce_scatter(out, inp, **kw), _nothing, lambda: out


def _rc_all_gather(rm, kw, be, inp, case, placement, root):
    out = np.empty(case.m, dtype=inp.dtype)
    if placement == "in-place":
        lo = be.rank * case.block
        x = out[lo:lo + case.block]
        return lambda: rm.all_gather(out, x, **kw), lambda: np.copyto(x, inp), lambda: out
    return lambda: rm.all_gather(out, inp, **kw), _nothing, lambda: out


def _rc_broadcast(rm, kw, be, inp, case, placement, root):
    buf = np.empty_like(inp)
    if placement == "in-place":
        return (lambda: rm.broadcast(buf, root, **kw), lambda: np.copyto(buf, inp),
                lambda: buf)
    return (lambda: (np.copyto(buf, inp), rm.broadcast(buf, root, **kw)), _nothing,
            lambda: buf)


def _rc_reduce(rm, kw, be, inp, case, placement, root):
    buf = np.empty_like(inp)
    result = (lambda: buf) if be.rank == root else _nothing
    if placement == "in-place":
        return lambda: rm.reduce(buf, root, **kw), lambda: np.copyto(buf, inp), result
    return lambda: (np.copyto(buf, inp), rm.reduce(buf, root, **kw)), _nothing, result


def _rc_scatter(rm, kw, be, inp, case, placement, root):
    is_root = be.rank == root
    send = inp if is_root else None
    if placement == "in-place" and is_root:
        out = inp[root * case.block:(root + 1) * case.block]
    else:
        out = np.empty(case.block, dtype=inp.dtype)
    return lambda: rm.scatter(out, send, root, **kw), _nothing, lambda: out


def _rc_gather(rm, kw, be, inp, case, placement, root):
    is_root = be.rank == root
    out = np.empty(case.m, dtype=inp.dtype) if is_root else None
    result = (lambda: out) if is_root else _nothing
    if placement == "in-place" and is_root:
        x = out[root * case.block:(root + 1) * case.block]
        return lambda: rm.gather(x, out, root, **kw), lambda: np.copyto(x, inp), result
    return lambda: rm.gather(inp, out, root, **kw), _nothing, result


def _rc_all_to_all(rm, kw, be, inp, case, placement, root):
    out = np.empty_like(inp)
    if placement == "in-place":
        return lambda: rm.all_to_all(out, out, **kw), lambda: np.copyto(out, inp), lambda: out
    return lambda: rm.all_to_all(out, inp, **kw), _nothing, lambda: out


_RINGCCL = {"all_reduce": _rc_all_reduce, "reduce_scatter": _rc_reduce_scatter,
            "all_gather": _rc_all_gather, "broadcast": _rc_broadcast, "reduce": _rc_reduce,
            "scatter": _rc_scatter, "gather": _rc_gather, "all_to_all": _rc_all_to_all}


def sweep(spec: BenchSpec, comm=None, emit=None) -> list[dict]:
    """Run ``ringccl bench``'s sweep on ``comm`` (every rank calls it; all return the rows).

    With ``RINGCCL_TRACE_DIR`` set (``ringccl bench --trace``), the last iterations of each
    ringccl row are traced and every rank writes its events there
    (:class:`ringccl.engine.trace.LastCalls`)."""
    tracer = trace.LastCalls.from_environment()
    backend = MpiBackend(comm, tracer)
    if tracer is not None:
        backend.barrier()   # every rank's origin: the same instant, to the barrier's skew
        origin = trace.now()
    rows = run_sweep(backend, spec, emit)
    if tracer is not None:
        tracer.write(backend.rank, origin)
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m ringccl.backends.mpi.runner SPEC_JSON`` under mpirun: rank 0 streams
    ``ROW`` lines."""
    argv = sys.argv[1:] if argv is None else argv
    import_user_modules()  # the algorithms ``--import`` / RINGCCL_IMPORT registered
    spec = BenchSpec.from_dict(json.loads(argv[0]))
    rank = MPI.COMM_WORLD.Get_rank()

    def emit(row: dict) -> None:
        if rank == 0:
            sys.stdout.write(ROW_PREFIX + json.dumps(row) + "\n")
            sys.stdout.flush()

    try:
        sweep(spec, emit=emit)
    except Exception as exc:  # every rank must leave, or mpirun waits for the others forever
        print(f"rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        MPI.COMM_WORLD.Abort(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
