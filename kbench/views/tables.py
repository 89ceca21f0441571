"""Tables of results: plain text for the terminal, Markdown for files."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from kbench.backends import BACKENDS
from kbench.backends.switches import SWITCHES
from kbench.results.ending import device_used
from kbench.results.result import RunResult
from kbench.views.compare import (
    MEMORY_LABELS,
    MODEL_KINDS,
    UTILIZATION_LABELS,
    BackendRow,
    ComparisonGroup,
    Spread,
    by_machine,
    compare,
    kernels_text,
    model_labels,
    varying_settings,
)
from kbench.views.names import model_label


def render(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for cell, width in zip(cells, widths):
            cell = str(cell)
            numeric = cell[:1].isdigit() or cell[:1] in "x-" and cell[1:2].isdigit()
            out.append(cell.rjust(width) if numeric else cell.ljust(width))
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def spread_text(spread: Optional[Spread], spec: str, prefix: str = "") -> str:
    """``median`` alone for one value, ``median (low-high, n=N)`` for several."""
    if spread is None:
        return "-"
    text = prefix + format(spread.median, spec)
    low, high = format(spread.low, spec), format(spread.high, spec)
    if spread.n > 1:
        text += f" (n={spread.n})" if low == high else f" ({low}-{high}, n={spread.n})"
    return text


def ratio_text(row: BackendRow, baseline: str) -> str:
    """The speed ratio with its significance (:mod:`kbench.views.significance`): the
    baseline itself reads ``x1.00``."""
    if row.apart:
        return f"- [{row.apart}]"
    if row.ratio_interval is None:
        return "-"
    if row.backend == baseline:
        return "x1.00"
    return row.ratio_interval.text()


def flagged(text: str, row: BackendRow) -> str:
    """``text`` with the row's quality and setup flags beside it: ``1,234 [busy: 48% of
    ...]``, ``x0.52 [kernels: Eigen]``."""
    flags = [*row.quality_flags, *row.setup_flags]
    return f"{text} [{'; '.join(flags)}]" if flags else text


def run_flagged(text: str, result: RunResult) -> str:
    """``text`` with one run's quality flags (``metrics.quality.flags``) beside it."""
    flags = (result.metrics.get("quality") or {}).get("flags") or []
    return f"{text} [{'; '.join(flags)}]" if flags else text


def run_table(results: Sequence[RunResult]) -> str:
    headers = [
        "backend", "model", "mode", "format", "device", "status", "img/s",
        "spread (per step/batch)",
        "ms p50", "first step s", "test acc", "params",
    ]  # fmt: skip
    rows = []
    labels = model_labels(r.config["model"] for r in results)
    for r in results:
        m = r.metrics
        keras_json = r.environment.get("keras_json", {})
        if not r.ok and m.get("images_per_sec") is not None:  # what it measured before
            cells = [f"{m['images_per_sec']:,.0f} (partial)", *_steps_cells(m)[1:]]
        elif not r.ok:
            cells = ["-"] * 5
        elif r.kind == "inference":
            latency = m["latency_ms"]
            cells = [
                run_flagged(f"{m['images_per_sec']:,.0f}", r),
                f"latency p90 {latency['p90']:.2f} ms, p99 {latency['p99']:.2f} ms",
                f"{latency['p50']:.2f}",
                f"{m['first_step_s']:.2f}",
                "-",
            ]
        elif m.get("images_per_sec") is None and not m.get("step_time_s"):  # exec: no fit
            cells = [m.get("note") or "-", "-", "-", "-", "-"]
        else:
            cells = _steps_cells(m)
            cells[0] = run_flagged(cells[0], r)
        params = r.model.get("params")
        repeat = r.config.get("repeat", 0)
        rows.append(
            [
                r.config["backend"] + (f" #{repeat + 1}" if repeat else ""),
                labels[r.config["model"]],
                r.kind,
                keras_json.get("image_data_format", "-"),
                device_used(r) or "-",
                "ok" if r.ok else r.status.upper(),
                *cells,
                "-" if params is None else f"{params:,}",
            ]
        )
    warned = dict.fromkeys(
        f"\nwarning: {r.config['backend']}/{labels[r.config['model']]}: {w}"
        for r in results
        for w in r.warnings
    )
    return render(headers, rows) + "".join(warned)


def _steps_cells(m: Dict[str, Any]) -> List[str]:
    """img/s, its spread, ms p50, first step and test accuracy of a training run (or a
    kbench exec script's measured calls): the spread only over enough steps (a short
    measurement says how many, and no spread beside it); the accuracy with the name
    the script gave it, where that is not ``accuracy``."""
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


def group_table(group: ComparisonGroup) -> str:
    inference = group.mode == "inference"
    headers = ["backend", "img/s", f"vs {group.baseline}"]
    headers += (
        ["latency p50 ms", "first step s"] if inference else ["test acc", "s/epoch", "first step s"]
    )
    rows = []
    for row in group.rows:
        if row.images_per_sec is None:
            failed = ", ".join(f"{s.upper()} x{n}" for s, n in row.statuses.items())
            rows.append([row.backend, failed] + ["-"] * (len(headers) - 2))
            continue
        cells = [
            row.backend + ("" if row.all_ok else " (some runs failed)"),
            flagged(spread_text(row.images_per_sec, ",.0f"), row),
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
    note = f"\n  {SETUP_NOTE}" if any(row.setup_flags for row in group.rows) else ""
    if group.apart:
        note += f"\n  {APART_NOTE}: {'; '.join(group.apart)}"
    return f"{group.title}\n{render(headers, rows)}{note}"


def comparison_tables(results: Sequence[RunResult], baseline: Optional[str] = None) -> str:
    """Per model and setting: each backend's img/s and its per-round ratio to the baseline."""
    return "\n\n".join(group_table(g) for g in compare(results, baseline))


# Study tables: one table per quantity, a row per model and setting, a column per
# backend, as the studies kbench follows printed them.


@dataclass(frozen=True)
class Table:
    title: str
    headers: List[str]
    rows: List[List[str]]
    notes: List[str]

    def text(self) -> str:
        notes = "".join(f"\n  {n}" for n in self.notes)
        return f"{self.title}\n{render(self.headers, self.rows)}{notes}"

    def markdown(self) -> str:
        def cells(row: Sequence[str]) -> str:
            return "| " + " | ".join(markdown_text(c).replace("|", "\\|") for c in row) + " |"

        lines = [f"### {markdown_text(self.title)}", "", cells(self.headers)]
        lines.append("|" + "|".join("---" for _ in self.headers) + "|")
        lines += [cells(r) for r in self.rows]
        lines += [""] + [f"- {markdown_text(n)}" for n in self.notes] if self.notes else []
        return "\n".join(lines)


def markdown_text(text: object) -> str:
    """``text`` as Markdown shows it, never as HTML: model names, titles and reasons
    come from the user (``<script>`` in a file name stays text), and a line break would
    end a table row."""
    return html.escape(" ".join(str(text).splitlines()), quote=False)


def not_ok_lines(results: Sequence[RunResult]) -> List[str]:
    """One line per run that gave no numbers, with its status and reason (a run that
    is ``unsupported`` on this machine is listed too, though it is no failure)."""
    labels = model_labels(r.config["model"] for r in results)
    return [
        f"  {r.config['backend']}/{labels[r.config['model']]}: {r.status}: {r.reason}"
        for r in results
        if not r.ok
    ]


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= 0.95 * size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _failed_cell(row: BackendRow) -> str:
    """OOM, FAILED or TIMEOUT (with counts when mixed) where no run of a cell finished."""
    parts = [s.upper() + (f" x{n}" if n > 1 else "") for s, n in row.statuses.items()]
    return ", ".join(parts)


def study_tables(results: Sequence[RunResult], baseline: Optional[str] = None) -> List[Table]:
    """Throughput, speed ratio, utilization, memory and accuracy, backends side by side.

    Rows are the distinct settings (model, data set, batch size and whatever else
    differs between runs); a backend that did not run a setting shows ``-``, one
    whose runs all ended without a result shows ``OOM``/``FAILED``/``TIMEOUT``.
    Runs of several machines (a merged store, a sweep run on a cluster) get tables per
    machine, titled with it: no median and no ratio mixes machines.
    """
    machines = by_machine([r for r in results if r.kind in MODEL_KINDS])
    # a machine with no measurement (a run recorded failed before it ran anywhere) has
    # no table; below the tables, such runs are listed with their reasons
    measured = {host: runs for host, runs in machines.items() if any(r.ok for r in runs)}
    if len(machines) <= 1 or not measured:
        return _machine_tables(results, baseline)
    if len(measured) == 1:
        (runs,) = measured.values()
        return _machine_tables(runs, baseline)
    machines = measured
    mixed = (
        f"these runs come from {len(machines)} machines ({', '.join(machines)}): a table "
        "per machine; no ratio is computed across machines"
    )
    out: List[Table] = []
    for machine, runs in machines.items():
        for t in _machine_tables(runs, baseline):
            out.append(Table(f"{t.title}, on {machine}", t.headers, t.rows, [mixed, *t.notes]))
    return out


def _machine_tables(results: Sequence[RunResult], baseline: Optional[str]) -> List[Table]:
    """:func:`study_tables` of the runs of one machine."""
    groups = compare(results, baseline)
    if not groups:
        return []
    columns = list(dict.fromkeys(row.backend for g in groups for row in g.rows))
    varying = [k for k in varying_settings(groups) if k not in ("model",)]
    variants = any(g.variant for g in groups)  # groups of one setting, apart (compare)
    row_headers = ["model"] + (["setting"] if varying or variants else [])
    labels = {g.model: g.label for g in groups}

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

    def row_label(group: ComparisonGroup) -> List[str]:
        return label(group.model, group.synthetic, group.settings, group.variant)

    warned = dict.fromkeys(
        f"warning: {r.config['backend']}, "
        f"{', '.join(label(r.config['model'], bool(r.data.get('synthetic')), r.config))}: {w}"
        for r in results
        if r.kind in MODEL_KINDS
        for w in r.warnings
    )

    def table(title: str, cell: Callable[[BackendRow], Optional[str]], notes: List[str]) -> Table:
        rows = []
        for group in groups:
            by_backend = {row.backend: row for row in group.rows}
            cells = []
            for backend in columns:
                row = by_backend.get(backend)
                if row is None:
                    cells.append("-")
                elif row.images_per_sec is None:
                    cells.append(_failed_cell(row))
                else:
                    text = cell(row) or "-"
                    cells.append(text + ("" if row.all_ok else f" ({_failed_cell(row)} too)"))
            rows.append(row_label(group) + cells)
        return Table(title, row_headers + columns, rows, notes)

    baselines = sorted({g.baseline for g in groups})
    baseline_of = {id(r): g.baseline for g in groups for r in g.rows}
    repeats = "median (min-max, n runs)"
    tables = [
        table(
            f"Throughput, images/s: {repeats}",
            lambda r: flagged(spread_text(r.images_per_sec, ",.0f"), r),
            ["measured window only (after the warmup steps)", *warned]
            + [apart_note(row_label(g), g) for g in groups if g.apart]
            + ([QUALITY_NOTE] if any(r.quality_flags for g in groups for r in g.rows) else [])
            + ([SETUP_NOTE] if any(r.setup_flags for g in groups for r in g.rows) else []),
        ),
        table(
            f"Speed against {', '.join(baselines)}: median of per-round ratios (interval)",
            lambda r: flagged(ratio_text(r, baseline_of[id(r)]), r),
            [
                "above x1 is faster than the baseline; each ratio pairs runs of the same round",
                "interval: order statistics of the per-round ratios (95% where 6 or more "
                "rounds, else the whole range with its coverage); 'no clear difference' "
                "where it holds x1",
            ],
        ),
    ]
    return tables + _measure_tables(groups, table, repeats)


def _measure_tables(
    groups: Sequence[ComparisonGroup],
    table: Callable[[str, Callable[[BackendRow], Optional[str]], List[str]], Table],
    repeats: str,
) -> List[Table]:
    """The study tables that only some runs have figures for: utilization, peak memory,
    time per epoch, test accuracy (``table`` draws one, as :func:`study_tables` does)."""
    tables: List[Table] = []
    kinds = {r.utilization_kind for g in groups for r in g.rows if r.utilization_kind}
    if kinds:
        tables.append(
            table(
                "Utilization, %",
                lambda r: r.utilization and f"{r.utilization.median:.0f} ({r.utilization_kind})",
                [UTILIZATION_LABELS[k] for k in sorted(kinds)],
            )
        )
    kinds = {r.memory_kind for g in groups for r in g.rows if r.memory_kind}
    unknown = {r.memory_reason for g in groups for r in g.rows if r.memory_reason}
    if kinds or unknown:
        tables.append(
            table(
                "Peak memory",
                lambda r: (
                    _bytes(r.memory_bytes.median)
                    + ("" if len(kinds) == 1 else f" ({r.memory_kind})")
                    if r.memory_bytes
                    else ("n/a" if r.memory_reason else None)
                ),
                [f"{k}: {MEMORY_LABELS[k]}" for k in sorted(kinds)]
                + [f"n/a: {reason}" for reason in sorted(unknown)]
                + sorted(
                    {r.memory_reserved_note for g in groups for r in g.rows} - {None}  # type: ignore[operator]
                ),
            )
        )
    if any(r.epoch_time_s for g in groups for r in g.rows):
        tables.append(
            table(
                f"Time per epoch, s: {repeats}",
                lambda r: spread_text(r.epoch_time_s, ".2f"),
                ["mean over a run's epochs; the first epoch includes the warmup steps"],
            )
        )
    if any(r.test_accuracy for g in groups for r in g.rows):
        tables.append(
            table(
                "Test accuracy after training",
                lambda r: spread_text(r.test_accuracy, ".3f"),
                ["synthetic data: accuracy only shows that training ran"]
                if any(g.synthetic for g in groups)
                else [],
            )
        )
    return tables


def apart_note(label: Sequence[str], group: ComparisonGroup) -> str:
    """Why ``group`` (its row ``label``) stands apart from rows of the same settings."""
    return f"{APART_NOTE}: {', '.join(label)}: {'; '.join(group.apart)}"


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
    """A kbench exec command as a row tells it apart: its arguments after the script
    (the model column names the script; the interpreter's path says nothing)."""
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


def environments_table(probes: Sequence[Dict[str, Any]]) -> str:
    """``kbench env``: one row per backend probe (what its environment has, whether it
    runs, its framework's devices and CPU kernels)."""
    rows = []
    for p in probes:
        framework = p.get("framework", {})
        rows.append(
            [
                p["backend"],
                "yes" if p["ok"] else "no",
                BACKENDS[p["backend"]].environment,
                p.get("python", "-"),
                p.get("keras") or "-",
                f"{framework.get('name', '-')} {framework.get('version', '')}".strip(),
                ", ".join(framework.get("devices", [])) or "-",
                kernels_text(framework) if p["ok"] else "-",
            ]
        )
    headers = ["backend", "runnable", "environment", "python", "keras", "framework", "devices"]
    return render(headers + ["CPU kernels"], rows)
