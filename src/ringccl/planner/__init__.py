"""The planner: the communication of a whole training step, for any layout on a cluster.

``ringccl.plan(model, layout, cluster)`` lists, per rank position (PP stage), every collective
of one step — kind, group and its placement on nodes, bytes, calls, the algorithm the tuner
picks on that placement, predicted time, overlapped or exposed — and the step it adds up to:
compute, exposed communication per parallelism, the pipeline bubble, step time, tokens/s, MFU
and memory per rank. :func:`search` ranks the valid layouts of a model on N GPUs.

Modules, each importing only those before it: :mod:`.model` (shapes, parameters, FLOPs,
presets), :mod:`.hf_families` and :mod:`.hf_config` (Hugging Face config.json files of every
family), :mod:`.frameworks` (what Megatron-LM, DeepSpeed, FSDP2 and torchtitan hold and do),
:mod:`.parallel_dims` (:class:`ParallelDims`: the layout's degrees and its refusals),
:mod:`.cluster` (the machine, a straggler), :mod:`.config` (the ``--config`` file merged with
the command line), :mod:`.groups` (rank grid → groups → nodes), :mod:`.stages` (what each PP
stage holds), :mod:`.costing` (one collective priced on its group's placement),
:mod:`.context` (one plan's inputs and grid, built once), :mod:`.inventory` (the collectives,
one builder per parallelism), :mod:`.memory` (bytes per rank), :mod:`.stage_memory` (a
stage's bytes as its framework holds them), :mod:`.step` (the step), :mod:`.advice` (the
warnings),
:mod:`.search` (the layout search), :mod:`.emit` (the step file), :mod:`.replay` (the replayed
step re-predicted). Formulas and sources: docs/planner.md.
"""

from __future__ import annotations

from ..errors import ArgumentTypeError
from .advice import PlanWarning, plan_warnings
from .cluster import (CLUSTER_PRESETS, Cluster, Straggler, cluster_preset, load_profile,
                      resolve_cluster)
from .costing import Entry
from .frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS
from .hf_config import load_config, resolve_model
from .model import PRESETS, ModelConfig
from .parallel_dims import ParallelDims, resolve_dims
from .search import SearchResult, search
from .step import StageEstimate, StepEstimate, estimate_step

__all__ = ["plan", "search", "estimate_step", "ModelConfig", "ParallelDims", "Cluster",
           "Straggler", "StepEstimate", "StageEstimate", "Entry", "SearchResult", "PRESETS",
           "CLUSTER_PRESETS", "cluster_preset", "load_config", "load_profile", "resolve_model",
           "resolve_cluster", "resolve_dims", "PlanWarning", "FRAMEWORKS", "DEFAULT_FRAMEWORK"]


def plan(model, layout, cluster, *, straggler=None, seq_length: int | None = None,
         dtype: str | None = None) -> StepEstimate:
    """The communication and time of one training step.

    Example::

        p = ringccl.plan("llama3-70b", {"tp": 8, "pp": 4, "dp": 32, "num_micro_batches": 16},
                         {"preset": "dgx-a100", "nodes": 128})
        p.step_seconds, p.mfu, p.to_dict()["stages"][0]["collectives"]

    Args:
        model: a preset name (``ringccl.planner.PRESETS``), a Hugging Face config.json path, a
            config dict or a :class:`ModelConfig`.
        layout: the parallel layout, a :class:`ParallelDims` or a dict of its fields (dp, tp,
            sp, cp, pp, ep, zero_stage, micro_batch_size, num_micro_batches /
            global_batch_size, schedule, virtual_stages, recompute, order, framework,
            attention, ...); what is left out comes from the framework's preset and
            the default global batch rule.
        cluster: a :class:`Cluster`, a preset name or a dict (``preset``, ``nodes``, rates in
            human units such as ``"400Gbps"``, ``profile``: a ``ringccl fit --json`` file).
        straggler: None, a :class:`Straggler` or ``(rank, fraction)``: that rank's NIC at a
            fraction of its bandwidth.
        seq_length, dtype: override the model's.
    Returns:
        :class:`StepEstimate` (``to_dict()`` gives strict-JSON-ready values) with its
        ``warnings`` (:func:`~ringccl.planner.advice.plan_warnings`).
    Raises:
        ArgumentError: a refused layout (naming the field), unknown presets, bad values.
    """
    cfg = resolve_model(model, seq_length=seq_length, dtype=dtype)
    if straggler is not None and not isinstance(straggler, Straggler):
        if not isinstance(straggler, (tuple, list)) or not 2 <= len(straggler) <= 3:
            raise ArgumentTypeError(f"straggler={straggler!r} must be None, a Straggler or "
                                    "(rank, fraction[, link])")
        straggler = Straggler(*straggler)
    estimate = estimate_step(cfg, resolve_dims(layout), resolve_cluster(cluster), straggler)
    estimate.warnings = plan_warnings(estimate)
    return estimate
