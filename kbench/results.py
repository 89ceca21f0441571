"""One versioned JSON document per run; reports read only these.

Written atomically (temporary file, then rename), so an interrupted command leaves
either a whole result or none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from kbench.task import read_json, write_json_atomic

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "oom", "timeout")


class ResultError(ValueError):
    """A document is not a kbench result this version can read."""


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str  # one of STATUSES
    config: Dict[str, Any]
    started_at: str  # ISO 8601, UTC
    wall_time_s: float  # the worker process, start to exit
    environment: Dict[str, Any]
    data: Dict[str, Any]
    model: Dict[str, Any] = field(default_factory=dict)
    metrics: Dict[str, Any] = field(default_factory=dict)
    reason: Optional[str] = None  # one line, when status is not ok
    error: Optional[Dict[str, Any]] = None  # type, message, traceback, log tail
    sampler: Optional[Dict[str, Any]] = None  # series, sources, per-window summary
    kind: str = "train"  # train or inference
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ResultError(f"status: expected one of {', '.join(STATUSES)}; got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        # schema first, so a reader sees the version before anything else
        return {"schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> RunResult:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ResultError(
                f"schema_version: this kbench reads version {SCHEMA_VERSION}; the document has "
                f"{version!r}. Read it with the kbench version that wrote it."
            )
        return cls(**data)

    def save(self, directory: Path) -> Path:
        path = Path(directory) / f"{self.run_id}.json"
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, path: Path) -> RunResult:
        return cls.from_dict(read_json(path))
