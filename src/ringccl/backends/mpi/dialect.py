"""The MPI backend's array dialect: numpy arrays as the front end sees them
(:class:`ringccl.frontend.ArrayDialect`), with the checks whose messages name ringccl.mpi's
arguments, and the engine's array ops on numpy arrays (:class:`NumpyOps`). Importing it does
not import mpi4py."""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import caches
from ...engine import kept_buffer
from ...errors import ArgumentError, ArgumentTypeError
from ...ops import (SUPPORTED_DTYPES, ReduceOp, check_accumulate_dtype, check_dtype,
                     check_op_dtype, parse_op, ufunc)

__all__ = ["NumpyArrays", "NumpyOps", "OPS", "check_array", "clear_checked_ops"]

_DTYPES = frozenset(np.dtype(d) for d in SUPPORTED_DTYPES)


def check_array(a: Any, argument: str, writable: bool = True,
                contiguous: bool = True) -> np.ndarray:
    """``a`` if it is a numpy array of a supported dtype (C-contiguous and writable unless
    told otherwise: arrays only read, or written through a copy, may be neither)."""
    if (type(a) is np.ndarray and a.dtype in _DTYPES and a.flags.c_contiguous
            and a.flags.writeable):
        return a  # the common case, checked cheaply: this runs on every call
    if not isinstance(a, np.ndarray):
        raise ArgumentTypeError(f"{argument} must be a numpy.ndarray, got {type(a).__name__}")
    check_dtype(a.dtype, f"{argument}.dtype")
    # read-only first: a broadcast (stride-0) view is both, and a copy would not be the output
    if writable and not a.flags.writeable:
        raise ArgumentError(f"{argument} (shape {a.shape}) is read-only; it must be writeable")
    if contiguous and not a.flags.c_contiguous:
        raise ArgumentError(f"{argument} (shape {a.shape}, strides {a.strides}) must be "
                            "C-contiguous, as MPI buffers are (use numpy.ascontiguousarray)")
    return a


_checked_ops: dict = {}   # (op, dtype) -> ReduceOp, checked once


def clear_checked_ops() -> None:
    """Forget the (op, dtype) pairs :meth:`NumpyArrays.check_op` has checked."""
    _checked_ops.clear()


class NumpyArrays:
    """ringccl.mpi's array dialect for the flows (:class:`ringccl.frontend.ArrayDialect`)."""

    size_word = "size"
    buffer_name = "buffer"

    @staticmethod
    def check(a, argument: str, written: bool = False, contiguous: bool = False):
        return check_array(a, argument, writable=written, contiguous=contiguous)

    @staticmethod
    def check_1d(a, argument: str):
        check_array(a, argument)
        if a.ndim != 1:
            raise ArgumentError(f"{argument} must be 1-D, got shape {a.shape}")
        return a

    @staticmethod
    def check_pair(a, b, name_a: str, name_b: str) -> None:
        if a.dtype != b.dtype:
            raise ArgumentTypeError(f"{name_a}.dtype={a.dtype} differs from {name_b}.dtype="
                                    f"{b.dtype}")

    @staticmethod
    def check_op(op, dtype) -> ReduceOp:
        try:
            return _checked_ops[op, dtype]
        except (KeyError, TypeError):  # TypeError: an unhashable op, parsed (and refused) below
            pass
        reduce_op = parse_op(op)
        check_op_dtype(reduce_op, dtype)
        if isinstance(op, (str, ReduceOp)):
            _checked_ops[op, dtype] = reduce_op
        return reduce_op

    @staticmethod
    def accumulate(accumulate_dtype, dtype, collective: str):
        """The numpy dtype to reduce in (None: the buffer's own), validated
        (:func:`ringccl.ops.check_accumulate_dtype`)."""
        if accumulate_dtype is None:
            return None
        name = check_accumulate_dtype(accumulate_dtype, dtype, collective, True)
        return None if name is None or np.dtype(name) == dtype else np.dtype(name)

    def check_blocks(self, blocks, argument: str, world_size: int, like, written: bool) -> list:
        """A root's scatter_list/gather_list: world_size arrays of like.size elements each, or
        one array of world_size·like.size elements (MPI's send/receive buffer, blocks in rank
        order)."""
        if isinstance(blocks, np.ndarray):
            check_array(blocks, argument, writable=written, contiguous=False)
            self.check_pair(blocks, like, argument, "buffer")
            if blocks.size != world_size * like.size:
                raise ArgumentError(f"{argument} has {blocks.size} elements; one array must "
                                    f"have world_size * buffer.size = {world_size} * "
                                    f"{like.size}")
            return [blocks]
        if not isinstance(blocks, (list, tuple)) or len(blocks) != world_size:
            raise ArgumentError(f"{argument} must be a list of world_size={world_size} arrays "
                                f"(or one array of world_size * buffer.size elements), got "
                                f"{type(blocks).__name__}"
                                + (f" of length {len(blocks)}" if hasattr(blocks, "__len__")
                                   else ""))
        for i, b in enumerate(blocks):
            check_array(b, f"{argument}[{i}]", writable=written, contiguous=False)
            self.check_pair(b, like, f"{argument}[{i}]", "buffer")
            if b.size != like.size:
                raise ArgumentError(f"{argument}[{i}] has {b.size} elements; every array must "
                                    f"have buffer.size={like.size}")
        return list(blocks)

    @staticmethod
    def no_blocks(blocks, argument: str, rank: int, root_arg: str, root) -> None:
        if blocks is None or (isinstance(blocks, (list, tuple)) and not blocks):
            return
        raise ArgumentError(f"{argument} must be None on ranks other than {root_arg}={root} "
                            f"(this is rank {rank}), as in torch.distributed")

    @staticmethod
    def overlap_error(inner: str, outer: str, rank: int, k: int) -> ArgumentError:
        where = " of a C-contiguous input" if outer == "input" else ""
        return ArgumentError(f"{inner} overlaps {outer} but is not exactly {outer}'s block rank "
                             f"(elements {rank * k}:{(rank + 1) * k}{where}); pass that view, "
                             "or arrays that do not overlap")

    @staticmethod
    def numel(a) -> int:
        return a.size

    @staticmethod
    def dtype(a):
        return a.dtype

    dtype_name = staticmethod(str)

    @staticmethod
    def contiguous(a) -> bool:
        return a.flags.c_contiguous

    @staticmethod
    def view1d(a):
        return a.reshape(-1)

    @staticmethod
    def flat(a):
        return a.reshape(-1)

    @staticmethod
    def empty(like, n: int, dtype=None):
        return np.empty(n, dtype=dtype or like.dtype)

    @staticmethod
    def scratch(like, n: int):
        """A working array kept between calls (contents undefined): allocating per call costs
        page faults on every call."""
        return kept_buffer(_KEPT, like, n, "work")

    @staticmethod
    def cast(flat, dtype):
        return flat.astype(dtype)

    @staticmethod
    def copy(dst, src) -> None:
        dst[...] = src

    @staticmethod
    def copy_into(dst, flat) -> None:
        dst[...] = flat.reshape(dst.shape)

    @staticmethod
    def divide(a, n: int) -> None:
        np.divide(a, n, out=a)

    @staticmethod
    def cat(flats: list):
        return np.concatenate(flats)

    shares_memory = staticmethod(np.shares_memory)

    @staticmethod
    def span(a) -> tuple[int, int]:
        """The byte addresses ``[lo, hi)`` that ``a``'s elements lie in ((0, 0): none)."""
        if not a.size:
            return 0, 0
        lo = hi = 0
        for n, s in zip(a.shape, a.strides):
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
        start = a.__array_interface__["data"][0]
        return start + lo, start + hi + a.itemsize

    @staticmethod
    def same(a, b) -> bool:
        """Whether ``a`` and ``b`` are the same elements in the same layout (one view)."""
        return (a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides
                and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])

    @staticmethod
    def is_block(a, buffer, index: int) -> bool:
        """True if ``a`` is exactly block ``index`` (of a.size elements) of the 1-D ``buffer``."""
        if not a.flags.c_contiguous or not np.may_share_memory(a, buffer):
            return False
        block = buffer[index * a.size:(index + 1) * a.size]
        return (a.__array_interface__["data"][0] == block.__array_interface__["data"][0]
                and a.size == block.size)

    @staticmethod
    def rows(a) -> tuple[int, int]:
        return (a.shape[0] if a.ndim else 1), int(np.prod(a.shape[1:], dtype=np.int64))


class _KeptOps:
    """Plain numpy arrays for the kept working buffers (no mpi4py needed)."""

    empty = staticmethod(lambda like, n: np.empty(n, dtype=like.dtype))
    kind = staticmethod(lambda a: a.dtype)


_KEPT = _KeptOps()


class NumpyOps:
    """The engine's array dialect on 1-D numpy arrays (:class:`ringccl.engine.ArrayOps`)."""

    @staticmethod
    def empty(like: np.ndarray, elements: int) -> np.ndarray:
        """64-byte aligned (a cache line; what MPI's single copy moves fastest)."""
        nbytes = elements * like.itemsize
        raw = np.empty(nbytes + 64, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64
        return raw[start:start + nbytes].view(like.dtype)

    @staticmethod
    def copy(dst: np.ndarray, src: np.ndarray) -> None:
        dst[...] = src

    @staticmethod
    def combine(op: ReduceOp):
        return _combine(op)

    @staticmethod
    def combine_into(op: ReduceOp):
        return _combine_into(op)

    @staticmethod
    def kind(a: np.ndarray):
        return a.dtype


@caches.memoize(maxsize=32)
def _combine(op: ReduceOp):
    """In-place ``dst = op(dst, src)`` for numpy arrays: one function per op, made once (the
    engine asks for it at every call)."""
    f = ufunc(op)
    return lambda dst, src: f(dst, src, out=dst)


@caches.memoize(maxsize=32)
def _combine_into(op: ReduceOp):
    """``dst = op(a, b)`` into ``dst`` for numpy arrays (:func:`_combine`'s ufunc)."""
    f = ufunc(op)
    return lambda dst, a, b: f(a, b, out=dst)


OPS = NumpyOps()
