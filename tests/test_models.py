"""The model zoo builds under every backend and data format with the expected size.

Expected parameter counts come from formulas written here, independently of the
model code, and the formulas are pinned to the published reference counts. Each
backend is one ``kbench.run.probe`` process that builds every model in each data format.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, require_backends, selected_backends
from test_pytorch_twins import load_keras, load_numpy_draws

import kbench_models
from kbench.measure.processes import usable_cores
from kbench.run import environments

BACKENDS = ("tensorflow", "jax", "torch", "mxnet")
# channels_first is mxnet's default. The probe builds with the initializers' values
# unused (NumPy's draws, kbench.backends.keras3.numpy_draws), so JAX, whose own draws
# compile per weight shape, builds every spec in both formats too. Keras' own
# initializers run in every other test's builds (parity's reference builds the whole
# zoo with them, on TensorFlow), not here.
PROBES = [(b, f) for b in BACKENDS for f in ("channels_last", "channels_first")]
MODELS_DIR = ROOT / "models"


# -- parameter counts, from the architectures' definitions ------------------------


def conv(k, cin, cout, bias=True):
    k_h, k_w = (k, k) if isinstance(k, int) else k
    return k_h * k_w * cin * cout + (cout if bias else 0)


def bn(channels):
    return 4 * channels  # gamma, beta, moving mean, moving variance


def dense(n_in, n_out):
    return n_in * n_out + n_out


def conv_out(size, k, stride=1, pad=0):
    """Output size of a "valid" convolution/pooling after symmetric padding ``pad``."""
    return (size + 2 * pad - k) // stride + 1


def same_out(size, stride):
    return math.ceil(size / stride)


def mlp3_params(h, w, c, classes):
    return dense(h * w * c, 128) + dense(128, 64) + dense(64, classes)


def lenet5_params(h, w, c, classes):
    h, w = conv_out(h // 2, 3) // 2, conv_out(w // 2, 3) // 2  # same conv, pool, conv, pool
    total = conv(5, c, 6) + conv(3, 6, 16)
    return total + dense(h * w * 16, 120) + dense(120, 84) + dense(84, classes)


def resnet_v1_params(depth, h, w, c, classes):
    blocks = (depth - 2) // 6
    total = conv(3, c, 16) + bn(16)
    cin = 16
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            total += conv(3, cin, filters) + bn(filters) + conv(3, filters, filters) + bn(filters)
            if stage > 0 and block == 0:
                total += conv(1, cin, filters)  # projection shortcut, no BN
                h, w = same_out(h, 2), same_out(w, 2)
            cin = filters
    return total + dense((h // 8) * (w // 8) * 64, classes)  # AveragePooling2D(8)


def resnet18_params(h, w, c, classes):
    total = conv(3, c, 64, bias=False) + bn(64)
    cin = 64
    for stage, filters in enumerate((64, 128, 256, 512)):
        for block in range(2):
            total += conv(3, cin, filters, bias=False) + bn(filters)
            total += conv(3, filters, filters, bias=False) + bn(filters)
            if stage > 0 and block == 0:
                total += conv(1, cin, filters, bias=False) + bn(filters)
            cin = filters
    return total + dense(512, classes)


def resnet50_params(h, w, c, classes):
    total = conv(7, c, 64) + bn(64)
    cin = 64
    for filters, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            if block == 0:
                total += conv(1, cin, 4 * filters) + bn(4 * filters)
            total += conv(1, cin, filters) + bn(filters)
            total += conv(3, filters, filters) + bn(filters)
            total += conv(1, filters, 4 * filters) + bn(4 * filters)
            cin = 4 * filters
    return total + dense(2048, classes)


def vgg16_params(h, w, c, classes):
    total, cin = 0, c
    for block in ((64, 64), (128, 128), (256,) * 3, (512,) * 3, (512,) * 3):
        for filters in block:
            total += conv(3, cin, filters) + bn(filters)
            cin = filters
        h, w = h // 2, w // 2
    return total + dense(h * w * 512, 512) + dense(512, classes)


def alexnet_params(h, w, c, classes):
    total, cin = 0, c
    for filters, k, stride, pad, pool in (
        (64, 11, 4, 2, True),
        (192, 5, 1, 2, True),
        (384, 3, 1, 1, False),
        (256, 3, 1, 1, False),
        (256, 3, 1, 1, True),
    ):
        total += conv(k, cin, filters)
        h, w = conv_out(h, k, stride, pad), conv_out(w, k, stride, pad)
        if pool:
            h, w = conv_out(h, 3, 2), conv_out(w, 3, 2)
        cin = filters
    return total + dense(h * w * 256, 4096) + dense(4096, 4096) + dense(4096, classes)


def lstm_layer(features, units=128):
    return 4 * (units * (features + units) + units)


def binary_head(n_in, classes):
    return dense(n_in, 1 if classes == 2 else classes)


def lstm_params(steps, features, classes):
    return lstm_layer(features) + binary_head(128, classes)


def lstm_embedding_params(steps, classes):
    return 20_000 * 50 + lstm_layer(50) + binary_head(128, classes)


FORMULAS = {
    "mlp3": mlp3_params,
    "lenet5": lenet5_params,
    "resnet20": lambda *shape: resnet_v1_params(20, *shape),
    "resnet56": lambda *shape: resnet_v1_params(56, *shape),
    "resnet18": resnet18_params,
    "resnet50": resnet50_params,
    "vgg16": vgg16_params,
    "alexnet": alexnet_params,
    "lstm": lstm_params,
    "lstm_embedding": lstm_embedding_params,
}

# Every new model at its registered default, then at another shape / class count
# (non-square, other channel counts, other classes) where the architecture allows it.
OTHER_SHAPES = (
    "mlp3:32x32x3:5",
    "lenet5:32x32x3:100",
    "resnet20:64x64x3:100",
    "resnet56:40x48x1:4",
    "resnet18:48x40x1:100",
    "resnet50:96x128x1:10",
    "vgg16:64x48x1:100",
    "alexnet:96x96x3:200",
    "lstm:100x20:2",
    "lstm:250x50:5",
    "lstm_embedding:100:2",
)
SPECS = tuple(FORMULAS) + OTHER_SHAPES


def parse(text):
    name, _, rest = text.partition(":")
    shape_text, _, classes = rest.partition(":")
    spec = kbench_models.MODELS[name]
    shape = tuple(int(d) for d in shape_text.split("x")) if shape_text else spec.input_shape
    return name, shape, int(classes) if classes else spec.num_classes


def expected_params(text):
    name, shape, classes = parse(text)
    return FORMULAS[name](*shape, classes)


def test_formulas_give_the_reference_counts():
    assert mlp3_params(28, 28, 1, 10) == 109_386
    assert resnet_v1_params(20, 32, 32, 3, 10) == 274_442
    assert resnet_v1_params(56, 32, 32, 3, 10) == 861_770
    assert resnet50_params(224, 224, 3, 1000) == 25_636_712
    # ResNet-18 (CIFAR): PyTorch's 11,173,962 parameters + 2 statistics per BN channel
    bn_channels = 64 + 2 * 2 * 64 + sum(4 * f + f for f in (128, 256, 512))
    assert resnet18_params(32, 32, 3, 10) == 11_173_962 + 2 * bn_channels
    assert lenet5_params(28, 28, 1, 10) == 81_290
    assert vgg16_params(32, 32, 3, 10) == 14_999_370
    assert alexnet_params(64, 64, 3, 10) == 20_344_650
    assert lstm_params(250, 50, 2) == 91_777
    assert lstm_embedding_params(250, 2) == 1_091_777


def test_registry_describes_every_model():
    for name in FORMULAS:
        spec = kbench_models.MODELS[name]
        assert spec.name == name and spec.description
        assert (MODELS_DIR / f"{spec.module}.py").is_file()
    for name in ("lstm", "lstm_embedding"):
        spec = kbench_models.MODELS[name]
        assert spec.loss == "binary_crossentropy" and spec.num_classes == 2
    assert kbench_models.MODELS["lstm"].input_kind == "sequence"
    assert kbench_models.MODELS["lstm_embedding"].input_kind == "tokens"
    assert kbench_models.MODELS["lstm_embedding"].vocabulary_size == 20_000
    assert kbench_models.MODELS["resnet50"].loss == "sparse_categorical_crossentropy"
    with pytest.raises(ValueError, match="input_kind must be one of"):
        kbench_models.ModelSpec("x", "x", "x", (1,), 2, input_kind="text")


def build_defaults(path: Path):
    """The keyword defaults of ``build`` in a model module, read without importing it."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "build":
            names = [a.arg for a in node.args.args[-len(node.args.defaults) :]]
            return {n: ast.literal_eval(d) for n, d in zip(names, node.args.defaults)}
    raise AssertionError(f"{path.name} has no build()")


def test_build_defaults_match_the_registry():
    for spec in kbench_models.MODELS.values():
        defaults = build_defaults(MODELS_DIR / f"{spec.module}.py")
        assert defaults == {"input_shape": spec.input_shape, "num_classes": spec.num_classes}


def test_models_stay_backend_neutral():
    """No kbench imports; only _compat may read the backend or the data format."""
    for path in sorted(MODELS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""] + [
                    f"{node.module}.{a.name}" for a in node.names if node.module
                ]
            assert not any(m.split(".")[0] == "kbench" for m in modules), path.name
            if path.name != "_compat.py":
                assert "keras.backend" not in modules, path.name
                if isinstance(node, ast.Attribute):
                    assert node.attr not in ("backend", "image_data_format"), path.name


# What a sequence model may build from: none of these reads the image data format (in
# Keras 3 any layer with a data_format argument left at None reads it, as do _compat's
# channel_axis and padding); a new layer here needs that checked before it is added.
# The attention blocks (_attention, for text_encoder and decoder_lm) add Lambdas in
# _compat.ops (keras.ops or keras.backend), merges and two Layer subclasses of their own.
SEQUENCE_LAYERS = {"Input", "Dense", "Embedding", "Lambda", "Dot", "Add", "Activation",
                   "Concatenate", "Layer"}  # fmt: skip
# _compat.lstm: an LSTM with its activations spelled out; ops: keras.ops or keras.backend;
# sequence_length: a (steps, dim) tensor's steps
SEQUENCE_COMPAT = {"dtype_of", "lstm", "ops", "sequence_length"}
SEQUENCE_HELPERS = {"_compat", "_attention", "_attention_facts"}  # models' own, imported


def test_sequence_models_read_no_data_format():
    """The probe builds a sequence model in its first data format only (the others'
    entries say ``same_as``): that holds while its modules build only from layers and
    helpers that read no data format."""
    sequence = {s.module for s in kbench_models.MODELS.values() if s.input_kind != "image"}
    assert sequence == {"lstm", "lstm_embedding", "text_encoder", "decoder_lm"}
    for module in sorted(sequence | {"_attention"}):
        tree = ast.parse((MODELS_DIR / f"{module}.py").read_text())
        used = {
            (n.value.id, n.attr)
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
        }
        assert {attr for name, attr in used if name == "layers"} <= SEQUENCE_LAYERS, module
        assert {attr for name, attr in used if name == "_compat"} <= SEQUENCE_COMPAT, module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:  # models' own modules
                names = {node.module} if node.module else {a.name for a in node.names}
                assert names <= sequence | SEQUENCE_HELPERS, (module, names)
            elif isinstance(node, ast.ImportFrom):
                assert node.module in ("keras", "keras.models"), (module, node.module)
                assert {a.name for a in node.names} <= {"layers", "Model"}, module


def python_env(tmp: Path, backend: str = "jax"):
    """Keras 3 on ``backend`` with a throwaway KERAS_HOME (never ~/.keras), importing
    kbench_models from this checkout."""
    return dict(
        os.environ,
        KERAS_BACKEND=backend,
        KERAS_HOME=str(tmp / "keras_home"),
        PYTHONPATH=str(environments.import_root(tmp / "pythonpath")),
    )


def test_importing_the_registry_does_not_import_keras(tmp_path):
    require_backends("jax")
    code = (
        "import sys, kbench_models; print([m for m in sys.modules if m.split('.')[0] == 'keras'])"
    )
    done = subprocess.run(
        [str(environments.interpreter_for("jax")), "-c", code],
        cwd=tmp_path,
        env=python_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_numpy_draws_stand_in_for_the_initializers_only_inside(keras_twin_files):
    """Inside ``numpy_draws`` (a parity run loading weights, a census) each of Keras'
    uniform, normal and truncated normal initializers draws from NumPy: the same shapes,
    not Keras' seeded values, uniform within its bounds; outside, before, after and after
    a build that raised inside, Keras' own draws, identical. Drawn in the session's Keras
    process of test_pytorch_twins (``keras_twin_files``, Keras 3 on torch; before: a JAX
    process of its own)."""
    require_backends("torch")
    drawn = load_numpy_draws(keras_twin_files)
    for before, after in zip(drawn["before"], drawn["after"]):
        assert np.array_equal(before, after)  # Keras' own draws again once outside
    assert [w.shape for w in drawn["inside"]] == [w.shape for w in drawn["before"]]
    for kernel in (0, 2, 4):  # glorot_uniform, he_normal (truncated), random_normal
        inside, keras_own = drawn["inside"][kernel], drawn["before"][kernel]
        assert not np.array_equal(inside, keras_own) and inside.std() > 0, kernel
    assert np.abs(drawn["inside"][0]).max() <= math.sqrt(6 / (6 + 5))  # Glorot's limit


# -- every backend and format builds every model ------------------------------------


@pytest.fixture(scope="module")
def probes():
    """{(backend, data format): report}: one probe process per backend builds every
    model spec in each of its formats (the first as the worker starts, the others
    switched to in the same process).

    As many at a time as there are cores, the slowest (keras-mxnet: shape inference over
    its unrolled LSTMs) first: more would only make their thread pools fight over the
    same cores.
    """
    runnable = environments.runnable_backends()
    selected = selected_backends()  # KBENCH_TEST_BACKENDS: the others' tests are skipped
    formats = {}
    for backend, data_format in PROBES:
        if runnable[backend] is None and (selected is None or backend in selected):
            formats.setdefault(backend, []).append(data_format)
    wanted = sorted(formats, key=lambda backend: backend != "mxnet")
    with ThreadPoolExecutor(max_workers=usable_cores()) as pool:
        futures = {
            backend: pool.submit(
                environments.probe,
                backend,
                SPECS,
                data_format=formats[backend][0],
                other_formats=formats[backend][1:],
            )  # fmt: skip
            for backend in wanted
        }
        reports = {backend: future.result() for backend, future in futures.items()}
    by_key = {}
    for backend, report in reports.items():
        for data_format in formats[backend]:
            found = (report.get("models_by_format") or {}).get(data_format)
            by_key[(backend, data_format)] = dict(
                report, models=found, first_format=formats[backend][0]
            )
    return by_key


@pytest.mark.slow
@pytest.mark.parametrize("backend,data_format", PROBES, ids=[f"{b}-{f}" for b, f in PROBES])
def test_every_model_builds_with_the_expected_parameter_count(probes, backend, data_format):
    require_backends(backend)
    report = probes[(backend, data_format)]
    assert report["ok"], report.get("error")
    models = report["models"]
    assert models is not None, f"the probe built nothing in {data_format}: {report}"
    assert set(models) == set(SPECS)
    first_format = report["first_format"]
    first = probes[(backend, first_format)]["models"]
    failures = {}
    for text in SPECS:
        built = models[text]
        if "same_as" in built:  # a sequence model, built once (test_sequence_models_read...)
            assert kbench_models.MODELS[parse(text)[0]].input_kind != "image", text
            assert data_format != first_format == built["same_as"], (text, built)
            built = first[text]
        if "error" in built:
            failures[text] = built["traceback"][-2000:]
            continue
        name, _, classes = parse(text)
        binary = kbench_models.MODELS[name].loss == "binary_crossentropy" and classes == 2
        got = (built["params"], built["output_shape"])
        want = (expected_params(text), [1 if binary else classes])
        if got != want:
            failures[text] = f"got (params, output shape) {got}, expected {want}"
    assert not failures, json.dumps(failures, indent=1)


@pytest.mark.slow
def test_resnet50_matches_keras_applications(keras_twin_files):
    """Under Keras 3: same layers (type by type, in order), weight shapes and count.

    Built on torch, where Keras 3 builds ResNet-50 fastest (JAX compiles every
    initializer); the architecture does not depend on the backend. Built in the
    session's channels_last Keras process of test_pytorch_twins (``keras_twin_files``).
    """
    require_backends("torch")
    result = load_keras(keras_twin_files, "channels_last", "resnet50")
    ours, ref = result["ours"], result["keras"]
    assert ours["params"] == ref["params"] == 25_636_712
    types = Counter(ref["layers"])
    assert (types["Conv2D"], types["BatchNormalization"], types["Dense"]) == (53, 53, 1)
    assert Counter(ours["layers"]) == types
    assert ours["layers"] == ref["layers"]
    assert ours["weights"] == ref["weights"]
