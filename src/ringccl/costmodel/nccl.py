"""A collective priced as NCCL runs it: its algorithms, protocols and argmin choice.

:func:`price` returns the time of one collective of ``nbytes`` over a group placed as
``ranks_per_node`` × ``nodes`` (using ``rails`` NICs per node) on a :class:`NcclMachine`, the
algorithm and protocol NCCL's tuning would pick, the bytes on each link level and a sentence
saying why. ringccl's own schedules stay priced by :mod:`.model` (the what-if).

Sources, NCCL v2.27.7-1 (github.com/NVIDIA/nccl, tag ``v2.27.7-1``):

* ``src/graph/tuning.cc``, ``ncclTopoTuneModel``: per (collective, algorithm, protocol) a
  latency — a base (``baseLat``) plus hop latencies per link type (``hwLat``: NVLink, PCI,
  network), counted per algorithm (ring: 2(N-1) steps for all_reduce, N-1 for all_gather and
  reduce_scatter, of which 2(nodes-1) or nodes-1 cross the network; tree: 2((ppn-1)·intra +
  log2(nodes)·inter); NVLS, NVLS-tree, CollNet, PAT their own) — and a bandwidth: the graph's
  channels × per-channel bandwidth, refined per protocol (ring LL ×0.5 capped by ``llMaxBws``,
  LL128 ×0.92 capped per channel, tree ×0.92, tree LL ÷3.8, tree LL128 ×7/9 or ×120/128, PAT
  ×0.75, CollNet-direct by its GPU/NIC ratio), then turned into algorithm bandwidth (ring
  ×N/steps, NVLS ×5/6, tree and CollNet ×1/2);
* ``tuning.cc``, ``ncclTopoGetAlgoTime``: time = latency + nBytes / bandwidth, the tree
  correction factors by size, the ring Simple "plateau" ×1.4 across nodes; ``getNetOverhead``:
  1 µs per network post (2 µs on AMD CPUs);
* ``src/enqueue.cc``: the argmin over the enabled (algorithm, protocol) pairs; nBytes = the
  type size × max(send count, receive count), which is nccl-tests' "size" column; point-to-point
  operations use LL up to ``NCCL_P2P_LL_THRESHOLD`` (16 KiB);
* ``src/graph/topo.h``: NVLink bandwidth per link (20.0 GB/s Ampere, 20.6 Hopper, 40.1
  Blackwell); ``src/graph/search.cc``: the speeds a channel's bandwidth is chosen from (a
  400 Gb/s NIC carries 48 GB/s, a 200 Gb/s one 24).

Ours, not NCCL's tuning (each labelled where it is used): the graph's total bandwidth comes from
the machine (NVLink links × per-link bandwidth inside a node; ``rails`` NICs across, one
inter-node hop per ring per channel) instead of NCCL's topology search; the NVLS graph carries
ppn/(ppn+1) of a GPU's NVLink bandwidth (a multimem reduce then broadcast moves (1 + 1/ppn)·M
per GPU and direction); point-to-point operations (all_to_all, send/recv, scatter, gather) cost
a hop, a per-message post for each peer (a NIC posts them one after another) and their bytes at
the link's bandwidth, intra- and inter-node traffic overlapping; the bytes on each link level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

from .. import units
from ..args import check_int
from ..errors import ArgumentError
from .nccl_machine import (PARAMETERS, REFERENCE_HOP_US, NcclMachine, nccl_machine,
                           parameter)
from .nccl_tables import (ALGORITHMS, BASE_LATENCY_US, HW_LATENCY_US, NCCL_MACHINES,
                          NET_OVERHEAD_US, P2P_LL_THRESHOLD, PROTOCOLS, channel_caps,
                          machine_for_device, tree_correction)

__all__ = ["NcclMachine", "NcclCost", "Terms", "PARAMETERS", "parameter", "price", "nccl_machine", "machine_for_device",
           "NCCL_MACHINES", "COLLECTIVES", "ALGORITHMS", "PROTOCOLS", "LEVELS"]

#: what :func:`price` prices (ringccl's names; ``send_recv`` is nccl-tests' sendrecv: each rank
#: sends to the next and receives from the previous)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
               "all_to_all", "send_recv", "scatter", "gather")
_P2P = ("all_to_all", "send_recv", "scatter", "gather")
LEVELS = ("intra", "inter")
class Terms(NamedTuple):
    """A predicted time as a linear function of the machine's parameters, at one choice of
    algorithm and protocol: seconds = known + Σ coefficients[name] · parameter(name) (what
    :mod:`.nccl_fit` fits)."""

    known: float
    coefficients: dict

    def seconds(self, m: NcclMachine) -> float:
        return self.known + sum(c * parameter(m, k) for k, c in self.coefficients.items())

    def split(self, m: NcclMachine, free: Sequence[str]) -> tuple[float, dict]:
        """(known seconds with every parameter but ``free`` at its value on ``m``,
        {name: coefficient} of the ``free`` ones)."""
        known = self.known + sum(c * parameter(m, k) for k, c in self.coefficients.items()
                                 if k not in free)
        return known, {k: self.coefficients.get(k, 0.0) for k in free}


@dataclass
class _Bw:
    """A bandwidth (bytes/s) and the level bounding it: value = coef × that level's bandwidth
    (level None: a constant cap)."""

    value: float
    level: str | None
    coef: float

    def scale(self, f: float) -> "_Bw":
        return _Bw(self.value * f, self.level, self.coef * f)

    def cap(self, value: float) -> "_Bw":
        return self if self.value <= value else _Bw(value, None, 0.0)


def _lower(*bws: _Bw) -> _Bw:
    return min(bws, key=lambda b: b.value)


@dataclass
class _Lat:
    """A latency: known seconds plus coefficients on the machine's parameters."""

    known: float = 0.0
    coef: dict = field(default_factory=dict)

    def add(self, other: "_Lat", times: float = 1.0) -> "_Lat":
        coef = dict(self.coef)
        for k, c in other.coef.items():
            coef[k] = coef.get(k, 0.0) + times * c
        return _Lat(self.known + times * other.known, coef)

    def scale(self, f: float) -> "_Lat":
        return _Lat(self.known * f, {k: c * f for k, c in self.coef.items()})

    def seconds(self, m: NcclMachine) -> float:
        return self.known + sum(c * parameter(m, k) for k, c in self.coef.items())


@dataclass
class NcclCost:
    """One collective as NCCL would run it.

    Attributes:
        collective, nbytes: what was priced (nbytes as nccl-tests' size column).
        world_size, ranks_per_node, nodes, rails: the group's placement.
        seconds: predicted time of the chosen (algorithm, protocol).
        algorithm, protocol: NCCL's choice ("ring", "tree", "nvls", "nvls_tree",
            "collnet_direct", "collnet_chain", "pat", "p2p"; "LL", "LL128", "Simple").
        latency_s, bandwidth_s: the two parts of ``seconds``.
        link_bytes: {"intra": bytes one GPU sends into the node's fabric, "inter": bytes one
            NIC sends}.
        candidates: [(algorithm, protocol, seconds)] of every enabled pair, fastest first.
        terms: ``seconds`` as a linear function of the machine's levels (:class:`Terms`).
        machine: the machine priced on.
    """

    collective: str
    nbytes: float
    world_size: int
    ranks_per_node: int
    nodes: int
    rails: int
    seconds: float
    algorithm: str
    protocol: str
    latency_s: float
    bandwidth_s: float
    link_bytes: dict
    candidates: list
    terms: Terms
    machine: NcclMachine = field(repr=False, default=None)

    @property
    def algbw(self) -> float:
        return self.nbytes / self.seconds if self.seconds > 0 else math.inf

    def explain(self) -> str:
        """Why NCCL picks what it picks, in one paragraph."""
        head = (f"{self.collective} of {units.format_size(self.nbytes)} over {self.world_size} "
                f"ranks ({self.ranks_per_node} per node x {self.nodes} node"
                f"{'s' if self.nodes > 1 else ''}, {self.rails} rail"
                f"{'s' if self.rails > 1 else ''}) on {self.machine.name}")
        if self.world_size == 1:
            return head + ": one rank, nothing to move"
        text = (f"{head}: NCCL picks {self.algorithm}/{self.protocol}, "
                f"{units.format_duration(self.seconds)} = latency "
                f"{units.format_duration(self.latency_s)} + bytes "
                f"{units.format_duration(self.bandwidth_s)} (algbw "
                f"{units.format_bandwidth(self.algbw)})")
        others = [f"{a}/{p} {units.format_duration(t)}" for a, p, t in self.candidates[1:4]]
        if others:
            text += "; next: " + ", ".join(others)
        return text


def price(collective: str, nbytes: float, ranks_per_node: int, nodes: int = 1,
          machine: NcclMachine | None = None, rails: int | None = None,
          algorithms: Iterable[str] | None = None,
          protocols: Iterable[str] | None = None) -> NcclCost:
    """Seconds of ``collective`` of ``nbytes`` as NCCL's tuning would run it (module doc).

    Args:
        collective: one of :data:`COLLECTIVES`.
        nbytes: nccl-tests' size: the buffer (all_reduce, broadcast, reduce, send_recv), the
            whole output of all_gather / input of reduce_scatter, one rank's whole all_to_all
            send buffer, the root's whole buffer (scatter, gather); bytes >= 0.
        ranks_per_node, nodes: the group's placement (world size = their product).
        machine: default :class:`NcclMachine` () (an 8-GPU Hopper node).
        rails: NICs per node the group uses (default: its share of the node's NICs,
            ``nics_per_node × ranks_per_node / gpus_per_node``, at least 1).
        algorithms, protocols: what NCCL_ALGO / NCCL_PROTO would leave enabled (default all;
            names as NCCL reads them, ``["^ring"]`` all but ring).
    Returns:
        an :class:`NcclCost` (``seconds``, ``algorithm``, ``protocol``, ``link_bytes``,
        ``explain()``).
    Raises:
        ArgumentError: unknown collective, algorithm or protocol, counts < 1, ranks_per_node
            above the machine's GPUs per node, nbytes < 0, nothing enabled that runs it.
    """
    m = machine if machine is not None else NcclMachine()
    if collective not in COLLECTIVES:
        raise ArgumentError(f"collective={collective!r} is not priced; expected one of "
                            f"{', '.join(COLLECTIVES)}")
    ppn = check_int(ranks_per_node, "ranks_per_node", minimum=1)
    nodes = check_int(nodes, "nodes", minimum=1)
    if ppn > m.gpus_per_node:
        raise ArgumentError(f"ranks_per_node={ppn} exceeds the machine's gpus_per_node="
                            f"{m.gpus_per_node}")
    rails = _rails(rails, ppn, m)
    if not (isinstance(nbytes, (int, float)) and nbytes >= 0 and math.isfinite(nbytes)):
        raise ArgumentError(f"nbytes={nbytes!r} must be a finite number of bytes >= 0")
    algos = _enabled("algorithms", algorithms, ALGORITHMS + ("p2p",))
    protos = _enabled("protocols", protocols, PROTOCOLS)
    n = ppn * nodes
    if n == 1:
        return NcclCost(collective, nbytes, 1, ppn, nodes, rails, 0.0, "none", "none", 0.0,
                        0.0, {"intra": 0.0, "inter": 0.0}, [], Terms(0.0, {}), m)
    place = (float(nbytes), ppn, nodes, rails, m)
    call = m.intra_epsilon if nodes == 1 else m.inter_epsilon
    cands = (_p2p_candidates(collective, *place, protos) if collective in _P2P
             else _candidates(collective, *place, algos, protos))
    if not cands:
        raise ArgumentError(f"no enabled algorithm/protocol runs {collective} on {ppn} x {nodes}"
                            f" ranks (algorithms {sorted(algos)}, protocols {sorted(protos)})")
    timed = sorted(((a, p, lat, bw, call + lat.seconds(m)
                     + (nbytes / bw.value if nbytes else 0.0))
                    for a, p, lat, bw in cands), key=lambda c: c[4])
    a, p, lat, bw, total = timed[0]
    latency = call + lat.seconds(m)
    return NcclCost(collective, float(nbytes), n, ppn, nodes, rails, total, a, p, latency,
                    total - latency, _link_bytes(collective, a, float(nbytes), ppn, nodes,
                                                        rails),
                    [(c[0], c[1], c[4]) for c in timed], _terms(lat, bw, float(nbytes), nodes), m)


def _rails(rails, ppn: int, m: NcclMachine) -> int:
    if rails is None:
        return max(1, (m.nics_per_node * ppn) // m.gpus_per_node)
    rails = check_int(rails, "rails", minimum=1)
    if rails > m.nics_per_node:
        raise ArgumentError(f"rails={rails} exceeds the machine's nics_per_node="
                            f"{m.nics_per_node}")
    return rails


def _enabled(what: str, names, known: tuple) -> set:
    """The names ``names`` leaves enabled, read as NCCL reads NCCL_ALGO / NCCL_PROTO: not case
    sensitive, NCCL's spellings too (NVLSTree, CollnetDirect), and a first name starting with
    ^ excludes the list (``["^ring", "tree"]``: all but those)."""
    if names is None:
        return set(known)
    given = [str(x).strip() for x in names]
    exclude = bool(given) and given[0].startswith("^")
    chosen = [given[0][1:].strip()] + given[1:] if exclude else given
    key = lambda name: name.lower().replace("_", "")  # noqa: E731
    lookup = {key(k): k for k in known}
    bad = [x for x in chosen if key(x) not in lookup]
    if bad:
        unknown = ", ".join(x or "''" for x in bad)
        raise ArgumentError(f"{what}={given}: unknown {unknown}; "
                            f"expected names from {', '.join(known)}, or ^ and names (all but "
                            "those)")
    names = {lookup[key(x)] for x in chosen}
    return set(known) - names if exclude else names


def _terms(lat: _Lat, bw: _Bw, nbytes: float, nodes: int) -> Terms:
    known, coef = lat.known, dict(lat.coef)
    if nbytes:
        if bw.level is None:
            known += nbytes / bw.value
        else:
            coef[f"{bw.level}_beta"] = coef.get(f"{bw.level}_beta", 0.0) + nbytes / bw.coef
    coef["intra_epsilon" if nodes == 1 else "inter_epsilon"] = 1.0
    return Terms(known, coef)


def _hop(m: NcclMachine, level: str, algorithm: str, protocol: str) -> _Lat:
    """One hop of ``level`` for (algorithm, protocol): NCCL's hwLat over its ring Simple hop,
    times the level's alpha."""
    hw = m.intra_link if level == "intra" else "net"
    rel = HW_LATENCY_US[hw][algorithm][protocol] / REFERENCE_HOP_US[hw]
    return _Lat(coef={f"{level}_alpha": rel})


def _graph_bandwidths(ppn: int, nodes: int, rails: int, m: NcclMachine) -> dict:
    """Each algorithm's graph bandwidth (channels × per-channel), ours from the machine."""
    intra = _Bw(m.intra_bandwidth, "intra", 1.0) if ppn > 1 else _Bw(math.inf, None, 0.0)
    net = _Bw(rails * m.inter_bandwidth, "inter", float(rails))
    nvls = intra.scale(ppn / (ppn + 1))  # (1 + 1/ppn)·M per GPU and direction
    if nodes == 1:
        return {"ring": intra, "tree": intra, "nvls": nvls, "pat": intra}
    return {"ring": _lower(intra, net),
            # two nodes: the tree's intra-node part may run at twice the network (search.cc)
            "tree": _lower(intra, net.scale(2.0)) if nodes == 2 else _lower(intra, net),
            "nvls": _lower(nvls, net),
            "nvls_tree": _lower(nvls, net if nodes == 2 else net.scale(0.5)),
            "collnet_direct": _lower(intra, net), "collnet_chain": _lower(intra, net),
            "pat": net}


def _available(collective: str, ppn: int, nodes: int, m: NcclMachine) -> list[str]:
    if collective in ("broadcast", "reduce"):
        return ["ring"]
    if collective in ("all_gather", "reduce_scatter"):
        out = ["ring"]
        if ppn == 1 and nodes > 1:
            out.append("pat")  # PAT: one GPU per node only
        if m.nvls and nodes == 1 and ppn > 1:
            out.append("nvls")
        return out
    out = ["ring", "tree"]
    if m.nvls and ppn > 1 and (nodes == 1 or m.collnet):
        out.append("nvls")
    if m.nvls and ppn > 1 and nodes > 1:
        out.append("nvls_tree")
    if m.collnet and nodes > 1:
        out += ["collnet_direct", "collnet_chain"] if ppn <= 8 else ["collnet_chain"]
    return out


def _candidates(collective, nbytes, ppn, nodes, rails, m, algos, protos):
    graph = _graph_bandwidths(ppn, nodes, rails, m)
    caps = channel_caps(m.gpu, m.cpu, nodes)
    out = []
    for a in _available(collective, ppn, nodes, m):
        if a not in algos:
            continue
        for p in PROTOCOLS:
            if p not in protos or (p == "LL128" and not m.ll128):
                continue
            if a not in ("ring", "tree") and p != "Simple":
                continue  # NVLS, CollNet and PAT run Simple only
            bw = _refine(collective, a, p, graph[a], ppn, nodes, rails, m, caps)
            if a == "tree" and collective == "all_reduce":
                bw = bw.scale(tree_correction(p, nbytes))
            out.append((a, p, _latency(collective, a, p, nbytes, ppn, nodes, m), bw))
    return out


def _refine(collective, a, p, bw: _Bw, ppn, nodes, rails, m, caps) -> _Bw:
    """tuning.cc's per-protocol refinements and the bus-to-algorithm conversion."""
    ch = m.channels
    n, steps = ppn * nodes, _ring_steps(collective, ppn * nodes)
    if a == "ring":
        if p == "LL":
            bw = bw.scale(0.5).cap(caps["ll"])
        elif p == "LL128":
            bw = bw.scale(0.92).cap(ch * caps["ring_ll128"])
        return bw.scale(n / steps)
    if a == "tree":
        bw = bw.scale(0.92).cap(ch * caps["tree"])
        if p == "LL":
            bw = bw.scale(1 / 3.8).cap(caps["ll"])
        elif p == "LL128":
            bw = bw.scale(7 / 9 if nodes == 1 else 120 / 128).cap(ch * caps["tree_ll128"])
        return bw.scale(0.5)
    if a == "pat":
        return bw.scale(0.75)
    if a == "nvls":
        return bw.scale(5 / 6) if collective == "all_reduce" else bw.scale((ppn - 1) / ppn)
    if a == "nvls_tree":
        return bw.scale(5 / 6)
    if a == "collnet_direct":
        ratio = ppn / rails  # GPUs per NIC: CollNet-direct wants one NIC per GPU
        bw = bw.scale(1 / (ratio - (ratio - 1) / 2))
        if m.gpu in ("hopper", "blackwell"):
            bw = bw.scale(0.85)
    return bw.scale(0.5)


def _ring_steps(collective: str, n: int) -> int:
    if collective == "all_reduce":
        return 2 * (n - 1)
    return n - 1 if collective in ("all_gather", "reduce_scatter") else n


def _latency(collective, a, p, nbytes, ppn, nodes, m) -> _Lat:
    """tuning.cc's latency of (collective, algorithm, protocol), in terms of the alphas."""
    n = ppn * nodes
    lat = _Lat(known=BASE_LATENCY_US.get(a, {}).get(p, 0.0) * 1e-6)
    intra = _hop(m, "intra", a, p)
    # one GPU per node: its latencies are fully exposed, NCCL counts the tree's network hop
    inter = _hop(m, "inter", "tree" if ppn == 1 else a, p)
    log_nodes = int(math.log2(nodes))
    if a == "ring":
        steps = _ring_steps(collective, n)
        if collective in ("broadcast", "reduce"):  # pipelined over channels: one hop
            return lat.add(intra if nodes == 1 else _hop(m, "inter", "ring", p))
        # a network post per step (getNetOverhead; x3 for Simple) when it exceeds the hop; a
        # share of the network hop here (the message cost of all_to_all is fitted apart)
        post = (_Lat(coef={"inter_alpha": NET_OVERHEAD_US[m.cpu] / REFERENCE_HOP_US["net"]
                           * (3.0 if p == "Simple" else 1.0)}) if nodes > 1 else _Lat())
        step = intra if intra.seconds(m) >= post.seconds(m) else post
        crossing = 0 if nodes == 1 else (2 * (nodes - 1) if collective == "all_reduce"
                                         else nodes - 1)
        lat = lat.add(step, steps - crossing).add(inter, crossing)
        if (collective == "all_reduce" and p == "Simple" and nodes > 1
                and nbytes / (m.channels * n) >= 64):
            lat = lat.scale(1.9 if m.gpu == "volta" else 1.4)  # the ring's plateau
        return lat
    if a == "tree":
        return lat.add(intra, 2 * (ppn - 1)).add(inter, 2 * log_nodes)
    if a == "collnet_direct":
        return (lat.add(intra, 2 * min(1, ppn - 1)).add(_Lat(known=0.4e-6), 2 * (ppn - 1))
                .add(inter))
    if a == "collnet_chain":
        return lat.add(intra, 2 * (ppn - 1)).add(inter)
    if a == "nvls":
        return lat.add(intra).add(inter, 1 if nodes > 1 else 0)
    if a == "nvls_tree":
        return lat.add(intra).add(inter, 2 * log_nodes)
    # pat: a base, a log part across nodes and a part linear in the ranks
    return lat.add(_Lat(known=(8.0 + 2.8 * n) * 1e-6)).add(inter.scale(1 / 3.5), log_nodes)


def _p2p_candidates(collective, nbytes, ppn, nodes, rails, m, protos):
    """Ours: each rank posts one message per peer; a level's messages cost its hop, a post per
    message and their bytes at the level's bandwidth; intra- and inter-node traffic overlap,
    so the slower level sets the time. LL below 16 KiB per message, Simple above (enqueue.cc)."""
    n = ppn * nodes
    if collective == "send_recv":  # the slowest pair crosses nodes when there are several
        per, peers = nbytes, ({"inter": 1} if nodes > 1 else {"intra": 1})
    else:  # all_to_all, scatter, gather: n-1 peers of nbytes/n each (the root's, for those)
        per, peers = nbytes / n, {"intra": ppn - 1, "inter": n - ppn}
    # LL up to the threshold times the peer's channels (enqueue.cc): 2 per network peer, halved
    # while 2·N exceeds 4× the p2p channels; 2 per NVLink through NVSwitch, at most the p2p
    # channels (paths.cc ncclTopoGetNchannels; p2p channels taken as 2 × ring channels)
    p2p_channels = 2 * m.channels
    net_channels = 2
    while net_channels * n > 4 * p2p_channels and net_channels > 1:
        net_channels //= 2
    per_peer_channels = net_channels if "inter" in peers and peers["inter"] else p2p_channels
    p = "LL" if per <= P2P_LL_THRESHOLD * per_peer_channels else "Simple"
    if p not in protos:
        p = "Simple" if "Simple" in protos else next(iter(protos))
    nic_share = rails / ppn if collective == "all_to_all" else 1.0
    bws = {"intra": _Bw(m.intra_bandwidth, "intra", 1.0),
           "inter": _Bw(m.inter_bandwidth * nic_share, "inter", nic_share)}
    best = None
    for level, count in peers.items():
        if count == 0:
            continue
        bw = bws[level].scale(0.5 if p == "LL" else 1.0)
        lat = (_Lat(known=BASE_LATENCY_US["ring"][p] * 1e-6).add(_hop(m, level, "ring", p))
               .add(_Lat(coef={f"{level}_message": 1.0}), count))
        sent = count * per
        t = lat.seconds(m) + (sent / bw.value if sent else 0.0)
        if best is None or t > best[0]:
            # price() charges nbytes / bandwidth: the level's bytes at its bandwidth
            best = (t, lat, bw.scale(nbytes / sent) if sent else bw)
    return [] if best is None else [("p2p", p, best[1], best[2])]


def _link_bytes(collective: str, a: str, nbytes: float, ppn: int, nodes: int,
                rails: int) -> dict:
    """Bytes one GPU sends into the node's fabric and one NIC sends (ours; module doc)."""
    n = ppn * nodes
    across = nodes > 1
    if a == "p2p":
        if collective == "send_recv":
            return {"intra": 0.0 if across else nbytes, "inter": nbytes if across else 0.0}
        per = nbytes / n
        return {"intra": (ppn - 1) * per, "inter": ppn * (n - ppn) * per / rails}
    if a in ("ring", "pat"):
        per_rank = nbytes * _ring_steps(collective, n) / n
        if collective in ("broadcast", "reduce"):
            per_rank = nbytes
        exit_share = 1.0 / ppn if across else 0.0  # the GPU whose channel leaves the node
        return {"intra": per_rank * (1 - exit_share) if ppn > 1 else 0.0,
                "inter": per_rank / rails if across else 0.0}
    if a in ("nvls", "nvls_tree"):
        intra = nbytes * (1 + 1 / ppn)
        return {"intra": intra, "inter": 2 * nbytes / rails if across else 0.0}
    if a.startswith("collnet"):
        return {"intra": 2 * nbytes, "inter": nbytes / rails}
    # tree: a chain inside the node (up and down), a double binary tree across nodes
    return {"intra": 2 * nbytes if ppn > 1 else 0.0,
            "inter": 2 * nbytes / rails if across else 0.0}
