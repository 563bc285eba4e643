"""Machines for the cost model: which links a transfer between two ranks crosses.

A topology has ``num_links`` directed links, each with a latency ``alpha`` (seconds) and a
``bandwidth`` (bytes/s), and routes a transfer ``src -> dst`` to the links it uses. The cost
model (:mod:`ringccl.costmodel`) adds up, per step, the bytes on every link, so transfers that
share a link in one step slow each other down.

Machine assumption (as in Hockney 1994 and Thakur, Rabenseifner & Gropp 2005): every port is
full-duplex (its egress and ingress are separate links), a rank's port is shared by all its
concurrent transfers (single-port: sending two chunks at once takes twice as long), links of one
kind are homogeneous, and switches are non-blocking unless an oversubscription is given.

Two machines:

* :func:`flat` — every rank has one full-duplex port to a non-blocking switch. Links
  ``0 … N-1`` are the ports' egress, ``N … 2N-1`` their ingress. The registry's closed forms
  (``Algorithm.time``) hold exactly on this machine.
* :func:`two_level` — ``nodes`` nodes of ``local`` devices. Inside a node every device has one
  NVLink-class port (egress + ingress) to a non-blocking switch (NVSwitch). Across nodes a
  device uses its node's NIC on its rail (rail-aligned: local device i uses NIC
  ``i * nics_per_node // local``), each NIC full-duplex. With ``oversubscription > 1`` every
  node also has an uplink (egress + ingress) of ``nics_per_node * inter_bandwidth /
  oversubscription`` bytes/s that all its inter-node traffic crosses (a two-tier fat tree whose
  leaf uplinks are oversubscribed). Ranks are placed on devices explicitly: node-major by
  default (rank = node * local + local index), ``"round_robin"`` (rank r on node r % nodes), or
  any sequence of device indices.

References:
    R. Hockney, "The communication challenge for MPP: Intel Paragon and Meiko CS-2", Parallel
    Computing 20(3), 1994 (the alpha-beta model).
    Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
    IJHPCA 19(1), 2005, section 2 (cost model assumptions).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import numpy as np

from .. import units
from ..args import check_int
from ..errors import ArgumentError, ArgumentTypeError

__all__ = ["Topology", "Flat", "TwoLevel", "flat", "two_level", "LinkClass", "parse_link"]


def parse_link(value, name: str = "link") -> tuple[float, float]:
    """A link's latency and bandwidth: a pair such as ``("5us", "900GB/s")`` or ``(5e-6,
    9e11)``, or the text ``"5us,900GB/s"`` (the command line's ``--intra``/``--inter``).

    Returns:
        (alpha in seconds, bandwidth in bytes/s).
    Raises:
        ArgumentError: not two parts (the message names ``name``), a latency that is not a
            duration >= 0, or a bandwidth that is not > 0 (:mod:`ringccl.units`).
    """
    try:
        alpha, bandwidth = value.split(",") if isinstance(value, str) else value
    except (TypeError, ValueError):
        if isinstance(value, str):
            raise ArgumentError(f"{name} {value!r} must be ALPHA,BANDWIDTH: a latency >= 0 and "
                                "a bandwidth > 0, e.g. 5us,900GB/s or 2us,400Gbps") from None
        raise ArgumentError(f"{name}={value!r} must be a pair (alpha, bandwidth), e.g. "
                            "('5us', '900GB/s'), or the text '5us,900GB/s'") from None
    return units.duration(alpha), units.bandwidth(bandwidth)


class Topology:
    """A machine: directed links with alpha and bandwidth, and a route for every transfer.

    Attributes:
        world_size: number of ranks.
        num_links: number of directed links L.
        link_alpha: (L,) float64, seconds of latency paid once per step by a link in use.
        link_bandwidth: (L,) float64, bytes/s.
        link_kind: (L,) int, index into :attr:`kinds`.
        kinds: names of the link kinds ("port out", "nic in", ...).
        key: hashable description (equal keys = same machine), used to cache walks.
    """

    world_size: int
    link_alpha: np.ndarray
    link_bandwidth: np.ndarray
    link_kind: np.ndarray
    kinds: tuple[str, ...]

    @property
    def num_links(self) -> int:
        return int(self.link_alpha.shape[0])

    @property
    def key(self) -> tuple:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def uniform(self) -> bool:
        """True where the registry's closed forms hold: one homogeneous port per rank."""
        return False

    def used_links(self) -> np.ndarray:
        """Sorted ids of the links a transfer between two of this machine's ranks can cross
        (a superset of what any schedule uses): all of them unless a subclass knows better.
        The walk counts bytes only on these, so a group placed sparsely on a large machine
        costs what its own links do."""
        return np.arange(self.num_links, dtype=np.int64)

    def route(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Links used by each transfer ``src[i] -> dst[i]``.

        Args:
            src, dst: int arrays of shape (T,), ranks in [0, world_size).
        Returns:
            int64 array (T, R): the link ids each transfer crosses, padded with -1.
        """
        raise NotImplementedError  # pragma: no cover

    def link_ids(self, kind: str) -> np.ndarray:
        """Ids of the links of ``kind`` (one of :attr:`kinds`).

        Raises:
            ArgumentError: unknown kind.
        """
        if kind not in self.kinds:
            raise ArgumentError(f"kind={kind!r} is unknown; expected one of "
                                f"{', '.join(self.kinds)}")
        return np.nonzero(self.link_kind == self.kinds.index(kind))[0]

    def link_name(self, link: int) -> str:
        """Human name of link ``link``, e.g. ``"R3 port out"`` or ``"node 5 NIC 2 in"``."""
        raise NotImplementedError  # pragma: no cover

    def describe(self) -> str:
        """One line describing the machine."""
        raise NotImplementedError  # pragma: no cover

    def __eq__(self, other) -> bool:
        return isinstance(other, Topology) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.describe()}>"


class LinkClass(NamedTuple):
    """A measured kind of link, fitted by ``ringccl fit`` (:mod:`ringccl.costmodel.fit`).

    Attributes:
        name: what ``--link`` calls it (e.g. "shm").
        alpha: seconds per step (synchronisation of one step).
        bandwidth: bytes/s moved per rank and direction (1/β).
        gamma: seconds per byte reduced.
        copies: passes over the buffer a call adds whatever the algorithm (shared memory: the
            copy in and out), at ``bandwidth``; they add the same time to every algorithm, so
            they move no crossover.
        source: how it was measured (the commands and the machine).
    """

    name: str
    alpha: float
    bandwidth: float
    gamma: float
    copies: int
    source: str

    def flat(self, world_size: int) -> "Flat":
        """The flat machine of ``world_size`` ranks joined by this link class."""
        return Flat(world_size, self.alpha, self.bandwidth)

    def copy_seconds(self, nbytes: float) -> float:
        """Seconds of the per-call copies of an ``nbytes`` buffer."""
        return self.copies * float(nbytes) / self.bandwidth


class Flat(Topology):
    """Every rank one full-duplex port to a non-blocking switch (see :func:`flat`)."""

    kinds = ("port out", "port in")

    def __init__(self, world_size: int, alpha, bandwidth):
        self.world_size = check_int(world_size, "world_size", minimum=1)
        self.alpha = units.duration(alpha)
        self.bandwidth = units.bandwidth(bandwidth)

    # link arrays are built on first use: a closed-form cost at 1M ranks never needs them
    @functools.cached_property
    def link_alpha(self) -> np.ndarray:
        return np.full(2 * self.world_size, self.alpha)

    @functools.cached_property
    def link_bandwidth(self) -> np.ndarray:
        return np.full(2 * self.world_size, self.bandwidth)

    @functools.cached_property
    def link_kind(self) -> np.ndarray:
        return np.repeat(np.arange(2), self.world_size)

    @property
    def key(self) -> tuple:
        return ("flat", self.world_size, self.alpha, self.bandwidth)

    @property
    def uniform(self) -> bool:
        return True

    def route(self, src, dst):
        src = np.asarray(src, dtype=np.int64)
        return np.stack([src, self.world_size + np.asarray(dst, dtype=np.int64)], axis=1)

    def link_name(self, link: int) -> str:
        n = self.world_size
        return f"R{link % n} {self.kinds[link // n]}"

    def describe(self) -> str:
        return (f"flat: {self.world_size} ranks, one full-duplex port each, alpha "
                f"{units.format_duration(self.alpha)}, {units.format_bandwidth(self.bandwidth)}")


class TwoLevel(Topology):
    """Nodes of devices: NVLink-class inside, rail-aligned NICs across (see :func:`two_level`)."""

    kinds = ("nvlink out", "nvlink in", "nic out", "nic in", "uplink out", "uplink in")

    def __init__(self, nodes: int, local: int, intra, inter, nics_per_node: int | None = None,
                 oversubscription: float = 1.0, placement: str | Sequence[int] | None = None):
        self.nodes = check_int(nodes, "nodes", minimum=1)
        self.local = check_int(local, "local", minimum=1)
        self.intra_alpha, self.intra_bandwidth = parse_link(intra, "intra")
        self.inter_alpha, self.inter_bandwidth = parse_link(inter, "inter")
        self.nics_per_node = check_int(self.local if nics_per_node is None else nics_per_node,
                                       "nics_per_node", minimum=1)
        if self.nics_per_node > self.local:
            raise ArgumentError(f"nics_per_node={self.nics_per_node} must be <= local="
                                f"{self.local} (each device uses one NIC of its rail)")
        try:
            self.oversubscription = float(oversubscription)
        except (TypeError, ValueError):
            raise ArgumentTypeError(f"oversubscription={oversubscription!r} must be a number "
                                    ">= 1") from None
        if not self.oversubscription >= 1.0 or not np.isfinite(self.oversubscription):
            raise ArgumentError(f"oversubscription={oversubscription!r} must be a finite number "
                                ">= 1 (1 = non-blocking)")
        self.placement = self._placement(placement)
        self.world_size = int(self.placement.shape[0])

        d, k, m = self.nodes * self.local, self.nodes * self.nics_per_node, self.nodes
        uplinks = self.oversubscription > 1.0
        counts = [d, d, k, k] + ([m, m] if uplinks else [])
        self._offsets = np.concatenate([[0], np.cumsum(counts)])
        up_bw = self.nics_per_node * self.inter_bandwidth / self.oversubscription
        self.link_alpha = np.repeat([self.intra_alpha] * 2 + [self.inter_alpha] * (len(counts) - 2),
                                    counts).astype(float)
        self.link_bandwidth = np.repeat(
            [self.intra_bandwidth] * 2 + [self.inter_bandwidth] * 2 + [up_bw] * (len(counts) - 4),
            counts).astype(float)
        self.link_kind = np.repeat(np.arange(len(counts)), counts)
        device = self.placement
        self.node_of = device // self.local            #: (world_size,) node of each rank
        self.local_of = device % self.local            #: (world_size,) local index of each rank
        #: (world_size,) global NIC index of each rank's rail
        self._nic = (self.node_of * self.nics_per_node
                     + self.local_of * self.nics_per_node // self.local)

    def _placement(self, placement) -> np.ndarray:
        devices = self.nodes * self.local
        if placement is None or (isinstance(placement, str) and placement == "node_major"):
            return np.arange(devices, dtype=np.int64)
        if isinstance(placement, str):
            if placement == "round_robin":
                r = np.arange(devices, dtype=np.int64)
                return (r % self.nodes) * self.local + r // self.nodes
            raise ArgumentError(f"placement={placement!r} is unknown; expected 'node_major', "
                                "'round_robin' or a sequence of device indices")
        p = np.asarray(placement)
        if p.ndim != 1 or p.size == 0 or p.dtype.kind not in "iu":
            raise ArgumentError(f"placement must be a non-empty 1-D sequence of device indices "
                                f"(node * local + local index), got {placement!r}")
        p = p.astype(np.int64)
        if p.min() < 0 or p.max() >= devices or np.unique(p).size != p.size:
            raise ArgumentError(f"placement must map ranks to distinct devices in [0, {devices}),"
                                f" got {placement!r}")
        return p

    @property
    def key(self) -> tuple:
        return ("two_level", self.nodes, self.local, self.intra_alpha, self.intra_bandwidth,
                self.inter_alpha, self.inter_bandwidth, self.nics_per_node,
                self.oversubscription, self.placement.tobytes())

    def route(self, src, dst):
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        o = self._offsets
        same = self.node_of[src] == self.node_of[dst]
        # inside a node: the devices' NVLink ports; across: the NICs of both ends' rails
        first = np.where(same, o[0] + self.placement[src], o[2] + self._nic[src])
        second = np.where(same, o[1] + self.placement[dst], o[3] + self._nic[dst])
        cols = [first, second]
        if len(o) > 5:  # oversubscribed: inter-node traffic also crosses both nodes' uplinks
            cols += [np.where(same, -1, o[4] + self.node_of[src]),
                     np.where(same, -1, o[5] + self.node_of[dst])]
        return np.stack(cols, axis=1)

    def used_links(self) -> np.ndarray:
        """The ranks' own NVLink ports and NICs (and their nodes' uplinks): a group with one
        rank per node of a large cluster touches 2 of each node's 2 × ``local`` NIC and port
        links."""
        o = self._offsets
        parts = [o[0] + self.placement, o[1] + self.placement, o[2] + self._nic,
                 o[3] + self._nic]
        if len(o) > 5:
            parts += [o[4] + self.node_of, o[5] + self.node_of]
        return np.unique(np.concatenate(parts))

    def link_ids(self, kind: str, node: int | None = None) -> np.ndarray:
        """Ids of the links of ``kind``, all nodes' or only ``node``'s.

        Raises:
            ArgumentError: unknown kind, node out of range.
        """
        ids = super().link_ids(kind)
        if node is None:
            return ids
        if not 0 <= node < self.nodes:
            raise ArgumentError(f"node={node!r} is out of range for {self.nodes} nodes")
        per = ids.size // self.nodes  # links of a kind are numbered node by node
        return ids[node * per:(node + 1) * per]

    def link_name(self, link: int) -> str:
        kind = int(self.link_kind[link])
        i = link - int(self._offsets[kind])
        name = self.kinds[kind]
        if kind < 2:
            return f"node {i // self.local} GPU {i % self.local} {name}"
        if kind < 4:
            return f"node {i // self.nics_per_node} NIC {i % self.nics_per_node} {name[4:]}"
        return f"node {i} {name}"

    def describe(self) -> str:
        over = (f", inter-node fabric oversubscribed {self.oversubscription:g}:1"
                if self.oversubscription > 1 else "")
        return (f"two-level: {self.nodes} nodes x {self.local} devices ({self.world_size} ranks); "
                f"intra {units.format_duration(self.intra_alpha)}, "
                f"{units.format_bandwidth(self.intra_bandwidth)}; inter "
                f"{units.format_duration(self.inter_alpha)}, "
                f"{units.format_bandwidth(self.inter_bandwidth)} per NIC, "
                f"{self.nics_per_node} NICs per node (rail-aligned){over}")


def flat(world_size: int, alpha, bandwidth) -> Flat:
    """Every rank one full-duplex port to a non-blocking switch.

    Args:
        world_size: number of ranks N (>= 1).
        alpha: latency per step, seconds or a string such as ``"5us"``.
        bandwidth: per direction, bytes/s or a string such as ``"50GB/s"`` or ``"400Gbps"``.
    Raises:
        ArgumentError: world_size < 1, malformed or non-positive alpha/bandwidth.
    """
    return Flat(world_size, alpha, bandwidth)


def two_level(nodes: int, local: int, intra, inter, nics_per_node: int | None = None,
              oversubscription: float = 1.0,
              placement: str | Sequence[int] | None = None) -> TwoLevel:
    """``nodes`` nodes of ``local`` devices: NVLink-class inside a node, NICs across.

    Args:
        nodes, local: nodes and devices per node (>= 1 each).
        intra: ``(alpha, bandwidth)`` of a device's intra-node port, e.g. ``("5us", "900GB/s")``.
        inter: ``(alpha, bandwidth)`` of one NIC, e.g. ``("5us", "400Gbps")``.
        nics_per_node: NICs per node (default ``local``: one per device); local device i uses
            NIC ``i * nics_per_node // local`` (rail-aligned).
        oversubscription: >= 1; above 1 each node's inter-node traffic also crosses an uplink of
            ``nics_per_node * inter bandwidth / oversubscription`` bytes/s.
        placement: ``"node_major"`` (default), ``"round_robin"`` or a sequence mapping rank r to
            device ``placement[r]`` = node * local + local index (distinct devices); its length
            is the world size.
    Returns:
        a :class:`TwoLevel` topology with ``world_size = len(placement)``.
    Raises:
        ArgumentError: counts < 1, nics_per_node > local, oversubscription < 1, bad placement.
    """
    return TwoLevel(nodes, local, intra, inter, nics_per_node, oversubscription, placement)
