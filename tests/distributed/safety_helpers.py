"""Finding, waiting for and killing the processes a launcher started (tests only)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .. import bounds

SCRIPT = Path(__file__).with_name("launcher_script.py")
SRC = Path(__file__).resolve().parents[2] / "src"

#: generous bounds for start-up and for the kernel and the watchdogs to end processes: the
#: tests poll until a condition holds and only fail at these deadlines (no timing asserted)
START_S = bounds.job(120.0)
GONE_S = bounds.job(20.0)


def start_launcher(*argv: str, marker: str) -> subprocess.Popen:
    """``launcher_script.py argv`` in its own session (its own process group, as a shell job),
    every descendant carrying ``RINGCCL_TEST_MARKER=marker`` in its environment."""
    env = dict(os.environ, RINGCCL_TEST_MARKER=marker,
               PYTHONPATH=os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH"))
                                          if p))
    return subprocess.Popen([sys.executable, str(SCRIPT), *argv], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie (a killed orphan awaiting its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def marked(marker: str, exclude: int | None = None) -> set[int]:
    """Live processes whose environment holds RINGCCL_TEST_MARKER=marker, but for
    multiprocessing's resource tracker: it ends by itself once every holder of its pipe has
    ended, after unlinking what the launcher left in /dev/shm (killing it would leak that)."""
    needle = f"RINGCCL_TEST_MARKER={marker}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == exclude:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0") or not _alive(int(entry)):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"resource_tracker" not in f.read():
                    found.add(int(entry))
        except OSError:
            continue
    return found


def wait_for(condition, seconds: float, interval: float = 0.2):
    """Poll ``condition()`` until it returns something truthy (returned) or ``seconds`` pass
    (then its last value)."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def kill_all(launcher: subprocess.Popen, marker: str) -> None:
    """SIGKILL the launcher and every marked process (cleanup in ``finally``); wait until they
    are gone."""
    if launcher.poll() is None:
        launcher.kill()
    launcher.wait()
    for pid in marked(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not marked(marker), GONE_S)
    for stream in (launcher.stdout, launcher.stderr):
        if stream:
            stream.close()


def raise_on_rank_1(rank: int, world_size: int) -> int:
    """A worker body: rank 1 raises an argument error (as a bad ``--count`` would)."""
    if rank == 1:
        from ringccl.args import check_int
        check_int(-1, "count")
    return rank


def raise_on_rank_1_while_peers_wait(rank: int, world_size: int) -> int:
    """A worker body: rank 1 raises an argument error while every other rank waits for it in a
    barrier, which then fails there (gloo: connection closed or reset by peer)."""
    import torch.distributed as dist

    if rank == 1:
        from ringccl.args import check_int
        check_int(-1, "count")
    dist.barrier()
    return rank
