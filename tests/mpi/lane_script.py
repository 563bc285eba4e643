"""Run under mpirun (2-4 processes): ringccl.mpi's compiled shared-memory lane
(ringccl.backends.shm.lane) against the general path (the lane switched off), bit for bit.

``bitwise``: for algorithms auto/direct/two_shot/ring, counts 0, 1, < N, not divisible and
either side of the one-shot/two-shot crossover, 256 KiB (on two ranks the two_shot's
replay in C is checked to run), four dtypes and the five ops, each input is
reduced once with the lane off (the reference) and then in the sequence on, on, off, on (the
first "on" compiles, the others replay, general and lane calls alternate); every result must
equal the reference and be the same bytes on every rank, and lanes must have been compiled.
``single_copy``: sends read in place from the sender's memory (``single_copy``'s docstring).
``native``: the C replay, the Python replay (``lane.set_native(False)``) and the general path,
alternating, on every dtype and op the C loop takes, with NaNs of rank-dependent payload and
sign, infinities, signed zeros and integer overflow: the same bytes on every path and every
rank (a float sum's or product's NaN: any NaN). ``stall``: after a compiled call, rank 1
stalls (the replayed call runs in C); the others' next (replayed) call must raise a
PeerError naming step 0 and a peer within timeout + SLACK, the buffer as it was. Each rank
prints "rank R: OK" or its problems; in ``stall`` the job then ends once every reporting rank
printed (end_job.py).
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import end_job
import ringccl.mpi as rm
from ringccl.backends.shm import lane, lane_native
from ringccl.costmodel import choice
from ringccl.errors import PeerError

#: seconds a loaded machine may add to a timeout (tests/bounds.py, passed by tests/mpi/mpirun.py)
SLACK = float(os.environ.get("RINGCCL_TEST_SLACK", "5"))
#: the stall's timeout; its compiling call (the same signature) waits for the peers' start too
TIMEOUT = 2 + SLACK
comm = MPI.COMM_WORLD
#: bytes of the large call (a two-rank two_shot sends 128 KiB, beyond the eager 64 KiB)
LARGE = 256 << 10
#: a call beyond the eager area: its sends fill the whole slot (one area, not two halves)
LARGER = 1 << 20
rank, n = comm.Get_rank(), comm.Get_size()
problems = []


def _compiled() -> list:
    """The lanes compiled in this process."""
    return [e.lane for e in lane._lanes.values() if e is not lane._INELIGIBLE]


def bitwise() -> None:
    rng = np.random.default_rng(rank)
    cross = choice.two_shot_bytes(n, "mpi")
    for dtype in (np.float32, np.float64, np.int32, np.float16):
        size = np.dtype(dtype).itemsize
        # ... a 256 KiB call, whose sends exceed the transport's eager size, and a 1 MiB one
        counts = (0, 1, n - 1, 7 * n + 3, 1001, cross // size - 1, cross // size + 1,
                  LARGE // size - 3, LARGER // size + 5)
        for algorithm in (None, "direct", "two_shot", "ring"):
            for count in counts:
                for op in ("sum", "prod", "min", "max", "avg"):
                    if op == "avg" and dtype is np.int32:
                        continue
                    x = (rng.standard_normal(count) * 3).astype(dtype)
                    results = []
                    runs = lane_native.native_runs()
                    for on in (False, True, True, False, True):
                        lane.set_enabled(on)
                        y = x.copy()
                        rm.all_reduce(y, op=op, algorithm=algorithm, transport="shm")
                        results.append(y.tobytes())
                    lane.set_enabled(True)
                    what = (dtype.__name__, algorithm, count, op)
                    if n == 2 and count in (LARGE // size - 3, LARGER // size + 5) and \
                            algorithm == "two_shot" and \
                            op == "sum" and dtype is np.float32 and lane_native.available() \
                            and lane_native.native_runs() - runs != 2:
                        problems.append(f"the large call was not replayed in C: {what}")
                    if any(r != results[0] for r in results):
                        problems.append(f"lane differs from the general path: {what}")
                    everyone = comm.allgather(results[-1])
                    if any(e != everyone[0] for e in everyone):
                        problems.append(f"ranks differ: {what}")
    if not lane.compiled():
        problems.append("no lane was compiled")
    # no timeout: not all-or-nothing, so the C loop works on the caller's (fresh) arrays
    lanes = _compiled()
    if lane_native.available() and all(one.restore for one in lanes):
        problems.append("no lane ran on the caller's buffer")
    # the 1 MiB two_shot's sends fill its slot: one send area, not two halves
    if not any(one.single for one in lanes):
        problems.append("no large call was lowered with one send area")
    # two_shot's reduced chunk goes to its all-gather send area as the reduce writes it
    if not any(r[11] is not None for one in lanes for _, recvs in one.steps for r in recvs):
        problems.append("no receive was fused with a later send")


def _special(rng, dtype, count: int) -> np.ndarray:
    """Inputs that find differences: floats with NaNs of this rank's payload and sign, ±inf,
    ±0 and huge values among normals; integers over their whole range (sums and products
    overflow)."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    x = (rng.standard_normal(count) * 3).astype(dtype)
    bits = np.uint32 if dtype.itemsize == 4 else np.uint64
    nan = np.array([np.nan], dtype).view(bits)[0] | bits(rank + 1)
    if rank % 2:
        nan |= bits(1) << bits(8 * dtype.itemsize - 1)   # negative NaN on odd ranks
    special = np.concatenate([np.array([nan], bits).view(dtype),
                              np.array([np.inf, -np.inf, 0.0, -0.0,
                                        np.finfo(dtype).max], dtype)])
    where = rng.random(count) < 0.3
    x[where] = rng.choice(special, int(where.sum()))
    return x


def _same(a: bytes, b: bytes, dtype, op: str) -> bool:
    """Bit for bit, but a float sum's or product's NaN is any NaN: which payload survives two
    NaNs meeting depends on numpy's loop (on one element, on which operand the result
    overwrites: ringccl.ir, "Operand order"); min/max and integers have no such freedom."""
    x, y = np.frombuffer(a, dtype), np.frombuffer(b, dtype)
    if x.dtype.kind != "f" or op in ("min", "max"):
        return a == b
    nan = np.isnan(x)
    return np.array_equal(nan, np.isnan(y)) and x[~nan].tobytes() == y[~nan].tobytes()


def _reduced(x: np.ndarray, op: str, algorithm, settings) -> list:
    """The bytes of ``x`` all-reduced once per (lane on, C replay) of ``settings``, in order
    (the lane and the C loop back on afterwards)."""
    results = []
    for on, c in settings:
        lane.set_enabled(on)
        lane.set_native(c)
        y = x.copy()
        with np.errstate(all="ignore"):
            rm.all_reduce(y, op=op, algorithm=algorithm, transport="shm")
        results.append(y.tobytes())
    lane.set_enabled(True)
    lane.set_native(True)
    return results


def native() -> None:
    """The C replay, the Python replay and the general path give the same bits: every
    dtype and op the C loop takes, special values, counts up to several KiB."""
    rng = np.random.default_rng(100 + rank)
    before = lane_native.native_runs()
    for dtype in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8):
        ops = ("sum", "prod", "min", "max") + (("avg",) if np.dtype(dtype).kind == "f" else
                                               ("band", "bor", "bxor"))
        for count in (0, 1, n - 1, 7 * n + 3, 1001, 3000):
            for algorithm in (None, "ring"):
                for op in ops:
                    x = _special(rng, dtype, count)
                    results = _reduced(x, op, algorithm, (
                        (False, True), (True, True), (True, True), (True, False),
                        (False, True), (True, True)))
                    what = (np.dtype(dtype).name, algorithm, count, op)
                    general, replays = results[0:2] + results[4:5], results[2:4] + results[5:]
                    if any(r != replays[0] for r in replays):   # C (2, 5), Python (3)
                        problems.append(f"the C and Python replays differ: {what}")
                    if any(r != general[0] for r in general):
                        problems.append(f"the general path differs from itself: {what}")
                    # the replays against the general path, and every rank: the same kernel
                    # on the same operands in the same order everywhere (the IR's operand
                    # order), so the same bits, the zero of a min/max tie and the NaN of two
                    # meeting included (_same)
                    if not _same(replays[0], general[0], dtype, op):
                        problems.append(f"replays differ from the general path: {what}")
                    everyone = comm.allgather(results[-1])
                    if any(not _same(e, everyone[0], dtype, op) for e in everyone):
                        problems.append(f"ranks differ: {what}")
    if not lane_native.available():
        problems.append("ringccl.backends.shm._lanec did not import")
    elif lane_native.native_runs() == before:
        problems.append("the C loop never ran")


def stall() -> None:
    x = np.arange(64, dtype=np.float32) + rank
    rm.all_reduce(x, timeout=TIMEOUT, transport="shm")   # compiles the lane on every rank
    if rank == 1:
        time.sleep(TIMEOUT + 3 * SLACK)   # stalled (the job is ended before it wakes)
        os._exit(0)
    before = x.copy()
    t0 = time.monotonic()
    try:
        rm.all_reduce(x, timeout=TIMEOUT, transport="shm")   # replayed
        problems.append("no error")
    except PeerError as exc:
        if time.monotonic() - t0 > TIMEOUT + SLACK:
            problems.append(f"raised after {time.monotonic() - t0:.1f} s")
        if exc.peer not in set(range(n)) - {rank} or exc.step != 0:
            problems.append(f"attributes: {exc} (peer {exc.peer}, step {exc.step})")
        if not np.array_equal(x, before):
            problems.append("buffer changed")
    if not lane.compiled(native=True):
        problems.append("no lane the C loop replays was compiled")


def alternating() -> None:
    """A large call (one send area: it writes the whole slot) and small ones (double-buffered
    halves of the same slot) back to back, replayed in C: the call after the large one must
    not overwrite what a peer has not read yet. int64 sums: exact, so any overwrite shows."""
    rng = np.random.default_rng(rank)
    # five calls a round: the call after a large one takes either parity over the rounds
    counts = ((LARGER + 4096) // 8, 100, (LARGER + 4096) // 8, 33, 7)
    for round_ in range(40):
        xs = [rng.integers(-1000, 1000, count, dtype=np.int64) for count in counts]
        wants = [np.empty_like(x) for x in xs]
        for x, want in zip(xs, wants):
            comm.Allreduce(x, want)
        for x in xs:   # back to back: no synchronisation between the calls
            rm.all_reduce(x, transport="shm")
        for x, want in zip(xs, wants):   # noted, not returned: every rank makes every call
            if not np.array_equal(x, want):
                problems.append(f"round {round_}, count {x.size}: wrong sum")
    lanes = _compiled()
    if not any(one.single for one in lanes) or all(one.single for one in lanes):
        problems.append("not a one-area lane and a double-buffered one")


def single_copy() -> None:
    """Sends read in place from the sender's memory (peer_memory), its threshold lowered so
    that calls of some KiB use it: the C replay everywhere, the Python replay on rank 1 while
    the others run C, the general path on rank 1 while the others replay (their in-place sends
    read by the general path's receive), each against the general path everywhere, bit for
    bit, and the same on every rank. In-place sends must have been made (none by a direct
    all_reduce, whose receives overwrite what it sends in the same step), and read from
    Python on rank 1."""
    import ringccl
    from ringccl.backends.shm import peer_memory
    peer_memory.MIN_BYTES = 4096
    ringccl.clear_caches()   # lanes compiled from here on see the threshold
    real, reads = peer_memory.read, [0]

    def counted(*args):
        reads[0] += 1
        return real(*args)
    peer_memory.read = counted
    rng = np.random.default_rng(200 + rank)
    before = lane_native.native_runs()
    # (lane on, C replay) on rank 1 / on the others
    settings = (((False, True), (False, True)), ((True, True), (True, True)),
                ((True, True), (True, True)), ((True, False), (True, True)),
                ((False, True), (True, True)), ((True, True), (True, True)))
    for dtype in (np.float32, np.float64, np.int32):
        size = np.dtype(dtype).itemsize
        for count in (0, 1, (4096 * n) // size + 5, (3 << 15) // size + 7):
            for algorithm in (None, "two_shot", "direct"):
                for op in ("sum", "prod", "min", "max"):
                    x = _special(rng, dtype, count)
                    results = _reduced(x, op, algorithm, [one if rank == 1 else others
                                                          for one, others in settings])
                    what = (np.dtype(dtype).name, algorithm, count, op)
                    if any(not _same(r, results[0], dtype, op) for r in results[1:]):
                        problems.append(f"differs from the general path: {what}")
                    everyone = comm.allgather(results[-1])
                    if any(not _same(e, everyone[0], dtype, op) for e in everyone):
                        problems.append(f"ranks differ: {what}")
    lanes = _compiled()
    if not any(s[7] for one in lanes for sends, _ in one.steps for s in sends):
        problems.append("no send was read in place")
    if any(s[7] for one in lanes if one.schedule.algorithm == "direct"
           for sends, _ in one.steps for s in sends):
        problems.append("a direct all_reduce sent in place what it overwrites in the step")
    if rank == 1 and not reads[0]:
        problems.append("the Python replay and the general path never read in place")
    if lane_native.native_runs() == before:
        problems.append("the C loop never ran")


mode = sys.argv[1]
{"bitwise": bitwise, "stall": stall, "native": native, "alternating": alternating,
 "single_copy": single_copy}[mode]()
print(f"rank {rank}: {'OK' if not problems else problems[:5]}", flush=True)
if mode == "stall":
    end_job.end(comm, [r for r in range(n) if r != 1])
