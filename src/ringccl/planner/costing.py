"""The cost of one collective of the step: the tuner's pick and its time on its group's own
placement.

Nothing here has a closed form: every call's algorithm and time come from
:func:`ringccl.costmodel.tuning.tune` on the group's own placement — a
:func:`~ringccl.costmodel.topology.two_level` machine of the nodes the group spans, its ranks on
their real devices, the NIC bandwidth divided among the concurrent groups that share a NIC — so
the hierarchical all-reduce wins where it pays and a ring is paced by its slowest link. A
point-to-point send is a broadcast between the two ranks. An :class:`Entry` is one row of the
step's inventory; :func:`costed` fills its algorithm, times and bytes.

How a collective is priced is one choice, ``Cluster.collectives`` (:data:`PRICERS`): one
function per model, each taking the entry and the cluster and returning the same tuple.

* ``"nccl"`` (the default): as NCCL runs it (:func:`ringccl.costmodel.nccl.price`: its
  algorithms, protocols, channels over the rails, per-message costs), on the group's placement
  (ranks per node × nodes, the rails its ranks use) over the cluster's machine as NCCL sees it
  (:func:`nccl_machine_of`: NVLink links × NCCL's per-link bandwidth, each NIC at NCCL's speed
  step, NCCL's hop latencies; or a network profile fitted by ``ringccl fit`` to nccl-tests
  logs). The choice is printed as ``algorithm/protocol``.
* ``"ringccl"``: the what-if of ringccl's own schedules, the tuner's pick on a two-level machine.

A list-based ``torch.distributed.all_gather`` / ``reduce_scatter`` (one tensor per rank, as
DeepSpeed v0.3's ZeRO-3 calls them) costs, besides the collective, one copy kernel per rank:
PyTorch's ``ProcessGroupNCCL`` flattens the input list / unflattens the output list
(``torch/lib/c10d/ProcessGroupNCCL.cpp``: ``flatten_for_scatter_gather`` allocates a new flat
buffer, the reduce-scatter copies each input into it before the call, the all-gather copies
``outputTensors[i][j].copy_(outputFlattened[i][j], true)`` out of it after), so each call
launches world-size copies, :data:`KERNEL_LAUNCH_SECONDS` each (NVIDIA Technical Blog,
"Getting Started with CUDA Graphs", 2019: about 4 µs per back-to-back launch of a short
kernel), which together read and write the whole gathered (or reduced) tensor once: its bytes
twice at HBM bandwidth (:func:`ringccl.planner.kernels.memory_seconds`).

A call whose framework passes over its buffer around it (``Entry.buffer_passes``: DeepSpeed's
``allreduce_and_copy`` flattens the gradient bucket, divides it in place and copies the result
back, ``deepspeed/runtime/zero/stage2.py`` v0.5.4) costs each pass's read and write of the
buffer at HBM bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..algorithms import build_schedule
from ..caches import memoize
from ..collectives import get_collective
from ..costmodel.nccl import NcclMachine, price
from ..costmodel.nccl_fit import load_network_profile
from ..costmodel.nccl_tables import NCCL_MACHINES, NVLINK_BW_PER_LINK, channel_speed
from ..costmodel.topology import TwoLevel
from ..costmodel.tuning import predictors
from ..errors import ArgumentError
from .cluster import Cluster, Straggler
from .groups import GroupShape
from .kernels import memory_seconds

__all__ = ["Entry", "OVERLAPS", "PRICERS", "KERNEL_LAUNCH_SECONDS", "WALK_MAX_RANKS",
           "WalkLimitError", "costed", "nccl_machine_of", "sm_contention"]

#: how the row's time can hide behind compute
OVERLAPS = ("exposed", "forward", "backward", "expert compute", "attention",
            "weight gradients", "input gradients")

#: seconds of one kernel launch (module doc)
KERNEL_LAUNCH_SECONDS = 4e-6


class _SlowLink(TwoLevel):
    """A two-level machine with one device's NIC (or NVLink port) slowed to a fraction."""

    def __init__(self, *args, device: int, fraction: float, link: str, **kwargs):
        super().__init__(*args, **kwargs)
        o, bw = self._offsets, self.link_bandwidth.copy()
        if link == "nic":
            node, i = divmod(device, self.local)
            nic = node * self.nics_per_node + i * self.nics_per_node // self.local
            ids = (o[2] + nic, o[3] + nic)
        else:
            ids = (o[0] + device, o[1] + device)
        bw[list(ids)] *= fraction
        self.link_bandwidth = bw
        self._slow = (int(device), float(fraction), link)

    @property
    def key(self) -> tuple:
        return super().key + ("slow",) + self._slow


@memoize(maxsize=1024)
def _tuned(collective: str, placement: tuple, local: int, intra: tuple, inter: tuple,
           nics: int, oversubscription: float, gamma: float, local_size: int,
           slow: tuple | None):
    """The tuner's predictors (:func:`ringccl.costmodel.tuning.predictors`, one per registered
    algorithm that can run here) for ``collective`` on one group's placement; memoized, so
    groups of the same shape share one walk across stages, layouts and searches."""
    nodes = max(placement) // local + 1
    kwargs = dict(nics_per_node=nics, oversubscription=oversubscription,
                  placement=list(placement))
    if slow is None:
        topo = TwoLevel(nodes, local, intra, inter, **kwargs)
    else:
        topo = _SlowLink(nodes, local, intra, inter, device=slow[0], fraction=slow[1],
                         link=slow[2], **kwargs)
    params = ({"hierarchical": {"local_size": local_size}}
              if collective == "all_reduce" and local_size else None)
    preds, _ = predictors(collective, None, topo, gamma=gamma, params=params)
    if not preds:  # pragma: no cover - ring runs on any group size
        raise ArgumentError(f"no algorithm of {collective} can be costed on {topo.describe()}")
    return preds


@memoize(maxsize=1024)
def _bytes_per_rank(collective: str, algorithm: str, world_size: int, params: tuple) -> float:
    """Bytes the busiest rank sends per byte of the working buffer (the schedule's own count,
    as the simulator's ``stats.bytes_sent`` counts it, with fluid chunks)."""
    schedule = build_schedule(collective, algorithm, world_size, **dict(params))
    per_chunk = get_collective(collective).chunk_nbytes(world_size, schedule.num_chunks, 1.0)
    return float(schedule.chunk_sends().sum(axis=1).max() * per_chunk)


@dataclass
class Entry:
    """One collective of the step, for one rank position.

    Attributes:
        parallelism: "dp", "zero", "tp", "sp", "cp", "ep", "pp", "embedding".
        collective: all_reduce, all_gather, reduce_scatter, all_to_all or send_recv.
        what: the tensor moved. phase: "forward", "backward" or "step" (once per step).
        group: the group kind (:data:`ringccl.planner.groups.GROUP_KINDS`) and ``shape``.
        nbytes: bytes of one call's working buffer (as :func:`ringccl.cost` takes it).
        calls_per_micro_batch / calls_per_step: how often it runs.
        overlap: "exposed" or the compute it hides behind; chunks: pieces it is cut into
            (DDP buckets, prefetched layers, MoE micro-chunks): one piece stays exposed.
        window: the compute its builder says it can hide behind (its ``overlap`` when built);
            the layout's knobs decide whether it does and set ``overlap``
            (:func:`~ringccl.planner.overlap.decide`), never ``window``: a builder's memoized
            entries serve layouts with other knobs.
        algorithm, params: the tuner's pick and its builder parameters.
        seconds_per_call, ring_seconds_per_call: predicted (the pick, and the plain ring).
        bytes_sent_per_call: bytes the busiest rank sends per call (the schedule's count).
        inter_node_bytes_per_call: bytes on the busiest NIC out per call (walk).
        per_micro_batch: True when it repeats per micro-batch (on the pipeline's path).
        list_collective: called with one tensor per rank (module doc: a copy per rank).
        zero_filled: its output buffer is zero-filled before the call, its bytes written once
            at HBM bandwidth (DeepSpeed v0.3.15 ``partition_parameters.py`` ``_allgather_param``:
            ``torch.zeros`` of the whole parameter before each gather).
        buffer_passes: passes the framework makes over the call's buffer around it, each
            reading and writing it once (module doc).
    """

    parallelism: str
    collective: str
    what: str
    phase: str
    group: str
    shape: GroupShape
    nbytes: float
    calls_per_step: int
    overlap: str = "exposed"
    chunks: int = 1
    per_micro_batch: bool = True
    calls_per_micro_batch: int = 0
    algorithm: str = ""
    params: dict = field(default_factory=dict)
    seconds_per_call: float = 0.0
    ring_seconds_per_call: float | None = None
    bytes_sent_per_call: float = 0.0
    inter_node_bytes_per_call: float = 0.0
    list_collective: bool = False
    zero_filled: bool = False
    buffer_passes: int = 0
    window: str = ""

    def __post_init__(self):
        if not self.window:
            self.window = self.overlap

    @property
    def seconds_per_step(self) -> float:
        return self.seconds_per_call * self.calls_per_step

    @property
    def bytes_sent_per_step(self) -> float:
        return self.bytes_sent_per_call * self.calls_per_step

    def to_dict(self) -> dict:
        return {"parallelism": self.parallelism, "collective": self.collective,
                "what": self.what, "phase": self.phase, "group": self.group,
                **{f"group_{k}": v for k, v in self.shape.to_dict().items()},
                "nbytes": self.nbytes, "calls_per_micro_batch": self.calls_per_micro_batch,
                "calls_per_step": self.calls_per_step, "algorithm": self.algorithm,
                "params": self.params, "seconds_per_call": self.seconds_per_call,
                "seconds_per_step": self.seconds_per_step,
                "ring_seconds_per_call": self.ring_seconds_per_call,
                "bytes_sent_per_call": self.bytes_sent_per_call,
                "bytes_sent_per_step": self.bytes_sent_per_step,
                "inter_node_bytes_per_call": self.inter_node_bytes_per_call,
                "overlap": self.overlap, "chunks": self.chunks}


@memoize(maxsize=16384)
def _choice(collective: str, placement: tuple, local: int, intra: tuple, inter: tuple,
            nics: int, oversubscription: float, gamma: float, local_size: int,
            slow: tuple | None, nbytes: float) -> tuple:
    """The tuner's pick for one call of ``nbytes`` on one placement: (algorithm, params, seconds,
    ring seconds or None, bytes the busiest rank sends, bytes on the busiest NIC out).
    Memoized: a layout search asks the same question for every recompute mode, ZeRO stage and
    schedule that keeps the group and the buffer."""
    preds = _tuned(collective, placement, local, intra, inter, nics, oversubscription, gamma,
                   local_size, slow)
    # the tuner's choice (TuneResult.best_at): the fastest at this size, ties in registry order
    times = {name: p(nbytes) for name, p in preds.items()}
    best = min(times, key=times.get)
    params = {"local_size": local_size} if best == "hierarchical" and local_size else {}
    if collective == "broadcast":
        params = {"root": 0, **params}
    pred = preds[best]
    result = pred.result(nbytes)
    sent = nbytes * _bytes_per_rank(collective, best, len(placement),
                                    tuple(sorted(pred.params.items())))
    return (best, params, result.seconds, times.get("ring"), sent,
            float(result.max_link_bytes.get("nic out", 0.0)))


#: the largest group ``collectives="ringccl"`` walks: a collective's schedule over N ranks
#: holds about N(N - 1) transfers (each chunk to each rank), so the walk's time and memory grow
#: as N²; measured on a 2-core machine, a Llama 3 70B step with a ZeRO-3 group of 4,096 ranks
#: took 37 s and 4.4 GB (N² puts 8,192 at about four times that)
WALK_MAX_RANKS = 4096


class WalkLimitError(ArgumentError):
    """``collectives="ringccl"`` refusing a group of more than :data:`WALK_MAX_RANKS` ranks: one
    plan is refused, a layout search skips the layout (and ranks the others).

    Attributes:
        group: the group's name (``"dp"``, ``"ep"``, ...); ranks: its ranks; limit: the limit.
    """

    def __init__(self, message: str, *, group: str, ranks: int, limit: int):
        super().__init__(message)
        self.group, self.ranks, self.limit = group, ranks, limit


def _ringccl(entry: Entry, cluster: Cluster, straggler: Straggler | None,
             straggler_index: int | None) -> tuple:
    """ringccl's tuner: the fastest registered schedule on the group's placement, priced by
    the α-β-γ walk (:func:`_choice`).

    Raises:
        WalkLimitError: a group of more than :data:`WALK_MAX_RANKS` ranks."""
    shape = entry.shape
    n = len(shape.placement)
    if n > WALK_MAX_RANKS:
        raise WalkLimitError(
            f"collectives='ringccl' walks ringccl's schedules step by step; over the "
            f"{entry.group} group's {n:,} ranks one {entry.collective} holds about "
            f"{n * (n - 1):,} transfers, beyond the {WALK_MAX_RANKS:,} ranks it prices (time "
            f"and memory grow as ranks²); price this layout with collectives='nccl' (the "
            f"default, --collectives nccl) or use groups of at most {WALK_MAX_RANKS:,} ranks",
            group=entry.group, ranks=n, limit=WALK_MAX_RANKS)
    collective = "broadcast" if entry.collective == "send_recv" else entry.collective
    # other groups' traffic on a shared NIC leaves this group 1/nic_sharing of it
    inter = (cluster.inter_alpha, cluster.inter_bandwidth / shape.nic_sharing)
    local_size = shape.ranks_per_node if shape.uniform and shape.nodes_spanned > 1 else 0
    slow = None
    if straggler is not None and straggler_index is not None:
        slow = (shape.placement[straggler_index], straggler.fraction, straggler.link)
    return _choice(collective, shape.placement, cluster.gpus_per_node, cluster.intra, inter,
                   cluster.nics_per_node, cluster.oversubscription, cluster.gamma, local_size,
                   slow, float(entry.nbytes))


#: NVLink's datasheet bandwidth per link and direction (NVLink 3 and 4: 25 GB/s; NVLink 5: 50)
_NVLINK_LINK = {"ampere": 25e9, "hopper": 25e9, "blackwell": 50e9}
#: NCCL's channels on each GPU generation's 8-GPU node (ringccl.costmodel.nccl_tables)
_CHANNELS = {"ampere": NCCL_MACHINES["dgx-a100"]["channels"],
             "hopper": NCCL_MACHINES["dgx-h100"]["channels"],
             "blackwell": NCCL_MACHINES["dgx-b200"]["channels"]}


@memoize(maxsize=64)
def _network_profile(path: str) -> NcclMachine:
    return load_network_profile(path)


def sm_contention(cluster: Cluster) -> float:
    """The fraction of a GPU's SMs a collective running beside compute occupies: NCCL's
    channels on the cluster's machine (one thread block, on one SM, per channel;
    :func:`nccl_machine_of`) over the GPU's SMs: e.g. 16 / 132 on a DGX H100."""
    return min(1.0, nccl_machine_of(cluster).channels / cluster.gpu_spec.sm_count)


@memoize(maxsize=64)
def nccl_machine_of(cluster: Cluster) -> NcclMachine:
    """The cluster as NCCL's tuning sees it: its network profile (``ringccl fit`` on nccl-tests
    logs) when it has one; else its GPU generation, NVLink as links × NCCL's per-link bandwidth
    (``topo.h``; the cluster's per-direction NVLink bandwidth over the datasheet's per link),
    each NIC at NCCL's speed step below its line rate (``search.cc``), NVLink SHARP on Hopper and
    later, NCCL's own hop latencies. Memoized per cluster (a frozen value): a layout search
    prices millions of calls on one cluster."""
    if cluster.network_profile:
        return _network_profile(cluster.network_profile)
    arch = cluster.gpu_spec.architecture
    links = cluster.intra_bandwidth / _NVLINK_LINK[arch]
    return NcclMachine(gpu=arch, gpus_per_node=cluster.gpus_per_node,
                       intra_bandwidth=links * NVLINK_BW_PER_LINK[arch] * 1e9,
                       nics_per_node=cluster.nics_per_node,
                       inter_bandwidth=channel_speed(cluster.inter_bandwidth, arch),
                       channels=_CHANNELS[arch], nvls=arch != "ampere" and
                       cluster.gpus_per_node > 1, name=cluster.name)


@memoize(maxsize=16384)
def _nccl_choice(collective: str, nbytes: float, ppn: int, nodes: int, rails: int,
                 machine: NcclMachine) -> tuple:
    cost = price(collective, nbytes, ppn, nodes, machine, rails=rails)
    ring = [t for a, _, t in cost.candidates if a == "ring"]
    per_gpu = cost.link_bytes["intra"] + cost.link_bytes["inter"] * rails / ppn
    return (f"{cost.algorithm}/{cost.protocol}", {}, cost.seconds, min(ring) if ring else None,
            per_gpu, cost.link_bytes["inter"])


def _nccl(entry: Entry, cluster: Cluster, straggler: Straggler | None,
          straggler_index: int | None) -> tuple:
    """NCCL's choice and time (module doc) for one call of ``entry`` on its group's
    placement: ranks per node × the nodes they need, the rails its ranks use; NICs shared with
    other groups (``nic_sharing``), the fabric's oversubscription and a straggler's slow link
    divide that level's bandwidth."""
    shape = entry.shape
    machine = nccl_machine_of(cluster)
    ppn = min(shape.ranks_per_node, machine.gpus_per_node)
    nodes = -(-shape.size // ppn)
    rails = max(1, machine.nics_per_node * ppn // machine.gpus_per_node)
    inter = machine.inter_bandwidth / shape.nic_sharing
    if nodes > 1:
        inter /= cluster.oversubscription
    intra = machine.intra_bandwidth
    if straggler is not None and straggler_index is not None:
        if straggler.link == "nic":
            inter *= straggler.fraction
        else:
            intra *= straggler.fraction
    if (inter, intra) != (machine.inter_bandwidth, machine.intra_bandwidth):
        machine = machine.replace(inter_bandwidth=inter, intra_bandwidth=intra)
    return _nccl_choice(entry.collective, float(entry.nbytes), ppn, nodes, rails, machine)


#: ``Cluster.collectives`` -> the function pricing one call: (entry, cluster, straggler,
#: straggler index) -> (algorithm, params, seconds, ring seconds or None, bytes the busiest
#: rank sends, bytes on the busiest NIC out)
PRICERS = {"nccl": _nccl, "ringccl": _ringccl}


def costed(entry: Entry, cluster: Cluster, straggler: Straggler | None = None,
           straggler_index: int | None = None) -> Entry:
    """Fill ``entry``'s algorithm, times and bytes with ``cluster.collectives``' pricing
    (:data:`PRICERS`), plus a list-based call's copies (module doc), the fill of a
    zero-filled output (``Entry.zero_filled``) and the framework's passes over the buffer
    (``Entry.buffer_passes``).

    ``straggler_index``: position of the straggler in ``entry.shape.placement`` (None: none).
    """
    (entry.algorithm, params, entry.seconds_per_call, entry.ring_seconds_per_call,
     entry.bytes_sent_per_call, entry.inter_node_bytes_per_call) = PRICERS[
        cluster.collectives](entry, cluster, straggler, straggler_index)
    if entry.list_collective:
        entry.seconds_per_call += (entry.shape.size * KERNEL_LAUNCH_SECONDS + float(
            memory_seconds(2.0 * entry.nbytes, cluster.gpu_spec)))
    if entry.zero_filled:
        entry.seconds_per_call += float(memory_seconds(entry.nbytes, cluster.gpu_spec))
    if entry.buffer_passes:
        entry.seconds_per_call += float(memory_seconds(2.0 * entry.buffer_passes * entry.nbytes,
                                                       cluster.gpu_spec))
    entry.params = dict(params)
    return entry
