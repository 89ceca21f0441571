"""The models with attention (vit_tiny, text_encoder, decoder_lm): their parameter counts
on every backend, keras-mxnet's build of the same definition, and their PyTorch twins.

One process per backend (Keras 3 on tensorflow, jax and torch; keras-mxnet) builds each
model at its registered size (the count only) and at a tiny size, where it draws the
weights from their shapes with a fixed seed (every backend gets the same numbers) and
saves the outputs on fixed inputs, with the inputs varied where a mask must hold: a
text_encoder whose padding token's embedding is replaced (nothing may change: id 0 is
kept out of attention and pooling) or one real token changed (its row must change);
a decoder_lm whose tokens from position FUTURE on are redrawn (the logits before it may
not change, those from it on must); and decoder_lm's greedy tokens after a prompt.
The twins load each process's weights and must reproduce its outputs and tokens. The
torch process builds vit_tiny in both data formats; keras-mxnet in channels_first, its
default.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, keep_out_unused, require_backends, selected_backends

import kbench_models
from kbench.measure.processes import usable_cores
from kbench.run import environments, weightfile
from kbench_models import generation

slow = pytest.mark.slow

BACKENDS = ("tensorflow", "jax", "torch", "mxnet")
TOLERANCE = 1e-4  # as test_pytorch_twins: float32 on both sides, compared in float64
EXACT = 1e-6  # what a masked input may move an output by (float32 rounding at most)
FUTURE = 7  # decoder_lm: the first redrawn position
PROMPT = 4  # decoder_lm: greedy generation after this many tokens, to the last position
BATCH = 4

# key -> (model, input shape, classes); images channels last
CASES = {
    "vit_tiny": ("vit_tiny", (16, 12, 3), 5),  # 4x3 patches
    "text_encoder": ("text_encoder", (10,), 3),
    "decoder_lm": ("decoder_lm", (12,), 37),  # a vocabulary of 37
}
DEFAULTS = kbench_models.ATTENTION_MODELS


# -- parameter counts, from the definitions (independently of the model code) --------


def block(dim=32, mlp=64):
    norms, attention = 2 * 2 * dim, 4 * (dim * dim + dim)
    return norms + attention + (dim * mlp + mlp) + (mlp * dim + dim)


def vit_params(height, width, channels, classes, dim=32, patch=4):
    patches = (height // patch) * (width // patch)
    embedding = patch * patch * channels * dim + dim + patches * dim
    return embedding + 2 * block() + 2 * dim + dim * classes + classes


def text_encoder_params(steps, classes, vocabulary=1_000, dim=32):
    return vocabulary * dim + steps * dim + 2 * block() + 2 * dim + dim * classes + classes


def decoder_lm_params(steps, vocabulary, dim=32):
    return vocabulary * dim + steps * dim + 2 * block() + 2 * dim + dim * vocabulary + vocabulary


def expected_params(name, shape, classes):
    if name == "vit_tiny":
        return vit_params(*shape, classes)
    if name == "text_encoder":
        return text_encoder_params(shape[0], classes)
    return decoder_lm_params(shape[0], classes)


def docstring_total(name: str) -> int:
    """The total a model's docstring works out by hand (its ``total ... = N`` line)."""
    path = ROOT / "models" / f"{kbench_models.MODELS[name].module}.py"
    text = ast.get_docstring(ast.parse(path.read_text()))
    found = re.findall(r"^\s*total\s+=\s+([\d,]+)\s*$", text, re.MULTILINE)
    assert len(found) == 1, f"{path.name}: expected one 'total = N' line"
    return int(found[0].replace(",", ""))


def test_registry_and_docstrings_agree_with_the_formulas():
    for name in DEFAULTS:
        spec = kbench_models.MODELS[name]
        count = expected_params(name, spec.input_shape, spec.num_classes)
        assert count == docstring_total(name), name
    assert [docstring_total(n) for n in DEFAULTS] == [21_098, 51_266, 84_200]
    lm = kbench_models.MODELS["decoder_lm"]
    assert (lm.target, lm.from_logits, lm.vocabulary_size) == ("next_token", True, 1_000)
    assert kbench_models.MODELS["text_encoder"].input_kind == "tokens"
    assert kbench_models.MODELS["vit_tiny"].target == "label"
    with pytest.raises(ValueError, match="target must be one of label, next_token"):
        kbench_models.ModelSpec("x", "x", "x", (4,), 2, target="shifted")
    with pytest.raises(ValueError, match="needs input_kind 'tokens' and num_classes equal"):
        kbench_models.ModelSpec(
            "x", "x", "x", (4,), 2, input_kind="tokens", vocabulary_size=5, target="next_token"
        )


# -- one process per backend ---------------------------------------------------------

# argv: cases (JSON), data formats (JSON), output folder. Runs under Keras 3 and under
# keras-mxnet's Keras 2.2.4 alike.
SCRIPT = r"""
import collections, collections.abc, json, sys
from pathlib import Path
collections.Iterable = collections.abc.Iterable  # Keras 2.2.4 on Python 3.10+
import numpy as np
import keras
import kbench_models
from kbench.run import weightfile

cases, formats, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
keras3 = hasattr(keras, "ops")
FUTURE, BATCH, PROMPT = map(int, sys.argv[4:7])


def set_format(data_format):
    if keras3:
        keras.config.set_image_data_format(data_format)
    else:
        keras.backend.set_image_data_format(data_format)


def draw(model, seed):
    # the same numbers on every backend: drawn from the weights' shapes in layer order
    # (a keras-mxnet channels_first kernel, OIHW, drawn as HWIO and transposed)
    rng = np.random.default_rng(seed)
    weights = []
    for layer in model.layers:
        kind, arrays = type(layer).__name__, layer.get_weights()
        if not arrays:
            continue
        drawn = []
        for index, a in enumerate(arrays):
            oihw = kind == "Conv2D" and a.ndim == 4 and a.shape[0] == layer.filters
            shape = (a.shape[2], a.shape[3], a.shape[1], a.shape[0]) if oihw else a.shape
            if kind in ("Embedding", "PositionEmbedding"):
                value = rng.normal(0, 0.5, shape)
            elif kind == "LayerNorm" and index == 0:
                value = rng.uniform(0.5, 1.5, shape)
            elif a.ndim == 1:
                value = rng.normal(0, 0.2, shape)
            else:
                value = rng.normal(0, 1 / np.sqrt(np.prod(shape[:-1])), shape)
            drawn.append((value.transpose(3, 2, 0, 1) if oihw else value).astype("float32"))
        layer.set_weights(drawn)
        weights.append((kind, drawn))
    return weights


def inputs(name, shape, classes, rng):
    if name == "vit_tiny":
        return {"x": rng.standard_normal((BATCH, *shape))}
    if name == "text_encoder":
        x = rng.integers(1, 1000, (BATCH, *shape))
        x[1, -4:] = 0  # trailing padding
        x[2, 3:5] = x[2, -1:] = 0  # padding inside and at the end
        x[3] = 0  # nothing but padding
        changed = x.copy()
        changed[0, 2] = changed[0, 2] % 999 + 1
        return {"x": x, "changed_real": changed}
    x = rng.integers(0, classes, (BATCH, *shape))
    future = x.copy()
    future[:, FUTURE:] = rng.integers(0, classes, future[:, FUTURE:].shape)
    return {"x": x, "future": future}


report, arrays = {}, {}
for data_format in formats:
    set_format(data_format)
    for key, (name, shape, classes) in cases.items():
        if name != "vit_tiny" and data_format != formats[0]:
            continue  # token models read no data format
        spec = kbench_models.MODELS[name]
        default_shape = spec.input_shape
        if name == "vit_tiny" and data_format == "channels_first":
            shape = (shape[2], shape[0], shape[1])
            default_shape = (default_shape[2], default_shape[0], default_shape[1])
        tag = f"{key}-{data_format}"
        defaults = kbench_models.build(name, default_shape, spec.num_classes)
        report[tag] = {"defaults": defaults.count_params()}
        model = kbench_models.build(name, tuple(shape), classes)
        weights = draw(model, 1234)
        weightfile.save(out / f"{tag}-weights.npz", weights)
        report[tag]["params"] = model.count_params()
        report[tag]["output_shape"] = [d for d in model.output_shape[1:]]
        feeds = inputs(name, cases[key][1], classes, np.random.default_rng(5))
        if name == "vit_tiny" and data_format == "channels_first":
            feeds = {k: v.transpose(0, 3, 1, 2) for k, v in feeds.items()}
        for variant, x in feeds.items():
            x = np.ascontiguousarray(x, dtype="float32")
            arrays[f"{tag}/{variant}/x"] = x
            arrays[f"{tag}/{variant}/y"] = model.predict(x, batch_size=BATCH, verbose=0)
        if name == "decoder_lm":
            from kbench_models.generation import greedy_generate

            def predict(window):
                return model.predict(window, batch_size=BATCH, verbose=0)

            prompt = arrays[f"{tag}/x/x"][:, :PROMPT]
            arrays[f"{tag}/greedy"] = greedy_generate(predict, prompt, shape[0] - PROMPT, shape[0])
        if name == "text_encoder":
            # another embedding for the padding id (row 0): nothing may change
            embedding = [l for l in model.layers if type(l).__name__ == "Embedding"][0]
            table = embedding.get_weights()[0].copy()
            table[0] = np.random.default_rng(9).normal(0, 3, table.shape[1])
            embedding.set_weights([table])
            x = arrays[f"{tag}/x/x"]
            arrays[f"{tag}/pad_embedding/y"] = model.predict(x, batch_size=BATCH, verbose=0)
if keras3 and keras.backend.backend() != "jax":  # --mixed-precision bfloat16 (jax: op by
    # op, eagerly, it takes 10-16 s here; it promotes mixed dtypes, as torch does)
    set_format(formats[0])
    keras.config.set_dtype_policy("mixed_bfloat16")
    for key, (name, shape, classes) in cases.items():
        tag = f"{key}-{formats[0]}"
        model = kbench_models.build(name, tuple(shape), classes)
        draw(model, 1234)
        x = arrays[f"{tag}/x/x"]
        y = np.asarray(keras.ops.convert_to_numpy(model(x)), np.float64)  # eager: no tracing
        norm = [l for l in model.layers if type(l).__name__ == "LayerNorm"][0]
        report[f"{tag}-bfloat16"] = {
            "finite": bool(np.isfinite(y).all()),
            "off": float(np.abs(y - arrays[f"{tag}/x/y"]).max() / np.abs(y).max()),
            "dtypes": [str(norm.gamma.dtype), str(norm.compute_dtype)],
        }
    keras.config.set_dtype_policy("float32")
np.savez(out / "outputs.npz", **arrays)
(out / "report.json").write_text(json.dumps(report))
"""


def formats_for(backend: str):
    if backend == "mxnet":
        return ["channels_first"]
    if backend == "torch":
        return ["channels_last", "channels_first"]
    return ["channels_last"]


def run_backend(backend: str, tmp: Path):
    """The script in ``backend``'s environment: (report, outputs, folder)."""
    out = tmp / backend
    out.mkdir(parents=True)
    home = out / "keras_home"
    home.mkdir()
    config = json.loads((ROOT / "keras_configs" / f"{backend}.json").read_text())
    config["image_data_format"] = formats_for(backend)[0]
    (home / "keras.json").write_text(json.dumps(config))
    env = dict(
        os.environ,
        KERAS_BACKEND=backend,
        KERAS_HOME=str(home),
        PYTHONPATH=str(environments.import_root(tmp / "pythonpath")),
        OMP_NUM_THREADS="1",
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    prefix = "" if backend == "mxnet" else keep_out_unused(backend)
    args = [json.dumps(CASES), json.dumps(formats_for(backend)), str(out)]
    extra = [str(FUTURE), str(BATCH), str(PROMPT)]
    done = subprocess.run(
        [str(environments.interpreter_for(backend)), "-c", prefix + SCRIPT, *args, *extra],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{backend}: {done.stderr[-4000:]}"
    with np.load(out / "outputs.npz") as archive:
        outputs = dict(archive)
    return json.loads((out / "report.json").read_text()), outputs, out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{backend: (report, outputs, folder)} for the backends this run has, two at a time
    (the slowest to start first)."""
    selected = selected_backends()
    if selected == ["cross"]:
        pytest.skip("each test here needs one backend alone; KBENCH_TEST_BACKENDS=cross")
    tmp = tmp_path_factory.mktemp("attention")
    runnable = environments.runnable_backends()
    wanted = [
        b
        for b in ("tensorflow", "mxnet", "torch", "jax")
        if runnable[b] is None and (selected is None or b in selected)
    ]
    with ThreadPoolExecutor(max_workers=max(1, min(2, usable_cores()))) as pool:
        futures = {b: pool.submit(run_backend, b, tmp) for b in wanted}
        return {b: f.result() for b, f in futures.items()}


def run_of(runs, backend):
    require_backends(backend)
    assert backend in runs, f"{backend} did not run"
    return runs[backend]


def tags(backend):
    for key, (name, _, _) in CASES.items():
        for data_format in formats_for(backend) if name == "vit_tiny" else formats_for(backend)[:1]:
            yield key, data_format, f"{key}-{data_format}"


@slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_counts_are_the_docstrings(runs, backend):
    report, outputs, _ = run_of(runs, backend)
    for key, _, tag in tags(backend):
        name, shape, classes = CASES[key]
        assert report[tag]["defaults"] == docstring_total(name), (backend, tag)
        assert report[tag]["params"] == expected_params(name, shape, classes), (backend, tag)
        want = [classes] if name != "decoder_lm" else [shape[0], classes]
        assert report[tag]["output_shape"] == want, (backend, tag)


@slow
@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_mixed_bfloat16_computes_the_float32_function(runs, backend):
    """Under ``mixed_bfloat16`` each model runs (TensorFlow adds only tensors of one dtype:
    the masks are cast to the scores') and stays within bfloat16's rounding of its float32
    outputs; LayerNorm keeps float32 weights and statistics, as Keras' does. Called
    eagerly (no tracing: about 1.6 s on tensorflow, 0.6 s on torch)."""
    report, _, _ = run_of(runs, backend)
    for key in CASES:
        found = report[f"{key}-{formats_for(backend)[0]}-bfloat16"]
        assert found["finite"] and found["off"] < 0.05, (key, found)
        assert found["dtypes"] == ["float32", "bfloat16"], (key, found)


def twin_outputs(folder: Path, tag: str, key: str, data_format: str, x: np.ndarray):
    import torch

    from kbench_models import pytorch as twins

    name, shape, classes = CASES[key]
    twin_shape = (shape[2], shape[0], shape[1]) if name == "vit_tiny" else shape
    twin = twins.build(name, twin_shape, classes)
    weights, _ = weightfile.load(folder / f"{tag}-weights.npz")
    twins.load_keras_weights(twin, weights, data_format)
    assert twins.keras_param_count(twin) == expected_params(name, shape, classes)
    if x.ndim == 4 and data_format == "channels_last":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    with torch.no_grad():
        return twin.eval()(torch.from_numpy(x)).numpy().astype("float64")


def distance(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


@slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_twins_reproduce_the_keras_outputs(runs, backend):
    """The torch twin, given a backend's weights, computes that backend's outputs (for
    keras-mxnet: the same definition computes the same function on Keras 2.2.4)."""
    pytest.importorskip("torch")
    _, outputs, folder = run_of(runs, backend)
    differences = {}
    for key, data_format, tag in tags(backend):
        variants = {
            k.split("/")[1] for k in outputs if k.startswith(f"{tag}/") and k.endswith("/x")
        }
        for variant in sorted(variants):
            expected = outputs[f"{tag}/{variant}/y"]
            got = twin_outputs(folder, tag, key, data_format, outputs[f"{tag}/{variant}/x"])
            assert got.shape == expected.shape, (tag, variant)
            assert expected.std(axis=0).max() > 1e-3, f"{tag}: outputs barely vary"
            differences[f"{tag}/{variant}"] = distance(got, expected)
    print(f"max |twin - Keras| ({backend}):", json.dumps(differences, indent=1))
    assert max(differences.values()) < TOLERANCE, differences


@slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_is_masked_out(runs, backend):
    """text_encoder: another embedding for id 0 changes nothing, on padded rows and on
    the row that is all padding; a real token changed changes its own row only."""
    _, outputs, _ = run_of(runs, backend)
    tag = f"text_encoder-{formats_for(backend)[0]}"
    y = outputs[f"{tag}/x/y"]
    assert distance(outputs[f"{tag}/pad_embedding/y"], y) < EXACT
    changed = np.abs(outputs[f"{tag}/changed_real/y"] - y).max(axis=1)
    assert changed[0] > 1e-3 and changed[1:].max() < EXACT, changed
    # the all-padding row: masked mean of nothing is zero, so the head sees its bias only
    assert distance(outputs[f"{tag}/x/y"][3], outputs[f"{tag}/pad_embedding/y"][3]) < EXACT


@slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_future_is_masked_out(runs, backend):
    """decoder_lm: the logits before position FUTURE do not see the redrawn tokens; every
    row's logits from FUTURE on do."""
    _, outputs, folder = run_of(runs, backend)
    tag = f"decoder_lm-{formats_for(backend)[0]}"
    y, future = outputs[f"{tag}/x/y"], outputs[f"{tag}/future/y"]
    x, x_future = outputs[f"{tag}/x/x"], outputs[f"{tag}/future/x"]
    assert np.array_equal(x[:, :FUTURE], x_future[:, :FUTURE])
    assert distance(y[:, :FUTURE], future[:, :FUTURE]) < EXACT
    moved = np.abs(y[:, FUTURE:] - future[:, FUTURE:]).max(axis=(1, 2))
    assert moved.min() > 1e-3, moved
    if backend == "torch":  # the twin masks alike
        pytest.importorskip("torch")
        twin_y = twin_outputs(folder, tag, "decoder_lm", "channels_last", x)
        twin_future = twin_outputs(folder, tag, "decoder_lm", "channels_last", x_future)
        assert distance(twin_y[:, :FUTURE], twin_future[:, :FUTURE]) < EXACT


def test_greedy_generation_reads_the_last_real_position():
    """A stand-in model whose logits at t point to (token at t) + 1: greedy generation
    counts on from each prompt's last token, and sees a window right-padded with 0."""
    vocabulary, steps = 11, 8
    seen = []

    def predict(window):
        seen.append(window.copy())
        return np.eye(vocabulary)[(window + 1) % vocabulary]

    prompt = np.array([[3, 4, 5], [9, 2, 7]])
    tokens = generation.greedy_generate(predict, prompt, 4, steps)
    assert tokens.tolist() == [[6, 7, 8, 9], [8, 9, 10, 0]]
    assert len(seen) == 4 and seen[0].shape == (2, steps)
    assert seen[0][:, 3:].max() == 0  # the tail padded with id 0
    with pytest.raises(ValueError, match="must fit the model's 8 positions"):
        generation.greedy_generate(predict, prompt, 6, steps)
    x, y = generation.next_token_pairs(np.arange(10).reshape(2, 5))
    assert x.tolist() == [[0, 1, 2, 3], [5, 6, 7, 8]] and y.tolist() == [[1, 2, 3, 4], [6, 7, 8, 9]]


@slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_tokens_agree_with_the_twin(runs, backend):
    """decoder_lm's greedy tokens from a backend's Keras model are the twin's, for the
    same weights and prompt."""
    pytest.importorskip("torch")
    _, outputs, folder = run_of(runs, backend)
    data_format = formats_for(backend)[0]
    tag = f"decoder_lm-{data_format}"
    steps = CASES["decoder_lm"][1][0]

    def predict(window):
        return twin_outputs(folder, tag, "decoder_lm", data_format, window.astype("float32"))

    prompt = outputs[f"{tag}/x/x"][:, :PROMPT]
    twin = generation.greedy_generate(predict, prompt, steps - PROMPT, steps)
    assert outputs[f"{tag}/greedy"].shape == (BATCH, steps - PROMPT)
    assert np.array_equal(twin, outputs[f"{tag}/greedy"]), (twin, outputs[f"{tag}/greedy"])


# argv: jobs (JSON: [weights path, data format, name, input shape, classes, inputs path,
# output path]). In the MXNet environment: each Gluon twin loads a Keras process's
# weights and predicts its inputs, imperative and then hybridized.
GLUON_SCRIPT = r"""
import json, sys
import mxnet as mx
import numpy as np
from kbench.run import weightfile
from kbench_models import gluon

for weights_path, data_format, name, shape, classes, x_path, out in json.loads(sys.argv[1]):
    net = gluon.build(name, tuple(shape), classes)
    weights, _ = weightfile.load(weights_path)
    gluon.load_keras_weights(net, weights, data_format)
    found = {"params": gluon.keras_param_count(net)}
    with np.load(x_path) as inputs:
        feeds = dict(inputs)
    for mode in ("imperative", "hybridized"):
        if mode == "hybridized":
            net.hybridize(static_alloc=True, static_shape=True)
        for variant, x in feeds.items():
            found[f"{mode}/{variant}"] = net(mx.nd.array(x)).asnumpy()
    np.savez(out, **{k: np.asarray(v) for k, v in found.items()})
"""
GLUON_TOLERANCE = 1e-5


@slow
def test_gluon_twins_reproduce_the_keras_outputs(runs, tmp_path):
    """The MXNet Gluon twins, given each Keras process's weights (Keras 3 on the backends
    this run has, and keras-mxnet), compute its outputs, imperative and hybridized, the
    padding and future variants included (one MXNet process for them all)."""
    require_backends("mxnet-gluon")
    if not runs:
        pytest.skip("no Keras backend in this run to compare with")
    jobs, expected = [], {}
    for backend, (_, outputs, folder) in sorted(runs.items()):
        for key, data_format, tag in tags(backend):
            name, shape, classes = CASES[key]
            feeds = {}
            for k in outputs:
                if k.startswith(f"{tag}/") and k.endswith("/x"):
                    x = outputs[k]
                    if x.ndim == 4 and data_format == "channels_last":
                        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
                    feeds[k.split("/")[1]] = x
                    expected[f"{backend}/{tag}/{k.split('/')[1]}"] = outputs[f"{k[:-2]}/y"]
            twin_shape = (shape[2], shape[0], shape[1]) if name == "vit_tiny" else shape
            np.savez(tmp_path / f"{backend}-{tag}-x.npz", **feeds)
            out = tmp_path / f"{backend}-{tag}-gluon.npz"
            jobs.append([str(folder / f"{tag}-weights.npz"), data_format, name, twin_shape,
                         classes, str(tmp_path / f"{backend}-{tag}-x.npz"), str(out)])  # fmt: skip
    env = dict(
        os.environ,
        PYTHONPATH=str(environments.import_root(tmp_path / "pythonpath")),
        OMP_NUM_THREADS="1",
    )
    done = subprocess.run(
        [str(environments.interpreter_for("mxnet-gluon")), "-c", GLUON_SCRIPT, json.dumps(jobs)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    differences = {}
    for job in jobs:
        backend, tag = Path(job[6]).name[: -len("-gluon.npz")].split("-", 1)
        name, shape, classes = CASES[tag.split("-")[0]]
        with np.load(job[6]) as archive:
            found = dict(archive)
        assert int(found["params"]) == expected_params(name, shape, classes), (backend, tag)
        for mode in ("imperative", "hybridized"):
            for key, want in expected.items():
                if key.startswith(f"{backend}/{tag}/"):
                    got = found[f"{mode}/{key.split('/')[-1]}"]
                    assert got.shape == want.shape, key
                    differences[f"{key} {mode}"] = distance(got, want)
    print("max |gluon twin - Keras|:", json.dumps(differences, indent=1))
    assert max(differences.values()) < GLUON_TOLERANCE, differences
