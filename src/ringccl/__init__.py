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
import importlib.util
import pkgutil
import sys

#: nothing here imports typing at run time: the import stays a few milliseconds (Ctrl-C during
#: it is Python's own traceback); type checkers read this name as typing's
TYPE_CHECKING = False

__version__ = "0.1.0"

__all__ = ["schedule", "verify", "simulate", "table", "algorithms", "collectives", "get_algorithm",
           "get_collective", "register", "Algorithm", "Schedule", "Step", "Transfer", "Kind",
           "Program", "ReduceOp", "SimResult", "SimStats", "chunk_bounds", "algbw", "busbw",
           "units", "cost", "predictor", "walk", "CostResult", "StepCost", "Predictor", "topology",
           "tune", "TuneResult", "predict_table", "buckets", "presets", "plan",
           "RingcclError", "ArgumentError", "ArgumentTypeError", "ScheduleError",
           "VerificationError", "BackendError", "PeerError", "RingcclTimeout",
           "ConsistencyError", "clear_caches", "__version__"]


#: public name -> (module, attribute; None: the module itself), imported on first use (PEP 562)
#: so that ``import ringccl`` stays light: torch imports ``ringccl.torch_autoload`` (its
#: ``torch.backends`` entry point) inside every ``import torch``, and the ``ringccl`` command
#: must be able to catch Ctrl-C while its command's modules load
_LAZY = {
    "units": ("ringccl.units", None), "clear_caches": ("ringccl.caches", "clear_caches"),
    "buckets": ("ringccl.costmodel.buckets", None),
    "presets": ("ringccl.costmodel.presets", None),
    "topology": ("ringccl.costmodel.topology", None),
    **{n: ("ringccl.algorithms", n) for n in ("Algorithm", "algorithms", "bounded",
                                               "get_algorithm", "register")},
    "verify": ("ringccl.check", "verify"),
    "COLLECTIVES": ("ringccl.collectives", "COLLECTIVES"),
    "get_collective": ("ringccl.collectives", "get_collective"),
    **{n: ("ringccl.costmodel.model", n) for n in ("CostResult", "Predictor", "StepCost", "cost",
                                                   "predictor", "walk")},
    **{n: ("ringccl.errors", n) for n in ("ArgumentError", "ArgumentTypeError", "BackendError",
                                          "ConsistencyError", "PeerError", "RingcclError",
                                          "RingcclTimeout", "ScheduleError",
                                          "VerificationError")},
    **{n: ("ringccl.ir", n) for n in ("Kind", "Program", "Schedule", "Step", "Transfer",
                                      "chunk_bounds")},
    "algbw": ("ringccl.bench.metrics", "algbw"), "busbw": ("ringccl.bench.metrics", "busbw"),
    "ReduceOp": ("ringccl.ops", "ReduceOp"),
    **{n: ("ringccl.sim", n) for n in ("SimResult", "SimStats", "simulate")},
    "plan": ("ringccl.planner", "plan"),
    **{n: ("ringccl.costmodel.tuning", n) for n in ("TuneResult", "predict_table", "tune")},
    "table": ("ringccl.views.show", "step_table"),
}

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from typing import Any

    from . import units
    from .algorithms import Algorithm, algorithms, bounded, get_algorithm, register
    from .bench.metrics import algbw, busbw
    from .caches import clear_caches
    from .check import verify
    from .collectives import COLLECTIVES, get_collective
    from .costmodel import buckets, presets, topology
    from .costmodel.model import CostResult, Predictor, StepCost, cost, predictor, walk
    from .costmodel.tuning import TuneResult, predict_table, tune
    from .errors import (ArgumentError, ArgumentTypeError, BackendError, ConsistencyError,
                         PeerError, RingcclError, RingcclTimeout, ScheduleError,
                         VerificationError)
    from .ir import Kind, Program, Schedule, Step, Transfer, chunk_bounds
    from .ops import ReduceOp
    from .planner import plan
    from .sim import SimResult, SimStats, simulate
    from .views.show import step_table as table


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
    from .algorithms import bounded
    from .algorithms.registry import default_algorithm
    from .args import check_int

    if algorithm is None:
        algorithm = default_algorithm(collective)
    world_size = check_int(world_size, "world_size", minimum=1)
    return bounded.library_build(collective, algorithm, world_size, params)


def collectives() -> list[str]:
    """Names of the collectives ringccl knows."""
    from .collectives import COLLECTIVES
    return list(COLLECTIVES)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = importlib.import_module(module)
        if attr is not None:
            # as ``from module import attr`` does, a submodule when no attribute has the name
            value = (getattr(value, attr) if hasattr(value, attr)
                     else importlib.import_module(f"{module}.{attr}"))
    elif importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # a subpackage (ringccl.planner, ringccl.torch: torch is an optional extra, imported
        # on first use only), with the modules of its that the public names come from
        # (ringccl.costmodel.tuning, ringccl.views.show), as an eager import had loaded them
        value = importlib.import_module(f"{__name__}.{name}")
        for module in sorted({m for m, _ in _LAZY.values() if m.startswith(f"{value.__name__}.")}):
            importlib.import_module(module)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # the public names and the subpackages (ringccl.planner, ringccl.views, ...)
    return sorted(set(__all__) | {m.name for m in pkgutil.iter_modules(__path__) if m.ispkg})


class _Package(type(sys)):
    """The package's module type: importing the subpackage ``ringccl.algorithms`` or the
    module ``ringccl.collectives`` sets the attribute of that name to the module (the import
    system does so on their first import); the public names are the functions
    :func:`algorithms` and :func:`collectives`, so those two keep the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("algorithms", "collectives") and isinstance(value, type(sys)):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
