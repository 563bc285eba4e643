"""Fixtures of the multi-process tests."""

import os
import tempfile

import pytest


@pytest.fixture
def shm_dir(monkeypatch):
    """A fresh shared-memory directory (``RINGCCL_SHM_DIR``) for the workers' segments, which
    must be empty again afterwards (nothing outlives its job)."""
    with tempfile.TemporaryDirectory(prefix="ringccl-test-shm.", dir="/dev/shm") as d:
        monkeypatch.setenv("RINGCCL_SHM_DIR", d)
        yield d
        assert not os.listdir(d), os.listdir(d)
