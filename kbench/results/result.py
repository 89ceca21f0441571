"""One versioned JSON document per run; reports read only these.

Written atomically, as standard JSON: a NaN or infinity (a loss that diverged) is
written as ``null`` and its place listed in ``non_finite``. Every document is checked
when it is read: its schema version (older ones are upgraded), then the type of every
field and nested value readers use (:data:`SHAPE`), so that a damaged document is
refused with a reason instead of failing a report later.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from kbench.results.jsonfile import finite, read_json, write_json_atomic

SCHEMA_VERSION = 4
# unsupported: a data-parallel mode that cannot run on this machine (the reason says why)
STATUSES = ("ok", "failed", "oom", "timeout", "unsupported")


def _from_v1(data: Dict[str, Any]) -> Dict[str, Any]:
    """Version 2 added ``sweep`` (and training metrics readers take as absent here)."""
    return dict(data, sweep=None, schema_version=2)


def _from_v2(data: Dict[str, Any]) -> Dict[str, Any]:
    """Version 3 added ``non_finite``; a version 2 document's bare NaN become None, listed."""
    data, replaced = finite(data)
    return dict(data, non_finite=replaced, schema_version=3)


def _from_v3(data: Dict[str, Any]) -> Dict[str, Any]:
    """Version 4 made a warm comparison one document per backend; a version 3 document
    per window is read as one per worker by the store. Every other document is alike."""
    return dict(data, schema_version=4)


# version -> how to lift a document of that version one version up
UPGRADES: Dict[int, Callable[[Dict[str, Any]], Dict[str, Any]]] = {
    1: _from_v1,
    2: _from_v2,
    3: _from_v3,
}

NUMBER = (int, float)
# The type of every field and nested value readers use: a dotted place -> the types
# allowed there. An absent place (older documents lack some), or one under a missing or
# null parent, is not checked; ``name[]`` is each item of the list ``name``.
NONE = type(None)
SHAPE: Dict[str, Tuple[type, ...]] = {
    "run_id": (str,), "status": (str,), "config": (dict,), "config.backend": (str,),
    "config.model": (str,), "started_at": (str,), "wall_time_s": NUMBER, "environment": (dict,),
    "environment.machine": (dict,), "environment.machine.hostname": (str, NONE),
    "environment.machine.gpu": (dict,), "environment.machine.gpu.devices": (list, NONE),
    "environment.machine.gpu.devices[]": (dict,), "environment.framework": (dict, NONE),
    "environment.framework.warnings": (list, NONE), "environment.kbench": (dict, NONE),
    "environment.keras_json": (dict, NONE), "environment.process_env": (dict, NONE),
    "data": (dict,), "model": (dict,), "metrics": (dict,),
    "metrics.images_per_sec": NUMBER + (NONE,), "metrics.test_accuracy": NUMBER + (NONE,),
    "metrics.memory": (list,), "metrics.memory[]": (dict,), "metrics.step_time_s": (dict, NONE),
    "metrics.latency_ms": (dict, NONE), "metrics.markers": (dict, NONE),
    # added in place (older documents lack it): what else the machine did meanwhile
    "metrics.quality": (dict, NONE), "metrics.quality.flags": (list,),
    "metrics.quality.flags[]": (str,), "metrics.quality.other_share": NUMBER + (NONE,),
    "reason": (str, NONE), "error": (dict, NONE), "sampler": (dict, NONE), "kind": (str,),
    "sweep": (dict, NONE), "sweep.name": (str, NONE), "sweep.run_key": (str, NONE),
    "non_finite": (list,),
}  # fmt: skip
TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "a number",
              float: "a number", NONE: "null", bool: "true/false"}  # fmt: skip


MAX_DEPTH = 64  # levels of objects and lists; kbench's documents have fewer than 10
TOO_DEEP = f"expected a result document nested at most {MAX_DEPTH} deep (objects and lists)"
SCALARS = {str, int, float, bool, NONE}


def nests_deeper(data: Any, limit: int) -> bool:
    """Whether ``data`` nests objects and lists past ``limit`` levels, read without
    recursion (copying or writing such a document would recurse past Python's limit)."""
    stack = [(data, 1)] if isinstance(data, (dict, list)) else []
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        inner = value.values() if isinstance(value, dict) else value
        if not SCALARS.issuperset(map(type, inner)):  # a list of numbers: passed at C speed
            stack += [(v, depth + 1) for v in inner if isinstance(v, (dict, list))]
    return False


def shape_problems(data: Dict[str, Any]) -> List[str]:
    problems = []
    non_finite = data.get("non_finite")
    nulled = set(non_finite) if isinstance(non_finite, list) else set()
    for place, allowed in SHAPE.items():
        for where, value in _values_at(data, place):
            if value is None and where in nulled:
                continue  # a NaN or infinity, written as null
            wrong = not isinstance(value, allowed) or (
                isinstance(value, bool) and bool not in allowed
            )
            if isinstance(value, float) and not math.isfinite(value):
                wrong = True  # standard JSON has no NaN: kbench writes null
            if wrong:
                expected = " or ".join(dict.fromkeys(TYPE_NAMES[t] for t in allowed))
                problems.append(f"{where}: expected {expected}; the document has {_show(value)}")
                break
    return problems


def _values_at(data: Any, place: str) -> List[Tuple[str, Any]]:
    found = [("", data)]
    for part in place.split("."):
        items = part.endswith("[]")
        name = part[:-2] if items else part
        step = []
        for where, holder in found:
            if isinstance(holder, dict) and name in holder:
                where = f"{where}.{name}" if where else name
                value = holder[name]
                if not items:
                    step.append((where, value))
                elif isinstance(value, list):
                    step += [(f"{where}[{i}]", item) for i, item in enumerate(value)]
        found = step
    return found


def _show(value: Any) -> str:
    text = "null" if value is None else repr(value)
    kind = "null" if value is None else TYPE_NAMES.get(type(value), type(value).__name__)
    text = text if len(text) <= 40 else text[:37] + "..."
    return kind if kind == "null" else f"{kind} ({text})"


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
    # places (metrics.final_train_loss) where a NaN or infinity was written as null
    non_finite: List[str] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ResultError(f"status: expected one of {', '.join(STATUSES)}; got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def failed(self) -> bool:
        """Failed, out of memory or timed out (``unsupported``: this machine cannot run it)."""
        return self.status not in ("ok", "unsupported")

    @property
    def superseded(self) -> Optional[str]:
        """Why this warm comparison, measured again from the start, is left out; None: it counts."""
        return ((self.metrics or {}).get("window") or {}).get("superseded")

    @property
    def warnings(self) -> List[str]:
        return list((self.environment.get("framework") or {}).get("warnings") or [])

    def to_dict(self) -> Dict[str, Any]:
        """The document, the schema version first, NaN and infinity as None (``non_finite``)."""
        data, replaced = finite(asdict(self))
        data["non_finite"] = sorted(set(data["non_finite"]) | set(replaced))
        return {"schema_version": data.pop("schema_version"), **data}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> RunResult:
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
        required = {f.name for f in fields(cls) if f.default is f.default_factory is MISSING}
        missing = sorted(required - set(data))
        if missing:
            raise ResultError(f"missing fields {', '.join(missing)} for version {version}")
        problems = shape_problems(data)
        if problems:
            raise ResultError("; ".join(problems))
        return cls(**data)

    def save(self, directory: Path) -> Path:
        path = Path(directory) / f"{self.run_id}.json"
        write_json_atomic(path, self.to_dict(), allow_nan=False)
        return path

    @classmethod
    def load(cls, path: Path) -> RunResult:
        try:
            data = read_json(path)
        except UnicodeDecodeError as err:
            raise ResultError(
                f"expected a UTF-8 JSON document; {err.reason} at byte {err.start}"
            ) from None
        except ValueError as err:  # json.JSONDecodeError: truncated, random bytes
            raise ResultError(f"expected a JSON document; it does not parse: {err}") from None
        except RecursionError:  # 200,000 brackets: Python's reader gives up
            raise ResultError(TOO_DEEP) from None
        if nests_deeper(data, MAX_DEPTH):
            raise ResultError(TOO_DEEP)
        return cls.from_dict(data)
