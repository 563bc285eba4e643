"""Bad arguments on 2 gloo processes: checks that need world_size > 1 (roots and split-size
lengths in range for one rank but not for two), refused alike on every rank with nothing sent
and nothing written (the group is still in step afterwards), and non-contiguous outputs
filled correctly with real peers. The single-process checks are in tests/test_bad_input.py."""

import pytest

torch = pytest.importorskip("torch")

from ringccl.torch.launch import launch  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(300))]

BAD = [  # (call, type name, what the message must contain), the same on every rank
    (lambda rt, t, n: rt.broadcast(t, src=n), "ArgumentError",
     "src=2 is out of range for world_size=2; src must be an integer rank in [0, 2)"),
    (lambda rt, t, n: rt.reduce(t, dst=-1), "ArgumentError", "dst=-1 is out of range"),
    (lambda rt, t, n: rt.gather(t, None, dst=1.0), "ArgumentTypeError",
     "dst=1.0 must be an integer rank in [0, 2), got float"),
    (lambda rt, t, n: rt.all_to_all_single(torch.zeros(4), t, [2, 2], [4]), "ArgumentError",
     "input_split_sizes=[4] has 1 entries; it must have world_size=2"),
    (lambda rt, t, n: rt.all_to_all_single(torch.zeros(4), t, [2, 2, 0]), "ArgumentError",
     "output_split_sizes=[2, 2, 0] has 3 entries; it must have world_size=2"),
    (lambda rt, t, n: rt.all_to_all_single(torch.zeros(4), t, [1, 3], [3, 1]), "ArgumentError",
     "sends itself input_split_sizes"),
    (lambda rt, t, n: rt.all_to_all([torch.zeros(2)], [t[:2], t[2:]]), "ArgumentError",
     "output_tensor_list must be a list of world_size=2 tensors, got list of length 1"),
    (lambda rt, t, n: rt.reduce_scatter_tensor(torch.zeros(4), t), "ArgumentError",
     "reduce_scatter_tensor needs world_size * output.numel() = 2 * 4"),
]


def bad_then_good(rank, n):
    import torch.distributed as dist

    import ringccl.torch as rt
    from ringccl.errors import ArgumentError, ArgumentTypeError
    results = []
    t = torch.arange(4, dtype=torch.float32) + 10 * rank
    before = t.clone()
    for call, _, _ in BAD:
        try:
            call(rt, t, n)
            results.append(("no error", ""))
        except (ArgumentError, ArgumentTypeError) as exc:
            results.append((type(exc).__name__, str(exc)))
    untouched = bool(torch.equal(t, before))
    dist.barrier()  # still in step: no refused call left a message in flight
    out = torch.full((3, 4), -1.0).t()  # (4, 3) transposed output, 2 · 6 elements
    rt.all_gather_into_tensor(out, torch.arange(6, dtype=torch.float32).reshape(2, 3) + 100 * rank)
    gathered = out.reshape(-1).tolist()
    base = torch.full((4,), -1.0)
    rt.all_to_all_single(base[::2], torch.tensor([1.0, 2.0]) + 10 * rank)  # strided output
    return results, untouched, gathered, base.tolist()


def test_bad_arguments_refused_alike_on_two_ranks_and_outputs_views_filled():
    per_rank = launch(bad_then_good, 2, timeout=bounds.job(240))
    for rank, (results, untouched, gathered, base) in enumerate(per_rank):
        assert len(results) == len(BAD)
        for (kind, message), (_, want_kind, want) in zip(results, BAD):
            assert kind == want_kind and want in message, (rank, kind, message)
        assert untouched
        assert gathered == [float(v) for v in range(6)] + [float(v + 100) for v in range(6)]
        assert base == [1.0 + rank, -1.0, 11.0 + rank, -1.0]  # rank i's element r, in place
