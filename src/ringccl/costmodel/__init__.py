"""The α-β-γ cost model and what is built on it.

- :mod:`.topology`: flat and two-level machines (links, placement of ranks on nodes).
- :mod:`.model`: a schedule walked on a topology → seconds (:func:`cost`, :func:`walk`,
  :class:`Predictor`).
- :mod:`.tuning`: the best algorithm per size (:func:`tune`).
- :mod:`.buckets`: DDP gradient bucket planning (not the runtime bucketer,
  :mod:`ringccl.training.bucketer`).
- :mod:`.fit`: α, β, γ fitted from measured benchmark rows (and nccl-tests output).
- :mod:`.nccl`: a collective priced as NCCL's tuning runs it (:func:`.nccl.price`), on a
  :class:`.nccl_machine.NcclMachine` (:mod:`.nccl_tables`: NCCL's constants and presets);
  :mod:`.nccl_fit`: that machine fitted per link level to nccl-tests logs (the network profile).
- :mod:`.compute_profile`: the compute profile ``ringccl calibrate`` writes, and its loader.
- :mod:`.choice`: the one algorithm chooser of the executors (measured crossovers per backend
  and transport, the model's argmin for hybrid, ``RINGCCL_ALGO``).
- :mod:`.presets`: worked examples of the α-β model (``ringccl model --preset
  worked-examples``) and the measured link classes.

Nothing here knows an executor: the model predicts from schedules and topologies only.
"""

from __future__ import annotations

from .model import CostResult, Predictor, StepCost, cost, parse_gamma, predictor, walk

__all__ = ["cost", "walk", "predictor", "Predictor", "CostResult", "StepCost", "parse_gamma"]
