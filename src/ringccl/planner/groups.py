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

from ..args import check_rank
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
        self.sizes = {"tp": dims.tp, "cp": dims.cp, "dp": dims.dp, "pp": dims.pp,
                      "etp": dims.expert_tp, "ep": dims.ep, "edp": dims.expert_dp}
        # a rank's coordinates come from its strides (coordinate()): a grid keeps no per-rank
        # arrays (a search holds many grids)
        self.stride: dict[str, int] = {}
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

    def coordinate(self, name: str, ranks) -> np.ndarray:
        """The coordinates of the global ``ranks`` along dimension ``name`` (a split part such
        as ``cp_a2a`` too: its stride and size make it one more digit of the rank)."""
        return (np.asarray(ranks, dtype=np.int64) // self.stride[name]) % self.sizes[name]

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
        # each run of pp x stride ranks holds stage s at [s x stride, (s + 1) x stride)
        inner = self.stride["pp"]
        outer = np.arange(self.world_size // (inner * self.dims.pp), dtype=np.int64)
        return (outer[:, None] * inner * self.dims.pp + stage * inner
                + np.arange(inner, dtype=np.int64)).ravel()

    def _group_ids(self, kind: str) -> np.ndarray:
        """Per rank, the lowest rank of its group of ``kind`` (the group's id)."""
        ranks = np.arange(self.world_size, dtype=np.int64)
        gid = ranks.copy()
        for dim in GROUP_KINDS[kind]:
            gid -= self.coordinate(dim, ranks) * self.stride[dim]
        return gid

    def group(self, kind: str, rank: int) -> tuple[int, ...]:
        """Global ranks (ascending) of ``rank``'s group of ``kind``.

        The embedding group is the first and the last stage's rank with the same other
        coordinates (one rank when pp = 1).
        """
        if kind not in GROUP_KINDS:
            raise ArgumentError(f"group kind={kind!r} is unknown; expected one of "
                                f"{', '.join(GROUP_KINDS)}")
        check_rank(rank, self.world_size, "rank")
        return tuple(self._pp_filter(kind, self._members(kind, rank), rank).tolist())

    def _members(self, kind: str, rank: int) -> np.ndarray:
        """The ranks (ascending) of ``rank``'s group of ``kind``: its lowest rank plus every
        combination of the varied coordinates (linear in the group's size)."""
        varied = GROUP_KINDS[kind]
        members = np.array([rank - sum(int(self.coordinate(d, rank)) * self.stride[d]
                                       for d in varied)], dtype=np.int64)
        for d in varied:
            step = np.arange(self.sizes[d], dtype=np.int64) * self.stride[d]
            members = (members[:, None] + step).ravel()
        return np.sort(members)

    def _pp_filter(self, kind: str, members: np.ndarray, rank: int) -> np.ndarray:
        """The embedding group: the first and the last stage; DualPipe's mirror: stages s and
        pp − 1 − s of ``rank``'s stage s."""
        if kind not in ("embedding", "pp_mirror"):
            return members
        pp, last = self.coordinate("pp", members), self.dims.pp - 1
        if kind == "embedding":
            return members[(pp == 0) | (pp == last)]
        s = int(self.coordinate("pp", rank))
        return members[(pp == s) | (pp == last - s)]

    def shapes(self, kind: str, ranks: np.ndarray | None = None) -> list[GroupShape]:
        """The distinct shapes of the groups of ``kind`` containing any of ``ranks`` (default:
        all), the largest span first; of groups with one placement, the lowest-numbered is the
        example.

        Every group's ranks come from one sort of the group ids (linear in the world size);
        groups that are the same ranks moved by whole nodes share a shape, so only one group of
        each such class is measured: a grid of a million ranks takes a fraction of a second."""
        gid = self._group_ids(kind)
        size = int(np.prod([self.sizes[d] for d in GROUP_KINDS[kind]]))
        rows = np.argsort(gid, kind="stable").reshape(-1, size)  # a group's ranks, ascending
        if ranks is not None:
            rows = rows[np.isin(gid[rows[:, 0]], gid[np.asarray(ranks)])]
        seen: dict[tuple, GroupShape] = {}
        for _, members in sorted(self._representatives(kind, rows, ranks), key=lambda r: r[0]):
            shape = self.shape_of(members)
            seen.setdefault(shape.placement, shape)
        return sorted(seen.values(), key=lambda s: (-s.nodes_spanned, -s.nic_sharing,
                                                     s.placement))

    def _representatives(self, kind: str, rows: np.ndarray, ranks) -> list:
        """(row, ranks) of the first group (row of ``rows``) of each class of groups that are
        the same ranks moved by whole nodes; the embedding and mirror groups keep the ranks of
        their two stages (:meth:`_pp_filter`)."""
        blocks = [(np.arange(len(rows)), rows)]
        if kind in ("embedding", "pp_mirror"):
            # a PP group's ranks ascend with the stage: column s is stage s
            last = self.dims.pp - 1
            if kind == "embedding" or ranks is None:
                stage = np.zeros(len(rows), dtype=np.int64)
            else:
                inside = np.isin(rows, np.asarray(ranks))
                stage = self.coordinate("pp", rows[np.arange(len(rows)), inside.argmax(axis=1)])
            blocks = [(np.nonzero(stage == s)[0],
                       rows[stage == s][:, sorted({int(s), int(last - s)})])
                      for s in np.unique(stage)]
        out = []
        for index, members in blocks:
            if not len(members):
                continue
            key = members - (members[:, :1] // self.gpus_per_node) * self.gpus_per_node
            # each row's bytes as one value: one sort, however wide the groups
            key = np.ascontiguousarray(key)
            rows_as_bytes = key.view(np.dtype((np.void, key.itemsize * key.shape[1]))).ravel()
            _, first = np.unique(rows_as_bytes, return_index=True)
            out.extend((int(index[i]), members[i]) for i in first)
        return out

    def shape_of(self, members) -> GroupShape:
        """The :class:`GroupShape` of the global ranks ``members`` (ascending)."""
        members = np.sort(np.asarray(members, dtype=np.int64))
        local = self.gpus_per_node
        node, local_index = members // local, members % local
        # ascending ranks: nodes appear in ascending order, the k-th distinct one is node k
        nodes, relabel = np.unique(node, return_inverse=True)
        shared = _ints(self.world_size + local).__getitem__
        placement = tuple(map(shared, (relabel * local + local_index).tolist()))
        per_node = np.bincount(relabel)
        # SPMD: every GPU of a node is in some group of this kind, all communicating at once;
        # a NIC serves local/nics rails-worth of GPUs, of which this group owns only some
        nics = self.nics_per_node
        rail = local_index * nics // local
        sharing = 1
        if len(nodes) > 1:
            gpus_per_nic = local // nics
            mine = np.bincount(relabel * nics + rail, minlength=len(nodes) * nics)
            mine = mine.reshape(len(nodes), nics)
            fewest = np.where(mine > 0, mine, np.iinfo(np.int64).max).min(axis=1)
            sharing = max(sharing, int((-(-gpus_per_nic // fewest)).max()))
        return GroupShape(size=int(members.size), ranks_per_node=int(per_node.max()),
                          nodes_spanned=int(len(nodes)), placement=placement,
                          nic_sharing=sharing, example=tuple(map(shared, members.tolist())),
                          _local=local)


@memoize(maxsize=4)
def _ints(n: int) -> list[int]:
    """The ints 0 .. n - 1, one object each, which every placement and example of a world
    size shares: a group of a million ranks then costs its tuples 8 MB each, not 40."""
    return list(range(n))


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
