"""The aliasing contract on real processes (:mod:`ringccl.frontend.aliasing`): for every
collective × algorithm × transport and every form of input and output the API allows (separate
tensors, views with offsets and strides, NCCL's in-place forms), the output's defined elements
are the collective's result and nothing else of the memory the arguments live in changes; the
forms the API does not define (partial overlaps, another rank's block, another layout) are
refused on every rank before any data moves, naming both arguments.

One launch per API (each costs seconds here): ringccl.torch's functions over p2p, shm and hybrid
(two "hosts" on this machine, ``RINGCCL_HOST_ID``) drawn per example, and torch.distributed's
on the "ringccl" backend over shared memory and over gloo point-to-point. The MPI side is
tests/mpi/test_mpi.py's aliasing test; the simulator's is in tests/test_sim.py.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from ringccl.torch.launch import launch  # noqa: E402

from . import aliasing_workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]

NPROC = 3
EXAMPLES = 150


def body(rank, world_size, api, transports, examples):
    swept, example = aliasing_workers.sweep(rank, world_size, api, transports)
    runs, failures = aliasing_workers.contract(rank, world_size, api, transports, examples)
    return swept, example, runs, failures, aliasing_workers.refusals(rank, world_size, api)


def _check(results, transports, examples):
    for rank, (swept, example, runs, failures, refused) in enumerate(results):
        assert swept == [], (rank, swept[:5])
        assert runs == examples, rank
        assert failures == [], (rank, failures[:5])
        assert refused == [], (rank, refused)
    # the three-rank example: rank 0's input [1..6] ends [21, 24, 3, 4, 5, 6], whatever the
    # algorithm and transport (ring used to leave [21, 24, 18, 20, 5, 6], halving_doubling
    # [21, 24, 18, 20, 33, 36])
    example = results[0][1]
    algorithms = aliasing_workers.algorithms(NPROC)["reduce_scatter"]
    assert {t for _, t in example} == set(transports)
    assert {a for a, _ in example} == set(algorithms)
    assert all(v == [21.0, 24.0, 3.0, 4.0, 5.0, 6.0] for v in example.values()), example


def test_every_form_over_p2p_shm_and_hybrid(shm_dir):
    transports = ("p2p", "shm", "hybrid")
    results = launch(body, NPROC, "ringccl.torch", transports, EXAMPLES, timeout=bounds.job(500))
    _check(results, transports, EXAMPLES)


@pytest.mark.parametrize("transport", ["shm", "p2p"])
def test_every_form_on_the_ringccl_backend(shm_dir, monkeypatch, transport):
    monkeypatch.setenv("RINGCCL_TRANSPORT", transport)
    results = launch(body, NPROC, "backend", (transport,), EXAMPLES // 3, backend="ringccl",
                     timeout=bounds.job(500))
    _check(results, (transport,), EXAMPLES // 3)
