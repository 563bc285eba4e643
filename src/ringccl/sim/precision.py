"""How far a schedule's floating-point outputs are from the exact reduction (``ringccl compare
--precision``): each algorithm adds in its own order, so its rounding error is its own."""

from __future__ import annotations

import numpy as np

from ..collectives import get_collective
from ..ir import Schedule
from . import simulate

__all__ = ["output_errors"]


def output_errors(collective: str, schedule: Schedule, x: np.ndarray) -> tuple[float, float]:
    """Max absolute and max relative error of ``schedule``'s outputs on ``x`` against the
    float64 sum, over every rank's output elements.

    Args:
        collective: the schedule's collective; a copy collective gives (0.0, 0.0).
        x: (world_size, count) inputs, float32 in ``ringccl compare``.
    Returns:
        (max_abs, max_rel): rank r's output is the slice of the reduced buffer its output
        chunks cover. Outputs in another layout fall back to the simulator's own max abs error,
        with max_rel nan. Relative error is per element, over nonzero exact values.
    """
    spec = get_collective(collective)
    if not spec.reduces:
        return 0.0, 0.0
    n, count = x.shape
    result = simulate(collective, x, op="sum", schedule=schedule, check=False)
    c = schedule.num_chunks
    sizes = np.asarray(spec.chunk_sizes(n, c, spec.buffer_count(n, count), schedule.params))
    outs = spec.output_chunks(n, c, schedule.params)
    ref = x.astype(np.float64).sum(axis=0)
    wants = []
    for r in range(n):  # rank r's output: its output chunks of the reduced buffer, in order
        starts = np.concatenate([[0], np.cumsum(sizes[r])])
        wants.append(np.concatenate([ref[starts[k]:starts[k + 1]] for k in outs[r]])
                     if len(outs[r]) else ref[:0])
    per_rank = [np.asarray(o) for o in result.outputs] if len(result.outputs) == n else []
    if [o.size for o in per_rank] != [w.size for w in wants]:
        checked = simulate(collective, x, op="sum", schedule=schedule)
        return checked.max_abs_error, float("nan")
    max_abs = max_rel = 0.0
    for r in range(n):
        want = wants[r]
        got = per_rank[r].astype(np.float64).reshape(-1)
        if not want.size:
            continue
        err = np.abs(got - want)
        max_abs = max(max_abs, float(err.max()))
        nonzero = want != 0
        if nonzero.any():
            max_rel = max(max_rel, float((err[nonzero] / np.abs(want[nonzero])).max()))
    return max_abs, max_rel
