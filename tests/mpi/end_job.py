"""How a test script under mpirun ends a job whose communicator a timeout broke (operations
posted to a silent peer cannot be withdrawn: only MPI_Abort ends it): every reporting rank
says it printed its line, in the run's own folder (``RINGCCL_TEST_DIR``, made by
tests/mpi/mpirun.py); rank 0 aborts the job once all of them did. Aborting at once, as every
rank did, could end a slower rank before it printed its line."""

import os
import time


def end(comm, reporting) -> None:
    """This rank printed its line: end the job once every rank of ``reporting`` did (rank 0
    aborts; the others wait to be ended)."""
    rank = comm.Get_rank()
    folder = os.environ.get("RINGCCL_TEST_DIR")
    slack = float(os.environ.get("RINGCCL_TEST_SLACK", "5"))
    if folder:
        open(os.path.join(folder, f"printed.{rank}"), "w").close()
    if rank == 0:
        want = {f"printed.{r}" for r in reporting}
        deadline = time.monotonic() + 10 * slack   # a rank that never prints: abort anyway
        while folder and not want <= set(os.listdir(folder)) and time.monotonic() < deadline:
            time.sleep(0.05)
        comm.Abort(0)
    time.sleep(60 * slack)   # ended by rank 0's abort
