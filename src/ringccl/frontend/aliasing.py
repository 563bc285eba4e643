"""Which sharing of memory between a collective's inputs and outputs the API defines, checked
before any data moves.

A collective reads its inputs and writes its outputs. Where an output shares memory with an
input, the result would depend on the order in which an executor touches them, except in the
forms the collectives define (NCCL User Guide, "In-place Operations"; the MPI standard's
``MPI_IN_PLACE``, MPI 4.0 chapter 6, "Collective Communication"):

* all_reduce, broadcast, reduce: one buffer, always in place;
* reduce_scatter: the output is exactly the input's block ``rank``;
* all_gather: the input is exactly the output's block ``rank``;
* scatter: on the root, the output is exactly the root's own block of ``scatter_list``;
* gather: on the root, the input is exactly the root's own block of ``gather_list``;
* all_to_all: the output is the input itself (the same elements in the same layout); with
  lists, output i is input i.

For those the contract is: the input is unchanged except where the output overlaps it, and the
output outside the elements the call defines is unchanged. Any other overlap of an input and an
output (partial, another rank's block, another layout) is refused with an
:class:`ringccl.errors.ArgumentError` naming both arguments (:func:`refuse`).

Overlaps are exact: a backend's ``shares_memory`` answers whether two arrays have an element in
common; :func:`pairs` asks it only for the pairs whose byte spans meet (a sweep over the spans
sorted by start: lists of per-rank blocks cost O(n log n), not n²).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import ArgumentError

__all__ = ["pairs", "refuse", "check_blocks", "check_exchange"]


def pairs(b, writes: Sequence[Any], reads: Sequence[Any]) -> list[tuple[int, int]]:
    """``(i, j)`` for every ``writes[i]`` that shares an element with ``reads[j]``, in order."""
    spans = []
    for kind, arrays in ((0, writes), (1, reads)):
        for i, a in enumerate(arrays):
            lo, hi = b.span(a)
            if hi > lo:
                spans.append((lo, hi, kind, i))
    spans.sort()
    found, active = [], []     # active: (hi, kind, index) of the spans that may still meet
    for lo, hi, kind, i in spans:
        active = [s for s in active if s[0] > lo]
        for _, other_kind, j in active:
            if other_kind != kind:
                w, r = (i, j) if kind == 0 else (j, i)
                if b.shares_memory(writes[w], reads[r]):
                    found.append((w, r))
        active.append((hi, kind, i))
    return sorted(found)


def refuse(function: str, written: str, read: str, allowed: str) -> ArgumentError:
    """The error for ``written`` (an output argument) sharing memory with ``read`` (an input)
    in a form ``function`` does not define; ``allowed``: the form it does."""
    return ArgumentError(f"{function}: {written} shares memory with {read}, which "
                         f"{function} does not define (the result would depend on the order "
                         f"the call touches them); allowed: {allowed}, or arrays that do not "
                         "overlap")


def check_blocks(b, function: str, buffer, buffer_name: str, blocks: list, blocks_name: str,
                 root: int, buffer_written: bool) -> None:
    """A root's ``buffer`` against its list of ``blocks`` (scatter: the blocks are read and the
    buffer written, ``buffer_written``; gather: the other way round): they may share memory
    only as the root's own block, ``blocks[root]`` that very view, or with one array of
    world_size blocks, its block ``root`` (contiguous).

    Raises:
        ArgumentError: any other overlap, naming both arguments.
    """
    one = len(blocks) == 1 and b.numel(blocks[0]) != b.numel(buffer)   # MPI's one array
    found = pairs(b, [buffer], blocks) if buffer_written else \
        [(j, i) for i, j in pairs(b, blocks, [buffer])]
    for _, j in found:
        if one:
            whole = blocks[0]
            if b.contiguous(whole) and b.is_block(buffer, b.view1d(whole), root):
                continue
            name, allowed = blocks_name, f"{buffer_name} = block {root} (the root's own) of " \
                f"a contiguous {blocks_name}"
        else:
            if j == root and b.same(buffer, blocks[j]):
                continue
            name, allowed = f"{blocks_name}[{j}]", f"{buffer_name} is {blocks_name}[{root}] " \
                "(the root's own block)"
        written, read = (buffer_name, name) if buffer_written else (name, buffer_name)
        raise refuse(function, written, read, allowed)


def check_exchange(b, function: str, outputs: list, inputs: list, names: tuple[str, str],
                   lists: bool) -> None:
    """all_to_all's ``outputs`` against its ``inputs``: output i may share memory only with
    input i, and then be that very view (in place).

    Raises:
        ArgumentError: any other overlap, naming both arguments.
    """
    out_name, in_name = names
    for i, j in pairs(b, outputs, inputs):
        if i == j and b.same(outputs[i], inputs[j]):
            continue
        written, read = (f"{out_name}[{i}]", f"{in_name}[{j}]") if lists else names
        raise refuse(function, written, read,
                     f"{out_name}[i] is {in_name}[i]" if lists else f"{out_name} is {in_name}")
