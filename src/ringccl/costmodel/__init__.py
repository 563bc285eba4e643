"""The α-β-γ cost model and what is built on it.

- :mod:`.topology`: flat and two-level machines (links, placement of ranks on nodes).
- :mod:`.model`: a schedule walked on a topology → seconds (:func:`cost`, :func:`walk`,
  :class:`Predictor`).
- :mod:`.tuning`: the best algorithm per size (:func:`tune`).
- :mod:`.buckets`: DDP gradient bucket planning (not the runtime bucketer,
  :mod:`ringccl.training.bucketer`).
- :mod:`.fit`: α, β, γ fitted from measured benchmark rows.
- :mod:`.presets`: the seeds' figures, reproduced from the model.

Nothing here knows an executor: the model predicts from schedules and topologies only.
"""

from __future__ import annotations

from .model import CostResult, Predictor, StepCost, cost, parse_gamma, predictor, walk

__all__ = ["cost", "walk", "predictor", "Predictor", "CostResult", "StepCost", "parse_gamma"]
