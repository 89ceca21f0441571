"""Tables and figures of operator benchmark results (``kind="ops"``), for ``kbench ops``
and for comparisons and reports that include them.

A column is a backend (with its dtype, device or machine added when the results
differ in them); where several results share a column, the newest is shown. Rows
are an operation at one size, in the order of :data:`kbench.ops.spec.OPS`.
"""

from __future__ import annotations

import io
import textwrap
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.backends import BACKENDS
from kbench.ops.spec import OPS
from kbench.results.result import RunResult
from kbench.results.store import host_of
from kbench.views.figures import SPARE_COLOURS
from kbench.views.tables import Table

NOT_TIMED = {"mismatch": "MISMATCH", "failed": "FAILED", "unsupported": "UNSUPPORTED",
             "skipped": "SKIPPED"}  # fmt: skip
MAX_REASONS = 12


def backend_colour(backend: Optional[str]) -> Optional[str]:
    """The backend's own colour (:mod:`kbench.backends`); None for a name it does not know."""
    spec = BACKENDS.get(backend or "")
    return spec.colour if spec else None


def ops_results(results: Sequence[RunResult]) -> List[RunResult]:
    return [r for r in results if r.kind == "ops"]


def columns(results: Sequence[RunResult]) -> Dict[str, RunResult]:
    """Column label -> the newest ops result of that column, in backend order."""
    results = ops_results(results)

    def distinct(read) -> bool:
        return len({read(r) for r in results}) > 1

    parts = [
        lambda r: r.config.get("backend"),
        *[read for read in (lambda r: r.config.get("dtype"),
                            lambda r: r.metrics.get("device") or r.config.get("device"),
                            host_of) if distinct(read)],
    ]  # fmt: skip
    newest: Dict[str, RunResult] = {}
    for result in sorted(results, key=lambda r: (r.started_at, r.run_id)):
        newest[" ".join(str(read(result)) for read in parts)] = result
    order = list(BACKENDS)

    def rank(item: Tuple[str, RunResult]) -> Tuple[int, str]:
        backend = item[1].config.get("backend")
        return (order.index(backend) if backend in order else len(order), item[0])

    return dict(sorted(newest.items(), key=rank))


def _entries(result: RunResult) -> Dict[Tuple[str, int], Dict[str, Any]]:
    return {(e["op"], e["size"]): e for e in result.metrics.get("ops", [])}


def _rows(cols: Dict[str, RunResult]) -> List[Tuple[str, int]]:
    keys = {key for result in cols.values() for key in _entries(result)}
    rank = {name: i for i, name in enumerate(OPS)}
    return sorted(keys, key=lambda k: (rank.get(k[0], len(rank)), k[0], k[1]))


def seconds_text(value: float, unit: Optional[Tuple[str, float]] = None) -> str:
    """``value`` seconds in ``unit`` (default: its own), 3 significant digits, no exponent."""
    scaled = value / (unit or time_unit(value))[1]
    return f"{scaled:,.0f}" if scaled >= 1000 else f"{scaled:.3g}"


def time_unit(value: float) -> Tuple[str, float]:
    for name, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return name, scale
    return "ns", 1e-9


def time_cell(entry: Optional[Dict[str, Any]], result: RunResult) -> str:
    if entry is None:
        return "-" if result.ok else result.status.upper()
    if entry["status"] != "ok":
        return NOT_TIMED.get(entry["status"], entry["status"].upper())
    unit = time_unit(entry["median_s"])
    spread = f"{seconds_text(entry['p10_s'], unit)}-{seconds_text(entry['p90_s'], unit)}"
    text = f"{seconds_text(entry['median_s'], unit)} {unit[0]} ({spread})"
    flags = (entry.get("quality") or {}).get("flags") or []
    return f"{text} [{'; '.join(flags)}]" if flags else text


def check_cell(found: Dict[str, Dict[str, Any]]) -> str:
    """Across the columns of one row: how many passed, and how close the worst came."""
    checked = {label: e["check"] for label, e in found.items() if e.get("check")}
    if not checked:
        return "-"
    failed = [label for label, c in checked.items() if not c.get("passed")]
    text = f"{len(checked) - len(failed)}/{len(checked)} pass"
    if failed:
        return text + ": off in " + ", ".join(failed)
    ratios = [
        c["max_abs_diff"] / c["tolerance"]
        for c in checked.values()
        if c.get("tolerance") and c.get("max_abs_diff") is not None
    ]
    if not ratios:
        return text + ", exact"
    worst = max(ratios)
    return text + (", worst <1% of tol" if worst < 0.01 else f", worst {worst:.0%} of tol")


def _reasons(cols: Dict[str, RunResult]) -> List[str]:
    notes, seen = [], set()
    for label, result in cols.items():
        if not result.ok:
            notes.append(f"{label}: {result.status.upper()}: {result.reason}")
        for entry in result.metrics.get("ops", []):
            if entry["status"] == "ok" or not entry.get("reason"):
                continue
            key = (label, entry["op"], entry["status"], entry["reason"])
            if key in seen:
                continue
            seen.add(key)
            sizes = [e["size"] for e in result.metrics["ops"]
                     if e["op"] == entry["op"] and e.get("reason") == entry["reason"]]  # fmt: skip
            notes.append(f"{label} {entry['op']} (size {', '.join(map(str, sizes))}): "
                         f"{entry['status'].upper()}: {entry['reason']}")  # fmt: skip
    if len(notes) > MAX_REASONS:
        notes = notes[:MAX_REASONS] + [f"... and {len(notes) - MAX_REASONS} more in the results"]
    return notes


def _size_notes(rows: Sequence[Tuple[str, int]]) -> List[str]:
    names = list(dict.fromkeys(op for op, _ in rows))
    return [f"{name}: {OPS[name].size_meaning}" for name in names if name in OPS]


def ops_tables(results: Sequence[RunResult]) -> List[Table]:
    """Median time per operation and size with backends side by side (and the check
    across them), then GFLOP/s for the operations with a FLOP count."""
    cols = columns(results)
    if not cols:
        return []
    rows = _rows(cols)
    entries = {label: _entries(result) for label, result in cols.items()}
    time_rows = []
    for op, size in rows:
        found = {label: e[(op, size)] for label, e in entries.items() if (op, size) in e}
        cells = [time_cell(entries[label].get((op, size)), cols[label]) for label in cols]
        time_rows.append([op, str(size), *cells, check_cell(found)])
    first = next(iter(cols.values()))
    config = first.config
    time_notes = [
        f"median time per call, in brackets p10-p90 over {timed_calls(config)} timed calls "
        f"after {config.get('warmup')} warmup calls, each ending when the device is done; "
        f"dtype {config.get('dtype')}",
        "check: every backend's output against a float64 numpy reference of the same inputs, "
        "within rtol x scale (see kbench/ops/spec.py); a MISMATCH is not timed",
        "size n per operation:",
        *[f"  {note}" for note in _size_notes(rows)],
        *_reasons(cols),
    ]
    if any((e.get("quality") or {}).get("flags") for es in entries.values() for e in es.values()):
        time_notes.append(
            "[...]: the timed calls ran while other processes used more than the busy "
            "threshold of the cores (or the clock was held down): such a time measures the "
            "contention, not the operation"
        )
    tables = [
        Table(
            title="Operator time (median, p10-p90)",
            headers=["op", "size", *cols, "check"],
            rows=time_rows,
            notes=time_notes,
        )
    ]
    rated_rows = []
    for op, size in rows:
        if op not in OPS or OPS[op].flops is None:
            continue
        cells = []
        for label in cols:
            entry = entries[label].get((op, size))
            if entry is None or entry.get("gflops_per_sec") is None:
                cells.append(time_cell(entry, cols[label]) if entry and entry["status"] != "ok"
                             else "-")  # fmt: skip
                continue
            fraction = entry.get("peak_fraction")
            share = f" ({fraction:.0%})" if fraction is not None else ""
            cells.append(f"{entry['gflops_per_sec']:.3g}{share}")
        rated_rows.append([op, str(size), f"{OPS[op].flops(size) / 1e9:.3g}", *cells])
    if rated_rows:
        peaks: Dict[str, List[str]] = {}  # what the peak was -> the columns it applies to
        for label, result in cols.items():
            peak = result.metrics.get("peak") or {}
            if peak.get("available"):
                text = f"{peak['gflops_per_sec']:.1f} GFLOP/s with {peak.get('threads')} thread(s)"
                peaks.setdefault(text, []).append(label)
            elif peak:
                peaks.setdefault(f"none ({peak.get('reason')})", []).append(label)
        method = next((r.metrics["peak"].get("method") for r in cols.values()
                       if (r.metrics.get("peak") or {}).get("method")), None)  # fmt: skip
        notes = ["GFLOP/s = the operation's floating-point operations / its median time; in "
                 "brackets the share of the machine's float32 matrix-multiply peak"
                 + (f" ({method})" if method else "")]  # fmt: skip
        for text, labels in peaks.items():
            every = len(labels) == len(cols) and len(cols) > 1
            notes.append(f"peak: {text} ({'every column' if every else ', '.join(labels)})")
        tables.append(
            Table(
                title="Operator compute rate (GFLOP/s at the median time, share of peak)",
                headers=["op", "size", "GFLOP/call", *cols],
                rows=rated_rows,
                notes=notes,
            )
        )
    return tables


def ops_figures(results: Sequence[RunResult]) -> List[Tuple[str, bytes]]:
    """One PNG per operation: median time against size on log-log axes, a line per
    backend with its p10-p90 range as error bars. Returns (title, PNG bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    cols = columns(results)
    rows = _rows(cols)
    figures = []
    spare = iter(SPARE_COLOURS * 4)
    colours = {label: backend_colour(r.config.get("backend")) or next(spare, "#333333")
               for label, r in cols.items()}  # fmt: skip
    for op in dict.fromkeys(op for op, _ in rows):
        figure = Figure(figsize=(7.0, 4.6), dpi=100)
        FigureCanvasAgg(figure)
        ax = figure.add_subplot(1, 1, 1)
        drawn = False
        for label, result in cols.items():
            points = sorted(
                (e for e in result.metrics.get("ops", []) if e["op"] == op and e["status"] == "ok"),
                key=lambda e: e["size"],
            )
            if not points:
                continue
            xs = [e["size"] for e in points]
            ys = [e["median_s"] for e in points]
            low = [max(y - e["p10_s"], 0.0) for y, e in zip(ys, points)]
            high = [max(e["p90_s"] - y, 0.0) for y, e in zip(ys, points)]
            ax.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, label=label,
                        color=colours[label])  # fmt: skip
            drawn = True
        if not drawn:
            continue
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        sizes = sorted({size for name, size in rows if name == op})
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(size) for size in sizes])
        ax.xaxis.set_minor_locator(NullLocator())
        spec = OPS.get(op)
        meaning = spec.size_meaning if spec else "size"
        ax.set_xlabel("\n".join(textwrap.wrap(f"size n ({meaning})", 90)), fontsize=9)
        ax.set_ylabel("median time per call (s); bars p10-p90")
        title = f"{op}: time against size"
        summary = textwrap.wrap(spec.summary, 95, max_lines=2, placeholder=" ...") if spec else []
        ax.set_title("\n".join([title, *summary]), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        figures.append((title, buffer.getvalue()))
    return figures


def timed_calls(config) -> str:
    """How many calls each operation was timed for: --calls, or up to it under a
    --target-precision (then each entry's own count is in its precision record)."""
    if config.get("target_precision"):
        return f"up to {config.get('repeats')} (until ±{config['target_precision']:.0%})"
    return str(config.get("repeats"))
