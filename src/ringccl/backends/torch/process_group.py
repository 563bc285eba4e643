"""ringccl as a torch.distributed backend: ``dist.init_process_group("ringccl")``.

``import ringccl.torch`` registers the backend ``"ringccl"`` (``Backend.register_backend`` with
``extended_api=True``, devices ``["cpu"]``); the package's ``torch.backends`` entry point
(:mod:`ringccl.torch_autoload`) does the same for scripts that only pass the name (torch >= 2.5 loads those entry points when it is
imported; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off). Then every torch.distributed call
on a ringccl group — ``dist.all_reduce``, DDP's gradient buckets, FSDP2's all-gathers and
reduce-scatters, ``dist.new_group(ranks, backend="ringccl")`` — runs a ringccl schedule::

    import torch.distributed as dist, ringccl.torch      # registers "ringccl"
    dist.init_process_group("ringccl")                    # torchrun's env://, or store/rank/...
    model = torch.nn.parallel.DistributedDataParallel(model)   # unchanged

How (torch's own pattern for Python process groups, ``torch.testing._internal.distributed.
multi_threaded_pg``): the creator returns a :class:`RingcclProcessGroup`, a subclass of
``torch.distributed.ProcessGroup`` whose collectives are Python methods, so torch uses it as the
group itself. Each group owns

* its transport, chosen once when the group is created from every rank's host identity
  (:func:`ringccl.backends.shm.host_id`, exchanged through the group's store;
  ``RINGCCL_HOST_ID`` splits one machine into "hosts" for tests), as ringccl.torch's "auto"
  chooses (:func:`~ringccl.backends.torch.transport.group_transport`): every rank on this host
  (and x86-64) → the shared-memory transport (:mod:`ringccl.backends.shm`: one segment per
  group, set up at the group's first collective with its exchange over the inner gloo group,
  freed by ``destroy_process_group``); several hosts of equal rank counts → "hybrid";
  otherwise gloo point-to-point on the inner gloo group
  (:class:`~ringccl.backends.torch.transport.GlooTransport`, tag :data:`COLLECTIVE_TAG`).
  ``RINGCCL_TRANSPORT=p2p`` forces gloo point-to-point, ``=shm`` forces shared memory (refused
  at creation across hosts). Either way the run itself is ringccl.torch's executor's
  (:func:`ringccl.backends.torch.executor.run`).
* an inner gloo group (``ProcessGroupGloo`` on a ``PrefixStore`` of the group's store) that
  carries the user's ``send``/``recv`` (their own tags), the small exchanges (the cross-rank
  check, all_to_all's block sizes, the shared-memory set-up) and, off one host,
  the schedules' messages. A raw gloo object, not a registered group: nothing is added to
  torch's group registry, ``dist.get_rank`` and friends never see it, and
  ``destroy_process_group`` on ours frees it with no second teardown.
* one worker thread that runs the group's collectives one at a time in issue order (so the
  k-th collective of every rank is the same one), under ``torch.no_grad`` (grad mode is per
  thread), completing each call's ``torch.futures.Future`` with the value gloo's would carry
  (the output tensors: ``[tensor]`` for all_reduce, what DDP's comm hooks read).

**Dispatch policy** (:meth:`.dispatch.Group.issue`). Handing a call to the worker costs a thread
hand-off (measured 145-320 us per call for 2 processes, 450-620 us for 4, on the 2-core test
machine: docs/backend.md), more than a small all_reduce itself costs on shared memory; the
worker pays only where the caller has something to overlap with a long call (DDP's reducer
launches its bucket all-reduces from autograd hooks and waits at the end of backward). So a
call runs *inline*, in the caller's thread, returning an already-completed Work, when

* the worker has nothing queued or running, and
* the call moves at most ``RINGCCL_BACKEND_INLINE_BYTES`` bytes (default :data:`INLINE_BYTES`
  = 256 KiB: up to it the inline call costs about 1-3 hand-offs, measured; ``0`` sends every
  non-empty call to the worker);

everything else goes to the worker. Issue order holds across threads: the decision and the
count of outstanding worker jobs are taken under one submit lock, and a run lock is held by the
worker per job and by an inline call before it lets go of the submit lock, so a call issued
after an inline one (from any thread) runs after it. Failures are the same either way: the
Work's ``wait()`` / ``get_future()`` raise the collective's failure; only refusals of the
arguments (dtype, op, root) raise from the call itself, as before. ``RINGCCL_BACKEND_THREAD=0``
runs every collective inline (no worker). An inline call's Work is a
:class:`~.dispatch.DoneWork`: the same answers, its ``torch.futures.Future`` made only when
``get_future()`` asks; an inline all_reduce of tensors autograd never sees (none requires grad,
none is a view: :func:`~.dispatch.autograd_free`) runs in the caller's grad mode, where
``torch.no_grad`` would change nothing. What an identical call decides again (op and dtype
check, options, algorithm) is remembered per call signature (:mod:`.pg_front`).

Each collective is the ringccl front end's flow (:mod:`ringccl.frontend`: contract → working
buffer → schedule → engine) with ringccl.torch's tensor dialect and this group as its group
adapter; the algorithm is chosen per call by the one chooser (:func:`ringccl.costmodel.choice.
choose`: ``RINGCCL_ALGO``, else the transport's choice, the same as ringccl.torch's) and
logged once per (collective, size class, group) with ``RINGCCL_DEBUG=INFO``, naming the
transport and the cost model's predicted time on it.

Errors, as gloo's: what ringccl cannot do (``PREMUL_SUM``, a dtype outside ringccl's set, a
bitwise op on floats, AVG on integers) raises ``RuntimeError`` naming the op and dtype, at the
call; a peer that dies or stalls fails the waiting ranks' Work within the group's timeout
(``init_process_group(timeout=...)``, applied by the inner gloo group to every wait).

References: torch.distributed's "Third-party backends" (``Backend.register_backend``);
NCCL_ALGO / NCCL_DEBUG (NCCL's environment variables), which RINGCCL_ALGO / RINGCCL_DEBUG mirror.
"""

from __future__ import annotations

import datetime
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from ... import frontend
from ...args import check_rank
from ...errors import ArgumentError
from ...frontend import aliasing
from ...layout import check_own_block
from ...ops import ReduceOp
from ..shm import host_id, lane
from .dispatch import DoneWork, Group, Work, autograd_free, live
from .pg_front import (BACKEND_NAME, FRONT, SIZE_CLASSES, call_algorithm, call_options,
                       check_dtype, nbytes, real_views, reduce_op, size_class)
from .transport import COLLECTIVE_TAG

__all__ = ["BACKEND_NAME", "RingcclProcessGroup", "register", "create_process_group",
           "COLLECTIVE_TAG", "SIZE_CLASSES", "size_class", "host_id"]

# -- the process group torch sees ---------------------------------------------------------------

class RingcclProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group whose collectives run ringccl schedules over an inner
    gloo group (module docstring). Built by torch through :func:`create_process_group`; never
    constructed directly. CPU tensors only; every method takes and returns what gloo's does
    (lists of tensors and an options object in, a ``Work`` out)."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta,
                 global_ranks: Sequence[int] | None = None, name: str = ""):
        super().__init__(rank, size)
        self._name = name
        self._group = Group(store, rank, size, timeout,
                             range(size) if global_ranks is None else global_ranks, name)
        # the group is freed with the object if torch (< 2.5) never calls shutdown, and at the
        # interpreter's exit if nobody destroyed it (:func:`.dispatch._close_at_exit`)
        self._finalizer = weakref.finalize(self, self._group.close)
        live.add(self._group)

    # -- identity -------------------------------------------------------------------------------
    def getBackendName(self) -> str:
        return BACKEND_NAME

    def name(self) -> str:
        return BACKEND_NAME

    def size(self) -> int:
        return self._group.size

    # torch sets and reads a group's name (destroy_process_group unregisters it by name); a
    # Python group keeps it itself, as torch's threaded test group does
    @property
    def group_name(self) -> str:
        return self._name

    def _set_group_name(self, name: str) -> None:
        self._name = self._group.name = str(name)

    def rank(self) -> int:
        return self._group.rank

    @property
    def hosts(self) -> list[str]:
        """Every rank's host identity by group rank (:func:`ringccl.backends.shm.host_id`)."""
        return list(self._group.hosts)

    @property
    def transport(self) -> str:
        """What the group's collectives run on: "shm" (every rank on this host) or "p2p"
        (gloo point-to-point)."""
        return self._group.transport

    def shutdown(self) -> None:
        """Called by ``destroy_process_group``: finish queued collectives, free the worker, the
        shared memory (this rank's mappings; the segment's name was unlinked at set-up) and the
        inner gloo group."""
        self._finalizer()

    def abort(self) -> None:
        self._finalizer()

    def _submit(self, job: Callable[[], Any], nbytes: int = 0, no_grad: bool = True):
        """``job`` as a collective of this group (:meth:`Group.issue`: inline or on the
        worker by ``nbytes``, the bytes the call moves) and its Work; ``no_grad=False``: the
        call's tensors need no ``torch.no_grad`` inline (:func:`.dispatch.autograd_free`)."""
        done = self._group.issue(job, nbytes, no_grad)
        return DoneWork(done) if type(done) is tuple else Work.of_outcome(done)

    # -- collectives ----------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        return self._all_reduce(list(tensors), opts.reduceOp, opts.timeout)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        return self._all_reduce(list(tensors), opts.reduceOp, opts.timeout)

    def _all_reduce(self, tensors: list, opts_op, timeout):
        g = self._group
        check_dtype(tensors, "all_reduce")
        if len(tensors) == 1:   # the common call, without the lists' loops
            t = tensors[0]
            op = reduce_op(opts_op, t.dtype, "all_reduce")
            options = call_options(timeout)
            size = nbytes(t)
            algorithm, params = call_algorithm(g, "all_reduce", size)

            def one():
                _all_reduce_one(g, t, op, algorithm, params, options)
                return tensors
            return self._submit(one, size, not autograd_free(tensors))
        ops = [reduce_op(opts_op, t.dtype, "all_reduce") for t in tensors]
        options = call_options(timeout)
        plan = [(t, op, call_algorithm(g, "all_reduce", nbytes(t))) for t, op in zip(tensors, ops)]

        def job():
            for t, op, (algorithm, params) in plan:
                _all_reduce_one(g, t, op, algorithm, params, options)
            return tensors
        return self._submit(job, sum(nbytes(t) for t in tensors))

    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        g, tensors = self._group, list(tensors)
        check_dtype(tensors, "broadcast")
        root = check_rank(opts.rootRank, g.size, "src")
        options = call_options(opts.timeout)
        plan = [(t, call_algorithm(g, "broadcast", nbytes(t))) for t in tensors]

        def job():
            for t, (algorithm, params) in plan:
                frontend.in_place(FRONT, "broadcast", t, ReduceOp.SUM, g, algorithm,
                                  {**params, "root": root}, options)
            return tensors
        return self._submit(job, sum(nbytes(t) for t in tensors))

    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        g, tensors = self._group, list(tensors)
        work = real_views(tensors, opts.reduceOp, "reduce")   # complex: as gloo
        check_dtype(work, "reduce")
        root = check_rank(opts.rootRank, g.size, "dst")
        ops = [reduce_op(opts.reduceOp, t.dtype, "reduce") for t in work]
        options = call_options(opts.timeout)
        plan = [(t, op, call_algorithm(g, "reduce", nbytes(t))) for t, op in zip(work, ops)]

        def job():
            for t, op, (algorithm, params) in plan:
                frontend.in_place(FRONT, "reduce", t, op, g, algorithm, {**params, "root": root},
                                  options, copy=g.rank != root)
            return tensors
        return self._submit(job, sum(nbytes(t) for t in tensors))

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        g = self._group
        outputs, inputs = [list(o) for o in output_tensors], list(input_tensors)
        check_dtype(inputs + [t for o in outputs for t in o], "all_gather", same=True)
        options = call_options(opts.timeout)
        plan = []
        for out, inp in zip(outputs, inputs):
            if len(out) != g.size:
                raise RuntimeError(f"ringccl all_gather: output list has {len(out)} tensors, "
                                   f"the group has {g.size} ranks")
            for r, t in enumerate(out):   # gloo's check, before any data moves
                if t.shape != inp.shape:
                    raise RuntimeError(f"ringccl all_gather: invalid tensor size at index {r} "
                                       f"(expected {tuple(inp.shape)}, got {tuple(t.shape)}): "
                                       f"output_tensor_list[{r}] must have the input's shape")
            aliasing.check_blocks(FRONT, "all_gather", inp, "input_tensor", out,
                                  "output_tensor_list", g.rank, False)
            plan.append((out, inp, call_algorithm(g, "all_gather", nbytes(inp) * g.size)))

        def job():
            for out, inp, (algorithm, params) in plan:
                # one contiguous working buffer; the blocks are copied out (list outputs may be
                # anywhere in memory)
                whole = inp.new_empty(g.size * inp.numel())
                frontend.all_gather(FRONT, whole, inp, g, algorithm, params, options, "all_gather",
                                    ("output_tensor_list", "input_tensor"))
                for r, t in enumerate(out):
                    t.copy_(whole[r * inp.numel():(r + 1) * inp.numel()].view(t.shape))
            # the value gloo's Work carries: its one output list
            return outputs[0] if len(outputs) == 1 else outputs
        return self._submit(job, sum(nbytes(inp) * g.size for _, inp, _ in plan))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        # gloo's layout: output_lists[r][i] receives rank r's input_list[i]; allgather wants,
        # per input, the list over ranks
        per_input = [[output_lists[r][i] for r in range(len(output_lists))]
                     for i in range(len(input_list))]
        work = self.allgather(per_input, input_list, opts)
        lists = [list(o) for o in output_lists]
        # f.value() re-raises the gather's failure into the returned future
        return Work(work.get_future().then(lambda f: (f.value(), lists)[1]))

    def _allgather_base(self, output, input, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        g = self._group
        check_dtype([output, input], "all_gather_into_tensor", same=True)
        options = call_options(opts.timeout)
        algorithm, params = call_algorithm(g, "all_gather", nbytes(output))

        def job():
            frontend.all_gather(FRONT, output, input, g, algorithm, params, options,
                                "all_gather_into_tensor", ("output_tensor", "input_tensor"))
            return [output]
        return self._submit(job, nbytes(output))

    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced(self._allgather_base, outputs, inputs, opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        g = self._group
        given = list(output_tensors)
        flat = real_views(given + [t for i in input_tensors for t in i], opts.reduceOp,
                          "reduce_scatter")   # complex: as gloo
        outputs, rest = flat[:len(given)], iter(flat[len(given):])
        inputs = [[next(rest) for _ in i] for i in input_tensors]
        check_dtype(outputs + [t for i in inputs for t in i], "reduce_scatter", same=True)
        ops = [reduce_op(opts.reduceOp, t.dtype, "reduce_scatter") for t in outputs]
        options = call_options(opts.timeout)
        plan = []
        for out, inp, op in zip(outputs, inputs, ops):
            if len(inp) != g.size:
                raise RuntimeError(f"ringccl reduce_scatter: input list has {len(inp)} tensors, "
                                   f"the group has {g.size} ranks")
            for r, t in enumerate(inp):   # gloo's check, before any data moves
                if t.shape != out.shape:
                    raise RuntimeError(f"ringccl reduce_scatter: input_list[{r}] has shape "
                                       f"{tuple(t.shape)}, the output {tuple(out.shape)}; every "
                                       "input_list entry must have the output's shape")
            aliasing.check_blocks(FRONT, "reduce_scatter", out, "output", inp, "input_list",
                                  g.rank, True)
            plan.append((out, inp, op, call_algorithm(g, "reduce_scatter", nbytes(out) * g.size)))

        def job():
            for out, inp, op, (algorithm, params) in plan:
                whole = torch.cat([t.reshape(-1) for t in inp])
                frontend.reduce_scatter(FRONT, out, whole, op, g, algorithm, params, options, None,
                                        "reduce_scatter")
            return given
        return self._submit(job, sum(nbytes(out) * g.size for out in outputs))

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        g, given = self._group, output
        output, input = real_views([output, input], opts.reduceOp,
                                   "reduce_scatter_tensor")   # complex: as gloo
        check_dtype([output, input], "reduce_scatter_tensor", same=True)
        op = reduce_op(opts.reduceOp, input.dtype, "reduce_scatter_tensor")
        options = call_options(opts.timeout)
        algorithm, params = call_algorithm(g, "reduce_scatter", nbytes(input))

        def job():
            frontend.reduce_scatter(FRONT, output, input, op, g, algorithm, params, options, None,
                                    "reduce_scatter_tensor")
            return [given]
        return self._submit(job, nbytes(input))

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._coalesced(self._reduce_scatter_base, outputs, inputs, opts)

    def _coalesced(self, one, outputs, inputs, opts):
        """Several calls of ``one`` issued back to back: the returned Work completes after all
        of them (issue order), with every output as its value, and its ``wait()`` raises the
        first one's failure."""
        works = [one(o, i, opts) for o, i in zip(outputs, inputs)]
        if not works:
            return self._submit(lambda: [])
        if len(works) == 1:
            return works[0]
        outputs = list(outputs)

        def joined(f):
            for part in f.value():
                part.value()   # raises the first failed call's exception into the Work
            return outputs
        # chained on the calls' futures, not a job of its own: nothing waits inside a run
        return Work(torch.futures.collect_all([w.get_future() for w in works]).then(joined))

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        g = self._group
        check_dtype([output, input], "all_to_all_single", same=True)
        options = call_options(opts.timeout)
        algorithm, params = call_algorithm(g, "all_to_all", nbytes(input))
        outs = list(output_split_sizes) or None   # torch passes [] for equal pieces
        ins = list(input_split_sizes) or None

        def job():
            frontend.all_to_all(FRONT, output, input, outs, ins, g, algorithm, params, options)
            return [output]
        return self._submit(job, nbytes(input))

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        g = self._group
        outputs, inputs = list(output_tensors), list(input_tensors)
        check_dtype(outputs + inputs, "all_to_all", same=True)
        for what, tensors in (("input", inputs), ("output", outputs)):
            if len(tensors) != g.size:   # gloo's words
                raise RuntimeError(f"ringccl all_to_all: {what} tensor list size {len(tensors)} "
                                   f"does not match world size {g.size}")
        check_own_block(g.rank, inputs[g.rank].numel(), outputs[g.rank].numel(),
                        "input_tensor_list[{}].numel()", "output_tensor_list[{}].numel()",
                        "elements")
        options = call_options(opts.timeout)
        algorithm, params = call_algorithm(g, "all_to_all", sum(nbytes(t) for t in inputs))

        def job():
            frontend.exchange(FRONT, inputs, [t.numel() for t in inputs],
                              [t.numel() for t in outputs], g, algorithm, params, options, outputs)
            return outputs
        return self._submit(job, sum(nbytes(t) for t in inputs))

    def gather(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.GatherOptions()
        g = self._group
        inputs = list(input_tensors)
        root = check_rank(opts.rootRank, g.size, "dst")
        blocks = list(output_tensors[0]) if g.rank == root else None
        check_dtype(inputs + (blocks or []), "gather", same=True)
        options = call_options(opts.timeout)
        algorithm, params = call_algorithm(g, "gather", nbytes(inputs[0]) * g.size)

        def job():
            frontend.gather(FRONT, inputs[0], blocks, root, g, algorithm, params, options)
            return [blocks] if blocks is not None else []
        return self._submit(job, nbytes(inputs[0]) * g.size)

    def scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        g = self._group
        outputs = list(output_tensors)
        root = check_rank(opts.rootRank, g.size, "src")
        blocks = list(input_tensors[0]) if g.rank == root else None
        check_dtype(outputs + (blocks or []), "scatter", same=True)
        options = call_options(opts.timeout)
        algorithm, params = call_algorithm(g, "scatter", nbytes(outputs[0]) * g.size)

        def job():
            frontend.scatter(FRONT, outputs[0], blocks, root, g, algorithm, params, options)
            return outputs
        return self._submit(job, nbytes(outputs[0]) * g.size)

    def barrier(self, opts=None):
        # an all_reduce of one int32 on the group's own transport, after every collective
        # issued before it: no rank leaves before all have entered (each needs every rank's
        # value), and a dead or stalled peer is named (PeerError / RingcclTimeout) as in any
        # collective, where gloo's own barrier says "Connection closed by peer"
        g = self._group
        options = call_options(getattr(opts, "timeout", None))
        algorithm, params = call_algorithm(g, "all_reduce", 4)
        token = torch.zeros(1, dtype=torch.int32)

        def job():
            _all_reduce_one(g, token, ReduceOp.SUM, algorithm, params, options)
            return []
        return self._submit(job, 4)

    # -- point to point: straight to the inner gloo group (gloo's own Work and futures) ---------
    def send(self, tensors, dstRank: int, tag: int = 0):
        _check_p2p(tensors, tag, "send")
        return self._group.inner.send(list(tensors), dstRank, tag)

    def recv(self, tensors, srcRank: int, tag: int = 0):
        _check_p2p(tensors, tag, "recv")
        return self._group.inner.recv(list(tensors), srcRank, tag)

    def recv_anysource(self, tensors, tag: int = 0):
        _check_p2p(tensors, tag, "recv")
        return self._group.inner.recv_anysource(list(tensors), tag)


def _check_p2p(tensors, tag: int, what: str) -> None:
    check_dtype(list(tensors), what)
    if tag == COLLECTIVE_TAG:
        raise RuntimeError(f"ringccl {what}: tag={tag} is reserved for ringccl's collectives; "
                           "use another tag")


# -- registration -------------------------------------------------------------------------------

def create_process_group(backend_opts, pg_options=None) -> RingcclProcessGroup:
    """torch's creator (``extended_api=True``): a :class:`RingcclProcessGroup` for the group
    described by ``backend_opts`` (``torch.distributed._DistributedBackendOptions``: store,
    group_rank, group_size, timeout, group_id, global_ranks_in_group).

    Raises:
        ArgumentError (a ValueError): ``pg_options`` given (ringccl takes its settings from the
            environment: RINGCCL_ALGO, RINGCCL_DEBUG, RINGCCL_TIMEOUT).
    """
    if pg_options is not None:
        raise ArgumentError(f"pg_options={pg_options!r}: the ringccl backend takes no options "
                            "object; set RINGCCL_ALGO / RINGCCL_DEBUG / RINGCCL_TIMEOUT instead")
    ranks = list(getattr(backend_opts, "global_ranks_in_group", None) or [])
    size = backend_opts.group_size
    return RingcclProcessGroup(backend_opts.store, backend_opts.group_rank, size,
                               backend_opts.timeout, ranks if len(ranks) == size else None,
                               str(getattr(backend_opts, "group_id", "")))


def register() -> None:
    """Register the ``"ringccl"`` backend with torch.distributed (idempotent; what
    ``import ringccl.torch`` and the ``torch.backends`` entry point do)."""
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, create_process_group, extended_api=True,
                                  devices=["cpu"])



def autoload() -> None:
    """Kept for installs whose metadata still names ``ringccl.torch.backend:autoload``; the entry
    point is :func:`ringccl.torch_autoload.autoload` (this module cannot be imported while
    ``import torch`` runs inside ``import ringccl.torch``)."""
    register()


def _all_reduce_one(g: Group, t: torch.Tensor, op: ReduceOp, algorithm: str, params: dict,
                    options) -> None:
    """One tensor's all_reduce on ``g``: a signature seen before replays its compiled
    shared-memory call (:mod:`ringccl.backends.shm.lane`: the key holds every argument, so no
    other call can hit it; bitwise the general path's result), else the front end's flow,
    compiling it on the way."""
    key = None
    if not params:
        key = lane.call(("process_group.all_reduce", id(g), t.shape, t.dtype, t.device, op,
                         algorithm, options), g, t)
        if key is True:
            return
    lane.first_call(key, g,
                    lambda: frontend.in_place(FRONT, "all_reduce", t, op, g, algorithm, params,
                                              options),
                    lambda: lane.finisher(FRONT, g, op, t.dtype))
