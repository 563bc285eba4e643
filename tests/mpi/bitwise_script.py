"""Run under mpirun: one result on every rank through ringccl.mpi.

For every collective whose result every rank receives (all_reduce, all_gather, broadcast), every
registered algorithm, every dtype and a grid of counts, each rank's result bytes are gathered
with MPI's own Allgather (no arithmetic) and compared with rank 0's. Every rank prints one line,
``rank R: OK`` or the failures; the exit code is 1 if anything failed.
"""

import sys

import numpy as np
from mpi4py import MPI

import ringccl.mpi as rm
from ringccl.algorithms import REGISTRY

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
EVERYONE = ("all_reduce", "all_gather", "broadcast")
DTYPES = ("float16", "float32", "float64", "int32")


def data(count, dtype, seed):
    """This rank's input: float normals over three decades (sums round differently in
    different orders), small integers otherwise."""
    rng = np.random.default_rng(seed * 1000 + rank)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(count) * 10.0 ** rng.integers(-1, 2, count)).astype(dtype)
    return rng.integers(-1000, 1000, count).astype(dtype)


def differing_ranks(a):
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    everyone = np.empty((n, raw.size), dtype=np.uint8)
    comm.Allgather(raw, everyone)
    return [r for r in range(1, n) if not np.array_equal(everyone[r], everyone[0])]


failures, seed, checked = [], 0, 0
for collective, algorithm in sorted(k for k in REGISTRY if k[0] in EVERYONE):
    for dtype in DTYPES:
        for count in (0, 1, max(n - 1, 0), n + 1, 1000, 4099):
            seed += 1
            x = data(count, dtype, seed)
            if collective == "all_reduce":
                out = x.copy()
                rm.all_reduce(out, algorithm=algorithm)
            elif collective == "all_gather":
                out = np.empty(n * count, dtype=dtype)
                rm.all_gather(out, x, algorithm=algorithm)
            else:
                out = x.copy()
                rm.broadcast(out, src=seed % n, algorithm=algorithm)
            checked += 1
            differ = differing_ranks(out)
            if differ:
                failures.append(f"{algorithm} {collective} {dtype} count={count}: ranks {differ}")

print(f"rank {rank}: " + ("OK" if not failures else "; ".join(failures[:10])) +
      f" ({checked} results compared)", flush=True)
sys.exit(1 if failures else 0)
