"""The "ringccl" torch.distributed backend against gloo on 4 local processes.

One launch per worker body (each launch costs seconds here); hypothesis draws the same examples
on every rank (derandomized, no shrinking) and each example runs on ringccl and on a gloo group
over the same ranks with the same inputs.
"""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from ringccl.errors import ArgumentError  # noqa: E402
from ringccl.torch.launch import launch  # noqa: E402

from . import backend_workers  # noqa: E402

from .. import bounds  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(bounds.job(600))]

NPROC = 4


def test_every_collective_matches_gloo():
    runs = launch(backend_workers.collectives_vs_gloo, NPROC, 60, backend="ringccl",
                  timeout=bounds.job(300))
    for rank, r in enumerate(runs):
        assert r["calls"] >= 60, rank
        assert r["mismatches"] == [], (rank, r["mismatches"][:3])


@pytest.fixture(scope="module")
def observed():
    return launch(backend_workers.futures_and_subgroups, NPROC, backend="ringccl", timeout=bounds.job(200))


def test_future_values_are_glooish(observed):
    for rank, r in enumerate(observed):
        assert r["future_value"] == r["gloo_future_value"] == ["list", 1, True], rank
        assert r["chained"] == [20.0] * 5     # (1+2+3+4) * 2
        # six calls in flight, waited for in reverse: each is its own sum, in issue order
        assert r["in_flight"] == [float(sum(10 * q + i for q in range(NPROC))) for i in range(6)]


def test_point_to_point(observed):
    for rank, r in enumerate(observed):
        assert r["ring_recv"] == [float((rank - 1) % NPROC)] * 4
    assert observed[1]["tagged"] == [0.0, 1.0, 2.0]


def test_subgroups_take_global_ranks(observed):
    for rank in (1, 3):
        assert observed[rank]["sub_broadcast"] == [3.0] * 3
        assert observed[rank]["sub_rank"] == [rank // 2, 2]
    assert observed[3]["sub_reduce"] == [4.0] * 3
    assert observed[1]["sub_gather"] == [[1.0, 1.0], [3.0, 3.0]]
    for rank in (0, 2):
        assert observed[rank]["sub_all_reduce"] == [2.0, 2.0]


@pytest.mark.parametrize("case", ["premul_sum", "band_float", "complex_min", "uint16",
                                  "gather_mixed_dtypes", "reduce_scatter_mixed_dtypes",
                                  "all_to_all_short_list"])
def test_refused_as_gloo_refuses(observed, case):
    (mine, message), (gloo_class, _) = observed[0]["refused"][case]
    assert mine == gloo_class != "ok"
    if case != "complex_min":   # that one torch refuses itself, before any backend
        assert "ringccl" in message


def test_complex_sum(observed):
    for r in observed:
        assert r["complex_sum"] == [6.0, 4.0]


@pytest.mark.parametrize("transport", ["p2p", "shm"])
def test_algo_override_and_debug_lines(monkeypatch, transport):
    # one host: shared memory unless RINGCCL_TRANSPORT=p2p (read when the group is created)
    if transport == "p2p":
        monkeypatch.setenv("RINGCCL_TRANSPORT", "p2p")
    runs = launch(backend_workers.debug_lines, 2, backend="ringccl", timeout=bounds.job(120))
    lines = runs[0]["lines"]
    # one line per (collective, size class): 1000 floats and 100000 floats, and the all_gather
    assert len(lines) == 3, lines
    name = {"p2p": "gloo-p2p", "shm": "shm"}[transport]
    assert all(f"transport={name} " in ln and "predicted_us=" in ln for ln in lines)
    assert runs[0]["transport"] == transport
    assert "algorithm=recursive_doubling (RINGCCL_ALGO)" in lines[0]
    assert "all_gather" in lines[2] and "algorithm=direct (RINGCCL_ALGO)" in lines[2]
    # the front end's per-call lines name the algorithm that ran
    assert sum("all_reduce algorithm=recursive_doubling" in ln for ln in runs[0]["calls"]) == 4
    error = runs[0]["error"]
    assert "RINGCCL_ALGO entry 'all_reduce:nope'" in error and "ring" in error
    # not forced: the transport's choice, priced on its link class
    auto = runs[0]["auto_line"]
    if transport == "shm":
        # priced on the fitted shared-memory link class: no longer provisional
        assert "algorithm=two_shot (auto)" in auto and "provisional" not in auto, auto
    else:
        assert "algorithm=ring (auto)" in auto, auto



def test_dispatch_keeps_issue_order_across_threads():
    runs = launch(backend_workers.dispatch_order, NPROC, backend="ringccl", timeout=bounds.job(200))
    for rank, r in enumerate(runs):
        assert r["threshold"] == 256 * 1024
        # an idle group's small call ran in the caller's thread: complete on return
        assert r["idle_small_completed"] is True and r["idle_small_value"] == 10.0
        for name in ("default", "thread0", "inline0"):
            for repeat in range(3):
                seen = r[f"{name}/{repeat}"]
                assert seen["errors"] == [], (rank, name, seen["errors"])
                assert all(seen["equal"]), (rank, name, repeat, seen["equal"])
                if name == "thread0":   # RINGCCL_BACKEND_THREAD=0: every call inline
                    assert all(seen["completed"]), (rank, seen["completed"])
        assert all(r["one_thread_mixed"]), (rank, r["one_thread_mixed"])


def test_inline_threshold_from_the_environment(monkeypatch):
    from ringccl.backends.torch import dispatch as backend
    monkeypatch.delenv("RINGCCL_BACKEND_INLINE_BYTES", raising=False)
    assert backend.inline_bytes() == backend.INLINE_BYTES == 256 * 1024
    monkeypatch.setenv("RINGCCL_BACKEND_INLINE_BYTES", "64KiB")
    assert backend.inline_bytes() == 65536
    monkeypatch.setenv("RINGCCL_BACKEND_INLINE_BYTES", "0")
    assert backend.inline_bytes() == 0
    for bad in ("lots", "-5", "1.5"):
        monkeypatch.setenv("RINGCCL_BACKEND_INLINE_BYTES", bad)
        with pytest.raises(ArgumentError, match="RINGCCL_BACKEND_INLINE_BYTES=") as info:
            backend.inline_bytes()
        assert repr(bad) in str(info.value)


def test_environment_errors_name_the_variable_and_value(monkeypatch):
    from ringccl.backends.torch import dispatch, process_group, transport
    monkeypatch.setenv("RINGCCL_BACKEND_THREAD", "yes")
    with pytest.raises(ArgumentError, match="RINGCCL_BACKEND_THREAD='yes' must be '1'"):
        dispatch.backend_thread()
    monkeypatch.setenv("RINGCCL_TRANSPORT", "tcp")
    with pytest.raises(ArgumentError, match="RINGCCL_TRANSPORT='tcp' must be one of"):
        transport.group_transport(["a", "a"], 2)
    with pytest.raises(ArgumentError, match="pg_options="):
        process_group.create_process_group(None, pg_options=object())


def test_two_hosts_run_hybrid_with_the_cost_models_two_level_choice():
    runs = launch(backend_workers.hybrid_vs_gloo, NPROC, backend="ringccl", timeout=bounds.job(300))
    for rank, r in enumerate(runs):
        assert r["transport"] == "hybrid", rank
        assert r["calls"] >= 60 and r["mismatches"] == [], (rank, r["mismatches"][:3])
    lines = runs[0]["lines"]
    assert lines and all("transport=shm+gloo-p2p " in ln for ln in lines), lines
    # on 2 hosts x 2 ranks the model prices the two-level schedules below the flat ring
    for collective in ("all_reduce", "reduce_scatter", "all_gather"):
        chosen = [ln for ln in lines if f" {collective} " in ln]
        assert chosen and all("algorithm=hierarchical (auto)" in ln for ln in chosen), chosen


def test_ranks_that_disagree_on_the_transport_are_refused_at_creation():
    runs = launch(backend_workers.transport_mismatch, 2, backend="ringccl", timeout=bounds.job(120))
    for outcome in runs:
        assert outcome is not None and outcome.startswith("ArgumentError: RINGCCL_TRANSPORT "
                                                          "differs"), outcome
        assert "rank 0: 'auto'" in outcome and "rank 1: 'p2p'" in outcome, outcome


def test_bad_lists_refused_before_data_moves_and_the_group_stays_in_step():
    runs = launch(backend_workers.bad_lists_then_good, NPROC, backend="ringccl",
                  timeout=bounds.job(200))
    total = float(sum(range(1, NPROC + 1)))
    for rank, r in enumerate(runs):
        kind, message, untouched = r["reduce_scatter_uneven"]
        assert (kind, untouched) == ("RuntimeError", True), (rank, message)
        assert "input_list[0] has shape (3,), the output (4,)" in message
        kind, message, untouched = r["all_to_all_self_block"]
        assert (kind, untouched) == ("ArgumentError", True), (rank, message)
        assert f"this rank (rank {rank}) sends itself input_tensor_list[{rank}].numel()=5" \
            in message
        kind, message, untouched = r["all_gather_wrong_size"]
        assert (kind, untouched) == ("RuntimeError", True), (rank, message)
        assert "invalid tensor size at index 1 (expected (4,), got (5,))" in message
        assert r["future"] == r["gloo_future"] == ["list", NPROC, True], rank
        assert r["after"] == [total, total], rank


def test_complex_reductions_match_gloo():
    runs = launch(backend_workers.complex_reductions_vs_gloo, NPROC, backend="ringccl",
                  timeout=bounds.job(200))
    total = float(sum(range(1, NPROC + 1)))
    for rank, r in enumerate(runs):
        assert r["equal"] == [[True, True, True]] * 2, rank
        assert r["value_is_given"] == [True, True], rank
        assert "ReduceOp.MAX is not supported on complex tensors" in r["max"], rank
        assert r["after"] == [total, total], rank
