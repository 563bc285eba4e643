"""The worked examples of ``ringccl model --preset worked-examples``, to the digits printed.

Ring all_reduce (Patarasuk & Yuan, JPDC 2009): the per-rank bytes table and the latency table.
all_reduce of 100 MiB at 50 GB/s and 5 us under closed forms for master, ring and tree; flat ring
versus hierarchical all_reduce (Jia et al., arXiv:1807.11205) on 128 nodes x 8 GPUs.
Comparisons with optional algorithms (master, tree, double_binary_tree, hierarchical) run when
those are registered and say so when they skip.
"""

import math

import numpy as np
import pytest

import ringccl
from ringccl import presets
from ringccl.algorithms import REGISTRY
from ringccl.costmodel.topology import two_level

MS = 1e-3
P_LIST = [4, 8, 16, 64, 256, 1024]
M100 = 100 * 1024 * 1024  # 100 MiB


def _need(name):
    if ("all_reduce", name) not in REGISTRY:
        pytest.skip(f"algorithm {name!r} not registered")


# -- ring all_reduce: bytes per rank, latency ------------------------------------------------------

@pytest.mark.parametrize("n,per_rank,digits,vs_direct,vs_2k", [
    (8, 1.75, 2, 0.250, 0.875), (64, 1.97, 2, 0.031, 0.984), (256, 1.992, 3, 0.008, 0.996)])
def test_per_rank_bytes_table(n, per_rank, digits, vs_direct, vs_2k):
    """1.75K / 1.97K / 1.992K; vs naive (N-1)K; vs the 2K lower bound."""
    k = 64 * 2**20
    r = ringccl.cost("all_reduce", "ring", n, k, alpha="5us", bandwidth="300GB/s", method="walk")
    sent = r.max_link_bytes["port out"] / k
    assert round(sent, digits) == per_rank
    assert round(sent / (n - 1), 3) == vs_direct
    assert round(sent / 2, 3) == vs_2k
    assert r.max_link_bytes["port in"] == r.max_link_bytes["port out"]  # every rank alike


def test_preset_per_rank_bytes_matches():
    assert [round(r["bytes_per_rank_K"], 3) for r in presets.per_rank_bytes()] == [
        1.75, 1.969, 1.992]


def _ring_cost(n, count):
    return ringccl.cost("all_reduce", "ring", n, count * np.dtype("float32").itemsize,
                        alpha="5us", bandwidth="300GB/s")


def test_latency_table_8_ranks_1m_elements():
    """8 ranks / 1M elements -> 0.094 ms."""
    assert round(_ring_cost(8, 2**20).seconds / MS, 3) == 0.094


def test_latency_table_1024_ranks_1m_elements():
    """10.26 ms, of which the latency term is 10.23 ms (99%); the data itself takes 0.03 ms."""
    r = _ring_cost(1024, 2**20)
    assert round(r.seconds / MS, 2) == 10.26
    assert round(r.latency_seconds / MS, 2) == 10.23
    assert math.floor(100 * r.latency_seconds / r.seconds) == 99
    assert round(r.bandwidth_seconds / MS, 2) == 0.03  # printed as "0.03 ms"
    assert r.num_steps == 2046


def test_latency_table_1024_ranks_256m_elements():
    """1024 ranks / 2^28 elements (1.07 GB) -> 17.38 ms, bandwidth term 7.15 ms ("7.2 ms")."""
    r = _ring_cost(1024, 2**28)
    assert round(r.nbytes / 1e9, 2) == 1.07
    assert round(r.seconds / MS, 2) == 17.38
    assert round(r.bandwidth_seconds / MS, 2) == 7.15
    assert round(r.bandwidth_seconds / MS, 1) == 7.2


def test_preset_latency_table_matches_cost():
    rows = presets.ring_latency()
    assert [(r["world_size"], r["count"]) for r in rows] == [(8, 2**20), (1024, 2**20),
                                                             (1024, 2**28)]
    for r in rows:
        assert r["seconds"] == pytest.approx(_ring_cost(r["world_size"], r["count"]).seconds,
                                             rel=1e-14)


# -- all_reduce of 100 MiB: closed forms and walked schedules --------------------------------------

CLOSED_FORM = {
    "master": [12.61, 29.43, 63.06, 264.87, 1072.10, 4301.00],
    "ring": [3.18, 3.74, 4.08, 4.76, 6.73, 14.42],
    "tree": [4.21, 4.22, 4.23, 4.25, 4.27, 4.29],
}


@pytest.mark.parametrize("algorithm", ["master", "ring", "tree"])
def test_closed_forms_closed_forms(algorithm):
    got = [round(presets.closed_form_all_reduce_seconds(algorithm, p, M100, 5e-6, 50e9) / MS, 2)
           for p in P_LIST]
    assert got == CLOSED_FORM[algorithm]


def test_closed_forms_walked_ring_equals_the_closed_form():
    for p, expected in zip(P_LIST, CLOSED_FORM["ring"]):
        r = ringccl.cost("all_reduce", "ring", p, M100, alpha="5us", bandwidth="50GB/s")
        assert r.seconds == pytest.approx(
            presets.closed_form_all_reduce_seconds("ring", p, M100, 5e-6, 50e9), rel=1e-12)
        assert round(r.seconds / MS, 2) == expected


def test_closed_forms_preset_rows():
    rows = presets.closed_forms_vs_walked()
    assert [r["world_size"] for r in rows] == P_LIST
    for r in rows:
        for a in presets.CLOSED_FORM_ALGORITHMS:
            want = CLOSED_FORM[a][P_LIST.index(r["world_size"])]
            assert round(r["closed_form"][a] / MS, 2) == want
        for a, seconds in r["ringccl"].items():
            if ("all_reduce", a) in REGISTRY:
                assert seconds == ringccl.cost("all_reduce", a, r["world_size"], M100,
                                               alpha=5e-6, bandwidth=50e9).seconds
            else:
                assert seconds is None


def test_closed_forms_walked_master():
    """The root's port carries (P-1) whole buffers in: at least (P-1) M / B, growing with P."""
    _need("master")
    times = []
    for p in P_LIST:
        r = ringccl.cost("all_reduce", "master", p, M100, alpha="5us", bandwidth="50GB/s")
        assert r.bandwidth_seconds >= (p - 1) * M100 / 50e9 * (1 - 1e-12), p
        times.append(r.seconds)
    assert times[-1] / times[0] > 100  # O(P M): the centralized scheme does not scale


@pytest.mark.parametrize("name", ["tree", "double_binary_tree"])
def test_closed_forms_walked_trees_versus_the_closed_form_tree(name):
    """The closed-form tree 2 log2(P) alpha + 2 M/B counts the pipeline's bandwidth but
    not its fill: a walked tree, pipelined or not, is never faster than it."""
    _need(name)
    for p in P_LIST:
        r = ringccl.cost("all_reduce", name, p, M100, alpha="5us", bandwidth="50GB/s")
        closed = presets.closed_form_all_reduce_seconds("tree", p, M100, 5e-6, 50e9)
        assert r.seconds >= closed * (1 - 1e-12), (name, p, r.seconds, closed)
        assert r.bandwidth_seconds >= M100 / 50e9 * (1 - 1e-12)


# -- flat ring versus hierarchical all_reduce on 128 x 8 -------------------------------------------

NODES, LOCAL, GIB = 128, 8, 2**30


def _machine():
    return two_level(NODES, LOCAL, intra=("5us", "900GB/s"), inter=("5us", "50GB/s"))


def test_flat_vs_hierarchical_flat_ring():
    """A node-major flat ring over 1024 GPUs: every step waits for a NIC hop."""
    topo = _machine()
    r = ringccl.cost("all_reduce", "ring", None, GIB, topology=topo)
    n = NODES * LOCAL
    assert r.seconds == pytest.approx(2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * GIB / 50e9)
    assert round(r.seconds / MS, 2) == 53.14
    nic = r.link_bytes[topo.link_ids("nic out", node=0)]
    assert (nic > 0).sum() == 1  # one NIC of eight carries the node's whole share
    assert nic.max() == pytest.approx(2 * (n - 1) / n * GIB)


def test_flat_vs_hierarchical_formula():
    """Intra-node ring reduce-scatter (NVLink), 8 inter-node rings on M/8 (one NIC each),
    intra-node ring all-gather, each costed on its own flat machine."""
    h = presets.flat_vs_hierarchical()
    a, L, n, m = 5e-6, LOCAL, NODES, GIB
    formula = (2 * (L - 1) * a + 2 * (L - 1) / L * m / 900e9
               + 2 * (n - 1) * a + 2 * (n - 1) / n * (m / L) / 50e9)
    assert h["hierarchical_formula"]["seconds"] == pytest.approx(formula, rel=1e-12)
    assert round(formula / MS, 2) == 8.75
    assert sum(h["hierarchical_formula"]["phases"].values()) == pytest.approx(formula)
    # bytes out of one NIC: 2(n-1)/n of the M/8 shard versus 2(N-1)/N of M for the flat ring
    assert h["hierarchical_formula"]["nic_bytes"] == pytest.approx(2 * (n - 1) / n * m / L)
    assert h["flat_ring"]["nic_bytes"] == pytest.approx(2 * 1023 / 1024 * m)
    assert round(h["nic_bytes_ratio"], 2) == round((1023 / 1024) / (127 / 128) * 8, 2) == 8.06
    assert h["flat_ring"]["nics_used_per_node"] == 1
    assert h["hierarchical_formula"]["nics_used_per_node"] == 8
    assert h["speedup_formula"] == pytest.approx(h["flat_ring"]["seconds"] / formula)
    assert round(h["speedup_formula"], 2) == 6.07


def test_flat_vs_hierarchical_walked():
    """ringccl's hierarchical schedule on the same machine: all eight NICs, about 1/8 the bytes
    per NIC, faster than the flat ring."""
    _need("hierarchical")
    topo = _machine()
    flat_ring = ringccl.cost("all_reduce", "ring", None, GIB, topology=topo)
    h = ringccl.cost("all_reduce", "hierarchical", None, GIB, topology=topo)
    nic = h.link_bytes[topo.link_ids("nic out", node=0)]
    assert (nic > 0).all()
    assert nic.max() <= flat_ring.max_link_bytes["nic out"] / 4
    assert h.seconds < flat_ring.seconds / 2
    assert presets.flat_vs_hierarchical()["hierarchical_walked"]["seconds"] == h.seconds
