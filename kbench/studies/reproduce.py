"""A published study reproduced: its sweep, and its claims checked against that sweep.

The study file (:mod:`kbench.studies.published`) names a sweep file; :func:`study_sweep`
loads it (full size or reduced, narrowed by the study's ``reduced.only``), and
:func:`check_study` makes sure every claim and plot refers to runs the sweep defines
and to metrics kbench records, so a typo in a selector fails when the file is checked,
not as "runs missing" after an hour of runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.results.result import RunResult
from kbench.results.store import StoreError
from kbench.studies.claims import METRICS, ClaimOutcome, claims_table, evaluate
from kbench.studies.published import Study, StudyError, find_study, load_study, study_files
from kbench.studies.sweep import RUN_FIELDS, Sweep, SweepError, SweepRun, load_sweep
from kbench.studies.sweep_runs import stored_results
from kbench.views.tables import render


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
    runs = [
        run
        for run in sweep.runs
        if all(
            _plain(getattr(run.config, k)) in [_plain(v) for v in values]
            for k, values in study.reduced_only.items()
        )
    ]
    if not runs:
        raise StudyError(
            study.file,
            "reduced.only",
            f"expected a filter that keeps some of "
            f"{sweep.file}'s reduced runs; {study.reduced_only!r} keeps none.",
        )
    return replace(sweep, runs=runs)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def run_matches(run: SweepRun, selector: Dict[str, Any]) -> bool:
    for key, wanted in selector.items():
        have = run.group if key == "group" else getattr(run.config, key, None)
        if _plain(have) != _plain(wanted):
            return False
    return True


def check_study(study: Study) -> List[str]:
    """What in the study does not fit its sweep, one sentence each (empty: all fits)."""
    problems: List[str] = []
    try:
        sweeps = {False: study_sweep(study, False), True: study_sweep(study, True)}
    except (SweepError, StudyError) as err:
        return [str(err)]
    known = set(RUN_FIELDS) | {"group"}
    for i, claim in enumerate(study.claims):
        place = f"{study.file}: claims[{i}] ({claim.id})"
        metrics = {claim.metric} | {
            claim.side_metric(s) for s in (claim.numerator, claim.denominator)
        }
        for metric in sorted(metrics - set(METRICS)):
            problems.append(
                f"{place}: metric {metric!r} is not one kbench records; expected one "
                f"of {', '.join(METRICS)}."
            )
        if claim.for_each is not None and claim.for_each not in RUN_FIELDS:
            problems.append(f"{place}: for_each {claim.for_each!r} is not a run setting.")
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
                    continue
                if reduced and claim.reduced:
                    continue  # the claim says why the reduced runs cannot answer it
                problems.append(
                    f"{place}: no {size} run of {sweep.file} has {selector!r}. Fix the "
                    "selector, add the runs to the sweep"
                    + (
                        ", or say under reduced: why the reduced size cannot answer it."
                        if reduced
                        else "."
                    )
                )
    for i, plot in enumerate(study.plots):
        if plot.metric not in METRICS:
            problems.append(
                f"{study.file}: plots[{i}]: metric {plot.metric!r} is not one "
                f"kbench records; expected one of {', '.join(METRICS)}."
            )
        if not any(run_matches(run, plot.where) for run in sweeps[False].runs):
            problems.append(f"{study.file}: plots[{i}]: no run of the sweep has {plot.where!r}.")
    return problems


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
    """Each claim of the study judged on the runs of its sweep that ``store`` holds."""
    results = stored_results(store, sweep) if results is None else results
    if not results:
        raise StoreError(
            f"store: no runs of the sweep {sweep.name} in {store}; run "
            f"kbench reproduce {study.name}{' --reduced' if sweep.reduced else ''}"
        )
    return evaluate(study, results)


def write_claims(study: Study, outcomes: Sequence[ClaimOutcome], store: Path) -> Path:
    """The claims table as Markdown in the store (claims.md); OSError if it cannot be."""
    path = store / "claims.md"
    path.write_text(claims_table(study, outcomes).markdown() + "\n")
    return path


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
