"""The compiled lane's native replay: a :class:`~ringccl.backends.shm.lane.Lane` as a program
for the C loop of ``_lanec`` (``_lanec.c``), and the check that decides, when a lane is
lowered, whether its reduction may run there.

``_lanec`` is an optional extension (``setup.py``: built by the install when a C compiler is
there). Without it, or for a lane it cannot run bitwise, the lane replays in Python
(:meth:`Lane._run_python`, the same operations on the same operands in the same order).

Bitwise: the C reductions are the same IEEE operations as numpy's and torch's, so only the
NaN that survives when both operands are NaN (and, for min/max, which zero) can differ. At
lowering, :func:`reduction` runs the backend's own functions and the C one on probes (every
pair of NaN payloads and signs, signalling NaNs, ±0, ±inf, subnormals, overflow, the integers'
extremes) at lengths 1-40, 63-65, 255-257 and several offsets, for each NaN rule the C loop
has, in both operand orders the lane uses (the IR's: ``dst := dst ⊕ src``, the backend's
combine, and ``dst := src ⊕ dst`` for a receive from a peer below, its combine_into); a
(backend, dtype, op) that some order does not match (torch's float product and min/max: their
vector and scalar loops keep different NaNs and zeros) stays in Python.
"""

from __future__ import annotations

import logging
import re
import struct
from typing import Any, Callable

import numpy as np

from ... import caches, environment
from ...errors import ArgumentError
from ...ops import ReduceOp
from ...resources import usable_cores
from .group import LINE, RING

try:
    from . import _lanec
except ImportError:   # no compiler at install time: the Python replay (same bits)
    _lanec = None
    logging.getLogger(__name__).debug("ringccl.backends.shm._lanec is not built: the compiled "
                                      "lane replays in Python")

__all__ = ["available", "reduction", "program", "native_runs", "threads", "threads_setting",
           "NATIVE_SPIN_POLLS",
           "MAX_THREADS", "DEFAULT_MAX_THREADS", "LOCAL_SIZE_VARIABLES", "DONE", "CANNOT",
           "BUFFER"]

#: polls of a control word in C before the wait returns to Python's bounded wait
#: (:meth:`ShmGroup.wait_word`: timeout, abort word, liveness, yielding the core)
NATIVE_SPIN_POLLS = 256

#: ``RINGCCL_SHM_THREADS``'s largest value (the C pool's size)
MAX_THREADS = 64
#: the default's cap: one thread's copy reaches a fraction of a socket's memory bandwidth
#: (on this project's 2-core test machine two threads copy 1.3x as fast as one), and beyond a
#: few threads per rank the group's threads contend for the same memory channels
DEFAULT_MAX_THREADS = 4

MAGIC = 0x4C414E4543303031
HEADER_WORDS, OP_WORDS = 21, 14
BEGIN_WAIT, PUBLISH, COPY_IN, SEND, RECV, COPY_OUT, END_WAIT, SEND_WAIT = range(1, 9)
DONE, CANNOT, BUFFER = -1, -2, -3
#: launchers' names for the processes on this host (torchrun, ringccl.torch.launch; Open MPI;
#: MPICH and Intel MPI)
LOCAL_SIZE_VARIABLES = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")

if _lanec is not None and tuple(getattr(_lanec, k, None) for k in (
        "HEADER_WORDS", "OP_WORDS", "MAX_THREADS")) != (HEADER_WORDS, OP_WORDS, MAX_THREADS):
    # a build of another version (an editable install is not rebuilt by a checkout): its
    # programs differ, so the lane replays in Python until it is rebuilt
    logging.getLogger(__name__).warning(
        "ringccl.backends.shm._lanec was built from another version of ringccl (program "
        "header of %s words, this version's %s): the compiled lane replays in Python; rebuild "
        "it (pip install -e . or python setup.py build_ext --inplace)",
        getattr(_lanec, "HEADER_WORDS", "?"), HEADER_WORDS)
    _lanec = None

_DTYPES = {np.dtype(d): i for i, d in enumerate(
    (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8))}
_OPS = {ReduceOp.SUM: 0, ReduceOp.AVG: 0, ReduceOp.PRODUCT: 1, ReduceOp.MIN: 2,
        ReduceOp.MAX: 3, ReduceOp.BAND: 4, ReduceOp.BOR: 5, ReduceOp.BXOR: 6}
_verdicts: dict = {}   # (combine, combine_into, dtype, op) -> reduction() or None
caches.register(_verdicts.clear)


def available() -> bool:
    """Whether the C loop was built and imported here."""
    return _lanec is not None


def native_runs() -> int:
    """Calls the C loop completed in this process (tests: the native replay did run)."""
    return _lanec.runs() if _lanec is not None else 0


def _probes(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Operand pairs where a reduction's implementations could differ: every pair of special
    values (both orders), shifted so each pair meets several vector lanes, then random ones."""
    rng = np.random.default_rng(0)
    if dtype.kind == "f":
        bits = np.uint32 if dtype.itemsize == 4 else np.uint64
        top = 1 << (8 * dtype.itemsize - 1)
        info = np.finfo(dtype)
        quiet = (int(np.array(np.nan, dtype).view(bits)) & ~top)
        payload = quiet | 5
        sig = (int(np.array(np.inf, dtype).view(bits))) | 3
        nans = [quiet, quiet | top, payload, payload | top, sig, sig | top]
        special = np.concatenate([np.array(nans, bits).view(dtype), np.array(
            [0.0, -0.0, np.inf, -np.inf, 1.0, -1.5, info.max, -info.max, info.tiny / 4,
             info.eps], dtype)])
        extra = rng.standard_normal(64).astype(dtype) * 1e3
    else:
        info = np.iinfo(dtype)
        special = np.array([0, 1, -1 if info.min else 2, info.min, info.max, info.max // 2 + 3,
                            info.min // 2 - (1 if info.min else 0)], dtype=np.int64).astype(dtype)
        extra = rng.integers(info.min, info.max, 64, dtype=dtype, endpoint=True)
    a, b = np.meshgrid(special, special, indexing="ij")
    a, b = a.ravel(), b.ravel()
    a = np.concatenate([a, np.roll(a, 1), np.roll(a, 7), extra, extra[::-1]])
    b = np.concatenate([b, np.roll(b, 1), np.roll(b, 7), extra[::-1], extra])
    return a, b


def _applies(combine: Callable, combine_into: Callable, left: bool) -> Callable:
    """The backend's ``dst := dst ⊕ src`` (``combine``), or with ``left`` its ``dst := src ⊕
    dst`` (``combine_into``), as a function of (dst, src)."""
    return (lambda d, s: combine_into(d, s, d)) if left else combine


def _matches(apply: Callable, code: int, op: int, rule: int, left: bool, a: np.ndarray,
             b: np.ndarray) -> bool:
    """Whether the C reduction with ``rule`` and ``left`` gives ``apply``'s bits (of
    :func:`_applies`) on the probes, at many lengths and at element offsets from an aligned
    start (a vector loop's peeling)."""
    spans = [(o, n) for o in (0, 1, 3) for n in list(range(1, 41)) + [63, 64, 65]]
    spans += [(o, n) for o in (0, 5) for n in (255, 256, 257, a.size - 5)]
    with np.errstate(all="ignore"):
        for o, n in spans:
            theirs, mine = a.copy(), a.copy()
            apply(theirs[o:o + n], b[o:o + n])
            _lanec.combine(code, op, rule, int(left), mine[o:o + n], b[o:o + n])
            if mine.tobytes() != theirs.tobytes():
                return False
    return True


def _nan_rules(apply: Callable, dtype: np.dtype, left: bool) -> list:
    """The NaN rule (``_lanec.c``'s ``nan_rule``: which operand's NaN survives, by position)
    of ``apply`` (of :func:`_applies`, a float add or mul) read off its results on two NaNs of
    different payloads at lengths 1-129; [] when none fits."""
    bits = np.uint32 if dtype.itemsize == 4 else np.uint64
    quiet = int(np.array(np.nan, dtype).view(bits))
    mine, other = quiet | 1, quiet | 2
    right = mine if left else other   # the right operand's payload: the destination's if left
    seen = {}
    with np.errstate(all="ignore"):
        for n in range(1, 130):
            d = np.full(n, mine, bits).view(dtype)
            apply(d, np.full(n, other, bits).view(dtype))
            got = d.view(bits)
            if not np.all((got == mine) | (got == other)):
                return []
            seen[n] = (got == right).astype(int)
    one, small = int(seen[1][0]), int(seen[2][0])
    rules = [one * 15]   # the same everywhere
    for w in (4, 8, 16, 32, 64):
        body, tail = int(seen[2 * w][0]), int(seen[w + 1][w])
        rule = w << 8 | one | small << 1 | body << 2 | tail << 3
        if all(seen[n][i] == (small if n <= w else body if i < n - n % w else tail)
               for n in range(2, 130) for i in range(n)):
            rules.append(rule)
    return rules


def reduction(combine: Callable, combine_into: Callable, dtype: Any,
              op: ReduceOp) -> tuple | None:
    """``(dtype code, op code, NaN rule, NaN rule with the source on the left)`` when the C
    loop reproduces the backend's ``dst := dst ⊕ src`` (``combine(dst, src)``) and ``dst :=
    src ⊕ dst`` (``combine_into(dst, src, dst)``) on numpy arrays of ``dtype`` bit for bit on
    the probes (module docstring), else None. Checked once per (combine, combine_into, dtype,
    op)."""
    if _lanec is None:
        return None
    dtype = np.dtype(dtype)
    code, opc = _DTYPES.get(dtype), _OPS.get(op)
    if code is None or opc is None or (dtype.kind == "f" and opc >= 4):
        return None
    key = (combine, combine_into, dtype, op)
    if key not in _verdicts:
        a, b = _probes(dtype)
        found = []
        for left in (False, True):
            apply = _applies(combine, combine_into, left)
            rules = (0,) if dtype.kind != "f" else (0, 1) if opc >= 2 else \
                _nan_rules(apply, dtype, left)
            found.append(next((r for r in rules if _matches(apply, code, opc, r, left, a, b)),
                              None))
        _verdicts[key] = None if None in found else (code, opc, *found)
    return _verdicts[key]


def _whole(text: str) -> int | None:
    """``text`` as a count when it is ASCII digits only, else None."""
    return int(text) if re.fullmatch(r"[0-9]+", text) else None


def threads_setting() -> int | None:
    """``RINGCCL_SHM_THREADS`` as a thread count, or None when unset (the default of
    :func:`threads`). Nothing but the variable is read (the check before a first call).

    Raises:
        ArgumentError: the value is not an integer from 1 to :data:`MAX_THREADS`.
    """
    text = (environment.get("RINGCCL_SHM_THREADS") or "").strip()
    if not text:
        return None
    n = _whole(text) or 0
    if not 1 <= n <= MAX_THREADS:
        raise ArgumentError(f"RINGCCL_SHM_THREADS={text!r} must be an integer from 1 to "
                            f"{MAX_THREADS} (threads per rank for a large shared-memory copy "
                            "or reduction; unset: the usable cores shared among the processes "
                            f"on this host, at most {DEFAULT_MAX_THREADS})")
    return n


def threads(world_size: int) -> int:
    """Threads (the calling one included) over which one rank's compiled calls split a large
    copy or reduction: :func:`threads_setting` when set, else the cores this process may use
    (:func:`ringccl.resources.usable_cores`) shared among the processes on this host (the
    group's ``world_size``, or the launcher's count where larger:
    :data:`LOCAL_SIZE_VARIABLES`), at most :data:`DEFAULT_MAX_THREADS`, at least 1. Part of a
    compiled call's signature (a change takes effect at the next call). Only an operation of
    at least 4 MiB is split, in parts of at least 2 MiB (``_lanec.PART_BYTES``: smaller ones
    run at cache speed on one thread); every part is an element range with the bits of the
    whole (docs/shm.md: "Threads for large calls").

    Raises:
        ArgumentError: as :func:`threads_setting`.
    """
    n = threads_setting()
    if n is not None:
        return n
    local = [world_size] + [k for k in (_whole(environment.get(name) or "")
                                        for name in LOCAL_SIZE_VARIABLES) if k is not None]
    return max(1, min(DEFAULT_MAX_THREADS, usable_cores() // max(1, *local)))


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def program(lane, group, reduction: tuple, segment: np.ndarray) -> tuple[bytes, list]:
    """``lane`` (a lowered :class:`~ringccl.backends.shm.lane.Lane`) as the C loop's program
    (int64 words: a header, then one operation of :data:`OP_WORDS` each) and, per operation,
    what Python needs when the loop returns there: ``(kind, peer, word, context)``."""
    g = group
    # the control block's address, taken from a view dropped at once (a held export would
    # keep ShmGroup.close from releasing it; the lane never runs on a closed group)
    ctrl = np.frombuffer(g.w, dtype=np.int64)
    ctrl_at = _address(ctrl)
    del ctrl
    seg_at = _address(segment)
    ops: list = []
    meta: list = []

    def add(kind: int, peer: int = 0, *words: int, context: Any = None) -> None:
        ops.append([kind, peer, *words] + [0] * (OP_WORDS - 2 - len(words)))
        meta.append((kind, peer, words[0] if kind in (BEGIN_WAIT, END_WAIT, SEND_WAIT) else 0,
                     context))

    for peer, word in lane.released_words:
        add(BEGIN_WAIT, peer, word, int(lane.single))
    add(PUBLISH, 0, int(lane.single))
    # the sends' and receives' byte offsets: in the lane's working copy, which an
    # all-or-nothing call copies in and out; otherwise the same offsets in the caller's buffer
    work = _address(lane.work)
    if lane.restore:
        add(COPY_IN)
    for (sends, recvs) in lane.steps:
        for peer, src, areas, offsets, nbytes, ring, posted, direct in sends:
            add(SEND, peer, _address(src) - work, nbytes, seg_at + offsets[0], seg_at + offsets[1],
                offsets[0], offsets[1], ring, posted, int(areas is not None), int(direct))
        for recv in recvs:
            peer, dst, mode, fold, flush, expect, posted, rel, ring = recv[:9]
            for other, word, k in recv[12]:   # sends read in place it overwrites: read first
                add(SEND_WAIT, other, word, k, context=k)
            also = (0, 0) if recv[11] is None else (seg_at + recv[11][1][0],
                                                    seg_at + recv[11][1][1])
            add(RECV, peer, _address(dst) - work, mode, 0 if fold is None else _address(fold),
                int(flush), expect, posted, rel, ring, *also, g.pids[peer], context=recv)
    for peer, word, k in lane.read_waits:   # the peers read this call's sends in place
        add(SEND_WAIT, peer, word, k, context=k)
    if lane.restore:
        add(COPY_OUT)
    for peer, word in lane.entered_words:
        add(END_WAIT, peer, word)
    header = [MAGIC, len(ops), ctrl_at, lane.serial, 2 * LINE, work if lane.restore else 0,
              lane.numel * lane.itemsize, *reduction, lane.need, *lane.need_words,
              lane.entered_word, seg_at, segment.nbytes, RING, NATIVE_SPIN_POLLS,
              lane.itemsize, threads(g.world_size)]
    header += [0] * (HEADER_WORDS - len(header))
    words = header + [x for o in ops for x in o]
    return struct.pack(f"{len(words)}q", *words), meta
