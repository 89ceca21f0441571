"""Training in measuring windows, in a warm worker (worker side).

A :class:`WindowTrainer` holds one built and compiled model and trains it on through
the runner's sample order, which it cycles: every backend sees the same mini-batches
in the same order, and each goes as far as its windows take it. First
:meth:`~WindowTrainer.warm_up`: the warmup steps (tracing, compilation, caches), then a
few calibration steps whose median time sets how many steps make a window of about
``window_s`` seconds (or the run's ``steps``, when it gives them). Then each
:meth:`~WindowTrainer.window` is one ``backend.fit_epoch`` over one untimed batch (the
call's own set-up) and that many measured batches,
timed by a :class:`~kbench.run.trainer.StepClock` exactly as a fresh run's measured
steps are, and returns the figures of a run's measured window.

What a window does not capture, by design: the first step and compilation (the
worker's start has them, reported apart), and anything that grows across windows
(allocator pools, caches), which a fresh process starts without. The framework's
memory readings are the process's peaks since it started.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np

from kbench.run import weightfile
from kbench.run.trainer import StepClock, step_metrics

MIN_WINDOW_STEPS = 3
CALIBRATION_STEPS = 5


@dataclass
class WindowTrainer:
    backend: Any
    model: Any
    arrays: Dict[str, np.ndarray]
    order: np.ndarray  # sample indices, cycled through (the runner's order, flattened)
    batch_size: int
    data_format: str
    position: int = 0  # the next sample in ``order``
    window_steps: int = MIN_WINDOW_STEPS
    steps_begun: int = 0  # every training step asked for so far (position wraps around)

    def _steps(self, steps: int, clock: StepClock) -> Dict[str, Any]:
        """``steps`` training steps on the next samples of the order; the last logs."""
        self.steps_begun += steps
        needed = steps * self.batch_size
        ahead = np.arange(self.position, self.position + needed) % len(self.order)
        self.position = (self.position + needed) % len(self.order)
        indices = self.order[ahead]
        x, y = self.arrays["x_train"][indices], self.arrays["y_train"][indices]
        clock.epoch_begin()
        logs = self.backend.fit_epoch(self.model, x, y, self.batch_size, clock)
        self.backend.sync()
        return logs

    def warm_up(
        self,
        warmup_steps: int,
        window_s: float,
        steps: Optional[int] = None,
        weights_in: Optional[str] = None,
        weights_out: Optional[str] = None,
        check: bool = False,
        check_rows: Optional[int] = None,
    ) -> Dict[str, Any]:
        """The warmup steps, then the calibration steps that size a window: ``steps`` when
        given, else enough steps for about ``window_s`` seconds (at least
        :data:`MIN_WINDOW_STEPS`). Returns the warmup's figures and the window's size.
        With ``weights_out`` (save the initial weights there) or ``weights_in`` (start
        from those), also ``check``: the outputs on the first test batch before training
        and each warmup step's loss, for comparing settings that must compute alike
        (``check`` alone: the same from the model's own seeded weights), on the first
        ``check_rows`` test rows (default: a batch)."""
        same = None
        if weights_in or weights_out or check:
            same = self._same_start(weights_in, weights_out, check_rows or self.batch_size)
        clock = StepClock(warmup_steps=0)
        self._steps(max(warmup_steps, 1), clock)
        first_step_s = clock.ends[0] - clock.begins[0]
        warmup_time_s = clock.ends[-1] - clock.begins[0]
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
            "check": same,
            "first_step_s": first_step_s,
            "warmup_steps": max(warmup_steps, 1),
            "warmup_time_s": warmup_time_s,
            "calibration_step_s": step_s,
            "window_steps": self.window_steps,
            "first_step_at": clock.wall(clock.ends[0]),
        }

    def _same_start(
        self, weights_in: Optional[str], weights_out: Optional[str], rows: int
    ) -> Dict[str, Any]:
        """Load (or save) the initial weights; the outputs on the first test batch."""
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
        """One window: one untimed step (the framework's per-call set-up: its iterator,
        prefetching, a thread pool waking), then :attr:`window_steps` measured steps: the
        measured figures of a run."""
        clock = StepClock(warmup_steps=1)
        fit_start = time.time()
        logs = self._steps(self.window_steps + 1, clock)
        figures = step_metrics(clock, self.batch_size)
        markers = clock.markers()
        accuracy = logs.get("accuracy")
        markers = dict(markers, fit_start=fit_start)
        return {
            key: figures[key]
            for key in (
                "images_per_sec",
                "measured_images",
                "measured_steps",
                "measured_time_s",
                "step_time_s",
                "images_per_sec_per_step",
                "step_times_s",
                "step_ends_s",
            )
        } | {  # fmt: skip
            "final_train_loss": float(logs.get("loss", float("nan"))),
            "final_train_accuracy": None if accuracy is None else float(accuracy),
            "memory": self.backend.memory_readings(),
            "markers": markers,
        }
