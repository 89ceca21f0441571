"""One versioned JSON document per run; reports read only these.

Written atomically (temporary file, then rename), so an interrupted command leaves
either a whole result or none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from kbench.results.jsonfile import read_json, write_json_atomic

SCHEMA_VERSION = 2
# unsupported: a data-parallel mode that cannot run on this machine (the reason says why)
STATUSES = ("ok", "failed", "oom", "timeout", "unsupported")


def _from_v1(data: Dict[str, Any]) -> Dict[str, Any]:
    """Version 2 added ``sweep`` (which sweep and run a result belongs to) and, in
    training metrics, ``step_ends_s`` and the per-epoch training logs: a version 1
    document has none of them, which readers treat as absent."""
    return dict(data, sweep=None, schema_version=2)


# version -> how to lift a document of that version one version up
UPGRADES: Dict[int, Callable[[Dict[str, Any]], Dict[str, Any]]] = {1: _from_v1}


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
    kind: str = "train"  # train, inference or parity
    sweep: Optional[Dict[str, Any]] = None  # name, file, run_key: for runs of a sweep
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ResultError(f"status: expected one of {', '.join(STATUSES)}; got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def failed(self) -> bool:
        """Failed, out of memory or timed out. An ``unsupported`` run is not a failure:
        nothing went wrong, this machine cannot run that mode (its reason says why)."""
        return self.status not in ("ok", "unsupported")

    @property
    def warnings(self) -> List[str]:
        """What the backend said the run's numbers should be read with (for example a
        slow data format), from ``environment.framework.warnings``."""
        return list((self.environment.get("framework") or {}).get("warnings") or [])

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        # schema first, so a reader sees the version before anything else
        return {"schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> RunResult:
        """Read a document of this schema version or an older one (upgraded on read)."""
        if not isinstance(data, dict) or "run_id" not in data:
            raise ResultError("expected a kbench result document (a JSON object with run_id)")
        version = data.get("schema_version")
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise ResultError(
                f"schema_version: the document has version {version}, written by a newer "
                f"kbench; this kbench reads versions 1 to {SCHEMA_VERSION}. Upgrade kbench."
            )
        while version in UPGRADES:
            data = UPGRADES[version](data)
            version = data["schema_version"]
        if version != SCHEMA_VERSION:
            raise ResultError(
                f"schema_version: expected a version from 1 to {SCHEMA_VERSION}; the document "
                f"has {version!r}, which no kbench wrote."
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ResultError(f"unknown fields {', '.join(unknown)} for version {version}")
        return cls(**data)

    def save(self, directory: Path) -> Path:
        path = Path(directory) / f"{self.run_id}.json"
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, path: Path) -> RunResult:
        return cls.from_dict(read_json(path))
