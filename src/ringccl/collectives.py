"""Each collective's contract: what every rank holds before and after, independent of algorithm.

A collective works on a per-rank *working buffer* split into the schedule's ``num_chunks`` chunks.
The contract says which chunks a rank's input fills (:meth:`Collective.input_chunks`, a list of
chunk indices per rank, filled in order), which chunks form its output
(:meth:`Collective.output_chunks`, concatenated in order), what the output chunks must contain
(:meth:`Collective.expected`) and how many elements each chunk of each rank has
(:meth:`Collective.chunk_sizes`). The checker, the simulator and the torch executor use every
algorithm of a collective through the same contract, so a new algorithm needs no new test code.

Semantics, root arguments and shapes follow torch.distributed. ``count`` is what
:func:`ringccl.simulate` calls it: elements per row of its (world_size, count) input.
M = :attr:`Collective.buffer_count` elements is the collective's *size* (nccl-tests' "size"), the
buffer the contract splits into chunks; blocks are ``numpy.array_split`` pieces of it.

============== =========== ======= ============================= ==============================
collective     M           chunks  input of rank r fills          output of rank r (must hold)
============== =========== ======= ============================= ==============================
all_reduce     count       any C   all chunks                    all chunks (Σ ranks)
reduce_scatter count       k·N     all chunks                    block r (Σ ranks)
all_gather     N·count     k·N     block r                       all chunks (block b from b)
broadcast      count       any C   root (``src``): all; others   all chunks (from root)
                                   nothing
reduce         count       any C   all chunks                    root (``dst``): all chunks
                                                                 (Σ ranks); others nothing
scatter        count       k·N     root (``src``): all chunks    block r (from root)
gather         N·count     k·N     block r                       root (``dst``): all chunks
                                                                 (block b from b); others nothing
all_to_all     count       2N + s  chunks 0…N-1 (its N blocks)   slots [N+0, …, N+r-1, r,
                                                                 N+r+1, …, 2N-1] (see below)
============== =========== ======= ============================= ==============================

Blocks: with k = C/N chunks per block, block b is chunks [b·k, (b+1)·k); each block is split into
its k chunks by ``numpy.array_split`` again, so chunk boundaries never straddle blocks.

all_to_all layout (shared by every all_to_all algorithm): rank r's chunk j < N is its input
block j, destined to rank j; chunk N+i is its output block from rank i; chunks >= 2N are scratch
blocks of the same size (num_chunks = 2N + scratch). A rank's own block never moves: its output
block r *is* input chunk r, so slot N+r is free. Pre: slot (r, j < N) holds (chunk id j, origin r).
Post: rank r's output slot for block i holds (chunk id r, origin i), i.e. rank i's input block r.
With ``input_split_sizes``/``output_split_sizes`` (all_to_all_single) chunk j of rank r has
``input_split_sizes[r][j]`` elements and chunk N+i has ``output_split_sizes[r][i]``; scratch
chunks need equal blocks.

Rooted collectives read the root from ``schedule.params["root"]`` (default 0); torch.distributed
calls it ``src`` (broadcast, scatter) or ``dst`` (reduce, gather): :attr:`Collective.root_arg`.

Bus factors convert algbw into busbw as nccl-tests does (doc/PERFORMANCE.md): all_reduce
2(N-1)/N; reduce_scatter, all_gather, scatter, gather, all_to_all (N-1)/N with size = the whole
N-block buffer; broadcast and reduce 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .args import check_rank
from .errors import ArgumentError
from .chunking import chunk_bounds

__all__ = ["Collective", "COLLECTIVES", "get_collective", "ALL", "ANY", "ORIGIN",
           "check_root", "split_sizes", "split_safe"]

#: expected-content codes used by :meth:`Collective.expected`
ANY, ALL, ORIGIN = 0, 1, 2

#: per-rank chunk lists: a 2-D int array (world_size, k) when every rank has k chunks, else a
#: list of 1-D int arrays (one per rank)
ChunkLists = Sequence[np.ndarray]


def check_root(root, world_size: int, argument: str = "root") -> int:
    """``root`` as an int in [0, world_size) (:func:`ringccl.args.check_rank`).

    Raises:
        ArgumentTypeError: not an integer; ArgumentError: out of range (the message names
            ``argument``).
    """
    return check_rank(root, world_size, argument)


def _root(world_size: int, params: Mapping) -> int:
    return check_root(params.get("root", 0), world_size)


def _per_block(world_size: int, num_chunks: int, name: str) -> int:
    if num_chunks % world_size:
        raise ArgumentError(f"num_chunks={num_chunks} must be a multiple of "
                            f"world_size={world_size} for {name}")
    return num_chunks // world_size


def _all(n: int, c: int) -> np.ndarray:
    return np.broadcast_to(np.arange(c, dtype=np.int64), (n, c))


def _block_of_rank(n: int, c: int, name: str) -> np.ndarray:
    k = _per_block(n, c, name)
    return np.arange(n, dtype=np.int64)[:, None] * k + np.arange(k, dtype=np.int64)[None, :]


def _only_root(n: int, c: int, root: int) -> list[np.ndarray]:
    empty = np.zeros(0, dtype=np.int64)
    return [np.arange(c, dtype=np.int64) if r == root else empty for r in range(n)]


def _a2a_outputs(n: int, c: int) -> np.ndarray:
    if c < 2 * n:
        raise ArgumentError(f"num_chunks={c} must be at least 2·world_size="
                            f"{2 * n} for all_to_all (N input blocks, N output blocks)")
    out = n + np.broadcast_to(np.arange(n, dtype=np.int64), (n, n)).copy()
    out[np.arange(n), np.arange(n)] = np.arange(n)  # own block stays in its input chunk
    return out


def _a2a_inputs(n: int, c: int) -> np.ndarray:
    _a2a_outputs(n, c)  # validates num_chunks
    return _all(n, n)


def split_sizes(world_size: int, count: int, input_split_sizes=None,
                output_split_sizes=None, row_counts: Sequence[int] | None = None):
    """all_to_all block sizes of every rank: (input_split_sizes, output_split_sizes).

    Args:
        world_size: N.
        count: elements of each rank's input when ``row_counts`` is None.
        input_split_sizes: (N, N) ints >= 0, row r = rank r's ``input_split_sizes``; None: each
            row is ``numpy.array_split``'s sizes of its input (equal blocks when divisible), or
            the transpose of ``output_split_sizes`` when only that is given.
        output_split_sizes: (N, N), row r = rank r's ``output_split_sizes``; None: the
            transpose of the input splits. Must equal that transpose (rank r receives from rank i
            what rank i sends to rank r).
        row_counts: elements of each rank's input (default ``count`` for all); when given, the
            rows of the input splits must sum to them.

    Returns:
        two int64 arrays of shape (N, N).
    Raises:
        ArgumentError: wrong shape, negative sizes, row sums that differ from the input lengths,
            or output splits that are not the transpose of the input splits.
    """
    n = world_size

    def parse(a, name):
        if a is None:
            return None
        try:
            arr = np.asarray(a)
        except ValueError:
            raise ArgumentError(f"{name} must be an ({n}, {n}) array of sizes, one row per "
                                "rank") from None
        if arr.shape != (n, n) or arr.dtype.kind not in "iu":
            raise ArgumentError(f"{name} must be an integer array of shape (world_size, "
                                f"world_size) = ({n}, {n}), one row per rank; got "
                                f"shape {arr.shape}, dtype {arr.dtype}")
        arr = arr.astype(np.int64)
        if (arr < 0).any():
            r, j = (int(v) for v in np.argwhere(arr < 0)[0])
            raise ArgumentError(f"{name}[{r}][{j}]={arr[r, j]} must be >= 0")
        return arr

    ins, outs = parse(input_split_sizes, "input_split_sizes"), parse(
        output_split_sizes, "output_split_sizes")
    if ins is None and outs is not None:
        ins = outs.T.copy()
    if ins is None:
        rows = [count] * n if row_counts is None else row_counts
        ins = np.array([np.diff(chunk_bounds(int(rows[r]), n)) for r in range(n)],
                       dtype=np.int64).reshape(n, n)
    if row_counts is not None:
        sums = ins.sum(axis=1)
        bad = np.nonzero(sums != np.asarray(row_counts, dtype=np.int64))[0]
        if bad.size:
            r = int(bad[0])
            raise ArgumentError(f"input_split_sizes[{r}] sums to {int(sums[r])}, but rank {r}'s "
                                f"input has {int(row_counts[r])} elements")
    if outs is None:
        outs = ins.T.copy()
    elif not np.array_equal(outs, ins.T):
        r, i = (int(v) for v in np.argwhere(outs != ins.T)[0])
        raise ArgumentError(f"output_split_sizes[{r}][{i}]={outs[r, i]} but rank {i} sends "
                            f"input_split_sizes[{i}][{r}]={ins[i, r]} elements to rank {r}; "
                            "output_split_sizes must be the transpose of input_split_sizes")
    return ins, outs


@dataclass(frozen=True)
class Collective:
    """The contract of one collective.

    Attributes:
        name: torch.distributed-style name.
        reduces: True if outputs hold the reduction of every rank's contribution; False if they
            hold copies of single ranks' data.
        root_arg: torch.distributed's name of the root argument ("src", "dst") or None.
        buffer_count: (world_size, count) -> M, the elements the contract splits into chunks
            (the working buffer, except all_to_all whose buffer also holds N output blocks and
            scratch blocks of the same sizes).
        input_chunks: (world_size, num_chunks, params) -> per-rank chunk lists (2-D int array
            (N, k) or a list of 1-D arrays): rank r's input fills these chunks in order.
        output_chunks: same; rank r's output is these chunks concatenated (empty: no output).
        bus_factor: world_size -> busbw / algbw (nccl-tests).
        size_is_buffer: True if nccl-tests' "size" is the whole N-block buffer rather than one
            rank's input.
        summary: one line for listings.
        sources: None, or (world_size, num_chunks, params) -> (chunk_id, origin) int arrays
            (N, C): what each output slot of a copy collective must hold, when that is not "chunk
            k from the rank whose input filled k" (all_to_all).
        layout: "uniform" (C chunks of M), "blocked" (N blocks of k chunks) or "all_to_all";
            decides :meth:`chunk_sizes`.
    """

    name: str
    reduces: bool
    root_arg: str | None
    buffer_count: Callable[[int, int], int]
    input_chunks: Callable[[int, int, Mapping], ChunkLists]
    output_chunks: Callable[[int, int, Mapping], ChunkLists]
    bus_factor: Callable[[int], float]
    size_is_buffer: bool
    summary: str
    layout: str = "uniform"
    sources: Callable[[int, int, Mapping], tuple[np.ndarray, np.ndarray]] | None = None

    def root(self, world_size: int, params: Mapping | None = None) -> int | None:
        """The root rank of a rooted collective (``params["root"]``, default 0), else None."""
        return _root(world_size, params or {}) if self.root_arg else None

    def pre(self, world_size: int, num_chunks: int, params: Mapping | None = None):
        """Symbolic precondition: (chunk_id, origin) int32 arrays of shape (world_size, num_chunks).

        ``chunk_id[r, c]`` is the logical chunk in slot (r, c) (-1 = empty) and ``origin[r, c]``
        the rank whose contribution it carries. Rank r's input slot c holds (chunk c, origin r).
        """
        params = params or {}
        chunk_id = np.full((world_size, num_chunks), -1, dtype=np.int32)
        origin = np.full((world_size, num_chunks), -1, dtype=np.int32)
        rows, cols = _flatten(self.input_chunks(world_size, num_chunks, params), world_size)
        chunk_id[rows, cols] = cols
        origin[rows, cols] = rows
        return chunk_id, origin

    def expected(self, world_size: int, num_chunks: int, params: Mapping | None = None):
        """Symbolic postcondition: (kind, chunk_id, origin) arrays of shape (world_size, num_chunks).

        ``kind`` is ANY (not part of the output), ALL (must hold every rank's contribution to
        ``chunk_id`` exactly once) or ORIGIN (must hold exactly ``origin``'s ``chunk_id``).
        """
        params = params or {}
        n, c = world_size, num_chunks
        rows, cols = _flatten(self.output_chunks(n, c, params), n)
        kind = np.full((n, c), ANY, dtype=np.int8)
        kind[rows, cols] = ALL if self.reduces else ORIGIN
        chunk_id = np.broadcast_to(np.arange(c, dtype=np.int32), (n, c)).copy()
        origin = np.full((n, c), -1, dtype=np.int32)
        if self.reduces:
            return kind, chunk_id, origin
        if self.sources is not None:
            chunk_id, origin = self.sources(n, c, params)
            return kind, chunk_id.astype(np.int32), origin.astype(np.int32)
        # a copied chunk comes from the (single) rank whose input filled it
        irows, icols = _flatten(self.input_chunks(n, c, params), n)
        owner = np.full(c, -1, dtype=np.int32)
        owner[icols] = irows
        origin[:] = owner[None, :]
        return kind, chunk_id, origin

    def chunk_nbytes(self, world_size: int, num_chunks: int, nbytes: float) -> float:
        """Bytes of one chunk with chunks treated as fluid, for a size of ``nbytes`` (M).

        M/num_chunks, except all_to_all, whose N input blocks make up M (its output and scratch
        chunks are blocks of the same size): M/N. This is what closed forms and the cost model
        charge per transfer.
        """
        return nbytes / (world_size if self.layout == "all_to_all" else num_chunks)

    def chunk_sizes(self, world_size: int, num_chunks: int, buffer_count: int,
                    params: Mapping | None = None, input_split_sizes=None,
                    output_split_sizes=None) -> np.ndarray:
        """Elements of every rank's every chunk, for a size of ``buffer_count`` elements.

        Args:
            buffer_count: M (see :attr:`buffer_count`); ignored by all_to_all when split sizes
                are given.
            params: the schedule's parameters (the built-in layouts do not depend on them).
            input_split_sizes, output_split_sizes: all_to_all only, (N, N) per-rank splits (see
                :func:`split_sizes`).

        Returns:
            int64 array (world_size, num_chunks), possibly a read-only broadcast view when every
            rank has the same sizes.
        Raises:
            ArgumentError: num_chunks not valid for the layout; split sizes given to a collective
                other than all_to_all; scratch chunks with unequal all_to_all blocks.
        """
        n, c = world_size, num_chunks
        if self.layout != "all_to_all" and (input_split_sizes is not None
                                            or output_split_sizes is not None):
            raise ArgumentError(f"input_split_sizes/output_split_sizes apply to all_to_all only, "
                                f"not {self.name}")
        if self.layout == "uniform":
            row = np.diff(chunk_bounds(buffer_count, c))
        elif self.layout == "blocked":
            k = _per_block(n, c, self.name)
            blocks = np.diff(chunk_bounds(buffer_count, n))
            row = np.concatenate([np.diff(chunk_bounds(int(b), k)) for b in blocks]) if k > 1 \
                else blocks
        else:
            return self._a2a_sizes(n, c, buffer_count, input_split_sizes, output_split_sizes)
        return np.broadcast_to(row, (n, c))

    def _a2a_sizes(self, n, c, count, input_split_sizes, output_split_sizes) -> np.ndarray:
        _a2a_outputs(n, c)  # validates c >= 2N
        ins, outs = split_sizes(n, count, input_split_sizes, output_split_sizes)
        scratch = c - 2 * n
        sizes = np.empty((n, c), dtype=np.int64)
        sizes[:, :n] = ins
        sizes[:, n:2 * n] = outs
        if scratch:
            if n and (ins != ins.flat[0]).any():
                why = (f"count={count} is not divisible by world_size={n}"
                       if input_split_sizes is None and output_split_sizes is None
                       else "the split sizes differ")
                raise ArgumentError(f"this all_to_all schedule moves blocks through {scratch} "
                                    f"scratch chunks, which needs equal blocks, but {why}; use an "
                                    "algorithm without scratch chunks (direct) for uneven splits")
            sizes[:, 2 * n:] = ins.flat[0] if n else 0
        return sizes


def _flatten(lists: ChunkLists, world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank, chunk) index arrays of every entry of per-rank chunk lists."""
    if isinstance(lists, np.ndarray) and lists.ndim == 2:
        k = lists.shape[1]
        return np.repeat(np.arange(world_size), k), lists.reshape(-1)
    lengths = [len(a) for a in lists]
    rows = np.repeat(np.arange(world_size), lengths)
    cols = (np.concatenate([np.asarray(a, dtype=np.int64) for a in lists]) if lists
            else np.zeros(0, dtype=np.int64))
    return rows, cols


def split_safe(schedule) -> bool:
    """True if an all_to_all schedule runs with any split sizes.

    That holds when every transfer copies a block between two slots meant for the same block
    (rank r's input slot j and rank j's output slot N+r both hold "rank r's block j") and no
    scratch chunk exists, so every transfer's chunk has the same size on both ranks whatever the
    splits. Checked on the schedule alone (no sizes), so every rank reaches the same answer.
    """
    cached = schedule._cache.get("split_safe")
    if cached is not None:
        return cached
    n = schedule.world_size

    def block(rank, chunk):  # (sender, receiver) of the block a slot is meant for
        rank, chunk = rank.astype(np.int64), chunk.astype(np.int64)
        inp = chunk < n
        return np.where(inp, rank, chunk - n), np.where(inp, chunk, rank)

    ok = schedule.num_chunks == 2 * n
    if ok and schedule.num_transfers:
        a = block(schedule.src, schedule.src_chunk)
        b = block(schedule.dst, schedule.dst_chunk)
        ok = bool(((a[0] == b[0]) & (a[1] == b[1])).all())
    schedule._cache["split_safe"] = ok
    return ok


def _a2a_sources(n: int, c: int, params: Mapping) -> tuple[np.ndarray, np.ndarray]:
    chunk_id = np.full((n, c), -1, dtype=np.int32)
    origin = np.full((n, c), -1, dtype=np.int32)
    outs = _a2a_outputs(n, c)
    ranks = np.arange(n)
    # output position i of rank r holds rank i's block r
    chunk_id[ranks[:, None], outs] = ranks[:, None]
    origin[ranks[:, None], outs] = ranks[None, :]
    return chunk_id, origin


def _half(n: int) -> float:
    return (n - 1) / n


COLLECTIVES: dict[str, Collective] = {
    "all_reduce": Collective(
        "all_reduce", True, None, lambda n, count: count,
        lambda n, c, p: _all(n, c), lambda n, c, p: _all(n, c),
        lambda n: 2 * (n - 1) / n, False,
        "every rank ends with the reduction of all ranks' buffers"),
    "reduce_scatter": Collective(
        "reduce_scatter", True, None, lambda n, count: count,
        lambda n, c, p: _all(n, c), lambda n, c, p: _block_of_rank(n, c, "reduce_scatter"),
        _half, True, "rank r ends with block r of the reduction (reduce_scatter_tensor)",
        layout="blocked"),
    "all_gather": Collective(
        "all_gather", False, None, lambda n, count: n * count,
        lambda n, c, p: _block_of_rank(n, c, "all_gather"), lambda n, c, p: _all(n, c),
        _half, True,
        "every rank ends with all ranks' buffers concatenated (all_gather_into_tensor)",
        layout="blocked"),
    "broadcast": Collective(
        "broadcast", False, "src", lambda n, count: count,
        lambda n, c, p: _only_root(n, c, _root(n, p)), lambda n, c, p: _all(n, c),
        lambda n: 1.0, False, "every rank ends with the root's (src's) buffer"),
    "reduce": Collective(
        "reduce", True, "dst", lambda n, count: count,
        lambda n, c, p: _all(n, c), lambda n, c, p: _only_root(n, c, _root(n, p)),
        lambda n: 1.0, False, "the root (dst) ends with the reduction of all ranks' buffers"),
    "scatter": Collective(
        "scatter", False, "src", lambda n, count: count,
        lambda n, c, p: _only_root(n, c, _root(n, p)),
        lambda n, c, p: _block_of_rank(n, c, "scatter"), _half, True,
        "rank r ends with block r of the root's (src's) buffer", layout="blocked"),
    "gather": Collective(
        "gather", False, "dst", lambda n, count: n * count,
        lambda n, c, p: _block_of_rank(n, c, "gather"),
        lambda n, c, p: _only_root(n, c, _root(n, p)), _half, True,
        "the root (dst) ends with all ranks' buffers concatenated", layout="blocked"),
    "all_to_all": Collective(
        "all_to_all", False, None, lambda n, count: count,
        lambda n, c, p: _a2a_inputs(n, c),
        lambda n, c, p: _a2a_outputs(n, c), _half, True,
        "rank r sends its block j to rank j and ends with every rank's block r "
        "(all_to_all, all_to_all_single)", layout="all_to_all", sources=_a2a_sources),
}


def get_collective(name: str) -> Collective:
    """The contract of ``name``.

    Raises:
        ArgumentError: unknown collective (the message lists the known ones).
    """
    try:
        return COLLECTIVES[name]
    except (KeyError, TypeError):
        raise ArgumentError(f"collective={name!r} is unknown; expected one of "
                            f"{', '.join(COLLECTIVES)}") from None
