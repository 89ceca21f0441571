"""The windows of a warm interleaved comparison (``kbench run`` with several backends),
one row per worker: how many windows counted, were dropped or failed, their size, the
median throughput, and what the worker's start cost (measured once, in a fresh process)."""

from __future__ import annotations

import statistics
from typing import Dict, List, Sequence

from kbench.results.result import RunResult
from kbench.views.names import model_label
from kbench.views.tables import render

HEADERS = (
    "model", "backend", "windows", "dropped", "not ok", "steps", "window s",
    "img/s (median)", "start: import s", "first step s",
)  # fmt: skip


def windows_table(results: Sequence[RunResult]) -> str:
    """One row per (model, backend) of the window results; a footnote per dropped round."""
    workers: Dict[tuple, List[RunResult]] = {}
    for result in results:
        workers.setdefault((result.config["model"], result.config["backend"]), []).append(result)
    rows = [_row(model, backend, runs) for (model, backend), runs in workers.items()]
    return "\n".join([render(HEADERS, rows), *dropped_notes(results)])


def dropped_notes(results: Sequence[RunResult]) -> List[str]:
    """One line for the rounds dropped: how many, the first reason and the last."""
    reasons: Dict[int, str] = {}
    for result in results:
        if result.dropped:
            reasons.setdefault(result.config.get("repeat", 0), result.dropped)
    if not reasons:
        return []
    rounds = sorted(reasons)
    first, last = reasons[rounds[0]], reasons[rounds[-1]]
    text = f"{len(rounds)} round(s) dropped, left out of the comparison: {first}"
    return [text + (f" ... the last: {last}" if len(rounds) > 1 else "")]


def _row(model: str, backend: str, runs: Sequence[RunResult]) -> List[str]:
    counted = [r for r in runs if r.ok and not r.dropped]
    window = [(r.metrics.get("window") or {}) for r in counted]
    first = next((r.metrics for r in runs if r.ok and r.metrics.get("import_time_s")), {})
    return [
        model_label(model),
        backend,
        str(len(counted)),
        str(sum(1 for r in runs if r.dropped)),
        str(sum(1 for r in runs if not r.ok)),
        _median_text([w.get("steps") for w in window], "d"),
        _median_text([r.metrics.get("measured_time_s") for r in counted], ".2f"),
        _median_text([r.metrics.get("images_per_sec") for r in counted], ",.0f"),
        "-" if first.get("import_time_s") is None else f"{first['import_time_s']:.1f}",
        "-" if first.get("first_step_s") is None else f"{first['first_step_s']:.2f}",
    ]


def _median_text(values: Sequence, spec: str) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    median = statistics.median(values)
    return format(int(median) if spec == "d" else median, spec)
