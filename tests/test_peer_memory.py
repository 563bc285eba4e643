"""Reading another process's memory (ringccl.backends.shm.peer_memory, process_vm_readv): a
forked child's probe word and bytes read back exactly; a wrong word, an unreadable address and
a process that is gone are told apart, the error naming the rank."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ringccl.backends.shm import peer_memory

pytestmark = pytest.mark.skipif(not peer_memory.enabled(),
                                reason="process_vm_readv is not available here")


@pytest.fixture
def child():
    """A forked child that keeps (a copy of) this process's memory until told to go."""
    data = np.arange(1 << 16, dtype=np.float64) * 1.5
    word = peer_memory.probe_word()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: waits, then leaves without running the parent's handlers
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    yield pid, data, word
    os.write(w, b"x")
    os.close(w)
    os.waitpid(pid, 0)


def test_a_peers_bytes_are_read_exactly(child):
    pid, data, _ = child
    into = np.zeros_like(data)
    got = peer_memory.read(pid, peer_memory.address(data), into, "1")
    assert got is into and into.tobytes() == data.tobytes()


def test_the_probe_word_is_recognised(child):
    pid, data, word = child
    assert not peer_memory.probe(pid, word)   # the child's word holds its parent's pid
    assert not peer_memory.probe(pid, peer_memory.address(data))   # not a probe word
    assert not peer_memory.probe(pid, 0)
    assert peer_memory.probe(os.getpid(), peer_memory.probe_word())


def test_an_unreadable_address_is_an_error_naming_the_rank(child):
    pid, _, _ = child
    with pytest.raises(peer_memory.ReadError, match=r"rank 3 \(pid \d+\) could not be read"):
        peer_memory.read(pid, 8, np.zeros(4), "3")


def test_a_process_that_is_gone_is_named():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    with pytest.raises(peer_memory.ReadError, match=rf"rank 2 \(pid {pid}\) is gone"):
        peer_memory.read(pid, peer_memory.probe_word(), np.zeros(2, np.int64), "2")
