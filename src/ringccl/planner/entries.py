"""The costed entries of one group kind on one stage, what every inventory builder returns.

SPMD: every group of a kind runs at once and the step waits for the slowest, so a builder
prices the slowest distinct shape of its group kind on the stage (:func:`slowest`); the
straggler's own group is priced with its slow link.
"""

from __future__ import annotations

from .context import StepContext
from .costing import Entry, costed

__all__ = ["slowest", "recompute_factor"]


def slowest(ctx: StepContext, stage: int, group: str, **entry) -> list[Entry]:
    """The costed entry of the slowest distinct shape of ``group`` on ``stage`` (SPMD: the step
    waits for every group), as a list of one; empty when every such group is a single rank.
    The straggler's own group is costed with its slow link.

    ``entry``: the :class:`~ringccl.planner.costing.Entry` fields but ``group`` and ``shape``.
    """
    grid, straggler = ctx.grid, ctx.straggler
    candidates = [(shape, None) for shape in grid.stage_shapes(group, stage)]
    if straggler is not None and ctx.straggler_stage == stage:
        members = grid.group(group, straggler.rank)
        if len(members) > 1:
            candidates.append((grid.shape_of(members), members.index(straggler.rank)))
    best = None
    for shape, index in candidates:
        if shape.size < 2:
            continue
        e = costed(Entry(group=group, shape=shape, **entry), ctx.cluster, straggler, index)
        if best is None or e.seconds_per_call > best.seconds_per_call:
            best = e
    if best is None:
        return []
    best.calls_per_micro_batch = (best.calls_per_step // ctx.micro_batches
                                  if best.per_micro_batch else 0)
    return [best]


def recompute_factor(ctx: StepContext) -> int:
    """2 with full recompute (the forward's collectives run again in the backward), else 1."""
    return 2 if ctx.dims.recompute == "full" else 1
