"""The planner: the communication of a whole training step, for any layout on a cluster.

``ringccl.plan(model, layout, cluster)`` lists, per rank position (PP stage), every collective
of one step — kind, group and its placement on nodes, bytes, calls, the algorithm the tuner
picks on that placement, predicted time, overlapped or exposed — and the step it adds up to:
compute, exposed communication per parallelism, the pipeline bubble, step time, tokens/s, MFU
and memory per rank. :func:`search` ranks the valid layouts of a model on N GPUs.

Modules: :mod:`.model` (shapes, parameters, FLOPs, presets), :mod:`.hf_config` and
:mod:`.hf_families` (Hugging Face config.json files of every family), :mod:`.layout` (the
layout and its refusals), :mod:`.cluster` (the machine), :mod:`.groups` (rank grid → groups →
nodes),
:mod:`.inventory` (the collectives), :mod:`.step` (the step), :mod:`.memory` (bytes per rank),
:mod:`.search` (the layout search). Formulas and sources: docs/planner.md.
"""

from __future__ import annotations

from .cluster import CLUSTER_PRESETS, Cluster, cluster_preset, load_profile, resolve_cluster
from .inventory import Entry, Straggler
from .layout import Layout, layout_from_dict
from .hf_config import load_config, resolve_model
from .model import PRESETS, ModelConfig
from .search import SearchResult, search
from .step import StepPlan, plan_step

__all__ = ["plan", "search", "ModelConfig", "Layout", "Cluster", "Straggler", "StepPlan",
           "Entry", "SearchResult", "PRESETS", "CLUSTER_PRESETS", "cluster_preset",
           "load_config", "load_profile", "resolve_model", "resolve_cluster", "resolve_layout"]


def resolve_layout(layout) -> Layout:
    """A :class:`Layout` from a layout or a dictionary of its fields."""
    return layout if isinstance(layout, Layout) else layout_from_dict(dict(layout or {}))


def plan(model, layout, cluster, *, straggler=None, seq_length: int | None = None,
         dtype: str | None = None) -> StepPlan:
    """The communication and time of one training step.

    Example::

        p = ringccl.plan("llama3-70b", {"tp": 8, "pp": 4, "dp": 32, "num_micro_batches": 16},
                         {"preset": "dgx-a100", "nodes": 128})
        p.step_seconds, p.mfu, p.to_dict()["stages"][0]["collectives"]

    Args:
        model: a preset name (``ringccl.planner.PRESETS``), a Hugging Face config.json path, a
            config dict or a :class:`ModelConfig`.
        layout: a :class:`Layout` or a dict of its fields (dp, tp, sp, cp, pp, ep,
            zero_stage, micro_batch_size, num_micro_batches / global_batch_size, schedule,
            virtual_stages, recompute, order, ...).
        cluster: a :class:`Cluster`, a preset name or a dict (``preset``, ``nodes``, rates in
            human units such as ``"400Gbps"``, ``profile``: a ``ringccl fit --json`` file).
        straggler: None, a :class:`Straggler` or ``(rank, fraction)``: that rank's NIC at a
            fraction of its bandwidth.
        seq_length, dtype: override the model's.
    Returns:
        :class:`StepPlan` (``to_dict()`` gives strict-JSON-ready values).
    Raises:
        ArgumentError: a refused layout (naming the field), unknown presets, bad values.
    """
    cfg = resolve_model(model, seq_length=seq_length, dtype=dtype)
    if straggler is not None and not isinstance(straggler, Straggler):
        straggler = Straggler(*straggler)
    return plan_step(cfg, resolve_layout(layout), resolve_cluster(cluster), straggler)
