"""A collective's contract mapped onto one rank's working buffer, for any backend.

:mod:`ringccl.torch` and :mod:`ringccl.mpi` run every algorithm the same way: build the
schedule, lay the collective's contract (:mod:`ringccl.collectives`: which chunks a rank's input
fills, which form its output, how many elements each has) out on a 1-D working buffer, copy the
input into its chunks, execute, read the output chunks back. This module is that layout, with no
tensor library: numpy bounds and chunk lists, plus the argument checks both APIs share (roots,
split sizes, the all_to_all block agreement).

Chunks a rank never touches (no input, no output, never sent or received) get no memory: the
non-root ranks of scatter and gather hold only the blocks of their subtree.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from .args import check_int
from .caches import clear_caches, memoize
from .collectives import get_collective, split_safe
from .errors import ArgumentError, ArgumentTypeError

__all__ = ["Layout", "layout", "runs", "rooted", "split_rows", "check_own_block",
           "all_to_all_sizes"]


class Layout(NamedTuple):
    """A schedule mapped onto this rank's working buffer (arrays are read-only)."""

    schedule: Any
    bounds: np.ndarray      # (num_chunks + 1,) element offsets; untouched chunks are empty
    inputs: np.ndarray      # chunks this rank's input fills, in order
    outputs: np.ndarray     # chunks that form this rank's output, in order
    input_runs: tuple       # buffer ranges of the input chunks, adjacent ones merged
    output_runs: tuple      # the same for the output chunks
    offsets: tuple          # ``bounds`` as a tuple of ints (what the MPI executor takes)
    # whether this rank's receives write only its output chunks: then the caller's input may
    # be the working buffer of an in-place call and stays unchanged outside the output
    writes_only_output: bool = True

    @property
    def numel(self) -> int:
        """Elements of the working buffer."""
        return int(self.bounds[-1])


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def runs(bounds: np.ndarray, chunks: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Buffer ranges of ``chunks`` concatenated, adjacent chunks merged into one range."""
    out: list[tuple[int, int]] = []
    for c in np.asarray(chunks).tolist():
        a, b = int(bounds[c]), int(bounds[c + 1])
        if out and out[-1][1] == a:
            out[-1] = (out[-1][0], b)
        elif b > a or not out:
            out.append((a, b))
    return tuple(out)


@memoize(maxsize=256)
def _layout(schedule, rank: int, buffer_count: int | None, sizes: tuple | None) -> Layout:
    spec = get_collective(schedule.collective)
    n, c = schedule.world_size, schedule.num_chunks
    if sizes is None:
        row = spec.chunk_sizes(n, c, buffer_count, schedule.params)[rank]
    else:
        row = np.asarray(sizes, dtype=np.int64)
    inputs = np.asarray(spec.input_chunks(n, c, schedule.params)[rank], dtype=np.int64)
    outputs = np.asarray(spec.output_chunks(n, c, schedule.params)[rank], dtype=np.int64)
    touched = (schedule.chunk_sends()[rank] > 0) | (schedule.chunk_recvs()[rank] > 0)
    touched[inputs] = True
    touched[outputs] = True
    bounds = np.zeros(c + 1, dtype=np.int64)
    np.cumsum(np.where(touched, row, 0), out=bounds[1:])
    written = (schedule.chunk_recvs()[rank] > 0) & (row > 0)
    written[outputs] = False
    return Layout(schedule, _readonly(bounds), _readonly(inputs), _readonly(outputs),
                  runs(bounds, inputs), runs(bounds, outputs), tuple(bounds.tolist()),
                  not bool(written.any()))


def layout(schedule, rank: int, buffer_count: int | None = None,
           sizes: Sequence[int] | None = None) -> Layout:
    """This rank's working buffer for ``schedule`` (cached per schedule, rank and size;
    :func:`ringccl.clear_caches` forgets them).

    Args:
        schedule: a built schedule (its collective, world_size, num_chunks and params decide the
            contract).
        rank: this rank, in the schedule's numbering (the communicator's / group's rank).
        buffer_count: the collective's size M in elements (``Collective.buffer_count``): chunk
            sizes come from ``Collective.chunk_sizes``.
        sizes: instead of ``buffer_count``, this rank's num_chunks chunk sizes (all_to_all with
            split sizes: :func:`all_to_all_sizes`).
    """
    if sizes is not None:
        sizes = tuple(int(s) for s in sizes)
    return _layout(schedule, int(rank), buffer_count, sizes)


# The layouts are one of the tables ringccl.clear_caches() empties; this name stays only for
# ringccl.mpi's release_buffers, which imports it (it clears every cache, as that function does).
clear_cache = clear_caches


def rooted(params: dict, root: int) -> dict:
    """The algorithm's parameters with the collective's root (given as ``src``/``dst``) added."""
    if "root" in params:
        raise ArgumentError(f"give the root as src/dst, not as root={params['root']!r}")
    return {**params, "root": root}


def split_rows(sizes: Any, argument: str, world_size: int, rows: int, name: str) -> list[int]:
    """torch.distributed's / MPI_Alltoallv's split sizes along dim 0 (None: equal splits).

    Args:
        sizes: world_size integers >= 0 (Python or numpy ints), or None.
        argument: the argument's name for messages (``input_split_sizes``).
        rows: the array's rows (its dim 0; 1 for a 0-d array); name: the array's name.

    Raises:
        ArgumentTypeError: not a sequence, or an entry that is not an integer.
        ArgumentError: None with ``rows`` not divisible by world_size, the wrong number of
            sizes, a negative size, or sizes that do not sum to ``rows``.
    """
    if sizes is None:
        if rows % world_size:
            raise ArgumentError(f"{name} has {rows} rows (dim 0), not divisible by "
                                f"world_size={world_size}; give {argument}")
        return [rows // world_size] * world_size
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
        raise ArgumentTypeError(f"{argument}={sizes!r} must be a list of world_size={world_size} "
                                f"integers >= 0, got {type(sizes).__name__}")
    if len(sizes) != world_size:
        raise ArgumentError(f"{argument}={list(sizes)!r} has {len(sizes)} entries; it must have "
                            f"world_size={world_size} (one per rank)")
    sizes = [check_int(v, f"{argument}[{i}]") for i, v in enumerate(sizes)]
    if sum(sizes) != rows:
        raise ArgumentError(f"{argument} sums to {sum(sizes)}, but {name} has {rows} rows "
                            f"(dim 0): {argument}={sizes!r} must sum to {name}.shape[0]")
    return sizes


def check_own_block(rank: int, sent: int, received: int, sent_name: str, received_name: str,
                    unit: str) -> None:
    """The block a rank sends to itself must fit the slot it receives it in (the one pair of
    split sizes checkable without asking the other ranks; ``check=True`` compares the rest).

    Raises:
        ArgumentError: they differ.
    """
    if sent != received:
        raise ArgumentError(f"{received_name.format(rank)}={received} {unit}, but this rank (rank "
                            f"{rank}) sends itself {sent_name.format(rank)}={sent} {unit}; "
                            "they must be equal")


def all_to_all_sizes(schedule, in_sizes: Sequence[int], out_sizes: Sequence[int],
                     agree: Callable[[int, int], tuple[int, int]]) -> np.ndarray:
    """This rank's all_to_all chunk sizes: input blocks, output blocks, scratch blocks.

    Schedules with scratch chunks, or that park blocks in other blocks' slots
    (:func:`ringccl.collectives.split_safe` is False), need one block size on every rank; then
    ``agree(largest, -smallest)`` must return the maximum of both over all ranks (a collective
    call: every rank reaches the same verdict, so none is left waiting).

    Raises:
        ArgumentError: unequal blocks for such a schedule (on every rank alike).
    """
    n, c = schedule.world_size, schedule.num_chunks
    sizes = np.zeros(c, dtype=np.int64)
    sizes[:n], sizes[n:2 * n] = in_sizes, out_sizes
    if not split_safe(schedule):
        local = list(in_sizes) + list(out_sizes)
        largest, neg_smallest = agree(max(local, default=0), -min(local, default=0))
        if largest != -neg_smallest:
            raise ArgumentError(f"algorithm={schedule.algorithm!r} moves all_to_all blocks "
                                "through scratch chunks or other blocks' slots, which needs equal "
                                "blocks on every rank, but the split sizes differ; use an "
                                "algorithm such as direct for uneven splits")
        sizes[2 * n:] = largest
    return sizes
