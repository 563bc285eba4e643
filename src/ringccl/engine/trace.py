"""A measured trace of what a rank did: every post, wait, apply, save and restore of a call,
timestamped with ``time.perf_counter_ns``, written as a Chrome/Perfetto trace.

The engine's drivers are not touched: a :class:`Recorder` wraps the call's transport and
workspace in proxies with the same methods (:class:`TracedTransport`, :class:`TracedWorkspace`)
that timestamp each call and pass it on. The executors run a plan through :func:`drive`, which
tests one attribute per call (``trace.state.recorder``, None when no trace is being taken) and,
only when it is set, runs the driver through :meth:`Recorder.run`; with tracing off nothing
else is paid.

Use::

    with trace.tracing() as rec:          # this thread and every other one, until the block ends
        ringccl.torch.all_reduce(t)
    dump = rec.dump(origin_ns)            # JSON-able, one rank's events
    chrome = chrome_trace([dump0, dump1]) # one process per rank: json.dump it, open in Perfetto

Lanes (Chrome "threads") per rank: ``call`` (the whole collective, and the caller's own spans,
e.g. a bench iteration), ``send`` and ``recv`` (posting an operation: the isend/irecv call),
``wait`` (blocking on an operation to complete), ``reduce`` (applying a received segment:
reduce or copy into place), ``save/restore`` (the rollback's backup). Each send and receive is
also an async span ``in flight`` from its post to the end of its wait, and a flow arrow
(``transfer``) joins the post of a send to the wait of the matching receive on the peer: the
n-th message from rank a to rank b in a call is matched with the n-th receive of b from a, as
the transports match them (posting order, MPI 4.0 §3.5). Names and categories are those of
:func:`ringccl.views.interop.to_chrome_trace` (``send c3 → R1``, ``recv c3 ← R0``,
``reduce c3``), with ``.s`` for segment s when chunks are pipelined.

Clocks: every timestamp is ``perf_counter_ns``. :func:`chrome_trace` places each rank by the
``origin_ns`` its dump was given (taken right after a barrier): when every rank ran on one host,
whose monotonic clock all processes share, the smallest origin is time 0 for all of them (exact
alignment); across hosts each rank's own origin is its 0 (aligned to the barrier's exit).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from typing import Any, Iterator

from ..errors import ArgumentError
from ..ir import Schedule
from .plan import Plan, SegmentRecv, SegmentSend

__all__ = ["Recorder", "TracedTransport", "TracedWorkspace", "LastCalls", "tracing", "state",
           "chrome_trace", "LANES", "TRACE_DIR_ENV", "TRACE_ITERS_ENV"]

now = time.perf_counter_ns

#: lane (Chrome thread id) of each kind of event, in display order
LANES = {"call": 0, "send": 1, "recv": 2, "wait": 3, "reduce": 4, "save/restore": 5}


class _State:
    """What the executors test once per call: ``recorder`` is None unless a trace is taken."""

    __slots__ = ("recorder",)

    def __init__(self) -> None:
        self.recorder: Recorder | None = None


state = _State()


@contextlib.contextmanager
def tracing(recorder: "Recorder | None" = None) -> Iterator["Recorder"]:
    """Record every ringccl executor call (any thread) into ``recorder`` (a new one when None)
    until the block ends; the previous recorder, if any, is put back afterwards."""
    rec = Recorder() if recorder is None else recorder
    previous, state.recorder = state.recorder, rec
    try:
        yield rec
    finally:
        state.recorder = previous


class _Handle:
    """A transport handle with the operation it belongs to (the drivers treat handles as
    opaque: they only pass them back to ``wait``)."""

    __slots__ = ("inner", "op", "posted", "flow")

    def __init__(self, inner: Any, op: SegmentSend | SegmentRecv, posted: int, flow: str):
        self.inner, self.op, self.posted, self.flow = inner, op, posted, flow


class _Call:
    """One traced executor call: its description and its events, as flat tuples
    ``(lane, name, start_ns, end_ns, args)`` (converted to Chrome events only when dumped)."""

    def __init__(self, index: int, schedule: Schedule, rank: int, info: dict):
        self.index, self.schedule, self.rank = index, schedule, rank
        self.info = info
        self.events: list[tuple] = []
        self.sent: dict[int, int] = {}       # peer -> messages posted to it so far
        self.received: dict[int, int] = {}   # peer -> receives posted from it so far

    def flow(self, op: SegmentSend | SegmentRecv) -> str:
        """The id shared by a message's send and its receive (n-th message a → b)."""
        if isinstance(op, SegmentSend):
            n = self.sent.get(op.peer, 0)
            self.sent[op.peer] = n + 1
            return f"{self.index}:{self.rank}>{op.peer}:{n}"
        n = self.received.get(op.peer, 0)
        self.received[op.peer] = n + 1
        return f"{self.index}:{op.peer}>{self.rank}:{n}"

    def args(self, op: SegmentSend | SegmentRecv, itemsize: int) -> dict:
        send = isinstance(op, SegmentSend)
        src, dst = (self.rank, op.peer) if send else (op.peer, self.rank)
        a = {"step": op.step, "phase": self.schedule.phase_names[op.step], "src": src,
             "dst": dst, "chunk": op.chunk, "segment": op.segment,
             "bytes": (op.hi - op.lo) * itemsize}
        if not send:
            a["reduce"] = bool(op.reduce)
        return a


def _label(op: SegmentSend | SegmentRecv, segmented: bool) -> str:
    c = f"c{op.chunk}.{op.segment}" if segmented else f"c{op.chunk}"
    if isinstance(op, SegmentSend):
        return f"send {c} → R{op.peer}"
    return f"recv {c} ← R{op.peer}"


class TracedTransport:
    """A :class:`~ringccl.engine.Transport` whose posts and waits are timestamped: the same
    methods, passed on to ``inner``; its handles are wrapped (see :class:`_Handle`). Anything
    else (``reads_in_place``, ``release``, ``timeout``) is the inner transport's."""

    def __init__(self, inner: Any, call: _Call, itemsize: int, segmented: bool):
        self.inner, self.call, self.itemsize, self.segmented = inner, call, itemsize, segmented

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _posted(self, op, inner, t0: int, t1: int, lane: str) -> _Handle:
        flow = self.call.flow(op)
        self.call.events.append((lane, _label(op, self.segmented), t0, t1,
                                 self.call.args(op, self.itemsize)))
        return _Handle(inner, op, t0, flow)

    def isend(self, s: SegmentSend, data: Any) -> _Handle:
        t0 = now()
        h = self.inner.isend(s, data)
        return self._posted(s, h, t0, now(), "send")

    def irecv(self, r: SegmentRecv, landing: Any) -> _Handle:
        t0 = now()
        h = self.inner.irecv(r, landing)
        return self._posted(r, h, t0, now(), "recv")

    def batch(self, sends: list, recvs: list) -> list:
        t0 = now()
        inner = self.inner.batch(sends, recvs)
        t1 = now()
        ops = [s for s, _ in sends] + [r for r, _ in recvs]
        if len(inner) != len(ops):   # one handle for the whole batch (NCCL): no single op
            self.call.events.append(("send", f"batch step {ops[0].step}" if ops else "batch",
                                     t0, t1, {"operations": len(ops)}))
            return inner
        return [self._posted(op, h, t0, t1, "send" if isinstance(op, SegmentSend) else "recv")
                for op, h in zip(ops, inner)]

    def wait(self, handle: Any) -> Any:
        if not isinstance(handle, _Handle):
            return self.inner.wait(handle)
        t0 = now()
        got = self.inner.wait(handle.inner)
        t1 = now()
        op = handle.op
        args = self.call.args(op, self.itemsize)
        args["flow"], args["posted_ns"] = handle.flow, handle.posted
        self.call.events.append(("wait", "wait " + _label(op, self.segmented), t0, t1, args))
        return got


class TracedWorkspace:
    """A :class:`~ringccl.engine.Workspace` whose apply, save and restore are timed (the same
    methods, passed on to ``inner``)."""

    def __init__(self, inner: Any, call: _Call, itemsize: int, segmented: bool):
        self.inner, self.call, self.itemsize, self.segmented = inner, call, itemsize, segmented

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def source(self, s: SegmentSend) -> Any:
        return self.inner.source(s)

    def landing(self, r: SegmentRecv) -> Any:
        return self.inner.landing(r)

    def apply(self, r: SegmentRecv, received: Any = None) -> None:
        t0 = now()
        self.inner.apply(r, received)
        t1 = now()
        c = f"c{r.chunk}.{r.segment}" if self.segmented else f"c{r.chunk}"
        self.call.events.append(("reduce", f"{'reduce' if r.reduce else 'copy'} {c}", t0, t1,
                                 self.call.args(r, self.itemsize)))

    def _range(self, what: str, lo: int, hi: int) -> None:
        t0 = now()
        getattr(self.inner, what)(lo, hi)
        self.call.events.append(("save/restore", f"{what} [{lo}:{hi}]", t0, now(),
                                 {"lo": lo, "hi": hi, "bytes": (hi - lo) * self.itemsize}))

    def save(self, lo: int, hi: int) -> None:
        self._range("save", lo, hi)

    def restore(self, lo: int, hi: int) -> None:
        self._range("restore", lo, hi)


class Recorder:
    """Collects the traced calls of one process (thread-safe appends; see the module docstring).

    Attributes:
        calls: the executor calls recorded, in order.
        spans: the caller's own spans on the ``call`` lane (:meth:`span`).
    """

    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self.spans: list[tuple] = []
        self._lock = threading.Lock()

    def run(self, driver, schedule: Schedule, rank: int, plan: Plan, transport: Any,
            workspace: Any, *, itemsize: int, backend: str, **kwargs) -> None:
        """``driver(schedule, rank, plan, transport, workspace, **kwargs)`` (``run_dataflow``
        or ``run_lockstep``) with the transport and workspace wrapped in the timing proxies,
        recorded as one call (``itemsize``: bytes per element of the working buffer)."""
        segmented = any(op.segment for st in plan.steps for op in st.sends + st.recvs)
        count = len(workspace.buffer)
        info = {"collective": schedule.collective, "algorithm": schedule.algorithm,
                "world_size": schedule.world_size, "backend": backend, "count": count,
                "bytes": count * itemsize, "itemsize": itemsize, "segmented": segmented,
                "sends": sum(len(st.sends) for st in plan.steps),
                "recvs": sum(len(st.recvs) for st in plan.steps)}
        with self._lock:
            call = _Call(len(self.calls), schedule, rank, info)
            self.calls.append(call)
        t = TracedTransport(transport, call, itemsize, segmented)
        w = TracedWorkspace(workspace, call, itemsize, segmented)
        info["start_ns"] = now()
        try:
            driver(schedule, rank, plan, t, w, **kwargs)
        except BaseException as exc:
            info["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            info["end_ns"] = now()

    def span(self, name: str, start_ns: int, end_ns: int, **args) -> None:
        """Record a span of the caller's on the ``call`` lane (e.g. one bench iteration)."""
        self.spans.append((name, start_ns, end_ns, args))

    def dump(self, rank: int, origin_ns: int) -> dict:
        """This process's events, JSON-able, for :func:`chrome_trace` (``rank``: its rank in
        the traced group; ``origin_ns``: its ``perf_counter_ns`` right after a barrier)."""
        return {"rank": rank, "host": socket.gethostname(), "origin_ns": origin_ns,
                "spans": [list(s) for s in self.spans],
                "calls": [{"info": c.info, "phases": list(c.schedule.phase_names),
                           "events": [list(e) for e in c.events]} for c in self.calls]}


def drive(driver, schedule: Schedule, rank: int, plan: Plan, transport: Any, workspace: Any,
          *, itemsize: int, backend: str, **kwargs) -> None:
    """``driver(schedule, rank, plan, transport, workspace, **kwargs)`` (``run_dataflow`` or
    ``run_lockstep``), recorded as one call of the current :class:`Recorder` when a trace is
    being taken (:func:`tracing`; ``itemsize``, ``backend``: what it records): every
    executor's one way to run a plan."""
    recorder = state.recorder
    if recorder is None:
        driver(schedule, rank, plan, transport, workspace, **kwargs)
    else:
        recorder.run(driver, schedule, rank, plan, transport, workspace, itemsize=itemsize,
                     backend=backend, **kwargs)


def chrome_trace(dumps: list[dict], title: str = "ringccl run") -> dict:
    """Merge the ranks' :meth:`Recorder.dump` into one Chrome/Perfetto trace: one process per
    rank (pid = rank), one thread per lane (:data:`LANES`).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``; ``ts`` and
        ``dur`` in microseconds (floats, ns resolution) from the common origin (module
        docstring), as the format requires.
    """
    one_host = len({d["host"] for d in dumps}) <= 1
    common = min((d["origin_ns"] for d in dumps), default=0)
    events: list[dict] = []
    flows: dict[str, dict] = {}   # flow id -> the sender's end
    ends: dict[str, dict] = {}    # flow id -> the receiver's end
    for d in sorted(dumps, key=lambda d: d["rank"]):
        pid = d["rank"]
        origin = common if one_host else d["origin_ns"]

        def us(ns: int) -> float:
            return (ns - origin) / 1e3

        events.append({"ph": "M", "pid": pid, "name": "process_name",
                       "args": {"name": f"R{pid}" + ("" if one_host else f" ({d['host']})")}})
        events.append({"ph": "M", "pid": pid, "name": "process_sort_index",
                       "args": {"sort_index": pid}})
        for lane, tid in LANES.items():
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name",
                           "args": {"name": lane}})
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index",
                           "args": {"sort_index": tid}})
        for name, t0, t1, args in d["spans"]:
            events.append({"ph": "X", "pid": pid, "tid": 0, "ts": us(t0), "dur": (t1 - t0) / 1e3,
                           "cat": "iteration", "name": name, "args": args})
        for c in d["calls"]:
            info = c["info"]
            events.append({"ph": "X", "pid": pid, "tid": 0, "ts": us(info["start_ns"]),
                           "dur": (info["end_ns"] - info["start_ns"]) / 1e3, "cat": "collective",
                           "name": f"{info['algorithm']} {info['collective']}", "args": info})
            for lane, name, t0, t1, args in c["events"]:
                tid = LANES[lane]
                cat = lane if lane != "save/restore" else name.split()[0]
                events.append({"ph": "X", "pid": pid, "tid": tid, "ts": us(t0),
                               "dur": (t1 - t0) / 1e3, "cat": cat, "name": name, "args": args})
                if lane == "wait" and "flow" in args:
                    fid = args["flow"]
                    # the operation's lifetime, post to completion (they overlap: async spans)
                    events.append({"ph": "b", "pid": pid, "tid": tid, "cat": "in flight",
                                   "id": f"{pid}/{fid}", "ts": us(args["posted_ns"]),
                                   "name": name[len("wait "):]})
                    events.append({"ph": "e", "pid": pid, "tid": tid, "cat": "in flight",
                                   "id": f"{pid}/{fid}", "ts": us(t1),
                                   "name": name[len("wait "):]})
                    if name.startswith("wait send"):
                        flows[fid] = {"pid": pid, "ts": us(args["posted_ns"])}
                    else:
                        # the arrow ends where the receive completed: inside its wait
                        ends[fid] = {"pid": pid, "ts": us(max(t0, t1 - 1))}
    # a transfer arrow from the send's post to the end of its receive's wait (once both ranks'
    # ends are known)
    for i, (fid, start) in enumerate(sorted(flows.items())):
        end = ends.get(fid)
        if end is None:
            continue
        events.append({"ph": "s", "pid": start["pid"], "tid": LANES["send"], "ts": start["ts"],
                       "id": i, "cat": "transfer", "name": "transfer"})
        events.append({"ph": "f", "bp": "e", "pid": end["pid"], "tid": LANES["wait"],
                       "ts": end["ts"], "id": i, "cat": "transfer", "name": "transfer"})
    calls = [c["info"] for d in dumps for c in d["calls"]]
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"title": title, "world_size": len(dumps), "calls_per_rank": {
                d["rank"]: len(d["calls"]) for d in dumps},
                "clock": "perf_counter_ns, one host: common origin" if one_host else
                "perf_counter_ns, per-rank origin after a barrier",
                "collectives": sorted({f"{c['algorithm']} {c['collective']}" for c in calls})}}


#: where ``ringccl run/bench --trace`` tells its workers to write their dumps (a directory,
#: one ``rank<R>.json`` each), and how many of each measured call's last iterations to trace
TRACE_DIR_ENV = "RINGCCL_TRACE_DIR"
TRACE_ITERS_ENV = "RINGCCL_TRACE_ITERS"


class LastCalls:
    """A bench worker's tracer: traces only the last ``iters`` calls of each function it wraps
    (the timed iterations at the end of a row), so the other iterations run untraced.

    Args:
        directory: where :meth:`write` puts ``rank<R>.json``.
        iters: calls traced per wrapped function (>= 1).
    """

    def __init__(self, directory: str, iters: int = 1):
        self.directory, self.iters = directory, iters
        self.recorder = Recorder()

    @staticmethod
    def from_environment() -> "LastCalls | None":
        """The tracer ``ringccl run/bench --trace`` asked for (:data:`TRACE_DIR_ENV`,
        :data:`TRACE_ITERS_ENV`), or None.

        Raises:
            ValueError: ``RINGCCL_TRACE_ITERS`` not an integer >= 1 (the parent checks it).
        """
        directory = os.environ.get(TRACE_DIR_ENV)
        if not directory:
            return None
        text = os.environ.get(TRACE_ITERS_ENV, "1")
        try:
            iters = int(text)
        except ValueError:
            iters = 0
        if iters < 1:
            raise ArgumentError(f"{TRACE_ITERS_ENV}={text!r} must be an integer >= 1")
        return LastCalls(directory, iters)

    def wrap(self, run, expected_calls: int, label: str):
        """``run`` (no arguments), traced on its calls after the first ``expected_calls -
        iters`` (``expected_calls``: how often the caller will call it: check + warm-up + timed
        iterations); each traced call is also a span ``label, iteration k`` on the call lane."""
        first = max(0, expected_calls - self.iters)
        calls = [0]
        recorder = self.recorder

        def traced():
            k = calls[0]
            calls[0] += 1
            if k < first:
                return run()
            with tracing(recorder):
                t0 = now()
                try:
                    return run()
                finally:
                    recorder.span(f"{label}, call {k + 1} of {expected_calls}", t0, now(),
                                  label=label, call=k + 1)
        return traced

    def write(self, rank: int, origin_ns: int) -> str:
        """Write :meth:`Recorder.dump` to ``directory/rank<R>.json``; returns its path."""
        path = os.path.join(self.directory, f"rank{rank}.json")
        with open(path, "w") as f:
            json.dump(self.recorder.dump(rank, origin_ns), f)
        return path
