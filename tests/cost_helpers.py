"""A test-only all_reduce (recursive doubling on whole buffers) to give the tuner a rival to ring.

Registered under a name no real algorithm uses, by a fixture that removes it afterwards, so the
registry seen by other tests is untouched.
"""

import contextlib
import math

import numpy as np

import ringccl
from ringccl.algorithms import REGISTRY, Algorithm, register

NAME = "test_recursive_doubling"


def recursive_doubling(world_size: int) -> ringccl.Schedule:
    """Power-of-two N: at step k rank r exchanges its whole buffer with r XOR 2^k and reduces."""
    n = world_size
    if n & (n - 1):
        raise ringccl.ArgumentError(f"world_size={n} must be a power of two")
    k = int(math.log2(n))
    step = np.repeat(np.arange(k), n)
    src = np.tile(np.arange(n), k)
    dst = src ^ (1 << step)
    return ringccl.Schedule.from_arrays("all_reduce", NAME, n, 1, step=step, src=src, dst=dst,
                                        src_chunk=0, reduce=True, phases=["exchange"] * k)


def recursive_doubling_time(n, nbytes, alpha, beta, gamma):
    """log2(N) · (alpha + M beta + M gamma)."""
    return math.log2(n) * (alpha + nbytes * beta + nbytes * gamma)


@contextlib.contextmanager
def registered():
    register(Algorithm(collective="all_reduce", name=NAME, builder=recursive_doubling,
                       num_steps=lambda n: int(math.log2(n)),
                       bytes_sent=lambda n, b: math.log2(n) * b, steps_formula="log2 N",
                       bytes_formula="log2(N)·M", reference="test",
                       time=recursive_doubling_time))
    try:
        yield NAME
    finally:
        REGISTRY.pop(("all_reduce", NAME), None)


@contextlib.contextmanager
def ring_only():
    """Hide every registered algorithm except the ring family while the block runs.

    The tuner and ``ringccl model`` tests were written for a registry of ring only (plus the
    rival above): their expected rows, ranges and crossovers assume it. Restored afterwards.
    """
    hidden = {k: v for k, v in REGISTRY.items() if k[1] != "ring"}
    for k in hidden:
        del REGISTRY[k]
    ringccl.clear_caches()
    try:
        yield
    finally:
        REGISTRY.update(hidden)
        ringccl.clear_caches()
