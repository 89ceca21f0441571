"""Sweeps: a matrix of runs declared in a YAML file (docs/guides/sweeps.md), run one
process each, resumable.

A file names fixed ``settings`` and a ``matrix`` of lists whose every combination is a
run, optionally split into ``groups`` (each its own settings and matrix on top of the
file's), repeated ``repeats`` times round by round; a ``reduced`` section (at the top or
in a group) holds the overrides ``--reduced`` applies, so that one file describes a study
at full size and at a size a laptop CPU finishes. Keys are
:class:`~kbench.results.config.RunConfig` fields. Every run is checked when the file is
loaded, before anything runs; an error names the place in the file
(``groups[1].matrix.batch_size[2]``), what was expected and what was received. A result
in the store with a run's key (:func:`run_key`) marks the run done, so the same command
again resumes. ``measure: windows`` compares each setting's backends in warm interleaved
windows instead (:func:`in_windows`; :mod:`kbench.studies.sweep_runs` measures them).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kbench.backends import BACKENDS
from kbench.datasets import FOLDER_PREFIX, NPZ_PREFIX
from kbench.results.config import (
    REQUIRED,
    WINDOW_S,
    ConfigError,
    FileError,
    RunConfig,
    did_you_mean,
)
from kbench.results.result import RunResult
from kbench.run.runner import shared_workers
from kbench.studies.rounds import WINDOW_BUDGET_S, WINDOW_PRECISION, Measure, Plan, how_to_measure
from kbench_models import MODELS
from kbench_models.user import is_reference

log = logging.getLogger(__name__)

TOP_KEYS = ("name", "description", "repeats", "settings", "matrix", "groups", "reduced",
            "measure", "window", "ratio_precision", "ratio_budget", "warm")  # fmt: skip
MEASURES = ("fresh", "windows")  # fresh processes (repeats), or warm interleaved windows
GROUP_KEYS = ("name", "description", "settings", "matrix", "reduced")
REDUCED_KEYS = ("settings", "matrix", "repeats", "warm")
RUN_FIELDS = tuple(f.name for f in fields(RunConfig) if f.name != "repeat")
# Settings that do not change what a run computes: a rerun with another value of
# these still finds the runs it already did.
NOT_IN_KEY = ("timeout_s", "sample_interval_s")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# The most runs a sweep may declare unless --max-runs raises it: past this, a typo in a
# matrix (a list of a thousand seeds) would take minutes and gigabytes just to list.
MAX_RUNS = 10_000


class SweepError(FileError):
    """A sweep file kbench cannot run; ``where`` is the place in the file."""


@dataclass(frozen=True)
class SweepRun:
    config: RunConfig
    key: str
    group: str


@dataclass(frozen=True)
class WindowSettings:
    """How a sweep's comparisons in warm windows measure and stop: windows of about
    ``window_s`` seconds, until every ratio to the baseline has its 95% interval within
    ``ratio_precision`` or ``ratio_budget_s`` seconds of a comparison are spent (the
    defaults of ``kbench run``'s windows)."""

    window_s: float = WINDOW_S
    ratio_precision: float = WINDOW_PRECISION
    ratio_budget_s: float = WINDOW_BUDGET_S

    def text(self) -> str:
        return (
            f"windows of {self.window_s:g} s, until every ratio's 95% interval is within "
            f"+-{self.ratio_precision:.1%} or {self.ratio_budget_s:g} s per comparison"
        )


@dataclass(frozen=True)
class Sweep:
    name: str
    description: str
    file: str
    reduced: bool
    runs: List[SweepRun]
    # what the file asks: measure (fresh or windows) and its windows' settings; the runs
    # are the file's (fresh) until in_windows() turns them
    measure: str = "fresh"
    window_settings: WindowSettings = field(default_factory=WindowSettings)
    # set by in_windows(): the runs are comparisons in warm windows, measured so
    windows: Optional[WindowSettings] = None
    # the file's warm (its reduced section's, with reduced): each round's fresh-process
    # runs that can share a worker share one, as kbench sweep --warm does
    warm: bool = False

    def varying(self) -> List[str]:
        """The settings whose values differ between runs, in RunConfig order."""
        names = RUN_FIELDS + ("repeat",)
        return [n for n in names if len({json.dumps(getattr(r.config, n)) for r in self.runs}) > 1]

    def provenance(self, run: SweepRun) -> Dict[str, Any]:
        """What a result records of the sweep it belongs to."""
        return {"name": self.name, "file": self.file, "reduced": self.reduced,
                "group": run.group, "run_key": run.key}  # fmt: skip


def run_key(config: RunConfig) -> str:
    """A hash of the settings that differ from their defaults, and the repeat index:
    the keys of finished runs stay valid when a later kbench adds a setting."""
    defaults = _key_defaults()
    data = {
        k: v
        for k, v in config.to_dict().items()
        if k not in NOT_IN_KEY and (k in ("backend", "model") or v != defaults.get(k))
    }
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def _key_defaults() -> Dict[str, Any]:
    """Each setting's default, as ``RunConfig.to_dict`` writes it (tuples as lists)."""
    return {
        f.name: list(f.default) if isinstance(f.default, tuple) else f.default
        for f in fields(RunConfig)
    }


# reading YAML: shared with study files (kbench.studies.published); each check raises
# ``fail(where, message)``, the reader's own error naming the file --------------


def expect_mapping(
    value: Any, where: str, expected: str, fail, keys: Optional[Sequence[str]] = None
) -> Dict[str, Any]:
    """``value`` if it is a mapping, {} if absent; else ``fail`` saying ``expected``. With
    ``keys``, a key that is not one of them is refused, naming the closest one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(where, f"expected {expected}; received {type(value).__name__} {value!r}.")
    for key in value if keys is not None else ():
        if key not in keys:
            raise fail(
                f"{where}.{key}" if where else str(key),
                f"unknown key; expected one of: {', '.join(keys)}.{did_you_mean(str(key), keys)}",
            )
    return value


class NestedTooDeep(ValueError):
    """YAML nested deeper than a YAML reader follows (hundreds of levels or more)."""

    def __init__(self) -> None:
        super().__init__(
            "expected a few levels of mappings and lists; the YAML is nested too deep to "
            "read (hundreds of levels or more). Check the brackets."
        )


def read_yaml(text: str) -> Any:
    """The document in the YAML ``text``, read by libyaml where PyYAML was built with a
    libyaml that stops at a nesting limit (about five times faster than PyYAML's own
    reader, which took most of the time to plan a study's sweep). A document that does
    not parse is read again by PyYAML's own reader, whose error quotes the line with a
    caret under the fault. libyaml accepts some tabs PyYAML's own reader refuses (``a:\t1``);
    a document both accept means the same to both. Raises ``yaml.YAMLError``, or
    :class:`NestedTooDeep`."""
    import yaml

    fast = _bounded(getattr(yaml, "CSafeLoader", None))
    if fast is not None:
        try:
            return yaml.load(text, Loader=fast)
        except yaml.YAMLError as err:
            if "nesting" in str(err):
                raise NestedTooDeep() from None
            # else read again below, for the message
        except RecursionError:  # building it: a chain of ``<<:`` merges, ~1,000 deep
            raise NestedTooDeep() from None
    try:
        return yaml.load(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise NestedTooDeep() from None


@functools.cache
def _bounded(libyaml_loader: Any) -> Any:
    """PyYAML's libyaml loader if it refuses YAML nested past a limit (libyaml 0.2.6
    stops at 1,000 levels), else None: an older libyaml follows any depth, and PyYAML's
    C code under it recurses without a guard, so a file of 100,000 brackets would crash
    the process instead of being refused."""
    import yaml

    if libyaml_loader is None:
        return None
    try:
        yaml.load("[" * 1100 + "]" * 1100, Loader=libyaml_loader)
    except yaml.YAMLError as err:
        return libyaml_loader if "nesting" in str(err) else None
    return None


MAX_DEPTH = 32  # far deeper than any sweep or study; YAML nested past it is refused
MAX_NODES = 100_000  # values once every YAML alias is expanded; a sweep has hundreds


def check_depth(document: Any, fail, limit: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> None:
    """Refuse a document nested deeper than ``limit``, or of more than ``max_nodes`` values
    once its aliases are expanded (a 500-byte YAML of aliases to aliases names 10^9). Read
    without recursion, and each list or mapping once however many aliases name it (its
    values and levels kept by id), so that a file of 100,000 nested lists or such a bomb
    is an error that names the place, not a crash or a hang."""
    known: Dict[int, Tuple[int, int]] = {}  # id -> (values, levels) of one read whole
    stack = [(document, 1, "", False)]
    while stack:
        value, depth, where, read = stack.pop()
        values, levels = known.get(id(value), (0, 0))
        if depth + levels > limit:
            raise fail(
                where,
                f"expected settings nested at most {limit} deep; this file nests deeper "
                "here. A study or sweep file is a few levels of mappings and lists: check "
                "the brackets.",
            )
        if not isinstance(value, (dict, list)) or values:
            continue
        items = value.items() if isinstance(value, dict) else enumerate(value)
        if read:  # its children are read: count it
            inner = [known.get(id(v), (1, 0)) for _, v in items]
            values = 1 + sum(n for n, _ in inner)
            known[id(value)] = (values, 1 + max((h for _, h in inner), default=-1))
            if values > max_nodes:
                raise fail(
                    where,
                    f"expected at most {max_nodes:,} values once YAML's aliases (*name) are "
                    "expanded; this file names more here. Write the values out, or repeat "
                    "an alias fewer times.",
                )
            continue
        stack.append((value, depth, where, True))
        if isinstance(value, dict):
            stack += [(v, depth + 1, f"{where}.{k}" if where else str(k), False) for k, v in items]
        else:
            stack += [(v, depth + 1, f"{where}[{i}]", False) for i, v in items]


# loading ---------------------------------------------------------------------


def load_sweep(path: Path, reduced: bool = False, max_runs: int = MAX_RUNS) -> Sweep:
    """Read and check a sweep file; every run is built (and so validated) here."""
    document = read_yaml_file(Path(path), SweepError)
    return parse_sweep(document, str(path), reduced, max_runs, base_dir=Path(path).resolve().parent)


def read_yaml_file(path: Path, error: Callable[[str, str, str], Exception]) -> Any:
    """The document in the YAML file at ``path`` (:func:`read_yaml`); ``error(file, where,
    message)`` where it cannot be read, is not UTF-8, does not parse or nests too deep."""
    import yaml

    file = str(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise error(file, "", f"expected a readable YAML file; {err.strerror or err}.") from err
    except UnicodeDecodeError as err:
        line = err.object[: err.start].count(b"\n") + 1
        raise error(
            file,
            f"line {line}",
            f"expected UTF-8 text; received the byte 0x{err.object[err.start]:02x} at byte "
            f"{err.start}, which is not UTF-8. Save the file as UTF-8 (e.g. iconv -f latin1 "
            "-t utf-8).",
        ) from None
    try:
        return read_yaml(text)
    except yaml.YAMLError as err:
        raise error(file, "", f"expected YAML; it does not parse: {err}") from err
    except NestedTooDeep as err:
        raise error(file, "", str(err)) from None


def relative_to_file(values: Dict[str, Any], base_dir: Optional[Path]) -> Dict[str, Any]:
    """A user model (``model.py:build``, ``model.keras``) or data (``npz:data.npz``,
    ``folder:images``) named by a relative path in a sweep file is found beside the
    file, wherever kbench is started from."""
    if base_dir is None:
        return values
    values = dict(values)
    model = values.get("model")
    if isinstance(model, str) and is_reference(model):
        where, sep, function = model.rpartition(":")
        where, function = (where, sep + function) if sep and where else (model, "")
        is_file = where.endswith((".py", ".keras")) or "/" in where
        if is_file and not os.path.isabs(where):
            values["model"] = str(base_dir / where) + function
    dataset = values.get("dataset")
    for prefix in (NPZ_PREFIX, FOLDER_PREFIX):
        if isinstance(dataset, str) and dataset.startswith(prefix):
            where = dataset[len(prefix) :]
            if not os.path.isabs(where):
                values["dataset"] = prefix + str(base_dir / where)
    return values


def parse_sweep(
    document: Any,
    file: str,
    reduced: bool = False,
    max_runs: int = MAX_RUNS,
    base_dir: Optional[Path] = None,
) -> Sweep:
    """A sweep file's document (parsed YAML) checked and turned into its runs; every
    error names the place in ``file``. ``base_dir``: where relative paths in it start."""

    def fail(where: str, message: str) -> SweepError:
        return SweepError(file, where, message)

    check_depth(document, fail)
    top = expect_mapping(document, "", "a mapping with name, settings, matrix", fail, TOP_KEYS)
    name = top.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise fail(
            "name",
            "expected a name of letters, digits, '-', '_' or '.' (it names the output "
            f"directory); received {name!r}.",
        )
    top_reduced = _reduced_section(top.get("reduced"), "reduced", fail)
    repeats = _repeats(top, top_reduced, reduced, fail)
    layers, places = _layers(top, top_reduced, reduced, fail)
    _check_size(layers, places, repeats, max_runs, fail)
    twice_where = "groups" if top.get("groups") else "matrix"
    runs = _runs(layers, places, repeats, twice_where, base_dir, fail)
    measure, settings = window_settings(top, fail)
    warm = _warm(top, top_reduced, reduced, fail)
    about = str(top.get("description") or "")
    return Sweep(name, about, file, reduced, runs, measure, settings, warm=warm)


def _warm(top: Dict[str, Any], top_reduced: Dict[str, Any], reduced: bool, fail) -> bool:
    """Whether the file's fresh-process runs share warm workers (its reduced section's
    ``warm``, with ``reduced``)."""
    warm, where = top.get("warm", False), "warm"
    if reduced and "warm" in top_reduced:
        warm, where = top_reduced["warm"], "reduced.warm"
    if not isinstance(warm, bool):
        raise fail(where, f"expected true or false; received {warm!r}.")
    return warm


def _repeats(top: Dict[str, Any], top_reduced: Dict[str, Any], reduced: bool, fail) -> int:
    """The rounds the file declares (its reduced section's, with ``reduced``)."""
    repeats, where = top.get("repeats", 1), "repeats"
    if reduced and "repeats" in top_reduced:
        repeats, where = top_reduced["repeats"], "reduced.repeats"
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise fail(where, f"expected a positive integer; received {repeats!r}.")
    return repeats


def _layers(
    top: Dict[str, Any], top_reduced: Dict[str, Any], reduced: bool, fail
) -> Tuple[List[Tuple[str, Layer]], List[str]]:
    """Each group's (name, layer) and its place in the file (``groups[1].``; one layer at
    "" without groups). Later layers win: the file's, the group's, then (with
    ``reduced``) the file's reduced section and the group's."""
    base = Layer.of(top, "", fail)
    base_reduced = Layer.of(top_reduced, "reduced.", fail)
    groups = top.get("groups")
    if groups is None:
        return [("", base.over(base_reduced) if reduced else base)], [""]
    if not isinstance(groups, list) or not groups:
        raise fail("groups", f"expected a non-empty list of groups; received {groups!r}.")
    layers, places = [], []
    for i, group in enumerate(groups):
        where = f"groups[{i}]"
        group = expect_mapping(
            group, where, "a mapping with settings and/or matrix", fail, GROUP_KEYS
        )
        layer = base.over(Layer.of(group, where + ".", fail))
        section = _reduced_section(group.get("reduced"), where + ".reduced", fail)
        for key in ("repeats", "warm"):
            if key in section:
                raise fail(f"{where}.reduced.{key}", f"{key} is set for the whole file only.")
        if reduced:
            layer = layer.over(base_reduced).over(Layer.of(section, where + ".reduced.", fail))
        layers.append((str(group.get("name", where)), layer))
        places.append(where + ".")
    return layers, places


def _runs(
    layers: Sequence[Tuple[str, Layer]], places: Sequence[str], repeats: int, twice_where: str,
    base_dir: Optional[Path], fail,
) -> List[SweepRun]:  # fmt: skip
    """Every run of the layers, round by round, each built (so checked) and declared
    once (``twice_where``: where a run declared twice is said to be)."""
    runs: List[SweepRun] = []
    declared: Dict[str, str] = {}  # run key -> where in the file the run is declared
    for repeat in range(repeats):
        for (group_name, layer), place in zip(layers, places):
            for values, origins in layer.combinations():
                config = _config(values, origins, layer, place, repeat, base_dir, fail)
                key = run_key(config)
                here = ", ".join(origins[k] for k in layer.swept()) or f"{place}settings"
                if key in declared:
                    raise fail(
                        twice_where,
                        f"expected every run once; the run {config.label()} is declared "
                        f"twice: by {declared[key]} and by {here}. Drop one (to run a run "
                        "again, use repeats).",
                    )
                declared[key] = here
                runs.append(SweepRun(config, key, group_name))
    return runs


def _config(
    values: Dict[str, Any], origins: Dict[str, str], layer: Layer, place: str, repeat: int,
    base_dir: Optional[Path], fail,
) -> RunConfig:  # fmt: skip
    """One run's config; an error names the place in the file of the setting it is
    about (a check across settings: the run, by its swept settings)."""
    missing = [name for name in REQUIRED if name not in values]
    if missing:
        raise fail(f"{place}settings", _missing_message(missing[0], place))
    try:
        config = RunConfig.from_dict(dict(relative_to_file(values, base_dir), repeat=repeat))
    except ConfigError as err:
        where = origins.get(err.setting, "settings")
        if err.setting not in origins:  # a check across settings
            where = f"a run with {_describe(values, layer.swept())}"
        raise fail(where, f"{err.setting}: {err.message}") from None
    if config.window_s is not None:
        raise fail(
            origins.get("window_s", "settings"),
            "window_s: a sweep asks for warm interleaved windows at the top of "
            "the file (measure: windows, and window: SECONDS for their length), "
            "or with kbench sweep --windows; received window_s as a run setting. "
            "Drop window_s here.",
        )
    return config


def window_settings(top: Dict[str, Any], fail) -> Tuple[str, WindowSettings]:
    """The file's ``measure`` and its windows' settings. ``window``, ``ratio_precision``
    and ``ratio_budget`` may stand without ``measure: windows``: they apply when
    ``kbench sweep --windows`` asks for windows."""
    measure = top.get("measure", "fresh")
    if measure not in MEASURES:
        raise fail(
            "measure",
            f"expected one of {', '.join(MEASURES)} (fresh: each run a fresh process, "
            f"repeats times; windows: each setting's backends in warm interleaved windows); "
            f"received {measure!r}.{did_you_mean(str(measure), MEASURES)}",
        )
    values = {}
    for key, name, low, high in (("window", "window_s", 0.0, 3600.0),
                                 ("ratio_precision", "ratio_precision", 0.0, 1.0),
                                 ("ratio_budget", "ratio_budget_s", 0.0, 86400.0)):  # fmt: skip
        if key not in top:
            continue
        value = top[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < high:
            raise fail(
                key,
                f"expected a number above {low:g} and below {high:g}; received {value!r}.",
            )
        values[name] = float(value)
    return measure, WindowSettings(**values)


def setting_of(config: RunConfig) -> str:
    """What a comparison in windows shares: every setting but the backend and the repeat."""
    data = {k: v for k, v in config.to_dict().items() if k not in ("backend", "repeat", "window_s")}
    return json.dumps(data, sort_keys=True)


def comparisons(runs: Sequence[SweepRun]) -> List[List[SweepRun]]:
    """``runs`` grouped by setting (:func:`setting_of`), in the order they first appear,
    each group's runs in their order (every backend and repeat of one setting)."""
    groups: Dict[str, List[SweepRun]] = {}
    for run in runs:
        groups.setdefault(setting_of(run.config), []).append(run)
    return list(groups.values())


def windowed(runs: Sequence[SweepRun]) -> bool:
    return runs[0].config.window_s is not None


def comparisons_of(runs: Sequence[SweepRun]) -> List[List[SweepRun]]:
    """The comparisons of ``runs`` measured in windows, in order."""
    return [group for group in comparisons(runs) if windowed(group)]


def fresh_reason(configs: Sequence[RunConfig]) -> Optional[str]:
    """Why these runs of one setting are measured in fresh processes, not in warm
    windows, as the one rule says (:func:`kbench.studies.rounds.how_to_measure`, the
    settings named as the file names them); None where windows can compare them."""
    measure = how_to_measure(
        [c.backend for c in configs], configs[0].to_dict(), spell=lambda name: name
    )
    return None if measure.windows else measure.why


def in_windows(sweep: Sweep, settings: WindowSettings) -> Sweep:
    """``sweep`` with each setting's runs turned into one comparison in warm windows: its
    first repeat's runs with ``window_s`` (new keys; the window rounds take the place of
    ``repeats``). The settings :func:`fresh_reason` keeps in fresh processes are left as
    they are."""
    runs: List[SweepRun] = []
    for group in comparisons(sweep.runs):
        if fresh_reason([run.config for run in group]) is not None:
            runs += group
            continue
        for run in group:
            if run.config.repeat == 0:
                config = replace(run.config, window_s=settings.window_s)
                runs.append(SweepRun(config, run_key(config), run.group))
    return replace(sweep, runs=runs, windows=settings)


def sweep_run_of(result: RunResult) -> Optional[str]:
    """The key of the sweep run ``result`` belongs to: its ``sweep.run_key``, or for a
    window of a comparison, the key of its worker's run (each window has its own key,
    that of its round)."""
    sweep = result.sweep or {}
    return (sweep.get("windows") or {}).get("run_key") or sweep.get("run_key")


def _check_size(layers, places: Sequence[str], repeats: int, max_runs: int, fail) -> None:
    """Refuse a sweep of more than ``max_runs`` runs before building any of them."""
    sizes = [math.prod(len(v) for v in layer.matrix.values()) for _, layer in layers]
    total = repeats * sum(sizes)
    if total <= max_runs:
        return
    parts = []
    for (_, layer), place, size in zip(layers, places, sizes):
        lists = " x ".join(f"{len(v)} {k}" for k, v in layer.matrix.items()) or "1"
        parts.append(f"{place}matrix: {lists} = {size:,}")
    repeated = f" x {repeats} repeats" if repeats > 1 else ""
    raise fail(
        "matrix" if len(layers) == 1 else "groups",
        f"expected at most {max_runs:,} runs; the file declares {total:,} "
        f"({'; '.join(parts)}{repeated}). Shorten the matrix lists, or raise the limit "
        f"with --max-runs {total}.",
    )


def _missing_message(name: str, place: str) -> str:
    choices = ", ".join(BACKENDS if name == "backend" else MODELS)
    return (
        f"{name}: expected every run to have a {name}; received none. Add it under "
        f"{place}settings ({name}: NAME) or {place}matrix ({name}: [NAME, NAME]); one of: "
        f"{choices}."
    )


@dataclass(frozen=True)
class Layer:
    """Settings and matrix lists, with where in the file each came from."""

    settings: Dict[str, Any] = field(default_factory=dict)
    matrix: Dict[str, List[Any]] = field(default_factory=dict)
    origins: Dict[str, str] = field(default_factory=dict)  # setting -> place in the file

    @classmethod
    def of(cls, section: Dict[str, Any], prefix: str, fail) -> Layer:
        settings = expect_mapping(
            section.get("settings", {}), prefix + "settings", "a mapping", fail
        )
        matrix = expect_mapping(section.get("matrix", {}), prefix + "matrix", "a mapping", fail)
        origins = {}
        for kind, values in (("settings", settings), ("matrix", matrix)):
            for key in values:
                _known_setting(key, f"{prefix}{kind}", fail)
                origins[key] = f"{prefix}{kind}.{key}"
        for key, values in matrix.items():
            if not isinstance(values, list) or not values:
                raise fail(
                    f"{prefix}matrix.{key}",
                    f"expected a non-empty list of values to sweep; received {values!r}. "
                    f"A single value belongs under {prefix}settings.",
                )
        both = sorted(set(settings) & set(matrix))
        if both:
            raise fail(
                f"{prefix}settings.{both[0]}",
                f"expected {both[0]} under settings or matrix, not both.",
            )
        return cls(dict(settings), dict(matrix), origins)

    def over(self, other: Layer) -> Layer:
        """``other`` on top of this layer: a key it sets replaces this layer's."""
        settings = {k: v for k, v in self.settings.items() if k not in other.matrix}
        matrix = {k: v for k, v in self.matrix.items() if k not in other.settings}
        settings.update(other.settings)
        matrix.update(other.matrix)
        return Layer(settings, matrix, {**self.origins, **other.origins})

    def swept(self) -> List[str]:
        return list(self.matrix)

    def combinations(self):
        """(settings of one run, origins), the backend varying fastest."""
        keys = sorted(self.matrix, key=lambda k: k == "backend")  # stable: the others in order
        for combo in itertools.product(*(enumerate(self.matrix[k]) for k in keys)):
            values = dict(self.settings)
            origins = dict(self.origins)
            for key, (index, value) in zip(keys, combo):
                values[key] = value
                origins[key] = f"{self.origins[key]}[{index}]"
            yield values, origins


def _known_setting(key: Any, where: str, fail) -> None:
    if key == "repeat":
        raise fail(f"{where}.repeat", "the repeat index is kbench's; use repeats at the top.")
    if key not in RUN_FIELDS:
        raise fail(
            f"{where}.{key}",
            f"unknown setting; expected a run setting: {', '.join(RUN_FIELDS)}."
            f"{did_you_mean(str(key), RUN_FIELDS)}",
        )


def _reduced_section(value: Any, where: str, fail) -> Dict[str, Any]:
    expected = "a mapping with settings, matrix, repeats and/or warm"
    return expect_mapping(value, where, expected, fail, REDUCED_KEYS)


def _describe(values: Dict[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(f"{k}={values[k]!r}" for k in keys if values.get(k) is not None)


# running ---------------------------------------------------------------------


@dataclass
class Progress:
    """Runs done, failures, elapsed time and an ETA, as one log line per run."""

    total: int
    skipped: int = 0
    done: int = 0
    failures: int = 0
    unsupported: int = 0  # modes this machine cannot run: not failures
    started: float = field(default_factory=time.monotonic)
    durations: List[float] = field(default_factory=list)
    write: Callable[[str], None] = log.info
    group_started: float = 0.0  # when the runs now running started

    def line(self, what: str) -> str:
        finished = self.skipped + self.done
        width = 20
        filled = round(width * finished / self.total) if self.total else width
        elapsed = time.monotonic() - self.started
        remaining = self.total - finished
        eta = "?"
        if self.durations:
            eta = _clock(remaining * sum(self.durations) / len(self.durations))
        elif remaining == 0:
            eta = "0s"
        skipped = f", {self.skipped} done before" if self.skipped else ""
        unsupported = f", {self.unsupported} unsupported here" if self.unsupported else ""
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] {finished}/{self.total}{skipped}, "
            f"{self.failures} failed{unsupported}, {_clock(elapsed)} elapsed, ETA {eta} | {what}"
        )

    def starting(self, configs: Sequence[RunConfig]) -> None:
        self.write(self.line(f"{', '.join(config.label() for config in configs)}: starting"))
        self.group_started = time.monotonic()

    def ended(self, configs: Sequence[RunConfig], results: Sequence[RunResult]) -> None:
        seconds = (time.monotonic() - self.group_started) / len(configs)
        for config, result in zip(configs, results):
            self.finished(result, seconds)
            status = "ok" if result.ok else f"{result.status.upper()}: {result.reason}"
            self.write(self.line(f"{config.label()}: {status}"))

    def finished(self, result: RunResult, seconds: float) -> None:
        self.done += 1
        self.durations.append(seconds)
        if result.failed:
            self.failures += 1
        elif not result.ok:
            self.unsupported += 1


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass(frozen=True)
class ToDo:
    """Which runs of a sweep run now and which are already in the store."""

    to_run: List[SweepRun]
    done: List[Tuple[SweepRun, str]]  # (run, status of its newest result)


def to_do(sweep: Sweep, done_keys: Dict[str, str], force: bool, retry_failed: bool) -> ToDo:
    """The runs without a result in ``done_keys`` (run key -> its newest result's status),
    and with ``force`` or ``retry_failed`` those done or not ok; a comparison in windows
    with a run to do runs whole (its backends are measured together or not at all)."""
    keys = set()
    for run in sweep.runs:
        status = done_keys.get(run.key)
        if status is None or force or (retry_failed and status != "ok"):
            keys.add(run.key)
    for group in comparisons_of(sweep.runs):
        if any(run.key in keys for run in group):
            keys |= {run.key for run in group}
    return ToDo(
        [run for run in sweep.runs if run.key in keys],
        [(run, done_keys[run.key]) for run in sweep.runs if run.key not in keys],
    )


def sweep_plan(sweep: Sweep, runs: Sequence[SweepRun], warm: bool = False) -> Plan:
    """``runs`` as the engine runs them (:func:`kbench.studies.rounds.run_plan`): round by
    round, each recorded with its sweep provenance; with ``warm``, each round's runs that
    can share a worker process share one (:func:`~kbench.run.runner.shared_workers`), the
    runs put in round order first (a sweep in windows lists them comparison by comparison)."""
    if warm:
        runs = sorted(runs, key=lambda run: run.config.repeat)
    by_round = itertools.groupby(runs, key=lambda run: run.config.repeat)
    configs = [[run.config for run in same_repeat] for _, same_repeat in by_round]
    measure = Measure(False, "--warm" if warm else "", "a sweep's runs, one process each")
    return Plan(configs, measure, warm=warm, provenance=tuple(sweep.provenance(r) for r in runs))


def worker_groups(runs: Sequence[SweepRun]) -> List[List[SweepRun]]:
    """The runs of each repeat, in turn, grouped by the worker they can share."""
    groups: List[List[SweepRun]] = []
    for _, same_repeat in itertools.groupby(runs, key=lambda run: run.config.repeat):
        round_runs = list(same_repeat)
        groups += [
            [round_runs[i] for i in indexes]
            for indexes in shared_workers([run.config for run in round_runs])
        ]
    return groups
