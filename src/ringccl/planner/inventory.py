"""Every collective of one training step, per rank position (PP stage), costed by the tuner.

The map from parallelism to collectives is the lecture's table 0.3 and its section 6:

* DDP: all-reduce of the gradients, in buckets, once per step (``no_sync`` on all but the last
  micro-batch), overlapping the last micro-batch's backward;
* Megatron TP: 2 all-reduces of the activations per layer forward (attention and MLP outputs)
  and 2 backward (Megatron-LM 2019 §3, the f/g operators); SP (Korthikanti et al. 2022 §4.2.2)
  replaces each all-reduce with an all-gather + reduce-scatter of the same buffer — equal total
  bytes; full recompute repeats the forward's in the backward;
* ZeRO-1/2 (Rajbhandari et al. 2020 §5, §7): reduce-scatter of the gradients + all-gather of
  the updated parameters (ZeRO-2 reduce-scatters every micro-batch: its gradients are sharded);
  ZeRO-3/FSDP: all-gather of each layer's weights in forward and again in backward, and a
  reduce-scatter of its gradients (3Ψ against DDP's 2Ψ, §7.2), prefetched behind compute;
* PP: point-to-point activations forward and gradients backward between adjacent stages
  (Megatron-LM 2021 §3.2; with TP, the scatter/gather optimisation of §4.1 sends 1/tp of the
  activation across nodes and all-gathers it inside the node);
* MoE: 2 all-to-alls (dispatch, combine) per MoE layer forward and 2 backward in the EP group,
  split into micro-chunks against the expert GEMMs (the lecture's question 9.3, third part);
* CP: the ring of K/V blocks (an all-gather of K/V forward, a reduce-scatter of their gradients
  backward), overlapped with attention;
* a tied embedding across pipeline stages: an all-reduce of its gradient between the first and
  the last stage (Megatron-LM 2021 §3.2), exposed.

Nothing here has a closed form: every call's algorithm and time come from
:func:`ringccl.costmodel.tuning.tune` on the group's own placement — a
:func:`~ringccl.costmodel.topology.two_level` machine of the nodes the group spans, its ranks on
their real devices, the NIC bandwidth divided among the concurrent groups that share a NIC — so
the hierarchical all-reduce wins where it pays and a ring is paced by its slowest link. A
point-to-point send is a broadcast between the two ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..algorithms import build_schedule
from ..caches import memoize
from ..collectives import get_collective
from ..costmodel.topology import TwoLevel
from ..costmodel.tuning import predictors
from ..errors import ArgumentError
from .cluster import Cluster
from .groups import GroupShape, RankGrid, rank_grid
from .layout import Layout
from .model import ModelConfig

__all__ = ["Entry", "Straggler", "stage_layers", "StageShape", "stage_shape", "inventory",
           "costed"]

#: how the row's time can hide behind compute
OVERLAPS = ("exposed", "forward", "backward", "expert compute", "attention")


@dataclass(frozen=True)
class Straggler:
    """One rank whose link runs at ``fraction`` of its bandwidth (the lecture's incident).

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


def costed(entry: Entry, cluster: Cluster, straggler: Straggler | None = None,
           straggler_index: int | None = None) -> Entry:
    """Fill ``entry``'s algorithm, times and bytes from the tuner on its group's placement.

    ``straggler_index``: position of the straggler in ``entry.shape.placement`` (None: none).
    """
    shape = entry.shape
    collective = "broadcast" if entry.collective == "send_recv" else entry.collective
    # other groups' traffic on a shared NIC leaves this group 1/nic_sharing of it
    inter = (cluster.inter_alpha, cluster.inter_bandwidth / shape.nic_sharing)
    local_size = shape.ranks_per_node if shape.uniform and shape.nodes_spanned > 1 else 0
    slow = None
    if straggler is not None and straggler_index is not None:
        slow = (shape.placement[straggler_index], straggler.fraction, straggler.link)
    (entry.algorithm, params, entry.seconds_per_call, entry.ring_seconds_per_call,
     entry.bytes_sent_per_call, entry.inter_node_bytes_per_call) = _choice(
        collective, shape.placement, cluster.gpus_per_node, cluster.intra, inter,
        cluster.nics_per_node, cluster.oversubscription, cluster.gamma, local_size, slow,
        float(entry.nbytes))
    entry.params = dict(params)
    return entry


# -- the stages ---------------------------------------------------------------------------------

def stage_layers(model: ModelConfig, layout: Layout, stage: int) -> list[list[int]]:
    """The layers of PP stage ``stage``, one list per model chunk (``virtual_stages`` of them):
    the L layers split as evenly as possible into pp·v chunks (the first chunks take one more),
    stage s holding chunks s, s + pp, s + 2·pp, ... (Megatron-LM 2021 §2.2.2)."""
    return [list(chunk) for chunk in _layer_chunks(model.num_hidden_layers, layout.pp,
                                                    layout.virtual_stages, stage)]


@memoize(maxsize=4096)
def _layer_chunks(num_layers: int, pp: int, virtual_stages: int, stage: int) -> tuple:
    bounds = np.array_split(np.arange(num_layers), pp * virtual_stages)
    return tuple(tuple(map(int, bounds[stage + k * pp])) for k in range(virtual_stages))


@dataclass(frozen=True)
class StageShape:
    """What one PP stage holds, per rank (counts of parameters, not bytes).

    Attributes:
        stage, layers, moe_layers: the stage and its layer counts.
        first, last: holds the embedding / the LM head.
        dense_parameters: non-expert weights on a rank (TP-sharded; embedding and head
            included where the stage holds them), an ``int``.
        expert_parameters: routed expert weights on a rank (over ep and tp), an ``int``.
        largest_layer_parameters: the most weights one of the stage's layers has on a rank
            (dense + routed experts, an ``int``): what a ZeRO-3 gather brings to full size.
        forward_flops: one micro-batch's forward FLOPs on this rank.
        attention_core_flops: of those, the attention scores and weighted sum.
        expert_forward_flops_per_layer: the routed experts' forward FLOPs of one MoE layer.
    """

    stage: int
    layers: int
    moe_layers: int
    first: bool
    last: bool
    dense_parameters: int
    expert_parameters: int
    largest_layer_parameters: int
    forward_flops: float
    attention_core_flops: float
    expert_forward_flops_per_layer: float


def _shard(count: int, parts: int) -> int:
    """Elements of one of ``parts`` shards of ``count`` (rounded up, as Megatron pads the
    vocabulary to a multiple of tp and the parallel linear layers divide exactly)."""
    return -(-count // parts)


def stage_shape(model: ModelConfig, layout: Layout, stage: int) -> StageShape:
    """The :class:`StageShape` of PP stage ``stage`` (memoized on what it depends on: the
    model, tp, ep, pp, v, the micro-batch and cp)."""
    return _stage_shape(model, layout.tp, layout.ep, layout.pp, layout.virtual_stages,
                        layout.micro_batch_size, layout.cp, stage)


@memoize(maxsize=4096)
def _stage_shape(model: ModelConfig, tp: int, ep: int, pp: int, virtual_stages: int,
                 micro_batch_size: int, cp: int, stage: int) -> StageShape:
    layers = [i for chunk in _layer_chunks(model.num_hidden_layers, pp, virtual_stages, stage)
              for i in chunk]
    first, last = stage == 0, stage == pp - 1
    # parameter counts are integers: each TP (and EP) shard of a weight matrix rounded up;
    # the norm weights are replicated on every TP rank
    dense = experts = largest = 0
    for i in layers:
        p = model.layer_parameters(i)
        layer_dense = _shard(p["attention"] + p["mlp"], tp) + p["norms"]
        layer_experts = _shard(p["experts"], ep * tp)
        dense += layer_dense
        experts += layer_experts
        largest = max(largest, layer_dense + layer_experts)
    # the vocab-parallel embedding and LM head: V/tp rows of h each
    vocab_shard = _shard(model.vocab_size, tp) * model.hidden_size
    if first:
        dense += vocab_shard
    if last:
        dense += model.hidden_size + (
            vocab_shard if (not model.tie_word_embeddings or pp > 1) else 0)
    vh = model.vocab_size * model.hidden_size
    tokens = micro_batch_size * model.seq_length / cp
    moe = sum(model.is_moe_layer(i) for i in layers)
    # matmul parameters a token meets on this stage (routed experts: k of E)
    active = 0.0
    for i in layers:
        p = model.layer_parameters(i)
        active += p["attention"] + p["mlp"]
        if model.is_moe_layer(i):
            active += model.num_experts_per_tok * model.expert_parameters
    if last:
        active += vh
    per_layer_attn = model.attention_flops_per_token() / model.num_hidden_layers
    attn = tokens * per_layer_attn * len(layers) / tp
    forward = (2.0 * active * tokens / tp) + attn
    expert_fwd = 2.0 * model.num_experts_per_tok * model.expert_parameters * tokens / tp
    return StageShape(stage, len(layers), moe, first, last, dense, experts, largest,
                      forward, attn, expert_fwd if moe else 0.0)


# -- the inventory ------------------------------------------------------------------------------

def _add(rows, cluster, grid, stage, stage_ranks, m, straggler, group, **entry):
    """Append one costed entry per distinct shape of ``group`` on this stage, keeping the
    slowest (SPMD: the step waits for every group); the straggler's own group is costed with
    its slow link. ``m``: micro-batches per step."""
    shapes = grid.stage_shapes(group, stage)
    candidates = [(shape, None) for shape in shapes]
    if straggler is not None and straggler.rank in set(map(int, stage_ranks)):
        members = grid.group(group, straggler.rank)
        if len(members) > 1:
            shape = grid.shape_of(members)
            candidates.append((shape, members.index(straggler.rank)))
    best = None
    for shape, index in candidates:
        if shape.size < 2:
            continue
        e = costed(Entry(group=group, shape=shape, **entry), cluster, straggler, index)
        if best is None or e.seconds_per_call > best.seconds_per_call:
            best = e
    if best is not None:
        best.calls_per_micro_batch = best.calls_per_step // m if best.per_micro_batch else 0
        rows.append(best)


def inventory(model: ModelConfig, layout: Layout, cluster: Cluster, stage: int,
              grid: RankGrid | None = None, straggler: Straggler | None = None) -> list[Entry]:
    """Every collective PP stage ``stage``'s ranks run in one step, costed.

    Args:
        model, layout, cluster: checked beforehand (:meth:`Layout.check`).
        stage: 0 … pp-1.
        grid: the rank grid (built when not given).
        straggler: one slow link, or None.
    Returns:
        a list of :class:`Entry`, in the step's order (forward, backward, per step).
    """
    grid = grid or rank_grid(layout, cluster.gpus_per_node, cluster.nics_per_node)
    st = stage_shape(model, layout, stage)
    ranks = grid.ranks_of_stage(stage)
    m, B = layout.num_micro_batches, model.dtype_bytes
    tokens = layout.micro_batch_size * model.seq_length / layout.cp
    act = tokens * model.hidden_size * B                 # one layer's output on a TP group
    rows: list[Entry] = []
    add = lambda group, **e: _add(rows, cluster, grid, stage, ranks, m, straggler,  # noqa
                                  group, **e)

    # -- tensor parallelism: 2 per layer forward, 2 backward (+2 with full recompute)
    if layout.tp > 1:
        fwd, bwd = 2 * st.layers, 2 * st.layers * (2 if layout.recompute == "full" else 1)
        if st.first:
            fwd += 1  # the vocab-parallel embedding's output
        if st.last and layout.sp:
            fwd += 1  # the LM head's input gathered from the sequence shards
        if layout.sp:
            for phase, calls in (("forward", fwd), ("backward", bwd)):
                add("tp", parallelism="sp", collective="all_gather", phase=phase,
                    what="activations (sequence shards -> full)", nbytes=act,
                    calls_per_step=calls * m)
                add("tp", parallelism="sp", collective="reduce_scatter", phase=phase,
                    what="partial activations (full -> sequence shards)", nbytes=act,
                    calls_per_step=calls * m)
        else:
            add("tp", parallelism="tp", collective="all_reduce", phase="forward",
                what="attention and MLP outputs", nbytes=act, calls_per_step=fwd * m)
            add("tp", parallelism="tp", collective="all_reduce", phase="backward",
                what="input gradients of the column-parallel matmuls", nbytes=act,
                calls_per_step=bwd * m)

    # -- context parallelism: K/V blocks around the cp ring, per layer
    if layout.cp > 1:
        if model.mla:
            kv = tokens * (model.kv_lora_rank + model.qk_rope_head_dim) * B
        else:
            kv = 2 * tokens * model.num_key_value_heads / layout.tp * model.head_dim * B
        fwd = st.layers * (2 if layout.recompute == "full" else 1)
        add("cp", parallelism="cp", collective="all_gather", phase="forward",
            what="K/V blocks (ring attention)", nbytes=kv * layout.cp,
            calls_per_step=fwd * m, overlap="attention", chunks=layout.cp)
        add("cp", parallelism="cp", collective="reduce_scatter", phase="backward",
            what="K/V gradients", nbytes=kv * layout.cp, calls_per_step=st.layers * m,
            overlap="attention", chunks=layout.cp)

    # -- experts: dispatch + combine per MoE layer, each way
    if model.moe and layout.ep > 1 and st.moe_layers:
        a2a = (layout.micro_batch_size * model.seq_length / (layout.cp * layout.tp)
               * model.num_experts_per_tok * model.hidden_size * B * layout.capacity_factor)
        repeat = 2 if layout.recompute == "full" else 1
        for phase, calls in (("forward", 2 * st.moe_layers),
                             ("backward", 2 * st.moe_layers * repeat)):
            add("ep", parallelism="ep", collective="all_to_all", phase=phase,
                what="routed tokens (dispatch, combine)", nbytes=a2a, calls_per_step=calls * m,
                overlap="expert compute", chunks=4)

    # -- pipeline: activations forward, gradients backward, per model chunk
    if layout.pp > 1:
        v = layout.virtual_stages
        sends = v - (1 if st.last else 0)    # the last chunk of the last stage ends the model
        recvs = v - (1 if st.first else 0)
        p2p = act / layout.tp                # scatter/gather optimisation (§4.1), or SP's shard
        calls = (sends + recvs) * m
        rank = int(ranks[0])
        peers = grid.group("pp", rank)
        nxt = peers[(peers.index(rank) + 1) % len(peers)] if sends else peers[
            peers.index(rank) - 1]
        pair = grid.shape_of(sorted((rank, nxt)))
        e = costed(Entry(parallelism="pp", collective="send_recv", phase="forward",
                         what="activations to the next stage, gradients back", group="pp",
                         shape=pair, nbytes=p2p, calls_per_step=calls), cluster)
        e.calls_per_micro_batch = calls // m
        rows.append(e)
        if layout.tp > 1 and not layout.sp:
            add("tp", parallelism="pp", collective="all_gather", phase="forward",
                what="received activation shards (scatter/gather)", nbytes=act,
                calls_per_step=calls)

    # -- data parallelism: gradients (dense over dp·cp, experts over dp·cp/ep)
    grad_parts = [("dp", st.dense_parameters, "dense")]
    if st.expert_parameters:
        grad_parts.append(("edp", st.expert_parameters, "expert"))
    for group, params, label in grad_parts:
        size = layout.dp * layout.cp // (layout.ep if group == "edp" else 1)
        if size < 2:
            continue
        grads = params * B
        buckets = max(1, int(np.ceil(grads / layout.bucket_bytes)))
        bucket = grads / buckets
        z = layout.zero_stage
        if z == 0:
            add(group, parallelism="dp", collective="all_reduce", phase="step",
                what=f"{label} gradients (DDP buckets)", nbytes=bucket, calls_per_step=buckets,
                overlap="backward", chunks=buckets, per_micro_batch=False)
        elif z in (1, 2):
            per = m if z == 2 else 1
            add(group, parallelism="zero", collective="reduce_scatter",
                phase="backward" if z == 2 else "step",
                what=f"{label} gradients to their shard owners", nbytes=bucket,
                calls_per_step=buckets * per, overlap="backward", chunks=buckets,
                per_micro_batch=z == 2)
            add(group, parallelism="zero", collective="all_gather", phase="step",
                what=f"updated {label} parameters", nbytes=bucket, calls_per_step=buckets,
                overlap="forward", chunks=buckets, per_micro_batch=False)
        else:
            units_ = max(st.layers, 1)
            per_layer = grads / units_
            for phase, what in (("forward", "weights before each layer's forward"),
                                ("backward", "weights again for each layer's backward")):
                add(group, parallelism="zero", collective="all_gather", phase=phase,
                    what=f"{label} {what}", nbytes=per_layer, calls_per_step=units_ * m,
                    overlap=phase, chunks=units_)
            add(group, parallelism="zero", collective="reduce_scatter", phase="backward",
                what=f"{label} gradients of each layer", nbytes=per_layer,
                calls_per_step=units_ * m, overlap="backward", chunks=units_)

    # -- the tied embedding shared by the first and the last stage
    if model.tie_word_embeddings and layout.pp > 1 and (st.first or st.last):
        add("embedding", parallelism="embedding", collective="all_reduce", phase="step",
            what="tied embedding gradient (first + last stage)",
            nbytes=model.vocab_size * model.hidden_size / layout.tp * B, calls_per_step=1,
            per_micro_batch=False)
    return rows
