"""``kbench tune``'s report (``STORE/tune.json``) as tables: per backend, each setting tried
and what became of it, the settings left out and why; then the backends at their default
and best. As text for the terminal, and as a section of ``kbench report``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from kbench.measure.stats import MedianInterval
from kbench.views.report import Section
from kbench.views.tables import Table, interval_text

TRIAL_HEADERS = [
    "setting", "outcome", "windows (dropped)", "img/s (median)", "vs default (95% interval)",
]  # fmt: skip
FINAL_HEADERS = ["backend", "setting", "img/s (median)", "vs the first default (95% interval)"]


def ratio_cell(interval: Optional[Dict[str, Any]]) -> str:
    return "-" if not interval else interval_text(MedianInterval(**interval), ".3f")


def _number(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:,.0f}"


def backend_table(report: Dict[str, Any]) -> Table:
    rows = []
    for trial in report["trials"]:
        outcome = trial["state"] + (f": {trial['reason']}" if trial.get("reason") else "")
        rows.append([
            trial["setting"], outcome, f"{trial['windows']} ({trial['dropped_windows']})",
            _number(trial["images_per_sec_median"]), ratio_cell(trial["ratio_to_default"]),
        ])  # fmt: skip
    best = report["best"] or "none (the default could not run)"
    notes = [f"in words: {report['in_words']}"] if report.get("in_words") else []
    if report.get("resumed"):
        notes.append("searched by an earlier kbench tune in this store (tune-progress.json)")
    notes += [f"not tried: {s['setting']}: {s['reason']}" for s in report["skipped"]]
    title = f"{report['backend']}: best {best}; the search ended: {report['ended']}"
    return Table(title, TRIAL_HEADERS, rows, notes)


def final_table(compared: Dict[str, Any]) -> Table:
    rows = [
        [row["backend"], row["setting"], _number(row["images_per_sec_median"]),
         ratio_cell(row["ratio_to_first"])]
        for row in compared["rows"]
    ]  # fmt: skip
    title = f"at their default and best, against {compared['reference']} ({compared['ended']})"
    return Table(title, FINAL_HEADERS, rows, [])


def tune_tables(report: Dict[str, Any]) -> List[Table]:
    tables = [backend_table(backend) for backend in report["backends"]]
    if report.get("compared"):
        tables.append(final_table(report["compared"]))
    return tables


def headline(report: Dict[str, Any]) -> str:
    return (
        f"kbench tune: {report['model']} on {report['dataset']}, batch {report['batch_size']}, "
        f"{report['seconds']:.0f} s in all: a {report['budget_s']:.0f} s budget of measuring, "
        "the rest starting and warming the workers"
    )


def tune_text(report: Dict[str, Any]) -> str:
    parts = [headline(report)] + [table.text() for table in tune_tables(report)]
    if report.get("sweep_file"):
        parts.append(f"the best settings as a sweep: kbench sweep {report['sweep_file']}")
    return "\n\n".join(parts)


def tune_section(report: Dict[str, Any]) -> Section:
    return Section(
        id="tune",
        heading="Each backend at its best (kbench tune)",
        intro=headline(report) + ". " + (report.get("method") or "").split("\n\n")[0],
        tables=tune_tables(report),
    )
