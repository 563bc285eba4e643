"""The machine NCCL's tuning sees (:class:`NcclMachine`), its presets and its parameters.

:mod:`.nccl` prices collectives on it; :mod:`.nccl_fit` fits its parameters to nccl-tests logs.
The figures are NCCL's (v2.27.7-1, ``src/graph/tuning.cc``, ``topo.h``, ``search.cc``: see
:mod:`.nccl_tables`) and the datasheets' link counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from .. import units
from ..args import check_int
from ..errors import ArgumentError, ArgumentTypeError
from .nccl_tables import HW_LATENCY_US, NCCL_MACHINES, NET_OVERHEAD_US

__all__ = ["NcclMachine", "nccl_machine", "machine_from_json", "PARAMETERS", "parameter",
           "REFERENCE_HOP_US"]

#: the hop each level's alpha stands for: a ring Simple step (hwLat[*][Ring][Simple])
REFERENCE_HOP_US = {"nvlink": HW_LATENCY_US["nvlink"]["ring"]["Simple"],
              "pci": HW_LATENCY_US["pci"]["ring"]["Simple"],
              "net": HW_LATENCY_US["net"]["ring"]["Simple"]}


@dataclass(frozen=True)
class NcclMachine:
    """What NCCL's tuning needs to know about a machine (SI units: bytes/s, seconds).

    Attributes:
        gpu: "volta", "ampere", "hopper" or "blackwell" (selects NCCL's per-channel caps).
        gpus_per_node: GPUs in one node.
        intra_link: "nvlink" or "pci": the hop latencies inside a node.
        intra_bandwidth: one GPU's bandwidth into the node's fabric as NCCL's graph counts it
            (NVLink links × per-link bandwidth, ``topo.h``), per direction.
        intra_alpha: seconds of one ring Simple hop inside a node (NCCL: 3.4 µs NVLink, 5.7 µs
            PCI); NCCL's other hop latencies of that link scale with it.
        nics_per_node: NICs (rails) per node.
        inter_bandwidth: one NIC's bandwidth as a channel carries it (``search.cc`` speed
            steps: 48 GB/s for 400 Gb/s), per direction.
        inter_alpha: seconds of one ring Simple hop across nodes (NCCL: 14 µs); the network's
            other hop latencies scale with it.
        channels: ring/tree channels (only NCCL's per-channel caps read it).
        nvls: NVLink SHARP (NVSwitch 3rd generation and Hopper or later).
        collnet: in-network reduction across nodes (SHARP on the fabric).
        cpu: "intel" or "amd": NCCL's network post cost (1 or 2 µs) and LL cap across nodes.
        ll128: LL128 enabled (NCCL enables it by default on NVLink machines).
        intra_message, inter_message: seconds to post one point-to-point message (each peer of
            an all_to_all, scatter or gather): across nodes NCCL's network post cost
            (tuning.cc getNetOverhead: 1 µs, 2 µs on AMD CPUs; its ring steps keep that share
            of ``inter_alpha``); inside a node ours, NCCL's cheapest NVLink hop (LL, 0.6 µs).
            Messages are posted one after another.
        intra_epsilon, inter_epsilon: seconds per call NCCL's tuning leaves out (the kernel
            launch and the host's progress between back-to-back calls) for a group inside one
            node / across nodes; 0 unless fitted to measured times (``ringccl fit``).
        name, source: what it is and where its figures come from.
    Raises:
        ArgumentError: an unknown kind, a count < 1, a rate or time that is not > 0, a flag
            (nvls, collnet, ll128) that is not a bool.
    """

    gpu: str = "hopper"
    gpus_per_node: int = 8
    intra_link: str = "nvlink"
    intra_bandwidth: float | str = 370.8e9
    intra_alpha: float | str | None = None
    nics_per_node: int = 8
    inter_bandwidth: float | str = 48e9
    inter_alpha: float | str | None = None
    channels: int = 16
    nvls: bool = False
    collnet: bool = False
    cpu: str = "intel"
    ll128: bool | None = None
    intra_message: float | str | None = None
    inter_message: float | str | None = None
    intra_epsilon: float | str = 0.0
    inter_epsilon: float | str = 0.0
    name: str = "custom"
    source: str = ""

    def __post_init__(self):
        def set_(k, v):
            object.__setattr__(self, k, v)
        for attr, allowed in (("gpu", ("volta", "ampere", "hopper", "blackwell")),
                              ("intra_link", ("nvlink", "pci")), ("cpu", ("intel", "amd"))):
            if getattr(self, attr) not in allowed:
                raise ArgumentError(f"{attr}={getattr(self, attr)!r} is unknown; expected one "
                                    f"of {', '.join(allowed)}")
        for attr in ("gpus_per_node", "nics_per_node", "channels"):
            check_int(getattr(self, attr), attr, minimum=1)
        for attr in ("nvls", "collnet", "ll128"):  # "yes" or 1 would read as true
            value = getattr(self, attr)
            if not isinstance(value, bool) and not (attr == "ll128" and value is None):
                raise ArgumentError(f"{attr}={value!r} must be true or false")
        for attr in ("intra_bandwidth", "inter_bandwidth"):
            set_(attr, _positive(_parsed(units.bandwidth, getattr(self, attr), attr), attr))
        set_("intra_alpha", _alpha(self.intra_alpha, "intra_alpha", REFERENCE_HOP_US[self.intra_link]))
        set_("inter_alpha", _alpha(self.inter_alpha, "inter_alpha", REFERENCE_HOP_US["net"]))
        if self.ll128 is None:
            set_("ll128", self.intra_link == "nvlink")
        set_("intra_message", _alpha(self.intra_message, "intra_message",
                                     HW_LATENCY_US[self.intra_link]["ring"]["LL"]))
        set_("inter_message", _alpha(self.inter_message, "inter_message",
                                     NET_OVERHEAD_US[self.cpu]))
        for attr in ("intra_epsilon", "inter_epsilon"):
            set_(attr, _parsed(units.duration, getattr(self, attr), attr))
            if not getattr(self, attr) >= 0:
                raise ArgumentError(f"{attr}={getattr(self, attr)!r} must be a duration >= 0")

    def replace(self, **changes) -> "NcclMachine":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def describe(self) -> str:
        extra = "".join(f", {k}" for k in ("nvls", "collnet") if getattr(self, k))
        return (f"{self.name}: {self.gpu}, {self.gpus_per_node} GPUs/node, {self.intra_link} "
                f"{units.format_bandwidth(self.intra_bandwidth)} per GPU "
                f"(hop {units.format_duration(self.intra_alpha)}), {self.nics_per_node} NICs x "
                f"{units.format_bandwidth(self.inter_bandwidth)} "
                f"(hop {units.format_duration(self.inter_alpha)}), {self.channels} channels"
                f"{extra}")


def nccl_machine(name: str, **changes) -> NcclMachine:
    """The preset ``name`` (:data:`~.nccl_tables.NCCL_MACHINES`: dgx-a100, dgx-h100, h800,
    dgx-b200) with ``changes`` (None values ignored).

    Raises:
        ArgumentError: unknown preset (the message lists them), bad changes.
    """
    try:
        values = dict(NCCL_MACHINES[str(name).lower()])
    except KeyError:
        raise ArgumentError(f"machine={name!r} is not a preset; expected one of "
                            f"{', '.join(NCCL_MACHINES)}") from None
    values.update({k: v for k, v in changes.items() if v is not None})
    return NcclMachine(**values)


#: fields a profile may leave out: they describe, they do not price
_DESCRIPTIVE = ("name", "source")


def machine_from_json(machine, where: str) -> NcclMachine:
    """The :class:`NcclMachine` of a profile's ``machine`` object (every field but name and
    source required, as :meth:`NcclMachine.to_dict` writes them); ``where`` names the file in
    messages ("profile='net.json'").

    Raises:
        ArgumentError: not an object, an unknown or missing field, a bad value (the message
            names ``where`` and the field: ``profile='net.json': machine.channels=0 must be an
            integer >= 1``).
    """
    known = [f.name for f in fields(NcclMachine)]
    if not isinstance(machine, dict):
        raise ArgumentError(f"{where}: machine={machine!r} is not an object of NcclMachine "
                            f"fields ({', '.join(known)})")
    unknown = sorted(set(machine) - set(known))
    missing = [k for k in known if k not in machine and k not in _DESCRIPTIVE]
    if unknown or missing:
        why = "; ".join(part for part in (
            unknown and f"unknown field(s) {', '.join(map(str, unknown))}",
            missing and f"missing {', '.join(missing)}") if part)
        raise ArgumentError(f"{where}: the machine does not read as NcclMachine fields ({why}; "
                            "write it again with `ringccl fit --json LOGS`)")
    try:
        return NcclMachine(**machine)
    except (ArgumentError, ArgumentTypeError) as exc:  # its messages start with the field
        raise ArgumentError(f"{where}: machine.{exc}") from None


def _positive(value: float, what: str) -> float:
    if not value > 0 or not math.isfinite(value):
        raise ArgumentError(f"{what}={value!r} must be a finite rate > 0")
    return float(value)


def _parsed(parse, value, what: str) -> float:
    """``parse(value)``, its error naming the field."""
    try:
        return parse(value)
    except ArgumentError as exc:
        raise ArgumentError(f"{what}: {exc}") from None


def _alpha(value, what: str, reference_us: float) -> float:
    if value is None:
        return reference_us * 1e-6
    seconds = _parsed(units.duration, value, what)
    if not seconds > 0:
        raise ArgumentError(f"{what}={value!r} must be a duration > 0 such as '3.4us'")
    return seconds


#: the machine's parameters a time is linear in (a "beta" is 1 / that level's bandwidth)
PARAMETERS = ("intra_alpha", "inter_alpha", "intra_message", "inter_message", "intra_beta",
              "inter_beta", "intra_epsilon", "inter_epsilon")


def parameter(m: NcclMachine, name: str) -> float:
    """The value of one of :data:`PARAMETERS` on ``m``."""
    if name.endswith("_beta"):
        return 1.0 / getattr(m, name[:-5] + "_bandwidth")
    return getattr(m, name)
