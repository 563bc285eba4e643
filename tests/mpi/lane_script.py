"""Run under mpirun (2-4 processes): ringccl.mpi's compiled shared-memory lane
(ringccl.backends.shm.lane) against the general path (the lane switched off), bit for bit.

``bitwise``: for algorithms auto/direct/two_shot/ring, counts 0, 1, < N, not divisible and
either side of the one-shot/two-shot crossover, four dtypes and the five ops, each input is
reduced once with the lane off (the reference) and then in the sequence on, on, off, on (the
first "on" compiles, the others replay, general and lane calls alternate); every result must
equal the reference and be the same bytes on every rank, and lanes must have been compiled.
``stall``: after a compiled call, rank 1 stalls; the others' next (replayed) call must raise a
PeerError naming step 0 and a peer within timeout + SLACK, the buffer as it was. Each rank
prints "rank R: OK" or its problems; in ``stall`` the job then ends once every reporting rank
printed (end_job.py).
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import end_job
import ringccl.mpi as rm
from ringccl.backends.shm import lane
from ringccl.costmodel import choice
from ringccl.errors import PeerError

#: seconds a loaded machine may add to a timeout (tests/bounds.py, passed by tests/mpi/mpirun.py)
SLACK = float(os.environ.get("RINGCCL_TEST_SLACK", "5"))
#: the stall's timeout; its compiling call (the same signature) waits for the peers' start too
TIMEOUT = 2 + SLACK
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
problems = []


def bitwise() -> None:
    rng = np.random.default_rng(rank)
    cross = choice.two_shot_bytes(n, "mpi")
    for dtype in (np.float32, np.float64, np.int32, np.float16):
        size = np.dtype(dtype).itemsize
        counts = (0, 1, n - 1, 7 * n + 3, 1001, cross // size - 1, cross // size + 1)
        for algorithm in (None, "direct", "two_shot", "ring"):
            for count in counts:
                for op in ("sum", "prod", "min", "max", "avg"):
                    if op == "avg" and dtype is np.int32:
                        continue
                    x = (rng.standard_normal(count) * 3).astype(dtype)
                    results = []
                    for on in (False, True, True, False, True):
                        lane.set_enabled(on)
                        y = x.copy()
                        rm.all_reduce(y, op=op, algorithm=algorithm, transport="shm")
                        results.append(y.tobytes())
                    lane.set_enabled(True)
                    what = (dtype.__name__, algorithm, count, op)
                    if any(r != results[0] for r in results):
                        problems.append(f"lane differs from the general path: {what}")
                    everyone = comm.allgather(results[-1])
                    if any(e != everyone[0] for e in everyone):
                        problems.append(f"ranks differ: {what}")
    if not lane.compiled():
        problems.append("no lane was compiled")


def stall() -> None:
    x = np.arange(64, dtype=np.float32) + rank
    rm.all_reduce(x, timeout=TIMEOUT, transport="shm")   # compiles the lane on every rank
    if rank == 1:
        time.sleep(TIMEOUT + 3 * SLACK)   # stalled (the job is ended before it wakes)
        os._exit(0)
    before = x.copy()
    t0 = time.monotonic()
    try:
        rm.all_reduce(x, timeout=TIMEOUT, transport="shm")   # replayed
        problems.append("no error")
    except PeerError as exc:
        if time.monotonic() - t0 > TIMEOUT + SLACK:
            problems.append(f"raised after {time.monotonic() - t0:.1f} s")
        if exc.peer not in set(range(n)) - {rank} or exc.step != 0:
            problems.append(f"attributes: {exc} (peer {exc.peer}, step {exc.step})")
        if not np.array_equal(x, before):
            problems.append("buffer changed")
    if not lane.compiled():
        problems.append("no lane was compiled")


mode = sys.argv[1]
{"bitwise": bitwise, "stall": stall}[mode]()
print(f"rank {rank}: {'OK' if not problems else problems[:5]}", flush=True)
if mode == "stall":
    end_job.end(comm, [r for r in range(n) if r != 1])
