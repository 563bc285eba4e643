"""Run under mpirun with 2 processes: inf, NaN and overflowing float32 inputs reduced by
ringccl.mpi over p2p and over shared memory, with every warning an error. MPI_Allreduce
prints nothing for IEEE results; neither may ringccl.mpi (numpy's RuntimeWarning from the
combine leaked before). Each rank prints "rank R: OK"."""

import warnings

import numpy as np
from mpi4py import MPI

import ringccl.mpi as rm

comm = MPI.COMM_WORLD
sign = 1 if comm.Get_rank() else -1
problems = []
warnings.simplefilter("error")
for transport in ("p2p", "shm"):
    for algorithm in ("ring", "direct"):
        for op in ("sum", "prod"):
            x = np.array([np.inf, -np.inf, np.nan, 1e38, 3e38], np.float32) * sign
            want = x.copy()
            comm.Allreduce(MPI.IN_PLACE, want, op=MPI.SUM if op == "sum" else MPI.PROD)
            try:
                rm.all_reduce(x, op=op, algorithm=algorithm, transport=transport)
            except Warning as w:
                problems.append(f"{transport} {algorithm} {op}: {type(w).__name__}: {w}")
                continue
            if not np.array_equal(x, want, equal_nan=True):
                problems.append(f"{transport} {algorithm} {op}: {x} != {want}")
print(f"rank {comm.Get_rank()}: {'OK' if not problems else problems}", flush=True)
