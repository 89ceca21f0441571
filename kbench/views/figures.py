"""The report's figures, drawn with matplotlib's Agg canvas (no pyplot, no display).

Results are first put in :class:`RunGroup` s: one per distinct config apart from the
backend and the repeat (as :func:`kbench.compare.compare` groups them), each with a
label naming the model and whatever setting tells it apart from the other groups.
Every figure function returns :class:`Drawn` figures or one :class:`Skipped` that
says why the data does not call for that figure.
"""

from __future__ import annotations

import io
import logging
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from kbench.compare import IGNORED_IN_GROUPING, BackendRow, ComparisonGroup, compare, group_key
from kbench.results import RunResult
from kbench.switches import SWITCHES

log = logging.getLogger(__name__)

THROUGHPUT = "Throughput by backend"
SPEED_RATIO = "Speed against the baseline"
BATCH_SIZE = "Throughput against batch size"
MEMORY_FRACTION = "Throughput and memory against the GPU memory fraction"
THREADS = "CPU thread scaling"
TIMELINES = "Per-run timelines"
ACCURACY = "Accuracy"
TIMELINE_PREFIX = "Timeline: "
MAX_TIMELINES = 12
LOG_SCALE_ABOVE = 30  # a panel whose values span more than this many times uses a log scale

MIB = 2**20
DPI = 100
WIDTH_IN = 11.0
# Fixed colours, so a backend looks the same in every figure.
BACKEND_COLOURS = {
    "tensorflow": "#f28e2b",
    "jax": "#4e79a7",
    "torch": "#e15759",
    "torch-native": "#b07aa1",
    "mxnet": "#59a14f",
}
SPARE_COLOURS = ("#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac")
NOT_OK_COLOUR = "#c0392b"

# What each memory kind is, for labels; in order of preference for a single figure.
MEMORY_KINDS = {
    "process_nvml": "peak GPU memory of the worker (NVML, sampled)",
    "framework_peak": "framework allocator peak on the GPU",
    "device_used": "peak GPU memory used by every process on the device (NVML, sampled)",
    "process_peak_rss": "peak host memory (RSS) of the worker",
}

# How settings read in labels; keys not listed use their config name.
SETTING_NAMES = {
    "batch_size": "batch",
    "gpu_memory_fraction": "GPU memory fraction",
    "gpu_memory_growth": "memory growth",
    "warmup_steps": "warmup steps",
    "learning_rate": "learning rate",
    "train_samples": "train samples",
    "test_samples": "test samples",
    "data_format": "format",
    "input_shape": "input",
    "image_size": "image size",
    "duration_s": "duration s",
}
NOT_A_SETTING = set(IGNORED_IN_GROUPING) | {"model"}


# --------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class RunGroup:
    """Runs that differ only in backend and repeat, with their comparison."""

    key: Tuple
    model: str
    setting: str  # e.g. "batch 64, threads 1"; what tells this group from the others
    comparison: ComparisonGroup
    runs: List[RunResult] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.model}, {self.setting}" if self.setting else self.model

    @property
    def config(self) -> Dict[str, Any]:
        return self.runs[0].config

    def runs_of(self, backend: str) -> List[RunResult]:
        return [r for r in self.runs if r.config["backend"] == backend]

    def row(self, backend: str) -> Optional[BackendRow]:
        return next((row for row in self.comparison.rows if row.backend == backend), None)


def setting_text(key: str, value: Any) -> Optional[str]:
    """One setting as it reads in a label, or None for an unset one (the default)."""
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


def varying_keys(configs: Sequence[Dict[str, Any]], skip: Sequence[str] = ()) -> List[str]:
    """Config keys (apart from backend, repeat, model, ``skip``) whose values differ."""
    keys: List[str] = []
    for config in configs:
        keys += [k for k in config if k not in keys]
    return [
        k
        for k in keys
        if k not in NOT_A_SETTING and k not in skip and len({repr(c.get(k)) for c in configs}) > 1
    ]


def describe_setting(config: Dict[str, Any], keys: Sequence[str]) -> str:
    parts = [setting_text(k, config.get(k)) for k in keys]
    return ", ".join(p for p in parts if p)


def group_runs(results: Sequence[RunResult], baseline: str) -> List[RunGroup]:
    """Groups of runs (train and inference), ordered by model, then mode and batch size."""
    members: Dict[Tuple, List[RunResult]] = {}
    for result in results:
        members.setdefault(group_key(result), []).append(result)
    configs = [runs[0].config for runs in members.values()]
    models = list(dict.fromkeys(c["model"] for c in configs))
    # the batch size is always worth reading; other settings only where they differ
    # between the groups of one model (the model's name tells the others apart)
    keys = {
        model: ["batch_size"]
        + varying_keys([c for c in configs if c["model"] == model], skip=("batch_size",))
        for model in models
    }
    groups = []
    for key, runs in members.items():
        config = runs[0].config
        setting = describe_setting(config, keys[config["model"]])
        if config.get("mode") == "inference" and "mode" not in keys[config["model"]]:
            setting += ", inference"
        (comparison,) = compare(runs, baseline)
        groups.append(RunGroup(key, config["model"], setting, comparison, runs))
    return sorted(
        groups,
        key=lambda g: (
            models.index(g.model),
            str(g.config.get("mode")),
            g.config["batch_size"],
            g.setting,
        ),
    )


def backend_order(results: Sequence[RunResult]) -> List[str]:
    return list(dict.fromkeys(r.config["backend"] for r in results))


def colour(backend: str, backends: Sequence[str]) -> str:
    if backend in BACKEND_COLOURS:
        return BACKEND_COLOURS[backend]
    spare = [b for b in backends if b not in BACKEND_COLOURS]
    return SPARE_COLOURS[spare.index(backend) % len(SPARE_COLOURS)] if backend in spare else "k"


def effective_threads(result: RunResult) -> Optional[int]:
    """The thread count a run used: --threads, else what OMP_NUM_THREADS was set to."""
    if result.config.get("threads") is not None:
        return int(result.config["threads"])
    value = result.environment.get("process_env", {}).get("OMP_NUM_THREADS")
    if value and str(value).isdigit():
        return int(value)
    return result.environment.get("machine", {}).get("cpu_logical_cores")


def memory_by_kind(result: RunResult) -> Dict[str, int]:
    """Peak memory readings of a run, bytes per kind (summed over GPUs)."""
    out: Dict[str, int] = {}
    for reading in result.metrics.get("memory") or []:
        if reading.get("bytes") is not None:
            out[reading["kind"]] = out.get(reading["kind"], 0) + int(reading["bytes"])
    return out


def no_gpu_reason(results: Sequence[RunResult]) -> Optional[str]:
    """Why no run had a GPU, or None if some run had one: from environment.machine.gpu,
    and from the GPUs the framework saw (none under --device cpu)."""
    reasons = []
    for r in results:
        gpu = r.environment.get("machine", {}).get("gpu", {})
        options = (r.environment.get("framework") or {}).get("memory_options") or {}
        if not (gpu.get("available") and gpu.get("devices")):
            reasons.append(gpu.get("reason") or "the machine has no GPU")
        elif options.get("gpus_visible") == 0:
            reasons.append("the machine has a GPU, but the worker saw none (--device cpu)")
        else:
            return None
    return reasons[0] if reasons else "no runs"


# --------------------------------------------------------------------------- outcome


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


def new_figure(height_in: float, width_in: float = WIDTH_IN) -> Figure:
    figure = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_of(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def panel_grid(figure: Figure, count: int, columns: int, **kwargs) -> List[Any]:
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


# --------------------------------------------------------------------------- 1 throughput


def throughput_bars(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    if not groups:
        return Skipped(THROUGHPUT, "no training or inference run to show")
    models = by_model(groups)
    unfinished = {
        model: members
        for model, members in models.items()
        if not any(_rate(row) for g in members for row in g.comparison.rows)
    }
    models = {m: members for m, members in models.items() if m not in unfinished}
    if not models:
        return Skipped(THROUGHPUT, "no training or inference run finished")
    widest = max(len(g) for g in models.values())
    columns = 1 if widest > 3 else min(2, len(models))
    rows = -(-len(models) // columns)
    figure = new_figure(3.8 * rows + 0.4)
    marked = []  # (backend, group label, statuses) of runs drawn as text, not bars
    for ax, (model, members) in zip(panel_grid(figure, len(models), columns), models.items()):
        present = [b for b in backends if any(g.row(b) for g in members)]
        width = 0.8 / len(present)
        spreads = [g.row(b).images_per_sec for g in members for b in present if _rate(g.row(b))]
        top = max(s.high for s in spreads)
        log_scale = top / max(min(s.low for s in spreads), 1e-9) > LOG_SCALE_ABOVE
        floor = min(s.low for s in spreads) / 3 if log_scale else 0.0

        def above(value: float, log_scale: bool = log_scale, top: float = top) -> float:
            return value * 1.12 if log_scale else value + top * 0.015

        for j, backend in enumerate(present):
            for i, group in enumerate(members):
                row = group.row(backend)
                if row is None:
                    continue
                x = i + (j - (len(present) - 1) / 2) * width
                spread = row.images_per_sec
                if spread is None:  # no run finished: say so where the bar would be
                    marked.append(f"{backend}, {group.label}: {not_ok_text(row.statuses)}")
                    ax.text(
                        x,
                        above(floor),
                        f"{backend}: {not_ok_text(row.statuses)}",
                        rotation=90,
                        ha="center",
                        va="bottom",
                        color=NOT_OK_COLOUR,
                        fontsize=9,
                        fontweight="bold",
                    )
                    continue
                ax.bar(
                    x,
                    spread.median - floor,
                    width * 0.92,
                    bottom=floor,
                    label=backend,
                    color=colour(backend, backends),
                    yerr=[[spread.median - spread.low], [spread.high - spread.median]],
                    capsize=3,
                    ecolor="#333",
                )
                note = short_number(spread.median)
                if not row.all_ok:
                    note += f"\n+{not_ok_text(row.statuses)}"
                    marked.append(f"{backend}, {group.label}: {not_ok_text(row.statuses)}")
                ax.text(
                    x,
                    above(spread.high),
                    note,
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    color=NOT_OK_COLOUR if not row.all_ok else "#222",
                )
        ax.set_xticks(range(len(members)))
        ax.set_xticklabels([g.setting.replace(", ", "\n") for g in members], fontsize=9)
        if log_scale:
            log_axis(ax)
            ax.set_ylim(floor, top * 3)
            ax.set_ylabel("images per second (img/s, log scale)")
        else:
            ax.set_ylim(0, top * 1.18)
            ax.set_ylabel("images per second (img/s)")
        ax.set_title(model_title(model, members), fontsize=11)
        ax.grid(axis="y", alpha=0.3)
    handles: Dict[str, Any] = {}
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    # one legend for every panel (a backend has one colour throughout), above them
    figure.legend(
        list(handles.values()),
        list(handles),
        loc="outside upper center",
        ncols=len(handles),
        fontsize=10,
        frameon=False,
    )
    caption = (
        "Bars: median img/s over the repeats of each backend (measured window only, "
        "warmup excluded); error bars: lowest to highest repeat. A red label marks runs "
        "that did not finish (OOM: out of memory, TIMEOUT, FAILED) where their bar would be. "
        f"A panel whose values span more than {LOG_SCALE_ABOVE}x uses a log scale."
    )
    if marked:
        caption += " Marked: " + "; ".join(marked) + "."
    for model, members in unfinished.items():
        statuses = [
            f"{row.backend} {not_ok_text(row.statuses)}"
            for g in members
            for row in g.comparison.rows
        ]
        caption += f" {model}: no run finished ({', '.join(statuses)}), so it has no panel."
    return Drawn(THROUGHPUT, png_of(figure), caption)


def _rate(row: Optional[BackendRow]) -> bool:
    return row is not None and row.images_per_sec is not None


# --------------------------------------------------------------------------- 2 ratio heatmap


def speed_heatmap(groups: Sequence[RunGroup], backends: Sequence[str], baseline: str) -> Outcome:
    if len(backends) < 2:
        return Skipped(
            SPEED_RATIO,
            f"only one backend ran ({', '.join(backends) or 'none'}): nothing to compare",
        )
    others = [b for b in backends if b != baseline]
    columns = [baseline] + others
    rows = [g for g in groups if any(_rate(g.row(b)) for b in others)]
    if not any(g.row(baseline) and _rate(g.row(baseline)) for g in rows):
        return Skipped(
            SPEED_RATIO,
            f"no model and setting has a finished run of both the baseline ({baseline}) "
            "and another backend",
        )
    values = np.full((len(rows), len(columns)), np.nan)
    texts = [["" for _ in columns] for _ in rows]
    for i, group in enumerate(rows):
        base_ok = group.comparison.baseline == baseline and _rate(group.row(baseline))
        for j, backend in enumerate(columns):
            row = group.row(backend)
            if row is None:
                texts[i][j] = "not run"
            elif row.images_per_sec is None:
                texts[i][j] = not_ok_text(row.statuses)
            elif not base_ok:
                texts[i][j] = f"no {baseline}\nrun"
            elif row.ratio is not None:
                values[i, j] = row.ratio.median
                texts[i][j] = f"{row.ratio.median:.3g}×"
                if row.ratio.n > 1 and backend != baseline:
                    texts[i][j] += f"\n({row.ratio.low:.3g}–{row.ratio.high:.3g})"
    logs = np.log2(values)
    finite = np.abs(logs[np.isfinite(logs)])
    limit = max(float(finite.max()) if finite.size else 1.0, 1.0)  # colours reach 2x at least
    height = max(2.8, 1.5 + 0.6 * len(rows))
    label_in = 0.075 * max(len(g.label) for g in rows)
    figure = new_figure(height, min(WIDTH_IN, 2.2 + label_in + 1.5 * len(columns)))
    ax = figure.subplots()
    shown = np.ma.masked_invalid(logs)
    cmap = _diverging()
    image = ax.imshow(shown, cmap=cmap, norm=TwoSlopeNorm(0.0, -limit, limit), aspect="auto")
    for i in range(len(rows)):
        for j in range(len(columns)):
            inside = np.isfinite(logs[i, j]) and abs(logs[i, j]) > 0.6 * limit
            ax.text(
                j,
                i,
                texts[i][j],
                ha="center",
                va="center",
                fontsize=9,
                color="white" if inside else (NOT_OK_COLOUR if np.isnan(values[i, j]) else "#111"),
            )
    ax.set_xticks(range(len(columns)))
    ax.set_xticklabels([f"{b}\n(baseline)" if b == baseline else b for b in columns])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([g.label for g in rows], fontsize=9)
    ax.set_xlabel("backend")
    ax.set_title(
        f"Speed against {baseline} (img/s ratio, >1 is faster);\none row per model and setting",
        fontsize=11,
    )
    bar = figure.colorbar(image, ax=ax, shrink=0.9)
    step = 0.5 if limit <= 2 else max(1, int(np.ceil(2 * limit / 8)))
    ticks = [t * step for t in range(-40, 41) if abs(t * step) <= limit]
    bar.set_ticks(ticks)
    bar.set_ticklabels([f"{2.0**t:.2g}×" for t in ticks])
    bar.set_label("ratio (log scale)")
    caption = (
        f"Each cell: the median over rounds of (this backend's img/s in round r) / "
        f"({baseline}'s img/s in round r); below it, the lowest and highest round. Rounds "
        "pair runs made close in time, so a machine that drifts does not pick the winner. "
        "Grey cells: no ratio (the run did not finish, or the baseline did not run there)."
    )
    return Drawn(SPEED_RATIO, png_of(figure), caption)


def _diverging() -> Any:
    from matplotlib import colormaps

    return colormaps["PiYG"].with_extremes(bad="#dddddd")


# --------------------------------------------------------------------------- 3-5 sweeps


@dataclass
class SweepLine:
    model: str
    backend: str
    rest: str  # the other settings, for the legend when a model has several lines
    points: List[Tuple[Any, RunGroup]] = field(default_factory=list)  # (x, group), sorted


DROP = object()  # what an ``x_of`` returns for a group that has no place on the x axis


def sweep_lines(
    groups: Sequence[RunGroup], key: str, x_of: Callable[[RunGroup], Any]
) -> List[SweepLine]:
    """Lines of groups that differ only in ``key`` (x from ``x_of``; DROP leaves a group
    out), per model and backend; only lines with at least two distinct x values."""
    partitions: Dict[Tuple, List[Tuple[Any, RunGroup]]] = {}
    for group in groups:
        x = x_of(group)
        if x is DROP:
            continue
        rest = tuple(item for item in group.key if item[0] != key)
        partitions.setdefault(rest, []).append((x, group))
    partitions = {k: v for k, v in partitions.items() if len({repr(x) for x, _ in v}) > 1}
    rest_configs = [members[0][1].config for members in partitions.values()]
    rest_keys = varying_keys(rest_configs, skip=(key,))
    lines = []
    for members in partitions.values():
        members.sort(key=lambda item: _sort_x(item[0]))
        first = members[0][1]
        rest = describe_setting(first.config, rest_keys)
        for backend in backend_order([r for _, g in members for r in g.runs]):
            points = [(x, g) for x, g in members if g.row(backend)]
            lines.append(SweepLine(first.model, backend, rest, points))
    return lines


def _sort_x(x: Any) -> Tuple:
    return (1, 0) if x is None or isinstance(x, str) else (0, x)


def _line_label(line: SweepLine, lines: Sequence[SweepLine]) -> str:
    several = len({(ln.rest) for ln in lines if ln.model == line.model}) > 1
    return f"{line.backend} ({line.rest})" if several and line.rest else line.backend


def _spread_line(
    ax: Any, xs: List[float], spreads: List[Any], label: str, colour_: str, style: str
) -> None:
    pairs = [(x, s) for x, s in zip(xs, spreads) if s is not None]
    if not pairs:
        return
    xs_ok = [x for x, _ in pairs]
    medians = np.array([s.median for _, s in pairs])
    low = medians - np.array([s.low for _, s in pairs])
    high = np.array([s.high for _, s in pairs]) - medians
    ax.errorbar(
        xs_ok,
        medians,
        yerr=[low, high],
        label=label,
        color=colour_,
        linestyle=style,
        marker="o",
        capsize=3,
    )


def _rate_axis(ax: Any, lines: Sequence[SweepLine]) -> None:
    """img/s y axis: from zero, or a log scale when the values span more than 30x."""
    spreads = [
        g.row(ln.backend).images_per_sec
        for ln in lines
        for _, g in ln.points
        if _rate(g.row(ln.backend))
    ]
    low = min((s.low for s in spreads), default=0.0)
    high = max((s.high for s in spreads), default=1.0)
    if low > 0 and high / low > LOG_SCALE_ABOVE:
        log_axis(ax)
        ax.set_ylabel("images per second (img/s, log scale)")
    else:
        ax.set_ylim(bottom=0)
        ax.set_ylabel("images per second (img/s)")


def log_axis(ax: Any) -> None:
    """A log y axis with plain numbers (100, 1k, 10k) at 1, 2 and 5 times powers of ten."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: short_number(value)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _mark_failures(ax: Any, xs: List[float], line: SweepLine) -> None:
    """Where a backend has no finished run at an x, its status, in red."""
    for x, (_, group) in zip(xs, line.points):
        row = group.row(line.backend)
        if row is not None and row.images_per_sec is None:
            ax.annotate(
                f"{line.backend}: {not_ok_text(row.statuses)}",
                (x, 0),
                xycoords=("data", "axes fraction"),  # at the foot of the axis, log or not
                xytext=(0, 4),
                textcoords="offset points",
                rotation=90,
                ha="center",
                va="bottom",
                color=NOT_OK_COLOUR,
                fontsize=8,
            )


STYLES = ("-", "--", ":", "-.")


def _styles(lines: Sequence[SweepLine]) -> Dict[Tuple[str, str], str]:
    out: Dict[Tuple[str, str], str] = {}
    for line in lines:
        rests = list(dict.fromkeys(ln.rest for ln in lines if ln.model == line.model))
        out[(line.model, line.rest)] = STYLES[rests.index(line.rest) % len(STYLES)]
    return out


def batch_size_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    lines = sweep_lines(groups, "batch_size", lambda g: g.config["batch_size"])
    if not lines:
        return Skipped(BATCH_SIZE, "no model ran at more than one batch size with all else equal")
    models = list(dict.fromkeys(line.model for line in lines))
    columns = min(2, len(models))
    figure = new_figure(3.8 * -(-len(models) // columns) + 0.3)
    styles = _styles(lines)
    for ax, model in zip(panel_grid(figure, len(models), columns), models):
        mine = [ln for ln in lines if ln.model == model]
        sizes = sorted({x for ln in mine for x, _ in ln.points})
        for line in mine:
            xs = [x for x, _ in line.points]
            spreads = [g.row(line.backend).images_per_sec for _, g in line.points]
            c = colour(line.backend, backends)
            _spread_line(ax, xs, spreads, _line_label(line, lines), c, styles[(model, line.rest)])
            _mark_failures(ax, xs, line)
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(sizes) / 1.25, max(sizes) * 1.25)  # room for markers at the ends
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("batch size (samples per step, log scale)")
        _rate_axis(ax, mine)
        ax.set_title(model_title(model, [g for ln in mine for _, g in ln.points]), fontsize=11)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    caption = (
        "Median img/s over repeats at each batch size (error bars: lowest to highest "
        "repeat), one line per backend, between runs that differ only in batch size."
    )
    return Drawn(BATCH_SIZE, png_of(figure), caption)


def memory_fraction_plot(
    groups: Sequence[RunGroup], backends: Sequence[str], results: Sequence[RunResult]
) -> Outcome:
    fractions = {repr(g.config.get("gpu_memory_fraction")) for g in groups}
    if len(fractions) < 2:
        return Skipped(MEMORY_FRACTION, "gpu_memory_fraction was the same in every run")
    lines = sweep_lines(
        groups, "gpu_memory_fraction", lambda g: g.config.get("gpu_memory_fraction")
    )
    if not lines:
        return Skipped(
            MEMORY_FRACTION,
            "no model ran at more than one gpu_memory_fraction with all else equal",
        )
    models = list(dict.fromkeys(line.model for line in lines))
    figure = new_figure(3.6 * len(models) + 0.4)
    axes = figure.subplots(len(models), 2, squeeze=False)
    styles = _styles(lines)
    for (speed_ax, memory_ax), model in zip(axes, models):
        mine = [ln for ln in lines if ln.model == model]
        values = sorted({x for ln in mine for x, _ in ln.points}, key=_sort_x)
        position = {repr(v): i for i, v in enumerate(values)}
        runs = [r for ln in mine for _, g in ln.points for r in g.runs_of(ln.backend) if r.ok]
        kind = _common_memory_kind(runs)
        for line in mine:
            xs = [position[repr(x)] for x, _ in line.points]
            c, style = colour(line.backend, backends), styles[(model, line.rest)]
            label = _line_label(line, lines)
            spreads = [g.row(line.backend).images_per_sec for _, g in line.points]
            _spread_line(speed_ax, xs, spreads, label, c, style)
            _mark_failures(speed_ax, xs, line)
            if kind:
                memory = [
                    _spread_of(
                        [memory_by_kind(r).get(kind) for r in g.runs_of(line.backend) if r.ok],
                        scale=1 / MIB,
                    )
                    for _, g in line.points
                ]
                _spread_line(memory_ax, xs, memory, label, c, style)
        ticks = ["no cap" if v is None else f"{v:g}" for v in values]
        for ax in (speed_ax, memory_ax):
            ax.set_xticks(range(len(values)))
            ax.set_xticklabels(ticks)
            ax.set_xlim(-0.3, len(values) - 0.7)
            ax.set_xlabel("gpu_memory_fraction (share of GPU memory allowed)")
            ax.grid(alpha=0.3)
        memory_ax.set_ylim(0, memory_ax.get_ylim()[1] * 1.1)
        _rate_axis(speed_ax, mine)
        speed_ax.set_title(
            model_title(model, [g for ln in mine for _, g in ln.points]), fontsize=11
        )
        speed_ax.legend(fontsize=9, loc="best")
        if kind:
            memory_ax.set_ylabel("MiB")
            memory_ax.set_title(MEMORY_KINDS.get(kind, kind), fontsize=10)
        else:
            memory_ax.set_axis_off()
            memory_ax.text(
                0.5, 0.5, "no memory readings", ha="center", transform=memory_ax.transAxes
            )
    caption = (
        "Left: median img/s over repeats (error bars: lowest to highest repeat). Right: "
        "peak memory, of the kind named above the panel (median over repeats). 'no cap' is "
        "the framework's own default (TensorFlow takes nearly all GPU memory, JAX 75 %)."
    )
    reason = no_gpu_reason(results)
    if reason:
        caption += (
            f" No run had a GPU ({reason}): the fraction only applies to GPU memory, so "
            "here it has no effect and any difference is run-to-run noise."
        )
    return Drawn(MEMORY_FRACTION, png_of(figure), caption)


def _common_memory_kind(runs: Sequence[RunResult]) -> Optional[str]:
    kinds = [set(memory_by_kind(r)) for r in runs]
    for kind in MEMORY_KINDS:
        if kinds and all(kind in k for k in kinds):
            return kind
    return None


def _spread_of(values: Sequence[Optional[float]], scale: float = 1.0) -> Optional[Any]:
    from kbench.compare import Spread

    return Spread.of([v * scale for v in values if v is not None])


def threads_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    if len({repr(g.config.get("threads")) for g in groups}) < 2:
        return Skipped(THREADS, "every run used the same --threads setting")

    def threads_of(group: RunGroup) -> Optional[int]:
        counts = {effective_threads(r) for r in group.runs}
        return counts.pop() if len(counts) == 1 and None not in counts else DROP

    lines = sweep_lines(groups, "threads", threads_of)
    if not lines:
        return Skipped(THREADS, "no model ran at more than one thread count with all else equal")
    models = list(dict.fromkeys(line.model for line in lines))
    columns = min(2, len(models))
    figure = new_figure(3.8 * -(-len(models) // columns) + 0.3)
    styles = _styles(lines)
    for ax, model in zip(panel_grid(figure, len(models), columns), models):
        mine = [ln for ln in lines if ln.model == model]
        counts = sorted({x for ln in mine for x, _ in ln.points})
        defaults = {x for ln in mine for x, g in ln.points if g.config.get("threads") is None}
        for line in mine:
            xs = [x for x, _ in line.points]
            spreads = [g.row(line.backend).images_per_sec for _, g in line.points]
            c = colour(line.backend, backends)
            _spread_line(ax, xs, spreads, _line_label(line, lines), c, styles[(model, line.rest)])
            _mark_failures(ax, xs, line)
        ax.set_xticks(counts)
        ax.set_xticklabels([f"{c}\n(all cores)" if c in defaults else str(c) for c in counts])
        ax.set_xlim(min(counts) - 0.5, max(counts) + 0.5)
        ax.set_xlabel("CPU threads (intra-op, inter-op and OpenMP)")
        _rate_axis(ax, mine)
        ax.set_title(model_title(model, [g for ln in mine for _, g in ln.points]), fontsize=11)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    caption = (
        "Median img/s over repeats (error bars: lowest to highest repeat) against the CPU "
        "threads each framework was given. '(all cores)': --threads unset, so every core; "
        "the count is what OMP_NUM_THREADS was set to. Other work on the machine competes "
        "for the same cores."
    )
    return Drawn(THREADS, png_of(figure), caption)


# --------------------------------------------------------------------------- 6 timelines

GPU_UTILIZATION = re.compile(r"^gpu(\d+)_(kernel_time_percent|utilization_percent)$")
GPU_PROCESS_MEMORY = re.compile(r"^gpu(\d+)_process_memory_bytes$")
GPU_USED_MEMORY = re.compile(r"^gpu(\d+)_memory_used_bytes$")


def pick_timeline_runs(
    groups: Sequence[RunGroup], backends: Sequence[str]
) -> Tuple[List[Tuple[RunGroup, RunResult]], List[str]]:
    """One run per (group, backend): the repeat with the median img/s (else a run that did
    not finish, to show how it ended); and notes on what was left out."""
    picked, notes, sampler_off = [], [], []
    for group in groups:
        for backend in backends:
            runs = group.runs_of(backend)
            if not runs:
                continue
            sampled = [r for r in runs if r.sampler]
            sampler_off += [r for r in runs if not r.sampler]
            if not sampled:
                continue
            ok = sorted((r for r in sampled if r.ok), key=lambda r: r.metrics["images_per_sec"])
            picked.append((group, ok[(len(ok) - 1) // 2] if ok else sampled[0]))
    if sampler_off:
        names = ", ".join(r.run_id for r in sampler_off[:5])
        more = f" and {len(sampler_off) - 5} more" if len(sampler_off) > 5 else ""
        notes.append(
            f"{len(sampler_off)} run(s) had the sampler off (--sample-interval 0), so they "
            f"have no timeline: {names}{more}."
        )
    if len(picked) > MAX_TIMELINES:
        notes.append(
            f"Showing {MAX_TIMELINES} of {len(picked)} timelines (one per backend, model and "
            "setting); the rest are left out to keep the report short."
        )
        picked = picked[:MAX_TIMELINES]
    return picked, notes


def timeline(group: RunGroup, run: RunResult, backends: Sequence[str]) -> Drawn:
    series = run.sampler.get("series", {})
    labels = run.sampler.get("labels", {})
    times = np.asarray(series.get("t", []), dtype=float)
    t0 = times[0] if times.size else 0.0
    x = times - t0
    markers = run.metrics.get("markers", {})
    steps = run.metrics.get("step_ends_s")
    batch = run.config.get("batch_size")
    has_rate = bool(steps) and bool(batch) and "first_step_start" in markers
    panels = 3 if has_rate else 2
    figure = new_figure(0.5 + 1.9 * panels)
    axes = figure.subplots(panels, 1, squeeze=False)[:, 0]
    axes[1].sharex(axes[0])
    legend = dict(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)

    def curve(ax: Any, name: str, label: str, scale: float = 1.0, **kw) -> None:
        values = np.array([np.nan if v is None else v for v in series[name]], dtype=float)
        dots = "." if len(values) < 20 else None  # a short run: show where the samples are
        ax.plot(x, values * scale, label=label, linewidth=1.4, marker=dots, **kw)

    usage = axes[0]
    _shade_stages(usage, markers, t0, label=True)
    gpu = sorted(n for n in series if GPU_UTILIZATION.match(n))
    if gpu:
        for name in gpu:
            index = GPU_UTILIZATION.match(name).group(1)
            curve(usage, name, f"GPU {index}: % of time a kernel ran\n(NVML; not SM occupancy)")
        usage.set_ylabel("GPU utilization, %")
        usage.set_title("GPU utilization (NVML: share of time a kernel ran)", fontsize=10)
        usage.set_ylim(0, 105)
    else:
        why = run.sampler.get("sources", {}).get("gpu", {}).get("reason", "no GPU series")
        if "process_cpu_percent" in series:
            curve(usage, "process_cpu_percent", "worker and children,\n% of one core", c="#444")
        if "system_cpu_percent" in series:
            curve(usage, "system_cpu_percent", "whole machine,\n% of all cores", c="#aaa")
        usage.set_ylabel("CPU, %")
        usage.set_ylim(bottom=0)
        usage.set_title(f"CPU use (no GPU utilization: {_clip(why, 80)})", fontsize=10)

    memory = axes[1]
    _shade_stages(memory, markers, t0)
    drawn_memory = False
    for name in series:
        if name == "process_rss_bytes":
            text = "host RSS of the worker\nand children (psutil)"
        elif GPU_PROCESS_MEMORY.match(name):
            text = f"GPU {GPU_PROCESS_MEMORY.match(name).group(1)} memory of the\nworker (NVML)"
        elif GPU_USED_MEMORY.match(name):
            text = f"GPU {GPU_USED_MEMORY.match(name).group(1)} memory used,\nall processes (NVML)"
        else:
            continue
        curve(memory, name, text, scale=1 / MIB)
        drawn_memory = True
    memory.set_ylabel("memory, MiB")
    memory.set_ylim(bottom=0)
    memory.set_title("Memory (each line names its kind)", fontsize=10)
    memory.set_xlabel("seconds since the worker started")

    width = None
    if has_rate:
        rate = axes[2]
        start = markers["first_step_start"] - t0
        edges, rates, width = step_rate(np.asarray(steps, dtype=float), batch, markers)
        _shade_stages(rate, markers, t0)
        rate.stairs(
            rates,
            start + edges,
            color=colour(run.config["backend"], backends),
            linewidth=1.6,
            label=f"img/s in {_seconds(width)} bins\n(batch size × steps ended\n"
            "in the bin / bin width)",
        )
        end = start + float(edges[-1])
        left, cut = start, False
        if markers.get("measured_start") and markers.get("measured_end"):
            # a warmup (compilation) far longer than the measured window would squeeze
            # the window into a sliver: show only its last part then
            opened = markers["measured_start"] - t0
            window = markers["measured_end"] - markers["measured_start"]
            if opened - start > window:
                left, cut = max(start, opened - window / 2), True
        margin = (end - left) * 0.03
        rate.set_xlim(left - margin, end + margin)
        rate.set_ylim(bottom=0)
        rate.set_ylabel("img/s")
        rate.set_xlabel(
            "seconds since the worker started (zoomed to the "
            + ("measured window; the start of the warmup is cut off)" if cut else "training steps)")
        )
        rate.set_title("Training throughput over time", fontsize=10)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(**legend)
        ax.grid(alpha=0.25)
    title = f"{TIMELINE_PREFIX}{run.config['backend']}, {group.label}"
    parts = [f"Run {run.run_id}"]
    repeats = len(group.runs_of(run.config["backend"]))
    if repeats > 1 and run.ok:
        parts.append(f"the repeat with the median img/s of {repeats}")
    if not run.ok:
        parts.append(f"it ended {run.status.upper()}: {run.reason}")
    if not has_rate and run.ok and run.kind == "train":
        parts.append("no img/s line: the document has no step_ends_s (written by an older kbench)")
    if not drawn_memory:
        parts.append("no memory series was sampled")
    labels_used = [labels[n] for n in gpu if labels.get(n)]
    if labels_used:
        parts.append(f"the utilization series, as the sampler labels it: {labels_used[0]}")
    parts.append(
        f"sampled every {run.sampler.get('interval_s', '?')} s; shaded: warmup steps "
        "(compilation, tracing) and the measured window"
    )
    return Drawn(title, png_of(figure), "; ".join(parts) + ".")


def step_rate(
    ends: np.ndarray, batch: int, markers: Dict[str, Any]
) -> Tuple[np.ndarray, np.ndarray, float]:
    """(bin edges, img/s per bin, bin width) from step end times (seconds after the first
    step began). Bins are sized so the measured window holds a few steps per bin, and an
    edge falls where the measured window opens."""
    span = max(float(ends[-1]), 1e-6)
    offset = 0.0
    if markers.get("measured_start") and markers.get("measured_end"):
        offset = min(max(markers["measured_start"] - markers["first_step_start"], 0.0), span)
        measured = markers["measured_end"] - markers["measured_start"]
        inside = int(np.sum(ends > offset))
    else:
        measured, inside = 0.0, 0
    if measured > 0 and inside > 0:
        width = measured / min(40, max(1, inside // 3))
    else:
        width = span / min(40, max(3, len(ends) // 4))
    width = max(width, span / 300)  # a long warmup next to a short window: at most 300 bins
    before = int(np.ceil(offset / width - 1e-9))
    after = int(np.ceil((span - offset) / width - 1e-9))
    edges = offset + width * np.arange(-before, after + 1)
    edges[0], edges[-1] = 0.0, span  # the end bins stop where the steps do
    if len(edges) > 2 and edges[1] - edges[0] < width / 2:  # too thin to read: merge
        edges = np.delete(edges, 1)
    if len(edges) > 2 and edges[-1] - edges[-2] < width / 2:
        edges = np.delete(edges, -2)
    counts, _ = np.histogram(ends, bins=edges)
    return edges, counts * batch / np.diff(edges), width


def _shade_stages(ax: Any, markers: Dict[str, Any], t0: float, label: bool = False) -> None:
    start, measured = markers.get("first_step_start"), markers.get("measured_start")
    end = markers.get("measured_end")
    if start is not None and measured is not None and measured > start:
        ax.axvspan(
            start - t0,
            measured - t0,
            color="#f6c85f",
            alpha=0.35,
            lw=0,
            label="warmup steps" if label else None,
        )
    if measured is not None and end is not None:
        ax.axvspan(
            measured - t0,
            end - t0,
            color="#9fd8a8",
            alpha=0.3,
            lw=0,
            label="measured window" if label else None,
        )


def _seconds(value: float) -> str:
    return f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- 7 accuracy


def accuracy_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    curves = []  # (group, backend, epochs, median accuracy per epoch)
    for group in groups:
        for backend in backends:
            runs = [r for r in group.runs_of(backend) if r.ok and r.kind == "train"]
            per_run = [
                r.metrics["epoch_train_accuracy"]
                for r in runs
                if r.metrics.get("epoch_train_accuracy")
                and None not in r.metrics["epoch_train_accuracy"]
            ]
            if per_run and max(len(a) for a in per_run) > 1:
                length = max(len(a) for a in per_run)
                median = [
                    statistics.median([a[i] for a in per_run if len(a) > i]) for i in range(length)
                ]
                curves.append((group, backend, median))
    lines = sweep_lines(
        [g for g in groups if g.config.get("mode", "train") == "train"],
        "epochs",
        lambda g: DROP if g.config.get("epochs") is None else g.config["epochs"],
    )
    if not curves and not lines:
        trained = [r for g in groups for r in g.runs if r.ok and r.kind == "train"]
        if trained and not any("epoch_train_accuracy" in r.metrics for r in trained):
            why = (
                "the documents have no per-epoch accuracy (epoch_train_accuracy; written by "
                "an older kbench)"
            )
        else:
            why = "no training run lasted more than one epoch"
        return Skipped(ACCURACY, f"{why}, and no runs differ only in --epochs")
    panels = (1 if curves else 0) + (1 if lines else 0)
    figure = new_figure(3.9, WIDTH_IN if panels == 2 else WIDTH_IN * 0.6)
    axes = list(figure.subplots(1, panels, squeeze=False)[0])
    several = len({g.key for g, _, _ in curves}) > 1
    if curves:
        ax = axes.pop(0)
        for group, backend, median in curves:
            epochs = list(range(1, len(median) + 1))
            label = f"{backend}, {group.label}" if several else backend
            ax.plot(epochs, median, marker="o", color=colour(backend, backends), label=label)
        ax.set_xlabel("epoch")
        ax.set_ylabel("training accuracy (fraction correct)")
        ax.set_title(
            "training accuracy (as Keras reports it over the epoch)"
            + ("" if several else f"\n{curves[0][0].label}"),
            fontsize=10,
        )
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if lines:
        ax = axes.pop(0)
        styles = _styles(lines)
        for line in lines:
            xs = [x for x, _ in line.points]
            spreads = [g.row(line.backend).test_accuracy for _, g in line.points]
            label = f"{line.model}: {_line_label(line, lines)}"
            c = colour(line.backend, backends)
            _spread_line(ax, xs, spreads, label, c, styles[(line.model, line.rest)])
        ax.set_xlabel("--epochs (passes over the training set)")
        ax.set_ylabel("test accuracy (fraction correct)")
        ax.set_title("final test accuracy against the number of epochs", fontsize=10)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    synthetic = any(g.comparison.synthetic for g in groups)
    caption = (
        "Training accuracy per epoch is the running figure Keras reports over each epoch "
        "(median over repeats); test accuracy is measured once after training."
    )
    if synthetic:
        caption += " Some runs used SYNTHETIC data: their accuracy says nothing about real data."
    lacking = list(
        dict.fromkeys(
            f"{r.config['backend']} ({g.label})"
            for g in groups
            for r in g.runs
            if r.ok and r.kind == "train" and "epoch_train_accuracy" not in r.metrics
        )
    )
    if curves and lacking:
        caption += (
            " No per-epoch accuracy in the documents of "
            + ", ".join(lacking)
            + " (written by an older kbench)."
        )
    return Drawn(ACCURACY, png_of(figure), caption)


RUNTIME_ACCURACY = "Runtime against final accuracy"


def runtime_accuracy_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    """One point per configuration (backend and setting): training time against test
    accuracy, so that a switch trading accuracy for speed shows."""
    points = []  # (backend, group, median training seconds, median test accuracy)
    for group in groups:
        for backend in backends:
            runs = [
                r
                for r in group.runs_of(backend)
                if r.ok and r.kind == "train" and r.metrics.get("epoch_time_s")
            ]
            if runs:
                seconds = statistics.median(sum(r.metrics["epoch_time_s"]) for r in runs)
                accuracy = statistics.median(r.metrics["test_accuracy"] for r in runs)
                points.append((backend, group, seconds, accuracy))
    if len(points) < 3 or len({g.key for _, g, _, _ in points}) < 2:
        return Skipped(
            RUNTIME_ACCURACY,
            "fewer than three trained configurations in more than one setting to set against "
            "each other",
        )
    figure = new_figure(4.6, WIDTH_IN * 0.8)
    ax = figure.subplots()
    seen = set()
    several_models = len({g.model for _, g, _, _ in points}) > 1
    for backend, group, seconds, accuracy in points:
        ax.scatter(
            seconds,
            accuracy,
            color=colour(backend, backends),
            label=None if backend in seen else backend,
            s=36,
            zorder=3,
        )
        seen.add(backend)
        text = group.label if several_models else group.setting
        if text:
            ax.annotate(
                text, (seconds, accuracy), fontsize=7, xytext=(4, 3),
                textcoords="offset points", color="#444444",
            )  # fmt: skip
    ax.set_xlabel("training time, s (sum of epoch wall times, median over repeats)")
    ax.set_ylabel("test accuracy after training (fraction correct)")
    ax.set_title("runtime against final accuracy, one point per configuration", fontsize=10)
    if max(p[2] for p in points) > LOG_SCALE_ABOVE * min(p[2] for p in points):
        log_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    caption = (
        "Each point is a backend under one setting (labelled beside it, e.g. a switch on): "
        "faster is further left, more accurate is higher. The epoch times include the "
        "warmup steps and compilation, as a user waiting for the training sees them."
    )
    if any(g.comparison.synthetic for _, g, _, _ in points):
        caption += " Some runs used SYNTHETIC data: their accuracy says nothing about real data."
    return Drawn(RUNTIME_ACCURACY, png_of(figure), caption)
