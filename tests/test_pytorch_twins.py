"""The PyTorch twins compute what the Keras models compute, once given their weights.

One Keras 3 process (on the torch backend, the fastest to build these models) builds
every model in each data format, gives it random weights (BatchNormalization
statistics and biases too, so that a layer loaded into the wrong place shows), and
saves its output on a seeded batch together with ``(layer class, get_weights())``
per weighted layer (in channels_last it also builds ResNet-50 and keras.applications'
for test_models, and last draws weights inside and outside kbench's ``numpy_draws`` for
it). The twins load those weights and must reproduce the outputs.
Shapes are small but keep every architecture whole, and are chosen to exercise the
odd cases: odd sizes into stride-2 "same" convolutions, odd sizes into "valid"
pooling, and Flatten over maps with more than one channel and pixel (Keras flattens
(height, width, channels) in both data formats, the twins (channels, height, width)).
A few models then take SGD steps on both sides, and the losses must track.

The Keras comparisons are marked slow one by one (not with a module ``pytestmark``)
so that the check that ``kbench_models`` imports without torch runs in the fast suite.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
from conftest import ROOT, keep_out_unused, require_backends

import kbench_models
from kbench.run import environments

slow = pytest.mark.slow

FORMATS = ("channels_last", "channels_first")
BATCH = 4
SEED = 1234
TOLERANCE = 1e-4  # on probabilities, float32 on both sides; compared in float64
# trained for a few SGD steps on both sides: BatchNormalization in training mode, the
# L2 penalty (resnet20), the LSTM's single bias, binary and softmax heads
TRAINED = ("mlp", "resnet20", "lstm", "lstm_softmax")
STEPS = 3
LEARNING_RATE = 0.005
KERAS_EPSILON = 1e-7  # keras.config.epsilon(): Keras clips probabilities to it
# After the SGD steps, float32 outputs can be far more sensitive than before them. For
# resnet20 at these shapes the float64 twin, trained from the same float32 weights,
# ends within 3e-6 of Keras' float32 output (the twins compute Keras' function), while
# float32 twins (PyTorch with any thread count, oneDNN on or off, and MXNet Gluon) end
# 1.06e-3 from both, and the same float32 twin from weights nudged by 1e-7 ends 5e-5 to
# 1.1e-3 from the float64 one. So the output after training is held to the larger of
# TOLERANCE and NOISE_FACTOR x its noise floor, measured here on each kernel path as
# kbench.studies.parity measures its own: the float32 path's distance from the float64
# twin, and its largest move when the Keras weights are nudged by NUDGE (relative).
NUDGE = 1e-7
NUDGE_SEEDS = 3
NOISE_FACTOR = 10.0

# key -> (model, shape (channels last for images), classes); every model at least once
CASES = {
    "mlp": ("mlp", (12, 10, 3), 10),
    "small_cnn": ("small_cnn", (14, 12, 2), 5),
    "mlp3": ("mlp3", (12, 10, 3), 7),
    "lenet5": ("lenet5", (22, 26, 1), 10),  # 22x26 -> pool 11x13 -> conv 9x11 -> pool 4x5
    "resnet20": ("resnet20", (66, 34, 3), 10),  # 66->33->17, 34->17->9: both paddings
    "resnet56": ("resnet56", (32, 32, 3), 10),
    "resnet18": ("resnet18", (18, 14, 3), 10),
    "resnet50": ("resnet50", (64, 64, 3), 10),
    "vgg16": ("vgg16", (32, 64, 3), 10),  # Flatten over 512x1x2
    "alexnet": ("alexnet", (96, 64, 3), 10),  # Flatten over 256x2x1
    "lstm": ("lstm", (20, 8), 2),
    "lstm_softmax": ("lstm", (12, 6), 5),
    "lstm_embedding": ("lstm_embedding", (30,), 2),
}

# Runs under Keras 3: argv = cases (JSON), batch, seed, output folder, training (JSON),
# data formats (JSON): each format in turn, from the seed as a fresh process starts, into
# a pickle named after it.
KERAS_SCRIPT = r"""
import json, pickle, sys
from pathlib import Path
import numpy as np
import keras
import kbench_models

cases, batch, seed, out_dir = json.loads(sys.argv[1]), *map(int, sys.argv[2:4]), sys.argv[4]
train, steps, learning_rate = json.loads(sys.argv[5])
formats = json.loads(sys.argv[6])


def randomize(kind, arrays, rng):
    # random biases and BN gamma/beta; Keras' kernels; BN statistics come later
    if kind == "BatchNormalization":
        gamma, beta, mean, variance = arrays
        return [rng.uniform(0.5, 1.5, gamma.shape), rng.normal(0, 0.2, beta.shape), mean, variance]
    return [rng.normal(0, 0.1, a.shape) if a.ndim == 1 else a for a in arrays]


def build_every_case(data_format):
    results = {}
    for key, (name, shape, classes) in cases.items():
        spec = kbench_models.MODELS[name]
        rng = np.random.default_rng(seed)
        if spec.input_kind == "image":
            x = rng.standard_normal((batch, *shape))
            if data_format == "channels_first":
                shape, x = (shape[2], shape[0], shape[1]), x.transpose(0, 3, 1, 2)
        elif spec.input_kind == "sequence":
            x = rng.standard_normal((batch, *shape))
        else:
            x = rng.integers(0, spec.vocabulary_size, (batch, *shape))
        x = np.ascontiguousarray(x, dtype="float32")
        model = kbench_models.build(name, tuple(shape), classes)
        for layer in model.layers:
            arrays = layer.get_weights()
            if arrays:
                arrays = randomize(type(layer).__name__, arrays, rng)
                layer.set_weights([a.astype("float32") for a in arrays])
        # BN moving statistics: this batch's (one training pass with momentum 0), perturbed,
        # so that activations keep their scale through deep stacks in inference mode
        norms = [layer for layer in model.layers if type(layer).__name__ == "BatchNormalization"]
        if norms:
            momenta = [layer.momentum for layer in norms]
            for layer in norms:
                layer.momentum = 0.0
            model(x, training=True)
            for layer, momentum in zip(norms, momenta):
                layer.momentum = momentum
                gamma, beta, mean, variance = layer.get_weights()
                mean = mean + rng.normal(0, 0.1, mean.shape) * np.sqrt(variance)
                variance = variance * rng.uniform(0.7, 1.4, variance.shape)
                layer.set_weights([gamma, beta, mean.astype("float32"), variance.astype("float32")])
        # shift and scale the classifier's logits to mean 0, std 1 over the batch (plus the
        # random bias): the outputs then vary instead of saturating or staying constant,
        # so a wrong layer upstream shows in them
        head = model.layers[-1]
        features = keras.Model(model.inputs, head.input)(x, training=False)
        features = keras.ops.convert_to_numpy(features)
        kernel, bias = head.get_weights()
        logits = features @ kernel
        scale = (logits - logits.mean(axis=0)).std()
        head.set_weights([kernel / scale, bias - logits.mean(axis=0) / scale])
        weights = [(type(l).__name__, l.get_weights()) for l in model.layers if l.get_weights()]
        output = keras.ops.convert_to_numpy(model(x, training=False))
        penalty = sum(float(keras.ops.convert_to_numpy(loss)) for loss in model.losses)
        results[key] = {"x": x, "output": output, "params": model.count_params(),
                        "penalty": penalty, "weights": weights}
        if key in train:
            # a few plain SGD steps in training mode: the loss before each, and the
            # inference output after them
            binary = spec.loss == "binary_crossentropy" and classes == 2
            if binary:
                y = rng.integers(0, 2, (batch, 1)).astype("float32")
            else:
                y = rng.integers(0, classes, batch)
            loss = "binary_crossentropy" if binary else "sparse_categorical_crossentropy"
            model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss=loss)
            losses = []
            for _ in range(steps):
                model.reset_metrics()
                losses.append(float(model.train_on_batch(x, y)))
            trained = keras.ops.convert_to_numpy(model(x, training=False))
            results[key].update(y=y, losses=losses, trained_output=trained)
    return results


def census(m):
    return {"params": m.count_params(), "layers": [type(l).__name__ for l in m.layers],
            "weights": [list(w.shape) for w in m.weights]}


for data_format in formats:
    keras.backend.clear_session()
    keras.config.set_image_data_format(data_format)
    keras.utils.set_random_seed(seed)  # the draws a fresh process would make
    results = build_every_case(data_format)
    # test_models' ResNet-50 check, in channels_last (before: a process of its own): our
    # ResNet-50 and keras.applications' layer by layer, weight shapes and count
    resnet50 = None
    if data_format == "channels_last":
        resnet50 = {"ours": census(kbench_models.build("resnet50", (224, 224, 3), 1000)),
                    "keras": census(keras.applications.ResNet50(weights=None))}
    with open(Path(out_dir) / f"{data_format}.pkl", "wb") as f:
        pickle.dump({"data_format": data_format, "results": results, "resnet50": resnet50}, f)

# test_models' check of kbench's numpy_draws (before: a JAX process of its own), after
# every case: three Dense layers' weights, seeded, before, inside, and after a build that
# raised inside
from kbench.backends.keras3 import numpy_draws


def dense_weights():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5),
                              keras.layers.Dense(4, kernel_initializer="he_normal"),
                              keras.layers.Dense(3, kernel_initializer="random_normal")])
    return [np.asarray(w) for w in model.get_weights()]


draws = {"before": dense_weights()}
with numpy_draws(keras):
    draws["inside"] = dense_weights()
try:
    with numpy_draws(keras):
        raise RuntimeError("a build that fails")
except RuntimeError:
    pass
draws["after"] = dense_weights()
with open(Path(out_dir) / "numpy_draws.pkl", "wb") as f:
    pickle.dump(draws, f)
"""


def import_path(tmp: Path) -> Path:
    """A PYTHONPATH entry that imports kbench_models from this checkout."""
    path = tmp / "pythonpath"
    path.mkdir(exist_ok=True)
    if not (path / "kbench_models").exists():
        (path / "kbench_models").symlink_to(ROOT / "models", target_is_directory=True)
    return path


def keras_env(tmp: Path, data_format: str):
    """Keras 3 on torch with a throwaway KERAS_HOME (never ~/.keras) holding a keras.json
    in ``data_format``, importing kbench_models from this checkout, one thread."""
    home = tmp / "keras_home"
    home.mkdir(parents=True)
    config = json.loads((ROOT / "keras_configs" / "torch.json").read_text())
    config["image_data_format"] = data_format
    (home / "keras.json").write_text(json.dumps(config))
    return dict(
        os.environ,
        KERAS_BACKEND="torch",
        KERAS_HOME=str(home),
        PYTHONPATH=str(import_path(tmp)),
        OMP_NUM_THREADS="1",
        TF_CPP_MIN_LOG_LEVEL="3",
    )


def run_keras(tmp: Path) -> Dict[str, Path]:
    """One Keras 3 process building every case in each data format (the first as it
    starts, from its keras.json; the other switched to, from the seed again):
    {data format: the pickle it wrote}. conftest's ``keras_twin_files`` runs this once
    per session; test_gluon replays the same."""
    require_backends("torch")
    done = subprocess.run(
        [
            str(environments.interpreter_for("torch")),
            "-c",
            keep_out_unused("torch") + KERAS_SCRIPT,
            json.dumps(CASES),
            str(BATCH),
            str(SEED),
            str(tmp),
            json.dumps([TRAINED, STEPS, LEARNING_RATE]),
            json.dumps(FORMATS),
        ],
        cwd=tmp,
        env=keras_env(tmp, FORMATS[0]),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return {data_format: tmp / f"{data_format}.pkl" for data_format in FORMATS}


def load_numpy_draws(files: Dict[str, Path]) -> Dict[str, list]:
    """test_models' numpy_draws check from ``keras_twin_files``' process: {"before",
    "inside", "after": three Dense layers' weights}."""
    with open(files[FORMATS[0]].with_name("numpy_draws.pkl"), "rb") as f:
        return pickle.load(f)


def load_keras(files: Dict[str, Path], data_format: str, part: str = "results") -> dict:
    """{case: Keras results} in ``data_format``, from ``keras_twin_files`` (``part``
    "resnet50": test_models' census of ResNet-50, ours and keras.applications')."""
    with open(files[data_format], "rb") as f:
        saved = pickle.load(f)
    assert saved["data_format"] == data_format
    return saved[part]


@pytest.fixture(scope="module")
def keras_runs(keras_twin_files):
    """{data format: {case: Keras results}}, loaded for this module only."""
    return {f: load_keras(keras_twin_files, f) for f in FORMATS}


def nchw(x: np.ndarray, data_format: str) -> np.ndarray:
    """The batch as the twins take it: NCHW, contiguous, as torch-native feeds it (a
    transposed view would run torch's channels_last kernels, whose float32
    BatchNormalization statistics are less precise)."""
    if x.ndim == 4 and data_format == "channels_last":
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x


def nudged(weights, seed: int):
    """Keras ``(layer class, arrays)`` with every array scaled by 1 + NUDGE x N(0, 1)."""
    rng = np.random.default_rng(seed)
    return [
        (kind, [(a * (1 + NUDGE * rng.standard_normal(a.shape))).astype(a.dtype) for a in arrays])
        for kind, arrays in weights
    ]


def noise_floor(trained: np.ndarray, others) -> float:
    """The largest distance of ``trained`` from ``others``: the same training in float64,
    or from weights nudged by NUDGE."""
    return float(max(np.abs(np.asarray(o, np.float64) - trained).max() for o in others))


def twin_shape(key: str):
    name, shape, _ = CASES[key]
    if kbench_models.MODELS[name].input_kind == "image":
        return (shape[2], shape[0], shape[1])
    return shape


def twin_for(key: str, keras_result: dict, data_format: str):
    from kbench_models import pytorch as twins

    name, _, classes = CASES[key]
    twin = twins.build(name, twin_shape(key), classes)
    twins.load_keras_weights(twin, keras_result["weights"], data_format)
    return twin.eval()


def test_cases_cover_every_model():
    # the models with attention: their twins are checked in test_attention_models
    covered = {name for name, _, _ in CASES.values()} | set(kbench_models.ATTENTION_MODELS)
    assert covered == set(kbench_models.MODELS)


def test_registry_imports_without_torch(tmp_path):
    code = "import sys, kbench_models; print(sorted(m for m in sys.modules if 'torch' in m))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=dict(
            os.environ,
            KERAS_HOME=str(tmp_path / "keras_home"),
            PYTHONPATH=str(import_path(tmp_path)),
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@slow
@pytest.mark.parametrize("data_format", FORMATS)
def test_twins_reproduce_keras_outputs(keras_runs, data_format):
    import torch

    from kbench_models import pytorch as twins

    differences, failures = {}, {}
    for key in CASES:
        keras_result = keras_runs[data_format][key]
        twin = twin_for(key, keras_result, data_format)
        with torch.no_grad():
            output = twin(torch.from_numpy(nchw(keras_result["x"], data_format))).numpy()
        expected = keras_result["output"]
        assert output.shape == expected.shape, key
        differences[key] = float(np.abs(output.astype("float64") - expected).max())
        # the check means something only if the outputs vary across the batch
        assert expected.std(axis=0).max() > 1e-3, f"{key}: Keras outputs barely vary"
        if differences[key] >= TOLERANCE:
            failures[key] = differences[key]
        count = twins.keras_param_count(twin)
        if count != keras_result["params"]:
            failures[key] = (
                f"keras_param_count {count}, Keras count_params {keras_result['params']}"
            )
        penalty = float(twins.regularization_loss(twin).detach())
        if not np.isclose(penalty, keras_result["penalty"], rtol=1e-5, atol=1e-9):
            failures[key] = f"regularization_loss {penalty}, Keras losses {keras_result['penalty']}"
    print(f"max |twin - Keras| ({data_format}):", json.dumps(differences, indent=1))
    assert not failures, json.dumps(failures, indent=1)


@slow
def test_loading_refuses_mismatched_weights(keras_runs):
    import torch

    from kbench_models import pytorch as twins

    result = keras_runs["channels_last"]["lenet5"]
    twin = twins.build("lenet5", twin_shape("lenet5"), CASES["lenet5"][2])
    before = {k: v.clone() for k, v in twin.state_dict().items()}

    def refused(weights, match, data_format="channels_last"):
        with pytest.raises(ValueError, match=match):
            twins.load_keras_weights(twin, weights, data_format)

    weights = [(kind, list(arrays)) for kind, arrays in result["weights"]]
    # the first Dense kernel one row short: every earlier layer was fine
    bad = [(kind, list(arrays)) for kind, arrays in weights]
    bad[2][1][0] = bad[2][1][0][1:]
    refused(bad, r"Keras layer 2 \(Dense\) -> twin 'fc1': kernel has shape \(319, 120\)")
    # a Conv2D kernel transposed the wrong way
    bad = [(kind, list(arrays)) for kind, arrays in weights]
    bad[1][1][0] = bad[1][1][0].transpose(3, 2, 1, 0)
    refused(bad, r"Keras layer 1 \(Conv2D\) -> twin 'conv2': kernel has shape \(16, 6, 3, 3\)")
    refused(weights[::-1], r"Keras layer 0 \(Dense\) -> twin 'conv1': expected a Conv2D")
    refused(weights[:-1], "expected 5 Keras layers with weights")
    refused([(weights[0][0], weights[0][1][:1])] + weights[1:], "expected 2 weight arrays")
    refused(weights, "data_format must be one of channels_last, channels_first", "NHWC")
    # nothing was copied by the refused loads
    after = twin.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # and a good load still works
    twins.load_keras_weights(twin, weights, "channels_last")


def test_keras_mxnet_channels_first_kernels_load():
    """keras-mxnet keeps channels_first Conv2D kernels as (out, in, h, w): recognised by
    shape; HWIO kernels load the same way; an ambiguous shape needs kernel_layout."""
    torch = pytest.importorskip("torch")
    from kbench_models import pytorch as twins

    twin = twins.build("small_cnn", (2, 14, 12), 5)
    rng = np.random.default_rng(0)
    hwio = [rng.standard_normal((3, 3, 2, 64)), rng.standard_normal((3, 3, 64, 32))]
    dense = [rng.standard_normal((32 * 10 * 8, 5)), rng.standard_normal(5)]
    bias = [rng.standard_normal(64), rng.standard_normal(32)]

    def weights(kernels):
        return [("Conv2D", [k, b]) for k, b in zip(kernels, bias)] + [("Dense", dense)]

    twins.load_keras_weights(twin, weights(hwio), "channels_first")
    expected = twin.conv2.weight.detach().clone()
    twins.load_keras_weights(
        twin, weights([k.transpose(3, 2, 0, 1) for k in hwio]), "channels_first"
    )
    assert torch.equal(twin.conv2.weight, expected)
    with pytest.raises(ValueError, match=r"layer 0 .* expected \(3, 3, 2, 64\) \(HWIO\)$"):
        twins.load_keras_weights(
            twin, weights([k.transpose(3, 2, 0, 1) for k in hwio]), "channels_last"
        )
    square = twins.build("small_cnn", (3, 14, 12), 5)
    square.conv1 = type(square.conv1)(3, 3, 3)  # out == in == kernel size: ambiguous
    square.conv2 = type(square.conv2)(3, 32, 3)
    kernels = [rng.standard_normal((3, 3, 3, 3)), rng.standard_normal((3, 3, 3, 32))]
    loads = [("Conv2D", [kernels[0], bias[0][:3]]), ("Conv2D", [kernels[1], bias[1]])]
    loads.append(("Dense", dense))
    with pytest.raises(ValueError, match="pass kernel_layout='HWIO' or 'OIHW'"):
        twins.load_keras_weights(square, loads, "channels_first")
    twins.load_keras_weights(square, loads, "channels_first", kernel_layout="HWIO")
    twins.load_keras_weights(square, loads, "channels_last")


def keras_crossentropy(probabilities, y):
    """Keras' crossentropy on probabilities: clipped to [epsilon, 1 - epsilon]."""
    import torch

    p = probabilities.clamp(KERAS_EPSILON, 1 - KERAS_EPSILON)
    if probabilities.shape[-1] == 1:  # binary_crossentropy
        return -(y * p.log() + (1 - y) * (1 - p).log()).mean()
    p = probabilities / probabilities.sum(dim=-1, keepdim=True)
    p = p.clamp(KERAS_EPSILON, 1 - KERAS_EPSILON)
    return -p.log().gather(1, torch.as_tensor(y, dtype=torch.long)[:, None]).mean()


@slow
@pytest.mark.parametrize("data_format", FORMATS)
def test_sgd_training_tracks_keras(keras_runs, data_format):
    """Loss (with the weight penalty) before each SGD step, and the inference output
    after the steps (BatchNormalization moving statistics updated with momentum 0.99),
    within TOLERANCE or NOISE_FACTOR x the noise floor measured on this kernel path."""
    report = {}
    for key in TRAINED:
        result = keras_runs[data_format][key]
        losses, trained = train_twin(key, result, data_format, result["weights"])
        exact = exact_trained_output(key, result, data_format)
        drift = float(np.abs(trained.astype("float64") - result["trained_output"]).max())
        floor = noise_floor(
            trained,
            [exact]
            + [
                train_twin(key, result, data_format, nudged(result["weights"], seed))[1]
                for seed in range(NUDGE_SEEDS)
            ],
        )
        limit = max(TOLERANCE, NOISE_FACTOR * floor)
        report[key] = {
            "losses": [losses, result["losses"]],
            "output": drift,
            "float64_twin": float(np.abs(exact - result["trained_output"]).max()),
            "noise_floor": floor,
            "limit": limit,
        }
        assert np.allclose(losses, result["losses"], rtol=1e-4, atol=1e-5), (key, report[key])
        assert drift < limit, (key, report[key])
        # the same function: computed exactly (float64), the twin ends where Keras does
        assert report[key]["float64_twin"] < limit, (key, report[key])
        assert result["trained_output"].std(axis=0).max() > 1e-3, f"{key}: outputs saturated"
    print(f"SGD, twin vs Keras ({data_format}):", json.dumps(report, indent=1))


def exact_trained_output(key: str, result: dict, data_format: str) -> np.ndarray:
    """The output after the SGD steps computed in float64 from Keras' float32 weights
    and batch: the function both sides compute, without float32's rounding."""
    return train_twin(key, result, data_format, result["weights"], float64=True)[1]


def train_twin(key: str, result: dict, data_format: str, weights, float64: bool = False):
    """The twin from ``weights``, trained as the Keras side was: (losses, output after)."""
    import torch

    from kbench_models import pytorch as twins

    name, _, classes = CASES[key]
    twin = twins.build(name, twin_shape(key), classes)
    if float64:
        twin = twin.double()  # before loading, so that no weight passes through float32
    twins.load_keras_weights(twin, weights, data_format)
    twin.train()
    optimizer = torch.optim.SGD(twin.parameters(), lr=LEARNING_RATE)
    x = torch.from_numpy(nchw(result["x"], data_format))
    x = x.double() if float64 else x
    y = torch.from_numpy(result["y"])
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = keras_crossentropy(twin(x), y) + twins.regularization_loss(twin)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        return losses, twin.eval()(x).numpy()
