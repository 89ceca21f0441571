"""What one ``kbench exec`` run is (:class:`ExecConfig`: frozen, validated before any
process starts, messages naming the flag, what was expected and received), and the
environment of its child: what ``kbench run`` gives its worker
(:func:`kbench.run.environments.process_environment`), plus what a worker would set
from inside and a script cannot be asked to: the frameworks' thread and GPU memory
variables (only those that work from outside a process, as each backend class says;
the others are recorded as not applied, with the reason), the cores to pin to, the
instrumentation's folder and events file (its own channel), and the run's token, by
which whatever the script starts is found at the end (:mod:`kbench.exec.watch`). The
run's ``KERAS_HOME`` holds a read-only view of the user's Keras dataset cache
(:func:`link_datasets`).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import psutil

from kbench.backends import BACKENDS, load_backend
from kbench.exec import instrument
from kbench.exec.watch import TOKEN_VARIABLE
from kbench.measure.keras_events import EVENTS_VARIABLE
from kbench.measure.processes import usable_cores
from kbench.results.config import ConfigError, check_choice, check_setting
from kbench.run import environments

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


SITE_DIR = Path(__file__).resolve().parent / "site"  # holds the sitecustomize.py
# Thread counts the frameworks read from the environment (process_environment sets
# OpenMP's and MKL's).
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "MXNET_CPU_WORKER_NTHREADS")


def memory_variables(
    backend: str, fraction: Optional[float], growth: bool
) -> Tuple[Dict[str, str], Dict[str, str]]:
    """(variables to set, what each memory option became) for one backend: its class's
    :meth:`~kbench.backends.base.Backend.memory_variables`, which imports no framework."""
    variables, applied = load_backend(backend).memory_variables(fraction, growth)
    applied.update(variables)
    return variables, applied


def cores(threads: int) -> Optional[List[int]]:
    """The first ``threads`` cores this process may use, when fewer than all (None on
    a system without CPU affinity, macOS: the script runs unpinned)."""
    process = psutil.Process()
    if not hasattr(process, "cpu_affinity"):
        return None
    available = sorted(process.cpu_affinity())
    return available[:threads] if threads < len(available) else None


def user_datasets() -> Path:
    """The user's Keras dataset cache: ``$KERAS_HOME/datasets`` where kbench itself was
    started with ``KERAS_HOME``, else ``~/.keras/datasets`` (Keras' default)."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return Path(home) / "datasets"


def link_datasets(keras_home: Path, source: Optional[Path] = None) -> Optional[str]:
    """Give the run's ``KERAS_HOME`` a read-only view of the user's dataset cache:
    ``datasets/`` and each folder in it are the run's own, each entry below them a link
    to the user's, so what the cache has is found (offline too) and what the script
    downloads lands in the run's folder, never in the cache. Returns the cache's path,
    or None where there is none."""
    source = source or user_datasets()
    if not source.is_dir():
        return None
    target = Path(keras_home) / "datasets"
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            (target / entry.name).mkdir(exist_ok=True)
            for inner in sorted(entry.iterdir()):
                (target / entry.name / inner.name).symlink_to(inner.resolve())
        else:
            (target / entry.name).symlink_to(entry.resolve())
    return str(source)


def child_environment(
    config: ExecConfig, run_dir: Path, python_path: Path
) -> Tuple[Dict[str, str], Dict[str, Any], Dict[str, Any]]:
    """(environment, keras.json, what was set and why) of one run's child."""
    env, keras_json = environments.process_environment(
        config.backend, run_dir, python_path, config.threads_in_force, None, config.device
    )
    datasets = link_datasets(Path(env["KERAS_HOME"]))
    paths = [str(SITE_DIR), str(python_path)]
    if os.environ.get("PYTHONPATH"):  # the user's own stays, after kbench's
        paths.append(os.environ["PYTHONPATH"])
    fraction, growth = config.gpu_memory_fraction, config.gpu_memory_growth
    memory, applied = memory_variables(config.backend, fraction, growth)
    env.update(dict.fromkeys(THREAD_VARIABLES, str(config.threads_in_force)), **memory)
    env.update({
        "PYTHONPATH": os.pathsep.join(paths), EVENTS_VARIABLE: str(run_dir / "events.jsonl"),
        instrument.WARMUP_VARIABLE: str(config.warmup_steps), TOKEN_VARIABLE: uuid.uuid4().hex,
        instrument.INSTRUMENT_VARIABLE: "1" if config.instrument else "0",
    })  # fmt: skip
    pinned = cores(config.threads_in_force) if config.threads else None
    if pinned:
        env[instrument.AFFINITY_VARIABLE] = ",".join(map(str, pinned))
    recorded = environments.recorded_variables(env, config.backend)
    for key in [*THREAD_VARIABLES, *memory, instrument.AFFINITY_VARIABLE]:
        if key in env:
            recorded[key] = env[key]
    datasets = datasets and f"{datasets} (read-only: links from the run's KERAS_HOME)"
    settings = {"variables": recorded, "memory_options": applied, "cpu_affinity": pinned,
                "keras_datasets": datasets}  # fmt: skip
    return env, keras_json, settings


def resolve_command(command: Tuple[str, ...], interpreter: Path) -> List[str]:
    """The command with a leading ``python``/``python3`` replaced by the backend's
    interpreter; any other command runs as given (it must start Python itself)."""
    if command[0] in PYTHON_NAMES:
        return [str(interpreter), *command[1:]]
    return list(command)
