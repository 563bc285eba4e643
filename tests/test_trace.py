"""engine.trace: the timing proxies, the recorder, the Chrome/Perfetto merge (in this process,
over a transport that moves nothing), and ``--trace``'s argument checks. The traces of real
runs are tests/distributed/test_trace_run.py."""

import json

import numpy as np
import pytest

import ringccl
from ringccl import engine
from ringccl.cli import main
from ringccl.engine import trace
from ringccl.errors import ArgumentError
from ringccl.backends.mpi.dialect import OPS  # the engine's numpy array ops (no mpi4py)
from ringccl.ops import ReduceOp


class _Nothing:
    """A transport that moves no bytes: every operation completes at once (the driver's order
    and the proxies' records are what is tested, not the data)."""

    def isend(self, s, data):
        return ("send", s)

    def irecv(self, r, landing):
        return ("recv", r)

    def wait(self, handle):
        return None

    def is_timeout(self, exc):
        return False

    def peer_name(self, peer):
        return str(peer)


def _traced_call(collective="all_reduce", algorithm="ring", world_size=4, rank=1, count=64,
                 segment_elems=4, restore=True):
    s = ringccl.schedule(collective, algorithm, world_size)
    p = engine.plan(s, rank, engine.uniform_bounds(count, s.num_chunks), segment_elems)
    buffer = np.zeros(count, np.float32)
    ws = engine.Workspace(OPS, buffer, ReduceOp.SUM, p.staging_elems)
    with trace.tracing() as rec:
        assert trace.state.recorder is rec
        rec.run(engine.run_dataflow, s, rank, p, _Nothing(), ws, restore=restore,
                itemsize=buffer.itemsize, backend="none")
    assert trace.state.recorder is None   # off again: the executors' one attribute test
    return s, p, rec


@pytest.mark.parametrize("collective,algorithm", [("all_reduce", "ring"),
                                                  ("all_gather", "recursive_doubling"),
                                                  ("reduce_scatter", "ring")])
def test_every_send_and_receive_of_the_program_is_recorded(collective, algorithm):
    s, p, rec = _traced_call(collective, algorithm)
    (call,) = rec.calls
    prog = s.program(1)
    bounds = p.bounds
    # each transferred chunk is split into segments of 4 elements
    def segments(c):
        return max(1, -(-(bounds[c + 1] - bounds[c]) // 4))
    expected_sends = sum(segments(x.chunk) for st in prog.steps for x in st.sends)
    expected_recvs = sum(segments(x.chunk) for st in prog.steps for x in st.recvs)
    by_lane = {}
    for lane, name, t0, t1, args in call.events:
        by_lane.setdefault(lane, []).append((name, t0, t1, args))
        assert t1 >= t0
    assert len(by_lane["send"]) == expected_sends == call.info["sends"]
    assert len(by_lane["recv"]) == expected_recvs == call.info["recvs"]
    assert len(by_lane["wait"]) == expected_sends + expected_recvs
    reduces = sum(segments(x.chunk) for st in prog.steps for x in st.recvs
                  if x.kind == ringccl.Kind.REDUCE)
    assert len([e for e in by_lane.get("reduce", ()) if e[0].startswith("reduce")]) == reduces


def test_a_wait_precedes_its_apply():
    _, _, rec = _traced_call()
    waited = {}
    for lane, name, t0, t1, args in rec.calls[0].events:
        key = (args.get("step"), args.get("chunk"), args.get("segment"), args.get("src"))
        if lane == "wait" and name.startswith("wait recv"):
            waited[key] = t1
        elif lane == "reduce":
            assert key in waited and waited[key] <= t0


def test_chrome_trace_of_two_ranks():
    dumps = []
    for rank in (0, 1):
        _, _, rec = _traced_call(world_size=2, rank=rank)
        rec.span("iteration", trace.now(), trace.now())
        dumps.append(json.loads(json.dumps(rec.dump(rank, 0))))
    t = trace.chrome_trace(dumps, "test")
    json.dumps(t)
    events = t["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1}
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
    assert {e["tid"] for e in events if e["ph"] == "X"} <= set(trace.LANES.values())
    # the shapes and names of views.interop.to_chrome_trace
    names = {e["name"].split()[0] for e in events if e["ph"] == "X"}
    assert {"send", "recv", "wait", "reduce", "save", "iteration"} <= names
    # every message: a flow from the sender's post to the receiver's wait
    starts = [e for e in events if e["ph"] == "s"]
    assert len(starts) == len([e for e in events if e["ph"] == "f"])
    assert len(starts) == sum(len([e for e in d["calls"][0]["events"] if e[0] == "send"])
                              for d in dumps)


def test_last_calls_traces_only_the_last(tmp_path):
    tracer = trace.LastCalls(str(tmp_path), iters=2)
    seen = []
    run = tracer.wrap(lambda: seen.append(trace.state.recorder is not None), 5, "x")
    for _ in range(5):
        run()
    assert seen == [False, False, False, True, True]
    assert len(tracer.recorder.spans) == 2
    with open(tracer.write(3, 0)) as f:
        assert json.load(f)["rank"] == 3


def test_trace_iters_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(trace.TRACE_DIR_ENV, raising=False)
    assert trace.LastCalls.from_environment() is None
    monkeypatch.setenv(trace.TRACE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(trace.TRACE_ITERS_ENV, "0")
    with pytest.raises(ValueError, match="RINGCCL_TRACE_ITERS"):
        trace.LastCalls.from_environment()


@pytest.mark.parametrize("argv,message", [
    (["run", "all_reduce", "-n", "2", "-c", "8", "--trace", "/nonexistent/t.json"],
     "argument --trace: '/nonexistent/t.json': directory '/nonexistent' does not exist"),
    (["bench", "all_reduce", "--trace", "t.json"], "--trace needs --nproc"),
    (["bench", "all_reduce", "-n", "2", "--trace", "t.json", "--trace-iters", "0"],
     "0 must be >= 1"),
    (["run", "all_reduce", "-n", "2", "-c", "8", "--iters", "2", "--trace", "t.json",
      "--trace-iters", "5"], "--trace-iters 5 must be <= --iters 2"),
])
def test_trace_arguments_refused_up_front(argv, message, capsys):
    pytest.importorskip("torch")
    try:
        code = main(argv)
    except SystemExit as exc:   # argparse's own usage errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("value,check,level", [
    ("", False, ""), ("0", False, ""), ("off", False, ""), ("1", True, "check"),
    ("true", True, "check"), ("INFO", False, "info"), ("trace", False, "trace"),
    ("detail", True, "check"), (" On ", True, "check"), ("no", False, "")])
def test_ringccl_debug_levels(monkeypatch, value, check, level):
    from ringccl import consistency
    monkeypatch.setenv("RINGCCL_DEBUG", value)
    # INFO and TRACE only log (NCCL_DEBUG=INFO changes no behaviour): no cross-rank check
    assert consistency.enabled(None) is check
    assert consistency.debug_level() == level
    assert consistency.enabled(True) is True and consistency.enabled(False) is False



@pytest.mark.parametrize("value", ["INOF", "warn", "2", "verbose"])
def test_ringccl_debug_refuses_what_it_does_not_know(monkeypatch, value):
    # a typo of INFO turned the cross-rank check on (a per-call all-gather) without a log line
    from ringccl import consistency
    monkeypatch.setenv("RINGCCL_DEBUG", value)
    with pytest.raises(ArgumentError, match=rf"^RINGCCL_DEBUG={value!r} must be one of 0, off, "
                       r"false, no or unset \(nothing\), INFO .* or 1, on, true, yes, check, "
                       r"detail \(the cross-rank check\); case-insensitive$"):
        consistency.debug_level()
    with pytest.raises(ArgumentError, match="RINGCCL_DEBUG"):
        consistency.enabled(None)
    assert consistency.enabled(False) is False   # an explicit check= reads no variable