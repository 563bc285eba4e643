"""The cost model: walk versus closed forms, link sharing, topologies, breakdown, errors."""

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ringccl
from ringccl import ArgumentError, ArgumentTypeError
from ringccl.algorithms import REGISTRY
from ringccl.costmodel.model import WALK_LIMIT, walk
from ringccl.costmodel.topology import flat, two_level

from .cost_helpers import registered

# world sizes for walk == closed form: every N up to 33, then the larger ones up to 256
SIZES = list(range(1, 34)) + [48, 63, 64, 100, 127, 128, 255, 256]
CLOSED_FORMS = sorted(k for k, a in REGISTRY.items() if a.time is not None)


def _walk_or_skip(collective, algorithm, n, nbytes, **kw):
    try:
        return ringccl.cost(collective, algorithm, n, nbytes, method="walk", **kw)
    except ringccl.ArgumentError as exc:  # e.g. an algorithm defined for some N only
        if "world_size" in str(exc):
            pytest.skip(f"{algorithm} {collective} does not build for N={n}: {exc}")
        raise


@pytest.mark.parametrize("collective,algorithm", CLOSED_FORMS)
@pytest.mark.parametrize("n", SIZES)
def test_walk_equals_closed_form_on_flat(collective, algorithm, n):
    """Every registered closed form equals the walked schedule, term by term (N <= 256)."""
    alpha, bandwidth, gamma, nbytes = 3e-6, 40e9, 1 / 80e9, 12_345_678.0
    w = _walk_or_skip(collective, algorithm, n, nbytes, alpha=alpha, bandwidth=bandwidth,
                      gamma=gamma)
    c = ringccl.cost(collective, algorithm, n, nbytes, alpha=alpha, bandwidth=bandwidth,
                     gamma=gamma, method="closed_form")
    assert w.method == "walk" and c.method == "closed_form"
    assert w.num_steps == c.num_steps
    assert w.latency_seconds == pytest.approx(c.latency_seconds, rel=1e-12, abs=1e-15)
    assert w.bandwidth_seconds == pytest.approx(c.bandwidth_seconds, rel=1e-12, abs=1e-15)
    assert w.reduction_seconds == pytest.approx(c.reduction_seconds, rel=1e-12, abs=1e-15)
    assert w.seconds == pytest.approx(c.seconds, rel=1e-12, abs=1e-15)


@given(n=st.integers(1, 40), nbytes=st.floats(0, 1e10), alpha=st.floats(0, 1e-3),
       bandwidth=st.floats(1e6, 1e13), gamma=st.floats(0, 1e-9))
def test_ring_walk_matches_closed_form_for_random_machines(n, nbytes, alpha, bandwidth, gamma):
    w = ringccl.cost("all_reduce", "ring", n, nbytes, alpha=alpha, bandwidth=bandwidth,
                     gamma=gamma, method="walk")
    expected = (2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / bandwidth
                + (n - 1) / n * nbytes * gamma)
    assert w.seconds == pytest.approx(expected, rel=1e-9, abs=1e-18)


def test_auto_switches_to_closed_form_above_the_walk_limit():
    small = ringccl.cost("all_reduce", "ring", WALK_LIMIT, "1MiB", alpha="5us", bandwidth="50GB/s")
    big = ringccl.cost("all_reduce", "ring", WALK_LIMIT + 1, "1MiB", alpha="5us",
                       bandwidth="50GB/s")
    assert (small.method, big.method) == ("walk", "closed_form")
    assert big.steps is None and big.num_steps == 2 * WALK_LIMIT
    assert big.max_link_bytes == {"port out": pytest.approx(2 * WALK_LIMIT / (WALK_LIMIT + 1)
                                                            * 2**20)}


def test_walk_1024_ranks_equals_closed_form():
    """The 1024-rank ring walked in full: 2046 steps x 1024 transfers."""
    kw = dict(alpha="5us", bandwidth="300GB/s")
    w = ringccl.cost("all_reduce", "ring", 1024, 4 * 2**20, method="walk", **kw)
    c = ringccl.cost("all_reduce", "ring", 1024, 4 * 2**20, **kw)
    assert c.method == "closed_form"
    assert w.seconds == pytest.approx(c.seconds, rel=1e-12)
    assert len(w.steps) == 2046


def test_closed_form_at_a_million_ranks():
    r = ringccl.cost("all_reduce", "ring", 2**20, "4MiB", alpha="5us", bandwidth="300GB/s")
    n = 2**20
    assert r.seconds == pytest.approx(2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * 4 * 2**20 / 300e9)
    assert r.num_steps == 2 * (n - 1)


def test_shared_port_slows_transfers_down():
    """Two chunks leaving one rank in one step take twice as long as one (single-port)."""
    one = ringccl.Schedule.from_arrays("all_gather", "custom", 3, 3, step=[0], src=[0], dst=[1],
                                       src_chunk=[0])
    two = ringccl.Schedule.from_arrays("all_gather", "custom", 3, 3, step=[0, 0], src=[0, 0],
                                       dst=[1, 2], src_chunk=[0, 0])
    fan_in = ringccl.Schedule.from_arrays("all_gather", "custom", 3, 3, step=[0, 0],
                                          src=[1, 2], dst=[0, 0], src_chunk=[1, 2])
    kw = dict(alpha=1e-6, bandwidth=1e9)
    nbytes = 3e6  # 1 MB per chunk: 1 ms per chunk on a port
    assert walk(one, nbytes, **kw).seconds == pytest.approx(1e-6 + 1e-3)
    assert walk(two, nbytes, **kw).seconds == pytest.approx(1e-6 + 2e-3)
    r = walk(fan_in, nbytes, **kw)
    assert r.seconds == pytest.approx(1e-6 + 2e-3)
    assert r.steps[0].link == "R0 port in" and r.steps[0].link_bytes == pytest.approx(2e6)


def test_reduction_term_counts_the_busiest_rank():
    s = ringccl.Schedule.from_arrays("all_reduce", "custom", 3, 1, step=[0, 0, 1],
                                     src=[1, 2, 0], dst=[0, 0, 1], src_chunk=0,
                                     reduce=[True, True, False])
    r = walk(s, 1e6, alpha=0, bandwidth=1e12, gamma=1e-9)
    assert r.steps[0].reduction_seconds == pytest.approx(2e6 * 1e-9)
    assert r.steps[1].reduction_seconds == 0
    assert r.reduction_seconds == pytest.approx(2e-3)


def test_empty_step_costs_nothing():
    s = ringccl.Schedule.from_arrays("all_gather", "custom", 2, 2, step=[1], src=[0], dst=[1],
                                     src_chunk=[0], num_steps=2, phases=["idle", "send"])
    r = walk(s, 2e6, alpha=1e-6, bandwidth=1e9)
    assert [x.seconds for x in r.steps] == [0.0, pytest.approx(1e-6 + 1e-3)]
    assert r.steps[0].link == ""


def test_steps_add_up_and_name_their_phase():
    r = ringccl.cost("all_reduce", "ring", 6, "6MiB", alpha="2us", bandwidth="10GB/s",
                     gamma="20GB/s")
    assert [s.phase for s in r.steps] == ["reduce-scatter"] * 5 + ["all-gather"] * 5
    assert sum(s.seconds for s in r.steps) == pytest.approx(r.seconds)
    assert sum(s.latency_seconds for s in r.steps) == pytest.approx(r.latency_seconds)
    assert r.seconds == pytest.approx(r.latency_seconds + r.bandwidth_seconds
                                      + r.reduction_seconds)
    assert r.by_phase()["reduce-scatter"] > r.by_phase()["all-gather"]  # the reduction
    assert r.reduction_seconds == pytest.approx(5 / 6 * 6 * 2**20 / 20e9)


def test_algbw_and_busbw_follow_nccl_tests():
    r = ringccl.cost("all_reduce", "ring", 8, 2**30, alpha=0, bandwidth="50GB/s")
    assert r.algbw == pytest.approx(2**30 / r.seconds)
    # a ring with no latency runs its busiest port at full speed: busbw = the port's bandwidth
    assert r.busbw == pytest.approx(50e9)


def test_units_are_accepted_everywhere():
    a = ringccl.cost("all_reduce", "ring", 16, "4MiB", alpha="5us", bandwidth="400Gbps")
    b = ringccl.cost("all_reduce", "ring", 16, 4 * 2**20, alpha=5e-6, bandwidth=50e9)
    assert a.seconds == pytest.approx(b.seconds, rel=1e-14)


# -- topologies -----------------------------------------------------------------------------------

def _h100(nodes=4, **kw):
    return two_level(nodes, 8, intra=("5us", "900GB/s"), inter=("5us", "50GB/s"), **kw)


def test_flat_ring_on_two_level_is_bound_by_the_nic():
    """A node-major flat ring crosses nodes at every 8th hop; those hops set every step."""
    topo = _h100(nodes=4)
    n, m = 32, 2**30
    r = ringccl.cost("all_reduce", "ring", None, m, topology=topo)
    assert r.seconds == pytest.approx(2 * (n - 1) * 5e-6 + 2 * (n - 1) / n * m / 50e9)
    assert {s.link.split()[2] for s in r.steps} == {"NIC"}
    # the node's last GPU (local 7) sends through its rail's NIC 7; the first receives on NIC 0
    nic_out = r.link_bytes[topo.link_ids("nic out", node=0)]
    nic_in = r.link_bytes[topo.link_ids("nic in", node=0)]
    assert np.nonzero(nic_out)[0].tolist() == [7] and np.nonzero(nic_in)[0].tolist() == [0]
    assert r.max_link_bytes["nic out"] == pytest.approx(2 * (n - 1) / n * m)


def test_single_node_ring_runs_at_nvlink_speed():
    topo = two_level(1, 8, intra=("1us", "900GB/s"), inter=("5us", "50GB/s"))
    r = ringccl.cost("all_reduce", "ring", 8, 2**30, topology=topo)
    assert r.seconds == pytest.approx(14 * 1e-6 + 14 / 8 * 2**30 / 900e9)
    assert "nic out" not in r.max_link_bytes


def test_round_robin_placement_crosses_nodes_at_every_hop():
    node_major = ringccl.cost("all_reduce", "ring", None, 2**30, topology=_h100())
    rr = ringccl.cost("all_reduce", "ring", None, 2**30, topology=_h100(placement="round_robin"))
    # same time (every step still waits for one NIC hop) but 8x the inter-node hops per step
    assert rr.seconds == pytest.approx(node_major.seconds)
    used = lambda r, topo: int((r.link_bytes[topo.link_ids("nic out")] > 0).sum())  # noqa: E731
    assert used(node_major, _h100()) == 4 and used(rr, _h100(placement="round_robin")) == 32


def test_fewer_nics_share_one_port():
    """Two rails per NIC: a round-robin ring's two hops out of a NIC share it."""
    topo = _h100(nics_per_node=4, placement="round_robin")
    r = ringccl.cost("all_reduce", "ring", None, 2**30, topology=topo)
    n = 32
    assert r.bandwidth_seconds == pytest.approx(2 * 2 * (n - 1) / n * 2**30 / 50e9)


def test_oversubscribed_uplink_binds():
    """4 NICs per node of 50 GB/s behind a 2:1 uplink: 100 GB/s per node out."""
    topo = _h100(nodes=2, oversubscription=2.0, placement="round_robin")
    r = ringccl.cost("all_reduce", "ring", None, 2**30, topology=topo)
    n = 16  # every hop crosses nodes: 8 chunks per node per step on a 200 GB/s uplink
    assert r.bandwidth_seconds == pytest.approx(2 * (n - 1) * 8 * (2**30 / n) / 200e9)
    assert r.steps[0].link.endswith("uplink out")


def test_explicit_placement():
    # ranks 0..3 on node 0 GPUs 0..3 and ranks 4..7 on node 1 GPUs 0..3
    topo = two_level(2, 8, intra=(0, "900GB/s"), inter=(0, "50GB/s"),
                     placement=[0, 1, 2, 3, 8, 9, 10, 11])
    assert topo.world_size == 8
    links = topo.route(np.array([0, 3]), np.array([1, 4]))
    assert [topo.link_name(int(x)) for x in links[0]] == ["node 0 GPU 0 nvlink out",
                                                          "node 0 GPU 1 nvlink in"]
    assert [topo.link_name(int(x)) for x in links[1]] == ["node 0 NIC 3 out", "node 1 NIC 0 in"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(nodes=0), "nodes=0 must be an integer >= 1"),
    (dict(nics_per_node=9), "nics_per_node=9 must be <= local=8"),
    (dict(oversubscription=0.5), "oversubscription=0.5 must be"),
    (dict(placement=[0, 0]), "distinct devices"),
    (dict(placement=[0, 99]), "distinct devices in"),
    (dict(placement="spread"), "placement='spread' is unknown"),
    (dict(intra="5us"), r"intra '5us' must be ALPHA,BANDWIDTH: a latency >= 0 and a "
                        "bandwidth > 0, e.g. 5us,900GB/s"),
    (dict(intra=("5us",)), r"intra=\('5us',\) must be a pair \(alpha, bandwidth\)"),
    (dict(inter="5us,50"), "bandwidth '50' has no unit"),
])
def test_two_level_rejects(kwargs, message):
    args = dict(nodes=2, local=8, intra=("5us", "900GB/s"), inter=("5us", "50GB/s"))
    args.update(kwargs)
    with pytest.raises(ArgumentError, match=message):
        two_level(**args)


@pytest.mark.parametrize("call,error,message", [
    (lambda: ringccl.cost("all_reduce", "ring", 8, "4MiB"), ArgumentError,
     "give a topology, or alpha and bandwidth"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, "4MiB", flat(8, 0, 1), alpha=1e-6),
     ArgumentError, "with a topology they come from its links"),
    (lambda: ringccl.cost("all_reduce", "ring", 9, "4MiB", flat(8, 0, 1)), ArgumentError,
     "world_size=9 differs from the topology's 8 ranks"),
    (lambda: ringccl.cost("all_reduce", "nope", 8, 1, alpha=0, bandwidth=1), ArgumentError,
     "algorithm='nope' is not available"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, -1, alpha=0, bandwidth=1), ArgumentError,
     "nbytes=-1 must be"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, "4Mb", alpha=0, bandwidth=1), ArgumentError,
     "ambiguous"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, 1, alpha="5 parsecs", bandwidth=1),
     ArgumentError, "duration"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, 1, alpha=0, bandwidth="50GB"), ArgumentError,
     "bandwidth"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, 1, alpha=0, bandwidth=1, gamma=-1),
     ArgumentError, "gamma=-1"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, [1], alpha=0, bandwidth=1), ArgumentTypeError,
     "nbytes"),
    (lambda: ringccl.cost("all_reduce", "ring", None, 1, _h100(), method="closed_form"),
     ArgumentError, "flat machine only"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, 1, alpha=0, bandwidth=1, method="fast"),
     ArgumentError, "method='fast'"),
    (lambda: ringccl.cost("all_reduce", "ring", 8, 1, topology="flat"), ArgumentTypeError,
     "must be a ringccl.costmodel.topology.Topology"),
])
def test_errors_name_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_tuner_rival_is_a_correct_schedule():
    with registered() as name:
        for n in (1, 2, 4, 16, 64):
            ringccl.verify(ringccl.schedule("all_reduce", name, n))
        w = ringccl.cost("all_reduce", name, 64, 1e6, alpha=1e-6, bandwidth=1e9, method="walk")
        assert w.seconds == pytest.approx(6 * (1e-6 + 1e-3))


def test_every_all_reduce_moves_at_least_one_buffer_into_each_rank():
    """Information bound: rank r's output needs the other ranks' sum, M bytes, so its ingress
    carries >= M and bandwidth_seconds >= M beta, for every registered all_reduce."""
    for name in ringccl.algorithms("all_reduce"):
        for n in (2, 3, 8, 16):
            try:
                r = ringccl.cost("all_reduce", name, n, 1e6, alpha=0, bandwidth=1e9,
                                 method="walk")
            except ArgumentError:
                continue  # an algorithm for other world sizes; the closed-form test names it
            assert r.bandwidth_seconds >= 1e-3 * (1 - 1e-12), (name, n)
            assert math.isclose(r.seconds, r.bandwidth_seconds + r.latency_seconds)


@given(n=st.integers(2, 24), alpha=st.floats(0, 1e-4), bandwidth=st.floats(1e8, 1e12),
       one_node=st.booleans())
def test_two_level_with_one_level_is_flat(n, alpha, bandwidth, one_node):
    """One node of N devices, or N nodes of one device, is the flat machine of that level."""
    link = (alpha, bandwidth)
    other = (1.0, 1.0)  # the level not used must not matter
    topo = (two_level(1, n, intra=link, inter=other) if one_node
            else two_level(n, 1, intra=other, inter=link))
    on_two = ringccl.cost("all_reduce", "ring", None, 1e8, topology=topo)
    on_flat = ringccl.cost("all_reduce", "ring", n, 1e8, alpha=alpha, bandwidth=bandwidth)
    assert on_two.seconds == pytest.approx(on_flat.seconds, rel=1e-12)


@given(nodes=st.integers(2, 6), local=st.sampled_from([2, 4, 8]), nics=st.sampled_from([1, 2]),
       over=st.sampled_from([1.0, 2.0]), seed=st.integers(0, 2**31 - 1),
       size=st.integers(2, 12))
def test_used_links_cover_every_route(nodes, local, nics, over, seed, size):
    """A walk counts bytes only on ``used_links()``: every link any pair of the machine's ranks
    routes over must be in it, whatever the placement (sparse, shuffled, oversubscribed)."""
    rng = np.random.default_rng(seed)
    devices = nodes * local
    placement = rng.choice(devices, size=min(size, devices), replace=False)
    topo = two_level(nodes, local, ("2us", "900GB/s"), ("5us", "50GB/s"),
                     nics_per_node=min(nics, local), oversubscription=over,
                     placement=placement)
    n = topo.world_size
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n)))
    links = topo.route(src[src != dst], dst[src != dst])
    assert set(links[links >= 0].tolist()) <= set(topo.used_links().tolist())


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce_scatter",
                                        "all_to_all"])
def test_one_rank_per_node_of_a_large_machine_walks_as_the_flat_machine(collective):
    """A group with one rank on each of 16 nodes of 8 GPUs (a data-parallel group beside
    TP = 8) sends every byte over its own NIC: each algorithm's walk, per step, is the flat
    machine's with the NIC's alpha and bandwidth (the walk skips the 120 GPUs the group does not
    use without changing a number)."""
    nodes, local = 16, 8
    topo = two_level(nodes, local, ("2us", "900GB/s"), ("5us", "50GB/s"),
                     placement=np.arange(nodes) * local)
    for name in ringccl.algorithms(collective):
        try:
            on_two = ringccl.cost(collective, name, None, 3e7, topology=topo)
        except ArgumentError:
            continue   # e.g. hierarchical: needs ranks per node
        on_flat = ringccl.cost(collective, name, nodes, 3e7, alpha="5us", bandwidth="50GB/s",
                               method="walk")
        assert on_two.seconds == pytest.approx(on_flat.seconds, rel=1e-12), name
        assert [s.seconds for s in on_two.steps] == pytest.approx(
            [s.seconds for s in on_flat.steps], rel=1e-12), name
        assert on_two.max_link_bytes["nic out"] == pytest.approx(
            on_flat.max_link_bytes["port out"], rel=1e-12), name


def test_a_walk_whose_schedule_cannot_be_allocated_is_refused_and_tune_skips_it(monkeypatch):
    """A builder's array past what can be allocated (a 40,000-rank ring on a two-level machine
    asks numpy for 24 GiB at once) is an ArgumentError naming the schedule, and tune lists
    that algorithm as skipped with it, rather than numpy's MemoryError from inside."""
    from ringccl.costmodel import model
    from ringccl.costmodel.topology import two_level

    def no_memory(collective, algorithm, world_size, **params):
        raise MemoryError("Unable to allocate 23.8 GiB")
    monkeypatch.setattr(model, "build_schedule", no_memory)
    topo = two_level(5000, 8, ("5us", "900GB/s"), ("5us", "50GB/s"))
    with pytest.raises(ringccl.ArgumentError, match=r"^the ring all_reduce schedule on 40000 "
                       r"ranks does not fit in memory to be walked"):
        ringccl.cost("all_reduce", "ring", None, "1MiB", topology=topo)
    with pytest.raises(ringccl.ArgumentError, match="no algorithm of all_reduce can be costed"):
        ringccl.tune("all_reduce", topology=topo, algorithms=["ring"])
