"""Where each backend runs: its interpreter, its keras.json, its process environment.

Backends live in two virtual environments inside the checkout (``envs/keras3`` for
TensorFlow, JAX and PyTorch; ``envs/mxnet`` for keras-mxnet), created by
``python3 -m kbench.setup`` (``scripts/setup_envs.sh``, ``scripts\\setup_envs.cmd``);
each interpreter is where ``venv`` puts it on this system (``bin/python``,
``Scripts\\python.exe``). ``KBENCH_PYTHON_<BACKEND>`` (for example
``KBENCH_PYTHON_MXNET``) points a backend at another interpreter, and
``KBENCH_ENVS_DIR`` moves the environments' folder. A backend whose environment this
platform cannot have (MXNet on Apple Silicon) is unsupported, with the reason
:mod:`kbench.setup.platforms` gives.

Nothing here reads or writes ``~/.keras``: every process gets a fresh ``KERAS_HOME``
holding a copy of ``keras_configs/<backend>.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

import kbench_models
from kbench.backends import BACKENDS
from kbench.facts import PROJECT_ROOT
from kbench.measure.processes import usable_cores
from kbench.setup.platforms import Platform, loader_environment, unsupported_reason, venv_python

SETUP_SCRIPT = "scripts\\setup_envs.cmd" if os.name == "nt" else "scripts/setup_envs.sh"


class EnvironmentMissing(RuntimeError):
    """A backend's interpreter does not exist; the message names the command that creates it."""


class EnvironmentUnsupported(EnvironmentMissing):
    """This platform cannot have the backend's environment; the message says why."""


def envs_dir() -> Path:
    return Path(os.environ.get("KBENCH_ENVS_DIR") or PROJECT_ROOT / "envs")


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
    path = venv_python(envs_dir() / spec.environment)
    if not path.exists():
        reason = unsupported_reason(spec.environment)
        if reason:
            raise EnvironmentUnsupported(
                f"backend {backend!r} is unsupported on {Platform.current().label}: {reason} "
                f"(to run it anyway, point {variable} at a Python that has it)."
            )
        raise EnvironmentMissing(
            f"backend {backend!r} runs in the {spec.environment!r} environment, which does not "
            f"exist (expected {path}). Create it with: {SETUP_SCRIPT} {spec.environment} "
            f"(or point {variable} at a Python that has it)."
        )
    return path


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
    path = PROJECT_ROOT / "keras_configs" / f"{backend}.json"
    if not path.is_file():
        raise EnvironmentMissing(
            f"keras_configs/{backend}.json: expected the backend's keras.json at {path}; "
            "run kbench from its checkout, where keras_configs/ lives."
        )
    config = json.loads(path.read_text())
    if data_format is not None:
        config["image_data_format"] = data_format
    return config


def import_root(directory: Path) -> Path:
    """A folder for PYTHONPATH that exposes kbench and kbench_models to any interpreter.
    Workers may run under interpreters where kbench is not installed (the MXNet environment,
    or one named by KBENCH_PYTHON_*), so they import it from here."""
    directory.mkdir(parents=True, exist_ok=True)
    folders = (("kbench", PROJECT_ROOT / "kbench"), ("kbench_models", kbench_models_folder()))
    for name, folder in folders:
        link = directory / name
        if not link.exists():
            link.symlink_to(folder, target_is_directory=True)
    return directory


def kbench_models_folder() -> Path:
    return Path(kbench_models.__file__).resolve().parent


def process_environment(
    backend: str, run_dir: Path, python_path: Path, threads: int, data_format: Optional[str],
    device: str = "auto",
) -> Tuple[Dict[str, str], Dict[str, Any]]:  # fmt: skip
    """The environment variables of a worker process, and the keras.json it will read.
    Returns (full environment, keras.json contents). The keras.json is written to a fresh
    ``run_dir/keras_home``."""
    config = keras_config(backend, data_format)
    keras_home = run_dir / "keras_home"
    keras_home.mkdir(parents=True, exist_ok=True)
    (keras_home / "keras.json").write_text(json.dumps(config, indent=4) + "\n")
    env = dict(os.environ)
    env.update(BACKENDS[backend].process_env)
    # kbench's folder first; a Python of the user's own (KBENCH_PYTHON_*) keeps the
    # PYTHONPATH it may have its packages on, an environment of envs/ is complete as built
    inherited = os.environ.get("PYTHONPATH") if os.environ.get(override_variable(backend)) else None
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
    """Start ``backend`` as a worker would and report what it is (see kbench.run.probe).
    ``models`` are ``NAME[:HxWxC[:CLASSES]]`` to build there; each comes back with its
    parameter count and output shape, and again for each of ``other_formats``
    (``models_by_format``: one process builds them in every format; a sequence model, which
    reads no data format, only in the first). Never raises for a backend that cannot start:
    the report says ``ok: False`` and why."""
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
            return json.loads(line)
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {
        "backend": backend, "ok": False, "executable": str(interpreter),
        "error": f"probe exited with {done.returncode}: {' | '.join(tail)}",
    }  # fmt: skip
