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

import sys

from .interrupt import interrupted

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Sequence

__all__ = ["main", "build_parser"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ringccl`` command (:func:`.app.main`: its exit codes).

    The command's modules (numpy, the planner, the backends) load here, inside the entry
    point, and the parser is built inside it, so that Ctrl-C while either happens is one
    ``interrupted:`` line and exit code 130, as Ctrl-C while the command runs is
    (:func:`.app.main`), not a traceback.
    """
    try:
        from .app import main as run_command
        return run_command(argv)
    except KeyboardInterrupt:  # before the command ran: app.main handles it from then on
        words = list(sys.argv[1:] if argv is None else argv)
        command = next((w for w in words if not w.startswith("-")), None)
        return interrupted(f"ringccl{' ' + command if command else ''} stopped before it "
                           "started")


def build_parser():
    """The ``ringccl`` parser (:func:`.app.build_parser`)."""
    from .app import build_parser as build
    return build()
