"""Context parallelism's collectives, per layer and micro-batch, in its four designs
(Megatron-Core's ``cp_comm_type``). T = b·s/cp tokens per rank; kv = the K and V bytes of one
token on a TP rank (2·(a_kv/t)·d·B; for multi-head latent attention the compressed latent,
(kv_lora_rank + qk_rope_head_dim)·B); q, o = the query and output bytes of a token
((a/t)·d·B).

* ``p2p`` — ring attention (Liu, Zaharia & Abbeel 2023; Megatron-Core's default): the sequence
  in 2·cp chunks, rank i holding chunks i and 2·cp − 1 − i so every rank does the same share of
  the causal mask; forward, cp − 1 steps each passing a K/V block of T·kv bytes to the next rank
  while the current block's attention runs; backward, the K/V blocks again and their gradients
  (twice the forward's bytes). Priced as an all-gather of cp·T·kv (each rank sends
  (cp − 1)·T·kv, as the ring's cp − 1 sends do), hidden behind attention, one block exposed.
* ``all_gather`` — Llama 3 (§3.3.2): all-gather the K/V of the whole sequence (cp·T·kv), then
  compute the local queries' attention (same 2·cp chunking); backward, a reduce-scatter of
  their gradients. Not overlapped: the report keeps it because GQA's K/V are small.
* ``a2a`` — DeepSpeed-Ulysses (Jacobs et al. 2023, §3): an all-to-all turns Q, K, V from
  sequence-sharded into head-sharded before attention (T·(q + kv) bytes a rank holds), another
  turns the output back (T·o); the backward runs the same two on the gradients. Per rank
  (cp − 1)/cp of each buffer: with MHA 4·(cp − 1)/cp·T·h·B, the paper's 4Nh/P per link.
  Exposed. The Ulysses degree must divide the heads and the KV heads a TP rank holds
  (:meth:`ParallelDims.check`).
* ``a2a+p2p`` — the hybrid (USP, Fang & Zhao 2024; Megatron's hierarchical CP): Ulysses over the
  first ``u`` ranks of the cp dimension (inside a node by default), ring attention over the
  cp/u groups: after the all-to-all a rank holds u·T tokens of 1/u of the heads, so its K/V
  blocks are again T·kv bytes.

Full recompute runs the forward's collectives again in the backward.
"""

from __future__ import annotations

from .context import StepContext
from .costing import Entry
from .entries import recompute_factor, slowest
from .stages import StageShape

__all__ = ["context_parallel", "cp_token_bytes"]


def cp_token_bytes(ctx: StepContext) -> tuple[float, float, float]:
    """(q, kv, o): bytes per token a TP rank holds of the queries, of K and V, of the attention
    output."""
    model, dims, B = ctx.model, ctx.dims, ctx.model.dtype_bytes
    heads = model.num_attention_heads / dims.tp
    q = heads * model.qk_head_dim * B
    o = heads * model.value_head_dim * B
    if model.mla:
        kv = (model.kv_lora_rank + model.qk_rope_head_dim) * B
    else:
        kv = 2 * model.num_key_value_heads / dims.tp * model.head_dim * B
    return q, kv, o


def _ring(ctx: StepContext, st: StageShape, group: str, size: int, label: str) -> list[Entry]:
    """Ring attention over ``size`` ranks of ``group``: K/V blocks of T·kv bytes."""
    _, kv, _ = cp_token_bytes(ctx)
    block, m = ctx.tokens * kv, ctx.micro_batches
    fwd = st.layers * recompute_factor(ctx)
    return (slowest(ctx, st.stage, group, parallelism="cp", collective="all_gather",
                    phase="forward", what=f"K/V blocks ({label})", nbytes=block * size,
                    calls_per_step=fwd * m, overlap="attention", chunks=size)
            + slowest(ctx, st.stage, group, parallelism="cp", collective="all_gather",
                      phase="backward", what=f"K/V blocks again ({label})",
                      nbytes=block * size, calls_per_step=st.layers * m, overlap="attention",
                      chunks=size)
            + slowest(ctx, st.stage, group, parallelism="cp", collective="reduce_scatter",
                      phase="backward", what=f"K/V gradients ({label})", nbytes=block * size,
                      calls_per_step=st.layers * m, overlap="attention", chunks=size))


def _all_gather(ctx: StepContext, st: StageShape) -> list[Entry]:
    _, kv, _ = cp_token_bytes(ctx)
    full, m = ctx.tokens * kv * ctx.dims.cp, ctx.micro_batches
    fwd = st.layers * recompute_factor(ctx)
    return (slowest(ctx, st.stage, "cp", parallelism="cp", collective="all_gather",
                    phase="forward", what="K/V of the whole sequence (Llama 3 all-gather)",
                    nbytes=full, calls_per_step=fwd * m)
            + slowest(ctx, st.stage, "cp", parallelism="cp", collective="reduce_scatter",
                      phase="backward", what="K/V gradients to their sequence owners",
                      nbytes=full, calls_per_step=st.layers * m))


def _ulysses(ctx: StepContext, st: StageShape, group: str) -> list[Entry]:
    q, kv, o = cp_token_bytes(ctx)
    t, m = ctx.tokens, ctx.micro_batches
    fwd = st.layers * recompute_factor(ctx)
    rows: list[Entry] = []
    for phase, calls, grads in (("forward", fwd, ""), ("backward", st.layers, " gradients")):
        rows += slowest(ctx, st.stage, group, parallelism="cp", collective="all_to_all",
                        phase=phase, what=f"Q, K, V{grads} sequence -> head shards (Ulysses)",
                        nbytes=t * (q + kv), calls_per_step=calls * m)
        rows += slowest(ctx, st.stage, group, parallelism="cp", collective="all_to_all",
                        phase=phase, what=f"attention output{grads} head -> sequence shards",
                        nbytes=t * o, calls_per_step=calls * m)
    return rows


def context_parallel(ctx: StepContext, st: StageShape) -> list[Entry]:
    """The stage's context-parallel collectives in the layout's ``cp_comm_type``."""
    dims = ctx.dims
    if dims.cp < 2:
        return []
    kind = dims.cp_comm_type
    if kind == "p2p":
        return _ring(ctx, st, "cp", dims.cp, "ring attention")
    if kind == "all_gather":
        return _all_gather(ctx, st)
    if kind == "a2a":
        return _ulysses(ctx, st, "cp")
    u = dims.cp_a2a_size
    return _ulysses(ctx, st, "cp_a2a") + _ring(ctx, st, "cp_p2p", dims.cp // u,
                                                "ring across the Ulysses groups")
