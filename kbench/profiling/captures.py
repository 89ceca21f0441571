"""Each framework's profiler, captured: its events turned into
:class:`~kbench.profiling.OpTime` records with their phase and Keras layer. Each
framework is imported only when its capture runs; each capture's ``attribution`` says
how it tells the phases apart.

**PyTorch** (:class:`TorchCapture`), ``torch.profiler``: under the autograd engine is
backward; under ``Optimizer.step``/``zero_grad`` or a ``kbench::update`` marker the
update; under ``kbench::data`` data; the rest of a step forward. The markers wrap a
method (Keras' ``optimizer.apply``, the native port's conversion) for the profiled
steps only.

**TensorFlow** (:class:`TensorFlowCapture`), ``tf.profiler.experimental``'s XSpace file
(:mod:`kbench.profiling.xspace`): each graph operator is ``node_name:OpType`` (on a GPU,
a kernel's ``tf_op`` statistic); the node name says the phase (``gradient_tape/``, the
optimizer's scope, the model's scope and ``compile_loss/``) and the layer.

**JAX** (:class:`JaxCapture`), a ``jax.profiler`` trace (XSpace too): each executed HLO
instruction carries its ``hlo_op`` and ``program_id``, and the metadata plane's HLO
modules give each instruction's JAX call path, which says the phase and the layer:
``jit(train_step)/jvp(conv2d)/...`` is conv2d's forward pass, ``transpose(jvp(...))``
its backward, the optimizer's scope the update, the rest (metrics) other.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Tuple

from kbench.profiling import OpTime
from kbench.profiling.xspace import (
    HloOp,
    XEvent,
    XPlane,
    event_program,
    hlo_op_names,
    newest_xspace,
    read_xspace,
)

# (object, method name, phase): the method runs under a kbench::PHASE marker
Mark = Tuple[Any, str, str]

# The profiler's own step marker. The others' self time is real work (the Python of an
# optimizer step, of converting a batch, of the autograd engine), so it counts.
_TORCH_SKIP = ("ProfilerStep",)


@dataclass
class TorchCapture:
    gpu: bool
    training: bool = True
    marks: List[Mark] = field(default_factory=list)
    tool = "torch.profiler"
    attribution = (
        "backward: under PyTorch's autograd engine; update: under Optimizer.step/zero_grad "
        "or the Keras optimizer's apply; data: the native port's conversion of a batch to "
        "tensors; forward: the rest of the step (loss and metrics included); self time "
        + "on the GPU (CUDA kernels) where one is used, else on the CPU"
    )

    def run(self, steps: Callable[[], None]) -> List[OpTime]:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.gpu:
            activities.append(ProfilerActivity.CUDA)
        with _marked(self.marks), profile(activities=activities) as prof:
            steps()
        return [op for op in map(self._op, prof.events()) if op is not None]

    def _op(self, event: Any) -> Any:
        if event.name.startswith(_TORCH_SKIP):
            return None
        if self.gpu:
            micros = getattr(event, "self_device_time_total", None)
            if micros is None:
                micros = getattr(event, "self_cuda_time_total", 0.0)
        else:
            micros = event.self_cpu_time_total
        if micros <= 0:
            return None
        return OpTime(op=event.name, phase=self._phase(event), seconds=micros / 1e6)

    def _phase(self, event: Any) -> str:
        if not self.training:
            return "forward"
        parent = event  # an event is in its own phase: Optimizer.step's Python is update
        while parent is not None:
            name = parent.name
            if name.startswith("autograd::engine::evaluate_function"):
                return "backward"
            if name.startswith(("Optimizer.step", "Optimizer.zero_grad", "kbench::update")):
                return "update"
            if name.startswith("kbench::data"):
                return "data"
            parent = parent.cpu_parent
        return "forward"


@contextlib.contextmanager
def _marked(marks: List[Mark]) -> Iterator[None]:
    """Wrap each marked method in ``record_function('kbench::PHASE')`` meanwhile."""
    from torch.profiler import record_function

    def marker(method: Callable, label: str) -> Callable:
        def marked(*args: Any, **kwargs: Any) -> Any:
            with record_function(label):
                return method(*args, **kwargs)

        return marked

    undo = []
    try:
        for owner, name, phase in marks:
            had_own = name in vars(owner)
            method = getattr(owner, name)
            setattr(owner, name, marker(method, f"kbench::{phase}"))
            undo.append((owner, name, had_own, method))
        yield
    finally:
        for owner, name, had_own, method in reversed(undo):
            if had_own:
                setattr(owner, name, method)
            else:
                delattr(owner, name)


_TF_OP_EVENT = re.compile(r"^([^:\s]+):([A-Za-z_][A-Za-z0-9_]*)$")


@dataclass
class TensorFlowCapture:
    model_name: str
    optimizer_name: str
    training: bool = True
    tool = "tf.profiler (XSpace)"
    attribution = (
        "by node name: gradient_tape/ is backward, the optimizer's scope is update, the "
        "model's scope and compile_loss/ are forward, the rest (metrics, counters) is "
        "other; only graph operators are seen (an XLA-compiled step shows as one cluster)"
    )

    def run(self, steps: Callable[[], None]) -> List[OpTime]:
        import tensorflow as tf

        with tempfile.TemporaryDirectory(prefix="kbench-tfprof-") as logdir:
            tf.profiler.experimental.start(logdir)
            try:
                steps()
            finally:
                tf.profiler.experimental.stop()
            planes = read_xspace(newest_xspace(logdir))
        return self.ops(planes)

    def ops(self, planes: List[XPlane]) -> List[OpTime]:
        gpu = [p for p in planes if p.name.startswith("/device:GPU")]
        found = []
        for plane in gpu or [p for p in planes if p.name.startswith("/host:CPU")]:
            for line in plane.lines:
                for event in line.events:
                    label = event.stats.get("tf_op") if gpu else event.name
                    match = _TF_OP_EVENT.match(label) if isinstance(label, str) else None
                    picoseconds = event.duration_ps if gpu else event.self_ps
                    if match and picoseconds > 0:
                        phase, layer = self.phase(match.group(1))
                        found.append(OpTime(match.group(2), phase, picoseconds / 1e12, layer=layer))
        return found

    def phase(self, node: str) -> Tuple[str, Optional[str]]:
        parts = node.split("/")
        if parts[0] == "gradient_tape":
            return "backward", parts[2] if len(parts) > 3 else None
        if _scope_of(parts[0], self.optimizer_name):
            return "update", None
        if _scope_of(parts[0], self.model_name):
            return "forward", parts[1] if len(parts) > 2 else None
        if parts[0] == "compile_loss":
            return "forward", "loss"
        if parts[0].startswith("IteratorGetNext"):
            return "data", None
        return ("other" if self.training else "forward"), None


def _scope_of(scope: str, name: str) -> bool:
    """Whether a node's top scope is ``name``'s: TensorFlow numbers a scope used again
    (``small_cnn_1``), as when Keras traces the train step after building the model."""
    return re.fullmatch(re.escape(name) + r"(_\d+)*", scope, flags=re.IGNORECASE) is not None


_JAX_LAYER = re.compile(r"jvp\(([^()/]+)\)")
_JAX_NUMBERED = re.compile(r"\.\d+$")


TRACE_DIR_VARIABLE = "KBENCH_PROFILE_TRACE_DIR"


def keep_trace(trace: Path) -> None:
    """Copy the raw trace into ``$KBENCH_PROFILE_TRACE_DIR`` where set (for Perfetto)."""
    folder = os.environ.get(TRACE_DIR_VARIABLE)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy2(trace, Path(folder) / f"jax-{os.getpid()}-{trace.name}")


def in_order_events(events: List[XEvent]) -> Tuple[List[XEvent], List[XEvent]]:
    """(kept, dropped) events of one CUDA stream. A stream runs in order: the next event
    may start shortly before the previous one ended (on an H100, 87 of 250 did, by up to
    1.2 us) but cannot end before it. A record that ends after the next one ended is
    impossible (one on that H100: a 4-byte copy recorded as 1,114 ms, spanning the next
    compilation): it says nothing of how long the copy ran, so it is left out, and said."""
    ordered = sorted(events, key=lambda e: e.offset_ps)
    kept, dropped = [], []
    for event, following in zip(ordered, ordered[1:] + [None]):
        late = following is not None and (
            event.offset_ps + event.duration_ps > following.offset_ps + following.duration_ps
        )
        (dropped if late else kept).append(event)
    return kept, dropped


@dataclass
class JaxCapture:
    optimizer_name: str
    training: bool = True
    notes: List[str] = field(default_factory=list)  # events left out, and why
    tool = "jax.profiler (XSpace, HLO metadata)"
    attribution = (
        "by the JAX call path of each HLO instruction: transpose(jvp(...)) is backward, "
        "jvp(...) forward (the loss included), the optimizer's scope update, the rest "
        "(metrics) other; a fusion takes its root instruction's path; an instruction "
        "XLA rewrote without a path (on the CPU, some convolutions) is other, by its opcode"
    )

    def run(self, steps: Callable[[], None]) -> List[OpTime]:
        import jax

        with tempfile.TemporaryDirectory(prefix="kbench-jaxprof-") as logdir:
            jax.profiler.start_trace(logdir)
            try:
                steps()
            finally:
                jax.profiler.stop_trace()
            trace = newest_xspace(logdir)
            keep_trace(trace)
            planes = read_xspace(trace)
        return self.ops(planes)

    def ops(self, planes: List[XPlane]) -> List[OpTime]:
        paths = hlo_op_names(planes)
        gpu = [p for p in planes if p.name.startswith("/device:GPU")]
        found = []
        impossible: List[XEvent] = []
        for plane in gpu or [p for p in planes if p.name.startswith("/host:CPU")]:
            for line in plane.lines:
                events = line.events
                if gpu and line.name.startswith("Stream #"):
                    events, dropped = in_order_events(line.events)
                    impossible += dropped
                for event in events:
                    instruction = event.stats.get("hlo_op")
                    picoseconds = event.duration_ps if gpu else event.self_ps
                    if not isinstance(instruction, str) or picoseconds <= 0:
                        continue
                    hlo = paths.get((event_program(event) or 0, instruction))
                    op, phase, layer = self.describe(instruction, hlo)
                    found.append(OpTime(op, phase, picoseconds / 1e12, layer=layer))
        if impossible:
            longest = max(impossible, key=lambda e: e.duration_ps)
            self.notes.append(
                f"{len(impossible)} GPU event(s) left out: each recorded as ending after the "
                f"next operation on its stream ended, which a stream running its operations "
                f"in order cannot do (the longest: {longest.stats.get('hlo_op') or longest.name}, "
                f"{longest.duration_ps / 1e9:,.1f} ms recorded)"
            )
        return found

    def describe(self, instruction: str, hlo: Optional[HloOp]) -> Tuple[str, str, Optional[str]]:
        """(operator, phase, layer) of one HLO instruction from its call path."""
        if hlo is None or not hlo.path:
            # XLA dropped the path (a rewritten fusion): its opcode, phase unknown
            op = f"{hlo.opcode} (no call path)" if hlo else _JAX_NUMBERED.sub("", instruction)
            return op, "other" if self.training else "forward", None
        path = hlo.path
        parts = path.split("/")
        layers = _JAX_LAYER.findall(path)
        layer = layers[-1] if layers else None
        if not self.training:
            phase = "forward"
        elif "transpose(jvp(" in path:
            phase = "backward"
        elif self.optimizer_name.lower() in (part.lower() for part in parts):
            phase, layer = "update", None
        elif "jvp(" in path:
            phase = "forward"
        else:
            phase = "other"
        return parts[-1], phase, layer
