"""ZeRO-style sharded optimizer: reduce-scatter gradients, step a 1/N shard, all-gather params.

With plain data parallelism every rank all-reduces the full gradient and keeps the full
optimizer state (AdamW: two fp32 moments per parameter, twice the model). ZeRO stage 1/2 keeps
only what each rank updates (Rajbhandari et al., SC 2020, §7: the gradient all-reduce becomes its
first half, a reduce-scatter):

* all parameters of the optimizer are viewed as one flat vector of P elements, padded with
  zeros to N·S (S = ceil(P / N)); rank r owns elements [r·S, (r+1)·S);
* at the end of each synchronized backward the flat gradient is **reduce-scattered**: rank r
  keeps the mean of its S elements only and drops the full gradient (stage 2);
* ``step()`` runs the wrapped optimizer on the S-element shard - so its state is 1/N of the
  unsharded state - and **all-gathers** the updated shards into every rank's parameters.

Per optimizer step each rank sends (N-1)/N·P' bytes for the reduce-scatter plus the same for
the all-gather (P' = padded bytes): the 2(N-1)/N of a ring all-reduce, split in two.

References: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020, section 5 (Pos, Pos+g); Li et al., VLDB 2020 (no_sync).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist

from ..algorithms import get_algorithm
from ..errors import ArgumentError, ArgumentTypeError
from ..backends.torch.collectives import all_gather_into_tensor, reduce_scatter_tensor
from .stats import CommStats, bytes_sent

__all__ = ["ShardedOptimizer", "optimizer_state_bytes"]


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (moments, step counters, ...)."""
    return sum(v.numel() * v.element_size() for state in optimizer.state.values()
               for v in state.values() if isinstance(v, torch.Tensor))


class ShardedOptimizer:
    """Shard ``optimizer_class``'s parameters and state over the ranks of ``group``.

    Every rank must construct it at the same point with the same parameters (same order, shapes,
    dtype and values - e.g. the same seed). Parameters that do not require grad when it is built
    are left out (never stepped, as torch.optim never steps a parameter without a gradient); a
    trainable parameter that got no gradient on any rank in a step is stepped with a zero
    gradient when others did (weight decay and momentum apply to it, as after DDP with
    ``find_unused_parameters``), and nothing is stepped when no rank had any gradient. A rank
    that ran no backward in a step takes part in its reduce-scatter with zeros and cannot tell
    "no rank had a gradient" from "the gradient of my shard is exactly zero everywhere": it
    steps its shard only if its reduced gradient is nonzero somewhere (torch would still apply
    weight decay to a used parameter whose gradient is exactly zero).
    Memory per rank: the optimizer state of S elements, plus two flat P'-element buffers (the
    all-gather target and the gradient to reduce-scatter, which the collective copies once more
    while it runs). Gradients are reduced at the end of each backward (unless inside
    :meth:`no_sync`), and left in each rank's shard; ``param.grad`` is set back to None. Then
    ``step()`` updates the shard and all-gathers the parameters.

    Args:
        params: tensors to optimize (one dtype, one device).
        optimizer_class: a ``torch.optim.Optimizer`` subclass whose update is elementwise
            (SGD, Adam, AdamW, ...), constructed on the shard.
        group: process group (None: the default group).
        algorithm: ringccl algorithm for both the reduce-scatter and the all-gather.
        **defaults: passed to ``optimizer_class`` (lr, betas, weight_decay, ...).

    Attributes:
        optimizer: the wrapped optimizer over this rank's shard (``param_groups`` for LR
            schedulers are its own).
        shard: this rank's S-element slice of the flat parameters (its ``grad`` after backward).
        stats: :class:`~ringccl.training.stats.CommStats`, bytes this rank sent.

    Raises:
        ArgumentError: no parameters (or none requiring grad), mixed dtypes or devices, a
            parameter passed twice, an unknown algorithm.
        ArgumentTypeError: optimizer_class is not an Optimizer subclass, a parameter that is
            not a floating tensor.
    """

    def __init__(self, params: Iterable[torch.Tensor], optimizer_class: type = torch.optim.AdamW,
                 *, group=None, algorithm: str = "ring", **defaults: Any):
        params = list(params)
        if not params:
            raise ArgumentError("params is empty")
        if any(isinstance(p, dict) for p in params):
            raise ArgumentError("params: parameter groups (dicts) are not supported; pass "
                                "tensors and give hyperparameters as keyword arguments")
        for i, p in enumerate(params):
            if not isinstance(p, torch.Tensor):
                raise ArgumentTypeError(f"params[{i}] must be a torch.Tensor, got "
                                        f"{type(p).__name__}")
            if not (p.is_floating_point() or p.is_complex()):
                raise ArgumentTypeError(f"params[{i}].dtype={p.dtype} cannot be optimized; "
                                        "expected a floating dtype")
        # frozen parameters are left out: torch.optim never steps a parameter without a grad
        params = [p for p in params if p.requires_grad]
        if not params:
            raise ArgumentError("params: none requires grad (frozen parameters are left out)")
        if not (isinstance(optimizer_class, type)
                and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise ArgumentTypeError(f"optimizer_class must be a torch.optim.Optimizer "
                                    f"subclass, got {optimizer_class!r}")
        kinds = {(p.dtype, p.device) for p in params}
        if len(kinds) != 1:
            raise ArgumentError(f"params have several dtypes/devices {sorted(map(str, kinds))}; "
                                f"ShardedOptimizer needs one")
        if len({id(p) for p in params}) != len(params):
            raise ArgumentError("params lists a tensor more than once")
        get_algorithm("reduce_scatter", algorithm)
        get_algorithm("all_gather", algorithm)
        self.params, self.group, self.algorithm = params, group, algorithm
        self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.numel = sum(p.numel() for p in params)
        self.shard_numel = math.ceil(self.numel / self.world_size)
        padded = self.shard_numel * self.world_size
        dtype, device = params[0].dtype, params[0].device
        self._offsets = [0]
        for p in params:
            self._offsets.append(self._offsets[-1] + p.numel())
        self._flat = torch.zeros(padded, dtype=dtype, device=device)  # gather target, reused
        self._flat_grad = torch.zeros(padded, dtype=dtype, device=device)
        with torch.no_grad():
            self._pack(params, self._flat)
        lo = self.rank * self.shard_numel
        self.shard = torch.nn.Parameter(self._flat[lo:lo + self.shard_numel].clone())
        self.optimizer = optimizer_class([self.shard], **defaults)
        self.stats = CommStats()
        self._sync = True
        self._reduced = False  # a reduce-scatter ran since the last step
        self._callback_queued = False
        self._handles = [p.register_post_accumulate_grad_hook(self._on_grad_ready)
                         for p in params if p.requires_grad]

    # -- torch.optim.Optimizer look-alike -----------------------------------------------------

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def state_bytes(self) -> int:
        """Bytes of optimizer state this rank holds (about 1/N of the unsharded optimizer's)."""
        return optimizer_state_bytes(self.optimizer)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop local gradients and this rank's reduced gradient shard (``set_to_none=False``:
        zero them, so the next step still steps, with zero gradients, as torch.optim does)."""
        for p in self.params:
            p.grad = None if set_to_none else (None if p.grad is None else p.grad.zero_())
        if set_to_none or self.shard.grad is None:
            self.shard.grad = None
        else:
            self.shard.grad.zero_()
        self._reduced = False  # what was reduced is dropped: the next step reduces again

    def step(self, closure: Callable[[], Any] | None = None):
        """Reduce-scatter gradients still held locally, step the shard, all-gather parameters.

        Returns:
            ``closure()``'s value, if a closure is given (it runs first, with grad enabled).
        Raises:
            BackendError: a collective failed.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._reduce_once()
        self.optimizer.step()
        with torch.no_grad():
            lo = self.rank * self.shard_numel
            block = self._flat[lo:lo + self.shard_numel]
            block.copy_(self.shard)
            self._account("all_gather", self._flat)
            all_gather_into_tensor(self._flat, block, group=self.group, algorithm=self.algorithm)
            self._unpack(self._flat, self.params)
        self._reduced = False
        return loss

    def state_dict(self) -> dict:
        """This rank's shard of the optimizer state (``torch.optim`` format)."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.optimizer.load_state_dict(state_dict)

    # -- gradients ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def no_sync(self):
        """Skip the per-backward reduce-scatter: gradients accumulate locally in ``param.grad``;
        the next synchronized backward (or ``step()``) reduces their sum once."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    def reduce_gradients(self) -> None:
        """Reduce-scatter the local gradients (mean over ranks) into ``shard.grad``, adding to
        what earlier backwards left there, and set ``param.grad`` to None. Nothing to do if no
        parameter holds a gradient. Called at the end of each synchronized backward."""
        if all(p.grad is None for p in self.params):
            return
        self._reduce()

    def _reduce_once(self) -> None:
        """The reduce-scatter of pending gradients, and at least one per step on every rank:
        a rank that ran no backward since the last step takes part with zeros, so its
        collectives still pair with the other ranks' (reduce-scatter with reduce-scatter, as
        DDP's Join shadows a rank out of data) instead of its all-gather with their
        reduce-scatter."""
        if not self._reduced or any(p.grad is not None for p in self.params):
            self._reduce()

    def _reduce(self) -> None:
        flat = self._flat_grad
        local = any(p.grad is not None for p in self.params)
        with torch.no_grad():
            flat.zero_()
            self._pack([p.grad for p in self.params], flat)
            for p in self.params:
                p.grad = None  # ZeRO-2: the full gradient is not kept
            flat.div_(self.world_size)  # mean = sum of (x / N), as DDP does
            out = torch.empty(self.shard_numel, dtype=flat.dtype, device=flat.device)
            self._account("reduce_scatter", flat)
            reduce_scatter_tensor(out, flat, group=self.group, algorithm=self.algorithm)
            self._reduced = True
            if self.shard.grad is None:
                if local or out.any():  # no gradient on any rank: no step, as torch.optim
                    self.shard.grad = out
            else:
                self.shard.grad.add_(out)

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Reduce pending gradients, then clip the shards by the *global* norm (see
        :func:`ringccl.torch.clip_grad_norm_`); returns the total norm (float32)."""
        from .clip import clip_grad_norm_
        self._reduce_once()
        return clip_grad_norm_([self.shard], max_norm, norm_type=norm_type, group=self.group,
                               sharded=True)

    def remove(self) -> None:
        """Remove the gradient hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []

    # -- internals ------------------------------------------------------------------------------

    def _on_grad_ready(self, p: torch.Tensor) -> None:
        if self._sync and not self._callback_queued:
            # once per backward, after every gradient of this backward has been accumulated
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)

    def _end_of_backward(self) -> None:
        self._callback_queued = False
        self.reduce_gradients()

    def _pack(self, tensors, flat: torch.Tensor) -> None:
        for t, lo, hi in zip(tensors, self._offsets, self._offsets[1:]):
            if t is not None:
                flat[lo:hi].copy_(t.detach().reshape(-1))

    def _unpack(self, flat: torch.Tensor, params) -> None:
        for p, lo, hi in zip(params, self._offsets, self._offsets[1:]):
            p.copy_(flat[lo:hi].view_as(p))

    def _account(self, collective: str, buffer: torch.Tensor) -> None:
        self.stats.add(collective, bytes_sent(collective, self.algorithm, self.world_size,
                                              self.rank, buffer.numel(), buffer.element_size()))

