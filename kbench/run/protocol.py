"""What the parent and a worker say to each other: the task file, the commands, the
reply channel, the replies, and the progress lines (written, read, and shown in the log:
:func:`show_progress`). Standard library only: this module is imported under every
backend's interpreter.

The parent (:mod:`kbench.run.engine`) writes each run as a :class:`WorkerTask` (``run.json``)
and starts ``python -m kbench.run.worker RUN_JSON`` (:mod:`kbench.run.worker`), which starts
its backend from that task, then reads one command per line on stdin (:data:`COMMANDS`) and
answers each on a reply pipe of its own, apart from its output: one JSON object per line,
``event`` naming it. The worker's stdout and stderr stay its log, and carry progress events
(lines starting with :data:`PROGRESS_PREFIX`), so whatever a framework prints can never
garble or block a reply.

How the pipe's write end reaches the worker: on POSIX, as a file descriptor kept open across
``exec`` (``pass_fds``), named by its number in :data:`REPLY_FD_VARIABLE`; on Windows, which
has no ``pass_fds``, as an inheritable handle, the only one the worker inherits besides its
standard streams (``STARTUPINFO.lpAttributeList["handle_list"]``), named ``handle:N``, which
the worker turns back into a file descriptor (``msvcrt.open_osfhandle``). The Windows path
is written from Python's documentation and has not run on Windows.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional, Set

if TYPE_CHECKING:  # pragma: no cover
    from kbench.results.config import RunConfig

PROGRESS_PREFIX = "@kbench "
REPLY_FD_VARIABLE = "KBENCH_REPLY_FD"
HANDLE_PREFIX = "handle:"  # Windows: the value names an inherited handle, not a descriptor
# What a worker is told, and what it answers (kbench.run.worker does them):
COMMANDS = {
    "run": "one whole run of the task file named (train, inference, parity replay, profile): "
    "replies ``result`` with the run's WorkerReply",
    "start": "build and compile the task's model for measuring windows: replies ``started``",
    "warmup": "the warmup and calibration steps of the started model: replies ``ready``",
    "window": "one measuring window: replies ``window`` with its figures",
    "finish": "replies ``finished`` and exits 0 (so does the end of stdin)",
}
# the fields each progress event's line shows, in order
PROGRESS_FIELDS = {
    "epoch": ("epoch", "epochs", "loss", "seconds"), "step": ("step", "steps"),
    "profile": ("steps",),
}  # fmt: skip
_skipped: Set[str] = set()  # the runs whose odd events were said once
log = logging.getLogger("kbench")


def emit_progress(event: str, **fields: Any) -> None:
    """One machine-readable progress line on stdout for the runner to show."""
    sys.stdout.write(PROGRESS_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def parse_progress(line: str) -> Optional[Dict[str, Any]]:
    """The event of a line :func:`emit_progress` wrote; None for any other line (output
    to keep) and ``{}`` for a progress line cut short or garbled (nothing to show). An
    event glued after other text (an unfinished progress-bar line) is read too; text
    that merely contains the prefix stays output. An event is a JSON object with a
    string ``event``; whether it has the fields to show is the shower's question."""
    at = line.find(PROGRESS_PREFIX)
    if at < 0:
        return None
    try:
        event = json.loads(line[at + len(PROGRESS_PREFIX) :])
    except ValueError:
        event = None
    if isinstance(event, dict) and isinstance(event.get("event"), str):
        return event
    return {} if at == 0 else None


def show_progress(config: RunConfig, event: Dict) -> None:
    """One log line for a worker's progress event. An event without the fields its line
    needs, as numbers (a model that prints a line looking like kbench's, a line cut
    short), is skipped, said once per run at debug level: a progress line never stops the
    reading of a worker's output."""
    kind = event.get("event") if isinstance(event, dict) else None
    names = PROGRESS_FIELDS.get(kind) if isinstance(kind, str) else None
    values = [event.get(name) for name in names] if names else []
    if not names or not all(_number(value) for value in values):
        label = config.label()
        if label not in _skipped:
            _skipped.add(label)
            log.debug("    %s: a progress line kbench cannot show, skipped: %.200r", label, event)
        return
    if kind == "epoch":
        epoch, epochs, loss, seconds = values
        of = f"/{epochs:.0f}" if epochs else ""
        log.info(
            "    %s: epoch %.0f%s, loss %.4f, %.1f s", config.label(), epoch, of, loss, seconds
        )
    elif kind == "step":
        log.info("    %s: step %.0f/%.0f", config.label(), *values)
    else:
        log.info("    %s: profiling %.0f steps", config.label(), *values)


def _number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)  # an integer too large for a float cannot be shown either
    except OverflowError:
        return False
    return True


@dataclass(frozen=True)
class WorkerTask:
    config: Dict[str, Any]  # RunConfig.to_dict()
    data: Dict[str, Any]  # PreparedData.to_dict()
    order_path: str  # .npy of sample indices, shape (epochs, samples per epoch)
    data_format: str  # what Keras must report; the worker checks it
    started_at: float  # time.time() when the runner started the process
    # kbench parity: replay instead of train (weights_in or weights_out, steps)
    parity: Optional[Dict[str, Any]] = None
    # an inference runtime's export (kbench.run.exports): ``make`` it (the exporter's
    # worker), or the one to run (its facts and path; ``error`` where it failed)
    export: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkerTask:
        return cls(**data)


@dataclass(frozen=True)
class WorkerReply:
    status: str  # "ok", "failed", "oom" or "unsupported" (a model this backend cannot run)
    metrics: Dict[str, Any] = field(default_factory=dict)
    framework: Dict[str, Any] = field(default_factory=dict)
    model: Dict[str, Any] = field(default_factory=dict)
    error: Optional[Dict[str, str]] = None  # type, message, traceback
    # time.time() when the worker began and ended this task: a warm worker's tasks
    # each have their own (None from workers older than this field)
    started_at: Optional[float] = None
    ended_at: Optional[float] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkerReply:
        return cls(**data)


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
        "This worker is started by kbench (kbench.run.engine), not by hand."
    )


class ReplyWriter:
    """The worker's end: ``send(event, **fields)`` writes one line and flushes it."""

    def __init__(self, fd: int) -> None:
        os.set_inheritable(fd, False)  # a process the worker starts must not hold it open
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
