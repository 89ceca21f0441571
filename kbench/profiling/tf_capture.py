"""TensorFlow's graph operators through its profiler (``tf.profiler.experimental``).

The profiler writes an XSpace file (read by :mod:`kbench.profiling.xspace`). On the CPU
each operator of the compiled train step is an event ``node_name:OpType`` on an
executor thread; on a GPU each kernel carries its node in a ``tf_op`` statistic. The
node name says the phase: Keras 3 computes gradients under ``gradient_tape/``, the
optimizer's update under the optimizer's name (``adam/``), the forward pass under the
model's name and the loss under ``compile_loss/``; the rest (metrics, step counters)
is other. Keras layer names are the next part of the node name.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from kbench.profiling.ops import OpTime
from kbench.profiling.xspace import XPlane, newest_xspace, read_xspace

_OP_EVENT = re.compile(r"^([^:\s]+):([A-Za-z_][A-Za-z0-9_]*)$")


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
                    match = _OP_EVENT.match(label) if isinstance(label, str) else None
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
