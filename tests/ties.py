"""Inputs whose MIN/MAX bits show the operand order of every ⊕ (:mod:`ringccl.ir`, "Operand
order"), and the reducing algorithms to run them through.

A tie between -0.0 and +0.0 keeps one operand's sign, and two NaNs meeting keep one operand's
payload and sign (numpy's float32/float64 minimum and maximum: the second operand of a tie,
the first NaN), so a rank that computed x0 ⊕ x1 as x1 ⊕ x0 shows in the bits. Each rank's
NaNs carry its own payloads, so the bits also say whose NaN survived. Shared by
tests/test_bitwise.py (the simulator), tests/test_engine.py (the engine against the
simulator) and tests/mpi/operand_order_script.py (real processes).
"""

from __future__ import annotations

import numpy as np

from ringccl.algorithms import REGISTRY

#: the collectives that reduce
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
OPS = ("min", "max")
DTYPES = ("float32", "float64")


def nans(rank: int, dtype) -> np.ndarray:
    """Two quiet NaNs of ``rank``'s own: payload rank + 1 positive, 2·rank + 3 negative."""
    dtype = np.dtype(dtype)
    bits = np.dtype(f"u{dtype.itemsize}")
    quiet = int(np.array(np.nan, dtype).view(bits))
    sign = 1 << (8 * dtype.itemsize - 1)
    return np.array([quiet | (rank + 1), quiet | sign | (2 * rank + 3)], bits).view(dtype)


def inputs(rng: np.random.Generator, world_size: int, count: int, dtype) -> np.ndarray:
    """(world_size, count) values of ``dtype``: per element one of three pools, the same on
    every rank: ±0 only (ties), ±0 and this rank's NaNs (ties, NaNs meeting), or those with
    ±inf and ±1 too."""
    dtype = np.dtype(dtype)
    zeros = np.array([-0.0, 0.0], dtype)
    others = np.array([np.inf, -np.inf, 1.0, -1.0], dtype)
    pool = rng.integers(0, 3, count)
    out = np.empty((world_size, count), dtype)
    for r in range(world_size):
        choices = [zeros, np.concatenate([zeros, zeros, nans(r, dtype)]),
                   np.concatenate([zeros, zeros, nans(r, dtype), others])]
        for k, values in enumerate(choices):
            at = np.flatnonzero(pool == k)
            out[r, at] = values[rng.integers(0, values.size, at.size)]
    return out


def bits(a: np.ndarray) -> np.ndarray:
    """The bytes of ``a``'s elements as unsigned integers (NaN payloads and -0.0 compare)."""
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _variants(collective: str, algorithm: str, n: int) -> list[dict]:
    """The parameters each algorithm is run with at world size ``n`` (``dst`` for reduce)."""
    if algorithm == "hierarchical":
        return [{"local_size": d} for d in range(1, n + 1) if n % d == 0]
    if collective == "reduce":
        roots = sorted({0, n // 2, n - 1})
        extra = {"tree": [{}, {"segments": 2}], "ring": [{}, {"segments": 2}]}.get(
            algorithm, [{}])
        return [{"dst": root, **e} for root in roots for e in extra]
    if algorithm == "master":
        return [{"root": 0}, {"root": n - 1}]
    if algorithm in ("tree", "double_binary_tree"):
        return [{}, {"segments": 2}]
    return [{}]


def cases(n: int) -> list[tuple[str, str, dict]]:
    """(collective, algorithm, keyword arguments) of every registered reducing algorithm at
    world size ``n``, with the parameters that change its schedule."""
    return [(c, a, kw) for c, a in sorted(REGISTRY) if c in REDUCING
            for kw in _variants(c, a, n)]
