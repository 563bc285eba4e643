"""The MPI backend (importing this package imports nothing; mpi4py, which starts MPI, is imported
by :mod:`.executor` on the first collective).

* :mod:`.collectives`: the public functions (``ringccl.mpi.all_reduce``, ...), on the flows of
  :mod:`ringccl.frontend`.
* :mod:`.executor`: mpi4py point-to-point and the shared-memory call on numpy arrays.
* :mod:`.launch`, :mod:`.runner`: ``ringccl run/bench --backend mpi`` under mpirun;
  :mod:`.segment_folder`: the launch's folder of its ranks' shared-memory files.
"""
