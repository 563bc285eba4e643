"""The step file: a plan's inventory written out for replay (``ringccl plan ... --emit``).

A step file is strict JSON::

    {"format": "ringccl-step", "version": 1, "describe": "...", "model": "...",
     "layout": {...ParallelDims.to_dict()...}, "cluster": {...}, "world_size": N,
     "collectives": [{"order": 0, "stage": 0, "parallelism": "tp", "collective": "all_reduce",
                      "what": "...", "phase": "forward", "group": "tp", "group_size": 2,
                      "group_ranks": [0, 1], "nbytes": 4194304.0, "calls_per_step": 96,
                      "algorithm": "ring", "params": {}, "predicted_seconds_per_call": 1e-4,
                      "bytes_sent_per_call": 2097152.0, "overlap": "exposed", "chunks": 1},
                     ...]}

``order`` is the entry's position in the step (stage by stage, in the inventory's order:
forward, backward, once per step); ``nbytes`` is one call's working buffer as
:func:`ringccl.cost` and ``ringccl bench``'s size take it; ``group_ranks`` is one group of that
kind (every group of the kind runs the same collective at the same time). :func:`load_step_file`
refuses a file of another format or version, or with missing fields, before anything runs.

:func:`replay_calls` maps the file onto ``nproc`` local processes: when the plan's world is
``nproc`` ranks, each collective runs on the plan's own groups (the rank grid of its layout, so
dp × tp keeps its tp pairs and dp pairs, ep = 4 its one group of 4); otherwise a group of g
ranks becomes blocks of the largest divisor of ``nproc`` not above g consecutive local ranks
(``min(g, nproc)`` where it divides ``nproc``), all running at once, and the note says so; an
``nproc`` whose only such divisor is 1 (a prime above g) is refused. A rooted call's ``root``
(a pipeline send_recv, replayed as a broadcast from its source) is a position in each of its
groups, as the step file's is in ``group_ranks``: every group runs from its own source, not
from one global rank that is in one group only. Bytes are scaled by one factor, a power of two,
so the largest call fits ``max_bytes``: the mix of sizes is kept.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..algorithms import REGISTRY
from ..errors import ArgumentError
from .groups import GRID_FIELDS, rank_grid
from .parallel_dims import resolve_dims
from .step import StepEstimate

__all__ = ["STEP_FORMAT", "STEP_VERSION", "step_file", "write_step_file", "load_step_file",
           "ReplayCall", "replay_calls"]

STEP_FORMAT = "ringccl-step"
#: bumped whenever a field's meaning changes; a reader refuses any other version
STEP_VERSION = 1

#: the largest call a step file may hold (1 EB: a plan's calls are far below it)
MAX_NBYTES = 1e18

_FIELDS = {"order": int, "stage": int, "parallelism": str, "collective": str, "group": str,
           "group_size": int, "group_ranks": list, "nbytes": (int, float),
           "calls_per_step": int, "algorithm": str, "params": dict,
           "predicted_seconds_per_call": (int, float)}


#: NCCL's algorithm -> the ringccl schedule a replay runs for it (NCCL's double binary tree is
#: ringccl's; NVLS, PAT and CollNet have no ringccl schedule: the ring moves the same bytes)
_REPLAY = {"ring": "ring", "tree": "double_binary_tree", "p2p": "direct"}


def _replayed(collective: str, algorithm: str, params: dict) -> tuple[str, dict]:
    """The ringccl schedule (and parameters) a replay runs for the plan's pick: itself when
    it is ringccl's, else the one standing for NCCL's ``algorithm/protocol``."""
    if "/" not in algorithm:
        return algorithm, dict(params)
    coll = "broadcast" if collective == "send_recv" else collective
    name = _REPLAY.get(algorithm.split("/")[0], "ring")
    if (coll, name) not in REGISTRY:
        name = "ring" if (coll, "ring") in REGISTRY else "direct"
    return name, ({"root": 0} if coll == "broadcast" else {})


def step_file(plan: StepEstimate) -> dict:
    """The step file of ``plan`` (see the module doc), JSON-ready."""
    collectives = []
    for order, (stage, e) in enumerate(plan.entries()):
        algorithm, params = _replayed(e.collective, e.algorithm, e.params)
        collectives.append({
            "order": order, "stage": stage, "parallelism": e.parallelism,
            "collective": e.collective, "what": e.what, "phase": e.phase, "group": e.group,
            "group_size": e.shape.size, "group_ranks": list(e.shape.example),
            "nbytes": float(e.nbytes), "calls_per_step": int(e.calls_per_step),
            "algorithm": algorithm, "params": params, "priced_as": e.algorithm,
            "predicted_seconds_per_call": float(e.seconds_per_call),
            "bytes_sent_per_call": float(e.bytes_sent_per_call), "overlap": e.overlap,
            "chunks": int(e.chunks)})
    return {"format": STEP_FORMAT, "version": STEP_VERSION, "describe": plan.describe(),
            "model": plan.model.name, "layout": plan.dims.to_dict(),
            "cluster": plan.cluster.to_dict(), "world_size": plan.dims.world_size,
            "gpus_per_node": plan.cluster.gpus_per_node,
            "predicted_step_seconds": plan.step_seconds, "collectives": collectives}


def write_step_file(plan: StepEstimate, path: str | Path) -> str:
    """Write :func:`step_file` of ``plan`` to ``path`` (JSON); returns the path."""
    Path(path).write_text(json.dumps(step_file(plan), indent=1, allow_nan=False) + "\n")
    return str(path)


def load_step_file(path: str | Path) -> dict:
    """Read and check a step file.

    Raises:
        ArgumentError: unreadable, not JSON, another format or version, a collective with a
            missing or mistyped field, an unknown collective, or groups that do not fit the
            world (each message names the file and the field).
    """
    name = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"step file {name!r}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != STEP_FORMAT:
        raise ArgumentError(f"step file {name!r} is not a ringccl step file (format="
                            f"{data.get('format') if isinstance(data, dict) else None!r}, "
                            f"expected {STEP_FORMAT!r}); write one with ringccl plan ... --emit")
    if data.get("version") != STEP_VERSION:
        raise ArgumentError(f"step file {name!r} has version {data.get('version')!r}; this "
                            f"ringccl reads version {STEP_VERSION} only: emit it again with "
                            "this ringccl (ringccl plan ... --emit)")
    world = data.get("world_size")
    if not isinstance(world, int) or world < 1:
        raise ArgumentError(f"step file {name!r}: world_size={world!r} must be an integer >= 1")
    entries = data.get("collectives")
    if not isinstance(entries, list):
        raise ArgumentError(f"step file {name!r}: 'collectives' must be a list")
    for i, c in enumerate(entries):
        if not isinstance(c, dict):
            raise ArgumentError(f"step file {name!r}: collectives[{i}] must be an object")
        for key, kind in _FIELDS.items():
            if key not in c or isinstance(c[key], bool) or not isinstance(c[key], kind):
                raise ArgumentError(f"step file {name!r}: collectives[{i}].{key}="
                                    f"{c.get(key)!r} is missing or not of the expected type")
        coll = "broadcast" if c["collective"] == "send_recv" else c["collective"]
        if (coll, c["algorithm"]) not in REGISTRY:
            raise ArgumentError(f"step file {name!r}: collectives[{i}] names "
                                f"{c['algorithm']!r} {c['collective']}, which is not registered")
        if not 1 <= c["group_size"] <= world or not math.isfinite(c["nbytes"]) \
                or c["nbytes"] < 0 or c["calls_per_step"] < 0:
            raise ArgumentError(f"step file {name!r}: collectives[{i}] has group_size="
                                f"{c['group_size']}, nbytes={c['nbytes']}, calls_per_step="
                                f"{c['calls_per_step']}: outside a world of {world} ranks or "
                                "negative")
        ranks = c["group_ranks"]
        if (len(ranks) != c["group_size"] or any(  # types first: set() needs hashable ranks
                isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world
                for r in ranks) or len(set(ranks)) != len(ranks)):
            raise ArgumentError(f"step file {name!r}: collectives[{i}].group_ranks={ranks!r} "
                                f"must be group_size={c['group_size']} distinct ranks in "
                                f"[0, {world})")
        if c["nbytes"] > MAX_NBYTES:
            raise ArgumentError(f"step file {name!r}: collectives[{i}].nbytes={c['nbytes']!r} "
                                f"is beyond any collective (at most {MAX_NBYTES:.0e} bytes)")
    return data


@dataclass
class ReplayCall:
    """One collective of the step as it runs on the local processes.

    Attributes:
        order, stage, parallelism, what, phase, group: from the step file.
        collective: as it runs (a pipeline send_recv runs as a broadcast from its first rank,
            as the planner costs it). algorithm, params: the plan's pick (``ring`` where the
            pick cannot run on the local group: ``note`` says so); ``params["root"]``, where
            there is one, is a position in each group (0: each group's first rank).
        groups: the local groups (lists of local ranks) that run it at the same time.
        nbytes: the scaled working buffer (bytes); plan_nbytes: the plan's.
        calls_per_step: how often the step runs it. planned_seconds: the plan's per call.
    """

    order: int
    stage: int
    parallelism: str
    what: str
    phase: str
    group: str
    collective: str
    algorithm: str
    params: dict
    groups: list
    nbytes: int
    plan_nbytes: float
    calls_per_step: int
    planned_seconds: float
    note: str = ""
    plan_group_size: int = 0

    @property
    def group_size(self) -> int:
        return len(self.groups[0])

    def label(self) -> str:
        return f"{self.parallelism} {self.collective} ({self.phase})"

    def to_dict(self) -> dict:
        return {"order": self.order, "stage": self.stage, "parallelism": self.parallelism,
                "what": self.what, "phase": self.phase, "group": self.group,
                "collective": self.collective, "algorithm": self.algorithm,
                "params": dict(self.params), "groups": [list(g) for g in self.groups],
                "nbytes": self.nbytes, "plan_nbytes": self.plan_nbytes,
                "plan_group_size": self.plan_group_size,
                "calls_per_step": self.calls_per_step, "planned_seconds": self.planned_seconds,
                "note": self.note}


@dataclass
class ReplayMap:
    """The step mapped onto local processes: the calls, the scale and what was changed."""

    calls: list
    scale: float
    nproc: int
    notes: list = field(default_factory=list)


def _local_groups(size: int, nproc: int) -> list[list[int]]:
    g = max(d for d in range(1, min(size, nproc) + 1) if nproc % d == 0)
    if g == 1:   # every block one rank: nothing would be communicated or measured
        fits = [n for n in range(2, 2 * size + 1) if any(n % d == 0 for d in range(2, size + 1))]
        raise ArgumentError(f"nproc={nproc}: a group of {size} ranks cannot be laid over "
                            f"{nproc} processes in equal blocks of 2 or more consecutive ranks "
                            f"({nproc} has no divisor from 2 to {min(size, nproc)}); use an "
                            f"nproc such as {', '.join(map(str, fits[:3]))}")
    return [list(range(s, s + g)) for s in range(0, nproc, g)]


def _root_position(c: dict, groups: list) -> int:
    """The root of step entry ``c`` as a position in each of its local ``groups``: the planned
    source's position in the replayed group when that group is the planned one (its ranks
    sorted), else its position in the plan's group where the local blocks hold it, else the
    first rank."""
    root = c["params"]["root"]
    if isinstance(root, bool) or not isinstance(root, int) \
            or not 0 <= root < len(c["group_ranks"]):
        return 0
    source = c["group_ranks"][root]
    if sorted(groups[0]) == sorted(c["group_ranks"]):
        return list(groups[0]).index(source)
    return root if root < len(groups[0]) else 0


def replay_calls(step: dict, nproc: int, max_bytes: int, itemsize: int = 4) -> ReplayMap:
    """Map ``step`` (:func:`load_step_file`) onto ``nproc`` local processes (module doc).

    Args:
        nproc: local processes (>= 2).
        max_bytes: the largest scaled call's working buffer, bytes (>= 4 KiB).
        itemsize: bytes per element of the replay's float buffers.
    Returns:
        a :class:`ReplayMap`; scale is the one factor applied to every call's bytes.
    Raises:
        ArgumentError: nproc < 2, max_bytes < 4 KiB, a step without collectives, an nproc
            with no divisor from 2 to a group's size (module doc).
    """
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 2:
        raise ArgumentError(f"nproc={nproc!r} must be an integer >= 2 (replay runs collectives)")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 4096:
        raise ArgumentError(f"max_bytes={max_bytes!r} must be an integer >= 4096 bytes")
    entries = [c for c in step["collectives"] if c["group_size"] > 1 and c["nbytes"] > 0]
    if not entries:
        raise ArgumentError("the step file holds no collective of 2 or more ranks to replay")
    largest = max(c["nbytes"] for c in entries)
    # one power-of-two factor for every call: the relative sizes (and so the α/β mix across
    # the step's collectives) are kept, the largest fits max_bytes
    scale = 1.0 if largest <= max_bytes else 2.0 ** -math.ceil(math.log2(largest / max_bytes))
    same_world = step["world_size"] == nproc
    notes = []
    if scale < 1:
        notes.append(f"bytes scaled by 1/{round(1 / scale)} (the largest call, "
                     f"{largest / 2**20:.1f} MiB, to at most {max_bytes / 2**20:.2f} MiB)")
    grid = None
    if same_world:
        # the grid depends on its fields only (the folded expert grid, the split cp and dp)
        fields = {k: step["layout"][k] for k in GRID_FIELDS if k in step["layout"]}
        dims = resolve_dims({**fields, "zero_stage": 3 if fields.get("dp_shard") else 0})
        grid = rank_grid(dims, step.get("gpus_per_node") or nproc)
    else:
        notes.append(f"the plan's world of {step['world_size']} ranks replayed on {nproc} "
                     "processes: each group of g ranks as blocks of consecutive ranks, as many as "
                     "the largest divisor of nproc not above g")
    calls = []
    for c in entries:
        collective = "broadcast" if c["collective"] == "send_recv" else c["collective"]
        params = dict(c["params"])
        if grid is not None:
            if c["collective"] == "send_recv":
                groups = [sorted(c["group_ranks"])]
            else:
                stage_ranks = set(map(int, grid.ranks_of_stage(c["stage"])))
                groups = sorted({grid.group(c["group"], r) for r in stage_ranks})
                groups = [list(g) for g in groups]
        else:
            groups = _local_groups(c["group_size"], nproc)
        algorithm, note = c["algorithm"], ""
        size = len(groups[0])
        # hierarchical all-reduce's local_size must divide the local group; the root inside it
        if "local_size" in params and size % params["local_size"]:
            algorithm, params, note = "ring", {}, (f"{c['algorithm']} (local_size "
                                                   f"{c['params']['local_size']}) cannot run on "
                                                   f"{size} ranks: ring instead")
        if "root" in params:
            params["root"] = _root_position(c, groups)
        count = max(size, int(c["nbytes"] * scale) // itemsize // size * size)
        calls.append(ReplayCall(c["order"], c["stage"], c["parallelism"], c.get("what", ""),
                                c.get("phase", ""), c["group"], collective, algorithm, params,
                                groups, count * itemsize, float(c["nbytes"]),
                                int(c["calls_per_step"]),
                                float(c["predicted_seconds_per_call"]), note, c["group_size"]))
    return ReplayMap(calls, scale, nproc, notes)
