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

A list-based ``torch.distributed.all_gather`` / ``reduce_scatter`` (one tensor per rank, as
DeepSpeed v0.3's ZeRO-3 calls them) costs, besides the collective, one copy kernel per rank:
PyTorch's ``ProcessGroupNCCL`` flattens the input list / unflattens the output list
(``outputTensors[i][j].copy_(outputFlattened[i][j], true)``), so each call launches
world-size copies, :data:`KERNEL_LAUNCH_SECONDS` each (NVIDIA Technical Blog, "Getting
Started with CUDA Graphs", 2019: about 4 µs per back-to-back launch of a short kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..algorithms import build_schedule
from ..caches import memoize
from ..collectives import get_collective
from ..costmodel.topology import TwoLevel
from ..costmodel.tuning import predictors
from ..errors import ArgumentError
from .cluster import Cluster, Straggler
from .groups import GroupShape

__all__ = ["Entry", "OVERLAPS", "PRICERS", "KERNEL_LAUNCH_SECONDS", "costed"]

#: how the row's time can hide behind compute
OVERLAPS = ("exposed", "forward", "backward", "expert compute", "attention")

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
        algorithm, params: the tuner's pick and its builder parameters.
        seconds_per_call, ring_seconds_per_call: predicted (the pick, and the plain ring).
        bytes_sent_per_call: bytes the busiest rank sends per call (the schedule's count).
        inter_node_bytes_per_call: bytes on the busiest NIC out per call (walk).
        per_micro_batch: True when it repeats per micro-batch (on the pipeline's path).
        list_collective: called with one tensor per rank (module doc: a copy per rank).
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


def _ringccl(entry: Entry, cluster: Cluster, straggler: Straggler | None,
             straggler_index: int | None) -> tuple:
    """ringccl's tuner: the fastest registered schedule on the group's placement, priced by
    the α-β-γ walk (:func:`_choice`)."""
    shape = entry.shape
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


#: ``Cluster.collectives`` -> the function pricing one call: (entry, cluster, straggler,
#: straggler index) -> (algorithm, params, seconds, ring seconds or None, bytes the busiest
#: rank sends, bytes on the busiest NIC out)
PRICERS = {"ringccl": _ringccl}


def costed(entry: Entry, cluster: Cluster, straggler: Straggler | None = None,
           straggler_index: int | None = None) -> Entry:
    """Fill ``entry``'s algorithm, times and bytes with ``cluster.collectives``' pricing
    (:data:`PRICERS`), plus a list-based call's copies (module doc).

    ``straggler_index``: position of the straggler in ``entry.shape.placement`` (None: none).
    """
    (entry.algorithm, params, entry.seconds_per_call, entry.ring_seconds_per_call,
     entry.bytes_sent_per_call, entry.inter_node_bytes_per_call) = PRICERS[
        cluster.collectives](entry, cluster, straggler, straggler_index)
    if entry.list_collective:
        entry.seconds_per_call += entry.shape.size * KERNEL_LAUNCH_SECONDS
    entry.params = dict(params)
    return entry
