"""The simulator fuzz: one hypothesis strategy over every collective × registered algorithm ×
op × dtype × world size × count (× root, segments, local_size, uneven all_to_all splits), and an
independent numpy reference to check a case against.

Used by tests/test_fuzz.py (a small CI profile) and benchmarks/fuzz_sim.py (>= 10,000 examples).
The reference is written here from torch.distributed's semantics (numpy.array_split blocks,
a per-element fold over ranks), not from ringccl's own checker.

Floating reductions also draw accumulate_dtype (None or a wider float).

Sizes: world sizes 1…64 and counts 0…10,000, drawn so that the simulator's storage (N·count
elements, N²·count for all_gather and gather) stays within :data:`MAX_ELEMENTS`: large N × large
count cases cost O(N·count) per step over O(N) steps, and they add little that small cases do
not exercise, while edge counts (0, 1, N−1, N, N+1) and small N are where the bugs are.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import ringccl
from ringccl.algorithms import REGISTRY
from ringccl.collectives import split_safe

DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
FLOAT_OPS = ("sum", "prod", "min", "max", "avg")
INT_OPS = ("sum", "prod", "min", "max", "band", "bor", "bxor")
ROOT_ARG = {"broadcast": "src", "scatter": "src", "reduce": "dst", "gather": "dst"}
MAX_WORLD_SIZE = 64
MAX_COUNT = 10_000
#: largest simulator storage (elements) a case may need; bounds the time of one example
MAX_ELEMENTS = 1 << 18

_UFUNC = {"sum": np.add, "avg": np.add, "prod": np.multiply, "min": np.minimum,
          "max": np.maximum, "band": np.bitwise_and, "bor": np.bitwise_or,
          "bxor": np.bitwise_xor}


@dataclass(frozen=True)
class Case:
    """One fuzz case: everything :func:`run_case` needs, printable for a failure report."""

    collective: str
    algorithm: str
    world_size: int
    count: int
    dtype: str
    op: str
    root: int
    params: dict = field(default_factory=dict)
    splits: tuple | None = None   # all_to_all: (N, N) input split sizes, row r = rank r's
    seed: int = 0
    accumulate_dtype: str | None = None  # reducing collectives on floats only


def _storage(collective: str, n: int, count: int) -> int:
    return n * n * count if collective in ("all_gather", "gather") else n * count


@st.composite
def fuzz_cases(draw, max_world_size: int = MAX_WORLD_SIZE, max_count: int = MAX_COUNT,
               max_elements: int = MAX_ELEMENTS) -> Case:
    """A :class:`Case` over every (collective, algorithm) in the registry at draw time."""
    collective, algorithm = draw(st.sampled_from(sorted(REGISTRY)))
    # small world sizes more often (edges, non-powers of two), up to max_world_size
    n = draw(st.one_of(st.integers(1, 9), st.integers(1, max_world_size)))
    cap = max(0, min(max_count, max_elements // max(1, _storage(collective, n, 1))))
    edges = sorted({c for c in (0, 1, n - 1, n, n + 1, 2 * n + 1) if 0 <= c <= cap})
    count = draw(st.one_of(st.sampled_from(edges), st.integers(0, min(cap, 64)),
                           st.integers(0, cap)))
    dtype = draw(st.sampled_from(DTYPES))
    op = draw(st.sampled_from(FLOAT_OPS if dtype.startswith("float") else INT_OPS))
    root = draw(st.integers(0, n - 1))
    takes = inspect.signature(REGISTRY[collective, algorithm].builder).parameters
    params = {}
    if "segments" in takes:
        params["segments"] = draw(st.sampled_from([None, 1, 2, 3, 8]))
        if params["segments"] is None:
            del params["segments"]
    if "local_size" in takes:
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        local = draw(st.one_of(st.none(), st.sampled_from(divisors)))
        if local is not None:
            params["local_size"] = local
    if "root" in takes and collective not in ROOT_ARG:  # master all_reduce
        params["root"] = root
    splits = None
    safe = collective != "all_to_all" or split_safe(ringccl.schedule(collective, algorithm,
                                                                     world_size=n))
    if not safe:  # scratch-chunk all_to_all (bruck) needs equal blocks: refused otherwise
        count -= count % n
    elif collective == "all_to_all":
        if draw(st.booleans()):
            per = max(0, min(8, max_elements // max(1, n * n)))
            rows = draw(st.lists(st.lists(st.integers(0, per), min_size=n, max_size=n),
                                 min_size=n, max_size=n))
            splits = tuple(tuple(r) for r in rows)
    accumulate = None
    if ringccl.get_collective(collective).reduces and dtype in ("float16", "float32"):
        wider = ["float32", "float64"] if dtype == "float16" else ["float64"]
        accumulate = draw(st.one_of(st.none(), st.sampled_from(wider)))
    return Case(collective, algorithm, n, count, dtype, op, root, params, splits,
                draw(st.integers(0, 2 ** 32 - 1)), accumulate)


# -- inputs and the independent reference ---------------------------------------------------------

def inputs(case: Case):
    """Rank r's input is row r: (N, count), or a list of rows when all_to_all splits differ.

    Floats: standard normal for sum/avg/min/max; for prod, magnitudes in [0.9, 1.1) with random
    signs, so products over 64 ranks stay well inside float16's range."""
    rng = np.random.default_rng(case.seed)
    dtype = np.dtype(case.dtype)
    n = case.world_size
    lengths = ([sum(r) for r in case.splits] if case.splits is not None
               else [case.count] * n)

    def row(length):
        if dtype.kind == "b":
            return rng.integers(0, 2, size=length).astype(bool)
        if dtype.kind == "f":
            if case.op == "prod":
                return (rng.uniform(0.9, 1.1, length) * rng.choice([-1, 1], length)).astype(dtype)
            return rng.standard_normal(length).astype(dtype)
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=length, endpoint=True, dtype=dtype)

    rows = [row(k) for k in lengths]
    if len(set(lengths)) <= 1:
        return np.stack(rows) if rows else np.zeros((0, 0), dtype)
    return rows


def _fold(x: np.ndarray, op: str) -> np.ndarray:
    """Exact per-element fold over ranks in x's dtype (integers and bool: wraps like numpy)."""
    acc = x[0].copy()
    for r in x[1:]:
        acc = _UFUNC[op](acc, r)
    return acc


_BITS = {"float16": (11, 5), "float32": (24, 8), "float64": (53, 11)}


def _reduced(x: np.ndarray, op: str, accumulate: str | None = None):
    """(expected values in float64 or x's dtype, absolute tolerance or None for exact).

    Floating sums: Higham §4.2, |ŝ − s| <= γ_{N−1}·Σ|x_i| with γ_k = k·u/(1 − k·u) for the
    dtype the additions round to; accumulating in a wider dtype adds one rounding to x's dtype
    (u·|result|, or half the smallest subnormal)."""
    n = x.shape[0]
    if x.dtype.kind != "f" or op in ("min", "max"):
        return _fold(x, op), None
    p, e = _BITS[x.dtype.name]
    u = 2.0 ** -p
    ua = u if accumulate is None else 2.0 ** -_BITS[accumulate][0]
    gamma = (n - 1) * ua / (1 - (n - 1) * ua)  # γ_{N−1}
    last = 0.0 if accumulate is None else u  # the final rounding back to x's dtype
    tiny = 0.0 if accumulate is None else 2.0 ** (2 - 2 ** (e - 1) - p)
    x64 = x.astype(np.float64)
    slack = 2 * n * 2.0 ** -52  # the float64 reference's own rounding
    if op == "prod":
        ref = np.prod(x64, axis=0)
        return ref, (gamma + last + gamma * last + slack) * np.abs(ref) + tiny
    ref = x64.sum(axis=0)
    abs_sum = np.abs(x64).sum(axis=0)
    tol = (gamma + slack) * abs_sum + last * (np.abs(ref) + gamma * abs_sum) + tiny
    if op == "avg":
        ref = ref / n
        tol = tol / n + 2 * u * np.abs(ref) + tiny
    return ref, tol


def expected(case: Case, x):
    """Per-rank expected outputs (gather: the root's only) as (values, tolerance) pairs."""
    n, c, root = case.world_size, case.collective, case.root
    if c in ("all_reduce", "reduce", "reduce_scatter"):
        ref, tol = _reduced(x, case.op, case.accumulate_dtype)
        if c == "all_reduce":
            return [(ref, tol)] * n
        if c == "reduce":
            return [(ref, tol) if r == root else (x[r], None) for r in range(n)]
        blocks = np.array_split(np.arange(case.count), n)
        return [(ref[b], None if tol is None else tol[b]) for b in blocks]
    if c == "broadcast":
        return [(x[root], None)] * n
    if c == "scatter":
        return [(b, None) for b in np.array_split(x[root], n)]
    if c in ("all_gather", "gather"):
        full = np.concatenate(list(x)) if n else x.reshape(-1)
        return [(full, None)] * (n if c == "all_gather" else 1)
    if case.splits is None:  # all_to_all: rank r receives block r of every rank, in rank order
        blocks = [np.array_split(row, n) for row in x]
        return [(np.concatenate([blocks[i][r] for i in range(n)]), None) for r in range(n)]
    ins = np.asarray(case.splits, dtype=np.int64)
    off = np.cumsum(ins, axis=1) - ins
    return [(np.concatenate([x[i][off[i, r]:off[i, r] + ins[i, r]] for i in range(n)]), None)
            for r in range(n)]


def run_case(case: Case) -> list[str]:
    """Simulate ``case`` and compare with :func:`expected`; returns the mismatches found (empty
    when everything matches). Exceptions from the simulator propagate."""
    x = inputs(case)
    before = [np.array(r, copy=True) for r in x]
    kwargs = dict(case.params)
    if case.collective in ROOT_ARG:
        kwargs[ROOT_ARG[case.collective]] = case.root
    if case.splits is not None:
        kwargs["input_split_sizes"] = np.asarray(case.splits, dtype=np.int64)
    if case.accumulate_dtype is not None:
        kwargs["accumulate_dtype"] = case.accumulate_dtype
    r = ringccl.simulate(case.collective, x, op=case.op, algorithm=case.algorithm, **kwargs)
    problems = []
    if not all(np.array_equal(a, b) for a, b in zip(x, before)):
        problems.append("inputs were modified")
    got = [r.outputs] if case.collective == "gather" else list(r.outputs)
    want = expected(case, x)
    if len(got) != len(want):
        return problems + [f"{len(got)} outputs, expected {len(want)}"]
    dtype = np.dtype(case.dtype)
    for rank, (g, (w, tol)) in enumerate(zip(got, want)):
        g = np.asarray(g)
        if g.dtype != dtype or g.shape != w.shape:
            problems.append(f"rank {rank}: {g.dtype}{g.shape}, expected {dtype}{w.shape}")
            continue
        if tol is None:
            bad = g.tobytes() != np.asarray(w, dtype=dtype).tobytes()
            if bad:
                i = int(np.argmax(g != np.asarray(w, dtype=dtype)))
                problems.append(f"rank {rank} element {i}: {g[i]!r}, expected {w[i]!r}")
        else:
            err = np.abs(g.astype(np.float64) - w)
            over = ~(err <= tol) & (np.abs(w) <= float(np.finfo(dtype).max))
            if over.any():
                i = int(np.argmax(over))
                problems.append(f"rank {rank} element {i}: {g[i]!r}, expected {w[i]!r} "
                                f"± {tol[i]:.3g}")
    if r.matches_reference is not True:
        problems.append(f"simulate's own check: {r.mismatches} mismatches")
    return problems
