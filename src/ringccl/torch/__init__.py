"""ringccl collectives on real processes, with torch.distributed's names, arguments and shapes.

The collectives live in :mod:`ringccl.torch.collectives` (see its docstring: process groups,
options, failures); the training tools (:mod:`~ringccl.torch.bucketer`,
:mod:`~ringccl.torch.ddp`, :mod:`~ringccl.torch.zero`, :mod:`~ringccl.torch.clip`,
:mod:`~ringccl.torch.background`) import them from there. This package only re-exports both.

Example (under ``torchrun --nproc-per-node 4 script.py``)::

    import torch, torch.distributed as dist, ringccl.torch as rt
    dist.init_process_group("gloo")
    t = torch.ones(1 << 20)
    rt.all_reduce(t)     # in place, like dist.all_reduce: shared memory on one host, else ring
    rt.broadcast(t, src=0, algorithm="direct")
"""

from __future__ import annotations

from .collectives import (ReduceOp, all_gather_into_tensor, all_reduce, all_to_all,
                          all_to_all_single, broadcast, gather, reduce, reduce_scatter_tensor,
                          run_schedule, scatter)
from .executor import shm_empty
from .background import Communicator
from .bucketer import GradientBucketer
from .clip import clip_grad_norm_
from .ddp import comm_hook
from .zero import ShardedOptimizer
from . import backend as _backend

# ``dist.init_process_group("ringccl")`` works once ringccl.torch is imported (ringccl.torch.backend)
_backend.register()

__all__ = ["all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "broadcast",
           "reduce", "scatter", "gather", "all_to_all_single", "all_to_all", "run_schedule",
           "ReduceOp", "comm_hook", "GradientBucketer", "ShardedOptimizer", "clip_grad_norm_",
           "Communicator", "shm_empty"]
