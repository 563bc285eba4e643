"""The ``torch.backends`` entry point (pyproject.toml): registers the torch.distributed backend
``"ringccl"`` when torch is imported (torch >= 2.5; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns it
off), so ``init_process_group("ringccl")`` works in scripts that never import ringccl.

It lives outside :mod:`ringccl.torch` and imports nothing of it until a group is created: torch
calls the entry point at the end of its own ``import torch``, which may be running *inside*
``import ringccl.torch`` (its modules import torch first), so importing ringccl.torch here would
find it half-initialised.
"""

from __future__ import annotations

__all__ = ["autoload", "BACKEND_NAME"]

BACKEND_NAME = "ringccl"


def _create(*args, **kwargs):
    """The backend's creator, imported on first use (:func:`ringccl.torch.backend.
    create_process_group`)."""
    from .backends.torch.process_group import create_process_group
    return create_process_group(*args, **kwargs)


def autoload() -> None:
    """Register ``"ringccl"`` with ``torch.distributed.Backend.register_backend`` (idempotent:
    :func:`ringccl.torch.backend.register` leaves an earlier registration in place)."""
    import torch.distributed as dist

    if not dist.is_available() or BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu"])
