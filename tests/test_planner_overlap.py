"""What the frameworks overlap (ringccl.planner.overlap) and how collectives are priced
(ringccl.planner.costing): each knob's effect on what stays exposed, DeepSpeed's ZeRO-3 collapse
with scale (Narayanan et al. 2021, Table 2), NCCL's choice by default and ringccl's what-if."""

import pytest

from ringccl.costmodel.nccl import price
from ringccl.errors import ArgumentError
from ringccl.planner import Cluster, ModelConfig
from ringccl.planner import plan as _plan
from ringccl.planner.costing import KERNEL_LAUNCH_SECONDS, nccl_machine_of, sm_contention
from ringccl.planner.overlap import contended, decide, exposed_seconds

# GPT-3 175B as Megatron-LM trains it (SC21 §5.1: V = 51,200, s = 2048, 4h MLP; Megatron's
# linear layers with biases, LayerNorm)
GPT175 = ModelConfig(num_hidden_layers=96, hidden_size=12288, num_attention_heads=96,
                     intermediate_size=49152, vocab_size=51200, seq_length=2048,
                     gated_mlp=False, tie_word_embeddings=True, qkv_bias=True,
                     attention_out_bias=True, mlp_bias=True, norm_type="layernorm",
                     name="gpt-175b")
SMALL = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                    num_key_value_heads=8, intermediate_size=11008, vocab_size=32000,
                    seq_length=4096, name="small")


def a100(nodes):
    return {"preset": "dgx-a100", "nodes": nodes}


#: these tests are about DDP's buckets and plain TP: these fields unless a test gives its own,
#: instead of the Megatron preset's distributed optimizer and sequence parallelism
PLAIN = {"sp": False, "zero_stage": 0}


def plan(model, layout, cluster, **kw):
    return _plan(model, {**PLAIN, **layout}, cluster, **kw)


def test_exposed_seconds_formula():
    assert exposed_seconds(1.0, 0.0) == 1.0                 # nothing to hide behind
    assert exposed_seconds(1.0, 4.0, 4) == 0.25             # hidden but for its first piece
    assert exposed_seconds(3.0, 2.0, 2) == 1.0 + 1.0        # the excess, plus one piece


# -- SC21 Table 2: ZeRO-3 (DeepSpeed) falls with scale; PTD-P and FSDP's per-layer gathers do not

#: the Megatron-DeepSpeed stack of SC21 Table 2 (DeepSpeed v0.3.15's ZeRO-3)
DEEPSPEED_2021 = {"framework": "megatron-deepspeed"}


def _per_gpu_throughput(gpus, mbs, **knobs):
    p = plan(GPT175, {"dp": gpus, "micro_batch_size": mbs, "global_batch_size": 1536,
                      "zero_stage": 3, "recompute": "full", "attention": "unfused", **knobs},
             a100(gpus // 8))
    return 1536 * 2048 / (p.step_seconds * gpus), p


def test_zero3_per_parameter_throughput_falls_with_scale_as_measured():
    # Narayanan et al. 2021, Table 2: 144 -> 88 -> 44 TFLOP/s per GPU from 384 to 1536 GPUs at
    # a fixed batch of 1536 (3.3x). DeepSpeed v0.3's per-parameter, list-based, blocking
    # gathers cost the same per GPU whatever the batch, and grow with the ranks.
    t384, p384 = _per_gpu_throughput(384, 4, **DEEPSPEED_2021)
    t768, _ = _per_gpu_throughput(768, 2, **DEEPSPEED_2021)
    t1536, p1536 = _per_gpu_throughput(1536, 1, **DEEPSPEED_2021)
    assert t384 > t768 > t1536
    assert t384 / t1536 >= 2.5
    # the gathers are exposed, and each costs more at 1536 ranks (a copy per rank, NCCL's ring)
    assert p1536.exposed["zero"] > p384.exposed["zero"]
    small = lambda p: min(e.seconds_per_call for e in p.stages[0].entries)  # noqa: E731
    assert small(p1536) > small(p384) + (1536 - 384) * KERNEL_LAUNCH_SECONDS * 0.99


def test_zero3_per_layer_prefetched_gathers_keep_throughput_flat():
    t384, _ = _per_gpu_throughput(384, 4, zero3_gather="layer")
    t1536, p = _per_gpu_throughput(1536, 1, zero3_gather="layer")
    assert t384 / t1536 < 1.2
    # hidden behind the layers' compute: what stays is the SMs NCCL's channels take from the
    # GEMMs while the gathers run (contended), and one layer's gather per phase
    comm = sum(e.seconds_per_step for e in p.stages[0].entries if e.parallelism == "zero")
    assert p.exposed["zero"] < (sm_contention(p.cluster) + 0.03) * comm


def test_zero3_gather_modes_and_the_recompute_regather():
    dims = {"dp": 16, "zero_stage": 3, "global_batch_size": 16}
    per_layer = plan(SMALL, dims, a100(2))
    per_param = plan(SMALL, {**dims, "zero3_gather": "parameter"}, a100(2))
    regather = plan(SMALL, {**dims, "zero3_gather": "parameter", "recompute": "full"},
                    a100(2))
    calls = lambda p, phase, c: sum(e.calls_per_step for e in p.stages[0].entries  # noqa: E731
                                    if e.phase == phase and e.collective == c)
    assert calls(per_layer, "forward", "all_gather") == SMALL.num_hidden_layers
    # one call per tensor: 6 per gated layer (2 norms, qkv, dense, fc1, fc2) + embedding, head
    assert calls(per_param, "forward", "all_gather") == 6 * SMALL.num_hidden_layers + 3
    assert calls(regather, "backward", "all_gather") == 2 * calls(per_param, "forward",
                                                                  "all_gather")
    assert all(e.list_collective for e in per_param.stages[0].entries)


def test_a_list_collective_also_copies_its_whole_tensor_through_hbm():
    # ProcessGroupNCCL flattens the per-rank list into a new buffer and copies it back (or in):
    # the tensor's bytes read and written once, besides the world-size copy launches
    from dataclasses import replace

    from ringccl.planner.costing import costed
    from ringccl.planner.kernels import memory_seconds
    p = plan(SMALL, {"dp": 16, "zero_stage": 3, "global_batch_size": 16,
                     "zero3_gather": "parameter"}, a100(2))
    big = max(p.stages[0].entries, key=lambda e: e.nbytes)
    plain = costed(replace(big, list_collective=False), p.cluster)
    listed = costed(replace(big, list_collective=True), p.cluster)
    gpu = p.cluster.gpu_spec
    extra = listed.seconds_per_call - plain.seconds_per_call
    assert extra == pytest.approx(big.shape.size * KERNEL_LAUNCH_SECONDS
                                  + float(memory_seconds(2 * big.nbytes, gpu)))
    assert float(memory_seconds(2 * big.nbytes, gpu)) > big.shape.size * KERNEL_LAUNCH_SECONDS
    # DeepSpeed v0.3.15 gathers each parameter into a buffer it zero-fills first
    gathers = [e for e in p.stages[0].entries if e.collective == "all_gather"]
    assert gathers and all(e.zero_filled for e in gathers)
    assert not any(e.zero_filled for e in p.stages[0].entries if e.collective != "all_gather")
    filled = costed(replace(big, list_collective=False, zero_filled=True), p.cluster)
    assert filled.seconds_per_call - plain.seconds_per_call == pytest.approx(
        float(memory_seconds(big.nbytes, gpu)))


# -- each knob ----------------------------------------------------------------------------------

def _exposed(layout, parallelism, cluster=None):
    return plan(SMALL, layout, cluster or a100(2)).exposed.get(parallelism, 0.0)


def test_overlap_grad_reduce_hides_the_ddp_buckets_behind_the_backward():
    layout = {"dp": 16, "global_batch_size": 16}
    on, off = _exposed(layout, "dp"), _exposed({**layout, "overlap_grad_reduce": False}, "dp")
    p = plan(SMALL, {**layout, "overlap_grad_reduce": False}, a100(2))
    total = sum(e.seconds_per_step for e in p.stages[0].entries if e.parallelism == "dp")
    assert off == pytest.approx(total) and on < off


def test_overlap_param_gather_hides_zero1_gathers_behind_the_forward():
    layout = {"dp": 16, "zero_stage": 1, "global_batch_size": 16}
    assert (_exposed(layout, "zero")
            < _exposed({**layout, "overlap_param_gather": False}, "zero"))


def test_distributed_optimizer_hides_behind_one_micro_batch_whatever_the_accumulation():
    # Megatron-Core r0.8.0: the buckets' reduce-scatters start only in the last micro-batch's
    # backward (param_and_grad_buffer.py register_grad_ready: is_last_microbatch, no_sync on
    # the others) and the parameter all-gathers chain through the first forward's pre-hooks
    # (distrib_optimizer.py zero_grad dispatches bucket 0, _finish_param_sync_helper the next);
    # so more micro-batches per step widen neither window
    exposed = []
    for m in (2, 8):
        p = plan(SMALL, {"tp": 8, "sp": True, "dp": 8, "zero_stage": 1, "micro_batch_size": 1,
                         "global_batch_size": 8 * m}, a100(8))
        s, c = p.stages[0], sm_contention(p.cluster)
        zero = [e for e in s.entries if e.parallelism == "zero"]
        rs = sum(e.seconds_per_step for e in zero if e.collective == "reduce_scatter")
        ag = sum(e.seconds_per_step for e in zero if e.collective == "all_gather")
        n = zero[0].chunks
        # both longer than their one-micro-batch window, shorter than two: a window that grew
        # with the micro-batches would hide them
        assert s.backward_per_micro_batch < rs < 2 * s.backward_per_micro_batch
        assert s.forward_per_micro_batch < ag < 2 * s.forward_per_micro_batch
        assert p.exposed["zero"] == pytest.approx(
            contended(rs, s.backward_per_micro_batch, n, c)
            + contended(ag, s.forward_per_micro_batch, n, c), rel=1e-9)
        exposed.append(p.exposed["zero"])
    assert exposed[0] == pytest.approx(exposed[1], rel=1e-9)


def test_tp_comm_overlap_leaves_one_chunk_of_tp_exposed():
    layout = {"tp": 8, "sp": True, "micro_batch_size": 4, "overlap_dgrad_reduce": False}
    off = _exposed(layout, "sp", a100(1))
    on = plan(SMALL, {**layout, "tp_comm_overlap": True}, a100(1))
    # behind GEMMs longer than the collectives: one chunk of tp, and the SMs the collective
    # takes from the GEMMs while it runs
    assert on.exposed["sp"] == pytest.approx(off * (1 / 8 + sm_contention(on.cluster)),
                                             rel=1e-9)


def test_contended_adds_the_sms_the_collective_takes_while_it_runs():
    # NCCL: one thread block (one SM) per channel; DGX A100: 12 channels of 108 SMs
    assert contended(1.0, 4.0, 4, 0.1) == pytest.approx(0.25 + 0.1)
    assert contended(3.0, 2.0, 2, 0.1) == pytest.approx(2.0 + 0.2)
    assert contended(1.0, 0.0, 1, 0.1) == 1.0                   # exposed: nothing to slow
    p = plan(SMALL, {"tp": 8}, a100(1))
    assert sm_contention(p.cluster) == pytest.approx(12 / 108)


def test_dgrad_reduce_hides_behind_the_weight_gradient_gemms():
    # Megatron-LM since 2022 (layers.py LinearWithGradAccumulationAndAsyncCommunication): the
    # column-parallel layers' input-gradient all-reduce runs asynchronously behind their
    # weight-gradient GEMM; Megatron-LM 2021 ran it after the backward
    layout = {"tp": 8, "micro_batch_size": 4, "num_micro_batches": 1}
    sync = plan(SMALL, {**layout, "framework": "megatron-2021"}, a100(1))
    async_ = plan(SMALL, {**layout, "framework": "megatron-2022"}, a100(1))
    bwd = [e for e in async_.stages[0].entries if e.parallelism == "tp"
           and e.phase == "backward"]
    assert [e.overlap for e in bwd] == ["weight gradients"]
    c = async_.stages[0].compute
    assert c.column_weight_grad > bwd[0].seconds_per_step   # the GEMMs are longer
    fwd = sum(e.seconds_per_step for e in async_.stages[0].entries if e.phase == "forward")
    assert sync.exposed["tp"] == pytest.approx(fwd + bwd[0].seconds_per_step)
    assert async_.exposed["tp"] == pytest.approx(
        fwd + contended(bwd[0].seconds_per_step, c.column_weight_grad,
                        bwd[0].calls_per_micro_batch, sm_contention(async_.cluster)))
    # with full recompute the forward's all-reduces run again, exposed
    again = plan(SMALL, {**layout, "framework": "megatron-2022", "recompute": "full"},
                 a100(1))
    whats = [e.what for e in again.stages[0].entries if e.phase == "backward"]
    assert any("again" in w for w in whats)


def test_sequential_p2p_makes_each_send_and_receive_its_own_transfer():
    # DeepSpeed's pipeline engine: SendActivation, RecvGrad, ... one blocking call each
    layout = {"pp": 4, "dp": 4, "global_batch_size": 16}
    batched = plan(SMALL, layout, a100(2)).stages[1].entries
    one_by_one = plan(SMALL, {**layout, "pp_sequential_p2p": True}, a100(2)).stages[1].entries
    send = lambda es: next(e for e in es if e.collective == "send_recv")  # noqa: E731
    assert send(one_by_one).calls_per_step == 2 * send(batched).calls_per_step


def test_overlap_p2p_hides_the_pipeline_sends():
    layout = {"pp": 4, "dp": 4, "global_batch_size": 16}
    assert _exposed({**layout, "overlap_p2p": True}, "pp") < _exposed(layout, "pp")


def test_fsdp_prefetch_zero_exposes_every_gather():
    layout = {"dp": 16, "zero_stage": 3, "global_batch_size": 16}
    p = plan(SMALL, {**layout, "fsdp_prefetch": 0}, a100(2))
    gathers = sum(e.seconds_per_step for e in p.stages[0].entries
                  if e.collective == "all_gather")
    assert p.exposed["zero"] >= gathers
    assert _exposed(layout, "zero") < p.exposed["zero"]


def test_pp_scatter_gather_off_sends_the_whole_output_from_every_tp_rank():
    layout = {"tp": 4, "pp": 2, "dp": 2, "global_batch_size": 8}
    on = plan(SMALL, layout, a100(2)).stages[0].entries
    off = plan(SMALL, {**layout, "pp_scatter_gather": False}, a100(2)).stages[0].entries
    send = lambda es: next(e for e in es if e.collective == "send_recv")  # noqa: E731
    assert send(off).nbytes == 4 * send(on).nbytes
    assert any(e.parallelism == "pp" and e.collective == "all_gather" for e in on)
    assert not any(e.parallelism == "pp" and e.collective == "all_gather" for e in off)


def test_decide_follows_the_knobs():
    p = plan(SMALL, {"tp": 2, "dp": 8, "global_batch_size": 8}, a100(2))
    tp = next(e for e in p.stages[0].entries if e.parallelism == "tp")
    dp = next(e for e in p.stages[0].entries if e.parallelism == "dp")
    assert decide(tp, p.dims) == "exposed" and decide(dp, p.dims) == "backward"
    q = p.dims.replace(tp_comm_overlap=True, overlap_grad_reduce=False)
    assert decide(tp, q) == tp.phase and decide(dp, q) == "exposed"


# -- pricing: NCCL's choice by default, ringccl's schedules as the what-if -------------------

def test_collectives_are_priced_as_nccl_runs_them_by_default():
    p = plan(SMALL, {"tp": 8, "micro_batch_size": 2}, a100(1))
    e = next(e for e in p.stages[0].entries if e.parallelism == "tp")
    machine = nccl_machine_of(p.cluster)
    cost = price("all_reduce", e.nbytes, 8, 1, machine)
    assert e.algorithm == f"{cost.algorithm}/{cost.protocol}"
    assert e.seconds_per_call == pytest.approx(cost.seconds)
    # DGX A100 as NCCL sees it: 12 NVLink 3 links of 20 GB/s, NICs at the 24 GB/s step
    assert machine.intra_bandwidth == pytest.approx(240e9)
    assert machine.inter_bandwidth == pytest.approx(24e9)
    what_if = plan(SMALL, {"tp": 8, "micro_batch_size": 2},
                   {**a100(1), "collectives": "ringccl"})
    w = next(e for e in what_if.stages[0].entries if e.parallelism == "tp")
    assert "/" not in w.algorithm and w.algorithm in ("ring", "two_shot", "direct",
                                                      "double_binary_tree", "halving_doubling",
                                                      "recursive_doubling", "tree", "master")


def test_a_small_all_reduce_over_1024_ranks_costs_what_nccls_ring_and_tree_do():
    # the example: ringccl's two_shot charges about two latencies for 1,023 messages
    # per phase; NCCL runs a ring or a tree whose latency grows with the ranks or their log
    layout = {"dp": 1024, "global_batch_size": 1024, "bucket_bytes": "64KiB"}
    nccl = plan(SMALL, layout, a100(128))
    dp = [e for e in nccl.stages[0].entries if e.parallelism == "dp"]
    assert dp and all(e.algorithm.split("/")[0] in ("ring", "tree") for e in dp)
    small = min(dp, key=lambda e: e.nbytes)
    cost = price("all_reduce", small.nbytes, 8, 128, nccl_machine_of(nccl.cluster))
    assert small.seconds_per_call == pytest.approx(cost.seconds)
    assert small.seconds_per_call > 20e-6   # not a couple of 5 µs latencies


def test_unknown_collectives_model_is_refused():
    with pytest.raises(ArgumentError, match="collectives='mpi' must be one of nccl, ringccl"):
        Cluster(collectives="mpi")


def test_fp8_blockwise_dispatches_in_fp8_and_combines_in_bf16():
    moe = ModelConfig(num_hidden_layers=4, hidden_size=4096, num_attention_heads=32,
                      num_key_value_heads=8, intermediate_size=14336, vocab_size=32000,
                      num_local_experts=8, num_experts_per_tok=2, seq_length=4096, name="moe")
    layout = {"dp": 8, "ep": 8, "global_batch_size": 8}
    cluster = {"preset": "dgx-h100", "nodes": 1}
    bf16 = [e for e in plan(moe, layout, cluster).stages[0].entries if e.parallelism == "ep"]
    fp8 = [e for e in plan(moe, {**layout, "precision": "fp8-blockwise"},
                           cluster).stages[0].entries if e.parallelism == "ep"]
    calls = lambda es: sum(e.calls_per_step for e in es)  # noqa: E731
    assert calls(fp8) == calls(bf16)
    sizes = sorted({e.nbytes for e in fp8})
    assert sizes == [pytest.approx(bf16[0].nbytes / 2 * (1 + 4 / 128)), bf16[0].nbytes]
    # Transformer Engine's recipe keeps the all-to-all in BF16
    te = [e for e in plan(moe, {**layout, "precision": "fp8-delayed"},
                          cluster).stages[0].entries if e.parallelism == "ep"]
    assert {e.nbytes for e in te} == {bf16[0].nbytes}
