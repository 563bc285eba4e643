"""NCCL's tuning constants as published in its source, and the machines they describe.

Every figure below is read from NCCL v2.27.7-1 (github.com/NVIDIA/nccl, tag ``v2.27.7-1``) and
written down here as data, with the file it comes from: ``src/graph/tuning.cc`` (latencies in
µs, bandwidth caps in GB/s = 1e9 bytes/s), ``src/graph/topo.h`` (NVLink bandwidth per link),
``src/graph/search.cc`` (the speeds a channel's bandwidth is chosen from) and
``src/enqueue.cc`` (the point-to-point LL threshold). :mod:`.nccl` prices collectives with them.

The machine presets (:data:`NCCL_MACHINES`) combine those with datasheet link counts; each names
its sources. Their α are NCCL's own hop latencies (the defaults of :class:`.nccl.NcclMachine`).
"""

from __future__ import annotations

import math

__all__ = ["ALGORITHMS", "PROTOCOLS", "BASE_LATENCY_US", "HW_LATENCY_US", "NET_OVERHEAD_US",
           "P2P_LL_THRESHOLD", "NVLINK_BW_PER_LINK", "channel_caps", "tree_correction",
           "channel_speed", "NCCL_MACHINES", "machine_for_device"]

ALGORITHMS = ("ring", "tree", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("LL", "LL128", "Simple")

#: tuning.cc ``baseLat``: µs per call, by algorithm and protocol (0 for the others)
BASE_LATENCY_US = {"tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
                   "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}}


def _row(tree, ring, collnet_direct=0.0, collnet_chain=0.0, nvls=0.0, nvls_tree=0.0):
    simple = lambda v: {"LL": 0.0, "LL128": 0.0, "Simple": v}  # noqa: E731
    return {"tree": dict(zip(PROTOCOLS, tree)), "ring": dict(zip(PROTOCOLS, ring)),
            "collnet_direct": simple(collnet_direct), "collnet_chain": simple(collnet_chain),
            "nvls": simple(nvls), "nvls_tree": simple(nvls_tree), "pat": simple(0.0)}


#: tuning.cc ``hwLat``: µs per hop, by link type, algorithm and protocol
HW_LATENCY_US = {
    "nvlink": _row((0.6, 1.25, 4.0), (0.6, 1.9, 3.4), 3.7, 2.8, 25.0, 25.0),
    "pci": _row((1.0, 1.9, 4.0), (1.0, 2.5, 5.7), 3.7, 2.8),
    "net": _row((5.0, 8.5, 14.0), (2.7, 4.0, 14.0), 31.0, 30.0, 18.0, 14.0),
}

#: tuning.cc ``getNetOverhead``: µs per network post, by CPU vendor
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}

#: enqueue.cc ``NCCL_P2P_LL_THRESHOLD``: point-to-point messages up to this many bytes use LL
P2P_LL_THRESHOLD = 16384

#: topo.h ``SM80/SM90/SM100_NVLINK_BW`` (GB/s per link; Volta SM70)
NVLINK_BW_PER_LINK = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}

_GPU_INDEX = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 3}
#: tuning.cc ``llMaxBws`` (rows: GPU for one node / CPU for several; columns: 1, 2, >2 nodes)
_LL_MAX = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
#: tuning.cc ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``, ``perChMaxTreeBws``
_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (73.4, 73.4, 73.4))
_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (73.4, 73.4, 58.0))
_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (77.4, 82.8, 72.0))

#: tuning.cc ``treeCorrectionFactor``: tree all_reduce bandwidth × this, by protocol, for
#: sizes 64 B · 2^i (i = 0 … 22)
_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0,
           1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9,
              .9, .9, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7,
               .8, .9, .9),
}

#: search.cc ``speedArrayInter`` / ``sm90SpeedArrayInter`` / ``sm100SpeedArrayInter`` (GB/s)
_SPEEDS_INTER = {
    "ampere": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
               3.0, 2.4, 1.2, 0.24, 0.12),
    "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4,
               1.2, 0.24, 0.12),
    "blackwell": (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                  3.0, 2.4, 1.2, 0.24, 0.12),
}


def channel_caps(gpu: str, cpu: str, nodes: int) -> dict:
    """NCCL's bandwidth caps in bytes/s: ``ll`` (total, LL), ``ring_ll128``, ``tree_ll128``,
    ``tree`` (per channel) for this GPU generation, CPU vendor and node count (tuning.cc: the
    LL row is the GPU's on one node, the CPU's (Intel 0, AMD 1) across nodes)."""
    g = _GPU_INDEX[gpu]
    col = min(nodes, 3) - 1
    ll_row = g if nodes == 1 else (1 if cpu == "amd" else 0)
    return {"ll": _LL_MAX[ll_row][col] * 1e9, "ring_ll128": _RING_LL128[g][col] * 1e9,
            "tree_ll128": _TREE_LL128[g][col] * 1e9, "tree": _TREE[g][col] * 1e9}


def tree_correction(protocol: str, nbytes: float) -> float:
    """tuning.cc's tree all_reduce correction at ``nbytes`` (1 outside 64 B … 256 MiB)."""
    if nbytes < 64:
        return 1.0
    i = int(math.log2(int(nbytes) >> 6)) if int(nbytes) >> 6 else -1
    table = _TREE_CORRECTION[protocol]
    return table[i] if 0 <= i < len(table) else 1.0


def channel_speed(line_rate: float, gpu: str) -> float:
    """The bandwidth (bytes/s) NCCL's graph search gives a channel through a NIC of
    ``line_rate`` bytes/s: the fastest speed step that does not exceed it (search.cc)."""
    speeds = _SPEEDS_INTER["ampere" if gpu == "volta" else gpu]
    for s in speeds:
        if s * 1e9 <= line_rate:
            return s * 1e9
    return speeds[-1] * 1e9


def _preset(gpu, links, nic_gbps, nics, channels, nvls, name, source, **extra):
    return dict(gpu=gpu, gpus_per_node=8, intra_link="nvlink",
                intra_bandwidth=links * NVLINK_BW_PER_LINK[gpu] * 1e9,
                nics_per_node=nics, inter_bandwidth=channel_speed(nic_gbps / 8 * 1e9, gpu),
                channels=channels, nvls=nvls, name=name, source=source, **extra)


#: machines as NCCL sees them: NVLink links × topo.h's per-link bandwidth inside a node, each
#: NIC at the search.cc speed step below its line rate. Channel counts: 16 as NCCL logs them on
#: H100 nodes ("Channel 05/16" in the logs posted in GitHub NVIDIA/nccl#1453 and #1519; an
#: assumption for the others; A100: 240 GB/s in channels of 20, search.cc).
NCCL_MACHINES = {
    "dgx-a100": _preset("ampere", 12, 200, 8, 12, False, "dgx-a100",
                        "NVIDIA DGX A100 System Architecture (2020): 12 NVLink3 links per A100, "
                        "8 x 200 Gb/s HDR InfiniBand; channels: 12 of 20 GB/s (search.cc)"),
    "dgx-h100": _preset("hopper", 18, 400, 8, 16, True, "dgx-h100",
                        "NVIDIA DGX H100 datasheet: 18 NVLink4 links per H100 through NVSwitch "
                        "(NVLink SHARP), 8 x 400 Gb/s ConnectX-7"),
    "h800": _preset("hopper", 8, 400, 8, 16, True, "h800",
                    "H800 SXM: NVLink 400 GB/s bidirectional = 8 NVLink4 links (DeepSeek-V3 "
                    "Technical Report, arXiv:2412.19437, section 3.2.2: 160 GB/s achieved), "
                    "400 Gb/s InfiniBand per GPU"),
    "dgx-b200": _preset("blackwell", 18, 400, 8, 16, True, "dgx-b200",
                        "NVIDIA DGX B200 datasheet: 18 NVLink5 links per B200 (1.8 TB/s), 8 x "
                        "400 Gb/s ConnectX-7"),
}

#: substrings of the device names nccl-tests prints, and the preset each means
_DEVICE_PRESETS = (("H100", "dgx-h100"), ("H200", "dgx-h100"), ("H800", "h800"),
                   ("A100", "dgx-a100"), ("A800", "dgx-a100"), ("B200", "dgx-b200"))


def machine_for_device(device: str) -> str | None:
    """The preset whose GPU a device name such as "NVIDIA H100 80GB HBM3" names, or None."""
    for key, preset in _DEVICE_PRESETS:
        if key in device.upper():
            return preset
    return None
