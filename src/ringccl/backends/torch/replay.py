"""A planned step's collectives on local processes (``ringccl replay``'s worker).

Each call of the replay (:class:`ringccl.planner.emit.ReplayCall`, as a dict) runs on its local
groups at the same time — every group of a kind communicates at once, as in the SPMD step — as
one ``ringccl bench`` row (:func:`ringccl.bench.run_sweep` on a
:class:`~ringccl.backends.torch.runner.TorchBackend` of the group): the same timing loop, the same
inputs, the same ``#wrong`` check. Then the calibration sweeps: each distinct (collective,
algorithm, group size) over the sizes the fit needs, with ``local-reduce`` rows for the
reducing collectives, so :func:`ringccl.costmodel.fit.fit_rows` can separate α, β and γ.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ...bench.spec import BenchSpec
from ...bench.sweep import run_sweep
from .runner import TorchBackend

__all__ = ["replay_worker", "placement_of"]

#: the torch.distributed APIs that only work in place time in place; all_to_all_single cannot
_IN_PLACE = ("all_reduce", "broadcast", "reduce", "reduce_scatter", "all_gather")


def placement_of(collective: str) -> str:
    """How the replay places a collective's buffers: in place where the API allows it (what a
    training step does: DDP reduces its buckets in place), else out of place."""
    return "in-place" if collective in _IN_PLACE else "out-of-place"


def _spec(collective, algorithm, params, lo, hi, iters, warmup, calibrate) -> BenchSpec:
    root = int(params.get("root", 0)) if collective in ("broadcast", "reduce") else 0
    params = {k: v for k, v in params.items() if k != "root" or collective not in
              ("broadcast", "reduce")}
    return BenchSpec(collective, (algorithm,), lo, hi, 4, iters, warmup, True, "float32", "sum",
                     root, (None,), (placement_of(collective),), "gloo", calibrate, True, None,
                     params).validate()


def replay_worker(rank: int, world_size: int, calls: list, calibration: list, iters: int,
                  warmup: int, progress=None) -> list[dict]:
    """Run every call, then every calibration sweep; return the rows this rank leads.

    Args:
        calls: :meth:`ReplayCall.to_dict` of each call (groups of local ranks; a rooted
            call's ``params["root"]`` is a rank of each group, which the bench row maps to
            that group's global rank, so every group runs from its own root).
        calibration: dicts ``{"collective", "algorithm", "params", "group_size", "min_bytes",
            "max_bytes"}``: one sweep each, on every block of ``group_size`` consecutive
            ranks at once.
        iters, warmup: per row (nccl-tests ``-n``, ``-w``).
        progress: rank 0 puts ``("row", done, total)`` after each call and sweep.
    Returns:
        the rows of the groups whose first rank is this rank, each tagged ``replay``
        (``{"call": order, "group": ranks}`` or ``{"calibration": index}``).
    """
    torch.set_num_threads(1)   # the processes share this machine's cores
    made: dict[tuple, object] = {}

    def group_of(groups):
        # dist.new_group is collective over the default group: every rank makes every group,
        # in the same order, then uses the one it is in
        mine = None
        for g in groups:
            key = tuple(g)
            if key not in made:
                made[key] = dist.new_group(list(key))
            if rank in key:
                mine = key
        return mine

    rows: list[dict] = []
    total = len(calls) + len(calibration)
    done = 0
    for c in calls:
        mine = group_of(c["groups"])
        if mine is not None:
            backend = TorchBackend(made[mine])
            spec = _spec(c["collective"], c["algorithm"], c["params"], c["nbytes"], c["nbytes"],
                         iters, warmup, False)
            for row in run_sweep(backend, spec):
                if rank == mine[0]:
                    rows.append(dict(row, replay={"call": c["order"], "group": list(mine)}))
        dist.barrier()   # the next call starts together on every group
        done += 1
        if progress is not None and rank == 0:
            progress.put(("row", done, total))
    for i, s in enumerate(calibration):
        size = s["group_size"]
        groups = [list(range(b, b + size)) for b in range(0, world_size - size + 1, size)]
        # every block at once, as the step's groups run (the links and cores are shared alike)
        mine = group_of(groups)
        if mine is not None:
            spec = _spec(s["collective"], s["algorithm"], s["params"], s["min_bytes"],
                         s["max_bytes"], iters, warmup, True)
            for row in run_sweep(TorchBackend(made[mine]), spec):
                if rank == mine[0]:
                    rows.append(dict(row, replay={"calibration": i}))
        dist.barrier()
        done += 1
        if progress is not None and rank == 0:
            progress.put(("row", done, total))
    return rows
