"""What one ``kbench exec`` run is: a frozen, validated description, checked before
any process starts (messages name the flag, what was expected and received)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from kbench.backends import BACKENDS
from kbench.measure.processes import usable_cores
from kbench.results.config import ConfigError, check_choice, check_setting

# The backends whose processes run Keras (torch-native and mxnet-gluon do not).
EXEC_BACKENDS: Tuple[str, ...] = tuple(name for name, spec in BACKENDS.items() if spec.runs_keras)
# Interpreter names that the backend's own interpreter replaces at the command's start.
PYTHON_NAMES = ("python", "python3")
SCRIPT_DATA = "the script's own"  # data and batch: whatever the script uses
# The fields checked as the run settings of the same names check them.
CHECKED = ("device", "threads", "warmup_steps", "repeat", "timeout_s", "sample_interval_s",
           "gpu_memory_fraction", "gpu_memory_growth")  # fmt: skip


@dataclass(frozen=True)
class ExecConfig:
    """One run of the user's command under one backend."""

    backend: str
    command: Tuple[str, ...]
    name: Optional[str] = None  # None: the script's file name
    cwd: Optional[str] = None  # None: the current directory
    repeat: int = 0
    threads: Optional[int] = None
    device: str = "auto"
    gpu_memory_fraction: Optional[float] = None
    gpu_memory_growth: bool = False
    timeout_s: float = 1800.0
    warmup_steps: int = 5
    instrument: bool = True
    sample_interval_s: float = 0.2

    def __post_init__(self) -> None:
        check_choice("backend", self.backend, EXEC_BACKENDS)
        command = tuple(str(part) for part in (self.command or ()))
        if not command:
            raise ConfigError(
                "command",
                "expected the command to run after `--`, for example: kbench exec -b jax "
                "-- python train.py --epochs 1; received none.",
            )
        object.__setattr__(self, "command", command)
        object.__setattr__(self, "name", self.name or script_name(command))
        object.__setattr__(self, "cwd", str(Path(self.cwd or os.getcwd()).resolve()))
        for name in CHECKED:
            object.__setattr__(self, name, check_setting(name, getattr(self, name)))

    @property
    def threads_in_force(self) -> int:
        return self.threads or usable_cores()

    def label(self) -> str:
        repeat = f" #{self.repeat + 1}" if self.repeat else ""
        return f"{self.backend}/{self.name}{repeat}"

    def to_dict(self) -> Dict[str, Any]:
        """The result document's ``config``: this run's settings, plus the fields every
        reader of a result uses (``model`` is the name; data and batch are the script's)."""
        return dict(asdict(self), command=list(self.command), model=self.name, mode="exec",
                    dataset=SCRIPT_DATA, batch_size=None)  # fmt: skip


def script_name(command: Tuple[str, ...]) -> str:
    """``train.py`` of ``python train.py --epochs 1`` (``-m pkg.mod``: ``pkg.mod``)."""
    args = list(command)
    if Path(args[0]).name.startswith("python"):
        args = args[1:]
        while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
            args = args[1:]
        if args[:1] == ["-m"] and len(args) > 1:
            return args[1]
        if args[:1] == ["-c"]:
            return "python -c"
    return Path(args[0]).name if args else Path(command[0]).name
