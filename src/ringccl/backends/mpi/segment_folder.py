"""A folder of one MPI launch's own for its ranks' shared-memory files, removed however the
launch ends.

Open MPI's ranks keep their shared-memory segments (``vader_segment.<host>.<job>.<rank>``) in
/dev/shm by default and remove them when they end cleanly; ranks SIGKILLed (tied to a
SIGKILLed launcher, past the launch's timeout, by the kernel's OOM killer) leave them there,
as they leave a ringccl segment caught in its set-up window (:mod:`ringccl.backends.shm`).
:func:`ringccl.backends.mpi.launch.launch_bench` gives the ranks a folder of their own instead
(``--mca btl_vader_backing_directory``, ``RINGCCL_SHM_DIR``), kept by a small process (this
file run by path: it imports only the standard library, so it starts in milliseconds). The
keeper makes the folder, prints its path and removes it once nothing holds the write end of
its stdin: the launcher holds it, and mpirun, given it through ``pass_fds``. So the folder
goes when both have ended, even when the launcher was SIGKILLed and its ``finally`` never ran
(mpirun, told by its parent-death signal, ends its ranks, then exits), as multiprocessing's
resource tracker does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

__all__ = ["SegmentFolder", "PREFIX"]

#: how the folder's name starts (in /dev/shm where it is writable, as Open MPI's default)
PREFIX = "ringccl-mpi."

#: seconds the launcher waits for the keeper once mpirun has ended (it only removes a folder)
WAIT_S = 10.0


class SegmentFolder:
    """``start()``, then mpirun gets ``--mca btl_vader_backing_directory folder`` and
    ``pass_fds=pass_fds``; ``close()`` once mpirun has ended removes the folder (also as
    ``with SegmentFolder() as seg``)."""

    def __init__(self):
        self.folder: str | None = None
        self.pass_fds: tuple[int, ...] = ()
        self._keeper: subprocess.Popen | None = None

    def start(self) -> None:
        """Start the keeper and read the folder it made.

        Raises:
            OSError: the keeper could not make the folder (with its reason).
        """
        self._keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            start_new_session=True)   # not in the launcher's group: Ctrl-C there leaves it
        line = self._keeper.stdout.readline().rstrip("\n")
        self._keeper.stdout.close()
        if not line.startswith("folder "):
            self.close()
            raise OSError("no folder for the ranks' shared-memory files: "
                          + (line.removeprefix("error ") or "its keeper ended"))
        self.folder = line.removeprefix("folder ")
        self.pass_fds = (self._keeper.stdin.fileno(),)

    def close(self) -> None:
        """Close this end of the keeper's stdin and wait for the keeper to remove the folder;
        remove it here too, should the keeper have been killed. An mpirun still running holds
        the other end: after WAIT_S the keeper is left to remove it once mpirun ends."""
        if self._keeper is None:
            return
        self._keeper.stdin.close()
        try:
            self._keeper.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            return
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "SegmentFolder":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main() -> None:
    """The keeper: make the folder, print ``folder PATH`` (or ``error WHY``), remove the folder
    at the end of stdin."""
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    try:
        folder = tempfile.mkdtemp(prefix=PREFIX, dir=shm)
    except OSError as exc:
        print(f"error {exc}", flush=True)
        return
    try:
        print(f"folder {folder}", flush=True)
        sys.stdout.close()
        while os.read(0, 1 << 12):   # nothing is written: this waits for every holder to end
            pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
