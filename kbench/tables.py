"""Plain-text tables of results for the terminal."""

from __future__ import annotations

from typing import Optional, Sequence

from kbench.compare import ComparisonGroup, Spread, compare
from kbench.results import RunResult


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
    if spread.n > 1:
        text += f" ({format(spread.low, spec)}-{format(spread.high, spec)}, n={spread.n})"
    return text


def run_table(results: Sequence[RunResult]) -> str:
    headers = [
        "backend", "model", "mode", "format", "status", "img/s", "spread (per step/batch)",
        "ms p50", "first step s", "test acc", "params",
    ]  # fmt: skip
    rows = []
    for r in results:
        m = r.metrics
        keras_json = r.environment.get("keras_json", {})
        if not r.ok:
            cells = ["-"] * 5
        elif r.kind == "inference":
            latency = m["latency_ms"]
            cells = [
                f"{m['images_per_sec']:,.0f}",
                f"latency p90 {latency['p90']:.2f} ms, p99 {latency['p99']:.2f} ms",
                f"{latency['p50']:.2f}",
                f"{m['first_step_s']:.2f}",
                "-",
            ]
        else:
            per_step = m["images_per_sec_per_step"]
            cells = [
                f"{m['images_per_sec']:,.0f}",
                f"p10-p90 {per_step['p10']:,.0f}-{per_step['p90']:,.0f} img/s",
                f"{m['step_time_s']['p50'] * 1000:.2f}",
                f"{m['first_step_s']:.2f}",
                f"{m['test_accuracy']:.3f}",
            ]
        params = r.model.get("params")
        repeat = r.config.get("repeat", 0)
        rows.append(
            [
                r.config["backend"] + (f" #{repeat + 1}" if repeat else ""),
                r.config["model"],
                r.kind,
                keras_json.get("image_data_format", "-"),
                "ok" if r.ok else r.status.upper(),
                *cells,
                "-" if params is None else f"{params:,}",
            ]
        )
    return render(headers, rows)


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
            spread_text(row.images_per_sec, ",.0f"),
            spread_text(row.ratio, ".2f", prefix="x"),
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
    return f"{group.title}\n{render(headers, rows)}"


def comparison_tables(results: Sequence[RunResult], baseline: Optional[str] = None) -> str:
    """Per model and setting: each backend's img/s and its per-round ratio to the baseline."""
    return "\n\n".join(group_table(g) for g in compare(results, baseline))
