"""The dtypes each backend's own collective (the ``builtin`` of ``bench``, the baseline of
``run``) takes, so that ``run`` and ``bench`` refuse another before any process starts instead
of failing in every worker."""

from __future__ import annotations

from ..errors import ArgumentError
from ..ops import SUPPORTED_DTYPES

__all__ = ["BUILTIN_DTYPES", "check_builtin_dtype"]

#: backend -> (dtypes of :data:`ringccl.ops.SUPPORTED_DTYPES` its own collectives take, where
#: that is written). A backend not listed is not checked here.
BUILTIN_DTYPES: dict[str, tuple[tuple[str, ...], str]] = {
    # torch/csrc/distributed/c10d/ProcessGroupGloo.hpp, GENERATE_ALL_TYPES: Float, Double,
    # Half, BFloat16, Char, Byte, Bool, Int, Long; no Short, so every gloo collective raises
    # "Invalid scalar type" on int16 (torch 2.13, every collective of ringccl bench)
    "gloo": (("float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"),
             "torch's ProcessGroupGloo dispatches on float16, float32, float64, bfloat16, int8, "
             "uint8, bool, int32 and int64 only"),
    # MPI 4.1 predefines no 16-bit floating datatype (MPIX_C_FLOAT16 is an extension that
    # Open MPI 4.1 lacks), and MPI's collectives need a predefined one: mpi4py's
    # Datatype.fromcode("e") raises MPI_ERR_TYPE (Open MPI 4.1.4, mpi4py 4.1)
    "mpi": (tuple(d for d in SUPPORTED_DTYPES if d != "float16"),
            "the MPI standard predefines no 16-bit floating datatype for MPI's collectives"),
}


def check_builtin_dtype(backend: str, dtype: str, flag: str, way_out: str) -> None:
    """Refuse ``dtype`` where ``backend``'s own collective does not take it.

    Args:
        flag: the dtype option as the command names it (``--dtype``, ``-d/--dtype``).
        way_out: what the user can do instead (``"leave builtin out of -a"``).
    Raises:
        ArgumentError: naming the flag, the dtype, the backend, why, and the dtypes it takes.
    """
    if backend not in BUILTIN_DTYPES:
        return
    taken, why = BUILTIN_DTYPES[backend]
    if dtype in taken:
        return
    name = "MPI" if backend == "mpi" else backend
    raise ArgumentError(f"{flag} {dtype}: {name}'s builtin collective does not take {dtype} "
                        f"({why}); it takes {', '.join(taken)}; {way_out}")
