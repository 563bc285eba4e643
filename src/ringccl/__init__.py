"""ringccl: collective-communication algorithms as data.

One schedule per algorithm (:mod:`ringccl.ir`), proved correct by a symbolic checker
(:func:`verify`), run on N virtual ranks by the numpy simulator (:func:`simulate`) and on real
processes by :mod:`ringccl.torch` (torch.distributed point-to-point).

Quick tour::

    import ringccl
    s = ringccl.schedule("all_reduce", "ring", world_size=4)
    print(ringccl.table(s))               # N=4: one row per step, one column per rank
    ringccl.verify(s)                     # symbolic proof; raises VerificationError if wrong
    r = ringccl.simulate("all_reduce", x) # x: (world_size, count) numpy array
    r.outputs, r.stats.bytes_sent, r.matches_reference
    c = ringccl.cost("all_reduce", "ring", 1024, "4MiB", alpha="5us", bandwidth="300GB/s")
    c.seconds, c.latency_seconds          # predicted: 10.26 ms, 10.23 ms of it latency
    ringccl.tune("all_reduce", 1024, alpha="5us", bandwidth="50GB/s").ranges

``ringccl.plan(model, layout, cluster)`` gives the collectives and time of a whole training
step (:mod:`ringccl.planner`).

``ringccl.cost`` and ``ringccl.tune`` are functions; their modules are ``ringccl.costmodel``
(``walk``, ``Predictor``) and ``ringccl.costmodel.tuning`` (``predict_table``). Views of a
schedule are functions of it, not methods: ``ringccl.table(s)``; MSCCL XML and Chrome traces are
``ringccl.views.interop.to_msccl_xml(s)`` and ``to_chrome_trace(s)``.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import units
from .caches import clear_caches
from .costmodel import buckets, presets, topology
from .algorithms import Algorithm, algorithms, bounded, get_algorithm, register
from .algorithms.registry import default_algorithm
from .args import check_int
from .check import verify
from .collectives import COLLECTIVES, get_collective
from .costmodel.model import CostResult, Predictor, StepCost, cost, predictor, walk
from .errors import (ArgumentError, ArgumentTypeError, BackendError, ConsistencyError, PeerError,
                     RingcclError, RingcclTimeout, ScheduleError, VerificationError)
from .ir import Kind, Program, Schedule, Step, Transfer, chunk_bounds
from .bench.metrics import algbw, busbw
from .ops import ReduceOp
from .sim import SimResult, SimStats, simulate
from .planner import plan
from .costmodel.tuning import TuneResult, predict_table, tune
from .views.show import step_table as table

__version__ = "0.1.0"

__all__ = ["schedule", "verify", "simulate", "table", "algorithms", "collectives", "get_algorithm",
           "get_collective", "register", "Algorithm", "Schedule", "Step", "Transfer", "Kind",
           "Program", "ReduceOp", "SimResult", "SimStats", "chunk_bounds", "algbw", "busbw",
           "units", "cost", "predictor", "walk", "CostResult", "StepCost", "Predictor", "topology",
           "tune", "TuneResult", "predict_table", "buckets", "presets", "plan",
           "RingcclError", "ArgumentError", "ArgumentTypeError", "ScheduleError",
           "VerificationError", "BackendError", "PeerError", "RingcclTimeout",
           "ConsistencyError", "clear_caches", "__version__"]


def schedule(collective: str, algorithm: str | None = None, world_size: int = 4,
             **params) -> Schedule:
    """The schedule of ``algorithm`` for ``collective`` on ``world_size`` ranks.

    Example: ``ringccl.table(ringccl.schedule("all_reduce", "ring", world_size=4))``.

    Args:
        algorithm: a registered name; None: the collective's default
            (:data:`ringccl.algorithms.registry.DEFAULTS`: ring, or direct for scatter, gather
            and all_to_all).

    Raises:
        ArgumentError: unknown collective or algorithm (listing the valid names), world_size < 1;
            a schedule this machine's available memory cannot hold, before it is built (its
            steps from the closed form, its transfers extrapolated from 32 and 64 ranks, then
            the build under that bound: :func:`ringccl.algorithms.bounded.build`).
    """
    if algorithm is None:
        algorithm = default_algorithm(collective)
    world_size = check_int(world_size, "world_size", minimum=1)
    return bounded.library_build(collective, algorithm, world_size, params)


def collectives() -> list[str]:
    """Names of the collectives ringccl knows."""
    return list(COLLECTIVES)


def __getattr__(name: str) -> Any:
    # ringccl.torch needs torch, an optional extra: import it on first use only
    if name in ("torch",):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
