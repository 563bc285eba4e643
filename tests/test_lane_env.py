"""RINGCCL_LANE: its values, and a bad one refused by name at the first call."""

import os

import pytest

from ringccl.backends.shm import lane
from ringccl.errors import ArgumentError


@pytest.mark.parametrize("text,on,native", [("", True, True), ("1", True, True),
                                            ("on", True, True), ("0", False, True),
                                            ("OFF", False, True), ("python", True, False),
                                            (" Python ", True, False)])
def test_lane_env_values(monkeypatch, text, on, native):
    monkeypatch.setenv("RINGCCL_LANE", text)
    assert lane._from_env() == (on, native)


def test_the_extension_is_built():
    # CI machines have a C compiler: the optional extension must have built and imported, so
    # a failing build cannot hide behind the Python replay
    from ringccl.backends.shm import _lanec, lane_native
    assert lane_native.available() and lane.native()
    assert _lanec.HEADER_WORDS == lane_native.HEADER_WORDS
    assert _lanec.OP_WORDS == lane_native.OP_WORDS


def test_lane_env_bad_value_names_it(monkeypatch):
    monkeypatch.setenv("RINGCCL_LANE", "maybe")
    monkeypatch.setitem(lane._state, "enabled", lane._from_env())
    with pytest.raises(ArgumentError, match="RINGCCL_LANE='maybe' must be '1' or 'on' .*"
                       "'python'"):
        lane.signature("all_reduce", 0)
    with pytest.raises(ArgumentError, match="RINGCCL_LANE"):
        lane.enabled()


def test_lane_off_gives_no_signature(monkeypatch):
    monkeypatch.setitem(lane._state, "enabled", False)
    assert lane.signature("all_reduce", 0) is None


@pytest.mark.parametrize("debug,compiled", [("INFO", False), ("TRACE", False), ("1", False),
                                            ("0", True), ("", True)])
def test_logged_or_checked_calls_are_never_compiled(monkeypatch, debug, compiled):
    # a replayed call would skip the general path's log line and cross-rank check
    monkeypatch.setitem(lane._state, "enabled", True)
    monkeypatch.setenv("RINGCCL_DEBUG", debug)
    assert (lane.signature("all_reduce", 0) is not None) is compiled


def test_the_key_follows_the_environment(monkeypatch):
    # the key reads the variables a call reads at every call: a change is a new signature
    monkeypatch.setitem(lane._state, "enabled", True)
    for name in lane._ENV:
        monkeypatch.delenv(name, raising=False)
    plain = lane.signature("all_reduce", 0)
    assert plain == lane.signature("all_reduce", 0)
    keys = {plain}
    for name, value in (("RINGCCL_TIMEOUT", "30"), ("RINGCCL_ALGO", "all_reduce:ring"),
                        ("RINGCCL_TRANSPORT", "shm"), ("RINGCCL_DEBUG", "0")):
        monkeypatch.setenv(name, value)
        key = lane.signature("all_reduce", 0)
        assert key not in keys, name
        keys.add(key)
    monkeypatch.setattr(lane, "_RAW", None)   # the portable reads give the same answer
    assert lane._environment() == tuple(os.environ.get(v) for v in lane._ENV)
