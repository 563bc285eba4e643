"""Rank buffers in and out of the simulator's storage, per the collective's contract.

All ranks live in one array ``S`` of shape (world_size, num_chunks, m): rank r's chunk c is
``S[r, c, :size[r, c]]``, with the sizes from the collective's contract
(``Collective.chunk_sizes``: they may differ per rank, e.g. uneven all_to_all splits) and m the
largest. The padding of shorter chunks holds the reduce op's identity, so every chunk can be moved
as a full row of m elements. When every chunk has the same size there is no padding and ``S``
reshaped to (world_size, num_chunks·m) *is* the all-ranks working buffer, so for collectives
whose input fills the whole buffer the only full copy is the initial one (the caller's inputs are
never modified).

Here: reading the caller's inputs (:func:`_rows`), checking that a schedule's transfers fit the
chunk sizes, loading the input chunks, unloading the output chunks and shaping them as
torch.distributed does.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError
from ..ir import Schedule

def _uniform_rows(sizes: np.ndarray) -> bool:
    """True if every rank has the same chunk sizes."""
    return sizes.strides[0] == 0 or bool((sizes == sizes[:1]).all())


def _load(rows, storage: np.ndarray, sizes: np.ndarray, lists, even: bool) -> None:
    """Copy each rank's input into its input chunks (in order) of ``storage`` (N, C, m)."""
    n, c, m = storage.shape
    if even and isinstance(lists, np.ndarray) and isinstance(rows, np.ndarray):
        k = lists.shape[1]
        first = lists[0]
        if (lists.strides[0] == 0 or (lists == first).all()) and k and \
                (np.diff(first) == 1).all():  # one contiguous range, the same on every rank
            storage.reshape(n, c * m)[:, first[0] * m:(first[-1] + 1) * m] = rows
        elif k:
            storage[np.arange(n)[:, None], lists] = rows.reshape(n, k, m)
        return
    for r in range(n):  # setup, not a step: one vectorized copy per rank
        chunks = np.asarray(lists[r], dtype=np.int64)
        if chunks.size:
            storage.reshape(n, c * m)[r, _element_index(chunks * m, sizes[r, chunks])] = rows[r]


def _element_index(offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Offsets in a rank's buffer of the elements of chunks that start at ``offsets`` and hold
    ``lengths`` elements, concatenated (padded storage: ``offsets = chunks · m``)."""
    starts = np.cumsum(lengths) - lengths
    total = int(lengths.sum())
    return np.repeat(offsets - starts, lengths) + np.arange(total)


def _unload(storage: np.ndarray, sizes: np.ndarray, lists, even: bool) -> list:
    """Each rank's output: its output chunks concatenated (a view when possible)."""
    n, c, m = storage.shape
    if even and isinstance(lists, np.ndarray):
        k = lists.shape[1]
        first = lists[0]
        same = lists.strides[0] == 0 or bool((lists == first).all())
        if same and k and (np.diff(first) == 1).all():
            return storage.reshape(n, c * m)[:, first[0] * m:(first[-1] + 1) * m]
        return storage[np.arange(n)[:, None], lists].reshape(n, k * m)
    parts = []
    for r in range(n):
        chunks = np.asarray(lists[r], dtype=np.int64)
        parts.append(storage.reshape(n, c * m)[r, _element_index(chunks * m, sizes[r, chunks])])
    return parts


def _stack(parts):
    """An (N, L) array when every part has length L, else a tuple of 1-D arrays."""
    if isinstance(parts, np.ndarray):
        return parts
    lengths = {p.shape[0] for p in parts}
    if len(lengths) <= 1 and parts:
        return np.stack(parts)
    return tuple(np.ascontiguousarray(p) for p in parts)


def _row_shape(row):
    """``row``'s shape, or None when the row is itself ragged."""
    try:
        return np.shape(row)
    except ValueError:
        return None


def _ragged_error(inputs) -> ArgumentError:
    """The error for a sequence of rows that numpy cannot stack into (world_size, count)."""
    shapes = [_row_shape(r) for r in inputs]
    bad = next((i for i, shape in enumerate(shapes) if shape is None or shape != shapes[0]), 0)
    got = "is itself ragged" if shapes[bad] is None else f"has shape {shapes[bad]}"
    first = "" if bad == 0 else f"inputs[0] has shape {shapes[0]} but "
    return ArgumentError(
        f"inputs must have shape (world_size, count), one row of the same length per rank; "
        f"{first}inputs[{bad}] {got} (rows of different lengths need all_to_all with "
        "input_split_sizes/output_split_sizes)")


def _rows(spec, inputs, splits: bool):
    """The inputs as an (N, count) array, or (all_to_all with split sizes) a list of 1-D rows."""
    if splits and isinstance(inputs, (list, tuple)):
        rows = []
        for i, r in enumerate(inputs):
            try:
                rows.append(np.asarray(r))
            except ValueError:
                raise ArgumentError(f"inputs[{i}] is itself ragged; with split sizes inputs must "
                                    "be a sequence of 1-D arrays, one per rank") from None
            if rows[-1].ndim != 1:
                raise ArgumentError(f"inputs[{i}] has shape {rows[-1].shape}; with split sizes "
                                    "inputs must be a sequence of 1-D arrays, one per rank")
        dtypes = {r.dtype for r in rows}
        if len(dtypes) > 1:
            raise ArgumentTypeError(f"inputs rows have different dtypes: "
                                    f"{', '.join(sorted(d.name for d in dtypes))}")
        if len({r.shape[0] for r in rows}) == 1:
            return np.stack(rows)
        return rows
    try:
        x = np.asarray(inputs)
    except ValueError:
        # numpy refuses ragged rows from deep inside np.asarray: name the first odd row instead
        if not isinstance(inputs, (list, tuple)):
            raise
        raise _ragged_error(inputs) from None
    except TypeError as exc:  # e.g. a torch bfloat16 tensor: numpy has no such dtype
        dtype = getattr(inputs, "dtype", None)
        raise ArgumentTypeError(f"inputs ({type(inputs).__name__}, dtype {dtype}) cannot be "
                                f"read as a numpy array: {exc}; convert it first (bfloat16: "
                                "x.float())") from None
    if x.ndim != 2:
        raise ArgumentError(f"inputs must have shape (world_size, count), got shape {x.shape}")
    return x


def _check_transfer_sizes(schedule: Schedule, sizes: np.ndarray) -> None:
    """Every transfer must move a chunk into a slot of the same size."""
    uniform = _uniform_rows(sizes)
    moves = schedule._cache.get("moves")
    if moves is None:
        moves = schedule._cache["moves"] = np.nonzero(schedule.src_chunk != schedule.dst_chunk)[0]
    idx = moves if uniform else slice(None)
    a = sizes[schedule.src[idx], schedule.src_chunk[idx]]
    b = sizes[schedule.dst[idx], schedule.dst_chunk[idx]]
    if (a != b).any():
        i = int(np.argmax(a != b))
        t = schedule.transfer(int(moves[i]) if uniform else i)
        raise ArgumentError(
            f"{schedule.algorithm} {schedule.collective} moves R{t.src}'s chunk c{t.src_chunk} "
            f"({int(a[i])} elements) into R{t.dst}'s chunk c{t.dst_chunk} ({int(b[i])} elements) "
            f"at step {int(schedule.step_of(moves[i] if uniform else i))}; with these sizes "
            "it cannot run (uneven all_to_all splits need a schedule that moves every block "
            "straight to its own slot, such as direct)")


def _shape(spec, parts, rows, root, splits):
    """Per-rank output parts in torch.distributed's shapes (see :func:`simulate`)."""
    if spec.name == "gather":
        return np.ascontiguousarray(parts[root])
    if spec.name == "reduce":
        result = np.array(rows, copy=True)  # the other ranks keep their inputs
        result[root] = parts[root]
        return result
    if splits:
        return tuple(np.ascontiguousarray(p) for p in parts)
    return _stack(parts)


def _in_place(spec, out, rows) -> bool:
    """Whether ``out`` (the (N, L) storage) shares memory with the (N, count) ``rows`` in one
    of the in-place forms the collectives define (NCCL User Guide, "In-place Operations"):
    ``out`` is ``rows`` itself (the row is the rank's working buffer: all_reduce, broadcast,
    reduce, reduce_scatter, scatter), or ``rows`` views each row's own block of ``out``
    (all_gather, gather: row r is ``out[r, r·count:(r+1)·count]``). False: no overlap.

    Raises:
        ArgumentError: any other overlap (partial, another block, another layout), naming both.
    """
    parts = rows if isinstance(rows, np.ndarray) else None
    if parts is None or not np.shares_memory(out, parts):
        if parts is None and any(np.shares_memory(out, r) for r in rows):
            raise ArgumentError("out shares memory with inputs' rows of different lengths, "
                                "which simulate does not define; pass arrays that do not "
                                "overlap")
        return False
    count = rows.shape[1]
    start = out.__array_interface__["data"][0]
    same = (rows.__array_interface__["data"][0] == start and rows.shape == out.shape
            and rows.strides == out.strides)
    diagonal = (spec.name in ("all_gather", "gather") and count and
                rows.__array_interface__["data"][0] == start and
                out.shape[1] == out.shape[0] * count and
                rows.strides == (out.strides[0] + count * out.itemsize, out.itemsize))
    if spec.name in ("all_gather", "gather"):
        if diagonal:
            return True
        allowed = "inputs[r] = out[r, r * count:(r + 1) * count] (each rank's own block)"
    else:
        if same and spec.name != "all_to_all":
            return True
        allowed = "out is inputs (the same array)" if spec.name != "all_to_all" else \
            "none for all_to_all, whose storage also holds the received blocks"
    raise ArgumentError(f"out shares memory with inputs in a form {spec.name} does not define "
                        f"(the result would depend on the order the steps touch them); "
                        f"allowed: {allowed}, or arrays that do not overlap")


def _store_outputs(spec, out, outputs, lists, sizes, root) -> None:
    """Write each rank's output (``outputs``: :func:`simulate`'s, final) into its output
    chunks of the (N, L) working buffer ``out`` (chunk k of rank r at the sum of its chunks
    before k: any chunk sizes) and nothing else (an in-place call)."""
    n = out.shape[0]
    for r in range(n):
        chunks = np.asarray(lists[r], dtype=np.int64)
        if not chunks.size:
            continue
        row = np.asarray(sizes[r], dtype=np.int64)
        starts = np.cumsum(row) - row                    # unpadded offset of every chunk
        value = outputs if spec.name == "gather" else outputs[r]
        out[r, _element_index(starts[chunks], row[chunks])] = value


def _divide(spec, outputs, n, root, dtype):
    if spec.name == "reduce":
        np.true_divide(outputs[root], n, out=outputs[root])
        return outputs
    if isinstance(outputs, tuple):
        return tuple(np.true_divide(o, n, dtype=dtype) for o in outputs)
    np.true_divide(outputs, n, out=outputs)
    return outputs
