"""The import rules of docs/architecture.md, checked by walking every module's imports with ast.

Each module of src/ringccl belongs to one layer; a module may import only the layers listed for
its own (and its own layer). Imports inside functions are allowed only for optional packages
(torch, mpi4py, matplotlib, ...) or for ringccl modules that need one at import time: any other
lazy import hides a cycle. ``test_planted_violation_is_caught`` plants an upward import in a copy
of the tree and checks that the rules see it. No folder's modules import each other in a ring
XX
ringccl.mpi's launch <-> runner, are gone).
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "ringccl"

#: third-party packages that are optional extras: only these may be imported inside a function
OPTIONAL = {"torch", "mpi4py", "matplotlib", "rich", "sklearn", "scipy", "plotly", "selenium"}

#: layer of each top-level module or subpackage of ringccl
LAYER_OF = {
    "errors": "leaf", "args": "leaf", "units": "leaf", "ops": "leaf", "chunking": "leaf",
    "caches": "leaf", "resources": "leaf", "consistency": "leaf", "plugins": "leaf",
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

#: inside the leaf layer only the error vocabulary, argument checks and human units are shared
LEAF_MAY_IMPORT = {"errors", "args", "units"}


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
            if lazy and not needs_optional(target, graph, memo):
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
    return list(dict.fromkeys(found))  # one line per import statement and rule


def cycles(root: pathlib.Path) -> list[str]:
    """Import cycles inside a component (its modules importing each other in a ring, at the top
    or inside functions): ``a -> b -> a``."""
    modules = real_modules(root)
    graph = {n: {t for t, _, _ in imports(p, root, modules)
                 if t in modules and t != n and component(t) == component(n)}
             for n, p in modules.items()}
    found: list = []
    done: set = set()

    def visit(name: str, path: list) -> None:
        for target in sorted(graph[name]):
            if target in path:
                found.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in done:
                visit(target, path + [target])
        done.add(name)
    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    return found


def test_no_import_cycle_inside_a_folder():
    assert not cycles(SRC), "import cycles:\n" + "\n".join(cycles(SRC))


def test_planted_cycle_is_caught(tmp_path):
    copy = tmp_path / "ringccl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "backends" / "torch" / "shm.py"   # the executor imports it
    target.write_text(target.read_text() + "\nfrom . import executor\n")
    assert any("ringccl.backends.torch.executor" in c and "ringccl.backends.torch.shm" in c
               for c in cycles(copy)), cycles(copy)


def test_import_rules_hold():
    problems = violations(SRC)
    assert not problems, "import rules of docs/architecture.md broken:\n" + "\n".join(problems)


def test_every_component_has_a_layer():
    for path in [*SRC.iterdir(), *(p for d in SPLIT for p in (SRC / d).iterdir())]:
        if path.name.startswith((".", "_")) and path.name not in ("__init__.py", "__main__.py"):
            continue
        if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").exists()):
            name = component(module_name(path, SRC))
            assert name in LAYER_OF, f"{path.name} has no layer in tests/test_layering.py"


@pytest.mark.parametrize("plant, expected", [
    # the engine importing an algorithm: an upward import
    ("engine/plan.py", "from ..algorithms import build_schedule\n"),
    # the IR importing one of its views, lazily
    ("ir.py", "def _table(s):\n    from .views.show import step_table\n    return step_table(s)\n"),
    # a backend importing the simulator
    ("backends/mpi/collectives.py", "from ...sim import simulate\n"),
    # one backend importing another
    ("backends/mpi/launch.py", "from ..torch import launch\n"),
    # a backend importing the training library above it
    ("backends/torch/executor.py", "from ...training import stats\n"),
])
def test_planted_violation_is_caught(tmp_path, plant, expected):
    copy = tmp_path / "ringccl"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = set(violations(copy))
    target = copy / plant
    target.write_text(target.read_text() + "\n" + expected)
    new = set(violations(copy)) - before
    assert any(plant.split("/")[-1] in v for v in new), new


if __name__ == "__main__":  # print the violations of the tree as it is
    print("\n".join(violations(SRC)) or "no violations")
    sys.exit(0)
