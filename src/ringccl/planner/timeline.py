"""Each pipeline schedule as it runs: the order of every rank's F, B, W passes and a simulation of
their times, so the step's picture shows the schedule itself and the tests check the closed forms
of :mod:`ringccl.planner.pipeline` against it.

A rank runs its list of passes in order; a pass starts when the rank is free and its input is
ready: F of micro-batch i on stage s after F of i on stage s − 1; B after B on stage s + 1 (on
the last stage after its own F); W after its B; plus ``p2p_seconds`` when that input comes from
another rank. The orders are the frameworks':

* gpipe: all forwards, then all backwards (Huang et al. 2019);
* 1f1b: p − r − 1 warm-up forwards, then one forward and one backward, then the cool-down
  (Narayanan et al. 2021 §2.2.1; Megatron's ``forward_backward_pipelining_without_interleaving``);
* interleaved: Megatron-LM's ``forward_backward_pipelining_with_interleaving`` order (virtual
  micro-batch k is chunk ``(k // p) % v`` of micro-batch ``(k // (p·v))·p + k % p``; warm-up
  ``2(p − r − 1) + (v − 1)·p``, all of them when m = p);
* zb-h1: 1F1B's order with B and W split, the first r weight passes of rank r deferred (as
  PyTorch's ``_get_1f1b_rank_ops(..., enable_zero_bubble=True)`` with ``num_1f1b_microbatches =
  rank``; Qi et al. 2024 §2.1);
* zb-h2: 2(p − r) − 1 warm-up forwards, then B F pairs while forwards remain, then B W pairs,
  then the remaining W (Qi et al. §2.2, Figure 3);
* dualpipe, dualpipev: the eight steps of deepseek-ai/DualPipe's ``DualPipe.step`` and
  ``DualPipeV.step`` (``nF0``, ``nF0F1``, ``nB1W1F1``, ``nF0B1F1B0``, ``nB1F1B0``, ``nB1B0``,
  ``nWB0``, ``nW``), F&B pairs run as one pass of F + B + W.

Not a trace: communication other than the P2P latency is folded into the passes' times by the
caller (:meth:`ringccl.planner.step.StepEstimate.timeline`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ArgumentError
from .pipeline import check_schedule, chunks_per_rank, get_schedule

__all__ = ["Timeline", "rank_orders", "simulate"]

# a part of a pass: (kind "F" | "B" | "W" | "BW", stage key (direction, position), micro-batch)
_Part = tuple


def _plain(p: int, m: int, name: str) -> list[list[list[_Part]]]:
    orders = []
    for r in range(p):
        st = (0, r)
        if name == "gpipe":
            ops = [[("F", st, i)] for i in range(m)] + [[("BW", st, i)] for i in range(m)]
        elif name == "zb-h2":
            ops = _zb_h2(p, m, r)
        else:
            ops = _one_f_one_b(p, m, r, name == "zb-h1")
        orders.append(ops)
    return orders


def _one_f_one_b(p: int, m: int, r: int, split: bool) -> list[list[_Part]]:
    st, warm = (0, r), min(p - r - 1, m)
    ops = [[("F", st, i)] for i in range(warm)]
    deferred: list[int] = []
    b = 0

    def backward():
        nonlocal b
        ops.append([("B" if split else "BW", st, b)])
        deferred.append(b)
        b += 1
        if split and b > r:          # rank r defers its first r weight passes
            ops.append([("W", st, deferred.pop(0))])
    for i in range(warm, m):
        ops.append([("F", st, i)])
        backward()
    while b < m:
        backward()
    if split:
        ops.extend([("W", st, i)] for i in deferred)
    return ops


def _zb_h2(p: int, m: int, r: int) -> list[list[_Part]]:
    st, warm = (0, r), min(2 * (p - r) - 1, m)
    ops = [[("F", st, i)] for i in range(warm)]
    f, b, w = warm, 0, 0
    while f < m:
        ops += [[("B", st, b)], [("F", st, f)]]
        b, f = b + 1, f + 1
    while b < m:
        ops += [[("B", st, b)], [("W", st, w)]]
        b, w = b + 1, w + 1
    ops.extend([("W", st, i)] for i in range(w, m))
    return ops


def _interleaved(p: int, m: int, v: int) -> list[list[list[_Part]]]:
    total = m * v

    def part(kind: str, k: int, r: int) -> list[_Part]:
        chunk = (k // p) % v
        if kind == "BW":
            chunk = v - 1 - chunk
        return [(kind, (0, chunk * p + r), (k // (p * v)) * p + k % p)]
    orders = []
    for r in range(p):
        warm = total if m == p else min(2 * (p - r - 1) + (v - 1) * p, total)
        ops = [part("F", k, r) for k in range(warm)]
        for i in range(total - warm):
            ops += [part("F", warm + i, r), part("BW", i, r)]
        ops += [part("BW", k, r) for k in range(total - warm, total)]
        orders.append(ops)
    return orders


def _dual(p: int, m: int, v_shape: bool) -> list[list[list[_Part]]]:
    """DualPipe (two directions of p stages, rank r runs stage r of one and p − 1 − r of the
    other) or DualPipeV (one direction of 2p stages, rank r runs r and 2p − 1 − r)."""
    n = p if v_shape else p // 2                  # the repository's num_ranks / num_half_ranks
    half = m if v_shape else m // 2               # micro-batches per direction
    orders = []
    for r in range(p):
        h = r if v_shape else min(r, p - 1 - r)
        if v_shape:
            stage = {0: (0, r), 1: (0, 2 * p - 1 - r)}
        elif r < p // 2:
            stage = {0: (0, r), 1: (1, p - 1 - r)}
        else:
            stage = {0: (1, p - 1 - r), 1: (0, r)}
        nf, nb, queue, ops = [0, 0], [0, 0], [], []

        def F(ph):
            nf[ph] += 1
            return ("F", stage[ph], nf[ph] - 1)

        def B(ph, zb=False):
            nb[ph] += 1
            if zb:
                queue.append(("W", stage[ph], nb[ph] - 1))
            return ("B" if zb else "BW", stage[ph], nb[ph] - 1)
        ops += [[F(0)] for _ in range(2 * (n - h - 1))]                       # nF0
        for _ in range(h + 1):                                                 # nF0F1
            ops += [[F(0)], [F(1)]]
        for _ in range(n - h - 1):                                             # nB1W1F1
            ops += [[B(1, True)], [queue.pop(0)], [F(1)]]
        for i in range(half - 2 * n + h + 1):                                  # nF0B1F1B0
            if i == 0 and h == n - 1:      # the middle rank does not overlap its first pair
                ops += [[F(0)], [B(1)]]
            else:
                ops.append([F(0), B(1)])
            ops.append([F(1), B(0)])
        for _ in range(n - h - 1):                                             # nB1F1B0
            ops += [[B(1)], [F(1), B(0)]]
        zb = False
        for i in range(h + 1):                                                 # nB1B0
            zb = zb or (i == (h + 1) // 2 and h % 2 == 1)
            ops.append([B(1, zb)])
            zb = zb or (i == (h + 1) // 2 and h % 2 == 0)
            ops.append([B(0, zb)])
        for _ in range(n - h - 1):                                             # nWB0
            ops += [[queue.pop(0)], [B(0, True)]]
        ops += [[queue.pop(0)] for _ in range(h + 1)]                          # nW
        orders.append(ops)
    return orders


def rank_orders(schedule: str, pp: int, num_micro_batches: int,
                virtual_stages: int = 1) -> tuple[list, int]:
    """Every rank's passes in the order it runs them, and the number of stages per direction.

    Returns:
        (orders, stages): ``orders[r]`` a list of passes, each a list of one part (two for an F&B
        pair) ``(kind, (direction, position), micro_batch)`` with kind "F", "B" (inputs), "W"
        (weights) or "BW" (the whole backward).
    Raises:
        ArgumentError: the schedule refuses these sizes
            (:func:`~ringccl.planner.pipeline.check_schedule`).
    """
    name = check_schedule(schedule, pp=pp, num_micro_batches=num_micro_batches,
                          virtual_stages=virtual_stages)
    p, m, v = pp, num_micro_batches, virtual_stages
    if name == "interleaved":
        return _interleaved(p, m, v), p * v
    if name in ("dualpipe", "dualpipev"):
        return _dual(p, m, name == "dualpipev"), (2 * p if name == "dualpipev" else p)
    return _plain(p, m, name), p


@dataclass
class Timeline:
    """A simulated step of the pipeline.

    Attributes:
        schedule, pp, num_micro_batches, virtual_stages: what ran.
        passes: per rank, ``{"kind", "micro_batch", "chunk", "start", "end"}`` (seconds); kind
            "F", "B", "W", "BW" or "F&B" (micro_batch and chunk then of the F part).
        makespan: when the last pass ends.
    """

    schedule: str
    pp: int
    num_micro_batches: int
    virtual_stages: int
    passes: list = field(default_factory=list)
    makespan: float = 0.0

    def busy(self, rank: int) -> float:
        return sum(x["end"] - x["start"] for x in self.passes[rank])

    def idle(self, rank: int) -> float:
        """Idle time of ``rank`` inside its own window (first start to last end)."""
        ps = self.passes[rank]
        return (max(x["end"] for x in ps) - min(x["start"] for x in ps)) - self.busy(rank)

    def peak_in_flight(self, rank: int) -> int:
        """Most micro-batch chunks whose F has started and whose B has not ended."""
        events = []
        for x in self.passes[rank]:
            kinds = x["kind"].split("&")
            if "F" in kinds:
                events.append((x["start"], 1))
            if x["kind"] in ("B", "BW", "F&B"):
                events.append((x["end"], -1))
        live = peak = 0
        for _, d in sorted(events, key=lambda e: (e[0], e[1])):
            live += d
            peak = max(peak, live)
        return peak

    def to_dict(self) -> dict:
        return {"schedule": self.schedule, "pp": self.pp,
                "num_micro_batches": self.num_micro_batches,
                "virtual_stages": self.virtual_stages, "makespan_s": self.makespan,
                "passes": self.passes}


def _chunk(part: _Part, stages: int, pp: int) -> int:
    """The rank-local chunk of a stage: 0 the first the rank holds, 1 the second."""
    direction, position = part[1]
    if stages == pp:                   # one chunk per direction
        return direction
    return position // pp


def simulate(schedule: str, *, pp: int, num_micro_batches: int, virtual_stages: int = 1,
             times: list[tuple[float, float, float]], p2p_seconds: float = 0.0) -> Timeline:
    """Run the schedule's orders with per-rank pass times.

    Args:
        times: per rank (F, B, W) of one pass through all of its layers, seconds; a chunk takes
            1/chunks of it (DualPipe's two stages each take half).
        p2p_seconds: latency of a send between two ranks.
    Returns:
        :class:`Timeline`.
    Raises:
        ArgumentError: the schedule refuses these sizes; ``times`` not one per rank.
    """
    orders, stages = rank_orders(schedule, pp, num_micro_batches, virtual_stages)
    if len(times) != pp:
        raise ArgumentError(f"times has {len(times)} entries; one (F, B, W) per rank, pp={pp}")
    chunks = chunks_per_rank(schedule, virtual_stages)
    dur = [{"F": f / chunks, "B": b / chunks, "W": w / chunks, "BW": (b + w) / chunks}
           for f, b, w in times]
    done: dict = {}
    free = [0.0] * pp
    nxt = [0] * pp
    out = [[] for _ in range(pp)]
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for r in range(pp):
            while nxt[r] < len(orders[r]):
                parts = orders[r][nxt[r]]
                start = _ready(parts, done, free[r], r, stages, p2p_seconds)
                if start is None:
                    break
                end = start + sum(dur[r][k] for k, _, _ in parts)
                for k, st, mb in parts:
                    done[("B" if k == "BW" else k, st, mb)] = (end, r)
                k0, st0, mb0 = parts[0]
                out[r].append({"kind": "F&B" if len(parts) == 2 else k0, "micro_batch": mb0,
                               "chunk": _chunk(parts[0], stages, pp), "start": start,
                               "end": end})
                free[r] = end
                nxt[r] += 1
                left -= 1
                moved = True
        if not moved:  # pragma: no cover - every order above is deadlock-free (tests)
            raise ArgumentError(f"schedule {schedule!r} deadlocks at pp={pp}, "
                                f"m={num_micro_batches}")
    return Timeline(get_schedule(schedule).name, pp, num_micro_batches, virtual_stages, out,
                    max(free))


def _ready(parts, done: dict, free: float, rank: int, stages: int, p2p: float):
    """When ``parts`` can start on ``rank`` (None while an input is missing)."""
    start = free
    for kind, (d, pos), mb in parts:
        if kind == "F":
            need = [("F", (d, pos - 1), mb)] if pos > 0 else []
        elif kind in ("B", "BW"):
            need = [("B", (d, pos + 1), mb)] if pos < stages - 1 else [("F", (d, pos), mb)]
        else:
            need = [("B", (d, pos), mb)]
        for key in need:
            if key not in done:
                return None
            end, where = done[key]
            start = max(start, end + (p2p if where != rank else 0.0))
    return start
