"""Throughput against a swept setting: batch size, GPU memory fraction (with memory),
CPU threads; one line per model and backend over the groups that differ only there."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.results.analysis import Spread
from kbench.results.readings import MEMORY_KINDS, memory_peak, memory_peaks, no_gpu_reason
from kbench.results.result import RunResult
from kbench.views.figures import (
    LOG_SCALE_ABOVE,
    MIB,
    NOT_OK_COLOUR,
    Drawn,
    Outcome,
    RunGroup,
    Skipped,
    colour,
    describe_setting,
    effective_threads,
    has_rate,
    log_axis,
    model_title,
    new_figure,
    not_ok_text,
    panel_grid,
    png_of,
    varying_keys,
)
from kbench.views.tables import MEMORY_LABELS

BATCH_SIZE = "Throughput against batch size"
MEMORY_FRACTION = "Throughput and memory against the GPU memory fraction"
THREADS = "CPU thread scaling"


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
        rows = [row.backend for _, g in members for row in g.comparison.rows]
        for backend in dict.fromkeys(rows):  # as compare named them (backend @ host)
            points = [(x, g) for x, g in members if g.row(backend)]
            lines.append(SweepLine(first.model, backend, rest, points))
    return lines


def _sort_x(x: Any) -> Tuple:
    return (1, 0) if x is None or isinstance(x, str) else (0, x)


def line_label(line: SweepLine, lines: Sequence[SweepLine]) -> str:
    several = len({(ln.rest) for ln in lines if ln.model == line.model}) > 1
    return f"{line.backend} ({line.rest})" if several and line.rest else line.backend


def spread_line(
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
        if has_rate(g.row(ln.backend))
    ]
    low = min((s.low for s in spreads), default=0.0)
    high = max((s.high for s in spreads), default=1.0)
    if low > 0 and high / low > LOG_SCALE_ABOVE:
        log_axis(ax)
        ax.set_ylabel("images per second (img/s, log scale)")
    else:
        ax.set_ylim(bottom=0)
        ax.set_ylabel("images per second (img/s)")


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


def line_styles(lines: Sequence[SweepLine]) -> Dict[Tuple[str, str], str]:
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
    styles = line_styles(lines)
    for ax, model in zip(panel_grid(figure, len(models), columns), models):
        mine = [ln for ln in lines if ln.model == model]
        sizes = sorted({x for ln in mine for x, _ in ln.points})
        for line in mine:
            xs = [x for x, _ in line.points]
            spreads = [g.row(line.backend).images_per_sec for _, g in line.points]
            c = colour(line.backend, backends)
            spread_line(ax, xs, spreads, line_label(line, lines), c, styles[(model, line.rest)])
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
    styles = line_styles(lines)
    for (speed_ax, memory_ax), model in zip(axes, models):
        mine = [ln for ln in lines if ln.model == model]
        values = sorted({x for ln in mine for x, _ in ln.points}, key=_sort_x)
        position = {repr(v): i for i, v in enumerate(values)}
        runs = [r for ln in mine for _, g in ln.points for r in g.runs_of(ln.backend) if r.ok]
        kind = _common_memory_kind(runs)
        for line in mine:
            xs = [position[repr(x)] for x, _ in line.points]
            c, style = colour(line.backend, backends), styles[(model, line.rest)]
            label = line_label(line, lines)
            spreads = [g.row(line.backend).images_per_sec for _, g in line.points]
            spread_line(speed_ax, xs, spreads, label, c, style)
            _mark_failures(speed_ax, xs, line)
            if kind:
                memory = [
                    _spread_of(
                        [_largest(r, kind) for r in g.runs_of(line.backend) if r.ok],
                        scale=1 / MIB,
                    )
                    for _, g in line.points
                ]
                spread_line(memory_ax, xs, memory, label, c, style)
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
            memory_ax.set_title(MEMORY_LABELS.get(kind, kind), fontsize=10)
        else:
            memory_ax.set_axis_off()
            memory_ax.text(
                0.5, 0.5, "no memory readings", ha="center", transform=memory_ax.transAxes
            )
    caption = (
        "Left: median img/s over repeats (error bars: lowest to highest repeat). Right: "
        "peak memory, of the kind named above the panel (median over repeats; the largest "
        "GPU's where a run used several). 'no cap' is "
        "the framework's own default (TensorFlow takes nearly all GPU memory, JAX 75 %)."
    )
    reason = no_gpu_reason(results)
    if reason:
        caption += (
            f" No run had a GPU ({reason}): the fraction only applies to GPU memory, so "
            "here it has no effect and any difference is run-to-run noise."
        )
    return Drawn(MEMORY_FRACTION, png_of(figure), caption)


def _largest(run: RunResult, kind: str) -> Optional[int]:
    peak = memory_peak(run, kind)
    return None if peak is None else peak.largest


def _common_memory_kind(runs: Sequence[RunResult]) -> Optional[str]:
    kinds = [set(memory_peaks(r)) for r in runs]
    for kind in MEMORY_KINDS:
        if kinds and all(kind in k for k in kinds):
            return kind
    return None


def _spread_of(values: Sequence[Optional[float]], scale: float = 1.0) -> Optional[Any]:
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
    styles = line_styles(lines)
    for ax, model in zip(panel_grid(figure, len(models), columns), models):
        mine = [ln for ln in lines if ln.model == model]
        counts = sorted({x for ln in mine for x, _ in ln.points})
        defaults = {x for ln in mine for x, g in ln.points if g.config.get("threads") is None}
        for line in mine:
            xs = [x for x, _ in line.points]
            spreads = [g.row(line.backend).images_per_sec for _, g in line.points]
            c = colour(line.backend, backends)
            spread_line(ax, xs, spreads, line_label(line, lines), c, styles[(model, line.rest)])
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
