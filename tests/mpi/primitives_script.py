"""Run under mpirun: ringccl.mpi's broadcast, reduce, scatter, gather and all_to_all, every
registered algorithm, against MPI's own collectives (Bcast, Reduce, Scatter, Gather, Alltoall,
Alltoallv, through mpi4py) and numpy references.

One process group loops over every case (the CI cost is one mpirun per world size). Every rank
checks its own results and prints one line, ``rank R: OK (K checks)`` or the failures; the exit
code is 1 if anything failed on this rank.
"""

import sys

import numpy as np
from mpi4py import MPI

import ringccl
import ringccl.mpi as rm
from ringccl.collectives import split_safe
from ringccl.errors import ArgumentError, ArgumentTypeError, BackendError
from ringccl.backends.mpi.runner import _MPI_BOOL_OPS, _MPI_OPS, _mpi_type
from ringccl.ops import ReduceOp, check_op_dtype, ufunc

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
failures: list[str] = []
checks = 0


def check(name, got, want):
    global checks
    checks += 1
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
        bad = (int(np.count_nonzero(got != want)) if got.shape == want.shape
               else f"shape {got.shape} != {want.shape}")
        failures.append(f"{name}: {bad} elements differ")


def inputs(shape, dtype, seed):
    """Every rank's input (rank r's is [r]): random small integers, exact in every dtype."""
    rng = np.random.default_rng(seed)
    shape = (n,) + tuple(np.atleast_1d(shape))
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    low = 0 if np.dtype(dtype).kind == "u" else -4
    return rng.integers(low, 5, size=shape).astype(dtype)


def reference(x, op):
    out = ufunc(op).reduce(x, axis=0, dtype=x.dtype)
    return np.divide(out, n, dtype=x.dtype) if op is ReduceOp.AVG else out


def raw(a):
    """``a`` as MPI bytes: MPI's data movement compared for every dtype, float16 and bool too."""
    return [a.reshape(-1).view(np.uint8), MPI.BYTE]


def mpi_reduce(x, op, root):
    """MPI_Reduce of x (None where MPI has no predefined datatype for the dtype)."""
    try:
        t = _mpi_type(x.dtype)
    except BackendError:
        return None
    mpi_op = getattr(MPI, (_MPI_BOOL_OPS if x.dtype.kind == "b" else _MPI_OPS)[op])
    out = np.empty_like(x)
    comm.Reduce([np.ascontiguousarray(x), t], [out, t], mpi_op, root)
    if op is ReduceOp.AVG and rank == root:
        out = np.divide(out, n, dtype=x.dtype)
    return out


DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]
COUNTS = [0, 1, max(n - 1, 1), n + 1, 1000, 30011]   # 0, 1, < N, not divisible by N, larger
BLOCKS = [0, 1, max(n - 1, 1), n + 1, 333]            # per-rank blocks of scatter/gather/a2a
SEGMENTS = [None, 0, 64, 4096]
OPS = [op for op in ReduceOp]
case = 0


def cycle(seq):
    return seq[case % len(seq)]


# -- broadcast: every algorithm, count, root; dtypes and segment sizes cycled ---------------------
for algorithm in ringccl.algorithms("broadcast"):
    for count in COUNTS:
        case += 1
        dtype, seg, src = cycle(DTYPES), cycle(SEGMENTS), case % n
        x = inputs(count, dtype, case)
        buf = x[rank].copy()
        rm.broadcast(buf, src=src, algorithm=algorithm, segment_bytes=seg)
        want = x[rank].copy()
        comm.Bcast(raw(want), root=src)
        tag = f"broadcast {algorithm} {dtype} count={count} src={src} seg={seg}"
        check(tag, buf, x[src])
        check(tag + " vs MPI_Bcast", buf, want)

# -- reduce: every algorithm, count, root; dtypes, ops, segments cycled ---------------------------
for algorithm in ringccl.algorithms("reduce"):
    for count in COUNTS:
        for dtype in DTYPES[::2] if count in (1, n + 1) else [DTYPES[case % len(DTYPES)]]:
            case += 1
            valid = []
            for op in OPS:
                try:
                    check_op_dtype(op, np.dtype(dtype))
                    valid.append(op)
                except ArgumentError:
                    pass
            op, seg, dst = cycle(valid), cycle(SEGMENTS), (case + 1) % n
            x = inputs(count, dtype, case)
            buf = x[rank].copy()
            rm.reduce(buf, dst=dst, op=op, algorithm=algorithm, segment_bytes=seg)
            tag = f"reduce {algorithm} {dtype} {op.value} count={count} dst={dst} seg={seg}"
            want = mpi_reduce(x[rank], op, dst)
            if rank == dst:
                check(tag, buf, reference(x, op))
                if want is not None:
                    check(tag + " vs MPI_Reduce", buf, want)
            else:
                check(tag + " leaves non-root buffers unchanged", buf, x[rank])

# every op and dtype of reduce once (the default algorithm)
for dtype in DTYPES:
    for op in OPS:
        try:
            check_op_dtype(op, np.dtype(dtype))
        except ArgumentError:
            continue
        case += 1
        x = inputs(n + 2, dtype, case)
        buf = x[rank].copy()
        rm.reduce(buf, n - 1, op)
        if rank == n - 1:
            check(f"reduce {dtype} {op.value}", buf, reference(x, op))

# -- scatter: list and single-array forms, in place at the root ----------------------------------
for algorithm in ringccl.algorithms("scatter"):
    for block in BLOCKS:
        case += 1
        dtype, seg, src = cycle(DTYPES), cycle(SEGMENTS), case % n
        root_data = inputs(n * block, dtype, case)[src]  # the same on every rank
        tag = f"scatter {algorithm} {dtype} block={block} src={src} seg={seg}"
        want = np.empty(block, dtype=dtype)
        comm.Scatter(raw(root_data) if rank == src else None, raw(want), root=src)
        check(tag + " (MPI_Scatter reference)", want, root_data[rank * block:(rank + 1) * block])
        out = np.full(block, 7, dtype=dtype)
        pieces = [p.copy() for p in np.split(root_data, n)] if rank == src else None
        rm.scatter(out, pieces, src=src, algorithm=algorithm, segment_bytes=seg)
        check(tag + " list vs MPI_Scatter", out, want)
        # one send buffer of N blocks (MPI's form), 2-D output
        out2 = np.zeros((1, block), dtype=dtype)
        rm.scatter(out2, root_data.copy() if rank == src else None, src, algorithm=algorithm)
        check(tag + " one array", out2[0], want)
        # in place: the root's output is its own block of the send buffer
        send = root_data.copy()
        mine = send[rank * block:(rank + 1) * block] if rank == src else np.empty(block, dtype)
        rm.scatter(mine, send if rank == src else None, src, algorithm=algorithm)
        check(tag + " in place", mine, want)
        if rank == src:
            check(tag + " keeps the send buffer", send, root_data)

# -- gather: list and single-array forms, in place at the root, non-contiguous input -------------
for algorithm in ringccl.algorithms("gather"):
    for block in BLOCKS:
        case += 1
        dtype, seg, dst = cycle(DTYPES), cycle(SEGMENTS), (case + 1) % n
        x = inputs(block, dtype, case)
        tag = f"gather {algorithm} {dtype} block={block} dst={dst} seg={seg}"
        want = np.empty(n * block, dtype=dtype) if rank == dst else None
        comm.Gather(raw(x[rank]), raw(want) if rank == dst else None, root=dst)
        if rank == dst:
            check(tag + " (MPI_Gather reference)", want, x.reshape(-1))
        glist = [np.full(block, 3, dtype=dtype) for _ in range(n)] if rank == dst else None
        mine = x[rank].copy()
        result = rm.gather(mine, glist, dst=dst, algorithm=algorithm, segment_bytes=seg)
        check(tag + " keeps the input", mine, x[rank])
        if rank == dst:
            check(tag + " list vs MPI_Gather", np.concatenate(glist), want)
            check(tag + " returns gather_list", np.array(result is glist), np.array(True))
        else:
            check(tag + " returns None", np.array(result is None), np.array(True))
        # one receive buffer (N, block), in place at the root
        recv = np.zeros((n, block), dtype=dtype)
        src_buf = recv[rank] if rank == dst else x[rank].copy()
        if rank == dst:
            src_buf[...] = x[rank]
        rm.gather(src_buf, recv if rank == dst else None, dst, algorithm=algorithm)
        if rank == dst:
            check(tag + " one array, in place", recv.reshape(-1), want)
        # a non-contiguous input and a non-contiguous receive buffer
        wide = np.zeros((block, 2), dtype=dtype)
        wide[:, 0] = x[rank]
        strided = np.zeros((2 * n, block), dtype=dtype)[::2] if rank == dst else None
        rm.gather(wide[:, 0], strided, dst, algorithm=algorithm)
        if rank == dst:
            check(tag + " strided", strided.reshape(-1), want)

# -- all_to_all: equal blocks, uneven splits (MPI_Alltoallv), rows, in place ----------------------
rng = np.random.default_rng(4242)  # the same on every rank: the split matrix is global
for algorithm in ringccl.algorithms("all_to_all"):
    schedule = ringccl.schedule("all_to_all", algorithm, n)
    uneven_ok = split_safe(schedule)
    for block in BLOCKS:
        case += 1
        dtype, seg = cycle(DTYPES), cycle(SEGMENTS)
        x = inputs(n * block, dtype, case)
        tag = f"all_to_all {algorithm} {dtype} block={block} seg={seg}"
        want = np.empty(n * block, dtype=dtype)
        comm.Alltoall(raw(x[rank]), raw(want))
        check(tag + " (MPI_Alltoall reference)", want,
              x[:, rank * block:(rank + 1) * block].reshape(-1))
        inp = x[rank].copy()
        out = np.zeros(n * block, dtype=dtype)
        rm.all_to_all(out, inp, algorithm=algorithm, segment_bytes=seg)
        check(tag + " vs MPI_Alltoall", out, want)
        check(tag + " keeps the input", inp, x[rank])
        rm.all_to_all(inp, inp, algorithm=algorithm)  # in place
        check(tag + " in place", inp, want)
    # uneven splits along dim 0 of (rows, 3) arrays, zeros included
    for trial in range(3):
        case += 1
        dtype = cycle(DTYPES)
        splits = rng.integers(0, 4, size=(n, n))
        splits[trial % n, (trial + 1) % n] = 0
        ins, outs = splits[rank], splits[:, rank]
        x = inputs((int(splits.sum(axis=1).max()), 3), dtype, case)[rank][:ins.sum()].copy()
        out = np.zeros((outs.sum(), 3), dtype=dtype)
        tag = f"all_to_all {algorithm} uneven {dtype} splits={splits.tolist()}"
        if not uneven_ok and (splits != splits[0, 0]).any():
            try:
                rm.all_to_all(out, x, outs.tolist(), ins.tolist(), algorithm=algorithm)
                failures.append(f"{tag}: no ArgumentError for uneven splits")
            except ArgumentError as exc:
                check(tag + " refused on every rank", np.array("equal blocks" in str(exc)),
                      np.array(True))
            continue
        want = np.zeros_like(out)
        row = 3 * x.dtype.itemsize
        sdispl = np.concatenate([[0], np.cumsum(ins)[:-1]]) * row
        rdispl = np.concatenate([[0], np.cumsum(outs)[:-1]]) * row
        comm.Alltoallv([x.view(np.uint8).reshape(-1), (ins * row, sdispl), MPI.BYTE],
                       [want.view(np.uint8).reshape(-1), (outs * row, rdispl), MPI.BYTE])
        rm.all_to_all(out, x, output_split_sizes=outs.tolist(), input_split_sizes=ins,
                      algorithm=algorithm, segment_bytes=cycle(SEGMENTS))
        check(tag + " vs MPI_Alltoallv", out, want)
    # a non-contiguous output
    x = inputs(n * 5, "int32", 99)
    strided = np.zeros((n * 5, 2), dtype=np.int32)[:, 1]
    rm.all_to_all(strided, x[rank], algorithm=algorithm)
    check(f"all_to_all {algorithm} strided output", strided, x[:, rank * 5:(rank + 1) * 5].ravel())

# -- inputs of any layout for the existing three (read through a copy) ---------------------------
x = inputs((n * 6, 2), "float32", 11)
out = np.empty(6, dtype=np.float32)
rm.reduce_scatter(out, x[rank][:, 1], "max")
check("reduce_scatter strided input", out,
      reference(x[:, :, 1], ReduceOp.MAX)[rank * 6:(rank + 1) * 6])
out = np.empty(n * 6, dtype=np.float32)
readonly = x[rank, :6, 0]
readonly.flags.writeable = False
rm.all_gather(out, readonly)
check("all_gather strided read-only input", out, x[:, :6, 0].reshape(-1))

# -- algorithm parameters and another communicator ------------------------------------------------
x = inputs(1001, "float64", 7)
buf = x[rank].copy()
rm.broadcast(buf, n - 1, algorithm="tree", segments=4)
check("broadcast tree segments=4", buf, x[n - 1])
buf = x[rank].copy()
rm.all_reduce(buf, algorithm="tree", segments=3)
check("all_reduce tree segments=3", buf, reference(x, ReduceOp.SUM))
sub = comm.Split(rank % 2, rank)
members = [r for r in range(n) if r % 2 == rank % 2]
y = np.full(10, float(rank))
rm.broadcast(y, src=sub.Get_size() - 1, comm=sub)   # src is a rank of the communicator
check("broadcast on a split communicator", y, np.full(10, float(members[-1])))
g = np.zeros(sub.Get_size()) if sub.Get_rank() == 0 else None
rm.gather(np.array([float(rank)]), g, comm=sub)
if sub.Get_rank() == 0:
    check("gather on a split communicator", g, np.array(members, dtype=float))
sub.Free()

# -- bad arguments raise on every rank before any data moves --------------------------------------
bad = np.ones(4, dtype=np.complex64)
UNEVEN = np.ones((n, n), dtype=np.int64)
UNEVEN[0] = [n] + [0] * (n - 1)
for call, error, text in [
    (lambda: rm.broadcast(np.ones(4), src=n), ArgumentError, f"src={n} is out of range"),
    (lambda: rm.broadcast(np.ones(4), src="0"), ArgumentTypeError, "must be an integer rank"),
    (lambda: rm.broadcast([1.0], 0), ArgumentTypeError, "buffer must be a numpy.ndarray"),
    (lambda: rm.broadcast(bad), ArgumentTypeError, "buffer.dtype=complex64 is not supported"),
    (lambda: rm.broadcast(np.ones(4), root=0), ArgumentError, "give the root as src/dst"),
    (lambda: rm.broadcast(np.ones(4), segment_bytes=-1), ArgumentError, "segment_bytes=-1"),
    (lambda: rm.broadcast(np.ones(4), comm="world"), ArgumentTypeError, "comm must be"),
    (lambda: rm.broadcast(np.ones(4), algorithm="nope"), ArgumentError, "not available"),
    (lambda: rm.broadcast(np.ones(4), segments=0), ArgumentError, "segments"),
    (lambda: rm.reduce(np.ones(4, dtype=np.int32), op="avg"), ArgumentError, "op=avg"),
    (lambda: rm.reduce(np.ones(4), dst=-1), ArgumentError, "dst=-1 is out of range"),
    (lambda: rm.reduce(np.ones(4), op="band"), ArgumentError, "op=band"),
    (lambda: rm.scatter(np.ones(2), algorithm="ring"), ArgumentError,
     "algorithm='ring' is not available for scatter"),
    (lambda: rm.scatter(np.ones(4)[::2], None), ArgumentError,
     "buffer (shape (2,), strides (16,)) must be C-contiguous"),
    # every rank raises: the root for the list, the others because one was given at all
    (lambda: rm.scatter(np.ones(2), [np.ones(2)] * (n + 1)), ArgumentError,
     "scatter_list must be"),
    (lambda: rm.gather(np.ones(2), [np.ones(3)] * n), ArgumentError, "gather_list"),
    (lambda: rm.all_to_all(np.ones(3 * n), np.ones(3 * n), input_split_sizes=[1] * n),
     ArgumentError, f"input_split_sizes sums to {n}, but input has {3 * n} rows"),
    (lambda: rm.all_to_all(np.ones(n), np.ones(n, dtype=np.float32)), ArgumentTypeError,
     "output.dtype=float64 differs from input.dtype=float32"),
    (lambda: rm.all_to_all(np.ones((n, 2)), np.ones((n, 3))), ArgumentError,
     "differ beyond dim 0"),
    (lambda: rm.all_to_all(np.ones(n), np.ones(n), output_split_sizes=[-1] + [1] * n),
     ArgumentError, "output_split_sizes="),
] + ([] if n == 1 else [
    (lambda: rm.all_to_all(np.ones(n + 1), np.ones(n + 1)), ArgumentError,
     f"input has {n + 1} rows (dim 0), not divisible by world_size={n}"),
]) + ([] if split_safe(ringccl.schedule("all_to_all", "bruck", n)) else [
    # (bruck parks blocks in other slots from N = 4 on) rank 0 sends everything to itself, the
    # others one row to every rank: every rank refuses
    (lambda: rm.all_to_all(np.ones(UNEVEN[:, rank].sum()), np.ones(n), UNEVEN[:, rank],
                           UNEVEN[rank], algorithm="bruck"), ArgumentError, "equal blocks"),
]):
    try:
        call()
        failures.append(f"no {error.__name__} for {text!r}")
    except error as exc:
        if text not in str(exc):
            failures.append(f"{error.__name__} without {text!r}: {exc}")

# the errors left nothing behind: the next collectives match
x = inputs(17, "int16", 5)
buf = x[rank].copy()
rm.broadcast(buf, 0)
check("broadcast after the errors", buf, x[0])
out = np.empty(n * 2, dtype=np.int16)
rm.all_to_all(out, x[rank, :2 * n].copy(), algorithm="bruck")
check("all_to_all after the errors", out, x[:, 2 * rank:2 * rank + 2].reshape(-1))

comm.Barrier()
rm.release_buffers()
print(f"rank {rank}: " + (f"OK ({checks} checks)" if not failures
                          else "FAILED\n  " + "\n  ".join(failures[:20])), flush=True)
sys.exit(1 if failures else 0)
