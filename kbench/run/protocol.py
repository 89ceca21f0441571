"""What the parent and a worker say to each other: the task file (``run.json``), the
commands (one per line on stdin, :data:`COMMANDS`), the replies (one JSON object per line
on a reply pipe of the worker's own, ``event`` naming it) and the progress lines (in its
output, after :data:`PROGRESS_PREFIX`), so whatever a framework prints never garbles a
reply. Standard library only: imported under every backend's interpreter.

The pipe's write end reaches the worker as a descriptor kept open across ``exec``
(``pass_fds``) named in :data:`REPLY_FD_VARIABLE`; on Windows, as the only inheritable
handle (``STARTUPINFO.lpAttributeList["handle_list"]``), named ``handle:N``. The Windows
path is written from Python's documentation and has not run on Windows.
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
    "ops": "(kbench.ops.worker) every operation of the task file named, at every size: "
    "replies ``op`` with the reply so far after each, then ``result``",
}
# the fields each progress event's line shows, in order
PROGRESS_FIELDS = {
    "epoch": ("epoch", "epochs", "loss", "seconds"), "step": ("step", "steps"),
    "profile": ("steps",),
}  # fmt: skip
_skipped: Set[str] = set()  # the runs whose odd events were said once
log = logging.getLogger("kbench")


def emit_progress(event: str, **fields: Any) -> None:
    """One progress line on stdout for the runner to show."""
    sys.stdout.write(PROGRESS_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def parse_progress(line: str) -> Optional[Dict[str, Any]]:
    """The event of a line :func:`emit_progress` wrote (also glued after other text);
    None for any other line, ``{}`` for one cut short or garbled."""
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
    """One log line for a progress event; one without its fields as numbers is skipped
    (said once per run, at debug level): progress never stops the reading of output."""
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


class Document:
    """A dataclass read from and written to JSON as its fields."""

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Any:
        return cls(**data)


@dataclass(frozen=True)
class WorkerTask(Document):
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
    # --mode generate: the session's shared weights file (kbench.run.generate.task_for)
    generate: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class WorkerReply(Document):
    status: str  # "ok", "failed", "oom" or "unsupported" (a model this backend cannot run)
    metrics: Dict[str, Any] = field(default_factory=dict)
    framework: Dict[str, Any] = field(default_factory=dict)
    model: Dict[str, Any] = field(default_factory=dict)
    error: Optional[Dict[str, str]] = None  # type, message, traceback
    # time.time() when the worker began and ended this task: a warm worker's tasks
    # each have their own (None from workers older than this field)
    started_at: Optional[float] = None
    ended_at: Optional[float] = None


@dataclass
class ReplyPipe:
    """The parent's side of a reply pipe; ``popen_args`` hand the worker its write end."""

    read_fd: int
    write_fd: int
    value: str
    popen_args: Dict[str, Any] = field(default_factory=dict)

    def close_write_end(self) -> None:
        os.close(self.write_fd)


def open_reply_pipe() -> ReplyPipe:
    """A pipe whose write end the worker inherits, and only that one."""
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
    """The worker's end: ``send(event, **fields)`` writes one line, flushed."""

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
    """Each line's object into ``replies`` (not one: ``garbled``); ``None`` at the end."""
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as pipe:
        for line in pipe:
            replies.put(_parse(line))
    replies.put(None)


def _parse(line: str) -> Dict[str, Any]:
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    if not isinstance(reply, dict) or not isinstance(reply.get("event"), str):
        return {"event": "garbled", "line": line[:200]}
    return reply
