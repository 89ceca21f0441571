"""The edge question, computed once: for this model on this machine, which runtime and
which precision give the lowest latency, at what memory and file size, and how much
accuracy that costs. The report's edge section and ``kbench run``'s inference table read
it; :mod:`kbench.views.edge` only formats it.

**Which runs.** Inference runs, grouped by machine and by everything they ran but the
backend, the precision, the batch and the threads (the model, its data, the measuring
settings, the model's identity, :func:`kbench.results.analysis.identity`); a group is
studied when one of its runs is on an inference runtime (``BackendSpec.inference_only``:
onnxruntime, openvino-ir, litert, Keras' OpenVINO backend). Its rows are (backend,
precision, batch, threads), each the median over its repeats; a row whose runs all ended
without a result (a precision the runtime lacks: ``unsupported``) keeps its status and
reason.

**Speed against float32.** A quantized row's speed against the same runtime's float32 row
at the same batch and threads is the float32 p50 over its own, per round
(:func:`~kbench.results.analysis.round_ratios`, rounds paired by repeat; the ratio of the
medians where no round pairs), the median of those: "x2.1 faster". Beside it, each row's
speed against Keras (the first Keras backend's float32 row at the same batch and threads)
where the group has one.

**Verdict.** At the smallest batch measured (batch 1 where it ran), the row of the lowest
median p50 latency: the fastest runtime and precision, with its accuracy lost (the float
Keras model's top-1 on the test split minus this model's, where the exporter trained on
real data and so accuracy was measured).
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from kbench.backends import BACKENDS
from kbench.results import readings
from kbench.results.analysis import (
    Spread,
    identity,
    quality_flags,
    round_ratios,
    varying_settings,
)
from kbench.results.result import RunResult
from kbench.results.store import Filter, ResultStore, StoreError, host_of

log = logging.getLogger(__name__)

FLOAT = "float32"
PRECISION_ORDER = ("float32", "float16", "int8")
# what a row is, within its group: the settings the edge study sweeps
ROW_SETTINGS = ("backend", "precision", "batch_size", "threads")
NOT_GROUPED = (*ROW_SETTINGS, "repeat", "timeout_s", "sample_interval_s")


def is_runtime(backend: str) -> bool:
    """An inference runtime: an exported model's or Keras' own OpenVINO backend."""
    spec = BACKENDS.get(backend)
    return spec is not None and spec.inference_only is not None


def precision_of(result: RunResult) -> str:
    return str(result.config.get("precision") or FLOAT)


@dataclass(frozen=True)
class Speedup:
    """This row's speed against ``against``'s: the other's p50 over this one's."""

    against: str  # "onnxruntime float32", "tensorflow float32"
    ratio: Spread  # per round, or one ratio of the medians (``paired`` False)
    reference_p50_ms: float
    paired: bool = True


@dataclass(frozen=True)
class EdgeRow:
    backend: str
    precision: str
    batch_size: int
    threads: Optional[int]  # None: every core
    runs: Tuple[RunResult, ...]  # its ok runs; none where it has no result
    status: str = "ok"  # the newest run's where no run is ok
    reason: str = ""
    p50_ms: Optional[Spread] = None
    p90_ms: Optional[Spread] = None
    p99_ms: Optional[Spread] = None
    images_per_sec: Optional[Spread] = None
    cold_start_s: Optional[Spread] = None
    peak_rss_bytes: Optional[Spread] = None
    file_bytes: Optional[int] = None
    exported_by: Optional[str] = None
    quantization: Optional[str] = None  # the method the result names
    max_abs_diff: Optional[float] = None  # the largest over its runs
    argmax_agreement: Optional[float] = None  # the lowest over its runs
    agreement_samples: Optional[int] = None
    top1: Optional[float] = None  # median over its runs; None where not measured
    float_top1: Optional[float] = None  # the float Keras model's, as its runs recorded
    accuracy_samples: Optional[int] = None
    against_float: Optional[Speedup] = None  # quantized rows only
    against_keras: Optional[Speedup] = None
    quality_flags: List[str] = field(default_factory=list)

    @property
    def key(self) -> Tuple[str, str, int, Optional[int]]:
        return (self.backend, self.precision, self.batch_size, self.threads)

    @property
    def ok(self) -> bool:
        return bool(self.runs)

    @property
    def accuracy_lost(self) -> Optional[float]:
        """The float model's top-1 minus this one's (a fraction: 0.003 is 0.3 points)."""
        if self.top1 is None or self.float_top1 is None:
            return None
        return self.float_top1 - self.top1


@dataclass(frozen=True)
class Verdict:
    """The fastest row at the smallest batch measured."""

    row: EdgeRow
    batch_size: int
    threads_vary: bool  # whether the rows at that batch ran on different threads
    candidates: int  # ok rows at that batch


@dataclass(frozen=True)
class EdgeGroup:
    host: str
    model: str
    dataset: str
    synthetic: bool
    settings: Dict[str, Any]  # the group's shared settings (a run's config, less the rows')
    rows: List[EdgeRow]
    verdict: Optional[Verdict]
    variant: str = ""  # how it differs from other groups of its model on its machine


def edge_groups(results: Sequence[RunResult]) -> List[EdgeGroup]:
    """The edge study of ``results``: a group per machine and model setting that ran on an
    inference runtime, in the order they first appear; [] where none did."""
    inference = [r for r in results if r.kind == "inference" and not r.superseded]
    found: Dict[Tuple, List[RunResult]] = {}
    for result in inference:
        found.setdefault(_group_key(result), []).append(result)
    studied = [runs for runs in found.values() if any(is_runtime(_backend(r)) for r in runs)]
    return _with_variants([_group(runs) for runs in studied])


def _backend(result: RunResult) -> str:
    return str(result.config.get("backend", ""))


def _group_key(result: RunResult) -> Tuple:
    settings = tuple(sorted((k, repr(v)) for k, v in result.config.items() if k not in NOT_GROUPED))
    return (host_of(result), settings, identity(result))


def _group(runs: Sequence[RunResult]) -> EdgeGroup:
    by_row: Dict[Tuple, List[RunResult]] = {}
    for result in runs:
        c = result.config
        key = (_backend(result), precision_of(result), int(c.get("batch_size") or 0),
               c.get("threads"))  # fmt: skip
        by_row.setdefault(key, []).append(result)
    rows = {key: _row(key, members) for key, members in by_row.items()}
    rows = _with_speedups(rows, order=list(by_row))
    first = runs[0]
    ordered = sorted(rows.values(), key=_row_order(list(by_row)))
    settings = {k: v for k, v in first.config.items() if k not in NOT_GROUPED}
    return EdgeGroup(
        host_of(first), str(first.config.get("model", "?")),
        str(first.config.get("dataset", "?")), any((r.data or {}).get("synthetic") for r in runs),
        settings, ordered, verdict(ordered),
    )  # fmt: skip


def _row_order(seen: List[Tuple]):
    backends = list(dict.fromkeys(key[0] for key in seen))

    def order(row: EdgeRow) -> Tuple:
        precision = PRECISION_ORDER.index(row.precision) if row.precision in PRECISION_ORDER else 9
        threads = row.threads if row.threads is not None else 10**6  # every core: last
        return (row.batch_size, threads, backends.index(row.backend), precision)

    return order


def _row(key: Tuple, members: Sequence[RunResult]) -> EdgeRow:
    backend, precision, batch, threads = key
    ok = tuple(r for r in members if r.ok and r.metrics.get("latency_ms"))
    if not ok:
        newest = max(members, key=lambda r: r.started_at)
        status = newest.status if newest.status != "ok" else "no latency"
        return EdgeRow(backend, precision, batch, threads, (), status, newest.reason or "")
    m = [r.metrics for r in ok]
    agreements = [x["agreement"] for x in m if x.get("agreement")]
    accuracies = [x["accuracy"] for x in m if x.get("accuracy")]
    export = next((x["export"] for x in m if x.get("export")), {})
    quantization = next((x["quantization"] for x in m if x.get("quantization")), {})
    return EdgeRow(
        backend, precision, batch, threads, ok,
        p50_ms=_spread(m, "p50"), p90_ms=_spread(m, "p90"), p99_ms=_spread(m, "p99"),
        images_per_sec=Spread.of([x["images_per_sec"] for x in m if x.get("images_per_sec")]),
        cold_start_s=Spread.of([x["cold_start_s"] for x in m if x.get("cold_start_s") is not None]),
        peak_rss_bytes=Spread.of(_rss(ok)), file_bytes=export.get("file_bytes"),
        exported_by=export.get("exported_by"), quantization=quantization.get("method"),
        max_abs_diff=max((a["max_abs_diff"] for a in agreements), default=None),
        argmax_agreement=min((a["argmax_agreement"] for a in agreements), default=None),
        agreement_samples=agreements[0]["samples"] if agreements else None,
        top1=statistics.median(a["top1"] for a in accuracies) if accuracies else None,
        float_top1=statistics.median(a["float_top1"] for a in accuracies) if accuracies else None,
        accuracy_samples=accuracies[0].get("samples") if accuracies else None,
        quality_flags=quality_flags(ok),
    )  # fmt: skip


def _spread(metrics: Sequence[Dict[str, Any]], percentile: str) -> Optional[Spread]:
    return Spread.of([x["latency_ms"][percentile] for x in metrics])


def _rss(runs: Sequence[RunResult]) -> List[float]:
    peaks = [readings.memory_peak(r, "process_peak_rss") for r in runs]
    return [float(p.largest) for p in peaks if p is not None]


def _with_speedups(rows: Dict[Tuple, EdgeRow], order: List[Tuple]) -> Dict[Tuple, EdgeRow]:
    """Each quantized row's speed against its runtime's float32 row, and each row's against
    the first Keras backend's float32 row, at the same batch and threads."""
    keras = next((k[0] for k in order if not is_runtime(k[0]) and rows[k].ok), None)
    out = {}
    for key, row in rows.items():
        backend, precision, batch, threads = key
        if not row.ok:
            out[key] = row
            continue
        own = rows.get((backend, FLOAT, batch, threads)) if precision != FLOAT else None
        base = (
            rows.get((keras, FLOAT, batch, threads))
            if keras and key[:2] != (keras, FLOAT)
            else None
        )
        out[key] = replace(row, against_float=speedup(row, own), against_keras=speedup(row, base))
    return out


def speedup(row: EdgeRow, reference: Optional[EdgeRow]) -> Optional[Speedup]:
    """``reference``'s p50 over ``row``'s, per round where the rounds pair (x2 faster: 2.0)."""
    if reference is None or not reference.ok or row.p50_ms is None or reference.p50_ms is None:
        return None
    base = {readings.round_of(r): r.metrics["latency_ms"]["p50"] for r in reference.runs}
    mine = [(readings.round_of(r), r.metrics["latency_ms"]["p50"]) for r in row.runs]
    slower = round_ratios(mine, base)  # this row's p50 over the reference's, per round
    against = f"{reference.backend} {reference.precision}"
    if slower and all(s > 0 for s in slower):
        ratio = Spread.of([1 / s for s in slower])
        assert ratio is not None
        return Speedup(against, ratio, reference.p50_ms.median)
    if not row.p50_ms.median:
        return None
    one = reference.p50_ms.median / row.p50_ms.median
    return Speedup(against, Spread(one, one, one, 1), reference.p50_ms.median, paired=False)


def verdict(rows: Sequence[EdgeRow]) -> Optional[Verdict]:
    """The row of the lowest median p50 at the smallest batch any ok row ran (1 where it
    ran); the first such row on a tie. None where no row is ok."""
    ok = [row for row in rows if row.ok and row.p50_ms is not None]
    if not ok:
        return None
    batch = min(row.batch_size for row in ok)
    at_batch = [row for row in ok if row.batch_size == batch]
    fastest = min(at_batch, key=lambda row: row.p50_ms.median)  # type: ignore[union-attr]
    threads_vary = len({row.threads for row in at_batch}) > 1
    return Verdict(fastest, batch, threads_vary, len(at_batch))


def _with_variants(groups: List[EdgeGroup]) -> List[EdgeGroup]:
    """Each group named by the settings that set it apart from its model's other groups on
    its machine (``duration_s=2``), where there are such."""
    out = []
    for group in groups:
        alike = [g.settings for g in groups if (g.host, g.model) == (group.host, group.model)]
        keys = varying_settings(alike, skip=NOT_GROUPED)
        variant = ", ".join(f"{k}={group.settings.get(k)!r}" for k in keys)
        out.append(replace(group, variant=variant))
    return out


def float_speedups(results: Sequence[RunResult], store: Path) -> Dict[str, Speedup]:
    """:func:`float_counterparts` of ``results`` among the ok float32 inference runs of their
    backends in the store at ``store`` (only those documents are read); {} where no result
    is quantized or the store cannot be read."""
    quantized = [r for r in results if r.ok and r.kind == "inference" and precision_of(r) != FLOAT]
    if not quantized:
        return {}
    wanted = [
        Filter("kind", ("inference",)), Filter("status", ("ok",)),
        Filter("precision", (FLOAT,)),
        Filter("backend", tuple(sorted({_backend(r) for r in quantized}))),
    ]  # fmt: skip
    try:
        stored = ResultStore(Path(store), read_only=True).results(wanted)
    except (StoreError, OSError) as err:
        log.debug("no float32 runs read from %s: %s", store, err)
        stored = []
    return float_counterparts(quantized, stored)


def float_counterparts(
    results: Sequence[RunResult], stored: Sequence[RunResult]
) -> Dict[str, Speedup]:
    """For each ok quantized inference run of ``results`` (by run id), its speed against
    the newest ok float32 run of ``stored`` (or ``results``) of the same backend, machine
    and every other setting: what ``kbench run --precision int8`` prints beside accuracy
    when the store holds the float32 run."""
    out: Dict[str, Speedup] = {}
    floats = [r for r in [*stored, *results] if r.ok and precision_of(r) == FLOAT]
    for result in results:
        if not (result.ok and result.kind == "inference" and precision_of(result) != FLOAT):
            continue
        if not result.metrics.get("latency_ms"):
            continue
        same = [r for r in floats if r.kind == "inference" and _same_but_precision(r, result)]
        if not same:
            continue
        reference = max(same, key=lambda r: r.started_at)
        key = (_backend(result), FLOAT, 0, None)
        ref_row = _row(key, [reference])
        row = _row((_backend(result), precision_of(result), 0, None), [result])
        found = speedup(row, ref_row)
        if found is not None:
            out[result.run_id] = found
    return out


def _same_but_precision(a: RunResult, b: RunResult) -> bool:
    def key(r: RunResult) -> Tuple:
        ignored = ("precision", "repeat", "timeout_s", "sample_interval_s")
        config = {k: v for k, v in r.config.items() if k not in ignored}
        return (host_of(r), repr(sorted(config.items())), identity(r))

    return key(a) == key(b)
