"""The reply channel of a warm window worker: a pipe of its own, apart from its output.

The parent (:mod:`kbench.run.windows`) opens a pipe, passes its write end to the worker
(:mod:`kbench.run.window_worker`) and names it in :data:`REPLY_FD_VARIABLE`; the worker
writes one JSON object per line on it (:class:`ReplyWriter`), the parent reads them
into a queue (:func:`read_replies`), ``None`` once the worker closed it or died. The
worker's stdout and stderr stay the log, so whatever a framework prints can never
garble or block a reply. Standard library only: it runs under both environments.
"""

from __future__ import annotations

import json
import os
import queue
from typing import Any, Dict

REPLY_FD_VARIABLE = "KBENCH_REPLY_FD"


class ReplyWriter:
    """The worker's end: ``send(event, **fields)`` writes one line and flushes it."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", encoding="utf-8")

    @classmethod
    def from_environment(cls) -> ReplyWriter:
        value = os.environ.get(REPLY_FD_VARIABLE, "")
        if not value.isdigit():
            raise RuntimeError(
                f"{REPLY_FD_VARIABLE}: expected the file descriptor of the reply pipe the "
                f"runner opened; received {value!r}. This worker is started by kbench "
                "(kbench.run.windows), not by hand."
            )
        return cls(int(value))

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
