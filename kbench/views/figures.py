"""What every figure of the report shares, drawn on matplotlib's Agg canvas (no pyplot):
:class:`RunGroup` s (as :func:`kbench.results.analysis.compare` groups runs, each labelled
with the model and whatever setting tells it apart), backend colours, labels, PNG output.
Every figure function returns :class:`Drawn` figures or a :class:`Skipped` that says why
the data does not call for that figure.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from kbench.backends import BACKENDS
from kbench.backends.switches import SWITCHES
from kbench.results.analysis import (
    BackendRow,
    ComparisonGroup,
    column_of,
    compare,
    group_key,
    in_column,
    varying_settings,
)
from kbench.results.result import RunResult
from kbench.views.tables import model_label

log = logging.getLogger(__name__)

LOG_SCALE_ABOVE = 30  # a panel whose values span more than this many times uses a log scale

MIB = 2**20
DPI = 100
UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")  # starts mathtext in a matplotlib text
WIDTH_IN = 11.0
# A backend has its own colour (kbench.backends), so it looks the same in every figure;
# a name kbench does not know (an older result's) takes a spare one.
SPARE_COLOURS = ("#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac")
NOT_OK_COLOUR = "#c0392b"

# How settings read in labels; keys not listed use their config name.
SETTING_NAMES = {
    "batch_size": "batch", "gpu_memory_fraction": "GPU memory fraction",
    "gpu_memory_growth": "memory growth", "warmup_steps": "warmup steps",
    "learning_rate": "learning rate", "train_samples": "train samples",
    "test_samples": "test samples", "data_format": "format", "input_shape": "input",
    "image_size": "image size", "duration_s": "duration s",
}  # fmt: skip


@dataclass(frozen=True)
class RunGroup:
    key: Tuple
    model: str
    setting: str  # e.g. "batch 64, threads 1"; what tells this group from the others
    comparison: ComparisonGroup
    runs: List[RunResult] = field(default_factory=list)

    @property
    def label(self) -> str:
        model = model_label(self.model)
        return f"{model}, {self.setting}" if self.setting else model

    @property
    def config(self) -> Dict[str, Any]:
        return self.runs[0].config

    def runs_of(self, backend: str) -> List[RunResult]:
        return [r for r in self.runs if in_column(r, backend)]

    def row(self, backend: str) -> Optional[BackendRow]:
        return next((row for row in self.comparison.rows if row.backend == backend), None)


def setting_text(key: str, value: Any) -> Optional[str]:
    """One setting as a label reads it; None where unset (the default)."""
    name = SETTING_NAMES.get(key, key.replace("_", " "))
    if value is None or value is False:  # unset: the default, which the label leaves out
        return None
    if key in SWITCHES and value == SWITCHES[key].default:  # a switch left as it is
        return None
    if key in ("dataset", "mode"):
        return str(value)
    if value is True:
        return name
    if isinstance(value, float):
        return f"{name} {value:g}"
    if isinstance(value, (list, tuple)):
        value = "x".join(str(v) for v in value)
    return f"{name} {value}"


def describe_setting(config: Dict[str, Any], keys: Sequence[str]) -> str:
    parts = [setting_text(k, config.get(k)) for k in keys]
    return ", ".join(p for p in parts if p)


def group_runs(results: Sequence[RunResult], baseline: str) -> List[RunGroup]:
    members: Dict[Tuple, List[RunResult]] = {}
    for result in results:
        members.setdefault(group_key(result), []).append(result)
    configs = [runs[0].config for runs in members.values()]
    models = list(dict.fromkeys(c["model"] for c in configs))
    # the batch size is always worth reading; other settings only where they differ
    # between the groups of one model (the model's name tells the others apart)
    keys = {
        model: ["batch_size"]
        + varying_settings([c for c in configs if c["model"] == model], skip=("batch_size",))
        for model in models
    }
    groups = []
    column = column_of(results)  # rows named alike in every group (backend @ host)
    for key, runs in members.items():
        config = runs[0].config
        setting = describe_setting(config, keys[config["model"]])
        if config.get("mode") == "inference" and "mode" not in keys[config["model"]]:
            setting += ", inference"
        found = compare(runs, baseline, column)
        if not found:  # every run of it left out (dropped windows): nothing to draw
            continue
        groups.append(RunGroup(key, config["model"], setting, found[0], runs))
    return sorted(groups, key=lambda g: (models.index(g.model), str(g.config.get("mode")),
                                         g.config["batch_size"], g.setting))  # fmt: skip


def backend_order(results: Sequence[RunResult]) -> List[str]:
    column = column_of(results)
    return list(dict.fromkeys(column(r) for r in results))


def colour(backend: str, backends: Sequence[str]) -> str:
    if backend in BACKENDS:
        return BACKENDS[backend].colour
    spare = [b for b in backends if b not in BACKENDS]
    return SPARE_COLOURS[spare.index(backend) % len(SPARE_COLOURS)] if backend in spare else "k"


def effective_threads(result: RunResult) -> Optional[int]:
    """--threads, else OMP_NUM_THREADS, else the logical cores."""
    if result.config.get("threads") is not None:
        return int(result.config["threads"])
    value = result.environment.get("process_env", {}).get("OMP_NUM_THREADS")
    if value and str(value).isdigit():
        return int(value)
    return result.environment.get("machine", {}).get("cpu_logical_cores")


@dataclass(frozen=True)
class Drawn:
    title: str
    png: bytes
    caption: str = ""


@dataclass(frozen=True)
class Skipped:
    title: str
    reason: str

    @property
    def sentence(self) -> str:
        return f"{self.title}: {self.reason}"


Outcome = Union[Drawn, Skipped]


def new_figure(height_in: float, width_in: float = WIDTH_IN) -> Any:
    # matplotlib is imported where a figure is drawn: importing it costs every kbench
    # command half a second (this module is read by commands that draw nothing)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_of(figure: Any) -> bytes:
    """The figure as PNG; what matplotlib warns while drawing goes to the debug log."""
    buffer = io.BytesIO()
    plain_text(figure)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure.savefig(buffer, format="png", dpi=DPI)
    for warning in caught:
        log.debug("matplotlib, drawing a figure: %s", warning.message)
    return buffer.getvalue()


def plain_text(figure: Any) -> None:
    """Every text of ``figure`` drawn as written, its ``$`` escaped: two of them (a model
    at ``exp$^$/net.py``) would start matplotlib's mathtext, which fails on what is no
    formula. Titles, labels, legends, notes, and tick labels given as text or by a
    function (matplotlib's own number formats, mathtext on a log axis, are left)."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter, FuncFormatter

    def plain(text: Any) -> str:
        return UNESCAPED_DOLLAR.sub(r"\\$", str(text))

    for text in figure.findobj(Text):
        text.set_text(plain(text.get_text()))
    for axis in (axis for ax in figure.axes for axis in (ax.xaxis, ax.yaxis)):
        for which in ("major", "minor"):
            given = getattr(axis, f"get_{which}_formatter")()
            if isinstance(given, (FixedFormatter, FuncFormatter)):
                escaped = FuncFormatter(lambda x, pos, given=given: plain(given(x, pos)))
                getattr(axis, f"set_{which}_formatter")(escaped)


def panel_grid(figure: Any, count: int, columns: int, **kwargs) -> List[Any]:
    rows = -(-count // columns)
    axes = figure.subplots(rows, columns, squeeze=False, **kwargs).ravel()
    for ax in axes[count:]:
        ax.set_visible(False)
    return list(axes[:count])


def short_number(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3g}M"
    if value >= 1e3:
        return f"{value / 1e3:.3g}k"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def not_ok_text(statuses: Dict[str, int]) -> str:
    bad = {s: n for s, n in statuses.items() if s != "ok"}
    return ", ".join(f"{n} {s.upper()}" if n > 1 else s.upper() for s, n in bad.items())


def by_model(groups: Sequence[RunGroup]) -> Dict[str, List[RunGroup]]:
    out: Dict[str, List[RunGroup]] = {}
    for group in groups:
        out.setdefault(group.model, []).append(group)
    return out


def model_title(model: str, groups: Sequence[RunGroup]) -> str:
    synthetic = any(g.comparison.synthetic for g in groups)
    datasets = sorted({g.comparison.dataset for g in groups})
    return f"{model} on {', '.join(datasets)}" + (" [SYNTHETIC DATA]" if synthetic else "")


def has_rate(row: Optional[BackendRow]) -> bool:
    return row is not None and row.images_per_sec is not None


def log_axis(ax: Any) -> None:
    """A log y axis labelled 100, 1k, 10k at 1, 2 and 5 times powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: short_number(value)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def shared_legend(figure: Any, fontsize: float) -> None:
    """One legend above every panel (a backend or phase has one colour throughout)."""
    handles: Dict[str, Any] = {}
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    figure.legend(list(handles.values()), list(handles), loc="outside upper center",
                  ncols=len(handles), fontsize=fontsize, frameon=False)  # fmt: skip
