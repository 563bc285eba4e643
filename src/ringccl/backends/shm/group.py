"""One group's shared memory on one host: the control block, the data segments, the call entry,
growth, the abort word and bounded waits (backend-neutral: numpy/mmap/os, and ctypes through
:mod:`.peer_memory`).

Set-up (once per group, :meth:`ShmGroup.setup`): rank 0 creates the control segment and tells
the others its name through the backend's ``exchange`` (an all-gather of a small object:
torch's ``all_gather_object``, mpi4py's ``allgather``); they attach; a second exchange is the
barrier after which rank 0 unlinks it (in a ``finally``: every failing path unlinks). Data
segments made later (a larger working area, a zero-copy area) follow the same protocol through
the control block itself (their names are computed, not sent: ``segment_name(uid, serial)``).

Control block (int64 words, every field a writer owns on a 64-byte line of its own, so no two
ranks write one cache line):

* line 0: magic, world_size; line 1: ``made`` (the serial rank 0 created last); line 2: the
  abort word (0, or ``(rank + 1) | code << 16``);
* one line per rank: pid, ``entered`` (collective calls begun), ``need`` for even and odd calls
  (bytes of working area), ``ready`` (the serial it attached last), whether it can read every
  peer's memory and where its probe word is (:mod:`.peer_memory`);
* per directed pair (src, dst): ``posted`` (sends src made to dst) and ``released`` (of those,
  the ones dst is done reading), each on its own line, and a ring of :data:`RING` descriptors
  (serial, byte offset, nbytes, sequence number).

Counters only ever increase (never reset: vLLM's custom all-reduce hung on flags reset and
raced), so a late reader can never mistake an old round for a new one. Plain aligned 8-byte
stores and loads are ordered on x86-64 (TSO): a reader that sees ``posted`` advance sees the
descriptor and the data written before it. Other architectures need fences Python cannot
issue, so :func:`check_platform` refuses them.

References: vLLM ``custom_all_reduce`` (monotone flags); DeepSpeed shm comm (/dev/shm leaks);
Intel SDM vol. 3A §8.2 (x86 memory ordering).
"""

from __future__ import annotations

import os
import platform
import time
import uuid
from typing import Any, Callable

import numpy as np

from ...errors import BackendError
from . import peer_memory
from .segment import Segment, ShmSpaceError, segment_name

__all__ = ["ShmGroup", "check_platform", "supported_platform", "process_alive", "RING",
           "SPIN_POLLS",
           "YIELD_SECONDS", "NAP_SECONDS", "LIVENESS_SECONDS"]

LINE = 8            # int64 words per 64-byte cache line
RING = 128          # descriptors per directed pair
MAGIC = 0x52494E47434C3031   # "RINGCCL01"

#: tight polls before a wait starts yielding the core, then ``sched_yield`` polls for
#: YIELD_SECONDS, then sleeps growing from 20 µs to 1 ms. With more ranks than cores (4 on 2
#: here) a waiter that spins keeps the rank it waits for off the core, and one that sleeps
#: wakes late; a short spin then a short yield phase won. Measured with ``benchmarks/
#: bench_shm.py --wait-policies --sizes 4KiB,64KiB,1MiB --iters 9`` (all_reduce, the policies
#: and gloo interleaved round by round, median µs, max over ranks; 2 cores, load average
#: 1.9-2.3 from other jobs): 4 processes (polls+yield) 200+1ms / 0+1ms / 20+1ms / 2000+1ms /
#: sleep at once / 20+100µs / 0+100µs: 4 KiB 618 / 476 / 559 / 845 / 562 / 397 / 419, 64 KiB
#: 504 / 424 / 440 / 665 / 589 / 416 / 472, 1 MiB 1982 / 1504 / 1403 / 2797 / 1364 / 1057 /
#: 1447 (gloo 5577, 5931, 8136); 2 processes: 4 KiB 89 / 57 / 54 / 58 / 222 / 54 / 55, 64 KiB
#: 85 / 72 / 68 / 71 / 225 / 74 / 67, 1 MiB 322 / 261 / 224 / 252 / 577 / 251 / 258 (gloo
#: 1358, 1067, 1060). At 64 MiB (``--sizes 64MiB --iters 5``, load 2.0) they are within the
#: noise of each other (memory bound): 4 processes 68-75 ms, 2 processes 25-26.7 ms.
SPIN_POLLS = 20
YIELD_SECONDS = 1e-4
#: the longest sleep of a wait's last phase (the sleeps double from 20 µs up to it). Capping
#: it at 100 µs did not help (same command, load 2.5-2.8; 20 polls + 100 µs yield, sleeps up
#: to 1 ms / up to 100 µs): 2 processes 4 KiB 68 / 71, 64 KiB 85 / 110, 1 MiB 389 / 397 µs;
#: 4 processes 4 KiB 392 / 503, 64 KiB 406 / 440, 1 MiB 1636 / 1085 µs.
NAP_SECONDS = 1e-3
#: how often a wait checks that the peer it waits for still lives (a dead peer: PeerError now,
#: not after the whole timeout)
LIVENESS_SECONDS = 0.05

_ABORT_TIMEOUT, _ABORT_DEAD, _ABORT_ERROR, _ABORT_SPACE = 1, 2, 3, 4
_WHY = {_ABORT_TIMEOUT: "it timed out", _ABORT_DEAD: "it found a peer dead",
        _ABORT_ERROR: "it failed", _ABORT_SPACE: "shared memory ran out of space"}


def supported_platform() -> bool:
    """Whether plain aligned int64 loads/stores are ordered here (x86-64's TSO)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def check_platform() -> None:
    """Raise :class:`BackendError` on a machine without x86-64's store ordering."""
    if not supported_platform():
        raise BackendError(
            f"transport='shm' needs x86-64 (its stores are seen in order by other cores); this "
            f"machine is {platform.machine()!r}, where Python cannot issue the memory fences "
            "the protocol would need; use transport='p2p' (or 'auto', which does here)")


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:][:1] not in (b"Z", b"X")
    except (OSError, ValueError):
        return True


class _Failure(Exception):
    pass


class PeerDied(ConnectionError):
    """A peer process is gone (the message names it)."""


class Aborted(ConnectionError):
    """Another rank marked the group failed."""


class ShmGroup:
    """The shared-memory state of one group on this rank (see the module docstring).

    Args:
        rank, world_size: this rank in the group, and the group's size.
        exchange: ``exchange(obj) -> list`` of every rank's ``obj`` in rank order (the
            backend's all-gather of small picklable objects; used twice, at set-up only).
        timeout: seconds a wait for a peer may take by default.
    Raises:
        BackendError: set-up failed on some rank (its message); ShmSpaceError: the control
            block does not fit in the shared-memory directory. PeerDied (a ConnectionError)
            or TimeoutError: an exchange failed (a peer died or stalled), ``.peer`` the rank
            found dead (the ranks' pids travel with the first exchange: a peer that dies
            after it is named), or None.
    """

    def __init__(self, rank: int, world_size: int, exchange: Callable[[Any], list],
                 timeout: float):
        self.rank, self.world_size, self.timeout = rank, world_size, timeout
        n = world_size
        self.rank_line = 3
        self.pair_line = self.rank_line + n
        self.ring_word = (self.pair_line + 2 * n * n) * LINE
        self.ctrl_bytes = self.ring_word * 8 + n * n * RING * 4 * 8
        self.segments: dict[int, Segment] = {}   # serial -> mapped data segment
        self.work_serial, self.work_slot = 0, 0  # the working area (0: none yet)
        self.next_serial = 1
        self.calls = 0
        self.lazy = 0            # the call entered without the agreement (enter(lazy=True))
        self.retired: list = []  # (call, serial) of working areas growth replaced
        self.cache: dict = {}    # the dialect's views of the segments (cleared with them)
        self.user_area: tuple | None = None   # (serial, slot bytes, bytes used): shm_empty's
        self.closed = False
        self.pids: list = []     # every rank's pid, from the set-up's first exchange on
        self.watch: list = []    # the pids visible here (another pid namespace's are not)
        self._setup(exchange)

    # -- set-up ------------------------------------------------------------------------------
    def _exchange(self, exchange, obj) -> list:
        """``exchange(obj)``; its failure (the backend's own error: gloo's RuntimeError, a
        timeout) as :class:`PeerDied` naming the first peer found dead (``.peer``), or
        TimeoutError when it timed out and no peer is known dead."""
        try:
            return exchange(obj)
        except BackendError:
            raise
        except Exception as exc:   # noqa: BLE001 - the backend's collective failed
            peer = next((r for r, p in enumerate(self.pids) if r != self.rank and
                         self.watch[r] and not process_alive(p)), None)
            text = f"{type(exc).__name__}: {exc}"
            timed_out = isinstance(exc, TimeoutError) or "timed out" in text.lower() or \
                "timeout" in text.lower()
            if peer is None and timed_out:
                err: Exception = TimeoutError(f"the set-up exchange timed out ({text})")
            else:
                gone = "a peer left it" if peer is None else f"rank {peer} is gone (pid " \
                    f"{self.pids[peer]})"
                err = PeerDied(f"the set-up exchange failed: {gone} ({text})")
            err.peer = peer
            raise err from exc

    def _setup(self, exchange) -> None:
        ctrl = None
        me = os.getpid()
        try:
            if self.rank == 0:
                try:
                    self.uid = uuid.uuid4().hex
                    ctrl = Segment.create(segment_name(self.uid, 0), self.ctrl_bytes)
                    msg = ("ok", self.uid, me)
                except BackendError as exc:
                    msg = ("error", exc, me)
                got = self._exchange(exchange, msg)
                if msg[0] == "error":
                    raise msg[1]
            else:
                got = self._exchange(exchange, ("pid", me))
                if got[0][0] != "ok":
                    raise BackendError(f"rank 0 could not create the group's shared memory: "
                                       f"{got[0][1]}")
                self.uid = got[0][1]
            # learnt now: a peer that dies from here on is named
            self.pids = [m[-1] for m in got]
            self.watch = [p != me and process_alive(p) for p in self.pids]
            if self.rank != 0:
                try:
                    ctrl = Segment.attach(segment_name(self.uid, 0), self.ctrl_bytes)
                except BackendError as exc:
                    self._exchange(exchange, ("error", str(exc)))
                    raise
            self.ctrl = ctrl
            self.w = memoryview(ctrl.map).cast("q")
            if self.rank == 0:
                self.w[0], self.w[1] = MAGIC, self.world_size
            self.w[self.rank_line * LINE + self.rank * LINE] = os.getpid()
            self.w[self.rank_word(self.rank, 6)] = peer_memory.probe_word()
            everyone = self._exchange(exchange, ("ok", me))   # the barrier: all attached
            bad = [(r, m[1]) for r, m in enumerate(everyone) if m[0] != "ok"]
            if bad:
                raise BackendError(f"rank {bad[0][0]} could not attach the group's shared "
                                   f"memory: {bad[0][1]}")
            if self.w[0] != MAGIC or self.w[1] != self.world_size:
                raise BackendError("the group's control block is not ringccl's (another job "
                                   "reusing a name?)")
        finally:
            if ctrl is not None and self.rank == 0:
                ctrl.unlink()
        self.pids = [m[1] for m in everyone]
        self.watch = [p != me and process_alive(p) for p in self.pids]
        # whether this rank can read every peer's memory (peer_memory): 1 yes, 2 no; published
        # before this rank's first call, so a peer's lowering (after a call) sees it
        readable = all(self.watch[r] and peer_memory.probe(p, self.w[self.rank_word(r, 6)])
                       for r, p in enumerate(self.pids) if r != self.rank)
        self.w[self.rank_word(self.rank, 5)] = 1 if readable else 2

    # -- words -------------------------------------------------------------------------------
    def rank_word(self, rank: int, field: int) -> int:
        """pid 0, entered 1, need 2/3, ready 4, reads its peers' memory 5 (1 yes, 2 no), its
        probe word's address 6 (:mod:`~ringccl.backends.shm.peer_memory`)."""
        return (self.rank_line + rank) * LINE + field

    def reads_peers(self, rank: int) -> bool:
        """Whether ``rank`` said it can read every peer's memory (a send to it may be read
        in place, :mod:`~ringccl.backends.shm.peer_memory`)."""
        return self.w[self.rank_word(rank, 5)] == 1

    def entered(self, rank: int) -> int:
        """The last call ``rank`` entered (its count of :meth:`enter`)."""
        return self.w[self.rank_word(rank, 1)]

    def posted_word(self, src: int, dst: int) -> int:
        return (self.pair_line + 2 * (src * self.world_size + dst)) * LINE

    def released_word(self, src: int, dst: int) -> int:
        return (self.pair_line + 2 * (src * self.world_size + dst) + 1) * LINE

    def ring_entry(self, src: int, dst: int, seq: int) -> int:
        return self.ring_word + ((src * self.world_size + dst) * RING + seq % RING) * 4

    # -- failures ----------------------------------------------------------------------------
    def abort(self, code: int = _ABORT_ERROR, peer: int = -1) -> None:
        """Mark the group failed (the first rank to do so is the one named, with the ``peer``
        it found dead or waited for in vain, if any)."""
        if not self.closed and self.w[2 * LINE] == 0:
            self.w[2 * LINE] = (self.rank + 1) | code << 16 | (peer + 1) << 32

    def _abort_fields(self) -> tuple[int, int, int]:
        """The abort word as (rank that aborted, code, the peer it named or -1)."""
        word = self.w[2 * LINE]
        return (word & 0xFFFF) - 1, (word >> 16) & 0xFFFF, (word >> 32) - 1

    def aborted(self) -> Aborted | None:
        if not self.w[2 * LINE]:
            return None
        who, code, peer = self._abort_fields()
        why = _WHY.get(code, '?')
        if peer >= 0 and code in (_ABORT_DEAD, _ABORT_TIMEOUT):   # name the peer it meant
            why = f"it found rank {peer} dead" if code == _ABORT_DEAD else \
                f"it timed out waiting for rank {peer}"
        if who == self.rank:   # this rank's own abort, in an earlier call: no peer to name
            exc = Aborted(f"this rank aborted the group's shared memory in an earlier call "
                          f"({why}); the group cannot be used again")
            exc.peer = None
        else:
            exc = Aborted(f"rank {who} aborted the group's shared memory ({why})")
            exc.peer = who
        return exc

    def wait_word(self, word: int, target: int, peer: int, what: str,
                  timeout: float | None = None,
                  progress: Callable[[bool], None] | None = None) -> None:
        """Block until control word ``word`` >= ``target`` (written by ``peer``), bounded by
        ``timeout`` (default the group's), the abort word and ``peer``'s liveness.
        ``progress(after_spin)``, when given, is called while waiting (every 16 polls, and on
        every poll once the tight spin is over): the transport reads what has arrived meanwhile
        (see :mod:`ringccl.backends.shm.transport`).

        Raises:
            TimeoutError: not within the timeout. PeerDied: ``peer`` is gone. Aborted:
                another rank failed. (This rank sets the abort word on the first two.)
        """
        w = self.w
        if w[word] >= target:
            return
        for i in range(SPIN_POLLS):
            if w[word] >= target:
                return
            if progress is not None and not i & 15:
                progress(False)
        timeout = self.timeout if timeout is None else timeout
        now = time.monotonic()
        # the first liveness check after LIVENESS_SECONDS: most waits end long before it, and
        # the check (a kill and a read of /proc) costs tens of µs
        deadline, yield_until = now + timeout, now + YIELD_SECONDS
        check_at = now + min(LIVENESS_SECONDS, timeout)
        nap = 2e-5
        abort_at = 2 * LINE
        while w[word] < target:
            now = time.monotonic()
            if now >= check_at:
                check_at = now + LIVENESS_SECONDS
                if w[abort_at]:
                    raise self.aborted()
                if peer >= 0 and self.watch[peer] and not process_alive(self.pids[peer]):
                    self.abort(_ABORT_DEAD, peer)
                    exc = PeerDied(f"rank {peer} (pid {self.pids[peer]}) died while this rank "
                                   f"waited for it to {what}")
                    exc.peer = peer
                    raise exc
                if now >= deadline:
                    if w[word] >= target:
                        return
                    self.abort(_ABORT_TIMEOUT, peer)
                    exc = TimeoutError(f"rank {peer} did not {what} within {timeout:g} s")
                    exc.peer = peer
                    raise exc
            if progress is not None:
                progress(True)
            if self.lazy:
                self._grow_if_asked()
            if now < yield_until:
                os.sched_yield()
            else:
                time.sleep(nap)
                nap = min(nap * 2, NAP_SECONDS)
        if w[abort_at] and peer < 0:
            raise self.aborted()

    # -- calls -------------------------------------------------------------------------------
    def enter(self, need: int, timeout: float | None = None, lazy: bool = False) -> None:
        """Begin a collective call needing ``need`` bytes of working area on this rank: publish
        it, wait until every peer began this call too, and grow the working area (every rank
        at once) when some rank needs more than it holds.

        ``lazy=True`` (the common case made cheap): when the working area already holds
        ``need``, do not wait for the peers; the agreement is then completed by :meth:`leave`
        (call it after the call's last operation), and until then every wait of this rank
        notices a peer that entered this call needing more and joins the growth
        (:meth:`_grow_if_asked`). Correct because capacity only grows and a rank that needs
        more blocks in its own entry until every rank joined, which none can skip: a rank
        leaves the call only after seeing every peer's entry and need for it (the needs of
        call ``c`` sit in slot ``c & 1``, never overwritten before every rank left call ``c``).
        The caller must then itself make sure the peers read its previous call's sends before
        it writes its slot again (:meth:`ShmTransport.begin` waits for that).

        Raises:
            TimeoutError, PeerDied, Aborted (see :meth:`wait_word`); ShmSpaceError: the larger
            area does not fit (on every rank: rank 0 aborts the group).
        """
        if self.closed:
            raise BackendError("this group's shared memory was released (clear_caches or "
                               "destroy_process_group); call the collective again after "
                               "re-creating the group")
        w = self.w
        if w[2 * LINE]:
            raise self.aborted()
        self.calls += 1
        c = self.calls
        w[self.rank_word(self.rank, 2 + (c & 1))] = need
        w[self.rank_word(self.rank, 1)] = c
        if lazy and self.work_serial and need <= self.work_slot:
            self.lazy = c
            return
        self.lazy = 0
        self._agree(c, timeout, lazy)

    def _agree(self, c: int, timeout: float | None, retire: bool = True) -> None:
        """Wait until every peer entered call ``c``; grow the working area to the largest
        need any rank published for it, when that exceeds it. ``retire``: the segment it
        replaces stays mapped (in :attr:`retired`) while lazily entered calls' descriptors may
        name it; else (every rank agrees at every entry) it is dropped at once."""
        w = self.w
        most = w[self.rank_word(self.rank, 2 + (c & 1))]
        for peer in range(self.world_size):
            if peer != self.rank:
                self.wait_word(self.rank_word(peer, 1), c, peer, f"enter call {c}", timeout)
                most = max(most, w[self.rank_word(peer, 2 + (c & 1))])
        if most > self.work_slot:
            slot = max(1 << 16, 1 << (most - 1).bit_length())
            serial = self.new_segment(slot * self.world_size, timeout)
            old = self.work_serial
            self.work_serial, self.work_slot = serial, slot
            if old and retire:
                self.retired.append((c, old))
            elif old:
                self._drop(self.segments.pop(old))

    def _grow_if_asked(self) -> None:
        """Inside a wait of a lazily entered call: join the growth a peer that entered the
        same call asked for (its need exceeds the working area)."""
        c, w = self.lazy, self.w
        for peer in range(self.world_size):
            if peer != self.rank and w[self.rank_word(peer, 1)] == c and \
                    w[self.rank_word(peer, 2 + (c & 1))] > self.work_slot:
                self.lazy = 0          # the growth's own waits must not come back here
                try:
                    self._agree(c, None)
                except BaseException:
                    self.lazy = c
                    raise
                return

    def leave(self, timeout: float | None = None) -> None:
        """End a call begun with ``enter(lazy=True)``: see every peer's entry into it (usually
        long seen: this rank received from them) and join a growth one asked for. A no-op
        after an entry that agreed already."""
        c = self.lazy
        if c:
            self.lazy = 0
            self._agree(c, timeout)

    def drop_retired(self) -> None:
        """Unmap the working areas replaced by growth in an earlier call than this one (call it
        once the peers have read every send of this rank made before:
        :meth:`ShmTransport.begin`); those replaced in this call may still hold the peers'
        sends of this call (posted before the growth)."""
        keep = []
        for call, serial in self.retired:
            if call < self.calls:
                seg = self.segments.pop(serial, None)
                if seg is not None:
                    self._drop(seg)
            else:
                keep.append((call, serial))
        self.retired = keep

    def new_segment(self, nbytes: int, timeout: float | None = None) -> int:
        """Create (rank 0) or attach (the others) the group's next data segment of ``nbytes``,
        every rank at the same point of its calls; returns its serial (kept mapped in
        :attr:`segments`). Rank 0 unlinks it once every rank attached, or on any failure."""
        serial = self.next_serial
        self.next_serial += 1
        name = segment_name(self.uid, serial)
        w, seg = self.w, None
        ready = self.rank_word(self.rank, 4)
        if self.rank == 0:
            try:
                try:
                    seg = Segment.create(name, nbytes)
                except BackendError:
                    self.abort(_ABORT_SPACE)
                    raise
                w[LINE] = serial
                w[ready] = serial
                for peer in range(1, self.world_size):
                    self.wait_word(self.rank_word(peer, 4), serial, peer,
                                   f"attach shared-memory segment {serial}", timeout)
            finally:
                if seg is not None:
                    seg.unlink()
        else:
            try:
                self.wait_word(LINE, serial, 0, f"create shared-memory segment {serial}",
                               timeout)
            except Aborted as exc:
                if self._abort_fields()[1] == _ABORT_SPACE:
                    raise BackendError(f"rank 0 could not create the group's shared memory "
                                       f"({nbytes} bytes): the shared-memory directory is too "
                                       "small (rank 0's error names the sizes)") from exc
                raise
            try:
                seg = Segment.attach(name, nbytes)
            except BackendError:
                self.abort()
                raise
            w[ready] = serial
        self.segments[serial] = seg
        return serial

    def call_area(self, used: int, where: tuple | None) -> tuple:
        """``(serial, byte offset, eager)`` of this call's working buffer (after :meth:`enter`):
        this rank's slot of the working area, its eager area (``(serial, byte offset, bytes)``,
        :mod:`ringccl.backends.shm.transport`) after the buffer's ``used`` bytes (64-aligned);
        or, zero copy, where the buffer already lies (``where``: ``(serial, byte offset)``), the
        whole working slot then free for the eager area (None without a working area)."""
        slot = self.rank * self.work_slot
        if where is None:
            return self.work_serial, slot, (self.work_serial, slot + used, self.work_slot - used)
        eager = (self.work_serial, slot, self.work_slot) if self.work_serial else None
        return where[0], where[1], eager

    def allocate(self, nbytes: int, what: str, timeout: float | None = None) -> tuple[int, int]:
        """Reserve ``nbytes`` (rounded up to 64) in this rank's slot of the group's zero-copy
        area (``shm_empty``), a segment of its own that grows by new segments of at least
        1 MiB per rank; returns ``(serial, byte offset in the segment)``. Collective: every
        rank asks for the same sizes in the same order.

        Raises:
            ShmSpaceError: the shared-memory directory is too small. BackendError: the ranks'
                calls differ (``what``, e.g. the shape and dtype, is named) or a peer failed.
        """
        nbytes = -(-nbytes // 64) * 64
        area = self.user_area
        if area is None or area[2] + nbytes > area[1]:
            slot = max(1 << 20, 1 << max(nbytes - 1, 0).bit_length())
            try:
                serial = self.new_segment(slot * self.world_size, timeout)
            except ShmSpaceError:
                raise
            except (BackendError, TimeoutError, ConnectionError) as exc:
                raise BackendError(
                    f"shm_empty({what}) on rank {self.rank}: setting up its shared memory failed "
                    f"({exc}); every rank of the group must call shm_empty with the same shape "
                    "and dtype, in the same order") from exc
            area = (serial, slot, 0)
        serial, slot, used = area
        self.user_area = (serial, slot, used + nbytes)
        return serial, self.rank * slot + used

    def _drop(self, seg: Segment) -> None:
        self.cache.clear()   # views of dropped segments must not be handed out again
        seg.close()

    def array(self, serial: int, dtype: Any) -> np.ndarray:
        """The whole mapped segment ``serial`` as a 1-D numpy array of ``dtype`` (a numpy
        dtype; cached until the segment is dropped). Its views hold the mapping exported, so
        closing the segment leaves them valid memory."""
        key = (serial, dtype)
        a = self.cache.get(key)
        if a is None:
            raw = self.cache.get((serial, None))
            if raw is None:
                raw = self.cache[(serial, None)] = np.frombuffer(self.segments[serial].map,
                                                                 dtype=np.uint8)
            dtype = np.dtype(dtype)
            a = self.cache[key] = raw[:raw.size // dtype.itemsize * dtype.itemsize].view(dtype)
        return a

    def locate(self, address: int, nbytes: int) -> tuple | None:
        """(serial, byte offset) of ``nbytes`` at ``address`` when they lie inside this rank's
        slot of a mapped segment (zero copy), else None."""
        for serial, seg in self.segments.items():
            base = self.array(serial, np.uint8).ctypes.data
            slot = seg.nbytes // self.world_size
            lo = base + self.rank * slot
            if lo <= address and address + nbytes <= lo + slot:
                return serial, address - base
        return None

    def close(self) -> None:
        """Drop every mapping (the memory is freed with the peers' last one); idempotent."""
        if self.closed:
            return
        self.closed = True
        self.cache.clear()
        for seg in self.segments.values():
            seg.close()
        self.segments.clear()
        self.w.release()
        self.ctrl.close()
