"""Your own model and data: ``--model file.py:build`` and ``--dataset npz:PATH``.

Fast tests: every bad input the parent can see stops `kbench run` with exit 2 and a
message that names what was expected and what was received, before any worker starts.
Slow tests: a model that is not in the zoo (tests/user_models/residual.py: a residual
add, dropout and batch normalization) trains on tensorflow, jax, torch and mxnet from
an .npz; the worker's own refusals (a non-model, a file raising on import, a layer
keras-mxnet lacks) become ``failed`` / ``unsupported`` results, never a traceback.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import List

import numpy as np
import pytest
import yaml
from conftest import (
    Completed,
    dump,
    keep_out_unused,
    require_backends,
    run_kbench,
    selected_backends,
)

from kbench import cli
from kbench.backends.keras_mxnet import keras224_gap
from kbench.results.config import ConfigError, RunConfig
from kbench.results.result import RunResult
from kbench.studies.sweep import load_sweep
from kbench_models import short_name, spec_for
from kbench_models.user import UserModelImportError

MODELS_DIR = Path(__file__).resolve().parent / "user_models"
RESIDUAL = MODELS_DIR / "residual.py"


def write_npz(path: Path, train: int = 256, test: int = 64, classes: int = 4, **replace) -> Path:
    """Tiny 8x8x1 uint8 images whose class is a bright band: learnable in a few steps."""
    rng = np.random.default_rng(0)

    def make(n):
        y = rng.integers(0, classes, n)
        x = (rng.random((n, 8, 8, 1)) * 60).astype(np.uint8)
        for c in range(classes):
            x[y == c, (2 * c) % 8 : (2 * c) % 8 + 2, :, 0] += 180
        return x, y.astype(np.int64)

    x_train, y_train = make(train)
    x_test, y_test = make(test)
    arrays = dict(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    arrays.update(replace)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


@pytest.fixture
def npz(tmp_path: Path) -> Path:
    return write_npz(tmp_path / "data.npz")


@pytest.fixture(scope="module")
def module_npz(tmp_path_factory) -> Path:
    """The same data as ``npz``, once for the module's shared runs."""
    return write_npz(tmp_path_factory.mktemp("module_data") / "data.npz")


def run_cli(capsys, args):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", *args])
    return info.value.code, capsys.readouterr().err


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- fast


def test_config_makes_the_references_absolute(npz, monkeypatch):
    monkeypatch.chdir(RESIDUAL.parent)
    config = RunConfig(backend="jax", model="residual.py:build", dataset="npz:" + str(npz))
    assert config.model == f"{RESIDUAL}:build"
    assert config.label() == "jax/residual.py:build"
    spec = spec_for(config.model)
    assert (spec.input_shape, spec.num_classes, spec.input_kind) == ((8, 8, 1), 4, "image")
    assert spec.source() == {"path": str(RESIDUAL), "function": "build", "sha256": sha256(RESIDUAL)}
    assert short_name(config.model) == "residual.py:build"
    # RunConfig round-trips through JSON, as it travels to the worker
    assert RunConfig.from_dict(config.to_dict()) == config


def test_a_file_without_a_function_part_means_build(npz):
    config = RunConfig(backend="jax", model=str(RESIDUAL), dataset="npz:" + str(npz))
    assert config.model.endswith("residual.py:build")


def test_importable_module_reference(npz, monkeypatch):
    monkeypatch.syspath_prepend(str(MODELS_DIR))
    config = RunConfig(backend="jax", model="residual:build", dataset="npz:" + str(npz))
    assert config.model == f"{RESIDUAL}:build"


@pytest.mark.parametrize(
    "model, dataset, expected",
    [
        (
            "missing/model.py:build",
            None,
            "--model: model file 'missing/model.py': expected an existing Python file|"
            "does not exist",
        ),
        (
            f"{RESIDUAL}:make_model",
            None,
            "defines no 'make_model' (its functions: build, keras, layers)|file.py:NAME",
        ),
        ("no_such_package.mod:build", None, "cannot be found as a Python source file"),
        ("resnet9000", None, "--model: expected one of mlp|Or your own model: path/to/file.py"),
        (
            None,
            "npz:nowhere.npz",
            "--dataset: npz 'nowhere.npz': expected an existing .npz file holding x_train, "
            "y_train, x_test, y_test",
        ),
        (None, "imagenett", "Or your own data: npz:path/to/data.npz, folder:"),
    ],
)
def test_bad_references_exit_2(capsys, tmp_path, npz, model, dataset, expected):
    out = tmp_path / "out"
    args = ["--backend", "jax", "--model", model or str(RESIDUAL)]
    args += ["--dataset", dataset or f"npz:{npz}", "--store", str(out)]
    code, err = run_cli(capsys, args)
    assert code == 2, err
    for part in expected.split("|"):
        assert part in err
    assert not out.exists()


def _npz_case(tmp_path, name):
    path = tmp_path / f"{name}.npz"
    labels = np.arange(64) % 4
    cases = {
        "missing": dict(x_test=None, y_test=None),
        "negative": dict(y_test=labels - 1),
        "float_labels": dict(y_train=np.zeros(256, dtype=np.float32)),
        "bad_range": dict(x_train=np.full((256, 8, 8, 1), 300, dtype=np.int32)),
        "mismatch": dict(y_train=np.zeros(10, dtype=np.int64)),
    }
    return str(write_npz(path, **cases[name]))


@pytest.mark.parametrize(
    "case, extra, expected",
    [
        ("missing", [], "expected the arrays x_train, y_train, x_test, y_test; missing x_test, "
         "y_test (the file holds: x_train, y_train)|np.savez(PATH"),
        ("negative", [], "labels out of range: expected class labels from 0; the labels go "
         "down to -1"),
        ("float_labels", [], "one integer class label per sample|received dtype float32"),
        ("bad_range", [], "uint8 0-255 or floats in [0, 1]; x holds values from"),
        ("mismatch", [], "expected x_train of shape (N, ...) with N > 0 and y_train of N labels"),
        (None, ["--num-classes", "3"], "labels out of range: --num-classes 3 gives the model 3 "
         "outputs (labels 0 to 2); the labels go up to 3. Raise --num-classes to at least 4"),
    ],
)  # fmt: skip
def test_bad_npz_exits_2(capsys, tmp_path, npz, case, extra, expected):
    out = tmp_path / "out"
    data = _npz_case(tmp_path, case) if case else str(npz)
    args = ["--backend", "jax", "--model", str(RESIDUAL), "--dataset", f"npz:{data}", *extra]
    code, err = run_cli(capsys, [*args, "--store", str(out)])
    assert code == 2, err
    assert "--dataset: npz " in err
    for part in expected.split("|"):
        assert part in err
    assert not out.exists()


def test_npz_shape_must_fit_the_model_kind(tmp_path):
    tokens = tmp_path / "tokens.npz"
    write_npz(tokens, x_train=np.zeros((256, 10), np.int32), x_test=np.zeros((64, 10), np.int32))
    with pytest.raises(ConfigError, match="the model takes image input"):
        RunConfig(backend="jax", model=str(RESIDUAL), dataset=f"npz:{tokens}")


def test_hooks_must_be_literals(tmp_path):
    model = tmp_path / "computed.py"
    model.write_text("SIDE = 8\nINPUT_SHAPE = (SIDE, SIDE, 1)\n\ndef build(s, n):\n    pass\n")
    with pytest.raises(ConfigError, match="INPUT_SHAPE must be a plain literal"):
        RunConfig(backend="jax", model=f"{model}:build", dataset="synthetic")


@pytest.mark.parametrize(
    "err, expected",
    [
        (AttributeError("module 'keras.layers' has no attribute 'LayerNormalization'",
                        name="LayerNormalization"), "LayerNormalization"),
        (TypeError("Keyword argument not understood:", "groups"), "the argument `groups`"),
        (TypeError("Conv2D.__init__() got an unexpected keyword argument 'groups'"),
         "the argument `groups` of `Conv2D.__init__`"),
        (ValueError("shapes do not match"), None),
    ],
)  # fmt: skip
def test_keras224_gap_names_what_is_missing(err, expected):
    if isinstance(err, AttributeError):
        import types

        err.obj = types.ModuleType("keras.layers")
    gap = keras224_gap(err)
    assert gap is None if expected is None else expected in gap


def test_keras224_gap_looks_through_an_import_failure():
    cause = ImportError("cannot import name 'LayerNormalization' from 'keras.layers'")
    cause.name = "keras.layers"
    wrapped = UserModelImportError("model file x.py raised ImportError")
    wrapped.__cause__ = cause
    assert keras224_gap(wrapped).startswith("`LayerNormalization` (ImportError: cannot import")


# --------------------------------------------------------------------------- slow


@pytest.mark.slow
def test_user_model_on_every_keras_backend(request, module_npz):
    """One sweep, every backend: each run ok, naming the model's source and the data's."""
    user_sweep = sweep_for(request, "every-backend")
    done = user_sweep.completed
    residual = f"{RESIDUAL}:build"
    every = user_sweep.group("every-backend")
    results = {r.config["backend"]: r for r in every if r.config["model"] == residual}
    source = {"path": str(RESIDUAL), "function": "build", "sha256": sha256(RESIDUAL)}
    for backend in ("tensorflow", "jax", "torch", "mxnet"):
        result = results[backend]
        assert result.status == "ok", dump(done)
        assert result.model["source"] == source
        assert result.data["sha256"] == sha256(module_npz)
        assert str(module_npz) in result.data["source"]
        assert (result.data["train_samples"], result.data["test_samples"]) == (256, 64)
        assert result.data["num_classes"] == 4
    params = {results[b].model["params"] for b in ("tensorflow", "jax", "torch", "mxnet")}
    assert len(params) == 1, params
    native = results["torch-native"]
    assert native.status == "unsupported"
    assert "a user model has no hand-written twin" in native.reason
    assert native.model["source"] == source
    assert "residual.py:build" in done.stdout


@pytest.mark.slow
def test_backends_building_different_models_stop_before_measuring(capsys, tmp_path):
    """MXNet lays images out channels_first, where axis=-1 is the width: the counts differ
    as the workers build the model, and the comparison stops there with the fix."""
    require_backends("torch", "mxnet")
    model = Path(__file__).parent / "user_models" / "axis_minus_one.py"
    store = tmp_path / "store"
    args = ["-b", "torch,mxnet", "-m", f"{model}:build", "--dataset", "synthetic"]
    code, err = run_cli(capsys, [*args, "--store", str(store)])
    assert code == 2, err
    assert "different parameter counts (torch: 628; mxnet: 612)" in err, err
    assert "nothing was measured" in err and "--data-format channels_last" in err
    assert not list(store.glob("*.json")), "no document of a comparison that measured nothing"


@pytest.mark.slow
def test_a_model_importing_tensorflow_on_torch_finds_it_seeded(request):
    """A worker keeps TensorFlow out while it seeds torch's generators (3-4 s of its
    start) and seeds it when the user's model imports it: the model's build checks that
    TensorFlow's global seed is the run's and that Keras finds TensorFlow."""
    user_sweep = sweep_for(request, "imports-tensorflow")
    (result,) = user_sweep.group("imports-tensorflow")
    assert result.status == "ok", dump(user_sweep.completed)
    skipped = result.environment["framework"]["imports_skipped"]  # as the run ended
    assert "matplotlib" in skipped and "tensorflow" not in skipped  # the model imported it


@pytest.mark.slow
def test_worker_refusals_are_results(request):
    """A non-model and a file raising on import fail with the sentence; a layer or an
    argument keras-mxnet lacks (a custom layer's unnamed ``add_weight`` among them) is
    ``unsupported`` on mxnet, naming it. One warm worker runs the five (and the other
    user-model runs on mxnet): each refusal is caught for its own case, and they are the
    sweep's only failures."""
    user_sweep = sweep_for(request, "refusals")
    done = user_sweep.completed
    failed = {short_name(r.config["model"]) for r in done.results() if r.failed}
    assert failed == {"not_a_model.py:build", "raises_on_import.py:build"}, dump(done)
    results = {short_name(r.config["model"]): r for r in user_sweep.group("refusals")}
    assert len(results) == 5, dump(done)  # each case its own result, though one worker ran them
    not_a_model = results["not_a_model.py:build"]
    assert not_a_model.status == "failed"
    assert "not_a_model.py:build must return a Keras model" in not_a_model.reason
    assert "returned builtins.dict" in not_a_model.reason
    raises = results["raises_on_import.py:build"]
    assert raises.status == "failed"
    assert "raised KeyError while being imported" in raises.reason
    assert 'return SETTINGS["depth"]' in raises.error["message"]  # the last frames
    layer = results["keras3_only.py:build"]
    assert layer.status == "unsupported", dump(done)
    assert "LayerNormalization" in layer.reason
    argument = results["keras3_only.py:build_grouped"]
    assert argument.status == "unsupported", dump(done)
    assert "groups" in argument.reason
    # before: failed with TypeError: Layer.add_weight() missing 1 required positional
    # argument: 'name'
    custom = results["custom_layer.py:build"]
    assert custom.status == "unsupported", dump(done)
    assert "lacks a default for the argument 'name' of `Layer.add_weight`" in custom.reason
    assert "custom_layer.py:build uses" in custom.reason


def write_sweep(folder: Path) -> Path:
    """A sweep file naming a user model and user data by paths relative to itself."""
    (folder / "models").mkdir(parents=True)
    (folder / "models" / "residual.py").write_bytes(RESIDUAL.read_bytes())
    write_npz(folder / "data.npz")
    path = folder / "own.yaml"
    path.write_text(
        "name: own-model\n"
        "settings:\n"
        "  model: models/residual.py:build\n"
        "  dataset: npz:data.npz\n"
        "  steps: 2\n"
        "  warmup_steps: 1\n"
        "  batch_size: 32\n"
        "  sample_interval_s: 0\n"
        "matrix:\n"
        "  backend: [jax, mxnet]\n"
    )
    return path


def test_sweep_file_paths_are_relative_to_the_file(tmp_path, monkeypatch):
    path = write_sweep(tmp_path)
    monkeypatch.chdir("/")
    sweep = load_sweep(path)
    configs = [run.config for run in sweep.runs]
    assert [c.backend for c in configs] == ["jax", "mxnet"]
    assert {c.model for c in configs} == {f"{tmp_path / 'models' / 'residual.py'}:build"}
    assert {c.dataset for c in configs} == {f"npz:{tmp_path / 'data.npz'}"}


def test_saved_models_and_image_folders_in_a_sweep_file_are_beside_it(tmp_path):
    from kbench.studies.sweep import relative_to_file

    moved = relative_to_file({"model": "net.keras", "dataset": "folder:images"}, tmp_path)
    assert moved == {
        "model": str(tmp_path / "net.keras"),
        "dataset": f"folder:{tmp_path / 'images'}",
    }
    kept = {"model": "/abs/net.keras", "dataset": "tfds:mnist"}
    assert relative_to_file(kept, tmp_path) == kept


@pytest.mark.slow
def test_sweep_runs_a_user_model_on_user_data(request):
    """write_sweep's runs (model and data named relative to the file), in the module's
    sweep: the worker found both by the paths the file gave."""
    user_sweep = sweep_for(request, "own-model")
    results = user_sweep.group("own-model")
    assert sorted(r.config["backend"] for r in results) == ["jax", "mxnet"]
    assert all(r.status == "ok" and r.model["source"]["function"] == "build" for r in results)
    model = f"{user_sweep.study / 'models' / 'residual.py'}:build"
    assert {r.config["model"] for r in results} == {model}
    assert {r.config["dataset"] for r in results} == {f"npz:{user_sweep.study / 'data.npz'}"}


# ------------------------------------------------ saved models, folders, tfds, twins

TWIN = MODELS_DIR / "with_twin.py"
SAVE_MODELS = """
import sys, keras
from keras import layers
folder = sys.argv[1]
keras.utils.set_random_seed(1)
inputs = keras.Input(shape=(8, 8, 1))
x = layers.Conv2D(4, 3, padding="same", activation="relu")(inputs)
y = layers.BatchNormalization()(layers.Conv2D(4, 3, padding="same")(x))
x = layers.Add()([x, y])
outputs = layers.Dense(4, activation="softmax")(layers.Flatten()(x))
keras.Model(inputs, outputs).save(folder + "/tiny.keras")
a, b = keras.Input(shape=(3,)), keras.Input(shape=(3,))
two = layers.Dense(2, activation="softmax")(layers.Concatenate()([a, b]))
keras.Model([a, b], two).save(folder + "/two_inputs.keras")
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A folder holding tiny.keras (made here under jax, never committed) and
    two_inputs.keras; one Keras process for the whole module."""
    import os
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("saved")
    env = dict(os.environ, KERAS_BACKEND="jax", KERAS_HOME=str(folder / "keras_home"))
    script = keep_out_unused("jax") + SAVE_MODELS
    subprocess.run([sys.executable, "-c", script, str(folder)], env=env, check=True,
                   capture_output=True, timeout=600)  # fmt: skip
    return folder


@pytest.mark.slow  # the saved fixture makes tiny.keras under jax
def test_saved_model_reference(request, npz, monkeypatch):
    require_backends("jax")  # the saved fixture makes tiny.keras under jax
    saved = request.getfixturevalue("saved")
    from kbench.views.tables import model_label

    monkeypatch.chdir(saved)
    path = saved / "tiny.keras"
    config = RunConfig(backend="torch", model="tiny.keras", dataset=f"npz:{npz}")
    assert config.model == str(path)
    assert config.label() == "torch/tiny.keras"
    assert short_name(config.model) == model_label(config.model) == "tiny.keras"
    spec = spec_for(config.model)
    assert (spec.input_shape, spec.num_classes, spec.input_kind) == ((8, 8, 1), 4, "image")
    assert spec.loss == "sparse_categorical_crossentropy"
    assert spec.source() == {
        "path": str(path),
        "format": "Keras 3 saved model (.keras: architecture and weights)",
        "sha256": sha256(path),
    }
    assert RunConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("missing.keras", None, "expected an existing Keras 3 saved model|does not exist"),
        ("text.keras", b"not a zip", "expected a Keras 3 saved model (a zip archive); it "
         "cannot be read as one|model.save('model.keras')"),
        ("empty_zip.keras", "zip", "a zip archive holding config.json and model.weights.h5; "
         "the archive holds other.txt"),
        pytest.param("two_inputs.keras", "copy", "kbench feeds a model one input; this model "
                     "has 2", marks=pytest.mark.slow),  # the saved fixture makes it under jax
    ],
)  # fmt: skip
def test_bad_saved_models_exit_2(request, capsys, tmp_path, npz, name, content, expected):
    import zipfile

    path = tmp_path / name
    if content == "zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("other.txt", "x")
    elif content == "copy":  # the saved fixture makes it under jax
        require_backends("jax")
        path.write_bytes((request.getfixturevalue("saved") / name).read_bytes())
    elif content is not None:
        path.write_bytes(content)
    out = tmp_path / "out"
    code, err = run_cli(capsys, ["--backend", "jax", "--model", str(path), "--dataset",
                                 f"npz:{npz}", "--store", str(out)])  # fmt: skip
    assert code == 2, err
    for part in expected.split("|"):
        assert part in err
    assert not out.exists()


def test_folder_and_tfds_references(tmp_path, monkeypatch):
    from kbench.datasets import dataset_spec

    (tmp_path / "photos" / "cat").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    config = RunConfig(backend="jax", model=str(RESIDUAL), dataset="folder:photos",
                       image_size=(8, 8))  # fmt: skip
    assert config.dataset == f"folder:{tmp_path / 'photos'}"
    tfds = RunConfig(backend="jax", model=str(RESIDUAL), dataset="tfds:mnist:3.*.*")
    assert tfds.dataset == "tfds:mnist:3.*.*"
    assert dataset_spec(config.dataset).kind == dataset_spec(tfds.dataset).kind == "image"


@pytest.mark.parametrize(
    "dataset, expected",
    [
        ("folder:no/such/dir", "--dataset: folder 'no/such/dir': expected a directory of class "
         "folders|does not exist"),
        ("folder:", "expected folder:PATH"),
        ("tfds:MNIST!", "--dataset: tfds: expected tfds:NAME, tfds:NAME/CONFIG or "
         "tfds:NAME:VERSION|received 'tfds:MNIST!'"),
    ],
)  # fmt: skip
def test_bad_folder_and_tfds_exit_2(capsys, tmp_path, dataset, expected):
    out = tmp_path / "out"
    code, err = run_cli(capsys, ["--backend", "jax", "--model", str(RESIDUAL), "--dataset",
                                 dataset, "--store", str(out)])  # fmt: skip
    assert code == 2, err
    for part in expected.split("|"):
        assert part in err
    assert not out.exists()


def test_tables_name_files_not_paths():
    from kbench.views.tables import dataset_label, model_label

    assert model_label(f"{RESIDUAL}:build") == "residual.py:build"
    assert model_label("/data/models/net.keras") == "net.keras"
    assert model_label("resnet20") == "resnet20"
    assert dataset_label("npz:/data/x/train.npz") == "npz:train.npz"
    assert dataset_label("folder:/data/photos/") == "folder:photos"
    assert dataset_label("tfds:mnist:3.0.1") == dataset_label("tfds:mnist:3.0.1")
    assert dataset_label("cifar10") == "cifar10"


REFUSED = [
    f"{MODELS_DIR / 'not_a_model.py'}:build",
    f"{MODELS_DIR / 'raises_on_import.py'}:build",
    f"{MODELS_DIR / 'keras3_only.py'}:build",
    f"{MODELS_DIR / 'keras3_only.py'}:build_grouped",
    # a custom layer written as for Keras 3 (tests/test_hostile_models.py's case)
    f"{MODELS_DIR / 'custom_layer.py'}:build",
]


# tensorflow-datasets' own mock data (no prepared set here, no download), entered in the
# child process kbench starts to read the set (as in tests/test_datasets.py)
TFDS_MOCK_SITE = """
import sys
if "kbench.datasets.tfds_reader" in sys.orig_argv:
    from kbench.datasets import sources
    MOCK = sources.import_tfds().testing.mock_data(num_examples=12)  # kept: a context
    MOCK.__enter__()  # that is garbage-collected ends
"""


@dataclass
class UserSweep:
    """The module's one ``kbench sweep --warm`` and the folder its file is in."""

    completed: Completed
    study: Path

    def group(self, name: str) -> List[RunResult]:
        return [r for r in self.completed.results() if r.sweep["group"] == name]


EVERY = ("tensorflow", "jax", "torch", "mxnet", "torch-native")
# what each group of user_sweep runs on: a group runs where KBENCH_TEST_BACKENDS selects
# all of them (as its tests need), so that one backend's tests start no other's worker
GROUP_BACKENDS = {"every-backend": EVERY, "own-model": ("jax", "mxnet"),
                  "refusals": ("mxnet",), "folder": ("jax",), "tfds": ("jax",),
                  "imports-tensorflow": ("torch",)}  # fmt: skip


def sweep_for(request, group: str) -> UserSweep:
    """The module's sweep, for a test of ``group``: skipped (before the sweep runs) where
    KBENCH_TEST_BACKENDS leaves out a backend the group runs on."""
    require_backends(*GROUP_BACKENDS[group])
    return request.getfixturevalue("user_sweep")


@pytest.fixture(scope="module")
def user_sweep(request, tmp_path_factory, module_npz) -> UserSweep:
    """One ``kbench sweep --warm`` of user models on user data, one worker per backend
    (user models share a worker with user models only), each group for its tests:

    - every-backend: the residual model and tiny.keras on every backend, one measured
      SGD step from the initial weights;
    - own-model: the residual model on jax and mxnet, model and data named relative to
      the sweep file (as write_sweep writes them);
    - refusals: five models mxnet's worker refuses, each for its own case;
    - folder: folder: images, resized, in an inference run with the operator profile;
    - tfds: tfds:mnist (tensorflow-datasets' mock data, entered in the reader process
      kbench starts: ``TFDS_MOCK_SITE``), resized, on jax;
    - imports-tensorflow: a model that imports TensorFlow on torch, last in its worker.
    """
    from shared_sweep import image_folder

    selected = selected_backends()
    wanted = [
        name
        for name, backends in GROUP_BACKENDS.items()
        if selected in (None, ["cross"]) or all(b in selected for b in backends)
    ]
    require_backends(*{b for name in wanted for b in GROUP_BACKENDS[name]})
    study = tmp_path_factory.mktemp("study")
    own = yaml.safe_load(write_sweep(study).read_text())
    image_folder(study / "photos", per_class=(4, 2))
    quiet = {"sample_interval_s": 0}
    groups = {
        "own-model": {"settings": own["settings"], "matrix": own["matrix"]},
        "refusals": {"settings": {"backend": "mxnet", "dataset": "npz:data.npz", "steps": 2,
                                  "warmup_steps": 1, "batch_size": 32, **quiet},
                     "matrix": {"model": REFUSED}},
        "folder": {"settings": {"backend": "jax", "model": "models/residual.py:build",
                                "dataset": "folder:photos", "mode": "inference",
                                "duration_s": 0.5, "warmup_steps": 1, "batch_size": 4,
                                "profile": True, "profile_steps": 1, **quiet}},
        "tfds": {"settings": {"backend": "jax", "model": f"{RESIDUAL}:build",
                              "dataset": "tfds:mnist", "image_size": [8, 8], "steps": 2,
                              "warmup_steps": 1, "batch_size": 4, **quiet}},
    }  # fmt: skip
    if "every-backend" in wanted:  # tiny.keras: the saved fixture (a jax process) makes it
        tiny = str(request.getfixturevalue("saved") / "tiny.keras")
        groups["every-backend"] = {
            "settings": {"dataset": f"npz:{module_npz}", "steps": 1, "warmup_steps": 0,
                         "batch_size": 32, "optimizer": "sgd", **quiet},
            "matrix": {"model": [f"{RESIDUAL}:build", tiny], "backend": list(EVERY)},
        }  # fmt: skip
    groups["imports-tensorflow"] = {
        "settings": {"backend": "torch", "model": f"{MODELS_DIR / 'imports_tensorflow.py'}:build",
                     "dataset": f"npz:{module_npz}", "steps": 1, "warmup_steps": 0,
                     "batch_size": 32, **quiet},
    }  # fmt: skip
    document = {"name": "own-model", "groups": [dict(name=n, **groups[n]) for n in wanted]}
    path = study / "own.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    home = tmp_path_factory.mktemp("user_sweep_home")
    output = study / "out"
    env = {}
    if "tfds" in wanted:  # no prepared set here and no download: the mock, offline
        site = study / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(TFDS_MOCK_SITE)
        env = {"PYTHONPATH": str(site), "KBENCH_OFFLINE": "1"}
    done = run_kbench(["sweep", str(path), "--warm", "--store", str(output)], home, output, env=env)
    # the refusals fail (exit 1); each group's test judges its own runs
    assert done.returncode == (1 if "refusals" in wanted else 0), dump(done)
    return UserSweep(done, study)


@pytest.mark.slow
def test_saved_model_starts_from_its_weights_on_every_keras3_backend(request, module_npz):
    """One measured step from the saved weights: the same first loss on tensorflow, jax
    and torch (a fresh initialisation would differ); mxnet cannot read the format."""
    user_sweep = sweep_for(request, "every-backend")
    saved = request.getfixturevalue("saved")
    done = user_sweep.completed
    path = saved / "tiny.keras"
    every = user_sweep.group("every-backend")
    results = {r.config["backend"]: r for r in every if r.config["model"] == str(path)}
    source = {"path": str(path), "format": "Keras 3 saved model (.keras: architecture and "
              "weights)", "sha256": sha256(path)}  # fmt: skip
    losses = []
    for backend in ("tensorflow", "jax", "torch"):
        result = results[backend]
        assert result.status == "ok", dump(done)
        assert result.model["source"] == source
        assert result.data["sha256"] == sha256(module_npz)
        losses.append(result.metrics["final_train_loss"])  # the one step's loss
    assert max(losses) - min(losses) <= 1e-5 * abs(losses[0]), losses
    assert len({results[b].model["params"] for b in ("tensorflow", "jax", "torch")}) == 1
    mxnet = results["mxnet"]
    assert mxnet.status == "unsupported"
    assert "cannot read a Keras 3 saved model (tiny.keras" in mxnet.reason
    assert mxnet.model["source"] == source
    # the sweep's tables name the model by its file name, never by its path
    assert "tiny.keras" in done.stdout and str(path) not in done.stdout, done.stdout


PARITY_BACKENDS = ("tensorflow", "jax", "torch", "mxnet", "torch-native")


@pytest.fixture(scope="module")
def user_parity(request, tmp_path_factory):
    """One ``kbench parity`` of the residual model, a .keras file and a file with its own
    PyTorch twin on every backend (a worker each, tensorflow the reference):
    {(model file name, backend): parity document}, and the command's output."""
    require_backends(*PARITY_BACKENDS)
    saved = request.getfixturevalue("saved")
    home = tmp_path_factory.mktemp("parity_home")
    models = f"{RESIDUAL}:build,{saved / 'tiny.keras'},{TWIN}:build"
    done = run_kbench(
        ["parity", "--model", models, "--backend", ",".join(PARITY_BACKENDS), "--store",
         str(home / "parity")],
        home,
    )  # fmt: skip
    rows = {(short_name(r.config["model"]), r.config["backend"]): r for r in done.results()}
    return rows, done, saved


def parity_line(done, model: str, backend: str) -> str:
    (line,) = [ln for ln in done.stdout.splitlines() if ln.split()[:2] == [model, backend]]
    return line


@pytest.mark.slow
def test_parity_of_a_user_model(user_parity):
    """The residual model's parity on every Keras backend (torch-native: no twin)."""
    rows, done, _ = user_parity
    for backend in ("tensorflow", "jax", "torch", "mxnet"):
        row = rows[("residual.py:build", backend)]
        assert row.kind == "parity" and row.ok, dump(done)
        assert row.metrics["parity"]["passed"], dump(done)
        assert row.model["source"]["sha256"] == sha256(RESIDUAL)
        assert "FAIL" not in parity_line(done, "residual.py:build", backend)
    assert "no hand-written twin (residual.py:build)" in parity_line(
        done, "residual.py:build", "torch-native"
    )


@pytest.mark.slow
def test_parity_of_a_saved_model_and_of_a_user_twin(user_parity):
    """Parity from a .keras file's weights, and for a file with its own PyTorch twin
    (build_torch), which torch-native runs with the Keras weights loaded into it."""
    rows, done, saved = user_parity
    native = parity_line(done, "tiny.keras", "torch-native")
    assert "unsupported (" in native and "no hand-written twin (tiny.keras)" in native
    for key in [("tiny.keras", "torch"), ("tiny.keras", "jax"), ("with_twin.py:build", "torch"),
                ("with_twin.py:build", "torch-native")]:  # fmt: skip
        assert rows[key].ok and rows[key].metrics["parity"]["passed"], dump(done)
    assert rows[("tiny.keras", "torch")].model["source"]["sha256"] == sha256(saved / "tiny.keras")
    assert done.returncode == 1  # torch-native cannot run tiny.keras: parity is incomplete


@pytest.mark.slow
def test_tfds_dataset_with_a_user_model(request):
    """tfds:mnist (mocked) trains the residual model; the result names the set and its
    version (the user sweep's "tfds" group; before: a ``kbench run`` of its own)."""
    user_sweep = sweep_for(request, "tfds")
    done = user_sweep.completed
    (result,) = user_sweep.group("tfds")
    assert result.status == "ok", dump(done)
    assert result.data["name"] == "tfds:mnist" and result.data["version"] == "3.0.1"
    assert result.data["source"].startswith("tensorflow-datasets mnist/3.0.1 (version 3.0.1)")
    assert (result.data["train_samples"], result.data["test_samples"]) == (12, 12)
    assert result.model["input_shape"] == [8, 8, 1] and result.data["num_classes"] == 10


@pytest.mark.slow
def test_a_misspelt_tfds_name_stops_before_any_worker(home, tmp_path):
    """Without the mock, which starts TensorFlow: the reader refuses the name before it
    would, naming the close ones, and no worker starts."""
    require_backends("jax")
    wrong = run_kbench(
        ["run", "-b", "jax", "--model", f"{RESIDUAL}:build", "--steps", "2", "--warmup-steps",
         "1", "--batch-size", "4", "--sample-interval", "0", "--dataset", "tfds:mnistt"],
        home, tmp_path / "wrong", env={"KBENCH_OFFLINE": "1"},
    )  # fmt: skip
    assert wrong.returncode == 2, dump(wrong)
    assert "tfds:mnistt: tensorflow-datasets" in wrong.stderr
    assert "has no data set 'mnistt'; close names: mnist" in wrong.stderr
    assert not list((tmp_path / "wrong").glob("*.json"))


@pytest.mark.slow
def test_folder_data_inference_and_profile_of_a_user_model(request):
    """folder: images, resized to the model's input, in an inference run with the
    operator profile: the user model goes wherever a zoo model goes."""
    user_sweep = sweep_for(request, "folder")
    done, photos = user_sweep.completed, user_sweep.study / "photos"
    (result,) = user_sweep.group("folder")
    assert result.status == "ok" and result.config["mode"] == "inference", dump(done)
    assert result.model["input_shape"] == [8, 8, 3]  # the model's 8x8, decoded as RGB
    assert result.data["streamed"] and result.data["num_classes"] == 3
    assert (result.data["train_samples"], result.data["test_samples"]) == (12, 6)
    assert f"image folders {photos}/train and {photos}/val" in result.data["source"]
    assert result.metrics["profile"], "the --profile breakdown is missing"
    assert result.model["source"]["sha256"] == sha256(RESIDUAL)
    assert "folder:photos" in done.stdout or "residual.py:build" in done.stdout
