"""Inference in explicit stages, the same for every backend (worker side).

Forward passes of one fixed batch with ``predict_on_batch``, which returns host arrays
(so each call's time covers the device's work): ``warmup_steps`` passes kept apart, then
timed passes for ``duration_s`` seconds. With ``--target-precision`` the passes stop once
the median throughput's 95% interval is within ±P, or ``duration_s`` ends them; a
``--time-budget`` replaces ``duration_s`` as the limit.

``--precision`` (:func:`at_precision`): a runtime's file was quantized when it was
exported (:mod:`kbench.run.exports`); a Keras 3 model is quantized here, after it is
built and before its first pass, with ``model.quantize("int8")``; any other: unsupported.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from kbench.backends.base import Unsupported
from kbench.measure.stats import PrecisionTracker, percentiles
from kbench.run.protocol import emit_progress


@dataclass(frozen=True)
class InferenceMetrics:
    """What an inference run measured. Units are in the names."""

    images_per_sec: float
    batches_per_sec: float
    measured_batches: int
    measured_images: int
    measured_time_s: float
    latency_ms: Dict[str, float]  # p50/p90/p99/mean per batch
    latencies_s: List[float]  # raw, measured batches only
    warmup_steps: int
    warmup_time_s: float
    first_step_s: float  # the first forward pass: tracing / compilation
    cold_start_s: float  # building (a runtime: loading its file), quantizing, the first pass
    time_to_first_step_s: float
    import_time_s: float
    build_time_s: float
    memory: List[Dict[str, Any]]
    markers: Dict[str, Any]
    # --target-precision / --time-budget: the interval reached and why passes stopped
    precision: Optional[Dict[str, Any]] = None
    # --precision: the precision run and the method that made it (at_precision)
    quantization: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def infer(
    backend: Any, model: Any, arrays: Dict[str, np.ndarray], *, batch_size: int, warmup_steps: int,
    duration_s: float, process_start: float, import_time_s: float, build_time_s: float,
    tracker: Optional[PrecisionTracker] = None, precision: str = "float32",
) -> InferenceMetrics:  # fmt: skip
    batch = _fixed_batch(arrays, batch_size)
    quantization = at_precision(backend, model, precision)

    def forward() -> Tuple[float, float]:  # a timed pass: its begin and end
        begin = time.perf_counter()
        backend.predict(model, batch)  # a host array: the device is done
        return begin, time.perf_counter()

    start_wall = time.time()
    begin, end = forward()
    first, first_end_wall = end - begin, time.time()
    for _ in range(max(warmup_steps - 1, 0)):
        forward()
    measured_start_wall = time.time()
    warmup_time = measured_start_wall - start_wall
    latencies, measured_time = _measured_passes(forward, duration_s, tracker)
    measured_end_wall = time.time()
    backend.sync()

    stats = percentiles(latencies, qs=(50, 90, 99))
    return InferenceMetrics(
        images_per_sec=len(latencies) * batch_size / measured_time,
        batches_per_sec=len(latencies) / measured_time,
        measured_batches=len(latencies),
        measured_images=len(latencies) * batch_size,
        measured_time_s=measured_time,
        latency_ms={key: value * 1000.0 for key, value in stats.items()},
        latencies_s=latencies,
        warmup_steps=max(warmup_steps, 1),  # the first pass is never measured
        warmup_time_s=warmup_time,
        first_step_s=first,
        cold_start_s=build_time_s + quantization.get("quantize_s", 0.0) + first,
        time_to_first_step_s=first_end_wall - process_start,
        import_time_s=import_time_s,
        build_time_s=build_time_s,
        memory=backend.memory_readings(),
        precision=None if tracker is None else tracker.record(),
        quantization=quantization,
        markers={
            "fit_start": start_wall, "first_step_end": first_end_wall,
            "warmup_end": measured_start_wall, "measured_start": measured_start_wall,
            "measured_end": measured_end_wall,
        },
    )  # fmt: skip


KERAS_INT8 = (
    "Keras {version} model.quantize('int8') in the worker: Dense (and EinsumDense, "
    "Embedding) kernels int8 with per-channel scales, their inputs quantized per call; "
    "Conv2D and the other layers stay float32"
)
KERAS_NO_FLOAT16 = (
    "Keras' model.quantize has no float16 mode (its modes: int8, int4, float8, gptq, awq); "
    "kbench quantizes Keras models to int8 only (--mixed-precision float16 is the training "
    "switch: float16 compute, float32 weights)"
)


def at_precision(backend: Any, model: Any, precision: str) -> Dict[str, Any]:
    """``model`` at ``precision`` (quantized in place), and how: a runtime's file says its
    own (``backend.file_precision``); a Keras 3 model is quantized to int8 here. A precision
    the backend cannot do raises :class:`Unsupported` with why, never float32 instead."""
    own = getattr(backend, "file_precision", None)
    if own is not None:
        return own(precision)
    if precision == "float32":
        return {"precision": "float32", "method": "none: float32, as built"}
    if precision == "float16":
        raise Unsupported(f"--precision float16 on {backend.name}: {KERAS_NO_FLOAT16}")
    keras = getattr(backend, "keras", None)
    if not hasattr(model, "quantize") or not str(getattr(keras, "__version__", "")).startswith("3"):
        raise Unsupported(
            f"--precision {precision} on {backend.name}: kbench quantizes a Keras 3 model "
            "(model.quantize) or an exported file; this backend's model is neither"
        )
    started = time.perf_counter()
    model.quantize(precision)
    return {
        "precision": precision, "method": KERAS_INT8.format(version=keras.__version__),
        "quantize_s": time.perf_counter() - started,
    }  # fmt: skip


def _fixed_batch(arrays: Dict[str, np.ndarray], batch_size: int) -> np.ndarray:
    """The one batch every pass feeds: test samples, else training samples, repeated."""
    source = arrays["x_test"] if len(arrays["x_test"]) >= batch_size else arrays["x_train"]
    if len(source) < batch_size:
        source = np.resize(source, (batch_size,) + source.shape[1:])
    return np.ascontiguousarray(source[:batch_size])


def _measured_passes(
    forward: Callable[[], Tuple[float, float]],
    duration_s: float,
    tracker: Optional[PrecisionTracker],
) -> Tuple[List[float], float]:
    """(each measured pass's latency, measured seconds), until the tracker or limit."""
    latencies: List[float] = []
    started = time.perf_counter()
    next_report = started + 10.0
    # a budget replaces the duration as the limit; a target alone stops within the duration
    limit_s = duration_s if tracker is None or tracker.goal.budget_s is None else math.inf
    while True:
        begin, end = forward()
        latencies.append(end - begin)
        now = time.perf_counter()
        if tracker is not None and tracker.add(begin, end):
            break
        if now - started >= limit_s:
            break
        if now >= next_report:
            next_report = now + 10.0
            emit_progress("inference", seconds=now - started, duration=duration_s)
    return latencies, time.perf_counter() - started
