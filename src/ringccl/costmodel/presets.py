"""Worked examples of the α-β model, recomputed through ringccl's public API
(``ringccl model --preset worked-examples``; docs/cost-model.md, "Worked examples").

* Ring all_reduce (Patarasuk & Yuan, JPDC 69(2), 2009): per-rank bytes for N = 8, 64, 256 next
  to the naive full mesh ((N-1)K) and the 2K lower bound; and the latency table: ring
  all_reduce with alpha = 5 us, 300 GB/s, float32, for 8 ranks / 2^20 elements, 1024 ranks /
  2^20 elements, 1024 ranks / 2^28 elements.
* All_reduce of 100 MiB at 50 GB/s and 5 us for P = 4 ... 1024 under the closed forms often
  quoted for master, ring and tree (the α-β model of Hockney 1994) — and what ringccl's
  walked schedules give for every such algorithm registered.
* Flat ring versus hierarchical all_reduce (Jia et al., arXiv:1807.11205, 2018) of a 1 GiB
  gradient on 128 nodes x 8 GPUs, NVLink 900 GB/s, InfiniBand 50 GB/s per NIC.

And the measured link classes (:data:`LINK_CLASSES`, ``ringccl model/tune --link NAME``):
:data:`SHARED_MEMORY`, ringccl's shared-memory transport on this development machine.

Every function returns plain dicts and lists (JSON-ready); nothing here prints.
"""

from __future__ import annotations

import math

from ..algorithms import REGISTRY
from ..errors import ArgumentError
from .fit import SHM_COPIES
from .model import cost
from .topology import LinkClass, two_level

__all__ = ["closed_form_all_reduce_seconds", "per_rank_bytes", "ring_latency",
           "closed_forms_vs_walked", "flat_vs_hierarchical", "worked_examples",
           "CLOSED_FORM_ALGORITHMS", "WALKED_ALGORITHMS",
           "SHARED_MEMORY", "LINK_CLASSES", "link_class"]

#: the algorithms with a textbook all_reduce closed form (:func:`closed_form_all_reduce_seconds`)
CLOSED_FORM_ALGORITHMS = ("master", "ring", "tree")
#: the registered all_reduce algorithms shown next to them, when they exist
WALKED_ALGORITHMS = ("master", "ring", "tree", "double_binary_tree")


def closed_form_all_reduce_seconds(algorithm: str, world_size: int, nbytes: float,
                                   alpha: float, bandwidth: float) -> float:
    """The all_reduce closed forms often quoted for three algorithms, in seconds (α-β model,
    Hockney 1994; ring: Patarasuk & Yuan 2009).

    master: 2(P-1)(alpha + M/B)  — rank 0 receives, then sends, P-1 whole buffers one by one;
    ring:   2(P-1) alpha + 2 (P-1)/P M/B;
    tree:   2 log2(P) alpha + 2 M/B  — a binary tree whose reduce and broadcast each move the
            buffer once at full bandwidth (that is, pipelined, with the pipeline's own start-up
            steps left out).
    """
    p, beta = world_size, 1.0 / bandwidth
    if algorithm == "master":
        return 2 * (p - 1) * (alpha + beta * nbytes)
    if algorithm == "ring":
        return 2 * (p - 1) * alpha + 2 * ((p - 1) / p) * (beta * nbytes)
    if algorithm == "tree":
        return 2 * math.log2(p) * alpha + 2 * (beta * nbytes)
    raise ValueError(f"algorithm={algorithm!r}: closed forms exist for "
                     f"{', '.join(CLOSED_FORM_ALGORITHMS)}")


def per_rank_bytes(world_sizes=(8, 64, 256)) -> list[dict]:
    """Ring all_reduce bytes sent per rank in units of K (Patarasuk & Yuan 2009: 2(N-1)/N K).

    Measured on the walked schedule's busiest port (K = one rank's buffer); ``vs_direct`` divides
    by the naive full mesh's (N-1)K, ``vs_lower_bound`` by 2K.
    """
    rows = []
    for n in world_sizes:
        k = float(n * 4096)  # any K works (fluid chunks); this one divides evenly
        r = cost("all_reduce", "ring", n, k, alpha=5e-6, bandwidth=300e9, method="walk")
        sent = r.max_link_bytes["port out"] / k
        rows.append({"world_size": n, "bytes_per_rank_K": sent, "vs_direct": sent / (n - 1),
                     "vs_lower_bound": sent / 2})
    return rows


def ring_latency(alpha: float = 5e-6, bandwidth: float = 300e9) -> list[dict]:
    """Ring all_reduce of float32 buffers at alpha, bandwidth: latency and bandwidth terms."""
    rows = []
    for n, count in ((8, 2**20), (1024, 2**20), (1024, 2**28)):
        r = cost("all_reduce", "ring", n, 4 * count, alpha=alpha, bandwidth=bandwidth)
        rows.append({"world_size": n, "count": count, "nbytes": 4 * count,
                     "seconds": r.seconds, "latency_seconds": r.latency_seconds,
                     "bandwidth_seconds": r.bandwidth_seconds,
                     "latency_fraction": r.latency_seconds / r.seconds, "method": r.method})
    return rows


def closed_forms_vs_walked(world_sizes=(4, 8, 16, 64, 256, 1024), nbytes: float = 100 * 2**20,
                alpha: float = 5e-6, bandwidth: float = 50e9) -> list[dict]:
    """The closed forms against ringccl's walked schedules, one row per P.

    Each row has ``closed_form`` {master, ring, tree: seconds} and ``ringccl`` {algorithm:
    seconds or None when that all_reduce algorithm is not registered}.
    """
    rows = []
    for p in world_sizes:
        closed = {a: closed_form_all_reduce_seconds(a, p, nbytes, alpha, bandwidth)
                  for a in CLOSED_FORM_ALGORITHMS}
        walked = {a: (cost("all_reduce", a, p, nbytes, alpha=alpha, bandwidth=bandwidth).seconds
                      if ("all_reduce", a) in REGISTRY else None) for a in WALKED_ALGORITHMS}
        rows.append({"world_size": p, "closed_form": closed, "ringccl": walked})
    return rows


def flat_vs_hierarchical(nodes: int = 128, local: int = 8, nbytes: float = 2**30,
                          alpha: float = 5e-6, nvlink: float = 900e9,
                          nic: float = 50e9) -> dict:
    """Flat ring versus hierarchical all_reduce on ``nodes`` x ``local`` GPUs (Jia et al. 2018).

    * flat ring: ringccl's ring schedule over all nodes*local ranks, placed node-major, walked on
      :func:`ringccl.costmodel.topology.two_level` (each node's ring hop leaves through one NIC);
    * hierarchical (formula): ring reduce_scatter inside each node over NVLink, ring all_reduce of
      the nbytes/local shard among the ``nodes`` same-local-index GPUs (one rail, one NIC each;
      the ``local`` rails run at once and share nothing), ring all_gather inside each node —
      each phase costed by ringccl on its own flat machine and added up:

        T = 2(L-1) alpha + 2 (L-1)/L M/B_nvlink + 2(n-1) alpha + 2 (n-1)/n (M/L)/B_nic;

    * hierarchical (walked): the registered ``hierarchical`` all_reduce on the same two-level
      machine, when it exists (None otherwise).

    Inter-node bytes are those leaving one NIC (the busiest) over the whole call.
    """
    topo = two_level(nodes, local, intra=(alpha, nvlink), inter=(alpha, nic))
    flat_ring = cost("all_reduce", "ring", None, nbytes, topology=topo)
    node0 = topo.link_ids("nic out", node=0)
    flat_nics_used = int((flat_ring.link_bytes[node0] > 0).sum())

    rs = cost("reduce_scatter", "ring", local, nbytes, alpha=alpha, bandwidth=nvlink)
    ar = cost("all_reduce", "ring", nodes, nbytes / local, alpha=alpha, bandwidth=nic)
    ag = cost("all_gather", "ring", local, nbytes, alpha=alpha, bandwidth=nvlink)
    formula = rs.seconds + ar.seconds + ag.seconds
    out = {
        "nodes": nodes, "local": local, "world_size": nodes * local, "nbytes": nbytes,
        "alpha": alpha, "nvlink_bandwidth": nvlink, "nic_bandwidth": nic,
        "flat_ring": {"seconds": flat_ring.seconds,
                      "latency_seconds": flat_ring.latency_seconds,
                      "bandwidth_seconds": flat_ring.bandwidth_seconds,
                      "nic_bytes": flat_ring.max_link_bytes["nic out"],
                      "nics_used_per_node": flat_nics_used},
        "hierarchical_formula": {"seconds": formula,
                                 "phases": {"intra-node reduce-scatter": rs.seconds,
                                            "inter-node all-reduce": ar.seconds,
                                            "intra-node all-gather": ag.seconds},
                                 "nic_bytes": ar.max_link_bytes["port out"],
                                 "nics_used_per_node": local},
        "speedup_formula": flat_ring.seconds / formula,
        "nic_bytes_ratio": flat_ring.max_link_bytes["nic out"] / ar.max_link_bytes["port out"],
        "hierarchical_walked": None,
    }
    if ("all_reduce", "hierarchical") in REGISTRY:
        h = cost("all_reduce", "hierarchical", None, nbytes, topology=topo)
        out["hierarchical_walked"] = {
            "seconds": h.seconds, "nic_bytes": h.max_link_bytes.get("nic out", 0.0),
            "nics_used_per_node": int((h.link_bytes[node0] > 0).sum()),
            "speedup": flat_ring.seconds / h.seconds}
    return out


def worked_examples() -> dict:
    """All four examples: per-rank bytes, ring latency, closed forms, flat vs hierarchical."""
    return {"per_rank_bytes": per_rank_bytes(), "ring_latency": ring_latency(),
            "closed_forms": closed_forms_vs_walked(), "hierarchical": flat_vs_hierarchical()}


#: the fitted values behind :data:`SHARED_MEMORY` (seconds per step, per byte, per byte
#: reduced, per call), from the run its comment names
SHM_FIT = {"alpha": 0.0, "beta": 0.0941e-9, "gamma": 0.0945e-9, "epsilon": 86.9e-6}

#: ringccl's shared-memory transport (``transport="shm"``, one host; docs/shm.md), as
#: ``ringccl fit`` fitted it from this transport's own benchmark rows. Measured with::
#:
#:     ringccl bench all_reduce --backend mpi --nproc 2 -a direct,two_shot,builtin \
#:         -b 4KiB -e 64MiB -f 2 --iters 30 --placement in-place --json > shm2.json
#:     ringccl fit shm2.json --train sizes
#:
#: (the rows say ``"transport": "shm"``; ``ringccl fit`` groups them as ``mpi/shm`` and adds
#: the copy in and out and a per-call ε to those rows; the local-reduce rows pin γ). On the
#: 2-core development machine, quiet (load average 2.7 during the run, the quiet-machine
#: figures of docs/shm.md). Fitted (45 rows, R² 0.98 on log times): α held at 0 (its
#: free estimate was negative: a step's synchronisation is lost in the call's fixed ε =
#: 87 µs), β = 0.094 ns/B (10.6 GB/s), γ = 0.095 ns/B (10.6 GB/s); held out (fit on every
#: other size of both sweeps, predict the rest): median |error| 33% from 64 KiB on (one-shot
#: ``direct`` is under-predicted by 27-63% from 512 KiB, where every rank reads every peer's
#: whole buffer out of cache; two_shot is over-predicted by 19-31%). With α = 0 the model puts
#: the one-shot/two-shot crossover at the smallest size (two-shot reduces (N-1)/N of the bytes
#: one-shot does); measured (``ringccl.costmodel.choice.TWO_SHOT_BYTES``) it lies
#: between 64 and 128 KiB for 2 processes. ``alpha`` is the per-step synchronisation,
#: ``bandwidth`` 1/β (bytes read from a peer's slot and copied or reduced per second),
#: ``gamma`` the reduction; the per-call ε is the same for every algorithm and left out (it
#: moves no crossover).
SHARED_MEMORY = LinkClass(
    name="shm", alpha=SHM_FIT["alpha"], bandwidth=1.0 / SHM_FIT["beta"], gamma=SHM_FIT["gamma"],
    copies=SHM_COPIES,
    source="ringccl bench all_reduce --backend mpi --nproc 2 -a direct,two_shot,builtin -b 4KiB "
           "-e 64MiB -f 2 --iters 30 --placement in-place --json; ringccl fit --train sizes "
           "(2-core machine, load average 2.7)")

#: the link classes ``ringccl model/tune --link`` knows, by name
LINK_CLASSES = {SHARED_MEMORY.name: SHARED_MEMORY}


def link_class(name: str) -> LinkClass:
    """The measured :class:`LinkClass` called ``name``.

    Raises:
        ArgumentError: an unknown name (the message lists the known ones).
    """
    try:
        return LINK_CLASSES[name]
    except KeyError:
        raise ArgumentError(f"link={name!r} is not a measured link class; known: "
                            f"{', '.join(sorted(LINK_CLASSES))}") from None
