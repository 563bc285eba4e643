"""The torch backend's array dialect: torch tensors as the engine and the front end see them.

:class:`TorchOps` is the engine's array dialect (:class:`ringccl.engine.ArrayOps`) on 1-D
tensors: reductions are torch's ops (:func:`combine_fn`, :func:`combine_into_fn`), so every
transport of the backend reduces with the same kernels in the same operand order (bitwise the
same results).
:class:`TorchArrays` is the front end's (:class:`ringccl.frontend.ArrayDialect`): the checks
whose messages name ringccl.torch's arguments, flat views, scratch, copies, casts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ...engine import kept_buffer
from ...errors import ArgumentError, ArgumentTypeError
from ...ops import ReduceOp, check_accumulate_dtype, check_op_dtype, parse_op

__all__ = ["SUPPORTED_DTYPES", "combine_fn", "combine_into_fn", "TorchOps", "OPS", "TorchArrays",
           "check_tensor"]


def combine_fn(op: ReduceOp):
    """In-place ``dst = op(dst, src)`` on torch tensors (AVG sums; the caller divides last)."""
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        return lambda dst, src: dst.add_(src)
    if op is ReduceOp.PRODUCT:
        return lambda dst, src: dst.mul_(src)
    if op is ReduceOp.MIN:
        return lambda dst, src: torch.minimum(dst, src, out=dst)
    if op is ReduceOp.MAX:
        return lambda dst, src: torch.maximum(dst, src, out=dst)
    if op is ReduceOp.BAND:
        return lambda dst, src: dst.bitwise_and_(src)
    if op is ReduceOp.BOR:
        return lambda dst, src: dst.bitwise_or_(src)
    return lambda dst, src: dst.bitwise_xor_(src)


_INTO = {ReduceOp.SUM: torch.add, ReduceOp.AVG: torch.add, ReduceOp.PRODUCT: torch.mul,
         ReduceOp.MIN: torch.minimum, ReduceOp.MAX: torch.maximum,
         ReduceOp.BAND: torch.bitwise_and, ReduceOp.BOR: torch.bitwise_or,
         ReduceOp.BXOR: torch.bitwise_xor}


def combine_into_fn(op: ReduceOp):
    """``dst = op(a, b)`` into ``dst`` on torch tensors (``dst`` may be ``a`` or ``b``):
    :func:`combine_fn`'s operation on a ``dst`` that held ``a`` (the same kernel, operands in
    the same order)."""
    f = _INTO[op]
    return lambda dst, a, b: f(a, b, out=dst)


class TorchOps:
    """The engine's array dialect on 1-D torch tensors (:class:`ringccl.engine.ArrayOps`)."""

    @staticmethod
    def empty(like: torch.Tensor, elements: int) -> torch.Tensor:
        return like.new_empty(elements)

    @staticmethod
    def copy(dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)

    combine = staticmethod(combine_fn)
    combine_into = staticmethod(combine_into_fn)

    @staticmethod
    def kind(a: torch.Tensor):
        return (a.dtype, a.device)


OPS = TorchOps()

#: the dtypes ringccl.torch moves (its collectives', the backend's and shm_empty's check)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                    torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_tensor(t: Any, argument: str, written: bool = False) -> torch.Tensor:
    """A tensor of a supported dtype; ``written``: the call writes into it, so no two of its
    elements may share memory (an ``expand``ed view). Any strides are fine otherwise:
    non-contiguous tensors are handled through a contiguous copy that is written back."""
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(f"{argument} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise ArgumentTypeError(f"{argument}.dtype={t.dtype} is not supported; expected one of "
                                f"{', '.join(str(d).replace('torch.', '') for d in SUPPORTED_DTYPES)}")
    if t.layout is not torch.strided or t.is_nested:
        raise ArgumentTypeError(f"{argument} is a {'nested' if t.is_nested else str(t.layout)} "
                                "tensor; ringccl.torch moves dense (torch.strided) tensors: pass "
                                "a dense one (e.g. .to_dense())")
    if written and any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape)):
        raise ArgumentError(f"{argument} (shape {tuple(t.shape)}, stride {t.stride()}) has "
                            "elements that share memory (an expanded view) and cannot be written; "
                            "pass a tensor with its own storage (e.g. .clone())")
    return t


class TorchArrays:
    """The front end's array dialect on torch tensors (:class:`ringccl.frontend.ArrayDialect`):
    one class for ringccl.torch's functions and the torch.distributed backend, which add their
    group adapters and executors to it."""

    size_word = "numel()"
    buffer_name = "tensor"

    @staticmethod
    def check(t, argument: str, written: bool = False, contiguous: bool = False):
        return check_tensor(t, argument, written)   # any strides: handled through a copy

    @staticmethod
    def check_1d(t, argument: str):
        check_tensor(t, argument)
        if t.dim() != 1 or not t.is_contiguous():
            raise ArgumentError(f"{argument} must be 1-D and contiguous, got shape "
                                f"{tuple(t.shape)}, stride {t.stride()}")
        return t

    @staticmethod
    def check_pair(a, b, name_a: str, name_b: str) -> None:
        if a.dtype != b.dtype:
            raise ArgumentTypeError(f"{name_a}.dtype={a.dtype} differs from {name_b}.dtype="
                                    f"{b.dtype}; they must be the same")
        if a.device != b.device:
            raise ArgumentError(f"{name_a}.device={a.device} differs from {name_b}.device="
                                f"{b.device}; they must be the same")

    @staticmethod
    def check_op(op, dtype, argument: str = "op") -> ReduceOp:
        reduce_op = parse_op(op)
        check_op_dtype(reduce_op, dtype, argument)
        return reduce_op

    @staticmethod
    def accumulate(accumulate_dtype, dtype, collective: str):
        """The torch dtype to reduce in (None: the tensor's own), validated
        (:func:`ringccl.ops.check_accumulate_dtype`)."""
        name = check_accumulate_dtype(accumulate_dtype, dtype, collective, True)
        if name is None:
            return None
        acc = getattr(torch, name)
        return None if acc == dtype else acc

    def check_blocks(self, tensors, argument: str, world_size: int, like, written: bool,
                     like_name: str = "tensor", same_numel: bool = True) -> list:
        """A list of world_size tensors with ``like``'s dtype and device (None: the first
        entry's) and, with ``same_numel``, its numel; ``written``: as :func:`check_tensor`."""
        if tensors is None:  # missing, e.g. scatter_list=None on the source rank
            raise ArgumentError(f"{argument} must be a list of world_size={world_size} tensors, "
                                "got NoneType")
        if not isinstance(tensors, (list, tuple)):
            raise ArgumentTypeError(f"{argument} must be a list of world_size={world_size} "
                                    f"tensors, got {type(tensors).__name__}")
        if len(tensors) != world_size:
            raise ArgumentError(f"{argument} must be a list of world_size={world_size} tensors, "
                                f"got {type(tensors).__name__} of length {len(tensors)}")
        for i, t in enumerate(tensors):
            check_tensor(t, f"{argument}[{i}]", written)
            self.check_pair(t, tensors[0] if like is None else like, f"{argument}[{i}]",
                            like_name)
            if same_numel and t.numel() != like.numel():
                raise ArgumentError(f"{argument}[{i}] has {t.numel()} elements; every tensor "
                                    f"must have tensor.numel()={like.numel()}")
        return list(tensors)

    @staticmethod
    def no_blocks(blocks, argument: str, rank: int, root_arg: str, root) -> None:
        if blocks:
            which = "source" if root_arg == "src" else "destination"
            raise ArgumentError(f"{argument} must be None on non-{which} ranks (rank "
                                f"{dist.get_rank()} is not {root_arg}={root})")

    @staticmethod
    def overlap_error(inner: str, outer: str, rank: int, k: int) -> ArgumentError:
        return ArgumentError(
            f"{inner} shares memory with {outer} but is not {outer}'s block rank {rank} "
            f"(elements {rank * k}:{(rank + 1) * k} of the flattened {outer.split('_')[0]}); "
            "pass that exact view for in place, or a separate tensor")

    numel = staticmethod(torch.Tensor.numel)

    @staticmethod
    def dtype(t):
        return t.dtype

    @staticmethod
    def dtype_name(dtype) -> str:
        return str(dtype).replace("torch.", "")

    contiguous = staticmethod(torch.Tensor.is_contiguous)

    @staticmethod
    def view1d(t):
        return t.view(-1)

    @staticmethod
    def flat(t):
        return t.reshape(-1)

    @staticmethod
    def empty(like, n: int, dtype=None):
        return like.new_empty(n, dtype=dtype or like.dtype)

    @staticmethod
    def scratch(like, n: int):
        """A private working buffer kept between calls (contents undefined; per thread, dtype
        and device; ``ringccl.clear_caches`` frees it), as ringccl.mpi's: a fresh one per
        call cost page faults on every call (a 64 MiB all_to_all's 128 MiB buffer)."""
        return kept_buffer(OPS, like, n, "work")

    @staticmethod
    def cast(flat, dtype):
        return flat.to(dtype, copy=True)

    @staticmethod
    def copy(dst, src) -> None:
        dst.copy_(src)

    @staticmethod
    def copy_into(dst, flat) -> None:
        dst.copy_(flat.view(dst.shape))

    @staticmethod
    def divide(t, n: int) -> None:
        t.div_(n)

    @staticmethod
    def cat(flats: list):
        return torch.cat(flats)

    @staticmethod
    def span(t) -> tuple[int, int]:
        """The byte addresses ``[lo, hi)`` that ``t``'s elements lie in ((0, 0): none)."""
        if not t.numel():
            return 0, 0
        lo = hi = 0
        for n, s in zip(t.shape, t.stride()):
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
        start, size = t.data_ptr(), t.element_size()
        return start + lo * size, start + (hi + 1) * size

    @staticmethod
    def shares_memory(a, b) -> bool:
        """Whether ``a`` and ``b`` have an element (a byte) in common: exact for contiguous
        tensors (byte ranges) and for CPU views of any strides (numpy's bounded solver,
        ``numpy.shares_memory``); conservative (their byte ranges meet) where it cannot tell."""
        if a.device != b.device:
            return False
        (a0, a1), (b0, b1) = TorchArrays.span(a), TorchArrays.span(b)
        if not (a0 < b1 and b0 < a1):
            return False
        if (a.is_contiguous() and b.is_contiguous()) or a.device.type != "cpu":
            return True
        try:
            return bool(np.shares_memory(_bytes_view(a), _bytes_view(b), max_work=1 << 20))
        except _TOO_HARD:
            return True

    @staticmethod
    def same(a, b) -> bool:
        """Whether ``a`` and ``b`` are the same elements in the same layout (one view)."""
        return (a.device == b.device and a.dtype == b.dtype and a.data_ptr() == b.data_ptr()
                and a.shape == b.shape and a.stride() == b.stride())

    @staticmethod
    def is_block(a, buffer, index: int) -> bool:
        """Whether ``a`` is exactly block ``index`` (of a.numel() elements) of the 1-D
        contiguous ``buffer``."""
        k = a.numel()
        return (a.is_contiguous() and a.device == buffer.device and a.dtype == buffer.dtype
                and (index + 1) * k <= buffer.numel()
                and a.data_ptr() == buffer.data_ptr() + index * k * buffer.element_size())

    @staticmethod
    def rows(t) -> tuple[int, int]:
        return (t.shape[0] if t.dim() else 1), math.prod(t.shape[1:])


_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_TOO_HARD = getattr(getattr(np, "exceptions", np), "TooHardError", RuntimeError)


def _bytes_view(t):
    """A numpy view of a CPU tensor's own elements, strides kept (any dtype: as integers of
    its size)."""
    return t.detach().view(_INTS[t.element_size()]).numpy()
