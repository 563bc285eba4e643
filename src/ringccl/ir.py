"""The schedule: a collective algorithm as data, shared by every executor (see DESIGN.md).

A schedule for ``world_size`` ranks splits every rank's working buffer into ``num_chunks`` chunks
(sizes from the collective's contract, ``Collective.chunk_sizes``: ``numpy.array_split``
boundaries, :func:`chunk_bounds`, per buffer or per block; they may differ per rank, as for uneven
all_to_all splits) and lists *steps*. A step is a set of
transfers that run at the same time and cost one latency (one alpha). A transfer is

    (src rank, dst rank, chunk read at src, chunk written at dst, reduce or copy)

and follows BSP semantics: every transfer of a step reads the state before the step, then all
writes land. Within one step at most one transfer writes a given (dst, chunk) slot, except that
several *reduces* may target one slot (a rank combining many peers' buffers at once, as the
direct algorithms do).

**Reduction order.** The slot's own value takes part at its own rank's position: the result is
the left fold, in ascending rank, over the contributions, the slot's value being rank dst's,

    ((c_s0 ⊕ c_s1) ⊕ … ⊕ own_dst) ⊕ c_u0 ⊕ …      for sources s0 < s1 < … < dst < u0 < …

so a rank adding every peer's buffer at once (direct all_reduce) computes x_0 ⊕ x_1 ⊕ … ⊕
x_{N-1} in the same order as every other rank, and all of them round alike. It is computed as:
the sources below dst are folded into an accumulator (the first copied, the others combined onto
it in ascending source), the accumulator is combined into own, then each source above dst in
ascending source (:func:`reduce_order`). A slot with at most one source below dst needs no
accumulator, which is every step of ring, recursive doubling, halving-doubling, hierarchical and
tree all_reduce; accumulators appear in direct all_reduce and reduce_scatter (N >= 3), direct
reduce with root >= 2, tree reduce with some roots and the double binary tree's shifted tree for
some odd N (7, 13, 15, ...).

**Operand order.** Each ⊕ also has its operands in that order, the lower ranks' side on the
left: a reduce from a source below dst computes ``slot := source ⊕ slot``, one from a source
above ``slot := slot ⊕ source``; the accumulator is ``acc := acc ⊕ source`` and its flush
``slot := acc ⊕ slot``. So two ranks that compute the same combination (both partners of a
recursive-doubling exchange, every rank of a direct all_reduce) apply the same function to the
same operands in the same order. Every executor (the simulator's kernel, the engine behind
ringccl.torch and ringccl.mpi, the shared-memory lane's Python and C replays) applies this one
rule.

What is guaranteed, exactly: results every rank receives are bitwise identical on every rank,
and identical between executors that share a reduce function, wherever that function's result
depends only on its operands and their order: every op on every dtype without NaN operands,
and MIN/MAX on ties between -0.0 and +0.0 and on NaNs of different payloads or signs, where
IEEE 754 lets the implementation pick the operand (numpy's float32/float64 minimum and maximum
return the second operand of a ±0 tie and the first NaN). torch's minimum and maximum also
depend on an element's position in their vector loop (one operand of a tie in full vectors,
the other in the remainder): every rank reduces the same ranges (the plans split chunks alike
on every rank), so ranks agree, but the simulator (numpy) is not torch. When two NaNs of
different payloads meet in a sum or product, which payload survives depends on the position in
numpy's and torch's vector loops, and for numpy on one element on which operand the result
overwrites: the result is NaN everywhere, its payload not guaranteed.

Steps are stored as small integer arrays (one entry per transfer), not as Python objects, so a
1024-rank ring all-reduce (2046 steps x 1024 transfers) stays a few tens of MB. Transfers inside a
step are kept sorted by (src, dst, src_chunk, dst_chunk): every rank derives the same post order
for its sends and receives from :meth:`Schedule.program`.

The IR knows none of its views: step tables are :func:`ringccl.table` (:mod:`ringccl.views.show`),
MSCCL XML and Chrome traces :mod:`ringccl.views.interop`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from .args import check_int, check_rank
from .chunking import chunk_bounds
from .collectives import get_collective
from .errors import ArgumentError, ArgumentTypeError, ScheduleError

__all__ = ["Kind", "Transfer", "Step", "Schedule", "Program", "RankStep", "Send", "Recv",
           "chunk_bounds", "reduce_rounds", "ReduceOrder", "reduce_order"]


class Kind(enum.IntEnum):
    """What the receiver does with an arriving chunk."""

    COPY = 0    #: dst chunk := src chunk
    REDUCE = 1  #: dst chunk := reduce_op(dst chunk, src chunk)

    def __repr__(self) -> str:  # ``kind=REDUCE`` in a RankStep, not ``<Kind.REDUCE: 1>``
        return self.name


class Transfer(NamedTuple):
    """One transfer, for display and tests (steps store arrays, not these)."""

    src: int
    dst: int
    src_chunk: int
    dst_chunk: int
    kind: Kind


def _by_slot(dst_slots: np.ndarray, reduce: np.ndarray):
    """The step's reduces grouped by destination slot, canonical order kept within a slot:
    (transfer indices, group id of each, occurrence number of each within its slot)."""
    idx = np.nonzero(reduce)[0]
    order = idx[np.argsort(dst_slots[idx], kind="stable")]
    ds = dst_slots[order]
    start = np.r_[True, ds[1:] != ds[:-1]] if ds.size else np.zeros(0, bool)
    first = np.maximum.accumulate(np.where(start, np.arange(ds.shape[0]), 0))
    k = np.arange(ds.shape[0]) - first  # occurrence number of each reduce at its destination
    return order, np.cumsum(start) - 1, k


def _rounds(order: np.ndarray, k: np.ndarray) -> list[np.ndarray]:
    return [np.sort(order[k == j]) for j in range(int(k.max()) + 1)] if k.size else []


def reduce_rounds(dst_slots: np.ndarray, reduce: np.ndarray) -> list[np.ndarray]:
    """The reduces of one step, split into rounds whose destination slots are distinct.

    The contributions each slot receives, whatever the order (the checker's view); the order in
    which executors combine them is :func:`reduce_order`'s.

    Args:
        dst_slots: int array, one destination slot id per transfer of the step, in the step's
            canonical order.
        reduce: bool array, True for reduces.
    Returns:
        index arrays (sorted) into the step's transfers; round k holds every slot's k-th reduce
        in canonical (ascending source) order.
    """
    order, _, k = _by_slot(dst_slots, reduce)
    return _rounds(order, k)


class ReduceOrder(NamedTuple):
    """How executors apply one step's reduces (the rule: "Reduction order" in this module's
    docstring). Indices are into the step's transfers.

    Apply, in this order: ``acc[a] := source(starts[a])`` for every accumulator a; for each
    ``(transfers, accumulators)`` of ``folds`` in turn, ``acc[accumulators[i]] :=
    acc[accumulators[i]] ⊕ source(transfers[i])``; ``slot(starts[a]) := acc[a] ⊕
    slot(starts[a])`` for every a (the flush); then for each round of ``rounds`` in turn, for
    its transfers t, ``slot(t) := source(t) ⊕ slot(t)`` when t's source rank is below its
    destination rank, else ``slot(t) := slot(t) ⊕ source(t)`` (the operand order, module
    docstring).

    Attributes:
        starts: int64 (A,), one per slot with at least two sources below its rank (A
            accumulators, in ascending slot id): that slot's lowest source.
        folds: list of (transfers, accumulators) int64 pairs: round j holds the (j+2)-th source
            below its rank of every accumulated slot that has one, sorted by accumulator (so
            accumulators are distinct within a round).
        rounds: list of sorted int64 index arrays, destination slots distinct within a round:
            round k holds the k-th of the reduces combined onto their slot directly (a slot
            with an accumulator: its sources above its rank; any other: all its reduces), in
            ascending source.
    """

    starts: np.ndarray
    folds: list
    rounds: list


def reduce_order(dst_slots: np.ndarray, src: np.ndarray, dst: np.ndarray,
                 reduce: np.ndarray) -> ReduceOrder:
    """The order in which one step's reduces are applied (see :class:`ReduceOrder`).

    Args:
        dst_slots: int array, one destination slot id per transfer of the step, in the step's
            canonical order (for one rank's receives: the chunk).
        src, dst: int arrays, sender and receiver rank of each transfer.
        reduce: bool array, True for reduces.
    Returns:
        :class:`ReduceOrder`; with no slot receiving two sources from below its rank, no
        accumulators and ``rounds == reduce_rounds(dst_slots, reduce)``.
    """
    src, dst = np.asarray(src), np.asarray(dst)
    order, group, k = _by_slot(np.asarray(dst_slots), np.asarray(reduce, dtype=bool))
    empty = np.zeros(0, dtype=np.int64)
    below = src[order] < dst[order]
    if below.sum() < 2:  # at most one source below in the whole step: no accumulator
        return ReduceOrder(empty, [], _rounds(order, k))
    # canonical order is ascending source within a slot: its below-sources come first
    n_below = np.bincount(group, weights=below).astype(np.int64)
    accumulated = n_below >= 2
    if not accumulated.any():
        return ReduceOrder(empty, [], _rounds(order, k))
    acc_of_group = np.cumsum(accumulated) - 1
    in_acc = accumulated[group]
    nb = n_below[group]
    starts = order[in_acc & (k == 0)]                 # ascending slot id: groups are sorted
    folds = []
    for j in range(1, int(n_below.max())):
        sel = in_acc & (k == j) & (k < nb)
        folds.append((order[sel], acc_of_group[group[sel]]))  # groups ascending: sorted by acc
    direct = ~in_acc | (k >= nb)
    return ReduceOrder(starts, folds, _rounds(order[direct], np.where(in_acc, k - nb, k)[direct]))


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _canonical_order(step, src, dst, src_chunk, dst_chunk, n, c, n_steps) -> np.ndarray | slice:
    """Permutation sorting transfers by (step, src, dst, src_chunk, dst_chunk)."""
    if step.size == 0:
        return slice(None)
    if n_steps * n * n * c * c < 2**62 and min(src.min(), dst.min(), src_chunk.min(),
                                             dst_chunk.min()) >= 0 and max(
            src.max(), dst.max()) < n and max(src_chunk.max(), dst_chunk.max()) < c:
        # one int64 key instead of a 5-key lexsort; builders usually emit sorted arrays already
        key = (((step.astype(np.int64) * n + src) * n + dst) * c + src_chunk) * c + dst_chunk
        if (key[1:] >= key[:-1]).all():
            return slice(None)
        return np.argsort(key, kind="stable")
    return np.lexsort((dst_chunk, src_chunk, dst, src, step))


@dataclass(frozen=True, eq=False)
class Step:
    """One step: parallel arrays with one entry per transfer (read-only views).

    Attributes:
        src, dst: int32 arrays, sender and receiver rank of each transfer.
        src_chunk, dst_chunk: int32 arrays, chunk read at ``src`` and chunk written at ``dst``.
        reduce: bool array, True where the receiver reduces (``Kind.REDUCE``) instead of copying.
        phase: name of the phase this step belongs to ("reduce-scatter", "all-gather", ...).
    """

    src: np.ndarray
    dst: np.ndarray
    src_chunk: np.ndarray
    dst_chunk: np.ndarray
    reduce: np.ndarray
    phase: str = ""

    def __post_init__(self):
        arrays = [self.src, self.dst, self.src_chunk, self.dst_chunk, self.reduce]
        if all(isinstance(a, np.ndarray) and a.ndim == 1 for a in arrays) and \
                len({a.shape[0] for a in arrays}) == 1:
            return     # what the builders make: checked by the schedule's verifier
        names = ("src", "dst", "src_chunk", "dst_chunk", "reduce")
        shaped = []
        for name, a, dtype in zip(names, arrays, (np.int32,) * 4 + (bool,)):
            try:
                value = np.asarray(a)
            except ValueError:       # ragged nested lists
                value = None
            kind = "integers" if dtype is np.int32 else "bools"
            if value is None or value.ndim != 1:
                raise ArgumentError(f"Step {name}={a!r} must be a 1-D array of {kind}, one "
                                    "entry per transfer (Step.of broadcasts scalars)")
            if value.size and not np.issubdtype(value.dtype, np.integer if dtype is np.int32
                                                else np.bool_):
                raise ArgumentTypeError(f"Step {name}={a!r} must hold {kind}, got "
                                        f"{value.dtype}")
            shaped.append(value)
        lengths = {n: len(v) for n, v in zip(names, shaped)}
        if len(set(lengths.values())) != 1:
            raise ArgumentError(f"Step arrays must have one entry per transfer each, got lengths "
                                f"{lengths}")
        for name, value, dtype in zip(names, shaped, (np.int32,) * 4 + (bool,)):
            object.__setattr__(self, name, _readonly(np.ascontiguousarray(value, dtype=dtype)))

    @staticmethod
    def of(src, dst, src_chunk, dst_chunk=None, reduce=False, phase: str = "") -> "Step":
        """Build a step from scalars or arrays (broadcast together) and sort it canonically.

        ``dst_chunk`` defaults to ``src_chunk`` (the common case: a chunk keeps its index).
        """
        if dst_chunk is None:
            dst_chunk = src_chunk
        arrays = np.broadcast_arrays(np.asarray(src), np.asarray(dst), np.asarray(src_chunk),
                                     np.asarray(dst_chunk), np.asarray(reduce, dtype=bool))
        s, d, sc, dc, red = (np.ravel(a) for a in arrays)
        order = np.lexsort((dc, sc, d, s))
        return Step(*(_readonly(np.ascontiguousarray(a[order], dtype=t)) for a, t in
                      zip((s, d, sc, dc, red), (np.int32,) * 4 + (bool,))), phase=phase)

    def __len__(self) -> int:
        return int(self.src.shape[0])

    def transfers(self) -> Iterator[Transfer]:
        """The transfers of this step as :class:`Transfer` tuples (sorted)."""
        for s, d, sc, dc, r in zip(self.src.tolist(), self.dst.tolist(), self.src_chunk.tolist(),
                                   self.dst_chunk.tolist(), self.reduce.tolist()):
            yield Transfer(s, d, sc, dc, Kind.REDUCE if r else Kind.COPY)


class Send(NamedTuple):
    """In a rank's program: send my chunk ``chunk`` to ``peer``."""

    peer: int
    chunk: int


class Recv(NamedTuple):
    """In a rank's program: receive from ``peer`` into my chunk ``chunk``, reducing or copying."""

    peer: int
    chunk: int
    kind: Kind


class RankStep(NamedTuple):
    """One step as one rank sees it: what it sends and what it receives (canonical order)."""

    index: int
    phase: str
    sends: tuple[Send, ...]
    recvs: tuple[Recv, ...]


@dataclass(frozen=True)
class Program:
    """The per-rank projection of a schedule: what a real process executes.

    Steps where the rank neither sends nor receives are omitted (``RankStep.index`` keeps the
    schedule's step number, so error messages can name it).
    """

    rank: int
    world_size: int
    num_chunks: int
    steps: tuple[RankStep, ...]


class Schedule:
    """An algorithm for one collective on ``world_size`` ranks, as steps of transfers.

    Args:
        collective: collective name ("all_reduce", "reduce_scatter", "all_gather", ...).
        algorithm: algorithm name ("ring", ...).
        world_size: number of ranks N (>= 1).
        num_chunks: chunks per rank buffer C (>= 1); the collective's contract maps them onto
            each rank's working buffer (``ringccl.collectives``; for all_reduce chunk c spans
            ``chunk_bounds(L, C)[c:c+2]`` of the L-element buffer).
        steps: the steps, in order.
        params: algorithm parameters that shaped the schedule (root, segments, ...).

    Raises:
        ScheduleError: a rank or chunk out of range or a rank sending to itself (the message names
            the step and the transfer). Semantic errors are found by :func:`ringccl.verify`.
    """

    def __init__(self, collective: str, algorithm: str, world_size: int, num_chunks: int,
                 steps: Sequence[Step], params: Mapping[str, object] | None = None):
        steps = tuple(steps)
        sizes = np.array([len(s) for s in steps], dtype=np.int64)
        cat = (lambda name: np.concatenate([getattr(s, name) for s in steps]) if steps
               else np.zeros(0, dtype=np.int32))
        self._init(collective, algorithm, world_size, num_chunks,
                   np.repeat(np.arange(len(steps)), sizes), cat("src"), cat("dst"),
                   cat("src_chunk"), cat("dst_chunk"), cat("reduce").astype(bool),
                   [s.phase for s in steps], params)

    @classmethod
    def from_arrays(cls, collective: str, algorithm: str, world_size: int, num_chunks: int, *,
                    step, src, dst, src_chunk, dst_chunk=None, reduce=False,
                    phases: Sequence[str] | None = None, num_steps: int | None = None,
                    params: Mapping[str, object] | None = None) -> "Schedule":
        """Build a schedule from flat per-transfer arrays (fast: no Python loop over steps).

        Args:
            step: int array, the step of each transfer (any order; sorted canonically here).
            src, dst, src_chunk, dst_chunk, reduce: per-transfer arrays or scalars (broadcast);
                ``dst_chunk`` defaults to ``src_chunk``.
            phases: phase name of each step (length num_steps).
            num_steps: number of steps (default: max(step) + 1); steps may be empty.
        """
        if dst_chunk is None:
            dst_chunk = src_chunk
        arrays = np.broadcast_arrays(*(np.asarray(a) for a in (step, src, dst, src_chunk,
                                                                 dst_chunk)),
                                     np.asarray(reduce, dtype=bool))
        st, s, d, sc, dc, red = (np.ravel(a) for a in arrays)
        if num_steps is None:
            num_steps = int(st.max()) + 1 if st.size else 0
        obj = cls.__new__(cls)
        obj._init(collective, algorithm, world_size, num_chunks, st, s, d, sc, dc, red,
                  list(phases) if phases is not None else [""] * num_steps, params,
                  num_steps=num_steps)
        return obj

    def _init(self, collective, algorithm, world_size, num_chunks, step, src, dst, src_chunk,
              dst_chunk, reduce, phases, params, num_steps=None):
        check_int(world_size, "world_size", minimum=1)
        check_int(num_chunks, "num_chunks", minimum=1)
        self.collective = collective
        self.algorithm = algorithm
        self.world_size = int(world_size)
        self.num_chunks = int(num_chunks)
        self.params = dict(params or {})
        n_steps = len(phases) if num_steps is None else int(num_steps)
        if len(phases) != n_steps:
            raise ArgumentError(f"phases has {len(phases)} names for {n_steps} steps")
        step = np.asarray(step, dtype=np.int64)
        if step.size and (step.min() < 0 or step.max() >= n_steps):
            raise ScheduleError(f"step indices must be in [0, {n_steps})")
        # canonical order: by step, then (src, dst, src_chunk, dst_chunk)
        order = _canonical_order(step, src, dst, src_chunk, dst_chunk, self.world_size,
                                 self.num_chunks, n_steps)
        self.src = _readonly(np.ascontiguousarray(src[order], dtype=np.int32))
        self.dst = _readonly(np.ascontiguousarray(dst[order], dtype=np.int32))
        self.src_chunk = _readonly(np.ascontiguousarray(src_chunk[order], dtype=np.int32))
        self.dst_chunk = _readonly(np.ascontiguousarray(dst_chunk[order], dtype=np.int32))
        self.reduce = _readonly(np.ascontiguousarray(reduce[order], dtype=bool))
        #: step_ptr[i]:step_ptr[i+1] are step i's transfers in the flat arrays.
        ptr = np.zeros(n_steps + 1, dtype=np.int64)
        np.cumsum(np.bincount(step, minlength=n_steps), out=ptr[1:])
        self.step_ptr = _readonly(ptr)
        self.phase_names = tuple(str(p) for p in phases)
        self._steps: tuple[Step, ...] | None = None
        self._cache: dict = {}
        self._validate()

    # -- structure -------------------------------------------------------------------------------

    def _validate(self) -> None:
        n, c = self.world_size, self.num_chunks
        bad = ((self.src < 0) | (self.src >= n) | (self.dst < 0) | (self.dst >= n)
               | (self.src_chunk < 0) | (self.src_chunk >= c) | (self.dst_chunk < 0)
               | (self.dst_chunk >= c) | (self.src == self.dst))
        if bad.any():
            i = int(np.argmax(bad))
            step = int(np.searchsorted(self.step_ptr, i, side="right") - 1)
            t = self.transfer(i)
            why = ("a rank cannot send to itself" if t.src == t.dst else
                   f"ranks must be in [0, {n}) and chunks in [0, {c})")
            raise ScheduleError(f"step {step}: transfer R{t.src} → R{t.dst}, chunk c{t.src_chunk} → "
                                f"c{t.dst_chunk} is invalid: {why}", step=step, rank=t.src,
                                chunk=t.src_chunk)

    def transfer(self, i: int) -> Transfer:
        """The i-th transfer of the flat arrays."""
        return Transfer(int(self.src[i]), int(self.dst[i]), int(self.src_chunk[i]),
                        int(self.dst_chunk[i]), Kind.REDUCE if self.reduce[i] else Kind.COPY)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The steps, in order, as :class:`Step` views of the flat arrays (built on first use)."""
        if self._steps is None:
            p = self.step_ptr
            self._steps = tuple(
                Step(self.src[p[i]:p[i + 1]], self.dst[p[i]:p[i + 1]],
                     self.src_chunk[p[i]:p[i + 1]], self.dst_chunk[p[i]:p[i + 1]],
                     self.reduce[p[i]:p[i + 1]], self.phase_names[i])
                for i in range(self.num_steps))
        return self._steps

    @property
    def num_steps(self) -> int:
        """Number of steps (each costs one latency alpha in the cost model)."""
        return len(self.phase_names)

    @property
    def num_transfers(self) -> int:
        return int(self.src.shape[0])

    @property
    def phases(self) -> list[tuple[str, int, int]]:
        """``(phase name, first step, end step)`` for each run of steps with the same phase."""
        out: list[tuple[str, int, int]] = []
        for i, phase in enumerate(self.phase_names):
            if out and out[-1][0] == phase:
                out[-1] = (phase, out[-1][1], i + 1)
            else:
                out.append((phase, i, i + 1))
        return out

    def step_of(self, transfer_index: np.ndarray | int) -> np.ndarray:
        """Step index of each flat transfer index."""
        return np.searchsorted(self.step_ptr, transfer_index, side="right") - 1

    def __repr__(self) -> str:
        return (f"Schedule({self.collective!r}, {self.algorithm!r}, world_size={self.world_size}, "
                f"num_chunks={self.num_chunks}, num_steps={self.num_steps})")

    # -- per-rank view ---------------------------------------------------------------------------

    def program(self, rank: int) -> Program:
        """What ``rank`` executes: for each step, its sends and receives in canonical order.

        Raises:
            ArgumentError: rank out of range.
        """
        rank = check_rank(rank, self.world_size, "rank")
        key = ("program", rank)
        if key in self._cache:
            return self._cache[key]
        sends_at = np.nonzero(self.src == rank)[0]
        recvs_at = np.nonzero(self.dst == rank)[0]
        step_s, step_r = self.step_of(sends_at), self.step_of(recvs_at)
        by_step: dict[int, tuple[list, list]] = {}
        for i, s in zip(sends_at.tolist(), step_s.tolist()):
            by_step.setdefault(s, ([], []))[0].append(Send(int(self.dst[i]),
                                                           int(self.src_chunk[i])))
        for i, s in zip(recvs_at.tolist(), step_r.tolist()):
            by_step.setdefault(s, ([], []))[1].append(
                Recv(int(self.src[i]), int(self.dst_chunk[i]),
                     Kind.REDUCE if self.reduce[i] else Kind.COPY))
        steps = tuple(RankStep(s, self.phase_names[s], tuple(a), tuple(b))
                      for s, (a, b) in sorted(by_step.items()))
        prog = Program(rank, self.world_size, self.num_chunks, steps)
        if self.world_size <= 64:  # small programs are worth keeping; large ones are cheap to redo
            self._cache[key] = prog
        return prog

    # -- exact statistics ------------------------------------------------------------------------

    def chunk_sends(self) -> np.ndarray:
        """(world_size, num_chunks) int64: how many times each rank sends each of its chunks."""
        if "chunk_sends" not in self._cache:
            flat = self.src.astype(np.int64) * self.num_chunks + self.src_chunk
            self._cache["chunk_sends"] = np.bincount(
                flat, minlength=self.world_size * self.num_chunks).reshape(
                    self.world_size, self.num_chunks)
        return self._cache["chunk_sends"]

    def chunk_recvs(self) -> np.ndarray:
        """(world_size, num_chunks) int64: how many times each rank receives into each chunk."""
        if "chunk_recvs" not in self._cache:
            flat = self.dst.astype(np.int64) * self.num_chunks + self.dst_chunk
            self._cache["chunk_recvs"] = np.bincount(
                flat, minlength=self.world_size * self.num_chunks).reshape(
                    self.world_size, self.num_chunks)
        return self._cache["chunk_recvs"]

    def chunk_sizes(self, buffer_count: int) -> np.ndarray:
        """(world_size, num_chunks) elements of each rank's chunks for a collective size of
        ``buffer_count`` elements (the collective's contract: ``Collective.chunk_sizes``)."""
        return get_collective(self.collective).chunk_sizes(
            self.world_size, self.num_chunks, buffer_count, self.params)

    def bytes_sent(self, buffer_count: int, itemsize: int, *,
                   chunk_sizes: np.ndarray | None = None) -> np.ndarray:
        """Exact bytes each rank sends for a collective size of ``buffer_count`` elements.

        Args:
            buffer_count: M, the elements the collective's contract splits into chunks
                (``Collective.buffer_count``: all_reduce: the buffer; all_gather: N·count).
            itemsize: bytes per element.
            chunk_sizes: (world_size, num_chunks) elements per chunk, overriding the contract's
                (e.g. uneven all_to_all splits).
        Returns:
            int64 array (world_size,), bytes (an object array of Python ints where a rank's
            total exceeds int64).
        """
        return self._bytes(self.chunk_sends(), buffer_count, itemsize, chunk_sizes)

    def bytes_received(self, buffer_count: int, itemsize: int, *,
                       chunk_sizes: np.ndarray | None = None) -> np.ndarray:
        """Exact bytes each rank receives; arguments as :meth:`bytes_sent`."""
        return self._bytes(self.chunk_recvs(), buffer_count, itemsize, chunk_sizes)

    def _bytes(self, counts, buffer_count, itemsize, chunk_sizes) -> np.ndarray:
        buffer_count = check_int(buffer_count, "buffer_count")
        itemsize = check_int(itemsize, "itemsize", minimum=1)
        if buffer_count > np.iinfo(np.int64).max:   # chunk offsets are int64
            raise ArgumentError(f"buffer_count={buffer_count} must be at most 2**63 - 1 "
                                "elements")
        sizes = self.chunk_sizes(buffer_count) if chunk_sizes is None else np.asarray(chunk_sizes)
        if sizes.ndim == 2 and sizes.strides[0] == 0:  # same sizes on every rank
            sizes = sizes[0]
        # a total beyond int64 (counts near 2**63 / N) is summed in Python ints, exactly
        bound = (int(counts.sum(axis=1).max(initial=0)) * int(np.max(sizes, initial=0))
                 * itemsize)
        kind = object if bound > np.iinfo(np.int64).max else np.int64
        if sizes.ndim == 1:
            return counts.astype(kind) @ sizes.astype(kind) * itemsize
        return (counts.astype(kind) * sizes.astype(kind)).sum(axis=1) * itemsize
