"""docs/contributing.md's "Adding an algorithm" example, run as written: one file, and the
algorithm is verified, simulated against numpy, listed and costed like the built-in ones."""

import re
import types
from pathlib import Path

import numpy as np
import pytest

import ringccl
from ringccl.algorithms import REGISTRY
from ringccl.views.interop import to_msccl_xml

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "contributing.md"


def _example_source() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("## Adding an algorithm", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def reverse_ring():
    source = _example_source()
    module = types.ModuleType("reverse_ring")
    exec(compile(source, "docs/contributing.md (Adding an algorithm)", "exec"), module.__dict__)
    yield module
    REGISTRY.pop(("all_gather", "reverse_ring"), None)
    ringccl.clear_caches()


def test_example_is_about_twenty_lines():
    lines = [ln for ln in _example_source().splitlines() if ln.strip()]
    assert 12 <= len(lines) <= 25


def test_example_registers_verifies_and_simulates(reverse_ring):
    assert "reverse_ring" in ringccl.algorithms("all_gather")
    algo = ringccl.get_algorithm("all_gather", "reverse_ring")
    for n in range(1, 41):
        s = ringccl.verify(ringccl.schedule("all_gather", "reverse_ring", world_size=n))
        assert s.num_steps == algo.num_steps(n)
        assert s.bytes_sent(n * 100, 1).max() == pytest.approx(algo.bytes_sent(n, n * 100))
        if n > 1:
            assert (s.dst == (s.src - 1) % n).all()
    x = np.random.default_rng(0).integers(-100, 100, size=(7, 33)).astype(np.int32)
    r = ringccl.simulate("all_gather", x, algorithm="reverse_ring")
    assert r.matches_reference
    assert np.array_equal(r.outputs[3], x.reshape(-1))
    assert algo.time(8, 8e6, 1e-6, 1e-9, 0.0) == pytest.approx(7 * (1e-6 + 1e6 * 1e-9))
    assert "<algo" in to_msccl_xml(ringccl.schedule("all_gather", "reverse_ring", world_size=4))


def test_registration_takes_keywords_only(reverse_ring):
    """Nine positional fields are easy to swap (bytes_sent for num_steps, formulas for the
    reference): an Algorithm is written with keywords, and register takes nothing else."""
    algo = ringccl.get_algorithm("all_gather", "reverse_ring")
    fields = dict(collective=algo.collective, name=algo.name, builder=algo.builder,
                  num_steps=algo.num_steps, bytes_sent=algo.bytes_sent,
                  steps_formula=algo.steps_formula, bytes_formula=algo.bytes_formula)
    with pytest.raises(TypeError, match="positional"):
        ringccl.Algorithm(*fields.values())
    with pytest.raises(ringccl.ArgumentTypeError, match="register takes an Algorithm"):
        ringccl.register(tuple(fields.values()))
    assert ringccl.Algorithm(**fields) == ringccl.Algorithm(**fields, reference="", time=None)


def test_a_builder_registered_for_another_collective_is_refused_when_built(reverse_ring):
    # the all_gather example registered as an all_reduce: built, simulated and recommended by
    # tune as an all_reduce before; now its first build names the mismatch
    algo = ringccl.get_algorithm("all_gather", "reverse_ring")
    fields = dict(builder=algo.builder, num_steps=algo.num_steps, bytes_sent=algo.bytes_sent,
                  steps_formula=algo.steps_formula, bytes_formula=algo.bytes_formula)
    ringccl.register(ringccl.Algorithm(collective="all_reduce", name="mislabeled", **fields))
    try:
        with pytest.raises(ringccl.ArgumentError, match=r"the builder of 'mislabeled', "
                           r"registered for all_reduce, returned all_gather on world_size=4"):
            ringccl.schedule("all_reduce", "mislabeled", world_size=4)
        with pytest.raises(ringccl.ArgumentError, match="registered for all_reduce"):
            ringccl.simulate("all_reduce", np.ones((4, 3), np.float32), algorithm="mislabeled")
    finally:
        REGISTRY.pop(("all_reduce", "mislabeled"), None)
        ringccl.clear_caches()
    for bad, error in (({"name": ""}, ringccl.ArgumentError),
                       ({"name": 5}, ringccl.ArgumentError),
                       ({"name": "x", "builder": 5}, ringccl.ArgumentTypeError)):
        with pytest.raises(error, match="name=|builder="):
            ringccl.register(ringccl.Algorithm(collective="all_gather",
                                               **{**fields, "name": "x", **bad}))
    assert ("all_gather", "x") not in REGISTRY and ("all_gather", "") not in REGISTRY
