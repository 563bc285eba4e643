"""Run under mpirun (2-3 processes): MIN/MAX on signed zeros and NaN payloads through
ringccl.mpi (tests/ties.py), every reducing algorithm with its parameters, float32 and float64.

Every rank builds every rank's input from the same seed, so it knows the simulator's result.
Each all_reduce runs over shared memory with the lane off (the general path), compiled (its
first call with the lane on), replayed by the C loop and replayed in Python, and over MPI
point-to-point; reduce_scatter and reduce (which the lane does not take) over shared memory and
point-to-point. Every result must be the simulator's bit for bit, and an all_reduce's the same
bytes on every rank (gathered with MPI's own Allgather: no arithmetic). Every rank prints
``rank R: OK`` or its problems and how many results it compared with the simulator's; the exit
code is 1 if anything failed.
"""

import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import ringccl
import ringccl.mpi as rm
from ringccl.backends.shm import lane, lane_native

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository: tests.ties
from tests import ties  # noqa: E402

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
problems = []
compared = [0]
#: (label, lane on, replay in C, transport) of each all_reduce
ALL_REDUCE_RUNS = (("lane off", False, True, "shm"), ("compiling", True, True, "shm"),
                   ("C replay", True, True, "shm"), ("Python replay", True, False, "shm"),
                   ("p2p", False, True, "p2p"))


def same_on_every_rank(a: np.ndarray) -> bool:
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
    everyone = np.empty((n, raw.size), dtype=np.uint8)
    comm.Allgather(raw, everyone)
    return all(np.array_equal(everyone[r], everyone[0]) for r in range(1, n))


def runs(collective, algorithm, kw, mine, op):
    """(label, result) of each run of ``collective`` on this rank's input ``mine``."""
    params = {k: v for k, v in kw.items() if k != "dst"}
    out = []
    if collective == "all_reduce":
        for label, on, native, transport in ALL_REDUCE_RUNS:
            lane.set_enabled(on)
            lane.set_native(native)
            y = mine.copy()
            rm.all_reduce(y, op, algorithm=algorithm, transport=transport, **params)
            out.append((label, y))
        lane.set_enabled(True)
        lane.set_native(True)
        return out
    for transport in ("shm", "p2p"):
        if collective == "reduce_scatter":
            y = np.empty(mine.size // n, mine.dtype)
            rm.reduce_scatter(y, mine, op, algorithm=algorithm, transport=transport, **params)
        else:
            y = mine.copy()
            rm.reduce(y, kw["dst"], op, algorithm=algorithm, transport=transport, **params)
        out.append((transport, y))
    return out


def main() -> None:
    before = lane_native.native_runs()
    seed = 0
    for collective, algorithm, kw in ties.cases(n):
        for op in ties.OPS:
            for dtype in ties.DTYPES:
                counts = (n, 5 * n, 23 * n) if collective == "reduce_scatter" else (1, 2 * n + 1,
                                                                                      67)
                for count in counts:
                    seed += 1
                    x = ties.inputs(np.random.default_rng(seed), n, count, dtype)
                    with np.errstate(invalid="ignore"):
                        sim = ringccl.simulate(collective, x, op, algorithm=algorithm, **kw)
                    what = f"{collective} {algorithm} {kw} {op} {dtype} count={count}"
                    for label, y in runs(collective, algorithm, kw, x[rank], op):
                        if collective == "all_reduce" and not same_on_every_rank(y):
                            problems.append(f"ranks differ ({label}): {what}")
                        if collective == "reduce" and rank != kw["dst"]:
                            continue
                        compared[0] += 1
                        want = np.asarray(sim.outputs[rank])
                        if ties.bits(y).tolist() != ties.bits(want).tolist():
                            problems.append(f"not the simulator's bits ({label}): {what}")
    if not lane.compiled(native=True):
        problems.append("no lane the C loop replays was compiled")
    elif lane_native.native_runs() == before:
        problems.append("the C loop never ran")


main()
print(f"rank {rank}: {'OK' if not problems else problems[:5]} ({compared[0]} results compared)",
      flush=True)
sys.exit(1 if problems else 0)
