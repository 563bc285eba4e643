"""The measurement harness behind ``ringccl bench`` and ``ringccl run``: one spec
(:mod:`.spec`), one input generator and one definition of a wrong result (:mod:`.inputs`), one
timing loop (:mod:`.sweep`), the reports (:mod:`.report`) and nccl-tests' algbw/busbw
(:mod:`.metrics`). Backends (:mod:`ringccl.backends.torch.runner`,
:mod:`ringccl.backends.mpi.runner`) supply only how a case is run (:class:`Backend`)."""

from __future__ import annotations

from .inputs import Case, count_wrong, make_case, random_inputs
from .metrics import algbw, busbw
from .report import (CSV_FIELDS, NCCL_TESTS_PROGRAMS, RankPlace, Sweep, best_placement,
                     format_csv, format_nccl_tests, plot_busbw, rank_places, row_label,
                     run_report)
from .spec import (BUILTIN, LOCAL_REDUCE, NCCL_TYPE_NAMES, PLACEMENTS, BenchSpec,
                   buffer_elements, nccl_count, one_size, parse_algorithms, run_count,
                   sweep_sizes)
from .sweep import Backend, Prepared, row_count, run_sweep, summarize

__all__ = ["BUILTIN", "PLACEMENTS", "LOCAL_REDUCE", "NCCL_TYPE_NAMES", "BenchSpec", "Case",
           "Backend", "Prepared", "Sweep", "parse_algorithms", "sweep_sizes", "buffer_elements",
           "nccl_count", "one_size", "run_count", "make_case", "count_wrong", "random_inputs",
           "run_sweep", "row_count", "summarize", "row_label", "best_placement",
           "format_nccl_tests", "format_csv", "CSV_FIELDS", "plot_busbw", "run_report", "algbw",
           "busbw", "RankPlace", "rank_places", "NCCL_TESTS_PROGRAMS"]
