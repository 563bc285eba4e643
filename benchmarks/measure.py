"""What the shared-memory benchmarks measure alike (``bench_shm.py``, ``bench_mpi_shm.py``,
``bench_backend.py``): sizes by powers of 4, the buffers of ``--cold`` runs, a summary of
samples, the physical floors measured in the same run, and a number format for their tables.

``--cold`` (:class:`BufferPool`): a buffer reused call after call stays in cache, which flatters
every size that fits in it (the Open MPI XHC authors warn about this). A cold run gives every
timed call a buffer of its own, taken round-robin from one slab of at least
:data:`COLD_POOL_BYTES` (twice this machine's 32 MiB last-level cache), its buffers at least a
cache line apart (the idea of Intel MPI Benchmarks' ``-off_cache``), so a buffer comes back
only after the whole slab has passed through the cache. Buffers are taken before the timed
region (a view costs a microsecond, as much as a small call's own work) and the slab is
written when it is made, so no timed call meets a page fault.

The floors (what no collective between these processes can beat):

* :func:`flag_one_way`: rank 0 writes a word in shared memory, rank 1 waits for it and answers
  in a word on another cache line, rank 0 waits for the answer; half the round trip, averaged
  over a batch of round trips. The polls are Python's (a memoryview read per poll), the same
  kind of wait as ``ShmGroup.wait_word``'s spin; the C replay loop of ``_lanec`` polls faster.
* :func:`passes`: a numpy copy (``memcpy``) and an in-place add (``add``) of a buffer, every
  rank at once (what each of N processes gets when all move data, as in a collective: they
  share the memory bus) or one rank alone, on cold buffers in a cold run; at the largest
  size, what bounds the large rows.

Figures for the notes only; never timed asserts.
"""

from __future__ import annotations

import math
import os
import statistics
import time
import uuid
from typing import Any, Callable

import numpy as np

#: a cold pool's slab holds at least this many bytes (> the last-level cache: 32 MiB here)
COLD_POOL_BYTES = 64 << 20
#: bytes of a cache line: a cold pool's buffers start at least this far apart
LINE_BYTES = 64
#: tight polls of a floor's wait before each further poll yields the core (os.sched_yield):
#: with more busy processes than cores, a waiter that only spins keeps its peer off the core
FLAG_SPIN_POLLS = 1000
#: seconds a floor's wait gives the peer before it raises TimeoutError
FLAG_TIMEOUT_S = 60.0


def powers_of_4(lo: int, hi: int) -> list[int]:
    """``lo``, ``4 lo``, ``16 lo``, ... up to ``hi`` bytes (both ints, ``lo >= 1``)."""
    out, s = [], max(1, lo)
    while s <= hi:
        out.append(s)
        s *= 4
    return out


def batch_calls(nbytes: int) -> int:
    """Back-to-back calls per timed sample: ranks leave a barrier up to hundreds of µs apart,
    which one call of a few µs would measure instead of itself; from 4 MiB on, one."""
    return max(1, min(64, (4 << 20) // max(nbytes, 1)))


def summary(seconds: list) -> dict:
    """``{"median_s", "min_s", "max_s"}`` of a non-empty list of seconds."""
    return {"median_s": statistics.median(seconds), "min_s": min(seconds),
            "max_s": max(seconds)}


def fmt(value: float) -> str:
    """``value`` with at least 3 significant digits, at least one decimal, never in exponent
    form (a table's cell: 0.0412, 12.3, 1234.5)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:.1f}"
    return f"{value:.{max(1, 2 - math.floor(math.log10(abs(value))))}f}"


class BufferPool:
    """Buffers of ``count`` elements of ``dtype`` for timed calls: one reused buffer (warm), or
    with ``cold`` one per call, round-robin over a slab of >= :data:`COLD_POOL_BYTES`
    (module docstring).

    Attributes:
        count: elements per buffer; nbytes: bytes per buffer.
        positions: distinct buffers (1 when warm; when cold, ceil(COLD_POOL_BYTES / stride)).
        stride: bytes between two buffers' starts (nbytes rounded up to LINE_BYTES).
        slab_bytes: bytes the pool holds.

    ``wrap`` (e.g. ``torch.from_numpy``) turns each numpy view into the caller's array type;
    the slab starts on a cache line and is filled with ``fill`` when made.

    Raises:
        ValueError: ``count`` < 1.
    """

    def __init__(self, count: int, dtype: Any = np.float32, cold: bool = False, fill: float = 1,
                 wrap: Callable[[np.ndarray], Any] | None = None):
        if count < 1:
            raise ValueError(f"BufferPool count={count}: at least 1 element")
        itemsize = np.dtype(dtype).itemsize
        self.count, self.nbytes, self.cold = count, count * itemsize, cold
        self.stride = -(-self.nbytes // LINE_BYTES) * LINE_BYTES
        self.positions = -(-COLD_POOL_BYTES // self.stride) if cold else 1
        self.slab_bytes = self.positions * self.stride
        raw = np.empty(self.slab_bytes + LINE_BYTES, np.uint8)
        start = -raw.ctypes.data % LINE_BYTES
        self._slab = raw[start:start + self.slab_bytes]
        self._slab.view(dtype)[...] = fill         # every page touched now, not in a timed call
        self._dtype, self._wrap, self._next = np.dtype(dtype), wrap or (lambda a: a), 0
        self._warm = None if cold else self._view(0)

    def _view(self, position: int) -> Any:
        at = position * self.stride
        return self._wrap(self._slab[at:at + self.nbytes].view(self._dtype))

    def take(self) -> Any:
        """The next buffer (warm: always the same one)."""
        if self._warm is not None:
            return self._warm
        view = self._view(self._next)
        self._next = (self._next + 1) % self.positions
        return view


def passes(nbytes: int, timed: Callable[[Callable[[], None]], float], reps: int,
           kinds: tuple = ("memcpy",), active: bool = True, cold: bool = False,
           batch: int = 1) -> dict:
    """Memory passes over ``nbytes`` (float32, numpy): ``reps`` samples of each kind,
    interleaved round by round after 2 untimed, each sample ``batch`` passes back to back timed
    by ``timed(fn)`` (the caller's: barrier, fn, the slowest rank's seconds) per pass.
    ``kinds``: "memcpy" (``np.copyto(dst, src)``) and/or "add" (``np.add(dst, src, out=dst)``).
    ``cold``: every pass on buffers of their own (:class:`BufferPool`), as a cold run's calls.
    ``active=False``: this rank only joins the timing (the others' pass alone: e.g. rank 0's
    memcpy with nothing else running).

    Returns:
        ``{"nbytes": int, kind: summary + "bytes_per_s" (nbytes / median) + "best_bytes_per_s"
        (nbytes / min), ...}``: per rank, not summed over ranks.
    """
    count = max(1, nbytes // 4)
    dst, src = (BufferPool(count, cold=cold), BufferPool(count, cold=cold)) if active else (
        None, None)
    work = {"memcpy": np.copyto, "add": lambda a, b: np.add(a, b, out=a)}

    def sample(kind: str) -> float:
        pairs = [(dst.take(), src.take()) for _ in range(batch)] if active else []
        op = work[kind]

        def run() -> None:
            for a, b in pairs:
                op(a, b)
        return timed(run) / batch

    times: dict = {k: [] for k in kinds}
    for i in range(reps + 2):   # the first 2 rounds warm up
        for k in kinds:
            t = sample(k)
            if i >= 2:
                times[k].append(t)
    out: dict = {"nbytes": count * 4}
    for k, ts in times.items():
        s = summary(ts)
        out[k] = dict(s, bytes_per_s=out["nbytes"] / s["median_s"],
                      best_bytes_per_s=out["nbytes"] / s["min_s"])
    return out


def _await(w, word: int, value: int, deadline: float) -> None:
    """Poll ``w[word]`` until it holds ``value``: FLAG_SPIN_POLLS tight polls, then yielding
    the core between polls; TimeoutError past ``deadline`` (time.monotonic)."""
    polls = 0
    while w[word] != value:
        polls += 1
        if polls > FLAG_SPIN_POLLS:
            os.sched_yield()
            if not polls & 1023 and time.monotonic() > deadline:
                raise TimeoutError(f"the peer did not write {value} into word {word} within "
                                   f"{FLAG_TIMEOUT_S:g} s")


def _ping_pong(w, rank: int, trips: int, seq: int) -> int:
    """``trips`` round trips from sequence number ``seq`` on: rank 0 posts, rank 1 answers.
    Returns the next sequence number."""
    deadline = time.monotonic() + FLAG_TIMEOUT_S
    answer = LINE_BYTES // 8   # the answer's word: the next cache line
    for _ in range(trips):
        seq += 1
        if rank == 0:
            w[0] = seq
            _await(w, answer, seq, deadline)
        else:
            _await(w, 0, seq, deadline)
            w[answer] = seq
    return seq


def flag_one_way(rank: int, world_size: int, share: Callable[[Any], Any],
                 barrier: Callable[[], None], rounds: int, trips: int = 200) -> dict | None:
    """Half a round trip of a flag between ranks 0 and 1 over shared memory (module
    docstring): ``rounds`` samples, each the mean over ``trips`` round trips after
    ``barrier()`` (one untimed round first), timed on rank 0; the other ranks only join the
    barriers. ``share(obj)`` returns rank 0's ``obj`` on every rank (a broadcast); every rank
    calls it and ``barrier`` alike.

    Returns:
        rank 0's ``summary`` of seconds one way plus ``trips`` and ``rounds``, on every rank;
        None when ``world_size`` < 2.
    Raises:
        TimeoutError: the peer did not answer within FLAG_TIMEOUT_S.
        BackendError: the segment could not be created or attached.
    """
    from ringccl.backends.shm import Segment, segment_name

    if world_size < 2:
        return None
    nbytes = 2 * LINE_BYTES
    seg = Segment.create(segment_name(uuid.uuid4().hex, 0), nbytes) if rank == 0 else None
    name = share(seg.name if seg is not None else None)
    if rank == 1:
        seg = Segment.attach(name, nbytes)
    barrier()
    try:
        if rank == 0:
            seg.unlink()   # both mapped: nothing can outlive the run
        w = memoryview(seg.map).cast("q") if seg is not None else None
        seq, times = 0, []
        for i in range(rounds + 1):
            barrier()
            t0 = time.perf_counter()
            if w is not None:
                seq = _ping_pong(w, rank, trips, seq)
            if i:
                times.append((time.perf_counter() - t0) / (2 * trips))
        if w is not None:
            w.release()
        return share(dict(summary(times), trips=trips, rounds=rounds) if rank == 0 else None)
    finally:
        if seg is not None:
            seg.close()


def torch_floors(rank: int, n: int, nbytes: int, iters: int, cold: bool) -> dict:
    """The floors of a torch.distributed run (default group initialised): ``5 iters``
    samples, each the slowest rank's: half a flag round trip between ranks 0 and 1
    (:func:`flag_one_way`), a memcpy of ``nbytes`` on every rank at once and on one process
    alone (:func:`passes`; :func:`batch_calls` copies a sample, ``cold`` as the rows)."""
    import torch
    import torch.distributed as dist

    def timed(fn) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def share(obj):
        box = [obj]
        dist.broadcast_object_list(box, 0)
        return box[0]

    reps, batch = 5 * iters, batch_calls(nbytes)
    every = passes(nbytes, timed, reps, cold=cold, batch=batch)
    alone = passes(nbytes, timed, reps, active=rank == 0, cold=cold, batch=batch)
    return {"flag_one_way": flag_one_way(rank, n, share, dist.barrier, reps),
            "memcpy_every_rank": dict(every["memcpy"], nbytes=every["nbytes"]),
            "memcpy_alone": dict(alone["memcpy"], nbytes=alone["nbytes"])}


def print_floors(floors: dict) -> None:
    """Print :func:`torch_floors`'s result, a line per floor."""
    from ringccl import units
    flag = floors["flag_one_way"]
    if flag is not None:
        print(f"floor: flag one way (half a round trip, rank 0 <-> rank 1 over shared memory, "
              f"Python polls, {flag['trips']} round trips per sample, {flag['rounds']} samples):"
              f" {fmt(flag['median_s'] * 1e6)} us ({fmt(flag['min_s'] * 1e6)}-"
              f"{fmt(flag['max_s'] * 1e6)})")
    for key, who in (("memcpy_every_rank", "every rank at once"),
                     ("memcpy_alone", "one process alone")):
        v = floors[key]
        print(f"floor: memcpy {units.format_size(v['nbytes'])} (numpy), {who}: "
              f"{fmt(v['median_s'] * 1e6)} us ({fmt(v['min_s'] * 1e6)}-"
              f"{fmt(v['max_s'] * 1e6)}) = {fmt(v['bytes_per_s'] / 1e9)} GB/s "
              f"per rank (best {fmt(v['best_bytes_per_s'] / 1e9)})")
