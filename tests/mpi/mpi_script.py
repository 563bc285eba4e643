"""Run under mpirun: ringccl.mpi against numpy references and MPI's own collectives.

Every rank checks its own results and prints one line, ``rank R: OK`` or the failures; the exit
code is 1 if anything failed on this rank.
"""

import sys

import numpy as np
from mpi4py import MPI

import ringccl
import ringccl.mpi as rm
from ringccl.engine import Pipelining
from ringccl.errors import ArgumentError, ArgumentTypeError, BackendError
from ringccl.ops import ReduceOp, check_op_dtype, ufunc

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
failures = []


def check(name, got, want):
    if got.shape != want.shape or not np.array_equal(got, want):
        bad = int(np.count_nonzero(got != want)) if got.shape == want.shape else "shape"
        failures.append(f"{name}: {bad} elements differ")


def inputs(count, dtype, seed):
    """Every rank's input (rank r's is row r): random small integers, exact in every dtype."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, size=(n, count)).astype(bool)
    low = 0 if np.dtype(dtype).kind == "u" else -4
    return rng.integers(low, 5, size=(n, count)).astype(dtype)


def reference(x, op):
    out = ufunc(op).reduce(x, axis=0, dtype=x.dtype)
    return np.divide(out, n, dtype=x.dtype) if op is ReduceOp.AVG else out


DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64", "bool"]
COUNTS = [0, 1, max(n - 1, 1), n + 1, 1000, 30011]
SEGMENTS = [None, 0, 64, 4096]
seed = 0
for dtype in DTYPES:
    for op in ReduceOp:
        try:
            check_op_dtype(op, np.dtype(dtype))
        except ArgumentError:
            continue
        for count in COUNTS:
            seed += 1
            seg = SEGMENTS[seed % len(SEGMENTS)]
            x = inputs(count, dtype, seed)
            tag = f"{dtype} {op.value} count={count} seg={seg}"
            # all_reduce, in place
            buf = x[rank].copy()
            rm.all_reduce(buf, op, segment_bytes=seg)
            check(f"all_reduce {tag}", buf, reference(x, op))
            # reduce_scatter: out of place keeps the input; in place uses block rank
            m = count - count % n
            block = m // n
            inp = x[rank, :m].copy()
            out = np.empty(block, dtype=dtype)
            rm.reduce_scatter(out, inp, op, segment_bytes=seg)
            want = reference(x[:, :m], op)[rank * block:(rank + 1) * block]
            check(f"reduce_scatter {tag}", out, want)
            check(f"reduce_scatter keeps input {tag}", inp, x[rank, :m])
            rm.reduce_scatter(inp[rank * block:(rank + 1) * block], inp, op, segment_bytes=seg)
            check(f"reduce_scatter in place {tag}", inp[rank * block:(rank + 1) * block], want)
        # all_gather (no op), out of place and in place
        for count in COUNTS:
            seed += 1
            seg = SEGMENTS[seed % len(SEGMENTS)]
            x = inputs(count, dtype, seed)
            out = np.empty(n * count, dtype=dtype)
            rm.all_gather(out, x[rank], segment_bytes=seg)
            check(f"all_gather {dtype} count={count} seg={seg}", out, x.reshape(-1))
            out2 = np.zeros(n * count, dtype=dtype)
            out2[rank * count:(rank + 1) * count] = x[rank]
            rm.all_gather(out2, out2[rank * count:(rank + 1) * count], segment_bytes=seg)
            check(f"all_gather in place {dtype} count={count}", out2, x.reshape(-1))
        break  # all_gather does not depend on the op

# every registered algorithm of the three collectives runs unchanged
for algorithm in ringccl.algorithms("all_reduce"):
    for count in (7, 1000, 4 * n + 3):
        x = inputs(count, "int32", count + 5)
        buf = x[rank].copy()
        rm.all_reduce(buf, "sum", algorithm=algorithm)
        check(f"all_reduce {algorithm} count={count}", buf, reference(x, ReduceOp.SUM))
for algorithm in ringccl.algorithms("reduce_scatter"):
    for block in (1, 5, 333):
        x = inputs(n * block, "float64", block)
        out = np.empty(block)
        rm.reduce_scatter(out, x[rank].copy(), "max", algorithm=algorithm)
        check(f"reduce_scatter {algorithm} block={block}", out,
              reference(x, ReduceOp.MAX)[rank * block:(rank + 1) * block])
for algorithm in ringccl.algorithms("all_gather"):
    for block in (1, 5, 333):
        x = inputs(block, "int8", block + 1)
        out = np.empty(n * block, dtype=np.int8)
        rm.all_gather(out, x[rank].copy(), algorithm=algorithm)
        check(f"all_gather {algorithm} block={block}", out, x.reshape(-1))

# automatic pipelining by an explicit policy: chunks >= 1024 B in segments of 200 B (50 float32)
x = inputs(5003, "float32", 77)
buf = x[rank].copy()
rm.run_schedule(ringccl.schedule("all_reduce", "ring", n), buf,
                pipelining=Pipelining(1024, 200))
check("all_reduce with automatic segments", buf, reference(x, ReduceOp.SUM))

# the same results as MPI's own collectives, any shape
x = inputs(4 * 257, "float64", 99).reshape(n, 4, 257)
buf = x[rank].copy()
rm.all_reduce(buf, "max")
want = np.empty_like(buf)
comm.Allreduce(x[rank].copy(), want, op=MPI.MAX)
check("all_reduce vs MPI_Allreduce", buf, want)
if x[rank].size % n == 0:
    out = np.empty(x[rank].size // n)
    rm.reduce_scatter(out, x[rank].copy())
    want = np.empty_like(out)
    comm.Reduce_scatter_block(x[rank].reshape(-1).copy(), want, op=MPI.SUM)
    check("reduce_scatter vs MPI_Reduce_scatter_block", out, want)
out = np.empty(n * 257)
rm.all_gather(out, x[rank, 0].copy())
want = np.empty_like(out)
comm.Allgather(x[rank, 0].copy(), want)
check("all_gather vs MPI_Allgather", out, want)

# another communicator: even ranks only (ranks of the sub-communicator != world ranks)
sub = comm.Split(rank % 2, rank)
y = np.full(1001, float(rank + 1))
rm.all_reduce(y, comm=sub)
members = [r for r in range(n) if r % 2 == rank % 2]
check("all_reduce on a split communicator", y, np.full(1001, float(sum(m + 1 for m in members))))

# any schedule runs unchanged: a hand-made one-step "direct" all_gather
src = np.repeat(np.arange(n), n - 1)
dst = np.array([d for s in range(n) for d in range(n) if d != s], dtype=int)
direct = ringccl.Schedule.from_arrays("all_gather", "direct-test", n, n, step=np.zeros_like(src),
                                      src=src, dst=dst, src_chunk=src, phases=["all-gather"],
                                      num_steps=1)
ringccl.verify(direct)
z = np.zeros(n * 5, dtype=np.int32)
z[rank * 5:(rank + 1) * 5] = rank + 10
rm.run_schedule(direct, z)
check("run_schedule with a direct all_gather", z, np.repeat(np.arange(n) + 10, 5).astype(np.int32))

# float16 accumulated in float32: multiples of 1/8 below 256 make every float32 partial sum
# exact, so the result is the exact sum rounded once to float16
k = np.random.default_rng(16).integers(0, 2048, (n, 4 * n + 3))
h = (k / 8).astype(np.float16)
exact16 = k.sum(axis=0) / 8
acc = h[rank].copy()
rm.all_reduce(acc, accumulate_dtype="float32")
check("all_reduce float16 accumulate_dtype=float32", acc, exact16.astype(np.float16))
hs = h[:, :4 * n]
out16 = np.empty(4, dtype=np.float16)
rm.reduce_scatter(out16, hs[rank].copy(), accumulate_dtype=np.float32)
check("reduce_scatter float16 accumulate_dtype=float32", out16,
      (hs.astype(np.float64).sum(axis=0)[rank * 4:(rank + 1) * 4]).astype(np.float16))

# bad arguments raise before any data moves (every rank raises, so nobody waits)
for call, error, text in [
    (lambda: rm.all_reduce(np.ones((4, 4))[:, 0]), ArgumentError, "C-contiguous"),
    (lambda: rm.all_reduce([1.0, 2.0]), ArgumentTypeError, "numpy.ndarray"),
    (lambda: rm.all_reduce(np.ones(4, dtype=np.complex64)), ArgumentTypeError, "not supported"),
    (lambda: rm.all_reduce(np.ones(4, dtype=np.int32), "avg"), ArgumentError, "op=avg"),
    (lambda: rm.reduce_scatter(np.ones(3), np.ones(3 * n + 1)), ArgumentError, "input has"),
    (lambda: rm.all_gather(np.ones(n + 1), np.ones(1)), ArgumentError, "output has"),
    (lambda: rm.all_reduce(np.ones(4), algorithm="nope"), ArgumentError, "not available"),
    (lambda: rm.all_reduce(np.ones(4, np.int16), accumulate_dtype="float32"), ArgumentError,
     "accumulate_dtype='float32' needs a floating input, got int16"),
    (lambda: rm.all_reduce(np.ones(4), accumulate_dtype="float32"), ArgumentError,
     "accumulate_dtype=float32 is narrower than the input's float64"),
    (lambda: rm.run_schedule(ringccl.schedule("all_reduce", "ring", n + 1), np.ones(8)),
     BackendError, f"world_size={n + 1}"),
]:
    try:
        call()
        failures.append(f"no {error.__name__} for {text!r}")
    except error as exc:
        if text not in str(exc):
            failures.append(f"{error.__name__} without {text!r}: {exc}")

comm.Barrier()
rm.release_buffers()
print(f"rank {rank}: " + ("OK" if not failures else "FAILED\n  " + "\n  ".join(failures[:20])),
      flush=True)
sys.exit(1 if failures else 0)
