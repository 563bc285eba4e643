"""ringccl.resources: the machine's cores and memory, and the up-front process check."""

import os

import pytest

from ringccl import resources
from ringccl.errors import ArgumentError, ArgumentTypeError


def test_machine_figures_are_positive():
    assert resources.usable_cores() >= 1
    have = resources.available_memory()
    assert have is None or have > 0


def test_memory_beyond_the_machine_is_refused_naming_value_limit_and_way_out():
    with pytest.raises(ArgumentError) as info:
        resources.check_processes(1000, 160 * 10 ** 6, what="--nproc", cores=1000,
                                  memory=22 * 10 ** 9)
    message = str(info.value)
    assert message.startswith("--nproc 1000 needs about 149.01 GiB for 1000 worker processes")
    assert "20.49 GiB available; at most 137 fit; pass --oversubscribe" in message


def test_more_than_four_processes_per_core_are_refused():
    resources.check_processes(8, 1, cores=2, memory=10 ** 12)
    with pytest.raises(ArgumentError, match=r"nproc=9 is more than 4 processes per core on "
                       r"this machine's 2 usable cores \(at most 8\); pass oversubscribe=True"):
        resources.check_processes(9, 1, cores=2, memory=10 ** 12)


def test_oversubscribe_skips_the_limits_but_not_the_type_check():
    resources.check_processes(10 ** 6, 10 ** 9, oversubscribe=True, cores=1, memory=1)
    with pytest.raises(ArgumentTypeError, match="nproc=2.0 must be an integer >= 1"):
        resources.check_processes(2.0, oversubscribe=True)
    with pytest.raises(ArgumentError, match="nproc=0 must be an integer >= 1"):
        resources.check_processes(0)


def test_run_worker_estimate_is_eight_buffers():
    # measured peaks were 6.5-10.3 buffers (RUN_BUFFER_FACTOR's comment)
    assert resources.run_worker_bytes(512 << 20) == 8 * (512 << 20)
    with pytest.raises(ArgumentError, match="buffer_bytes=-1"):
        resources.run_worker_bytes(-1)


def test_cgroup_limits_lower_the_figures(monkeypatch):
    files = {"/proc/meminfo": "MemTotal: 100 kB\nMemAvailable:   4000000 kB\n",
             "/sys/fs/cgroup/memory.max": "2000000000", "/sys/fs/cgroup/memory.current":
             "500000000", "/sys/fs/cgroup/cpu.max": "150000 100000"}
    monkeypatch.setattr(resources, "_read", lambda path: files.get(path))
    assert resources.available_memory() == 1_500_000_000
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
    assert resources.usable_cores() == min(2, affinity)  # ceil(1.5 cores of quota)
    files["/sys/fs/cgroup/memory.max"] = "max"
    assert resources.available_memory() == 4_000_000 * 1024


def test_cgroup_v1_limits(monkeypatch):
    files = {"/proc/meminfo": "MemAvailable:   4000000 kB\n",
             "/sys/fs/cgroup/memory/memory.limit_in_bytes": "1000000000",
             "/sys/fs/cgroup/memory/memory.usage_in_bytes": "250000000",
             "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000",
             "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}
    monkeypatch.setattr(resources, "_read", lambda path: files.get(path))
    assert resources.available_memory() == 750_000_000
    assert resources.usable_cores() == 1
    files["/sys/fs/cgroup/memory/memory.limit_in_bytes"] = str(2 ** 63 - 4096)  # no limit
    files["/sys/fs/cgroup/cpu/cpu.cfs_quota_us"] = "-1"
    assert resources.available_memory() == 4_000_000 * 1024


@pytest.mark.parametrize("cores,memory,message", [
    # 64 processes of 1 GB: 2 cores hold 8, 40 GB hold 40: the cores bind, and are named
    (2, 40 * 10 ** 9, "--nproc 64 is more than 4 processes per core on this machine's 2 usable "
     "cores (at most 8)"),
    # 100 cores hold 400, 40 GB still 40: the memory binds
    (100, 40 * 10 ** 9, "available; at most 40 fit"),
])
def test_the_limit_named_is_the_one_that_binds(cores, memory, message):
    with pytest.raises(ArgumentError) as info:
        resources.check_processes(64, 10 ** 9, what="--nproc", cores=cores, memory=memory)
    assert message in str(info.value)
    assert ("available" in str(info.value)) == (cores == 100)
