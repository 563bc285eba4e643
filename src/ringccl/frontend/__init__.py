"""The collectives' flow, written once for every backend.

Every collective is the same sequence on every backend: check the arguments → build the
algorithm's schedule → map the collective's contract onto this rank's working buffer
(:mod:`ringccl.layout`) → stage the caller's input into it → run it (the backend's executor, over
:mod:`ringccl.engine`) → read the output back → divide for AVG → copy into the caller's arrays.
:mod:`ringccl.torch` and :mod:`ringccl.mpi` call these flows and supply only a :class:`Backend`:

* its array dialect (numpy arrays, torch tensors): checks of one array or list and their
  messages, numel, flat views, scratch arrays, copy, cast, divide, shares-memory and
  in-place-block tests, contiguity;
* its group adapter (process group, communicator): size, rank, a root's group rank, an
  all-gather of a small object (the cross-rank ``check=``), a max-reduction of two ints
  (all_to_all's block sizes);
* its transport, behind ``execute`` and its measured :class:`ringccl.engine.Pipelining`.

Options every collective takes, in this order, keyword-only: ``segment_bytes`` (None: the
transport's measured policy; 0: never split), ``timeout`` (seconds each wait may take; None:
``RINGCCL_TIMEOUT``, else the backend's own bound), ``restore`` (None: the backend's default),
``check`` (cross-rank fingerprint, :mod:`ringccl.consistency`; None: ``RINGCCL_DEBUG``).
A backend with several transports (ringccl.torch: ``transport=``) passes the call's resolved
transport to :func:`options`; it travels in :attr:`Options.transport` to its ``execute`` and
its ``choose``.

``algorithm=None`` or ``"auto"``: the backend's ``choose(collective, world_size, count, dtype,
opts)`` names the algorithm (ringccl.torch over shared memory: measured per collective and
size); a backend without ``choose`` gets ``ringccl.algorithms.DEFAULTS``. It must give the
same answer on every rank (it sees only what every rank has alike). An explicit name is used
as it is.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol, Sequence

from .. import caches, consistency
from ..algorithms import build_schedule, default_algorithm, get_algorithm
from ..args import check_int
from ..engine import Pipelining, Staged, timeout_seconds
from ..errors import ArgumentError, ArgumentTypeError, ConsistencyError
from ..layout import Layout, all_to_all_sizes, check_own_block, layout, rooted, split_rows
from ..ops import ReduceOp, check_accumulate_dtype
from . import aliasing
from .debug import execute as _execute   # RINGCCL_DEBUG=INFO/TRACE: one log line per call

__all__ = ["Backend", "ArrayDialect", "GroupAdapter", "Executor", "Options", "options", "choose",
           "in_place", "call_counter", "reduce_scatter", "all_gather", "scatter", "gather", "exchange",
           "all_to_all", "run_schedule", "copy_in"]


class ArrayDialect(Protocol):
    """A backend's arrays (numpy arrays, torch tensors), as the flows see them: the checks whose
    messages name the backend's arguments, and the operations the flows need."""

    size_word: str              # how an array's element count is spelled: "numel()", "size"
    buffer_name: str            # scatter's/gather's one-array argument: "tensor", "buffer"

    def check(self, a: Any, argument: str, written: bool = False,
              contiguous: bool = False) -> Any: ...
    def check_1d(self, a: Any, argument: str) -> Any: ...   # a 1-D contiguous working buffer
    def check_pair(self, a: Any, b: Any, name_a: str, name_b: str) -> None: ...
    def check_op(self, op: Any, dtype: Any) -> ReduceOp: ...
    def accumulate(self, accumulate_dtype: Any, dtype: Any, collective: str) -> Any: ...
    def check_blocks(self, blocks: Any, argument: str, world_size: int, like: Any,
                     written: bool) -> list: ...
    def no_blocks(self, blocks: Any, argument: str, rank: int, root_arg: str,
                  root: Any) -> None: ...
    def overlap_error(self, inner: str, outer: str, rank: int, k: int) -> ArgumentError: ...
    def numel(self, a: Any) -> int: ...
    def dtype(self, a: Any) -> Any: ...
    def dtype_name(self, dtype: Any) -> str: ...
    def contiguous(self, a: Any) -> bool: ...
    def view1d(self, a: Any) -> Any: ...            # a contiguous array's 1-D view
    def flat(self, a: Any) -> Any: ...              # 1-D, a view when contiguous, else a copy
    def empty(self, like: Any, n: int, dtype: Any = None) -> Any: ...   # a new 1-D array
    def scratch(self, like: Any, n: int) -> Any: ...  # a private 1-D working array
    def cast(self, flat: Any, dtype: Any) -> Any: ...   # a new 1-D array in ``dtype``
    def copy(self, dst: Any, src: Any) -> None: ...     # same size, 1-D
    def copy_into(self, dst: Any, flat: Any) -> None: ...   # into any shape, C order
    def divide(self, a: Any, n: int) -> None: ...       # in place
    def cat(self, flats: list) -> Any: ...
    def shares_memory(self, a: Any, b: Any) -> bool: ...   # exact: an element in common
    def span(self, a: Any) -> tuple[int, int]: ...      # the byte addresses [lo, hi) it lies in
    def same(self, a: Any, b: Any) -> bool: ...         # one view: same elements and layout
    def is_block(self, a: Any, buffer: Any, index: int) -> bool: ...
    def rows(self, a: Any) -> tuple[int, int]: ...      # (dim 0, elements per row)


class GroupAdapter(Protocol):
    """A backend's group (process group, communicator) as the flows see it. ``g`` is the
    group as :meth:`group` returned it."""

    def group(self, g: Any) -> Any: ...                     # checked (BackendError, TypeError)
    def size(self, g: Any) -> int: ...
    def rank(self, g: Any) -> int: ...
    def root(self, g: Any, root: Any, argument: str, world_size: int) -> int: ...
    def key(self, g: Any) -> Any: ...                       # the group's identity (call counts)
    def gather_objects(self, g: Any, obj: Any, collective: str, algorithm: str,
                       timeout: float | None) -> list: ...  # bounded: PeerError
    def max2(self, g: Any, a: int, b: int) -> tuple[int, int]: ...


class Executor(Protocol):
    """A backend's transports behind one ``execute``, with their measured pipelining."""

    name: str                   # "ringccl.torch": for messages
    pipelining: Pipelining      # the transport's measured default

    def default_restore(self, timeout: float | None) -> bool: ...
    def execute(self, schedule, work, op: ReduceOp, g, bounds: tuple, opts: "Options",
                restore: bool) -> None: ...
    # optional: the algorithm for algorithm=None/"auto" (else ringccl.algorithms.DEFAULTS)
    # def choose(self, collective: str, world_size: int, count: int, dtype: Any,
    #            opts: "Options") -> str: ...
    # optional: whether ``execute`` takes a private working buffer as a
    # :class:`ringccl.engine.Staged` for this call (its transport holds the buffer itself)
    # def stages(self, g: Any, opts: "Options") -> bool: ...
    # optional: the pipelining policy ``execute`` runs ``collective`` with, when it is not
    # ``opts.pipelining`` (a transport's own default; RINGCCL_DEBUG's log line reports it)
    # def call_pipelining(self, g: Any, collective: str, opts: "Options") -> Pipelining: ...


class Backend(ArrayDialect, GroupAdapter, Executor, Protocol):
    """What a backend supplies to the flows (see the module docstring): one object with its
    :class:`ArrayDialect`, its :class:`GroupAdapter` and its :class:`Executor`. A backend
    writes each part once and combines them (ringccl.torch's functions and its
    torch.distributed process group share one tensor dialect and differ in group and
    executor); the flows look each method up on the one object, as before, so the split costs
    nothing per call."""


class Options(NamedTuple):
    """A call's checked executor options."""

    pipelining: Pipelining
    timeout: float | None       # seconds (None: the backend's own bound)
    restore: bool | None        # None: the backend's default
    check: bool | None
    transport: str | None = None   # the backend's transport for this call (None: its only one)


_fixed: dict = {}   # segment_bytes -> Pipelining.fixed(segment_bytes): no allocation per call
caches.register(_fixed.clear)


def options(b: Backend, segment_bytes: Any, timeout: Any, restore: Any, check: Any,
            transport: str | None = None) -> Options:
    """Check the options every collective takes (cheap on the common path: all None);
    ``transport``: the backend's resolved transport for this call, passed through."""
    if segment_bytes is None:
        pipelining = b.pipelining
    else:
        pipelining = _fixed.get(segment_bytes) if type(segment_bytes) is int else None
        if pipelining is None:
            segment_bytes = check_int(segment_bytes, "segment_bytes")  # 0: never split
            if len(_fixed) > 64:
                _fixed.clear()
            pipelining = _fixed.setdefault(segment_bytes, Pipelining.fixed(segment_bytes))
    if restore is not None and restore is not True and restore is not False:
        raise ArgumentTypeError(f"restore={restore!r} must be True or False (or None: the "
                                "backend's default)")
    if check is not None and check is not True and check is not False:
        raise ArgumentTypeError(f"check={check!r} must be True, False or None (None: "
                                "RINGCCL_DEBUG decides)")
    return Options(pipelining, timeout_seconds(timeout), restore, check, transport)


def _restore(b: Backend, opts: Options, private: bool) -> bool:
    """Whether the executor saves what it overwrites: never for a private working buffer."""
    if private:
        return False
    return b.default_restore(opts.timeout) if opts.restore is None else opts.restore


_sequence: dict = {}   # the group's key -> ringccl collectives called on it so far


def call_counter(b: Backend, g) -> Callable[[], None]:
    """A function counting one call on ``g`` that skipped :func:`agree` (a compiled replay: its
    check is off), so a later checked call's fingerprint has the right sequence number. It
    holds ``g``'s key (its identity, an int), not ``g``; it takes the call's result and
    ignores it (a replay calls it as its finisher, :func:`ringccl.backends.shm.lane.finisher`)."""
    key, sequence = b.key(g), _sequence

    def count(result: Any = None) -> None:
        sequence[key] = sequence.get(key, 0) + 1
    return count


def agree(b: Backend, g, collective: str, algorithm: str | None, params: dict, op: ReduceOp | None,
          dtype: Any, count: int, opts: Options, splits=None) -> None:
    """Count this call and, with ``check=True`` or RINGCCL_DEBUG set, compare its fingerprint
    across the group's ranks before any data moves (every rank raises the same
    :class:`ringccl.errors.ConsistencyError` if they disagree, :mod:`ringccl.consistency`)."""
    on = consistency.enabled(opts.check)  # first: a refused RINGCCL_DEBUG counts no call
    key = b.key(g)
    seq = _sequence.get(key, 0)
    _sequence[key] = seq + 1
    if not on:
        return
    mine = consistency.fingerprint(seq, collective, algorithm, params,
                                   None if op is None else op.value, b.dtype_name(dtype), count,
                                   splits)
    everyone = b.gather_objects(g, mine, collective, algorithm, opts.timeout)
    problem = consistency.compare(everyone)
    if problem:
        raise ConsistencyError(f"ranks of the group call different collectives: {problem}",
                               everyone)


def _no_accumulate(params: dict, collective: str) -> None:
    """``accumulate_dtype`` given to a collective that does not reduce (it lands in the
    algorithm's parameters): refused, saying where it applies."""
    if "accumulate_dtype" in params:
        check_accumulate_dtype(params.pop("accumulate_dtype"), "float32", collective, False)


def choose(b: Backend, g, collective: str, algorithm: str | None, count: int, dtype: Any,
           opts: Options) -> str:
    """``algorithm``, or for None/"auto" the backend's choice for ``count`` elements of
    ``dtype`` (module docstring)."""
    if algorithm is not None and algorithm != "auto":
        return algorithm
    pick = getattr(b, "choose", None)
    if pick is None:
        return default_algorithm(collective)
    return pick(collective, b.size(g), count, dtype, opts)


def _plan(b: Backend, g, collective: str, algorithm: str | None, params: dict, op, dtype, count: int,
          opts: Options) -> Layout:
    """Count/check the call across ranks, build the schedule and this rank's layout for a
    buffer of ``count`` elements."""
    _no_accumulate(params, collective)
    algorithm = choose(b, g, collective, algorithm, count, dtype, opts)
    agree(b, g, collective, algorithm, params, op, dtype, count, opts)
    schedule = build_schedule(collective, algorithm, b.size(g), **params)
    return layout(schedule, b.rank(g), count)


def copy_runs(b: Backend, work, runs: tuple, pieces: list, into_work: bool) -> None:
    """Copy between the ranges ``runs`` of ``work`` and the 1-D arrays ``pieces``, both taken
    concatenated, without concatenating either (a range may span pieces and vice versa)."""
    i, at = 0, 0
    for a, end in runs:
        while a < end:
            piece = pieces[i]
            n = b.numel(piece)
            if at == n:
                i, at = i + 1, 0
                continue
            k = min(end - a, n - at)
            if into_work:
                b.copy(work[a:a + k], piece[at:at + k])
            else:
                b.copy(piece[at:at + k], work[a:a + k])
            a, at = a + k, at + k


def copy_in(b: Backend, work, runs: tuple, sources: list) -> None:
    """Copy the arrays ``sources`` (any shape and layout, C order), concatenated, into the
    ranges ``runs`` of ``work``."""
    copy_runs(b, work, runs, [b.flat(s) for s in sources], True)


def _private(b: Backend, g, schedule, like, numel: int, op: ReduceOp, offsets: tuple,
             opts: Options, fill: tuple, drain: tuple, aliased: bool = False) -> None:
    """Run ``schedule`` on a private working buffer of ``numel`` elements like ``like``: its
    ranges ``fill = (runs, sources)`` hold the arrays ``sources`` (any shape and layout, C
    order, concatenated) before the call, its ranges ``drain = (runs, targets)`` go to the
    arrays ``targets`` after it, only if it succeeds unless ``restore=False``.

    A backend whose transport holds the working buffer itself (``b.stages(g, opts)``: shared
    memory) is given the description (:class:`ringccl.engine.Staged`) and moves each element
    the fewest times (:mod:`ringccl.engine.staged`), unless a target shares memory with a
    source (the scratch buffer is what keeps such a call correct) other than as ``aliased``
    says: the targets lie on the sources at the same places of the working buffer (an
    in-place reduce_scatter's output is its input's own block), so writing a target only
    after the call's last read of the sources keeps it correct (``Staged.aliased``); else the
    backend's scratch array is filled, run on and drained."""
    fill_runs, sources = fill
    drain_runs, targets = drain
    flat_in = [b.flat(s) for s in sources]
    flat_out = [b.view1d(t) if b.contiguous(t) else b.empty(t, b.numel(t)) for t in targets]
    stages = getattr(b, "stages", None)
    if stages is not None and stages(g, opts) and (aliased or not any(
            b.shares_memory(t, s) for t in flat_out for s in flat_in)):
        _execute(b, schedule, Staged(like, numel, fill_runs, flat_in, drain_runs, flat_out,
                                     _restore(b, opts, False), aliased),
                 op, g, offsets, opts, False)
    else:
        work = b.scratch(like, numel)
        copy_runs(b, work, fill_runs, flat_in, True)
        _execute(b, schedule, work, op, g, offsets, opts, False)
        copy_runs(b, work, drain_runs, flat_out, False)
    for t, f in zip(targets, flat_out):
        if not b.contiguous(t):
            b.copy_into(t, f)


def _read(b: Backend, work, lay: Layout):
    """This rank's output chunks of ``work``, concatenated (a view when they are adjacent)."""
    parts = [work[a:c] for a, c in lay.output_runs]
    return parts[0] if len(parts) == 1 else b.cat(parts) if parts else work[:0]


def run_schedule(b: Backend, schedule, buffer, op: Any, g, bounds, segment_bytes: Any,
                 timeout: Any, restore: Any, pipelining: Pipelining | None):
    """Execute any ``schedule`` in place on this rank's 1-D contiguous working ``buffer``."""
    g = b.group(g)
    b.check_1d(buffer, "buffer")
    reduce_op = b.check_op(op, b.dtype(buffer))
    opts = options(b, segment_bytes, timeout, restore, None)
    if segment_bytes is None and pipelining is not None:
        if not isinstance(pipelining, Pipelining):
            raise ArgumentTypeError(f"pipelining={pipelining!r} must be a "
                                    "ringccl.engine.Pipelining or None")
        opts = opts._replace(pipelining=pipelining)
    _execute(b, schedule, buffer, reduce_op, g, bounds, opts, _restore(b, opts, False))
    return buffer


def in_place(b: Backend, collective: str, buffer, op: ReduceOp, g, algorithm: str | None, params: dict,
             opts: Options, copy: bool = False, accumulate: Any = None) -> None:
    """A collective whose working buffer is the whole buffer (all_reduce, broadcast, reduce);
    ``copy``: work on a copy and leave ``buffer`` unchanged (reduce's non-root ranks);
    ``accumulate``: hold the working buffer in this dtype (cast in, the result cast back once).
    """
    count = b.numel(buffer)
    lay = _plan(b, g, collective, algorithm, params,
                None if collective == "broadcast" else op, accumulate or b.dtype(buffer), count,
                opts)
    contiguous = b.contiguous(buffer)
    if accumulate is not None:
        work = b.cast(b.flat(buffer), accumulate)   # a new buffer in the wider dtype
    elif copy or not contiguous:
        work = b.scratch(buffer, count)
        copy_in(b, work, ((0, count),), [buffer])
    else:
        work = b.view1d(buffer)
    private = copy or accumulate is not None or not contiguous
    _execute(b, lay.schedule, work, op, g, lay.offsets, opts, _restore(b, opts, private))
    if copy:
        return
    if op is ReduceOp.AVG and collective != "broadcast":
        b.divide(work, b.size(g))
    if private:
        b.copy_into(buffer, work)   # one rounding back to the buffer's dtype, or its layout


def reduce_scatter(b: Backend, output, input, op: ReduceOp, g, algorithm: str | None, params: dict,
                   opts: Options, accumulate: Any, function: str) -> None:
    """Reduce ``input`` across ranks and leave block ``rank`` in ``output``; ``output`` may be
    exactly input's block ``rank`` (in place: ``input`` then changes in that block only, as
    NCCL's in-place form; :mod:`ringccl.frontend.aliasing`).

    In place, ``input`` is the working buffer itself only when this rank's receives write its
    output chunks alone (``Layout.writes_only_output``: a direct reduce_scatter); a schedule
    that leaves partial sums in other chunks (ring, halving_doubling, hierarchical) runs on a
    private buffer filled from ``input`` and drained into ``output`` (over shared memory the
    slot, :class:`ringccl.engine.Staged`)."""
    world_size, rank = b.size(g), b.rank(g)
    n_in, k = b.numel(input), b.numel(output)
    if n_in != world_size * k:
        raise ArgumentError(f"input has {n_in} elements; {function} needs world_size * "
                            f"output.{b.size_word} = {world_size} * {k}")
    in_place = b.shares_memory(output, input)
    if in_place and not (b.contiguous(input) and b.is_block(output, b.view1d(input), rank)):
        raise b.overlap_error("output", "input", rank, k)
    lay = _plan(b, g, "reduce_scatter", algorithm, params, op, accumulate or b.dtype(input),
                n_in, opts)
    flat = b.flat(input)
    if accumulate is None and not (in_place and lay.writes_only_output):
        # the caller's input stays as it is (in place: but for the output, its own block)
        _private(b, g, lay.schedule, input, lay.numel, op, lay.offsets, opts,
                 (lay.input_runs, [flat]), (lay.output_runs, [output]), aliased=in_place)
        if op is ReduceOp.AVG:
            b.divide(output, world_size)
        return
    work = b.cast(flat, accumulate) if accumulate is not None else flat
    private = accumulate is not None
    _execute(b, lay.schedule, work, op, g, lay.offsets, opts, _restore(b, opts, private))
    block = _read(b, work, lay)
    if op is ReduceOp.AVG:
        b.divide(block, world_size)
    if private:
        b.copy_into(output, block)


def all_gather(b: Backend, output, input, g, algorithm: str | None, params: dict, opts: Options,
               function: str, names: tuple[str, str]) -> None:
    """Gather every rank's ``input`` into ``output`` in rank order; ``input`` may be exactly
    output's block ``rank`` (in place). Every chunk is part of the output, so a contiguous
    ``output`` is the working buffer itself."""
    out_name, in_name = names
    world_size, rank = b.size(g), b.rank(g)
    n_out, k = b.numel(output), b.numel(input)
    if n_out != world_size * k:
        raise ArgumentError(f"{out_name} has {n_out} elements; {function} needs world_size * "
                            f"{in_name}.{b.size_word} = {world_size} * {k}")
    in_place = k > 0 and b.shares_memory(output, input)
    if in_place and not (b.contiguous(output) and b.contiguous(input)
                         and b.is_block(input, b.view1d(output), rank)):
        raise b.overlap_error(in_name, out_name, rank, k)
    lay = _plan(b, g, "all_gather", algorithm, params, None, b.dtype(input), n_out, opts)
    contiguous = b.contiguous(output)
    work = b.view1d(output) if contiguous else b.empty(output, n_out)
    restore = _restore(b, opts, not contiguous)
    runs = lay.input_runs if restore and not in_place else ()
    before = [b.empty(work, c - a) for a, c in runs]  # this rank's block, written below
    for (a, c), saved in zip(runs, before):
        b.copy(saved, work[a:c])
    if not in_place:
        copy_runs(b, work, lay.input_runs, [b.flat(input)], True)
    try:
        _execute(b, lay.schedule, work, ReduceOp.SUM, g, lay.offsets, opts, restore)
    except Exception:
        for (a, c), saved in zip(runs, before):
            b.copy(work[a:c], saved)   # the other chunks were restored by the executor
        raise
    if not contiguous:
        b.copy_into(output, work)


def _rooted_plan(b: Backend, g, collective: str, buffer, blocks, blocks_arg: str, root_value,
                 root_arg: str, written: bool, algorithm: str | None, params: dict,
                 opts: Options) -> tuple:
    """scatter's and gather's common start: the root's group rank, the algorithm (refused alike
    on every rank before the root-only checks), the root's list of world_size blocks checked
    (None elsewhere, where a list is refused) and its sharing of memory with ``buffer``
    (:func:`ringccl.frontend.aliasing.check_blocks`; ``written``: the blocks are the output),
    and the plan. Returns (rank, root, blocks, layout)."""
    world_size, rank = b.size(g), b.rank(g)
    root = b.root(g, root_value, root_arg, world_size)
    algorithm = choose(b, g, collective, algorithm, world_size * b.numel(buffer), b.dtype(buffer),
                       opts)
    get_algorithm(collective, algorithm)
    if rank == root:
        blocks = b.check_blocks(blocks, blocks_arg, world_size, buffer, written)
        aliasing.check_blocks(b, collective, buffer, b.buffer_name, blocks, blocks_arg, root,
                              not written)
    else:
        b.no_blocks(blocks, blocks_arg, rank, root_arg, root_value)
        blocks = None
    lay = _plan(b, g, collective, algorithm, rooted(params, root), None, b.dtype(buffer),
                world_size * b.numel(buffer), opts)
    return rank, root, blocks, lay


def scatter(b: Backend, buffer, scatter_list, src: Any, g, algorithm: str | None, params: dict,
            opts: Options) -> None:
    """Send block r of ``src``'s ``scatter_list`` to rank r's ``buffer``."""
    rank, root, blocks, lay = _rooted_plan(b, g, "scatter", buffer, scatter_list, "scatter_list",
                                           src, "src", False, algorithm, params, opts)
    _private(b, g, lay.schedule, buffer, lay.numel, ReduceOp.SUM, lay.offsets, opts,
             (lay.input_runs, blocks if rank == root else []), (lay.output_runs, [buffer]))


def gather(b: Backend, buffer, gather_list, dst: Any, g, algorithm: str | None, params: dict,
           opts: Options) -> bool:
    """Collect every rank's ``buffer`` into ``gather_list`` on rank ``dst``; returns whether
    this rank is ``dst``. The root touches every chunk, so a gather_list that is one contiguous
    array is the working buffer itself (and ``buffer`` may be its own block: in place)."""
    rank, root, blocks, lay = _rooted_plan(b, g, "gather", buffer, gather_list, "gather_list",
                                           dst, "dst", True, algorithm, params, opts)
    k = b.numel(buffer)
    if not (rank == root and len(blocks) == 1 and b.contiguous(blocks[0])):
        _private(b, g, lay.schedule, buffer, lay.numel, ReduceOp.SUM, lay.offsets, opts,
                 (lay.input_runs, [buffer]),
                 (lay.output_runs, blocks) if rank == root else ((), []))
        return rank == root
    work = b.view1d(blocks[0])
    own = (root * k, (root + 1) * k)
    # the root's own block of the caller's gather_list, put back if the call fails
    saved = None
    if _restore(b, opts, False):
        saved = b.empty(work, k)
        b.copy(saved, work[own[0]:own[1]])
    try:
        if not b.is_block(buffer, work, root):  # in place: already there
            copy_in(b, work, lay.input_runs, [buffer])
        _execute(b, lay.schedule, work, ReduceOp.SUM, g, lay.offsets, opts, False)
    except Exception:
        if saved is not None:
            b.copy(work[own[0]:own[1]], saved)
        raise
    return True


def exchange(b: Backend, inputs: list, in_sizes: Sequence[int], out_sizes: Sequence[int], g,
             algorithm: str | None, params: dict, opts: Options, outputs: list,
             names: tuple[str, str] = ("output_tensor_list", "input_tensor_list"),
             lists: bool = True) -> None:
    """all_to_all on element counts: ``inputs`` (arrays, concatenated in C order) hold this
    rank's blocks for ranks 0, 1, …; ``outputs`` receive the blocks from ranks 0, 1, …; an
    output may share memory with an input only as that input itself (in place), else
    ArgumentError naming both (``names``: the output and input arguments; ``lists``: they are
    lists, named with their index)."""
    world_size, rank = b.size(g), b.rank(g)
    aliasing.check_exchange(b, "all_to_all", outputs, inputs, names, lists)
    _no_accumulate(params, "all_to_all")
    # the count is this rank's own (uneven splits differ across ranks): a backend's choice
    # for all_to_all must not depend on it
    algorithm = choose(b, g, "all_to_all", algorithm, int(sum(in_sizes)), b.dtype(inputs[0]),
                       opts)
    agree(b, g, "all_to_all", algorithm, params, None, b.dtype(inputs[0]),
          int(sum(in_sizes)), opts, (list(in_sizes), list(out_sizes)))
    schedule = build_schedule("all_to_all", algorithm, world_size, **params)
    sizes = all_to_all_sizes(schedule, in_sizes, out_sizes, lambda x, y: b.max2(g, x, y))
    lay = layout(schedule, rank, sizes=sizes)
    _private(b, g, schedule, inputs[0], lay.numel, ReduceOp.SUM, lay.offsets, opts,
             (lay.input_runs, inputs), (lay.output_runs, outputs))


def all_to_all(b: Backend, output, input, output_split_sizes, input_split_sizes, g,
               algorithm: str | None, params: dict, opts: Options) -> None:
    """Split ``input`` along dim 0 and send piece j to rank j; piece i of ``output`` comes
    from rank i (split sizes in rows; None: equal pieces)."""
    world_size, rank = b.size(g), b.rank(g)
    in_rows, row = b.rows(input)
    out_rows, out_row = b.rows(output)
    if out_row != row:
        raise ArgumentError(f"output.shape={tuple(output.shape)} and input.shape="
                            f"{tuple(input.shape)} differ beyond dim 0")
    ins = split_rows(input_split_sizes, "input_split_sizes", world_size, in_rows, "input")
    outs = split_rows(output_split_sizes, "output_split_sizes", world_size, out_rows, "output")
    check_own_block(rank, ins[rank], outs[rank], "input_split_sizes[{}]",
                    "output_split_sizes[{}]", "rows")
    exchange(b, [input], [n * row for n in ins], [n * row for n in outs], g, algorithm, params,
             opts, [output], ("output", "input"), False)
