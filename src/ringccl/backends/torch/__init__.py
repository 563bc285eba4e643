"""The torch backend (importing this package imports nothing; its modules import torch).

* :mod:`.collectives`: the public functions (``ringccl.torch.all_reduce``, ...), on the flows of
  :mod:`ringccl.frontend`; :mod:`.transport`: which transport a call or a group runs on.
* :mod:`.executor`: torch.distributed point-to-point; :mod:`.shm`: the shared-memory call on
  torch tensors; :mod:`.hybrid`: shared memory inside each host, point-to-point across.
* :mod:`.process_group`: ``init_process_group("ringccl")``, with its dispatcher
  (:mod:`.dispatch`) and its inner gloo group (:mod:`.gloo`).
* :mod:`.launch`: local processes without torchrun; :mod:`.runner`, :mod:`.replay`: ``ringccl
  run/bench`` and the planner's replay on torch.
"""
