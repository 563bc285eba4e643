"""The shared-memory group's abort word names who aborted, why, and the peer it meant (a rank
that found a peer dead, or timed out waiting for one), so that every other rank's error says
which rank to look at; two ranks of one group as threads (tests/test_shm_lazy.py)."""

from __future__ import annotations

import pytest

from ringccl.backends.shm import group as shm_group

from .test_shm_lazy import _pair, shm_dir  # noqa: F401  (the fixture)


@pytest.mark.parametrize("code, peer, says", [
    (shm_group._ABORT_DEAD, 1, "rank 0 aborted the group's shared memory (it found rank 1 dead)"),
    (shm_group._ABORT_TIMEOUT, 1, "(it timed out waiting for rank 1)"),
    (shm_group._ABORT_DEAD, -1, "(it found a peer dead)"),
    (shm_group._ABORT_ERROR, -1, "(it failed)"),
    (shm_group._ABORT_SPACE, -1, "(shared memory ran out of space)")])
def test_the_abort_names_the_peer_it_meant(shm_dir, code, peer, says):  # noqa: F811
    a, b = _pair()
    try:
        a.abort(code, peer)
        a.abort(shm_group._ABORT_ERROR)   # the first abort stays the one named
        exc = b.aborted()
        assert says in str(exc) and exc.peer == 0, str(exc)
        assert "earlier call" in str(a.aborted()) and a.aborted().peer is None
    finally:
        for g in (a, b):
            g.close()
