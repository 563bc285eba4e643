"""The rank grid: each parallel group's global ranks, and the nodes they land on.

Two grids cover the same ranks (Megatron-Core's MoE parallel folding, Liu et al. 2025,
"MoE Parallel Folding", arXiv:2504.14960; ``parallel_state``'s dense and expert
``RankGenerator``s). The dense grid has the dimensions tp, cp, dp, pp; the expert grid etp, ep,
edp (expert data parallelism), pp, with ``tp·cp·dp = etp·ep·edp``: the expert grid is laid over
the tp·cp·dp ranks of each pipeline stage, so ep need not divide dp. Both read the layout's one
rank order, the first dimension varying fastest (Megatron's ``--order``, default
``"tp-cp-ep-dp-pp"``): the dense grid skips ep, the expert grid skips cp and reads tp as etp and
dp as edp. With ``"tp-cp-ep-dp-pp"``, ``r = tp_i + tp·(cp_i + cp·(dp_i + dp·pp_i))`` and
``r = etp_i + etp·(ep_i + ep·(edp_i + edp·pp_i))``. Ranks sit on GPUs node-major: rank r is GPU
``r % gpus_per_node`` of node ``r // gpus_per_node`` (torchrun's default), so each group's size,
ranks per node and nodes spanned follow from the order.

Some dimensions split in two, the first part varying fastest: cp into the Ulysses all-to-all
part and the ring part (Megatron's ``hierarchical_context_parallel_sizes``, a2a+p2p), dp into
the sharding part and the replicas (torchtitan's ``dp_shard`` x ``dp_replicate``, HSDP), ep into
the ranks of one node and the nodes (the two hops of a node-limited dispatch).

Group kinds (who communicates with whom):

============= =========================== ===============================================
kind           varies                      carries
============= =========================== ===============================================
tp             tp                          Megatron TP all-reduces / SP gathers
cp             cp                          context parallelism's K/V exchange
cp_a2a         cp (inner a2a part)         Ulysses all-to-alls (a2a+p2p)
cp_p2p         cp (outer ring part)        ring attention's K/V (a2a+p2p)
dp             cp, dp                      dense gradients (dp·cp ranks hold the same weights)
dp_shard       cp, dp (inner shard part)   ZeRO / FSDP sharding (torchtitan's dp_shard_cp)
dp_replicate   dp (outer replica part)     HSDP: the shards' all-reduce across replicas
ep             ep                          MoE token all-to-all
ep_intra       ep (ranks of one node)      a dispatch's NVLink hop
ep_inter       ep (one rank per node)      a dispatch's NIC hop (same local GPU index)
etp            etp                         expert tensor parallelism
edp            edp                         expert gradients (tp·cp·dp/(etp·ep) ranks)
pp             pp                          point-to-point activations between stages
embedding      pp ∈ {0, pp-1}              tied embedding gradient (first + last stage)
pp_mirror      pp ∈ {s, pp-1-s}            DualPipe: the two ranks holding the same stages
============= =========================== ===============================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..caches import memoize
from ..errors import ArgumentError
from .parallel_dims import ParallelDims

__all__ = ["RankGrid", "GroupShape", "GROUP_KINDS", "GRID_FIELDS", "rank_grid"]

#: the coordinates each group kind varies
GROUP_KINDS = {"tp": ("tp",), "cp": ("cp",), "cp_a2a": ("cp_a2a",), "cp_p2p": ("cp_p2p",),
               "dp": ("cp", "dp"), "dp_shard": ("cp", "dp_shard"),
               "dp_replicate": ("dp_replicate",), "ep": ("ep",), "ep_intra": ("ep_intra",),
               "ep_inter": ("ep_inter",), "etp": ("etp",), "edp": ("edp",), "pp": ("pp",),
               "embedding": ("pp",), "pp_mirror": ("pp",)}
#: the ParallelDims fields the grid reads
GRID_FIELDS = ("dp", "tp", "pp", "cp", "ep", "etp", "order", "cp_comm_type",
               "hierarchical_context_parallel_sizes", "dp_shard")


@dataclass(frozen=True)
class GroupShape:
    """Where one group's ranks sit.

    Attributes:
        size: ranks in the group.
        ranks_per_node: the most ranks of the group on one node.
        nodes_spanned: distinct nodes.
        placement: the group's ranks (ascending global rank, the communicator's order) as
            devices of a machine of ``nodes_spanned`` nodes, node ``k`` being the k-th distinct
            node met: ``node * gpus_per_node + local index``. Equal placements = same shape.
        nic_sharing: how many concurrent groups of this kind share the busiest NIC a rank of
            this group uses (1 where every rank of a node has its own rail NIC).
        example: the group's global ranks (one group of this shape).
    """

    size: int
    ranks_per_node: int
    nodes_spanned: int
    placement: tuple[int, ...]
    nic_sharing: int
    example: tuple[int, ...]

    @property
    def uniform(self) -> bool:
        """Equal ranks on every node and consecutive ranks on the same node (what the
        hierarchical all-reduce's ``local_size`` describes)."""
        return self.size == self.ranks_per_node * self.nodes_spanned and all(
            self.placement[i] // self._local == (i // self.ranks_per_node)
            for i in range(self.size))

    _local: int = 1

    def to_dict(self) -> dict:
        return {"size": self.size, "ranks_per_node": self.ranks_per_node,
                "nodes_spanned": self.nodes_spanned, "nic_sharing": self.nic_sharing,
                "example_ranks": list(self.example[:16])}


class RankGrid:
    """The ranks of a :class:`~ringccl.planner.parallel_dims.ParallelDims` laid out on the
    cluster's nodes (the dense and the expert grid, see the module docstring).

    Args:
        dims: the parallel dimensions (only the degrees, the splits and the rank order are
            read).
        gpus_per_node, nics_per_node: the node's shape.
    Raises:
        ArgumentError: a rank order that puts pp at a different stride in the dense and the
            expert grid (then a stage's dense and expert ranks would differ).
    """

    def __init__(self, dims: ParallelDims, gpus_per_node: int, nics_per_node: int | None = None):
        self.dims = dims
        self.gpus_per_node = gpus_per_node
        self.nics_per_node = nics_per_node or gpus_per_node
        self.world_size = dims.world_size
        ranks = np.arange(self.world_size, dtype=np.int64)
        self.sizes = {"tp": dims.tp, "cp": dims.cp, "dp": dims.dp, "pp": dims.pp,
                      "etp": dims.expert_tp, "ep": dims.ep, "edp": dims.expert_dp}
        self.stride: dict[str, int] = {}
        self.coord: dict[str, np.ndarray] = {}
        dense = {"tp": "tp", "cp": "cp", "dp": "dp", "pp": "pp"}
        expert = {"tp": "etp", "ep": "ep", "dp": "edp", "pp": "pp"}
        pp_stride = []
        for names in (dense, expert):
            stride = 1
            for dim in dims.dims:
                name = names.get(dim)
                if name is None:
                    continue
                if name == "pp":
                    pp_stride.append(stride)
                self.stride[name] = stride
                self.coord[name] = (ranks // stride) % self.sizes[name]
                stride *= self.sizes[name]
        if dims.pp > 1 and pp_stride[0] != pp_stride[1]:
            raise ArgumentError(
                f"order={dims.order!r} puts pp at stride {pp_stride[0]} among the dense ranks "
                f"(tp x cp x dp before it) and {pp_stride[1]} among the expert ranks (etp x ep x "
                "edp before it): a stage would hold different ranks in the two grids; put pp "
                "after tp, cp, ep and dp, or give etp = tp")
        a2a = dims.cp_a2a_size
        self._split("cp", a2a, "cp_a2a", "cp_p2p")
        self._split("dp", dims.dp_shard or dims.dp, "dp_shard", "dp_replicate")
        # the EP ranks of one node: consecutive EP coordinates sharing a node
        st = self.stride["ep"]
        local = min(dims.ep, max(1, gpus_per_node // st)) if gpus_per_node % st == 0 else 1
        while dims.ep % local:
            local -= 1
        self._split("ep", local, "ep_intra", "ep_inter")
        self._stage_shapes: dict[tuple[str, int], list[GroupShape]] = {}

    def _split(self, dim: str, inner: int, fast: str, slow: str) -> None:
        """Split dimension ``dim`` into ``fast`` (its first ``inner`` coordinates) and ``slow``."""
        self.sizes[fast], self.sizes[slow] = inner, self.sizes[dim] // inner
        self.stride[fast], self.stride[slow] = self.stride[dim], self.stride[dim] * inner
        self.coord[fast], self.coord[slow] = self.coord[dim] % inner, self.coord[dim] // inner

    def stage_offset(self, stage: int) -> int | None:
        """Global-rank offset that carries stage 0's ranks onto stage ``stage``'s, when it
        moves them by whole nodes (then every group of stage ``stage`` is stage 0's, shifted:
        the same placements, NIC sharing and shapes); None when it does not (a rank order that
        splits a node across stages)."""
        offset = stage * self.stride["pp"]
        return offset if offset % self.gpus_per_node == 0 else None

    def stage_shapes(self, kind: str, stage: int) -> list[GroupShape]:
        """:meth:`shapes` of the groups of ``kind`` containing PP stage ``stage``'s ranks,
        kept per grid (a layout search asks again for every layout on this grid)."""
        key = (kind, stage)
        if key not in self._stage_shapes:
            self._stage_shapes[key] = self.shapes(kind, self.ranks_of_stage(stage))
        return self._stage_shapes[key]

    def ranks_of_stage(self, stage: int) -> np.ndarray:
        """Global ranks of PP stage ``stage``."""
        if not 0 <= stage < self.dims.pp:
            raise ArgumentError(f"stage={stage} is out of range for pp={self.dims.pp}")
        return np.nonzero(self.coord["pp"] == stage)[0]

    def _group_ids(self, kind: str) -> np.ndarray:
        """Per rank, the lowest rank of its group of ``kind`` (the group's id)."""
        gid = np.arange(self.world_size, dtype=np.int64)
        for dim in GROUP_KINDS[kind]:
            gid = gid - self.coord[dim] * self.stride[dim]
        return gid

    def group(self, kind: str, rank: int) -> tuple[int, ...]:
        """Global ranks (ascending) of ``rank``'s group of ``kind``.

        The embedding group is the first and the last stage's rank with the same other
        coordinates (one rank when pp = 1).
        """
        if kind not in GROUP_KINDS:
            raise ArgumentError(f"group kind={kind!r} is unknown; expected one of "
                                f"{', '.join(GROUP_KINDS)}")
        gid = self._group_ids(kind)
        members = self._pp_filter(kind, np.nonzero(gid == gid[rank])[0], rank)
        return tuple(int(r) for r in members)

    def _pp_filter(self, kind: str, members: np.ndarray, rank: int) -> np.ndarray:
        """The embedding group: the first and the last stage; DualPipe's mirror: stages s and
        pp − 1 − s of ``rank``'s stage s."""
        if kind not in ("embedding", "pp_mirror"):
            return members
        pp, last = self.coord["pp"][members], self.dims.pp - 1
        if kind == "embedding":
            return members[(pp == 0) | (pp == last)]
        s = int(self.coord["pp"][rank])
        return members[(pp == s) | (pp == last - s)]

    def shapes(self, kind: str, ranks: np.ndarray | None = None) -> list[GroupShape]:
        """The distinct shapes of the groups of ``kind`` containing any of ``ranks`` (default:
        all), the largest span first."""
        gid = self._group_ids(kind)
        ids = np.unique(gid if ranks is None else gid[np.asarray(ranks)])
        seen: dict[tuple, GroupShape] = {}
        for g in ids:
            members = np.nonzero(gid == g)[0]
            if kind in ("embedding", "pp_mirror"):
                here = members if ranks is None else np.intersect1d(members, ranks)
                members = self._pp_filter(kind, members, int(here[0]))
            shape = self.shape_of(members)
            seen.setdefault(shape.placement, shape)
        return sorted(seen.values(), key=lambda s: (-s.nodes_spanned, -s.nic_sharing,
                                                     s.placement))

    def shape_of(self, members) -> GroupShape:
        """The :class:`GroupShape` of the global ranks ``members`` (ascending)."""
        members = np.sort(np.asarray(members, dtype=np.int64))
        local = self.gpus_per_node
        node, local_index = members // local, members % local
        _, first = np.unique(node, return_index=True)
        order = node[np.sort(first)]                       # nodes in order of appearance
        relabel = {int(n): k for k, n in enumerate(order)}
        placement = tuple(relabel[int(n)] * local + int(i) for n, i in zip(node, local_index))
        per_node = np.bincount(node - node.min())
        per_node = per_node[per_node > 0]
        # SPMD: every GPU of a node is in some group of this kind, all communicating at once;
        # a NIC serves local/nics rails-worth of GPUs, of which this group owns only some
        nics = self.nics_per_node
        rail = local_index * nics // local
        sharing = 1
        if len(order) > 1:
            gpus_per_nic = local // nics
            for n in np.unique(node):
                mine = np.bincount(rail[node == n], minlength=nics)
                used = mine[mine > 0]
                sharing = max(sharing, int(-(-gpus_per_nic // int(used.min()))))
        return GroupShape(size=int(members.size), ranks_per_node=int(per_node.max()),
                          nodes_spanned=int(len(order)), placement=placement,
                          nic_sharing=sharing, example=tuple(int(r) for r in members),
                          _local=local)


@memoize(maxsize=256)
def _grid(fields: tuple, gpus_per_node: int, nics_per_node: int | None) -> RankGrid:
    values = dict(fields)
    # the grid does not depend on the ZeRO stage; dp_shard is only accepted with one
    return RankGrid(ParallelDims(**values, zero_stage=3 if values["dp_shard"] else 0),
                    gpus_per_node, nics_per_node)


def rank_grid(dims: ParallelDims, gpus_per_node: int,
              nics_per_node: int | None = None) -> RankGrid:
    """The :class:`RankGrid` of ``dims``' group sizes, splits and order (:data:`GRID_FIELDS`),
    memoized: layouts that differ only in batch, schedule or recompute share one grid and its
    shapes. Its ``dims`` are canonical ones with those fields (one micro-batch): take the batch
    from your own."""
    fields = tuple((f, getattr(dims, f)) for f in GRID_FIELDS)
    return _grid(fields, gpus_per_node, nics_per_node)
