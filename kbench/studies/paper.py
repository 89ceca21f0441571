"""The report's "Paper vs this machine" section, for a store that holds a published
study's sweep (:mod:`kbench.studies.published`): the claims table (:mod:`kbench.studies.claims`)
and, where the study names them, plots of the paper's figures beside this machine's
numbers on the same axes (for example img/s against batch size per backend).

The two sides are drawn in separate panels with their own y axes: the paper's hardware is
not this machine, and its absolute figures are context, never a target.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.results.analysis import Spread
from kbench.results.result import RunResult
from kbench.studies.claims import METRICS, ROUNDS_NEEDED, Defined, evaluate, matches
from kbench.studies.published import PaperPlot, Study, StudyError, run_matches, study_of_sweep
from kbench.studies.reproduce import (
    MachineVerdicts,
    machine_claims_tables,
    per_machine,
    study_sweep,
)
from kbench.studies.sweep import SweepError
from kbench.views import figures as fig
from kbench.views.report import Section


def study_of(results: Sequence[RunResult]) -> Optional[Tuple[Study, str]]:
    """The study whose sweep the results come from, with that sweep's name, if any."""
    for name in dict.fromkeys((r.sweep or {}).get("name") for r in results):
        if name:
            study = study_of_sweep(name)
            if study is not None:
                return study, name
    return None


def paper_section(results: Sequence[RunResult]) -> Optional[Section]:
    """The report's "Paper vs this machine" section of a published study's store: the
    claims table and the paper's figures beside this machine's; None when the results
    are no study's. Only the runs of the study's sweep count."""
    found = study_of(results)
    if found is None:
        return None
    study, name = found
    mine = [r for r in results if (r.sweep or {}).get("name") == name]
    reduced = any((r.sweep or {}).get("reduced") for r in mine)
    defined = _defined(study, reduced)
    judged = [
        MachineVerdicts(host, runs, evaluate(study, runs, defined=defined))
        for host, runs in per_machine(mine).items()
    ]  # a table per machine where several ran the sweep
    return Section(
        id="paper",
        heading="Paper vs this machine",
        intro=intro(study, reduced),
        tables=machine_claims_tables(study, judged),
        outcomes=[paper_plot(study, plot, mine) for plot in study.plots],
    )


def _defined(study: Study, reduced: bool) -> Optional[Defined]:
    """Whether the study's sweep (at this size) has runs for a selector; None where the
    sweep file cannot be read here (then every ordering item counts)."""
    try:
        sweep = study_sweep(study, reduced)
    except (StudyError, SweepError):
        return None
    return lambda selector: any(run_matches(run, selector) for run in sweep.runs)


def intro(study: Study, reduced: bool = False) -> str:
    size = (
        "This store holds the study's reduced sweep (smaller inputs, fewer runs; the study "
        f"file says what that changes: {study.reduced_note or 'no note'}). "
        if reduced
        else "This store holds the study's full-size sweep. "
    )
    return (
        f"{study.title} ({study.source}; {study.document}). The paper's machine: "
        f"{study.hardware_text()}; {study.versions_text()}. {size}Verdicts use ratios of "
        "runs measured here, round by round, and the 95% interval on their median decides "
        f"(from {ROUNDS_NEEDED} rounds; fewer, or flagged runs, give inconclusive); the "
        "paper's absolute figures are context."
    )


def _points(results: Sequence[RunResult], plot: PaperPlot) -> Dict[Any, Dict[Any, Spread]]:
    """series value -> x -> this machine's spread of the plot's metric."""
    read = METRICS[plot.metric][1]
    values: Dict[Any, Dict[Any, List[float]]] = {}
    for r in results:
        if not r.ok or not matches(r, plot.where):
            continue
        value = read(r)
        if value is not None:
            series, x = r.config.get(plot.series), r.config.get(plot.x)
            values.setdefault(series, {}).setdefault(x, []).append(value)
    return {s: {x: Spread.of(v) for x, v in xs.items()} for s, xs in values.items()}


def paper_plot(study: Study, plot: PaperPlot, results: Sequence[RunResult]) -> Any:
    title = f"Paper vs this machine: {plot.title}"
    here = _points(results, plot)
    if not here:
        return fig.Skipped(
            title, f"no finished run of this store has {plot.where} and {plot.metric}"
        )
    published: Dict[Any, List[Tuple[Any, float]]] = {}
    for figure_id in plot.figures:
        figure = study.figures[figure_id]
        if figure.value is not None:
            published.setdefault(figure.at[plot.series], []).append(
                (figure.at[plot.x], figure.value)
            )
    series = list(dict.fromkeys([*published, *here]))
    names = [str(s) for s in series]
    canvas = fig.new_figure(4.2)
    left, right = fig.panel_grid(canvas, 2, 2)
    units = {study.figures[f].units for f in plot.figures}
    for name, value in zip(names, series):
        colour = fig.colour(name, names)
        points = sorted(published.get(value, []), key=lambda p: p[0])
        if points:
            left.plot(
                [p[0] for p in points], [p[1] for p in points], "o--", color=colour, label=name
            )
        mine = sorted(here.get(value, {}).items(), key=lambda p: p[0])
        if mine:
            xs = [x for x, _ in mine]
            medians = [s.median for _, s in mine]
            low = [s.median - s.low for _, s in mine]
            high = [s.high - s.median for _, s in mine]
            right.errorbar(
                xs, medians, yerr=[low, high], marker="o", capsize=3, color=colour, label=name
            )
    left.set_title(f"paper: {study.hardware.get('gpu') or study.hardware_text()[:60]}", fontsize=10)
    right.set_title("this machine (median, range over repeats)", fontsize=10)
    left.set_ylabel(", ".join(sorted(units)) + " (as published)")
    right.set_ylabel(METRICS[plot.metric][0])
    for ax in (left, right):
        ax.set_xlabel(plot.x)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=9)
    reduced = any((r.sweep or {}).get("reduced") for r in results)
    caption = (
        f"Left: the paper's figures ({', '.join(plot.figures)}); right: this store's runs of "
        f"{plot.where or 'the sweep'}. Separate y axes: different hardware"
        + (", and this store ran the reduced sweep (smaller inputs)." if reduced else ".")
    )
    return fig.Drawn(title, fig.png_of(canvas), caption)
