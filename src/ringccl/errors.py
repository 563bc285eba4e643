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
