"""The machine a step runs on: nodes of GPUs, their links, their FLOP/s and memory.

Every rate is given in human units and parsed by :mod:`ringccl.units`: ``"400Gbps"`` is a NIC's
rate in bits, 50 GB/s in bytes (a factor of 8 apart). A bandwidth is per
direction of one GPU's port (NVLink) or of one NIC (the cost model's two-level machine,
:func:`ringccl.costmodel.topology.two_level`).

Each cluster names its GPU (:mod:`ringccl.planner.gpus`: SMs, BF16 and FP8 peaks, HBM bandwidth
and memory, the fitted GEMM and memory efficiencies); ``peak_flops``, ``fp8_peak_flops``,
``hbm_bandwidth``, ``gpu_memory`` and ``compute_efficiency`` override the GPU's figures.

Presets (per-direction bandwidths; α are assumptions of this module, not datasheet figures:
2 µs inside a node, 5 µs across, the order of NCCL's LL/Simple protocol latencies):

* ``dgx-a100``: 8 × A100-SXM4-80GB, NVLink 3 600 GB/s bidirectional = 300 GB/s per direction,
  8 × 200 Gb/s HDR InfiniBand for compute (NVIDIA DGX A100 System Architecture white paper,
  2020).
* ``dgx-h100``: 8 × H100-SXM5-80GB, NVLink 4 900 GB/s bidirectional = 450 GB/s per direction,
  8 × 400 Gb/s ConnectX-7 (NVIDIA DGX H100 datasheet).
* ``dgx-h200``: 8 × H200-SXM-141GB, the DGX H100's links (NVIDIA DGX H200 datasheet: NVLink 4,
  8 × 400 Gb/s ConnectX-7).
* ``dgx-b200``: 8 × B200, NVLink 5 1.8 TB/s bidirectional = 900 GB/s per direction, 8 × 400 Gb/s
  ConnectX-7 (NVIDIA DGX B200 datasheet).
* ``h800``: DeepSeek-V3's cluster, 8 × H800 per node, NVLink 160 GB/s and InfiniBand 50 GB/s
  per GPU as achieved (DeepSeek-V3 Technical Report, arXiv:2412.19437, §3.2.2).
* ``two-level-128x8``: an illustrative two-level machine in round figures (no one product's
  datasheet): 128 nodes × 8 A100-class GPUs, NVLink 900 GB/s, InfiniBand 50 GB/s per GPU
  (400 Gb/s ÷ 8): the machine on which docs/cost-model.md compares a flat ring with the
  hierarchical all-reduce.

A fitted profile (``ringccl fit --json`` output) can replace the α, β (and γ) of one level:
:func:`load_profile`.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from .. import units
from ..args import check_int
from ..costmodel.compute_profile import PROFILE_FORMAT as COMPUTE_FORMAT
from ..costmodel.compute_profile import load_compute_profile
from ..costmodel.nccl_fit import PROFILE_FORMAT as NETWORK_FORMAT
from ..costmodel.nccl_fit import load_network_profile, network_profile_levels, read_fitted_json
from ..errors import ArgumentError, ArgumentTypeError
from .gpus import GPU, resolve_gpu

__all__ = ["COLLECTIVE_MODELS", "MAX_GPUS", "PROFILE_FIELDS", "PROFILE_LEVELS", "Cluster",
           "Straggler", "CLUSTER_PRESETS", "cluster_preset", "load_profile", "profile_kind",
           "profile_links", "resolve_cluster", "check_cluster_field", "check_profile_field"]


#: how the planner prices a collective (ringccl.planner.costing.PRICERS): as NCCL runs it, or
#: ringccl's own schedules (the what-if)
COLLECTIVE_MODELS = ("nccl", "ringccl")

#: the most GPUs a cluster (and so a plan) may have: 2^20 = 1,048,576, several times the largest
#: training clusters built; a plan of one layout on that many takes about a second
MAX_GPUS = 2 ** 20


#: what each cluster field (and a cluster table's preset / profile keys) takes, in words
_RATE = "a finite rate > 0 such as '450GB/s' or '400Gbps', or bytes/s"
_CLUSTER_KINDS = {
    "nodes": "an integer >= 1", "gpus_per_node": "an integer >= 1",
    "nics_per_node": "an integer >= 1", "intra_bandwidth": _RATE, "inter_bandwidth": _RATE,
    "hbm_bandwidth": _RATE, "intra_alpha": "a finite duration >= 0 such as '2us', or seconds",
    "inter_alpha": "a finite duration >= 0 such as '5us', or seconds",
    "peak_flops": "finite FLOP/s > 0 such as 989e12 or '989TFLOPS'",
    "fp8_peak_flops": "finite FLOP/s > 0 such as 1979e12 or '1979TFLOPS'",
    "gpu_memory": "a finite size > 0 such as '80GB', or bytes",
    "gamma": "finite seconds per byte >= 0 or a rate such as '100GB/s'",
    "compute_efficiency": "a number in (0, 1]", "memory_efficiency": "a number in (0, 1]",
    "oversubscription": "a finite number >= 1", "gpu": "a GPU preset name (a string)",
    "collectives": "one of " + ", ".join(COLLECTIVE_MODELS), "name": "a string",
    "source": "a string", "preset": "a preset name (a string)",
    "network_profile": "a path (a string)", "compute_profile": "a path (a string)",
    "profile": "a path or a list of paths", "profile_level": "'inter' or 'intra'"}
_TEXTS = ("name", "source", "preset", "profile_level", "gpu", "collectives", "network_profile",
          "compute_profile")
_COUNTS = ("nodes", "gpus_per_node", "nics_per_node")
#: the levels a profile's α-β fit may be of
PROFILE_LEVELS = ("inter", "intra")


def _flops_text(text: str) -> float:
    return float(text.upper().replace("TFLOPS", "e12").replace("TFLOP/S", "e12"))


#: how a numeric field's text reads (a number is SI already)
_READ = {"intra_bandwidth": units.bandwidth, "inter_bandwidth": units.bandwidth,
         "hbm_bandwidth": units.bandwidth, "intra_alpha": units.duration,
         "inter_alpha": units.duration, "gpu_memory": units.size, "peak_flops": _flops_text,
         "fp8_peak_flops": _flops_text, "gamma": lambda text: 1.0 / units.bandwidth(text)}
#: the range of each numeric field: (least, whether the least itself is allowed, most); the
#: others are > 0
_RANGE = {"intra_alpha": (0, True, math.inf), "inter_alpha": (0, True, math.inf),
          "gamma": (0, True, math.inf), "oversubscription": (1, True, math.inf),
          "compute_efficiency": (0, False, 1), "memory_efficiency": (0, False, 1)}
#: what a unit parser's refusal adds to the field's own words: a malformed or out-of-range
#: value says nothing more; an ambiguous unit, an unknown prefix, a missing unit do
_SAYS_NOTHING_MORE = re.compile(r"is not a |must be (> 0|a finite)|is negative")


def _figure(name: str, value, show=repr) -> float:
    """The numeric cluster field ``name`` in SI units: text read as the field reads it
    (``"400Gbps"``, ``"5us"``, ``"80GB"``, ``"989TFLOPS"``), a number as it is.

    Raises:
        ArgumentTypeError: neither a number nor (where the field reads text) a string.
        ArgumentError: text that does not read, or a value that is not finite or is out of the
            field's range, naming the field, the value as ``show`` renders it and what is
            allowed (and what the unit parser found, where it says more: "ambiguous").
    """
    allowed = _CLUSTER_KINDS[name]

    def refuse(why: str = "") -> ArgumentError:
        return ArgumentError(f"{name}={show(value)} must be {allowed}{why}")
    if isinstance(value, str) and name in _READ:
        if value.strip().startswith("-"):
            raise refuse(" (it is negative)")
        try:
            number = _READ[name](value)
        except (ArgumentError, ValueError) as exc:
            text = str(exc)
            more = isinstance(exc, ArgumentError) and not _SAYS_NOTHING_MORE.search(text)
            raise refuse(f" ({text})" if more else "") from None
    elif isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        number = value
    else:
        kind = "null" if value is None else type(value).__name__
        raise ArgumentTypeError(f"{name}={show(value)} must be {allowed}, got {kind}")
    least, inclusive, most = _RANGE.get(name, (0, False, math.inf))
    try:
        number = float(number)
    except OverflowError:   # an int beyond any float
        raise refuse() from None
    if not (math.isfinite(number) and (number >= least if inclusive else number > least)
            and number <= most):
        raise refuse()
    return number


def check_cluster_field(name: str, value, show=repr) -> None:
    """Refuse a cluster field's null, wrong type, text that does not read or value out of its
    range, naming the field and the value as ``show`` renders it (``repr``, or a ``--config``
    file's syntax) and what the field takes: the checks :class:`Cluster` makes of one field,
    made before a cluster is built. A count is at most :data:`MAX_GPUS`.

    Raises:
        ArgumentTypeError: null, a bool, or a type the field does not take.
        ArgumentError: text that does not read, a number not finite or out of the field's
            range, a name that is not one of the field's.
    """
    allowed = _CLUSTER_KINDS.get(name)
    if allowed is None:
        return
    kind = "null" if value is None else type(value).__name__
    if name in _TEXTS:
        ok = isinstance(value, str)
    elif name == "profile":
        ok = isinstance(value, str) or (isinstance(value, list)
                                        and all(isinstance(v, str) for v in value))
    elif name in _COUNTS:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        _figure(name, value, show)
        return
    if not ok:
        raise ArgumentTypeError(f"{name}={show(value)} must be {allowed}, got {kind}")
    if name in _COUNTS and not 1 <= value <= MAX_GPUS:
        raise ArgumentError(f"{name}={show(value)} must be "
                            + (f"an integer in [1, {MAX_GPUS}]" if value > 1 else allowed))
    if (name == "collectives" and value not in COLLECTIVE_MODELS
            or name == "profile_level" and value not in PROFILE_LEVELS):
        raise ArgumentError(f"{name}={show(value)} must be {allowed}")
    if name == "preset" and value.lower() not in CLUSTER_PRESETS:
        raise ArgumentError(f"{name}={show(value)} is not a preset; expected one of "
                            f"{', '.join(CLUSTER_PRESETS)}")


@dataclass(frozen=True)
class Cluster:
    """Nodes of GPUs.

    Attributes (SI after parsing: bytes/s, seconds, FLOP/s, bytes):
        nodes, gpus_per_node: the machine's shape.
        intra_bandwidth, intra_alpha: a GPU's NVLink-class port, per direction ("450GB/s").
        inter_bandwidth, inter_alpha: one NIC, per direction ("400Gbps" = 50 GB/s).
        nics_per_node: NICs per node, rail-aligned (default one per GPU).
        gpu: the GPU preset (:data:`ringccl.planner.gpus.GPU_PRESETS`; default H100 SXM).
        peak_flops: the GPU's dense BF16 peak (default the preset's; "989e12" or 989e12).
        fp8_peak_flops: its dense FP8 peak (default the preset's, scaled with peak_flops).
        compute_efficiency: the fraction of the peak a large GEMM sustains, (0, 1] (default
            the preset's fitted value); each GEMM's own efficiency follows from its shape
            (:mod:`ringccl.planner.kernels`).
        memory_efficiency: the fraction of HBM bandwidth a streaming kernel sustains, (0, 1]
            (default the preset's fitted value).
        hbm_bandwidth: bytes/s of the GPU's memory (default the preset's).
        gpu_memory: bytes per GPU ("80GB"; default the preset's).
        gamma: seconds per byte reduced (or a rate such as "500GB/s"); 0 ignores reductions.
        oversubscription: of the inter-node fabric (1 = non-blocking).
        collectives: how collectives are priced (:data:`COLLECTIVE_MODELS`): "nccl" (as NCCL
            runs them) or "ringccl" (the tuner's pick among ringccl's own schedules).
        network_profile: a network profile (``ringccl fit`` on nccl-tests logs): the machine
            NCCL's pricing runs on.
        compute_profile: a compute profile (``ringccl calibrate``): GEMM, attention and copy
            timings replacing the GPU preset's model.
        name, source: what it is and where its figures come from.
    Raises:
        ArgumentError: a count < 1, more than :data:`MAX_GPUS` GPUs, a rate, time, size or
            FLOP/s that does not parse, is not finite or is out of its range (each field's range
            is :func:`check_cluster_field`'s), efficiency outside (0, 1].
    """

    nodes: int = 1
    gpus_per_node: int = 8
    intra_bandwidth: float | str = "450GB/s"
    inter_bandwidth: float | str = "400Gbps"
    intra_alpha: float | str = "2us"
    inter_alpha: float | str = "5us"
    nics_per_node: int | None = None
    gpu: str = "h100-sxm5-80gb"
    peak_flops: float | str | None = None
    fp8_peak_flops: float | str | None = None
    compute_efficiency: float | None = None
    memory_efficiency: float | None = None
    hbm_bandwidth: float | str | None = None
    gpu_memory: float | str | None = None
    gamma: float | str = 0.0
    oversubscription: float = 1.0
    collectives: str = "nccl"
    network_profile: str | None = None
    compute_profile: str | None = None
    name: str = "custom"
    source: str = ""

    def __post_init__(self):
        check_int(self.nodes, "nodes", minimum=1)
        check_int(self.gpus_per_node, "gpus_per_node", minimum=1)
        if self.nodes * self.gpus_per_node > MAX_GPUS:
            raise ArgumentError(f"nodes={self.nodes} x gpus_per_node={self.gpus_per_node} = "
                                f"{self.nodes * self.gpus_per_node:,} GPUs, more than the "
                                f"{MAX_GPUS:,} a plan takes")
        nics = self.gpus_per_node if self.nics_per_node is None else self.nics_per_node
        check_int(nics, "nics_per_node", minimum=1)
        if nics > self.gpus_per_node:
            raise ArgumentError(f"nics_per_node={nics} must be <= gpus_per_node="
                                f"{self.gpus_per_node} (rail-aligned NICs)")
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 - frozen dataclass
        set_("nics_per_node", nics)
        for f in ("intra_bandwidth", "inter_bandwidth", "intra_alpha", "inter_alpha", "gamma",
                  "oversubscription"):
            set_(f, _figure(f, getattr(self, f)))
        base = resolve_gpu(self.gpu)
        given = lambda f, default: (default if getattr(self, f) is None  # noqa: E731
                                    else _figure(f, getattr(self, f)))
        peak = given("peak_flops", base.bf16_flops)
        fp8 = (base.fp8_flops * peak / base.bf16_flops if self.fp8_peak_flops is None
               else 0.0 if self.fp8_peak_flops == 0  # a GPU without FP8 tensor cores
               else _figure("fp8_peak_flops", self.fp8_peak_flops))
        hbm = given("hbm_bandwidth", base.hbm_bandwidth)
        set_("gpu_memory", given("gpu_memory", base.hbm_bytes))
        e = base.gemm_efficiency if self.compute_efficiency is None else self.compute_efficiency
        me = (base.memory_efficiency if self.memory_efficiency is None
              else self.memory_efficiency)
        for name, v in (("compute_efficiency", e), ("memory_efficiency", me)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v <= 1:
                raise ArgumentError(f"{name}={v!r} must be in (0, 1]")  # nan and inf too
        set_("peak_flops", peak)
        set_("fp8_peak_flops", fp8)
        set_("hbm_bandwidth", hbm)
        set_("compute_efficiency", float(e))
        set_("memory_efficiency", float(me))
        set_("gpu", base.name)
        object.__setattr__(self, "_gpu", resolve_gpu(
            base, bf16_flops=peak, fp8_flops=fp8, hbm_bandwidth=hbm, hbm_bytes=self.gpu_memory,
            gemm_efficiency=float(e), memory_efficiency=float(me),
            compute_profile=str(self.compute_profile or "")))
        if self.collectives not in COLLECTIVE_MODELS:
            raise ArgumentError(f"collectives={self.collectives!r} must be one of "
                                f"{', '.join(COLLECTIVE_MODELS)}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def gpu_spec(self) -> GPU:
        """The :class:`~ringccl.planner.gpus.GPU` with this cluster's overrides."""
        return self._gpu

    @property
    def intra(self) -> tuple[float, float]:
        """(alpha, bandwidth) as :func:`~ringccl.costmodel.topology.two_level` takes it."""
        return (self.intra_alpha, self.intra_bandwidth)

    @property
    def inter(self) -> tuple[float, float]:
        return (self.inter_alpha, self.inter_bandwidth)

    def with_nodes(self, nodes: int) -> "Cluster":
        return self.replace(nodes=nodes)

    def replace(self, **changes) -> "Cluster":
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Cluster(**values)

    def describe(self) -> str:
        links = (profile_links(self.network_profile) if self.network_profile else
                 f"intra {units.format_bandwidth(self.intra_bandwidth)} "
                 f"({units.format_duration(self.intra_alpha)}), inter "
                 f"{units.format_bandwidth(self.inter_bandwidth)} per NIC "
                 f"({units.format_duration(self.inter_alpha)})")
        return (f"{self.name}: {self.nodes} nodes x {self.gpus_per_node} GPUs, {links}, "
                f"{self.nics_per_node} NICs/node, {self.gpu} ({self.peak_flops / 1e12:g} "
                f"TFLOP/s BF16, GEMMs up to "
                f"{self.compute_efficiency:g} of it), {units.format_size(self.gpu_memory)}"
                + ("; collectives priced as ringccl's algorithms run them (a what-if: NCCL's "
                   "by default, --collectives nccl)" if self.collectives == "ringccl" else ""))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Straggler:
    """One rank whose link runs at ``fraction`` of its bandwidth (a degraded NIC or NVLink
    port): the collectives of its groups are costed with that link slowed.

    Attributes:
        rank: global rank. fraction: in (0, 1]. link: "nic" (its rail's NIC) or "nvlink".
    """

    rank: int
    fraction: float
    link: str = "nic"

    def __post_init__(self):
        if not isinstance(self.fraction, (int, float)) or not 0 < self.fraction <= 1:
            raise ArgumentError(f"straggler fraction={self.fraction!r} must be in (0, 1]")
        if self.link not in ("nic", "nvlink"):
            raise ArgumentError(f"straggler link={self.link!r} must be 'nic' or 'nvlink'")


CLUSTER_PRESETS: dict[str, dict] = {
    "dgx-a100": dict(gpus_per_node=8, intra_bandwidth="300GB/s", inter_bandwidth="200Gbps",
                     gpu="a100-sxm4-80gb", name="dgx-a100",
                     source="NVIDIA DGX A100 System Architecture white paper (2020): NVLink 3 "
                     "600 GB/s per GPU bidirectional, 8 x 200 Gb/s HDR IB"),
    "dgx-h100": dict(gpus_per_node=8, intra_bandwidth="450GB/s", inter_bandwidth="400Gbps",
                     gpu="h100-sxm5-80gb", name="dgx-h100",
                     source="NVIDIA DGX H100 datasheet: NVLink 4 900 GB/s per GPU "
                     "bidirectional, 8 x 400 Gb/s ConnectX-7"),
    "dgx-h200": dict(gpus_per_node=8, intra_bandwidth="450GB/s", inter_bandwidth="400Gbps",
                     gpu="h200-sxm-141gb", name="dgx-h200",
                     source="NVIDIA DGX H200 datasheet: NVLink 4 900 GB/s per GPU "
                     "bidirectional, 8 x 400 Gb/s ConnectX-7"),
    "dgx-b200": dict(gpus_per_node=8, intra_bandwidth="900GB/s", inter_bandwidth="400Gbps",
                     gpu="b200-hgx", name="dgx-b200",
                     source="NVIDIA DGX B200 datasheet: NVLink 5 1.8 TB/s per GPU "
                     "bidirectional, 8 x 400 Gb/s ConnectX-7"),
    "h800": dict(gpus_per_node=8, intra_bandwidth="160GB/s", inter_bandwidth="50GB/s",
                 gpu="h800-sxm5-80gb", name="h800",
                 source="DeepSeek-V3 Technical Report (arXiv:2412.19437) §3.2.2: NVLink 160 GB/s"
                 ", InfiniBand 50 GB/s per GPU (achieved)"),
    "two-level-128x8": dict(gpus_per_node=8, nodes=128, intra_bandwidth="900GB/s",
                            inter_bandwidth="50GB/s", gpu="a100-sxm4-80gb",
                            name="two-level-128x8",
                            source="illustrative two-level machine in round figures: 128 x 8 "
                            "A100-class GPUs, NVLink 900 GB/s, InfiniBand 50 GB/s per GPU"),
}


def cluster_preset(name: str, /, **changes) -> Cluster:
    """The preset ``name`` with ``changes`` (e.g. ``nodes=128``, or ``name="my-cluster"`` to
    rename it).

    Raises:
        ArgumentError: unknown preset, listing them.
    """
    try:
        values = dict(CLUSTER_PRESETS[name.lower()])
    except (KeyError, AttributeError):
        raise ArgumentError(f"cluster={name!r} is not a preset; expected one of "
                            f"{', '.join(CLUSTER_PRESETS)}") from None
    values.update({k: v for k, v in changes.items() if v is not None})
    return Cluster(**values)


def load_profile(path, level: str = "inter") -> dict:
    """α, bandwidth (1/β) and γ of a ``ringccl fit --json`` file, for one level of the cluster.

    The fit is of a flat network (one α and β for every transfer); ``level`` says which link it
    measured: ``"inter"`` (the fit ran across nodes) or ``"intra"`` (inside one node).

    Returns:
        ``{"inter_alpha": s, "inter_bandwidth": bytes/s, "gamma": s/byte}`` (or ``intra_*``).
    Raises:
        ArgumentError: unreadable file (nccl-tests output: the message says to fit it first),
            no fit in it (a network or compute profile: what its own loader finds wrong or
            missing), unknown level, a β <= 0.
    """
    if level not in PROFILE_LEVELS:
        raise ArgumentError(f"profile level={level!r} must be 'inter' or 'intra'")
    data = read_fitted_json(path, f"profile={str(path)!r}: cannot read a `ringccl fit --json` "
                                  "file")
    raw = data
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict) and "fit" in data:
        data = data["fit"]
    try:
        params = data["params"]
        alpha, beta = params["alpha"]["value"], params["beta"]["value"]
        gamma = params.get("gamma", {}).get("value", 0.0) or 0.0
    except (KeyError, TypeError):
        # a profile of another kind: its own loader says what is wrong or missing
        formats = set()
        for item in raw if isinstance(raw, list) else [raw]:
            if isinstance(item, dict) and isinstance(item.get("profile"), dict):
                item = item["profile"]
            if isinstance(item, dict):
                formats.add(item.get("format"))
        for fmt, load, kind in (
                (COMPUTE_FORMAT, load_compute_profile,
                 "compute profile (`ringccl calibrate`)"),
                (NETWORK_FORMAT, load_network_profile,
                 "network profile (`ringccl fit` on nccl-tests logs)")):
            if fmt in formats:
                load(path)  # raises, naming the field
                raise ArgumentError(f"profile={str(path)!r} is a {kind}, not an α-β fit: pass "
                                    "it as the cluster's profile, which tells the kinds apart")
        raise ArgumentError(f"profile={str(path)!r} has no fit (expected `ringccl fit --json` "
                            "output on `ringccl bench --json` rows: params.alpha.value, "
                            "params.beta.value) and is no other profile ringccl reads: neither "
                            f"a network profile (format {NETWORK_FORMAT!r}: `ringccl "
                            "fit --json` on nccl-tests logs) nor a compute profile (format "
                            f"{COMPUTE_FORMAT!r}: `ringccl calibrate --out`)"
                            ) from None
    if not beta > 0:
        raise ArgumentError(f"profile={str(path)!r}: beta={beta!r} must be > 0")
    return {f"{level}_alpha": max(float(alpha), 0.0), f"{level}_bandwidth": 1.0 / float(beta),
            "gamma": max(float(gamma), 0.0)}


#: what each level of a network profile is
_LEVEL_LINKS = {"intra": "intra (NVLink)", "inter": "inter (NICs)"}


def profile_links(path: str) -> str:
    """Where the network's figures come from under the network profile ``path``: the levels it
    fitted, and the preset the fit started from for the others (not the cluster's preset,
    whose link figures the profile replaces)."""
    try:
        prior, fitted = network_profile_levels(path)
    except ArgumentError:  # not a network profile: its pricing says what is wrong
        prior, fitted = None, ("intra", "inter")
    unused = "the cluster preset's link figures unused"
    others = [_LEVEL_LINKS[k] for k in ("intra", "inter") if k not in fitted]
    if not others:
        return f"network fitted in {path} ({unused})"
    if not fitted:
        return f"network of {path}: nothing fitted, every level the {prior} preset's ({unused})"
    return (f"network fitted in {path} for {', '.join(_LEVEL_LINKS[k] for k in fitted)} only; "
            f"{', '.join(others)} the {prior} preset's figures, not fitted ({unused})")


def profile_kind(path) -> str:
    """What a profile file holds: "network" (``ringccl fit`` on nccl-tests logs), "compute"
    (``ringccl calibrate``) or "alpha-beta" (``ringccl fit --json`` of ringccl's own runs),
    whichever loader reads it.

    Raises:
        ArgumentError: unreadable or not JSON.
    """
    for kind, load in (("network", load_network_profile), ("compute", load_compute_profile)):
        try:
            load(path)
            return kind
        except ArgumentError as exc:
            if "cannot read" in str(exc):
                raise
    return "alpha-beta"


#: what a profile of each kind is called
_PROFILE_KINDS = {"network": "network profiles", "compute": "compute profiles",
                  "alpha-beta": "α-β fits"}


def _profiles(values: dict, profile, level: str | None) -> None:
    """Each profile path (one or a list) into ``values``: a network profile's path, a compute
    profile's path, or an α-β fit's fields (:func:`load_profile`) for ``level`` (None:
    "inter").

    Raises:
        ArgumentError: two profiles of one kind (a cluster has one network, one compute profile
            and one α-β fit: the second would replace the first), ``level`` given without an
            α-β fit among the profiles (it says which link a fit measured).
    """
    paths = [profile] if isinstance(profile, (str, Path)) else list(profile)
    kinds: dict[str, str] = {}
    for path in paths:
        kind = profile_kind(path)
        if kind in kinds:
            raise ArgumentError(f"profile={str(kinds[kind])!r} and {str(path)!r} are both "
                                f"{_PROFILE_KINDS[kind]}; a cluster takes one of each kind "
                                "(network, compute, α-β fit): give one")
        kinds[kind] = str(path)
    if level is not None and "alpha-beta" not in kinds:
        given = ", ".join(f"{p!r} is a {k} profile" for k, p in kinds.items())
        raise ArgumentError(f"profile_level={level!r} applies to a profile's α-β fit, and "
                            f"{given}: leave profile_level out")
    for kind, path in kinds.items():
        if kind == "network":
            values["network_profile"] = path
        elif kind == "compute":
            values["compute_profile"] = path
        else:
            values.update(load_profile(path, level or "inter"))
            values.setdefault("collectives", "ringccl")  # an α-β fit prices ringccl's walk


#: the cluster fields (and key) that name profile files
PROFILE_FIELDS = ("profile", "network_profile", "compute_profile")


def check_profile_field(name: str, value, level: str | None = None) -> None:
    """Read the profile files the cluster field ``name`` names as resolving the cluster reads
    them, so that a missing or damaged one is refused before any work (a ``--config`` file's
    naming the file and the field: :mod:`.config`): ``profile`` (one path or a list, with the
    α-β fit's ``level``), ``network_profile`` and ``compute_profile``; other fields: nothing.

    Raises:
        ArgumentError: the loader's refusal (the file and what is wrong or missing in it), two
            profiles of one kind, ``level`` without an α-β fit.
    """
    if name == "profile":
        _profiles({}, value, level)
    elif name == "network_profile":
        load_network_profile(value)
    elif name == "compute_profile":
        load_compute_profile(value)


def resolve_cluster(cluster) -> Cluster:
    """A :class:`Cluster` from a cluster, a preset name or a dictionary of its fields (with an
    optional ``preset`` key and ``profile`` (one path or a list: at most one network, one
    compute profile and one α-β fit, :func:`profile_kind`) / ``profile_level`` (the link the
    α-β fit measured: :data:`PROFILE_LEVELS`, default "inter"; only with an α-β fit).

    Raises:
        ArgumentError: unknown preset or field, bad values, two profiles of one kind, a
            ``profile_level`` that is no level or is given without an α-β fit.
    """
    if isinstance(cluster, Cluster):
        return cluster
    if isinstance(cluster, str):
        return cluster_preset(cluster)
    if not isinstance(cluster, dict):
        raise ArgumentTypeError(f"cluster={cluster!r} must be a Cluster, a preset name or a dict")
    values = dict(cluster)
    base = values.pop("preset", None)
    profile, level = values.pop("profile", None), values.pop("profile_level", None)
    if level is not None and level not in PROFILE_LEVELS:
        raise ArgumentError(f"profile_level={level!r} must be 'inter' or 'intra'")
    if level is not None and not profile:
        raise ArgumentError(f"profile_level={level!r} applies to a profile's α-β fit, and no "
                            "profile is given: give the profile, or leave profile_level out")
    known = {f.name for f in fields(Cluster)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ArgumentError(f"unknown cluster field(s) {', '.join(unknown)}; expected "
                            f"{', '.join(sorted(known))}")
    named = values.get("name")
    if (isinstance(named, str) and named.lower() in CLUSTER_PRESETS
            and (base is None or named.lower() != str(base).lower())):
        raise ArgumentError(f"cluster name={named!r} is a preset's name, but name only labels "
                            f"the cluster; to start from that preset write preset = {named!r}")
    if profile:
        _profiles(values, profile, level)
    if base is not None:
        return cluster_preset(base, **values)
    return Cluster(**{k: v for k, v in values.items() if v is not None})
