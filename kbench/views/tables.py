"""Tables: one model (:class:`Table`, of :class:`Cell` s) rendered as plain text for the
terminal, Markdown for files and HTML for the report; and one formatter per quantity (a
spread, a ratio, bytes, memory, utilization), which every table uses. The figures come
from :mod:`kbench.results.analysis`; nothing here computes one."""

from __future__ import annotations

import collections
import html
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from kbench.backends import BACKENDS
from kbench.backends.switches import SWITCHES
from kbench.measure.stats import MedianInterval
from kbench.results.analysis import (
    MODEL_KINDS,
    BackendRow,
    ComparisonGroup,
    Spread,
    clear,
    compare,
    kernels_text,
    measured_machines,
    varying_settings,
)
from kbench.results.config import RunConfig, short_name
from kbench.results.ending import device_used
from kbench.results.result import RunResult
from kbench.results.store import IndexEntry


class Markup(str):
    """Text that is already HTML: cells and blocks built from escaped pieces."""


def esc(value: Any) -> str:
    return value if isinstance(value, Markup) else html.escape(str(value))


# The report's badge styles (its CSS), by the label a cell gives a badge.
BADGE_STYLES = {"flagged": "bad", "other setup": "setup"}


class Cell(str):
    """One cell. As a string (text and Markdown) it reads ``text [flag; flag]``; as HTML,
    the text (in ``css``'s class), a badge per ``badges`` and a line per flag. Badges are
    HTML only: the flags say the same in words."""

    text: str
    flags: Tuple[str, ...]
    badges: Tuple[str, ...]
    css: str

    def __new__(
        cls, text: str, flags: Sequence[str] = (), badges: Sequence[str] = (), css: str = ""
    ) -> Cell:
        cell = super().__new__(cls, f"{text} [{'; '.join(flags)}]" if flags else text)
        cell.text, cell.flags, cell.badges, cell.css = text, tuple(flags), tuple(badges), css
        return cell

    def html(self) -> str:
        text = esc(self.text)
        if self.css:
            text = f'<span class="{self.css}">{text}</span>'
        text += "".join(
            f' <span class="badge {BADGE_STYLES.get(b, "bad")}">{esc(b)}</span>'
            for b in self.badges
        )
        return Markup(text + "".join(f'<div class="flag">{esc(f)}</div>' for f in self.flags))


NUMERIC_CSS = ' class="num"'  # a report cell aligned as a number
CellLike = str  # a Cell, a Markup (HTML, in tables only the report shows) or plain text


Row = Sequence[CellLike]


# C0 controls but the newline, DEL and C1: stored in a field (a host name, a reason), an
# escape sequence would clear the screen, retitle the window or write the clipboard
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """``text`` safe to print on a terminal: each control character but the newline
    shown as its escape (``\\x1b``)."""
    return CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", str(text))


def render(headers: Sequence[str], rows: Sequence[Row]) -> str:
    """Columns padded to their widest cell; numbers right-aligned; every cell
    :func:`printable`."""
    headers = [printable(h) for h in headers]
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for cell, width in zip(cells, widths):
            cell = str(cell)
            numeric = cell[:1].isdigit() or cell[:1] in "x-" and cell[1:2].isdigit()
            out.append(cell.rjust(width) if numeric else cell.ljust(width))
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


@dataclass(frozen=True)
class Table:
    title: str
    headers: List[str]
    rows: List[Row]
    notes: List[str]

    def text(self) -> str:
        notes = "".join(f"\n  {printable(n)}" for n in self.notes)
        title = f"{printable(self.title)}\n" if self.title else ""
        return f"{title}{render(self.headers, self.rows)}{notes}"

    def markdown(self) -> str:
        def cells(row: Sequence[CellLike]) -> str:
            return "| " + " | ".join(markdown_text(c).replace("|", "\\|") for c in row) + " |"

        lines = [f"### {markdown_text(self.title)}", "", cells(self.headers)]
        lines.append("|" + "|".join("---" for _ in self.headers) + "|")
        lines += [cells(row) for row in self.rows]
        lines += [""] + [f"- {markdown_text(n)}" for n in self.notes] if self.notes else []
        return "\n".join(lines)

    def html(self, numeric: Iterable[int] = ()) -> str:
        """As the report shows it; ``numeric``: the columns aligned as numbers."""
        numeric = set(numeric)
        head = "".join(f"<th>{esc(h)}</th>" for h in self.headers)
        body = []
        for row in self.rows:
            shown = (c.html() if isinstance(c, Cell) else esc(c) for c in row)
            cells = (f"<td{NUMERIC_CSS * (i in numeric)}>{c}</td>" for i, c in enumerate(shown))
            body.append(f"<tr>{''.join(cells)}</tr>")
        notes = "".join(f"<li>{esc(n)}</li>" for n in self.notes)
        return (
            (f"<h3>{esc(self.title)}</h3>" if self.title else "")
            + f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            + (f'<ul class="muted">{notes}</ul>' if notes else "")
        )


def markdown_text(text: object) -> str:
    """``text`` as Markdown shows it, never as HTML (names come from the user), on one line."""
    return html.escape(" ".join(str(text).splitlines()), quote=False)


PATH_PREFIXES = ("npz:", "folder:")  # data sets named by a path on this machine


def model_label(model: object) -> str:
    """A zoo name unchanged; a user model's file name (with its function): a result keeps
    the full path, which ``kbench results --export`` writes."""
    return short_name(model) if isinstance(model, str) else str(model)


def dataset_label(dataset: object) -> str:
    if not isinstance(dataset, str):
        return str(dataset)
    for prefix in PATH_PREFIXES:
        if dataset.startswith(prefix):
            return prefix + os.path.basename(dataset[len(prefix) :].rstrip("/"))
    return dataset


def model_labels(models: Iterable[str]) -> Dict[str, str]:
    """A label per model: its short name, or as much of each path as tells apart files that
    share one (``a/net.py:build``, ``b/net.py:build``)."""
    models = list(dict.fromkeys(m for m in models if isinstance(m, str)))
    labels = {m: model_label(m) for m in models}
    clashes: Dict[str, List[str]] = {}
    for model, label in labels.items():
        clashes.setdefault(label, []).append(model)
    for clashing in clashes.values():
        if len(clashing) < 2:
            continue
        tails = {m: labels[m] for m in clashing}
        for depth in range(2, 1 + max(len(_where(m)[0].split("/")) for m in clashing)):
            tails = {m: _path_tail(m, depth) for m in clashing}
            if len(set(tails.values())) == len(clashing):
                break
        labels.update(tails)
    return labels


def _where(model: str) -> Tuple[str, str]:
    """A user model's path and function ("" for a saved model)."""
    if model.endswith(".keras") or ":" not in model:
        return model, ""
    return model.rpartition(":")[::2]


def _path_tail(model: str, depth: int) -> str:
    where, function = _where(model)
    tail = "/".join(where.replace("\\", "/").split("/")[-depth:])
    return tail + (f":{function}" if function else "")


# What each memory kind and utilization is, in words (a table's notes, a figure's title)
MEMORY_LABELS = {
    "process_nvml": "GPU memory of the worker process (NVML, peak sampled)",
    "framework_peak": "framework peak allocation (its own counter)",
    "device_used": "GPU memory used on the whole device (NVML, peak sampled)",
    "process_peak_rss": "peak resident host memory of the worker (RSS)",
}
UTILIZATION_LABELS = {
    "gpu": "GPU utilization: % of time a kernel ran (NVML), mean over the measured window",
    "cpu": "CPU use of the worker: % of one core, mean over the measured window",
}


def range_text(spread: Spread, spec: str) -> str:
    """``low-high, n=N``, or ``n=N`` where they read alike."""
    low, high = format(spread.low, spec), format(spread.high, spec)
    return f"n={spread.n}" if low == high else f"{low}-{high}, n={spread.n}"


def spread_text(spread: Optional[Spread], spec: str) -> str:
    if spread is None:
        return "-"
    return format(spread.median, spec) + (f" ({range_text(spread, spec)})" if spread.n > 1 else "")


def interval_text(interval: MedianInterval, spec: str = ".2f") -> str:
    """``x0.51 (0.50-0.52, 75% interval, n=3)``, ``no clear difference (x0.97, 0.91-1.04,
    ...)`` (:func:`kbench.results.analysis.clear`) or ``x0.97 (1 run: no spread)``."""
    ratio = "x" + format(interval.median, spec)
    if interval.n < 2:
        return f"{ratio} (1 run: no spread)"
    detail = (
        f"{format(interval.low, spec)}-{format(interval.high, spec)}, "
        f"{interval.coverage:.0%} interval, n={interval.n}"
    )
    return f"{ratio} ({detail})" if clear(interval) else f"no clear difference ({ratio}, {detail})"


def ratio_text(row: BackendRow, baseline: str) -> str:
    """A row's :func:`interval_text`; ``x1.00`` for the baseline; a row apart, why."""
    if row.apart:
        return f"- [{row.apart}]"
    if row.ratio_interval is None:
        return "-"
    if row.backend == baseline:
        return "x1.00"
    return interval_text(row.ratio_interval)


def bytes_text(value: float) -> str:
    """``1.1 GiB``, ``392.0 MiB``, ``512 B``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= 0.95 * size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def memory_text(largest: float, devices: int = 1, total: Optional[float] = None) -> str:
    """A peak of memory: one device's, or over several GPUs the largest with the sum,
    labelled (``3.0 GiB per GPU (largest of 2; sum 5.0 GiB)``)."""
    if devices < 2:
        return bytes_text(largest)
    total_text = f"; sum {bytes_text(total)}" if total is not None else ""
    return f"{bytes_text(largest)} per GPU (largest of {devices}{total_text})"


def utilization_text(row: BackendRow) -> Optional[str]:
    """``57 (gpu)``, ``72 (gpu, mean of 2 GPUs)``, ``44 (cpu)``; None: none sampled."""
    if row.utilization is None:
        return None
    several = f", mean of {row.utilization_gpus} GPUs" if row.utilization_gpus > 1 else ""
    return f"{row.utilization.median:.0f} ({row.utilization_kind}{several})"


def flagged(text: str, row: BackendRow) -> Cell:
    """``text`` with the row's quality and setup flags: ``1,234 [busy: 48% of ...]``."""
    badges = ("flagged",) * bool(row.quality_flags) + ("other setup",) * bool(row.setup_flags)
    return Cell(text, (*row.quality_flags, *row.setup_flags), badges)


def run_flagged(text: str, result: RunResult) -> Cell:
    flags = tuple((result.metrics.get("quality") or {}).get("flags") or [])
    return Cell(text, flags, ("flagged",) if flags else ())


def failed_text(row: BackendRow) -> str:
    """OOM, FAILED or TIMEOUT (with counts where several) where no run of a cell finished."""
    return ", ".join(s.upper() + (f" x{n}" if n > 1 else "") for s, n in row.statuses.items())


def run_table(results: Sequence[RunResult]) -> str:
    return runs_table(results).text()


def runs_table(results: Sequence[RunResult], title: str = "") -> Table:
    """A row per run, as ``kbench run`` lists them and :class:`kbench.api.Results` shows
    them; the runs' warnings below."""
    headers = [
        "backend", "model", "mode", "format", "device", "status", "img/s",
        "spread (per step/batch)",
        "ms p50", "first step s", "test acc", "params",
    ]  # fmt: skip
    labels = model_labels(r.config["model"] for r in results)
    rows = [_run_row(r, labels[r.config["model"]]) for r in results]
    warned = dict.fromkeys(
        f"warning: {r.config['backend']}/{labels[r.config['model']]}: {w}"
        for r in results
        for w in r.warnings
    )
    return Table(title, headers, rows, list(warned))


RUN_NUMERIC = range(6, 12)  # run_table's columns of numbers


def _run_row(r: RunResult, label: str) -> List[CellLike]:
    m = r.metrics
    keras_json = r.environment.get("keras_json", {})
    cells: List[CellLike]
    if not r.ok and m.get("images_per_sec") is not None:  # what it measured before
        cells = [f"{m['images_per_sec']:,.0f} (partial)", *_steps_cells(m)[1:]]
    elif not r.ok:
        cells = ["-"] * 5
    elif r.kind == "inference":
        latency = m["latency_ms"]
        cells = [
            run_flagged(f"{m['images_per_sec']:,.0f}", r),
            f"latency p90 {latency['p90']:.2f} ms, p99 {latency['p99']:.2f} ms",
            f"{latency['p50']:.2f}", f"{m['first_step_s']:.2f}", "-",
        ]  # fmt: skip
    elif r.kind == "generate":
        made = m["generation"]
        cells = [
            run_flagged(f"{m['images_per_sec']:,.2f} seq/s", r),
            f"{made['tokens_per_sec']:,.1f} tokens/s, first token "
            f"{made['time_to_first_token_ms']:.2f} ms",
            f"{made['per_token_ms']['p50']:.2f}", f"{m['first_step_s']:.2f}", "-",
        ]  # fmt: skip
    elif m.get("images_per_sec") is None and not m.get("step_time_s"):  # exec: no fit
        cells = [m.get("note") or "-", "-", "-", "-", "-"]
    else:
        cells = list(_steps_cells(m))
        cells[0] = run_flagged(cells[0], r)
    params = r.model.get("params")
    repeat = r.config.get("repeat", 0)
    return [
        r.config["backend"] + (f" #{repeat + 1}" if repeat else ""), label, r.kind,
        keras_json.get("image_data_format", "-"), device_used(r) or "-",
        "ok" if r.ok else r.status.upper(), *cells, "-" if params is None else f"{params:,}",
    ]  # fmt: skip


def _steps_cells(m: Dict[str, Any]) -> List[str]:
    """img/s, its spread (only over enough steps), ms p50, first step and test accuracy
    (with the name a kbench exec script gave it) of a training run."""
    steps = m.get("measured_steps")
    per_step = m.get("images_per_sec_per_step") or {}
    if m.get("measurement_note"):
        spread = f"{steps} step(s): too short to mean much"
    elif not per_step and steps:
        spread = f"{steps} steps"
    elif per_step:
        spread = f"p10-p90 {per_step['p10']:,.0f}-{per_step['p90']:,.0f} img/s"
        spread += f", {steps} steps" if steps else ""
    else:
        spread = "-"
    accuracy = m.get("test_accuracy")
    name = m.get("test_accuracy_metric")
    rate = m.get("images_per_sec")
    return [
        "n/a: batch sizes unknown" if rate is None else f"{rate:,.0f}",  # data sets, generators
        spread,
        f"{m['step_time_s']['p50'] * 1000:.2f}" if m.get("step_time_s") else "-",
        f"{m['first_step_s']:.2f}" if m.get("first_step_s") is not None else "-",
        "-" if accuracy is None
        else f"{accuracy:.3f}" + (f" ({name})" if name and name != "accuracy" else ""),
    ]  # fmt: skip


def not_ok_lines(results: Sequence[RunResult]) -> List[str]:
    """One line per run that gave no numbers (``unsupported`` too), its status and reason."""
    labels = model_labels(r.config["model"] for r in results)
    return [
        f"  {r.config['backend']}/{labels[r.config['model']]}: {r.status}: {r.reason}"
        for r in results
        if not r.ok
    ]


# A sweep's plan before it runs (``--dry-run``) and a store's index (``kbench results``).

PLAN_LISTED = 50  # a dry run lists every run up to this many, else summarizes
PLAN_FIRST = 10  # the runs a summary shows


def plan_table(configs: Sequence[RunConfig], states: Sequence[str], varying: Sequence[str]) -> str:
    """One row per run: number, backend, model, the settings that vary, its state."""
    rest = [v for v in varying if v not in ("backend", "model")]
    return render(
        ["#", "backend", "model", *rest, "state"],
        [
            [str(i), c.backend, c.model, *[setting_cell(getattr(c, v)) for v in rest], state]
            for i, (c, state) in enumerate(zip(configs, states), start=1)
        ],
    )


def plan_text(configs: Sequence[RunConfig], states: Sequence[str], varying: Sequence[str]) -> str:
    """The plan table, or past :data:`PLAN_LISTED` runs the runs per value and the first few."""
    if len(configs) <= PLAN_LISTED:
        return plan_table(configs, states, varying)
    lines = []
    for name in varying:
        counts = collections.Counter(setting_cell(getattr(c, name)) for c in configs)
        shown = ", ".join(f"{value} ({count})" for value, count in counts.most_common(12))
        more = f", and {len(counts) - 12} more values" if len(counts) > 12 else ""
        lines.append(f"  {name}: {len(counts)} values: {shown}{more}")
    first = plan_table(configs[:PLAN_FIRST], states[:PLAN_FIRST], varying)
    return "\n".join(
        ["settings that vary (runs per value):", *lines, "",
         f"the first {min(PLAN_FIRST, len(configs))} runs:", first,
         f"... and {len(configs) - PLAN_FIRST} more (--filter NAME=VALUE lists a part)"]
    )  # fmt: skip


def store_index(entries: Sequence[IndexEntry]) -> str:
    return render(
        ["run", "status", "kind", "backend", "model", "dataset", "batch", "img/s", "host",
         "sweep"],
        [[e.run_id, e.status, e.kind, str(e.config.get("backend")), str(e.config.get("model")),
          str(e.config.get("dataset")), str(e.config.get("batch_size")),
          "-" if e.images_per_sec is None else f"{e.images_per_sec:,.0f}", e.host,
          e.sweep or "-"] for e in entries],
    )  # fmt: skip


def group_title(group: ComparisonGroup, label: str = "") -> str:
    """``mlp on synthetic (synthetic data), batch 32``; ``label``: the model's name among
    the others compared (:func:`model_labels`)."""
    dataset = dataset_label(group.dataset)
    data = f"{dataset} (synthetic data)" if group.synthetic else dataset
    mode = f", {group.mode}" if group.mode in ("inference", "generate") else ""
    model = (label or model_label(group.model)) + (f" ({group.variant})" if group.variant else "")
    if group.batch_size is None:  # kbench exec: data and batch are the script's
        return f"{model} on {data} data and batch{mode}"
    return f"{model} on {data}, batch {group.batch_size}{mode}"


def group_table(group: ComparisonGroup, label: str = "") -> Table:
    """One group's rows, a backend each: img/s, the ratio to the baseline, and the
    latency (inference) or accuracy and epoch time (training), first step."""
    inference = group.mode in ("inference", "generate")  # generate: latency per token
    # generate: tokens/s, each sequence's new tokens (the ratios are the same)
    tokens = group.settings.get("max_new_tokens", 1) if group.mode == "generate" else None
    headers = ["backend", "tokens/s" if tokens else "img/s", f"vs {group.baseline}"]
    headers += (
        ["latency p50 ms", "first step s"] if inference else ["test acc", "s/epoch", "first step s"]
    )
    rows: List[List[CellLike]] = []
    for row in group.rows:
        if row.images_per_sec is None:
            failed = ", ".join(f"{s.upper()} x{n}" for s, n in row.statuses.items())
            rows.append([row.backend, failed] + ["-"] * (len(headers) - 2))
            continue
        cells: List[CellLike] = [
            row.backend + ("" if row.all_ok else " (some runs failed)"),
            flagged(rate_text(row.images_per_sec, tokens), row),
            ratio_text(row, group.baseline),
        ]
        if inference:
            cells += [spread_text(row.latency_p50_ms, ".2f"), spread_text(row.first_step_s, ".2f")]
        else:
            cells += [
                spread_text(row.test_accuracy, ".3f"),
                spread_text(row.epoch_time_s, ".2f"),
                spread_text(row.first_step_s, ".2f"),
            ]
        rows.append(cells)
    # a column no run has a figure for (warm windows record no test accuracy or epoch)
    kept = [i for i in range(len(headers)) if i < 3 or any(r[i] not in ("-", "") for r in rows)]
    headers, rows = [headers[i] for i in kept], [[r[i] for i in kept] for r in rows]
    notes = [SETUP_NOTE] if any(row.setup_flags for row in group.rows) else []
    if group.apart:
        notes.append(f"{APART_NOTE}: {'; '.join(group.apart)}")
    return Table(group_title(group, label), headers, rows, notes)


def rate_text(rate: Optional[Spread], tokens: Optional[int]) -> str:
    """samples/s as a table shows them; ``tokens`` per sample: tokens/s instead."""
    if not tokens or rate is None:
        return spread_text(rate, ",.0f")
    scaled = Spread(rate.median * tokens, rate.low * tokens, rate.high * tokens, rate.n)
    return spread_text(scaled, ",.1f")


def comparison_tables(results: Sequence[RunResult], baseline: Optional[str] = None) -> str:
    """A :func:`group_table` per model and setting, as ``kbench run`` prints them."""
    groups = compare(results, baseline)
    labels = model_labels(g.model for g in groups)
    return "\n\n".join(group_table(g, labels[g.model]).text() for g in groups)


def parameter_mismatches(results: Sequence[RunResult]) -> List[str]:
    """An error per group whose backends built models of different parameter counts:
    kbench promises the same model on every backend."""
    groups = compare(results)
    labels = model_labels(g.model for g in groups)
    lines = []
    for group in groups:
        if any(row.apart for row in group.rows):
            sizes = "; ".join(
                f"{row.backend}: {' and '.join(f'{p:,}' for p in row.params)}"
                for row in group.rows
                if row.params
            )
            lines.append(
                f"error: {group_title(group, labels[group.model])}: the backends built models "
                f"of different parameter counts ({sizes}), so their speeds compare different "
                "models. Its layers depend on the backend: build the same layers on every "
                "backend, then compare."
            )
    return lines


def study_tables(results: Sequence[RunResult], baseline: Optional[str] = None) -> List[Table]:
    """A table per quantity (throughput, speed ratio, utilization, memory, accuracy), as
    the studies kbench follows printed them: a row per model and setting, a column per
    backend (``-``: not run; ``OOM``/``FAILED``/``TIMEOUT``: no run finished). Runs of
    several machines get tables per machine: no median and no ratio mixes machines."""
    measured = measured_machines(results)  # below the tables, runs that ran nowhere
    if len(measured) < 2:
        return _machine_tables(next(iter(measured.values()), results), baseline)
    mixed = (
        f"these runs come from {len(measured)} machines ({', '.join(measured)}): a table "
        "per machine; no ratio is computed across machines"
    )
    return [
        Table(f"{t.title}, on {machine}", t.headers, t.rows, [mixed, *t.notes])
        for machine, runs in measured.items()
        for t in _machine_tables(runs, baseline)
    ]


CellOf = Callable[[BackendRow], Optional[CellLike]]
DrawTable = Callable[[str, CellOf, List[str]], Table]


def _machine_tables(results: Sequence[RunResult], baseline: Optional[str]) -> List[Table]:
    groups = compare(results, baseline)
    if not groups:
        return []
    rows = [row for g in groups for row in g.rows]
    columns = list(dict.fromkeys(row.backend for row in rows))
    label = _row_labeller(groups)
    warned = dict.fromkeys(
        f"warning: {r.config['backend']}, "
        f"{', '.join(label(r.config['model'], bool(r.data.get('synthetic')), r.config))}: {w}"
        for r in results
        if r.kind in MODEL_KINDS
        for w in r.warnings
    )
    row_headers = ["model"] + (["setting"] if len(label("", False, {})) == 2 else [])
    tokens = any(g.sequence_length for g in groups)  # token models: their sequence length
    row_headers += ["sequence"] * tokens

    def row_label(group: ComparisonGroup) -> List[str]:
        length = [str(group.sequence_length or "-")] * tokens
        return label(group.model, group.synthetic, group.settings, group.variant) + length

    def table(title: str, cell: CellOf, notes: List[str]) -> Table:
        cells = [
            row_label(g) + [_study_cell(next((r for r in g.rows if r.backend == b), None), cell)
                            for b in columns]
            for g in groups
        ]  # fmt: skip
        return Table(title, row_headers + columns, cells, notes)

    baseline_of = {id(r): g.baseline for g in groups for r in g.rows}
    throughput_notes = (
        ["measured window only (after the warmup steps)", *warned]
        + [
            f"{APART_NOTE}: {', '.join(row_label(g))}: {'; '.join(g.apart)}"
            for g in groups
            if g.apart
        ]
        + [GENERATE_NOTE] * any(g.mode == "generate" for g in groups)
        + [QUALITY_NOTE] * any(r.quality_flags for r in rows)
        + [SETUP_NOTE] * any(r.setup_flags for r in rows)
    )
    ratio_notes = [
        "above x1 is faster than the baseline; each ratio pairs runs of the same round",
        "interval: order statistics of the per-round ratios (95% where 6 or more rounds, else "
        "the whole range with its coverage); 'no clear difference' where it holds x1",
    ]
    return [
        table(f"Throughput, images/s: {REPEATS}",
              lambda r: flagged(spread_text(r.images_per_sec, ",.0f"), r), throughput_notes),
        table(f"Speed against {', '.join(sorted({g.baseline for g in groups}))}: median of "
              "per-round ratios (interval)",
              lambda r: flagged(ratio_text(r, baseline_of[id(r)]), r), ratio_notes),
        *_measure_tables(groups, rows, table),
    ]  # fmt: skip


def _row_labeller(groups: Sequence[ComparisonGroup]) -> Callable[..., List[str]]:
    """A study table's row label: the model, and where groups differ, the setting."""
    varying = varying_settings([g.settings for g in groups])
    variants = any(g.variant for g in groups)  # groups of one setting, apart (compare)
    labels = model_labels(g.model for g in groups)

    def label(
        model: str, synthetic: bool, settings: Dict[str, Any], variant: str = ""
    ) -> List[str]:
        model = (labels.get(model) or model_label(model)) + (" (synthetic)" if synthetic else "")
        if not (varying or variants):
            return [model]
        parts = [
            f"{SHORT_NAMES.get(k, k.replace('_', ' '))} {setting_cell(settings[k], k)}"
            for k in varying
            if settings.get(k) is not None
            and not (k == "dataset" and synthetic)
            and not (k in SWITCHES and settings[k] == SWITCHES[k].default)  # a switch left off
        ] + ([variant] if variant else [])
        return [model, ", ".join(parts) or "defaults"]

    return label


def _study_cell(row: Optional[BackendRow], cell: CellOf) -> CellLike:
    if row is None:
        return "-"
    if row.images_per_sec is None:
        return failed_text(row)
    text = cell(row) or "-"
    return text if row.all_ok else text + f" ({failed_text(row)} too)"


REPEATS = "median (min-max, n runs)"
SEVERAL_GPUS_NOTE = (
    "per GPU (largest of N; sum ...): the run's readings span N GPUs; the figure is the "
    "largest GPU's peak, the sum adds each GPU's own peak"
)


def _measure_tables(
    groups: Sequence[ComparisonGroup], rows: Sequence[BackendRow], table: DrawTable
) -> List[Table]:
    """The study tables only some runs have figures for: utilization, memory, epochs, accuracy."""
    tables: List[Table] = []
    kinds = sorted({r.utilization_kind for r in rows if r.utilization_kind})
    if kinds:
        tables.append(
            table("Utilization, %", utilization_text, [UTILIZATION_LABELS[k] for k in kinds])
        )
    kinds = sorted({r.memory_kind for r in rows if r.memory_kind})
    unknown = sorted({r.memory_reason for r in rows if r.memory_reason})
    if kinds or unknown:

        def memory(r: BackendRow) -> Optional[str]:
            if r.memory_bytes is None:
                return "n/a" if r.memory_reason else None
            total = r.memory_sum.median if r.memory_sum is not None else None
            text = memory_text(r.memory_bytes.median, r.memory_gpus, total)
            return text + ("" if len(kinds) == 1 else f" ({r.memory_kind})")

        notes = [f"{k}: {MEMORY_LABELS[k]}" for k in kinds]
        notes += [SEVERAL_GPUS_NOTE] * any(r.memory_gpus > 1 for r in rows)
        notes += [f"n/a: {reason}" for reason in unknown]
        notes += sorted({r.memory_reserved_note for r in rows if r.memory_reserved_note})
        tables.append(table("Peak memory", memory, notes))
    if any(r.epoch_time_s for r in rows):
        note = "mean over a run's epochs; the first epoch includes the warmup steps"
        tables.append(table(f"Time per epoch, s: {REPEATS}",
                            lambda r: spread_text(r.epoch_time_s, ".2f"), [note]))  # fmt: skip
    if any(r.test_accuracy for r in rows):
        note = "synthetic data: accuracy only shows that training ran"
        tables.append(table("Test accuracy after training",
                            lambda r: spread_text(r.test_accuracy, ".3f"),
                            [note] * any(g.synthetic for g in groups)))  # fmt: skip
    return tables


GENERATE_NOTE = (
    "--mode generate rows: generated sequences/s (each --max-new-tokens long); tokens/s, "
    "time to first token and per-token latency are in the generation table"
)
APART_NOTE = "shown apart (no ratio to the rows of the same settings)"
SETUP_NOTE = (
    "[CPU: ...], [kernels: ...]: rows measured on different CPUs (model and the features "
    "that decide kernels), or one framework on different CPU kernel libraries: their "
    "numbers and ratios compare those as much as the backends"
)
QUALITY_NOTE = (
    "[...]: measured while the machine was busy (other processes' share of the cores the "
    "run was given, above --busy-threshold), other processes shared its GPU, its clock "
    "was held down, or on battery: "
    "those numbers understate what the machine does when quiet"
)

# How a setting reads in a row label ("batch 32, threads 1")
SHORT_NAMES = {
    "batch_size": "batch", "warmup_steps": "warmup", "train_samples": "train n",
    "test_samples": "test n", "input_shape": "input", "num_classes": "classes",
    "image_size": "images", "data_format": "format", "gpu_memory_fraction": "mem fraction",
    "gpu_memory_growth": "mem growth", "mixed_precision": "mixed", "learning_rate": "lr",
    "duration_s": "seconds", "command": "args", "cwd": "in",
}  # fmt: skip


def setting_cell(value, key: str = "") -> str:
    if value is None:
        return "default"
    if key == "command" and isinstance(value, (list, tuple)):  # kbench exec
        return _command_cell(value)
    if key == "cwd" and isinstance(value, str):  # kbench exec: the folder's name
        return value.rstrip("/").rpartition("/")[2] or value
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, int) for v in value):  # a shape: 28x28x1
            return "x".join(map(str, value))
        return " ".join(map(str, value))  # a command line (kbench exec)
    return str(value)


def _command_cell(command: Sequence[str]) -> str:
    """A kbench exec command's arguments after the script (the model column names it)."""
    words = [str(w) for w in command]
    if words and words[0].rpartition("/")[2].startswith("python"):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] not in ("-m", "-c"):
            words = words[1:]
        words = words[2:] if words[:1] in (["-m"], ["-c"]) else words[1:]
    else:
        words = words[1:]
    text = " ".join(words) or "none"
    return text if len(text) <= 40 else text[:39] + "…"


def keras_text(probe: Dict[str, Any]) -> str:
    """The Keras version a probe found, with keras-hub's beside it where it is installed."""
    hub = probe.get("framework", {}).get("keras_hub_version")
    return (probe.get("keras") or "-") + (f" (keras-hub {hub})" if hub else "")


def framework_text(framework: Dict[str, Any]) -> str:
    """A probe's framework and version, with its quantizer's beside it (NNCF for OpenVINO's
    IR) where it is installed."""
    text = f"{framework.get('name', '-')} {framework.get('version', '')}".strip()
    quantizer = framework.get("quantizer")
    return text + (f" ({quantizer})" if quantizer else "")


def environments_table(probes: Sequence[Dict[str, Any]]) -> str:
    rows = []
    for p in probes:
        framework = p.get("framework", {})
        rows.append([
            p["backend"], "yes" if p["ok"] else "no",
            p.get("environment") or BACKENDS[p["backend"]].environment,
            p.get("python", "-"), keras_text(p),
            framework_text(framework),
            ", ".join(framework.get("devices", [])) or "-",
            kernels_text(framework) if p["ok"] else "-",
        ])  # fmt: skip
    headers = ["backend", "runnable", "environment", "python", "keras", "framework", "devices"]
    return render(headers + ["CPU kernels"], rows)
