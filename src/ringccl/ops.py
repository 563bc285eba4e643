"""Reduce operations and dtype rules shared by every executor.

``ReduceOp`` mirrors ``torch.distributed.ReduceOp`` (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR).
Rules (as torch.distributed / NCCL): AVG needs a floating dtype; the bitwise ops need an integer
or bool dtype. On bool, SUM and MAX are logical or, PRODUCT and MIN logical and (numpy's rules).
Integer SUM and PRODUCT wrap around on overflow, as numpy and torch do.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentTypeError

__all__ = ["ReduceOp", "SUPPORTED_DTYPES", "parse_op", "check_dtype", "check_op_dtype", "identity",
           "ufunc"]

#: dtypes every executor supports (torch adds bfloat16 in ringccl.torch).
SUPPORTED_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                    "bool")


class ReduceOp(str, enum.Enum):
    """Elementwise reduction applied when a transfer is a reduce (torch.distributed names)."""

    SUM = "sum"
    PRODUCT = "prod"
    MIN = "min"
    MAX = "max"
    AVG = "avg"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"

    def __str__(self) -> str:  # "sum", as printed by the CLI and in error messages
        return self.value


_ALIASES = {"sum": ReduceOp.SUM, "prod": ReduceOp.PRODUCT, "product": ReduceOp.PRODUCT,
            "min": ReduceOp.MIN, "max": ReduceOp.MAX, "avg": ReduceOp.AVG, "mean": ReduceOp.AVG,
            "band": ReduceOp.BAND, "bor": ReduceOp.BOR, "bxor": ReduceOp.BXOR}

_UFUNC = {ReduceOp.SUM: np.add, ReduceOp.AVG: np.add, ReduceOp.PRODUCT: np.multiply,
          ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum, ReduceOp.BAND: np.bitwise_and,
          ReduceOp.BOR: np.bitwise_or, ReduceOp.BXOR: np.bitwise_xor}


def parse_op(op: Any) -> ReduceOp:
    """Return the ``ReduceOp`` for ``op``: a ReduceOp, a name ("sum", "max", ...), or a
    ``torch.distributed.ReduceOp`` member.

    Raises:
        ArgumentError: unknown name (the message lists the valid ones).
    """
    if isinstance(op, ReduceOp):
        return op
    name = getattr(op, "name", None)  # torch.distributed.ReduceOp.SUM has .name == "SUM"
    key = (name if isinstance(name, str) else str(op)).strip().lower()
    key = key.rsplit(".", 1)[-1]  # "ReduceOp.SUM" -> "sum"
    if key not in _ALIASES:
        raise ArgumentError(f"op={op!r} is not a reduce op; expected one of "
                            f"{', '.join(o.value for o in ReduceOp)}")
    return _ALIASES[key]


def check_dtype(dtype: Any, argument: str = "dtype") -> np.dtype:
    """Return ``np.dtype(dtype)`` if ringccl supports it.

    Raises:
        ArgumentTypeError: unsupported dtype (the message lists the supported ones).
    """
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise ArgumentTypeError(f"{argument}={dtype!r} is not a dtype; expected one of "
                                f"{', '.join(SUPPORTED_DTYPES)}") from exc
    if dt.name not in SUPPORTED_DTYPES:
        raise ArgumentTypeError(f"{argument}={dt.name} is not supported; expected one of "
                                f"{', '.join(SUPPORTED_DTYPES)}")
    return dt


def check_op_dtype(op: ReduceOp, dtype: Any, argument: str = "op") -> None:
    """Refuse combinations torch.distributed refuses: AVG on integers/bool, bitwise ops on floats.

    ``dtype``: a numpy dtype or anything with ``is_floating_point`` (a ``torch.dtype``, so
    ringccl.torch shares this check, bfloat16 included).

    Raises:
        ArgumentError: the combination is not allowed.
    """
    is_float = getattr(dtype, "is_floating_point", None)
    if is_float is None:
        dtype = np.dtype(dtype)
        is_float, name = dtype.kind == "f", dtype.name
    else:
        name = str(dtype).replace("torch.", "")
    if op is ReduceOp.AVG and not is_float:
        raise ArgumentError(f"{argument}=avg needs a floating dtype, got {name}; "
                            "use sum and divide, or convert to float")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and is_float:
        raise ArgumentError(f"{argument}={op.value} is bitwise and needs an integer or bool dtype, "
                            f"got {name}")


def ufunc(op: ReduceOp) -> np.ufunc:
    """The numpy ufunc that combines two partial results (AVG sums; the executor divides last)."""
    return _UFUNC[op]


def identity(op: ReduceOp, dtype: np.dtype):
    """The identity element of ``op`` on ``dtype`` (used to pad uneven chunks)."""
    dtype = np.dtype(dtype)
    if op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.BOR, ReduceOp.BXOR):
        return dtype.type(0)
    if op is ReduceOp.PRODUCT:
        return dtype.type(1)
    if dtype.kind == "b":
        return np.bool_(op in (ReduceOp.MIN, ReduceOp.BAND))
    if dtype.kind == "f":
        if op is ReduceOp.MIN:
            return dtype.type(np.inf)
        if op is ReduceOp.MAX:
            return dtype.type(-np.inf)
    info = np.iinfo(dtype)
    if op is ReduceOp.MIN:
        return dtype.type(info.max)
    if op is ReduceOp.MAX:
        return dtype.type(info.min)
    # BAND: all bits set
    return dtype.type(-1) if info.min < 0 else dtype.type(info.max)
