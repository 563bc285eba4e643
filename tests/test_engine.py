"""The backend-neutral engine on an in-memory transport: N ranks as threads.

Fast and exhaustive where processes are slow: every registered algorithm through both drivers,
and a failure injected at any operation of any rank, checking that every rank either finishes
with the fault-free result or raises PeerError/RingcclTimeout naming the step and peer with its
buffer exactly as before (all or nothing).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringccl
from ringccl import engine
from ringccl.algorithms import REGISTRY, build_schedule
from ringccl.errors import BackendError, PeerError, RingcclTimeout
from ringccl.ir import Schedule
from ringccl.layout import layout
from ringccl.ops import ReduceOp, ufunc

from . import ties

PAIRS = sorted(REGISTRY)


class _Wire:
    """Messages between ranks, matched by posting order per (src, dst) pair."""

    def __init__(self, n: int):
        self.lock = threading.Lock()
        self.sent: dict = {}            # (src, dst, seq) -> data
        self.events: dict = {}
        self.send_seq = np.zeros((n, n), dtype=np.int64)
        self.recv_seq = np.zeros((n, n), dtype=np.int64)
        self.hazards: list[str] = []    # memory hazards the transports saw (must stay empty)

    def event(self, key) -> threading.Event:
        with self.lock:
            return self.events.setdefault(key, threading.Event())


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


class _Transport:
    """An in-memory transport that also checks the engine's memory discipline.

    A real backend reads a send's data and writes an in-place receive at any moment between
    posting and completion, and a staged receive owns its staging slot until applied; this one
    records a hazard whenever the engine could let those overlap (a send reading data being
    received or later changed, a receive or apply overwriting what an in-flight send reads, a
    staging slot reused before it was applied).
    """

    def __init__(self, wire: _Wire, rank: int, buffer: np.ndarray, staging: np.ndarray,
                 timeout: float, fail_at: int | None):
        self.wire, self.rank, self.buffer, self.staging = wire, rank, buffer, staging
        self.timeout, self.fail_at, self.ops = timeout, fail_at, 0
        self.sending: dict = {}     # handle -> (lo, hi, data at posting)
        self.landing: dict = {}     # handle -> (lo, hi) of an in-place receive not yet waited
        self.staged: dict = {}      # (start, stop) of staging -> recv not yet applied (or None)

    def _hazard(self, what: str) -> None:
        self.wire.hazards.append(f"rank {self.rank}: {what}")

    def _tick(self):
        self.ops += 1
        if self.fail_at is not None and self.ops > self.fail_at:
            raise ConnectionError("injected failure")

    def _check_write(self, lo, hi, what):
        if any(_overlap((lo, hi), v[:2]) for v in self.sending.values()):
            self._hazard(f"{what} [{lo}:{hi}] while a send still reads it")
        if any(_overlap((lo, hi), v) for v in self.landing.values()):
            self._hazard(f"{what} [{lo}:{hi}] while a receive lands there")

    def isend(self, s, data=None):
        self._tick()
        if any(_overlap((s.lo, s.hi), v) for v in self.landing.values()):
            self._hazard(f"send of [{s.lo}:{s.hi}] while a receive lands there")
        key = (self.rank, s.peer, int(self.wire.send_seq[self.rank, s.peer]))
        self.wire.send_seq[self.rank, s.peer] += 1
        data = self.buffer[s.lo:s.hi].copy()
        self.wire.sent[key] = data
        self.wire.event(key).set()
        handle = ("send", key)
        self.sending[handle] = (s.lo, s.hi, data)
        return handle

    def irecv(self, r, landing=None):
        self._tick()
        key = (r.peer, self.rank, int(self.wire.recv_seq[r.peer, self.rank]))
        self.wire.recv_seq[r.peer, self.rank] += 1
        handle = ("recv", key, r)
        if r.stage < 0:
            self._check_write(r.lo, r.hi, "receive into")
            self.landing[handle] = (r.lo, r.hi)
        else:
            slot = (r.stage, r.stage + r.hi - r.lo)
            if any(_overlap(slot, other) for other in self.staged):
                self._hazard(f"staging {slot} reused before it was applied")
            self.staged[slot] = None
        return handle

    def wait(self, handle):
        if handle[0] == "send":
            lo, hi, data = self.sending.pop(handle)
            if not np.array_equal(self.buffer[lo:hi], data, equal_nan=True):
                self._hazard(f"[{lo}:{hi}] changed while its send was in flight")
            return
        _, key, r = handle
        if not self.wire.event(key).wait(self.timeout):
            raise TimeoutError(f"nothing from rank {r.peer} within {self.timeout} s")
        data = self.wire.sent[key]
        assert data.size == r.hi - r.lo, "chunk sizes differ between sender and receiver"
        if r.stage < 0:
            self.landing.pop(handle)
            self.buffer[r.lo:r.hi] = data
        else:
            self.staging[r.stage:r.stage + data.size] = data
            self.staged[(r.stage, r.stage + data.size)] = r

    def is_timeout(self, exc):
        return False

    def peer_name(self, peer):
        return str(peer)

    def batch(self, sends, recvs):
        return [self.isend(s, d) for s, d in sends] + [self.irecv(r, d) for r, d in recvs]


class _NumpyOps:
    """The engine's array dialect on numpy arrays (:class:`ringccl.engine.ArrayOps`)."""

    empty = staticmethod(lambda like, n: np.empty(n, like.dtype))
    kind = staticmethod(lambda a: a.dtype)

    @staticmethod
    def copy(dst, src):
        dst[...] = src

    @staticmethod
    def combine(op):
        f = ufunc(op)
        return lambda dst, src: f(dst, src, out=dst)

    @staticmethod
    def combine_into(op):
        f = ufunc(op)
        return lambda dst, a, b: f(a, b, out=dst)


class _Workspace(engine.Workspace):
    """The engine's workspace, checking each apply against the transport's records."""

    __slots__ = ("transport",)

    def __init__(self, transport: _Transport, op: ReduceOp = ReduceOp.SUM):
        super().__init__(_NumpyOps(), transport.buffer, op, 0)
        # the transport's own staging array: it records which slots hold unapplied receives
        self.staging, self.transport = transport.staging, transport

    def apply(self, r, received=None):
        t = self.transport
        slot = (r.stage, r.stage + r.hi - r.lo)
        if t.staged.pop(slot, None) != r:
            t._hazard(f"apply of staging {slot} before its receive completed")
        t._check_write(r.lo, r.hi, "apply into")
        super().apply(r, received)


def _params(algorithm: str, n: int) -> dict:
    return {"local_size": 2 if n % 2 == 0 else 1} if algorithm == "hierarchical" else {}


def _run(collective, algorithm, n, count, *, driver="dataflow", segment_elems=0, victim=None,
         fail_at=None, timeout=5.0):
    schedule = build_schedule(collective, algorithm, n, **_params(algorithm, n))
    rng = np.random.default_rng(7)
    wire = _Wire(n)
    buffers, plans, outcome = [], [], [None] * n
    for rank in range(n):
        lay = layout(schedule, rank, buffer_count=count)
        buffers.append(rng.integers(-8, 8, lay.numel).astype(np.float64))
        plans.append(engine.plan(schedule, rank, lay.offsets, segment_elems))
    before = [b.copy() for b in buffers]
    run = engine.run_dataflow if driver == "dataflow" else engine.run_lockstep

    def body(rank):
        p = plans[rank]
        transport = _Transport(wire, rank, buffers[rank], np.zeros(p.staging_elems), timeout,
                               fail_at if rank == victim else None)
        try:
            if p.steps:
                run(schedule, rank, p, transport, _Workspace(transport),
                    timeout=timeout, restore=True)
        except PeerError as exc:
            outcome[rank] = exc

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a rank hung"
    if fail_at is None:  # after an injected failure, in-flight operations are abandoned
        assert not wire.hazards, wire.hazards[:5]
    return before, buffers, outcome, schedule


@pytest.mark.parametrize("collective,algorithm", PAIRS)
@pytest.mark.parametrize("driver", ["dataflow", "lockstep"])
def test_drivers_agree(collective, algorithm, driver):
    for n in (3, 4):
        _, reference, errors, _ = _run(collective, algorithm, n, 10 * n)
        assert not any(errors)
        _, got, errors, _ = _run(collective, algorithm, n, 10 * n, driver=driver,
                                 segment_elems=3)
        assert not any(errors)
        for r in range(n):
            np.testing.assert_array_equal(got[r], reference[r])


@settings(max_examples=60, deadline=None)
@given(pair=st.sampled_from(PAIRS), n=st.integers(2, 5),
       driver=st.sampled_from(["dataflow", "lockstep"]), data=st.data())
def test_failure_anywhere_is_all_or_nothing(pair, n, driver, data):
    collective, algorithm = pair
    count = data.draw(st.integers(0, 6)) * n + data.draw(st.sampled_from([0, n]))
    _, reference, _, schedule = _run(collective, algorithm, n, count)
    victim = data.draw(st.integers(0, n - 1))
    fail_at = data.draw(st.integers(0, 12))
    before, got, errors, _ = _run(collective, algorithm, n, count, driver=driver,
                                  victim=victim, fail_at=fail_at, timeout=0.3)
    for r in range(n):
        if errors[r] is None:
            np.testing.assert_array_equal(got[r], reference[r])   # finished: the right answer
            continue
        np.testing.assert_array_equal(got[r], before[r])          # failed: untouched
        exc = errors[r]
        assert exc.collective == collective and exc.algorithm == algorithm
        assert 0 <= exc.step < schedule.num_steps and f"at step {exc.step}" in str(exc)
        if exc.peer is None:  # lockstep: posting the whole batch failed, no single operation
            assert driver == "lockstep" and "exchanging with ranks" in str(exc)
        else:
            assert f"rank {exc.peer}" in str(exc)
        assert isinstance(exc, RingcclTimeout) == ("within" in str(exc))


def test_a_silent_peer_times_out_naming_it():
    # rank 1 fails before posting anything: rank 2 (its successor on the ring) waits for it
    _, _, errors, _ = _run("all_reduce", "ring", 3, 30, victim=1, fail_at=0, timeout=0.2)
    assert isinstance(errors[1], PeerError) and not isinstance(errors[1], RingcclTimeout)
    assert isinstance(errors[2], RingcclTimeout)
    assert errors[2].peer == 1 and errors[2].step == 0
    assert "ring all_reduce timed out after 0.2 s on rank 2 at step 0 of 4 (reduce-scatter) " \
           "waiting for a receive from rank 1" in str(errors[2])


@settings(max_examples=150, deadline=None)
@given(pair=st.sampled_from(PAIRS), n=st.integers(2, 6), segment_elems=st.integers(0, 7),
       data=st.data())
def test_dataflow_order_is_hazard_free(pair, n, segment_elems, data):
    # the transport records any send/receive/apply that could overlap in memory (see
    # _Transport); _run asserts there were none, here for any size and segmenting
    collective, algorithm = pair
    count = data.draw(st.integers(0, 12 * n))
    if collective not in ("all_reduce", "broadcast", "reduce"):
        count -= count % n  # equal blocks per rank
    _, reference, errors, _ = _run(collective, algorithm, n, count, driver="lockstep")
    assert not any(errors)
    _, got, errors, _ = _run(collective, algorithm, n, count, segment_elems=segment_elems)
    assert not any(errors)
    for r in range(n):
        np.testing.assert_array_equal(got[r], reference[r])


def test_two_rank_ring_forwards_each_segment_as_it_is_reduced():
    # the switch from reduce-scatter to all-gather at N = 2 receives in place into the chunk
    # this rank is still sending: each segment's receive is posted right after that segment's
    # send is done, not after the whole chunk (which would serialize the two phases)
    schedule = build_schedule("all_reduce", "ring", 2)
    p = engine.plan(schedule, 0, engine.uniform_bounds(8, 2), 1)   # 4 segments per chunk
    order = [(["RECV", "SEND", "WAIT", "APPLY", "SAVE"][i.code], i.op.step, i.op.segment)
             for i in engine.dataflow_program(p, restore=False).instrs]
    for seg in range(3):
        applied = order.index(("APPLY", 0, seg))
        # right after reduce-scatter segment seg is reduced: its all-gather receive and send
        # are posted, before the next reduce-scatter segment is waited for
        assert ("RECV", 1, seg) in order[applied:order.index(("WAIT", 0, seg + 1))]
        assert ("SEND", 1, seg) in order[applied:order.index(("WAIT", 0, seg + 1))]


@pytest.mark.parametrize("bounds", [(0, 2, 1), (0, 1, 5), (-1, 1, 2), (0, 1), [0, 3, 2],
                                    np.array([0, 1, 9])])
def test_bad_bounds_are_refused_every_time(bounds):
    # the check is cached for tuples: a refused tuple must stay refused, a good one stay equal
    assert engine.check_bounds((0, 1, 4), 2, 4) == (0, 1, 4)
    for _ in range(2):
        with pytest.raises(BackendError, match="3 non-decreasing offsets within the buffer's 4"):
            engine.check_bounds(bounds, 2, 4)
    assert engine.check_bounds([np.int64(0), 2.0, 4], 2, 4) == (0, 2, 4)
    assert all(type(b) is int for b in engine.check_bounds((np.int64(0), 2, 4), 2, 4))


@pytest.mark.parametrize("pair", PAIRS)
def test_dataflow_program_obeys_its_rules(pair):
    # the compiler's rules (engine.dataflow._DataflowCompiler) as properties of its output, for
    # every algorithm: each operation posted once and waited for once, per peer and direction in
    # canonical order; a staged receive applied after its wait; with restore every written
    # segment saved once, before its first write
    collective, algorithm = pair
    for n in (2, 3, 5):
        schedule = build_schedule(collective, algorithm, n)
        # chunks of 4 and 5 elements: segments of 2 split them unevenly
        bounds = engine.uniform_bounds(4 * schedule.num_chunks + 1, schedule.num_chunks)
        for rank in range(n):
            for segment_elems in (0, 2):
                p = engine.plan(schedule, rank, bounds, segment_elems)
                for restore in (False, True):
                    _check_program(p, engine.dataflow_program(p, restore), restore)


def _check_program(p, program, restore):
    from ringccl.engine.dataflow import APPLY, RECV, SAVE, SEND, WAIT
    posted, waited, applied, saved = {}, set(), set(), []
    order = {}
    for at, (code, op, slot, _) in enumerate(program.instrs):
        if code in (RECV, SEND):
            assert slot not in posted and 0 <= slot < program.slots
            posted[slot] = op
            order.setdefault((code, op.peer), []).append(op)
            if code == RECV and op.stage < 0 and restore:  # lands in place: saved before
                assert (op.lo, op.hi) in saved
        elif code == WAIT:
            assert posted.get(slot) == op and slot not in waited
            waited.add(slot)
        elif code == APPLY:
            assert op.stage >= 0 and op not in applied
            assert any(posted[s] == op for s in waited)  # its receive has completed
            applied.add(op)
            if restore:
                assert (op.lo, op.hi) in saved
        else:
            assert code == SAVE and restore and op not in saved
            saved.append(op)
    assert waited == set(posted) and len(posted) == program.slots
    canonical = {}
    for step in p.steps:
        for r in step.recvs:
            canonical.setdefault((RECV, r.peer), []).append(r)
        for s in step.sends:
            canonical.setdefault((SEND, s.peer), []).append(s)
    assert order == canonical
    assert applied == {r for step in p.steps for r in step.recvs if r.stage >= 0}


# -- the IR's reduction order: a slot with several sources below its rank -----------

class _InPlaceTransport(_Transport):
    """:class:`_Transport` as a shared-memory transport would be: staged receives get no
    landing and ``wait`` returns a read-only view of the peer's bytes, valid until released."""

    reads_in_place = True

    def wait(self, handle):
        if handle[0] == "send":
            return super().wait(handle)
        _, key, r = handle
        if r.stage < 0:
            return super().wait(handle)
        if not self.wire.event(key).wait(self.timeout):
            raise TimeoutError(f"nothing from rank {r.peer} within {self.timeout} s")
        view = self.wire.sent[key].view()
        view.flags.writeable = False   # the peer's memory: the engine only reads it
        self.staged[(r.stage, r.stage + view.size)] = r
        return view

    def release(self, r):
        pass


def _run_values(schedule, buffers, *, driver, segment_elems, in_place=False,
                op=ReduceOp.SUM):
    """Run ``schedule`` on the in-memory transport from the given per-rank working buffers
    (any dtype; modified in place), reducing with ``op``."""
    n = schedule.world_size
    wire = _Wire(n)
    run = engine.run_dataflow if driver == "dataflow" else engine.run_lockstep
    plans = [engine.plan(schedule, r, layout(schedule, r, buffer_count=buffers[0].size).offsets,
                         segment_elems) for r in range(n)]

    def body(rank):
        p = plans[rank]
        cls = _InPlaceTransport if in_place else _Transport
        # a transport reading in place has no staging buffer: the accumulators are the engine's
        staging = np.zeros(0 if in_place else p.staging_elems, buffers[rank].dtype)
        transport = cls(wire, rank, buffers[rank], staging, 5.0, None)
        if p.steps:
            run(schedule, rank, p, transport, _Workspace(transport, op), timeout=5.0,
                restore=True)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a rank hung"
    assert not wire.hazards, wire.hazards[:5]
    return plans


def _fold16(x):
    acc = x[0].copy()
    for row in x[1:]:
        np.add(acc, row, out=acc)
    return acc


@pytest.mark.parametrize("driver", ["dataflow", "lockstep"])
@pytest.mark.parametrize("segment_elems", [0, 5])
@pytest.mark.parametrize("in_place", [False, True])
def test_three_sources_below_fold_through_an_accumulator(driver, segment_elems, in_place):
    # R3 receives reduces from R0, R1, R2 (below it) and R4 (above) in one step: the result is
    # ((x0 + x1) + x2) + x3 + x4 in float16 (x3 at R3's own position), not x3 + x0 + x1 + ...
    schedule = Schedule.from_arrays("reduce", "custom", 5, 1, step=0, src=[0, 1, 2, 4], dst=3,
                                    src_chunk=0, reduce=True, params={"root": 3})
    x = (np.random.default_rng(3).standard_normal((5, 23)) * 100).astype(np.float16)
    buffers = [row.copy() for row in x]
    plans = _run_values(schedule, buffers, driver=driver, segment_elems=segment_elems,
                        in_place=in_place)
    want = _fold16(x)
    assert buffers[3].view(np.uint16).tolist() == want.view(np.uint16).tolist()
    assert (_fold16(x[[3, 0, 1, 2, 4]]).view(np.uint16) != want.view(np.uint16)).any()
    # the plan: R0's receive starts the accumulator, R1's folds in, R2's folds and flushes,
    # R4's combines into the buffer directly; one chunk of accumulator
    roles = [(r.peer, r.fold >= 0, r.start, r.flush) for r in plans[3].steps[0].recvs
             if r.segment == 0]
    assert roles == [(0, True, True, False), (1, True, False, False), (2, True, False, True),
                     (4, False, False, False)]
    assert plans[3].accumulator_elems == 23
    assert all(p.accumulator_elems == 0 for i, p in enumerate(plans) if i != 3)


@pytest.mark.parametrize("driver", ["dataflow", "lockstep"])
@pytest.mark.parametrize("n", [3, 5])
def test_direct_all_reduce_gives_every_rank_the_simulators_bits(driver, n):
    schedule = build_schedule("all_reduce", "direct", n)
    x = (np.random.default_rng(n).standard_normal((n, 40)) * 100).astype(np.float16)
    buffers = [row.copy() for row in x]
    _run_values(schedule, buffers, driver=driver, segment_elems=7)
    sim = ringccl.simulate("all_reduce", x, algorithm="direct").outputs
    for r in range(n):
        assert buffers[r].view(np.uint16).tolist() == _fold16(x).view(np.uint16).tolist()
        assert sim[r].view(np.uint16).tolist() == buffers[r].view(np.uint16).tolist()


def _engine_is_the_simulator(collective, algorithm, kw, n, count, op, dtype, seed, *, driver,
                             segment_elems, in_place):
    """On MIN/MAX inputs with signed zeros and NaN payloads (tests/ties.py): all_reduce's
    ranks get the same bits from the engine, and every rank that has a result the
    simulator's."""
    x = ties.inputs(np.random.default_rng(seed), n, count, dtype)
    sim = ringccl.simulate(collective, x, op, algorithm=algorithm, **kw)
    buffers = [row.copy() for row in x]
    for r in range(n):   # the input is the whole working buffer, as the front end lays it
        lay = layout(sim.schedule, r, buffer_count=count)
        assert lay.numel == count and lay.input_runs in (((0, count),), ((0, 0),))
    _run_values(sim.schedule, buffers, driver=driver, segment_elems=segment_elems,
                in_place=in_place, op=ReduceOp(op))
    label = f"{collective} {algorithm} {kw} n={n} {op} {dtype} {driver}"
    if collective == "all_reduce":
        differ = [r for r in range(n) if ties.bits(buffers[r]).tolist() !=
                  ties.bits(buffers[0]).tolist()]
        assert not differ, f"{label}: ranks {differ} differ from rank 0"
    ranks = [kw["dst"]] if collective == "reduce" else range(n)
    for r in ranks:
        runs = layout(sim.schedule, r, buffer_count=count).output_runs
        got = np.concatenate([buffers[r][a:b] for a, b in runs] + [np.zeros(0, dtype)])
        assert ties.bits(got).tolist() == ties.bits(np.asarray(sim.outputs[r])).tolist(), \
            f"{label} rank {r}"


@pytest.mark.parametrize("n", range(2, 9))
def test_min_max_on_signed_zeros_and_nans_match_the_simulator(n):
    # every reducing algorithm at this size; op, dtype, driver and transport take turns
    for i, (collective, algorithm, kw) in enumerate(ties.cases(n)):
        count = n * 5 if collective == "reduce_scatter" else 29
        _engine_is_the_simulator(collective, algorithm, kw, n, count, ties.OPS[i % 2],
                                 ties.DTYPES[i // 2 % 2], i, driver=("dataflow", "lockstep")[i % 2],
                                 segment_elems=(0, 4)[i // 2 % 2], in_place=bool(i // 4 % 2))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_min_max_on_signed_zeros_and_nans_match_the_simulator_property(data):
    n = data.draw(st.integers(2, 8))
    collective, algorithm, kw = data.draw(st.sampled_from(ties.cases(n)))
    count = n * data.draw(st.integers(0, 6)) if collective == "reduce_scatter" else \
        data.draw(st.sampled_from([1, n - 1, n + 1, 3 * n + 2, 41]))
    _engine_is_the_simulator(collective, algorithm, kw, n, count,
                             data.draw(st.sampled_from(ties.OPS)),
                             data.draw(st.sampled_from(ties.DTYPES)),
                             data.draw(st.integers(0, 2**32 - 1)),
                             driver=data.draw(st.sampled_from(["dataflow", "lockstep"])),
                             segment_elems=data.draw(st.integers(0, 7)),
                             in_place=data.draw(st.booleans()))


class _LateTransport:
    """A gloo-like transport for one rank: a receive's bytes land in its landing whenever they
    arrive (here: when the engine waits for it or settles it, else when the test says), the
    first receive waited for fails (its peer died)."""

    def __init__(self):
        self.pending = {}     # handle -> (landing, bytes not landed yet)
        self.failed = None

    def isend(self, s, data):
        return ("send", s.peer, s.lo)

    def irecv(self, r, landing):
        handle = ("recv", r.peer, r.lo)
        self.pending[handle] = (landing, np.full(r.hi - r.lo, 100.0 + r.peer))
        return handle

    def _land(self, handle):
        landing, data = self.pending.pop(handle)
        landing[...] = data

    def wait(self, handle):
        if handle[0] == "recv":
            if self.failed is None:
                self.failed = handle[1]
                self.pending.pop(handle)
                raise ConnectionError(f"rank {handle[1]} closed the connection")
            self._land(handle)

    def settle(self, handle, seconds):
        if handle in self.pending:
            self._land(handle)

    def is_timeout(self, exc):
        return False

    def peer_name(self, peer):
        return str(peer)


def test_receives_in_flight_land_before_the_rollback():
    """A direct all_gather on rank 1 of 3 whose first awaited peer died: the other peer's bytes,
    already on their way, would land after the rollback (gloo cannot withdraw a posted
    receive) and change the buffer after the call failed; the engine lets them land first."""
    schedule = build_schedule("all_gather", "direct", 3)
    lay = layout(schedule, 1, buffer_count=3 * 4)
    buffer = np.arange(lay.numel, dtype=np.float64)
    before = buffer.copy()
    transport = _LateTransport()
    p = engine.plan(schedule, 1, lay.offsets, 0)
    ws = engine.Workspace(_NumpyOps(), buffer, ReduceOp.SUM, p.staging_elems)
    with pytest.raises(PeerError, match="rank [02]"):
        engine.run_dataflow(schedule, 1, p, transport, ws, timeout=1.0, restore=True)
    for handle in list(transport.pending):   # what gloo lands after the call returned
        transport._land(handle)
    np.testing.assert_array_equal(buffer, before)
