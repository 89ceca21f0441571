"""Where each backend runs: its interpreter, its keras.json, its process environment.

A backend's worker runs under, in this order: the interpreter ``KBENCH_PYTHON_<BACKEND>``
names; kbench's own virtual environment for it where one exists (``envs/keras3``,
``envs/mxnet`` in the checkout, created by ``python3 -m kbench.setup``; for an installed
kbench, in the user's data folder, created by ``kbench setup``; ``KBENCH_ENVS_DIR`` moves
the folder); else the interpreter kbench itself runs under,
where that has the backend's framework (``pip install kbench[tensorflow,torch]`` into
the user's own environment). A backend this platform cannot have (MXNet on Apple
Silicon) is unsupported, with the reason :mod:`kbench.setup.platforms` gives. Nothing
here touches ``~/.keras``: every process gets a fresh ``KERAS_HOME`` holding a copy of
``keras_configs/<backend>.json``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import kbench_models
from kbench.backends import BACKENDS
from kbench.facts import IN_CHECKOUT, PROJECT_ROOT, shared_folder
from kbench.measure.processes import usable_cores
from kbench.setup.envs import default_envs_dir
from kbench.setup.platforms import Platform, loader_environment, unsupported_reason, venv_python

SETUP_SCRIPT = "scripts\\setup_envs.cmd" if os.name == "nt" else "scripts/setup_envs.sh"
# the Keras each environment's Keras backends need, by distribution: (name, major version)
KERAS_OF = {"keras3": ("keras", "3"), "mxnet": ("keras-mxnet", "2")}
KERAS_OF_NAMES = {name for name, _ in KERAS_OF.values()}
THIS_INTERPRETER = "this interpreter"  # `kbench env`'s word for sys.executable


class EnvironmentMissing(RuntimeError):
    """A backend's interpreter does not exist; the message names the command that creates it."""


class EnvironmentUnsupported(EnvironmentMissing):
    """This platform cannot have the backend's environment; the message says why."""


def envs_dir() -> Path:
    """kbench's own environments: ``KBENCH_ENVS_DIR``, else ``envs/`` in the checkout, else
    (installed) the user's data folder that ``kbench setup`` fills."""
    return default_envs_dir(os.environ)


def setup_command() -> str:
    """The command that creates kbench's own environments: the checkout's script, else
    ``kbench setup``."""
    return SETUP_SCRIPT if IN_CHECKOUT else "kbench setup"


def override_variable(backend: str) -> str:
    """``KBENCH_PYTHON_MXNET_GLUON`` for mxnet-gluon: a name every shell can set."""
    return f"KBENCH_PYTHON_{backend.upper().replace('-', '_')}"


def interpreter_for(backend: str) -> Path:
    """The Python that runs ``backend``'s worker, or an error saying how to get one."""
    spec = BACKENDS[backend]
    variable = override_variable(backend)
    override = os.environ.get(variable)
    if override:
        # a name without a folder (python3) is looked up on PATH, as a shell would
        found = shutil.which(override) if os.sep not in override else None
        path = Path(found or override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EnvironmentMissing(
                f"{variable}={override}: expected an executable Python interpreter (a path, "
                "or a name on PATH); no such file. Fix the path or unset the variable."
            )
        return path
    path = path_of(spec.environment)
    if path.exists():
        return path
    lacking = lacks_here(backend)
    if lacking is None:
        return Path(sys.executable)
    reason = unsupported_reason(spec.environment)
    if reason:
        raise EnvironmentUnsupported(
            f"backend {backend!r} is unsupported on {Platform.current().label}: {reason} "
            f"(to run it anyway, point {variable} at a Python that has it)."
        )
    raise EnvironmentMissing(f"backend {backend!r}: {lacking}; {how_to_get(backend)}.")


def lacks_here(backend: str) -> Optional[str]:
    """What the interpreter kbench runs under lacks to run ``backend``'s worker (its
    framework, the Keras its environment has), in words; None: it has them. Read from
    the installed distributions: nothing is imported."""
    spec = BACKENDS[backend]
    keras, major = KERAS_OF[spec.environment]
    frameworks = [name for name in spec.packages if name not in KERAS_OF_NAMES]
    if not any(_version(name) for name in frameworks):
        return f"{sys.executable} has no {' or '.join(frameworks)}"
    version = _version(keras)
    if spec.runs_keras and not (version or "").startswith(major):
        found = f"keras {version}" if version else "no keras"
        return f"{sys.executable} has {found}, where {backend} needs {keras} {major}.x"
    return None


def _version(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def how_to_get(backend: str) -> str:
    """The ways to give ``backend`` an interpreter, for a message."""
    environment = BACKENDS[backend].environment
    other = f"or point {override_variable(backend)} at a Python that has it"
    own = (
        f"create kbench's own environment with: {setup_command()} {environment} (expected "
        f"{path_of(environment)})"
    )
    extra = BACKENDS[backend].extra
    if extra is None:  # keras-mxnet is Keras 2.2.4: never beside Keras 3
        return f"keras-mxnet (Keras 2.2.4) cannot share an environment with Keras 3: {own}, {other}"
    return f"pip install 'kbench[{extra}]' into this environment, {own}, {other}"


def path_of(environment: str) -> Path:
    """Where kbench's own environment ``environment`` has its Python."""
    return venv_python(envs_dir() / environment)


def interpreter_kind(backend: str, interpreter: Path) -> str:
    """Where ``interpreter`` comes from, for ``kbench env``: the environment's name, the
    override variable, or :data:`THIS_INTERPRETER`."""
    if os.environ.get(override_variable(backend)):
        return override_variable(backend)
    if interpreter == Path(sys.executable) and not path_of(BACKENDS[backend].environment).exists():
        return THIS_INTERPRETER
    return BACKENDS[backend].environment


def runnable_backends() -> Dict[str, Optional[str]]:
    """Each backend that trains mapped to None when its interpreter exists, else the reason
    it does not (the backends a command takes when none is named)."""
    reasons: Dict[str, Optional[str]] = {}
    for name in (n for n, spec in BACKENDS.items() if spec.inference_only is None):
        try:
            interpreter_for(name)
            reasons[name] = None
        except EnvironmentMissing as err:
            reasons[name] = str(err)
    return reasons


def keras_config(backend: str, data_format: Optional[str]) -> Dict[str, Any]:
    """The backend's checked-in keras.json, with ``data_format`` overriding its format."""
    path = shared_folder("keras_configs") / f"{backend}.json"
    if not path.is_file():
        raise EnvironmentMissing(
            f"keras_configs/{backend}.json: expected the backend's keras.json at {path}; "
            "run kbench from its checkout, or reinstall it with pip (which puts "
            "keras_configs/ in <prefix>/share/kbench)."
        )
    config = json.loads(path.read_text())
    if data_format is not None:
        config["image_data_format"] = data_format
    return config


def import_root(directory: Path) -> Path:
    """A PYTHONPATH folder exposing kbench and kbench_models to workers without kbench."""
    directory.mkdir(parents=True, exist_ok=True)
    models = Path(kbench_models.__file__).resolve().parent
    folders = (("kbench", PROJECT_ROOT / "kbench"), ("kbench_models", models))
    for name, folder in folders:
        link = directory / name
        if not link.exists():
            link.symlink_to(folder, target_is_directory=True)
    return directory


def process_environment(
    backend: str, run_dir: Path, python_path: Path, threads: int, data_format: Optional[str],
    device: str = "auto",
) -> Tuple[Dict[str, str], Dict[str, Any]]:  # fmt: skip
    """A worker's environment, and the keras.json written to ``run_dir/keras_home``."""
    config = keras_config(backend, data_format)
    keras_home = run_dir / "keras_home"
    keras_home.mkdir(parents=True, exist_ok=True)
    (keras_home / "keras.json").write_text(json.dumps(config, indent=4) + "\n")
    env = dict(os.environ)
    env.update(BACKENDS[backend].process_env)
    # kbench's folder first; a Python of the user's own (KBENCH_PYTHON_*, or the one kbench
    # runs under) keeps the PYTHONPATH it may have its packages on; kbench's own
    # environments are complete as built
    own = path_of(BACKENDS[backend].environment).exists()
    users = os.environ.get(override_variable(backend)) or not own
    inherited = os.environ.get("PYTHONPATH") if users else None
    env.update(
        KERAS_BACKEND=backend, KERAS_HOME=str(keras_home),
        PYTHONPATH=os.pathsep.join(filter(None, [str(python_path), inherited])),
        PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
    )  # fmt: skip
    if not os.environ.get(override_variable(backend)):  # its CUDA libraries (mxnet-cu112)
        env = loader_environment(env, envs_dir() / BACKENDS[backend].environment)
    if device == "cpu":  # every framework, CUDA builds included, then sees no GPU
        env.update(CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
    return env, config


def recorded_variables(env: Dict[str, str], backend: str) -> Dict[str, str]:
    """The variables kbench set for a worker, as a result records them, and those of the
    user's that change what it measures (JAX's persistent compilation cache, XLA's flags)."""
    spec = BACKENDS[backend]
    keys = ["KERAS_BACKEND", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
            "JAX_PLATFORMS", *spec.process_env]  # fmt: skip
    if spec.recorded_variable_prefixes:
        keys += [key for key in env if key.startswith(spec.recorded_variable_prefixes)]
    return {key: env[key] for key in keys if key in env}


def probe(
    backend: str, models: Sequence[str] = (), data_format: Optional[str] = None,
    timeout_s: float = 600, other_formats: Sequence[str] = (),
) -> Dict[str, Any]:  # fmt: skip
    """Start ``backend`` as a worker would and report it (:mod:`kbench.run.probe`), ``models``
    built in each format; a backend that cannot start: ``ok: False`` and why, never raised."""
    try:
        interpreter = interpreter_for(backend)
    except EnvironmentMissing as err:
        return {"backend": backend, "ok": False, "error": str(err)}
    with tempfile.TemporaryDirectory(prefix="kbench-probe-") as tmp:
        python_path = import_root(Path(tmp) / "pythonpath")
        env, keras_json = process_environment(
            backend, Path(tmp), python_path, usable_cores(), data_format
        )
        command = [str(interpreter), "-m", "kbench.run.probe", backend]
        command += [",".join([keras_json["image_data_format"], *other_formats]), *models]
        done = subprocess.run(
            command, env=env, cwd=tmp, capture_output=True, text=True, timeout=timeout_s
        )
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line), environment=interpreter_kind(backend, interpreter))
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {
        "backend": backend, "ok": False, "executable": str(interpreter),
        "environment": interpreter_kind(backend, interpreter),
        "error": f"probe exited with {done.returncode}: {' | '.join(tail)}",
    }  # fmt: skip
