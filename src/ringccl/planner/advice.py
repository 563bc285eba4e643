"""Warnings on a planned step, each with the first change to try.

Five kinds (:func:`plan_warnings`):

* ``bubble``: the pipeline's idle time is more than :data:`BUBBLE_LIMIT` of the step (the
  1F1B bubble is (p − 1)/m of the ideal time, Narayanan et al. 2021 §2.2.1, so (p − 1)/(m + p −
  1) of the step);
* ``memory``: a stage needs more than the GPU holds;
* ``schedule``: the interleaved schedule with one model chunk per rank (``virtual_stages`` 1),
  which is 1F1B;
* ``default``: a value the plan did not get decided the result: the framework (bytes per
  parameter, sequence parallelism, FlashAttention, ...) or the global batch (the bubble, the
  MFU and the activations in flight);
* ``profile``: a compute profile (``ringccl calibrate``) measured on another kind of device than
  the cluster's GPU (e.g. this machine's CPU for an H100 cluster), or without a 16-bit dtype
  for a bf16 plan: its timings replace the GPU's, so the step is the profiled device's; or
  timed at other GEMM shapes than the plan's layers (another model, sequence, micro-batch or
  tp), which are then priced at the nearest timed shape's efficiency; a network profile (``ringccl fit`` on nccl-tests logs) fitted on another GPU generation, or
  without a level the plan uses (one node's logs for a plan across nodes): that level is the
  fit's starting preset's, not measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import units
from ..bench.compute import layer_gemms
from ..costmodel.nccl_fit import load_network_profile, network_profile_levels
from ..errors import ArgumentError
from .frameworks import DEFAULT_WHY, FRAMEWORKS, family
from .kernels import compute_profile, profile_dtype
from .model import PRESETS
from .parallel_dims import BATCH_RULE, ParallelDims
from .step import StageEstimate, StepEstimate

__all__ = ["PlanWarning", "plan_warnings", "BUBBLE_LIMIT"]

#: the bubble's share of the step above which the plan warns
BUBBLE_LIMIT = 0.25


@dataclass(frozen=True)
class PlanWarning:
    """One warning: its ``kind`` ("bubble", "memory", "schedule", "default", "profile"), what
    the plan found (``message``) and the first change to try (``first_change``)."""

    kind: str
    message: str
    first_change: str

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.message}; first try: {self.first_change}"


def _bubble(p: StepEstimate) -> PlanWarning | None:
    dims = p.dims
    share = p.bubble_seconds / p.step_seconds
    if dims.pp < 2 or share <= BUBBLE_LIMIT:
        return None
    m, v, per = dims.num_micro_batches, dims.virtual_stages, dims.dp * dims.micro_batch_size
    if (m % dims.pp == 0 and dims.schedule != "gpipe"
            and p.model.num_hidden_layers >= 2 * v * dims.pp):
        change = (f"--schedule interleaved --virtual-stages {2 * v} (the bubble "
                  f"(pp - 1)/(v x m) halves)")
    elif m < 4 * dims.pp:
        change = (f"--global-batch-size {4 * dims.pp * per} (4 x pp = {4 * dims.pp} "
                  f"micro-batches of dp x micro_batch_size = {per} sequences)")
    else:
        change = f"fewer pipeline stages than pp={dims.pp}"
    formula = "(pp - 1)/(v x m)" if dims.schedule == "interleaved" else "(pp - 1)/m"
    return PlanWarning("bubble", f"the pipeline bubble is {100 * share:.0f}% of the step "
                       f"(pp={dims.pp}, {m} micro-batches: {formula} = "
                       f"{100 * p.bubble_fraction:.0f}% of the ideal time)", change)


def _activation_change(dims: ParallelDims) -> str:
    if dims.tp > 1 and not dims.sp:
        return f"--sp (sequence parallelism divides every activation by tp={dims.tp})"
    if dims.attention == "unfused":
        return "--attention flash (no s x s attention scores kept)"
    if dims.recompute != "full":
        return "--recompute full (keeps only each layer's input)"
    if dims.micro_batch_size > 1:
        return "--micro-batch-size 1"
    return "more pipeline or context parallelism (--pp, --cp)"


def _state_change(dims: ParallelDims) -> str:
    if dims.zero_stage == 0 and dims.dp * dims.cp > 1:
        what = ("Megatron's distributed optimizer" if family(dims.framework) == "megatron"
                else "ZeRO-1")
        return f"--zero 1 ({what}: the optimizer state sharded over dp)"
    if dims.zero_stage in (0, 1, 2) and dims.pp == 1 and dims.dp * dims.cp > 1:
        return "--zero 3 (weights, gradients and optimizer state sharded over dp)"
    return f"more tensor or pipeline parallelism than tp={dims.tp}, pp={dims.pp}"


def _memory(p: StepEstimate) -> PlanWarning | None:
    if p.fits_memory:
        return None
    worst: StageEstimate = max(p.stages, key=lambda s: s.memory.total)
    mem, f = worst.memory, units.format_size
    states = mem.weights + mem.gradients + mem.optimizer
    change = (_activation_change(p.dims) if mem.activations >= states
              else _state_change(p.dims))
    return PlanWarning("memory", f"stage {worst.stage} needs {f(mem.total)} per GPU, more than "
                       f"the {f(p.cluster.gpu_memory)} it has (weights {f(mem.weights)}, "
                       f"gradients {f(mem.gradients)}, optimizer {f(mem.optimizer)}, "
                       f"activations {f(mem.activations)}, buffers {f(mem.communication)})",
                       change)


def _defaults(p: StepEstimate) -> list[PlanWarning]:
    dims, out = p.dims, []
    filled = dims.from_preset
    if "framework" in filled:
        preset = [f"{k}={getattr(dims, k)}" for k in filled
                  if k not in ("framework", "global_batch_size")]
        others = "|".join(f for f in FRAMEWORKS if f != dims.framework)
        out.append(PlanWarning(
            "default", f"the framework is {dims.framework} by default ({DEFAULT_WHY}); its "
            f"preset decided {', '.join(preset)}", f"--framework {others} if your job runs "
            "another"))
    if "global_batch_size" in filled:
        tokens = dims.global_batch_size * p.model.seq_length
        out.append(PlanWarning(
            "default", f"the global batch ({dims.global_batch_size} sequences = {tokens:,} "
            f"tokens, {dims.num_micro_batches} micro-batches) is the default rule's: "
            f"{BATCH_RULE}; the bubble, MFU and activations in flight depend on it",
            "--global-batch-size of your job (sequences per step)"))
    return out


def _layer_gemms(p: StepEstimate) -> list:
    """The GEMM shapes of one of the plan's dense layers on one TP rank, as ``ringccl calibrate
    --model`` times them (the sequence divided by cp); [] for what that helper does not lay
    out (MLA attention) or refuses."""
    m, d = p.model, p.dims
    if m.mla:
        return []
    try:
        return layer_gemms(m.hidden_size, m.intermediate_size, m.num_attention_heads,
                           max(1, m.seq_length // d.cp), d.micro_batch_size, d.tp,
                           m.num_key_value_heads, m.gated_mlp, head_dim=m.head_dim)
    except ArgumentError:
        return []


def _profile_shapes(p: StepEstimate) -> PlanWarning | None:
    path = p.cluster.compute_profile
    if not path:
        return None
    profile = compute_profile(path)
    shapes = _layer_gemms(p)
    timed = {(g["m"], g["n"], g["k"]) for g in profile.data["gemm"]}
    missed = [g for g in shapes if tuple(g[1:]) not in timed]
    if not missed:
        return None
    m, d = p.model, p.dims
    where = profile.data.get("settings", {}).get("shapes_from", "shapes not recorded")
    model = (f"--model {m.name}" if m.name in PRESETS else
             f"--hidden-size {m.hidden_size} --intermediate-size {m.intermediate_size} "
             f"--num-attention-heads {m.num_attention_heads} --num-key-value-heads "
             f"{m.num_key_value_heads}" + ("" if m.gated_mlp else " --no-gated-mlp"))
    return PlanWarning(
        "profile", f"the compute profile {path} did not time {len(missed)} of the "
        f"{len(shapes)} GEMM shapes of this plan's layers (it was measured on {where}): each "
        "is priced at the efficiency of the timed GEMM nearest in FLOPs",
        f"ringccl calibrate {model} --seq-length {max(1, m.seq_length // d.cp)} "
        f"--micro-batch-size {d.micro_batch_size} --tp {d.tp} --out PROFILE")


def _profile(p: StepEstimate) -> PlanWarning | None:
    path = p.cluster.compute_profile
    if not path:
        return None
    profile = compute_profile(path)   # read once, as the pricing reads it
    device = profile.data["device"]
    kind = str(device.get("type", "")).lower()
    gpu = p.cluster.gpu_spec
    calibrated = list(profile.data["peak_flops"])
    # the pricing times a bf16 plan's GEMMs at the profile's 16-bit dtype, else its first
    sixteen_bit = profile_dtype(profile) in ("bfloat16", "float16")
    if kind == "cuda" and (p.dims.precision != "bf16" or sixteen_bit):
        return None
    where = f"{device.get('name', '?')} ({kind or 'unknown device'}, {', '.join(calibrated)})"
    return PlanWarning("profile", f"the compute profile {path} was measured on {where}, not on "
                       f"the cluster's {gpu.name}: its timings replace the GPU's, so the step "
                       "is that device's", "ringccl calibrate --out PROFILE on a GPU of the "
                       "cluster (CUDA, --dtype bfloat16), or plan without the compute profile")


def _network(p: StepEstimate) -> PlanWarning | None:
    path = p.cluster.network_profile
    if not path:
        return None
    try:
        prior, fitted = network_profile_levels(path)
        machine = load_network_profile(path)
    except ArgumentError:  # not a network profile: the pricing refused it already
        return None
    used = [k for k, n in (("intra", p.cluster.gpus_per_node), ("inter", p.cluster.nodes))
            if n > 1]
    unfitted = [k for k in used if k not in fitted]
    arch = p.cluster.gpu_spec.architecture
    problems = []
    if unfitted:
        problems.append(f"fitted {' and '.join(fitted) or 'no level'} only: the plan's "
                        f"{' and '.join(unfitted)} links are the {prior} preset's, not measured")
    if machine.gpu != arch:
        problems.append(f"was fitted on {prior} ({machine.gpu}), not on the cluster's "
                        f"{p.cluster.gpu_spec.name} ({arch}): its links replace the cluster's")
    if not problems:
        return None
    return PlanWarning("profile", f"the network profile {path} " + "; it ".join(problems),
                       "ringccl fit --json on nccl-tests logs of the cluster's machines (inside "
                       "one node and across nodes), or plan without the network profile")


def _schedule(p: StepEstimate) -> PlanWarning | None:
    dims = p.dims
    if dims.schedule != "interleaved" or dims.virtual_stages > 1 or dims.pp < 2:
        return None
    return PlanWarning("schedule", "schedule interleaved with one model chunk per pipeline rank "
                       "(virtual_stages 1) is 1F1B", "--virtual-stages 2 (model chunks per "
                       "rank: Megatron-LM's --num-layers-per-virtual-pipeline-stage = layers "
                       "per stage / 2)")


def plan_warnings(p: StepEstimate) -> list[PlanWarning]:
    """The warnings of the planned step ``p`` (the module docstring lists them), memory
    first."""
    return [w for w in (_memory(p), _bubble(p), _schedule(p), _profile(p), _profile_shapes(p),
                        _network(p)) if w is not None] + _defaults(p)
