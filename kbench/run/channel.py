"""The reply channel of a warm window worker: a pipe of its own, apart from its output.

The parent (:mod:`kbench.run.windows`) opens a pipe (:func:`open_reply_pipe`), passes
its write end to the worker (:mod:`kbench.run.window_worker`) and names it in
:data:`REPLY_FD_VARIABLE`; the worker writes one JSON object per line on it
(:class:`ReplyWriter`), the parent reads them into a queue (:func:`read_replies`),
``None`` once the worker closed it or died. The worker's stdout and stderr stay the log,
so whatever a framework prints can never garble or block a reply. Standard library only:
it runs under both environments.

How the write end reaches the worker: on POSIX, as a file descriptor kept open across
``exec`` (``pass_fds``), named by its number; on Windows, which has no ``pass_fds``, as
an inheritable handle, the only one the worker inherits besides its standard streams
(``STARTUPINFO.lpAttributeList["handle_list"]``), named ``handle:N``, which the worker
turns back into a file descriptor (``msvcrt.open_osfhandle``). The Windows path is
written from Python's documentation and has not run on Windows.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Dict

REPLY_FD_VARIABLE = "KBENCH_REPLY_FD"
HANDLE_PREFIX = "handle:"  # Windows: the value names an inherited handle, not a descriptor


@dataclass
class ReplyPipe:
    """The parent's side of a new reply pipe: ``read_fd`` to read, ``value`` for the
    worker's :data:`REPLY_FD_VARIABLE`, ``popen_args`` that hand it the write end; once the
    worker is started, :meth:`close_write_end` (the worker holds its own copy)."""

    read_fd: int
    write_fd: int
    value: str
    popen_args: Dict[str, Any] = field(default_factory=dict)

    def close_write_end(self) -> None:
        os.close(self.write_fd)


def open_reply_pipe() -> ReplyPipe:
    """A pipe whose write end the worker inherits, and only that one (module docstring)."""
    read_fd, write_fd = os.pipe()
    if sys.platform != "win32":
        return ReplyPipe(read_fd, write_fd, str(write_fd), {"pass_fds": (write_fd,)})
    import msvcrt  # Windows only

    handle = msvcrt.get_osfhandle(write_fd)
    os.set_handle_inheritable(handle, True)
    startupinfo = subprocess.STARTUPINFO()  # type: ignore[attr-defined]
    startupinfo.lpAttributeList = {"handle_list": [handle]}
    return ReplyPipe(read_fd, write_fd, f"{HANDLE_PREFIX}{handle}", {"startupinfo": startupinfo})


def reply_fd(value: str) -> int:
    """The worker's file descriptor for the write end :data:`REPLY_FD_VARIABLE` names."""
    if value.isdigit():
        return int(value)
    handle = value[len(HANDLE_PREFIX) :]
    if sys.platform == "win32" and value.startswith(HANDLE_PREFIX) and handle.isdigit():
        import msvcrt  # Windows only

        return msvcrt.open_osfhandle(int(handle), os.O_WRONLY)
    raise RuntimeError(
        f"{REPLY_FD_VARIABLE}: expected the file descriptor (or, on Windows, "
        f"{HANDLE_PREFIX}HANDLE) of the reply pipe the runner opened; received {value!r}. "
        "This worker is started by kbench (kbench.run.windows), not by hand."
    )


class ReplyWriter:
    """The worker's end: ``send(event, **fields)`` writes one line and flushes it."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", encoding="utf-8")

    @classmethod
    def from_environment(cls) -> ReplyWriter:
        return cls(reply_fd(os.environ.get(REPLY_FD_VARIABLE, "")))

    def send(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, **fields}) + "\n")
        self._file.flush()


def read_replies(fd: int, replies: queue.Queue) -> None:
    """The parent's end (a thread's target): each line's object into ``replies``; a line
    that is not one becomes ``{"event": "garbled", "line": ...}``; ``None`` at the end."""
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as pipe:
        for line in pipe:
            replies.put(_parse(line))
    replies.put(None)


def _parse(line: str) -> Dict[str, Any]:
    try:
        reply = json.loads(line)
    except ValueError:
        return {"event": "garbled", "line": line[:200]}
    if not isinstance(reply, dict) or not isinstance(reply.get("event"), str):
        return {"event": "garbled", "line": line[:200]}
    return reply
