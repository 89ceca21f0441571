"""One writer per results store: an OS lock on ``STORE/.lock``.

A command that writes results (``kbench run``, ``sweep``, ``results --merge``) holds the
lock while it writes; a second writer is refused at once, told which process holds it.
The lock is the operating system's (``fcntl.flock``; on Windows ``msvcrt.locking``, not
tested there), so it goes with its process however that ends: a ``kill -9`` leaves no
stale lock. The file (which stays) names the holder's PID, host, command and start, for
the message. Readers take no lock: files are replaced atomically. Within one process the
lock is re-entrant (a sweep holds it and its runner's session takes it again).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator

from kbench.results.jsonfile import refuse_link

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

LOCK_NAME = ".lock"
# On Windows a locked byte cannot be read by other processes: lock one far past the
# holder's description, so that the description stays readable.
_WINDOWS_LOCK_OFFSET = 1 << 20


class LockError(Exception):
    """The store cannot be locked for writing; the message says why and what to do."""


class StoreLocked(LockError):
    """Another process writes to this store."""


@dataclass
class _Held:
    fd: int
    count: int  # the with-blocks of this process that hold it


_held: Dict[Path, _Held] = {}


@contextlib.contextmanager
def writer_lock(directory: Path) -> Iterator[Path]:
    """Hold the store's writer lock (creating the store) for the ``with`` block."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LockError(
            f"store: expected a directory kbench can write; {directory} cannot be created "
            f"({err.strerror or err}). Choose another with --store."
        ) from None
    key = directory.resolve()
    if key in _held:
        _held[key].count += 1
        try:
            yield key / LOCK_NAME
        finally:
            _held[key].count -= 1
        return
    path = key / LOCK_NAME
    try:  # no link followed, and no file truncated that is not the store's own
        fd = os.open(
            refuse_link(path), os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644
        )
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            raise OSError(f"it is not a plain file of its own (links: {info.st_nlink})")
    except OSError as err:
        raise LockError(
            f"store: expected to create the lock file {path}; {err.strerror or err}. "
            "Choose a --store kbench can write."
        ) from None
    try:
        _lock(fd)
    except OSError as err:
        os.close(fd)
        if err.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EDEADLK):
            raise LockError(f"store: could not lock {path}: {err.strerror or err}") from None
        raise StoreLocked(
            f"store: {directory} is being written by {holder_of(path)}. Two writers would "
            "run the same runs twice and time each against the other; wait for it to "
            "finish (then run this again: finished runs are skipped), or choose another "
            "--store."
        ) from None
    _held[key] = _Held(fd, 1)
    try:
        _describe_holder(fd)
        yield path
    finally:
        del _held[key]
        _lock(fd, take=False)
        os.close(fd)


def holder_of(path: Path) -> str:
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another process"
    words = f"process {info['pid']}"
    if info.get("host") and info["host"] != socket.gethostname():
        words += f" on {info['host']}"
    if info.get("command"):
        words += f" ({info['command']})"
    if info.get("since"):
        words += f", since {info['since']}"
    return words


def _describe_holder(fd: int) -> None:
    info = {
        "pid": os.getpid(), "host": socket.gethostname(),
        "command": " ".join(["kbench", *sys.argv[1:]])[:300],
        "since": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }  # fmt: skip
    with contextlib.suppress(OSError):  # a full disk: the lock holds, the message says less
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(info) + "\n").encode())


def _lock(fd: int, take: bool = True) -> None:
    """Take (or release) the lock on ``fd`` without waiting."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if take else fcntl.LOCK_UN)
    else:
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK if take else msvcrt.LK_UNLCK, 1)
