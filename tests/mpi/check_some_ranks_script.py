"""3 ranks under mpirun: only rank 0 asks for the cross-rank check (check=True, timeout=3).

Every rank must raise within the timeout, none may hang: rank 0 because the others never join
its check's exchange, the others because rank 0 never sends. Prints "rank R: OK <seconds>".
Pinned to transport="p2p" (MPI point-to-point's bounded waits).
"""

import os
import time

import numpy as np
from mpi4py import MPI

import end_job
import ringccl.mpi as rm
from ringccl.errors import RingcclTimeout

#: seconds a loaded machine may add to a timeout (tests/bounds.py, passed by tests/mpi/mpirun.py)
SLACK = float(os.environ.get("RINGCCL_TEST_SLACK", "5"))
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
rm.all_reduce(np.ones(2, np.float32), timeout=10, transport="p2p")  # the private communicator, duplicated
b = np.full(8, rank + 1.0, np.float32)
start = time.monotonic()
try:
    rm.all_reduce(b, check=(rank == 0), timeout=3, transport="p2p")
    print(f"rank {rank}: returned without an error", flush=True)
except RingcclTimeout as exc:
    took = time.monotonic() - start
    ok = took < 3 + SLACK and (rank != 0 or "cross-rank check" in str(exc))
    print(f"rank {rank}: {'OK' if ok else 'WRONG'} {took:.2f} s: {exc}", flush=True)
end_job.end(comm, range(comm.Get_size()))   # posted operations cannot be withdrawn
