"""The child side of one backend's operator benchmark: what a backend implements, and
how each operation at each size is checked and timed. ``python -m kbench.ops.worker
TASK_JSON`` is :mod:`kbench.run.worker`'s loop, its framework started by :func:`start`,
with one more command: ``ops`` (:func:`serve_ops`).

A backend is an :class:`OpsBackend`: ``tensor``, ``host``, ``sync``, and one
``op_<name>`` method per operation of :data:`kbench.ops.spec.OPS`, which receives the
prepared inputs (device tensors in the backend's layouts; numpy arrays or lists for
the creation ops), does any set-up that is not the operation itself (recording a
forward pass before a backward one) and returns the function of no arguments that is
timed; its docstring's first line says what it calls, and results record it.

:func:`measure` checks that function's outputs against the float64 reference (a
mismatch is not timed), then times ``warmup`` and ``repeats`` calls, each followed by
:meth:`OpsBackend.sync` so that the clock stops only when the device is done, with the
garbage collector paused (as ``timeit`` does); with ``--target-precision`` /
``--time-budget``, until :class:`kbench.measure.stats.PrecisionTracker` says stop.

After every operation the worker answers with its reply so far (status ``running``),
so that a worker killed or timed out still leaves what it measured. Standard library
and numpy only (both environments); the framework comes in through the backend's
implementation alone.
"""

from __future__ import annotations

import abc
import collections
import gc
import hashlib
import importlib
import sys
import time
from typing import Any, Callable, ClassVar, Dict, List, Optional, Tuple, Type

import numpy as np

from kbench.backends.base import Backend, Unsupported, is_out_of_memory
from kbench.measure.stats import PrecisionGoal, PrecisionTracker, percentiles
from kbench.ops.spec import OPS, OpSpec, check
from kbench.run import worker as run_worker
from kbench.run.protocol import WorkerReply, WorkerTask, emit_progress
from kbench.run.worker import Served, load_task

IMPLEMENTATIONS: Dict[str, str] = {
    "tensorflow": "kbench.ops.keras_ops:KerasOps",
    "jax": "kbench.ops.keras_ops:KerasOps",
    "torch": "kbench.ops.keras_ops:KerasOps",
    "torch-native": "kbench.ops.torch_ops:TorchOps",
    "mxnet": "kbench.ops.mxnet_ops:MXNetOps",
}

# Layouts: how the canonical arrays (NHWC images, HWIO conv kernels, (in, out) dense
# kernels) become a backend's, and back (the inverse permutation).
TO_LAYOUT: Dict[Tuple[str, str], Tuple[int, ...]] = {
    ("image", "NCHW"): (0, 3, 1, 2),
    ("conv_kernel", "OIHW"): (3, 2, 0, 1),
    ("dense_kernel", "OI"): (1, 0),
}
FROM_LAYOUT = {key: tuple(int(i) for i in np.argsort(axes)) for key, axes in TO_LAYOUT.items()}
CANONICAL = {"image": "NHWC", "conv_kernel": "HWIO", "dense_kernel": "IO"}


# Framework messages that mean "this operation or dtype does not exist here", not a fault.
UNSUPPORTED_SIGNS = ("not implemented", "NotImplementedError", "only supports", "no kernel image",
                     "Unsupported", "unsupported")  # fmt: skip


class OpsBackend(abc.ABC):
    """One framework's way to hold arrays, wait for its device, and run each operation."""

    name: ClassVar[str] = ""
    # Layout per operand role where the backend's operations want another than CANONICAL.
    layouts: ClassVar[Dict[str, str]] = {}

    def __init__(self, gpu: bool, dtype: str, image_data_format: str = "channels_last") -> None:
        self.gpu = gpu
        self.dtype = dtype
        self.image_data_format = image_data_format

    @classmethod
    def runtime(cls, backend: str, threads: int) -> Backend:
        """What starts the framework in this process as model runs do (threads, GPU
        memory options, the backend check): the backend's :class:`Backend`."""
        from kbench.backends import load_backend

        return load_backend(backend)(threads=threads)

    @abc.abstractmethod
    def tensor(self, array: np.ndarray) -> Any:
        """A device tensor holding ``array`` (set-up: not timed)."""

    @abc.abstractmethod
    def host(self, value: Any) -> np.ndarray:
        """A tensor's values as a numpy array on the host."""

    @abc.abstractmethod
    def sync(self, outputs: Any) -> None:
        """Return only when the device has finished computing ``outputs``."""

    def _forward(self, run: Callable[[], Any]) -> Callable[[], Any]:
        """``run`` as a forward operation is timed (torch: under ``no_grad``)."""
        return run

    def describe(self, op: str) -> Optional[str]:
        """What the backend calls for ``op`` (its method's docstring, first line)."""
        method = getattr(self, f"op_{op}", None)
        doc = (method.__doc__ or "").strip() if method else ""
        return doc.splitlines()[0] if doc else None

    def prepare(self, spec: OpSpec, n: int, inputs: Dict[str, np.ndarray]) -> Dict[str, Any]:
        """Each input as the operation receives it: a tensor in the backend's layout, or
        the numpy array / nested list itself for ``host`` / ``list`` operands."""
        prepared: Dict[str, Any] = {}
        for name, role in spec.roles(n).items():
            array = inputs[name]
            if role == "host":
                prepared[name] = array
            elif role == "list":
                prepared[name] = array.tolist()
            else:
                axes = TO_LAYOUT.get(self._layout(role))
                prepared[name] = self.tensor(
                    np.ascontiguousarray(array.transpose(axes)) if axes else array
                )
        return prepared

    def _layout(self, role: str) -> Tuple[str, str]:
        return role, self.layouts.get(role, CANONICAL.get(role, ""))

    def host_outputs(self, spec: OpSpec, outputs: Any) -> List[np.ndarray]:
        if not isinstance(outputs, (tuple, list)):
            outputs = (outputs,)
        roles = [role for _, role in spec.outputs]
        roles += ["array"] * (len(outputs) - len(roles))
        found = [(self.host(value), FROM_LAYOUT.get(self._layout(role)))
                 for value, role in zip(outputs, roles)]  # fmt: skip
        return [array.transpose(axes) if axes else array for array, axes in found]


def calling(path: str, doc: str, **options: Any) -> Callable[..., Callable[[], Any]]:
    """An ``op_<name>`` method whose timed call is ``self.<path>(*inputs, **options)``
    (``path`` dotted from the backend: ``"nd.sigmoid"``), the inputs in the operation's
    order, wrapped by :meth:`OpsBackend._forward`; ``doc``: what it calls."""
    owner, _, name = path.partition(".")

    def op(self: OpsBackend, **inputs: Any) -> Callable[[], Any]:
        call, args = getattr(getattr(self, owner), name), tuple(inputs.values())
        return self._forward(lambda: call(*args, **options))

    op.__doc__ = doc
    return op


def time_calls(call: Callable[[], Any], sync: Callable[[Any], None], warmup: int,
               repeats: int, tracker: Optional[PrecisionTracker] = None
               ) -> List[float]:  # fmt: skip
    """Seconds per call of ``repeats`` calls after ``warmup`` calls, each synchronized;
    with ``tracker``, fewer once it says stop (``repeats`` is then the most calls)."""
    for _ in range(warmup):
        sync(call())
    times = []
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            sync(call())
            end = time.perf_counter()
            times.append(end - start)
            if tracker is not None and tracker.add(start, end):
                break
    finally:
        if collecting:
            gc.enable()
    return times


def digest(inputs: Dict[str, np.ndarray]) -> str:
    """A short fingerprint of the inputs, to show that every backend had the same."""
    sha = hashlib.sha1()
    for name in sorted(inputs):
        sha.update(name.encode())
        sha.update(np.ascontiguousarray(inputs[name]).tobytes())
    return sha.hexdigest()[:12]


def measure(
    backend: OpsBackend, spec: OpSpec, n: int, *, dtype: str, seed: int, warmup: int, repeats: int,
    max_memory_bytes: Optional[float] = None, goal: Optional[PrecisionGoal] = None,
) -> Dict[str, Any]:  # fmt: skip
    """Check, then time, one operation at one size; never raises for the operation's
    own failures (they become ``failed`` or ``unsupported`` entries)."""
    entry: Dict[str, Any] = {"op": spec.name, "size": n, "shapes": spec.shapes(n), "dtype": dtype,
                             "impl": backend.describe(spec.name), "status": "ok"}  # fmt: skip
    estimate = spec.estimated_bytes(n, dtype)
    if max_memory_bytes is not None and estimate > max_memory_bytes:
        return dict(entry, status="skipped", reason=(
            f"needs about {estimate / 2**20:,.0f} MiB, above the {max_memory_bytes / 2**20:,.0f}"
            " MiB allowed (--max-memory)"))  # fmt: skip
    build = getattr(backend, f"op_{spec.name}", None)
    if build is None:
        return dict(entry, status="unsupported",
                    reason=f"{backend.name} has no implementation of {spec.name}")  # fmt: skip
    stage = "set-up"
    try:
        inputs = spec.inputs(n, dtype, seed)
        entry["inputs_sha1"] = digest(inputs)
        call = build(**backend.prepare(spec, n, inputs))
        stage = "check"
        start = time.perf_counter()
        outputs = call()
        backend.sync(outputs)
        entry["first_call_s"] = time.perf_counter() - start  # tracing, compiling, caching
        host = backend.host_outputs(spec, outputs)
        entry["check"] = check(spec, n, dtype, backend.gpu, inputs, host)
        del outputs, host
        if not entry["check"]["passed"]:
            return dict(entry, status="mismatch", reason=_mismatch_reason(entry["check"]))
        stage = "timing"
        timed_from = time.time()  # wall clock, comparable with the parent's sampler
        tracker = PrecisionTracker(goal) if goal is not None and goal.active else None
        times = time_calls(call, backend.sync, warmup, repeats, tracker)
        entry["timed_window"] = [timed_from, time.time()]
        if tracker is not None:  # calls per second: the interval on 1 / time per call
            entry["precision"] = tracker.record()
    except Exception as err:  # an operation's failure is recorded; the next one runs
        return dict(entry, **_failure(err, stage))
    spread = percentiles(times)
    entry.update(median_s=spread["p50"], p10_s=spread["p10"], p90_s=spread["p90"],
                 mean_s=spread["mean"], n=len(times), warmup=warmup, times_s=times)  # fmt: skip
    if spec.flops is not None:
        flops = spec.flops(n)
        entry.update(flops=flops, gflops_per_sec=flops / spread["p50"] / 1e9)
    return entry


def _mismatch_reason(result: Dict[str, Any]) -> str:
    if "reason" in result:
        return result["reason"]
    where = f" ({result['output']})" if "output" in result else ""
    return (
        f"max |difference| from the float64 reference{where} is {result['max_abs_diff']:.3g}; "
        f"tolerance {result['tolerance']:.3g} ({result['rtol']:.3g} x {result['relative_to']:.3g})"
    )


def _failure(err: BaseException, stage: str) -> Dict[str, Any]:
    text = f"{type(err).__name__}: {err}".strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0]
    if "Traceback" in first and len(lines) > 1:  # MXNet puts its C++ traceback first
        first = lines[-1] if lines[-1].startswith(type(err).__name__) else f"{first} {lines[-1]}"
    first = first[:500]
    if isinstance(err, (Unsupported, NotImplementedError)) or any(
        sign in text for sign in UNSUPPORTED_SIGNS
    ):
        return {"status": "unsupported", "reason": first, "stage": stage}
    if is_out_of_memory(err):
        first = f"out of memory: {first}"
    return {"status": "failed", "reason": first, "stage": stage}


def start(task: WorkerTask) -> Backend:
    """The framework started as model runs start it (threads, device, the backend check),
    the operations' backend on it as ``ops``; ``import_time_s``: how long both took."""
    config = task.config
    module, name = IMPLEMENTATIONS[config["backend"]].split(":")
    cls: Type[OpsBackend] = getattr(importlib.import_module(module), name)
    runtime = cls.runtime(config["backend"], config["threads"])
    began = time.perf_counter()
    runtime.start(task.data_format, device=config["device"])
    gpu, data_format = runtime.gpus > 0, task.data_format
    runtime.ops = cls(gpu=gpu, dtype=config["dtype"], image_data_format=data_format)
    runtime.import_time_s = time.perf_counter() - began
    return runtime


def serve_ops(served: Served, command: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """The ``ops`` command: every operation at every size, checked and timed, a progress
    line and an ``op`` answer (the reply so far) each; then the ``result``."""
    config, runtime = load_task(command["task"]).config, served.backend
    ops, framework = runtime.ops, runtime.describe()
    entries: List[Dict[str, Any]] = []

    def reply(status: str) -> Dict[str, Any]:
        metrics = {"ops": entries, "device": "gpu" if ops.gpu else "cpu",
                   "import_time_s": runtime.import_time_s,
                   "statuses": dict(collections.Counter(e["status"] for e in entries))}  # fmt: skip
        return {"reply": WorkerReply(status=status, metrics=metrics, framework=framework).to_dict()}

    max_memory = config.get("max_memory_mb")
    goal = PrecisionGoal.from_config(config)  # --target-precision, --time-budget
    for name in config["ops"]:
        for n in config["sizes"]:
            entry = measure(
                ops, OPS[name], n, dtype=config["dtype"], seed=config["seed"],
                warmup=config["warmup"], repeats=config["repeats"], goal=goal,
                max_memory_bytes=None if max_memory is None else max_memory * 2**20,
            )  # fmt: skip
            entries.append(entry)
            emit_progress("op", op=name, size=n, status=entry["status"],
                          median_s=entry.get("median_s"), reason=entry.get("reason"))  # fmt: skip
            served.replies.send("op", **reply("running"))
    return "result", reply("ok")


if __name__ == "__main__":
    sys.exit(run_worker.main(module="kbench.ops.worker", start=start, kinds={"ops": serve_ops}))
