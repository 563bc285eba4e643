"""POSIX shared-memory segments: a file under ``/dev/shm`` (or ``RINGCCL_SHM_DIR``), its space
reserved up front, mapped with :mod:`mmap`.

Why not :mod:`multiprocessing.shared_memory`: before Python 3.13 its ``resource_tracker``
unlinks a segment when the process that attached it exits, although other processes still use
it. Why ``posix_fallocate``: a sparse file in a tmpfs too small for it maps fine and then kills
the process with SIGBUS at the first touch of a page that cannot be backed (DeepSpeed, NCCL and
sglang all saw it with a container's 64 MiB /dev/shm); reserving the space at creation turns
that into an :class:`ShmSpaceError` at set-up, naming the bytes needed and available.

Names: ``ringccl-[<job>-]<uuid4 hex of the creator>-<serial>``. ``<job>`` is the
``RINGCCL_SHM_JOB`` environment variable when set (``ringccl.torch.launch`` sets it for its
workers so that it can sweep what a SIGKILLed worker left behind); ``<serial>`` counts the
segments of one group (the control block is 0, data generations and zero-copy areas follow).
"""

from __future__ import annotations

import errno
import mmap
import os
import re

from ...errors import BackendError

__all__ = ["SHM_DIR", "ShmSpaceError", "Segment", "shm_dir", "segment_name", "job_prefix",
           "sweep"]

#: where segments live unless ``RINGCCL_SHM_DIR`` says otherwise (Linux's POSIX shm tmpfs)
SHM_DIR = "/dev/shm"

_JOB = re.compile(r"^[A-Za-z0-9_.]{1,64}$")


class ShmSpaceError(BackendError, MemoryError):
    """The shared-memory directory cannot hold a segment: raised at set-up (never SIGBUS later).

    Attributes:
        needed, available: bytes.
        directory: the directory that was too small.
    """

    def __init__(self, message: str, *, needed: int, available: int, directory: str):
        super().__init__(message)
        self.needed, self.available, self.directory = needed, available, directory


def shm_dir() -> str:
    """The directory segments are created in: ``RINGCCL_SHM_DIR`` or :data:`SHM_DIR`."""
    return os.environ.get("RINGCCL_SHM_DIR") or SHM_DIR


def job_prefix() -> str:
    """``ringccl-`` plus ``RINGCCL_SHM_JOB-`` when that variable is set (checked: letters,
    digits, ``_`` and ``.`` only, so it cannot name a path)."""
    job = os.environ.get("RINGCCL_SHM_JOB", "")
    if job and not _JOB.match(job):
        raise BackendError(f"RINGCCL_SHM_JOB={job!r} must be 1-64 letters, digits, '_' or '.'")
    return f"ringccl-{job}-" if job else "ringccl-"


def segment_name(uid: str, serial: int) -> str:
    """The file name of segment ``serial`` of the group whose creator drew ``uid``."""
    return f"{job_prefix()}{uid}-{serial}"


def _available(directory: str) -> int:
    try:
        st = os.statvfs(directory)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


class Segment:
    """One mapped segment. ``Segment.create`` (one rank) then ``Segment.attach`` (the others),
    then the creator's :meth:`unlink` once all have attached: from then on the kernel frees the
    memory with the last mapping, so nothing can leak.

    Attributes:
        name, path: the file's name and full path.
        nbytes: its size in bytes.
        map: the ``mmap.mmap`` (read-write, shared).
    """

    def __init__(self, path: str, fd: int, nbytes: int, created: bool):
        self.path, self.name, self.nbytes = path, os.path.basename(path), nbytes
        self.created, self.unlinked = created, not created
        try:
            self.map = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    @classmethod
    def create(cls, name: str, nbytes: int) -> "Segment":
        """Create ``name`` in :func:`shm_dir` with ``nbytes`` reserved (``posix_fallocate``).

        Raises:
            ShmSpaceError: the directory has not room for ``nbytes`` (the message names the bytes
                needed and available, the directory and RINGCCL_SHM_DIR).
            BackendError: the file exists already, or another OS error.
        """
        directory = shm_dir()
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except OSError as exc:
            raise BackendError(f"cannot create the shared-memory segment {path}: {exc}") from exc
        try:
            try:
                os.posix_fallocate(fd, 0, nbytes)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
                    available = _available(directory)
                    raise ShmSpaceError(
                        f"the shared-memory directory {directory} has room for {available} bytes "
                        f"but this group's segment needs {nbytes} bytes; free space there, give "
                        "the container a larger /dev/shm (docker --shm-size), point "
                        "RINGCCL_SHM_DIR at a larger tmpfs, or use transport='p2p'",
                        needed=nbytes, available=available, directory=directory) from exc
                raise BackendError(f"cannot reserve {nbytes} bytes for {path}: {exc}") from exc
            return cls(path, fd, nbytes, True)
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            _unlink(path)
            raise

    @classmethod
    def attach(cls, name: str, nbytes: int) -> "Segment":
        """Map the existing segment ``name`` (created by a peer) of ``nbytes``.

        Raises:
            BackendError: it does not exist (its creator failed or unlinked it already) or is
                smaller than ``nbytes``.
        """
        path = os.path.join(shm_dir(), name)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            raise BackendError(f"cannot attach the shared-memory segment {path}: {exc} (did its "
                               "creator fail, or do the ranks see different RINGCCL_SHM_DIR?)") \
                from exc
        size = os.fstat(fd).st_size
        if size < nbytes:
            os.close(fd)
            raise BackendError(f"the shared-memory segment {path} has {size} bytes, expected "
                               f"{nbytes}")
        return cls(path, fd, nbytes, False)

    def unlink(self) -> None:
        """Remove the file (the mappings stay valid); idempotent."""
        if not self.unlinked:
            self.unlinked = True
            _unlink(self.path)

    def close(self) -> None:
        """Unlink if this rank created it and has not yet, then drop the mapping (a
        ``BufferError`` from views still exported, e.g. a live ``shm_empty`` tensor, leaves the
        mapping to the garbage collector: the memory stays valid for them)."""
        self.unlink()
        try:
            self.map.close()
        except BufferError:
            pass


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def sweep(job: str, directory: str | None = None) -> list[str]:
    """Remove the segments of job ``job`` (``ringccl-<job>-*``) left in ``directory`` (default
    :func:`shm_dir`) by a process killed between creating and unlinking one; returns their
    names. Safe only when no process of that job runs any more."""
    if not job or not _JOB.match(job):
        return []
    directory = directory or shm_dir()
    prefix = f"ringccl-{job}-"
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if name.startswith(prefix):
            _unlink(os.path.join(directory, name))
            removed.append(name)
    return removed
