"""Run tests/distributed/torchrun_script.py under torchrun many times, the machine loaded, and
count the runs that did not exit cleanly: a rank killed by SIGABRT ("terminate called without
an active exception": a C++ std::thread destroyed while still joinable at interpreter exit),
any other non-zero exit, a run that timed out.

Load: ``--load K`` busy-looping processes (default: one per core) run beside the jobs for the
whole stress, so the ranks' exits race whatever threads are still alive under preemption.
Every rank runs with ``PYTHONFAULTHANDLER=1`` (a SIGABRT prints every Python thread's stack);
``--keep DIR`` keeps each failed run's output there, and with ``--cores`` the ranks may dump
core into that run's folder (the kernel's core_pattern permitting) for ``gdb``.

    python benchmarks/stress_torchrun_exit.py --runs 200 [--load 2] [--nproc 3]
        [--keep /tmp/stress] [--cores] [--json]

A stress, not a timing: nothing here is timed beyond each run's generous bound.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ringccl.resources import end_session  # noqa: E402

SCRIPT = ROOT / "tests" / "distributed" / "torchrun_script.py"
ABORT_MARKS = ("terminate called", "SIGABRT", "Fatal Python error: Aborted")


def _busy() -> subprocess.Popen:
    """One process spinning on a core (the load), ended by the caller."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def classify(returncode: int | None, output: str, nproc: int) -> str:
    """"ok", "abort" (SIGABRT / std::terminate in a rank), "timeout" or "failed"."""
    if returncode is None:
        return "timeout"
    if any(mark in output for mark in ABORT_MARKS):
        return "abort"
    if returncode == 0 and output.count(": OK") == nproc:
        return "ok"
    return "failed"


def one_run(nproc: int, timeout: float, cores: bool, workdir: str) -> tuple[str, str, float]:
    """(kind, output, seconds) of one torchrun job of ``nproc`` ranks."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONFAULTHANDLER="1")

    def limits():
        if cores:
            resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,
                                                      resource.RLIM_INFINITY))
    start = time.monotonic()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(SCRIPT)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=workdir, preexec_fn=limits, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        end_session(proc, 30.0)
        out, rc = proc.communicate()[0], None
    except BaseException:   # Ctrl-C, SIGTERM: nothing outlives the stress
        end_session(proc, 30.0)
        raise
    return classify(rc, out, nproc), out, time.monotonic() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--nproc", type=int, default=3)
    ap.add_argument("--load", type=int, default=os.cpu_count() or 1,
                    help="busy processes beside the jobs (default: one per core)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run (generous)")
    ap.add_argument("--keep", default=None, help="folder for the failed runs' output")
    ap.add_argument("--cores", action="store_true", help="let the ranks dump core")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    keep = Path(args.keep or tempfile.mkdtemp(prefix="ringccl-stress."))
    keep.mkdir(parents=True, exist_ok=True)
    counts = {"ok": 0, "abort": 0, "failed": 0, "timeout": 0}
    seconds = []
    # SIGTERM as Ctrl-C: the finally below ends the job in flight and the load
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    load = [_busy() for _ in range(args.load)]
    try:
        for i in range(args.runs):
            workdir = keep / f"run{i:04d}"
            workdir.mkdir(exist_ok=True)
            kind, out, s = one_run(args.nproc, args.timeout, args.cores, str(workdir))
            counts[kind] += 1
            seconds.append(s)
            if kind == "ok" and not any(workdir.iterdir()):
                workdir.rmdir()
            else:
                (workdir / "output.txt").write_text(out)
            print(f"run {i + 1}/{args.runs}: {kind} ({s:.1f} s)  "
                  + " ".join(f"{k}={v}" for k, v in counts.items()),
                  file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        for p in load:
            p.kill()
            p.wait()
    summary = {"runs": args.runs, "nproc": args.nproc, "load": args.load, **counts,
               "median_s": sorted(seconds)[len(seconds) // 2] if seconds else None,
               "kept": str(keep), "loadavg_end": os.getloadavg()[0]}
    print(json.dumps(summary) if args.json else
          f"{counts['abort']}/{args.runs} aborted, {counts['failed']} failed otherwise, "
          f"{counts['timeout']} timed out (load {args.load} busy processes; failed runs' "
          f"output under {keep})")
    return 0 if counts["ok"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
