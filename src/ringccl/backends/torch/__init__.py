"""The torch backend (importing this package imports nothing; its modules import torch).

* :mod:`.collectives`: the public functions (``ringccl.torch.all_reduce``, ...), on the flows of
  :mod:`ringccl.frontend` with the tensor dialect of :mod:`.dialect`; :mod:`.transport`: which
  transport a call or a group runs on, and the point-to-point transports.
* :mod:`.executor`: torch.distributed point-to-point and the routing of a call to its
  transport; :mod:`.shm`: the shared-memory call on torch tensors; :mod:`.hybrid`: shared
  memory inside each host, point-to-point across.
* :mod:`.process_group`: ``init_process_group("ringccl")``, with the group's state and
  dispatcher (:mod:`.dispatch`) and its front-end adapter (:mod:`.pg_front`).
* :mod:`.launch`: local processes without torchrun; :mod:`.runner`, :mod:`.replay`: ``ringccl
  run/bench`` and the planner's replay on torch.
"""
