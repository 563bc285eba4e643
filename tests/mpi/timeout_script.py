"""Run under mpirun with 3 processes and RINGCCL_TIMEOUT=2: rank 1 stalls, ranks 0 and 2 must
get a RingcclTimeout naming the step and peer within the timeout, with the caller's output of
all_gather (whose own block is copied in before the exchange) left exactly as it was. Each of
them prints "rank R: OK"; then rank 0 ends the job with MPI_Abort, as the docs require after a
timeout (the stalled rank's messages cannot be withdrawn).

Pinned to transport="p2p" (MPI point-to-point, whose timeouts this checks); the shared-memory
transport's stall is tests/mpi/shm_timeout_script.py."""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import end_job
import ringccl.mpi as rm
from ringccl.errors import RingcclTimeout

#: seconds a loaded machine may add to a timeout (tests/bounds.py, passed by tests/mpi/mpirun.py)
SLACK = float(os.environ.get("RINGCCL_TEST_SLACK", "5"))
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
rm.all_reduce(np.ones(4, np.float32), transport="p2p")  # every rank: the private communicator exists
if rank == 1:
    time.sleep(2 + 3 * SLACK)  # stalled (the job is aborted before it wakes)
    os._exit(0)
x = np.arange(1 << 12, dtype=np.float32) + rank
out = np.full(n * x.size, -7.0, np.float32)
before = out.copy()
t0 = time.monotonic()
problems = []
try:
    rm.all_gather(out, x, transport="p2p")
    problems.append("no error")
except RingcclTimeout as exc:
    took = time.monotonic() - t0
    if not 1.5 < took < 2 + SLACK:
        problems.append(f"raised after {took:.1f} s")
    # the peer waited for: rank 1, or a neighbour itself waiting for rank 1
    if exc.peer not in set(range(n)) - {rank} or exc.step is None or (
            "timed out after 2 s" not in str(exc)):
        problems.append(f"message/attributes: {exc} (peer {exc.peer}, step {exc.step})")
    if not np.array_equal(out, before):
        changed = [k for k in range(n) if not np.array_equal(out[k * x.size:(k + 1) * x.size],
                                                            before[k * x.size:(k + 1) * x.size])]
        problems.append(f"output changed in blocks {changed}")
print(f"rank {rank}: {'OK' if not problems else problems}", flush=True)
sys.stdout.flush()
end_job.end(comm, [0, 2])
