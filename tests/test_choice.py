"""The one algorithm chooser (ringccl.costmodel.choice): each transport's choice per size, stated
as a table, and every front end asking it.

The crossovers are measured figures (their runs are in choice.TWO_SHOT_BYTES's comment); this
file states what they make the chooser do, so that a changed table shows up here as a changed
choice at a named size, not only as a changed number.
"""

from __future__ import annotations

import pytest

from ringccl.algorithms.registry import DEFAULTS
from ringccl.collectives import COLLECTIVES
from ringccl.costmodel import choice
from ringccl.errors import ArgumentError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [0, 1, 4 * KiB, 64 * KiB, 128 * KiB, 256 * KiB, 512 * KiB, 1 * MiB, 16 * MiB, 1 * GiB]

#: all_reduce over shared memory: (backend, world_size) -> the smallest size running two_shot
#: (below it direct); world sizes between or above the measured ones use the largest measured
#: one not above them, below the smallest the smallest's
TWO_SHOT_FROM = {
    ("torch", 2): 256 * KiB, ("torch", 3): 256 * KiB, ("torch", 4): 512 * KiB,
    ("torch", 8): 512 * KiB, ("mpi", 2): 128 * KiB, ("mpi", 3): 128 * KiB,
    ("mpi", 4): 256 * KiB, ("mpi", 16): 256 * KiB,
}


@pytest.mark.parametrize("backend, world_size", sorted(TWO_SHOT_FROM))
@pytest.mark.parametrize("nbytes", SIZES)
def test_shm_all_reduce_is_one_shot_below_the_crossover_and_two_shot_from_it(
        backend, world_size, nbytes):
    expected = "two_shot" if nbytes >= TWO_SHOT_FROM[backend, world_size] else "direct"
    got = choice.choose("all_reduce", world_size, nbytes, "shm", backend=backend)
    assert got == (expected, {}, False)


@pytest.mark.parametrize("backend", choice.BACKENDS)
@pytest.mark.parametrize("collective", [c for c in COLLECTIVES if c != "all_reduce"])
def test_shm_runs_direct_for_every_other_collective_at_every_size(backend, collective):
    for world_size in (2, 3, 4, 8):
        for nbytes in SIZES:
            assert choice.choose(collective, world_size, nbytes, "shm",
                                 backend=backend).algorithm == "direct"


def test_one_rank_over_shm_is_direct():
    assert choice.choose("all_reduce", 1, 1 * GiB, "shm").algorithm == "direct"


@pytest.mark.parametrize("backend", choice.BACKENDS)
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_p2p_runs_the_registry_default_at_every_size(backend, collective):
    for world_size in (1, 2, 4, 7):
        for nbytes in SIZES:
            got = choice.choose(collective, world_size, nbytes, "p2p", backend=backend)
            assert got == (DEFAULTS[collective], {}, False)


#: the hybrid transport: (world_size, local_size) -> what the model picks at every size of
#: SIZES for all_reduce, reduce_scatter and all_gather (the argmin of the registry's ring and
#: the two-level schedule on hosts joined by gloo's fitted link: the inter-host steps of a ring
#: cost 1.51 ms each, the two-level schedule crosses hosts in its middle phase only)
HYBRID = {(4, 2): "hierarchical", (6, 2): "hierarchical", (6, 3): "hierarchical",
          (8, 2): "hierarchical", (8, 4): "hierarchical", (16, 4): "hierarchical"}


@pytest.mark.parametrize("world_size, local_size", sorted(HYBRID))
@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "all_gather"])
def test_hybrid_two_level_choice_per_size(world_size, local_size, collective):
    for nbytes in SIZES:
        got = choice.choose(collective, world_size, nbytes, "hybrid", local_size=local_size)
        assert got.algorithm == HYBRID[world_size, local_size], nbytes
        assert got.params == {"local_size": local_size}


def test_hybrid_without_two_level_layout_or_schedule_runs_the_default():
    # hosts of unequal blocks (no local_size), one rank per host, one host: no two-level choice
    for local_size in (None, 1, 4):
        assert choice.choose("all_reduce", 4, 1 * MiB, "hybrid",
                             local_size=local_size) == ("ring", {}, False)
    # a collective with no two-level schedule
    assert choice.choose("broadcast", 4, 1 * MiB, "hybrid", local_size=2) == ("ring", {}, False)


def test_the_choice_does_not_hand_out_its_cached_parameters():
    first = choice.choose("all_reduce", 4, 1 * MiB, "hybrid", local_size=2)
    first.params["local_size"] = 99
    assert choice.choose("all_reduce", 4, 1 * MiB, "hybrid", local_size=2).params == \
        {"local_size": 2}


def test_ringccl_algo_forces_the_backend_only(monkeypatch):
    monkeypatch.setenv("RINGCCL_ALGO", "all_reduce:recursive_doubling, broadcast:tree")
    forced = choice.choose("all_reduce", 4, 4 * KiB, "shm", honour_env=True)
    assert forced == ("recursive_doubling", {}, True)
    assert choice.choose("broadcast", 4, 4 * KiB, "p2p", honour_env=True).forced
    # not named: the transport's choice; the library's functions do not read it
    assert choice.choose("all_gather", 4, 4 * KiB, "shm", honour_env=True) == \
        ("direct", {}, False)
    assert choice.choose("all_reduce", 4, 4 * KiB, "shm") == ("direct", {}, False)
    monkeypatch.setenv("RINGCCL_ALGO", "all_reduce:hierarchical")
    assert choice.choose("all_reduce", 4, 4 * KiB, "hybrid", local_size=2,
                         honour_env=True) == ("hierarchical", {"local_size": 2}, True)


@pytest.mark.parametrize("value, named", [
    ("all_reduce", "must be collective:algorithm"),
    ("allreduce:ring", "unknown collective 'allreduce'"),
    ("all_reduce:nope", "all_reduce has no algorithm 'nope'"),
])
def test_malformed_ringccl_algo_is_refused_by_entry(monkeypatch, value, named):
    monkeypatch.setenv("RINGCCL_ALGO", value)
    with pytest.raises(ArgumentError, match=named):
        choice.choose("all_reduce", 2, 1, "p2p", honour_env=True)


def test_bad_transport_or_backend_is_named():
    with pytest.raises(ArgumentError, match="transport='tcp'"):
        choice.choose("all_reduce", 2, 1, "tcp")
    with pytest.raises(ArgumentError, match="backend='nccl'"):
        choice.choose("all_reduce", 2, 1, "shm", backend="nccl")


def _opts(transport):
    from ringccl.frontend import Options
    return Options(None, None, None, None, transport)


def test_ringccl_mpi_asks_the_chooser_with_its_own_crossovers():
    import numpy as np

    from ringccl.backends.mpi.collectives import _Numpy   # no mpi4py needed to choose
    f32 = np.dtype(np.float32)
    for world_size in (2, 4):
        for nbytes in SIZES:
            for transport in ("shm", "p2p"):
                assert _Numpy.choose("all_reduce", world_size, nbytes // 4, f32,
                                     _opts(transport)) == choice.choose(
                    "all_reduce", world_size, nbytes // 4 * 4, transport,
                    backend="mpi").algorithm
    assert _Numpy.choose("all_reduce", 2, 128 * KiB // 4, f32, _opts("shm")) == "two_shot"


def test_ringccl_torch_asks_the_chooser():
    torch = pytest.importorskip("torch")
    from ringccl.backends.torch.collectives import _Torch
    for world_size in (2, 4):
        for nbytes in SIZES:
            for transport in ("shm", "p2p"):
                assert _Torch.choose("all_reduce", world_size, nbytes // 4, torch.float32,
                                     _opts(transport)) == choice.choose(
                    "all_reduce", world_size, nbytes // 4 * 4, transport).algorithm
    # the same size runs two_shot on MPI and direct on torch: each backend's own crossover
    assert _Torch.choose("all_reduce", 2, 128 * KiB // 4, torch.float32, _opts("shm")) == \
        "direct"
