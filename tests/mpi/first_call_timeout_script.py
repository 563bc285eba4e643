"""Run under mpirun with 2 processes, argv[1] the transport ("auto" or "shm"): the first
ringccl.mpi call on a fresh communicator, with timeout=2, where rank 1 refuses its arguments
locally and never joins. Rank 0 must get a RingcclTimeout within the timeout (the set-up's
blocking MPI_Comm_split_type / MPI_Comm_dup hung there before), its array untouched; each
rank prints "rank R: OK", then the job ends (tests/mpi/end_job.py)."""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import end_job
import ringccl.mpi as rm
from ringccl.errors import ArgumentError, RingcclTimeout

SLACK = float(os.environ.get("RINGCCL_TEST_SLACK", "5"))
transport = sys.argv[1]
comm = MPI.COMM_WORLD.Dup()   # never used by ringccl before: its first call sets up
rank = comm.Get_rank()
x = np.arange(8, dtype=np.float32)
before = x.copy()
problems = []
t0 = time.monotonic()
try:
    rm.all_reduce(x, op="sum" if rank == 0 else "no-such-op", comm=comm, timeout=2,
                  transport=transport)
    problems.append("no error")
except RingcclTimeout as exc:
    took = time.monotonic() - t0
    if rank != 0 or not 1.5 < took < 2 + SLACK:
        problems.append(f"rank {rank} timed out after {took:.1f} s")
    if "timed out after 2 s" not in str(exc) or "a peer did not join" not in str(exc):
        problems.append(f"message: {exc}")
except ArgumentError as exc:
    if rank != 1 or "no-such-op" not in str(exc):
        problems.append(f"{exc}")
if not np.array_equal(x, before):
    problems.append("array changed")
print(f"rank {rank}: {'OK' if not problems else problems}", flush=True)
end_job.end(MPI.COMM_WORLD, [0, 1])
