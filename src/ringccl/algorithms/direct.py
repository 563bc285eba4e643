"""Direct algorithms: every piece of data goes straight from the rank that has it to the rank that
needs it, in one step; and ``master`` all-reduce through one root rank.

Step convention: a step is a set of transfers that run at the same time and costs one latency
alpha; a rank may send to and receive from many peers within one step, and the cost model charges
the busiest rank's bytes (β · max over ranks of max(bytes sent, bytes received)), so a step in
which the root receives N-1 buffers costs α + (N-1)·M·β, as a one-port rank would take. Where a
rank combines several peers' buffers into one chunk in one step (direct all_reduce,
reduce_scatter, reduce), the result is the left fold in ascending rank with the rank's own value
at its own position (the IR's reduction order, ir.py), so every rank of direct all_reduce
computes x_0 ⊕ x_1 ⊕ … ⊕ x_{N-1} in the same order and gets the same bits.

M is the collective's size in bytes (``Collective.buffer_count``): one rank's buffer for
all_reduce, broadcast and reduce; the whole N-block buffer for reduce_scatter, all_gather,
scatter, gather and all_to_all. γ is charged per byte reduced by the busiest rank.

============== ===== ============================ ==========================================
collective     steps bytes sent, busiest rank     time on a flat network
============== ===== ============================ ==========================================
all_reduce     1     (N-1)·M (everyone)           α + (N-1)·M·(β + γ)
reduce_scatter 1     (N-1)/N·M                    α + (N-1)/N·M·(β + γ)
all_gather     1     (N-1)/N·M                    α + (N-1)/N·M·β
all_to_all     1     (N-1)/N·M                    α + (N-1)/N·M·β
broadcast      1     (N-1)·M (root)               α + (N-1)·M·β
reduce         1     M (each non-root)            α + (N-1)·M·(β + γ) (root receives N-1)
scatter        1     (N-1)/N·M (root)             α + (N-1)/N·M·β
gather         1     M/N (each non-root)          α + (N-1)/N·M·β (root receives N-1 blocks)
============== ===== ============================ ==========================================

``two_shot`` all-reduce is direct reduce-scatter followed by direct all-gather (N chunks; step 0:
rank r sends block j to rank j, which adds it in; step 1: rank j sends its reduced block to every
other rank): 2 steps, each rank sends 2(N-1)/N·M, T = 2α + 2(N-1)/N·M·β + (N-1)/N·M·γ. On
shared memory, where a send costs nothing and the receiver reads the peer's bytes in place, it
is the bandwidth-lean choice above the one-shot (``direct``) crossover (vLLM's and TensorRT-LLM's
custom all-reduce use one-shot for small, two-shot for large buffers; the reduce-scatter +
all-gather composition is Thakur et al.'s).

``master`` all-reduce is the centralized (master-worker) scheme, a parameter server with one
server (Li et al., OSDI 2014): the root receives every other rank's buffer one rank per step and
adds it in (N-1 steps), then sends the sum to one rank per step (N-1 steps). 2(N-1) steps; the
root sends and receives (N-1)·M each, 2(N-1)·M through one rank; T = 2(N-1)·(α + M·β) +
(N-1)·M·γ: 2(N-1) messages of M in sequence, plus the reduction term. (Receiving all at once
would be ``direct`` reduce followed by ``direct`` broadcast: 2 steps, the same bytes.) All other
ranks send and receive M once.

World size 1: no steps.

References:
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
    MPICH", IJHPCA 19(1), 2005 (direct sends; the naive scheme as baseline);
    Li et al., "Scaling Distributed Machine Learning with the Parameter Server", OSDI 2014
    (the master-worker pattern).
"""

from __future__ import annotations

import numpy as np

from ..collectives import check_root as _root
from ..ir import Schedule
from .registry import Algorithm, register
from ._build import Transfers

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce",
           "scatter", "gather", "master_all_reduce", "two_shot_all_reduce"]

_THAKUR = "Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005"
_TWO_SHOT = ("Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005 (reduce-scatter + all-gather); "
             "vLLM / TensorRT-LLM custom all-reduce (two-shot)")
_MASTER = "Li et al., OSDI 2014 (parameter server: master-worker); Thakur et al. 2005 (naive baseline)"


def _pairs(n: int):
    """(src, dst) of every ordered pair of distinct ranks, src-major."""
    src = np.repeat(np.arange(n), n - 1)
    k = np.tile(np.arange(n - 1), n)
    return src, k + (k >= src)  # skip src itself


def _one_step(collective, n, num_chunks, src, dst, src_chunk, dst_chunk=None, reduce=False,
              params=None, phase="direct") -> Schedule:
    steps = 1 if len(np.atleast_1d(src)) and n > 1 else 0
    t = Transfers()
    t.add(0, src, dst, src_chunk, dst_chunk, reduce=reduce)
    return t.schedule(collective, "direct", n, num_chunks, [phase] * steps, params=params)


def all_reduce(world_size: int) -> Schedule:
    """Naive full mesh: every rank sends its whole buffer to every other rank, which adds it in.

    One chunk; one step of N(N-1) transfers; each rank sends and reduces (N-1)·M.
    """
    src, dst = _pairs(world_size)
    return _one_step("all_reduce", world_size, 1, src, dst, 0, reduce=True)


def reduce_scatter(world_size: int) -> Schedule:
    """Every rank sends block j of its buffer to rank j, which adds it in. N chunks, one step."""
    src, dst = _pairs(world_size)
    return _one_step("reduce_scatter", world_size, world_size, src, dst, dst, reduce=True)


def all_gather(world_size: int) -> Schedule:
    """Every rank sends its block to every other rank. N chunks, one step."""
    src, dst = _pairs(world_size)
    return _one_step("all_gather", world_size, world_size, src, dst, src)


def all_to_all(world_size: int) -> Schedule:
    """Rank r sends its block j straight into rank j's output slot N + r. 2N chunks, one step.

    Every block moves once into its own slot, so uneven ``input_split_sizes`` work.
    """
    n = world_size
    src, dst = _pairs(n)
    return _one_step("all_to_all", n, 2 * n, src, dst, dst, n + src)


def broadcast(world_size: int, root: int = 0) -> Schedule:
    """The root sends its whole buffer to every other rank. One chunk, one step."""
    n = world_size
    others = np.delete(np.arange(n), _root(root, n))
    return _one_step("broadcast", n, 1, root, others, 0, params={"root": root})


def reduce(world_size: int, root: int = 0) -> Schedule:
    """Every other rank sends its whole buffer to the root, which adds all N-1 in (x_0 ⊕ … ⊕
    x_{N-1} in ascending rank, its own at its own position: the IR's order). One chunk, one
    step."""
    n = world_size
    others = np.delete(np.arange(n), _root(root, n))
    return _one_step("reduce", n, 1, others, root, 0, reduce=True, params={"root": root})


def scatter(world_size: int, root: int = 0) -> Schedule:
    """The root sends block r to rank r. N chunks, one step."""
    n = world_size
    others = np.delete(np.arange(n), _root(root, n))
    return _one_step("scatter", n, n, root, others, others, params={"root": root})


def gather(world_size: int, root: int = 0) -> Schedule:
    """Every other rank r sends its block r to the root. N chunks, one step."""
    n = world_size
    others = np.delete(np.arange(n), _root(root, n))
    return _one_step("gather", n, n, others, root, others, params={"root": root})


def master_all_reduce(world_size: int, root: int = 0) -> Schedule:
    """Reduce to ``root`` one rank per step, then send the sum back one rank per step.

    Pre/Post: all_reduce. One chunk. Steps 0 … N-2: the k-th other rank (ascending from
    root + 1, around the ring) sends its buffer to the root, which adds it in ("reduce" phase);
    steps N-1 … 2N-3: the root sends the sum to the k-th other rank ("broadcast" phase).
    Cost: 2(N-1) steps; the root sends (N-1)·M and receives (N-1)·M;
    T = 2(N-1)·(α + M·β) + (N-1)·M·γ (2(N-1) messages of M in sequence).
    """
    n = world_size
    root = _root(root, n)
    others = (root + 1 + np.arange(n - 1)) % n
    k = np.arange(n - 1)
    t = Transfers()
    t.add(k, others, root, 0, reduce=True)        # step k: the k-th other rank into the root
    t.add(n - 1 + k, root, others, 0)             # step N-1+k: the sum back to it
    return t.schedule("all_reduce", "master", n, 1,
                      ["reduce"] * (n - 1) + ["broadcast"] * (n - 1), params={"root": root})


def two_shot_all_reduce(world_size: int) -> Schedule:
    """Direct reduce-scatter, then direct all-gather (the "two-shot" all-reduce).

    Pre:  rank r holds its input vector, split into world_size chunks.
    Post: every rank holds the elementwise reduction of all inputs.
    Cost: 2 steps (N > 1); each rank sends 2(N-1)/N·M;
          T = 2α + 2(N-1)/N·M·β + (N-1)/N·M·γ.
    Args:    world_size: number of ranks N (>= 1).
    Returns: Schedule with num_chunks == world_size; phases "reduce-scatter", "all-gather".
    References: Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication
        Operations in MPICH", IJHPCA 19(1), 2005; vLLM custom_all_reduce.cuh, TensorRT-LLM
        customAllReduceKernels (two-shot).
    """
    n = world_size
    src, dst = _pairs(n)
    t = Transfers()
    t.add(0, src, dst, dst, reduce=True)   # after step 0, rank j holds block j reduced
    t.add(1, dst, src, dst)                # after step 1, every rank holds every block
    steps = 2 if n > 1 else 0
    return t.schedule("all_reduce", "two_shot", n, n,
                      ["reduce-scatter", "all-gather"][:steps])


# -- closed forms ---------------------------------------------------------------------------------

def _one(n: int) -> int:
    return 1 if n > 1 else 0


def _time(bytes_per_port, reduced=lambda n, m: 0.0):
    """α + β·(busiest port's bytes) + γ·(busiest rank's reduced bytes), for one step (N > 1)."""
    def time(n: int, nbytes: float, alpha: float, beta: float, gamma: float) -> float:
        if n == 1:
            return 0.0
        return alpha + beta * bytes_per_port(n, nbytes) + gamma * reduced(n, nbytes)
    return time


_full = lambda n, m: (n - 1) * m          # noqa: E731
_part = lambda n, m: (n - 1) / n * m      # noqa: E731


def _master_time(n: int, nbytes: float, alpha: float, beta: float, gamma: float) -> float:
    """2(N-1)·(α + M·β) + (N-1)·M·γ (2(N-1) messages of M in sequence)."""
    return 2 * (n - 1) * (alpha + nbytes * beta) + (n - 1) * nbytes * gamma


_DIRECT = [
    ("all_reduce", all_reduce, lambda n, m: (n - 1) * m, "(N-1)·M", _time(_full, _full)),
    ("reduce_scatter", reduce_scatter, _part, "(N-1)/N·M", _time(_part, _part)),
    ("all_gather", all_gather, _part, "(N-1)/N·M", _time(_part)),
    ("all_to_all", all_to_all, _part, "(N-1)/N·M", _time(_part)),
    ("broadcast", broadcast, lambda n, m: (n - 1) * m, "(N-1)·M (root)", _time(_full)),
    ("reduce", reduce, lambda n, m: m if n > 1 else 0.0, "M", _time(_full, _full)),
    ("scatter", scatter, _part, "(N-1)/N·M (root)", _time(_part)),
    ("gather", gather, lambda n, m: m / n if n > 1 else 0.0, "M/N", _time(_part)),
]

for _collective, _builder, _bytes, _formula, _t in _DIRECT:
    register(Algorithm(collective=_collective, name="direct", builder=_builder, num_steps=_one,
                       bytes_sent=_bytes, steps_formula="1 (N>1)", bytes_formula=_formula,
                       reference=_THAKUR, time=_t))

register(Algorithm(collective="all_reduce", name="master", builder=master_all_reduce,
                   num_steps=lambda n: 2 * (n - 1), bytes_sent=lambda n, m: (n - 1) * m,
                   steps_formula="2(N-1)", bytes_formula="(N-1)·M (root; 2(N-1)·M through it)",
                   reference=_MASTER, time=_master_time))

register(Algorithm(collective="all_reduce", name="two_shot", builder=two_shot_all_reduce,
                   num_steps=lambda n: 2 if n > 1 else 0,
                   bytes_sent=lambda n, m: 2 * (n - 1) / n * m,
                   steps_formula="2 (N>1)", bytes_formula="2(N-1)/N·M", reference=_TWO_SHOT,
                   time=lambda n, m, alpha, beta, gamma: 0.0 if n == 1 else
                   2 * alpha + 2 * (n - 1) / n * m * beta + (n - 1) / n * m * gamma))
