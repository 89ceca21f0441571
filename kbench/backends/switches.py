"""Optimization switches: each framework's own speed options, off and on.

A switch is a run setting (a flag, a key in sweep files). A switch set away from its
default on a backend that has no such thing is recorded as ``not applicable`` with the
reason, never silently ignored; what every switch did is in the result
(``environment.framework.switches``).

Standard library only: imported under every backend's interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Tuple


@dataclass(frozen=True)
class Switch:
    name: str
    default: Any
    choices: Tuple[Any, ...]  # empty: any whole number from 0 up (a count)
    help: str
    # True: applied to each run's model and compile (a warm worker changes it between
    # runs); False: read as the framework starts, one value per worker
    per_run: bool = False

    @property
    def is_count(self) -> bool:
        return not self.choices


SWITCHES: Dict[str, Switch] = {
    s.name: s
    for s in (
        Switch(
            "jit_compile", "auto", ("auto", "on", "off"),
            "Keras compile(jit_compile=...): XLA for tensorflow and jax, torch.compile for "
            "torch (auto: Keras decides; off runs jax un-jitted)",
            per_run=True,
        ),
        Switch(
            "run_eagerly", False, (False, True),
            "Keras compile(run_eagerly=True): no graph, no jit; each step op by op", per_run=True,
        ),
        Switch(
            "torch_compile", False, (False, True),
            "torch-native: torch.compile the model (inductor) before training", per_run=True,
        ),
        Switch(
            "mixed_precision", "off", ("off", "float16", "bfloat16"),
            "Keras dtype policy mixed_float16 / mixed_bfloat16 (variables stay float32; "
            "float16 losses scaled by Keras' LossScaleOptimizer); torch.autocast for "
            "torch-native (float16 losses scaled by torch.amp.GradScaler)",
            per_run=True,
        ),
        Switch(
            "hybridize", False, (False, True),
            "MXNet Gluon: hybridize the network (a cached symbolic graph)", per_run=True,
        ),
        Switch(
            "tf32", "auto", ("auto", "on", "off"),
            "TensorFloat-32 matmuls on GPUs that have them (auto: the framework's default)",
        ),
        Switch(
            "onednn", "auto", ("auto", "on", "off"),
            "TensorFlow's oneDNN CPU kernels (TF_ENABLE_ONEDNN_OPTS, set before TensorFlow "
            "starts). auto: TensorFlow's choice for this CPU (on only with AVX-512 VNNI/BF16, "
            "AVX-VNNI or AMX; else its Eigen kernels) or TF_ENABLE_ONEDNN_OPTS where set, "
            "except that a channels_first run gets oneDNN, since Eigen cannot run NCHW "
            "convolutions on the CPU (off: such a run is unsupported, unless --jit-compile on)",
        ),
        Switch(
            "mxnet_gpus", 0, (),
            "keras-mxnet: train on the first N GPUs in one process, each batch split across "
            "them (compile(context=['gpu(0)', ...]); --batch-size stays the whole batch). "
            "0: keras-mxnet's default device, its first GPU if it sees one, else cpu(). "
            "Needs the MXNet CUDA build (KBENCH_GPU=1 scripts/setup_envs.sh)",
        ),
    )
}  # fmt: skip


def per_process(switches: Dict[str, Any]) -> Dict[str, Any]:
    """The switches a worker process is started with: runs that differ in one cannot share it."""
    return {name: value for name, value in switches.items() if not SWITCHES[name].per_run}


def defaults() -> Dict[str, Any]:
    return {name: s.default for name, s in SWITCHES.items()}


@dataclass(frozen=True)
class SwitchState:
    """What became of one switch in one run."""

    requested: Any
    status: str  # "default", "applied" or "not applicable"
    detail: str

    def to_dict(self) -> Dict[str, Any]:
        return {"requested": self.requested, "status": self.status, "detail": self.detail}


class SwitchBoard:
    """The switches of one run, as a backend applies them (worker side)."""

    def __init__(self, requested: Dict[str, Any], backend: str) -> None:
        self.requested = dict(defaults(), **requested)
        self.backend = backend
        self.states: Dict[str, SwitchState] = {}

    def value(self, name: str) -> Any:
        return self.requested[name]

    def is_default(self, name: str) -> bool:
        return self.requested[name] == SWITCHES[name].default

    def applied(self, name: str, detail: str) -> None:
        status = "default" if self.is_default(name) else "applied"
        self.states[name] = SwitchState(self.requested[name], status, detail)

    def not_applicable(self, name: str, why: str) -> None:
        self.states[name] = SwitchState(self.requested[name], "not applicable", why)

    def for_next_run(self, requested: Dict[str, Any]) -> SwitchBoard:
        """A warm worker's board for its next run: its per-run switches; the process's as
        they are (the same by :func:`kbench.run.runner.worker_key`), and what became of them."""
        board = SwitchBoard(requested, self.backend)
        changed = [
            name
            for name, value in per_process(board.requested).items()
            if value != self.requested[name]
        ]
        if changed:
            raise ValueError(
                "a warm worker's next run asks for other start-up switches ("
                + ", ".join(changed)
                + "); expected runs that share a worker (kbench.run.runner.worker_key)"
            )
        board.states = {n: s for n, s in self.states.items() if not SWITCHES[n].per_run}
        return board

    def record(self) -> Dict[str, Dict[str, Any]]:
        """Every switch: what the backend did, or that it has no such thing."""
        out = {}
        for name in SWITCHES:
            state = self.states.get(name)
            if state is None:
                if self.is_default(name):
                    state = SwitchState(self.requested[name], "default", "left as it is")
                else:
                    state = SwitchState(
                        self.requested[name], "not applicable",
                        f"{self.backend} has no {name} switch",
                    )  # fmt: skip
            out[name] = state.to_dict()
        return out
