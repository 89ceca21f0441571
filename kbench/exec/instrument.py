"""Keras instrumentation inside a ``kbench exec`` child, with no change to the script.

``site/sitecustomize.py`` (first on the child's PYTHONPATH) calls :func:`start` at
start-up: it pins the process to the cores asked for (``KBENCH_CPU_AFFINITY``) and adds
an import hook (a :data:`sys.meta_path` finder) that waits for ``import keras``
(``tf.keras`` too). As Keras finishes loading, the hook wraps ``fit``, ``evaluate`` and
``predict`` where Keras defines them, so every model class has them:

- ``fit`` gets one more callback, :class:`kbench.callbacks.Throughput` (the user's
  own stay, in their order), told the batch size and samples from the call's
  arguments; it times each batch and writes events to ``KBENCH_EVENTS``;
- ``evaluate`` and ``predict`` are marked (``evaluate_begin``/``_end``, with the
  call's batch size and samples where its arguments are arrays) and, where they take
  callbacks (Keras 3), get the same callback for their batches
  (:func:`kbench.exec.runner.observe`); where they take none (keras-mxnet), the model's facts
  are written as the call begins.

Calls made from inside another wrapped call (the validation ``evaluate`` of Keras 3's
``fit``) pass through untouched. keras-mxnet's ``collections.Iterable`` shim
(:func:`kbench.callbacks.prepare_keras_import`) is set before Keras loads, at once with
``--no-instrument``. Whatever goes wrong in here is written to the events file as an
``error`` event and the user's call goes on as if kbench were absent.
"""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import math
import os
import sys
import threading
from typing import Any, Dict, Optional, Tuple

from kbench.measure.keras_events import EventLog, plain

INSTRUMENT_VARIABLE = "KBENCH_INSTRUMENT"  # "0": --no-instrument
WARMUP_VARIABLE = "KBENCH_WARMUP_STEPS"
AFFINITY_VARIABLE = "KBENCH_CPU_AFFINITY"  # "0,1,2": the cores to run on
WRAPPED = ("fit", "evaluate", "predict")
_MARK = "__kbench_wrapped__"


class _State(threading.local):
    depth = 0


_state = _State()
_log: Optional[EventLog] = None
_callback: Any = None


def events() -> EventLog:
    global _log
    if _log is None:
        _log = EventLog.from_environment()
    return _log


def error(where: str, err: BaseException) -> None:
    try:
        events().write("error", where=where, message=f"{type(err).__name__}: {err}")
    except Exception:
        pass


def start() -> None:
    """What ``sitecustomize`` runs: pin cores, then install the Keras hook."""
    cores = os.environ.get(AFFINITY_VARIABLE)
    if cores:
        try:
            pin([int(c) for c in cores.split(",")])
        except Exception as err:  # never break the user's script
            error("cpu affinity", err)
    if os.environ.get(INSTRUMENT_VARIABLE, "1") != "0":
        install()
    else:  # --no-instrument: keras-mxnet still needs its shim to import at all
        _shim()


def _shim() -> None:
    try:
        from kbench.callbacks import prepare_keras_import

        prepare_keras_import()
    except Exception as err:
        error("keras-mxnet shim", err)


def pin(cores: list) -> None:
    """Pin this process to ``cores``: through psutil where the script's interpreter
    has it (Linux, Windows), else the standard library's Linux call; macOS has no CPU
    affinity and runs unpinned."""
    try:
        import psutil
    except ImportError:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)
        return
    process = psutil.Process()
    if hasattr(process, "cpu_affinity"):
        process.cpu_affinity(cores)


def install() -> None:
    """Wrap Keras now if it is imported, else as soon as it is."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "Model"):
        patch(keras)
    elif not any(isinstance(f, _KerasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _KerasFinder())


class _KerasFinder(importlib.abc.MetaPathFinder):
    """Finds ``keras`` as the next finders would, and patches it once it has loaded."""

    def __init__(self) -> None:
        self.busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "keras" or self.busy:
            return None
        self.busy = True
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self.busy = False
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        _shim()
        self.loader.exec_module(module)  # the user's import: its errors are theirs
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _KerasFinder)]
        try:
            patch(module)
        except Exception as err:
            error("wrapping Keras", err)

    def __getattr__(self, name):  # get_resource_reader, is_package, ...
        return getattr(self.loader, name)


def patch(keras: Any) -> None:
    """Wrap fit, evaluate and predict where Keras defines them."""
    classes = [getattr(keras, "Model", None), getattr(keras, "Sequential", None)]
    for cls in [c for c in classes if c is not None]:
        for name in WRAPPED:
            owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
            if owner is None or getattr(owner.__dict__[name], _MARK, False):
                continue
            setattr(owner, name, _wrap(owner.__dict__[name], name, keras))
    events().write("instrumented", keras_version=getattr(keras, "__version__", None))


def _wrap(original, name: str, keras: Any):
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        if _state.depth:
            return original(self, *args, **kwargs)
        sizes: Dict[str, Any] = {}
        try:
            args, kwargs, callback, sizes = _add_callback(
                signature, name, keras, self, args, kwargs
            )
        except Exception as err:
            error(f"preparing {name}", err)
            callback = None
        _state.depth += 1
        try:
            if name == "fit":
                return original(self, *args, **kwargs)
            if callback is None:  # keras-mxnet: no callbacks, so the model's facts here
                _model_facts(self)
            events().write(f"{name}_begin", **sizes)
            result = original(self, *args, **kwargs)
            _ended(name, result, self, callback)
            return result
        finally:
            _state.depth -= 1

    setattr(wrapper, _MARK, True)
    return wrapper


def _ended(name: str, result: Any, model: Any, callback: Any) -> None:
    """``evaluate_end`` with the metrics by name (the callback's logs on Keras 3, the
    model's ``metrics_names`` on keras-mxnet), ``predict_end``."""
    try:
        value = None
        if name == "evaluate":
            value = getattr(callback, "last_test_logs", None)
            if value is None:
                names = list(getattr(model, "metrics_names", None) or [])
                values = list(result) if isinstance(result, (list, tuple)) else [result]
                if len(names) == len(values):
                    value = {n: plain(v) for n, v in zip(names, values)}
        events().write(f"{name}_end", result=value)
    except Exception as err:
        error(f"{name} result", err)


def _model_facts(model: Any) -> None:
    try:
        from kbench.callbacks import write_model_facts

        write_model_facts(events(), model)
    except Exception as err:
        error("model facts", err)


def _add_callback(
    signature, name: str, keras: Any, model: Any, args: Tuple, kwargs: Dict[str, Any]
) -> Tuple[Tuple, Dict[str, Any], Any, Dict[str, Any]]:
    """The call's arguments with the kbench callback added (where the call takes
    callbacks), the callback, and the call's batch size and samples (where its
    arguments are arrays)."""
    if signature is None:
        return args, kwargs, None, {}
    bound = signature.bind(model, *args, **kwargs)
    batch_size, samples = _fit_sizes(bound.arguments)
    sizes = {"batch_size": batch_size, "samples": samples}
    if "callbacks" not in signature.parameters:
        return args, kwargs, None, sizes
    given = bound.arguments.get("callbacks")
    callback = _the_callback(keras)
    if name == "fit":
        callback.batch_size, callback.samples = batch_size, samples
    else:
        callback.other_sizes = (batch_size, samples)
    if given is None:
        callbacks = [callback]
    elif isinstance(given, (list, tuple)):
        callbacks = [*given, callback]
    else:  # a CallbackList or something else kbench should not take apart
        raise TypeError(f"callbacks of type {type(given).__name__}: left as given")
    bound.arguments["callbacks"] = callbacks
    return bound.args[1:], bound.kwargs, callback, sizes


def _the_callback(keras: Any) -> Any:
    global _callback
    if _callback is None:
        from kbench.callbacks import throughput_class

        warmup = int(os.environ.get(WARMUP_VARIABLE) or 5)
        _callback = throughput_class(keras)(warmup_steps=warmup, log=events())
    return _callback


def _fit_sizes(arguments: Dict[str, Any]) -> Tuple[Optional[int], Optional[int]]:
    """(batch size, samples) of a fit, evaluate or predict on arrays (fit: those it
    trains on); (None, None) for data sets and generators, whose batches Keras 3 does
    not size for callbacks."""
    samples = _count(arguments.get("x"))
    if samples is None:
        return None, None
    split = arguments.get("validation_split") or 0.0
    if split:
        samples = int(math.ceil(samples * (1.0 - split)))
    return int(arguments.get("batch_size") or 32), samples  # 32: Keras' default


def _count(x: Any) -> Optional[int]:
    if isinstance(x, dict):
        x = next(iter(x.values()), None)
    elif isinstance(x, (list, tuple)):
        x = x[0] if x else None
    shape = getattr(x, "shape", None)
    if shape is not None and len(shape) and isinstance(shape[0], int):
        return int(shape[0])
    return None
