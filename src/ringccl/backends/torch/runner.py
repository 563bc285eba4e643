"""``ringccl bench`` and ``ringccl run`` on torch.distributed: how a case runs on gloo (CPU
tensors) and NCCL (CUDA tensors).

:class:`TorchBackend` implements :class:`ringccl.bench.Backend`; :func:`sweep` is its worker
body under :func:`ringccl.torch.launch.launch` or torchrun and :func:`launch_sweep` the local
launcher. The spec, the inputs, the timing loop and ``#wrong`` are :mod:`ringccl.bench`'s, the
same for every backend. ringccl's functions mirror torch.distributed's names and arguments, so
one adapter per collective drives both: ``ns`` is ``ringccl.torch`` (plus ``algorithm=``) or
``torch.distributed``.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from ...bench.inputs import Case
from ...bench.spec import BUILTIN, BenchSpec
from ...bench.sweep import Prepared, run_sweep
from ...collectives import get_collective
from ...engine import trace
from ...errors import BackendError
from ...ops import parse_op
from .launch import launch
from .dialect import combine_fn
from .transport import resolve_transport

__all__ = ["TorchBackend", "sweep", "launch_sweep"]

_TORCH_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "band": "BAND",
              "bor": "BOR", "bxor": "BXOR", "avg": "AVG"}


class TorchBackend:
    """:class:`ringccl.bench.Backend` on a torch.distributed process group (gloo or NCCL)."""

    def __init__(self, group=None, tracer: trace.LastCalls | None = None):
        self.group = group
        self.tracer = tracer   # ``--trace``: the last iterations of ringccl's rows are traced
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.name = str(dist.get_backend(group))
        self.device = (torch.device("cuda", torch.cuda.current_device()) if self.name == "nccl"
                       else torch.device("cpu"))
        # what ringccl's rows run on (transport="auto"), written into them
        self.transport = resolve_transport(group, "auto", torch.empty(0, device=self.device))

    def global_rank(self, rank: int) -> int:
        """``rank`` of this backend's group as torch.distributed's global rank, what ``src=``
        and ``dst=`` take: a row's root is a rank of the group it runs on (its inputs and
        expected results are built so), which on a subgroup is another global rank."""
        if self.group is None or self.group is dist.group.WORLD:
            return rank
        return dist.get_global_rank(self.group, rank)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        self._sync()
        dist.barrier(self.group)

    def max_over_ranks(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.tolist()

    def sum_over_ranks(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, group=self.group)
        return int(t.item())

    def _tensor(self, a: np.ndarray | None, m: int, dtype) -> torch.Tensor:
        if a is None:
            return torch.zeros(m, dtype=dtype, device=self.device)
        return torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def prepare(self, collective: str, algorithm: str, placement: str, case: Case,
                spec: BenchSpec, segment_bytes: int | None) -> Prepared:
        op = parse_op(spec.op)
        dtype = getattr(torch, spec.dtype)
        if algorithm == BUILTIN:
            ns: Any = dist
            kw: dict = {"group": self.group}
            op_arg = getattr(dist.ReduceOp, _TORCH_OPS[op.value])
        else:
            from . import collectives as ns  # ringccl.torch's functions
            kw = {"group": self.group, "algorithm": algorithm, **spec.params}
            if segment_bytes is not None:
                kw["segment_bytes"] = segment_bytes
            if not spec.restore:
                kw["restore"] = False
            if spec.accumulate_dtype is not None:
                kw["accumulate_dtype"] = spec.accumulate_dtype
            op_arg = op
            if not hasattr(ns, _API[collective][0]):
                raise BackendError(f"ringccl.torch has no {_API[collective][0]} for {collective}")
        if get_collective(collective).reduces:
            kw["op"] = op_arg
        inp = self._tensor(case.input, case.m, dtype)
        run, reset, result = _API[collective][1](ns, kw, inp, case, placement, self, spec.root,
                                                 dtype)
        if self.device.type == "cuda":
            call = run
            run = lambda: (call(), self._sync())  # noqa: E731  (time until the GPU is done)
        if self.tracer is not None and algorithm != BUILTIN:
            run = self.tracer.wrap(run, _expected_calls(spec),
                                   _trace_label(collective, algorithm, placement, case, spec,
                                                segment_bytes))
        return Prepared(run, reset, lambda: _numpy(result()))

    def local_reduce(self, count: int, spec: BenchSpec) -> Prepared:
        """The elementwise reduction of two ``count``-element tensors (what a ring step does)."""
        dtype = getattr(torch, spec.dtype)
        a = torch.ones(count, dtype=dtype, device=self.device)
        b = torch.ones(count, dtype=dtype, device=self.device)
        combine = combine_fn(parse_op(spec.op))
        return Prepared(lambda: (combine(a, b), self._sync()), lambda: None, lambda: None)


def _expected_calls(spec: BenchSpec) -> int:
    """How often :func:`ringccl.bench.run_sweep` calls a row's ``run``: the check, the
    warm-up, the timed iterations (the last of which ``--trace`` traces)."""
    return int(bool(spec.check)) + spec.warmup + spec.iters


def _trace_label(collective, algorithm, placement, case, spec, segment_bytes) -> str:
    seg = "" if segment_bytes is None else f", segment_bytes={segment_bytes}"
    return (f"{algorithm} {collective} {case.m} × {spec.dtype} {placement}{seg}")


def _numpy(t: torch.Tensor | None) -> np.ndarray | None:
    return None if t is None else t.detach().cpu().numpy()


# -- one adapter per collective: (ns, kwargs, input, case, placement, backend, root, dtype)
#    -> (run, reset, result); "out-of-place" keeps the input, "in-place" aliases as nccl-tests;
#    root is a rank of the backend's group (the torch call gets its global rank) --

def _nothing() -> None:
    return None


def _in_place_only(fn_name: str, root_kw: str | None = None, root_only_result: bool = False):
    """all_reduce, broadcast, reduce: APIs that work in place; out-of-place copies first."""
    def adapter(ns, kw, inp, case, placement, be, root, dtype):
        fn = getattr(ns, fn_name)
        if root_kw:
            kw = dict(kw, **{root_kw: be.global_rank(root)})
        buf = inp.clone()
        has_result = not root_only_result or be.rank == root
        if placement == "in-place":
            return (lambda: fn(buf, **kw), lambda: buf.copy_(inp),
                    (lambda: buf) if has_result else _nothing)
        return (lambda: (buf.copy_(inp), fn(buf, **kw)), _nothing,
                (lambda: buf) if has_result else _nothing)
    return adapter


#: torch.distributed's successors of deprecated names: torch 2.13 deprecates
#: all_gather_into_tensor and reduce_scatter_tensor (one FutureWarning per process) for these,
#: same arguments; older torch has only the old names
_SUCCESSORS = {"reduce_scatter_tensor": "reduce_scatter_single",
               "all_gather_into_tensor": "all_gather_single"}


def _function(ns, name: str):
    """``ns.name``; for torch.distributed its non-deprecated successor where torch has one
    (ringccl.torch keeps torch's long-standing names)."""
    if ns is dist and hasattr(dist, _SUCCESSORS.get(name, name)):
        name = _SUCCESSORS.get(name, name)
    return getattr(ns, name)


def _reduce_scatter(ns, kw, inp, case, placement, be, root, dtype):
    x = inp.clone()
    lo = be.rank * case.block
    out = (x[lo:lo + case.block] if placement == "in-place"
           else torch.empty(case.block, dtype=dtype, device=be.device))
    fn = _function(ns, "reduce_scatter_tensor")
    return (lambda: fn(out, x, **kw), lambda: x.copy_(inp), lambda: out)


def _all_gather(ns, kw, inp, case, placement, be, root, dtype):
    out = torch.empty(case.m, dtype=dtype, device=be.device)
    lo = be.rank * case.block
    x = out[lo:lo + case.block] if placement == "in-place" else inp
    fn = _function(ns, "all_gather_into_tensor")
    return (lambda: fn(out, x, **kw), lambda: x.copy_(inp), lambda: out)


def _scatter(ns, kw, inp, case, placement, be, root, dtype):
    blocks = list(inp.split(case.block)) if be.rank == root else None
    out = (blocks[root] if placement == "in-place" and be.rank == root
           else torch.empty(case.block, dtype=dtype, device=be.device))
    return (lambda: ns.scatter(out, blocks, src=be.global_rank(root), **kw), _nothing,
            lambda: out)


def _gather(ns, kw, inp, case, placement, be, root, dtype):
    full = torch.empty(case.m, dtype=dtype, device=be.device)
    blocks = list(full.split(case.block)) if be.rank == root else None
    x = blocks[root] if placement == "in-place" and be.rank == root else inp
    return (lambda: ns.gather(x, blocks, dst=be.global_rank(root), **kw), lambda: x.copy_(inp),
            (lambda: full) if be.rank == root else _nothing)


def _all_to_all(ns, kw, inp, case, placement, be, root, dtype):
    if placement == "in-place":
        raise BackendError("all_to_all_single cannot run in place; use --placement out-of-place")
    out = torch.empty(case.m, dtype=dtype, device=be.device)
    return (lambda: ns.all_to_all_single(out, inp, **kw), _nothing, lambda: out)


#: collective -> (torch.distributed / ringccl.torch function name, adapter)
_API: dict[str, tuple[str, Callable]] = {
    "all_reduce": ("all_reduce", _in_place_only("all_reduce")),
    "reduce_scatter": ("reduce_scatter_tensor", _reduce_scatter),
    "all_gather": ("all_gather_into_tensor", _all_gather),
    "broadcast": ("broadcast", _in_place_only("broadcast", "src")),
    "reduce": ("reduce", _in_place_only("reduce", "dst", root_only_result=True)),
    "scatter": ("scatter", _scatter),
    "gather": ("gather", _gather),
    "all_to_all": ("all_to_all_single", _all_to_all),
}


def sweep(rank: int, world_size: int, spec_dict: dict, progress=None) -> list[dict]:
    """Worker body for :func:`ringccl.torch.launch.launch`: run ``ringccl bench``'s sweep.

    Args:
        spec_dict: :meth:`ringccl.bench.BenchSpec.to_dict`.
        progress: optional multiprocessing queue; rank 0 puts each row as it is done.

    Returns:
        the rows on rank 0, [] on the other ranks.
    """
    spec = BenchSpec.from_dict(spec_dict)
    if dist.get_backend() == "nccl":  # one GPU per local rank, before NCCL's first call
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local % torch.cuda.device_count())
    emit = progress.put if progress is not None and rank == 0 else None
    tracer = trace.LastCalls.from_environment()   # ringccl run/bench --trace
    backend = TorchBackend(tracer=tracer)
    if tracer is not None:
        backend.barrier()   # every rank's origin: the same instant, to the barrier's skew
        origin = trace.now()
    rows = run_sweep(backend, spec, emit)
    if tracer is not None:
        tracer.write(rank, origin)
    return rows if rank == 0 else []


def launch_sweep(spec: BenchSpec, nproc: int, on_row: Callable[[dict], None] | None = None,
                 timeout: float = 600.0, *, oversubscribe: bool = False, worker_bytes: int = 0,
                 verbose: bool = False) -> list[dict]:
    """Run :func:`sweep` on ``nproc`` local processes (:func:`ringccl.torch.launch.launch`, in
    this thread, so its Ctrl-C and SIGTERM handling applies); ``on_row(row)`` is called here as
    each row is done.

    Args:
        oversubscribe, worker_bytes, verbose: as :func:`~ringccl.torch.launch.launch`
            (``worker_bytes``: :func:`ringccl.resources.run_worker_bytes` of the largest size).
    Returns:
        the rows.
    Raises:
        ArgumentError: nproc beyond the machine's cores or memory (unless ``oversubscribe``).
        WorkerError: a worker raised ("rank R: Type: message"; the traceback with ``verbose``).
        BackendError: a worker died or timed out.
        Interrupted: Ctrl-C or SIGTERM; its ``partial`` holds the rows done before it.
    """
    return launch(sweep, nproc, spec.to_dict(), backend=spec.backend, timeout=timeout,
                  oversubscribe=oversubscribe, worker_bytes=worker_bytes, verbose=verbose,
                  on_progress=on_row or (lambda row: None))[0]
