"""A published study reproduced: its sweep, and its claims checked against that sweep.

:func:`study_sweep` loads the study's sweep file (full size or reduced, narrowed by the
study's ``reduced.only``); :func:`check_study` makes sure every claim and plot refers to
runs the sweep defines, one run per side and round, and to metrics kbench records, so
that a typo in a selector fails when the file is checked, not as "runs missing" after an
hour of runs. :func:`as_asked` sets the rounds (``--repeats``) and the precision goal of
its runs; :func:`verdicts` judges the claims on exactly the runs planned, machine by
machine where several ran the sweep (:func:`machine_verdicts`: no per-round ratio pools
two machines, each machine's verdicts headed by its hardware); :func:`write_machine_claims`
keeps them as ``claims.md`` and ``claims.json`` in the store; :func:`paper_section` is the
report's "Paper vs this machine".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.measure import sysinfo
from kbench.results.analysis import Spread
from kbench.results.config import ConfigError
from kbench.results.jsonfile import finite, write_json_atomic, write_text_atomic
from kbench.results.result import RunResult
from kbench.results.store import Filter, ResultStore, StoreError
from kbench.studies.claims import (
    METRICS,
    ROUNDS_NEEDED,
    ClaimOutcome,
    Defined,
    claims_table,
    claims_text,
    evaluate,
    outcomes_json,
)
from kbench.studies.published import (
    PaperPlot,
    Study,
    StudyError,
    find_study,
    in_scope,
    load_study,
    run_matches,
    setting_of,
    study_files,
    study_of_sweep,
)
from kbench.studies.rounds import check_ratio_rounds, how_to_measure
from kbench.studies.sweep import (
    RUN_FIELDS,
    Sweep,
    SweepError,
    SweepRun,
    load_sweep,
    run_key,
    sweep_run_of,
)
from kbench.views import figures as fig
from kbench.views.machines import hardware_text, mixed_note, newest_per_machine, several_machines
from kbench.views.report import Section
from kbench.views.tables import Table, render


def study_sweep(study: Study, reduced: bool) -> Sweep:
    """The study's sweep; with ``reduced``, its reduced runs narrowed by ``reduced.only``."""
    path = study.sweep_path()
    if not path.is_file():
        raise StudyError(
            study.file,
            "sweep",
            f"expected a sweep file at {path}; there is none. "
            "Name one of sweeps/*.yaml, relative to the folder above studies/.",
        )
    sweep = load_sweep(path, reduced=reduced)
    if not reduced or not study.reduced_only:
        return sweep
    for name in study.reduced_only:
        if name not in RUN_FIELDS:
            raise StudyError(
                study.file, f"reduced.only.{name}", f"expected a run setting; received {name!r}."
            )
    runs = [run for run in sweep.runs if in_scope(run, study.reduced_only)]
    if not runs:
        raise StudyError(
            study.file,
            "reduced.only",
            f"expected a filter that keeps some of "
            f"{sweep.file}'s reduced runs; {study.reduced_only!r} keeps none.",
        )
    return replace(sweep, runs=runs)


def check_study(study: Study) -> List[str]:
    """What in the study does not fit its sweep, one sentence each (empty: all fits)."""
    problems: List[str] = []
    try:
        sweeps = {False: study_sweep(study, False), True: study_sweep(study, True)}
    except (SweepError, StudyError) as err:
        return [str(err)]
    known = set(RUN_FIELDS) | {"group"}
    unrecorded = f"is not one kbench records; expected one of {', '.join(METRICS)}."
    for i, claim in enumerate(study.claims):
        if claim.cannot_run:
            continue  # judged nowhere: the claim says why
        place = f"{study.file}: claims[{i}] ({claim.id})"
        sides = {claim.side_metric(s) for s in (claim.numerator, claim.denominator)}
        unread = sorted(({claim.metric} | sides) - set(METRICS))
        problems += [f"{place}: metric {metric!r} {unrecorded}" for metric in unread]
        if claim.for_each is not None and claim.for_each not in known:
            problems.append(f"{place}: for_each {claim.for_each!r} is not a run setting or group.")
        for reduced, sweep in sweeps.items():
            size = "reduced" if reduced else "full-size"
            selectors = claim.selectors(reduced)
            if reduced and claim.items:  # an ordering is checked on the items that ran
                found = [s for s in selectors if any(run_matches(r, s) for r in sweep.runs)]
                selectors = selectors if len(found) < 2 else found
            for selector in selectors:
                unknown = sorted(set(selector) - known)
                if unknown:
                    problems.append(
                        f"{place}: {unknown[0]!r} is not a run setting or group; "
                        f"expected one of {', '.join(sorted(known))}."
                    )
                    continue
                if any(run_matches(run, selector) for run in sweep.runs):
                    twice = _ambiguous(sweep, selector, claim.for_each)
                    if twice and not (reduced and claim.reduced):
                        problems.append(f"{place}: {size} runs: {twice}")
                    continue
                if reduced and claim.reduced:
                    continue  # the claim says why the reduced runs cannot answer it
                end = ", or say under reduced: why the reduced size cannot answer it."
                problems.append(
                    f"{place}: no {size} run of {sweep.file} has {selector!r}. Fix the "
                    f"selector, add the runs to the sweep{end if reduced else '.'}"
                )
    for i, plot in enumerate(study.plots):
        if plot.metric not in METRICS:
            problems.append(f"{study.file}: plots[{i}]: metric {plot.metric!r} {unrecorded}")
        if not any(run_matches(run, plot.where) for run in sweeps[False].runs):
            problems.append(f"{study.file}: plots[{i}]: no run of the sweep has {plot.where!r}.")
    return problems


def _ambiguous(sweep: Sweep, selector: Dict[str, Any], for_each: Optional[str]) -> Optional[str]:
    """Where ``selector`` matches two runs of one round (for one value of ``for_each``),
    which of their settings differ; None where it matches at most one."""
    found: Dict[Tuple[int, str], List[SweepRun]] = {}
    for run in sweep.runs:
        if run_matches(run, selector):
            value = repr(setting_of(run, for_each)) if for_each else ""
            found.setdefault((run.config.repeat, value), []).append(run)
    for runs in found.values():
        if len(runs) > 1:
            configs = [run.config.to_dict() for run in runs]
            differ = sorted(k for k in configs[0] if len({repr(c[k]) for c in configs}) > 1)
            differ += ["group"] if len({run.group for run in runs}) > 1 else []
            return (
                f"{selector!r} matches {len(runs)} runs of one round (they differ in "
                f"{', '.join(differ) or 'nothing'}); a per-round ratio needs one. Add the "
                "setting to the claim's where (and reduced_where)."
            )
    return None


def file_rounds(sweep: Sweep) -> int:
    """The rounds (``repeats``) the sweep file declares at this size."""
    return len({run.config.repeat for run in sweep.runs})


def default_rounds(sweep: Sweep) -> int:
    """``reproduce``'s rounds without ``--repeats``: the sweep file's, and at least the
    rounds a 95% interval on the per-round ratios needs (:data:`ROUNDS_NEEDED`)."""
    return max(file_rounds(sweep), ROUNDS_NEEDED)


def with_rounds(sweep: Sweep, repeats: Any) -> Sweep:
    """The sweep's runs ``repeats`` times, round by round (every run of round 0, then of
    round 1, ...): each run keeps its key in the rounds the file already had, so a store
    that holds them resumes."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(
            "repeats",
            f"expected a positive number of rounds, at least {ROUNDS_NEEDED} for a verdict "
            f"(a 95% interval on the median per-round ratio); received {repeats!r}.",
        )
    first = [run for run in sweep.runs if run.config.repeat == 0]
    runs = []
    for repeat in range(repeats):
        for run in first:
            config = replace(run.config, repeat=repeat)
            runs.append(SweepRun(config, run_key(config), run.group))
    return replace(sweep, runs=runs)


def with_precision(
    sweep: Sweep, target: Optional[float], budget_s: Optional[float]
) -> Tuple[Sweep, List[str]]:
    """``--target-precision`` / ``--time-budget`` set on every run that takes them (a
    data-parallel run trains a fixed number of steps: left as it is); the sweep and the
    labels of the runs left as they were."""
    if target is None and budget_s is None:
        return sweep, []
    runs, kept = [], []
    for run in sweep.runs:
        try:
            config = replace(run.config, target_precision=target, time_budget_s=budget_s)
        except ConfigError:
            runs.append(run)
            kept.append(run.config.label())
            continue
        runs.append(SweepRun(config, run_key(config), run.group))
    return replace(sweep, runs=runs), kept


def as_asked(
    sweep: Sweep, repeats: Optional[int], ratio_precision: Optional[float],
    target_precision: Optional[float], time_budget_s: Optional[float],
) -> Tuple[Sweep, List[str]]:  # fmt: skip
    """The study's sweep as ``reproduce`` runs it: in ``repeats`` rounds (None:
    :func:`default_rounds`; at least :data:`ROUNDS_NEEDED` with ``ratio_precision``),
    each run with the precision goal where it takes one; and the runs that do not."""
    repeats = default_rounds(sweep) if repeats is None else repeats
    if ratio_precision is not None:
        check_ratio_rounds(repeats)
    return with_precision(with_rounds(sweep, repeats), target_precision, time_budget_s)


def rounds_of(sweep: Sweep) -> List[Sweep]:
    """The sweep split into its rounds, in order (``--ratio-precision`` stops between)."""
    rounds = sorted({run.config.repeat for run in sweep.runs})
    return [replace(sweep, runs=[r for r in sweep.runs if r.config.repeat == i]) for i in rounds]


# What a warm window measures per round, as a claim reads it: throughput, and the GPU's
# kernel time over the window. Memory peaks, accuracy and epoch times need fresh processes.
WINDOW_METRICS = ("images_per_sec", "gpu_kernel_time_percent")


def windows_misfit(study: Study, reduced: bool, gpu: bool) -> Optional[str]:
    """Why the claims judged here are not all backend ratios that warm windows measure
    (None: they are). Claims the reduced size cannot answer, and GPU claims on a machine
    without one, are judged nowhere here and left out of the question."""
    judged = [
        claim
        for claim in study.claims
        if not (reduced and claim.reduced)
        and (gpu or "gpu" not in claim.requires)
        and not claim.cannot_run
    ]
    if not judged:
        return "no claim of the study can be judged here"
    for claim in judged:
        sides = (claim.numerator, claim.denominator)
        metrics = {claim.metric} | {claim.side_metric(side) for side in sides}
        other = sorted(metrics - set(WINDOW_METRICS))
        if other:
            return (
                f"claim {claim.id} reads {other[0]}, which needs fresh processes (windows "
                f"measure {' and '.join(WINDOW_METRICS)} per round)"
            )
        selectors = claim.selectors(reduced)
        keys = {k for selector in selectors for k in selector}
        differ = [
            k for k in sorted(keys - {"backend"}) if len({repr(s.get(k)) for s in selectors}) > 1
        ]
        if differ:
            return (
                f"claim {claim.id} compares {', '.join(differ)}, not backends (windows "
                "interleave the backends of one setting)"
            )
    return None


def measure_choice(
    study: Study, reduced: bool, windows: Optional[bool], fresh_flag: Optional[str],
    gpu: Optional[bool] = None,
) -> Tuple[bool, str]:  # fmt: skip
    """Whether ``reproduce`` measures in warm windows, and why, in words. ``windows``:
    ``--windows`` (True), ``--fresh-processes`` (False) or neither; ``fresh_flag``: a flag given
    that asks for fresh processes (``--repeats``); the flags judged by the one rule
    (:func:`kbench.studies.rounds.how_to_measure`; each comparison's backends and settings
    are, as the sweep is turned into windows). Without either, a reduced study whose
    claims are backend ratios (:func:`windows_misfit`) is measured in windows."""
    measure = how_to_measure(
        fresh_flag="--fresh-processes" if windows is False else fresh_flag,
        windows_flag="--windows" if windows else None,
    )
    if not measure.windows:
        return False, f"fresh-process rounds ({measure.reason})"
    if gpu is None:
        gpu = bool(sysinfo.gpu_info().get("available"))
    misfit = windows_misfit(study, reduced, gpu)
    if windows:
        caveat = (
            f"; but {misfit}: such a claim's sides are measured in different comparisons, "
            "their rounds paired by number, not interleaved"
            if misfit
            else ""
        )
        return True, f"warm interleaved windows (--windows){caveat}"
    if not reduced:
        return False, (
            "fresh-process rounds (full size: the study's epochs; --windows compares each "
            "setting's backends in warm windows)"
        )
    if misfit:
        return False, f"fresh-process rounds: {misfit}; --windows measures in windows anyway"
    return True, (
        "warm interleaved windows: every claim judged here compares backends on "
        f"{' or '.join(WINDOW_METRICS)}; --fresh-processes for fresh-process rounds"
    )


def prepare(name: str, reduced: bool) -> Tuple[Study, Sweep]:
    """The study named ``name`` (or at that path) and its sweep, the study checked
    against the sweep first: a claim or plot that names no run of it is refused here."""
    study = load_study(find_study(name))
    problems = check_study(study)
    if problems:
        raise StudyError(study.file, "", "does not fit its sweep:\n  " + "\n  ".join(problems))
    return study, study_sweep(study, reduced)


def verdicts(
    study: Study, sweep: Sweep, store: Path, results: Optional[Sequence[RunResult]] = None
) -> List[ClaimOutcome]:
    """Each claim of the study judged on the runs of ``sweep`` (exactly those: its run
    keys) that ``store`` holds; an ordering's item the sweep has no run of is left out."""
    results = sweep_results(store, sweep) if results is None else results
    planned = {run.key for run in sweep.runs}
    mine = [r for r in results if sweep_run_of(r) in planned]
    if not mine:
        other = f" ({len(results)} of its runs with other settings or rounds)" if results else ""
        raise StoreError(
            f"store: no runs of the sweep {sweep.name} as planned here in {store}{other}; "
            f"run kbench reproduce {study.name}{' --reduced' if sweep.reduced else ''}"
        )
    counted = [r for r in mine if not r.superseded]  # a comparison measured again: left out
    return evaluate(study, counted, defined=lambda s: any(run_matches(r, s) for r in sweep.runs))


def sweep_results(store: Path, sweep: Sweep) -> List[RunResult]:
    """The runs of ``sweep`` that ``store`` holds: the newest of each, on each machine
    where several ran it (:func:`kbench.views.machines.newest_per_machine`)."""
    return newest_per_machine(ResultStore(store).results([Filter("sweep", (sweep.name,))]))


@dataclass(frozen=True)
class MachineVerdicts:
    """The claims judged on one machine's runs."""

    host: str  # as kbench.results.analysis.by_machine names it; "" where one machine ran them
    runs: List[RunResult]
    outcomes: List[ClaimOutcome]


def per_machine(results: Sequence[RunResult]) -> Dict[str, List[RunResult]]:
    """``results`` by machine where they come from several, else ``{"": results}``."""
    return several_machines(results) or {"": list(results)}


def machine_verdicts(
    study: Study, sweep: Sweep, store: Path, results: Optional[Sequence[RunResult]] = None
) -> List[MachineVerdicts]:
    """:func:`verdicts` on each machine's runs of ``sweep`` (one entry where one machine
    ran them); a machine with no run of the sweep as planned here is left out."""
    results = sweep_results(store, sweep) if results is None else results
    planned = {run.key for run in sweep.runs}
    out = []
    for host, runs in per_machine(results).items():
        if host and not any(sweep_run_of(r) in planned for r in runs):
            continue
        out.append(MachineVerdicts(host, runs, verdicts(study, sweep, store, runs)))
    return out


def machine_claims_tables(study: Study, judged: Sequence[MachineVerdicts]) -> List[Table]:
    """The claims table, one per machine where several ran the sweep (titled with it,
    its hardware and the note that no ratio pools machines in the notes)."""
    hosts = [j.host for j in judged if j.host]
    tables = []
    for j in judged:
        table = claims_table(study, j.outcomes)
        if j.host:
            notes = [mixed_note(hosts, "claims judged per machine"), hardware_text(j.runs)]
            table = Table(f"{table.title}, on {j.host}", table.headers, table.rows,
                          notes + table.notes)  # fmt: skip
        tables.append(table)
    return tables


def verdicts_text(study: Study, judged: Sequence[MachineVerdicts]) -> str:
    """The verdicts for a terminal (:func:`kbench.studies.claims.claims_text`); where
    several machines ran the sweep, a block per machine headed by its hardware."""
    if len(judged) == 1 and not judged[0].host:
        return claims_text(study, judged[0].outcomes)
    hosts = [j.host for j in judged]
    lines = [mixed_note(hosts, "claims judged per machine")]
    for j in judged:
        lines += ["", f"=== on {j.host}: {hardware_text(j.runs)}", claims_text(study, j.outcomes)]
    return "\n".join(lines)


def write_machine_claims(
    study: Study, judged: Sequence[MachineVerdicts], store: Path
) -> Tuple[Path, Path]:
    """The verdicts in the store: claims.md, the claims table (one per machine where
    several ran the sweep), and claims.json, the verdicts with their evidence
    (:func:`kbench.studies.claims.outcomes_json`; of several machines, ``{"study",
    "machines": [{"machine", "hardware", ...as for one}]}``). OSError if not written."""
    markdown, data = store / "claims.md", store / "claims.json"
    tables = machine_claims_tables(study, judged)
    write_text_atomic(markdown, "\n\n".join(t.markdown() for t in tables) + "\n")
    if len(judged) == 1 and not judged[0].host:
        document = outcomes_json(study, judged[0].outcomes)
    else:
        machines = [{"machine": j.host, "hardware": hardware_text(j.runs),
                     **outcomes_json(study, j.outcomes)} for j in judged]  # fmt: skip
        document = {"study": study.name, "machines": machines}
    write_json_atomic(data, finite(document)[0], allow_nan=False)  # standard JSON: no NaN
    return markdown, data


def study_list() -> Tuple[str, List[Study], List[str]]:
    """Every study file found: a text table of them, the studies, and one error per
    file that does not load."""
    rows, studies, errors = [], [], []
    for path in study_files():
        try:
            study = load_study(path)
        except StudyError as err:
            errors.append(str(err))
            continue
        studies.append(study)
        rows.append(
            [study.name, study.document, study.sweep, str(len(study.figures)),
             str(len(study.claims))]
        )  # fmt: skip
    headers = ["study", "document", "sweep", "published figures", "claims"]
    return render(headers, rows), studies, errors


# the report's "Paper vs this machine" section ---------------------------------------


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
        if not r.ok or not run_matches(r, plot.where):
            continue
        value = read(r)
        if value is not None:
            series, x = r.config.get(plot.series), r.config.get(plot.x)
            values.setdefault(series, {}).setdefault(x, []).append(value)
    return {s: {x: Spread.of(v) for x, v in xs.items()} for s, xs in values.items()}


def paper_plot(study: Study, plot: PaperPlot, results: Sequence[RunResult]) -> Any:
    """The paper's figures and this machine's on the plot's axes, in two panels with their
    own y axes: the paper's hardware is not this machine, its figures are context."""
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
        if value in published:
            xs, ys = zip(*sorted(published[value], key=lambda p: p[0]))
            left.plot(xs, ys, "o--", color=colour, label=name)
        if value in here:
            xs = sorted(here[value])
            spreads = [here[value][x] for x in xs]
            right.errorbar(
                xs, [s.median for s in spreads], marker="o", capsize=3, color=colour, label=name,
                yerr=[[s.median - s.low for s in spreads], [s.high - s.median for s in spreads]],
            )  # fmt: skip
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
