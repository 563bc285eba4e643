"""One rank of a ringccl-backend job started as torchrun would (env://), for test_backend_faults.

Usage: python backend_script.py MODE   (env: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)
MODE "env": init_process_group("ringccl") from the environment, all_reduce, print JSON.
MODE "store": the same with an explicit TCPStore, rank and world_size.
MODE "kill": the last rank exits during a stream of all_reduces; the others print what they
raised and after how many seconds (their waits' bound: RINGCCL_TIMEOUT, set by the test).
MODE "kill_small": the same with small all_reduces (4 KiB, below the inline threshold: the
dispatch policy runs them in the caller's thread); the report says whether the failed call's
Work was already complete when the call returned (it ran inline).
MODE "kill_barrier": the last rank exits during a stream of barriers; the others report what
they raised.
MODE "kill_ddp": DDP trains a small MLP; the last rank exits at its third step; the others
report what their backward (DDP's reducer, in C++, reading the bucket futures) raised.
MODE "kill_ddp_hook": the same with ringccl.torch.comm_hook registered (its futures come from
a background Communicator).
MODE "kill_first": the last rank exits before the group's first collective (the shared
memory's set-up); the others report what their first all_reduce raised.
Every report names the group's transport, and (shm, hybrid) its segments' uid, so the test can check
that /dev/shm holds none of them afterwards.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import ringccl.torch  # noqa: F401  (registers "ringccl")
from ringccl.backends.shm import registry

assert ringccl.torch.backend.BACKEND_NAME == "ringccl"  # the import is the point

# the group's own bound, which its connect (the store, gloo's full mesh) uses too: generous,
# from tests/bounds.py (no test here is about it); the waits' bound is RINGCCL_TIMEOUT
TIMEOUT = datetime.timedelta(seconds=float(os.environ.get("RINGCCL_TEST_RENDEZVOUS_S", "120")))


def main(mode: str) -> None:
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if mode == "store":
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              world_size, rank == 0, timeout=TIMEOUT)
        dist.init_process_group("ringccl", store=store, rank=rank, world_size=world_size,
                                timeout=TIMEOUT)
    else:
        dist.init_process_group("ringccl", timeout=TIMEOUT)   # env://, as under torchrun
    if mode == "kill_first":
        pg = dist.distributed_c10d._get_default_group()
        report = {"rank": rank, "transport": pg.transport}
        if rank == world_size - 1:
            os._exit(17)
        try:
            dist.all_reduce(torch.ones(8))
        except Exception as exc:  # what the survivors raise is the result
            report["raised"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        print(json.dumps(report), flush=True)
        # a survivor gone at once would look like the rank that left to a slower survivor
        time.sleep(float(os.environ.get("RINGCCL_TEST_SLACK", "5")))
        os._exit(0)
    t = torch.full((1 << 20,), float(rank))
    dist.all_reduce(t)
    pg = dist.distributed_c10d._get_default_group()
    report = {"rank": rank, "sum": float(t[0]), "backend": dist.get_backend(),
              "hosts": pg.hosts, "transport": pg.transport,
              "uid": [state.uid for state in registry.groups("owned")]
              + [state.uid for state in registry.groups("hybrid")]}
    if mode in ("kill", "kill_barrier"):
        if rank == world_size - 1:
            time.sleep(0.3)
            os._exit(17)
        # bounded either way: the dead rank fails one of them
        call, count = ((lambda: dist.all_reduce(t)), 200) if mode == "kill" else (dist.barrier,
                                                                                  100000)
        t0 = time.monotonic()
        try:
            for _ in range(count):
                call()
        except Exception as exc:  # what the survivors raise is the result
            report["raised"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        report["seconds"] = time.monotonic() - t0
        print(json.dumps(report), flush=True)
        os._exit(0)   # the group is unusable now; do not wait in its teardown
    if mode in ("kill_ddp", "kill_ddp_hook"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 4))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        if mode == "kill_ddp_hook":
            ddp.register_comm_hook(None, ringccl.torch.comm_hook("ring"))
        t0 = time.monotonic()
        try:
            for step in range(50):
                if step == 2 and rank == world_size - 1:
                    os._exit(17)
                loss = ddp(torch.randn(8, 16)).square().mean()
                loss.backward()
        except Exception as exc:  # what the survivors raise is the result
            report["raised"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        report["seconds"] = time.monotonic() - t0
        print(json.dumps(report), flush=True)
        os._exit(0)
    if mode == "kill_small":
        small = torch.full((1024,), float(rank))
        report["inline_bytes"] = pg._group.inline_bytes
        if rank == world_size - 1:
            time.sleep(0.3)
            os._exit(17)
        # small calls are quick: loop until one fails (bounded well past the waits' bound)
        end = time.monotonic() + TIMEOUT.total_seconds()
        while time.monotonic() < end:
            started = time.monotonic()
            work = dist.all_reduce(small, async_op=True)
            report["complete_on_return"] = work.is_completed()
            try:
                work.wait()
            except Exception as exc:  # what the survivors raise is the result
                report["raised"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                break
        report["seconds"] = time.monotonic() - started
        print(json.dumps(report), flush=True)
        os._exit(0)
    dist.destroy_process_group()
    report["shm_states_after_destroy"] = len(registry.groups("owned"))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
