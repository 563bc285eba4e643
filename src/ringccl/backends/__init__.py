"""The executors: each runs a schedule on real processes (docs/architecture.md).

* :mod:`~ringccl.backends.shm`: the shared-memory transport of the ranks of one host (segments,
  the group's control block, reads in place, the hybrid transport across hosts) and the one
  shared-memory call every backend runs (:mod:`~ringccl.backends.shm.call`), on any array
  dialect.
* :mod:`~ringccl.backends.torch`: torch tensors over torch.distributed point-to-point, shared
  memory or both; the public functions (``ringccl.torch``), the ``"ringccl"`` torch.distributed
  process group, the local launcher and the bench adapter.
* :mod:`~ringccl.backends.mpi`: numpy arrays over mpi4py point-to-point or shared memory; the
  public functions (``ringccl.mpi``), the mpirun launcher and the bench adapter.

The backends never import each other; both import ``shm``.
"""
