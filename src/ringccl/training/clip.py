"""Gradient clipping by the global norm when gradients are sharded across ranks.

The pitfall: under ZeRO/FSDP each rank holds a different slice of the
gradient. ``torch.nn.utils.clip_grad_norm_`` on the local slice computes a *local* norm, so each
rank scales by a different factor and the replicas' weights silently drift apart. The norm must
be global:

    ||g||^2 = sum over ranks r of ||shard_r||^2  +  ||replicated part||^2 (counted once)

and every rank must then apply the *same* coefficient, bit for bit. Summation order decides the
last bit of a float sum, so rather than trusting every rank's all-reduce to add in the same order
(algorithms differ), each rank contributes its partial sums to an all-gather - a copy-only
collective, so all ranks receive identical bits - and every rank adds the N partials itself with
the same exactly rounded sum (``math.fsum``).
"""

from __future__ import annotations

import math
import numbers
from typing import Iterable, Sequence

import torch
import torch.distributed as dist

from ..errors import ArgumentError, ArgumentTypeError
from ..backends.torch.collectives import all_gather_into_tensor

__all__ = ["clip_grad_norm_", "clip_coefficient"]


def clip_coefficient(total_norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``min(1, max_norm / (total_norm + 1e-6))``, a 0-d tensor of total_norm's dtype (torch's
    formula)."""
    coef = torch.tensor(float(max_norm), dtype=total_norm.dtype) / (total_norm + 1e-6)
    return torch.clamp(coef, max=1.0)


def _flags(sharded, n: int) -> list[bool]:
    if isinstance(sharded, bool):
        return [sharded] * n
    flags = list(sharded)
    if len(flags) != n or not all(isinstance(f, bool) for f in flags):
        raise ArgumentError(f"sharded must be a bool or one bool per parameter ({n}), got "
                            f"{sharded!r}")
    return flags


def _check(parameters, max_norm, norm_type) -> tuple[list, float, float]:
    """:func:`clip_grad_norm_`'s arguments checked: (the parameters as a list, max_norm,
    norm_type as a float)."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise ArgumentTypeError(f"parameters[{i}] must be a torch.Tensor, got "
                                    f"{type(p).__name__}")
    if isinstance(max_norm, torch.Tensor) and max_norm.numel() == 1:  # as torch accepts
        max_norm = max_norm.item()
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real) or not max_norm >= 0:
        raise ArgumentError(f"max_norm={max_norm!r} must be a number >= 0")
    if isinstance(norm_type, bool) or not isinstance(norm_type, numbers.Real):
        raise ArgumentError(f"norm_type={norm_type!r} is not supported; expected 2.0 or inf")
    norm_type = float(norm_type)
    if norm_type not in (2.0, math.inf):
        raise ArgumentError(f"norm_type={norm_type!r} is not supported; expected 2.0 or inf")
    return params, max_norm, norm_type


def clip_grad_norm_(parameters: torch.Tensor | Iterable[torch.Tensor], max_norm: float,
                    norm_type: float = 2.0, group=None,
                    sharded: bool | Sequence[bool] = False,
                    algorithm: str = "ring") -> torch.Tensor:
    """Clip gradients in place by their global norm over all ranks of ``group``.

    Norms are computed in float32 whatever the gradients' dtype (fp16/bf16 squares overflow or
    lose their low bits); in float64 if any gradient is float64. Replicated gradients
    (``sharded`` False: identical on every rank, e.g. after DDP's all-reduce) are counted once -
    rank 0's copy; sharded gradients (``sharded`` True: this rank's slice of a larger tensor,
    e.g. ``ShardedOptimizer.shard``) are counted on every rank. Every rank computes a
    bitwise-identical total norm and coefficient. This is a collective call (one all-gather of 2
    floats per rank) when torch.distributed is initialized; without it, it clips as
    ``torch.nn.utils.clip_grad_norm_`` does (the norm is accumulated in float32, or float64 for
    float64 gradients, so for float16/bfloat16 gradients it can differ from torch's in the last
    bits of those formats).

    Args:
        parameters: a tensor or tensors whose ``.grad`` to clip (those without grad are skipped).
        max_norm: the largest allowed total norm (>= 0).
        norm_type: 2.0 or ``inf``.
        group: process group (None: the default group).
        sharded: one bool for all parameters, or one per parameter.
        algorithm: all_gather algorithm used to share the partial norms.

    Returns:
        the total (global) norm before clipping, a float32 (float64) 0-d tensor.
    Raises:
        ArgumentError: max_norm < 0 or NaN, norm_type other than 2 or inf, bad ``sharded``.
        ArgumentTypeError: a parameter is not a tensor.

    Reference: Pascanu, Mikolov & Bengio, "On the difficulty of training recurrent neural
    networks", ICML 2013 (clipping by the global norm); Rajbhandari et al., SC 2020 (ZeRO).
    """
    params, max_norm, norm_type = _check(parameters, max_norm, norm_type)
    flags = _flags(sharded, len(params))
    pairs = [(p.grad, f) for p, f in zip(params, flags) if p.grad is not None]

    acc = torch.float64 if any(g.dtype == torch.float64 for g, _ in pairs) else torch.float32
    # this rank's partials [sharded, replicated]: squares summed (2) or maxima (inf), computed
    # in `acc` and carried in float64, which holds float32 values exactly
    partial = torch.zeros(2, dtype=torch.float64)
    for g, is_shard in pairs:
        g, i = g.detach().reshape(-1), 0 if is_shard else 1
        if not g.numel():
            continue
        if norm_type == 2.0:
            partial[i] += torch.linalg.vector_norm(g, 2, dtype=acc).square().double()
        else:
            partial[i] = torch.maximum(partial[i], g.abs().max().to(acc).double())

    if dist.is_available() and dist.is_initialized():
        world_size = dist.get_world_size(group)
        gathered = torch.empty(2 * world_size, dtype=torch.float64)
        all_gather_into_tensor(gathered, partial, group=group, algorithm=algorithm)
        gathered = gathered.view(world_size, 2).tolist()
    else:
        gathered = [partial.tolist()]
    shards, replicated = [row[0] for row in gathered], gathered[0][1]
    if norm_type == 2.0:
        total = math.sqrt(math.fsum(shards + [replicated]))  # exact sum: same bits everywhere
    else:  # NaN wherever it is (Python's max keeps a NaN only when it comes first)
        parts = shards + [replicated]
        total = math.nan if any(math.isnan(v) for v in parts) else max(parts)
    total_norm = torch.tensor(total, dtype=acc)
    coef = clip_coefficient(total_norm, max_norm)
    for g, _ in pairs:
        g.detach().mul_(coef.to(g.device))
    return total_norm
