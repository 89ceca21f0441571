"""A warm comparison's result, one document per backend (parent side).

A backend's warm worker (:mod:`kbench.run.windows`) measures a window per round; its
document keeps every window in ``metrics.windows`` (round, place, figures, quality, and
why its round was dropped, where it was). The comparison's own figures are read as a
fresh run's, over the *counted* windows (ok, in a round not dropped): ``images_per_sec``
their median, memory the largest reading of each kind, energy the sum; ``metrics.window``
counts them. Import, build and first step were measured once, as the worker started.
Where every round was dropped, the figures are of every window that ran, flagged, not
absent. The document is rewritten after each round: one cut short keeps its windows.
"""

from __future__ import annotations

import re
import statistics
from typing import Any, Dict, List, Optional, Sequence

from kbench.measure.stats import percentiles, rate_percentiles

NOTE = (
    "a warm comparison: the framework, model and compilation were started once, before "
    "the first window; throughput is each window's steps over their time, as a fresh "
    "run's measured window, and the comparison's is the median over its counted windows. "
    "Not captured: the first step and compilation (the worker's start, measured once), and "
    "what grows across windows (allocator pools, caches). The framework's memory readings "
    "are the process's peaks since it started, the sampler's each window's own. Each "
    "window's first step is untimed (the framework's per-call set-up). Test accuracy is "
    "not measured: each backend trains as many steps as its windows take."
)
# a window's own figures, kept in its record (the rest of its reply is the comparison's)
RECORDED = (
    "images_per_sec", "measured_images", "measured_steps", "measured_time_s", "step_time_s",
    "step_times_s", "final_train_loss", "final_train_accuracy",
)  # fmt: skip


def window_record(
    index: int, round_index: int, position: int, metrics: Dict[str, Any], started_at: float,
    ended_at: float,
) -> Dict[str, Any]:  # fmt: skip
    return {
        "index": index, "round": round_index, "position": position, "status": "ok",
        "started_at": started_at, "ended_at": ended_at, "dropped": None,
        **{name: metrics.get(name) for name in RECORDED},
        "memory": metrics.get("memory") or [], "energy": metrics.get("energy"),
        "quality": metrics.get("quality"),
    }  # fmt: skip


def failed_record(
    round_index: int, position: int, status: str, reason: Optional[str], started_at: float,
    ended_at: float,
) -> Dict[str, Any]:  # fmt: skip
    return {
        "index": None, "round": round_index, "position": position, "status": status,
        "reason": reason, "started_at": started_at, "ended_at": ended_at, "dropped": None,
    }  # fmt: skip


def counted(records: Sequence[Dict[str, Any]], strict: bool = False) -> List[Dict[str, Any]]:
    """Ok windows in rounds not dropped; where every round was, every ok window, unless
    ``strict`` (a decision, as tune's, takes quiet rounds only)."""
    ran = [r for r in records if r.get("status") == "ok"]
    kept = [r for r in ran if not r.get("dropped")]
    return kept if strict else kept or ran


def every_round_dropped(records: Sequence[Dict[str, Any]]) -> bool:
    ran = [r for r in records if r.get("status") == "ok"]
    return bool(ran) and all(r.get("dropped") for r in ran)


def is_comparison(result: Any) -> bool:
    return "windows" in (result.metrics or {})


def round_figures(metrics: Dict[str, Any], strict: bool = False) -> Dict[int, float]:
    """Each :func:`counted` window's throughput by round; {} for no comparison."""
    return {
        int(r["round"]): float(r["images_per_sec"])
        for r in counted((metrics.get("windows") or {}).get("list") or [], strict)
        if isinstance(r.get("images_per_sec"), (int, float))
    }


def comparison_metrics(
    records: Sequence[Dict[str, Any]], start: Dict[str, Any], facts: Dict[str, Any],
    tags: Dict[str, Any],
) -> Dict[str, Any]:  # fmt: skip
    """A comparison's metrics: its counted windows' figures, ``start``'s (import, build,
    first step), ``facts`` of its windows (size, worker, batch), ``tags`` (parity)."""
    used = counted(records)
    steps = [t for r in used for t in r.get("step_times_s") or []]
    ran = [r for r in records if r.get("status") == "ok"]
    summary = {
        "counted": sum(not r.get("dropped") for r in ran),
        "dropped_windows": sum(bool(r.get("dropped")) for r in ran),
        "failed_windows": len(records) - len(ran),
        "every_round_dropped": every_round_dropped(records),
        "superseded": None,  # the reason, where the comparison was measured again whole
    }
    return {
        "images_per_sec": statistics.median(r["images_per_sec"] for r in used) if used else None,
        "measured_images": sum(r.get("measured_images") or 0 for r in used),
        "measured_steps": len(steps),
        "measured_time_s": sum(r.get("measured_time_s") or 0.0 for r in used),
        "step_time_s": percentiles(steps),
        "images_per_sec_per_step": rate_percentiles([facts["batch_size"]] * len(steps), steps),
        "step_times_s": steps,
        "step_ends_s": [],
        "final_train_loss": used[-1].get("final_train_loss") if used else None,
        "final_train_accuracy": used[-1].get("final_train_accuracy") if used else None,
        "memory": largest_readings([m for r in used for m in r.get("memory") or []]),
        "energy": summed_energy(used),
        "quality": comparison_quality(records, used),
        **start,
        "window": dict(facts, **summary, note=NOTE),
        "windows": {"list": list(records)},
        **tags,
        "warm_worker": True, "epoch_time_s": [], "epoch_train_loss": [],
        "epoch_train_accuracy": [], "test_loss": None, "test_accuracy": None,
    }  # fmt: skip


def largest_readings(readings: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Each kind of reading (and GPU) once: its largest (or, never read, its reason)."""
    best: Dict[Any, Dict[str, Any]] = {}
    for reading in readings:
        key = (reading.get("kind"), reading.get("device"), reading.get("source"))
        held = best.get(key)
        value, kept = reading.get("bytes"), (held or {}).get("bytes")
        if held is None or (value is not None and (kept is None or value > kept)):
            best[key] = reading
    return list(best.values())


def summed_energy(used: Sequence[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    found = [r.get("energy") for r in used if r.get("energy") is not None]
    if not found:
        return None
    unknown = next((e for e in found if not e.get("available")), None)
    if unknown is not None:
        return unknown
    joules = sum(e["measured_j"] for e in found)
    images = sum(r.get("measured_images") or 0 for r in used)
    methods = sorted({e["method"] for e in found})
    return {
        "available": True, "measured_j": joules,
        "method": methods[0] if len(methods) == 1 else "mixed",
        "windows": len(found), "images_per_joule": images / joules if joules > 0 else None,
    }  # fmt: skip


def share_span(shares: Sequence[float]) -> str:
    """``54-75%`` (``54%`` where they read alike): a range of shares of the cores."""
    low, high = f"{min(shares):.0%}", f"{max(shares):.0%}"
    return low if low == high else f"{low[:-1]}-{high}"


def comparison_quality(
    records: Sequence[Dict[str, Any]], used: Sequence[Dict[str, Any]]
) -> Optional[Dict[str, Any]]:
    """Each kind of flag the counted windows had, with how many; where every round was
    dropped, the busy flag with the share of the cores others used."""
    qualities = [r.get("quality") or {} for r in used]
    if not any(qualities) and not every_round_dropped(records):
        return None
    shares = [q["other_share"] for q in qualities if isinstance(q.get("other_share"), (int, float))]
    flags: Dict[str, int] = {}
    for quality in qualities:
        for flag in quality.get("flags") or []:
            flags[flag.split(":")[0]] = flags.get(flag.split(":")[0], 0) + 1
    texts = [f"{kind} in {n} of {len(used)} windows" for kind, n in flags.items()]
    if every_round_dropped(records):
        own = ""
        if any(s > 0 for s in shares):
            own = f"{share_span(shares)} of the cores used by other processes in its own windows; "
        texts = [
            f"busy: every round was dropped ({own}the first as "
            f"{next(r['dropped'] for r in records if r.get('dropped'))}); the figures are of "
            f"all {len(used)} windows, measured while the machine was busy"
        ] + [t for t in texts if not t.startswith(("busy", "shared GPU"))]
    return {
        "flags": texts,
        "other_share": statistics.median(shares) if shares else None,
        "windows": len(used),
    }


def comparison_sampler(
    sampled: Sequence[Dict[str, Any]], records: Sequence[Dict[str, Any]]
) -> Optional[Dict[str, Any]]:
    """Every window's series one after the other (``sampled[i]`` is ``records[i]``'s, or
    None), the last window's sources, and the summary over the counted windows: the
    sample-weighted mean, the largest maximum, the summed increase of a counter."""
    pairs = [(s, r) for s, r in zip(sampled, records) if s]
    if not pairs:
        return None
    windows = [s for s, _ in pairs]
    used = [id(r) for r in counted(records)]
    kept = [s for s, r in pairs if id(r) in used] or windows
    names = sorted({n for s in windows for n in s.get("series", {})} - {"t"})
    series: Dict[str, List[Any]] = {"t": [t for s in windows for t in s["series"].get("t", [])]}
    for name in names:
        series[name] = [
            v for s in windows
            for v in s["series"].get(name, [None] * len(s["series"].get("t", [])))
        ]  # fmt: skip
    summary = {
        window: merged_summary([s.get("summary", {}).get(window) or {} for s in kept])
        for window in ("run", "measured")
    }
    last = windows[-1]
    return {
        "interval_s": last.get("interval_s"), "sources": last.get("sources", {}),
        "series": series, "summary": summary, "labels": last.get("labels", {}),
        "note": f"the {len(windows)} windows' samples, one after the other; the summary "
        "over the counted windows",
    }  # fmt: skip


def merged_summary(windows: Sequence[Dict[str, Dict[str, Any]]]) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for name in sorted({n for w in windows for n in w}):
        stats = [w[name] for w in windows if name in w]
        if any("increase" in s for s in stats):
            out[name] = {
                "increase": sum(s.get("increase") or 0.0 for s in stats),
                "samples": sum(s.get("samples") or 0 for s in stats),
            }
            continue
        having = [s for s in stats if s.get("mean") is not None and s.get("samples")]
        if not having:
            out[name] = dict(stats[0])  # a reading never taken: its reason
            continue
        samples = sum(s["samples"] for s in having)
        out[name] = {
            "mean": sum(s["mean"] * s["samples"] for s in having) / samples,
            "max": max(s["max"] for s in having),
            "samples": samples,
        }
    return out


# stores written before comparisons were one document (schema 3: a document per window)


WINDOW_RUN_ID = re.compile(r"^(?P<worker>.+)-w\d{3,}$")


def window_of(result: Any) -> Dict[str, Any]:
    return (result.metrics or {}).get("window") or {}


def from_windows(documents: Sequence[Any]) -> Any:
    """One comparison document from a schema-3 worker's window documents (``-wNNN``, the
    round in ``config.repeat``, the start's figures in the first)."""
    ordered = sorted(documents, key=lambda r: (r.config.get("repeat", 0), r.run_id))
    records = [_record_of(r) for r in ordered]
    first = next((r for r in ordered if r.ok), ordered[0])
    window = window_of(first)
    start = {name: first.metrics.get(name) for name in (
        "import_time_s", "build_time_s", "first_step_s", "time_to_first_step_s",
        "warmup_steps", "warmup_time_s")}  # fmt: skip
    facts = {"steps": window.get("steps"), "window_s": first.config.get("window_s"),
             "batch_size": first.config.get("batch_size"),
             "worker_pid": window.get("worker_pid"), "fresh_process": False}  # fmt: skip
    tags = {"parity": first.metrics["parity"]} if "parity" in first.metrics else {}
    metrics = comparison_metrics(records, start, facts, tags) if any(r.ok for r in ordered) else {}
    superseded = [  # a comparison measured again: all its windows were marked (busy ones kept
        # their own reason), so one marked window says the whole comparison was superseded
        r
        for r in ordered
        if (window_of(r).get("dropped") or "").startswith("superseded")
    ]
    if metrics and superseded:
        metrics["window"]["superseded"] = window_of(superseded[0])["dropped"]
    worst = next((r for r in ordered if not r.ok), first)
    return type(first)(
        run_id=window.get("worker_run_id") or first.run_id.rsplit("-w", 1)[0],
        status=worst.status, config=dict(first.config, repeat=0),
        started_at=ordered[0].started_at,
        wall_time_s=sum(r.wall_time_s for r in ordered), environment=first.environment,
        data=first.data, model=first.model, metrics=metrics, reason=worst.reason,
        error=worst.error, kind=first.kind, sweep=_sweep_of(first),
        sampler=comparison_sampler([r.sampler for r in ordered], records),
    )  # fmt: skip


def _record_of(result: Any) -> Dict[str, Any]:
    window = window_of(result)
    round_index = int(result.config.get("repeat", 0))
    markers = result.metrics.get("markers") or {}
    if not result.ok:
        return failed_record(round_index, None, result.status, result.reason, 0.0, 0.0)
    record = window_record(
        window.get("index"), round_index, window.get("position"), result.metrics,
        markers.get("measured_start") or 0.0, markers.get("measured_end") or 0.0,
    )  # fmt: skip
    dropped = window.get("dropped")
    record["dropped"] = None if (dropped or "").startswith("superseded") else dropped
    record["idle_wait_s"] = window.get("idle_wait_s")
    return record


def _sweep_of(first: Any) -> Optional[Dict[str, Any]]:
    if first.sweep is None:
        return None
    windows = first.sweep.get("windows") or {}
    return dict(first.sweep, run_key=windows.get("run_key") or first.sweep.get("run_key"))
