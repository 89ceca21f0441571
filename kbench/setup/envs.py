"""kbench's two virtual environments, created with ``venv`` and ``pip``, idempotently.

``<envs>/keras3`` holds Keras 3 with TensorFlow, JAX and PyTorch (and kbench itself,
editable); ``<envs>/mxnet`` holds MXNet with keras-mxnet 2.2.4.3 (numpy<1.24). What
each holds on this platform comes from :mod:`kbench.setup.platforms`.

A finished environment is marked by a stamp file, ``.kbench-requirements``, holding its
requirements, so a second call does nothing and returns at once. Each environment also
records its kind, ``cpu`` or ``gpu``, in ``.kbench-kind`` (environments made before that
file existed: read off the stamp). CPU and CUDA builds never share a site-packages: pip
would keep the CPU torch (it satisfies torch==2.13.0) and put tensorflow[and-cuda]
beside tensorflow-cpu. So when ``KBENCH_GPU`` asks for the other kind, the environment
is deleted and built afresh, and the log says so. Without ``KBENCH_GPU`` an existing
environment keeps its kind (``scripts/kbench`` sets up before every command), and a new
one is made for the CPU. An environment this platform cannot have is skipped with the
reason, never a failed install.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Mapping, Optional, Sequence

from kbench.setup.platforms import EnvironmentPlan, Platform, plan, venv_python

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout
KIND_FILE = ".kbench-kind"
STAMP_FILE = ".kbench-requirements"
GPU_MARKERS = ("tensorflow[and-cuda]", "jax[cuda12]")  # a stamp of CUDA builds names these


class SetupError(RuntimeError):
    """A set-up step failed; the message says which, and how to go on."""


@dataclass(frozen=True)
class SetupOptions:
    """The set-up's settings, read from the environment variables named beside each."""

    envs_dir: Path  # KBENCH_ENVS_DIR (default: envs/ in the checkout)
    python: str  # KBENCH_PYTHON: the interpreter the venvs are built from
    gpu: Optional[str] = None  # KBENCH_GPU: "1" CUDA builds, "0" CPU builds, None: keep
    mxnet_wheel: Optional[str] = None  # KBENCH_MXNET_WHEEL: MXNet's CUDA build
    dry_run: bool = False  # KBENCH_SETUP_DRY_RUN=1: say what would be done, change nothing
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
            envs_dir=Path(environ.get("KBENCH_ENVS_DIR") or ROOT / "envs"),
            python=environ.get("KBENCH_PYTHON") or default_python(),
            gpu=environ.get("KBENCH_GPU") or None,
            mxnet_wheel=environ.get("KBENCH_MXNET_WHEEL") or None,
            dry_run=environ.get("KBENCH_SETUP_DRY_RUN") == "1",
        )


def default_python() -> str:
    """python3.11 where it is on the PATH (the version kbench is tested with), else the
    interpreter running this."""
    return shutil.which("python3.11") or sys.executable


def existing_kind(env_dir: Path) -> str:
    """``cpu`` or ``gpu``; ``none`` (no environment) or ``unknown`` (not one kbench finished)."""
    kind_file, stamp = env_dir / KIND_FILE, env_dir / STAMP_FILE
    if kind_file.is_file():
        return kind_file.read_text().strip()
    if stamp.is_file():  # made before .kbench-kind: the stamp names the builds it installed
        lines = stamp.read_text().split()
        cuda = any(line in GPU_MARKERS or line.startswith("mxnet-cu") for line in lines)
        return "gpu" if cuda else "cpu"
    return "unknown" if env_dir.exists() else "none"


def wanted_kind(env_dir: Path, gpu: Optional[str]) -> str:
    """What KBENCH_GPU asks for, else what the environment is, else cpu."""
    if gpu is not None:
        return "gpu" if gpu == "1" else "cpu"
    return "gpu" if existing_kind(env_dir) == "gpu" else "cpu"


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
    return "update"


def make_environment(
    name: str, options: SetupOptions, planner: Callable[..., EnvironmentPlan] = plan
) -> str:
    """Bring environment ``name`` to what this platform's plan says; return what was
    done (the action, or ``unavailable``). Quiet when it is ready already.

    ``planner(name, kind, platform, mxnet_wheel)`` gives the plan (default
    :func:`kbench.setup.platforms.plan`; a test passes one with a tiny requirement)."""
    env_dir = options.envs_dir / name
    kind = wanted_kind(env_dir, options.gpu)
    wanted = planner(name, kind, options.platform, options.mxnet_wheel)
    if not wanted.available:
        log.info("%s: unavailable on %s (%s builds): %s", name, wanted.platform.label, kind,
                 wanted.unavailable)  # fmt: skip
        return "unavailable"
    done = action(env_dir, wanted, options.gpu)
    if options.dry_run:
        log.info("%s: %s (%s builds)", name, done, kind)
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
    """Make the venv (when it has no interpreter), record its kind, pip-install the
    requirements (and kbench, editable, into keras3), then write the stamp."""
    stamp = env_dir / STAMP_FILE
    stamp.unlink(missing_ok=True)
    python = venv_python(env_dir, wanted.platform.system)
    if not (python.is_file() and os.access(python, os.X_OK)):
        call([options.python, "-m", "venv", str(env_dir)], "create the virtual environment")
    (env_dir / KIND_FILE).write_text(wanted.kind + "\n")
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    call(pip + ["--upgrade", "pip"], "upgrade pip")
    call(pip + list(wanted.requirements), f"install {wanted.name}'s requirements")
    if wanted.name == "keras3":
        # The harness runs here: kbench itself, editable, for the `kbench` command.
        # Workers in any environment import kbench through the runner's PYTHONPATH.
        call(pip + ["--no-deps", "-e", str(options.root)], "install kbench (editable)")
    stamp.write_text(stamp_text(wanted.requirements))


def call(command: Sequence[str], what: str) -> None:
    done = subprocess.run(list(command), env=child_environment())
    if done.returncode != 0:
        raise SetupError(
            f"could not {what}: `{' '.join(command)}` exited with {done.returncode} (its "
            "output is above). Fix what it names (network, disk space, a Python pip cannot "
            "build for) and run the set-up again; finished environments are kept."
        )


def child_environment() -> Dict[str, str]:
    """This process's environment without the checkout on PYTHONPATH (where the
    wrappers put it so that ``-m kbench.setup`` imports): venv and pip see the user's."""
    env = dict(os.environ)
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != ROOT]  # fmt: skip
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def remove_tree(path: Path) -> None:
    """Delete ``path``, read-only files included (Windows will not unlink those)."""

    def writable_then_retry(function, name, _info):  # type: ignore[no-untyped-def]
        os.chmod(name, stat.S_IWRITE)
        function(name)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=writable_then_retry)
    else:
        shutil.rmtree(path, onerror=writable_then_retry)
