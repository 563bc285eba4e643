"""The import rules of docs/architecture.md, checked by walking every module's imports with ast.

Each module of src/ringccl belongs to one layer; a module may import only the layers listed for
its own (and its own layer). Imports inside functions are allowed only for optional packages
(torch, mpi4py, matplotlib, ...) or for ringccl modules that need one at import time: any other
lazy import hides a cycle. Inside one folder the modules import each other without a cycle
(lazy imports included), and the planner's modules import only those before them in
``PLANNER_ORDER``. ``test_planted_violation_is_caught`` plants an upward import or a cycle in a
copy of the tree and checks that the rules see it.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "ringccl"

#: the two entry points, which import what they name on first use (the package's public names,
#: PEP 562; the command's modules inside ``main``), so that ``import ringccl`` (which torch runs
#: inside every ``import torch``) stays light and a Ctrl-C while they load is one line
LAZY_ENTRY_POINTS = {"ringccl", "ringccl.cli"}

#: third-party packages that are optional extras: only these may be imported inside a function
OPTIONAL = {"torch", "mpi4py", "matplotlib", "rich", "sklearn", "scipy", "plotly", "selenium"}

#: layer of each top-level module or subpackage of ringccl
LAYER_OF = {
    "errors": "leaf", "args": "leaf", "units": "leaf", "ops": "leaf", "chunking": "leaf",
    "caches": "leaf", "resources": "leaf", "consistency": "leaf", "plugins": "leaf",
    "environment": "leaf",
    "ir": "schedule", "collectives": "schedule", "check": "schedule", "layout": "schedule",
    "algorithms": "algorithms",
    "views": "views",
    "sim": "sim",
    "engine": "engine",
    "frontend": "frontend",
    "bench": "bench",
    "costmodel": "cost",
    "planner": "planner",
    # each backend is a component of its own (backends never import each other; shm is shared)
    "backends": "backend", "backends.shm": "backend", "backends.torch": "backend",
    "backends.mpi": "backend",
    "training": "training",
    # the public packages: re-exports of backends and training under the names users import
    "torch": "public", "mpi": "public",
    "torch_autoload": "public",   # the torch.backends entry point: the process group on first use
    "cli": "cli", "__main__": "cli",
    "__init__": "api",
}

#: what each layer may import (besides itself)
MAY_IMPORT = {
    "leaf": set(),
    "schedule": {"leaf"},
    "algorithms": {"leaf", "schedule"},
    "views": {"leaf", "schedule", "algorithms"},
    "sim": {"leaf", "schedule", "algorithms"},
    "engine": {"leaf", "schedule"},                       # knows no algorithm
    "frontend": {"leaf", "schedule", "algorithms", "engine"},
    "bench": {"leaf", "schedule", "algorithms"},
    "cost": {"leaf", "schedule", "algorithms", "bench"},  # knows no executor
    "planner": {"leaf", "schedule", "algorithms", "sim", "cost", "bench"},
    # cost: the one algorithm chooser (costmodel.choice) prices the calls
    "backend": {"leaf", "schedule", "algorithms", "engine", "frontend", "bench", "cost"},
    "training": {"leaf", "schedule", "algorithms", "engine", "frontend", "bench", "cost",
                 "backend"},
    "public": {"backend", "training"},
    "api": {"leaf", "schedule", "algorithms", "views", "sim", "engine", "bench", "cost",
            "planner"},
    "cli": set(LAYER_OF.values()) - {"cli"},
}

#: inside the leaf layer only the error vocabulary, argument checks, human units and the
#: environment reader are shared
LEAF_MAY_IMPORT = {"errors", "args", "units", "environment"}

#: import cycles inside a folder excused while they are being removed (none is left); each
#: entry must still be a cycle, so a removed one is struck from here too. Nothing may be added.
KNOWN_FOLDER_CYCLES: set = set()

#: the planner's modules in the one direction their imports point: each imports only modules
#: before it (a new module takes its place in this list)
PLANNER_ORDER = ("model", "hf_families", "hf_config", "gpus", "precision", "framework_eras",
                 "frameworks", "pipeline", "timeline", "routing", "layout_checks",
                 "parallel_dims", "cluster", "kernels", "optimizer_passes", "softmax", "compute",
                 "tensors",
                 "config", "groups", "stages", "costing", "overlap", "context", "entries",
                 "inventory_cp", "inventory_ep", "inventory_dp", "inventory", "memory",
                 "stage_memory", "step",
                 "advice", "search", "emit", "replay", "__init__")


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["ringccl", *parts])


def resolve(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The absolute module an ``ImportFrom`` in module ``name`` refers to."""
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: pathlib.Path, root: pathlib.Path, modules: dict):
    """(target module, line, lazy) for every import of the file; ``from X import y`` yields
    ``X.y`` when y is a submodule, else ``X``."""
    name = module_name(path, root)
    tree = ast.parse(path.read_text(), str(path))
    top = set(map(id, tree.body)) | _type_checking_nodes(tree)
    # a module-level ``try: import ... except ImportError`` runs at import time (an optional
    # compiled extension, e.g. shm's _lanec): not lazy
    top |= {id(n) for t in tree.body if isinstance(t, ast.Try) for n in t.body}
    for node in ast.walk(tree):
        lazy = id(node) not in top
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, lazy
        elif isinstance(node, ast.ImportFrom):
            target = resolve(node, name, path.name == "__init__.py")
            if target == "__future__":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in modules else target), node.lineno, lazy


def _type_checking_nodes(tree: ast.Module) -> set:
    """ids of the nodes under a top-level ``if TYPE_CHECKING:`` (not imported at run time)."""
    return {id(n) for stmt in tree.body
            if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test)
            for n in ast.walk(stmt)}


#: folders whose subpackages are components of their own
SPLIT = {"backends"}


def component(module: str) -> str | None:
    """The ringccl component of ``module``: its top-level module or subpackage, or for a
    folder of :data:`SPLIT` its subpackage (``backends.torch``); None: not ringccl."""
    parts = module.split(".")
    if parts[0] != "ringccl":
        return None
    if len(parts) > 2 and parts[1] in SPLIT:
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else "__init__"


def real_modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    return {module_name(p, root): p for p in root.rglob("*.py")}


def needs_optional(module: str, graph: dict, memo: dict) -> bool:
    """Whether importing ``module`` (and so its parent packages) imports an optional package
    through top-level imports."""
    parts = module.split(".")
    for k in range(1, len(parts) + 1):
        mod = ".".join(parts[:k])
        if mod not in graph:
            continue
        if mod not in memo:
            memo[mod] = False  # a cycle ends here; set again below
            memo[mod] = any(
                t.split(".")[0] in OPTIONAL or needs_optional(t, graph, memo)
                for t, _, lazy in graph[mod] if not lazy)
        if memo[mod]:
            return True
    return False


def violations(root: pathlib.Path) -> list[str]:
    modules = real_modules(root)
    graph = {name: list(imports(path, root, modules)) for name, path in modules.items()}
    memo: dict = {}
    found = []
    for name, path in sorted(modules.items()):
        mine = component(name)
        layer = LAYER_OF.get(mine)
        where = f"{path.relative_to(root.parent)}"
        if layer is None:
            found.append(f"{where}: module {name} has no layer in LAYER_OF")
            continue
        for target, line, lazy in graph[name]:
            theirs = component(target)
            if lazy and theirs is None and target.split(".")[0] not in OPTIONAL:
                found.append(f"{where}:{line}: imports {target} inside a function (only "
                             "optional packages may be imported lazily)")
                continue
            if theirs is None:
                continue
            if target not in modules:
                continue
            if lazy and name not in LAZY_ENTRY_POINTS and not needs_optional(target, graph,
                                                                             memo):
                found.append(f"{where}:{line}: imports {target} inside a function; import it "
                             "at the top (lazy internal imports only for modules that need an "
                             "optional package)")
            if theirs == mine:
                continue
            other = LAYER_OF.get(theirs)
            if layer == "leaf" and other == "leaf":
                if theirs not in LEAF_MAY_IMPORT:
                    found.append(f"{where}:{line}: leaf {name} imports {target}; leaves import "
                                 f"only {sorted(LEAF_MAY_IMPORT)}")
                continue
            if other != layer and other not in MAY_IMPORT[layer]:
                found.append(f"{where}:{line}: {name} ({layer}) imports {target} ({other}); "
                             f"{layer} may import only {sorted(MAY_IMPORT[layer]) or 'nothing'}")
            if mine.startswith("backends.") and theirs.startswith("backends.") and \
                    theirs != "backends.shm":
                found.append(f"{where}:{line}: {name} imports {target}: the backends never "
                             "import each other (only the shared backends.shm)")
    found += folder_cycles(root, modules, graph)
    found += planner_order(root, modules, graph)
    return list(dict.fromkeys(found))  # one line per import statement and rule


def _strongly_connected(nodes: list[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def folder_cycles(root: pathlib.Path, modules: dict, graph: dict) -> list[str]:
    """One line per import cycle among the modules of one folder (a package's ``__init__``
    counts as a module of its folder; imports inside functions count too), except
    :data:`KNOWN_FOLDER_CYCLES`; and one per known cycle that is gone."""
    edges = {name: sorted({t for t, _, _ in graph[name]
                           if t in modules and t != name
                           and modules[t].parent == modules[name].parent})
             for name in modules}
    cycles = _strongly_connected(sorted(modules), edges)
    found = []
    for cycle in cycles:
        if frozenset(cycle) in KNOWN_FOLDER_CYCLES:
            continue
        folder = modules[cycle[0]].parent.relative_to(root.parent)
        files = ", ".join(modules[m].name for m in cycle)
        found.append(f"{folder}: import cycle inside the folder among {files} "
                     f"({' -> '.join(_cycle_path(cycle, edges))})")
    for known in KNOWN_FOLDER_CYCLES:
        if sorted(known) not in cycles:
            found.append(f"KNOWN_FOLDER_CYCLES lists {sorted(known)}, no longer a cycle: strike "
                         "it from the list")
    return found


def _cycle_path(cycle: list[str], edges: dict) -> list[str]:
    """One closed path through the component ``cycle``, from its first module back to it."""
    inside = set(cycle)
    path, seen = [cycle[0]], {cycle[0]}
    while True:
        nxt = [t for t in edges[path[-1]] if t in inside]
        back = [t for t in nxt if t == path[0]]
        if back and len(path) > 1:
            return [m.rsplit(".", 1)[-1] for m in path + back[:1]]
        fresh = [t for t in nxt if t not in seen]
        if not fresh:   # pragma: no cover - a strongly connected component always closes
            return [m.rsplit(".", 1)[-1] for m in path]
        path.append(fresh[0])
        seen.add(fresh[0])


def planner_order(root: pathlib.Path, modules: dict, graph: dict) -> list[str]:
    """One line per planner import that points forward in :data:`PLANNER_ORDER`, and per
    planner module missing from it."""
    def short(name: str) -> str:
        return "__init__" if name == "ringccl.planner" else name.rsplit(".", 1)[-1]

    mine = sorted(n for n in modules if n == "ringccl.planner" or
                  n.startswith("ringccl.planner."))
    found = []
    for name in mine:
        where = modules[name].relative_to(root.parent)
        if short(name) not in PLANNER_ORDER:
            found.append(f"{where}: not in PLANNER_ORDER of tests/test_layering.py")
            continue
        for target, line, _ in graph[name]:
            if target in mine and target != name and short(target) in PLANNER_ORDER and \
                    PLANNER_ORDER.index(short(target)) > PLANNER_ORDER.index(short(name)):
                found.append(f"{where}:{line}: imports {target}, which comes after it in "
                             "PLANNER_ORDER (the planner's imports point one way)")
    return found


def test_import_rules_hold():
    problems = violations(SRC)
    assert not problems, "import rules of docs/architecture.md broken:\n" + "\n".join(problems)


def test_the_packages_lazy_names_follow_the_api_layers_rules():
    # ringccl/__init__ names its lazy attributes' modules as strings, which the walk above
    # does not see as imports
    import ringccl

    for name, (module, _) in ringccl._LAZY.items():
        layer = LAYER_OF[component(module)]
        assert layer == "api" or layer in MAY_IMPORT["api"], (name, module, layer)


def test_every_component_has_a_layer():
    for path in [*SRC.iterdir(), *(p for d in SPLIT for p in (SRC / d).iterdir())]:
        if path.name.startswith((".", "_")) and path.name not in ("__init__.py", "__main__.py"):
            continue
        if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
            name = component(module_name(path, SRC))
            assert name in LAYER_OF, f"{path.name} has no layer in tests/test_layering.py"


@pytest.mark.parametrize("plant, expected, says", [
    # the engine importing an algorithm: an upward import
    ("engine/plan.py", "from ..algorithms import build_schedule\n", "plan.py"),
    # the IR importing one of its views, lazily
    ("ir.py", "def _table(s):\n    from .views.show import step_table\n    return step_table(s)\n",
     "ir.py"),
    # a backend importing the simulator
    ("backends/mpi/collectives.py", "from ...sim import simulate\n", "collectives.py"),
    # one backend importing another
    ("backends/mpi/launch.py", "from ..torch import launch\n", "launch.py"),
    # a backend importing the training library above it
    ("backends/torch/executor.py", "from ...training import stats\n", "executor.py"),
    # a cycle inside a backend's folder (shm.py importing the executor, which imports it)
    ("backends/torch/shm.py", "from . import executor\n", "import cycle inside the folder"),
    # a cycle inside a folder (the grid importing the inventory, which imports the grid)
    ("planner/groups.py", "from .inventory import inventory\n", "import cycle inside the folder"),
    # the same import breaks the planner's one direction
    ("planner/groups.py", "from .inventory import inventory\n", "comes after it in PLANNER_ORDER"),
    # a cycle through a lazy import, outside the planner
    ("sim/kernel.py", "def _again():\n    from . import simulator\n    return simulator\n",
     "import cycle inside the folder among kernel.py, simulator.py"),
])
def test_planted_violation_is_caught(tmp_path, plant, expected, says):
    copy = tmp_path / "ringccl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = set(violations(copy))
    target = copy / plant
    target.write_text(target.read_text() + "\n" + expected)
    new = set(violations(copy)) - before
    assert any(says in v and plant.split("/")[-1] in v for v in new), new


def test_known_cycles_are_excused_while_they_last(monkeypatch):
    """A cycle in KNOWN_FOLDER_CYCLES is not reported; once it is gone, the entry is (strike
    it), and an unknown cycle is."""
    root = pathlib.Path("/x/ringccl")
    modules = {f"ringccl.pkg.{m}": root / "pkg" / f"{m}.py" for m in ("a", "b", "c")}
    cyclic = {"ringccl.pkg.a": [("ringccl.pkg.b", 1, False)],
              "ringccl.pkg.b": [("ringccl.pkg.a", 1, True)], "ringccl.pkg.c": []}
    monkeypatch.setattr(sys.modules[__name__], "KNOWN_FOLDER_CYCLES",
                        {frozenset({"ringccl.pkg.a", "ringccl.pkg.b"})})
    assert folder_cycles(root, modules, cyclic) == []
    acyclic = dict(cyclic, **{"ringccl.pkg.b": []})
    assert ["no longer a cycle" in v for v in folder_cycles(root, modules, acyclic)] == [True]
    other = dict(acyclic, **{"ringccl.pkg.b": [("ringccl.pkg.c", 1, False)],
                             "ringccl.pkg.c": [("ringccl.pkg.b", 2, False)]})
    found = folder_cycles(root, modules, other)
    assert any("import cycle inside the folder among b.py, c.py (b -> c -> b)" in v
               for v in found), found


if __name__ == "__main__":  # print the violations of the tree as it is
    print("\n".join(violations(SRC)) or "no violations")
    sys.exit(0)
