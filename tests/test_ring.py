"""Ring schedules against the textbook ring all-reduce walk-through and their closed forms."""

import re

import numpy as np
import pytest

import ringccl
import ringccl.views.show
import ringccl.check
from ringccl.algorithms import get_algorithm


def _cells(schedule):
    return [row for row in ringccl.views.show.step_rows(schedule)]


def test_seed_table_n4():
    """The textbook N=4 step table, entry by entry."""
    rows = _cells(ringccl.schedule("all_reduce", "ring", world_size=4))
    steps = [r["cells"] for r in rows if r["kind"] == "step"]
    assert steps == [
        ["c0 → R1", "c1 → R2", "c2 → R3", "c3 → R0"],
        ["c3 → R1", "c0 → R2", "c1 → R3", "c2 → R0"],
        ["c2 → R1", "c3 → R2", "c0 → R3", "c1 → R0"],
        ["c1 → R1", "c2 → R2", "c3 → R3", "c0 → R0"],
        ["c0 → R1", "c1 → R2", "c2 → R3", "c3 → R0"],
        ["c3 → R1", "c0 → R2", "c1 → R3", "c2 → R0"],
    ]
    holds = [r["cells"] for r in rows if r["kind"] == "holds"]
    assert holds[0] == ["owns c1", "owns c2", "owns c3", "owns c0"]
    assert holds[1] == ["all c0 c1 c2 c3"] * 4


def test_table_text_has_the_seed_rows():
    text = ringccl.table(ringccl.schedule("all_reduce", "ring", world_size=4))
    assert "reduce-scatter 1      c0 → R1" in text
    assert "after reduce-scatter  owns c1" in text


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
def test_seed_pseudo_code_chunk_order(n):
    """At reduce-scatter step s rank r sends (r-s) mod N and accumulates (r-1-s) mod N;
    at all-gather step s it sends (r+1-s) mod N and receives (r-s) mod N."""
    s = ringccl.schedule("all_reduce", "ring", world_size=n)
    for r in range(n):
        prog = s.program(r)
        for k, step in enumerate(prog.steps):
            phase_step = k % (n - 1)
            if k < n - 1:
                assert step.sends[0] == ((r + 1) % n, (r - phase_step) % n)
                assert step.recvs[0][:2] == ((r - 1) % n, (r - 1 - phase_step) % n)
            else:
                assert step.sends[0] == ((r + 1) % n, (r + 1 - phase_step) % n)
                assert step.recvs[0][:2] == ((r - 1) % n, (r - phase_step) % n)


def test_standalone_reduce_scatter_follows_torch_order():
    state = ringccl.check.SymbolicState(ringccl.schedule("reduce_scatter", "ring", world_size=5))
    for _ in state.run():
        pass
    complete = state.complete()
    assert [int(np.nonzero(complete[r])[0][0]) for r in range(5)] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("n", list(range(1, 65)) + [100, 127, 128, 255, 256])
def test_closed_forms_equal_the_schedule(collective, n):
    s = ringccl.schedule(collective, "ring", world_size=n)
    algo = get_algorithm(collective, "ring")
    assert s.num_steps == algo.num_steps(n)
    buffer = n * 1000  # divides evenly: fluid closed form is exact
    sent = s.bytes_sent(buffer, 1)
    assert sent.max() == pytest.approx(algo.bytes_sent(n, buffer))
    assert sent.min() == sent.max()  # the ring is symmetric


@pytest.mark.parametrize("n,expected", [(8, 1.75), (64, 1.97), (256, 1.992)])
def test_seed_bytes_per_rank_table(n, expected):
    """Per-rank bytes 1.75K, 1.97K, 1.992K; vs naive (N-1)K and 2K."""
    k = n * 4096
    sent = ringccl.schedule("all_reduce", "ring", world_size=n).bytes_sent(k, 1).max()
    assert round(sent / k, 3 if n == 256 else 2) == expected
    naive = {8: 0.250, 64: 0.031, 256: 0.008}[n]
    lower = {8: 0.875, 64: 0.984, 256: 0.996}[n]
    assert round(sent / ((n - 1) * k), 3) == naive
    assert round(sent / (2 * k), 3) == lower


def test_table_refuses_what_is_not_a_schedule_and_ranks_out_of_range():
    s = ringccl.schedule("all_reduce", "ring", world_size=2)
    for bad in (None, "all_reduce"):
        with pytest.raises(ringccl.ArgumentTypeError, match="must be a ringccl Schedule"):
            ringccl.table(bad)
    with pytest.raises(ringccl.ArgumentError, match=r"ranks=\[5\]: 5 is not a rank of "
                                                     r"world_size=2; ranks are 0-1"):
        ringccl.table(s, ranks=[5])
    assert ringccl.table(s, ranks=[1, 0]).splitlines()[1].split()[1:] == ["R1", "R0"]


@pytest.mark.parametrize("kwargs, exc, message", [
    ({"width": "x"}, ringccl.ArgumentTypeError, "width='x' must be an integer >= 1, got str"),
    ({"width": 1.5}, ringccl.ArgumentTypeError, "width=1.5 must be an integer >= 1, got float"),
    ({"width": -5}, ringccl.ArgumentError, "width=-5 must be an integer >= 1"),
    ({"max_steps": "x"}, ringccl.ArgumentTypeError, "max_steps='x' must be an integer >= 0"),
    ({"max_steps": -1}, ringccl.ArgumentError, "max_steps=-1 must be an integer >= 0"),
    ({"ranks": "0,x"}, ringccl.ArgumentError, "ranks='0,x': 'x' is not a rank or a range"),
    ({"ranks": "0-7"}, ringccl.ArgumentError, "ranks='0-7': rank 7 is out of range for "
     "world_size=2"),
])
def test_table_refuses_a_bad_width_max_steps_or_rank_text(kwargs, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        ringccl.table(ringccl.schedule("all_reduce", "ring", world_size=2), **kwargs)


def test_table_reads_ranks_as_text_as_show_does():
    s = ringccl.schedule("all_reduce", "ring", world_size=4)
    assert ringccl.table(s, ranks="2-3,0") == ringccl.table(s, ranks=[2, 3, 0])
