"""A results store: a directory of result documents plus an index of them.

The documents (``<run_id>.json``, one per run, written atomically by the runner)
are the truth; ``index.jsonl`` is a cache of one line per document (its run id,
status and config) so that listing and filtering do not read every document. The
index is rewritten atomically and reconciled with the directory whenever it is
read, so a document copied in by hand, or written by a command that was killed
before it updated the index, is picked up, and a deleted one is dropped.

Documents from several machines can live in one store (``merge``): each carries
its machine in ``environment``, and :func:`host_of` tells them apart.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from kbench.results.config import ConfigError
from kbench.results.result import ResultError, RunResult

log = logging.getLogger(__name__)

INDEX_NAME = "index.jsonl"
INDEX_VERSION = 1


class StoreError(ValueError):
    """A store, filter or export request kbench cannot carry out; says how to fix it."""


@dataclass(frozen=True)
class IndexEntry:
    """What the index keeps of one document: enough to list and filter runs."""

    run_id: str
    file: str  # relative to the store
    status: str
    kind: str
    started_at: str
    host: str
    config: Dict[str, Any]
    images_per_sec: Optional[float] = None
    sweep: Optional[str] = None
    run_key: Optional[str] = None  # a sweep run's identity across reruns
    index_version: int = INDEX_VERSION

    @classmethod
    def of(cls, result: RunResult, file: str) -> IndexEntry:
        sweep = result.sweep or {}
        return cls(
            run_id=result.run_id,
            file=file,
            status=result.status,
            kind=result.kind,
            started_at=result.started_at,
            host=host_of(result),
            config=result.config,
            images_per_sec=result.metrics.get("images_per_sec"),
            sweep=sweep.get("name"),
            run_key=sweep.get("run_key"),
        )

    def field_value(self, name: str) -> Any:
        """A top-level field or a config setting, by name (for filters)."""
        if name in self.config:
            return self.config[name]
        return getattr(self, name, None)


def host_of(result: RunResult) -> str:
    """The machine a result comes from: its hostname, and its GPU where it had one."""
    machine = result.environment.get("machine", {})
    host = machine.get("hostname") or "unknown host"
    devices = machine.get("gpu", {}).get("devices") or []
    if devices:
        host += f" ({devices[0].get('name', 'GPU')})"
    return host


@dataclass(frozen=True)
class Filter:
    """``name=value[,value...]``: keep runs whose field (or config setting) is one of the values."""

    name: str
    values: Tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Filter:
        name, sep, values = text.partition("=")
        items = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or not name.strip() or not items:
            raise StoreError(
                f"filter: expected NAME=VALUE[,VALUE...], for example backend=jax,torch or "
                f"status=ok; received {text!r}"
            )
        return cls(name.strip(), items)

    def accepts(self, entry: IndexEntry) -> bool:
        value = entry.field_value(self.name)
        text = "none" if value is None else str(value).lower()
        return text in (v.lower() for v in self.values)


FILTER_FIELDS = ("status", "kind", "host", "sweep", "run_id")


def check_filters(filters: Sequence[Filter], entries: Sequence[IndexEntry]) -> None:
    """Refuse a filter on a name no run has, instead of silently matching nothing."""
    known = set(FILTER_FIELDS)
    for entry in entries:
        known.update(entry.config)
    for f in filters:
        if f.name not in known:
            raise StoreError(
                f"filter: unknown field {f.name!r}; expected one of: {', '.join(sorted(known))}"
            )


@dataclass
class ResultStore:
    directory: Path
    unreadable: List[Tuple[str, str]] = field(default_factory=list)  # (file, why)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)

    @property
    def index_path(self) -> Path:
        return self.directory / INDEX_NAME

    def exists(self) -> bool:
        return self.directory.is_dir()

    # writing -------------------------------------------------------------

    def add(self, result: RunResult) -> Path:
        """Save ``result`` (atomically), then record it in the index."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = result.save(self.directory)
        entries = {e.run_id: e for e in self._read_index()}
        entries[result.run_id] = IndexEntry.of(result, path.name)
        self._write_index(entries.values())
        return path

    # reading -------------------------------------------------------------

    def entries(self, filters: Sequence[Filter] = ()) -> List[IndexEntry]:
        """Every readable document's entry, oldest first, reconciled with the directory."""
        if not self.exists():
            raise StoreError(
                f"store: expected a directory of kbench results; {self.directory} does not "
                "exist. Point --store at the --output-dir of a run or sweep."
            )
        indexed = {e.file: e for e in self._read_index()}
        on_disk = sorted(
            p.name for p in self.directory.glob("*.json") if not p.name.startswith(".")
        )
        entries, changed = [], set(indexed) != set(on_disk)
        self.unreadable = []
        for name in on_disk:
            entry = indexed.get(name)
            if entry is None:
                try:
                    entry = IndexEntry.of(RunResult.load(self.directory / name), name)
                except (ResultError, ValueError, TypeError, OSError) as err:
                    self.unreadable.append((name, str(err)))
                    continue
            entries.append(entry)
        if changed:
            try:
                self._write_index(entries)
            except OSError as err:  # a read-only store is still readable
                log.debug("index not rewritten: %s", err)
        check_filters(filters, entries)
        entries = [e for e in entries if all(f.accepts(e) for f in filters)]
        return sorted(entries, key=lambda e: (e.started_at, e.run_id))

    def results(self, filters: Sequence[Filter] = (), latest_only: bool = False) -> List[RunResult]:
        """The documents that pass ``filters``; with ``latest_only``, the newest per sweep run."""
        entries = self.entries(filters)
        if latest_only:
            entries = latest_per_run(entries)
        out = []
        for entry in entries:
            try:
                out.append(RunResult.load(self.directory / entry.file))
            except (ResultError, ValueError, TypeError, OSError) as err:
                self.unreadable.append((entry.file, str(err)))
        return out

    def done_keys(self) -> Dict[str, str]:
        """run_key -> status of its newest result, for resuming a sweep."""
        return {e.run_key: e.status for e in latest_per_run(self.entries()) if e.run_key}

    # moving results between stores --------------------------------------

    def merge(self, sources: Iterable[Path]) -> MergeSummary:
        """Copy every readable document of ``sources`` that this store lacks (and its log)."""
        summary = MergeSummary()
        have = {e.run_id for e in self.entries()} if self.exists() else set()
        for source in sources:
            other = ResultStore(Path(source))
            for entry in other.entries():
                if entry.run_id in have:
                    summary.already_present += 1
                    continue
                result = RunResult.load(other.directory / entry.file)
                self.add(result)  # rewritten in the current schema version
                have.add(entry.run_id)
                summary.added += 1
                summary.hosts.add(entry.host)
                log_file = other.directory / "logs" / f"{entry.run_id}.log"
                if log_file.exists():
                    (self.directory / "logs").mkdir(exist_ok=True)
                    shutil.copy2(log_file, self.directory / "logs" / log_file.name)
            summary.unreadable += [(f"{source}/{name}", why) for name, why in other.unreadable]
        return summary

    # index file -----------------------------------------------------------

    def _read_index(self) -> List[IndexEntry]:
        if not self.index_path.exists():
            return []
        entries = []
        try:
            lines = self.index_path.read_text().splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                data = json.loads(line)
                if data.get("index_version") != INDEX_VERSION:
                    return []  # another layout: rebuilt from the documents
                entries.append(IndexEntry(**data))
            except (ValueError, TypeError):
                return []  # damaged: rebuilt from the documents
        return entries

    def _write_index(self, entries: Iterable[IndexEntry]) -> None:
        lines = [json.dumps(asdict(e), sort_keys=True) for e in entries]
        write_lines_atomic(self.index_path, lines)


@dataclass
class MergeSummary:
    added: int = 0
    already_present: int = 0
    hosts: set = field(default_factory=set)
    unreadable: List[Tuple[str, str]] = field(default_factory=list)


def latest_per_run(entries: Sequence[IndexEntry]) -> List[IndexEntry]:
    """Entries of sweep runs reduced to the newest per run_key; others kept as they are."""
    newest: Dict[str, IndexEntry] = {}
    for e in entries:
        if e.run_key and (e.run_key not in newest or e.started_at >= newest[e.run_key].started_at):
            newest[e.run_key] = e
    return [e for e in entries if not e.run_key or newest[e.run_key] is e]


def write_lines_atomic(path: Path, lines: Sequence[str]) -> None:
    """Like :func:`kbench.results.jsonfile.write_json_atomic`, for a file of JSON lines."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write("".join(line + "\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# flat rows, for pandas and CSV / Parquet --------------------------------------

MEMORY_KINDS = ("process_peak_rss", "framework_peak", "process_nvml", "device_used")


def flatten(result: RunResult) -> Dict[str, Any]:
    """One flat row of a result: config settings as they are, then what was measured."""
    m = result.metrics
    env = result.environment
    machine = env.get("machine", {})
    framework = env.get("framework", {})
    row: Dict[str, Any] = {
        "run_id": result.run_id,
        "status": result.status,
        "kind": result.kind,
        "started_at": result.started_at,
        "wall_time_s": result.wall_time_s,
        "reason": result.reason,
        "sweep": (result.sweep or {}).get("name"),
        "run_key": (result.sweep or {}).get("run_key"),
        "host": host_of(result),
    }
    for key, value in result.config.items():
        row[key] = "x".join(map(str, value)) if isinstance(value, (list, tuple)) else value
    row.update(
        data_name=result.data.get("name"),
        data_source=result.data.get("source"),
        synthetic=result.data.get("synthetic"),
        params=result.model.get("params"),
        images_per_sec=m.get("images_per_sec"),
        test_accuracy=m.get("test_accuracy"),
        final_train_loss=m.get("final_train_loss"),
        first_step_s=m.get("first_step_s"),
        time_to_first_step_s=m.get("time_to_first_step_s"),
        measured_time_s=m.get("measured_time_s"),
        step_time_p50_s=(m.get("step_time_s") or {}).get("p50"),
        epoch_time_mean_s=_mean(m.get("epoch_time_s")),
        latency_p50_ms=(m.get("latency_ms") or {}).get("p50"),
        latency_p99_ms=(m.get("latency_ms") or {}).get("p99"),
        achieved_gflops_per_sec=(m.get("compute") or {}).get("achieved_gflops_per_sec"),
        images_per_joule=(m.get("energy") or {}).get("images_per_joule"),
    )
    for kind in MEMORY_KINDS:
        values = [r["bytes"] for r in m.get("memory", []) if r.get("kind") == kind]
        row[f"memory_{kind}_bytes"] = max(values) if values else None
    measured = ((result.sampler or {}).get("summary") or {}).get("measured", {})
    row["gpu_utilization_percent_mean"] = _first(
        s.get("mean") for name, s in measured.items() if name.endswith("kernel_time_percent")
    )
    row["process_cpu_percent_mean"] = (measured.get("process_cpu_percent") or {}).get("mean")
    row.update(
        image_data_format=env.get("keras_json", {}).get("image_data_format"),
        framework=framework.get("name"),
        framework_version=framework.get("version"),
        keras_version=framework.get("keras_version"),
        kbench_version=env.get("kbench", {}).get("version"),
        git_sha=(env.get("kbench", {}).get("git") or {}).get("sha"),
        cpu_model=machine.get("cpu_model"),
        omp_num_threads=env.get("process_env", {}).get("OMP_NUM_THREADS"),
    )
    return row


def to_frame(results: Sequence[RunResult]):
    """A pandas DataFrame with one row per result (see :func:`flatten`)."""
    import pandas as pd

    return pd.DataFrame([flatten(r) for r in results])


def load_frame(directory: Path, filters: Sequence[str] = (), latest_only: bool = False):
    """The Python API: ``kbench.results.store.load_frame("results")`` -> one row per run."""
    store = ResultStore(Path(directory))
    return to_frame(store.results([Filter.parse(f) for f in filters], latest_only=latest_only))


def export(results: Sequence[RunResult], path: Path) -> Path:
    """Write the flattened results as CSV or Parquet, chosen by the file's suffix."""
    path = Path(path)
    frame = to_frame(results)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        raise StoreError(
            f"export: expected a file name ending in .csv or .parquet; received {str(path)!r}"
        )
    return path


def _mean(values: Optional[Sequence[float]]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def _first(values: Iterable[Any]) -> Any:
    return next(iter(values), None)


def check_output_dir(path: Path) -> Path:
    """Create ``path`` if needed and prove it writable, before anything runs."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".kbench-probe-", delete=True)
        probe.close()
    except OSError as err:
        raise ConfigError(
            "output_dir",
            f"expected a directory kbench can write; {path} is not one "
            f"({err.strerror or err}). Choose another with --output-dir.",
        ) from err
    return path
