"""Every framework preset, field by field, against a snapshot written from the code before the
preset tables took their present form: each Setting's value, source, note and whether it has a
rule; each rule's value over a grid of layouts; ``preset_values``, ``family``,
``defers_gradient_sync`` and ``state_bytes``. A change to any preset's value or wording shows
here as a difference to read, and the snapshot is rewritten on purpose (``python
tests/test_planner_presets_snapshot.py --write``), never to make a rewrite pass."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from ringccl.planner.frameworks import (FRAMEWORKS, LAYOUT_SETTINGS, MODEL_SETTINGS, PRESETS,
                                        defers_gradient_sync, family, preset_values,
                                        state_bytes)

SNAPSHOT = Path(__file__).parent / "data" / "framework_presets.json"

#: the layouts each rule is resolved on: every field a rule may read, two or more values each
GRID = {"tp": (1, 2), "pp": (1, 4), "dp": (1, 64), "cp": (1, 2),
        "schedule": ("1f1b", "interleaved"), "zero_stage": (0, 3),
        "dtype": ("bfloat16", "float16", "float32", "fp8"),
        "reduce_dtype": ("float32", "bfloat16", "float16")}


def _layouts() -> list[dict]:
    return [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]


def _pattern(values: list) -> dict:
    """``values`` as its distinct values and, where there are several, the index of each
    layout's value (one digit a layout)."""
    distinct: list = []
    for v in values:
        if v not in distinct:
            distinct.append(v)
    assert len(distinct) <= 10
    if len(distinct) == 1:
        return {"distinct": distinct}
    return {"distinct": distinct, "pattern": "".join(str(distinct.index(v)) for v in values)}


def snapshot() -> dict:
    layouts = _layouts()
    out: dict = {"frameworks": list(FRAMEWORKS)}
    for fw in FRAMEWORKS:
        table = PRESETS[fw]
        settings = {}
        for name, s in table.items():
            row = {"value": s.value, "source": s.source, "note": s.note,
                   "rule": s.rule is not None}
            if s.rule is not None:
                row["resolved"] = _pattern([s.resolve(layout) for layout in layouts])
            settings[name] = row
        names = LAYOUT_SETTINGS + MODEL_SETTINGS
        resolved = [preset_values(fw, names, layout) for layout in layouts]
        out[fw] = {
            "order": list(table),
            "settings": settings,
            "preset_values": {n: _pattern([r.get(n, "<absent>") for r in resolved])
                              for n in names},
            "family": family(fw),
            "defers_gradient_sync": defers_gradient_sync(fw),
            "state_bytes": {f"{b}/{r}": list(vars(state_bytes(fw, b, r)).values())
                            for b in (1, 2, 4) for r in ("float32", "bfloat16", "float16")},
        }
    return json.loads(json.dumps(out))     # the JSON form (tuples as lists)


def test_every_preset_matches_its_snapshot():
    want = json.loads(SNAPSHOT.read_text())
    got = snapshot()
    assert got["frameworks"] == want["frameworks"]
    for fw in want["frameworks"]:
        for key in want[fw]:
            if key == "settings":
                for name, row in want[fw]["settings"].items():
                    assert got[fw]["settings"].get(name) == row, (fw, name)
            assert got[fw][key] == want[fw][key], (fw, key)
    assert got == want


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=False) + "\n")
