"""The report's edge section: per model and machine, one sentence that answers the edge
question ("On laptop, litert int8 is fastest at batch 1: 0.08 ms p50, x1.4 faster than
litert float32, 0.2 points of top-1 accuracy lost (0.748 vs 0.750)") and a table of
runtime x precision x batch x threads with latency, cold start, peak RSS, file size,
agreement with Keras, accuracy and the speed against float32 and against Keras; and a
figure of latency against accuracy at the verdict's batch. Formats only: every number,
ratio and the verdict are :mod:`kbench.results.edge`'s."""

from __future__ import annotations

from typing import List, Optional, Sequence

from kbench.results.edge import EdgeGroup, EdgeRow, Speedup, Verdict, edge_groups
from kbench.results.result import RunResult
from kbench.views.figures import WIDTH_IN, Drawn, Outcome, Skipped, colour, new_figure, png_of
from kbench.views.tables import Table, dataset_label, esc, model_label

HEADING = "The edge question: runtime, precision, batch"
HEADERS = [
    "backend", "precision", "batch", "threads", "p50 ms", "p99 ms", "img/s", "vs float32",
    "cold start s", "peak RSS MiB", "file MiB", "max |d|", "argmax agree", "top-1 vs float",
    "note",
]  # fmt: skip
NUMERIC = ("batch", "threads", "p50 ms", "p99 ms", "img/s", "cold start s", "peak RSS MiB",
           "file MiB")  # fmt: skip
NOTE = (
    "p50/p99: latency of one call at the row's batch, median over its runs; vs float32: "
    "the same runtime's float32 p50 over this row's, per round (x2.0 faster: half the "
    "latency); cold start: loading the file (or building the model) and the first call; "
    "max |d| and argmax agreement: the outputs against the float32 Keras model's on the same "
    "inputs; top-1 vs float: this model's accuracy on the test split beside the float Keras "
    "model's, where the exporter trained it on real data"
)


def ratio_text(found: Optional[Speedup]) -> str:
    """``x2.1 faster``, ``x1.3 slower`` (the other way round), with the range over rounds."""
    if found is None:
        return "-"
    ratio = found.ratio
    faster = ratio.median >= 1
    shown = ratio.median if faster else 1 / ratio.median
    text = f"x{shown:.1f} {'faster' if faster else 'slower'}"
    if ratio.n > 1:
        low, high = sorted((ratio.low, ratio.high) if faster else (1 / ratio.high, 1 / ratio.low))
        text += f" (x{low:.1f}-{high:.1f})"
    return text


def threads_text(threads: Optional[int]) -> str:
    return "all" if threads is None else str(threads)


def accuracy_text(row: EdgeRow) -> str:
    """``0.3 points of top-1 accuracy lost (0.861 vs 0.864)``, or why there is none."""
    lost = row.accuracy_lost
    if lost is None:
        return "accuracy not measured (the exporter trains on real data only)"
    both = f"{row.top1:.3f} vs {row.float_top1:.3f} for the float model"
    if lost <= 0:
        return f"no top-1 accuracy lost ({both})"
    return f"{lost * 100:.1f} points of top-1 accuracy lost ({both})"


def verdict_sentence(group: EdgeGroup) -> str:
    """The answer for ``group``, one sentence."""
    where = f"On {group.host}, for {model_label(group.model)}"
    found: Optional[Verdict] = group.verdict
    if found is None:
        return f"{where}, no runtime finished a measured run."
    row = found.row
    assert row.p50_ms is not None
    threads = ""
    if found.threads_vary:
        threads = (
            " on every core"
            if row.threads is None
            else f" on {row.threads} thread" + ("s" * (row.threads != 1))
        )
    parts = [f"{row.p50_ms.median:.2f} ms p50"]
    if row.against_float is not None:
        parts.append(f"{ratio_text(row.against_float)} than {row.against_float.against}")
    if row.against_keras is not None:
        parts.append(f"{ratio_text(row.against_keras)} than Keras ({row.against_keras.against})")
    parts.append(accuracy_text(row))
    busy = " Measured while the machine was busy." if row.quality_flags else ""
    return (
        f"{where}, {row.backend} {row.precision} is fastest at batch {found.batch_size}"
        f"{threads}: {', '.join(parts)}.{busy}"
    )


def verdicts(results: Sequence[RunResult]) -> List[str]:
    """:func:`verdict_sentence` of each group of ``results`` that ran on a runtime."""
    return [verdict_sentence(group) for group in edge_groups(results)]


def group_title(group: EdgeGroup) -> str:
    title = f"{model_label(group.model)} on {dataset_label(group.dataset)}, on {group.host}"
    return title + (f" ({group.variant})" if group.variant else "")


def edge_table(group: EdgeGroup) -> Table:
    keras = next((r.against_keras.against for r in group.rows if r.against_keras), None)
    headers = list(HEADERS)
    if keras:
        headers.insert(headers.index("vs float32") + 1, f"vs {keras}")
    rows = [_row(row, bool(keras)) for row in group.rows]
    methods = {
        f"{row.backend} {row.precision}: {row.quantization}": None
        for row in group.rows
        if row.ok and row.precision != "float32" and row.quantization
    }
    notes = [NOTE, *methods]
    if group.synthetic:
        notes.append("SYNTHETIC data: the latency is real; no accuracy was measured")
    return Table(group_title(group), headers, rows, notes)


def _row(row: EdgeRow, keras: bool) -> List[str]:
    lead = [row.backend, row.precision, str(row.batch_size), threads_text(row.threads)]
    if not row.ok:
        blank = ["-"] * (len(HEADERS) - len(lead) - 1 + keras)
        return lead + blank + [f"{row.status}: {row.reason}"]
    assert row.p50_ms is not None and row.p99_ms is not None
    accuracy = "-"
    if row.top1 is not None and row.float_top1 is not None:
        accuracy = f"{row.top1:.3f} vs {row.float_top1:.3f}"
    cells = lead + [
        f"{row.p50_ms.median:.3f}", f"{row.p99_ms.median:.3f}",
        f"{row.images_per_sec.median:,.0f}" if row.images_per_sec else "-",
        ratio_text(row.against_float),
    ]  # fmt: skip
    if keras:
        cells.append(ratio_text(row.against_keras))
    cells += [
        f"{row.cold_start_s.median:.2f}" if row.cold_start_s else "-",
        f"{row.peak_rss_bytes.median / 2**20:,.0f}" if row.peak_rss_bytes else "-",
        f"{row.file_bytes / 2**20:.2f}" if row.file_bytes else "-",
        f"{row.max_abs_diff:.1e}" if row.max_abs_diff is not None else "-",
        f"{row.argmax_agreement:.0%} of {row.agreement_samples}"
        if row.argmax_agreement is not None else "-",
        accuracy,
        "; ".join(row.quality_flags) or (f"{len(row.runs)} runs" if len(row.runs) > 1 else ""),
    ]  # fmt: skip
    return cells


def edge_html(groups: Sequence[EdgeGroup]) -> str:
    """The section's body before its figures: the verdicts, then a table per group."""
    sentences = "".join(f"<li>{esc(verdict_sentence(g))}</li>" for g in groups)
    body = f'<ul class="verdicts">{sentences}</ul>'
    for group in groups:
        table = edge_table(group)
        numeric = [i for i, h in enumerate(table.headers) if h in NUMERIC]
        body += table.html(numeric)
    return body


LATENCY_ACCURACY = "Latency against accuracy"
MARKERS = {"float32": "o", "float16": "s", "int8": "^"}


def latency_accuracy_figure(group: EdgeGroup) -> Outcome:
    """At the verdict's batch: a point per runtime, precision and threads, p50 latency
    (log) against top-1 accuracy, marked by precision, labelled with the file's size."""
    title = f"{LATENCY_ACCURACY}: {group_title(group)}"
    if group.verdict is None:
        return Skipped(title, "no runtime finished a measured run")
    batch = group.verdict.batch_size
    rows = [r for r in group.rows if r.ok and r.batch_size == batch and r.top1 is not None]
    if not rows:
        return Skipped(title, "no accuracy was measured (the exporter trains on real data only)")
    backends = list(dict.fromkeys(r.backend for r in rows))
    figure = new_figure(4.2, WIDTH_IN * 0.75)
    ax = figure.subplots()
    for row in rows:
        assert row.p50_ms is not None
        label = f"{row.backend} {row.precision}"
        if group.verdict.threads_vary:
            label += ", every core" if row.threads is None else f", {row.threads} thr."
        hollow = group.verdict.threads_vary and row.threads is not None
        shade = colour(row.backend, backends)
        ax.scatter(
            row.p50_ms.median, row.top1, s=48, zorder=3, label=label, edgecolors=shade,
            facecolors="none" if hollow else shade, marker=MARKERS.get(row.precision, "D"),
        )  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel(f"latency p50 at batch {batch}, ms (log; left is faster)")
    ax.set_ylabel("top-1 accuracy on the test split")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    caption = (
        f"One point per runtime, precision and thread count at batch {batch} (circle "
        "float32, square float16, triangle int8; hollow: the thread count named, filled: "
        "every core); up and to the left is the better trade-off. File sizes and memory are "
        "in the table above."
    )
    return Drawn(title, png_of(figure), caption)


def edge_outcomes(groups: Sequence[EdgeGroup]) -> List[Outcome]:
    return [latency_accuracy_figure(group) for group in groups]
