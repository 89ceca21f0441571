"""JAX's compiled operators through its profiler (``jax.profiler`` trace).

The trace is an XSpace file (read by :mod:`kbench.profiling.xspace`): each executed
HLO instruction is an event carrying its ``hlo_op`` name and ``program_id``, and the
metadata plane holds each program's HLO module, where every instruction records the
JAX call path it came from. The path says the phase and the Keras layer:
``jit(train_step)/jvp(conv2d)/conv_general_dilated`` is the forward pass of layer
conv2d, ``transpose(jvp(...))`` its backward pass, a part named after the optimizer
(``adam/``) the update; what lies outside the differentiated function (metrics) is
other.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from kbench.profiling.ops import OpTime
from kbench.profiling.xspace import (
    HloOp,
    XPlane,
    event_program,
    hlo_op_names,
    newest_xspace,
    read_xspace,
)

_LAYER = re.compile(r"jvp\(([^()/]+)\)")
_NUMBERED = re.compile(r"\.\d+$")


@dataclass
class JaxCapture:
    optimizer_name: str
    training: bool = True
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
            planes = read_xspace(newest_xspace(logdir))
        return self.ops(planes)

    def ops(self, planes: List[XPlane]) -> List[OpTime]:
        paths = hlo_op_names(planes)
        gpu = [p for p in planes if p.name.startswith("/device:GPU")]
        found = []
        for plane in gpu or [p for p in planes if p.name.startswith("/host:CPU")]:
            for line in plane.lines:
                for event in line.events:
                    instruction = event.stats.get("hlo_op")
                    picoseconds = event.duration_ps if gpu else event.self_ps
                    if not isinstance(instruction, str) or picoseconds <= 0:
                        continue
                    hlo = paths.get((event_program(event) or 0, instruction))
                    op, phase, layer = self.describe(instruction, hlo)
                    found.append(OpTime(op, phase, picoseconds / 1e12, layer=layer))
        return found

    def describe(self, instruction: str, hlo: Optional[HloOp]) -> Tuple[str, str, Optional[str]]:
        """(operator, phase, layer) of one HLO instruction from its call path."""
        if hlo is None or not hlo.path:
            # XLA dropped the path (a rewritten fusion): its opcode, phase unknown
            op = f"{hlo.opcode} (no call path)" if hlo else _NUMBERED.sub("", instruction)
            return op, "other" if self.training else "forward", None
        path = hlo.path
        parts = path.split("/")
        layers = _LAYER.findall(path)
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
