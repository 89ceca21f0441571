"""The worker's interpreter and environment variables when the user brings the Python.

Found on the first real GPU machine (an H100 whose image has torch and JAX for CUDA 13 in
its own Python, no envs/): ``KBENCH_PYTHON_TORCH=python3`` was refused as "no such file",
and Keras, installed there on PYTHONPATH, was missing in every worker, which ran with a
PYTHONPATH of kbench's folder alone.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kbench.run import environments


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_an_interpreter_named_without_a_folder_is_found_on_path(tmp_path, monkeypatch):
    python = executable(tmp_path / "my-python3")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KBENCH_PYTHON_TORCH", "my-python3")
    assert environments.interpreter_for("torch") == python
    monkeypatch.setenv("KBENCH_PYTHON_TORCH", "no-such-python3")
    with pytest.raises(environments.EnvironmentMissing, match="a name on PATH"):
        environments.interpreter_for("torch")


def test_the_users_python_keeps_its_pythonpath_an_environment_of_envs_does_not(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", "/opt/their-packages")
    root = tmp_path / "import_root"
    monkeypatch.setenv("KBENCH_PYTHON_TORCH", str(executable(tmp_path / "python3")))
    env, _ = environments.process_environment("torch", tmp_path / "run1", root, 1, None)
    assert env["PYTHONPATH"] == f"{root}{os.pathsep}/opt/their-packages"  # kbench's first
    monkeypatch.delenv("KBENCH_PYTHON_TORCH")
    env, _ = environments.process_environment("torch", tmp_path / "run2", root, 1, None)
    assert env["PYTHONPATH"] == str(root)


def test_a_jax_compilation_cache_in_force_is_recorded_with_the_run(tmp_path, monkeypatch):
    """A compile JAX reuses from an earlier process makes the first step fast: a result
    of JAX's says so (the suite runs with one cache for the session); so are XLA's flags
    (the suite sets its own: tests/suite_plugin.py)."""
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    recorded = {}
    for backend in ("jax", "tensorflow", "torch"):
        env, _ = environments.process_environment(
            backend, tmp_path / backend, tmp_path, 1, None, "cpu"
        )
        recorded[backend] = environments.recorded_variables(env, backend)
    assert recorded["jax"]["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "cache")
    assert recorded["jax"]["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert not any(key.startswith("JAX_COMP") for key in recorded["torch"])
    # how XLA compiles: JAX always, TensorFlow where jit_compile is on; never torch's
    for backend in ("jax", "tensorflow"):
        assert recorded[backend]["XLA_FLAGS"] == "--xla_backend_optimization_level=0"
    assert "XLA_FLAGS" not in recorded["torch"]
