"""Fault injection on local gloo processes: one rank dies (or stalls) at a chosen step.

One trial forks ``world_size`` processes (fork: no torch import per process, so a trial takes
about a second), runs a collective once cleanly (checked against gloo's own), then again with
the victim dying (``os._exit``) or stalling (sleeping) when it posts its first operation of step
``step`` or later (or right after the call, if it posts none that late), then the collective once
more, then a 1-element direct all-reduce, which involves every pair. Each survivor records the
first error it gets, when, its attributes, whether its tensors were left exactly as before the
call, and whether every call that returned gave the right answer.

Used by tests/distributed/test_faults.py (a few trials per CI run) and
benchmarks/fault_injection.py (50+ trials, a table of outcomes).
"""

from __future__ import annotations

import datetime
import itertools
import multiprocessing
import os
import queue
import random
import signal
import time
from dataclasses import asdict, dataclass, field

from .. import bounds

VICTIM_EXIT = 17
_jobs = itertools.count()


@dataclass
class Trial:
    collective: str
    algorithm: str
    world_size: int
    victim: int
    step: int                 # the victim fails at its first operation of this step or later
    mode: str = "kill"        # "kill": os._exit; "stall": sleep until killed; "sigkill",
    #                           "sigstop": the signal to itself
    transport: str = "p2p"    # ringccl.torch's transport= for the trial's calls
    timeout: float = 4.0      # the waits' bound, seconds: RINGCCL_TIMEOUT in every rank (the
    #                           group's own, which gloo's connect uses too, is generous)
    count: int = 0            # elements (0: 12 * world_size)
    op: str = "sum"
    params: dict = field(default_factory=dict)


@dataclass
class Outcome:
    trial: Trial
    died_at: float | None                  # wall time the victim failed
    survivors: dict                        # rank -> its record (see _rank)
    missing: list                          # survivors that never reported (hung)
    problems: list                         # what was wrong, empty when the trial passed
    seconds: float

    def as_dict(self) -> dict:
        d = asdict(self)
        d["trial"] = asdict(self.trial)
        return d


def trials(seed: int, count: int, world_sizes=(3, 4), stall_every: int = 10,
           transport: str = "p2p") -> list[Trial]:
    """``count`` random trials over every registered (collective, algorithm) pair; over
    ``transport="shm"`` kills alternate between ``os._exit`` and SIGKILL and stalls are
    SIGSTOP."""
    from ringccl.algorithms import REGISTRY, build_schedule

    rng = random.Random(seed)
    pairs = sorted(REGISTRY)
    rng.shuffle(pairs)
    out = []
    for i in range(count):
        collective, algorithm = pairs[i % len(pairs)]
        n = rng.choice(world_sizes)
        params = {}
        if algorithm == "hierarchical":
            params["local_size"] = 2 if n % 2 == 0 else 1
        steps = build_schedule(collective, algorithm, n, **params).num_steps
        mode = "stall" if stall_every and i % stall_every == stall_every - 1 else "kill"
        if transport == "shm":
            mode = {"stall": "sigstop", "kill": "sigkill" if i % 2 else "kill"}[mode]
        out.append(Trial(collective, algorithm, n, rng.randrange(n), rng.randrange(max(steps, 1)),
                         mode, params=params, transport=transport))
    return out


def _bits(t):
    import torch
    if t is None:
        return None
    if isinstance(t, list):
        return [_bits(x) for x in t]
    return t.detach().clone().view(torch.uint8) if t.numel() else t.clone()


def _same(a, b) -> bool:
    import torch
    if a is None or b is None:
        return a is b
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


def _put(results, message) -> None:
    """Put and flush: the process may ``os._exit`` right after, killing the queue's feeder."""
    results.put(message)
    results.close()
    results.join_thread()


def _install_fault(trial: Trial, results, armed: list) -> None:
    """In the victim: fail at the first operation of step >= trial.step once ``armed[0]``."""
    from ringccl.backends.shm import ShmTransport
    from ringccl.backends.torch.transport import P2PTransport

    def fail():
        _put(results, ("died", trial.victim, time.time()))
        if trial.mode == "stall":
            time.sleep(3600)
        if trial.mode in ("sigkill", "sigstop"):
            os.kill(os.getpid(), signal.SIGKILL if trial.mode == "sigkill" else signal.SIGSTOP)
            time.sleep(3600)
        os._exit(VICTIM_EXIT)

    cls = ShmTransport if trial.transport == "shm" else P2PTransport
    for name in ("isend", "irecv"):
        original = getattr(cls, name)

        def patched(self, op, data, _original=original):
            if armed[0] and op.step >= trial.step:
                fail()
            return _original(self, op, data)
        setattr(cls, name, patched)
    armed.append(fail)


def _init_group(rank: int, world_size: int, port: int, timeout: float) -> None:
    """In a forked rank: one intra-op thread, a gloo group over loopback whose ringccl waits
    are bounded by ``timeout`` (``RINGCCL_TIMEOUT``).

    The connection is bounded like nothing a test is about (:func:`tests.bounds.rendezvous_s`,
    the store's and the group's own timeout: gloo's full-mesh connect uses the group's):
    bounded by the trials' few seconds, trials starting at once on 2 cores (pytest -n 2)
    failed 1-4 of 45 at the rendezvous, before any fault ("client socket has timed out after
    4000ms", "wait timeout ... keys: init/", gloo's connectFullMesh)."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["RINGCCL_TIMEOUT"] = str(timeout)   # every ringccl wait, p2p and shm alike
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    connect = datetime.timedelta(seconds=max(bounds.rendezvous_s(), timeout))
    store = dist.TCPStore("127.0.0.1", port, world_size, rank == 0, timeout=connect)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=connect)


def _rank(rank: int, port: int, trial: Trial, results) -> None:
    import torch

    import ringccl.torch as rt
    from ringccl.errors import PeerError
    from ringccl.ops import parse_op
    from .calls import collective_calls as _calls

    record: dict = {"calls": [], "error": None}
    try:
        _init_group(rank, trial.world_size, port, trial.timeout)
        os.environ["RINGCCL_TRANSPORT"] = trial.transport   # what transport="auto" runs on
        n = trial.world_size
        count = trial.count or 12 * n
        calls = _calls(trial.collective, trial.algorithm, parse_op(trial.op), n, count,
                       torch.float32, rank, trial.params)
        x, out = calls.make_in(), calls.make_out()
        calls.builtin(x, out)
        expected = calls.result(x, out).clone()
        armed = [False]
        if rank == trial.victim:
            _install_fault(trial, results, armed)
        for i in range(3):
            if i == 1:
                armed[0] = True
            x, out = calls.make_in(), calls.make_out()
            before = (_bits(x), _bits(out))
            start = time.time()
            try:
                if i < 2:
                    calls.ours(x, out)
                else:
                    rt.all_reduce(torch.ones(1), algorithm="direct")
            except PeerError as exc:
                record["error"] = {
                    "call": i, "type": type(exc).__name__, "message": str(exc),
                    "collective": exc.collective, "algorithm": exc.algorithm, "step": exc.step,
                    "peer": exc.peer, "rank": exc.rank, "at": time.time(),
                    "waited": time.time() - start,
                    "unchanged": _same(before[0], _bits(x)) and _same(before[1], _bits(out))}
                break
            if i < 2:
                record["calls"].append(bool(torch.equal(calls.result(x, out), expected)))
            if i == 1 and rank == trial.victim:
                armed[1]()  # it posted nothing at that step or later: fail after the call
    except Exception as exc:  # anything but a PeerError is a finding
        record["crash"] = f"{type(exc).__name__}: {exc}"
    _put(results, ("done", rank, record))
    os._exit(0)  # no teardown: the group is broken, destroy_process_group could wait on peers


def run(trial: Trial) -> Outcome:
    """Run one trial; ``Outcome.problems`` lists every violated expectation."""
    from ringccl.torch.launch import free_port

    from ringccl.backends.shm import segment

    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    port = free_port()
    t0 = time.time()
    # the trial's segments carry a job id of their own: what is left afterwards is listed
    job = f"fi{os.getpid()}x{next(_jobs)}"
    saved = os.environ.get("RINGCCL_SHM_JOB")
    os.environ["RINGCCL_SHM_JOB"] = job
    procs = [ctx.Process(target=_rank, args=(r, port, trial, results), daemon=True)
             for r in range(trial.world_size)]
    try:
        for p in procs:
            p.start()
    finally:
        if saved is None:
            del os.environ["RINGCCL_SHM_JOB"]
        else:
            os.environ["RINGCCL_SHM_JOB"] = saved
    died_at, records = None, {}
    survivors = set(range(trial.world_size)) - {trial.victim}
    deadline = time.monotonic() + bounds.job(trial.timeout * 3 + 30)
    while not survivors <= set(records) and time.monotonic() < deadline:
        try:
            kind, rank, value = results.get(timeout=0.5)
        except queue.Empty:
            continue
        if kind == "died":
            died_at = value
        elif rank != trial.victim:
            records[rank] = value
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(timeout=5)
    problems = []
    left = segment.sweep(job)
    if left:
        problems.append(f"segments left in {segment.shm_dir()}: {left}")
    missing = sorted(survivors - set(records))
    if missing:
        problems.append(f"ranks {missing} never reported (hang)")
    if died_at is None:
        problems.append("the victim never failed")
    limit = trial.timeout + bounds.slack()
    for rank, rec in sorted(records.items()):
        if "crash" in rec:
            problems.append(f"rank {rank} crashed: {rec['crash']}")
            continue
        if not all(rec["calls"]):
            problems.append(f"rank {rank}: a call that returned gave a wrong result")
        err = rec["error"]
        if err is None:
            problems.append(f"rank {rank} never raised")
            continue
        if died_at is not None and err["at"] - died_at > limit:
            problems.append(f"rank {rank} raised {err['at'] - died_at:.1f} s after the failure "
                            f"(limit {limit:g} s)")
        if not err["unchanged"]:
            problems.append(f"rank {rank}: its tensors changed although the call failed")
        expected = ((trial.collective, trial.algorithm) if err["call"] < 2
                    else ("all_reduce", "direct"))
        named = f"{expected[1]} {expected[0]}"
        if (err["collective"], err["algorithm"]) != expected or named not in err["message"]:
            problems.append(f"rank {rank}: error does not name {named}: {err['message']}")
        if err["step"] is None or f"at step {err['step']}" not in err["message"]:
            problems.append(f"rank {rank}: error does not name the step: {err['message']}")
        if err["peer"] is None or f"rank {err['peer']}" not in err["message"]:
            problems.append(f"rank {rank}: error does not name the peer: {err['message']}")
    return Outcome(trial, died_at, records, missing, problems, time.time() - t0)


def _call(fn, rank: int, world_size: int, port: int, timeout: float, args, results) -> None:
    try:
        _init_group(rank, world_size, port, timeout)
        value = (True, fn(rank, world_size, *args))
    except BaseException as exc:
        value = (False, f"{type(exc).__name__}: {exc}")
    _put(results, (rank, value))
    os._exit(0)


def run_ranks(fn, world_size: int, *args, timeout: float = 10.0, report=None) -> dict:
    """``fn(rank, world_size, *args)`` on forked gloo ranks; rank -> (ok, value or error text).

    ``timeout`` bounds the ranks' ringccl waits (``RINGCCL_TIMEOUT``, :func:`_init_group`). A
    rank that does not report within ``bounds.job(3 * timeout + 30)`` s is missing from the
    result; ``report``: the ranks waited for (default all; the others are ended once these
    reported, e.g. a rank whose process ends mid-call).
    """
    from ringccl.torch.launch import free_port

    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_call, args=(fn, r, world_size, port, timeout, args, results),
                         daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    out: dict = {}
    deadline = time.monotonic() + bounds.job(3 * timeout + 30)
    waited = set(range(world_size) if report is None else report)
    while not waited <= out.keys() and time.monotonic() < deadline:
        try:
            rank, value = results.get(timeout=0.5)
        except queue.Empty:
            continue
        out[rank] = value
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(timeout=5)
    return out
