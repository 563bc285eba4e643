"""The plan's configuration: a JSON or TOML file (``ringccl plan --config``) merged with the
command line's values, the command line winning (torchtitan's config manager does the same with
its TOML file and CLI overrides).

A file holds top-level ``model`` (a preset name or a Hugging Face config.json path),
``seq_length``, ``dtype``, ``straggler`` (``"RANK:FRACTION"`` or ``[rank, fraction]``),
``gpus`` and ``search``, and the tables ``layout`` (the fields of
:class:`~ringccl.planner.parallel_dims.ParallelDims`, ``framework`` among them) and ``cluster``
(those of :class:`~ringccl.planner.cluster.Cluster`, with ``preset``, ``profile``,
``profile_level``). A null, a wrong type, a negative or an unknown field, ``gpus`` beyond the
2^20 a plan takes and a profile file that does not read are refused naming the file, the field
and the value as the file wrote it; a field left out takes its default. Example (TOML)::

    model = "llama3-70b"
    [layout]
    framework = "megatron"
    tp = 8
    pp = 4
    dp = 32
    global_batch_size = 1024
    [cluster]
    preset = "dgx-a100"
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..args import not_text
from ..errors import ArgumentError, ArgumentTypeError
from .cluster import (MAX_GPUS, PROFILE_FIELDS, Cluster, check_cluster_field,
                      check_profile_field, resolve_cluster)
from .hf_config import resolve_model
from .model import PRESETS, ModelConfig
from .parallel_dims import ParallelDims, check_field

__all__ = ["CONFIG_KEYS", "PlanConfig", "load_plan_config", "plan_config", "parse_straggler",
           "cluster_for", "layout_for_gpus"]

#: the top-level keys of a configuration file
CONFIG_KEYS = ("model", "seq_length", "dtype", "layout", "cluster", "straggler", "gpus",
               "search")

#: the cluster preset when neither a preset nor the link rates are given
DEFAULT_CLUSTER = "dgx-h100"


def load_plan_config(path: str) -> dict:
    """The file ``path`` as a dict: TOML when its name ends in ``.toml``, else JSON.

    Raises:
        ArgumentError: unreadable, not parseable, not an object/table, or an unknown
            top-level key (naming the known ones).
    """
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:  # the file itself: missing, a folder, not allowed
        raise ArgumentError(f"--config {path!r}: cannot read the file "
                            f"({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(text.decode()) if p.suffix == ".toml" else json.loads(text)
    except ValueError as exc:
        why = not_text(exc) if isinstance(exc, UnicodeDecodeError) else exc
        raise ArgumentError(f"--config {path!r}: cannot read it as "
                            f"{'TOML' if p.suffix == '.toml' else 'JSON'} ({why}; a name "
                            "ending in .toml is read as TOML, any other as JSON)") from None
    if not isinstance(data, dict):
        raise ArgumentError(f"--config {path!r} must hold an object/table")
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise ArgumentError(f"--config {path!r}: unknown key(s) {', '.join(unknown)}; expected "
                            f"{', '.join(sorted(CONFIG_KEYS))}")
    _check_file(data, path)
    return data


def _show(value) -> str:
    """``value`` as a JSON or TOML file writes it: null, true, "text", [1, 0.5]."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


#: the top-level keys' kinds: (accepted types, in words)
_TOP = {"model": (str, "a preset name or a config.json path (a string)"),
        "seq_length": (int, "an integer >= 1"), "dtype": (str, "a dtype name (a string)"),
        "straggler": ((str, list), "\"RANK:FRACTION\" or [rank, fraction]"),
        "gpus": (int, "an integer >= 1"), "search": (bool, "true or false"),
        "layout": (dict, "a table of layout fields"), "cluster": (dict, "a table of cluster fields")}


def _refuse(path: str, where: str, exc: Exception):
    """``exc`` again, its message prefixed with the file and the table."""
    return type(exc)(f"--config {path!r}: {where}{exc}")


def _check_file(data: dict, path: str) -> None:
    """Refuse a null, a wrong type, a number out of range or an unknown field anywhere in the
    file, naming the field and the value as the file wrote it."""
    for key, value in data.items():
        types, allowed = _TOP[key]
        kind = "null" if value is None else type(value).__name__
        if not isinstance(value, types) or isinstance(value, bool) and types is int:
            raise ArgumentTypeError(f"--config {path!r}: {key}={_show(value)} must be "
                                    f"{allowed}, got {kind}")
        if types is int and value < 1:
            raise ArgumentError(f"--config {path!r}: {key}={_show(value)} must be {allowed}")
        if key == "gpus" and value > MAX_GPUS:
            raise ArgumentError(f"--config {path!r}: gpus={value} must be an integer in [1, "
                                f"{MAX_GPUS}] (the GPUs a plan takes)")
    layout_keys = set(ParallelDims.__dataclass_fields__) - {"from_preset", "notes"}
    cluster_keys = {f for f in Cluster.__dataclass_fields__} | {"preset", "profile",
                                                                "profile_level"}
    for table, known, check in (("layout", layout_keys, check_field),
                                ("cluster", cluster_keys, check_cluster_field)):
        fields = data.get(table, {})
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ArgumentError(f"--config {path!r}: unknown {table} field(s) "
                                f"{', '.join(unknown)}; expected {', '.join(sorted(known))}")
        for name, value in fields.items():
            try:
                if value is None:
                    raise ArgumentTypeError(f"{name}=null: leave the field out for its default")
                check(name, value, show=_show)
            except (ArgumentError, ArgumentTypeError) as exc:
                raise _refuse(path, f"{table}.", exc) from None
    _check_profiles(data.get("cluster", {}), path)


def _check_profiles(cluster: dict, path: str) -> None:
    """Read the profile files the cluster table names (:func:`.cluster.check_profile_field`),
    a refusal naming the file, the field and its value as the file wrote it."""
    for name in PROFILE_FIELDS:
        if name in cluster:
            try:
                check_profile_field(name, cluster[name], cluster.get("profile_level"))
            except ArgumentError as exc:
                named = str(exc).startswith(f"{name}=")  # "profile='x.json': cannot read it"
                raise _refuse(path, "cluster." if named else
                              f"cluster.{name}={_show(cluster[name])}: ", exc) from None


def layout_for_gpus(layout: dict, gpus: int, given: str | None = None) -> dict:
    """``layout`` (fields of :class:`ParallelDims`) on ``gpus`` GPUs: ``dp`` filled in as
    gpus / (tp · cp · pp) when it is left out. ``given``: how the messages name where the
    count came from (default ``--gpus N``).

    Raises:
        ArgumentError: the GPUs are not a multiple of tp · cp · pp, or the layout's product
            dp · tp · cp · pp differs from ``gpus`` (naming both and the layout to write).
    """
    tp, cp, pp = (layout.get(k, 1) for k in ("tp", "cp", "pp"))
    others = tp * cp * pp
    if "dp" not in layout:
        if gpus % others:
            raise ArgumentError(f"{given or f'--gpus {gpus}'} is not a multiple of tp x cp x "
                                f"pp = {tp} x {cp} x {pp} = {others}, so dp = {gpus}/{others} "
                                "is not whole")
        return {**layout, "dp": gpus // others}
    world = layout["dp"] * others
    if world != gpus:
        raise ArgumentError(f"--gpus {gpus} disagrees with the layout: dp x tp x cp x pp = "
                            f"{layout['dp']} x {tp} x {cp} x {pp} = {world}; give --gpus "
                            f"{world}, or leave --dp out for --gpus to set it")
    return layout


def parse_straggler(value) -> tuple | list | None:
    """``"RANK:FRACTION"`` as ``(rank, fraction)``; None, a list or a tuple as given.

    Raises:
        ArgumentError: a text that is not RANK:FRACTION.
    """
    if value is None or isinstance(value, (list, tuple)):
        return value
    try:
        rank, fraction = str(value).split(":")
        return (int(rank), float(fraction))
    except ValueError:
        raise ArgumentError(f"--straggler {value!r} must be RANK:FRACTION, e.g. "
                            "17:0.25") from None


@dataclass(frozen=True)
class PlanConfig:
    """One plan's inputs, merged.

    Attributes:
        model: the resolved model (seq_length and dtype applied).
        layout: the ``layout`` fields (a dict for
            :func:`~ringccl.planner.parallel_dims.resolve_dims`).
        cluster: the ``cluster`` fields (a dict; see :func:`cluster_for`).
        straggler: None or (rank, fraction).
        search: rank every layout instead of planning one. gpus: the GPUs of the search, or
            of the plan (:func:`layout_for_gpus`).
        path: the configuration file (None: none).
        from_file: what took the file's value (the command line gave none): top-level keys
            and ``layout.``/``cluster.`` fields, e.g. ``"gpus"``, ``"cluster.nodes"``, so
            that a later refusal of one names the file.
    """

    model: ModelConfig
    layout: dict
    cluster: dict
    straggler: tuple | list | None
    search: bool
    gpus: int | None
    path: str | None = None
    from_file: frozenset = frozenset()


def plan_config(path: str | None = None, *, model=None, seq_length: int | None = None,
                dtype: str | None = None, layout: dict | None = None,
                cluster: dict | None = None, straggler=None, search: bool | None = None,
                gpus: int | None = None) -> PlanConfig:
    """The file at ``path`` (none: empty), then the given values over it: a value given (not
    None) wins; ``layout`` and ``cluster`` win field by field.

    Raises:
        ArgumentError: the file refused (:func:`load_plan_config`), no model anywhere, an
            unknown model, a bad straggler, dtype float8 (a precision recipe, not a dtype).
    """
    cfg = load_plan_config(path) if path else {}
    merged_layout = dict(cfg.get("layout", {}))
    merged_layout.update(layout or {})
    merged_cluster = dict(cfg.get("cluster", {}))
    merged_cluster.update(cluster or {})
    name = model or cfg.get("model")
    if name is None:
        raise ArgumentError("--model is required (a preset: " + ", ".join(PRESETS)
                            + ", or a config.json path)")
    kept_in = dtype or cfg.get("dtype")
    if str(kept_in).lower() in ("float8", "fp8"):
        # no recipe keeps weights, gradients and activations in 8 bits: the FP8 recipes keep
        # them in 16 and cast each GEMM's operands (their casts and scales are priced there)
        raise ArgumentError(f"dtype={kept_in!r}: FP8 training keeps parameters, gradients "
                            "and activations in 16 bits and runs its GEMMs in FP8; use "
                            "--precision fp8-tensorwise (or fp8-rowwise, fp8-blockwise, "
                            "fp8-delayed) with the 16-bit --dtype")
    try:
        resolved = resolve_model(name, seq_length=seq_length or cfg.get("seq_length"),
                                 dtype=kept_in)
    except ArgumentError as exc:   # the file's seq_length beyond the model's positions
        if not seq_length and "seq_length" in cfg and str(exc).startswith("seq_length="):
            raise _refuse(path, "", exc) from None
        raise
    given = {"model": model, "seq_length": seq_length, "dtype": dtype, "straggler": straggler,
             "search": search, "gpus": gpus, "layout": layout or {}, "cluster": cluster or {}}
    from_file = frozenset([k for k in cfg if k not in ("layout", "cluster") and not given[k]]
                          + [f"{table}.{k}" for table in ("layout", "cluster")
                             for k in cfg.get(table, {}) if k not in given[table]])
    return PlanConfig(resolved, merged_layout, merged_cluster,
                      parse_straggler(straggler or cfg.get("straggler")),
                      bool(search) or cfg.get("search", False), gpus or cfg.get("gpus"),
                      path, from_file)


def cluster_for(cluster: dict, world_size: int) -> Cluster:
    """The cluster of the fields ``cluster``, for ``world_size`` GPUs: the preset
    :data:`DEFAULT_CLUSTER` when neither a preset nor a link rate is given, and as many nodes as
    the GPUs fill when ``nodes`` is not given.

    Raises:
        ArgumentError: the GPUs do not fill whole nodes, or a field refused by the cluster.
    """
    values = dict(cluster)
    if "preset" not in values and not any(k in values for k in ("intra_bandwidth",
                                                                 "inter_bandwidth")):
        values["preset"] = DEFAULT_CLUSTER
    if "nodes" not in values:
        base = resolve_cluster({**values, "nodes": 1})
        if world_size % base.gpus_per_node:
            one = world_size == 1
            raise ArgumentError(f"the layout's {world_size} GPU{'' if one else 's'} (dp x tp x "
                                f"cp x pp) {'does' if one else 'do'} not fill nodes of "
                                f"{base.gpus_per_node}; give --gpus N or --nodes N (dp is then "
                                "worked out), --dp, or --gpus-per-node")
        values["nodes"] = world_size // base.gpus_per_node
    return resolve_cluster(values)
