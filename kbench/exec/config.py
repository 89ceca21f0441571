"""What one ``kbench exec`` run is: a frozen, validated description, checked before
any process starts (messages name the flag, what was expected and received)."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from kbench.backends import BACKENDS
from kbench.measure.processes import usable_cores
from kbench.results.config import DEVICES, MAX_SECONDS, MAX_THREADS, ConfigError, check_choice

# The backends whose processes run Keras (torch-native and mxnet-gluon do not).
EXEC_BACKENDS: Tuple[str, ...] = tuple(name for name, spec in BACKENDS.items() if spec.runs_keras)
# Interpreter names that the backend's own interpreter replaces at the command's start.
PYTHON_NAMES = ("python", "python3")
SCRIPT_DATA = "the script's own"  # data and batch: whatever the script uses


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
        check_choice("device", self.device, DEVICES)
        _count("threads", self.threads, 1, MAX_THREADS, optional=True)
        _count("warmup_steps", self.warmup_steps, 0, 2**31 - 1)
        _count("repeat", self.repeat, 0, 2**31 - 1)
        if not _number(self.timeout_s) or not 0 < self.timeout_s <= MAX_SECONDS:
            raise ConfigError(
                "timeout_s",
                f"expected a positive number of seconds up to {MAX_SECONDS:,.0f}; "
                f"received {self.timeout_s!r}.",
            )
        if not _number(self.sample_interval_s) or not 0 <= self.sample_interval_s <= 60:
            raise ConfigError(
                "sample_interval_s",
                f"expected seconds from 0 (off) to 60; received {self.sample_interval_s!r}.",
            )
        fraction = self.gpu_memory_fraction
        if fraction is not None and (not _number(fraction) or not 0 < fraction <= 1):
            raise ConfigError(
                "gpu_memory_fraction",
                f"expected a fraction of GPU memory above 0 and at most 1; received {fraction!r}.",
            )

    @property
    def threads_in_force(self) -> int:
        return self.threads or usable_cores()

    def label(self) -> str:
        repeat = f" #{self.repeat + 1}" if self.repeat else ""
        return f"{self.backend}/{self.name}{repeat}"

    def to_dict(self) -> Dict[str, Any]:
        """The result document's ``config``: this run's settings, plus the fields every
        reader of a result uses (``model`` is the name; data and batch are the script's)."""
        data = asdict(self)
        data["command"] = list(self.command)
        return {
            **data,
            "model": self.name,
            "mode": "exec",
            "dataset": SCRIPT_DATA,
            "batch_size": None,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> ExecConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(setting: str, value: Any, low: int, high: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(setting, f"expected an integer from {low} to {high}; received {value!r}.")
