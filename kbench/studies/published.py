"""A published study as data: its figures as the document gives them, and its claims as
checks kbench can evaluate on result documents.

One YAML file per study (``studies/<name>.yaml``), read by
:func:`~kbench.studies.sweep.read_yaml` and checked whole on loading; an error names the
file, the place (``claims[3].numerator``), what was expected, what was received and the
fix. A file holds ``name``, ``title``, ``document`` (the study's file name), ``source``,
the paper's ``hardware`` and framework ``versions`` (name -> text, as published), and:

- ``sweep``: the sweep file that runs the study (relative to the folder above
  ``studies/``); ``reduced``: ``only`` (setting -> values, narrowing the reduced runs as
  ``kbench sweep --filter`` does) with a ``note`` saying how that changes the question;
- ``figures``: each with an ``id``, its ``value`` (null where none is printed, e.g. "Out
  of Memory"), ``as_published`` (the text as printed), ``units`` as published,
  ``provenance`` (``table``, ``figure`` or ``section``, with ``row``, ``column`` or
  ``quote``), ``read_off_plot`` (then with its ``precision``) and ``at`` (its kbench
  settings, for plots);
- ``claims`` (:class:`Claim`) and ``plots`` (:class:`PaperPlot`);
- ``paper_settings``: entries of ``where`` (a selector of the sweep's runs, ``{}`` for
  all) and ``settings`` (setting -> the paper's value, or a list of its values; a
  list-valued setting as a list of lists); :func:`setting_drift` names each run whose
  setting differs where no deviation covers it;
- ``deviations`` (here and in a claim): how the sweep differs from the paper's setting,
  shown with every verdict: a sentence, or a mapping of ``text``, the ``settings`` and
  ``where`` (default all) it covers and its ``size`` (``full``, ``reduced`` or ``both``).

Nesting past :data:`~kbench.studies.sweep.MAX_DEPTH` is refused, as is a number that is
not finite or out of its range. Files are found in ``$KBENCH_STUDIES_DIR``, else
``studies/`` in the checkout this module runs from, else ``<prefix>/share/kbench/studies``
(where ``pip install .`` puts them, the sweeps in ``<prefix>/share/kbench/sweeps``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.facts import shared_folder
from kbench.results.config import FileError, did_you_mean
from kbench.studies.sweep import (
    check_depth,
    expect_mapping,
    read_yaml_file,
)

KINDS = ("ratio", "sign", "ordering", "efficiency_ordering", "no_single_best")
# a side's ``best_of`` (the fastest of several runs, round by round) reads a throughput
BEST_OF_METRICS = ("images_per_sec",)
REQUIREMENTS = {
    "gpu": "no GPU: the paper measured on one and these runs had none",
    "cpu": "on a GPU: the paper measured on the CPU and every run here used a GPU "
    "(run the sweep with device: cpu)",
    "real_data": "data not available offline: these runs trained on synthetic data",
}
DIRECTIONS = ("increasing", "decreasing")
EXPECTS = ("greater", "less")
PROVENANCE_PLACES = ("table", "figure", "section")
PROVENANCE_KEYS = PROVENANCE_PLACES + ("row", "column", "quote")
TOP_KEYS = ("name", "title", "document", "source", "hardware", "versions", "sweep",
            "reduced", "figures", "claims", "plots", "note", "deviations",
            "paper_settings")  # fmt: skip
SIZES = ("full", "reduced", "both")
DEVIATION_KEYS = ("text", "settings", "where", "size")
FIGURE_KEYS = ("id", "value", "as_published", "units", "provenance", "read_off_plot",
               "precision", "at", "note")  # fmt: skip
CLAIM_KEYS = ("id", "kind", "statement", "quote", "paper", "figures", "metric",
              "where", "numerator", "denominator", "items", "direction", "expect",
              "than", "expected", "tolerance", "for_each", "requires", "reduced",
              "reduced_where", "doubt", "instead", "note", "deviations", "only",
              "cited", "cannot_run")  # fmt: skip
PLOT_KEYS = ("title", "x", "metric", "where", "series", "figures")
# a side of a ratio may read another metric than the claim's, or be the best of several runs
SIDE_KEYS_EXTRA = ("metric", "best_of")
STUDIES_ENV = "KBENCH_STUDIES_DIR"


class StudyError(FileError):
    """A study file kbench cannot use; ``where`` is the place in the file."""


@dataclass(frozen=True)
class Provenance:
    table: Optional[str] = None
    figure: Optional[str] = None
    section: Optional[str] = None
    row: Optional[str] = None
    column: Optional[str] = None
    quote: Optional[str] = None

    def text(self) -> str:
        place = ", ".join(p for p in (self.table, self.figure, self.section) if p)
        labels = "; ".join(
            f"{k} {v!r}" for k, v in (("row", self.row), ("column", self.column)) if v
        )
        return place + (f" ({labels})" if labels else "")


@dataclass(frozen=True)
class PublishedFigure:
    id: str
    value: Optional[float]
    units: str
    provenance: Provenance
    as_published: Optional[str] = None
    read_off_plot: bool = False
    precision: Optional[float] = None
    at: Dict[str, Any] = field(default_factory=dict)
    note: Optional[str] = None

    def text(self) -> str:
        """The figure as printed, with its units: ``3571 img/sec``, ``~7800 img/s (+-100)``."""
        if self.as_published is None:
            text = f"{_number(self.value)} {self.units}"
        elif self.units.lower() in self.as_published.lower():
            text = self.as_published
        else:
            text = f"{self.as_published} [{self.units}]"
        if self.read_off_plot:
            text += f" (read off a plot, +-{_number(self.precision)})"
        return text


@dataclass(frozen=True)
class Claim:
    """One finding of the paper as a check on result documents.

    Runs are chosen by selectors of settings: ``where`` (common to every side) merged with
    a side's own; ``group`` selects a sweep group. Kinds: ``ratio`` (the median per-round
    ``metric`` of ``numerator`` over ``denominator`` within ``tolerance`` of ``paper``, or
    of ``expected`` where the paper prints no ratio); ``sign`` (that ratio above, ``expect:
    greater``, or below, ``less``, ``than``: default 1); ``ordering`` and
    ``efficiency_ordering`` (``metric``, ``scaling_efficiency`` for the latter, rising,
    ``direction: increasing``, or falling along ``items``, each adjacent pair compared by
    its per-round ratio).

    ``for_each: SETTING`` checks the claim once per value of that setting; ``only``
    (setting -> values) scopes it to the runs the paper drew it from (``only: {model:
    [alexnet, resnet18]}``: LeNet-5 runs are not judged). ``requires`` (``gpu``, ``cpu``,
    ``real_data``) and ``reduced`` (why the reduced size changes the question) make the
    verdict "not measurable here" where they do not hold (a side off the required device:
    inconclusive). ``doubt``: why the paper's own measurement is not trusted, ``instead``:
    what kbench checks in its place. ``cited``: the work whose finding it is, where not the
    study's own (the verdict says so).

    A side of a ``ratio`` or ``sign`` may be ``best_of: [selector, ...]``: in each round the
    highest ``images_per_sec`` of those runs (the fastest of several backends, as a table's
    "best" column; the maximum of noisy rounds leans a little high). ``no_single_best``:
    no one of ``items`` is the fastest at every value of ``for_each`` (each item is beaten
    by the best of the others, per round, at some value; it does not hold where one item is
    at least as fast as the best of the others at every value). ``cannot_run``: why kbench
    cannot run the claim's comparison at all (a framework it has no backend for, a
    qualitative finding): the verdict is "not measurable here" with that reason, at any
    size, and no selector is checked against the sweep.
    """

    id: str
    kind: str
    statement: str
    quote: str
    metric: str
    paper: Optional[float] = None
    figures: Tuple[str, ...] = ()
    where: Dict[str, Any] = field(default_factory=dict)
    numerator: Dict[str, Any] = field(default_factory=dict)
    denominator: Dict[str, Any] = field(default_factory=dict)
    items: Tuple[Dict[str, Any], ...] = ()
    direction: str = "increasing"
    expect: str = "greater"
    than: float = 1.0
    expected: Optional[float] = None
    tolerance: Optional[float] = None
    for_each: Optional[str] = None
    requires: Tuple[str, ...] = ()
    reduced: Optional[str] = None
    reduced_where: Dict[str, Any] = field(default_factory=dict)
    doubt: Optional[str] = None
    instead: Optional[str] = None
    note: Optional[str] = None
    deviations: Tuple[str, ...] = ()  # how its runs differ from the paper's, beyond the study's
    only: Dict[str, Tuple[Any, ...]] = field(default_factory=dict)  # setting -> values judged
    cited: Optional[str] = None  # the work whose finding this is, where not the study's own
    cannot_run: Optional[str] = None  # why kbench cannot run its comparison at all

    @property
    def target(self) -> Optional[float]:
        """The ratio a ``ratio`` claim is checked against."""
        return self.paper if self.paper is not None else self.expected

    def specs(self) -> List[Dict[str, Any]]:
        """The sides as the file gives them: the items, or numerator and denominator."""
        if self.cannot_run:
            return []
        return list(self.items) if self.items else [self.numerator, self.denominator]

    def side_selectors(self, reduced: bool = False) -> List[List[Dict[str, Any]]]:
        """Per side, the full selectors of its runs (``where`` merged in): one, or a
        ``best_of`` side's candidates."""
        where = {**self.where, **(self.reduced_where if reduced else {})}
        found = []
        for side in self.specs():
            own = {k: v for k, v in side.items() if k not in SIDE_KEYS_EXTRA}
            found.append([{**where, **own, **c} for c in side.get("best_of") or [{}]])
        return found

    def selectors(self, reduced: bool = False) -> List[Dict[str, Any]]:
        """Every run selector of every side (``where`` merged in), in the claim's order."""
        return [s for side in self.side_selectors(reduced) for s in side]

    def side_metric(self, side: Dict[str, Any]) -> str:
        return side.get("metric", self.metric)


@dataclass(frozen=True)
class PaperPlot:
    """The paper's figures beside this machine's, where the axes match: ``x`` a setting,
    one line per ``series`` value (default: backend), ``metric`` over the runs ``where``
    selects; each figure listed carries ``at`` (its series and x values)."""

    title: str
    x: str
    metric: str
    figures: Tuple[str, ...]
    where: Dict[str, Any] = field(default_factory=dict)
    series: str = "backend"


@dataclass(frozen=True)
class Deviation:
    """One way the sweep differs from the paper: its sentence, and where it names them,
    the settings and runs it covers and at which size (``full``, ``reduced``, ``both``)."""

    text: str
    settings: Tuple[str, ...] = ()
    where: Dict[str, Any] = field(default_factory=dict)
    size: str = "both"

    def covers(self, key: str, run: Any, reduced: bool) -> bool:
        if key not in self.settings or self.size == ("full" if reduced else "reduced"):
            return False
        return run_matches(run, self.where)


@dataclass(frozen=True)
class PaperSetting:
    """The paper's settings for the runs ``where`` selects: setting -> value, or a list
    of the values it used."""

    where: Dict[str, Any]
    settings: Dict[str, Any]


@dataclass(frozen=True)
class Drift:
    """A run whose setting differs from the paper's, with no deviation naming it."""

    run: str
    setting: str
    have: Any
    paper: Any

    def text(self) -> str:
        return (
            f"{self.run}: {self.setting}={self.have!r} where the paper has {self.paper!r}; "
            "set the paper's value in the sweep, or name the difference under deviations "
            "(text, settings, where, size)"
        )


def plain_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [plain_value(v) for v in value]
    return value


def setting_of(run: Any, key: str) -> Any:
    """The setting ``key`` (``group``: its sweep group), as plain JSON, of a sweep run
    (``config``, ``group``) or a result (``config`` a dict, ``sweep``)."""
    if hasattr(run, "group"):
        return plain_value(run.group if key == "group" else getattr(run.config, key, None))
    return plain_value((run.sweep or {}).get("group") if key == "group" else run.config.get(key))


def run_matches(run: Any, selector: Dict[str, Any]) -> bool:
    """A sweep run or a result has every setting of ``selector`` (a claim's, a plot's, a
    paper setting's ``where``)."""
    return all(setting_of(run, k) == plain_value(v) for k, v in selector.items())


def in_scope(run: Any, only: Dict[str, Sequence[Any]]) -> bool:
    """A sweep run's or a result's settings are among ``only``'s values (a claim's scope,
    the reduced runs a study keeps)."""
    return all(setting_of(run, k) in [plain_value(v) for v in vs] for k, vs in only.items())


def setting_drift(study: Study, runs: Any, reduced: bool) -> List[Drift]:
    """Every (run, setting) of ``runs`` (a sweep's, full size or reduced) that differs from
    the study's ``paper_settings`` and that no deviation of that size covers."""
    found: List[Drift] = []
    for run in runs:
        for paper in study.paper_settings:
            if not run_matches(run, paper.where):
                continue
            for key, want in paper.settings.items():
                if in_scope(run, {key: want if isinstance(want, list) else [want]}):
                    continue
                have = setting_of(run, key)
                if any(d.covers(key, run, reduced) for d in study.deviation_rules):
                    continue
                found.append(Drift(f"{run.group}: {run.config.label()}", key, have, want))
    return found


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    document: str
    source: str
    hardware: Dict[str, str]
    versions: Dict[str, str]
    sweep: str
    figures: Dict[str, PublishedFigure]
    claims: List[Claim]
    file: str
    plots: List[PaperPlot] = field(default_factory=list)
    reduced_only: Dict[str, List[Any]] = field(default_factory=dict)
    reduced_note: Optional[str] = None
    note: Optional[str] = None
    deviations: Tuple[str, ...] = ()  # how the full sweep differs from the paper's setting
    reduced_deviations: Tuple[str, ...] = ()  # how the reduced sweep differs, on top
    deviation_rules: Tuple[Deviation, ...] = ()  # the deviations that name settings
    paper_settings: Tuple[PaperSetting, ...] = ()

    def deviations_for(self, reduced: bool) -> List[str]:
        """The deviations shown with a verdict on the full (or reduced) sweep's runs."""
        return list(self.deviations) + (list(self.reduced_deviations) if reduced else [])

    def sweep_path(self) -> Path:
        """The sweep file, relative to the folder above the study's ``studies/``."""
        return Path(self.file).resolve().parent.parent / self.sweep

    def hardware_text(self) -> str:
        return "; ".join(f"{k}: {v}" for k, v in self.hardware.items())

    def versions_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.versions.items())


# finding -------------------------------------------------------------------------


def studies_dirs() -> List[Path]:
    """Where study files are looked for, in order (see the module docstring)."""
    chosen = [Path(os.environ[STUDIES_ENV])] if os.environ.get(STUDIES_ENV) else []
    return chosen + [shared_folder("studies")]


def studies_dir() -> Path:
    for place in studies_dirs():
        if place.is_dir() and any(place.glob("*.yaml")):
            return place
    tried = ", ".join(str(p) for p in studies_dirs())
    raise StudyError(
        "studies",
        "",
        f"expected a folder of study files (*.yaml); found none in {tried}. Run kbench from "
        f"its checkout, install it with pip (which copies studies/ to share/kbench), or set "
        f"{STUDIES_ENV}=DIR.",
    )


def study_files() -> List[Path]:
    return sorted(studies_dir().glob("*.yaml"))


def find_study(name: str) -> Path:
    """A study by name (``keras-mxnet-laptop``) or by the path of its file."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    names = {f.stem: f for f in study_files()}
    if name in names:
        return names[name]
    hint = did_you_mean(name, names)
    raise StudyError(
        "study",
        "",
        f"expected one of the studies {', '.join(names)} (kbench reproduce --list shows "
        f"them) or a study file's path; received {name!r}.{hint}",
    )


def study_of_sweep(sweep_name: str) -> Optional[Study]:
    """The study whose sweep file declares ``name: sweep_name``, if any; a study file
    that does not load is skipped here (``kbench reproduce --list`` names its error)."""
    try:
        files = study_files()
    except StudyError:
        return None
    for path in files:
        try:
            study = load_study(path)
            sweep_doc = read_yaml_file(study.sweep_path(), StudyError)
        except StudyError:
            continue
        if isinstance(sweep_doc, dict) and sweep_doc.get("name") == sweep_name:
            return study
    return None


# loading -------------------------------------------------------------------------


def load_study(path: Path) -> Study:
    return parse_study(read_yaml_file(Path(path), StudyError), str(path))


def parse_study(document: Any, file: str) -> Study:
    def fail(where: str, message: str) -> StudyError:
        return StudyError(file, where, message)

    check_depth(document, fail)
    expected = "a mapping with name, document, sweep, figures, claims"
    top = expect_mapping(document, "", expected, fail, TOP_KEYS)
    for key in ("name", "title", "document", "source", "sweep"):
        _text(top.get(key), key, fail)
    reduced = _mapping(top, "reduced", "", fail, "a mapping with only and note", ("only", "note"))
    only = _only(reduced.get("only"), "reduced.only", fail)
    if only and not reduced.get("note"):
        raise fail(
            "reduced.note",
            "expected a sentence saying how narrowing the runs changes "
            "the question; received none.",
        )

    raw = enumerate(_list(top.get("figures"), "figures", fail))
    figures = _by_id([_figure(item, f"figures[{i}]", fail) for i, item in raw], "figures", fail)
    raw = enumerate(_list(top.get("claims"), "claims", fail))
    claims = [_claim(item, f"claims[{i}]", figures, fail) for i, item in raw]
    _by_id(claims, "claims", fail)
    plots = [
        _plot(raw, f"plots[{i}]", figures, fail)
        for i, raw in enumerate(_optional_list(top.get("plots"), "plots", "plots", fail))
    ]
    return Study(
        name=top["name"], title=top["title"], document=top["document"], source=top["source"],
        hardware=_text_mapping(top.get("hardware"), "hardware", fail),
        versions=_text_mapping(top.get("versions"), "versions", fail),
        sweep=top["sweep"], figures=figures, claims=claims, file=file, plots=plots,
        reduced_only={k: list(v) for k, v in only.items()}, reduced_note=reduced.get("note"),
        note=top.get("note"),
        **_study_deviations(top, fail),
    )  # fmt: skip


def _by_id(items: Sequence[Any], where: str, fail) -> Dict[str, Any]:
    """``items`` (figures, claims) by id; an id used twice refused, naming the second."""
    found: Dict[str, Any] = {}
    for i, item in enumerate(items):
        if item.id in found:
            raise fail(f"{where}[{i}].id", f"expected unique ids; {item.id!r} is used twice.")
        found[item.id] = item
    return found


def _figure(raw: Any, where: str, fail) -> PublishedFigure:
    expected = "a mapping with id, value, units, provenance"
    data = expect_mapping(raw, where, expected, fail, FIGURE_KEYS)
    _text(data.get("id"), where + ".id", fail)
    _text(
        data.get("units"), where + ".units", fail, "the units exactly as published (img/sec, s, %)"
    )
    value = data.get("value")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise fail(
            f"{where}.value",
            f"expected a number or null; received {value!r}. Put text "
            "as printed under as_published.",
        )
    if value is None and not data.get("as_published"):
        raise fail(
            f"{where}.as_published",
            "expected the text as printed where value is null "
            "(e.g. 'Out of Memory'); received none.",
        )
    read_off = data.get("read_off_plot", False)
    if not isinstance(read_off, bool):
        raise fail(f"{where}.read_off_plot", f"expected true or false; received {read_off!r}.")
    precision = data.get("precision")
    if read_off and not isinstance(precision, (int, float)):
        raise fail(
            f"{where}.precision",
            "expected the precision a plot reading allows (a "
            f"number in the figure's units) with read_off_plot: true; received {precision!r}.",
        )
    provenance = _mapping(data, "provenance", where, fail, keys=PROVENANCE_KEYS)
    if not any(provenance.get(k) for k in PROVENANCE_PLACES):
        raise fail(
            f"{where}.provenance",
            "expected the place in the document: table, figure "
            f"or section (with row, column or quote); received {provenance!r}.",
        )
    printed = data.get("as_published")
    return PublishedFigure(
        id=data["id"], value=value, units=data["units"], read_off_plot=read_off,
        provenance=Provenance(**{k: str(v) for k, v in provenance.items()}),
        as_published=None if printed is None else str(printed), precision=precision,
        at=_mapping(data, "at", where, fail, "a mapping of kbench settings"),
        note=data.get("note"),
    )  # fmt: skip


def _claim(raw: Any, where: str, figures: Dict[str, PublishedFigure], fail) -> Claim:
    data = expect_mapping(raw, where, "a mapping with id, kind, quote, metric", fail, CLAIM_KEYS)
    for key in ("id", "statement", "quote"):
        _text(data.get(key), f"{where}.{key}", fail)
    kind = _one_of(data.get("kind"), KINDS, f"{where}.kind", fail)
    if data.get("cannot_run") is not None:
        return _unrunnable_claim(data, kind, where, figures, fail)
    metric = _claim_metric(data, kind, where, fail)
    for key in ("paper", "expected", "tolerance", "than"):
        _positive(data.get(key), f"{where}.{key}", fail)
    named = _claim_figures(data, where, figures, fail)
    where_ = _mapping(data, "where", where, fail, "a mapping of settings")
    reduced_where = _mapping(data, "reduced_where", where, fail)
    numerator = _mapping(data, "numerator", where, fail)
    denominator = _mapping(data, "denominator", where, fail)
    items: List[Dict[str, Any]] = []
    if kind in ("ratio", "sign"):
        _check_ratio_sides(data, kind, numerator, denominator, where, fail)
        for name, side in (("numerator", numerator), ("denominator", denominator)):
            _check_best_of(side, metric, f"{where}.{name}", fail)
    else:
        items = _ordering_items(data.get("items") or [], where, fail)
    if kind == "no_single_best":
        _check_no_single_best(data, metric, where, fail)
    requires = _claim_choices(data, where, fail)
    if data.get("cited") is not None:
        _text(data["cited"], where + ".cited", fail)
    as_given = ("id", "statement", "quote", "paper", "direction", "expect", "expected", "tolerance",
                "for_each", "reduced", "doubt", "instead", "note", "cited")  # fmt: skip
    return Claim(
        kind=kind, metric=metric, figures=tuple(named), where=where_, numerator=numerator,
        denominator=denominator, items=tuple(items), than=float(data.get("than", 1.0)),
        requires=requires, reduced_where=reduced_where,
        deviations=_deviations(data.get("deviations"), where + ".deviations", fail),
        only=_only(data.get("only"), where + ".only", fail),
        **{k: data[k] for k in as_given if k in data},
    )  # fmt: skip


def _unrunnable_claim(
    data: Dict[str, Any], kind: str, where: str, figures: Dict[str, PublishedFigure], fail
) -> Claim:
    """A claim whose comparison kbench cannot run (``cannot_run``: why): its text, figures
    and kind; no selector or metric is needed, none is checked."""
    _text(data["cannot_run"], where + ".cannot_run", fail, "why kbench cannot run this comparison")
    _positive(data.get("paper"), f"{where}.paper", fail)
    as_given = ("id", "statement", "quote", "paper", "note", "cited", "cannot_run")
    return Claim(
        kind=kind, metric=str(data.get("metric") or ""), figures=tuple(_claim_figures(
            data, where, figures, fail)),
        requires=_claim_choices(data, where, fail),
        **{k: data[k] for k in as_given if k in data},
    )  # fmt: skip


def _check_best_of(side: Dict[str, Any], metric: str, where: str, fail) -> None:
    """A side's ``best_of``: absent, or two or more selectors, on a throughput."""
    if "best_of" not in side:
        return
    candidates = side["best_of"]
    if not isinstance(candidates, list) or len(candidates) < 2:
        raise fail(
            f"{where}.best_of",
            "expected two or more selectors (the runs whose fastest is the side, e.g. "
            f"[{{backend: jax}}, {{backend: torch}}]); received {candidates!r}.",
        )
    for j, candidate in enumerate(candidates):
        expect_mapping(candidate, f"{where}.best_of[{j}]", "a mapping of settings", fail)
    read = side.get("metric", metric)
    if read not in BEST_OF_METRICS:
        raise fail(
            f"{where}.best_of",
            f"expected a throughput metric ({', '.join(BEST_OF_METRICS)}): the best of "
            f"runs is the fastest; received {read!r}.",
        )


def _check_no_single_best(data: Dict[str, Any], metric: str, where: str, fail) -> None:
    """A no_single_best claim: the tasks it compares over (``for_each``), a throughput."""
    if not data.get("for_each"):
        raise fail(
            f"{where}.for_each",
            "a no_single_best claim needs for_each: the setting (or group) whose values "
            "are the tasks a best item would win at; received none.",
        )
    if metric not in BEST_OF_METRICS:
        raise fail(
            f"{where}.metric",
            f"expected a throughput metric ({', '.join(BEST_OF_METRICS)}) for "
            f"no_single_best; received {metric!r}.",
        )


def _positive(value: Any, where: str, fail) -> None:
    """A claim's ratio, tolerance or threshold: absent, or a finite number above 0."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail(where, f"expected a number; received {value!r}.")
    if not math.isfinite(value) or value <= 0:
        what = "a ratio's absolute tolerance" if where.endswith("tolerance") else "a ratio"
        raise fail(
            where,
            f"expected {what}: a finite number above 0 (e.g. 0.15); received {value!r}. A "
            "tolerance of 0 or less, or not a number, would make every verdict the same.",
        )


def _deviations(value: Any, where: str, fail) -> Tuple[str, ...]:
    """A list of sentences (each way the runs differ from the paper's setting)."""
    for i, item in enumerate(_optional_list(value, where, "sentences", fail)):
        _text(item, f"{where}[{i}]", fail, "a sentence saying how the runs differ from the paper")
    return tuple(value or ())


def _study_deviations(top: Dict[str, Any], fail) -> Dict[str, Any]:
    """The study's deviations (sentences or mappings) and its paper_settings, as the
    Study's fields."""
    rules = []
    listed = _optional_list(top.get("deviations"), "deviations", "deviations", fail)
    for i, item in enumerate(listed):
        where = f"deviations[{i}]"
        if isinstance(item, str):
            _text(item, where, fail, "a sentence saying how the runs differ from the paper")
            rules.append(Deviation(item))
            continue
        expected = "a sentence, or a mapping with text and settings"
        data = expect_mapping(item, where, expected, fail, DEVIATION_KEYS)
        _text(data.get("text"), where + ".text", fail, "a sentence saying how the runs differ")
        settings = _optional_list(data.get("settings"), where + ".settings", "setting names", fail)
        for j, key in enumerate(settings):
            _text(key, f"{where}.settings[{j}]", fail, "a run setting's name")
        size = _one_of(data.get("size", "both"), SIZES, f"{where}.size", fail)
        selector = _mapping(data, "where", where, fail, "a selector of runs")
        rules.append(Deviation(data["text"], tuple(settings), dict(selector), size))
    papers = []
    for i, item in enumerate(
        _optional_list(top.get("paper_settings"), "paper_settings", "where/settings", fail)
    ):
        where = f"paper_settings[{i}]"
        expected = "a mapping with where and settings"
        data = expect_mapping(item, where, expected, fail, ("where", "settings"))
        settings = _mapping(data, "settings", where, fail)
        if not settings:
            raise fail(where + ".settings", "expected the paper's settings; received none.")
        selector = _mapping(data, "where", where, fail, "a selector of runs")
        papers.append(PaperSetting(dict(selector), dict(settings)))
    return {
        "deviations": tuple(d.text for d in rules if d.size != "reduced"),
        "reduced_deviations": tuple(d.text for d in rules if d.size == "reduced"),
        "deviation_rules": tuple(d for d in rules if d.settings),
        "paper_settings": tuple(papers),
    }


def _only(value: Any, where: str, fail) -> Dict[str, Tuple[Any, ...]]:
    """A claim's scope: setting -> the values of the runs it is judged on."""
    data = expect_mapping(value, where, "a mapping setting -> [values]", fail)
    for key, values in data.items():
        if not isinstance(values, list) or not values:
            raise fail(
                f"{where}.{key}", f"expected a non-empty list of values; received {values!r}."
            )
    return {k: tuple(v) for k, v in data.items()}


def _claim_metric(data: Dict[str, Any], kind: str, where: str, fail) -> str:
    metric = data.get("metric", "scaling_efficiency" if kind == "efficiency_ordering" else None)
    _text(metric, f"{where}.metric", fail, "a kbench metric name (kbench reproduce --help)")
    if kind == "efficiency_ordering" and metric != "scaling_efficiency":
        raise fail(
            f"{where}.metric",
            "an efficiency_ordering reads scaling_efficiency; drop "
            f"metric or use kind: ordering. Received {metric!r}.",
        )
    return metric


def _claim_figures(
    data: Dict[str, Any], where: str, figures: Dict[str, PublishedFigure], fail
) -> List[str]:
    named = data.get("figures") or []
    if not isinstance(named, list):
        raise fail(f"{where}.figures", f"expected a list of figure ids; received {named!r}.")
    return _figure_ids(named, where + ".figures", figures, fail)


def _figure_ids(
    named: List[Any], where: str, figures: Dict[str, PublishedFigure], fail
) -> List[str]:
    """``named``, each an id of ``figures``."""
    for j, figure_id in enumerate(named):
        if figure_id not in figures:
            raise fail(
                f"{where}[{j}]",
                f"expected a figure id of this file; received "
                f"{figure_id!r}.{did_you_mean(str(figure_id), list(figures))}",
            )
    return named


def _check_ratio_sides(
    data: Dict[str, Any], kind: str, numerator, denominator, where: str, fail
) -> None:
    """A ratio or sign claim: both selectors; a ratio also its value and tolerance."""
    if not numerator or not denominator:
        raise fail(
            f"{where}.numerator",
            f"a {kind} claim needs numerator and denominator "
            "selectors (settings, e.g. {backend: mxnet}); received "
            f"{numerator!r} / {denominator!r}.",
        )
    if kind != "ratio":
        return
    if data.get("paper") is None and data.get("expected") is None:
        raise fail(
            f"{where}.expected",
            "a ratio claim without the paper's ratio needs "
            "expected: the value checked (say where it comes from in note).",
        )
    if data.get("tolerance") is None:
        raise fail(
            f"{where}.tolerance",
            "a ratio claim needs a tolerance (absolute, on the ratio); received none.",
        )


def _ordering_items(items: Any, where: str, fail) -> List[Dict[str, Any]]:
    if not isinstance(items, list) or len(items) < 2:
        raise fail(
            f"{where}.items",
            "an ordering needs two or more items (selectors, in "
            f"the order the paper gives); received {items!r}.",
        )
    return [
        expect_mapping(item, f"{where}.items[{j}]", "a mapping", fail)
        for j, item in enumerate(items)
    ]


def _claim_choices(data: Dict[str, Any], where: str, fail) -> Tuple[str, ...]:
    """direction, expect, requires, doubt checked; the requirements as a tuple."""
    _one_of(data.get("direction", "increasing"), DIRECTIONS, f"{where}.direction", fail)
    _one_of(data.get("expect", "greater"), EXPECTS, f"{where}.expect", fail)
    requires = data.get("requires") or []
    requires = requires if isinstance(requires, list) else [requires]
    for j, need in enumerate(requires):
        _one_of(need, REQUIREMENTS, f"{where}.requires[{j}]", fail)
    if data.get("doubt") and not data.get("instead"):
        raise fail(
            f"{where}.instead",
            "a claim with a doubt needs instead: the sound measurement kbench checks in its place.",
        )
    return tuple(requires)


def _plot(raw: Any, where: str, figures: Dict[str, PublishedFigure], fail) -> PaperPlot:
    expected = "a mapping with title, x, metric, figures"
    data = expect_mapping(raw, where, expected, fail, PLOT_KEYS)
    for key in ("title", "x", "metric"):
        _text(data.get(key), f"{where}.{key}", fail)
    series = data.get("series", "backend")
    named = _figure_ids(_list(data.get("figures"), where + ".figures", fail), where + ".figures",
                        figures, fail)  # fmt: skip
    for j, figure_id in enumerate(named):
        at = figures[figure_id].at
        if data["x"] not in at or series not in at:
            raise fail(
                f"{where}.figures[{j}]",
                f"expected figure {figure_id!r} to say at: "
                f"{{{series}: ..., {data['x']}: ...}}; it has {at!r}.",
            )
    return PaperPlot(
        title=data["title"], x=data["x"], metric=data["metric"], figures=tuple(named),
        where=_mapping(data, "where", where, fail),
        series=series,
    )  # fmt: skip


# small checks --------------------------------------------------------------------


def _optional_list(value: Any, where: str, what: str, fail) -> List[Any]:
    """``value`` if it is a list, [] if absent; else ``fail`` saying a list was expected."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(
            where,
            f"expected a list of {what} (each item on a line starting with '- '); received "
            f"{type(value).__name__} {value!r}.",
        )
    return value


def _mapping(
    data: Dict[str, Any], key: str, where: str, fail, expected: str = "a mapping",
    keys: Optional[Sequence[str]] = None,
) -> Dict[str, Any]:  # fmt: skip
    """``data[key]`` as :func:`~kbench.studies.sweep.expect_mapping` reads it."""
    return expect_mapping(data.get(key), f"{where}.{key}" if where else key, expected, fail, keys)


def _list(value: Any, where: str, fail) -> List[Any]:
    if not isinstance(value, list) or not value:
        raise fail(where, f"expected a non-empty list; received {value!r}.")
    return value


def _one_of(value: Any, choices: Sequence[str], where: str, fail) -> Any:
    if value not in choices:
        raise fail(where, f"expected one of {', '.join(choices)}; received {value!r}.")
    return value


def _text(value: Any, where: str, fail, expected: str = "text") -> None:
    if not isinstance(value, str) or not value.strip():
        raise fail(where, f"expected {expected}; received {value!r}.")


def _text_mapping(value: Any, where: str, fail) -> Dict[str, str]:
    data = expect_mapping(value, where, "a mapping of name -> text", fail)
    if not data:
        raise fail(where, "expected at least one entry, as the document gives it.")
    return {str(k): str(v) for k, v in data.items()}


def _number(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)
