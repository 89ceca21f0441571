"""A results store: a directory of result documents (``<run_id>.json``, written
atomically: the truth) and ``index.jsonl``, a line per document (with its size and
modification time) so that listing and filtering read no document. The index is
reconciled with the directory whenever it is read: a document copied in by hand is picked
up, a deleted one dropped, a changed one read again; an unreadable one is left out of
everything and named in ``ResultStore.unreadable`` with the reason.

One writer at a time (:func:`writer_lock`, an OS lock on ``STORE/.lock``). A result the
store cannot take (a full disk) is kept elsewhere (:func:`rescue`). Several machines'
documents can share a store (``merge``; :func:`host_of`); a merge takes only run ids that
name a file inside the store (:func:`run_id_problem`) and never overwrites another run's
document. A directory of ``.json`` files none of which is a result, with no index, is
refused, never written to.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import logging
import math
import os
import re
import shlex
import shutil
import socket
import stat
import sys
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from kbench.facts import cache_dir
from kbench.results.comparison import WINDOW_RUN_ID, from_windows
from kbench.results.config import ConfigError
from kbench.results.jsonfile import refuse_link, write_text_atomic
from kbench.results.readings import epoch_time, memory_peaks, utilization
from kbench.results.result import ResultError, RunResult

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

log = logging.getLogger(__name__)

INDEX_NAME = "index.jsonl"
# kbench's own reports kept beside the documents (kbench reproduce, kbench tune): not runs
REPORT_NAMES = ("claims.json", "tune.json", "tune-progress.json")
INDEX_VERSION = 2  # 2: entries carry the document's size and mtime_ns
UNSAVED_NAME = "unsaved"  # logs/unsaved/ in a store, or the cache's unsaved/STORE/
# Below this much free space a sweep is warned before it starts (a result with its
# sampler series and a log take up to a few MB per run).
LOW_SPACE_BYTES = 200 * 2**20
SPACE_PER_RUN_BYTES = 5 * 2**20
LOG_PROBE_BYTES = 8192  # written (then truncated) before a run: a store that cannot is full
# A run id names files in the store (<run_id>.json, its temporary twin, logs/<run_id>.log):
# letters, digits, "_", "." and "-", not starting with "." (hidden, "..").
RUN_ID_CHARS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
RUN_ID_MAX = 200  # a file name is at most 255 bytes; the temporary file adds 19


class StoreError(ValueError):
    """A store, filter or export request kbench cannot carry out."""


class StoreWriteError(Exception):
    """The store cannot take what a run writes: the command stops instead of running on."""


class ResultNotSaved(StoreWriteError):
    """A result the store could not take; ``kept``: where a copy went (None: nowhere)."""

    def __init__(
        self, message: str, result: RunResult, kept: Optional[Path], why: str = ""
    ) -> None:
        super().__init__(message)
        self.result = result
        self.kept = kept
        self.why = why  # the store's error, as the system said it


class ResultsNotSaved(StoreWriteError):
    """Results the store could not take, each tried and kept aside where it could be
    (:meth:`ResultStore.add_all`); ``failures``: each one's :class:`ResultNotSaved`."""

    def __init__(self, store: Path, failures: Sequence[ResultNotSaved]) -> None:
        if len(failures) == 1:
            super().__init__(str(failures[0]))
        else:
            super().__init__(_not_saved_text(store, failures))
        self.failures = list(failures)


@dataclass(frozen=True)
class IndexEntry:
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
    size: int = -1  # the document's, when it was indexed: a change means read it again
    mtime_ns: int = -1
    index_version: int = INDEX_VERSION

    @classmethod
    def of(cls, result: RunResult, file: str, stat: Optional[os.stat_result] = None) -> IndexEntry:
        sweep = result.sweep or {}
        ips = result.metrics.get("images_per_sec")
        return cls(
            result.run_id, file, result.status, result.kind, result.started_at, host_of(result),
            result.config,
            images_per_sec=ips if isinstance(ips, (int, float)) and math.isfinite(ips) else None,
            sweep=sweep.get("name"), run_key=sweep.get("run_key"),
            size=stat.st_size if stat else -1, mtime_ns=stat.st_mtime_ns if stat else -1,
        )  # fmt: skip

    @classmethod
    def from_dict(cls, data: Any) -> IndexEntry:
        """An index line, its types checked (ValueError)."""
        if not isinstance(data, dict) or data.get("index_version") != INDEX_VERSION:
            raise ValueError("another index layout")
        entry = cls(**data)
        for f in fields(cls):
            value = getattr(entry, f.name)
            expected = _INDEX_TYPES.get(f.name, (str,))
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ValueError(f"{f.name}: {value!r}")
        return entry

    def to_dict(self) -> Dict[str, Any]:
        # not dataclasses.asdict, which deep-copies each config (10 s of a 240-run sweep)
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def matches(self, stat: os.stat_result) -> bool:
        return self.size == stat.st_size and self.mtime_ns == stat.st_mtime_ns

    def field_value(self, name: str) -> Any:
        return self.config[name] if name in self.config else getattr(self, name, None)


_NONE = type(None)
_INDEX_TYPES = {"config": (dict,), "images_per_sec": (int, float, _NONE), "sweep": (str, _NONE),
                "run_key": (str, _NONE), "size": (int,), "mtime_ns": (int,),
                "index_version": (int,)}  # fmt: skip


def run_id_problem(run_id: str) -> Optional[str]:
    """Why ``run_id`` cannot name a file inside a store (a separator, ``..``, NUL, a
    leading dot or too long a name would write elsewhere, hide the file or fail); or None."""
    if len(run_id) > RUN_ID_MAX:
        return f"run_id of {len(run_id)} characters: at most {RUN_ID_MAX} name a file"
    if not RUN_ID_CHARS.fullmatch(run_id):
        shown = run_id if len(run_id) <= 60 else run_id[:57] + "..."
        return (
            f"run_id {shown!r} is not a file name inside the store (a run id is letters, digits, "
            "'_', '.' and '-', not starting with '.'; no '/', '..', absolute path or NUL)"
        )
    return None


def host_of(result: RunResult) -> str:
    """A result's machine: its hostname, and its GPU where it had one."""
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
    known = set(FILTER_FIELDS).union(*(entry.config for entry in entries))
    for f in filters:
        if f.name not in known:
            raise StoreError(
                f"filter: unknown field {f.name!r}; expected one of: {', '.join(sorted(known))}"
            )


@dataclass
class ResultStore:
    directory: Path
    unreadable: List[Tuple[str, str]] = field(default_factory=list)  # (file, why)
    read_only: bool = False  # a merge's source: its index is read, never rewritten
    # The index as last read or written (the file's inode, size, mtime; each entry with its
    # line), reused while the file is that one: a sweep's 240 adds parsed 29,000 entries.
    _index_cache: Optional[Tuple[Tuple[int, int, int], List[Tuple[IndexEntry, str]]]] = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.directory = Path(self.directory)

    @property
    def index_path(self) -> Path:
        return self.directory / INDEX_NAME

    def exists(self) -> bool:
        return self.directory.is_dir()

    def _require_directory(self) -> None:
        if not self.exists():
            what = "is a file" if self.directory.exists() else "does not exist"
            raise StoreError(
                f"store: expected a directory of kbench results; {self.directory} {what}. "
                "Point --store at the directory a run or sweep wrote to."
            )

    def _documents(self) -> List[str]:
        return sorted(
            p.name
            for p in self.directory.glob("*.json")
            if not p.name.startswith(".") and p.name not in REPORT_NAMES
        )

    def check_is_store(self) -> None:
        """Refuse a directory of ``.json`` files none of which is a result, with no index (a
        missing or empty directory is a store yet to be written)."""
        if not self.exists() or self.index_path.exists():
            return
        names = self._documents()
        problems = []
        for name in names:
            try:
                RunResult.load(self.directory / name)
                return
            except (ResultError, OSError) as err:
                problems.append(f"{name}: {_why(err)}")
        if problems:
            shown = "; ".join(p[:200] for p in problems[:3])
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise StoreError(
                f"store: expected a directory of kbench results (DIR/<run_id>.json and "
                f"DIR/{INDEX_NAME}); {self.directory} has no {INDEX_NAME} and none of its "
                f"{len(names)} .json files is a kbench result: {shown}{more}. Point --store "
                "at the directory a run or sweep wrote to (kbench writes nothing here)."
            )

    # writing -------------------------------------------------------------

    def add(self, result: RunResult) -> Path:
        """Save ``result`` (atomically), then index it. :class:`ResultNotSaved` when the
        document cannot be written (a copy kept by :func:`rescue`); :class:`StoreError`
        for a run id that names no file inside the store. An index that cannot be rewritten
        is only warned about: it is rebuilt when next read."""
        problem = run_id_problem(result.run_id)
        if problem:
            raise StoreError(f"{problem}; the result is not written to {self.directory}.")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = result.save(self.directory)
        except OSError as err:
            raise not_saved(result, self.directory, err) from None
        entries = {entry.run_id: (entry, line) for entry, line in self._indexed_lines()}
        entry = IndexEntry.of(result, path.name, _stat(path))
        entries[result.run_id] = (entry, _index_line(entry))
        try:
            self._write_lines(list(entries.values()))
        except OSError as err:
            log.warning("%s: not updated (%s); %s is saved and will be indexed when the store is "
                        "next read", self.index_path, err.strerror or err, path.name)  # fmt: skip
        return path

    def add_all(self, results: Sequence[RunResult]) -> None:
        """:meth:`add` each of ``results``, every one tried (and kept aside where the store
        cannot take it) before :class:`ResultsNotSaved` names them all."""
        failures = []
        for result in results:
            try:
                self.add(result)
            except ResultNotSaved as err:
                failures.append(err)
        if failures:
            raise ResultsNotSaved(self.directory, failures)

    # reading -------------------------------------------------------------

    def entries(self, filters: Sequence[Filter] = ()) -> List[IndexEntry]:
        return [entry for entry, _ in self._runs(filters)]

    def _runs(self, filters: Sequence[Filter] = ()) -> List[Tuple[IndexEntry, Any]]:
        """Each run's entry and its document's file, oldest first, filtered. A schema-3
        warm comparison's windows (``<worker run id>-wNNN``) are read into one document
        (:func:`~kbench.results.comparison.from_windows`) that stands in for the file, unless
        the worker has a document of its own already."""
        files = self._file_entries()
        groups: Dict[str, List[IndexEntry]] = {}
        for entry in files:
            named = WINDOW_RUN_ID.match(entry.run_id)
            if named and entry.config.get("window_s") is not None:
                groups.setdefault(named.group("worker"), []).append(entry)
        runs: List[Tuple[IndexEntry, Any]] = []
        for entry in files:
            named = WINDOW_RUN_ID.match(entry.run_id)
            worker = named.group("worker") if named else None
            if worker not in groups:
                runs.append((entry, entry.file))
            elif groups[worker][0] is entry and worker not in {e.run_id for e in files}:
                merged = self._merged(groups[worker])
                if merged is not None:
                    runs.append((IndexEntry.of(merged, entry.file), merged))
        check_filters(filters, [entry for entry, _ in runs])
        runs = [(e, found) for e, found in runs if all(f.accepts(e) for f in filters)]
        return sorted(runs, key=lambda run: (run[0].started_at, run[0].run_id))

    def _merged(self, entries: Sequence[IndexEntry]) -> Optional[RunResult]:
        documents = []
        for entry in entries:
            try:
                documents.append(RunResult.load(self.directory / entry.file))
            except (ResultError, OSError) as err:
                self.unreadable.append((entry.file, _why(err)))
        return from_windows(documents) if documents else None

    def _file_entries(self) -> List[IndexEntry]:
        """Every readable document's entry, oldest first; an entry is trusted while the
        document's size and modification time are those it recorded."""
        self._require_directory()
        indexed = {e.file: e for e, _ in self._indexed_lines()}
        on_disk = self._documents()
        entries, changed = [], set(indexed) != set(on_disk)
        self.unreadable = []
        for name in on_disk:
            path = self.directory / name
            entry = indexed.get(name)
            try:
                stat = path.stat()
                if entry is None or not entry.matches(stat):
                    changed = True
                    entry = IndexEntry.of(RunResult.load(path), name, stat)
            except (ResultError, OSError) as err:
                self.unreadable.append((name, _why(err)))
                continue
            entries.append(entry)
        # a directory with no index and nothing readable is not a store: leave it as it is
        if changed and not self.read_only and (entries or self.index_path.exists()):
            try:
                self._write_lines([(e, _index_line(e)) for e in entries])
            except OSError as err:  # a read-only store is still readable
                log.debug("index not rewritten: %s", err)
        return sorted(entries, key=lambda e: (e.started_at, e.run_id))

    def results(self, filters: Sequence[Filter] = (), latest_only: bool = False) -> List[RunResult]:
        """The documents that pass ``filters``; with ``latest_only``, the newest per sweep run."""
        runs = self._runs(filters)
        if latest_only:
            newest = {id(e) for e in latest_per_run([e for e, _ in runs])}
            runs = [(e, found) for e, found in runs if id(e) in newest]
        out = []
        for _, found in runs:
            if isinstance(found, RunResult):
                out.append(found)
                continue
            try:
                out.append(RunResult.load(self.directory / found))
            except (ResultError, OSError) as err:
                self.unreadable.append((found, _why(err)))
        return out

    def done_keys(self) -> Dict[str, str]:
        return {e.run_key: e.status for e in latest_per_run(self.entries()) if e.run_key}

    # moving results between stores --------------------------------------

    def merge(self, sources: Iterable[Path]) -> MergeSummary:
        """Copy the documents of ``sources`` this store lacks (and logs), under the writer
        lock, writing nothing into a source; one that cannot name a file here, would
        overwrite another, or is here with other content, is ``refused``."""
        sources = [Path(source) for source in sources]
        others = [ResultStore(source, read_only=True) for source in sources]
        for store in (self, *others):
            store.check_is_store()
        summary = MergeSummary()
        with writer_lock(self.directory):
            have = {e.run_id: e.file for e in self._file_entries()}
            summary.unreadable += [(str(self.directory / n), why) for n, why in self.unreadable]
            written: Dict[str, str] = {}  # run id -> host, of the documents written
            for source, other in zip(sources, others):
                for entry in other._file_entries():
                    self._merge_one(other, entry, have, written, summary)
                summary.unreadable += [(f"{source}/{name}", why) for name, why in other.unreadable]
            listed = {e.run_id for e in self._file_entries()}
        for run_id, host in written.items():
            if run_id in listed:
                summary.added += 1
                summary.hosts.add(host)
            else:
                why = dict(self.unreadable).get(f"{run_id}.json", "no such file")
                summary.refused.append((run_id, f"written but not listed: {why}"))
        return summary

    def _merge_one(
        self, other: ResultStore, entry: IndexEntry, have: Dict[str, str],
        written: Dict[str, str], summary: MergeSummary,
    ) -> None:  # fmt: skip
        source = other.directory / entry.file
        try:  # the document's own run id counts, whatever the other store's index says
            result = RunResult.load(source)
        except (ResultError, OSError) as err:
            other.unreadable.append((entry.file, _why(err)))
            return
        if result.run_id in have:
            problem = self._conflict(result, source, self.directory / have[result.run_id])
            if problem is None:
                summary.already_present += 1
                return
        else:
            problem = self._refusal(result.run_id)
        if problem:
            summary.refused.append((str(source), problem))
            return
        have[result.run_id] = self.add(result).name  # rewritten in the current schema version
        written[result.run_id] = entry.host
        log_file = other.directory / "logs" / f"{result.run_id}.log"
        if log_file.is_file() and not log_file.is_symlink():  # a link could lead anywhere
            (self.directory / "logs").mkdir(exist_ok=True)
            shutil.copy2(log_file, refuse_link(self.directory / "logs" / log_file.name))

    @staticmethod
    def _conflict(result: RunResult, source: Path, here: Path) -> Optional[str]:
        """Why ``result`` (read from ``source``) is not the run ``here`` already holds, or
        None: the same run id with other content (another host's figures) is refused."""
        try:
            stored = RunResult.load(here)
            if stored.to_dict() == result.to_dict():
                return None
            held = f"{here} (from {host_of(stored)})"
        except (ResultError, OSError) as err:
            held = f"{here}, now unreadable ({_why(err)})"
        return (
            f"run {result.run_id} is already in this store as {held}, with other content "
            f"than {source} (from {host_of(result)}): the stored one is kept. Compare the "
            "two; to keep both, give one another run_id and merge again."
        )

    def _refusal(self, run_id: str) -> Optional[str]:
        problem = run_id_problem(run_id)
        if problem:
            return (
                f"{problem}: its file would land outside {self.directory} or not "
                "at all. Correct the document's run_id (letters, digits, '_', '.', '-') "
                "and merge again."
            )
        target = self.directory / f"{run_id}.json"
        if target.exists() or target.is_symlink():
            return (
                f"{target} exists and is not run {run_id} (another run's document, or "
                "an unreadable one): merging would overwrite it. Move it aside and merge again."
            )
        return None

    # index file -----------------------------------------------------------

    def _indexed_lines(self) -> List[Tuple[IndexEntry, str]]:
        """Each line of the index with its entry (none where damaged or of another layout:
        then it is rebuilt from the documents)."""
        identity = _identity(self.index_path)
        if identity is None:
            return []
        if self._index_cache is not None and self._index_cache[0] == identity:
            return list(self._index_cache[1])
        try:
            lines = self.index_path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        entries: List[Tuple[IndexEntry, str]] = []
        for line in lines:
            try:
                entries.append((IndexEntry.from_dict(json.loads(line)), line))
            except (ValueError, TypeError, RecursionError):
                return []  # damaged or another layout: rebuilt from the documents
        self._index_cache = (identity, list(entries))
        return entries

    def _write_lines(self, entries: List[Tuple[IndexEntry, str]]) -> None:
        write_text_atomic(self.index_path, "".join(line + "\n" for _, line in entries))
        identity = _identity(self.index_path)
        self._index_cache = None if identity is None else (identity, list(entries))


def _index_line(entry: IndexEntry) -> str:
    return json.dumps(entry.to_dict(), sort_keys=True, allow_nan=False)


def _identity(path: Path) -> Optional[Tuple[int, int, int]]:
    """(inode, size, mtime in ns) of ``path``: an index replaced by anyone is read again."""
    stat = _stat(path)
    return None if stat is None else (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _stat(path: Path) -> Optional[os.stat_result]:
    try:
        return path.stat()
    except OSError:
        return None


def _why(err: BaseException) -> str:
    if isinstance(err, OSError):
        return f"cannot be read: {err.strerror or err}"
    return str(err)


# a result the store cannot take -----------------------------------------------


def rescue_places(store: Path) -> List[Path]:
    """Where a result the store cannot take is kept: ``STORE/logs/unsaved/``, else in
    kbench's cache (``unsaved/<the store's path, as a name>/``)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", str(Path(store).resolve())).strip("_") or "store"
    return [Path(store) / "logs" / UNSAVED_NAME, cache_dir() / UNSAVED_NAME / slug]


def rescue(result: RunResult, store: Path) -> Tuple[Optional[Path], List[str]]:
    """(the first of :func:`rescue_places` that took ``result``, or None; why others failed)."""
    tried = []
    for place in rescue_places(store):
        existed = place.is_dir()
        try:
            place.mkdir(parents=True, exist_ok=True)
            result.save(place)
            return place, tried
        except OSError as err:
            tried.append(f"{place}: {err.strerror or err}")
            if not existed:
                with contextlib.suppress(OSError):
                    place.rmdir()  # leave no empty directory to puzzle over
    return None, tried


def not_saved(result: RunResult, store: Path, err: OSError) -> ResultNotSaved:
    kept, tried = rescue(result, store)
    problem = (
        f"the result of run {result.run_id} ({result.status}) could not be written to "
        f"{store}: {err.strerror or err}."
    )
    if kept is None:
        return ResultNotSaved(
            f"{problem} It could not be kept anywhere else either ({'; '.join(tried)}): "
            "this run's result is lost. Free some space and run it again.",
            result,
            None,
            str(err.strerror or err),
        )
    command = import_command(store, kept)
    return ResultNotSaved(
        f"{problem} It is kept in {kept / (result.run_id + '.json')}. When the store can "
        f"take it again (free some space), import it with:\n  {command}\nthen delete {kept}.",
        result,
        kept,
        str(err.strerror or err),
    )


def import_command(store: Path, kept: Path) -> str:
    return shlex.join(["kbench", "results", "--store", str(store), "--merge", str(kept)])


def _not_saved_text(store: Path, failures: Sequence[ResultNotSaved]) -> str:
    """One line per result the store could not take (where it is kept, or lost), and how
    to import each folder they were kept in."""
    lines = [f"{len(failures)} results could not be written to {store}: {failures[0].why}."]
    for failure in failures:
        name = f"{failure.result.run_id}.json"
        where = f"kept in {failure.kept / name}" if failure.kept else "lost: kept nowhere"
        lines.append(f"  {failure.result.run_id} ({failure.result.status}): {where}")
    for kept in dict.fromkeys(f.kept for f in failures if f.kept):
        command = import_command(store, kept)
        lines.append(f"When the store can take them again, import them with:\n  {command}\n"
                     f"then delete {kept}.")  # fmt: skip
    return "\n".join(lines)


def open_log(store: Path, run_id: str) -> Path:
    """Create ``STORE/logs/<run_id>.log``, proving the store can take a few KB (a full
    disk accepts an empty file): :class:`StoreWriteError` before the run starts."""
    path = refuse_link(refuse_link(Path(store) / "logs") / f"{run_id}.log")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(bytes(LOG_PROBE_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
            handle.truncate(0)
    except OSError as err:
        with contextlib.suppress(OSError):
            path.unlink()  # an empty log of a run that never started would puzzle
        raise StoreWriteError(
            f"cannot write the log of the next run, {path}: {err.strerror or err}. "
            f"Free some space in (or choose another) --store; runs already finished "
            f"are in {store}."
        ) from None
    return path


def low_space_warning(store: Path, runs: int, command: str = "the sweep") -> Optional[str]:
    """A warning where ``store`` has less room than ``runs`` runs may need; None: room,
    or no way to tell. ``command``: what a result that cannot be written stops."""
    try:
        free = shutil.disk_usage(_existing_parent(Path(store))).free
    except OSError:
        return None
    need = max(LOW_SPACE_BYTES, runs * SPACE_PER_RUN_BYTES)
    if free >= need:
        return None
    return (
        f"only {free / 2**20:.1f} MB free where results go ({store}); {runs} runs may "
        f"need about {need / 2**20:.0f} MB. A result that cannot be written stops "
        f"{command} (and is kept aside); free some space or choose another --store."
    )


def _existing_parent(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


@dataclass
class MergeSummary:
    added: int = 0
    already_present: int = 0
    hosts: set = field(default_factory=set)
    unreadable: List[Tuple[str, str]] = field(default_factory=list)
    refused: List[Tuple[str, str]] = field(default_factory=list)  # (document, why)


def latest_per_run(entries: Sequence[IndexEntry]) -> List[IndexEntry]:
    """The newest entry per sweep run_key; entries of no sweep kept as they are."""
    newest: Dict[str, IndexEntry] = {}
    for e in entries:
        if e.run_key and (e.run_key not in newest or e.started_at >= newest[e.run_key].started_at):
            newest[e.run_key] = e
    return [e for e in entries if not e.run_key or newest[e.run_key] is e]


# flat rows, for pandas and CSV / Parquet --------------------------------------

MEMORY_COLUMNS = ("process_peak_rss", "framework_peak", "process_nvml", "device_used")
GPU_MEMORY = ("framework_peak", "process_nvml", "device_used")  # kinds a run reads per GPU


def flatten(result: RunResult) -> Dict[str, Any]:
    """One flat row of a result: its config, then what was measured, as every table reads
    it (:mod:`kbench.results.readings`): ``memory_<kind>_bytes`` the largest per-GPU peak,
    ``memory_<kind>_sum_bytes`` the sum over several GPUs (else empty); GPU utilization
    the mean over the GPUs the worker used."""
    m = result.metrics
    env = result.environment
    machine = env.get("machine", {})
    framework = env.get("framework", {})
    row: Dict[str, Any] = {
        "run_id": result.run_id, "status": result.status, "kind": result.kind,
        "started_at": result.started_at, "wall_time_s": result.wall_time_s,
        "reason": result.reason, "sweep": (result.sweep or {}).get("name"),
        "run_key": (result.sweep or {}).get("run_key"), "host": host_of(result),
    }  # fmt: skip
    for key, value in result.config.items():
        row[key] = "x".join(map(str, value)) if isinstance(value, (list, tuple)) else value
    row.update(
        data_name=result.data.get("name"), data_source=result.data.get("source"),
        synthetic=result.data.get("synthetic"), params=result.model.get("params"),
        images_per_sec=m.get("images_per_sec"), test_accuracy=m.get("test_accuracy"),
        final_train_loss=m.get("final_train_loss"), first_step_s=m.get("first_step_s"),
        time_to_first_step_s=m.get("time_to_first_step_s"),
        measured_time_s=m.get("measured_time_s"),
        step_time_p50_s=(m.get("step_time_s") or {}).get("p50"),
        epoch_time_mean_s=epoch_time(result),
        latency_p50_ms=(m.get("latency_ms") or {}).get("p50"),
        latency_p99_ms=(m.get("latency_ms") or {}).get("p99"),
        achieved_gflops_per_sec=(m.get("compute") or {}).get("achieved_gflops_per_sec"),
        images_per_joule=(m.get("energy") or {}).get("images_per_joule"),
    )  # fmt: skip
    peaks = memory_peaks(result)
    for kind in MEMORY_COLUMNS:
        row[f"memory_{kind}_bytes"] = peaks[kind].largest if kind in peaks else None
    for kind in GPU_MEMORY:
        row[f"memory_{kind}_sum_bytes"] = peaks[kind].total if kind in peaks else None
    gpu, cpu = utilization(result, "gpu"), utilization(result, "cpu")
    row["gpu_utilization_percent_mean"] = None if gpu is None else gpu.percent
    row["process_cpu_percent_mean"] = None if cpu is None else cpu.percent
    row.update(
        image_data_format=env.get("keras_json", {}).get("image_data_format"),
        framework=framework.get("name"), framework_version=framework.get("version"),
        keras_version=framework.get("keras_version"),
        kbench_version=env.get("kbench", {}).get("version"),
        git_sha=(env.get("kbench", {}).get("git") or {}).get("sha"),
        cpu_model=machine.get("cpu_model"),
        omp_num_threads=env.get("process_env", {}).get("OMP_NUM_THREADS"),
    )  # fmt: skip
    return row


def to_frame(results: Sequence[RunResult]):
    import pandas as pd

    return pd.DataFrame([flatten(r) for r in results])


def load_runs(
    stores: Sequence[Path], filters: Sequence[str] = (), latest_only: bool = True
) -> List[RunResult]:
    """The runs of ``stores`` that pass ``filters`` (``NAME=VALUE[,VALUE]``), oldest first;
    an unreadable document is logged and left out; no run at all is a :class:`StoreError`."""
    parsed = [Filter.parse(f) for f in filters]
    runs: List[RunResult] = []
    for directory in stores:
        store = ResultStore(Path(directory))
        runs += store.results(parsed, latest_only=latest_only)
        for name, why in store.unreadable:
            log.warning("%s/%s: skipped: %s", directory, name, why)
    if not runs:
        raise StoreError(
            f"store: no runs in {', '.join(map(str, stores))}"
            + (f" pass the filters {', '.join(filters)}" if filters else "")
        )
    return sorted(runs, key=lambda r: (r.started_at, r.run_id))


def load_frame(directory: Path, filters: Sequence[str] = (), latest_only: bool = False):
    store = ResultStore(Path(directory))
    return to_frame(store.results([Filter.parse(f) for f in filters], latest_only=latest_only))


def export(results: Sequence[RunResult], path: Path) -> Path:
    """Write :func:`to_frame` as CSV or Parquet, by the file's suffix."""
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


def check_output_dir(path: Path) -> Path:
    """Create ``path`` if needed and prove it writable, before anything runs."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".kbench-probe-", delete=True)
        probe.close()
    except OSError as err:
        raise ConfigError(
            "store",
            f"expected a directory kbench can write; {path} is not one "
            f"({err.strerror or err}). Choose another with --store.",
        ) from err
    return path


# one writer per store ----------------------------------------------------------------
#
# A command that writes results (``kbench run``, ``sweep``, ``results --merge``) holds
# the lock on ``STORE/.lock`` while it writes; a second writer is refused at once, told
# which process holds it. The lock is the operating system's (``fcntl.flock``; on Windows
# ``msvcrt.locking``, not tested there), so it goes with its process however that ends:
# a ``kill -9`` leaves no stale lock. The file (which stays) names the holder's PID,
# host, command and start, for the message. Readers take no lock: files are replaced
# atomically. Within one process the lock is re-entrant (a sweep holds it and its
# runner's session takes it again).

LOCK_NAME = ".lock"
# On Windows a locked byte cannot be read by other processes: lock one far past the
# holder's description, so that the description stays readable.
_WINDOWS_LOCK_OFFSET = 1 << 20


class LockError(Exception):
    """The store cannot be locked for writing; the message says why and what to do."""


class StoreLocked(LockError):
    """Another process writes to this store."""


@dataclass
class _Held:
    fd: int
    count: int  # the with-blocks of this process that hold it


_held: Dict[Path, _Held] = {}


@contextlib.contextmanager
def writer_lock(directory: Path) -> Iterator[Path]:
    """Hold the store's writer lock (creating the store) for the ``with`` block."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LockError(
            f"store: expected a directory kbench can write; {directory} cannot be created "
            f"({err.strerror or err}). Choose another with --store."
        ) from None
    key = directory.resolve()
    if key in _held:
        _held[key].count += 1
        try:
            yield key / LOCK_NAME
        finally:
            _held[key].count -= 1
        return
    path = key / LOCK_NAME
    try:  # no link followed, and no file truncated that is not the store's own
        fd = os.open(
            refuse_link(path), os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644
        )
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            raise OSError(f"it is not a plain file of its own (links: {info.st_nlink})")
    except OSError as err:
        raise LockError(
            f"store: expected to create the lock file {path}; {err.strerror or err}. "
            "Choose a --store kbench can write."
        ) from None
    try:
        _lock(fd)
    except OSError as err:
        os.close(fd)
        if err.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, errno.EDEADLK):
            raise LockError(f"store: could not lock {path}: {err.strerror or err}") from None
        raise StoreLocked(
            f"store: {directory} is being written by {holder_of(path)}. Two writers would "
            "run the same runs twice and time each against the other; wait for it to "
            "finish (then run this again: finished runs are skipped), or choose another "
            "--store."
        ) from None
    _held[key] = _Held(fd, 1)
    try:
        _describe_holder(fd)
        yield path
    finally:
        del _held[key]
        _lock(fd, take=False)
        os.close(fd)


def holder_of(path: Path) -> str:
    try:
        info = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "another process"
    words = f"process {info['pid']}"
    if info.get("host") and info["host"] != socket.gethostname():
        words += f" on {info['host']}"
    if info.get("command"):
        words += f" ({info['command']})"
    if info.get("since"):
        words += f", since {info['since']}"
    return words


def _describe_holder(fd: int) -> None:
    info = {
        "pid": os.getpid(), "host": socket.gethostname(),
        "command": " ".join(["kbench", *sys.argv[1:]])[:300],
        "since": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }  # fmt: skip
    with contextlib.suppress(OSError):  # a full disk: the lock holds, the message says less
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(info) + "\n").encode())


def _lock(fd: int, take: bool = True) -> None:
    """Take (or release) the lock on ``fd`` without waiting."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if take else fcntl.LOCK_UN)
    else:
        os.lseek(fd, _WINDOWS_LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK if take else msvcrt.LK_UNLCK, 1)
