"""direct, master, ring chain (broadcast, reduce) and binomial (scatter, gather): symbolic proofs
over world sizes and roots, and closed forms (steps, bytes of the busiest rank, time) held equal
to the schedules."""

import numpy as np
import pytest

import ringccl
from ringccl.algorithms import binomial, direct, get_algorithm, ring

# (collective, algorithm) pairs this file covers
PAIRS = [(c, "direct") for c in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                                 "broadcast", "reduce", "scatter", "gather")]
PAIRS += [("all_reduce", "master"), ("broadcast", "ring"), ("reduce", "ring"),
          ("scatter", "binomial"), ("gather", "binomial")]
ROOTED = {"broadcast", "reduce", "scatter", "gather"}
_SLICES = [(lo, min(lo + 32, 257)) for lo in range(1, 257, 32)]


def _build(collective, algorithm, n, **params):
    return get_algorithm(collective, algorithm).builder(n, **params)


def _roots(collective, algorithm, n):
    if collective in ROOTED or algorithm == "master":
        return sorted({0, n // 2, n - 1})
    return [None]


@pytest.mark.parametrize("collective,algorithm", PAIRS, ids=[f"{c}-{a}" for c, a in PAIRS])
@pytest.mark.parametrize("lo,hi", _SLICES, ids=[f"N{a}-{b - 1}" for a, b in _SLICES])
def test_verify_every_world_size_to_256(collective, algorithm, lo, hi):
    for n in range(lo, hi):
        roots = _roots(collective, algorithm, n)
        root = roots[n % len(roots)]  # vary the root with N
        ringccl.verify(_build(collective, algorithm, n, **({} if root is None
                                                           else {"root": root})))


# O(N)-step algorithms beyond 256 ranks: every 7th world size plus the powers of two and their
# neighbours (the full 1…1024 sweep passes too, in about 95 s for master and 70 s for the chains)
_LARGE = sorted(set(range(257, 1025, 7)) | {511, 512, 513, 767, 1023, 1024})


@pytest.mark.parametrize("part", range(4))
def test_verify_linear_step_algorithms_to_1024(part):
    for n in _LARGE[part::4]:
        ringccl.verify(direct.master_all_reduce(n, root=n % 5))
        ringccl.verify(ring.broadcast(n, root=n // 2, segments=1 + n % 3))
        ringccl.verify(ring.reduce(n, root=n - 1, segments=1 + n % 2))


@pytest.mark.parametrize("n", [300, 640, 1024])
def test_verify_default_segment_chains_at_large_n(n):
    ringccl.verify(ring.broadcast(n, root=7))
    ringccl.verify(ring.reduce(n, root=n - 3))


def walk_time(schedule, nbytes, alpha, beta, gamma):
    """The cost model's walk (helper_common): per step α + β·max over ranks of max(sent,
    received) + γ·max over ranks of bytes reduced, chunks as fluid."""
    spec = ringccl.get_collective(schedule.collective)
    chunk = spec.chunk_nbytes(schedule.world_size, schedule.num_chunks, nbytes)
    n, steps = schedule.world_size, schedule.num_steps
    step = schedule.step_of(np.arange(schedule.num_transfers))
    sent = np.zeros((steps, n))
    recv = np.zeros((steps, n))
    red = np.zeros((steps, n))
    np.add.at(sent, (step, schedule.src), chunk)
    np.add.at(recv, (step, schedule.dst), chunk)
    np.add.at(red, (step, schedule.dst), np.where(schedule.reduce, chunk, 0.0))
    port = np.maximum(sent, recv).max(axis=1, initial=0.0)
    return float((alpha + beta * port + gamma * red.max(axis=1, initial=0.0)).sum())


def _even_size(spec, n, num_chunks):
    """A count whose chunks are all equal, so the fluid closed forms are exact."""
    count = n * num_chunks * 3
    return count, spec.buffer_count(n, count)


_NS = list(range(1, 41)) + [63, 64, 65, 100, 127, 128, 255, 256]


@pytest.mark.parametrize("collective,algorithm", PAIRS, ids=[f"{c}-{a}" for c, a in PAIRS])
def test_closed_forms_equal_the_schedule(collective, algorithm):
    algo = get_algorithm(collective, algorithm)
    spec = ringccl.get_collective(collective)
    params_list = [{}]
    if (collective, algorithm) in (("broadcast", "ring"), ("reduce", "ring")):
        params_list += [{"segments": s} for s in (1, 2, 5, 17)]
    for n in _NS:
        for extra in params_list:
            for root in _roots(collective, algorithm, n):
                params = dict(extra, **({} if root is None else {"root": root}))
                s = _build(collective, algorithm, n, **params)
                assert s.num_steps == algo.steps_for(n, **s.params), (n, params)
                _, m = _even_size(spec, n, s.num_chunks)
                sent = s.bytes_sent(m, 1)
                assert sent.max(initial=0) == pytest.approx(algo.bytes_for(n, m, **s.params)), \
                    (n, params)
                for alpha, beta, gamma in ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0),
                                           (3e-6, 2e-11, 5e-12)):
                    assert algo.time_for(n, m, alpha, beta, gamma, **s.params) == pytest.approx(
                        walk_time(s, m, alpha, beta, gamma), rel=1e-12, abs=1e-300), \
                        (n, params, alpha, beta, gamma)


@pytest.mark.parametrize("n,expected", [(8, 7), (64, 63), (256, 255)])
def test_direct_all_reduce_is_the_seed_naive_full_mesh(n, expected):
    """The naive full mesh sends (N-1)·K per rank, and ring/direct is
    0.250, 0.031, 0.008."""
    k = n * 4096
    naive = ringccl.schedule("all_reduce", "direct", world_size=n).bytes_sent(k, 1)
    assert (naive == expected * k).all()
    ring_sent = ringccl.schedule("all_reduce", "ring", world_size=n).bytes_sent(k, 1).max()
    assert round(ring_sent / naive.max(), 3) == {8: 0.250, 64: 0.031, 256: 0.008}[n]


def test_master_moves_2_n_minus_1_buffers_through_the_root():
    n, k = 8, 1000
    s = ringccl.schedule("all_reduce", "master", world_size=n, root=3)
    sent, received = s.bytes_sent(k, 1), s.bytes_received(k, 1)
    assert sent[3] + received[3] == 2 * (n - 1) * k
    assert all(sent[r] == k and received[r] == k for r in range(n) if r != 3)
    # one rank per step, as a naive loop over peers: the root's port carries M every step
    assert s.num_steps == 2 * (n - 1) and all(len(step) == 1 for step in s.steps)


def test_chain_pipelines_segments_down_the_ring():
    s = ringccl.schedule("broadcast", "ring", world_size=4, root=2, segments=3)
    # segment s crosses link p (2→3, 3→0, 0→1) at step p + s
    got = {(t.src, t.dst, t.src_chunk): k for k, step in enumerate(s.steps)
           for t in step.transfers()}
    links = [(2, 3), (3, 0), (0, 1)]
    assert got == {(a, b, seg): p + seg for p, (a, b) in enumerate(links) for seg in range(3)}
    r = ringccl.schedule("reduce", "ring", world_size=4, root=2, segments=2)
    assert [(t.src, t.dst) for t in r.steps[0].transfers()] == [(3, 0)]
    assert all(t.kind is ringccl.Kind.REDUCE for step in r.steps for t in step.transfers())
    with pytest.raises(ringccl.ArgumentError, match="segments=0 must be an integer >= 1"):
        ringccl.schedule("broadcast", "ring", world_size=4, segments=0)


@pytest.mark.parametrize("n", [2, 3, 5, 6, 8, 13, 16, 17])
def test_binomial_steps_and_subtrees(n):
    levels = (n - 1).bit_length()
    for root in range(n):
        s = binomial.scatter(n, root)
        assert s.num_steps == levels
        # the root sends N-1 blocks in all, one message per tree edge in each step
        assert s.chunk_sends()[root].sum() == n - 1
        g = binomial.gather(n, root)
        assert g.chunk_recvs()[root].sum() == n - 1
        # gather mirrors scatter: same (sender, receiver, block) triples, reversed
        fwd = {(t.src, t.dst, t.src_chunk) for st in s.steps for t in st.transfers()}
        back = {(t.dst, t.src, t.src_chunk) for st in g.steps for t in st.transfers()}
        assert fwd == back


def test_bad_roots_are_refused():
    with pytest.raises(ringccl.ArgumentError, match="root=4 is out of range for world_size=4"):
        ringccl.schedule("scatter", "binomial", world_size=4, root=4)
    with pytest.raises(ringccl.ArgumentError, match="root=-1 is out of range"):
        ringccl.schedule("broadcast", "direct", world_size=4, root=-1)
    with pytest.raises(ringccl.ArgumentError, match="takes the parameters root, segments; got "
                                                    "depth"):
        ringccl.schedule("broadcast", "ring", world_size=4, depth=2)
