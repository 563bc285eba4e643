"""The simulator's peak memory: at most 3× the input array, measured with tracemalloc
(numpy reports its data allocations to it). No timing involved."""

import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import ringccl


def _peak_ratio(collective, x, algorithm, check=False):
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        r = ringccl.simulate(collective, x, algorithm=algorithm, check=check)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.outputs is not None
    return (peak - base) / x.nbytes


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "tree"])
def test_all_reduce_peak_is_at_most_three_inputs(algorithm):
    # 32 ranks × 128Ki float32 = 16 MiB: large against the schedule's own arrays
    x = np.ones((32, 1 << 17), np.float32)
    ringccl.schedule("all_reduce", algorithm, world_size=32)  # build (and cache) outside
    assert _peak_ratio("all_reduce", x, algorithm) <= 3.0


def test_gather_scatter_steps_make_no_full_temporaries():
    # recursive doubling runs through np.take + fancy-index scatters; before the fix these made
    # two more full copies (np.take buffers `out` with mode="raise"; flat[idx] and the combine
    # result were whole-buffer temporaries): 5× the input
    x = np.ones((16, 1 << 18), np.float32)
    assert _peak_ratio("all_reduce", x, "recursive_doubling") <= 2.25


@pytest.mark.parametrize("collective,algorithm", [("all_reduce", "direct"),
                                                  ("reduce", "direct")])
def test_a_step_with_many_transfers_snapshots_each_source_slot_once(collective, algorithm):
    # direct all_reduce: one step of N(N-1) whole-buffer reduces; the snapshot used to hold one
    # row per transfer, (N-1)x the input (31x here, 64x at N = 64)
    x = np.ones((32, 1 << 15), np.float32)
    assert _peak_ratio(collective, x, algorithm) <= 2.5


def test_memory_estimate_and_guard():
    from ringccl.errors import ArgumentError
    from ringccl.sim.memory import available_bytes, check_memory, simulation_bytes

    # inputs N × count plus 1.5 × N × M elements (M = N × count for all_gather)
    base = (96 << 20) + 64 * 16  # the interpreter and the schedule's arrays
    assert simulation_bytes("all_reduce", 4, 1000, 4) == base + 4 * (4000 + 1.1 * 4000)
    assert simulation_bytes("all_gather", 4, 1000, 4) == base + 4 * (4000 + 1.7 * 16000)
    check_memory("all_reduce", 4, 1000, 4)  # fits anywhere
    if available_bytes() is not None:
        with pytest.raises(ArgumentError, match="use a smaller count or world_size"):
            check_memory("all_reduce", 4, 1 << 40, 4)
        with pytest.raises(ArgumentError, match="use a smaller --count or --world-size"):
            check_memory("all_reduce", 4, 1 << 40, 4, names=("--count", "--world-size"))


@pytest.mark.parametrize("collective, world_size, count", [
    ("all_reduce", 8, "1Mi"), ("reduce_scatter", 8, "1Mi"), ("all_gather", 8, "128Ki"),
    ("all_to_all", 8, "1Mi"), ("reduce", 8, "1Mi"), ("gather", 8, "128Ki")])
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_the_estimate_covers_the_measured_peak(collective, world_size, count):
    """``ringccl simulate``'s peak resident memory (measured in a child process: its VmHWM)
    stays below what the guard budgets for it."""
    from ringccl.sim.memory import simulation_bytes
    from ringccl.units import count as parse_count

    # VmHWM (not getrusage's ru_maxrss, which execve inherits from the forking parent)
    code = ("import re, sys; from ringccl.cli import main; "
            f"rc = main(['simulate', {collective!r}, '-N', '{world_size}', '-c', '{count}']); "
            "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
            "sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    peak = int(out.stdout.strip().splitlines()[-1]) * 1024  # KiB on Linux
    need = simulation_bytes(collective, world_size, parse_count(count), 4)
    assert peak <= need, (peak, need)
