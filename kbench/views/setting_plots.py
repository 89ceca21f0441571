"""Figures against a swept setting, one line per model and backend over the groups that
differ only there: throughput against batch size, GPU memory fraction (with memory) and
CPU threads; accuracy against epochs; and runtime against final accuracy."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.results.analysis import Spread, row_memory, varying_settings
from kbench.results.readings import memory_peak, no_gpu_reason
from kbench.results.result import RunResult
from kbench.views.figures import (
    LOG_SCALE_ABOVE,
    MIB,
    NOT_OK_COLOUR,
    WIDTH_IN,
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
    """Lines per model and backend of groups that differ only in ``key`` (x from ``x_of``,
    DROP leaves one out), of two x values or more."""
    partitions: Dict[Tuple, List[Tuple[Any, RunGroup]]] = {}
    for group in groups:
        x = x_of(group)
        if x is DROP:
            continue
        rest = tuple(item for item in group.key if item[0] != key)
        partitions.setdefault(rest, []).append((x, group))
    partitions = {k: v for k, v in partitions.items() if len({repr(x) for x, _ in v}) > 1}
    rest_configs = [members[0][1].config for members in partitions.values()]
    rest_keys = varying_settings(rest_configs, skip=(key,))
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
    medians = np.array([s.median for _, s in pairs])
    low = medians - np.array([s.low for _, s in pairs])
    high = np.array([s.high for _, s in pairs]) - medians
    ax.errorbar([x for x, _ in pairs], medians, yerr=[low, high], label=label, color=colour_,
                linestyle=style, marker="o", capsize=3)  # fmt: skip


def _rate_axis(ax: Any, lines: Sequence[SweepLine]) -> None:
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
    for x, (_, group) in zip(xs, line.points):
        row = group.row(line.backend)
        if row is not None and row.images_per_sec is None:
            ax.annotate(
                f"{line.backend}: {not_ok_text(row.statuses)}", (x, 0),
                xycoords=("data", "axes fraction"),  # at the foot of the axis, log or not
                xytext=(0, 4), textcoords="offset points", rotation=90, ha="center",
                va="bottom", color=NOT_OK_COLOUR, fontsize=8,
            )  # fmt: skip


STYLES = ("-", "--", ":", "-.")


def line_styles(lines: Sequence[SweepLine]) -> Dict[Tuple[str, str], str]:
    out: Dict[Tuple[str, str], str] = {}
    for line in lines:
        rests = list(dict.fromkeys(ln.rest for ln in lines if ln.model == line.model))
        out[(line.model, line.rest)] = STYLES[rests.index(line.rest) % len(STYLES)]
    return out


def rate_panels(
    lines: Sequence[SweepLine], backends: Sequence[str], x_axis: Callable[[Any, List], None]
) -> Any:
    """A panel per model: each line's img/s against its x (``x_axis`` sets the x axis)."""
    models = list(dict.fromkeys(line.model for line in lines))
    columns = min(2, len(models))
    figure = new_figure(3.8 * -(-len(models) // columns) + 0.3)
    styles = line_styles(lines)
    for ax, model in zip(panel_grid(figure, len(models), columns), models):
        mine = [ln for ln in lines if ln.model == model]
        for line in mine:
            xs = [x for x, _ in line.points]
            spreads = [g.row(line.backend).images_per_sec for _, g in line.points]
            c = colour(line.backend, backends)
            spread_line(ax, xs, spreads, line_label(line, lines), c, styles[(model, line.rest)])
            _mark_failures(ax, xs, line)
        x_axis(ax, mine)
        _rate_axis(ax, mine)
        ax.set_title(model_title(model, [g for ln in mine for _, g in ln.points]), fontsize=11)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    return figure


def batch_size_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    lines = sweep_lines(groups, "batch_size", lambda g: g.config["batch_size"])
    if not lines:
        return Skipped(BATCH_SIZE, "no model ran at more than one batch size with all else equal")

    def x_axis(ax: Any, mine: List[SweepLine]) -> None:
        sizes = sorted({x for ln in mine for x, _ in ln.points})
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(sizes) / 1.25, max(sizes) * 1.25)  # room for markers at the ends
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(s) for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("batch size (samples per step, log scale)")

    caption = (
        "Median img/s over repeats at each batch size (error bars: lowest to highest "
        "repeat), one line per backend, between runs that differ only in batch size."
    )
    return Drawn(BATCH_SIZE, png_of(rate_panels(lines, backends, x_axis)), caption)


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
        why = "no model ran at more than one gpu_memory_fraction with all else equal"
        return Skipped(MEMORY_FRACTION, why)
    models = list(dict.fromkeys(line.model for line in lines))
    figure = new_figure(3.6 * len(models) + 0.4)
    axes = figure.subplots(len(models), 2, squeeze=False)
    styles = line_styles(lines)
    for (speed_ax, memory_ax), model in zip(axes, models):
        mine = [ln for ln in lines if ln.model == model]
        values = sorted({x for ln in mine for x, _ in ln.points}, key=_sort_x)
        position = {repr(v): i for i, v in enumerate(values)}
        runs = [r for ln in mine for _, g in ln.points for r in g.runs_of(ln.backend) if r.ok]
        kind = row_memory(runs).kind
        for line in mine:
            xs = [position[repr(x)] for x, _ in line.points]
            c, style = colour(line.backend, backends), styles[(model, line.rest)]
            label = line_label(line, lines)
            spreads = [g.row(line.backend).images_per_sec for _, g in line.points]
            spread_line(speed_ax, xs, spreads, label, c, style)
            _mark_failures(speed_ax, xs, line)
            if kind:
                memory = [_memory_mib(g.runs_of(line.backend), kind) for _, g in line.points]
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


def _memory_mib(runs: Sequence[RunResult], kind: str) -> Optional[Spread]:
    peaks = [memory_peak(r, kind) for r in runs if r.ok]
    return Spread.of([p.largest / MIB for p in peaks if p is not None])


def threads_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    if len({repr(g.config.get("threads")) for g in groups}) < 2:
        return Skipped(THREADS, "every run used the same --threads setting")

    def threads_of(group: RunGroup) -> Optional[int]:
        counts = {effective_threads(r) for r in group.runs}
        return counts.pop() if len(counts) == 1 and None not in counts else DROP

    lines = sweep_lines(groups, "threads", threads_of)
    if not lines:
        return Skipped(THREADS, "no model ran at more than one thread count with all else equal")

    def x_axis(ax: Any, mine: List[SweepLine]) -> None:
        counts = sorted({x for ln in mine for x, _ in ln.points})
        defaults = {x for ln in mine for x, g in ln.points if g.config.get("threads") is None}
        ax.set_xticks(counts)
        ax.set_xticklabels([f"{c}\n(all cores)" if c in defaults else str(c) for c in counts])
        ax.set_xlim(min(counts) - 0.5, max(counts) + 0.5)
        ax.set_xlabel("CPU threads (intra-op, inter-op and OpenMP)")

    caption = (
        "Median img/s over repeats (error bars: lowest to highest repeat) against the CPU "
        "threads each framework was given. '(all cores)': --threads unset, so every core; "
        "the count is what OMP_NUM_THREADS was set to. Other work on the machine competes "
        "for the same cores."
    )
    return Drawn(THREADS, png_of(rate_panels(lines, backends, x_axis)), caption)


ACCURACY = "Accuracy"


def accuracy_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    curves = accuracy_curves(groups, backends)
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
    if curves:
        _curves_panel(axes.pop(0), curves, backends)
    if lines:
        _epochs_panel(axes.pop(0), lines, backends)
    return Drawn(ACCURACY, png_of(figure), _accuracy_caption(groups, bool(curves)))


Curve = Tuple[RunGroup, str, List[float]]  # group, backend, median accuracy per epoch


def accuracy_curves(groups: Sequence[RunGroup], backends: Sequence[str]) -> List[Curve]:
    curves = []
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
    return curves


def _curves_panel(ax: Any, curves: Sequence[Curve], backends: Sequence[str]) -> None:
    several = len({g.key for g, _, _ in curves}) > 1
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
    _fraction_axis(ax)


def _epochs_panel(ax: Any, lines: Sequence[Any], backends: Sequence[str]) -> None:
    styles = line_styles(lines)
    for line in lines:
        xs = [x for x, _ in line.points]
        spreads = [g.row(line.backend).test_accuracy for _, g in line.points]
        label = f"{line.model}: {line_label(line, lines)}"
        c = colour(line.backend, backends)
        spread_line(ax, xs, spreads, label, c, styles[(line.model, line.rest)])
    ax.set_xlabel("--epochs (passes over the training set)")
    ax.set_ylabel("test accuracy (fraction correct)")
    ax.set_title("final test accuracy against the number of epochs", fontsize=10)
    _fraction_axis(ax)


def _fraction_axis(ax: Any) -> None:
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _accuracy_caption(groups: Sequence[RunGroup], curves: bool) -> str:
    caption = (
        "Training accuracy per epoch is the running figure Keras reports over each epoch "
        "(median over repeats); test accuracy is measured once after training."
    )
    if any(g.comparison.synthetic for g in groups):
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
    return caption


RUNTIME_ACCURACY = "Runtime against final accuracy"


def runtime_accuracy_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
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
        ax.scatter(seconds, accuracy, color=colour(backend, backends),
                   label=None if backend in seen else backend, s=36, zorder=3)  # fmt: skip
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
