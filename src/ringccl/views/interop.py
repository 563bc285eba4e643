"""Schedules in other tools' formats: MSCCL's XML IR and Chrome/Perfetto traces.

**MSCCL XML** (:func:`to_msccl_xml`), the algorithm format the MSCCL runtime loads
(``mscclLoadAlgo``) and that msccl-tools' ``ir_to_xml`` writes, also read by ASTRA-sim's Chakra
converter::

    <algo name proto="Simple" nchannels="1" nchunksperloop ngpus coll inplace="1">
      <gpu id i_chunks o_chunks s_chunks>
        <tb id send recv chan="0">
          <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>

Mapping:

* rank r → ``<gpu id=r>``; chunk c of the working buffer → one MSCCL chunk (``cnt="1"``) in a
  buffer: all_reduce, reduce_scatter, broadcast, reduce and the rest use the input buffer ``i``
  in place (``inplace="1"``), all_gather the output buffer ``o`` (in place: rank r's input is
  block r of it), all_to_all ``i`` for chunks 0…N-1, ``o`` for N…2N-1 and scratch ``s`` beyond
  2N; rank r's own all_to_all block becomes a local copy (``cpy``) from ``i[r]`` to ``o[r]``.
* threadblocks: one per peer and direction, ``<tb send=p recv=-1>`` for the sends to p and
  ``<tb send=-1 recv=q>`` for the receives from q, so each tb has one peer as MSCCL requires.
  Its steps are the rank's transfers with that peer in schedule order (by step, then canonical
  order), identical on both ends, so sends and receives match in order.
* a transfer is a ``s`` step on the sender (``srcbuf/srcoff`` the chunk read, ``dstbuf/dstoff``
  the peer's chunk, for information) and a ``r`` (copy) or ``rrc`` (receive, reduce with the
  local chunk, store) step on the receiver, whose ``srcbuf/srcoff`` and ``dstbuf/dstoff`` both name
  the local chunk. No fused ``rcs``/``rrs``/``rrcs`` steps are generated.
* BSP order becomes dependencies between a rank's threadblocks: a send waits for the last
  receive into its chunk (read after write); a receive waits for the previous receive into its
  chunk and for every send of the chunk's old value (write after write, write after read).
  A step takes one dependency (``depid``, ``deps``); further ones become ``nop`` steps in front
  of it, as msccl-tools does; ``hasdep="1"`` marks the steps others wait for.

Limits: MSCCL splits a buffer into equal chunks (``count`` a multiple of ``nchunksperloop``),
where ringccl's ``array_split`` chunks may differ by one element; ``nchannels="1"`` and no
protocol choice (``proto="Simple"``); MSCCL's runtime caps threadblocks at 256 steps and a rank at
a few dozen threadblocks per channel (``MSCCL_MAX_NUM_STEPS``,
``MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL``), so long schedules (a 1024-rank ring) and
many-peer ones (pairwise all_to_all on 64 ranks) are written but will not load there.

**Chrome/Perfetto trace** (:func:`to_chrome_trace`): the JSON trace-event format: one process,
one track (``tid``) per rank; per transfer a ``send`` slice on the sender and a ``recv`` slice on
the receiver (first half of the step; a ``reduce`` slice follows in the second half when the
receiver reduces), joined by a flow arrow; an instant event marks each step. Time is the step
index (1 µs per step) unless per-step durations are given (e.g. a cost model's breakdown).

References:
    Cowan et al., "MSCCLang: Microsoft Collective Communication Language", ASPLOS 2023;
    msccl-tools (github.com/microsoft/msccl-tools), msccl/language/ir.py ``ir_to_xml``.
    "Trace Event Format" (Chrome tracing / Perfetto), Google, 2016.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Sequence

import numpy as np

from ..errors import ArgumentError
from ..ir import Schedule

__all__ = ["to_msccl_xml", "msccl_buffer", "to_chrome_trace", "MSCCL_COLLECTIVES"]

#: ringccl collective → MSCCL's ``coll`` attribute
MSCCL_COLLECTIVES = {"all_reduce": "allreduce", "all_gather": "allgather",
                     "reduce_scatter": "reducescatter", "all_to_all": "alltoall",
                     "broadcast": "broadcast", "reduce": "reduce", "scatter": "scatter",
                     "gather": "gather"}


def msccl_buffer(schedule: Schedule, chunk: int) -> tuple[str, int]:
    """The MSCCL (buffer, offset) of working-buffer chunk ``chunk`` (see the module mapping)."""
    n = schedule.world_size
    if schedule.collective == "all_to_all":
        if chunk < n:
            return "i", chunk
        return ("o", chunk - n) if chunk < 2 * n else ("s", chunk - 2 * n)
    return ("o" if schedule.collective == "all_gather" else "i"), chunk


class _Op:
    """One MSCCL step of one threadblock, before numbering."""

    __slots__ = ("kind", "src", "dst", "deps", "index", "tb", "hasdep")

    def __init__(self, kind: str, src, dst, tb: int):
        self.kind, self.src, self.dst, self.tb = kind, src, dst, tb
        self.deps: list[_Op] = []
        self.index = -1
        self.hasdep = False


def _rank_ops(schedule: Schedule, rank: int):
    """Threadblocks of one rank: {(send, recv): [ops]} with cross-tb dependencies."""
    n = schedule.world_size
    buf = lambda c: msccl_buffer(schedule, c)  # noqa: E731
    tbs: dict[tuple[int, int], list[_Op]] = defaultdict(list)
    last_write: dict[int, _Op] = {}            # chunk -> last op that wrote it
    reads_since: dict[int, list[_Op]] = defaultdict(list)  # chunk -> reads of its current value

    def new_op(key, kind, src, dst):
        op = _Op(kind, src, dst, key)
        tbs[key].append(op)
        return op

    def read(op, chunk):
        if chunk in last_write:
            op.deps.append(last_write[chunk])
        reads_since[chunk].append(op)

    def write(op, chunk):
        if chunk in last_write:
            op.deps.append(last_write[chunk])
        op.deps.extend(reads_since.pop(chunk, []))
        last_write[chunk] = op

    if schedule.collective == "all_to_all":
        # rank r's own block: MSCCL wants it in o[r]; chunk N + r is that slot
        op = new_op((-1, -1), "cpy", buf(rank), buf(n + rank))
        read(op, rank)
        write(op, n + rank)
    for k in range(schedule.num_steps):
        lo, hi = int(schedule.step_ptr[k]), int(schedule.step_ptr[k + 1])
        src, dst = schedule.src[lo:hi], schedule.dst[lo:hi]
        sc, dc, red = schedule.src_chunk[lo:hi], schedule.dst_chunk[lo:hi], schedule.reduce[lo:hi]
        for i in np.nonzero(src == rank)[0].tolist():  # reads first: BSP, pre-step state
            op = new_op((int(dst[i]), -1), "s", buf(int(sc[i])), buf(int(dc[i])))
            read(op, int(sc[i]))
        for i in np.nonzero(dst == rank)[0].tolist():
            local = buf(int(dc[i]))
            if red[i]:
                op = new_op((-1, int(src[i])), "rrc", local, local)
            else:
                op = new_op((-1, int(src[i])), "r", buf(int(sc[i])), local)
            write(op, int(dc[i]))
    return tbs


def _finish(tbs: dict) -> list[tuple[tuple[int, int], list[_Op]]]:
    """Order tbs by (send, recv) as msccl-tools does, drop same-tb and implied dependencies,
    expand extra dependencies into nops and number every step."""
    ordered = sorted(tbs.items(), key=lambda kv: kv[0])
    tb_id = {key: i for i, (key, _) in enumerate(ordered)}
    position = {}
    for key, ops in ordered:
        for j, op in enumerate(ops):
            position[id(op)] = j
    out = []
    for key, ops in ordered:
        seen: dict[int, int] = {}            # tb -> latest position already waited for
        new_ops: list[_Op] = []
        for op in ops:
            latest: dict[int, _Op] = {}
            for dep in op.deps:
                t = tb_id[dep.tb]
                if t == tb_id[key] or position[id(dep)] <= seen.get(t, -1):
                    continue
                if t not in latest or position[id(dep)] > position[id(latest[t])]:
                    latest[t] = dep
            deps = sorted(latest.values(), key=lambda d: (tb_id[d.tb], position[id(d)]))
            for dep in deps:
                seen[tb_id[dep.tb]] = position[id(dep)]
                dep.hasdep = True
            for dep in deps[:-1]:
                nop = _Op("nop", None, None, key)
                nop.deps = [dep]
                new_ops.append(nop)
            op.deps = deps[-1:]
            new_ops.append(op)
        for j, op in enumerate(new_ops):
            op.index = j
        out.append((key, new_ops))
    return out


def to_msccl_xml(schedule: Schedule, name: str | None = None) -> str:
    """The schedule in MSCCL's XML IR (see the module docstring for the mapping and limits).

    Args:
        schedule: any ringccl schedule.
        name: the ``<algo name>``; default ``ringccl_<algorithm>_<collective>_<N>``.
    Returns:
        the XML document as a string (indented, no XML declaration, as msccl-tools writes it).
    """
    n, c = schedule.world_size, schedule.num_chunks
    coll = schedule.collective
    sizes = defaultdict(int)
    for chunk in range(c):
        b, off = msccl_buffer(schedule, chunk)
        sizes[b] = max(sizes[b], off + 1)
    if coll == "all_gather":
        sizes["i"] = c // n
    elif coll == "reduce_scatter":
        sizes["o"] = c // n
    elif coll != "all_to_all":
        sizes["o"] = sizes["i"]
    algo = ET.Element("algo", {
        "name": name or f"ringccl_{schedule.algorithm}_{coll}_{n}", "proto": "Simple",
        "nchannels": "1", "nchunksperloop": str(max(sizes["i"], sizes["o"])), "ngpus": str(n),
        "coll": MSCCL_COLLECTIVES.get(coll, coll), "inplace": "1"})
    for rank in range(n):
        gpu = ET.SubElement(algo, "gpu", {"id": str(rank), "i_chunks": str(sizes["i"]),
                                          "o_chunks": str(sizes["o"]),
                                          "s_chunks": str(sizes["s"])})
        tbs = _finish(_rank_ops(schedule, rank))
        tb_id = {key: i for i, (key, _) in enumerate(tbs)}
        for key, ops in tbs:
            tb = ET.SubElement(gpu, "tb", {"id": str(tb_id[key]), "send": str(key[0]),
                                           "recv": str(key[1]), "chan": "0"})
            for op in ops:
                src = op.src if op.src is not None else ("i", -1)
                dst = op.dst if op.dst is not None else ("o", -1)
                dep = op.deps[0] if op.deps else None
                ET.SubElement(tb, "step", {
                    "s": str(op.index), "type": op.kind, "srcbuf": src[0], "srcoff": str(src[1]),
                    "dstbuf": dst[0], "dstoff": str(dst[1]),
                    "cnt": "0" if op.kind == "nop" else "1",
                    "depid": str(tb_id[dep.tb]) if dep else "-1",
                    "deps": str(dep.index) if dep else "-1",
                    "hasdep": "1" if op.hasdep else "0"})
    ET.indent(algo, space="  ")
    return ET.tostring(algo, encoding="unicode")


# -- Chrome / Perfetto trace ----------------------------------------------------------------------

def to_chrome_trace(schedule: Schedule, step_seconds: Sequence[float] | None = None,
                    max_transfers: int = 1_000_000) -> dict:
    """The schedule as a Chrome/Perfetto trace (``json.dump`` the result; open in
    https://ui.perfetto.dev or chrome://tracing).

    Args:
        schedule: any schedule.
        step_seconds: duration of each step in seconds (length ``num_steps``), e.g. from a cost
            model; default: every step lasts 1 µs, so time reads as the step index.
        max_transfers: refuse larger schedules (a trace has about four events per transfer).
    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``; timestamps
        ``ts`` and durations ``dur`` in microseconds as the format requires.
    Raises:
        ArgumentError: ``step_seconds`` of the wrong length or negative; too many transfers.
    """
    t = schedule.num_transfers
    if t > max_transfers:
        raise ArgumentError(f"schedule has {t} transfers; max_transfers={max_transfers} (a trace "
                            "has ~4 events per transfer); pass a larger max_transfers to force it")
    if step_seconds is None:
        dur = np.ones(schedule.num_steps)
    else:
        dur = np.asarray(step_seconds, dtype=float) * 1e6
        if dur.shape != (schedule.num_steps,) or (dur < 0).any():
            raise ArgumentError(f"step_seconds must be {schedule.num_steps} durations >= 0, got "
                                f"shape {dur.shape}")
    start = np.concatenate([[0.0], np.cumsum(dur)])
    n = schedule.world_size
    title = f"{schedule.algorithm} {schedule.collective}, world_size={n}"
    events: list[dict] = [{"ph": "M", "pid": 0, "name": "process_name", "args": {"name": title}}]
    for r in range(n):
        events.append({"ph": "M", "pid": 0, "tid": r, "name": "thread_name",
                       "args": {"name": f"R{r}"}})
        events.append({"ph": "M", "pid": 0, "tid": r, "name": "thread_sort_index",
                       "args": {"sort_index": r}})
    for k in range(schedule.num_steps):
        events.append({"ph": "i", "s": "g", "pid": 0, "tid": 0, "ts": start[k],
                       "name": f"step {k}" + (f" ({schedule.phase_names[k]})"
                                               if schedule.phase_names[k] else "")})
    steps = schedule.step_of(np.arange(t))
    for i, (s, d, sc, dc, red, k) in enumerate(zip(
            schedule.src.tolist(), schedule.dst.tolist(), schedule.src_chunk.tolist(),
            schedule.dst_chunk.tolist(), schedule.reduce.tolist(), steps.tolist())):
        ts, half = start[k], dur[k] / 2
        args = {"step": k, "phase": schedule.phase_names[k], "src": s, "dst": d,
                "src_chunk": sc, "dst_chunk": dc, "reduce": bool(red)}
        events.append({"ph": "X", "pid": 0, "tid": s, "ts": ts, "dur": dur[k], "cat": "send",
                       "name": f"send c{sc} → R{d}", "args": args})
        events.append({"ph": "X", "pid": 0, "tid": d, "ts": ts, "dur": half if red else dur[k],
                       "cat": "recv", "name": f"recv c{dc} ← R{s}", "args": args})
        if red:
            events.append({"ph": "X", "pid": 0, "tid": d, "ts": ts + half, "dur": half,
                           "cat": "reduce", "name": f"reduce c{dc}", "args": args})
        events.append({"ph": "s", "pid": 0, "tid": s, "ts": ts, "id": i, "cat": "transfer",
                       "name": "transfer"})
        events.append({"ph": "f", "bp": "e", "pid": 0, "tid": d, "ts": ts, "id": i,
                       "cat": "transfer", "name": "transfer"})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"collective": schedule.collective, "algorithm": schedule.algorithm,
                          "world_size": n, "num_chunks": schedule.num_chunks,
                          "num_steps": schedule.num_steps,
                          "time_unit": "1 µs per step" if step_seconds is None else "seconds"}}
