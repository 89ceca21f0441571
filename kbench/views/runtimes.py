"""The inference table ``kbench run`` prints after its runs when one ran on an inference
runtime: latency at the run's batch (p50, p90, p99), throughput, cold start (building
the model, or loading a runtime's file, plus the first pass), the worker's peak RSS, the
exported file and who exported it, and the runtime's outputs against the Keras model's
(max |d| and argmax agreement, :mod:`kbench.run.exports`), the precision run and, on
real data, the model's top-1 accuracy beside the float model's ("int8: accuracy 0.861
vs 0.864"), with the quantizing method in a note; and where the store holds the same
runtime's float32 run of the same settings, the speed against it beside the accuracy
("int8: x2.1 faster than float32, accuracy 0.861 vs 0.864", :func:`kbench.results.edge.
float_speedups`). And the generation table after ``--mode generate`` runs (``kbench run``
and ``kbench compare``): time to first token, per-token latency, tokens/s, and whether
each run's greedy tokens are its reference's. Formats only: every figure is the result
document's or the analysis' (:func:`kbench.results.analysis.token_agreement`)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from kbench.results.analysis import token_agreement
from kbench.results.config import short_name
from kbench.results.edge import Speedup
from kbench.results.result import RunResult
from kbench.views.edge import ratio_text
from kbench.views.tables import Table

HEADERS = [
    "backend", "model", "batch", "precision", "p50 ms", "p90 ms", "p99 ms", "img/s", "cold start s",
    "peak RSS MiB", "file MiB", "exported by", "max |d|", "argmax agree", "top-1 vs float",
]  # fmt: skip


def shown(results: Sequence[RunResult]) -> bool:
    """Whether the table has something to say: an inference run on a runtime."""
    return any(
        "agreement" in r.metrics or "export" in r.metrics or _precision(r) != "float32"
        for r in results
    )


def _precision(r: RunResult) -> str:
    return (r.metrics.get("quantization") or {}).get("precision", "float32")


def runtimes_table(
    results: Sequence[RunResult], against_float: Optional[Mapping[str, Speedup]] = None
) -> Table:
    """``against_float``: a quantized run's speed against its float32 run (by run id)."""
    against_float = against_float or {}
    ran = [r for r in results if r.kind == "inference" and r.ok]
    notes = [
        "cold start: the model built (a runtime: its file loaded, quantized where asked) and "
        "its first pass, apart from the warm latency; max |d| and argmax agreement: the "
        "runtime's outputs against the float32 Keras model's on the same check inputs"
    ]
    notes += [_precision_note(r, against_float.get(r.run_id)) for r in ran
              if _precision(r) != "float32"]  # fmt: skip
    rows = [_row(r) for r in ran]
    headers = list(HEADERS)
    if any(r.run_id in against_float for r in ran):
        at = headers.index("img/s") + 1
        headers.insert(at, "vs float32")
        for r, row in zip(ran, rows):
            row.insert(at, ratio_text(against_float.get(r.run_id)))
    return Table("inference runtimes", headers, rows, notes)


def _accuracy(r: RunResult) -> Optional[str]:
    """``0.861 vs 0.864``: the run's model's top-1 on the test split, and the float model's."""
    accuracy = r.metrics.get("accuracy")
    return None if not accuracy else f"{accuracy['top1']:.3f} vs {accuracy['float_top1']:.3f}"


def _precision_note(r: RunResult, against: Optional[Speedup] = None) -> str:
    """``onnxruntime int8: x2.1 faster than float32 (p50 ...), accuracy 0.861 vs 0.864
    (...); method``."""
    accuracy = _accuracy(r)
    speed = ""
    if against is not None:
        p50 = r.metrics["latency_ms"]["p50"]
        speed = (
            f"{ratio_text(against)} than {against.against} (p50 {p50:.3f} vs "
            f"{against.reference_p50_ms:.3f} ms, its run in this store), "
        )
    said = "no accuracy (the exporter trains on real data only)"
    if accuracy:
        said = f"accuracy {accuracy} ({r.metrics['accuracy']['samples']:,} test samples)"
    method = r.metrics["quantization"]["method"]
    return f"{r.config['backend']} {_precision(r)}: {speed}{said}; {method}"


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
        _precision(r),
        f"{latency['p50']:.3f}", f"{latency['p90']:.3f}", f"{latency['p99']:.3f}",
        f"{m['images_per_sec']:,.0f}", "-" if cold is None else f"{cold:.2f}",
        "-" if rss is None else f"{rss / 2**20:,.0f}",
        f"{export['file_bytes'] / 2**20:.2f}" if export.get("file_bytes") else "-", by,
        f"{agreement['max_abs_diff']:.1e}" if agreement else "-",
        f"{agreement['argmax_agreement']:.0%} of {agreement['samples']}" if agreement else "-",
        _accuracy(r) or "-",
    ]  # fmt: skip


# generation (--mode generate) ---------------------------------------------------------

GENERATION_HEADERS = [
    "backend", "model", "batch", "prompt + new", "first token ms", "per token p50 ms",
    "p90 ms", "p99 ms", "tokens/s", "weights of", "same tokens", "first difference",
]  # fmt: skip


def generation_shown(results: Sequence[RunResult]) -> bool:
    """Whether the generation table has something to say: a generate run gave figures."""
    return any(r.kind == "generate" and r.ok for r in results)


def generation_table(results: Sequence[RunResult]) -> Table:
    """A row per generate run: time to first token, per-token latency, tokens/s, and its
    greedy tokens against its reference's (:func:`kbench.results.analysis.token_agreement`)."""
    ran = [r for r in results if r.kind == "generate" and r.ok]
    agreement = token_agreement(ran)
    notes = [
        "first token: the prompt to the first new token's logits (median over the measured "
        "generations, after a warmup generation); per token: from one token to the next; "
        "tokens/s: the batch's new tokens over the generations' time; the device is done "
        "at every token (a host array)",
        "same tokens: every greedy token equal to those of the run whose weights it decoded "
        "with (the first Keras backend of the session); first difference: the position "
        "(row) where they part and the gap between the two largest logits there, the "
        "reference's / this run's (a small gap: a near tie that rounding can flip)",
    ]
    notes += sorted({r.metrics["generation"]["method"] for r in ran})
    notes += sorted({f"{r.config['backend']}: {r.metrics['generation']['weights']['note']}"
                     for r in ran if r.metrics["generation"]["weights"].get("note")})  # fmt: skip
    rows = [_generation_row(r, agreement[r.run_id]) for r in ran]
    return Table("generation (greedy, batch of prompts)", GENERATION_HEADERS, rows, notes)


def _generation_row(r: RunResult, agreement: Dict[str, Any]) -> List[str]:
    made = r.metrics["generation"]
    per_token = made["per_token_ms"]
    same, parted = "-", "-"
    if agreement.get("is_reference"):
        same = "reference"
    elif "same" in agreement:
        same = f"yes, {agreement['tokens']} tokens" if agreement["same"] else "no"
        found = agreement.get("first_difference")
        if found:
            parted = (
                f"position {found['position']} (row {found['row']}), gap "
                f"{found['reference_gap']:.2g} / {found['gap']:.2g}"
            )
    else:
        same = f"not compared: {agreement['why']}"
    return [
        r.config["backend"], short_name(r.config["model"]), str(made["batch"]),
        f"{made['prompt_tokens']} + {made['new_tokens']} of {made['window']}",
        f"{made['time_to_first_token_ms']:.2f}", f"{per_token['p50']:.2f}",
        f"{per_token['p90']:.2f}", f"{per_token['p99']:.2f}", f"{made['tokens_per_sec']:,.1f}",
        str(made["weights"].get("from")), same, parted,
    ]  # fmt: skip
