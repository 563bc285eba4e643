"""The simulator: run any schedule on N virtual ranks in one process, on numpy buffers.

* :mod:`.kernel`: a schedule's steps compiled into strided slices and run in place, vectorized
  over all ranks;
* :mod:`.buffers`: the all-ranks storage, loading and unloading rank buffers per the
  collective's contract;
* :mod:`.reference`: the float64 reference, its tolerances and the floating-point error bound
  (:func:`fp_error_bound`);
* :mod:`.simulator`: the entry point :func:`simulate` and its :class:`SimResult`/:class:`SimStats`.
"""

from __future__ import annotations

from .reference import fp_error_bound, reference_tolerance, unit_roundoff
from .simulator import SimResult, SimStats, default_algorithm, resolve_root, simulate

__all__ = ["simulate", "SimResult", "SimStats", "reference_tolerance", "default_algorithm",
           "resolve_root", "fp_error_bound", "unit_roundoff"]
