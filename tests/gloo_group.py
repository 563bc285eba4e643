"""A 1-rank gloo process group inside the test process, for module-scoped fixtures."""

import pytest


def one_rank_gloo_group():
    """A generator for a module-scoped fixture: a 1-rank gloo group in the test process (every
    collective is then the identity), destroyed afterwards; skips if torch is missing or a
    group is already initialized."""
    pytest.importorskip("torch", reason="torch is not installed (pip install 'ringccl[torch]')")
    import torch.distributed as dist

    from ringccl.torch.launch import free_port
    if dist.is_initialized():  # pragma: no cover - another module left one
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()
