"""What Keras did inside a process, as events, and the figures they give.

The kbench callback (:mod:`kbench.callbacks`) writes one JSON object per line to an
events file (:class:`EventLog`): ``fit_begin``/``fit_end`` (and ``evaluate_*``,
``predict_*``), one ``batch`` per step (wall-clock start and end, sample count),
``epoch`` with Keras' logs, ``model``, and ``error`` where the instrumentation failed.
Each line is flushed as written, so a crash loses nothing written; a last line cut short
is skipped. :func:`summarize` turns them into the figures of ``kbench run``. Standard
library and numpy only: imported under every backend's interpreter.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from kbench.measure.stats import measured_seconds, percentiles, rate_percentiles

EVENTS_VARIABLE = "KBENCH_EVENTS"  # the file a kbench exec child writes its events to
NO_TRAINING = "no Keras training observed"
UNKNOWN_SIZE = (
    "the number of samples in some batches was unknown (Keras 3 does not pass it to "
    "callbacks; kbench reads it from fit's arrays, not from a data set or generator): "
    "give Throughput(batch_size=..., samples=...)"
)


def plain(value: Any) -> Any:
    """A JSON-safe copy of a Keras log value: numbers as floats, the rest as text."""
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    try:
        number = float(value)  # numpy, tensor scalars; reading one waits for the device
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


class EventLog:
    """Events in memory and, where a path is given, appended to a JSON-lines file."""

    def __init__(self, path: Optional[str] = None) -> None:
        self.path = path
        self.events: List[Dict[str, Any]] = []
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path else None

    @classmethod
    def from_environment(cls) -> EventLog:
        return cls(os.environ.get(EVENTS_VARIABLE) or None)

    def write(self, event: str, **fields: Any) -> Dict[str, Any]:
        record = {"event": event, "t": time.time(), **fields}
        with self._lock:
            self.events.append(record)
            if self._file is not None:
                try:
                    self._file.write(json.dumps(record, default=str) + "\n")
                    self._file.flush()
                except (OSError, ValueError):  # a full disk or a closed file: memory only
                    self._file = None
        return record


def read_events(path: Path) -> List[Dict[str, Any]]:
    """The events of a file :class:`EventLog` wrote; a line cut short is skipped."""
    events = []
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and "event" in event:
            events.append(event)
    return events


def summarize(events: List[Dict[str, Any]], warmup_steps: int) -> Dict[str, Any]:
    """Training figures from events (``training_observed: False`` without a batch). The
    measured window is ``kbench run``'s, time between ``fit`` calls left out;
    ``images_per_sec`` is None where a batch size was unknown."""
    facts = model_facts(events)
    batches = [e for e in events if e["event"] == "batch" and e.get("stage") == "train"]
    others = {
        "evaluate_calls": sum(e["event"] == "evaluate_end" for e in events),
        "predict_calls": sum(e["event"] == "predict_end" for e in events),
        "instrumentation_errors": [e.get("message") for e in events if e["event"] == "error"],
    }
    if not batches:
        return {"training_observed": False, "note": NO_TRAINING, **facts, **others}
    fits = [e for e in events if e["event"] == "fit_begin"]
    first_call = batches[0].get("call", 0)
    first_fit = [b for b in batches if b.get("call", 0) == first_call]
    warmup = min(warmup_steps, len(first_fit) - 1) if len(batches) > 1 else 0
    measured = batches[warmup:]
    runs = [(b.get("call"), b.get("epoch")) for b in batches]  # each epoch of each fit
    parts = [i for i in range(len(runs)) if i == 0 or runs[i] != runs[i - 1]]
    times = ([b["t0"] for b in batches], [b["t1"] for b in batches])
    measured_time = measured_seconds(*times, parts, warmup)
    step_times = [b["t1"] - b["t0"] for b in measured]
    sizes = [b.get("size") for b in measured]
    known = all(isinstance(s, int) for s in sizes)
    images = sum(sizes) if known else None
    epochs = [e for e in events if e["event"] == "epoch"]
    fit_ends = [e for e in events if e["event"] == "fit_end"]
    # the last fit's logs, else the last epoch's
    last_logs = (fit_ends and fit_ends[-1].get("logs")) or (epochs and epochs[-1].get("logs")) or {}
    opened = batches[warmup - 1]["t1"] if warmup else batches[0]["t0"]  # the measured window
    return {
        "training_observed": True,
        "images_per_sec": images / measured_time if known and measured_time > 0 else None,
        "images_per_sec_reason": None if known else UNKNOWN_SIZE,
        "measured_images": images,
        "measured_steps": len(measured),
        "measured_time_s": measured_time,
        "warmup_steps": warmup,
        "step_time_s": percentiles(step_times),
        "images_per_sec_per_step": rate_percentiles(sizes, step_times) if known else {},
        "step_times_s": step_times,
        "batch_sizes": sorted({s for s in sizes if isinstance(s, int)}),
        "first_step_s": batches[0]["t1"] - batches[0]["t0"],
        "fit_calls": len(fits),
        "epochs": len(epochs),
        "epoch_time_s": [e.get("seconds") for e in epochs],
        "epoch_train_loss": [(e.get("logs") or {}).get("loss") for e in epochs],
        "final_logs": last_logs,
        "final_train_loss": last_logs.get("loss"),
        "final_train_accuracy": last_logs.get("accuracy", last_logs.get("acc")),
        "evaluate_results": [e.get("result") for e in events if e["event"] == "evaluate_end"],
        "markers": {
            "fit_start": fits[0]["t"] if fits else batches[0]["t0"],
            "first_step_start": batches[0]["t0"], "first_step_end": batches[0]["t1"],
            "warmup_end": opened, "measured_start": opened, "measured_end": batches[-1]["t1"],
        },
        **facts,
        **others,
    }  # fmt: skip


def model_facts(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The last ``model`` event's parameter count, backend and Keras version."""
    seen = [e for e in events if e["event"] == "model"]
    last = seen[-1] if seen else {}
    return {
        "params": last.get("params"), "keras_backend": last.get("backend"),
        "keras_version": last.get("keras_version"), "model_name": last.get("name"),
    }  # fmt: skip
