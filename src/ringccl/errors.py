"""Exceptions raised by ringccl.

Every error derives from :class:`RingcclError`, so ``except ringccl.RingcclError`` catches them all;
argument errors also derive from the builtin ``ValueError``/``TypeError`` they refine.
"""

from __future__ import annotations

__all__ = [
    "RingcclError",
    "ArgumentError",
    "ArgumentTypeError",
    "ScheduleError",
    "VerificationError",
    "BackendError",
    "PeerError",
    "RingcclTimeout",
    "ConsistencyError",
    "WorkerError",
    "Interrupted",
]


class RingcclError(Exception):
    """Base class of every ringccl error."""


class ArgumentError(RingcclError, ValueError):
    """An argument has a value that is not allowed; the message names the argument and the value."""


class ArgumentTypeError(RingcclError, TypeError):
    """An argument has a type that is not allowed (wrong dtype, not an array, ...)."""


class ScheduleError(RingcclError, ValueError):
    """A schedule is ill-formed: a rank or chunk out of range, a rank sending to itself,
    or two transfers writing the same (rank, chunk) slot in one step.

    Attributes:
        step: 0-based step index, or None when the error is not tied to a step.
        rank: the rank concerned, or None.
        chunk: the chunk concerned, or None.
    """

    def __init__(self, message: str, *, step: int | None = None, rank: int | None = None,
                 chunk: int | None = None):
        super().__init__(message)
        self.step, self.rank, self.chunk = step, rank, chunk


class VerificationError(ScheduleError):
    """The symbolic checker found a schedule that does not implement its collective.

    Raised for the first offending step: a rank sending a chunk it does not hold, a contribution
    counted twice, reducing two different chunks together, or (after the last step) a slot whose
    contributions differ from the collective's postcondition.
    """


class BackendError(RingcclError):
    """A real-process executor failed: wrong process group, mismatched schedule, backend error."""


class PeerError(BackendError):
    """A point-to-point operation with a peer failed mid-collective (the peer died, its
    connection closed, or the backend reported an error).

    Raised on this rank for the first operation that failed; with the executors' default
    ``restore=True`` the caller's tensor is exactly as it was before the call. The process group
    (communicator) must not be used again: destroy it, as after an NCCL timeout.

    Attributes:
        collective, algorithm: what was running.
        step: 0-based step of the schedule at which the operation was posted.
        rank: this rank (in the group).
        peer: the rank (in the group) it was waiting for, or None when a whole step failed.
    """

    def __init__(self, message: str, *, collective: str | None = None,
                 algorithm: str | None = None, step: int | None = None, rank: int | None = None,
                 peer: int | None = None):
        super().__init__(message)
        self.collective, self.algorithm = collective, algorithm
        self.step, self.rank, self.peer = step, rank, peer


class RingcclTimeout(PeerError, TimeoutError):
    """A wait for a peer ran past the timeout (the group's, or the ``timeout=`` argument).

    Same attributes as :class:`PeerError`; also a builtin :class:`TimeoutError`.
    """


class ConsistencyError(BackendError, ValueError):
    """The ranks of a group called different collectives (collective, algorithm, op, dtype,
    count or call sequence differ): found by the opt-in cross-rank check (``check=True`` or
    ``RINGCCL_DEBUG=1``) before any data moves, and raised identically on every rank.

    Attributes:
        fingerprints: one dict per rank, in group rank order.
    """

    def __init__(self, message: str, fingerprints: list | None = None):
        super().__init__(message)
        self.fingerprints = fingerprints or []


class WorkerError(BackendError):
    """A worker process started by a launcher raised; the message is one line, "rank R:
    ExceptionType: message" (plus the worker's traceback when the launcher was asked to be
    verbose).

    Attributes:
        rank: the worker's rank.
        exc_type: the name of the exception it raised ("ArgumentError", "MemoryError", ...).
        worker_traceback: its formatted traceback (always kept, printed only when asked).
    """

    def __init__(self, message: str, *, rank: int | None = None, exc_type: str | None = None,
                 worker_traceback: str | None = None):
        super().__init__(message)
        self.rank, self.exc_type, self.worker_traceback = rank, exc_type, worker_traceback


class Interrupted(KeyboardInterrupt):
    """A launcher was interrupted (Ctrl-C/SIGINT, or SIGTERM) and ended its workers first.

    A :class:`KeyboardInterrupt`, not a :class:`RingcclError`: an interrupt is no error (the
    CLI exits 130, as shells do for SIGINT), and ``except KeyboardInterrupt`` still sees it.

    Attributes:
        partial: what the launcher had received before the interrupt (bench rows, progress
            events), in arrival order.
    """

    def __init__(self, message: str = "interrupted", *, partial: list | None = None):
        super().__init__(message)
        self.partial = list(partial or [])
