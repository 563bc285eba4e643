"""The compiled lane: a shared-memory call planned once per signature and replayed from a flat
list of operations.

A training loop issues the same collective with the same shapes again and again; the general
path (front end, engine, :mod:`~ringccl.backends.shm.call`) re-decides at every call what it
decided at the previous identical one: ~300 Python-level calls for an 8-byte all_reduce
(docs/shm.md, "Where a small call's microseconds go"). Here the first call with a signature
(the backend's front end makes the key: collective, group, shape, dtype, op, algorithm, every
option, the environment variables a call reads) runs the general path inside
:class:`capture`; the shared-memory call then lowers its plan (:func:`lower`) into a
:class:`Lane`, and later calls with the same key replay it (:func:`replay`).

The lowering is the engine's plan, generic (no algorithm is named here): per step, its sends
(copied into this rank's area, one copy per step and range, as the transport's eager sends) and
its receives in plan order (the IR's reduction and operand order, accumulator folds included),
every view, word index and offset computed once. Any plan whose sends' copies fit this rank's
slot of the working area, with at most ``RING // 2`` sends per peer and call, is lowered
(one-shot and two-shot at any size: their sends are the buffer once); anything else (a ring's
sends are twice it) runs the general path at every call (large sends: docs/shm.md).

The replay speaks the transport's protocol (:mod:`~ringccl.backends.shm.transport`): the same
descriptors, the same monotone ``posted``/``released`` counters and sequence numbers (the
transport's own ``sent``/``expected``/``released`` lists), the same ``entered`` word and need
(the call is counted in ``ShmGroup.calls``), so lane calls and general calls alternate on one
group and a rank on the lane talks to a rank on the general path. What it leaves out:

* the entry's agreement (every peer entered this call) is moved to the call's end, where a
  plan that received from every peer has it already (a peer enters before it posts): one-shot
  pays nothing for it; a plan that did not (a ring, count 0) waits there, as a lazy entry's
  ``leave`` does. So no rank is ever two calls ahead of a peer (the needs of call ``c`` stay in
  place until every rank left it, :meth:`ShmGroup.enter`). Not waiting at the entry is safe
  because its copies go to
  the half ``call & 1`` of this rank's slot (double-buffered by call parity), the lane's need
  never exceeds the working area (no growth), and before writing a half the lane waits until
  every peer released what this rank sent before the previous call (after a general call: all
  it sent, as :meth:`ShmTransport.begin` does). For a one-shot plan that is already true (a
  peer posted its previous call's data only after reading ours), so one wait per call remains:
  for the peers' data. Sends that fit the slot but not half of it (a large call) use one area
  at every call, and the wait before writing it is for all this rank sent (the peers' last
  reads of the previous call): a possible wait at the start, but half the memory touched,
  which a large call's time is made of. Such a call wrote both halves, so the call after it
  waits for all sent too (the transport's ``lane_call`` names only a call that wrote its
  parity half). A ring plan, where a rank never hears from the peer
  it sends to, waits there when the peer lags: the per-rank ``released`` words are its
  ``done`` words.
* the private working buffer lives outside shared memory: for an all-or-nothing call
  (``restore``, ringccl.torch's default and ringccl.mpi's with a timeout) the caller's array is
  copied in, the plan runs on the copy, the result is copied back after the last wait (the
  caller's array changes only if the call succeeds; a call of more than
  :data:`RESTORE_MAX_BYTES` runs the general path, whose rollback copies less); otherwise
  (``dist.all_reduce``, whose contract promises nothing of a failed call's tensor; ringccl.mpi
  without a timeout, where a failure ends the job) the C loop runs the plan on the caller's
  array itself. Either way the same operations on the same operands in the same order as the
  general path: the same bits.

Every wait checks its word first and only then calls :meth:`ShmGroup.wait_word` (the bounded
wait: timeout, abort word, the peer's liveness); a failure aborts the group and raises the
drivers' PeerError / RingcclTimeout naming step and peer (:func:`ringccl.engine.step_error`).

A send of a range that a receive of an earlier step reduced, unchanged since (two-shot's
reduced chunk, a ring's), is copied by that receive: its reduction writes the send's area too,
while the result is in cache (:func:`~.lane_steps.fusable`). A large send is not copied at all
where every rank can read its peers' memory (:mod:`~ringccl.backends.shm.peer_memory`): the C
loop publishes its address, and waits before changing those bytes, and before the call ends,
until the peer read them (:func:`~.lane_steps.in_place_sends`).

The replay runs in C where it can (:mod:`~ringccl.backends.shm.lane_native`: the optional
``_lanec`` extension, for dtypes and ops whose C reduction is bitwise the backend's, checked at
lowering; the Python replay, :meth:`Lane._run_python`, always works on a copy); waits beyond a
short spin, and descriptors the lane does not expect, return to the Python code here. The front
ends' replayed call (:func:`call`: the key, the table, the entry) runs in C too.

``RINGCCL_LANE=0`` (read at import) or :func:`set_enabled` turns the lane off: every call runs
the general path (what tests and benchmarks compare against); ``RINGCCL_LANE=python`` or
:func:`set_native` keeps the replay in Python.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable

from ... import caches, environment
from ...consistency import debug_level
from ...errors import ArgumentError
from ...ops import ReduceOp
from ...engine import step_error
from ... import frontend
from . import lane_native, peer_memory
from .group import LINE, RING, ShmGroup
from .lane_native import BEGIN_WAIT, CANNOT, DONE, RECV, SEND_WAIT
from .lane_steps import in_place_sends, lower_steps
from .peer_memory import PEER_MEMORY
from .transport import mismatch, read_peer

__all__ = ["Lane", "lower", "capture", "wanted", "call", "replay", "first_call", "signature",
           "finisher", "set_enabled", "enabled", "set_native", "native", "compiled", "MAX_LANES",
           "RESTORE_MAX_BYTES", "check_environment"]

#: signatures kept (the table is emptied when it is full: every rank sees the same calls)
MAX_LANES = 256
#: the largest all-or-nothing call lowered (beyond, the general path's rollback costs less)
RESTORE_MAX_BYTES = 2 << 20

# RINGCCL_LANE -> (lane on, replay in C where it can)
_LANE_VALUES = {"": (True, True), "1": (True, True), "on": (True, True), "0": (False, True),
                "off": (False, True), "python": (True, False)}


def _from_env() -> "tuple | ArgumentError":
    """``RINGCCL_LANE`` as (on, native), or the error its value raises at the first call."""
    text = os.environ.get("RINGCCL_LANE", "").strip().lower()
    if text in _LANE_VALUES:
        return _LANE_VALUES[text]
    return ArgumentError(f"RINGCCL_LANE={os.environ['RINGCCL_LANE']!r} must be '1' or 'on' "
                         "(compiled shared-memory calls, the default), 'python' (the same, "
                         "replayed in Python) or '0' or 'off' (every call on the general path)")


def check_environment() -> None:
    """Raise now a call's ArgumentError for ``RINGCCL_LANE`` (read afresh: for launchers)."""
    setting = _from_env()
    if isinstance(setting, ArgumentError):
        raise setting


_env = _from_env()
_state = {"enabled": _env if isinstance(_env, ArgumentError) else _env[0],
          "native": not isinstance(_env, ArgumentError) and _env[1]}
_lanes: dict = {}
caches.register(_lanes.clear)
_run_c = lane_native._lanec.run if lane_native.available() else None
_local = threading.local()
#: the environment variables a call reads (the key includes them: no stale plan)
_ENV = ("RINGCCL_DEBUG", "RINGCCL_TIMEOUT", "RINGCCL_ALGO", "RINGCCL_TRANSPORT",
        "RINGCCL_SHM_THREADS")
#: their values now (:func:`ringccl.environment.reader`: no encode/decode per read)
_environment = environment.reader(_ENV)


def set_enabled(on: bool) -> None:
    """Turn the lane on or off for this process (off: every call runs the general path)."""
    _state["enabled"] = bool(on)


def enabled() -> bool:
    """Whether the lane is on (``RINGCCL_LANE``, :func:`set_enabled`)."""
    on = _state["enabled"]
    if isinstance(on, ArgumentError):
        raise on
    return on


def set_native(on: bool) -> None:
    """Replay lanes in C where they can (the default when ``_lanec`` was built), or in Python."""
    _state["native"] = bool(on)


def native() -> bool:
    """Whether lanes replay in C where they can (built, and not turned off)."""
    return _state["native"] and lane_native.available()


def compiled(native: bool = False) -> int:
    """Signatures holding a compiled lane now (``native``: those the C loop can replay)."""
    return sum(1 for e in _lanes.values() if e is not _INELIGIBLE and
               (not native or e.lane.program is not None))


def signature(*parts) -> tuple | None:
    """A front end's key: its ``parts`` and the environment variables a call reads; None when
    the lane is off, or when ``RINGCCL_DEBUG`` asks for logging or the cross-rank check (each
    call then runs the general path, which logs and checks it). A key with an unhashable part
    (hashed once, by :func:`replay`) never compiles: the general path checks the part."""
    on = _state["enabled"]
    if on is not True:
        if on is False:
            return None
        raise on
    env = _environment()
    if env[0] and debug_level():   # RINGCCL_DEBUG set
        return None   # logged or cross-checked calls: every one runs the general path
    return parts + env   # an unhashable part: replay and first_call run the general path


def finisher(b, group, op, dtype) -> Callable[[Any], None]:
    """What a replayed in-place call does after the lane, as the front end's flow
    (:func:`ringccl.frontend.in_place`): count the call on ``group`` (the caller's argument,
    resolved by the backend ``b``), divide the result by the group's size when ``op`` is AVG
    (checked by ``b`` for ``dtype``). Holds the group's key, never the group (:func:`_weak`)."""
    g = b.group(group)
    count = frontend.call_counter(b, g)
    if b.check_op(op, dtype) is not ReduceOp.AVG:
        return count
    n, divide = b.size(g), b.divide

    def done(buffer) -> None:
        count()
        divide(buffer, n)
    return done


class capture:
    """``with capture() as box:`` the shared-memory call run inside lowers its plan into
    ``box.lane`` (None when it cannot)."""

    def __init__(self) -> None:
        self.lane: Lane | None = None
        self.calls = 0     # shared-memory calls run inside: only a call of one is lowered

    def offer(self, make: Callable[[], "Lane | None"]) -> None:
        """The call ran: ``make()`` lowers its plan (kept if it is the only call inside)."""
        self.calls += 1
        self.lane = make() if self.calls == 1 else None

    def __enter__(self) -> "capture":
        _local.box = self
        return self

    def __exit__(self, *exc) -> None:
        _local.box = None


def wanted() -> capture | None:
    """The :class:`capture` in effect on this thread (the shared-memory call asks)."""
    return getattr(_local, "box", None)


def _never(group: Any, buffer: Any, key: tuple) -> bool:
    return False


_INELIGIBLE = _never   # a signature the lane cannot run: the general path, no capture


def _entry(group: Any, lane: "Lane", done: Callable[[Any], None]):
    """A compiled signature's table entry: ``entry(group, buffer, key)`` replays ``lane`` when
    ``group`` is the caller's group of the first call (identity, held weakly), then ``done``
    (e.g. :func:`finisher`'s); False when it did not run (:func:`replay`). A lane the C loop
    runs gets ``_lanec.Entry``, which runs the common case without a Python frame and hands
    the rest to the Python entry made here."""
    ref = _weak(group)

    def entry(caller_group: Any, buffer: Any, key: tuple) -> bool:
        if ref() is not caller_group:
            return False
        ran = lane.run(buffer)
        if ran:
            done(buffer)
            return True
        if ran is False:
            del _lanes[key]   # the group changed: the next call compiles again
        return False
    entry.lane = lane
    if lane.program is None or _run_c is None:
        return entry
    return lane_native._lanec.Entry(ref, lane, lane.group, lane.transport, _state, done, entry)


def replay(key: tuple, group: Any, buffer: Any) -> bool:
    """Run the lane compiled for ``key`` on the caller's array ``buffer`` (any shape; a numpy
    array or a torch tensor); False when there is none or it cannot run now (the caller then
    runs the general path; a lane whose group changed is forgotten; a read-only or
    non-contiguous buffer is left to the general path, which copies or refuses it)."""
    try:
        e = _lanes.get(key)
    except TypeError:   # an unhashable part (signature)
        return False
    return e is not None and e(group, buffer, key)


def _call_python(parts: tuple, group: Any, buffer: Any) -> "tuple | bool | None":
    """:func:`call` in Python (no ``_lanec``; the cases the C one hands over)."""
    key = signature(*parts)
    if key is not None and replay(key, group, buffer):
        return True
    return key


def call(parts: tuple, group: Any, buffer: Any) -> "tuple | bool | None":
    """A front end's replayed call: True when the call with signature ``parts`` (and the
    environment, :func:`signature`) replayed its compiled lane on ``buffer`` over ``group``;
    otherwise the signature's key (None when the lane is off), for :func:`first_call`. In C
    (``_lanec.call``) where it was built and the environment's mapping is readable, with the
    same outcome as :func:`signature` then :func:`replay`."""
    return _call_python(parts, group, buffer)


if _run_c is not None and environment.mapping() is not None:
    lane_native._lanec.configure(_lanes, _state, environment.mapping(),
                                 environment.encoded(_ENV), _call_python)
    call = lane_native._lanec.call   # noqa: F811 (the same contract, in C)


def first_call(key: tuple | None, group: Any, general: Callable[[], None],
               finish: Callable[[], Callable[[Any], None]]) -> None:
    """``general()``; for a signature seen first (``key`` not None, not in the table) its lane
    compiled on the way, kept with ``finish()`` (what :func:`replay` does after the lane, e.g.
    :func:`finisher`). Raises ArgumentError for a bad ``RINGCCL_SHM_THREADS`` first."""
    try:
        known = key is None or key in _lanes
    except TypeError:   # an unhashable part (signature): never compiled
        known = True
    if known:
        general()
        return
    lane_native.threads_setting()   # before the call moves data
    with capture() as box:
        general()
    if len(_lanes) >= MAX_LANES:
        _lanes.clear()
    _lanes[key] = _INELIGIBLE if box.lane is None else _entry(group, box.lane, finish())


def _weak(group: Any) -> Callable[[], Any]:
    """``group`` held weakly where it can be: a compiled lane must not keep a torch process
    group alive past ``destroy_process_group`` (its gloo threads would run into the
    interpreter's exit). Objects without weak references (None, some communicators) are
    held as they are."""
    try:
        return weakref.ref(group)
    except TypeError:
        return lambda: group


def lower(schedule, plan, rank: int, group: ShmGroup, transport, dialect, op, *,
          itemsize: int, numel: int, need: int, timeout: float | None,
          restore: bool = True) -> "Lane | None":
    """``plan`` (this rank's, over ``group``) as a :class:`Lane`, or None when it does not fit
    (module docstring). Call it after a call of the same plan ended (the working area exists
    and holds ``need``). ``restore``: the call is all-or-nothing (the caller's buffer written
    only after the last wait): the C loop then works on a copy too, and a buffer of more than
    :data:`RESTORE_MAX_BYTES` is not lowered."""
    if not plan.steps or not group.work_serial or group.work_slot < need or group.retired:
        return None
    if restore and numel * itemsize > RESTORE_MAX_BYTES:
        return None
    half = group.work_slot // 2
    if 64 % itemsize:
        return None
    used, copies, per_peer = 0, {}, {}
    for st in plan.steps:
        for s in st.sends:
            per_peer[s.peer] = per_peer.get(s.peer, 0) + 1
            key = (s.step, s.lo, s.hi)
            if key not in copies:
                copies[key] = used
                used += -(-(s.hi - s.lo) * itemsize // 64) * 64
    if used > group.work_slot or any(k > RING // 2 for k in per_peer.values()):
        return None
    if used > half:
        half = 0   # one area, written at every call
    return Lane(schedule, plan, rank, group, transport, dialect, op, itemsize, numel, need,
                timeout, copies, half, restore)


class Lane:
    """One signature's compiled shared-memory call (module docstring). :meth:`run` replays it."""

    def __init__(self, schedule, plan, rank: int, group: ShmGroup, transport, dialect, op,
                 itemsize: int, numel: int, need: int, timeout: float | None, copies: dict,
                 half: int, restore: bool = True):
        g, ops = group, dialect.ops
        me = g.rank
        self.schedule, self.rank, self.group, self.transport = schedule, rank, g, transport
        self.timeout, self.need, self.itemsize, self.numel = timeout, need, itemsize, numel
        self.restore = restore
        self.view, self.slot = dialect.view, dialect.slot
        self.copy, self.combine, self.combine_into = ops.copy, ops.combine(op), \
            ops.combine_into(op)
        self.serial = serial = g.work_serial
        segment = dialect.slot(g, serial)
        self.work = work = ops.empty(segment, numel)
        acc = ops.empty(segment, plan.accumulator_elems) if plan.accumulator_elems else None
        self.single = half == 0   # one area for both parities (lower)
        self.clone = dialect.clone
        reduction = lane_native.reduction(self.combine, self.combine_into, work.dtype, op)
        bases = [me * g.work_slot + h * half for h in (0, 1)]
        self.need_words = (g.rank_word(me, 2), g.rank_word(me, 3))
        self.entered_word = g.rank_word(me, 1)
        self.released_words = [(p, g.released_word(me, p)) for p in range(g.world_size)
                               if p != me]
        self.entered_words = [(p, g.rank_word(p, 1)) for p in range(g.world_size) if p != me]
        self.steps, self.read_waits = lower_steps(
            plan, g, work, segment, acc, bases, copies, itemsize,
            in_place_sends(g, reduction is not None))
        self.first = {}   # peer -> (op, step) named when a wait before step 0 fails
        for st in reversed(plan.steps):
            for o in st.sends + st.recvs:
                self.first[o.peer] = (o, st)
        self.views: dict = {}   # (serial, byte offset, nbytes) -> the dialect's array
        # the C loop's program, when its reduction is bitwise the backend's (lane_native)
        self.program, self.meta = None, ()
        if reduction is not None:
            self.program, self.meta = lane_native.program(self, g, reduction, segment)

    def run(self, buffer) -> bool | None:
        """Replay the call on the caller's ``buffer`` (its backend's array, any shape); False,
        having done nothing, when the group changed since the lane was compiled (released,
        grown, aborted, mid-call): the caller runs the general path, which says why; None,
        having done nothing, when ``buffer`` is read-only or not contiguous."""
        if self.program is not None:
            self.run = self._run_native   # one frame fewer per call
            return self._run_native(buffer)
        return self._run_python(buffer)

    def _run_native(self, buffer) -> bool | None:
        """:meth:`run` through the C loop (:mod:`~ringccl.backends.shm.lane_native`); its
        returns to Python (a long wait, a descriptor it does not expect) resume here."""
        if not _state["native"]:
            return self._run_python(buffer)
        r = self._continue(buffer, None, self.group.calls + 1)
        return True if r == DONE else False if r == CANNOT else None

    def _continue(self, buffer, r: int | None, c: int) -> int:
        """Call ``c`` through the C loop from its start (``r`` None) or from where it returned
        ``r`` (an operation to wait for or read), to its end (DONE; or CANNOT / BUFFER from
        the start, nothing done); any error aborts the group."""
        g, t, program = self.group, self.transport, self.program
        try:
            if r is None:
                r = _run_c(program, buffer, c, 0, g, t)
            while r >= 0:
                r = _run_c(program, buffer, c, self._resume(r >> 1, r & 1, c, buffer), g, t)
        except BaseException:
            if not g.closed:
                g.abort()
            raise
        return r

    def _resume(self, i: int, unexpected: int, c: int, buffer) -> int:
        """Where the C loop stopped (operation ``i``): wait boundedly, or read the unexpected
        descriptor of receive ``i`` (into ``buffer``, the caller's, which the C loop works
        on); the position to continue from."""
        kind, peer, word, recv = self.meta[i]
        t = self.transport
        if kind == RECV:
            if unexpected:
                at = recv[8] + t.expected[peer] % RING * 4
                if self.group.w[at] == PEER_MEMORY:   # the C loop could not read it
                    fail = peer_memory.failure(self.group.pids[peer], self.group.w[at + 1],
                                               t.peer_name(peer))
                    fail.peer = peer
                    raise step_error(self.schedule, self.rank, t, self.timeout, recv[9],
                                     recv[10], fail)
                if not self.restore:   # the C loop works on the caller's buffer
                    r = recv[9]
                    recv = recv[:1] + (self.view(buffer).reshape(-1)[r.lo:r.hi],) + recv[2:]
                self._receive(self.group.w, t.expected, t.released, recv)
                return i + 1
            self._wait(recv[6], t.expected[peer] + 1, peer, "send", recv[9], recv[10])
        elif kind == BEGIN_WAIT:
            marks = self._marks(t, c)
            self._wait(word, marks[peer], peer, "read this rank's earlier sends",
                       *self.first.get(peer, (None, None)))
        elif kind == SEND_WAIT:   # recv: k, this call's send to the peer read in place
            self._wait(word, t.lane_marks[peer] + recv + 1, peer, "read this rank's send",
                       *self.first.get(peer, (None, None)))
        else:
            self._wait(word, c, peer, f"enter call {c}", *self.first.get(peer, (None, None)))
        return i

    def _run_python(self, buffer) -> bool | None:
        """:meth:`run` in Python (no ``_lanec``, a reduction C cannot match, or
        :func:`set_native` off)."""
        g = self.group
        if g.closed or g.work_serial != self.serial or g.retired or g.lazy:
            return False
        w = g.w
        if w[2 * LINE]:
            return False
        mine = self.view(buffer)
        if not (mine.flags.c_contiguous and mine.flags.writeable):
            return None
        t = self.transport
        c = g.calls + 1
        try:
            self._begin(g, w, t, c)
            self._steps(g, w, t, c & 1, mine.reshape(-1))
            # the end of the call's agreement (as a lazy entry's leave): every peer entered
            # this call, so none is two calls behind when this rank next publishes a need
            # (ShmGroup.enter); already true after a plan that received from every peer
            for peer, word in self.entered_words:
                if w[word] < c:
                    self._wait(word, c, peer, f"enter call {c}", *self.first.get(
                        peer, (None, None)))
        except BaseException:
            if not g.closed:
                g.abort()
            raise
        return True

    def _marks(self, t, c: int) -> list:
        """Per peer, the sends call ``c`` waits for the peer to have read before writing: those
        before the previous call when that call wrote only its parity half and this one writes
        the other; else all (module docstring)."""
        return t.lane_marks if t.lane_call == c - 1 and not self.single else t.sent

    def _begin(self, g: ShmGroup, w, t, c: int) -> None:
        """Enter call ``c`` (counted, need and entry published, no agreement) once the peers
        read what this rank sent before the previous call (after a general one: all of it)."""
        marks = self._marks(t, c)
        for peer, word in self.released_words:
            if w[word] < marks[peer]:
                self._wait(word, marks[peer], peer, "read this rank's earlier sends",
                           *self.first.get(peer, (None, None)))
        t.lane_marks = t.sent[:]
        t.lane_call = -1 if self.single else c   # one area: the next call waits for all
        g.calls = c
        g.lazy = 0
        w[self.need_words[c & 1]] = self.need
        w[self.entered_word] = c

    def _steps(self, g: ShmGroup, w, t, h: int, mine) -> None:
        copy, work, serial = self.copy, self.work, self.serial
        sent, expected, released = t.sent, t.expected, t.released
        receive = self._receive
        copy(work, mine)
        for sends, recvs in self.steps:
            for peer, src, areas, offsets, nbytes, ring, posted, _ in sends:
                if areas is not None:
                    copy(areas[h], src)
                seq = sent[peer]
                sent[peer] = seq + 1
                at = ring + seq % RING * 4
                w[at] = serial
                w[at + 1] = offsets[h]
                w[at + 2] = nbytes
                w[at + 3] = seq
                w[posted] = seq + 1   # after the descriptor and the data: TSO keeps the order
            for recv in recvs:
                receive(w, expected, released, recv)
        copy(mine, work)

    def _receive(self, w, expected: list, released: list, recv: tuple) -> None:
        """One receive of the plan: wait for the peer's send, apply it, release it."""
        peer, dst, mode, fold, flush, expect, posted, rel, ring, r, st, also = recv[:12]
        seq = expected[peer]
        expected[peer] = seq + 1
        if w[posted] <= seq:
            self._wait(posted, seq + 1, peer, "send", r, st)
        at = ring + seq % RING * 4
        key = (w[at], w[at + 1], w[at + 2])
        if key[0] == PEER_MEMORY:   # a send in the peer's own memory: read it out
            src = self._read_peer(key, w[at + 3], seq, expect, dst, r, st)
        else:
            src = self.views.get(key)
            if src is None or w[at + 3] != seq:
                src = self._view(self.group, key, w[at + 3], seq, expect, peer)
        if mode == 1:
            self.combine(dst, src)
        elif mode == 4:
            self.combine_into(dst, src, dst)
        elif mode == 0:
            self.copy(dst, src)
        else:
            if mode == 2:
                self.copy(fold, src)
            else:
                self.combine(fold, src)
            if flush:
                self.combine_into(dst, fold, dst)   # the lower ranks' accumulator on the left
        if also is not None:   # a later send's copy (modes 1, 4; the C loop's block by block)
            self.copy(also[0][self.group.calls & 1], dst)
        released[peer] = seq + 1
        w[rel] = seq + 1

    def _read_peer(self, key: tuple, got: int, seq: int, expect: int, dst, r, st):
        """A private copy of the send descriptor ``key`` names in the peer's own memory."""
        g, peer = self.group, r.peer
        if got != seq or key[2] != expect:
            raise mismatch(g, self.transport.peer_name(peer), key[2], expect, seq)
        try:
            return read_peer(g, peer, key[1], self.clone(dst), self.transport.peer_name(peer))
        except ConnectionError as exc:
            raise step_error(self.schedule, self.rank, self.transport, self.timeout, r, st,
                             exc) from exc

    def _view(self, g: ShmGroup, key: tuple, got: int, seq: int, expect: int, peer: int):
        """The peer's bytes named by descriptor ``key`` = (serial, byte offset, nbytes), checked
        as the transport checks them."""
        serial, offset, nbytes = key
        if got != seq or nbytes != expect or serial not in g.segments:
            raise mismatch(g, self.transport.peer_name(peer), nbytes, expect, seq)
        if len(self.views) >= 64:
            self.views.clear()
        n = self.itemsize
        src = self.views[key] = self.slot(g, serial)[offset // n:(offset + nbytes) // n]
        return src

    def _wait(self, word: int, target: int, peer: int, what: str, op, st) -> None:
        try:
            self.group.wait_word(word, target, peer, what, self.timeout)
        except (TimeoutError, ConnectionError) as exc:
            if op is None:
                raise
            raise step_error(self.schedule, self.rank, self.transport, self.timeout, op, st,
                             exc) from exc
