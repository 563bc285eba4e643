"""One rank's part of a schedule, driven over any point-to-point transport.

The transports (:mod:`ringccl.backends.torch.executor` for torch.distributed,
:mod:`ringccl.backends.mpi.executor` for mpi4py, :mod:`ringccl.backends.shm` within a host) only
move bytes (:class:`Transport`: post a send or receive, wait, batch, map failures); the order of
operations, the staging layout and buffer, applying a received segment
(:class:`Workspace`), pipelining into segments (:class:`Pipelining`, a policy passed in), error
attribution, timeouts and the all-or-nothing guarantee live here, once. Nothing here knows an algorithm: the engine walks
``schedule.program(rank)``, whose per-step sends and receives come in the schedule's canonical
order, identical on every rank, so operations between a pair of ranks are posted in the same order
on both sides and matched by order (MPI 4.0 §3.5, non-overtaking messages; gloo and NCCL match
point-to-point the same way). No rank ever blocks in a send before its peer has posted the
matching receive (that deadlocks a ring).

Two drivers, chosen by the backend, never by the algorithm:

* `run_dataflow` (gloo, MPI: each isend/irecv is independent): operations are posted as soon
  as their data is ready. The next step's receives go out while this step is applied; with
  segments a reduced segment is forwarded while later segments are still arriving. The order
  depends only on the plan, so it is compiled once (:func:`dataflow_program`) and replayed.
* :func:`run_lockstep` (NCCL, UCC: they coalesce a batch of point-to-point into one group call):
  one batch per step, waited for, then applied.

Receives that reduce land in a staging buffer (two halves, so consecutive steps do not collide)
and are then combined into the working buffer, several reduces into one chunk in the IR's
reduction order (:func:`ringccl.ir.reduce_order`: those from peers below this rank folded into an
accumulator first when there are two or more) and operand order (a peer below this rank's data
on the left of ⊕), as the simulator does; receives that copy land directly in their chunk
unless the step also sends that chunk (BSP: a step's sends read the pre-step state). A chunk is
overwritten only after every send reading it has completed.

Failures: every wait is bounded (by the transport's timeout). The first failing operation raises
:class:`ringccl.errors.PeerError` (or :class:`~ringccl.errors.RingcclTimeout` when the wait ran
out of time) naming the collective, algorithm, step and the peer it was exchanging with. With
``restore=True`` every chunk (with the dataflow driver: every segment) is saved just before this
rank first writes it and restored before the error propagates, so the working buffer is either
fully updated or exactly as it was.
"""

from __future__ import annotations

from .. import caches
from ..caches import clear_caches
from .dataflow import DataflowProgram, Instr, dataflow_program, run_dataflow
from .dataflow import _programs
from . import trace
from .lockstep import run_lockstep
from .plan import (Pipelining, Plan, SegmentRecv, SegmentSend, StepPlan, check_bounds, plan,
                   uniform_bounds)
from .transport import Transport, step_error, timeout_seconds
from .workspace import ArrayOps, Workspace, kept_buffer
from .staged import Pieces, Staged, final_receives

__all__ = ["SegmentSend", "SegmentRecv", "StepPlan", "Plan", "Transport", "Instr",
           "DataflowProgram", "Pipelining", "Workspace", "ArrayOps", "kept_buffer", "plan",
           "Staged", "Pieces", "final_receives",
           "uniform_bounds", "check_bounds", "timeout_seconds", "step_error",
           "dataflow_program", "clear_caches", "run_dataflow", "run_lockstep", "trace"]


# The compiled dataflow programs are a memo table too (a dict bounded in dataflow.py); the plans
# and bounds register themselves through caches.memoize, the kept buffers through
# caches.register. ``engine.clear_caches`` (what the executors' release_buffers call) is
# ringccl.clear_caches: one story, every table.
caches.register(_programs.clear)
