"""Each kernel formula of ringccl.planner.kernels against its source: tile and wave quantisation
(NVIDIA's "Matrix Multiplication Background User's Guide"), the roofline, FlashAttention's
FLOPs as the kernel computes them (FlashAttention-2, arXiv:2307.08691 §3.1), and the GPU presets
against benchmarks/gpu_specs.json. No timed asserts: these are formulas."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ringccl.errors import ArgumentError
from ringccl.planner.gpus import GPU_PRESETS, gpu_preset, resolve_gpu
from ringccl.planner.kernels import (ATTENTION_LENGTHS, FLASH_EFFICIENCY, TILES,
                                     attention_efficiency, flash_attention_flops,
                                     flash_attention_seconds, gemm_efficiency, gemm_seconds,
                                     memory_seconds, tiles, wave_utilisation)

SPECS = json.loads((Path(__file__).resolve().parent.parent / "benchmarks" /
                    "gpu_specs.json").read_text())["gpus"]
A100 = gpu_preset("a100-sxm4-80gb")
H100 = gpu_preset("h100-sxm5-80gb")


# -- GPU presets: the package's table agrees with the data file's --------------------------------

@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_gpu_preset_agrees_with_gpu_specs_json(name):
    g, spec = GPU_PRESETS[name], SPECS[name]
    assert g.sm_count == spec["sm_count"]
    assert g.bf16_flops == pytest.approx(spec["bf16_dense_tflops"] * 1e12)
    assert g.fp8_flops == pytest.approx((spec["fp8_dense_tflops"] or 0) * 1e12)
    assert g.hbm_bandwidth == pytest.approx(spec["hbm_bandwidth_gbps"] * 1e9)
    assert g.hbm_bytes == pytest.approx(spec["hbm_gb"] * 2**30)   # datasheet memory GB are binary
    assert g.nvlink_bandwidth == pytest.approx(spec["nvlink_gbps_per_direction"] * 1e9)
    assert 0 < g.gemm_efficiency <= 1 and 0 < g.memory_efficiency <= 1


def test_every_preset_of_the_data_file_is_in_the_package():
    assert set(SPECS) == set(GPU_PRESETS)


def test_gpu_refusals_name_the_argument():
    with pytest.raises(ArgumentError, match="gpu='v100'.*a100-sxm4-80gb"):
        gpu_preset("v100")
    with pytest.raises(ArgumentError, match="no FP8 tensor cores"):
        A100.peak(fp8=True)
    with pytest.raises(ArgumentError, match="sm_count"):
        resolve_gpu("h100", sm_count=-1)
    assert gpu_preset("h100") is H100 and H100.peak(fp8=True) == pytest.approx(1978.9e12)


# -- tile and wave quantisation ---------------------------------------------------------------

def test_the_guides_example_98_tiles_fill_one_wave_of_108_sms():
    # "Matrix Multiplication Background User's Guide": a 1792 x 1792 output in 256 x 128 tiles
    # is 7 x 14 = 98 tiles, one wave on A100's 108 SMs
    assert tiles(1792, 1792, (256, 128)) == 98
    assert wave_utilisation(98, 108) == pytest.approx(98 / 108)


def test_a_partial_wave_costs_a_whole_wave():
    assert wave_utilisation(108, 108) == 1.0
    assert wave_utilisation(109, 108) == pytest.approx(109 / 216)
    assert wave_utilisation(216, 108) == 1.0


def test_a_partial_tile_costs_a_whole_tile():
    assert tiles(256, 128, (256, 128)) == 1
    assert tiles(257, 128, (256, 128)) == 2
    assert tiles(257, 129, (256, 128), batch=3) == 12


def _by_hand(m, n, k, gpu, out_bytes=2.0, fp8=False):
    """The module's formula written out: per tile, waves x (main loop + epilogue), the best
    tile, against the roofline."""
    per_sm = gpu.peak(fp8) * gpu.gemm_efficiency / gpu.sm_count
    store = gpu.hbm_bandwidth * gpu.memory_efficiency / gpu.sm_count
    best = math.inf
    for tm, tn in TILES:
        waves = math.ceil(math.ceil(m / tm) * math.ceil(n / tn) / gpu.sm_count)
        best = min(best, waves * (2 * tm * tn * k / per_sm + tm * tn * out_bytes / store))
    in_bytes = 1 if fp8 else 2
    memory = ((m * k + k * n) * in_bytes + m * n * out_bytes) / (
        gpu.hbm_bandwidth * gpu.memory_efficiency)
    return max(best, memory)


@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (2048, 2304, 6912), (4096, 18432, 6144),
                                   (8192, 768, 6144), (1, 4096, 4096)])
@pytest.mark.parametrize("gpu", [A100, H100], ids=["a100", "h100"])
def test_gemm_seconds_is_the_formula(shape, gpu):
    m, n, k = shape
    assert float(gemm_seconds(m, n, k, gpu)) == pytest.approx(_by_hand(m, n, k, gpu), rel=1e-12)
    assert float(gemm_seconds(m, n, k, H100, fp8=True, in_bytes=1.0)) == pytest.approx(
        _by_hand(m, n, k, H100, fp8=True), rel=1e-12)


def test_a_large_gemm_runs_near_the_fitted_efficiency_and_none_beats_the_roofline():
    big = float(gemm_efficiency(8192, 8192, 8192, H100))
    assert 0.9 * H100.gemm_efficiency < big <= H100.gemm_efficiency
    # a skinny GEMM is no faster than reading its operands once (the roofline), and a
    # thin one moving little (m = 8192, k = 64) is bounded by its bytes too
    for m, n, k in ((1, 8192, 8192), (16, 8192, 8192), (8192, 8192, 64)):
        nbytes = 2 * (m * k + k * n + m * n)
        assert float(gemm_seconds(m, n, k, H100)) >= float(memory_seconds(nbytes, H100))
    # short K loses more to the epilogue than long K; FP8 loses more than BF16
    assert gemm_efficiency(8192, 8192, 512, H100) < gemm_efficiency(8192, 8192, 8192, H100)
    assert (gemm_efficiency(8192, 8192, 1024, H100, fp8=True)
            < gemm_efficiency(8192, 8192, 1024, H100))


def test_vectorised_calls_equal_scalar_calls():
    m = np.array([1024, 2048, 4096])
    v = gemm_seconds(m, 4096, 4096, H100)
    assert [float(x) for x in v] == [float(gemm_seconds(int(x), 4096, 4096, H100)) for x in m]
    assert float(gemm_seconds(0, 4096, 4096, H100)) == 0.0


# -- FlashAttention ----------------------------------------------------------------------------

def test_flash_attention_flops_without_a_mask_are_4_s2_d():
    # FlashAttention-2 §4.1 counts 4 · seqlen² · head dimension · heads forward
    assert flash_attention_flops(2048, 2048, 128, 128, causal=False) == 4 * 2048 ** 2 * 128


@pytest.mark.parametrize("seq", [128, 1024, 4096, 8192])
def test_causal_flash_computes_the_diagonal_blocks_whole(seq):
    # query block i (128 rows) computes keys up to the end of its own block: 128·128·(i+1)
    # pairs, so s²/2 + 64·s pairs in all (blocks of 128)
    n = seq // 128
    pairs = sum(128 * 128 * (i + 1) for i in range(n))
    assert pairs == seq * seq / 2 + 64 * seq
    assert flash_attention_flops(seq, seq, 128, 128, causal=True) == 4 * 128 * pairs


def test_causal_flash_with_a_partial_last_block():
    # 200 queries: a block of 128 (keys to 128) and one of 72 (keys to 200, capped at s_k)
    assert flash_attention_flops(200, 200, 64, 64, causal=True) == 2 * 128 * (
        128 * 128 + 72 * 200)


def test_causal_counts_in_closed_form_equal_the_sums_over_blocks_and_queries():
    """The closed forms (any length, no per-block arrays) give bit for bit the sums they
    replace: per query block (blocks (bq, bk), the queries at ``offset`` in the keys) and per
    query (the causal pairs), over lengths not a multiple of a block and offsets past s_k."""
    from ringccl.planner.kernels import causal_pairs_flops
    rng = np.random.default_rng(0)
    for _ in range(3000):
        bk = int(rng.choice([64, 128]))
        bq = bk * int(rng.choice([1, 2]))
        s_q, s_k = int(rng.integers(1, 3000)), int(rng.integers(1, 8000))
        offset = bk * int(rng.integers(0, 40))
        j = np.arange(-(-s_q // bq))
        keys = np.minimum(s_k, bk * -(-(offset + bq * (j + 1)) // bk))
        blocks = 2.0 * 256 * float(np.sum(np.minimum(bq, s_q - bq * j) * keys))
        assert flash_attention_flops(s_q, s_k, 128, 128, True, (bq, bk), offset) == blocks
        pairs = 2.0 * 256 * float(np.sum(np.minimum(s_k, offset + np.arange(s_q) + 1.0)))
        assert causal_pairs_flops(s_q, s_k, 128, 128, offset) == pairs
    # a length no array of queries could hold (10¹² tokens): s²/2 + 64·s pairs, at once
    assert flash_attention_flops(10**12, 10**12, 128, 128, True) == pytest.approx(
        4 * 128 * (10**24 / 2 + 64 * 10**12), rel=1e-12)


def test_flash_backward_is_2_5_times_the_forward_flops_at_its_efficiency():
    fwd = flash_attention_seconds(64, 4096, 4096, 128, 128, True, A100)
    bwd = flash_attention_seconds(64, 4096, 4096, 128, 128, True, A100, backward=True)
    f, b = FLASH_EFFICIENCY["ampere"]
    assert bwd / fwd == pytest.approx(2.5 * f / b)
    flops = 64 * flash_attention_flops(4096, 4096, 128, 128, True)
    util = float(wave_utilisation(64 * 4096 // 128, A100.sm_count))
    assert fwd == pytest.approx(flops / (A100.bf16_flops * f * util))


# -- attention on Hopper: the measured rate at the call's length --------------------------------

_BENCH_UTIL = float(wave_utilisation(2048, 132))   # FlashAttention-3's benchmark: 2,048 blocks


@pytest.mark.parametrize("kernel, seq, tflops", [("flash", 512, 315), ("flash", 4096, 518),
                                                 ("flash2", 2048, 298), ("flash2", 16384, 335)])
def test_hopper_causal_forward_runs_at_the_papers_figure_on_half_the_pairs(kernel, seq, tflops):
    # FlashAttention-3 (arXiv:2407.08608) Figure 4, causal, head dim 128: the benchmark counts
    # 4·s²·d/2 FLOPs per head; 16 heads x 16k tokens gives its own 2,048 blocks
    heads = 16 * 16384 // seq
    t = flash_attention_seconds(heads, seq, seq, 128, 128, True, H100, kernel=kernel)
    pairs = seq * (seq + 1) / 2
    assert heads * 4 * 128 * pairs / t == pytest.approx(tflops * 1e12, rel=1e-6)
    assert attention_efficiency("causal", seq, "hopper", kernel) == pytest.approx(
        tflops * 1e12 / 989.4e12)


def test_hopper_backward_runs_at_the_papers_figure_on_the_blocks_computed():
    # Figure 5, backward, head dim 128, 8k: cuDNN 518 TFLOP/s; 2.5 x the blocks' forward FLOPs
    heads, seq = 32, 8192
    t = flash_attention_seconds(heads, seq, seq, 128, 128, True, H100, backward=True)
    flops = 2.5 * heads * flash_attention_flops(seq, seq, 128, 128, True)
    util = float(wave_utilisation(heads * seq // 128, 132)) / _BENCH_UTIL
    assert flops / t == pytest.approx(518e12 * util)


def test_attention_rate_interpolates_in_log_length_and_clamps():
    mid = attention_efficiency("causal", 2 ** 11.5, "hopper", "flash2")
    assert mid * 989.4e12 == pytest.approx((298 + 319) / 2 * 1e12)
    assert attention_efficiency("backward", 128, "hopper") == attention_efficiency(
        "backward", 512, "hopper")
    assert attention_efficiency("full", 1 << 20, "hopper") == pytest.approx(595e12 / 989.4e12)
    # Ampere keeps FlashAttention-2's constant fractions at every length
    assert attention_efficiency("causal", 512, "ampere") == FLASH_EFFICIENCY["ampere"][0]


def test_short_sequences_run_slower_per_flop_on_hopper():
    per_flop = []
    for seq in (1024, 4096, 16384):
        heads = 16 * 16384 // seq
        t = flash_attention_seconds(heads, seq, seq, 128, 128, True, H100, kernel="flash2")
        per_flop.append(t / (heads * seq * seq))
    assert per_flop[0] > per_flop[1] > per_flop[2]
    for seq in ATTENTION_LENGTHS:     # cuDNN's kernel beats FlashAttention-2's at every length
        for kind in ("causal", "full", "backward"):
            assert attention_efficiency(kind, seq, "hopper", "flash") > attention_efficiency(
                kind, seq, "hopper", "flash2")


def test_sliding_window_counts_equal_a_brute_force_over_queries_and_blocks():
    """With a window of w keys, query p sees keys max(0, p - w + 1) .. p; FlashAttention
    computes, per query block, the key blocks from the one holding its first query's oldest key
    to its diagonal block. Both counts against a loop over every query and block; a window as
    long as the keys counts as no window."""
    from ringccl.planner.kernels import causal_pairs_flops
    rng = np.random.default_rng(1)
    for _ in range(300):
        bq = bk = int(rng.choice([64, 128]))
        s = int(rng.integers(1, 2000))
        w = int(rng.integers(1, 2500))
        pairs = sum(min(p + 1, w) for p in range(s))
        assert causal_pairs_flops(s, s, 64, 64, 0, w) == 2.0 * 128 * pairs
        blocks = 0
        for j in range(-(-s // bq)):
            first, rows = bq * j, min(bq, s - bq * j)
            start = bk * (max(0, first - w + 1) // bk)
            end = min(s, bk * -(-(first + bq) // bk))
            blocks += rows * (end - start)
        assert flash_attention_flops(s, s, 64, 64, True, (bq, bk), window=w) == 2.0 * 128 * blocks
        if w >= s:
            assert flash_attention_flops(s, s, 64, 64, True, (bq, bk), window=w) == \
                flash_attention_flops(s, s, 64, 64, True, (bq, bk))


def test_a_sliding_window_prices_attention_by_the_keys_it_computes():
    """32K tokens with a 4K window: the forward computes about w/(s/2) = 1/4 of the causal
    pairs (Hopper's measured rates are per causal pair); its rate read at the window's length
    (slower per FLOP than 32K's)."""
    from ringccl.planner.kernels import causal_pairs_flops
    full = flash_attention_seconds(32, 32768, 32768, 128, 128, True, H100)
    windowed = flash_attention_seconds(32, 32768, 32768, 128, 128, True, H100, window=4096)
    share = causal_pairs_flops(32768, 32768, 128, 128, 0, 4096) / \
        causal_pairs_flops(32768, 32768, 128, 128, 0)
    assert 0.2 < share < 0.25
    rate = attention_efficiency("causal", 4096) / attention_efficiency("causal", 32768)
    assert windowed == pytest.approx(full * share / rate, rel=1e-12)
