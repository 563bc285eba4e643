"""Inputs whose exact result is known, and the one definition of a wrong result.

* **inputs with a known exact result** (:func:`make_case`, what ``ringccl bench`` and
  ``ringccl run`` measure): rank r's element e is ``T[(5e + 3r + 1) mod 13]`` for a small table T
  of integers chosen per reduce op (sums of at most a few dozen small integers, products of ±1
  and 2), so every dtype reduces exactly, in any order, and the expected output is known without
  gathering the inputs. A misplaced chunk or a missing rank changes the values (13 is prime to
  every power-of-two chunk size), so ``#wrong`` (:func:`count_wrong`: elements differing from the
  expected output, summed over ranks) catches it.
* **seeded random inputs** (:func:`random_inputs`, what ``ringccl simulate`` feeds the
  simulator, which checks them against its own float64 reference): every rank's row at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..collectives import get_collective
from ..errors import ArgumentError
from ..ops import ReduceOp, parse_op, ufunc

__all__ = ["Case", "make_case", "count_wrong", "random_inputs"]

_PERIOD = 13  # prime, so it never divides a power-of-two chunk size


def _table(op: ReduceOp, dtype: np.dtype) -> np.ndarray:
    """13 small values whose reductions over any number of ranks are exact in ``dtype``."""
    k = np.arange(_PERIOD)
    if dtype.kind == "b":
        conjunctive = op in (ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.BAND)
        return (k % 3 != 0) if conjunctive else (k % 3 == 0)
    if op is ReduceOp.PRODUCT:
        vals = np.array([1, 2, 1, 1, 2, 1, 1, 1, 2, 1, 1, 1, 1]) * (
            1 if dtype.kind == "u" else np.where(k % 4 == 1, -1, 1))
    elif op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR):
        vals = (k * 7 + 3) % 16
    elif dtype.kind == "u":
        vals = (k * 5) % 13
    else:
        vals = (k * 5) % 13 - 6
    return vals.astype(dtype)


def _tile(base: np.ndarray, start: int, length: int) -> np.ndarray:
    """Elements start … start+length-1 of the periodic sequence ``base[e mod period]``."""
    return np.resize(np.roll(base, -(start % _PERIOD)), length)


def _rank_base(table: np.ndarray, rank: int) -> np.ndarray:
    """Rank r's periodic pattern: element e is T[(5e + 3r + 1) mod 13]."""
    return table[(5 * np.arange(_PERIOD) + 3 * rank + 1) % _PERIOD]


@dataclass
class Case:
    """One rank's data for one size: what it puts in and what it must get out.

    Attributes:
        input: this rank's input (numpy, 1-D), or None when the rank contributes nothing.
        expected: what this rank's output must equal, or None when it has no output.
        m: the collective's buffer in elements; block: elements of one rank's block.
    """

    input: np.ndarray | None
    expected: np.ndarray | None
    m: int
    block: int


def make_case(collective: str, m: int, world_size: int, rank: int, root: int, op,
              dtype) -> Case:
    """Inputs and the exact expected output of ``collective`` on this rank (see module doc).

    Collectives follow torch.distributed: all_reduce, reduce_scatter (block ``rank`` of the
    reduction), all_gather, broadcast/scatter (from ``root``), reduce/gather (to ``root``),
    all_to_all (equal blocks). Non-reducing collectives ignore ``op``.

    Raises:
        ArgumentError: a collective this module has no case for.
    """
    dtype = np.dtype(dtype)
    op = parse_op(op)
    spec = get_collective(collective)
    n, block = world_size, (m // world_size if world_size else 0)
    table = _table(op if spec.reduces else ReduceOp.SUM, dtype)
    mine = _rank_base(table, rank)

    def reduced(start: int, length: int) -> np.ndarray:
        bases = np.stack([_rank_base(table, r) for r in range(n)])
        red = ufunc(op).reduce(bases, axis=0, dtype=dtype)
        if op is ReduceOp.AVG:
            red = np.divide(red, n, dtype=dtype)
        return _tile(red.astype(dtype), start, length)

    def gathered() -> np.ndarray:  # block b comes from rank b's pattern at the same offsets
        out = np.empty(m, dtype=dtype)
        for b in range(n):
            out[b * block:(b + 1) * block] = _tile(_rank_base(table, b), b * block, block)
        return out

    root_base = _rank_base(table, root)
    if collective == "all_reduce":
        return Case(_tile(mine, 0, m), reduced(0, m), m, block)
    if collective == "reduce_scatter":
        return Case(_tile(mine, 0, m), reduced(rank * block, block), m, block)
    if collective == "all_gather":
        return Case(_tile(mine, rank * block, block), gathered(), m, block)
    if collective == "broadcast":
        return Case(_tile(root_base, 0, m) if rank == root else np.zeros(m, dtype),
                    _tile(root_base, 0, m), m, block)
    if collective == "reduce":
        return Case(_tile(mine, 0, m), reduced(0, m) if rank == root else None, m, block)
    if collective == "scatter":
        return Case(_tile(root_base, 0, m) if rank == root else None,
                    _tile(root_base, rank * block, block), m, block)
    if collective == "gather":
        return Case(_tile(mine, rank * block, block), gathered() if rank == root else None, m,
                    block)
    if collective == "all_to_all":
        # output block i is rank i's input block destined to us (elements rank·block …)
        out = np.empty(m, dtype=dtype)
        for i in range(n):
            out[i * block:(i + 1) * block] = _tile(_rank_base(table, i), rank * block, block)
        return Case(_tile(mine, 0, m), out, m, block)
    raise ArgumentError(f"ringccl bench has no input/expected-output case for collective="
                        f"{collective!r} yet")




def count_wrong(result: np.ndarray | None, expected: np.ndarray | None) -> int:
    """``#wrong``: the elements of ``result`` that differ from ``expected`` (NaN equals NaN).

    None expected (the rank has no output): 0. None result, or another shape: every expected
    element is wrong.
    """
    if expected is None:
        return 0
    if result is None or result.shape != expected.shape:
        return int(expected.size)
    if expected.dtype.kind == "f":
        return int(np.count_nonzero(~((result == expected) | (np.isnan(result)
                                                             & np.isnan(expected)))))
    return int(np.count_nonzero(result != expected))


def random_inputs(world_size: int, count: int, dtype, seed: int = 0) -> np.ndarray:
    """Every rank's input, (world_size, count) in ``dtype``: random integers in [-8, 8) ([0, 8)
    for unsigned dtypes, 0/1 for bool), exact in every dtype's sums at the simulator's sizes.

    The same ``seed`` gives the same array.
    """
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=(world_size, count), dtype=np.int8).astype(bool)
    low = 0 if dtype.kind == "u" else -8
    return rng.integers(low, 8, size=(world_size, count), dtype=np.int8).astype(dtype)
