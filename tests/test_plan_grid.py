"""The rank grid's group shapes on large worlds: the same shapes as measuring every group one by
one, while measuring one group of each class of groups that are the same ranks moved by whole
nodes (so a million ranks plan in about a second)."""

from __future__ import annotations

import numpy as np
import pytest

from ringccl.planner.groups import GROUP_KINDS, RankGrid
from ringccl.planner.parallel_dims import ParallelDims


def _reference_sharing(members: list[int], local: int, nics: int) -> int:
    """How many groups share the busiest NIC, node by node (the definition, unvectorized)."""
    nodes = sorted({r // local for r in members})
    if len(nodes) == 1:
        return 1
    sharing = 1
    for node in nodes:
        used = {}
        for r in members:
            if r // local == node:
                rail = (r % local) * nics // local
                used[rail] = used.get(rail, 0) + 1
        sharing = max(sharing, -(-(local // nics) // min(used.values())))
    return sharing


def _reference_shapes(grid: RankGrid, kind: str, stage: int) -> list:
    """Every group of ``kind`` touching ``stage``, measured one by one; the first group (by its
    lowest rank) of each placement is its example."""
    whole = "pp" if kind in ("embedding", "pp_mirror") else kind  # the group before the filter
    seen = {}
    for rank in grid.ranks_of_stage(stage).tolist():
        members = grid.group(kind, rank)
        shape = grid.shape_of(members)
        assert shape.nic_sharing == _reference_sharing(list(members), grid.gpus_per_node,
                                                       grid.nics_per_node)
        seen.setdefault((min(grid.group(whole, rank)), shape.placement), shape)
    first = {}
    for (_, placement), shape in sorted(seen.items()):
        first.setdefault(placement, shape)
    return sorted(first.values(), key=lambda s: (-s.nodes_spanned, -s.nic_sharing, s.placement))


@pytest.mark.parametrize("layout, gpus_per_node, nics", [
    (dict(dp=4, tp=2, pp=3), 4, 2),
    (dict(dp=2, tp=4, pp=2, cp=2, ep=2), 8, 8),
    (dict(dp=8, tp=1, pp=2, ep=4, order="dp-tp-cp-ep-pp"), 3, 1),
    (dict(dp=4, tp=2, pp=4, cp=2, cp_comm_type="a2a+p2p",
          hierarchical_context_parallel_sizes=(2, 1)), 8, 4),
])
def test_shapes_are_those_of_measuring_every_group(layout, gpus_per_node, nics):
    grid = RankGrid(ParallelDims(**layout, zero_stage=0), gpus_per_node, nics)
    for kind in GROUP_KINDS:
        for stage in range(grid.dims.pp):
            got = grid.shapes(kind, grid.ranks_of_stage(stage))
            assert got == _reference_shapes(grid, kind, stage), (kind, stage)


def test_a_large_grid_measures_one_group_of_each_class(monkeypatch):
    """4,096 tensor-parallel groups of 8 ranks, one per node: one shape, measured once; 8
    data-parallel groups across the 4,096 nodes, one per GPU index: 8 shapes."""
    grid = RankGrid(ParallelDims(dp=4096, tp=8, zero_stage=0), 8, 8)
    measured = []
    shape_of = RankGrid.shape_of
    monkeypatch.setattr(RankGrid, "shape_of",
                        lambda self, members: measured.append(len(members))
                        or shape_of(self, members))
    (tp,) = grid.shapes("tp", grid.ranks_of_stage(0))
    assert (tp.size, tp.nodes_spanned, tp.example) == (8, 1, tuple(range(8)))
    dp = grid.shapes("dp", grid.ranks_of_stage(0))
    assert [(s.size, s.nodes_spanned, s.ranks_per_node, s.nic_sharing) for s in dp] == \
        [(4096, 4096, 1, 1)] * 8
    assert [s.example[:2] for s in dp] == [(i, 8 + i) for i in range(8)]
    assert measured == [8] + [4096] * 8


def test_a_group_and_a_stage_are_their_ranks_without_a_pass_over_the_world():
    grid = RankGrid(ParallelDims(dp=2, tp=2, pp=3, zero_stage=0), 4, 4)
    assert grid.group("tp", 5) == (4, 5)
    assert grid.group("dp", 5) == (5, 7)
    assert grid.group("pp", 5) == (1, 5, 9)
    assert grid.group("embedding", 5) == (1, 9)
    assert grid.group("pp_mirror", 5) == (5,)
    assert np.array_equal(grid.ranks_of_stage(1), np.arange(4, 8))
    assert np.array_equal(grid.coordinate("pp", np.arange(12)), np.repeat([0, 1, 2], 4))
    with pytest.raises(Exception, match=r"rank=12 is out of range for world_size=12"):
        grid.group("tp", 12)
