"""``ringccl moe``'s workers and its benchmark's: the dispatch of :mod:`ringccl.training.moe`
on real processes, at a small size whose result is read by eye and at scale (Zipf-skewed
routing, unsplit against micro-chunked on the background communicator)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..algorithms import get_algorithm
from ..errors import ArgumentError
from .background import Communicator
from .moe import Expert, capacity, dispatch, pipelined_moe, unsplit_moe, zipf_prior, zipf_routing

__all__ = ["token_matrix_worker", "ScaleConfig", "scale_worker", "command_worker"]


def token_matrix_worker(rank: int, world_size: int) -> list[str]:
    """Expert parallelism's all-to-all token exchange on real processes: GPU ``src`` holds
    the tokens ``Token_G{src}->E{dst}``, one per expert dst (one expert per rank); after the
    dispatch rank dst holds ``Token_G{src}->E{dst}`` from every src. The labels travel as rows
    ``(src, dst)``; returns the labels this rank received, in order."""
    tokens = torch.tensor([[float(rank), float(dst)] for dst in range(world_size)])
    ids = torch.arange(world_size).reshape(-1, 1)
    received, _ = dispatch(tokens, ids, torch.ones(world_size, 1), num_experts=world_size)
    return [f"Token_G{int(s)}->E{int(d)}" for s, d in received.tolist()]


@dataclass
class ScaleConfig:
    """``ringccl moe``'s run at scale (per rank): tokens, width, experts, routing, chunks."""

    tokens: int = 4096
    hidden_size: int = 256
    ffn_hidden_size: int = 512
    num_experts: int = 8
    top_k: int = 2
    capacity_factor: float | None = 1.25
    skew: float = 1.0
    iters: int = 5
    num_chunks: int = 4
    seed: int = 0
    algorithm: str | None = None

    def validate(self, world_size: int) -> "ScaleConfig":
        """Refuse bad fields before any process starts (ArgumentError naming the field)."""
        for name in ("tokens", "hidden_size", "ffn_hidden_size", "num_experts", "top_k", "iters",
                     "num_chunks"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ArgumentError(f"{name}={v!r} must be an integer >= 1")
        if self.top_k > self.num_experts:
            raise ArgumentError(f"top_k={self.top_k} must be <= num_experts={self.num_experts}")
        if self.num_experts % world_size:
            raise ArgumentError(f"num_experts={self.num_experts} must be a multiple of the "
                                f"{world_size} processes (each holds E/p experts)")
        if self.num_chunks > self.tokens:
            raise ArgumentError(f"num_chunks={self.num_chunks} must be <= tokens={self.tokens} "
                                "(each micro-chunk takes at least one token)")
        if self.algorithm is not None:
            get_algorithm("all_to_all", self.algorithm)   # ArgumentError naming what exists
        capacity(self.tokens, self.top_k, self.num_experts, self.capacity_factor)
        zipf_prior(self.num_experts, self.skew)
        return self


def scale_worker(rank: int, world_size: int, config: dict, progress=None) -> dict:
    """``ringccl moe``'s run at scale: Zipf-skewed top-k routing of ``tokens`` random tokens
    per rank over E expert MLPs, ``iters`` times unsplit (dispatch, experts, combine timed
    apart) and micro-chunked on the background communicator; rank 0 reports progress
    ``("iter", done, total)``.

    Returns:
        per rank: seconds (medians over iters) of dispatch, experts, combine, unsplit total,
        pipelined total; tokens per local expert received, dropped assignments, the
        timelines of the last iteration of both runs.
    """
    cfg = ScaleConfig(**config)
    gen = torch.Generator().manual_seed(cfg.seed * 1009 + rank)
    tokens = torch.randn(cfg.tokens, cfg.hidden_size, generator=gen)
    ids, probs = zipf_routing(cfg.tokens, cfg.num_experts, cfg.top_k, cfg.skew, gen)
    local = cfg.num_experts // world_size
    torch.manual_seed(cfg.seed)
    experts = [Expert(cfg.hidden_size, cfg.ffn_hidden_size) for _ in range(cfg.num_experts)]
    mine = experts[rank * local:(rank + 1) * local]

    def experts_fn(received, counts):
        pieces = torch.split(received, [int(c) for c in counts])
        return torch.cat([e(p) for e, p in zip(mine, pieces)]) if pieces else received

    comm = Communicator()
    times: dict[str, list] = {k: [] for k in ("dispatch", "experts", "combine", "unsplit",
                                             "pipelined")}
    timeline_unsplit: list = []
    timeline_pipelined: list = []
    try:
        total = cfg.iters * 2
        for it in range(cfg.iters + 1):           # iteration 0 warms up
            dist.barrier()
            origin = time.perf_counter()
            log: list = []
            _, handle = unsplit_moe(tokens, ids, probs, experts_fn, num_experts=cfg.num_experts,
                                    capacity_factor=cfg.capacity_factor, timeline=log,
                                    origin=origin, algorithm=cfg.algorithm)
            if it:
                for (_, label, start, end) in log:
                    times["dispatch" if label == "dispatch" else label].append(end - start)
                times["unsplit"].append(log[-1][3] - log[0][2])
                timeline_unsplit = log
                if progress is not None and rank == 0:
                    progress.put(("iter", 2 * it - 1, total))
            # the pipelined run sends exactly the assignments the unsplit run kept
            dist.barrier()
            origin = time.perf_counter()
            log = []
            pipelined_moe(tokens, ids, probs, experts_fn, comm, num_experts=cfg.num_experts,
                          num_chunks=cfg.num_chunks, kept=handle.kept, timeline=log,
                          origin=origin, algorithm=cfg.algorithm)
            if it:
                times["pipelined"].append(time.perf_counter() - origin)
                timeline_pipelined = log
                if progress is not None and rank == 0:
                    progress.put(("iter", 2 * it, total))
    finally:
        comm.close()
    counts, dropped = list(handle.tokens_per_expert), handle.dropped
    median = {k: float(torch.tensor(v).median()) for k, v in times.items()}
    return {"rank": rank, "seconds": median, "tokens_per_expert": counts,
            "dropped": dropped, "assignments": cfg.tokens * cfg.top_k,
            "timeline_unsplit": timeline_unsplit, "timeline_pipelined": timeline_pipelined}


def command_worker(rank: int, world_size: int, config: dict, progress=None) -> dict:
    """``ringccl moe``'s one launch: the token matrix (:func:`token_matrix_worker`), then
    :func:`scale_worker`."""
    torch.set_num_threads(1)   # the processes share this machine's cores: one each
    labels = token_matrix_worker(rank, world_size)
    if progress is not None and rank == 0:
        progress.put(("token_matrix", 0, 0))
    return {"token_matrix": labels, "scale": scale_worker(rank, world_size, config, progress)}
