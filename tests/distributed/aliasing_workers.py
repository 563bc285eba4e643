"""Worker bodies of the aliasing contract (test_aliasing.py), on real processes.

For every collective × algorithm × transport, and every form of input and output the API
allows — separate tensors; views with offsets and strides; NCCL's in-place forms (all_gather's
input = the output's own block, reduce_scatter's output = the input's own block, scatter's and
gather's root block, all_to_all's output = its input) — the call must leave:

* the output's defined elements equal to the collective's result, computed here from every
  rank's inputs (drawn from a seed: every rank knows them all), exactly (small multiples of
  world_size: sums, maxima and averages are exact in every dtype used);
* every other element of the memory the arguments live in (the rest of the input, the output's
  surroundings) as it was.

Each argument is a view of a 1-D "base" tensor filled with a sentinel; after the call each base
must equal its copy from before with only the expected output written into the same view.
hypothesis draws the examples (derandomized, no shrinking: every rank draws the same ones and
reaches the same collectives); failures are returned as strings, never raised, so no rank
leaves the others waiting. The forms the API does not define (partial overlaps) must be refused
on every rank before any data moves, with an error naming both arguments (:func:`refusals`).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ringccl.algorithms import REGISTRY, build_schedule

SENTINEL = -77
REDUCING = ("all_reduce", "reduce", "reduce_scatter")
ROOTED = ("broadcast", "reduce", "scatter", "gather")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "int32": torch.int32}
TORCH_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def algorithms(n: int) -> dict:
    """{collective: [algorithm names that build for ``n`` ranks] + [None] (auto)}."""
    out: dict = {}
    for (collective, algorithm) in sorted(REGISTRY):
        params = _params(collective, algorithm, 0)
        try:
            build_schedule(collective, algorithm, n, **params)
        except Exception:      # e.g. a power-of-two-only algorithm on 3 ranks
            continue
        out.setdefault(collective, []).append(algorithm)
    return {c: a + [None] for c, a in out.items()}


def _params(collective: str, algorithm: str | None, root: int) -> dict:
    params = {"local_size": 1} if algorithm == "hierarchical" else {}
    if collective in ROOTED:
        params["root"] = root
    return params


def values(seed: int, rank: int, count: int, dtype, n: int, salt: int = 0) -> torch.Tensor:
    """Rank ``rank``'s data: small multiples of ``n`` (exact sums and averages)."""
    g = torch.Generator().manual_seed(seed * 7919 + rank * 104729 + salt)
    return (n * torch.randint(-4, 5, (count,), generator=g)).to(dtype)


def fold(op: str, tensors: list) -> torch.Tensor:
    """The reduction of ``tensors`` by ``op``, in float64 then back (exact for these values)."""
    wide = torch.stack([t.double() for t in tensors])
    if op == "sum":
        r = wide.sum(0)
    elif op == "max":
        r = wide.max(0).values
    else:
        r = wide.sum(0) / len(tensors)
    return r.to(tensors[0].dtype)


class Place:
    """Views of sentinel-filled 1-D bases, and the bases as they must end."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.bases: list = []        # (base, copy from before the call)
        self.expected: list = []     # (view, expected values)

    def base(self, n: int) -> torch.Tensor:
        b = torch.full((n,), SENTINEL, dtype=self.dtype)
        self.bases.append(b)
        return b

    def view(self, count: int, form: str) -> torch.Tensor:
        """A fresh view of ``count`` elements: "separate" a tensor of its own, "strided" every
        other element from an offset (non-contiguous), "offset" contiguous from an offset."""
        if form == "strided":
            return self.base(2 * count + 7)[3:3 + 2 * count:2]
        if form == "offset":
            return self.base(count + 9)[5:5 + count]
        return self.base(count)

    def expect(self, view: torch.Tensor, value: torch.Tensor) -> None:
        self.expected.append((view, value))

    def freeze(self) -> None:
        """Remember every base as it is now (the call's starting state)."""
        self.bases = [(b, b.clone()) for b in self.bases]

    def problems(self) -> list[str]:
        """How the bases differ from their starting state plus the expected outputs."""
        wanted = {}
        for b, before in self.bases:
            wanted[b.data_ptr()] = (b, before.clone())
        for view, value in self.expected:
            for ptr, (b, w) in wanted.items():
                lo, hi = b.data_ptr(), b.data_ptr() + b.numel() * b.element_size()
                if lo <= view.data_ptr() < hi or view.numel() == 0:
                    offset = (view.data_ptr() - lo) // b.element_size()
                    if view.numel():
                        w.as_strided(view.shape, view.stride(), offset).copy_(
                            value.reshape(view.shape))
                    break
        out = []
        for i, (b, w) in enumerate(wanted.values()):
            if not torch.equal(b, w):
                bad = (b != w).nonzero().flatten().tolist()
                out.append(f"base {i} differs at {bad[:6]}: got {b[bad[:6]].tolist()} "
                           f"want {w[bad[:6]].tolist()}")
        return out


def build_call(api: str, collective: str, form: str, n: int, rank: int, k: int, dtype,
               op: str, root: int, seed: int, kw: dict):
    """(call, Place) for one example: ``call()`` runs the collective through ``api``
    ("ringccl.torch": ringccl.torch's functions with ``kw``; "backend": torch.distributed's
    on the ringccl backend)."""
    import ringccl.torch as rt

    p = Place(dtype)
    mine = lambda count, salt=0: values(seed, rank, count, dtype, n, salt)  # noqa: E731
    theirs = lambda r, count, salt=0: values(seed, r, count, dtype, n, salt)  # noqa: E731
    backend = api == "backend"
    rop = TORCH_OPS[op]
    if collective in ("all_reduce", "broadcast", "reduce"):
        t = p.view(k, form if form != "in_place" else "offset")
        t.copy_(mine(k))
        if collective == "all_reduce":
            p.expect(t, fold(op, [theirs(r, k) for r in range(n)]))
            call = (lambda: dist.all_reduce(t, rop)) if backend else \
                (lambda: rt.all_reduce(t, op, **kw))
        elif collective == "broadcast":
            p.expect(t, theirs(root, k))
            call = (lambda: dist.broadcast(t, root)) if backend else \
                (lambda: rt.broadcast(t, root, **kw))
        else:
            if rank == root:
                p.expect(t, fold(op, [theirs(r, k) for r in range(n)]))
            call = (lambda: dist.reduce(t, root, rop)) if backend else \
                (lambda: rt.reduce(t, root, op, **kw))
        return call, p
    if collective in ("reduce_scatter", "all_gather"):
        # the n-block side and the one-block side; in place the block is the whole's own
        if form == "in_place":
            whole = p.view(n * k, "offset")
            block = whole[rank * k:(rank + 1) * k]
        else:
            whole, block = p.view(n * k, form), p.view(k, form)
        if collective == "reduce_scatter":
            whole.copy_(mine(n * k))
            p.expect(block, fold(op, [theirs(r, n * k) for r in range(n)])[rank * k:
                                                                              (rank + 1) * k])
            call = (lambda: dist.reduce_scatter_tensor(block, whole, rop)) if backend else \
                (lambda: rt.reduce_scatter_tensor(block, whole, op, **kw))
        else:
            block.copy_(mine(k))
            p.expect(whole, torch.cat([theirs(r, k) for r in range(n)]))
            call = (lambda: dist.all_gather_into_tensor(whole, block)) if backend else \
                (lambda: rt.all_gather_into_tensor(whole, block, **kw))
        return call, p
    if collective in ("scatter", "gather"):
        t = p.view(k, form if form != "in_place" else "offset")
        blocks = None
        if rank == root:
            blocks = [t if (form == "in_place" and j == root) else p.view(k, form)
                      for j in range(n)]
        if collective == "scatter":
            if rank == root:
                for j, b in enumerate(blocks):
                    b.copy_(mine(k, salt=j + 1))
            p.expect(t, theirs(root, k, salt=rank + 1))
            call = (lambda: dist.scatter(t, blocks, root)) if backend else \
                (lambda: rt.scatter(t, blocks, root, **kw))
        else:
            t.copy_(mine(k))
            if rank == root:
                for j, b in enumerate(blocks):
                    p.expect(b, theirs(j, k))
            call = (lambda: dist.gather(t, blocks, root)) if backend else \
                (lambda: rt.gather(t, blocks, root, **kw))
        return call, p
    # all_to_all_single: block j of rank r's input goes to block r of rank j's output
    inp = p.view(n * k, form if form != "in_place" else "offset")
    out = inp if form == "in_place" else p.view(n * k, form)
    inp.copy_(mine(n * k))
    p.expect(out, torch.cat([theirs(r, n * k)[rank * k:(rank + 1) * k] for r in range(n)]))
    call = (lambda: dist.all_to_all_single(out, inp)) if backend else \
        (lambda: rt.all_to_all_single(out, inp, **kw))
    return call, p


def run_one(what: str, call, place: Place) -> list[str]:
    """Run one example; what went wrong (its exception, the bases that differ)."""
    place.freeze()
    try:
        call()
    except Exception as exc:   # noqa: BLE001 - reported, not raised
        return [f"{what}: {type(exc).__name__}: {exc}"]
    return [f"{what}: {p}" for p in place.problems()]


def contract(rank: int, world_size: int, api: str, transports: tuple, max_examples: int):
    """The property over drawn examples; returns (examples run, failures)."""
    n = world_size
    table = algorithms(n)
    failures: list = []
    runs = {"n": 0}
    if "hybrid" in transports:   # two "hosts": ranks 0-1 and the rest
        os.environ["RINGCCL_HOST_ID"] = f"host{min(rank // 2, 1)}"

    @settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def prop(data):
        collective = data.draw(st.sampled_from(sorted(table)))
        algorithm = data.draw(st.sampled_from(table[collective]))
        form = data.draw(st.sampled_from(["separate", "strided", "in_place"]))
        k = data.draw(st.sampled_from([0, 1, 2, 5]))
        dtype_name = data.draw(st.sampled_from(sorted(DTYPES)))
        dtype = DTYPES[dtype_name]
        op = data.draw(st.sampled_from(["sum", "max"] + (["avg"] if dtype.is_floating_point
                                                          else [])))
        root = data.draw(st.integers(0, n - 1))
        transport = data.draw(st.sampled_from(transports))
        restore = data.draw(st.sampled_from([None, True, False]))
        accumulate = collective in REDUCING and dtype in (torch.float16, torch.bfloat16) \
            and data.draw(st.booleans())
        seed = data.draw(st.integers(0, 10 ** 6))
        if api == "backend" and form == "strided":
            form = "offset"   # torch.distributed's own checks want contiguous tensors
        kw = {"algorithm": algorithm, "restore": restore, "transport": transport,
              **{key: v for key, v in _params(collective, algorithm, root).items()
                 if key != "root"}}
        if accumulate:
            kw["accumulate_dtype"] = torch.float32
        if collective not in REDUCING:
            op = "sum"
        if api == "backend":
            os.environ["RINGCCL_ALGO"] = "" if algorithm is None else \
                f"{collective}:{algorithm}"
        what = (f"{collective} {algorithm} {form} k={k} {dtype_name} {op} root={root} "
                f"{transport} restore={restore} acc={accumulate}")
        runs["n"] += 1
        failures.extend(run_one(what, *build_call(api, collective, form, n, rank, k, dtype, op,
                                                  root, seed, kw)))

    prop()
    return runs["n"], failures


def sweep(rank: int, world_size: int, api: str, transports: tuple) -> tuple[list, dict]:
    """Every collective × algorithm × transport × form once (k=2, float32, sum, root = the
    last rank), and the three-rank example of in-place reduce_scatter: rank r's input
    [6r+1, ..., 6r+6], output its block r. Returns (failures, {(algorithm, transport): this
    rank's input after the in-place reduce_scatter})."""
    import ringccl.torch as rt

    n = world_size
    table = algorithms(n)
    failures, example = [], {}
    if "hybrid" in transports:
        os.environ["RINGCCL_HOST_ID"] = f"host{min(rank // 2, 1)}"
    for transport in transports:
        for collective in sorted(table):
            for algorithm in table[collective]:
                if api == "backend":
                    os.environ["RINGCCL_ALGO"] = "" if algorithm is None else \
                        f"{collective}:{algorithm}"
                kw = {"algorithm": algorithm, "transport": transport,
                      **{key: v for key, v in _params(collective, algorithm, n - 1).items()
                         if key != "root"}}
                for form in ("separate", "strided", "in_place"):
                    if api == "backend" and form == "strided":
                        continue
                    failures.extend(run_one(
                        f"{collective} {algorithm} {form} {transport}",
                        *build_call(api, collective, form, n, rank, 2, torch.float32, "sum",
                                    n - 1, 1, kw)))
                if collective == "reduce_scatter":
                    inp = torch.arange(6 * rank + 1, 6 * rank + 7, dtype=torch.float32)
                    out = inp[rank * 2:(rank + 1) * 2]
                    if api == "backend":
                        dist.reduce_scatter_tensor(out, inp)
                    else:
                        rt.reduce_scatter_tensor(out, inp, **kw)
                    example[(algorithm, transport)] = inp.tolist()
    return failures, example


def refusals(rank: int, world_size: int, api: str) -> list:
    """Partial overlaps and overlaps with another rank's block, on every rank alike: each must
    raise (ArgumentError over ringccl.torch, the same inside the Work over the backend) naming
    both arguments, leave the memory as it was, and leave the group usable."""
    import ringccl.torch as rt
    from ringccl.errors import ArgumentError

    n, k = world_size, 4
    other = (rank + 1) % n
    base = torch.arange(3 * n * k + 8, dtype=torch.float32)
    before = base.clone()
    inp = base[2:2 + n * k]
    blocks = [inp[j * k:(j + 1) * k] for j in range(n)]
    cases = {   # name: (the two names the message must hold, ringccl.torch's call, dist's)
        "reduce_scatter partial": (
            ("output", "input"),
            lambda: rt.reduce_scatter_tensor(inp[rank * k + 1:(rank + 1) * k + 1], inp),
            lambda: dist.reduce_scatter_tensor(inp[rank * k + 1:(rank + 1) * k + 1], inp)),
        "reduce_scatter other block": (
            ("output", "input"),
            lambda: rt.reduce_scatter_tensor(blocks[other], inp),
            lambda: dist.reduce_scatter_tensor(blocks[other], inp)),
        "all_gather other block": (
            ("input", "output"),
            lambda: rt.all_gather_into_tensor(inp, blocks[other]),
            lambda: dist.all_gather_into_tensor(inp, blocks[other])),
        "all_to_all shifted": (
            ("output", "input"),
            lambda: rt.all_to_all_single(base[3:3 + n * k], inp),
            lambda: dist.all_to_all_single(base[3:3 + n * k], inp)),
        "all_to_all other layout": (
            ("output", "input"),
            lambda: rt.all_to_all_single(inp.view(k, n).t(), inp.view(n, k)), None),
        # root-only refusals: the root refuses before any data moves, so only it calls
        "scatter root's other block": (
            ("tensor", "scatter_list[1]"),
            lambda: rt.scatter(blocks[1], blocks, 0) if rank == 0 else None, None),
        "gather partial": (
            ("gather_list[0]", "tensor"),
            lambda: rt.gather(inp[1:1 + k], blocks, 0) if rank == 0 else None, None),
    }
    out = []
    for name, (names, ours, theirs) in cases.items():
        fn = theirs if api == "backend" else ours
        if fn is None:
            continue
        try:
            fn()
            raised = None
        except ArgumentError as exc:
            raised = str(exc)
        except Exception as exc:   # noqa: BLE001 - recorded: must be an ArgumentError
            raised = f"wrong type {type(exc).__name__}: {exc}"
        if name.startswith(("scatter", "gather")) and rank != 0:
            ok = raised is None
        else:
            ok = raised is not None and not raised.startswith("wrong type") and all(
                a in raised for a in names)
        if not ok:
            out.append(f"{name}: {raised}")
        if not torch.equal(base, before):
            out.append(f"{name}: memory changed")
            base.copy_(before)
    # still usable: every rank reaches the same collective after the refusals
    x = torch.ones(3)
    if api == "backend":
        dist.all_reduce(x)
    else:
        rt.all_reduce(x)
    if x.tolist() != [float(n)] * 3:
        out.append(f"all_reduce after the refusals: {x.tolist()}")
    return out
