"""How a run ends, one way for every kind of run (run, ops, exec, data-parallel): its
run id, its :class:`Verdict` (:data:`OK`, :func:`timed_out`, :func:`reported`,
:func:`no_result`), the ``environment`` it records, its result document
(:func:`run_result`), kept in the store with its warnings logged (:func:`keep`), and its
line in the log (:func:`summary_line`).
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import uuid
from typing import Any, Dict, Iterable, NamedTuple, Optional

from kbench.measure import sysinfo
from kbench.results.result import RunResult
from kbench.results.store import ResultStore
from kbench_models import short_name

log = logging.getLogger(__name__)

REASON_CHARS = 500  # a reason is one line of at most this many characters
RUN_ID_PARTS_CHARS = 120  # what a run id keeps of its parts: room for "-w123" and more


def new_run_id(*parts: str) -> str:
    """``<UTC stamp>-<parts joined by ->-<6 random hex>``: unique, and sorted by start."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    middle = "-".join(parts)[:RUN_ID_PARTS_CHARS].rstrip("-")
    return "-".join([stamp, middle, uuid.uuid4().hex[:6]])


class Verdict(NamedTuple):
    """``(status, one-line reason, error details)``; None, None for ``ok``."""

    status: str
    reason: Optional[str]
    error: Optional[Dict[str, Any]]


OK = Verdict("ok", None, None)


def first_line(text: str, limit: int = REASON_CHARS) -> str:
    return (text.strip().splitlines() or [""])[0][:limit]


def error_details(kind: str, message: str, log_tail: Iterable[str]) -> Dict[str, Any]:
    return {"type": kind, "message": message, "traceback": "", "log_tail": "\n".join(log_tail)}


def timed_out(reason: str, log_tail: Iterable[str]) -> Verdict:
    return Verdict("timeout", reason, error_details("Timeout", "", log_tail))


def reported(status: str, error: Dict[str, Any], log_tail: Iterable[str]) -> Verdict:
    details = dict(error, log_tail="\n".join(log_tail))
    return Verdict(status, first_line(f"{error['type']}: {error['message']}"), details)


def no_result(kind: str, how: str, reason: str, log_tail: Iterable[str]) -> Verdict:
    return Verdict("failed", reason, error_details(kind, how, log_tail))


def environment(
    interpreter: Any, process_env: Optional[Dict[str, str]], keras_json: Optional[Dict[str, Any]],
    framework: Optional[Dict[str, Any]],
) -> Dict[str, Any]:  # fmt: skip
    return {
        "kbench": sysinfo.kbench_info(), "machine": sysinfo.machine(),
        "interpreter": str(interpreter), "process_env": process_env or {},
        "keras_json": keras_json or {}, "framework": framework or {},
    }  # fmt: skip


def run_result(
    *, run_id: str, kind: str, config: Dict[str, Any], verdict: Verdict, started_at: float,
    ended_at: float, environment: Dict[str, Any], data: Dict[str, Any],
    model: Optional[Dict[str, Any]] = None, metrics: Optional[Dict[str, Any]] = None,
    sampler: Optional[Dict[str, Any]] = None, sweep: Optional[Dict[str, Any]] = None,
) -> RunResult:  # fmt: skip
    """The document of a run from ``started_at`` to ``ended_at`` (epoch seconds)."""
    started = dt.datetime.fromtimestamp(started_at, dt.timezone.utc).isoformat()
    return RunResult(
        run_id, verdict.status, config, started, max(0.0, ended_at - started_at), environment,
        data, model or {}, metrics or {}, verdict.reason, verdict.error, sampler, kind, sweep,
    )  # fmt: skip


def keep(result: RunResult, store: ResultStore, label: str) -> RunResult:
    """Add ``result`` to ``store``, then warn of what it should be read with: its
    framework's warnings and what else the machine did meanwhile (``label``: the run)."""
    store.add(result)
    for warning in result.warnings:
        log.warning("%s: %s", label, warning)
    for flag in (result.metrics.get("quality") or {}).get("flags") or []:
        log.warning("%s: measured while %s", label, flag)
    return result


def summary_line(result: RunResult) -> str:
    """``backend/model on DEVICE: <figures>, <wall> s`` or ``...: STATUS: reason``, the
    figures by kind (``ops``: how many operations ended how, also of a failed worker)."""
    label = f"{result.config['backend']}/{_subject(result)}"
    device = device_used(result)
    label += f" on {device}" if device else ""
    if not result.ok:
        done = f" ({_ops_counts(result)})" if result.kind == "ops" else ""
        return f"{label}: {result.status.upper()}: {result.reason}{done}"
    return f"{label}: {_figures(result)}, {result.wall_time_s:.1f} s"


def device_used(result: RunResult) -> Optional[str]:
    """The device as the framework names it (``cuda:0``, ``GPU:0``, ``cpu``), or None (a
    run that failed before its framework started, ``exec``)."""
    return (result.environment.get("framework") or {}).get("device_used")


def _subject(result: RunResult) -> str:
    if result.kind == "ops":
        return "ops"
    if result.kind == "exec":
        return result.config["model"]  # the script's name, as given
    return short_name(result.config["model"])


def _ops_counts(result: RunResult) -> str:
    counts = collections.Counter(entry["status"] for entry in result.metrics.get("ops", []))
    return ", ".join(f"{n} {status}" for status, n in counts.items()) or "nothing measured"


def _figures(result: RunResult) -> str:
    m = result.metrics
    if result.kind == "ops":
        return _ops_counts(result)
    if result.kind == "exec" and m.get("images_per_sec") is None:
        what = m.get("note") or m.get("images_per_sec_reason") or "no img/s"
        return f"ok (exit 0), {what}"
    if result.kind == "exec":
        detail = (
            f"step p50 {m['step_time_s']['p50'] * 1000:.2f} ms, {m['epochs']} epoch(s), "
            f"{result.model.get('params') or 0:,} params"
        )
    elif result.kind == "inference":
        latency = m["latency_ms"]
        detail = f"latency p50 {latency['p50']:.2f} ms, p99 {latency['p99']:.2f} ms"
    elif result.kind == "generate":
        made = m["generation"]
        return (
            f"ok, {made['tokens_per_sec']:,.1f} tokens/s (first token "
            f"{made['time_to_first_token_ms']:.2f} ms, per token p50 "
            f"{made['per_token_ms']['p50']:.2f} ms, {made['new_tokens']} new tokens)"
        )
    else:
        spread = m["images_per_sec_per_step"]
        detail = (
            f"per step p10-p90 {spread['p10']:,.0f}-{spread['p90']:,.0f}, "
            f"test accuracy {m['test_accuracy']:.3f}"
        )
    return f"ok, {m['images_per_sec']:,.0f} img/s ({detail})"
