"""Every time bound of the multi-process tests, from one place.

A test that waits for processes bounds the wait so that nothing hangs; a test *about* time (a
timeout fires, a dead peer is found before the timeout) compares a measured duration with its
timeout plus an allowance for a loaded machine. Both scale with :data:`SLOWDOWN`:

* :data:`SLOWDOWN`: how much slower than a quiet one this machine is right now, measured once
  per test process: the larger of a fixed CPU workload's time against its quiet time
  (:data:`QUIET_S`) and the load average per core, at least 1;
* :func:`slack`: seconds a loaded machine may add to a timeout before a test about time calls it
  late (``5 s × SLOWDOWN``);
* :func:`rendezvous_s`: the bound of a group's connection (gloo's full mesh, the store), which
  no test is about: generous (``120 s × SLOWDOWN``); a test's own fault bound is its waits'
  (``timeout=``, ``RINGCCL_TIMEOUT``), never the connect's;
* :func:`job`: a whole job's bound (a launch, a subprocess, pytest-timeout's mark): generous
  on a quiet machine, scaled (``seconds × SLOWDOWN``): the hang guard.

Child processes get the figures through the environment (``RINGCCL_TEST_SLACK``,
``RINGCCL_TEST_RENDEZVOUS_S``), so that scripts started by mpirun or torchrun use the same.
"""

from __future__ import annotations

import os
import time

#: seconds the workload of :func:`_workload` takes on one core of this test machine when
#: nothing else runs: the fastest of 60 runs on it (0.039 s, at load 3.6 on 2 cores), rounded
#: down
QUIET_S = 0.035


def _workload() -> float:
    """Seconds a fixed pure-Python loop takes here."""
    start = time.perf_counter()
    s = 0
    for i in range(300_000):
        s += i * i % 7
    return time.perf_counter() - start


def _slowdown() -> float:
    if "RINGCCL_TEST_SLOWDOWN" in os.environ:   # the parent's measurement
        return max(1.0, float(os.environ["RINGCCL_TEST_SLOWDOWN"]))
    cpu = sorted(_workload() for _ in range(3))[1] / QUIET_S
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = 1.0
    return max(1.0, cpu, load)


#: how much slower than a quiet machine this one is now (>= 1)
SLOWDOWN = _slowdown()
os.environ["RINGCCL_TEST_SLOWDOWN"] = f"{SLOWDOWN:.2f}"


def slack(base: float = 5.0) -> float:
    """Seconds a loaded machine may add to a timeout (``base`` seconds on a quiet one)."""
    return base * SLOWDOWN


def rendezvous_s() -> float:
    """The bound of a group's connection: generous, no test is about it."""
    return 120.0 * SLOWDOWN


def job(seconds: float) -> float:
    """A whole job's bound: ``seconds``, generous on a quiet machine, scaled."""
    return seconds * SLOWDOWN


def environment() -> dict:
    """The figures for child processes (scripts read ``RINGCCL_TEST_SLACK`` and
    ``RINGCCL_TEST_RENDEZVOUS_S``)."""
    return {"RINGCCL_TEST_SLOWDOWN": f"{SLOWDOWN:.2f}", "RINGCCL_TEST_SLACK": f"{slack():.1f}",
            "RINGCCL_TEST_RENDEZVOUS_S": f"{rendezvous_s():.0f}"}
