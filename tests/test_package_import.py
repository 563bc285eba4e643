"""``import ringccl`` is light: its public names load on first use (PEP 562), so that the
``torch.backends`` entry point, which torch runs inside every ``import torch``, does not load
numpy, the cost model and the planner, and so that the ``ringccl`` command can turn a Ctrl-C
while its modules load into its one ``interrupted:`` line."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

import ringccl

#: where each public name was defined before it was loaded lazily: the same objects
ORIGIN = {
    "verify": "ringccl.check", "simulate": "ringccl.sim", "plan": "ringccl.planner",
    "cost": "ringccl.costmodel.model", "walk": "ringccl.costmodel.model",
    "tune": "ringccl.costmodel.tuning", "ReduceOp": "ringccl.ops",
    "ArgumentError": "ringccl.errors", "RingcclError": "ringccl.errors",
    "Schedule": "ringccl.ir", "chunk_bounds": "ringccl.ir", "busbw": "ringccl.bench.metrics",
    "get_collective": "ringccl.collectives", "register": "ringccl.algorithms",
    "clear_caches": "ringccl.caches",
}

HEAVY = ("numpy", "ringccl.planner", "ringccl.costmodel", "ringccl.algorithms", "ringccl.sim",
         "ringccl.cli.app")


def _fresh(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON value."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_importing_the_package_and_the_command_loads_none_of_the_heavy_modules():
    loaded = _fresh(f"""
        import json, sys
        import ringccl, ringccl.cli
        print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))
        """)
    assert loaded == []


def test_importing_torch_loads_only_the_backends_entry_point():
    pytest.importorskip("torch")
    loaded = _fresh("""
        import json, sys
        import torch
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("ringccl"))))
        """)
    # torch >= 2.5 runs the entry point; an older torch runs nothing of ringccl
    assert loaded in ([], ["ringccl", "ringccl.torch_autoload"])


@pytest.mark.parametrize("name", sorted(ORIGIN))
def test_each_public_name_is_the_object_its_module_defines(name):
    assert getattr(ringccl, name) is getattr(importlib.import_module(ORIGIN[name]), name)


def test_every_name_in_all_resolves_and_dir_lists_them():
    for name in (*ringccl.__all__, *ringccl._LAZY):
        assert getattr(ringccl, name) is not None, name
    assert ringccl.bounded is importlib.import_module("ringccl.algorithms.bounded")
    listed = set(dir(ringccl))
    assert set(ringccl.__all__) <= listed and {"planner", "views", "torch"} <= listed
    assert "bounded" not in listed and "COLLECTIVES" not in listed   # not public names
    assert ringccl.table is importlib.import_module("ringccl.views.show").step_table
    assert ringccl.topology is importlib.import_module("ringccl.costmodel.topology")


def test_a_subpackage_brings_the_modules_the_public_names_come_from():
    # as the eager import of the package had loaded them
    loaded = _fresh("""
        import json
        import ringccl
        print(json.dumps([ringccl.costmodel.tuning.__name__, ringccl.views.show.__name__,
                          ringccl.bench.metrics.__name__]))
        """)
    assert loaded == ["ringccl.costmodel.tuning", "ringccl.views.show", "ringccl.bench.metrics"]


def test_the_two_functions_named_like_modules_stay_functions_after_those_modules_load():
    result = _fresh("""
        import json
        import ringccl
        import ringccl.algorithms.tree, ringccl.collectives  # the import system sets these
        print(json.dumps([ringccl.algorithms("broadcast")[:1], ringccl.collectives()[:1]]))
        """)
    assert result == [["ring"], ["all_reduce"]]


def test_a_subpackage_is_an_attribute_on_first_use_and_a_wrong_name_is_refused():
    assert ringccl.planner is importlib.import_module("ringccl.planner")
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        ringccl.no_such_name  # noqa: B018


def test_ctrl_c_while_the_commands_modules_load_is_one_line_and_exit_130():
    # a KeyboardInterrupt raised by the import of the command's modules, as a Ctrl-C there
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        class Interrupt:
            def find_spec(self, name, path=None, target=None):
                if name == "ringccl.cli.app":
                    raise KeyboardInterrupt
        sys.meta_path.insert(0, Interrupt())
        from ringccl.cli import main
        sys.exit(main(["plan", "--model", "llama3-70b"]))
        """)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 130
    assert out.stderr.splitlines() == ["interrupted: ringccl plan stopped before it started"]


def test_ctrl_c_while_the_parser_is_built_is_one_line_and_exit_130():
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        import ringccl.cli.app as app
        def interrupted():
            raise KeyboardInterrupt
        app.build_parser = interrupted
        from ringccl.cli import main
        sys.exit(main(["simulate", "all_reduce", "--world-size", "4"]))
        """)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 130
    assert out.stderr.splitlines() == ["interrupted: ringccl simulate stopped before it started"]
