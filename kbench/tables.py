"""Plain-text tables of results for the terminal."""

from __future__ import annotations

from typing import Dict, List, Sequence

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


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def run_table(results: Sequence[RunResult]) -> str:
    headers = [
        "backend",
        "model",
        "format",
        "status",
        "img/s",
        "p10-p90 img/s (per step)",
        "ms/step p50",
        "first step s",
        "test acc",
        "params",
    ]
    rows = []
    for r in results:
        m = r.metrics
        keras_json = r.environment.get("keras_json", {})
        if r.ok:
            spread = m["images_per_sec_per_step"]
            cells = [
                f"{m['images_per_sec']:,.0f}",
                f"{spread['p10']:,.0f}-{spread['p90']:,.0f}",
                f"{m['step_time_s']['p50'] * 1000:.2f}",
                f"{m['first_step_s']:.2f}",
                f"{m['test_accuracy']:.3f}",
                f"{r.model.get('params', 0):,}",
            ]
        else:
            cells = ["-"] * 5 + [_fmt(r.model.get("params"), ",")]
        rows.append(
            [
                r.config["backend"],
                r.config["model"],
                keras_json.get("image_data_format", "-"),
                r.status.upper() if not r.ok else "ok",
                *cells,
            ]
        )
    return render(headers, rows)


def comparison_tables(results: Sequence[RunResult]) -> str:
    """Per model and batch size: img/s of each backend and the ratio to the first one run."""
    groups: Dict[tuple, List[RunResult]] = {}
    for r in results:
        key = (r.config["model"], r.config["dataset"], r.config["batch_size"])
        groups.setdefault(key, []).append(r)
    blocks = []
    for (model, dataset, batch), group in groups.items():
        baseline = group[0]
        base_ips = baseline.metrics.get("images_per_sec") if baseline.ok else None
        synthetic = " (synthetic data)" if group[0].data.get("synthetic") else ""
        rows = []
        for r in group:
            if not r.ok:
                rows.append([r.config["backend"], r.status.upper(), "-", "-", "-", "-"])
                continue
            m = r.metrics
            ratio = f"x{m['images_per_sec'] / base_ips:.2f}" if base_ips else "-"
            epochs = m["epoch_time_s"]
            rows.append(
                [
                    r.config["backend"],
                    f"{m['images_per_sec']:,.0f}",
                    ratio,
                    f"{m['test_accuracy']:.3f}",
                    f"{sum(epochs) / len(epochs):.2f}",
                    f"{m['first_step_s']:.2f}",
                ]
            )
        headers = [
            "backend",
            "img/s",
            f"vs {baseline.config['backend']}",
            "test acc",
            "s/epoch",
            "first step s",
        ]
        title = f"{model} on {dataset}{synthetic}, batch {batch}"
        blocks.append(f"{title}\n{render(headers, rows)}")
    return "\n\n".join(blocks)
