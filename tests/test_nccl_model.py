"""Collectives priced as NCCL runs them (ringccl.costmodel.nccl) against published nccl-tests
figures, and the model's own contracts.

Every reference point names its source: who measured or stated it, where, when. Statements by
NVIDIA engineers are marked (NVIDIA); the others are users' posted measurements. Nothing in the
model was set from these rows: its constants are NCCL's (tuning.cc, topo.h, search.cc of NCCL
2.27.7) and the machines' datasheet link counts.
"""

import math

import pytest

from ringccl.collectives import COLLECTIVES
from ringccl.costmodel.nccl import (COLLECTIVES as PRICED, NcclMachine, nccl_machine, price)
from ringccl.costmodel.nccl_tables import channel_speed
from ringccl.errors import ArgumentError


def busbw(cost) -> float:
    factor = 1.0 if cost.collective == "send_recv" else COLLECTIVES[cost.collective].bus_factor(
        cost.world_size)
    return cost.nbytes / cost.seconds * factor


#: (what, machine, collective, ranks_per_node, nodes, nbytes, options, busbw GB/s, tolerance,
#:  source)
REFERENCES = [
    ("8 x H100, all_reduce, NCCL_ALGO=Ring", "dgx-h100", "all_reduce", 8, 1, 8 << 30,
     {"algorithms": ["ring"]}, 370.0, 0.10,
     "sjeaugey (NVIDIA), NVIDIA/nccl-tests issue 212, 2024-05-06: effective NVLink bandwidth "
     "370 GB/s, seen as busbw with NCCL_ALGO=RING or on non-allreduce operations"),
    ("8 x H100, all_gather", "dgx-h100", "all_gather", 8, 1, 8 << 30, {}, 370.0, 0.10,
     "same comment: non-allreduce operations reach the 370 GB/s"),
    ("8 x H100, all_reduce (NVLS)", "dgx-h100", "all_reduce", 8, 1, 16 << 30, {}, 480.0, 0.10,
     "sjeaugey (NVIDIA), nccl-tests issue 212: peak busbw ~480 GB/s (algbw ~275) on 8 GPUs; "
     "AddyLaddy (NVIDIA), nccl-tests issue 290, 2025-03-03: 476 GB/s is the expected range"),
    ("8 x H800, all_reduce", "h800", "all_reduce", 8, 1, 8 << 30, {}, 215.0, 0.10,
     "yupatrick22, NVIDIA/nccl issue 1374, 2024-07-24: 215 GB/s allreduce busbw on an H800 x 8 "
     "node"),
    ("8 x A100, all_reduce", "dgx-a100", "all_reduce", 8, 1, 8 << 30, {}, 240.0, 0.10,
     "kiskra-nvidia (NVIDIA), NVIDIA/nccl issue 1712, 2025-05-21: NVLink-connected A100s "
     "should see close to 240 GB/s"),
    ("DGX A100 x 4 nodes, 8 x 200 Gb/s IB, all_reduce", "dgx-a100", "all_reduce", 8, 4,
     8 << 30, {}, 192.0, 0.10,
     "AddyLaddy (NVIDIA), NVIDIA/nccl issue 812, 2023-03-31: 'On an Nvidia DGX-A100 system we "
     "have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW' (node count not "
     "given: four assumed, more than the two where the tree exceeds the NICs)"),
    ("2 x 8 H100, 8 x 400G, all_reduce", "dgx-h100", "all_reduce", 8, 2, 16 << 30, {}, 470.0,
     0.15, "qoofyk, NVIDIA/nccl-tests issue 309, 2025-05: two HGX H100 nodes reach 470 GB/s"),
    ("4 x 8 H100, 8 x 400G, all_reduce", "dgx-h100", "all_reduce", 8, 4, 16 << 30, {}, 365.84,
     0.10, "qoofyk, NVIDIA/nccl-tests issue 309: four nodes, max busbw 365.84 GB/s"),
    ("5 x 8 H100, 4 x 400G RoCE, all_reduce, NCCL_ALGO=Ring", "dgx-h100", "all_reduce", 8, 5,
     1 << 30, {"algorithms": ["ring"], "nics_per_node": 4}, 190.0, 0.10,
     "wangdaw2023, NVIDIA/nccl issue 1368, 2024-07-18: ring busbw 190 GB/s at -e 1G on five "
     "nodes of 8 H100 with 4 x 400G RoCE"),
    ("H100, one GPU per node, 400G NDR, send/recv", "dgx-h100", "send_recv", 1, 2, 1 << 30, {},
     47.0, 0.05, "AddyLaddy (NVIDIA), nccl-tests issue 290: 'For NDR @ 400Gbps you should see "
     "46-48GB/s per NIC'"),
]


@pytest.mark.parametrize("ref", REFERENCES, ids=[r[0] for r in REFERENCES])
def test_published_bus_bandwidths(ref):
    what, machine, coll, ppn, nodes, nbytes, options, expected, tol, source = ref
    options = dict(options)
    m = nccl_machine(machine, nics_per_node=options.pop("nics_per_node", None))
    cost = price(coll, nbytes, ppn, nodes, m, **options)
    assert busbw(cost) / 1e9 == pytest.approx(expected, rel=tol), (what, source,
                                                                    cost.explain())


def test_nvidia_per_nic_figures_are_the_channel_speeds():
    # sjeaugey (NVIDIA), NVIDIA/nccl-tests issue 119, 2022-11-17: "24GB/s is the peak
    # performance per 200G NIC (12 GB/s for 100G NICs)"; 400 Gb/s: 46-48 (issue 290)
    assert channel_speed(200e9 / 8, "ampere") == 24e9
    assert channel_speed(100e9 / 8, "ampere") == 12e9
    assert channel_speed(400e9 / 8, "hopper") == 48e9


def test_small_message_latency_of_nvls_tree_on_two_nodes():
    # haswelliris, NVIDIA/nccl issue 1244, 2024-04-09: 2 nodes x 8 H20 (NVLink 900 GB/s like
    # the H100's), 8 x NDR, NCCL_ALGO=NVLSTree, 4-64 B all_reduce: 46.3-47.6 us
    m = nccl_machine("dgx-h100")
    cost = price("all_reduce", 8, 8, 2, m, algorithms=["nvls_tree"])
    assert cost.seconds * 1e6 == pytest.approx(46.5, rel=0.15)


def test_two_node_tree_goes_beyond_the_network():
    # sjeaugey (NVIDIA), nccl-tests issue 196: "On two nodes, NCCL uses the tree (or nvlstree)
    # algorithm which can indeed go beyond the network bottleneck"
    m = nccl_machine("dgx-a100", nics_per_node=1)  # one 200G NIC: 24 GB/s out of each node
    cost = price("all_reduce", 1 << 30, 8, 2, m)
    assert cost.algorithm == "tree" and busbw(cost) > 24e9
    ring = price("all_reduce", 1 << 30, 8, 2, m, algorithms=["ring"])
    assert busbw(ring) <= 24e9 * 1.001


CASES = [(c, n, ppn, nodes, machine) for c in PRICED for n in (8, 4096, 1 << 20, 1 << 30)
         for ppn, nodes in ((8, 1), (2, 1), (8, 2), (8, 16), (1, 8), (4, 3))
         for machine in ("dgx-h100", "dgx-a100")]


@pytest.mark.parametrize("coll, nbytes, ppn, nodes, machine", CASES)
def test_the_choice_is_the_argmin_and_its_terms_give_its_time(coll, nbytes, ppn, nodes, machine):
    m = nccl_machine(machine)
    cost = price(coll, nbytes, ppn, nodes, m)
    times = [t for _, _, t in cost.candidates]
    assert times == sorted(times) and cost.seconds == times[0]
    assert (cost.algorithm, cost.protocol) == cost.candidates[0][:2]
    assert cost.terms.seconds(m) == pytest.approx(cost.seconds, rel=1e-12)
    assert cost.latency_s > 0 and cost.bandwidth_s >= 0
    assert cost.latency_s + cost.bandwidth_s == pytest.approx(cost.seconds)
    assert min(cost.link_bytes.values()) >= 0


@pytest.mark.parametrize("coll", PRICED)
@pytest.mark.parametrize("ppn, nodes", [(8, 1), (8, 4), (1, 16)])
def test_time_grows_with_size(coll, ppn, nodes):
    m = nccl_machine("dgx-h100")
    times = [price(coll, 2 ** k, ppn, nodes, m).seconds for k in range(0, 35)]
    assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:]))


def test_a_direct_exchange_pays_one_post_per_peer():
    m = nccl_machine("dgx-h100")
    small = price("all_to_all", 1024 * 1024, 8, 128, m)  # 1023 peers of 1 KiB each
    assert small.algorithm == "p2p"
    assert small.latency_s >= (1024 - 8) * m.inter_message
    doubled = price("all_to_all", 2048 * 1024, 8, 256, m)  # same 1 KiB per peer, 2047 peers
    assert doubled.latency_s - small.latency_s == pytest.approx(1024 * m.inter_message, rel=0.01)
    # the bytes: 8 x 1016 messages of 1 KiB leave each node, spread over its 8 NICs
    assert small.link_bytes["inter"] == pytest.approx(8 * 1016 * 1024 / 8)
    assert small.link_bytes["intra"] == pytest.approx(7 * 1024)


@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter"])
@pytest.mark.parametrize("proto, base, intra, net", [("LL", 6.6, 0.6, 2.7),
                                                     ("LL128", 14.0, 1.9, 4.0),
                                                     ("Simple", 8.4, 3.4, 14.0)])
def test_ring_latency_of_512_ranks_over_64_nodes(coll, proto, base, intra, net):
    # tuning.cc ncclTopoTuneModel, the same in NCCL v2.18.1-1 (the NCCL of PyTorch 2.1 and of
    # the mosaicml/pytorch:2.1.0_cu121 image) as in v2.27.7-1 for these shapes: baseLat plus,
    # over the ring's N - 1 steps, nodes - 1 network hops (hwLat NET ring) and the rest NVLink
    # hops raised to the per-post network overhead (getNetOverhead: 1 us on Intel, x3 for
    # Simple). 512 ranks, 8 per node: 448 NVLink steps, 63 network ones.
    m = nccl_machine("dgx-h100")
    cost = price(coll, 1 << 30, 8, 64, m, algorithms=["ring"], protocols=[proto])
    overhead = 1.0 * (3 if proto == "Simple" else 1)
    expected_us = base + (511 - 63) * max(intra, overhead) + 63 * net
    assert cost.latency_s * 1e6 == pytest.approx(expected_us)
    # the step count, not the bytes, sets it: a quarter of the ranks, about a quarter of it
    quarter = price(coll, 1 << 30, 8, 16, m, algorithms=["ring"], protocols=[proto])
    assert quarter.latency_s * 1e6 == pytest.approx(
        base + (127 - 15) * max(intra, overhead) + 15 * net)


def test_ring_bytes_per_level():
    m = nccl_machine("dgx-h100")
    one = price("all_reduce", 1 << 30, 8, 1, m, algorithms=["ring"])
    assert one.link_bytes == {"intra": pytest.approx(2 * 7 / 8 * 2**30), "inter": 0.0}
    four = price("all_gather", 1 << 30, 8, 4, m, algorithms=["ring"])
    per_rank = 31 / 32 * 2**30
    assert four.link_bytes["inter"] == pytest.approx(per_rank / 8)  # one hop per channel, 8 rails
    assert four.link_bytes["intra"] == pytest.approx(per_rank * 7 / 8)


def test_restrictions_single_rank_and_defaults():
    m = nccl_machine("dgx-h100")
    assert price("all_reduce", 1 << 20, 8, 1, m, algorithms=["ring"], protocols=["LL128"]
                 ).protocol == "LL128"
    assert price("all_reduce", 1 << 20, 1, 1, m).seconds == 0.0
    assert price("all_reduce", 0, 8, 2, m).bandwidth_s == 0.0
    assert price("all_gather", 1 << 20, 1, 4, m).rails == 1  # one GPU: its own NIC
    assert price("all_gather", 1 << 20, 8, 4, m).rails == 8
    a100 = nccl_machine("dgx-a100")
    assert "nvls" not in {a for a, _, _ in price("all_reduce", 1 << 30, 8, 1, a100).candidates}
    assert NcclMachine().intra_alpha == pytest.approx(3.4e-6)  # NCCL's NVLink ring Simple hop
    text = price("all_reduce", 1 << 30, 8, 2, m).explain()
    assert "NCCL picks" in text and "8 per node x 2 nodes" in text and "next:" in text


@pytest.mark.parametrize("call, match", [
    (lambda m: price("all_reduce_x", 1, 8, 1, m), "not priced; expected one of all_reduce"),
    (lambda m: price("all_reduce", 1, 9, 1, m), "ranks_per_node=9 exceeds"),
    (lambda m: price("all_reduce", 1, 8, 2, m, rails=9), "rails=9 exceeds"),
    (lambda m: price("all_reduce", -1, 8, 1, m), "nbytes=-1"),
    (lambda m: price("all_reduce", math.nan, 8, 1, m), "nbytes=nan"),
    (lambda m: price("all_reduce", 1, 8, 0, m), "nodes"),
    (lambda m: price("all_reduce", 1, 8, 1, m, algorithms=["rings"]), "unknown rings"),
    (lambda m: price("broadcast", 1, 8, 1, m, algorithms=["tree"]), "no enabled algorithm"),
    (lambda m: NcclMachine(gpu="pascal"), "gpu='pascal' is unknown"),
    (lambda m: NcclMachine(intra_bandwidth="0GB/s"), "intra_bandwidth"),
    (lambda m: NcclMachine(inter_alpha="-1us"), "inter_alpha"),
    (lambda m: nccl_machine("dgx-z"), "not a preset; expected one of dgx-a100"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ArgumentError, match=match):
        call(nccl_machine("dgx-h100"))
