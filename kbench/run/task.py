"""The contract between the runner (parent) and the worker (child).

The runner writes a :class:`WorkerTask` as ``run.json``; the worker writes a
:class:`WorkerReply` as ``reply.json`` (atomically) and, while it runs, progress
events on stdout as lines starting with :data:`PROGRESS_PREFIX`. Standard library
only: this module is imported under every backend's interpreter.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Optional

PROGRESS_PREFIX = "@kbench "


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


@dataclass(frozen=True)
class WorkerTask:
    config: Dict[str, Any]  # RunConfig.to_dict()
    data: Dict[str, Any]  # PreparedData.to_dict()
    order_path: str  # .npy of sample indices, shape (epochs, samples per epoch)
    data_format: str  # what Keras must report; the worker checks it
    reply_path: str
    started_at: float  # time.time() when the runner started the process
    # kbench parity: replay instead of train (weights_in or weights_out, steps)
    parity: Optional[Dict[str, Any]] = None

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
