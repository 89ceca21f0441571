"""The worker side of an operator benchmark: what a backend implements, and how each
operation at each size is checked and timed.

A backend is an :class:`OpsBackend`: three framework methods (``tensor``, ``host``,
``sync``) and one ``op_<name>`` method per operation of :data:`kbench.ops.spec.OPS`.
``op_<name>`` receives the operation's prepared inputs (device tensors in the
backend's layouts, or numpy arrays / lists for the creation ops), does any set-up
that is not the operation itself (recording a forward pass before a backward one)
and returns a function of no arguments that runs the operation once and returns its
output(s). Its docstring's first line says what it calls; results record it.

:func:`measure` runs that function once and compares its outputs with the float64
reference (a mismatch is not timed), then times it: ``warmup`` calls, then
``repeats`` calls, each followed by :meth:`OpsBackend.sync` so that the clock stops
only when the device is done, with Python's garbage collector paused (as
``timeit`` does). With ``--target-precision`` / ``--time-budget`` the calls stop as
soon as :class:`kbench.measure.stats.PrecisionTracker` says so, ``repeats`` being
the most, and the entry keeps the tracker's record under ``precision``.

Standard library and numpy only, as :mod:`kbench.ops.spec`.
"""

from __future__ import annotations

import abc
import gc
import hashlib
import time
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.measure.stats import PrecisionGoal, PrecisionTracker, percentiles
from kbench.ops.spec import OpSpec, check

if TYPE_CHECKING:  # pragma: no cover
    from kbench.backends.base import Backend

STATUSES = ("ok", "mismatch", "failed", "unsupported", "skipped")

# Layouts: how this module's canonical arrays (NHWC images, HWIO conv kernels,
# (in, out) dense kernels) become a backend's, and back (the inverse permutation).
TO_LAYOUT: Dict[Tuple[str, str], Tuple[int, ...]] = {
    ("image", "NCHW"): (0, 3, 1, 2),
    ("conv_kernel", "OIHW"): (3, 2, 0, 1),
    ("dense_kernel", "OI"): (1, 0),
}
FROM_LAYOUT = {key: tuple(int(i) for i in np.argsort(axes)) for key, axes in TO_LAYOUT.items()}
CANONICAL = {"image": "NHWC", "conv_kernel": "HWIO", "dense_kernel": "IO"}


class Unsupported(Exception):
    """The backend cannot run this operation (or dtype); the message says why."""


# Framework messages that mean "this operation or dtype does not exist here", not a fault.
UNSUPPORTED_SIGNS = ("not implemented", "NotImplementedError", "only supports", "no kernel image",
                     "Unsupported", "unsupported")  # fmt: skip


class OpsBackend(abc.ABC):
    """One framework's way to hold arrays, wait for its device, and run each operation."""

    name: ClassVar[str] = ""
    # Layout per operand role, where the backend's native operations want another
    # than the canonical one (see CANONICAL).
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

    # ---------------------------------------------------------------- helpers

    def implementation(self, op: str) -> Optional[Callable[..., Callable[[], Any]]]:
        return getattr(self, f"op_{op}", None)

    def describe(self, op: str) -> Optional[str]:
        """What the backend calls for ``op`` (its method's docstring, first line)."""
        method = self.implementation(op)
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
                prepared[name] = self.tensor(self.to_layout(array, role))
        return prepared

    def to_layout(self, array: np.ndarray, role: str) -> np.ndarray:
        axes = TO_LAYOUT.get((role, self.layouts.get(role, CANONICAL.get(role, ""))))
        return np.ascontiguousarray(array.transpose(axes)) if axes else array

    def from_layout(self, array: np.ndarray, role: str) -> np.ndarray:
        axes = FROM_LAYOUT.get((role, self.layouts.get(role, CANONICAL.get(role, ""))))
        return array.transpose(axes) if axes else array

    def host_outputs(self, spec: OpSpec, outputs: Any) -> List[np.ndarray]:
        if not isinstance(outputs, (tuple, list)):
            outputs = (outputs,)
        roles = [role for _, role in spec.outputs]
        roles += ["array"] * (len(outputs) - len(roles))
        return [self.from_layout(self.host(value), role) for value, role in zip(outputs, roles)]


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
    backend: OpsBackend,
    spec: OpSpec,
    n: int,
    *,
    dtype: str,
    seed: int,
    warmup: int,
    repeats: int,
    max_memory_bytes: Optional[float] = None,
    goal: Optional[PrecisionGoal] = None,
) -> Dict[str, Any]:
    """Check, then time, one operation at one size; never raises for the operation's
    own failures (they become ``failed`` or ``unsupported`` entries)."""
    entry: Dict[str, Any] = {
        "op": spec.name,
        "size": n,
        "shapes": spec.shapes(n),
        "dtype": dtype,
        "impl": backend.describe(spec.name),
        "status": "ok",
    }
    estimate = spec.estimated_bytes(n, dtype)
    if max_memory_bytes is not None and estimate > max_memory_bytes:
        return dict(entry, status="skipped", reason=(
            f"needs about {estimate / 2**20:,.0f} MiB, above the {max_memory_bytes / 2**20:,.0f}"
            " MiB allowed (--max-memory)"))  # fmt: skip
    build = backend.implementation(spec.name)
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
    from kbench.backends.base import is_out_of_memory  # numpy-only module

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
        return {"status": "failed", "reason": f"out of memory: {first}", "stage": stage}
    return {"status": "failed", "reason": first, "stage": stage}


def summarize(entries: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    """How many entries have each status."""
    counts: Dict[str, int] = {}
    for entry in entries:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    return counts
