"""Mixture-of-experts expert parallelism on ringccl's all-to-all: dispatch, combine, a layer.

The token dispatcher follows the shape of Megatron-Core's ``MoEAlltoAllTokenDispatcher``
(megatron/core/transformer/moe/token_dispatcher.py), written anew here:

1. **counts**: each rank counts its (token, expert) assignments per expert, keeps at most
   ``capacity`` per expert (position order: later assignments of a full expert are dropped),
   and exchanges the counts with an all-to-all of split sizes, so every rank learns how many
   rows each peer will send to each of its local experts (Megatron-Core all-gathers every
   rank's whole count vector over the EP group and slices it; the all-to-all moves only the
   E/p counts each peer needs, the same information on the receiving side);
2. **permute + tokens**: the kept assignments are sorted by expert (hence by destination rank)
   and sent with ``all_to_all_single`` on those uneven splits;
3. **group by local expert**: what arrives is ordered (source rank, local expert); it is
   regrouped (local expert, source rank) so each expert's rows are contiguous.

:func:`combine` reverses 3, 2 and 1: ungroup, all-to-all back, and add each assignment's expert
output, weighted by its router probability, into its token's row (dropped assignments add
nothing). Both are differentiable: the all-to-all is an autograd function whose backward is the
reverse all-to-all (the split sizes swapped), and the permutations are index operations, so the
gradients of the tokens, of the probabilities (the router) and of the experts flow.

Shapes: ``tokens`` (T, hidden), any floating dtype; ``expert_ids`` (T, top_k) integers in
[0, num_experts); ``probs`` (T, top_k) floating. ``num_experts`` is a multiple of the group's
world_size; rank r holds experts ``r·E/p … (r+1)·E/p − 1``.

References: Lepikhin et al., "GShard", ICLR 2021 (capacity factor); Fedus, Zoph & Shazeer,
"Switch Transformers", JMLR 23, 2022 (§2.2 capacity, dropped tokens); Megatron-Core's MoE
token dispatcher; Zipf, "Human Behavior and the Principle of Least Effort", 1949 (the skew).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

from ..errors import ArgumentError, ArgumentTypeError
from ..backends.torch import collectives as rt

__all__ = ["DispatchHandle", "dispatch", "combine", "capacity", "zipf_prior", "zipf_routing",
           "MoELayer", "Expert", "pipelined_moe", "unsplit_moe"]


# -- checks: every one before any data moves ---------------------------------------------------

def capacity(num_tokens: int, top_k: int, num_experts: int,
             capacity_factor: float | None) -> int | None:
    """Assignments an expert accepts from one rank: ``ceil(capacity_factor · T · k / E)``
    (GShard's per-group capacity, the group being this rank's tokens); None: no limit.

    Raises:
        ArgumentError: capacity_factor <= 0 or not a finite number.
    """
    if capacity_factor is None:
        return None
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) \
            or not math.isfinite(capacity_factor) or capacity_factor <= 0:
        raise ArgumentError(f"capacity_factor={capacity_factor!r} must be a number > 0 (or None: "
                            "no capacity limit)")
    return int(math.ceil(capacity_factor * num_tokens * top_k / num_experts))


def _check_inputs(tokens, expert_ids, probs, num_experts: int, world_size: int) -> None:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise ArgumentError(f"tokens must be a 2-D tensor (num_tokens, hidden), got "
                            f"{getattr(tokens, 'shape', type(tokens).__name__)}")
    if not tokens.is_floating_point():
        raise ArgumentTypeError(f"tokens.dtype={tokens.dtype} must be floating")
    if isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 1:
        raise ArgumentError(f"num_experts={num_experts!r} must be an integer >= 1")
    if num_experts % world_size:
        raise ArgumentError(f"num_experts={num_experts} must be a multiple of the group's "
                            f"world_size={world_size} (each rank holds E/p experts)")
    if not isinstance(expert_ids, torch.Tensor) or expert_ids.dim() != 2 or \
            expert_ids.shape[0] != tokens.shape[0]:
        raise ArgumentError(f"expert_ids.shape={tuple(getattr(expert_ids, 'shape', ()))} must be "
                            f"(num_tokens, top_k) with num_tokens={tokens.shape[0]}")
    if expert_ids.is_floating_point() or expert_ids.dtype == torch.bool:
        raise ArgumentTypeError(f"expert_ids.dtype={expert_ids.dtype} must be an integer dtype")
    if expert_ids.numel():
        lo, hi = int(expert_ids.min()), int(expert_ids.max())
        if lo < 0 or hi >= num_experts:
            bad = lo if lo < 0 else hi
            raise ArgumentError(f"expert_ids holds {bad}, out of range: expert ids must be in "
                                f"[0, {num_experts}) (num_experts={num_experts})")
    if not isinstance(probs, torch.Tensor) or tuple(probs.shape) != tuple(expert_ids.shape):
        raise ArgumentError(f"probs.shape={tuple(getattr(probs, 'shape', ()))} must equal "
                            f"expert_ids.shape={tuple(expert_ids.shape)} (one router "
                            "probability per (token, chosen expert))")
    if not probs.is_floating_point():
        raise ArgumentTypeError(f"probs.dtype={probs.dtype} must be floating")


def _keep_mask(flat_ids: torch.Tensor, num_experts: int, cap: int | None) -> torch.Tensor:
    """True for the assignments an expert of capacity ``cap`` accepts: the first ``cap`` of
    each expert in (token, k) order (Megatron's "position" drop policy)."""
    if cap is None or flat_ids.numel() == 0:
        return torch.ones_like(flat_ids, dtype=torch.bool)
    order = torch.argsort(flat_ids, stable=True)
    counts = torch.bincount(flat_ids, minlength=num_experts)
    starts = torch.cumsum(counts, 0) - counts
    # position of each sorted assignment within its expert's run
    position = torch.arange(flat_ids.numel()) - starts[flat_ids[order]]
    keep = torch.empty_like(flat_ids, dtype=torch.bool)
    keep[order] = position < cap
    return keep


# -- the all-to-all as an autograd function ----------------------------------------------------

class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` on rows; backward: the same with the split sizes swapped."""

    @staticmethod
    def forward(ctx, x, output_splits, input_splits, group, algorithm):
        ctx.splits = (output_splits, input_splits)
        ctx.group, ctx.algorithm = group, algorithm
        out = x.new_empty((sum(output_splits),) + tuple(x.shape[1:]))
        rt.all_to_all_single(out, x.contiguous(), output_splits, input_splits, group=group,
                             algorithm=algorithm)
        return out

    @staticmethod
    def backward(ctx, grad):
        output_splits, input_splits = ctx.splits
        back = grad.new_empty((sum(input_splits),) + tuple(grad.shape[1:]))
        rt.all_to_all_single(back, grad.contiguous(), input_splits, output_splits,
                             group=ctx.group, algorithm=ctx.algorithm)
        return back, None, None, None, None


def _exchange(x, output_splits, input_splits, group, algorithm, world_size):
    if world_size == 1:
        return x
    return _AllToAll.apply(x, list(output_splits), list(input_splits), group, algorithm)


@dataclass
class DispatchHandle:
    """What :func:`combine` needs to undo a :func:`dispatch`.

    Attributes:
        num_tokens, top_k, num_experts: the input's shape and the expert count.
        kept: (T·k,) bool, the assignments sent (the others were dropped by capacity).
        order: indices of the kept assignments (into the flat (T·k,) list), sorted by expert.
        input_splits / output_splits: rows sent to / received from each rank.
        recv_counts: (world_size, E/p) rows received from each rank for each local expert.
        regroup: permutation from the received order (rank, expert) to (expert, rank).
        tokens_per_expert: (E/p,) rows each local expert received.
        dropped: assignments this rank dropped; dropped_per_expert: (E,) of them.
        group, algorithm, world_size, rank: where it ran.
    """

    num_tokens: int
    top_k: int
    num_experts: int
    kept: torch.Tensor
    order: torch.Tensor
    probs: torch.Tensor
    input_splits: list
    output_splits: list
    recv_counts: torch.Tensor
    regroup: torch.Tensor
    tokens_per_expert: list
    dropped: int
    dropped_per_expert: list
    group: Any = None
    algorithm: str | None = None
    world_size: int = 1
    rank: int = 0
    seconds: dict = field(default_factory=dict)


def _regroup_index(recv_counts: torch.Tensor) -> torch.Tensor:
    """Permutation taking rows ordered (source rank, local expert) to (local expert, source)."""
    world_size, local = recv_counts.shape
    flat = recv_counts.reshape(-1)
    starts = torch.cumsum(flat, 0) - flat
    pieces = [torch.arange(int(starts[r * local + e]), int(starts[r * local + e] + flat[r * local
                                                                                        + e]))
              for e in range(local) for r in range(world_size)]
    return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.long)


class _Local:
    """The ``group`` that keeps everything in this process, even where a default group
    exists (the single-process reference)."""

    def __repr__(self) -> str:
        return "ringccl.torch.moe.LOCAL"


#: pass as ``group`` to dispatch without communicating (world_size 1)
LOCAL = _Local()


def dispatch(tokens: torch.Tensor, expert_ids: torch.Tensor, probs: torch.Tensor, group=None, *,
             num_experts: int, capacity_factor: float | None = None,
             algorithm: str | None = None,
             kept: torch.Tensor | None = None) -> tuple[torch.Tensor, DispatchHandle]:
    """Send each token to the ranks of its top-k experts; return what this rank's experts got.

    Every rank of ``group`` calls it (SPMD), with its own tokens.

    Args:
        tokens: (T, hidden) floating; T may be 0.
        expert_ids: (T, top_k) integer expert ids in [0, num_experts).
        probs: (T, top_k) floating router probabilities (weights of :func:`combine`).
        group: the expert-parallel process group (None: the default group; :data:`LOCAL`, or
            no initialized group: everything stays in this process, nothing is sent).
        num_experts: E, a multiple of the group's world_size p; rank r holds E/p of them.
        capacity_factor: None (no limit) or > 0: each expert accepts at most
            :func:`capacity` assignments from each rank; the rest are dropped and counted.
        algorithm: the all-to-all algorithm (``ringccl.algorithms("all_to_all")``).
        kept: None, or a (T, top_k) bool mask of the assignments to send, in place of the
            capacity's (a micro-chunked run that must drop what an unsplit run dropped).
    Returns:
        ``(received, handle)``: received (R, hidden), rows grouped by local expert (expert
        ``handle.tokens_per_expert[i]`` rows each, from rank 0's first); the handle for
        :func:`combine`.
    Raises:
        ArgumentError: shapes, expert ids out of range, probs of the wrong shape,
            capacity_factor <= 0, num_experts not a multiple of world_size.
        ArgumentTypeError: dtypes.
        (all raised before any data moves; a refusal on some ranks only leaves the others
        waiting in the counts exchange, as torch.distributed does.)
    """
    here = isinstance(group, _Local) or not (dist.is_available() and dist.is_initialized())
    world_size = 1 if here else dist.get_world_size(group)
    rank = 0 if here else dist.get_rank(group)
    _check_inputs(tokens, expert_ids, probs, num_experts, world_size)
    num_tokens, top_k = expert_ids.shape
    cap = capacity(num_tokens, top_k, num_experts, capacity_factor)
    if kept is not None and (not isinstance(kept, torch.Tensor) or kept.dtype != torch.bool
                             or tuple(kept.shape) != tuple(expert_ids.shape)):
        raise ArgumentError(f"kept must be a bool tensor of expert_ids.shape="
                            f"{tuple(expert_ids.shape)}, got {getattr(kept, 'dtype', kept)} "
                            f"{tuple(getattr(kept, 'shape', ()))}")
    local = num_experts // world_size
    flat_ids = expert_ids.reshape(-1).long()
    kept = (_keep_mask(flat_ids, num_experts, cap) if kept is None else kept.reshape(-1))
    dropped_per_expert = (torch.bincount(flat_ids[~kept], minlength=num_experts)
                          if flat_ids.numel() else torch.zeros(num_experts, dtype=torch.long))
    kept_index = torch.nonzero(kept).reshape(-1)
    # stable sort by expert: grouped by destination rank, then by expert within it
    order = kept_index[torch.argsort(flat_ids[kept_index], stable=True)]
    counts = torch.bincount(flat_ids[order], minlength=num_experts)           # (E,)
    input_splits = counts.reshape(world_size, local).sum(1).tolist()
    # the split sizes' all-to-all: rank j gets my counts of its local experts
    if world_size > 1:
        recv = torch.empty_like(counts)
        rt.all_to_all_single(recv, counts, group=group, algorithm=algorithm)
    else:
        recv = counts
    recv_counts = recv.reshape(world_size, local)
    output_splits = recv_counts.sum(1).tolist()
    rows = tokens[order // top_k]                           # one row per kept assignment
    received = _exchange(rows, output_splits, input_splits, group, algorithm, world_size)
    regroup = _regroup_index(recv_counts)
    handle = DispatchHandle(num_tokens, top_k, num_experts, kept, order, probs, input_splits,
                            output_splits, recv_counts, regroup,
                            recv_counts.sum(0).tolist(), int((~kept).sum()),
                            dropped_per_expert.tolist(), group, algorithm, world_size, rank)
    return received[regroup], handle


def combine(expert_output: torch.Tensor, handle: DispatchHandle) -> torch.Tensor:
    """Send the experts' results back and add them into the tokens' rows, weighted by probs.

    Args:
        expert_output: (R, hidden'), the rows :func:`dispatch` returned, in the same order,
            transformed by their experts.
        handle: the dispatch's handle.
    Returns:
        (T, hidden'): row t = Σ over t's kept assignments j of probs[t, j] · expert_j(token t)
        (zero for a token whose every assignment was dropped).
    Raises:
        ArgumentError: expert_output with a row count other than the dispatch's.
    """
    h = handle
    if expert_output.dim() != 2 or expert_output.shape[0] != h.regroup.numel():
        raise ArgumentError(f"expert_output.shape={tuple(expert_output.shape)} must be "
                            f"({h.regroup.numel()}, hidden): the rows dispatch returned")
    back = torch.empty_like(h.regroup)
    back[h.regroup] = torch.arange(h.regroup.numel())
    ungrouped = expert_output[back]
    returned = _exchange(ungrouped, h.input_splits, h.output_splits, h.group, h.algorithm,
                         h.world_size)
    weights = h.probs.reshape(-1)[h.order].to(returned.dtype).unsqueeze(1)
    out = returned.new_zeros((h.num_tokens, returned.shape[1]))
    return out.index_add(0, h.order // h.top_k, returned * weights)


# -- routing and a layer -----------------------------------------------------------------------

def zipf_prior(num_experts: int, skew: float) -> torch.Tensor:
    """(E,) log-weights ``-skew · log(e + 1)``: added to router logits, expert e is chosen
    about ``(e + 1)^-skew`` as often (Zipf's law); skew 0: no prior.

    Raises:
        ArgumentError: skew < 0 or not finite.
    """
    if isinstance(skew, bool) or not isinstance(skew, (int, float)) or not math.isfinite(skew) \
            or skew < 0:
        raise ArgumentError(f"skew={skew!r} must be a number >= 0 (0: uniform; 1: Zipf)")
    return -float(skew) * torch.log(torch.arange(1, num_experts + 1, dtype=torch.float64))


def zipf_routing(num_tokens: int, num_experts: int, top_k: int, skew: float,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random top-k routing with Zipf-skewed expert popularity (no router).

    Returns:
        (expert_ids (T, k) int64, distinct per token; probs (T, k) float32 summing to 1 per row).
    Raises:
        ArgumentError: top_k not in [1, num_experts], skew < 0.
    """
    if not 1 <= top_k <= num_experts:
        raise ArgumentError(f"top_k={top_k} must be in [1, num_experts={num_experts}]")
    weights = torch.exp(zipf_prior(num_experts, skew)).float()
    if num_tokens == 0:
        return torch.zeros((0, top_k), dtype=torch.long), torch.zeros((0, top_k))
    ids = torch.multinomial(weights.expand(num_tokens, -1), top_k, replacement=False,
                            generator=generator)
    probs = torch.rand((num_tokens, top_k), generator=generator) + 0.1
    return ids, probs / probs.sum(1, keepdim=True)


class Expert(torch.nn.Module):
    """One expert: an MLP ``hidden → ffn_hidden → hidden`` with GELU."""

    def __init__(self, hidden_size: int, ffn_hidden_size: int):
        super().__init__()
        self.fc1 = torch.nn.Linear(hidden_size, ffn_hidden_size)
        self.fc2 = torch.nn.Linear(ffn_hidden_size, hidden_size)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class MoELayer(torch.nn.Module):
    """A router and ``num_experts`` expert MLPs; top-k routing, optional capacity and skew.

    Every rank builds the whole layer from the same ``seed`` (identical weights); with a group
    of p ranks, rank r computes only its experts r·E/p … and the router on its own tokens. The
    same layer without a group computes everything in one process: the reference.

    Args:
        hidden_size, ffn_hidden_size: the token width and each expert's inner width.
        num_experts: E. top_k: experts per token (1 <= top_k <= E).
        capacity_factor: None or > 0 (see :func:`capacity`).
        skew: Zipf prior on the router's logits (:func:`zipf_prior`); 0: none.
        seed: initialises the weights (identically on every rank).
    Raises:
        ArgumentError: bad sizes, top_k, capacity_factor or skew.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, num_experts: int, top_k: int = 2,
                 capacity_factor: float | None = None, skew: float = 0.0, seed: int = 0):
        super().__init__()
        for name, v in (("hidden_size", hidden_size), ("ffn_hidden_size", ffn_hidden_size),
                        ("num_experts", num_experts)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ArgumentError(f"{name}={v!r} must be an integer >= 1")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
            raise ArgumentError(f"top_k={top_k!r} must be an integer in [1, {num_experts}]")
        capacity(1, top_k, num_experts, capacity_factor)   # refuse a bad factor now
        self.num_experts, self.top_k, self.capacity_factor = num_experts, top_k, capacity_factor
        gen = torch.random.fork_rng(devices=[])
        with gen:
            torch.manual_seed(seed)
            self.router = torch.nn.Linear(hidden_size, num_experts, bias=False)
            self.experts = torch.nn.ModuleList(Expert(hidden_size, ffn_hidden_size)
                                               for _ in range(num_experts))
        self.register_buffer("prior", zipf_prior(num_experts, skew).float())

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(expert_ids (T, k), probs (T, k)): the top-k of softmax(router(x) + prior)."""
        scores = torch.softmax(self.router(x) + self.prior, dim=-1)
        probs, ids = torch.topk(scores, self.top_k, dim=-1)
        return ids, probs

    def run_experts(self, received: torch.Tensor, tokens_per_expert, first_expert: int):
        """Each local expert on its contiguous rows of ``received``."""
        pieces = torch.split(received, [int(c) for c in tokens_per_expert])
        outs = [self.experts[first_expert + i](p) for i, p in enumerate(pieces)]
        return torch.cat(outs) if outs else received

    def forward(self, x: torch.Tensor, group=None, *, capacity_groups: int = 1,
                algorithm: str | None = None, stats: dict | None = None) -> torch.Tensor:
        """The layer on ``x`` (T, hidden).

        Args:
            group: an expert-parallel group (every rank passes its own tokens), or None: all
                experts here (the single-process reference).
            capacity_groups: single-process only: the tokens are the concatenation of this many
                ranks' tokens, each with its own capacity (so the reference drops what the
                expert-parallel run drops).
            stats: when given, filled with ``dropped`` and ``tokens_per_expert``.
        """
        ids, probs = self.route(x)
        if group is not None:
            world_size, rank = dist.get_world_size(group), dist.get_rank(group)
            received, handle = dispatch(x, ids, probs, group, num_experts=self.num_experts,
                                        capacity_factor=self.capacity_factor,
                                        algorithm=algorithm)
            out = combine(self.run_experts(received, handle.tokens_per_expert,
                                           rank * (self.num_experts // world_size)), handle)
            if stats is not None:
                stats.update(dropped=handle.dropped,
                             tokens_per_expert=list(handle.tokens_per_expert))
            return out
        outs, dropped = [], 0
        for xs, i, p in zip(torch.tensor_split(x, capacity_groups),
                            torch.tensor_split(ids, capacity_groups),
                            torch.tensor_split(probs, capacity_groups)):
            received, handle = _local_dispatch(xs, i, p, self.num_experts, self.capacity_factor)
            outs.append(combine(self.run_experts(received, handle.tokens_per_expert, 0), handle))
            dropped += handle.dropped
        if stats is not None:
            stats.update(dropped=dropped)
        return torch.cat(outs)


def _local_dispatch(tokens, ids, probs, num_experts, capacity_factor):
    """:func:`dispatch` in one process (world_size 1): the permutation only."""
    return dispatch(tokens, ids, probs, LOCAL, num_experts=num_experts,
                    capacity_factor=capacity_factor)


# -- overlap: micro-chunked dispatch against the expert compute --------------------------------

def _now() -> float:
    return time.perf_counter()


def unsplit_moe(tokens, expert_ids, probs, experts_fn: Callable, group=None, *,
                num_experts: int, capacity_factor: float | None = None,
                timeline: list | None = None, origin: float = 0.0, algorithm=None):
    """dispatch → experts → combine, one after the other (forward only, no autograd).

    ``experts_fn(received, tokens_per_expert)`` runs the local experts. ``timeline`` gets
    ``(lane, label, start_s, end_s)`` tuples (lanes "comm" and "compute"; seconds since
    ``origin``). Returns ``(output (T, hidden), the dispatch's handle)``.
    """
    log = timeline if timeline is not None else []
    with torch.no_grad():
        t0 = _now()
        received, handle = dispatch(tokens, expert_ids, probs, group, num_experts=num_experts,
                                    capacity_factor=capacity_factor, algorithm=algorithm)
        t1 = _now()
        out = experts_fn(received, handle.tokens_per_expert)
        t2 = _now()
        result = combine(out, handle)
        t3 = _now()
    log += [("comm", "dispatch", t0 - origin, t1 - origin),
            ("compute", "experts", t1 - origin, t2 - origin),
            ("comm", "combine", t2 - origin, t3 - origin)]
    return result, handle


def pipelined_moe(tokens, expert_ids, probs, experts_fn: Callable, communicator, *,
                  num_experts: int, num_chunks: int, kept: torch.Tensor | None = None,
                  timeline: list | None = None, origin: float = 0.0, algorithm=None):
    """Expert compute overlapped with the all-to-all: the tokens cut into ``num_chunks``
    micro-chunks; chunk c+1 is dispatched (and chunk c−1 combined) on the background
    communicator while the experts compute chunk c (forward only, no autograd).

    Every rank submits the same jobs in the same order (dispatch 0, dispatch 1, then per chunk:
    combine c, dispatch c+2), which is what keeps the background thread's collectives matched
    (:mod:`ringccl.training.background`).

    Args:
        communicator: a :class:`~ringccl.training.background.Communicator` on the EP group.
        num_chunks: >= 1 micro-chunks (of the local tokens, as even as possible).
        kept: None (no capacity), or the (T, k) mask of the assignments to send (an unsplit
            run's ``handle.kept``: the chunks then drop exactly what it dropped).
        timeline, origin, experts_fn, algorithm: as :func:`unsplit_moe`.
    Returns:
        the combined (T, hidden) output, equal to :func:`unsplit_moe`'s with the same drops.
    Raises:
        ArgumentError: num_chunks < 1.
    """
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
        raise ArgumentError(f"num_chunks={num_chunks!r} must be an integer >= 1")
    log = timeline if timeline is not None else []
    if kept is None:
        kept = torch.ones(expert_ids.shape, dtype=torch.bool)
    parts = list(zip(torch.tensor_split(tokens, num_chunks),
                     torch.tensor_split(expert_ids, num_chunks),
                     torch.tensor_split(probs, num_chunks),
                     torch.tensor_split(kept.reshape(expert_ids.shape), num_chunks)))

    def job(kind, c, fn):
        def run(group):
            t0 = _now()
            value = fn(group)
            log.append(("comm", f"{kind} {c}", t0 - origin, _now() - origin))
            return value
        return run

    def send(c):
        x, i, p, k = parts[c]
        return communicator.submit(job("dispatch", c, lambda g: dispatch(
            x, i, p, g, num_experts=num_experts, algorithm=algorithm, kept=k)))

    with torch.no_grad():
        pending = {c: send(c) for c in range(min(2, num_chunks))}
        combined = []
        for c in range(num_chunks):
            received, handle = pending.pop(c).wait()
            t0 = _now()
            out = experts_fn(received, handle.tokens_per_expert)
            log.append(("compute", f"experts {c}", t0 - origin, _now() - origin))
            combined.append(communicator.submit(job("combine", c, lambda g, o=out, h=handle:
                                                    combine(o, _rehome(h, g)))))
            if c + 2 < num_chunks:
                pending[c + 2] = send(c + 2)
        return torch.cat([f.wait() for f in combined])


def _rehome(handle: DispatchHandle, group) -> DispatchHandle:
    """The handle, combining on ``group`` (the communicator's private copy of the EP group)."""
    handle.group = group
    return handle
