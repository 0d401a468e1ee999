"""The run directory's lock.

A run directory is owned by one process at a time. ``refimpl train`` takes an exclusive OS
lock (``flock``) on ``<run>/run.lock`` before it writes anything there and holds it until the
run ends; the kernel releases it when the process dies, however it dies (``kill -9``, a power
cut: no stale lock to clean up). A second ``train``, ``--resume`` or ``--overwrite`` of a
locked run is refused with one line, before it changes anything. A new run directory is
created with one ``mkdir`` (atomic: of two processes, one creates it) and is checked again
once its lock is held (``refimpl.runs.rundir.open_run``), so there is no window between
a check and the write it allows.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import time
from pathlib import Path

from refimpl.runs.runlog import LOCK_FILE, check_regular_file, read_text_bounded

try:  # POSIX
    import fcntl
except ImportError:  # Windows: a lock on the file's first byte
    fcntl = None  # type: ignore[assignment]
    import msvcrt


#: How often ``RunLock`` tries, 50 ms apart, before it reports the run as in use.
ACQUIRE_TRIES = 5


class RunDirLocked(ValueError):
    """Another process holds the lock of the run directory (the message names it)."""


class RunLock:
    """The exclusive OS lock on a run directory's ``run.lock``, held until ``release`` (or
    the process's end: the kernel releases it on any exit). The holder writes its pid, host
    and start time into the file, for the message of a process it keeps out."""

    def __init__(self, run_dir: Path, flag: str):
        """Lock ``run_dir`` (which must exist), creating its lock file if need be; a
        ``RunDirLocked`` naming ``flag`` when another process holds it."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None
        fd = _open_lock_file(self.path, os.O_RDWR | os.O_CREAT, flag)
        # A few tries: another process's ``check_not_locked`` holds the lock for a moment;
        # a run holds it for as long as it trains.
        for attempt in range(ACQUIRE_TRIES):
            if _try_lock(fd):
                break
            if attempt == ACQUIRE_TRIES - 1:
                os.close(fd)
                raise _locked_error(self.run_dir, flag)
            time.sleep(0.05)
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Unlock (the lock file stays: deleting it while another process waits on it would
        let two processes in)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __del__(self) -> None:
        self.release()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def check_not_locked(run_dir: Path, flag: str) -> None:
    """``RunDirLocked`` naming ``flag`` when another process holds the lock of ``run_dir``;
    changes nothing (the lock file is opened read-only and only if it exists)."""
    path = run_dir / LOCK_FILE
    if not (path.exists() or path.is_symlink()):
        return  # no lock file (a new run, or one of an older version): not locked
    fd = _open_lock_file(path, os.O_RDONLY, flag)
    try:
        if not _try_lock(fd):
            raise _locked_error(run_dir, flag)
    finally:
        os.close(fd)  # also releases the probe's own lock


def is_locked(run_dir: Path) -> bool:
    """Whether a process holds ``run_dir``'s lock now (a run in progress); changes nothing.
    An unreadable lock file counts as not locked (``refimpl runs`` only reports it)."""
    path = Path(run_dir) / LOCK_FILE
    if not path.is_file() or path.is_symlink():
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)  # also releases the probe's own lock


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:  # BlockingIOError (EWOULDBLOCK) where another process holds it
        return False
    return True


def _holder(path: Path) -> str:
    """Who holds the lock file ``path``, as its holder wrote it (``pid N on HOST since T``)."""
    try:
        text = read_text_bounded(path, 4096).strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return text or "a process that did not say which"


def _open_lock_file(path: Path, flags: int, flag: str) -> int:
    """A descriptor of the lock file ``path``: never through a symbolic link (the holder
    writes its pid into the file), never blocking (a FIFO), and only of a regular file;
    ``ValueError`` naming ``flag`` and the file otherwise."""
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP or path.is_symlink():
            raise ValueError(
                f"{flag}: {path} is a symbolic link (to {os.readlink(path)}), which refimpl "
                "never writes through: remove it (a run's lock file is its own)"
            ) from None
        raise
    try:
        check_regular_file(path)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except OSError as err:
        os.close(fd)
        raise ValueError(
            f"{flag}: {path} is not a regular file ({err.strerror or err}): remove it"
        ) from None
    return fd


def _locked_error(run_dir: Path, flag: str) -> RunDirLocked:
    return RunDirLocked(
        f"{flag}: {run_dir} is in use by another refimpl process ({_holder(run_dir / LOCK_FILE)}); "
        "wait for it to end, or stop it (Ctrl-C writes a checkpoint) and --resume"
    )
