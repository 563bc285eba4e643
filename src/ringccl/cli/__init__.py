"""The ``ringccl`` command: demo, show, compare, simulate, run, bench, fit, algorithms, model,
tune, nccl, calibrate, train, plan.

Human units in and out: counts ``1M`` = 10^6 and ``1Mi`` = 2^20 elements; sizes ``4MB`` and
``4MiB``; bandwidths printed in GB/s = 1e9 bytes/s as nccl-tests does. Every command takes
``--json``. ringccl errors exit with code 2 and one line on stderr.

One module per command group: :mod:`.schedules` (algorithms, show, compare), :mod:`.simulate`,
:mod:`.run` (run, bench), :mod:`.model` (model, tune, fit), :mod:`.network` (nccl, and fit's
nccl-tests half), :mod:`.calibrate`, :mod:`.train`, :mod:`.demo`; what
they share is :mod:`.common`; :mod:`.app` holds the parser, the dispatch and the exit codes. The
CLI is the only part of ringccl that prints, and nothing in ringccl imports it.
"""

from __future__ import annotations

from .app import build_parser, main

__all__ = ["main", "build_parser"]
