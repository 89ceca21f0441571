"""``kbench.callbacks.Throughput``: a Keras callback that times every batch.

Add it to your own ``model.fit`` for the figures ``kbench run`` reports, under Keras 3
(TensorFlow, JAX, PyTorch) or keras-mxnet 2.2.4::

    import kbench
    from kbench.callbacks import Throughput

    speed = Throughput(warmup_steps=5, batch_size=64, samples=len(x))
    model.fit(x, y, batch_size=64, epochs=2, callbacks=[speed])
    print(speed.summary()["images_per_sec"])      # img/s over the measured window
    kbench.record("results", name="my_model", throughput=speed)   # for kbench compare

Keras 3 does not tell callbacks how many samples a batch held, so give ``batch_size``
(and ``samples``, for the last, partial batch). Each batch's end reads the loss from
the device, so its clock stops only once the step is done. The events are kept in
``speed.events`` and, with ``events_path``, appended to a JSON-lines file as they
happen (:mod:`kbench.measure.keras_events`). ``kbench exec`` adds this callback to
every ``fit``, ``evaluate`` and ``predict`` of a script (:mod:`kbench.exec.instrument`).

The class derives from the ``keras.callbacks.Callback`` of whichever Keras the
process imported, so importing ``Throughput`` imports Keras.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Dict, Optional, Tuple

from kbench.measure.keras_events import EventLog, plain, summarize

PROGRESS_VARIABLE = "KBENCH_PROGRESS"  # "1": epoch lines on stdout for kbench exec
_classes: Dict[int, type] = {}


def prepare_keras_import() -> None:
    """Let keras-mxnet 2.2.4 import under Python 3.10+: it still reads
    ``collections.Iterable``. Done only where keras-mxnet is the installed Keras and
    the name is missing; nothing is changed for any other Keras."""
    import collections
    import collections.abc

    if hasattr(collections, "Iterable"):
        return
    try:
        from importlib import metadata

        metadata.version("keras-mxnet")
    except Exception:  # not keras-mxnet: its import needs nothing
        return
    collections.Iterable = collections.abc.Iterable  # type: ignore[attr-defined]


def throughput_class(keras: Any) -> type:
    """The Throughput callback class for the given ``keras`` module (built once)."""
    if id(keras) not in _classes:
        bases = (_ThroughputMixin, keras.callbacks.Callback)
        about = {"__module__": __name__, "__doc__": _ThroughputMixin.__doc__}
        _classes[id(keras)] = type("Throughput", bases, about)
    return _classes[id(keras)]


def __getattr__(name: str) -> Any:
    if name == "Throughput":
        prepare_keras_import()
        import keras

        return throughput_class(keras)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _ThroughputMixin:
    """Times every training batch of the fits it is given to.

    Args:
        warmup_steps: the first batches of the first fit, left out of img/s (tracing,
            compilation). Default 5.
        events_path: a JSON-lines file to append events to as they happen; default
            memory only (under ``kbench exec``, the instrumentation's own callback
            writes ``KBENCH_EVENTS``, not yours).
        batch_size, samples: the fit's batch size and training samples, where Keras
            does not pass each batch's size (Keras 3 does not; keras-mxnet does).
        log: an :class:`~kbench.measure.keras_events.EventLog` to share (kbench exec
            shares one per process).
    """

    def __init__(
        self, warmup_steps: int = 5, events_path: Optional[str] = None,
        batch_size: Optional[int] = None, samples: Optional[int] = None,
        log: Optional[EventLog] = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.warmup_steps = warmup_steps
        self.log = log or EventLog(events_path)
        self.batch_size, self.samples = batch_size, samples
        self.call = -1
        self.epoch = 0
        self.last_test_logs: Optional[Dict[str, Any]] = None
        self.other_call = -1  # evaluate and predict calls made outside a fit
        # the batch size and samples of an evaluate or predict call
        self.other_sizes: Tuple[Optional[int], Optional[int]] = (None, None)
        self._in_fit = False
        self._facts_pending = False  # a subclassed model is built by its first batch
        self._t0: Optional[float] = None
        self._epoch_t0 = 0.0
        self._offset = time.time() - time.perf_counter()
        self._progress = os.environ.get(PROGRESS_VARIABLE) == "1"

    @property
    def events(self):
        return self.log.events

    def summary(self) -> Dict[str, Any]:
        """img/s over the measured window, step-time percentiles, epochs, final logs,
        parameter count (see :func:`kbench.measure.keras_events.summarize`)."""
        return summarize(self.log.events, self.warmup_steps)

    def _now(self) -> float:
        return time.perf_counter() + self._offset

    def on_train_begin(self, logs=None):
        self.call += 1
        self._in_fit = True
        self.log.write("fit_begin", call=self.call, params=_params(self))
        self._model_event(defer=True)

    def on_train_end(self, logs=None):
        self._in_fit = False
        self.log.write("fit_end", call=self.call, logs=_logs(logs))

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self._epoch_t0 = self._now()

    def on_epoch_end(self, epoch, logs=None):
        logs = _logs(logs)
        seconds = self._now() - self._epoch_t0
        self.log.write("epoch", call=self.call, epoch=epoch, logs=logs, seconds=seconds)
        if self._progress:  # kbench exec's epoch lines
            from kbench.run.protocol import emit_progress

            loss, epochs = logs.get("loss"), (getattr(self, "params", None) or {}).get("epochs")
            emit_progress(
                "epoch", epoch=epoch + 1, epochs=epochs or 0, seconds=seconds,
                loss=loss if isinstance(loss, float) else float("nan"),
            )  # fmt: skip

    def on_batch_begin(self, batch, logs=None):
        self._t0 = self._now()

    def on_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None:
            plain(loss)  # reading it waits for the device: the step is done
        t1 = self._now()
        if self._t0 is None:
            return
        size = (logs or {}).get("size")  # keras-mxnet says it
        size = int(size) if size is not None else _batch_rows(batch, self.batch_size, self.samples)
        self.log.write(
            "batch", stage="train", call=self.call, epoch=self.epoch, batch=batch,
            t0=self._t0, t1=t1, size=size,
        )  # fmt: skip
        self._t0 = None
        if self._facts_pending:  # the first batch has built the model
            self._model_event()

    # Keras 3 calls on_train_batch_*, keras-mxnet 2.2.4 on_batch_*
    on_train_batch_begin, on_train_batch_end = on_batch_begin, on_batch_end

    # evaluate and predict batches (Keras 3 passes its callbacks to both)
    def on_test_batch_begin(self, batch, logs=None):
        self._other_t0 = self._now()

    on_predict_batch_begin = on_test_batch_begin

    def on_test_batch_end(self, batch, logs=None):
        self._other_batch("evaluate", batch, _batch_rows(batch, *self.other_sizes))

    def on_predict_batch_end(self, batch, logs=None):
        # reading the outputs waits for the device; their first axis is the batch
        size = _outputs_size((logs or {}).get("outputs"))
        rows = size if size is not None else _batch_rows(batch, *self.other_sizes)
        self._other_batch("predict", batch, rows)

    def on_test_begin(self, logs=None):
        self.last_test_logs = None
        self._other_begin()

    def on_predict_begin(self, logs=None):
        self._other_begin()

    def on_test_end(self, logs=None):
        self.last_test_logs = _logs(logs)

    def _other_begin(self) -> None:
        """An evaluate or predict outside a fit: a call of its own, with the model's
        facts (an inference-only script has no fit to read them at)."""
        if not self._in_fit:
            self.other_call += 1
            self._model_event(defer=True)

    def _other_batch(self, stage: str, batch: int, size: Optional[int]) -> None:
        t0 = getattr(self, "_other_t0", None)
        if t0 is None:
            return
        where = {"within": "fit"} if self._in_fit else {"call": self.other_call}
        self.log.write("batch", stage=stage, batch=batch, t0=t0, t1=self._now(), size=size, **where)
        self._other_t0 = None
        if self._facts_pending and not self._in_fit:
            self._model_event()

    def _model_event(self, defer: bool = False) -> None:
        """The model's facts (parameters, name, the backend Keras reports); where the
        model is not built yet (a subclassed model before its first batch, as on
        TensorFlow), read after the next batch (``defer``)."""
        model = getattr(self, "model", None)
        if model is None:
            return
        self._facts_pending = False
        try:
            write_model_facts(self.log, model)
        except Exception as err:  # an unbuilt subclassed model has no count yet
            if defer:
                self._facts_pending = True
                return
            self.log.write("error", where="model facts", message=f"{type(err).__name__}: {err}")


def write_model_facts(log: EventLog, model: Any) -> None:
    """A ``model`` event: parameter count, name, backend and version of the Keras the
    process imported (raises where the model cannot count its parameters yet)."""
    import keras

    params = int(model.count_params())
    backend = keras.backend.backend() if hasattr(keras.backend, "backend") else None
    log.write(
        "model", name=getattr(model, "name", None), params=params,
        backend=backend, keras_version=getattr(keras, "__version__", None),
    )  # fmt: skip


def _batch_rows(batch: int, batch_size: Optional[int], samples: Optional[int]) -> Optional[int]:
    """The rows of batch ``batch`` of a call with ``batch_size`` and ``samples`` (the last
    may be partial); None without a batch size."""
    if not batch_size:
        return None
    if samples is None:
        return int(batch_size)
    return max(0, min(int(batch_size), int(samples) - batch * int(batch_size)))


def _outputs_size(outputs: Any) -> Optional[int]:
    """The batch size of predict's outputs (the first axis of the first array), read
    once the device has computed them."""
    while isinstance(outputs, (list, tuple, dict)) and outputs:
        outputs = next(iter(outputs.values())) if isinstance(outputs, dict) else outputs[0]
    shape = getattr(outputs, "shape", None)
    if not shape:
        return None
    ready = getattr(outputs, "block_until_ready", None)  # JAX
    with contextlib.suppress(Exception):
        if ready is not None:
            ready()
        else:
            plain(outputs[(0,) * len(shape)])  # TensorFlow, PyTorch: reading one waits
    return int(shape[0]) if isinstance(shape[0], int) else None


def _params(callback: Any) -> Dict[str, Any]:
    params = getattr(callback, "params", None) or {}
    out = {k: plain(v) for k, v in params.items() if k != "metrics"}
    return dict(out, batch_size=callback.batch_size, samples=callback.samples)


def _logs(logs: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return {str(k): plain(v) for k, v in (logs or {}).items()}
