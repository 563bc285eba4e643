"""ringccl collectives on real processes, with torch.distributed's names, arguments and shapes.

The public face of the torch backend: the collectives
(:mod:`ringccl.backends.torch.collectives`, whose docstring covers process groups, options and
failures), :func:`shm_empty`, the training tools built on them (:mod:`ringccl.training`:
:class:`GradientBucketer`, :func:`comm_hook`, :class:`ShardedOptimizer`,
:func:`clip_grad_norm_`, :class:`Communicator`), and the torch.distributed backend
``"ringccl"`` (registered on import: :mod:`ringccl.backends.torch.process_group`). This package
only re-exports them. The modules documented under this package before the code was sorted into
``backends/`` and ``training/`` keep those names too, as the same module objects:
``ringccl.torch.launch`` (:mod:`ringccl.backends.torch.launch`), ``ringccl.torch.moe`` and
``ringccl.torch.background`` (:mod:`ringccl.training.moe`, :mod:`~ringccl.training.background`),
``ringccl.torch.backend`` (:mod:`ringccl.backends.torch.process_group`: the entry point's old
``ringccl.torch.backend:autoload``).

Example (under ``torchrun --nproc-per-node 4 script.py``)::

    import torch, torch.distributed as dist, ringccl.torch as rt
    dist.init_process_group("gloo")
    t = torch.ones(1 << 20)
    rt.all_reduce(t)     # in place, like dist.all_reduce: shared memory on one host, else ring
    rt.broadcast(t, src=0, algorithm="direct")
"""

from __future__ import annotations

import sys

from ..backends.torch import launch, process_group as _process_group  # noqa: F401 (module doc)
from ..backends.torch.collectives import (ReduceOp, all_gather_into_tensor, all_reduce,
                                          all_to_all, all_to_all_single, broadcast, gather,
                                          reduce, reduce_scatter_tensor, run_schedule, scatter)
from ..backends.torch.shm import shm_empty
from ..training.background import Communicator
from ..training.bucketer import GradientBucketer
from ..training.clip import clip_grad_norm_
from ..training.ddp import comm_hook
from ..training.zero import ShardedOptimizer
from ..training import background, moe  # noqa: F401 (module doc)

# the documented module names (module docstring): ``import ringccl.torch.moe`` finds them here
backend = _process_group
for _name in ("launch", "moe", "background", "backend"):
    sys.modules[f"{__name__}.{_name}"] = globals()[_name]

# ``dist.init_process_group("ringccl")`` works once ringccl.torch is imported
_process_group.register()

__all__ = ["all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "broadcast",
           "reduce", "scatter", "gather", "all_to_all_single", "all_to_all", "run_schedule",
           "ReduceOp", "comm_hook", "GradientBucketer", "ShardedOptimizer", "clip_grad_norm_",
           "Communicator", "shm_empty"]
