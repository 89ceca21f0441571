"""The contract between the runner (parent) and the worker (child).

The runner writes a :class:`WorkerTask` as ``run.json``; the worker writes a
:class:`WorkerReply` as ``reply.json`` (atomically) and, while it runs, progress
events on stdout as lines starting with :data:`PROGRESS_PREFIX`. Standard library
only: this module is imported under every backend's interpreter.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

PROGRESS_PREFIX = "@kbench "


def emit_progress(event: str, **fields: Any) -> None:
    """One machine-readable progress line on stdout for the runner to show."""
    sys.stdout.write(PROGRESS_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def parse_progress(line: str) -> Optional[Dict[str, Any]]:
    """The event of a line :func:`emit_progress` wrote; None for any other line (output
    to keep) and ``{}`` for a progress line cut short or garbled (nothing to show)."""
    if not line.startswith(PROGRESS_PREFIX):
        return None
    try:
        event = json.loads(line[len(PROGRESS_PREFIX) :])
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that ``path`` holds either the old file or the whole new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=2, sort_keys=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a result is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path: Path) -> Any:
    with open(path) as handle:
        return json.load(handle)


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
    status: str  # "ok", "failed" or "oom"
    metrics: Dict[str, Any] = field(default_factory=dict)
    framework: Dict[str, Any] = field(default_factory=dict)
    model: Dict[str, Any] = field(default_factory=dict)
    error: Optional[Dict[str, str]] = None  # type, message, traceback

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkerReply:
        return cls(**data)
