"""PyTorch's operators through ``torch.profiler`` (Keras on torch, torch-native).

Phases come from where each operator ran: under the autograd engine (PyTorch names
every backward function ``autograd::engine::evaluate_function: ...``) is backward;
under ``Optimizer.step`` / ``Optimizer.zero_grad`` (PyTorch's own markers) or a
``kbench::update`` marker is the update; under ``kbench::data`` is data; the rest of
a training step is forward (the loss and Keras' metrics included). The markers are
put around a method (Keras' ``optimizer.apply``, the native port's tensor
conversion) for the profiled steps only and taken off afterwards.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, List, Tuple

from kbench.profiling.ops import OpTime

# (object, method name, phase): the method runs under a kbench::PHASE marker
Mark = Tuple[Any, str, str]

# The profiler's own step marker. The others' self time is real work (the Python of an
# optimizer step, of converting a batch, of the autograd engine), so it counts.
_SKIP = ("ProfilerStep",)


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
        if event.name.startswith(_SKIP):
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
