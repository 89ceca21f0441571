"""Backend facts live in ``kbench.backends`` only: each backend's colour (which every
figure uses) and its GPU memory variables (which ``kbench exec`` and the worker use).
Fast: nothing here imports a framework."""

from __future__ import annotations

import os

import pytest

from kbench.backends import BACKENDS, load_backend
from kbench.exec.environment import EXEC_BACKENDS, memory_variables
from kbench.views import figures, ops


def test_every_backend_has_its_own_colour():
    colours = {name: spec.colour for name, spec in BACKENDS.items()}
    assert {"mxnet-gluon", "torch-native"} <= set(colours)
    assert all(c.startswith("#") and len(c) == 7 for c in colours.values()), colours
    assert len(set(colours.values())) == len(colours), colours
    assert not set(colours.values()) & set(figures.SPARE_COLOURS)


def test_figures_and_ops_draw_each_backend_in_its_own_colour():
    for name, spec in BACKENDS.items():
        assert figures.colour(name, list(BACKENDS)) == spec.colour
        assert ops.backend_colour(name) == spec.colour
    # a name kbench does not know (an older result's) takes a spare colour
    assert figures.colour("caffe", ["jax", "caffe"]) == figures.SPARE_COLOURS[0]
    assert ops.backend_colour("caffe") is None


@pytest.mark.parametrize("backend", EXEC_BACKENDS)
def test_exec_sets_the_memory_variables_the_backend_class_names(backend):
    for fraction in (None, 0.5):
        for growth in (False, True):
            expected, notes = load_backend(backend).memory_variables(fraction, growth)
            variables, applied = memory_variables(backend, fraction, growth)
            assert variables == expected
            assert applied == {**notes, **expected}
            asked = {"gpu_memory_fraction": fraction is not None, "gpu_memory_growth": growth}
            assert bool(variables or notes) == any(asked.values())


def test_memory_variables_values():
    assert memory_variables("mxnet", 0.7, True) == (
        {"MXNET_GPU_MEM_POOL_RESERVE": "30"},
        {
            "gpu_memory_growth": "not applicable: the allocator grows on demand",
            "MXNET_GPU_MEM_POOL_RESERVE": "30",
        },
    )
    variables, applied = memory_variables("torch", 0.5, True)
    assert variables == {}
    assert "PyTorch has no environment variable" in applied["gpu_memory_fraction"]


def test_the_worker_sets_the_same_variables(monkeypatch):
    """JAX's and MXNet's configure_memory set what memory_variables names, before the
    framework starts (neither imports its framework to do so)."""
    for name in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE",
                 "MXNET_GPU_MEM_POOL_RESERVE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    jax = load_backend("jax")(threads=1)
    assert jax.configure_memory(0.25, True) == {
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.25"
    gluon = load_backend("mxnet-gluon")(threads=1)
    applied = gluon.configure_memory(0.8, True)
    assert os.environ["MXNET_GPU_MEM_POOL_RESERVE"] == "20"
    assert applied["MXNET_GPU_MEM_POOL_RESERVE"].startswith("20 (the pool may use about 0.8")
    assert applied["gpu_memory_growth"] == "not applicable: MXNet's pool always grows on demand"


def test_each_backend_names_an_extra_of_the_package_that_brings_its_framework():
    """The extra a missing framework's message names (`pip install 'kbench[torch]'`) is
    one setup.cfg declares, and the runtimes' extra pins what the keras3 plan pins."""
    import configparser
    from pathlib import Path

    from kbench.setup.platforms import KERAS3_RUNTIMES

    config = configparser.ConfigParser()
    config.read(Path(__file__).resolve().parent.parent / "setup.cfg")
    extras = config["options.extras_require"]
    for name, spec in BACKENDS.items():
        if spec.environment == "mxnet":
            assert spec.extra is None, name  # keras-mxnet never beside Keras 3
        else:
            assert spec.extra in extras, (name, spec.extra)
    edge = {line.strip() for line in extras["edge"].splitlines() if line.strip()}
    assert set(KERAS3_RUNTIMES) <= edge, set(KERAS3_RUNTIMES) - edge
