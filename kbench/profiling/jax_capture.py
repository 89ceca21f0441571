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

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from kbench.profiling.ops import OpTime
from kbench.profiling.xspace import (
    HloOp,
    XEvent,
    XPlane,
    event_program,
    hlo_op_names,
    newest_xspace,
    read_xspace,
)

_LAYER = re.compile(r"jvp\(([^()/]+)\)")
_NUMBERED = re.compile(r"\.\d+$")


TRACE_DIR_VARIABLE = "KBENCH_PROFILE_TRACE_DIR"


def keep_trace(trace: Path) -> None:
    """Copy the raw trace into ``$KBENCH_PROFILE_TRACE_DIR`` where that is set, to open
    in TensorBoard or Perfetto, or to check what kbench made of it."""
    folder = os.environ.get(TRACE_DIR_VARIABLE)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy2(trace, Path(folder) / f"jax-{os.getpid()}-{trace.name}")


def in_order_events(events: List[XEvent]) -> Tuple[List[XEvent], List[XEvent]]:
    """(kept, dropped) events of one CUDA stream. A stream runs its operations in order:
    the next may start shortly before the previous one ended (on an H100, 87 of 250
    events did, by 32 ns to 1.2 us), but it cannot end before it, so a record that ends
    after the next one on the stream ended is impossible. One was seen on that H100
    (JAX 0.11, CUDA 13): a 4-byte asynchronous device-to-device copy recorded as
    1,114 ms, spanning the compilation before the next kernel. Such a record says nothing
    of how long the copy ran: it is left out, and said."""
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
