"""Accuracy: training curves and test accuracy against epochs; runtime against final
accuracy, one point per configuration."""

from __future__ import annotations

import statistics
from typing import Any, List, Sequence, Tuple

from kbench.views.figures import (
    LOG_SCALE_ABOVE,
    WIDTH_IN,
    Drawn,
    Outcome,
    RunGroup,
    Skipped,
    colour,
    log_axis,
    new_figure,
    png_of,
)
from kbench.views.setting_plots import DROP, line_label, line_styles, spread_line, sweep_lines

ACCURACY = "Accuracy"


def accuracy_plot(groups: Sequence[RunGroup], backends: Sequence[str]) -> Outcome:
    """Training accuracy per epoch (runs of more than one epoch) and test accuracy
    against ``--epochs`` (runs that differ only there), side by side."""
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
    """Each backend's training accuracy per epoch in each group (the median over its
    repeats), where some run lasted more than one epoch."""
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
