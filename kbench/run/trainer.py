"""Training in explicit stages, the same for every backend (worker side).

Each epoch is one ``backend.fit_epoch`` over that epoch's mini-batches in the runner's
order, so every backend sees the same batches. The backend stamps each step on a
:class:`StepClock`, which reads the loss on the host at the end of a step: that waits for
the device, so a step's time covers its whole computation. The first ``warmup_steps``
steps (tracing, compilation, caches) are kept apart; the measured window runs from the
end of the last warmup step to the end of the last step, inside the training loops only.
With ``--target-precision`` or ``--time-budget`` the clock feeds each measured step to a
:class:`~kbench.measure.stats.PrecisionTracker`, whose :class:`StopMeasuring` from
``batch_end`` stops any backend's step loop; the remaining epochs are skipped (evaluation
sees the trained weights: Keras 3 writes JAX's state back in ``fit``'s ``finally``).

A warm worker's windows (:mod:`kbench.run.windows`) cycle through the order: the warmup,
calibration steps that size a window, then windows of one untimed and that many measured
steps. A window leaves out the first step and compilation (the worker's start has them)
and what grows across windows (allocator pools, caches); memory readings are peaks.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from kbench.datasets.stream import LOADING
from kbench.measure.stats import (
    PrecisionTracker,
    StopMeasuring,
    measured_seconds,
    percentiles,
    rate_percentiles,
)
from kbench.run import weightfile
from kbench.run.protocol import emit_progress

MIN_WINDOW_STEPS = 3
CALIBRATION_STEPS = 5
WINDOW_FIGURES = (  # what a window reports of step_metrics' figures
    "images_per_sec", "measured_images", "measured_steps", "measured_time_s", "step_time_s",
    "images_per_sec_per_step", "step_times_s", "step_ends_s",
)  # fmt: skip


@dataclass
class StepClock:
    """Timestamps of every step, with the warmup steps set apart."""

    warmup_steps: int
    heartbeat_s: float = 10.0
    begins: List[float] = field(default_factory=list)
    ends: List[float] = field(default_factory=list)
    losses: List[float] = field(default_factory=list)
    epoch_first_step: List[int] = field(default_factory=list)
    last_heartbeat: float = field(default_factory=time.perf_counter)
    on_heartbeat: Optional[Callable[[int], None]] = None
    tracker: Optional[PrecisionTracker] = None  # --target-precision / --time-budget
    last_logs: Dict[str, Any] = field(default_factory=dict)
    # perf_counter -> wall clock, so markers line up with the parent's sampler series
    wall_offset: float = field(default_factory=lambda: time.time() - time.perf_counter())

    def epoch_begin(self) -> None:
        self.epoch_first_step.append(len(self.begins))

    def batch_begin(self) -> None:
        self.begins.append(time.perf_counter())

    def batch_end(self, logs: Optional[Dict[str, Any]]) -> None:
        # float() of the loss blocks until the step has finished on the device.
        loss = float((logs or {}).get("loss", float("nan")))
        now = time.perf_counter()
        self.ends.append(now)
        self.losses.append(loss)
        self.last_logs = dict(logs or {})
        if self.on_heartbeat and now - self.last_heartbeat >= self.heartbeat_s:
            self.last_heartbeat = now
            self.on_heartbeat(len(self.ends))
        if self.tracker is not None and len(self.ends) > self.warmup_steps:
            reason = self.tracker.add(self.begins[-1], now)
            if reason is not None:
                raise StopMeasuring(reason)

    def wall(self, perf_time: float) -> float:
        return perf_time + self.wall_offset

    def markers(self) -> Dict[str, Any]:
        """Wall-clock stage boundaries (seconds since the epoch)."""
        warmup = self.warmup_steps
        measured_start = self.ends[warmup - 1] if warmup else self.begins[0]
        return {
            "first_step_start": self.wall(self.begins[0]),
            "first_step_end": self.wall(self.ends[0]), "warmup_end": self.wall(measured_start),
            "measured_start": self.wall(measured_start), "measured_end": self.wall(self.ends[-1]),
        }  # fmt: skip

    def measured_seconds(self) -> float:
        """Time inside fit from the end of warmup to the last step, epoch by epoch."""
        return measured_seconds(self.begins, self.ends, self.epoch_first_step, self.warmup_steps)


@dataclass(frozen=True)
class TrainMetrics:
    """What a training run measured. Units are in the names."""

    images_per_sec: float  # measured window: measured_images / measured_time_s
    measured_images: int
    measured_steps: int
    measured_time_s: float
    step_time_s: Dict[str, float]  # p10/p50/p90/mean over measured steps
    images_per_sec_per_step: Dict[str, float]  # batch / step time: p10/p50/p90
    step_times_s: List[float]  # raw, measured steps only
    # every step's end (warmup included), seconds after markers["first_step_start"]:
    # with batch_size, the throughput timeline of the run
    step_ends_s: List[float]
    warmup_steps: int
    warmup_time_s: float
    first_step_s: float  # includes tracing / compilation
    time_to_first_step_s: float  # from the runner starting the process
    import_time_s: float
    build_time_s: float
    epoch_time_s: List[float]  # wall time of each fit call (epoch 1 includes warmup)
    epoch_train_loss: List[float]  # as the backend reports it at each epoch's end
    epoch_train_accuracy: List[Optional[float]]
    # Data loading apart from compute: gathering each epoch's samples in order (before
    # its fit, outside every step), decoding streamed images (during the steps), and
    # time inside fit outside any step (the framework feeding data, callbacks).
    data_loading: Dict[str, Any]
    final_train_loss: float
    final_train_accuracy: Optional[float]
    test_loss: float
    test_accuracy: float
    eval_time_s: float
    memory: List[Dict[str, Any]]
    markers: Dict[str, Any]  # wall-clock stage boundaries, for slicing the sampler series
    # --target-precision / --time-budget: the interval reached and why measuring stopped
    # (PrecisionTracker.record); None when neither was asked for
    precision: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def epoch_logs_at_stop(logs: Dict[str, Any]) -> Dict[str, float]:
    """An epoch cut short: its training loss and accuracy from the last step's logs."""
    out = {"loss": float(logs.get("loss", float("nan")))}
    accuracy = logs.get("accuracy", logs.get("acc"))  # Keras 2.2 spelling
    if accuracy is not None:
        out["accuracy"] = float(accuracy)
    return out


@dataclass
class Trainer:
    """One built model trained on the runner's sample order: epochs, or warm windows."""

    backend: Any
    model: Any
    arrays: Dict[str, np.ndarray]
    order: np.ndarray  # sample indices, (epochs, samples per epoch)
    batch_size: int
    data_format: str = "channels_last"
    position: int = 0  # windows: the next sample of the flattened order
    window_steps: int = MIN_WINDOW_STEPS
    steps_begun: int = 0  # windows: every training step asked for (position wraps around)

    def fit(self, x: np.ndarray, y: np.ndarray, clock: StepClock) -> Dict[str, Any]:
        """One ``fit_epoch``, every step stamped on ``clock``, the device synchronized
        after it; its last logs (cut short by the clock's tracker: its last step's)."""
        clock.epoch_begin()
        try:
            logs = self.backend.fit_epoch(self.model, x, y, self.batch_size, clock)
        except StopMeasuring:
            logs = epoch_logs_at_stop(clock.last_logs)
        self.backend.sync()
        return logs

    def epochs(
        self, *, warmup_steps: int, optimizer: str, learning_rate: float, loss: str,
        process_start: float, import_time_s: float, build_time_s: float,
        tracker: Optional[PrecisionTracker] = None,
    ) -> TrainMetrics:  # fmt: skip
        """Train over the order's epochs; with ``tracker``, until it says stop."""
        self.backend.compile(self.model, optimizer, learning_rate, loss)
        total_steps = _total_steps(self.order, self.batch_size, warmup_steps)
        clock = StepClock(warmup_steps=warmup_steps, tracker=tracker)
        clock.on_heartbeat = lambda done: emit_progress("step", step=done, steps=total_steps)
        fit_start = time.time()
        decode_start, decoded_start = LOADING.seconds, LOADING.images
        epochs = self._run_epochs(clock)
        if len(clock.ends) != total_steps and (tracker is None or tracker.stopped is None):
            raise RuntimeError(
                f"the step clock saw {len(clock.ends)} steps; expected {total_steps}. "
                f"{self.backend.name}'s fit_epoch does not stamp every step."
            )
        data_loading = _data_loading(epochs, clock, decode_start, decoded_start)
        eval_start = time.perf_counter()
        test_loss, test_accuracy = self.backend.evaluate(
            self.model, self.arrays["x_test"], self.arrays["y_test"], max(self.batch_size, 256)
        )
        eval_time = time.perf_counter() - eval_start
        markers = dict(
            clock.markers(), fit_start=fit_start, epoch_ends=epochs.ends, eval_end=time.time()
        )
        return TrainMetrics(
            **step_metrics(clock, self.batch_size),
            **_epoch_metrics(epochs),
            time_to_first_step_s=clock.wall(clock.ends[0]) - process_start,
            import_time_s=import_time_s,
            build_time_s=build_time_s,
            data_loading=data_loading,
            test_loss=float(test_loss),
            test_accuracy=float(test_accuracy),
            eval_time_s=eval_time,
            memory=self.backend.memory_readings(),
            markers=markers,
            precision=None if tracker is None else tracker.record(),
        )

    def _run_epochs(self, clock: StepClock) -> _Epochs:
        """One ``fit_epoch`` per row of the order, until the end or the tracker stops."""
        epochs = _Epochs()
        for epoch, indices in enumerate(self.order):
            gather_start = time.perf_counter()
            x, y = self.arrays["x_train"][indices], self.arrays["y_train"][indices]
            epochs.gather_s += time.perf_counter() - gather_start
            started = time.perf_counter()
            logs = self.fit(x, y, clock)
            epochs.times.append(time.perf_counter() - started)
            epochs.ends.append(time.time())
            epochs.logs.append(logs)
            emit_progress(
                "epoch", epoch=epoch + 1, epochs=len(self.order),
                loss=float(logs.get("loss", float("nan"))), seconds=epochs.times[-1],
            )  # fmt: skip
            if clock.tracker is not None and clock.tracker.stopped is not None:
                break
        return epochs

    def _steps(self, steps: int, clock: StepClock) -> Dict[str, Any]:
        """``steps`` training steps on the next samples of the cycled order."""
        self.steps_begun += steps
        flat = self.order.reshape(-1)
        needed = steps * self.batch_size
        ahead = flat[np.arange(self.position, self.position + needed) % len(flat)]
        self.position = (self.position + needed) % len(flat)
        return self.fit(self.arrays["x_train"][ahead], self.arrays["y_train"][ahead], clock)

    def warm_up(
        self, warmup_steps: int, window_s: float, steps: Optional[int] = None,
        weights_in: Optional[str] = None, weights_out: Optional[str] = None, check: bool = False,
        check_rows: Optional[int] = None,
    ) -> Dict[str, Any]:  # fmt: skip
        """The warmup steps, then the calibration steps that size a window (``steps``, else
        about ``window_s``); their figures. With ``weights_out``/``weights_in`` (save, or start
        from, the initial weights) or ``check``, also ``check``: outputs on the first
        ``check_rows`` test rows (default: a batch) and each warmup step's loss."""
        same = None
        if weights_in or weights_out or check:
            same = self._same_start(weights_in, weights_out, check_rows or self.batch_size)
        clock = StepClock(warmup_steps=0)
        self._steps(max(warmup_steps, 1), clock)
        calibration = StepClock(warmup_steps=0)
        self._steps(CALIBRATION_STEPS, calibration)
        step_s = statistics.median(e - b for b, e in zip(calibration.begins, calibration.ends))
        if steps is not None:
            self.window_steps = steps
        else:
            self.window_steps = max(MIN_WINDOW_STEPS, math.ceil(window_s / max(step_s, 1e-9)))
        if same is not None:
            same["losses"] = [float(loss) for loss in clock.losses]
        return {
            "check": same, "first_step_s": clock.ends[0] - clock.begins[0],
            "warmup_steps": max(warmup_steps, 1),
            "warmup_time_s": clock.ends[-1] - clock.begins[0], "calibration_step_s": step_s,
            "window_steps": self.window_steps, "first_step_at": clock.wall(clock.ends[0]),
        }  # fmt: skip

    def _same_start(
        self, weights_in: Optional[str], weights_out: Optional[str], rows: int
    ) -> Dict[str, Any]:
        """Load (or save) the initial weights; the outputs on the first test rows."""
        if weights_in:
            weights, meta = weightfile.load(Path(weights_in))
            self.backend.set_weights(
                self.model, weights, meta["data_format"], meta["kernel_layout"]
            )
        elif weights_out:
            weightfile.save(
                Path(weights_out), self.backend.get_weights(self.model),
                data_format=self.data_format, kernel_layout=self.backend.kernel_layout(),
            )  # fmt: skip
        outputs = self.backend.predict(self.model, self.arrays["x_test"][:rows])
        return {"outputs": np.asarray(outputs, dtype=np.float64).tolist()}

    def window(self) -> Dict[str, Any]:
        """One untimed step (the framework's per-call set-up: its iterator, a thread pool
        waking), then :attr:`window_steps` measured steps: a run's measured figures."""
        clock = StepClock(warmup_steps=1)
        fit_start = time.time()
        logs = self._steps(self.window_steps + 1, clock)
        figures = step_metrics(clock, self.batch_size)
        accuracy = logs.get("accuracy")
        return {key: figures[key] for key in WINDOW_FIGURES} | {
            "final_train_loss": float(logs.get("loss", float("nan"))),
            "final_train_accuracy": None if accuracy is None else float(accuracy),
            "memory": self.backend.memory_readings(),
            "markers": dict(clock.markers(), fit_start=fit_start),
        }


def _total_steps(order: np.ndarray, batch_size: int, warmup_steps: int) -> int:
    """The steps ``order`` makes (each epoch's last partial batch dropped), above the warmup."""
    total_steps = order.shape[1] // batch_size * order.shape[0]
    if warmup_steps >= total_steps:
        raise ValueError(
            f"warmup_steps: expected fewer than the run's {total_steps} steps; received "
            f"{warmup_steps}. Lower --warmup-steps or train longer."
        )
    return total_steps


@dataclass
class _Epochs:
    times: List[float] = field(default_factory=list)  # wall time of each fit call
    ends: List[float] = field(default_factory=list)  # time.time() as each one ended
    logs: List[Dict[str, Any]] = field(default_factory=list)
    gather_s: float = 0.0  # copying each epoch's samples in order, before its fit


def _data_loading(
    epochs: _Epochs, clock: StepClock, decode_start: float, decoded_start: int
) -> Dict[str, Any]:
    """Data loading apart from compute (``TrainMetrics.data_loading``)."""
    return {
        "epoch_gather_s": epochs.gather_s, "streamed_decode_s": LOADING.seconds - decode_start,
        "streamed_images": LOADING.images - decoded_start,
        "outside_steps_s": max(
            sum(epochs.times) - sum(e - b for b, e in zip(clock.begins, clock.ends)), 0.0
        ),
        "note": "epoch_gather_s: copying each epoch's samples in the drawn order, before its "
        "fit; streamed_decode_s: reading and decoding image files (streamed data sets), "
        "inside the steps where the framework fetches data in its step; outside_steps_s: "
        "time inside fit between steps",
    }  # fmt: skip


def step_metrics(clock: StepClock, batch_size: int) -> Dict[str, Any]:
    """The ``TrainMetrics`` fields of the measured window, the warmup and the first step."""
    warmup_steps = clock.warmup_steps
    measured_steps = len(clock.ends) - warmup_steps
    step_times = [e - b for b, e in zip(clock.begins[warmup_steps:], clock.ends[warmup_steps:])]
    measured_time = clock.measured_seconds()
    step_pct = percentiles(step_times)
    return dict(
        images_per_sec=measured_steps * batch_size / measured_time,
        measured_images=measured_steps * batch_size, measured_steps=measured_steps,
        measured_time_s=measured_time, step_time_s=step_pct,
        images_per_sec_per_step=rate_percentiles([batch_size] * len(step_times), step_times),
        step_times_s=step_times, step_ends_s=[end - clock.begins[0] for end in clock.ends],
        warmup_steps=warmup_steps,
        warmup_time_s=(clock.ends[warmup_steps - 1] - clock.begins[0]) if warmup_steps else 0.0,
        first_step_s=clock.ends[0] - clock.begins[0],
    )  # fmt: skip


def _epoch_metrics(epochs: _Epochs) -> Dict[str, Any]:
    """The ``TrainMetrics`` fields of the epochs: times, training loss and accuracy."""
    last_logs = epochs.logs[-1] if epochs.logs else {}
    train_accuracy = last_logs.get("accuracy")
    return dict(
        epoch_time_s=epochs.times,
        epoch_train_loss=[float(logs.get("loss", float("nan"))) for logs in epochs.logs],
        epoch_train_accuracy=[
            None if logs.get("accuracy") is None else float(logs["accuracy"])
            for logs in epochs.logs
        ],
        final_train_loss=float(last_logs.get("loss", float("nan"))),
        final_train_accuracy=None if train_accuracy is None else float(train_accuracy),
    )
