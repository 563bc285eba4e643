"""Where a mixture-of-experts layer's tokens go: the load of the busiest expert-parallel rank,
and how many nodes and GPUs a token's copies reach — pure functions of counts.

* **Load.** Experts sit on EP ranks in contiguous blocks of E/ep (Megatron-Core's local experts).
  With Zipf-skewed popularity (``ringccl moe --skew``: expert e chosen about (e + 1)^−skew as
  often, k distinct experts per token drawn without replacement, as
  :func:`ringccl.torch.moe.zipf_routing` draws them) the chance that expert e is among a token's
  k is estimated once per (E, k, skew) from a fixed draw of tokens (Gumbel top-k, random seed 0);
  the busiest rank's share over the mean is the imbalance. Dropless routing (Megatron-Core's
  default) sends the busiest rank that many times the mean; a capacity factor c caps every
  expert at c × its uniform share and pads to it (GShard §2.2), so the load is c.
* **Nodes per token.** A token's k experts are k distinct of E, spread evenly over the n nodes
  of its EP group (E/n per node). Without a limit the expected number of distinct nodes is
  ``n·(1 − C(E − E/n, k)/C(E, k))`` (hypergeometric); DeepSeek-V3's node-limited routing
  (§2.1.2) first picks at most M nodes, then the k experts among their M·E/n, so
  ``M·(1 − C(M·E/n − E/n, k)/C(M·E/n, k)) <= M``. A token's own node is one of the n with
  chance 1/n, so ``(n − 1)/n`` of those copies cross a NIC — once per node (§3.2.2: "IB to the
  GPU with the same in-node index on each target node, then NVLink"), where a flat all-to-all
  sends one copy per expert, ``k·(n − 1)/n``.
* **GPUs per node copy.** On a node the copy goes to the GPUs holding its k/d chosen experts
  (d the nodes reached), at most g of them: ``g·(1 − (1 − 1/g)^(k/d))``.

References:
    DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, §2.1.2 (node-limited
        routing, M = 4), §3.2.2 (dispatch over IB then NVLink).
    Lepikhin et al., "GShard", arXiv:2006.16668, §2.2 (expert capacity).
    Zipf, "Human Behavior and the Principle of Least Effort", 1949 (the skew).
"""

from __future__ import annotations

from math import comb

import numpy as np

from ..caches import memoize
from ..errors import ArgumentError

__all__ = ["expert_inclusion", "ep_rank_imbalance", "expert_load", "nodes_per_token",
           "gpus_per_copy"]

#: tokens of the fixed draw that estimates Zipf inclusion probabilities
_DRAW = 16384


@memoize(maxsize=256)
def expert_inclusion(num_experts: int, top_k: int, skew: float) -> np.ndarray:
    """(E,) chance that each expert is among a token's k (sums to k); uniform k/E at skew 0."""
    if not 1 <= top_k <= num_experts:
        raise ArgumentError(f"top_k={top_k} must be in [1, num_experts={num_experts}]")
    if skew == 0:
        return np.full(num_experts, top_k / num_experts)
    log_w = -float(skew) * np.log(np.arange(1, num_experts + 1, dtype=np.float64))
    rng = np.random.default_rng(0)
    keys = log_w + rng.gumbel(size=(_DRAW, num_experts))      # Gumbel top-k = sampling
    picked = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]   # without replacement
    counts = np.bincount(picked.ravel(), minlength=num_experts)
    return counts / _DRAW


def ep_rank_imbalance(num_experts: int, top_k: int, skew: float, ep: int) -> float:
    """Tokens of the busiest EP rank over the mean (>= 1), experts in contiguous blocks."""
    if num_experts % ep:
        raise ArgumentError(f"ep={ep} must divide num_experts={num_experts}")
    loads = expert_inclusion(num_experts, top_k, skew).reshape(ep, -1).sum(axis=1)
    return float(loads.max() / loads.mean())


def expert_load(*, num_experts: int, top_k: int, ep: int, capacity_factor: float | None,
                routing_imbalance: float | None, routing_skew: float) -> float:
    """Tokens the busiest EP rank receives and computes over the uniform share: the capacity
    factor when set (padded buffers), else the measured imbalance, else the Zipf one (1 when
    uniform)."""
    if capacity_factor is not None:
        return float(capacity_factor)
    if routing_imbalance is not None:
        return float(routing_imbalance)
    if not num_experts or not routing_skew:
        return 1.0
    return ep_rank_imbalance(num_experts, top_k, routing_skew, ep)


def nodes_per_token(num_experts: int, top_k: int, nodes: int, limit: int | None = None) -> float:
    """Expected distinct nodes a token's k experts sit on, of the ``nodes`` its EP group spans,
    at most ``limit`` of them (None: no limit)."""
    if nodes < 1 or num_experts % nodes:
        raise ArgumentError(f"nodes={nodes} must divide num_experts={num_experts}")
    per_node = num_experts // nodes
    n = nodes if limit is None else min(limit, nodes)
    pool = n * per_node
    if top_k > pool:
        raise ArgumentError(f"top_k={top_k} experts do not fit on {n} nodes of {per_node} "
                            "experts each")
    return n * (1 - comb(pool - per_node, top_k) / comb(pool, top_k))


def gpus_per_copy(experts_per_copy: float, gpus: int) -> float:
    """Expected distinct GPUs of a node that a token's copy reaches, its ``experts_per_copy``
    experts spread over ``gpus`` GPUs."""
    if gpus <= 1:
        return 1.0
    return gpus * (1 - (1 - 1 / gpus) ** experts_per_copy)
