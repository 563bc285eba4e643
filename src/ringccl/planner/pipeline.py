"""Pipeline schedules: one table, each schedule with its bubble, its in-flight activations, the
copies of the parameters it keeps, which of its sends hide behind compute, and its refusals.

Notation (per rank, per micro-batch, through all of the rank's layers): ``F`` the forward, ``B``
the backward for the inputs' gradient, ``W`` the backward for the weights' gradient (Qi et al.
split the backward into these two passes; a schedule that does not split runs ``B + W`` as one
pass), ``p`` ranks in the pipeline, ``m`` micro-batches per step, ``v`` model chunks per rank.

=============== =============================== ====================== ==========================
schedule         bubble (seconds)                in flight (stage r)    source
=============== =============================== ====================== ==========================
gpipe            (p − 1)(F + B + W)              m                      Huang et al. 2019;
                                                                        Narayanan et al. 2021 §2.2.1
1f1b             (p − 1)(F + B + W)              min(p − r, m)          Narayanan et al. 2021 §2.2.1
interleaved      (p − 1)(F + B + W) / v          Megatron's warm-up     Narayanan et al. 2021 §2.2.2
zb-h1            (p − 1)(F + B − W)              min(p − r, m)          Qi et al. 2024 §2.1
zb-h2            (p − 1)·max(0, F + B − 2W)      min(2(p − r) − 1, m)   Qi et al. 2024 §2.2
dualpipe         (p/2 − 1)(F&B + B' − 3W')       p + 1 stage-passes     DeepSeek-V3 §3.2.1, Table 2
dualpipev        (P/2 − 1)(F&B + B' − 3W'),      P + 1 chunk-passes     DualPipe repository
                 P = 2p stages                                          (DualPipeV, "cut-in-half")
=============== =============================== ====================== ==========================

In the DualPipe rows (DeepSeek-V3 Table 2 and the DualPipe repository's table) ``F``, ``B'``
and ``W'`` are one *stage's* forward, full backward (B + W) and weight backward, and ``F&B`` is
a forward and a backward chunk of two micro-batches run together, their communication hidden
under each other's compute: here ``F&B = F + B'`` of compute. DualPipe gives each rank two
stages (r and p − 1 − r: the micro-batches fed from both ends), so it keeps 2× the parameters
and each of its *passes* carries one micro-batch of each direction through one of the two
stages: m/2 passes through the rank's layers per step. DualPipeV cuts it in half: p ranks, 2p
stages in a V (rank r holds chunks r and 2p − 1 − r), one copy of the parameters.

In-flight activations are in units of one pass through all of the rank's layers (for the
interleaved schedule chunk-activations / v; for DualPipe (p + 1) stage-activations / 2; for
DualPipeV (2p + 1) chunk-activations / 2), so a rank's activation memory is that many times
:func:`~ringccl.planner.memory.activation_bytes` of its layers. The ZB rows count what the B
pass frees (its activations), as Qi et al. do; the W pass keeps less (their Table 1).

Every bubble here is the idle time of the busiest rank inside its own window, which the schedule
simulator (:mod:`ringccl.planner.timeline`) reproduces exactly for equal stages (tests): ZB-H2's
window is a parallelogram, zero-bubble only when the optimizer step does not synchronise the
stages (Qi et al. §4, post-validation).

References:
    Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
        Megatron-LM", SC21 (arXiv:2104.04473), §2.2.
    Huang et al., "GPipe", NeurIPS 2019 (arXiv:1811.06965).
    Qi, Wan, Huang & Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024 (arXiv:2401.10241),
        §2 (handcrafted schedules ZB-H1, ZB-H2), Table 1 (memory of F, B, W).
    DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, §3.2.1 and Table 2.
    deepseek-ai/DualPipe, README.md ("Pipeline Bubbles and Memory Usage Comparison") and
        dualpipe/dualpipe.py, dualpipe/dualpipev.py (the step's asserts).
    PyTorch, torch/distributed/pipelining/schedules.py (``ScheduleInterleavedZeroBubble``,
        ``ScheduleDualPipeV``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..args import check_int
from ..errors import ArgumentError

__all__ = ["PipelineSchedule", "SCHEDULES", "SCHEDULE_NAMES", "get_schedule", "check_schedule",
           "chunks_per_rank", "passes_per_step", "bubble_seconds", "pipeline_seconds",
           "pipeline_lower_bound", "pipeline_bubble_fraction", "in_flight_micro_batches"]


@dataclass(frozen=True)
class PipelineSchedule:
    """One pipeline schedule.

    Attributes:
        name: as ``ParallelDims.schedule`` spells it.
        title, source: what it is and where its formulas come from.
        split_backward: runs the backward as two passes, B (inputs) then W (weights).
        parameter_copies: stages' worth of parameters a rank holds per stage it computes (2 for
            DualPipe: stages r and p − 1 − r).
        hidden_sends: the parallelisms whose communication hides behind the compute of another
            micro-batch's chunk (DualPipe's F&B pairs: the PP sends and the MoE all-to-alls).
        bubble, in_flight: the formulas (see the module docstring).
    """

    name: str
    title: str
    source: str
    split_backward: bool
    parameter_copies: int
    hidden_sends: tuple
    bubble: str
    in_flight: str


SCHEDULES: dict[str, PipelineSchedule] = {s.name: s for s in (
    PipelineSchedule("1f1b", "1F1B (PipeDream-Flush)", "Narayanan et al. 2021 §2.2.1",
                     False, 1, (), "(p-1)(F+B+W)", "min(p-r, m)"),
    PipelineSchedule("interleaved", "interleaved 1F1B, v chunks per rank",
                     "Narayanan et al. 2021 §2.2.2", False, 1, (), "(p-1)(F+B+W)/v",
                     "Megatron's warm-up, min(2(p-r-1)+(v-1)p+1, mv)/v"),
    PipelineSchedule("gpipe", "GPipe", "Huang et al. 2019; Narayanan et al. 2021 §2.2.1", False,
                     1, (), "(p-1)(F+B+W)", "m"),
    PipelineSchedule("zb-h1", "ZB-H1 (zero bubble, 1F1B's memory)", "Qi et al. 2024 §2.1", True,
                     1, (), "(p-1)(F+B-W)", "min(p-r, m)"),
    PipelineSchedule("zb-h2", "ZB-H2 (zero bubble, 2p-1 in flight)", "Qi et al. 2024 §2.2",
                     True, 1, (), "(p-1)max(0, F+B-2W)", "min(2(p-r)-1, m)"),
    PipelineSchedule("dualpipe", "DualPipe (bidirectional)",
                     "DeepSeek-V3 §3.2.1, Table 2", True, 2, ("pp", "ep"),
                     "(p/2-1)(F&B+B'-3W') per stage", "(p+1) stage-passes"),
    PipelineSchedule("dualpipev", "DualPipeV (DualPipe cut in half, V-shape)",
                     "deepseek-ai/DualPipe README; torch ScheduleDualPipeV", True, 1,
                     ("pp", "ep"), "(2p/2-1)(F&B+B'-3W') per chunk", "(2p+1) chunk-passes"),
)}
SCHEDULE_NAMES = tuple(SCHEDULES)

_ALIASES = {"interleaved_1f1b": "interleaved", "interleaved-1f1b": "interleaved",
            "zbh1": "zb-h1", "zbh2": "zb-h2"}


def get_schedule(name) -> PipelineSchedule:
    """The :class:`PipelineSchedule` called ``name`` (case-insensitive).

    Raises:
        ArgumentError: an unknown name, listing the known ones.
    """
    key = name.lower() if isinstance(name, str) else None
    key = _ALIASES.get(key, key)
    if key not in SCHEDULES:
        raise ArgumentError(f"schedule={name!r} is not one of {', '.join(SCHEDULE_NAMES)}")
    return SCHEDULES[key]


def chunks_per_rank(schedule: str, virtual_stages: int = 1) -> int:
    """Model chunks a rank holds: v for the interleaved schedule, 2 for DualPipe (stages r and
    p − 1 − r) and DualPipeV (chunks r and 2p − 1 − r), else 1."""
    name = get_schedule(schedule).name
    if name in ("dualpipe", "dualpipev"):
        return 2
    return virtual_stages if name == "interleaved" else 1


def passes_per_step(schedule: str, num_micro_batches: int) -> int:
    """Passes through all of a rank's layers per step: m, or m/2 for DualPipe (each pass is one
    micro-batch of each direction through one of the rank's two stages)."""
    return num_micro_batches // 2 if get_schedule(schedule).name == "dualpipe" else \
        num_micro_batches


def check_schedule(schedule: str, *, pp: int, num_micro_batches: int,
                   virtual_stages: int = 1) -> str:
    """Refuse a schedule that cannot run ``pp`` ranks, ``m`` micro-batches and ``v`` chunks.

    - virtual_stages > 1 only with "interleaved" (and 2 for "dualpipev", its V's two chunks);
    - interleaved: m a multiple of pp (Megatron-LM 2021 §2.2.2);
    - zb-h2: m >= 2·pp − 1, the warm-up's forwards (Qi et al. 2024 §2.2);
    - dualpipe: pp even and m even (DeepSeek-V3 §3.2.1: "the pipeline stages and
      micro-batches be divisible by 2"), m >= 2·pp (the DualPipe repository's assert);
    - dualpipev: m >= 2·pp (the repository's assert).

    Returns:
        the schedule's canonical name.
    Raises:
        ArgumentError naming the field, its value and what is allowed.
    """
    name = get_schedule(schedule).name
    p = check_int(pp, "pp", 1)
    m = check_int(num_micro_batches, "num_micro_batches", 1)
    v = check_int(virtual_stages, "virtual_stages", 1)
    if name == "dualpipev":
        if v != 2:
            raise ArgumentError(f"virtual_stages={v}: dualpipev holds exactly 2 chunks per rank "
                                "(its V), leave virtual_stages at 1 or give 2")
    elif v > 1 and name != "interleaved":
        raise ArgumentError(f"virtual_stages={v} needs schedule='interleaved' (got {name!r})")
    if name == "interleaved" and p > 1 and m % p:
        raise ArgumentError(f"num_micro_batches={m} must be a multiple of pp={p} for the "
                            "interleaved schedule (Megatron-LM 2021 §2.2.2)")
    if name == "zb-h2" and p > 1 and m < 2 * p - 1:
        raise ArgumentError(f"num_micro_batches={m} is too few for zb-h2 at pp={p}: its warm-up "
                            f"runs 2·pp − 1 = {2 * p - 1} forwards on the first stage (Qi et al. "
                            "2024 §2.2); use more micro-batches or zb-h1")
    if name == "dualpipe":
        if p % 2:
            raise ArgumentError(f"pp={p} is odd: dualpipe needs an even number of pipeline ranks "
                                "(DeepSeek-V3 §3.2.1: rank r also runs stage pp − 1 − r); use "
                                "dualpipev, which takes any pp")
        if m % 2:
            raise ArgumentError(f"num_micro_batches={m} is odd: dualpipe feeds half the "
                                "micro-batches from each end of the pipeline (DeepSeek-V3 "
                                "§3.2.1)")
    if name in ("dualpipe", "dualpipev") and m < 2 * p:
        raise ArgumentError(f"num_micro_batches={m} is too few for {name} at pp={p}: it needs "
                            f"at least 2·pp = {2 * p} (the DualPipe repository's step asserts "
                            "num_chunks >= 2 · num_ranks)")
    return name


def _unit(name: str, p: int, v: int, f: float, b: float, w: float) -> tuple[float, float]:
    """(slots, X): the bubble is ``slots · X`` for equal stages, X from one pass's F, B, W."""
    if name in ("1f1b", "gpipe"):
        return p - 1, f + b + w
    if name == "interleaved":
        return (p - 1) / v, f + b + w
    if name == "zb-h1":
        return p - 1, max(0.0, f + b - w)
    if name == "zb-h2":
        return p - 1, max(0.0, f + b - 2 * w)
    # DualPipe(V) per stage (chunk) = half a pass: F&B + B' − 3W' = F + 2B − W of a stage
    x = max(0.0, f + 2 * b - w) / 2
    return (p / 2 - 1 if name == "dualpipe" else p - 1), x


def bubble_seconds(schedule: str, *, pp: int, virtual_stages: int = 1, forward: float,
                   backward_input: float, backward_weight: float) -> float:
    """The bubble of equal stages (see the module table), seconds.

    Args:
        forward, backward_input, backward_weight: F, B, W of one pass through a rank's layers
            (seconds >= 0; for DualPipe a pass is two micro-batches, one per direction, each
            through one of the rank's two stages).
    """
    name = get_schedule(schedule).name
    p = check_int(pp, "pp", 1)
    if p == 1:
        return 0.0
    slots, x = _unit(name, p, check_int(virtual_stages, "virtual_stages", 1), forward,
                     backward_input, backward_weight)
    return slots * x


def pipeline_seconds(schedule: str, *, num_micro_batches: int, virtual_stages: int,
                     stages: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(pipeline time, bubble) of stages that differ, seconds.

    ``stages``: per PP rank (F, B, W) of one pass. The slowest rank paces the passes:
    ``passes · max τ``, τ = F + B + W; the fill and drain go through the other ranks:
    ``slots / (p − 1) · Σ_{s ≠ slowest} X_s`` — for 1F1B ``(Σ τ − max τ)/v``, which is
    Narayanan et al.'s ``(p − 1)·τ/v`` for equal stages (as :func:`bubble_seconds`).
    """
    name = get_schedule(schedule).name
    p, v = len(stages), virtual_stages
    tau = [f + b + w for f, b, w in stages]
    slow = max(range(p), key=tau.__getitem__)
    passes = passes_per_step(name, num_micro_batches)
    if p == 1:
        return passes * tau[0], 0.0
    xs = [_unit(name, p, v, f, b, w) for f, b, w in stages]
    slots = xs[0][0]
    bubble = slots / (p - 1) * sum(x for i, (_, x) in enumerate(xs) if i != slow)
    return passes * tau[slow] + bubble, bubble


def pipeline_lower_bound(schedule: str, *, num_micro_batches: int, virtual_stages: int,
                         stages: list[tuple[float, float, float]]) -> float:
    """A lower bound of :func:`pipeline_seconds` for every stage time at least ``stages``':
    ``passes · max τ + slots/(p − 1) · (Σ X − max X)``. Each X grows with its stage's times (it
    is linear in them and >= 0), and a sum less its largest term never shrinks when a term
    grows, so no longer stage makes the pipeline shorter than this."""
    name = get_schedule(schedule).name
    p = len(stages)
    passes = passes_per_step(name, num_micro_batches)
    top = max(f + b + w for f, b, w in stages)
    if p == 1:
        return passes * top
    xs = [_unit(name, p, virtual_stages, f, b, w) for f, b, w in stages]
    rest = sum(x for _, x in xs) - max(x for _, x in xs)
    return passes * top + xs[0][0] / (p - 1) * rest


def pipeline_bubble_fraction(*, schedule: str, pp: int, num_micro_batches: int,
                             virtual_stages: int = 1, forward: float = 1.0,
                             backward_input: float = 1.0, backward_weight: float = 1.0) -> float:
    """The bubble over the ideal compute time of a step (Narayanan et al. 2021, §2.2).

    (p − 1)/m for GPipe and 1F1B, (p − 1)/(v·m) interleaved, whatever F, B, W; the split
    schedules depend on them: with Qi et al.'s T_F = T_B = T_W (the defaults), ZB-H1's is a third
    of 1F1B's and ZB-H2's zero. The step takes ideal·(1 + fraction).

    Raises:
        ArgumentError: an unknown schedule, a value out of range.
        ArgumentTypeError: a non-integer count.
    """
    name = get_schedule(schedule).name
    m = check_int(num_micro_batches, "num_micro_batches", 1)
    bubble = bubble_seconds(name, pp=pp, virtual_stages=virtual_stages, forward=forward,
                            backward_input=backward_input, backward_weight=backward_weight)
    ideal = passes_per_step(name, m) * (forward + backward_input + backward_weight)
    return bubble / ideal if ideal > 0 else 0.0


def in_flight_micro_batches(*, schedule: str, pp: int, stage: int, num_micro_batches: int,
                            virtual_stages: int = 1) -> float:
    """How many passes' activations rank ``stage`` holds at its peak, in units of one pass
    through all of its layers (see the module table).

    - GPipe runs all m forwards before any backward: m (Narayanan et al. 2021, §2.2.1).
    - 1F1B and ZB-H1: stage r runs p − r − 1 warm-up forwards, then one forward per backward:
      min(p − r, m) (§2.2.1; Qi et al. 2024 §2.1: ZB-H1 keeps 1F1B's peak).
    - ZB-H2: 2(p − r) − 1 warm-up forwards: min(2(p − r) − 1, m) (Qi et al. §2.2: (2p − 1)·M_B).
    - Interleaved 1F1B with v chunks (§2.2.2): Megatron-LM's schedule
      (``forward_backward_pipelining_with_interleaving``) runs W = 2·(p − r − 1) + (v − 1)·p
      warm-up chunk-forwards (all m·v when m = p), so min(W + 1, m·v)/v; on the first stage
      p·(1 + (p − 1)/(p·v)), the factor Korthikanti et al. 2022 give in §4.2.3.
    - DualPipe: p + 1 stage-activations on every rank (DeepSeek-V3 Table 2), (p + 1)/2 passes.
    - DualPipeV: 2p + 1 chunk-activations (the DualPipe repository's table with PP = 2p
      stages), (2p + 1)/2 passes.

    With p = 1 the 1F1B value is 1 (forward and backward of each micro-batch in turn).

    Raises:
        ArgumentError: an unknown schedule, a value out of range.
        ArgumentTypeError: a non-integer count.
    """
    name = get_schedule(schedule).name
    p = check_int(pp, "pp", 1)
    m = check_int(num_micro_batches, "num_micro_batches", 1)
    v = check_int(virtual_stages, "virtual_stages", 1)
    r = check_int(stage, "stage", 0)
    if r >= p:
        raise ArgumentError(f"stage={r} is out of range for pp={p}; stage must be in [0, {p})")
    if name == "gpipe":
        return float(m)
    if name in ("1f1b", "zb-h1") or (name == "interleaved" and v == 1):
        return float(min(p - r, m))
    if name == "zb-h2":
        return float(min(2 * (p - r) - 1, m))
    if name == "dualpipe":
        return (p + 1) / 2
    if name == "dualpipev":
        return (2 * p + 1) / 2
    chunks = m * v
    warmup = chunks if m == p else min(2 * (p - r - 1) + (v - 1) * p, chunks)
    return min(warmup + 1, chunks) / v
