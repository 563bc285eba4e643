"""Run under mpirun: the aliasing contract of ringccl.mpi (ringccl.frontend.aliasing).

For every collective × algorithm × transport (p2p, shm) and every form of input and output the
API allows — separate arrays; views with offsets and strides where the API takes any layout;
the in-place forms (all_gather's input = the output's own block, reduce_scatter's output = the
input's own block, scatter's and gather's root block, all_to_all's output = its input) — the
output's defined elements must be the collective's result (computed here from every rank's
inputs, drawn from a seed) and every other element of the memory the arguments live in must
be as it was. Each argument is a view of a 1-D base filled with a sentinel. The forms the API
does not define (partial overlaps, another rank's block) must be refused on every rank, naming
both arguments, before any data moves. Prints ``rank R: OK`` or the failures; exit code 1 on
failure.
"""

import sys

import numpy as np
from mpi4py import MPI

import ringccl.mpi as rm
from ringccl.algorithms import REGISTRY, build_schedule
from ringccl.errors import ArgumentError

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
SENTINEL = -77
ROOTED = ("broadcast", "reduce", "scatter", "gather")
failures = []


def values(seed, r, count, salt=0):
    rng = np.random.default_rng(seed * 7919 + r * 104729 + salt)
    return (n * rng.integers(-4, 5, size=count)).astype(np.float32)


class Place:
    """Views of sentinel-filled bases; the bases as they must end."""

    def __init__(self):
        self.bases, self.expected = [], []

    def view(self, count, form):
        """"separate": an array of its own; "strided": every other element from an offset;
        "offset": contiguous from an offset."""
        if form == "strided":
            base = np.full(2 * count + 7, SENTINEL, np.float32)
            v = base[3:3 + 2 * count:2]
        elif form == "offset":
            base = np.full(count + 9, SENTINEL, np.float32)
            v = base[5:5 + count]
        else:
            base = v = np.full(count, SENTINEL, np.float32)
        self.bases.append(base)
        return v

    def freeze(self):
        self.before = [b.copy() for b in self.bases]

    def problems(self):
        wanted = [b.copy() for b in self.before]
        for view, value in self.expected:
            for b, w in zip(self.bases, wanted):
                if view.size and np.shares_memory(view, b):
                    offset = (view.__array_interface__["data"][0]
                              - b.__array_interface__["data"][0]) // b.itemsize
                    np.lib.stride_tricks.as_strided(w[offset:], view.shape, view.strides)[...] = \
                        value.reshape(view.shape)
                    break
        return [f"base {i} differs at {np.flatnonzero(b != w)[:6].tolist()}"
                for i, (b, w) in enumerate(zip(self.bases, wanted)) if not np.array_equal(b, w)]


def build(collective, form, k, seed, kw):
    """(call, Place) of one example (sum; root n - 1)."""
    p, root = Place(), n - 1
    mine = lambda count, salt=0: values(seed, rank, count, salt)  # noqa: E731
    theirs = lambda r, count, salt=0: values(seed, r, count, salt)  # noqa: E731
    total = lambda count: sum(theirs(r, count) for r in range(n)).astype(np.float32)  # noqa
    if collective in ("all_reduce", "broadcast", "reduce"):
        t = p.view(k, "offset" if form == "in_place" else form)
        if form == "strided":   # ringccl.mpi's in-place buffers are C-contiguous
            return None, None
        t[...] = mine(k)
        if collective == "all_reduce":
            p.expected.append((t, total(k)))
            return (lambda: rm.all_reduce(t, **kw)), p
        if collective == "broadcast":
            p.expected.append((t, theirs(root, k)))
            return (lambda: rm.broadcast(t, root, **kw)), p
        if rank == root:
            p.expected.append((t, total(k)))
        return (lambda: rm.reduce(t, root, **kw)), p
    if collective == "reduce_scatter":
        if form == "in_place":
            inp = p.view(n * k, "offset")
            out = inp[rank * k:(rank + 1) * k]
        else:
            inp, out = p.view(n * k, form), p.view(k, "separate")
        inp[...] = mine(n * k)
        p.expected.append((out, total(n * k)[rank * k:(rank + 1) * k]))
        return (lambda: rm.reduce_scatter(out, inp, **kw)), p
    if collective == "all_gather":
        if form == "in_place":
            out = p.view(n * k, "offset")
            inp = out[rank * k:(rank + 1) * k]
        else:
            out, inp = p.view(n * k, "separate"), p.view(k, form)
        inp[...] = mine(k)
        p.expected.append((out, np.concatenate([theirs(r, k) for r in range(n)])))
        return (lambda: rm.all_gather(out, inp, **kw)), p
    if collective in ("scatter", "gather"):
        t = p.view(k, "offset" if form in ("in_place", "strided") else form)
        blocks = None
        if rank == root:
            blocks = [t if (form == "in_place" and j == root) else p.view(k, form)
                      for j in range(n)]
        if collective == "scatter":
            if rank == root:
                for j, b in enumerate(blocks):
                    b[...] = mine(k, salt=j + 1)
            p.expected.append((t, theirs(root, k, salt=rank + 1)))
            return (lambda: rm.scatter(t, blocks, root, **kw)), p
        t[...] = mine(k)
        if rank == root:
            for j, b in enumerate(blocks):
                p.expected.append((b, theirs(j, k)))
        return (lambda: rm.gather(t, blocks, root, **kw)), p
    inp = p.view(n * k, "offset" if form == "in_place" else form)
    out = inp if form == "in_place" else p.view(n * k, form)
    inp[...] = mine(n * k)
    p.expected.append((out, np.concatenate([theirs(r, n * k)[rank * k:(rank + 1) * k]
                                            for r in range(n)])))
    return (lambda: rm.all_to_all(out, inp, **kw)), p


table = {}
for collective, algorithm in sorted(REGISTRY):
    params = {"local_size": 1} if algorithm == "hierarchical" else {}
    try:
        build_schedule(collective, algorithm, n, **params,
                       **({"root": 0} if collective in ROOTED else {}))
    except Exception:
        continue
    table.setdefault(collective, []).append((algorithm, params))
example = {}
seed = 0
for transport in ("p2p", "shm"):
    for collective in sorted(table):
        for algorithm, params in table[collective]:
            for restore in (None, False):
                kw = dict(algorithm=algorithm, transport=transport, restore=restore, **params)
                for form in ("separate", "strided", "in_place"):
                    for k in (0, 3):
                        seed += 1
                        call, place = build(collective, form, k, seed, kw)
                        if call is None:
                            continue
                        place.freeze()
                        what = f"{collective} {algorithm} {form} k={k} {transport} {restore}"
                        try:
                            call()
                        except Exception as exc:   # noqa: BLE001 - reported
                            failures.append(f"{what}: {type(exc).__name__}: {exc}")
                            continue
                        failures.extend(f"{what}: {p}" for p in place.problems())
            if collective == "reduce_scatter":   # the three-rank example, every algorithm
                inp = np.arange(6 * rank + 1, 6 * rank + 7, dtype=np.float64)
                if n == 3:
                    rm.reduce_scatter(inp[rank * 2:(rank + 1) * 2], inp, algorithm=algorithm,
                                      transport=transport, **params)
                    example[(algorithm, transport)] = inp.tolist()
if rank == 0 and n == 3:
    bad = {key: v for key, v in example.items() if v != [21, 24, 3, 4, 5, 6]}
    if bad or not example:
        failures.append(f"three-rank example: {bad or 'not run'}")

# refused forms: every rank alike (root-only ones: only the root calls, it refuses first)
k = 4
other = (rank + 1) % n
base = np.arange(3 * n * k + 8, dtype=np.float32)
before = base.copy()
inp = base[2:2 + n * k]
blocks = [inp[j * k:(j + 1) * k] for j in range(n)]
cases = {
    "reduce_scatter partial": (("output", "input"),
                               lambda: rm.reduce_scatter(inp[rank * k + 1:(rank + 1) * k + 1],
                                                         inp)),
    "reduce_scatter other block": (("output", "input"),
                                   lambda: rm.reduce_scatter(blocks[other], inp)),
    "all_gather other block": (("input", "output"), lambda: rm.all_gather(inp, blocks[other])),
    "all_to_all shifted": (("output", "input"), lambda: rm.all_to_all(base[3:3 + n * k], inp)),
    "scatter other block": (("buffer", "scatter_list[1]"),
                            lambda: rm.scatter(blocks[1], blocks, 0) if rank == 0 else None),
    "gather partial": (("gather_list[0]", "buffer"),
                       lambda: rm.gather(inp[1:1 + k], blocks, 0) if rank == 0 else None),
}
for name, (names, fn) in cases.items():
    try:
        fn()
        raised = None
    except ArgumentError as exc:
        raised = str(exc)
    rooted = name.startswith(("scatter", "gather"))
    if (rooted and rank != 0 and raised is not None) or (
            (not rooted or rank == 0) and (raised is None or not all(a in raised for a in names))):
        failures.append(f"refusal {name}: {raised}")
    if not np.array_equal(base, before):
        failures.append(f"refusal {name}: memory changed")
        base[...] = before
x = np.ones(3, np.float32)
rm.all_reduce(x)                     # the communicator is still usable
if x.tolist() != [float(n)] * 3:
    failures.append(f"all_reduce after the refusals: {x.tolist()}")

print(f"rank {rank}: {'OK' if not failures else failures[:8]}", flush=True)
sys.exit(1 if failures else 0)
