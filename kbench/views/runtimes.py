"""The inference table ``kbench run`` prints after its runs when one ran on an inference
runtime: latency at the run's batch (p50, p90, p99), throughput, cold start (building
the model, or loading a runtime's file, plus the first pass), the worker's peak RSS, the
exported file and who exported it, and the runtime's outputs against the Keras model's
(max |d| and argmax agreement, :mod:`kbench.run.exports`). Formats only: every figure
is the result document's."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from kbench.results.config import short_name
from kbench.results.result import RunResult
from kbench.views.tables import Table

HEADERS = [
    "backend", "model", "batch", "p50 ms", "p90 ms", "p99 ms", "img/s", "cold start s",
    "peak RSS MiB", "file MiB", "exported by", "max |d|", "argmax agree",
]  # fmt: skip


def shown(results: Sequence[RunResult]) -> bool:
    """Whether the table has something to say: an inference run on a runtime."""
    return any("agreement" in r.metrics or "export" in r.metrics for r in results)


def runtimes_table(results: Sequence[RunResult]) -> Table:
    rows = [_row(r) for r in results if r.kind == "inference" and r.ok]
    notes = [
        "cold start: the model built (a runtime: its file loaded) and its first pass, apart "
        "from the warm latency; max |d| and argmax agreement: the runtime's outputs against "
        "the Keras model's on the same check inputs"
    ]
    return Table("inference runtimes", HEADERS, rows, notes)


def _row(r: RunResult) -> List[str]:
    m = r.metrics
    latency = m["latency_ms"]
    export: Dict[str, Any] = m.get("export") or {}
    agreement: Optional[Dict[str, Any]] = m.get("agreement")
    rss = next((x["bytes"] for x in m.get("memory", []) if x["kind"] == "process_peak_rss"), None)
    cold = m.get("cold_start_s")
    by = "-"
    if export:
        by = f"{export['exported_by']} ({'cached' if export.get('reused') else 'now'})"
    return [
        r.config["backend"], short_name(r.config["model"]), str(r.config["batch_size"]),
        f"{latency['p50']:.3f}", f"{latency['p90']:.3f}", f"{latency['p99']:.3f}",
        f"{m['images_per_sec']:,.0f}", "-" if cold is None else f"{cold:.2f}",
        "-" if rss is None else f"{rss / 2**20:,.0f}",
        f"{export['file_bytes'] / 2**20:.2f}" if export.get("file_bytes") else "-", by,
        f"{agreement['max_abs_diff']:.1e}" if agreement else "-",
        f"{agreement['argmax_agreement']:.0%} of {agreement['samples']}" if agreement else "-",
    ]  # fmt: skip
