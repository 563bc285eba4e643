"""ringccl.shm without processes: segments (create, attach, unlink, space errors, the sweep),
one-rank groups, the platform refusal."""

from __future__ import annotations

import errno
import os

import pytest

from ringccl.backends import shm
from ringccl.errors import BackendError
from ringccl.backends.shm import group as shm_group
from ringccl.backends.shm import segment as shm_segment


@pytest.fixture
def shm_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGCCL_SHM_DIR", str(tmp_path))
    monkeypatch.delenv("RINGCCL_SHM_JOB", raising=False)
    return tmp_path


def test_create_attach_unlink(shm_dir):
    seg = shm.Segment.create(shm.segment_name("abc", 0), 8192)
    other = shm.Segment.attach(seg.name, 8192)
    seg.map[:5] = b"hello"
    assert other.map[:5] == b"hello"
    assert os.listdir(shm_dir) == ["ringccl-abc-0"]
    assert oct(os.stat(seg.path).st_mode & 0o777) == "0o600"
    seg.unlink()
    assert not os.listdir(shm_dir)
    other.map[5:6] = b"!"                 # the mappings outlive the name
    assert seg.map[:6] == b"hello!"
    seg.close(), other.close()


def test_create_refuses_an_existing_name(shm_dir):
    seg = shm.Segment.create("ringccl-x-1", 4096)
    with pytest.raises(BackendError, match="cannot create"):
        shm.Segment.create("ringccl-x-1", 4096)
    seg.close()
    assert not os.listdir(shm_dir)


def test_no_space_is_a_clear_error_and_leaves_nothing(shm_dir, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(shm.ShmSpaceError) as info:
        shm.Segment.create("ringccl-y-0", 1 << 30)
    message = str(info.value)
    assert f"needs {1 << 30} bytes" in message and str(shm_dir) in message
    assert "RINGCCL_SHM_DIR" in message and info.value.needed == 1 << 30
    assert not os.listdir(shm_dir)


def test_attach_of_a_missing_segment(shm_dir):
    with pytest.raises(BackendError, match="cannot attach"):
        shm.Segment.attach("ringccl-none-0", 4096)


def test_job_prefix_and_sweep(shm_dir, monkeypatch):
    monkeypatch.setenv("RINGCCL_SHM_JOB", "j1")
    name = shm.segment_name("abc", 3)
    assert name == "ringccl-j1-abc-3"
    shm.Segment.create(name, 4096).map.close()   # as if its creator died before unlinking
    (shm_dir / "ringccl-j2-abc-0").write_bytes(b"")
    assert shm.sweep("j1") == [name]
    assert os.listdir(shm_dir) == ["ringccl-j2-abc-0"]
    monkeypatch.setenv("RINGCCL_SHM_JOB", "../x")
    with pytest.raises(BackendError, match="RINGCCL_SHM_JOB"):
        shm.segment_name("abc", 0)


def test_one_rank_group_grows_and_leaves_nothing(shm_dir):
    g = shm.ShmGroup(0, 1, lambda obj: [obj], timeout=5.0)
    assert not os.listdir(shm_dir)              # unlinked right after set-up
    g.enter(100)
    assert g.work_slot >= 100 and g.work_serial == 1
    g.enter(1 << 20)
    assert g.work_slot == 1 << 20 and g.work_serial == 2 and list(g.segments) == [2]
    assert not os.listdir(shm_dir)
    g.close()
    with pytest.raises(BackendError, match="released"):
        g.enter(1)


def test_waits_are_bounded_and_abort_is_seen(shm_dir):
    g = shm.ShmGroup(0, 1, lambda obj: [obj], timeout=5.0)
    word = g.rank_word(0, 1)
    with pytest.raises(TimeoutError, match="within 0.2 s"):
        g.wait_word(word, 10 ** 9, 0, "do something", timeout=0.2)
    assert g.aborted() is not None               # a timeout aborts the group for the peers
    with pytest.raises(ConnectionError, match="this rank aborted .* in an earlier call"):
        g.enter(1)
    g.close()


def test_non_x86_is_refused(monkeypatch):
    monkeypatch.setattr(shm_group.platform, "machine", lambda: "aarch64")
    assert not shm.supported_platform()
    with pytest.raises(BackendError, match="x86-64.*aarch64"):
        shm.check_platform()


def test_non_x86_torch_transport_shm_is_refused(monkeypatch):
    pytest.importorskip("torch")
    from ringccl.backends.torch.transport import resolve_transport
    monkeypatch.setattr(shm_group.platform, "machine", lambda: "armv8l")
    with pytest.raises(BackendError, match="transport='shm' needs x86-64"):
        resolve_transport(None, "shm", None)


def test_bad_transport_names_the_argument(monkeypatch):
    pytest.importorskip("torch")
    from ringccl.backends.torch.transport import resolve_transport
    with pytest.raises(ValueError, match="transport='tcp' must be one of 'auto', 'shm', 'p2p'"):
        resolve_transport(None, "tcp", None)
    monkeypatch.setenv("RINGCCL_TRANSPORT", "nope")
    with pytest.raises(ValueError, match="RINGCCL_TRANSPORT='nope'"):
        resolve_transport(None, "auto", None)


def test_host_id_override(monkeypatch):
    monkeypatch.setenv("RINGCCL_HOST_ID", "host-a")
    assert shm.host_id() == "host-a"
    monkeypatch.delenv("RINGCCL_HOST_ID")
    assert shm.host_id() != "host-a" and "/" in shm.host_id()


def test_segment_module_imports_no_torch():
    import ast
    import pathlib
    for path in pathlib.Path(shm_segment.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.split(".")[0] == "torch" for n in names), path
