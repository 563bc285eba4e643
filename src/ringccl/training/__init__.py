"""Training on ringccl's collectives (torch): what a training loop uses, above the backends.

* :mod:`.bucketer` (:class:`GradientBucketer`) and :mod:`.ddp` (a DDP communication hook);
* :mod:`.zero` (:class:`ShardedOptimizer`, ZeRO-1/2) and :mod:`.clip` (global-norm clipping of
  sharded gradients);
* :mod:`.moe`: expert parallelism (dispatch and combine on all_to_all);
* :mod:`.background` (:class:`Communicator`: collectives on a thread of their own);
* :mod:`.stats` (bytes sent per call), :mod:`.train` (``ringccl train``).

The public names are re-exported by ``ringccl.torch``. Importing this package imports nothing.
"""
