"""ringccl collectives under ``mpirun``: every schedule on numpy buffers over mpi4py.

The public face of the MPI backend: the functions of :mod:`ringccl.backends.mpi.collectives`
(whose docstring has the table of functions against ringccl.torch and MPI, the transports and
the failures), re-exported. Importing it does not import mpi4py (which initializes MPI); the
first collective does.

Example (``mpirun -np 4 python script.py``)::

    import numpy as np, ringccl.mpi as rm
    x = np.ones(1 << 20, dtype=np.float32)
    rm.all_reduce(x)                      # in place, like MPI_Allreduce(IN_PLACE)
    rm.broadcast(x, src=0, algorithm="tree", segments=8)
"""

from __future__ import annotations

from ..backends.mpi.collectives import (ReduceOp, all_gather, all_reduce, all_to_all, broadcast,
                                        gather, reduce, reduce_scatter, release_buffers,
                                        resolve_transport, run_schedule, scatter, shm_empty)

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "scatter",
           "gather", "all_to_all", "run_schedule", "release_buffers", "resolve_transport",
           "shm_empty", "ReduceOp"]
