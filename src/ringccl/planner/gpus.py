"""GPU presets: the published figures a step's compute is timed from.

Per GPU: streaming multiprocessors (SMs), dense tensor-core peaks in BF16 and FP8 (no 2:4
sparsity: NVIDIA's Hopper and Blackwell datasheets print the sparse figure, marked ``*``; the
dense one is half of it), HBM capacity and bandwidth, and NVLink bandwidth per direction. Each
number's source is in :data:`SOURCES`; the same figures, with what was read to check them, are
in the repository's ``benchmarks/gpu_specs.json`` (a test checks that the two agree).

Two constants per architecture are not datasheet figures (:class:`GPU`'s ``gemm_efficiency``
and ``memory_efficiency``). ``gemm_efficiency``, the fraction of the tensor peak the main loop
of a large GEMM sustains, is fitted once on the validation split of the published runs by
``benchmarks/fit_planner.py`` (one value per architecture; Blackwell, with no published run,
takes Hopper's). ``memory_efficiency``, the fraction of HBM bandwidth a large streaming kernel
sustains, is cited: 0.90 for transfers of 100 MB and more in Calculon's A100 and H100 system
files (Isaev et al., SC23; calculon ``systems/a100_80g.json``, ``h100_80g_nvl8.json``).
:data:`FITTED` holds both.

One more constant is solved from a published kernel-level measurement, not from step times:
:data:`SCORE_PASS_EFFICIENCY`, the fraction of HBM bandwidth that unfused attention's passes
over the s × s scores sustain (Megatron's fused scale-mask-softmax and the dropout, forward and
backward). Korthikanti et al. 2022, Table 4, times one 22B layer (t = 8, b = 4, s = 2048, A100)
with and without selective recompute; the backward's difference is the attention core's
forward, re-run: 13.2 − 11.9 = 1.3 ms, and 13.1 − 11.8 = 1.3 ms with sequence parallelism.
Its two batched GEMMs at ``gemm_efficiency`` leave the rest to the score passes, whose bytes
(:mod:`ringccl.planner.softmax`, the dropout's 2 + 2 + 1 per score) give the fraction.
``benchmarks/fit_planner.py`` solves it together with the GEMM fraction (each depends on the
other) to a fixed point. These passes are slower than a streaming copy: a row reduction per
score row (softmax), a random number per score (dropout).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import ArgumentError

__all__ = ["GPU", "GPU_PRESETS", "SOURCES", "FITTED", "SCORE_PASS_EFFICIENCY", "gpu_preset",
           "resolve_gpu"]

_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (2021, r4), spec table, SXM column"
_A100_WP = "NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), Table 3"
_H100_DS = ("NVIDIA H100 Tensor Core GPU datasheet, spec table, H100 SXM column (sparse "
            "figures halved)")
_H100_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), Table 3 (H100 SXM5)"
_H800_DS = "NVIDIA H800 Tensor Core GPU datasheet (2023), spec table, H800 SXM column"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (2024), spec table, H200 SXM column"
_B200_DS = ("NVIDIA DGX B200 / HGX B200 datasheet (2024), per-system figures / 8 GPUs, sparse "
            "figures halved")

#: where each preset's figures come from
SOURCES: dict[str, dict[str, str]] = {
    "a100-sxm4-40gb": {"peaks": _A100_DS, "sm_count": _A100_WP, "hbm": _A100_WP,
                       "nvlink": _A100_WP + " (12 NVLink 3 links, 600 GB/s both directions)"},
    "a100-sxm4-80gb": {"peaks": _A100_DS, "sm_count": _A100_WP + " (same GA100 configuration)",
                       "hbm": _A100_DS + " (2,039 GB/s)", "nvlink": _A100_DS},
    "h100-sxm5-80gb": {"peaks": _H100_DS + "; " + _H100_WP, "sm_count": _H100_WP,
                       "hbm": _H100_DS + " (3.35 TB/s)", "nvlink": _H100_DS + " (900 GB/s)"},
    "h800-sxm5-80gb": {"peaks": _H800_DS, "sm_count": "not printed; the H100 SXM5's GH100 "
                       "configuration", "hbm": _H800_DS, "nvlink": _H800_DS + " (400 GB/s)"},
    "h200-sxm-141gb": {"peaks": _H200_DS, "sm_count": "not printed; the H100 SXM5's GH100 "
                       "compute", "hbm": _H200_DS + " (141 GB HBM3e, 4.8 TB/s)",
                       "nvlink": _H200_DS + " (900 GB/s)"},
    "b200-hgx": {"peaks": _B200_DS, "sm_count": "not printed by NVIDIA; 148, the count kernel "
                 "sources (CUTLASS, FlashAttention-4) use", "hbm": _B200_DS + " (8 TB/s)",
                 "nvlink": _B200_DS + " (NVLink 5, 1.8 TB/s per GPU)"},
}

#: architecture -> (gemm_efficiency fitted, memory_efficiency cited) (module doc)
FITTED = {"ampere": (0.723, 0.90), "hopper": (0.583, 0.90), "blackwell": (0.583, 0.90),
          "source": "benchmarks/fit_planner.py on the validation rows of "
                    "benchmarks/published_runs.json (Blackwell: Hopper's, no published run)"}

#: the fraction of HBM bandwidth unfused attention's softmax and dropout passes over the scores
#: sustain (module doc: solved from Korthikanti et al. 2022 Table 4 by fit_planner.py)
SCORE_PASS_EFFICIENCY = 0.606


@dataclass(frozen=True)
class GPU:
    """One GPU model.

    Attributes (SI units):
        name: the preset's key. architecture: "ampere", "hopper" or "blackwell".
        sm_count: streaming multiprocessors (the unit GEMM tiles are scheduled on).
        bf16_flops, fp8_flops: dense tensor-core peaks, FLOP/s (fp8 0: no FP8 tensor cores).
        hbm_bytes, hbm_bandwidth: memory, bytes and bytes/s.
        nvlink_bandwidth: bytes/s per direction per GPU.
        gemm_efficiency: the fraction of the peak a large GEMM sustains (fitted, module doc).
        memory_efficiency: the fraction of ``hbm_bandwidth`` a streaming kernel sustains.
        compute_profile: a ``ringccl calibrate`` profile whose measured timings replace the
            model's (:mod:`ringccl.planner.kernels`); "" for none.
    """

    name: str
    architecture: str
    sm_count: int
    bf16_flops: float
    fp8_flops: float
    hbm_bytes: float
    hbm_bandwidth: float
    nvlink_bandwidth: float
    gemm_efficiency: float
    memory_efficiency: float
    compute_profile: str = ""

    def peak(self, fp8: bool = False) -> float:
        """The dense tensor peak, FLOP/s, of BF16 (or FP8) GEMMs.

        Raises:
            ArgumentError: FP8 on a GPU without FP8 tensor cores (A100).
        """
        if not fp8:
            return self.bf16_flops
        if not self.fp8_flops:
            raise ArgumentError(f"gpu={self.name!r} has no FP8 tensor cores; use precision "
                                "'bf16' on it")
        return self.fp8_flops

    def to_dict(self) -> dict:
        return dict(vars(self))


def _gpu(name, arch, sms, bf16_tflops, fp8_tflops, hbm_gb, hbm_gbps, nvlink_gbps) -> GPU:
    gemm, mem = FITTED[arch]
    # a datasheet's memory "GB" is binary (HBM stacks of 2**30-byte gigabytes: the driver
    # reports an A100 80GB's as 81,920 MiB); its bandwidths and peaks are decimal
    return GPU(name, arch, sms, bf16_tflops * 1e12, fp8_tflops * 1e12, hbm_gb * 2**30,
               hbm_gbps * 1e9, nvlink_gbps * 1e9, gemm, mem)


#: the presets (figures of :data:`SOURCES`); NVLink per direction = half the bidirectional
GPU_PRESETS: dict[str, GPU] = {g.name: g for g in (
    _gpu("a100-sxm4-40gb", "ampere", 108, 312, 0, 40, 1555, 300),
    _gpu("a100-sxm4-80gb", "ampere", 108, 312, 0, 80, 2039, 300),
    _gpu("h100-sxm5-80gb", "hopper", 132, 989.4, 1978.9, 80, 3350, 450),
    _gpu("h800-sxm5-80gb", "hopper", 132, 989.4, 1978.9, 80, 3350, 200),
    _gpu("h200-sxm-141gb", "hopper", 132, 989.4, 1978.9, 141, 4800, 450),
    _gpu("b200-hgx", "blackwell", 148, 2250, 4500, 180, 8000, 900),
)}

_ALIASES = {"a100": "a100-sxm4-80gb", "h100": "h100-sxm5-80gb", "h800": "h800-sxm5-80gb",
            "h200": "h200-sxm-141gb", "b200": "b200-hgx"}


def gpu_preset(name: str) -> GPU:
    """The preset ``name`` (a key of :data:`GPU_PRESETS` or a short alias: a100, h100, h800,
    h200, b200).

    Raises:
        ArgumentError: unknown name, listing the presets.
    """
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    try:
        return GPU_PRESETS[key]
    except KeyError:
        raise ArgumentError(f"gpu={name!r} is not a preset; expected one of "
                            f"{', '.join(GPU_PRESETS)} (or {', '.join(_ALIASES)})") from None


def resolve_gpu(gpu, **overrides) -> GPU:
    """A :class:`GPU` from one or a preset name, with fields replaced by ``overrides`` (those
    not None).

    Raises:
        ArgumentError: unknown preset or field, a value <= 0.
    """
    base = gpu if isinstance(gpu, GPU) else gpu_preset(gpu)
    changes = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(changes) - set(GPU.__dataclass_fields__))
    if unknown:
        raise ArgumentError(f"unknown GPU field(s) {', '.join(unknown)}")
    for k, v in changes.items():
        if k not in ("name", "architecture", "compute_profile") and (isinstance(v, bool) or
                                                   not isinstance(v, (int, float)) or v < 0):
            raise ArgumentError(f"{k}={v!r} must be a number >= 0")
    return replace(base, **changes) if changes else base
