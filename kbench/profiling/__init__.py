"""Where a model run's time goes, operator by operator (``kbench run --profile``).

After the measured run (so the profiler never slows the throughput it reports), the
worker runs ``--profile-steps`` more steps under the framework's own profiler
(``torch.profiler``, TensorFlow's, JAX's trace). Each capture
(:mod:`kbench.profiling.captures`) turns its events into :class:`OpTime` records: the
framework's operator name, the Keras layer where the profiler tells it, the phase of the
step, and the self time (nested operators' excluded, so times add up). :func:`common_name`
maps them to ``kbench ops``' operation names, so a breakdown reads the same on every
backend; :func:`summarize` sums them per phase, per common operator, and the top ones.

MXNet's profiler is compiled out of the 1.9.1 wheel: there the section says
``unsupported`` with that reason. A profiler that fails leaves ``status: failed`` and
its message; the run's own measurements stand.

May import: nothing else in kbench.
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

import numpy as np

log = logging.getLogger("kbench.profiling")

TOP_OPS = 15

# The phases of a training step. "other" is what belongs to none of them: metrics,
# step counters, the framework's bookkeeping.
PHASES: Tuple[str, ...] = ("data", "forward", "backward", "update", "other")


@dataclass(frozen=True)
class OpTime:
    op: str  # the framework's name: aten::mm, Conv2DBackpropFilter, dot_general
    phase: str  # one of PHASES
    seconds: float  # self time
    layer: Optional[str] = None  # the Keras layer, where the profiler names it

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase: expected one of {', '.join(PHASES)}; got {self.phase!r}")


# (pattern on the lower-cased framework name, common name forward, common name backward)
_COMMON = (
    (re.compile(r"conv(?!ert)"), "conv2d", "conv2d_backward"),  # not convert_element_type
    (re.compile(r"matmul|gemm|addmm|\bmm\b|aten::mm|bmm|dot|linear"), "gemm", "dense_backward"),
    (re.compile(r"batch_?norm"), "batch_norm", "batch_norm"),
    (re.compile(r"relu|threshold_backward|clamp_min"), "relu", "relu"),
    (re.compile(r"softplus"), "softplus", "softplus"),
    (re.compile(r"softsign"), "softsign", "softsign"),
    (re.compile(r"sigmoid|logistic"), "sigmoid", "sigmoid"),
    (re.compile(r"tanh"), "tanh", "tanh"),
    (re.compile(r"softmax|cross_?entropy|nll_loss|log_softmax"), "softmax_loss", "softmax_loss"),
    (re.compile(r"reshape|flatten|\bview\b|aten::view"), "flatten", "flatten"),
    (re.compile(r"l2_?norm|aten::norm|\bnorm\b"), "l2_norm", "l2_norm"),
)
# Keras layer name -> common name, for frameworks that split a layer into primitive
# ops (TensorFlow's BatchNormalization is moments, sub, mul...).
_LAYERS = (
    (re.compile(r"batch_normalization"), "batch_norm"), (re.compile(r"^lstm"), "lstm_cell"),
)  # fmt: skip


def common_name(op: str, phase: str, layer: Optional[str] = None) -> Optional[str]:
    """The ``kbench ops`` name of a framework operator, or None (arithmetic, copies)."""
    if phase in ("update", "other"):
        return None  # the optimizer's arithmetic; work whose place in the step is unknown
    text = op.lower()
    for pattern, forward, backward in _COMMON:
        if pattern.search(text):
            return backward if phase == "backward" else forward
    if layer:
        for pattern, name in _LAYERS:
            if pattern.search(layer.lower()):
                return name
    return None


class ProfilerUnsupported(RuntimeError):
    """This backend has no operator profiler kbench can read here (the message says why)."""


class Capture(Protocol):
    tool: str
    attribution: str  # how the capture told the phases apart

    def run(self, steps: Callable[[], None]) -> List[OpTime]: ...


@dataclass(frozen=True)
class TopOp:
    op: str
    phase: str
    common: Optional[str]
    seconds: float
    share: float  # of all operator time
    calls_per_step: float
    layers: List[str]  # the Keras layers it ran in, where the profiler says, most time first


@dataclass(frozen=True)
class ProfileSummary:
    status: str  # ok, unsupported, failed
    reason: Optional[str] = None
    tool: Optional[str] = None
    attribution: Optional[str] = None
    device: Optional[str] = None  # where operator time was read: cpu or gpu
    steps: int = 0
    batch_size: int = 0
    window_s: float = 0.0  # wall time of the profiled steps, profiler overhead included
    op_time_s: float = 0.0  # all operators' self time (threads add up on a CPU)
    phases_s: Dict[str, float] = field(default_factory=dict)
    common_ops_s: Dict[str, float] = field(default_factory=dict)
    top_ops: List[TopOp] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)  # events left out, and why

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def summarize(ops: List[OpTime], steps: int, top: int = TOP_OPS) -> Dict[str, Any]:
    """Totals per phase and common name, and the ``top`` operators by self time."""
    total = sum(op.seconds for op in ops)
    phases = {phase: 0.0 for phase in PHASES}
    common: Dict[str, float] = defaultdict(float)
    grouped: Dict[tuple, Dict[str, Any]] = {}
    for op in ops:
        phases[op.phase] += op.seconds
        name = common_name(op.op, op.phase, op.layer)
        if name:
            common[name] += op.seconds
        entry = grouped.setdefault(
            (op.op, op.phase),
            {"seconds": 0.0, "calls": 0, "layers": defaultdict(float), "common": name},
        )
        entry["seconds"] += op.seconds
        entry["calls"] += 1
        if op.layer:
            entry["layers"][op.layer] += op.seconds
    ranked = sorted(grouped.items(), key=lambda item: -item[1]["seconds"])[:top]
    top_ops = [
        TopOp(
            op=op, phase=phase, common=entry["common"], seconds=entry["seconds"],
            share=entry["seconds"] / total if total else 0.0,
            calls_per_step=entry["calls"] / steps,
            layers=sorted(entry["layers"], key=lambda name: -entry["layers"][name])[:5],
        )
        for (op, phase), entry in ranked
    ]  # fmt: skip
    return {
        "op_time_s": total, "phases_s": phases,
        "common_ops_s": dict(sorted(common.items(), key=lambda item: -item[1])),
        "top_ops": top_ops,
    }  # fmt: skip


def profile_model(
    backend: Any, model: Any, arrays: Dict[str, Any], *, mode: str, batch_size: int, steps: int,
) -> Dict[str, Any]:  # fmt: skip
    """``steps`` steps of the trained model under the backend's profiler: the result's
    ``profile`` section. Never raises: a failing profiler is reported."""
    training = mode == "train"
    try:
        capture: Capture = backend.op_profiler(model, training=training)
    except Exception as err:  # noqa: BLE001 - the run's measurements stand; say why
        unsupported = isinstance(err, ProfilerUnsupported)
        reason = str(err) if unsupported else f"{type(err).__name__}: {err}"
        log.warning("--profile: %s", reason)
        return ProfileSummary("unsupported" if unsupported else "failed", reason).to_dict()

    x, y = arrays["x_train"], arrays["y_train"]
    batches = max(len(x) // batch_size, 1)
    parts = [
        slice((i % batches) * batch_size, (i % batches + 1) * batch_size) for i in range(steps)
    ]
    inputs = [np.asarray(x[part]) for part in parts]
    labels = [np.asarray(y[part]) for part in parts]

    def run_steps(count: int = steps) -> None:
        for batch_x, batch_y in list(zip(inputs, labels))[:count]:
            if training:
                backend.train_step(model, batch_x, batch_y)
            else:
                backend.predict(model, batch_x)
        backend.sync()

    # One step before the trace: a step function built on first use (Keras'
    # train_on_batch) compiles there, not inside the profiled window.
    run_steps(1)
    started = time.perf_counter()
    try:
        ops = capture.run(run_steps)
    except Exception as err:  # noqa: BLE001 - the run's measurements stand; say why
        log.warning("--profile: %s failed: %s: %s", capture.tool, type(err).__name__, err)
        return ProfileSummary(
            status="failed", reason=f"{type(err).__name__}: {err}", tool=capture.tool
        ).to_dict()
    window = time.perf_counter() - started
    if not ops:
        reason = f"{capture.tool} recorded no operator events in {steps} steps"
        return ProfileSummary("failed", reason, tool=capture.tool).to_dict()
    facts = dict(tool=capture.tool, attribution=capture.attribution, steps=steps, window_s=window)
    facts.update(device="gpu" if backend.gpus else "cpu", batch_size=batch_size)
    notes = list(getattr(capture, "notes", []))
    return ProfileSummary("ok", notes=notes, **facts, **summarize(ops, steps)).to_dict()
