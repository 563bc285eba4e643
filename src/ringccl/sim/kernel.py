"""The simulator's kernel: a schedule's steps executed in place, vectorized over all ranks.

The working buffer is one array of shape (world_size·num_chunks, m): row r·num_chunks + c is rank
r's chunk c (see :mod:`ringccl.sim.buffers`). Each step runs vectorized over all its transfers at
once. A step is compiled once per schedule into a few strided slices of that buffer: transfers
whose source and destination slot indices both advance by constant strides form one slice, so a
ring step is 2-3 numpy operations on contiguous rows regardless of N. Steps with irregular
patterns fall back to one gather (``np.take``) and one scatter (in rounds when several reduces
target one slot). Several reduces into one slot combine in the IR's reduction order
(:func:`ringccl.ir.reduce_order`): a slot with two or more sources below its rank (direct
all_reduce, reduce_scatter) folds those into a temporary accumulator first, so such steps always
take the gather/scatter path; ring, trees and recursive algorithms never need one. Each ⊕ has
the IR's operand order: a source below the slot's rank on the left (``slot := source ⊕ slot``),
one above on the right, the accumulator on the left of its flush. BSP semantics: if a step
writes a slot that another of its transfers reads, the sources are snapshotted before any write.
"""

from __future__ import annotations

import numpy as np

from ..ir import ReduceOrder, Schedule, reduce_order

_MAX_PIECES = 8  # beyond this many strided runs a step uses one gather/scatter instead
_BATCH_BYTES = 4 << 20  # largest temporary of a gather/scatter step (see _scatter)
# np.copyto between two strided views of one buffer first copies the source to a temporary (its
# overlap test is conservative); the identity ufunc on unsigned views of the same bytes does not.
# Past this many bytes per copy the temporary leaves the caches and the ufunc wins: ring
# all_reduce's all-gather phase, 64 x 1Mi float32 (4 MiB per copy): 1.5x np.sum(axis=0) with
# the ufunc, 2.1x with np.copyto; 256 x 256Ki (1 MiB per copy): 3.9x and 3.1x.
_UFUNC_COPY_BYTES = 2 << 20
# what a "slices" group does: copy, ``slot := slot ⊕ source`` (a source above the slot's rank),
# ``slot := source ⊕ slot`` (below it: the IR's operand order)
_COPY, _REDUCE, _REDUCE_BELOW = 0, 1, 2


def _pieces(s: np.ndarray, d: np.ndarray, limit: int):
    """Greedy runs of transfers whose src and dst flat indices advance by constant strides.

    Returns a list of (s_start, s_stride, d_start, d_stride, length) or None if more than
    ``limit`` runs are needed.
    """
    order = np.argsort(s, kind="stable")
    s, d = s[order], d[order]
    n = s.shape[0]
    out = []
    i = 0
    ds, dd = np.diff(s), np.diff(d)
    while i < n:
        if len(out) >= limit:
            return None
        if i == n - 1 or ds[i] <= 0 or dd[i] <= 0:
            out.append((int(s[i]), 1, int(d[i]), 1, 1))
            i += 1
            continue
        a, b = ds[i], dd[i]
        rest = (ds[i:] != a) | (dd[i:] != b)
        j = i + (int(np.argmax(rest)) if rest.any() else n - 1 - i)  # last diff index in the run
        out.append((int(s[i]), int(a), int(d[i]), int(b), j - i + 1))
        i = j + 1
    return out


def _compile(schedule: Schedule) -> list:
    plan = schedule._cache.get("sim_plan")
    if plan is not None:
        return plan
    c = schedule.num_chunks
    plan = []
    for k in range(schedule.num_steps):
        lo, hi = schedule.step_ptr[k], schedule.step_ptr[k + 1]
        s = schedule.src[lo:hi].astype(np.int64) * c + schedule.src_chunk[lo:hi]
        d = schedule.dst[lo:hi].astype(np.int64) * c + schedule.dst_chunk[lo:hi]
        red = schedule.reduce[lo:hi]
        hazard = bool(np.intersect1d(s, d).size)
        # several reduces into one slot: the IR's reduction order (ir.py); slots with two or
        # more sources below their rank need an accumulator, which only the gather/scatter
        # path has (the pieces apply in ascending source slot: right for every other slot)
        n_red = int(red.sum())
        dst_rank = schedule.dst[lo:hi]
        # a rank receiving one reduce at most (ring: every step) needs no slot test: O(N)
        several = n_red > 1 and (np.bincount(dst_rank[red]).max() > 1
                                 and np.unique(d[red]).size < n_red)
        order = reduce_order(d, schedule.src[lo:hi], dst_rank, red) if several else None
        below = schedule.src[lo:hi] < dst_rank   # the source is ⊕'s left operand
        groups = [] if order is None or not order.starts.size else None
        # a slot's source below its rank (at most one here) before those above it
        for kind, sel in ((_REDUCE_BELOW, red & below), (_REDUCE, red & ~below),
                          (_COPY, ~red)):
            if groups is not None and sel.any():
                p = _pieces(s[sel], d[sel], _MAX_PIECES)
                if p is None:
                    groups = None
                    break
                groups.extend((kind,) + piece for piece in p)
        if groups is None or len(groups) > _MAX_PIECES:
            # BSP: only sources this step also writes need a snapshot (one row per slot)
            protect = np.intersect1d(s, d)
            at = np.searchsorted(protect, s)
            snap = np.where((at < protect.size) & (protect[np.minimum(at, max(protect.size - 1,
                                                                                 0))] == s)
                            if protect.size else np.zeros(s.shape, bool), at, -1)
            plan.append(("fancy", s, d, red, order, protect, snap, below))
        else:
            plan.append(("slices", groups, hazard, int(hi - lo)))
    schedule._cache["sim_plan"] = plan
    return plan


def _view(flat: np.ndarray, start: int, stride: int, length: int) -> np.ndarray:
    return flat[start:start + stride * (length - 1) + 1:stride]


def _run(plan: list, flat: np.ndarray, combine: np.ufunc, inputs: np.ndarray | None = None,
         lazy: tuple | None = None) -> None:
    """Execute compiled steps in place on ``flat`` (world_size·num_chunks, m).

    With ``inputs`` (the same shape and dtype, not sharing memory with ``flat``) and ``lazy``
    (:func:`_lazy_load` of the plan), ``flat`` starts uninitialized and every slot holds its
    row of ``inputs`` until first written (see the section on loading lazily)."""
    max_t = max(((p[3] if p[2] else 0) if p[0] == "slices" else p[5].shape[0] for p in plan),
                default=0)
    scratch = np.empty((max_t, flat.shape[1]), dtype=flat.dtype)
    bits = np.dtype(f"u{flat.itemsize}")  # the same bytes as unsigned integers: exact copies
    flat_bits = flat.view(bits)
    row_bytes = flat.shape[1] * flat.itemsize
    entries = lazy[0] if lazy is not None else [(None, None, None)] * len(plan)
    for entry, (preload, *reads) in zip(plan, entries):
        if preload is not None:
            _copy_rows(flat, inputs, preload)
        if entry[0] == "slices":
            # a slot's source below its rank first, then those above in ascending source slot:
            # several reduces into one slot combine in the IR's order (no slot of a "slices"
            # step has two sources below its rank)
            _, groups, hazard, _t = entry
            from_inputs, onto_inputs = reads if lazy is not None else ((False,) * len(groups),) * 2
            sources = []
            at = 0
            for (kind, s0, ss, d0, dd, n), fresh in zip(groups, from_inputs):
                if fresh:  # not written yet: its input (which no step writes)
                    sources.append(_view(inputs, s0, ss, n))
                elif hazard:  # BSP: snapshot what this step reads before anything is written
                    np.copyto(scratch[at:at + n], _view(flat, s0, ss, n))
                    sources.append(scratch[at:at + n])
                    at += n
                else:
                    sources.append(None)  # read in place, below
            for (kind, s0, ss, d0, dd, n), src, fresh in zip(groups, sources, onto_inputs):
                dst = _view(flat, d0, dd, n)
                if kind != _COPY:
                    # a slot not written yet holds its input: reduce onto that
                    own = _view(inputs, d0, dd, n) if fresh else dst
                    src = _view(flat, s0, ss, n) if src is None else src
                    if kind == _REDUCE_BELOW:
                        combine(src, own, out=dst)
                    else:
                        combine(own, src, out=dst)
                elif src is None and n * row_bytes > _UFUNC_COPY_BYTES:
                    # within one buffer (see _UFUNC_COPY_BYTES)
                    np.positive(_view(flat_bits, s0, ss, n), out=_view(flat_bits, d0, dd, n))
                else:
                    np.copyto(dst, _view(flat, s0, ss, n) if src is None else src)
        else:
            _, s, d, red, order, protect, snap, below = entry
            saved = scratch[:protect.shape[0]]
            # mode="clip" (indices are valid) writes straight into `saved`: with the default
            # mode="raise" numpy buffers `out` in a full temporary
            np.take(flat, protect, axis=0, out=saved, mode="clip")
            src = (flat, saved, s, snap)
            if not red.all():
                _scatter(flat, d, src, np.nonzero(~red)[0], None)
            if order is not None:  # several reduces into some slot (the IR's order)
                if order.starts.size:
                    _accumulate(flat, d, src, order, combine)
                for sel in order.rounds:
                    _reduce(flat, d, src, sel, combine, below)
            elif red.any():
                _reduce(flat, d, src, np.nonzero(red)[0], combine, below)
    if lazy is not None and lazy[1].size:
        _copy_rows(flat, inputs, lazy[1])  # the slots no step wrote


def _batch_rows(flat: np.ndarray) -> int:
    """Rows per batch: numpy's fancy-indexing temporaries stay within min(_BATCH_BYTES, 1/16
    of the storage) each, whatever the step moves."""
    return max(1, min(_BATCH_BYTES, flat.nbytes // 16) // max(1, flat.shape[1] * flat.itemsize))


def _gather(flat: np.ndarray, src: tuple, p: np.ndarray) -> np.ndarray:
    """The source rows of transfers ``p`` (a new array): from the step's snapshot where the
    step also writes them (``snap`` >= 0), else from ``flat`` directly."""
    flat_src, saved, s, snap = src
    k = snap[p]
    from_snap = k >= 0
    if from_snap.all():
        return saved[k]
    if not from_snap.any():
        return flat_src[s[p]]
    vals = np.empty((p.shape[0], flat.shape[1]), dtype=flat.dtype)
    vals[from_snap] = saved[k[from_snap]]
    vals[~from_snap] = flat_src[s[p[~from_snap]]]
    return vals


def _accumulate(flat: np.ndarray, d: np.ndarray, src: tuple, order: ReduceOrder,
                combine: np.ufunc) -> None:
    """The accumulated part of the IR's reduction order: per slot with two or more sources
    below its rank, ``acc := first``, ``acc := acc ⊕ each further one`` (ascending source),
    then ``slot := acc ⊕ slot`` (:class:`ringccl.ir.ReduceOrder`). Accumulators are made a batch of rows at
    a time (bounded temporaries, as :func:`_scatter`): the sources are the pre-step values (the
    snapshot), so flushing one batch cannot change what a later batch reads."""
    starts = order.starts
    rows = _batch_rows(flat)
    for a0 in range(0, starts.shape[0], rows):
        a1 = min(a0 + rows, starts.shape[0])
        acc = _gather(flat, src, starts[a0:a1])
        for transfers, accs in order.folds:
            lo, hi = np.searchsorted(accs, (a0, a1))  # folds are sorted by accumulator
            if lo == hi:
                continue
            vals = _gather(flat, src, transfers[lo:hi])
            at = accs[lo:hi] - a0
            if at[-1] - at[0] == hi - lo - 1:  # consecutive accumulators: a view
                part = acc[at[0]:at[-1] + 1]
                combine(part, vals, out=part)
            else:
                part = acc[at]
                combine(part, vals, out=part)
                acc[at] = part
        idx = d[starts[a0:a1]]
        part = flat[idx]
        combine(acc, part, out=part)  # own := accumulator ⊕ own (the lower ranks' on the left)
        flat[idx] = part


def _reduce(flat: np.ndarray, d: np.ndarray, src: tuple, pos: np.ndarray, combine: np.ufunc,
            below: np.ndarray) -> None:
    """The reduces ``pos`` (distinct ``d[pos]``) in the IR's operand order: ``slot := source ⊕
    slot`` where ``below`` (the source's rank is below the slot's), else ``slot ⊕ source``."""
    left = below[pos]
    if left.any():
        _scatter(flat, d, src, pos[left], combine, source_left=True)
    if not left.all():
        _scatter(flat, d, src, pos[~left], combine)


def _scatter(flat: np.ndarray, d: np.ndarray, src: tuple, pos: np.ndarray,
             combine: np.ufunc | None, source_left: bool = False) -> None:
    """``flat[d[pos]] = source rows`` (combine None) or ``combine(flat[d[pos]], source rows)``
    (``source_left``: ``combine(source rows, flat[d[pos]])``), for distinct ``d[pos]``, in
    batches of rows (:func:`_batch_rows`). Source rows are read as :func:`_gather` says. Peak
    memory: storage + snapshot (<= storage) + three batches."""
    rows = _batch_rows(flat)
    for a in range(0, pos.shape[0], rows):
        p = pos[a:a + rows]
        idx = d[p]
        vals = _gather(flat, src, p)
        if combine is None:
            flat[idx] = vals
        else:
            part = flat[idx]  # a copy of at most `rows` rows
            if source_left:
                combine(vals, part, out=part)
            else:
                combine(part, vals, out=part)
            flat[idx] = part


# -- loading the inputs lazily --------------------------------------------------------------------
#
# When the inputs fill the whole working buffer, copying them in first and then running the steps
# reads and writes the buffer once more than needed. Instead a slot holds its input until it is
# first written: a step reads such a source from the inputs, a reduce into such a slot combines
# the input with the source (the copy fused with the first reduce), a copy into it needs no input
# at all. Slots a step cannot treat alike (some of a piece's slots written before, some not) are
# loaded just before the step, and slots no step writes at the end. Which slots are loaded when
# depends only on the schedule, so it is decided once (:func:`_lazy_load`).

def _piece_slots(start: int, stride: int, length: int) -> np.ndarray:
    return start + stride * np.arange(length, dtype=np.int64)


def _lazy_load(schedule: Schedule, plan: list) -> tuple:
    """Per plan entry, how its operands meet the inputs; then the slots loaded at the end.

    Returns (entries, tail): entries[k] is (preload, sources, targets) for a "slices" entry
    (preload: int64 slots to copy in before the step, or None; sources[i] / targets[i]: True
    where group i reads its sources / its reduce's first operand from the inputs) or (preload,)
    for a "fancy" entry; tail: int64 slots never written, copied in after the last step.
    """
    hit = schedule._cache.get("sim_lazy_load")
    if hit is not None:
        return hit
    written = np.zeros(schedule.world_size * schedule.num_chunks, dtype=bool)
    entries = []
    for entry in plan:
        if entry[0] == "fancy":
            _, s, d, red, *_ = entry
            need = np.union1d(s, d[red])
            need = need[~written[need]]
            entries.append((need if need.size else None,))
            written[need] = True  # loaded
            written[d] = True
            continue
        groups = entry[1]
        slots = [(_piece_slots(s0, ss, n), _piece_slots(d0, dd, n)) for _, s0, ss, d0, dd, n
                 in groups]
        preload = np.zeros(0, dtype=np.int64)
        while True:  # until no piece mixes loaded and unloaded slots (loading only grows)
            state = written.copy()
            state[preload] = True
            mixed = []
            sources, targets = [], []
            for _kind, (src, dst) in zip(groups, slots):
                fresh = ~state[src]  # sources read pre-step values: the step-start state
                if fresh.any() and not fresh.all():
                    mixed.append(src[fresh])
                sources.append(bool(fresh.all()))
            after = state.copy()
            for (kind, *_), (src, dst) in zip(groups, slots):  # writes land piece by piece
                fresh = ~after[dst]
                reduces = kind != _COPY
                if reduces and fresh.any() and not fresh.all():
                    mixed.append(dst[fresh])
                targets.append(bool(reduces and fresh.all()))
                after[dst] = True
            if not mixed:
                break
            preload = np.union1d(preload, np.concatenate(mixed))
        entries.append((preload if preload.size else None, tuple(sources), tuple(targets)))
        written[preload] = True
        for _, dst in slots:
            written[dst] = True
    tail = np.flatnonzero(~written)
    hit = schedule._cache["sim_lazy_load"] = (entries, tail)
    return hit


def _copy_rows(flat: np.ndarray, inputs: np.ndarray, slots: np.ndarray) -> None:
    """``flat[slots] = inputs[slots]`` in batches of rows (bounded temporaries)."""
    rows = _batch_rows(flat)
    for a in range(0, slots.shape[0], rows):
        idx = slots[a:a + rows]
        flat[idx] = inputs[idx]
