"""The measurement harness: one spec, one sweep, one definition of a wrong result
(:mod:`.harness`), and nccl-tests' algbw/busbw (:mod:`.metrics`). Backends (ringccl.torch,
ringccl.mpi) supply only how a case is run."""

from __future__ import annotations

from .harness import (BUILTIN, PLACEMENTS, LOCAL_REDUCE, BenchSpec, Case, Backend, Prepared, Sweep,
                      parse_algorithms, sweep_sizes, buffer_elements, nccl_count, make_case,
                      run_sweep, row_count, summarize, row_label, best_placement,
                      format_nccl_tests, format_csv, plot_busbw, NCCL_TYPE_NAMES)

__all__ = ["BUILTIN", "PLACEMENTS", "LOCAL_REDUCE", "BenchSpec", "Case", "Backend", "Prepared",
           "Sweep", "parse_algorithms", "sweep_sizes", "buffer_elements", "nccl_count",
           "make_case", "run_sweep", "row_count", "summarize", "row_label", "best_placement",
           "format_nccl_tests", "format_csv", "plot_busbw", "NCCL_TYPE_NAMES"]
