"""ringccl.environment.get follows os.environ through every way it changes."""

import os

import pytest

from ringccl import environment

NAME = "RINGCCL_TEST_ENVIRONMENT_VARIABLE"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)


def test_get_follows_assignment_deletion_and_putenv_paths(monkeypatch):
    assert environment.get(NAME) is None
    os.environ[NAME] = "a"
    assert environment.get(NAME) == "a" == os.environ.get(NAME)
    monkeypatch.setenv(NAME, "b é")
    assert environment.get(NAME) == "b é"
    os.environ.update({NAME: "c"})
    assert environment.get(NAME) == "c"
    del os.environ[NAME]
    assert environment.get(NAME) is None
    os.environ.setdefault(NAME, "")
    assert environment.get(NAME) == "" == os.environ.get(NAME)
    os.environ.pop(NAME)
    assert environment.get(NAME) is None


def test_reader_is_a_key_of_the_variables_state(monkeypatch):
    names = (NAME, "RINGCCL_TEST_OTHER_VARIABLE")
    monkeypatch.delenv(names[1], raising=False)
    read = environment.reader(names)
    before = read()
    assert before == (None, None)
    monkeypatch.setenv(NAME, "1")
    after = read()
    assert after != before and after[1] is None
    assert after[0] in ("1", b"1")
    monkeypatch.setenv(NAME, "2")
    assert read() != after


def test_the_portable_reads_give_the_same_answers(monkeypatch):
    monkeypatch.setenv(NAME, "x")
    fast = environment.reader((NAME,))()
    monkeypatch.setattr(environment, "_DATA", None)   # a platform without os.environ._data
    assert environment.get(NAME) == "x"
    assert environment.reader((NAME,))() == ("x",)
    assert [os.fsdecode(v) for v in fast] == ["x"]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_reader_reads_each_variable_in_its_place_for_any_count(monkeypatch, count):
    names = tuple(f"{NAME}_{i}" for i in range(count))
    for n in names:
        monkeypatch.delenv(n, raising=False)
    read = environment.reader(names)
    assert read() == (None,) * count
    for i, n in enumerate(names):
        monkeypatch.setenv(n, f"v{i}")
        got = read()
        assert len(got) == count
        assert [None if v is None else os.fsdecode(v) for v in got] == \
            [f"v{j}" if j <= i else None for j in range(count)]
