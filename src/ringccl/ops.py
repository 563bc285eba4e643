"""Reduce operations and dtype rules shared by every executor.

``ReduceOp`` mirrors ``torch.distributed.ReduceOp`` (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR).
Rules (as torch.distributed / NCCL): AVG needs a floating dtype; the bitwise ops need an integer
or bool dtype. On bool, SUM and MAX are logical or, PRODUCT and MIN logical and (numpy's rules).
Integer SUM and PRODUCT wrap around on overflow, as numpy and torch do (two's complement modulo
2^bits: an int8 sum of 100 + 100 is -56, exactly ``numpy.add`` on int8; no error, no warning).
Floating ops follow IEEE 754: a NaN operand makes a sum or product NaN, +inf + -inf is NaN, and
min/max propagate NaN (``numpy.minimum``/``numpy.maximum`` and ``torch.minimum``/``torch.maximum``
semantics, not ``fmin``/``fmax``): a NaN on any rank makes that element NaN on every rank that
receives the reduction.

Floating sums may accumulate in a wider dtype (``accumulate_dtype=``, see
:func:`check_accumulate_dtype` and :func:`ringccl.sim.fp_error_bound`).
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentTypeError

__all__ = ["ReduceOp", "SUPPORTED_DTYPES", "parse_op", "check_dtype", "check_op_dtype", "identity",
           "ufunc", "FLOAT_FORMATS", "check_accumulate_dtype"]

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
    """Return the ``ReduceOp`` for ``op``: a ReduceOp, a name ("sum", "max", ...; "product" and
    "mean" too, in any case), or a ``torch.distributed.ReduceOp`` member.

    Raises:
        ArgumentError: unknown name (the message lists the valid ones).
    """
    if isinstance(op, ReduceOp):
        return op
    name = getattr(op, "name", None)  # torch.distributed.ReduceOp.SUM has .name == "SUM"
    if name is None and hasattr(op, "op"):   # a torch ReduceOp object (e.g. PREMUL_SUM's)
        name = getattr(op.op, "name", None)
    key = (name if isinstance(name, str) else str(op)).strip().lower()
    key = key.rsplit(".", 1)[-1]  # "ReduceOp.SUM" -> "sum"
    if key not in _ALIASES:
        expected = ", ".join(o.value for o in ReduceOp) + " (also product, mean; any case)"
        if isinstance(name, str):  # a torch ReduceOp member: its name, not its repr
            raise ArgumentError(f"op={name} is not supported by ringccl; expected one of "
                                f"{expected}")
        raise ArgumentError(f"op={op!r} is not a reduce op; expected one of {expected}")
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


#: floating formats: name -> (precision p in bits incl. the implicit bit, exponent bits).
#: unit roundoff u = 2^-p (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.,
#: section 2.1): float16 2^-11, bfloat16 2^-8, float32 2^-24, float64 2^-53.
FLOAT_FORMATS = {"float16": (11, 5), "bfloat16": (8, 8), "float32": (24, 8), "float64": (53, 11)}


def _dtype_name(dtype: Any) -> str | None:
    """'float32' for np.float32, np.dtype('float32'), 'float32', torch.float32; None if none."""
    text = str(dtype)
    if text.startswith("torch."):
        return text[len("torch."):]
    if isinstance(dtype, str) and dtype in FLOAT_FORMATS:
        return dtype
    try:
        return np.dtype(dtype).name
    except TypeError:
        return None


def check_accumulate_dtype(accumulate_dtype: Any, dtype: Any, collective: str,
                           reduces: bool, argument: str = "accumulate_dtype") -> str | None:
    """Validate a request to accumulate a reduction in a wider floating dtype.

    Args:
        accumulate_dtype: None, or a floating dtype as a name ("float32"), numpy dtype or type
            (np.float32) or torch dtype (torch.float32).
        dtype: the input's dtype (numpy or torch).
        collective: the collective's name, for messages.
        reduces: whether the collective reduces (only reductions accumulate).

    Returns:
        None (no accumulate dtype) or the accumulate dtype's name, a key of
        :data:`FLOAT_FORMATS` whose precision and exponent range are both at least the input's
        (accumulating in the input's own dtype is allowed and changes nothing).
    Raises:
        ArgumentError: not a dtype, not floating, narrower than the input, an integer or bool
            input, or a collective that does not reduce. The message names ``argument``, the value
            and what is allowed.
    """
    if accumulate_dtype is None:
        return None
    name = _dtype_name(accumulate_dtype)
    source = _dtype_name(dtype)
    if not reduces:
        raise ArgumentError(f"{argument}={accumulate_dtype!r} applies to reducing collectives "
                            f"only (all_reduce, reduce_scatter, reduce), not {collective}")
    if source not in FLOAT_FORMATS:
        raise ArgumentError(f"{argument}={accumulate_dtype!r} needs a floating input, got "
                            f"{source}: integer sums are exact (modulo 2^bits) and wrap as numpy "
                            "and torch do")
    p, e = FLOAT_FORMATS[source]
    allowed = [k for k, (q, f) in FLOAT_FORMATS.items() if q >= p and f >= e]
    if name not in FLOAT_FORMATS:
        raise ArgumentError(f"{argument}={accumulate_dtype!r} is not a floating dtype; expected "
                            f"None or one of {', '.join(allowed)} (at least as wide as the "
                            f"input's {source})")
    if name not in allowed:
        raise ArgumentError(f"{argument}={name} is narrower than the input's {source}; expected "
                            f"None or one of {', '.join(allowed)} (precision and exponent range "
                            "at least the input's)")
    return name


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
