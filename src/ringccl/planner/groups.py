"""The rank grid: each parallel group's global ranks, and the nodes they land on.

Rank ``r`` has one coordinate per dimension of the layout's order, the first dimension varying
fastest (Megatron-Core's ``RankGenerator``): with ``"tp-cp-ep-dp-pp"``,
``r = tp_i + tp·(cp_i + cp·(ep_i + ep·(dp_i + (dp/ep)·pp_i)))`` where the order's ``dp`` is the
expert-data-parallel part (``dp / ep`` ranks) of the data-parallel dimension. Ranks sit on GPUs
node-major: rank r is GPU ``r % gpus_per_node`` of node ``r // gpus_per_node`` (torchrun's
default), so each group's size, ranks per node and nodes spanned follow from the order.

Group kinds (who communicates with whom):

========== =========================== ============================================
kind        varies                      carries
========== =========================== ============================================
tp          tp                          Megatron TP all-reduces / SP gathers
cp          cp                          context parallelism's K/V exchange
ep          ep                          MoE token all-to-all
dp          cp, ep, dp                  dense gradients (dp·cp ranks hold the same weights)
edp         cp, dp                      expert gradients (dp·cp/ep ranks per expert)
pp          pp                          point-to-point activations between stages
embedding   pp ∈ {0, pp-1}              tied embedding gradient (first + last stage)
========== =========================== ============================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..caches import memoize
from ..errors import ArgumentError
from .parallel_dims import ParallelDims

__all__ = ["RankGrid", "GroupShape", "GROUP_KINDS", "rank_grid"]

#: the dimensions each group kind varies
GROUP_KINDS = {"tp": ("tp",), "cp": ("cp",), "ep": ("ep",), "dp": ("cp", "ep", "dp"),
               "edp": ("cp", "dp"), "pp": ("pp",), "embedding": ("pp",)}


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
    cluster's nodes.

    Args:
        dims: the parallel dimensions (only the degrees and the rank order are read).
        gpus_per_node, nics_per_node: the node's shape.
    """

    def __init__(self, dims: ParallelDims, gpus_per_node: int, nics_per_node: int | None = None):
        self.dims = dims
        self.gpus_per_node = gpus_per_node
        self.nics_per_node = nics_per_node or gpus_per_node
        self.world_size = dims.world_size
        sizes = {"tp": dims.tp, "cp": dims.cp, "ep": dims.ep, "dp": dims.dp // dims.ep,
                 "pp": dims.pp}
        self.sizes = sizes
        ranks = np.arange(self.world_size, dtype=np.int64)
        self.stride: dict[str, int] = {}
        self.coord: dict[str, np.ndarray] = {}
        stride = 1
        for dim in dims.dims:
            self.stride[dim] = stride
            self.coord[dim] = (ranks // stride) % sizes[dim]
            stride *= sizes[dim]
        self._stage_shapes: dict[tuple[str, int], list[GroupShape]] = {}

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
        members = np.nonzero(gid == gid[rank])[0]
        if kind == "embedding":
            pp = self.coord["pp"][members]
            members = members[(pp == 0) | (pp == self.dims.pp - 1)]
        return tuple(int(r) for r in members)

    def shapes(self, kind: str, ranks: np.ndarray | None = None) -> list[GroupShape]:
        """The distinct shapes of the groups of ``kind`` containing any of ``ranks`` (default:
        all), the largest span first."""
        gid = self._group_ids(kind)
        ids = np.unique(gid if ranks is None else gid[np.asarray(ranks)])
        seen: dict[tuple, GroupShape] = {}
        for g in ids:
            members = np.nonzero(gid == g)[0]
            if kind == "embedding":
                pp = self.coord["pp"][members]
                members = members[(pp == 0) | (pp == self.dims.pp - 1)]
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
def _grid(dp: int, tp: int, pp: int, cp: int, ep: int, order: str, gpus_per_node: int,
          nics_per_node: int | None) -> RankGrid:
    return RankGrid(ParallelDims(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, order=order),
                    gpus_per_node, nics_per_node)


def rank_grid(dims: ParallelDims, gpus_per_node: int,
              nics_per_node: int | None = None) -> RankGrid:
    """The :class:`RankGrid` of ``dims``' group sizes and order, memoized: layouts that
    differ only in batch, ZeRO stage, schedule or recompute share one grid and its shapes.
    Its ``dims`` are canonical ones with those sizes (one micro-batch): take the batch from
    your own."""
    return _grid(dims.dp, dims.tp, dims.pp, dims.cp, dims.ep, dims.order, gpus_per_node,
                 nics_per_node)
