"""kbench's two virtual environments, created with ``venv`` and ``pip``, idempotently.

A finished environment holds a stamp of its requirements (``.kbench-requirements``), so
a second call returns at once, and its kind, ``cpu`` or ``gpu``, in ``.kbench-kind``. CPU
and CUDA builds never share a site-packages (pip would keep the CPU torch, which
satisfies the pin): asked for the other kind, an environment is deleted and built
afresh, as is a GPU environment whose framework pins changed (pip would keep the old CUDA
libraries); a fresh GPU build is held against its plan (:mod:`kbench.setup.check`). A
plan's ``from_index`` requirements are installed first, each alone from its index (on
Linux the CPU plan's torch, from PyTorch's CPU wheel index: PyPI's is a CUDA build).
Without ``KBENCH_GPU`` the kind is chosen by :func:`kind_and_reason`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from kbench.setup import check
from kbench.setup.platforms import (
    ENVIRONMENTS,
    FRAMEWORKS,
    LIBRARY_PATH_FILE,
    EnvironmentPlan,
    Platform,
    plan,
    record_library_folders,
    venv_python,
)

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout (site-packages: installed)
# as kbench.facts.IN_CHECKOUT says it (setup imports nothing else of kbench)
IN_CHECKOUT = (ROOT / "keras_configs").is_dir() and (ROOT / "scripts").is_dir()
KIND_FILE = ".kbench-kind"
STAMP_FILE = ".kbench-requirements"
GPU_MARKERS = ("tensorflow[and-cuda]", "jax[cuda12]")  # a stamp of CUDA builds names these
# an NVIDIA driver is installed: an environment made without KBENCH_GPU gets CUDA builds
DRIVER_FILES = ("/proc/driver/nvidia/version",)


class SetupError(RuntimeError):
    """A set-up step failed; the message says which, and how to go on."""


@dataclass(frozen=True)
class SetupOptions:
    """The set-up's settings, from the environment variables named beside each."""

    envs_dir: Path  # KBENCH_ENVS_DIR (default: default_envs_dir())
    python: str  # KBENCH_PYTHON: the interpreter the venvs are built from
    gpu: Optional[str] = None  # KBENCH_GPU: "1" CUDA builds, "0" CPU builds, None: keep
    mxnet_wheel: Optional[str] = None  # KBENCH_MXNET_WHEEL: MXNet's CUDA build
    dry_run: bool = False  # KBENCH_SETUP_DRY_RUN=1: say what would be done, change nothing
    check: bool = True  # KBENCH_SETUP_CHECK=0: no check of a GPU environment after its build
    platform: Platform = Platform("", "")  # "": the running system
    root: Path = ROOT  # the checkout that keras3 installs kbench from

    def __post_init__(self) -> None:
        if self.gpu not in (None, "0", "1"):
            raise ValueError(
                f"KBENCH_GPU={self.gpu}: expected 1 (CUDA builds) or 0 (CPU builds), or unset "
                "(keep what each environment has)."
            )
        if not self.platform.system:
            object.__setattr__(self, "platform", Platform.current())

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> SetupOptions:
        return cls(
            envs_dir=default_envs_dir(environ),
            # python3.11 where it is on the PATH (the version kbench is tested with)
            python=environ.get("KBENCH_PYTHON") or shutil.which("python3.11") or sys.executable,
            gpu=environ.get("KBENCH_GPU") or None,
            mxnet_wheel=environ.get("KBENCH_MXNET_WHEEL") or None,
            dry_run=environ.get("KBENCH_SETUP_DRY_RUN") == "1",
            check=environ.get("KBENCH_SETUP_CHECK") != "0",
        )


def default_envs_dir(
    environ: Mapping[str, str] = os.environ, in_checkout: bool = IN_CHECKOUT,
    system: Optional[str] = None,
) -> Path:  # fmt: skip
    """Where kbench's own environments live: ``KBENCH_ENVS_DIR``; else ``envs/`` in the
    checkout; else, for a kbench installed by pip, the user's data folder
    (``%LOCALAPPDATA%\\kbench\\envs`` on Windows, ``$XDG_DATA_HOME/kbench/envs`` or
    ``~/.local/share/kbench/envs`` elsewhere), which ``kbench setup`` fills."""
    if environ.get("KBENCH_ENVS_DIR"):
        return Path(environ["KBENCH_ENVS_DIR"])
    if in_checkout:
        return ROOT / "envs"
    if Platform(system or sys.platform, "").family == "win32" and environ.get("LOCALAPPDATA"):
        return Path(environ["LOCALAPPDATA"]) / "kbench" / "envs"
    if environ.get("XDG_DATA_HOME"):
        return Path(environ["XDG_DATA_HOME"]) / "kbench" / "envs"
    return Path(environ.get("HOME") or Path.home()) / ".local" / "share" / "kbench" / "envs"


def existing_kind(env_dir: Path) -> str:
    """``cpu`` or ``gpu``; ``none`` (no environment) or ``unknown`` (not one kbench finished)."""
    kind_file, stamp = env_dir / KIND_FILE, env_dir / STAMP_FILE
    if kind_file.is_file():
        return kind_file.read_text().strip()
    if stamp.is_file():  # made before .kbench-kind: the stamp names the builds it installed
        lines = stamp.read_text().split()
        names = [line.split("==")[0] for line in lines]
        cuda = any(name in GPU_MARKERS or name.startswith("mxnet-cu") for name in names)
        return "gpu" if cuda else "cpu"
    return "unknown" if env_dir.exists() else "none"


def kind_and_reason(
    env_dir: Path, gpu: Optional[str], driver_files: Sequence[str] = DRIVER_FILES
) -> Tuple[str, str]:
    """The kind environment ``env_dir`` should be, and why: what KBENCH_GPU asks for, else
    what it is, else what the environments beside it are, else what the machine has."""
    if gpu is not None:
        return ("gpu" if gpu == "1" else "cpu"), f"KBENCH_GPU={gpu}"
    have = existing_kind(env_dir)
    if have in ("cpu", "gpu"):
        return have, f"no KBENCH_GPU: it keeps the {have} builds it holds"
    beside = {name: existing_kind(env_dir.parent / name) for name in ENVIRONMENTS}
    kinds = {name: kind for name, kind in beside.items()
             if name != env_dir.name and kind in ("cpu", "gpu")}  # fmt: skip
    if kinds:
        kind = "gpu" if "gpu" in kinds.values() else "cpu"
        names = " and ".join(sorted(name for name, k in kinds.items() if k == kind))
        return kind, (f"no KBENCH_GPU: following {names} beside it, which holds {kind} builds "
                      "(KBENCH_GPU=0 or 1 to choose)")  # fmt: skip
    driver = next((path for path in driver_files if Path(path).exists()), None)
    if driver:
        return "gpu", (f"no KBENCH_GPU and no environment yet: this machine has an "
                       f"NVIDIA driver ({driver}), so CUDA builds (KBENCH_GPU=0 for CPU "
                       "builds)")  # fmt: skip
    return "cpu", ("no KBENCH_GPU and no environment yet: no NVIDIA driver here, so CPU "
                   "builds (KBENCH_GPU=1 for CUDA builds)")  # fmt: skip


def stamp_text(requirements: Sequence[str]) -> str:
    return "\n".join(requirements) + "\n"


def action(env_dir: Path, wanted: EnvironmentPlan, gpu: Optional[str]) -> str:
    """``ready``, ``create``, ``update``, or ``rebuild: why``."""
    have = existing_kind(env_dir)
    if have == "none":
        return "create"
    if have == "unknown":
        return f"rebuild: {env_dir} is not a finished kbench environment (no {KIND_FILE} or stamp)"
    if have != wanted.kind:
        return (
            f"rebuild: {env_dir} holds {have} builds and KBENCH_GPU={gpu or ''} asks for "
            f"{wanted.kind} builds"
        )
    stamp = env_dir / STAMP_FILE
    python = venv_python(env_dir, wanted.platform.system)
    if (
        stamp.is_file()
        and stamp.read_text().strip() == stamp_text(wanted.requirements).strip()
        and python.is_file()
        and os.access(python, os.X_OK)
    ):
        return "ready"
    if wanted.kind == "gpu" and stamp.is_file():
        was = framework_lines(wanted.name, stamp.read_text().split())
        now = framework_lines(wanted.name, wanted.requirements)
        if was != now:
            return (
                f"rebuild: {env_dir}'s CUDA builds change ({', '.join(was) or 'none'} -> "
                f"{', '.join(now)}), and pip would keep the old ones' CUDA libraries"
            )
    return "update"


def framework_lines(name: str, requirements: Sequence[str]) -> List[str]:
    """The requirement lines of environment ``name``'s frameworks (``torch==2.10.0``)."""
    frameworks = FRAMEWORKS.get(name, ())
    bases = {line: re.split(r"[\[=<>!~;\s]", line)[0] for line in requirements}
    return sorted(line for line, base in bases.items()
                  if base in frameworks or base.startswith("mxnet-cu"))  # fmt: skip


def make_environment(
    name: str, options: SetupOptions, planner: Callable[..., EnvironmentPlan] = plan
) -> str:
    """Bring environment ``name`` to what ``planner`` (a test's has a tiny requirement)
    says for this platform; return the action done, or ``unavailable``. Quiet when ready."""
    env_dir = options.envs_dir / name
    kind, why = kind_and_reason(env_dir, options.gpu)
    wanted = planner(name, kind, options.platform, options.mxnet_wheel)
    if not wanted.available:
        log.info("%s: unavailable on %s (%s builds): %s", name, wanted.platform.label, kind,
                 wanted.unavailable)  # fmt: skip
        return "unavailable"
    done = action(env_dir, wanted, options.gpu)
    if options.gpu is None and existing_kind(env_dir) not in ("cpu", "gpu"):
        log.info("%s: %s builds: %s", name, kind, why)
    if options.dry_run:
        log.info("%s: %s (%s builds)", name, done, kind)
        if done != "ready":
            for requirement, index in wanted.from_index:
                log.info("%s: would install %s first, from %s (pip install --index-url %s %s)",
                         name, requirement, index, index, requirement)  # fmt: skip
            log.info("%s: would install %s", name, " ".join(wanted.requirements))
        return done
    if done == "ready":
        if not (env_dir / KIND_FILE).is_file():
            (env_dir / KIND_FILE).write_text(kind + "\n")
        return done  # stay quiet: this runs before every scripts/kbench call
    if done.startswith("rebuild"):
        log.info("%s: %s; CPU and CUDA builds must not share one environment, so removing %s "
                 "and building it afresh", name, done[len("rebuild: "):], env_dir)  # fmt: skip
        remove_tree(env_dir)
    log.info("%s: creating %s (%s builds; several minutes on first use)", name, env_dir, kind)
    for note in wanted.notes:
        log.info("%s: note: %s", name, note)
    build(env_dir, wanted, options)
    log.info("%s: ready", name)
    return done


def build(env_dir: Path, wanted: EnvironmentPlan, options: SetupOptions) -> None:
    """Make the venv, record its kind, pip-install the requirements, then write the stamp."""
    stamp = env_dir / STAMP_FILE
    stamp.unlink(missing_ok=True)
    python = venv_python(env_dir, wanted.platform.system)
    if not (python.is_file() and os.access(python, os.X_OK)):
        call([options.python, "-m", "venv", str(env_dir)], "create the virtual environment")
    (env_dir / KIND_FILE).write_text(wanted.kind + "\n")
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    call(pip + ["--upgrade", "pip"], "upgrade pip")
    for requirement, index in wanted.from_index:  # torch's CPU build: satisfied below
        log.info("%s: installing %s first, from %s", wanted.name, requirement, index)
        call(pip + ["--index-url", index, requirement], f"install {requirement} from {index}")
    call(pip + list(wanted.requirements), f"install {wanted.name}'s requirements")
    if wanted.name == "keras3" and (options.root / "pyproject.toml").is_file():
        # the harness runs here; workers anywhere import kbench through their PYTHONPATH
        # (an installed kbench has no checkout to install: it runs from the user's Python)
        call(pip + ["--no-deps", "-e", str(options.root)], "install kbench (editable)")
    if wanted.loader_path:
        folders = record_library_folders(env_dir)
        log.info("%s: %d CUDA library folders go on its workers' LD_LIBRARY_PATH (%s)",
                 wanted.name, len(folders), LIBRARY_PATH_FILE)  # fmt: skip
    if wanted.cuda and options.check:
        check_build(env_dir, wanted)
    stamp.write_text(stamp_text(wanted.requirements))


def check_build(env_dir: Path, wanted: EnvironmentPlan) -> None:
    """SetupError with what is wrong in a fresh GPU environment, before its stamp."""
    log.info("%s: checking the CUDA builds (each framework imported in its own process)",
             wanted.name)  # fmt: skip
    verdict = check.check_environment(env_dir, wanted)
    for line in verdict.lines:
        log.info("%s", line)
    if verdict.problems:
        raise SetupError(
            f"{wanted.name}: the GPU environment {env_dir} is not what its plan says "
            f"(CUDA {wanted.cuda} builds): " + "; ".join(verdict.problems) + ". It is left "
            "unfinished (no stamp): fix what is named and run the set-up again; "
            "`python3 -m kbench.setup --check` shows the environment again (KBENCH_SETUP_CHECK=0 "
            "builds without this check)."
        )


def call(command: Sequence[str], what: str) -> None:
    """Run ``command`` without the checkout on PYTHONPATH (put there for ``-m kbench.setup``):
    venv and pip see the user's environment."""
    env = dict(os.environ)
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != ROOT]  # fmt: skip
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    done = subprocess.run(list(command), env=env)
    if done.returncode != 0:
        raise SetupError(
            f"could not {what}: `{' '.join(command)}` exited with {done.returncode} (its "
            "output is above). Fix what it names (network, disk space, a Python pip cannot "
            "build for) and run the set-up again; finished environments are kept."
        )


def remove_tree(path: Path) -> None:
    """Delete ``path``, read-only files included (Windows will not unlink those)."""

    def writable_then_retry(function, name, _info):  # type: ignore[no-untyped-def]
        os.chmod(name, stat.S_IWRITE)
        function(name)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=writable_then_retry)
    else:
        shutil.rmtree(path, onerror=writable_then_retry)
