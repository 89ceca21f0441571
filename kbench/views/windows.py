"""The windows of a warm interleaved comparison, one row per worker (its document,
:mod:`kbench.results.comparison`): windows counted, dropped and failed, their size, the
median throughput, the worker's start, and whether it computed what the baseline did at
warm-up (``metrics.parity``), said in a line per backend under the table."""

from __future__ import annotations

import statistics
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.results.result import RunResult
from kbench.views.tables import model_label, render

HEADERS = (
    "model", "backend", "windows", "dropped", "not ok", "steps", "window s",
    "img/s (median)", "start: import s", "first step s", "parity",
)  # fmt: skip


def windows_table(results: Sequence[RunResult]) -> str:
    workers = _by_worker(results)
    rows = [_row(model, backend, runs) for (model, backend), runs in workers.items()]
    return "\n".join([render(HEADERS, rows), *dropped_notes(results), *parity_lines(results)])


def _by_worker(results: Sequence[RunResult]) -> Dict[Tuple[str, str], List[RunResult]]:
    workers: Dict[Tuple[str, str], List[RunResult]] = {}
    for result in results:
        workers.setdefault((result.config["model"], result.config["backend"]), []).append(result)
    return workers


def windows_of(runs: Sequence[RunResult]) -> List[Dict[str, Any]]:
    return [w for r in runs for w in ((r.metrics or {}).get("windows") or {}).get("list") or []]


def parity_record(runs: Sequence[RunResult]) -> Optional[Dict[str, Any]]:
    return next((r.metrics["parity"] for r in runs if r.metrics.get("parity")), None)


def parity_word(record: Optional[Dict[str, Any]]) -> str:
    if record is None:
        return "-"
    if not record["checked"]:
        return "not checked"
    if record.get("is_reference"):
        return "reference"
    return "same" if record["same_computation"] else "DIFFERS"


def parity_line(backend: str, record: Dict[str, Any]) -> str:
    reference = record["reference"]
    if not record["checked"]:
        return f"{backend}: not checked against {reference}: {record['why']}"
    figures = ""
    if record.get("output_max_abs") is not None:
        figures = (
            f"max |d output| {record['output_max_abs']:.1e}, "
            f"loss within {record['loss_max_rel']:.1e}"
        )
    if record["same_computation"]:
        return f"{backend}: same computation as {reference} ({figures})"
    return (
        f"{backend}: COMPUTES OTHERWISE than {reference}: {record['differs']}"
        + (f" ({figures})" if figures else "")
        + "; measured all the same: its ratio compares different computations"
    )


def parity_lines(results: Sequence[RunResult]) -> List[str]:
    """Per model: what was compared, a line per backend but the reference (one line when
    none was checked, for one reason), then those backends' known differences."""
    lines: List[str] = []
    models: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for (model, backend), runs in _by_worker(results).items():
        record = parity_record(runs)
        if record is not None:
            models.setdefault(model, {})[backend] = record
    for model, records in models.items():
        for_model = f" ({model_label(model)})" if len(models) > 1 else ""
        others = {b: r for b, r in records.items() if not r.get("is_reference")}
        reference = next(iter(records.values()))["reference"]
        why = {r.get("why") for r in records.values()}
        if all(not r["checked"] for r in records.values()) and len(why) == 1:
            lines.append(f"parity at warm-up{for_model}: not checked: {why.pop()}")
            continue
        lines.append(f"parity at warm-up{for_model}, {_what_was_compared(records, reference)}:")
        lines += [f"  {parity_line(backend, record)}" for backend, record in others.items()]
        for backend, record in others.items():
            lines += [f"  note ({backend}): {note}" for note in record.get("notes") or []]
    return ["", *lines] if lines else []


def _what_was_compared(records: Dict[str, Dict[str, Any]], reference: str) -> str:
    checked = next((r for r in records.values() if r["checked"] and "rows" in r), None)
    if checked is None:
        return f"against {reference}"
    tolerance = checked["tolerance"]
    return (
        f"against {reference}: from the same initial weights, the outputs on "
        f"{checked['rows']} test rows before training and the losses of {checked['steps']} "
        f"training steps on the same batches; tolerance: outputs within "
        f"{tolerance['output_atol']:g}, losses within {tolerance['loss_rtol']:g} relative"
    )


def dropped_notes(results: Sequence[RunResult]) -> List[str]:
    reasons: Dict[int, str] = {}
    for window in windows_of(results):
        if window.get("dropped"):
            reasons.setdefault(window["round"], window["dropped"])
    if not reasons:
        return []
    rounds = sorted(reasons)
    first, last = reasons[rounds[0]], reasons[rounds[-1]]
    text = f"{len(rounds)} round(s) dropped, left out of the comparison: {first}"
    lines = [text + (f" ... the last: {last}" if len(rounds) > 1 else "")]
    if any((r.metrics.get("window") or {}).get("every_round_dropped") for r in results):
        lines.append(
            "every round was dropped: the figures above are of every window, measured while "
            "the machine was busy (flagged), rather than none"
        )
    return lines


def _row(model: str, backend: str, runs: Sequence[RunResult]) -> List[str]:
    windows = windows_of(runs)
    counted_ = [w for w in windows if w.get("status") == "ok" and not w.get("dropped")]
    facts = next((r.metrics.get("window") or {} for r in runs if r.metrics.get("window")), {})
    start = next((r.metrics for r in runs if r.metrics.get("import_time_s") is not None), {})
    return [
        model_label(model), backend, str(len(counted_)),
        str(sum(1 for w in windows if w.get("status") == "ok" and w.get("dropped"))),
        str(_not_ok(runs)), _median_text([facts.get("steps")], "d"),
        _median_text([w.get("measured_time_s") for w in counted_], ".2f"),
        _median_text([w.get("images_per_sec") for w in counted_ or windows], ",.0f"),
        "-" if start.get("import_time_s") is None else f"{start['import_time_s']:.1f}",
        "-" if start.get("first_step_s") is None else f"{start['first_step_s']:.2f}",
        parity_word(parity_record(runs)),
    ]  # fmt: skip


def _not_ok(runs: Sequence[RunResult]) -> int:
    """The windows that failed, or a worker that failed before any window."""
    failed = [sum(w.get("status") != "ok" for w in windows_of([run])) for run in runs]
    return sum(n or (not run.ok) for n, run in zip(failed, runs))


def _median_text(values: Sequence, spec: str) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    median = statistics.median(values)
    return format(int(median) if spec == "d" else median, spec)
