"""``kbench.record(...)``: a result document from your own process.

    import kbench, kbench.measure
    from kbench.callbacks import Throughput

    speed = Throughput(warmup_steps=5)
    with kbench.measure.sample() as sampling:
        model.fit(x, y, batch_size=64, epochs=2, callbacks=[speed])
    kbench.record("results", name="my_model", throughput=speed, sampling=sampling)

The document is one ``kbench exec`` would have written for this process (``kind``
``exec``): the callback's figures (img/s over the measured window, step times,
epochs, final logs, parameter count), the sampler's series and summary, and the
machine. The backend is the one Keras reported (else ``KERAS_BACKEND``). The store's
writer lock is held while writing, as every kbench writer does.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from kbench.exec.config import ExecConfig
from kbench.exec.figures import observe
from kbench.exec.runner import new_run_id, sampled_rss, script_document, training_metrics
from kbench.measure import sampler as sampler_mod
from kbench.results.config import ConfigError
from kbench.results.lock import writer_lock
from kbench.results.store import ResultStore, check_output_dir
from kbench.run.metrics import sampled_memory


def record(
    store: Any = "results",
    name: Optional[str] = None,
    *,
    throughput: Any = None,
    events: Optional[List[Dict[str, Any]]] = None,
    sampling: Any = None,
    backend: Optional[str] = None,
    warmup_steps: Optional[int] = None,
    repeat: int = 0,
) -> Path:
    """Write one result document into ``store`` and return its path.

    Args:
        store: the results store (a directory; created if needed).
        name: what tables call the run (default: the script's file name).
        throughput: a :class:`kbench.callbacks.Throughput` that watched the fits; or
        events: the events such a callback wrote (from ``KBENCH_EVENTS`` files).
        sampling: a finished ``kbench.measure.sample()`` block, for CPU, memory and
            GPU series; without it the document has no sampler section.
        backend: default the backend Keras reported, else ``KERAS_BACKEND``.
        warmup_steps: default the callback's own.
        repeat: which round this is, when you record several runs of one setting.
    """
    events, warmup = _events_and_warmup(throughput, events, warmup_steps)
    observed = observe(list(events), warmup)
    backend = backend or observed.get("keras_backend") or os.environ.get("KERAS_BACKEND")
    if backend is None:
        raise ConfigError(
            "backend", "expected backend=...: no fit reported one and KERAS_BACKEND is unset."
        )
    config = ExecConfig(
        backend=backend,
        command=tuple([sys.executable, *sys.argv]),
        name=name,
        repeat=repeat,
        warmup_steps=warmup,
        sample_interval_s=getattr(sampling, "interval_s", 0.0),
    )
    times = [e["t"] for e in events if isinstance(e.get("t"), (int, float))]
    started = getattr(sampling, "started_at", None) or (min(times) if times else time.time())
    ended = getattr(sampling, "ended_at", None) or (max(times) if times else time.time())
    metrics: Dict[str, Any] = {
        "command": list(config.command),
        "exit_code": None,
        "instrumented": True,
        "images_per_sec": None,
        "test_accuracy": None,
        "memory": [],
        **training_metrics(observed),
    }
    sampled = None
    if sampling is not None:
        windows = sampler_mod.windows_from_markers(observed.get("markers") or {}, started, ended)
        sampled = sampling.result(windows)
        metrics["memory"] = sampled_rss(sampled.summary) + sampled_memory(sampled.summary)
    result = script_document(
        dict(config.to_dict(), recorded_by="kbench.record"), config.name, observed,
        run_id=new_run_id(config), started_at=started, ended_at=ended,
        interpreter=sys.executable,
        process_env={k: os.environ[k] for k in ("KERAS_BACKEND",) if k in os.environ},
        keras_json=_keras_json(), framework={"name": backend, "warnings": []},
        metrics=metrics, sampled=sampled,
    )  # fmt: skip
    directory = check_output_dir(Path(store))
    with writer_lock(directory):
        return ResultStore(directory).add(result)


def _events_and_warmup(
    throughput: Any, events: Optional[List[Dict[str, Any]]], warmup_steps: Optional[int]
) -> Tuple[List[Dict[str, Any]], int]:
    """The events to record (the callback's, else those given) and the warmup steps (the
    ones asked for, else the callback's, else 5); :class:`ConfigError` without events."""
    if throughput is not None:
        events = throughput.events
        warmup = throughput.warmup_steps if warmup_steps is None else warmup_steps
    else:
        warmup = 5 if warmup_steps is None else warmup_steps
    if events is None:
        raise ConfigError(
            "throughput",
            "expected the Throughput callback that watched your fit (throughput=...) or "
            "its events (events=...); received neither.",
        )
    return events, warmup


def _keras_json() -> Dict[str, Any]:
    """The backend and image data format of the Keras this process imported, if any."""
    keras = sys.modules.get("keras")
    if keras is None or not hasattr(keras, "backend"):
        return {}
    return {"backend": keras.backend.backend(),
            "image_data_format": keras.backend.image_data_format()}  # fmt: skip
