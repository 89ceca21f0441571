"""Tables and figures of data-parallel runs (``--distributed``): a row per run (mode,
backend, workers, global img/s with its quality flags, scaling efficiency, the mean time
per step of each phase, the slowest worker), by model and setting, then mode (in the order
of :data:`kbench.results.config.DISTRIBUTED`), backend, workers. A run that did not finish
shows its status; the notes give its reason.
"""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Sequence, Tuple

from kbench.distributed.merge import (
    ASYNCHRONOUS,
    HEADERS,
    NUMERIC,
    PHASES,
    breakdown_cells,
    distributed_results,
)
from kbench.results.analysis import varying_settings
from kbench.results.config import DISTRIBUTED, default_of, settings
from kbench.results.result import RunResult
from kbench.views import figures, setting_plots
from kbench.views.tables import QUALITY_NOTE, Table, run_flagged

TITLE = "Data-parallel training: global throughput, scaling efficiency, time per step"
BREAKDOWN = "Data-parallel step breakdown"
SCALING = "Data-parallel scaling"
PHASE_COLOURS = {"data": "#9c755f", "forward": "#4e79a7", "backward": "#f28e2b",
                 "update": "#59a14f", "comm": "#bab0ac"}  # fmt: skip
PHASE_NAMES = {"comm": "communication and waiting"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MAX_REASONS = 12
SKIP = ("distributed", "workers")  # what a row shows in its own columns


def _config(result: RunResult) -> Dict[str, Any]:
    """The run's settings, one older documents lack read as its default."""
    return {**{name: default_of(name) for name in settings()}, **result.config}


def _setting_keys(runs: Sequence[RunResult]) -> List[str]:
    return varying_settings([_config(r) for r in runs], skip=SKIP)


def _setting(result: RunResult, keys: Sequence[str]) -> str:
    return figures.describe_setting(_config(result), keys) or "defaults"


def _mode_rank(mode: str) -> int:
    modes = list(DISTRIBUTED)
    return modes.index(mode) if mode in modes else len(modes)


def _sortable(value: Any) -> Tuple[int, Any]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))


def _ordered(runs: Sequence[RunResult], keys: Sequence[str]) -> List[RunResult]:
    return sorted(runs, key=lambda r: (
        r.config["model"], tuple(_sortable(_config(r).get(k)) for k in keys),
        _mode_rank(r.config["distributed"]), r.config["backend"], r.config["workers"],
        r.started_at,
    ))  # fmt: skip


def _notes(runs: Sequence[RunResult]) -> List[str]:
    notes = [
        "img/s (global): every worker's measured images over the union of their measured "
        "windows (warmup excluded); --batch-size is per worker",
        "efficiency: img/s / (workers x img/s of the newest one-worker run of the same mode "
        "and settings on the same host, in the store when the run finished); - where there "
        "was none",
        "ms: mean per measured step, averaged over the workers; comm = step - data - forward "
        "- backward - update: the gradient exchange and waiting for the other workers (and "
        "the update, where the engine fuses it with the exchange: update -)",
        "slowest worker: the rank with the most time of its own per step (data + forward + "
        "backward + update), with its mean step ms",
    ]
    asynchronous = sorted({r.config["distributed"] for r in runs} & set(ASYNCHRONOUS))
    if asynchronous:
        notes.append(
            f"{', '.join(asynchronous)}: asynchronous, a worker does not wait for the others; "
            "its comm is the exchange with the parameter server and the update there"
        )
    scalings = [(r.metrics["distributed"].get("scaling") or {}) for r in runs if r.ok]
    mixed = [s for s in scalings if s.get("caveat")]
    if mixed:
        notes.append(
            f"{len(mixed)} run(s) did not fix --threads: their efficiency mixes thread "
            "scaling in (a one-worker run had every core, each of N workers a share)"
        )
    unfinished: Dict[Tuple[str, str], List[str]] = {}  # (status, reason) -> the runs
    for r in runs:
        if not r.ok:
            c = r.config
            label = f"{c['distributed']} {c['backend']}/{c['model']} x{c['workers']}"
            unfinished.setdefault((r.status.upper(), str(r.reason)), []).append(label)
    reasons = [
        f"{', '.join(labels)}: {status}: {reason}"
        for (status, reason), labels in unfinished.items()
    ]
    if len(reasons) > MAX_REASONS:
        reasons = reasons[:MAX_REASONS] + [f"... and {len(reasons) - MAX_REASONS} more"]
    return notes + reasons


def breakdown_tables(results: Sequence[RunResult]) -> List[Table]:
    runs = distributed_results(results)
    if not runs:
        return []
    keys = _setting_keys(runs)
    headers = ["model", *(["setting"] if keys else []), *HEADERS]
    rows = [
        [r.config["model"], *([_setting(r, keys)] if keys else []), *_flagged_cells(r)]
        for r in _ordered(runs, keys)
    ]
    flagged = any((r.metrics.get("quality") or {}).get("flags") for r in runs)
    return [Table(TITLE, headers, rows, _notes(runs) + ([QUALITY_NOTE] if flagged else []))]


def _flagged_cells(result: RunResult) -> List[str]:
    cells = breakdown_cells(result)
    column = HEADERS.index("img/s (global)")
    if result.ok:
        cells[column] = run_flagged(cells[column], result)
    return cells


def numeric_columns(table: Table) -> Tuple[int, ...]:
    offset = len(table.headers) - len(HEADERS)
    return tuple(offset + i for i in NUMERIC)


def _panels(runs: Sequence[RunResult], keys: Sequence[str]) -> Dict[str, List[RunResult]]:
    panels: Dict[str, List[RunResult]] = {}
    for run in _ordered(runs, keys):
        title = run.config["model"] + (f", {_setting(run, keys)}" if keys else "")
        if run.data.get("synthetic"):
            title += " [SYNTHETIC DATA]"
        panels.setdefault(title, []).append(run)
    return panels


def breakdown_figures(results: Sequence[RunResult]) -> List[Any]:
    runs = distributed_results(results)
    if not runs:
        return []
    keys = _setting_keys(runs)
    return [breakdown_plot(runs, keys), scaling_plot(runs, keys)]


def breakdown_plot(runs: Sequence[RunResult], keys: Sequence[str]) -> Any:
    if not any(r.ok for r in runs):
        return figures.Skipped(BREAKDOWN, "no data-parallel run finished")
    panels = _panels(runs, keys)
    columns = min(2, len(panels))
    tallest = max(len(members) for members in panels.values())
    figure = figures.new_figure((0.26 * tallest + 1.3) * -(-len(panels) // columns) + 0.4)
    for ax, (title, members) in zip(
        figures.panel_grid(figure, len(panels), columns), panels.items()
    ):
        labels = []
        for y, run in enumerate(members):
            c = run.config
            repeat = c.get("repeat", 0)
            labels.append(
                f"{c['distributed']} {c['backend']} x{c['workers']}"
                + (f" #{repeat + 1}" if repeat else "")
            )
            if not run.ok:
                ax.text(0, y, f" {run.status.upper()}", va="center", fontsize=8,
                        color=figures.NOT_OK_COLOUR, fontweight="bold")  # fmt: skip
                continue
            mean = run.metrics["distributed"]["breakdown"]["mean"]
            left = 0.0
            for phase in PHASES:
                width = max((mean[f"{phase}_s"] or 0.0) * 1000, 0.0)
                ax.barh(y, width, left=left, height=0.7, color=PHASE_COLOURS[phase],
                        label=PHASE_NAMES.get(phase, phase))  # fmt: skip
                left += width
        ax.set_yticks(range(len(members)))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("mean time per step (ms)")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    figures.shared_legend(figure, 9)
    caption = (
        "One bar per run: the mean time per measured step of each phase, averaged over the "
        "workers (data: the worker's batch from its shard to the framework; forward; "
        "backward; update where the engine runs it apart from the exchange; communication "
        "and waiting: the rest of the step, drawn as zero where it comes out negative, as "
        "JAX's can). A red label marks a run that did not finish; its reason is under the "
        "table."
    )
    return figures.Drawn(BREAKDOWN, figures.png_of(figure), caption)


def scaling_plot(runs: Sequence[RunResult], keys: Sequence[str]) -> Any:
    ok = [r for r in runs if r.ok]
    if len({r.config["workers"] for r in ok}) < 2:
        return figures.Skipped(SCALING, "no mode finished runs with more than one worker count")
    panels = _panels(ok, keys)
    columns = min(2, len(panels))
    figure = figures.new_figure(3.8 * -(-len(panels) // columns) + 0.3)
    backends = figures.backend_order(ok)
    for ax, (title, members) in zip(
        figures.panel_grid(figure, len(panels), columns), panels.items()
    ):
        lines: Dict[Tuple[str, str], Dict[int, List[float]]] = {}
        for run in members:
            key = (run.config["distributed"], run.config["backend"])
            points = lines.setdefault(key, {})
            points.setdefault(run.config["workers"], []).append(run.metrics["images_per_sec"])
        for (mode, backend), points in lines.items():
            xs = sorted(points)
            ys = [statistics.median(points[x]) for x in xs]
            rank = _mode_rank(mode)
            ax.plot(xs, ys, label=f"{mode} {backend}", color=figures.colour(backend, backends),
                    linestyle=setting_plots.STYLES[rank % len(setting_plots.STYLES)],
                    marker=MARKERS[rank % len(MARKERS)])  # fmt: skip
        counts = sorted({r.config["workers"] for r in members})
        ax.set_xticks(counts)
        ax.set_xlim(min(counts) - 0.3, max(counts) + 0.3)
        ax.set_xlabel("workers")
        ax.set_ylim(bottom=0)
        ax.set_ylabel("images per second, global (img/s)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    caption = (
        "Global img/s (every worker's measured images over their common measured window) "
        "against the number of workers, a line per mode (line style and marker) and backend "
        "(colour); the median where a setting ran more than once. Perfect scaling would "
        "rise in proportion to the workers; the table's efficiency column gives the ratio. "
        "Runs that did not finish are left out (see the table)."
    )
    return figures.Drawn(SCALING, figures.png_of(figure), caption)
