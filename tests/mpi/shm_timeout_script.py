"""Run under mpirun with 3 processes: ringccl.mpi over shared memory, rank 1 stalls.

Ranks 0 and 2 call all_gather with timeout=2 (transport="shm"): each must raise a PeerError
(RingcclTimeout for the rank whose own wait ran out; PeerError for one that saw it abort the
group's shared memory first) naming step 0 and a peer, within the timeout + SLACK, with the
caller's output exactly as it was. Each prints "rank R: OK"; rank 0 then ends the job with
MPI_Abort (as after any ringccl.mpi timeout)."""

import os
import time

import numpy as np
from mpi4py import MPI

import end_job
import ringccl.mpi as rm
from ringccl.errors import PeerError

#: seconds a loaded machine may add to a timeout (tests/bounds.py, passed by tests/mpi/mpirun.py)
SLACK = float(os.environ.get("RINGCCL_TEST_SLACK", "5"))
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
rm.all_reduce(np.ones(4, np.float32), transport="shm")  # every rank: the segment exists
if rank == 1:
    time.sleep(2 + 3 * SLACK)  # stalled (the job is aborted before it wakes)
    os._exit(0)
x = np.arange(1 << 12, dtype=np.float32) + rank
out = np.full(n * x.size, -7.0, np.float32)
before = out.copy()
t0 = time.monotonic()
problems = []
try:
    rm.all_gather(out, x, timeout=2, transport="shm")
    problems.append("no error")
except PeerError as exc:
    took = time.monotonic() - t0
    if took > 2 + SLACK:
        problems.append(f"raised after {took:.1f} s")
    if exc.peer not in set(range(n)) - {rank} or exc.step != 0:
        problems.append(f"message/attributes: {exc} (peer {exc.peer}, step {exc.step})")
    if not np.array_equal(out, before):
        problems.append("output changed")
print(f"rank {rank}: {'OK' if not problems else problems}", flush=True)
end_job.end(comm, [0, 2])
