"""Run under mpirun: ringccl.mpi over shared memory, every collective x every
registered algorithm.

For each case, on every rank:

* transport="shm" against MPI's own collective (Allreduce, Reduce_scatter_block, Allgather,
  Bcast, Reduce, Scatter, Gather, Alltoall through mpi4py) on small integers, exact in every
  dtype (so any reduction order gives the same bits);
* transport="shm" against transport="p2p" with the same algorithm on floats over three decades
  (the schedule fixes the reduction order, so the two transports must agree bit for bit);
* where every rank receives the result (all_reduce, all_gather, broadcast), every rank's bytes
  against rank 0's;
* transport="auto" resolves to "shm" on this one host, and to "p2p" on a communicator whose
  ranks report different RINGCCL_HOST_ID values.

Every rank prints ``rank R: OK (K checks)`` or its failures; the exit code is 1 on failure.
"""

import os
import sys

import numpy as np
from mpi4py import MPI

import ringccl
import ringccl.mpi as rm
from ringccl.algorithms import REGISTRY
from ringccl.errors import ArgumentError
from ringccl.backends.mpi import executor
from ringccl.costmodel import choice

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
failures: list[str] = []
checks = 0


def check(name, got, want):
    global checks
    checks += 1
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype or \
            got.reshape(-1).view(np.uint8).tobytes() != want.reshape(-1).view(np.uint8).tobytes():
        bad = (int(np.count_nonzero(got != want)) if got.shape == want.shape
               else f"shape {got.shape} != {want.shape}")
        failures.append(f"{name}: {bad} elements differ")


def same_everywhere(name, a):
    global checks
    checks += 1
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    everyone = np.empty((n, raw.size), dtype=np.uint8)
    comm.Allgather(raw, everyone)
    differ = [r for r in range(1, n) if not np.array_equal(everyone[r], everyone[0])]
    if differ:
        failures.append(f"{name}: ranks {differ} differ from rank 0")


def data(count, dtype, seed, exact):
    rng = np.random.default_rng(seed * 1000 + rank)
    if exact or np.dtype(dtype).kind != "f":
        return rng.integers(-4, 5, count).astype(dtype)
    return (rng.standard_normal(count) * 10.0 ** rng.integers(-1, 2, count)).astype(dtype)


def mpi_type(dtype):
    return {np.dtype("float32"): MPI.FLOAT, np.dtype("float64"): MPI.DOUBLE,
            np.dtype("int32"): MPI.INT32_T}[np.dtype(dtype)]


def run(collective, algorithm, x, count, transport, root, restore=None):
    """ringccl.mpi's result of ``collective`` on this rank's input ``x`` (None where it has
    none on this rank). ``restore``: None, the default (no timeout: False, so final receives
    land in the caller's array), or True (results copied out after the call's last wait)."""
    kw = dict(algorithm=algorithm, transport=transport, restore=restore)
    if collective == "all_reduce":
        out = x.copy()
        rm.all_reduce(out, **kw)
    elif collective == "reduce_scatter":
        out = np.empty(count, dtype=x.dtype)
        rm.reduce_scatter(out, x, **kw)
    elif collective == "all_gather":
        out = np.empty(n * count, dtype=x.dtype)
        rm.all_gather(out, x, **kw)
    elif collective == "broadcast":
        out = x.copy()
        rm.broadcast(out, src=root, **kw)
    elif collective == "reduce":
        out = x.copy()
        rm.reduce(out, dst=root, **kw)
        out = out if rank == root else None
    elif collective == "scatter":
        out = np.empty(count, dtype=x.dtype)
        rm.scatter(out, x if rank == root else None, src=root, **kw)
    elif collective == "gather":
        full = np.empty(n * count, dtype=x.dtype) if rank == root else None
        rm.gather(x, full, dst=root, **kw)
        out = full
    else:
        out = np.empty_like(x)
        rm.all_to_all(out, x, **kw)
    return out


def mpi_result(collective, x, count, root):
    """MPI's own result for the same call."""
    t = mpi_type(x.dtype)
    if collective == "all_reduce":
        out = x.copy()
        comm.Allreduce(MPI.IN_PLACE, [out, t], op=MPI.SUM)
    elif collective == "reduce_scatter":
        out = np.empty(count, dtype=x.dtype)
        comm.Reduce_scatter_block([x, t], [out, t], op=MPI.SUM)
    elif collective == "all_gather":
        out = np.empty(n * count, dtype=x.dtype)
        comm.Allgather([x, t], [out, t])
    elif collective == "broadcast":
        out = x.copy()
        comm.Bcast([out, t], root=root)
    elif collective == "reduce":
        out = np.empty_like(x) if rank == root else None
        comm.Reduce([x, t], [out, t] if rank == root else None, op=MPI.SUM, root=root)
    elif collective == "scatter":
        out = np.empty(count, dtype=x.dtype)
        comm.Scatter([x, t] if rank == root else None, [out, t], root=root)
    elif collective == "gather":
        out = np.empty(n * count, dtype=x.dtype) if rank == root else None
        comm.Gather([x, t], [out, t] if rank == root else None, root=root)
    else:
        out = np.empty_like(x)
        comm.Alltoall([x, t], [out, t])
    return out


def elements(collective, count):
    """This rank's input length for ``count`` (the per-rank block where there is one)."""
    if collective in ("reduce_scatter", "all_to_all") or (collective == "scatter"):
        return n * count
    return count


EVERYONE = ("all_reduce", "all_gather", "broadcast")

# -- the transport's choice ----------------------------------------------------------------------
check("auto on one host", np.array([rm.resolve_transport(comm, "auto") == "shm"]),
      np.array([n > 1]))
os.environ["RINGCCL_HOST_ID"] = f"host{rank % 2}"   # two "hosts" on this machine
split = comm.Dup()
check("auto across RINGCCL_HOST_ID hosts", np.array([rm.resolve_transport(split, "auto")]),
      np.array(["p2p" if n > 1 else "shm"]))
del os.environ["RINGCCL_HOST_ID"]
try:
    rm.all_reduce(np.zeros(1, np.float32), transport="tcp")
    failures.append("transport='tcp' was accepted")
except ArgumentError as exc:
    checks += 1
    if "transport='tcp'" not in str(exc):
        failures.append(f"transport='tcp' refused without naming it: {exc}")

# -- every collective x algorithm -----------------------------------------------------------------
seed = 0
for collective, algorithm in sorted(REGISTRY):
    for dtype in ("float32", "float64", "int32"):
        for count in (0, 1, max(n - 1, 1), n + 1, 1000, 40000):
            seed += 1
            root = seed % n
            name = f"{algorithm} {collective} {dtype} count={count}"
            try:
                x = data(elements(collective, count), dtype, seed, exact=True)
                got = run(collective, algorithm, x, count, "shm", root)
            except ArgumentError as exc:   # an algorithm for other world sizes only
                if "world_size" in str(exc):
                    break
                raise
            want = mpi_result(collective, x, count, root)
            if want is not None:
                check(f"{name} vs MPI", got, want)
            if dtype == "float32":   # restore=True (every rank: a collective call)
                kept = run(collective, algorithm, x, count, "shm", root, True)
                if want is not None:   # nothing landed early, same result
                    check(f"{name} restore=True vs MPI", kept, want)
            if collective in EVERYONE:
                same_everywhere(name, got)
            if dtype != "int32":
                y = data(elements(collective, count), dtype, seed, exact=False)
                a = run(collective, algorithm, y, count, "shm", root)
                b = run(collective, algorithm, y, count, "p2p", root)
                if a is not None:
                    check(f"{name} shm vs p2p (floats)", a, b)

# -- algorithm=None over shm: the measured choice, still MPI's result -----------------------------
for nbytes in (4 << 10, choice.TWO_SHOT_BYTES["mpi", "shm"][2], 1 << 20):
    x = data(nbytes // 4, "float32", nbytes, exact=True)
    got = x.copy()
    rm.all_reduce(got)
    check(f"all_reduce auto {nbytes} B", got, mpi_result("all_reduce", x, x.size, 0))

# -- zero copy: shm_empty arrays are reduced where they lie (the working area does not grow) --
state, _ = executor.shm_state(comm)
for algorithm in ("direct", "two_shot", "ring"):
    for count in (1, 1000, 300_000):
        for restore in (None, True):
            z = rm.shm_empty((count,), np.float32)
            x = data(count, "float32", count + 7, exact=True)
            z[:] = x
            before = state.work_slot
            rm.all_reduce(z, algorithm=algorithm, transport="shm", restore=restore)
            check(f"zero-copy {algorithm} all_reduce count={count} restore={restore}", z,
                  mpi_result("all_reduce", x, count, 0))
            checks += 1
            if state.work_slot != before:
                failures.append(f"zero-copy {algorithm} count={count}: the working area grew "
                                f"({before} -> {state.work_slot}): it was copied")
z = rm.shm_empty((4, 250), np.int32)
z[:] = data(1000, "int32", 3, exact=True).reshape(4, 250)
want = mpi_result("broadcast", z.reshape(-1).copy(), 1000, n - 1)
rm.broadcast(z.reshape(-1), src=n - 1, transport="shm")
check("zero-copy broadcast", z.reshape(-1), want)
try:
    rm.shm_empty((-1,))
    failures.append("shm_empty((-1,)) was accepted")
except ValueError:
    checks += 1
for bad in ("O", np.complex64):
    try:
        rm.shm_empty(4, bad)
        failures.append(f"shm_empty(dtype={bad!r}) was accepted")
    except TypeError:
        checks += 1

ringccl.clear_caches()   # drops the segments; the next call sets them up again
x = data(100, "float32", 1, exact=True)
got = x.copy()
rm.all_reduce(got, transport="shm")
check("all_reduce after clear_caches", got, mpi_result("all_reduce", x, 100, 0))
rm.release_buffers()
split.Free()

print(f"rank {rank}: " + ("OK" if not failures else "; ".join(failures[:10])) +
      f" ({checks} checks)", flush=True)
sys.exit(1 if failures else 0)
