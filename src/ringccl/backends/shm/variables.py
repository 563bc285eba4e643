"""The environment variables a worker's collective calls read, checked once by a launcher before
any worker starts (``ringccl.torch.launch``, the mpirun launcher of ``ringccl bench``).

A bad value is refused by every call that reads it; checked here, in the launching process, it
is one error, the same one a worker would raise, instead of one per rank after every process
started. Each variable keeps its one parser, where the calls read it; this module only calls
them:

* ``RINGCCL_TRANSPORT``: :func:`ringccl.backends.shm.transport_choice` (against the launched
  backend's transports);
* ``RINGCCL_TIMEOUT``: :func:`ringccl.engine.timeout_seconds`;
* ``RINGCCL_DEBUG``: :func:`ringccl.consistency.debug_level`;
* ``RINGCCL_ALGO``: :func:`ringccl.costmodel.choice.parse_algo_env`;
* ``RINGCCL_LANE``: :func:`ringccl.backends.shm.lane.check_environment`;
* ``RINGCCL_SHM_THREADS``: :func:`ringccl.backends.shm.lane_native.threads_setting`.
"""

from __future__ import annotations

from ... import environment
from ...consistency import debug_level
from ...costmodel.choice import parse_algo_env
from ...engine import timeout_seconds
from . import lane, lane_native, transport_choice

__all__ = ["VARIABLES", "check_environment"]

#: the variables :func:`check_environment` checks
VARIABLES = ("RINGCCL_TRANSPORT", "RINGCCL_TIMEOUT", "RINGCCL_DEBUG", "RINGCCL_ALGO",
             "RINGCCL_LANE", "RINGCCL_SHM_THREADS")


def check_environment(transports: tuple) -> None:
    """Refuse a value of :data:`VARIABLES` that the calls of a launched worker would refuse.

    Args:
        transports: the transports the launched backend's calls accept (with "auto"), e.g.
            ``ringccl.backends.torch.transport.TRANSPORTS``.
    Raises:
        ArgumentError: a variable's value, with the message its parser gives a call (naming
            the variable, the value and what is allowed). BackendError: ``RINGCCL_TRANSPORT``
            shm or hybrid on a machine that is not x86-64.
    """
    transport_choice("auto", transports)
    timeout_seconds(None)
    debug_level()
    parse_algo_env(environment.get("RINGCCL_ALGO") or "")
    lane.check_environment()
    lane_native.threads_setting()
