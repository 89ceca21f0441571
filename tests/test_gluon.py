"""The MXNet Gluon twins and the ``mxnet-gluon`` backend compute what Keras computes.

Gluon runs only in the MXNet environment (numpy<1.24, no Keras 3), so everything
that touches it is a subprocess there: one process (``gluon_reply``) for the parameter
census and the twins against Keras 3 on the odd shapes and random weights of
``test_pytorch_twins`` (outputs, Keras' count and weight penalty, a few SGD steps and
the output after them), imperative and hybridized; a real training run with and
without ``--hybridize``. (``kbench parity`` against TensorFlow is in test_parity,
beside the other backends, sharing their reference runs.) MXNet's OpenMP threads spin
when another process holds the cores, so the subprocesses here run on one thread.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import test_pytorch_twins as twin_cases
import yaml
from conftest import (
    ROOT,
    dump,
    fused_rnn_refused,
    require_backends,
    run_kbench,
    selected_backends,
)
from test_attention_models import expected_params as attention_params
from test_models import SPECS, expected_params

from kbench.cli.app import build_parser
from kbench.cli.arguments import settings_of
from kbench.results.config import RunConfig
from kbench.run import environments, weightfile
from kbench_models import MODELS

slow = pytest.mark.slow

BACKEND = "mxnet-gluon"
FORMAT = "channels_first"  # Gluon's only data format
# mlp and small_cnn, which test_models leaves to test_backends, by their formulas
EXTRA_SPECS = {"mlp:28x28x1:10": 101_770, "small_cnn:28x28x1:10": 203_434,
               "mlp:12x10x3:7": 12 * 10 * 3 * 128 + 128 + 128 * 7 + 7,
               "small_cnn:14x12x2:5": 3 * 3 * 2 * 64 + 64 + 3 * 3 * 64 * 32 + 32
                                      + 10 * 8 * 32 * 5 + 5}  # fmt: skip
# the models with attention, at their defaults and smaller (test_attention_models' formulas)
ATTENTION_SPECS = ("vit_tiny:32x32x3:10", "vit_tiny:16x12x3:5", "text_encoder:64:2",
                   "text_encoder:10:3", "decoder_lm:64:1000", "decoder_lm:12:37")  # fmt: skip

# The module's one MXNet process: the census of sys.argv[1] (model specs), then, where
# sys.argv[2:] names a folder and the cases, the twins' replay (TWIN_SCRIPT).
CENSUS_SCRIPT = r"""
import json, sys
from kbench_models import MODELS, gluon
counts = {}
for text in json.loads(sys.argv[1]):
    name, _, rest = text.partition(":")
    shape_text, _, classes = rest.partition(":")
    spec = MODELS[name]
    shape = tuple(int(d) for d in shape_text.split("x")) if shape_text else spec.input_shape
    if spec.input_kind == "image":
        shape = (shape[2], shape[0], shape[1])
    net = gluon.build(name, shape, int(classes) if classes else spec.num_classes)
    counts[text] = gluon.keras_param_count(net)
report = {}
"""

# Loads each case's Keras weights into the backend's model, imperative and hybridized,
# and replays the Keras side: outputs, then SGD steps through the backend's own
# train_step (its loss and penalty), then the inference output after them; and the
# same training from the weights nudged by test_pytorch_twins.NUDGE (with the distance
# from the float64 twin, the noise floor of this kernel path, as test_pytorch_twins
# measures its own).
TWIN_SCRIPT = r"""
from pathlib import Path
import numpy as np
from kbench.run import weightfile
from kbench.backends.base import Unsupported
from kbench.backends.mxnet_gluon import MXNetGluonBackend
from kbench_models import MODELS, gluon

folder, cases, trained, steps, learning_rate, nudge, seeds = (
    sys.argv[2], *map(json.loads, sys.argv[3:9]))


def nudged(weights, seed):
    rng = np.random.default_rng(seed)
    return [(kind, [(a * (1 + nudge * rng.standard_normal(a.shape))).astype(a.dtype)
                    for a in arrays]) for kind, arrays in weights]


for hybridize in (False, True):
    backend = MXNetGluonBackend(threads=1, switches={"hybridize": hybridize})
    backend.start("channels_first")
    for key, (name, shape, classes) in cases.items():
        weights, _ = weightfile.load(Path(folder) / f"{key}-weights.npz")
        data = np.load(Path(folder) / f"{key}-data.npz")
        x = data["x"]

        def load(arrays):
            net = backend.build(name, x.shape[1:], classes)
            backend.set_weights(net, arrays, "channels_first", "HWIO")
            return net

        def train(net):
            backend.compile(net, "sgd", learning_rate, MODELS[name].loss_for(classes))
            losses = [backend.train_step(net, x, data["y"]) for _ in range(steps)]
            return losses, backend.predict(net, x).tolist()

        try:
            net = load(weights)
        except Unsupported as err:  # Gluon's fused LSTM with MXNET_MKLDNN_ENABLED=0
            report[f"{key}:{'hybridized' if hybridize else 'imperative'}"] = {
                "unsupported": str(err)}
            continue
        found = {"output": backend.predict(net, x).tolist(),
                 "params": backend.count_params(net),
                 "penalty": float(gluon.regularization_loss(net).asscalar())}
        if key in trained:
            found["losses"], found["trained_output"] = train(net)
            found["nudged_outputs"] = [train(load(nudged(weights, seed)))[1]
                                       for seed in range(seeds)]
        report[f"{key}:{'hybridized' if hybridize else 'imperative'}"] = found
"""
REPLY = 'print(json.dumps({"census": counts, "twins": report}))\n'


def mxnet_env(tmp_path) -> dict:
    return dict(
        os.environ,
        PYTHONPATH=str(environments.import_root(tmp_path / "pythonpath")),
        OMP_NUM_THREADS="1",
    )


def run_mxnet(tmp_path, script: str, *args: str, timeout: float = 300) -> dict:
    done = subprocess.run(
        [str(environments.interpreter_for(BACKEND)), "-c", script, *args],
        cwd=tmp_path, env=mxnet_env(tmp_path), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_registered_for_the_mxnet_environment_and_nchw_only():
    from kbench.backends import BACKENDS

    spec = BACKENDS[BACKEND]
    assert spec.environment == "mxnet" and spec.data_formats == ("channels_first",)
    keras_json = json.loads((ROOT / "keras_configs" / f"{BACKEND}.json").read_text())
    assert keras_json["image_data_format"] == "channels_first"


def census_specs() -> dict:
    """{model spec: expected parameter count}: every model at its default and at other
    shapes and class counts (test_models' formulas, pinned there to the published counts)."""
    expected = {text: expected_params(text) for text in SPECS}
    expected.update(EXTRA_SPECS)
    for text in ATTENTION_SPECS:
        name, shape, classes = text.split(":")
        shape = tuple(int(d) for d in shape.split("x"))
        expected[text] = attention_params(name, shape, int(classes))
    return expected


def twins_wanted() -> bool:
    """Whether the twins' replay runs here: it needs the Keras side (torch) too."""
    selected = selected_backends()
    if selected not in (None, ["cross"]) and "torch" not in selected:
        return False
    try:
        environments.interpreter_for("torch")
    except environments.EnvironmentMissing:
        return False
    return True


@pytest.fixture(scope="module")
def gluon_reply(request, tmp_path_factory) -> dict:
    """The module's one MXNet process: {"census": {spec: count}, "twins": {case: replay}}
    (the twins' replay where :func:`twins_wanted`: Keras 3's side is test_pytorch_twins'
    channels_first results, ``keras_twin_files``)."""
    tmp = tmp_path_factory.mktemp("gluon_twins")
    script, args = CENSUS_SCRIPT, [json.dumps(sorted(census_specs()))]
    if twins_wanted():
        keras = twin_cases.load_keras(request.getfixturevalue("keras_twin_files"), FORMAT)
        for key, result in keras.items():
            # plain .npz: the MXNet environment's numpy cannot read numpy 2's pickles
            weightfile.save(tmp / f"{key}-weights.npz", result["weights"])
            np.savez(tmp / f"{key}-data.npz", x=result["x"], y=result.get("y", np.zeros(1)))
        cases = [twin_cases.CASES, twin_cases.TRAINED, twin_cases.STEPS,
                 twin_cases.LEARNING_RATE, twin_cases.NUDGE, twin_cases.NUDGE_SEEDS]  # fmt: skip
        script += TWIN_SCRIPT
        args += [str(tmp), *map(json.dumps, cases)]
    return run_mxnet(tmp, script + REPLY, *args)


@slow
def test_every_model_has_the_keras_parameter_count(request):
    """Every model at its default and at other shapes and class counts; builds only, no
    forward pass (in the module's one MXNet process, ``gluon_reply``)."""
    require_backends(BACKEND)
    expected = census_specs()
    # the models with attention too (test_attention_models compares their twins' outputs
    # with Keras')
    assert {text.partition(":")[0] for text in expected} == set(MODELS)
    counts = request.getfixturevalue("gluon_reply")["census"]
    assert set(counts) == set(expected)
    wrong = {text: (counts[text], want) for text, want in expected.items()
             if counts[text] != want}  # fmt: skip
    assert not wrong, f"(gluon, expected): {wrong}"


@pytest.fixture(scope="module")
def twin_report(request, keras_twin_files):
    """Keras 3 (test_pytorch_twins' results, channels_first) and the Gluon replay."""
    require_backends("torch", BACKEND)
    gluon = request.getfixturevalue("gluon_reply")["twins"]
    assert gluon, "the twins' replay did not run: twins_wanted() said no"
    return twin_cases.load_keras(keras_twin_files, FORMAT), gluon


@slow
@pytest.mark.parametrize("mode", ["imperative", "hybridized"])
def test_twins_reproduce_keras(twin_report, mode):
    keras, gluon = twin_report
    differences, failures = {}, {}
    for key, result in keras.items():
        found = gluon[f"{key}:{mode}"]
        if fused_rnn_refused(twin_cases.CASES[key][0], BACKEND):
            assert "MXNET_MKLDNN_ENABLED=0" in found["unsupported"], (key, found)
            continue
        assert "unsupported" not in found, (key, found["unsupported"])
        output = np.asarray(found["output"])
        assert output.shape == result["output"].shape, key
        differences[key] = float(np.abs(output - result["output"]).max())
        if differences[key] >= twin_cases.TOLERANCE:
            failures[key] = f"max |gluon - Keras| output {differences[key]:.2e}"
        if found["params"] != result["params"]:
            failures[key] = f"params {found['params']}, Keras count_params {result['params']}"
        if not np.isclose(found["penalty"], result["penalty"], rtol=1e-5, atol=1e-9):
            failures[key] = f"regularization_loss {found['penalty']}, Keras {result['penalty']}"
        if key in twin_cases.TRAINED:
            # the loss before each SGD step (penalty included), then the inference
            # output after them (BatchNormalization's moving statistics moved), held to
            # TOLERANCE or NOISE_FACTOR x the noise floor measured on this kernel path
            if not np.allclose(found["losses"], result["losses"], rtol=1e-4, atol=1e-5):
                failures[key] = f"losses {found['losses']}, Keras {result['losses']}"
            output = np.asarray(found["trained_output"], np.float64)
            trained = float(np.abs(output - result["trained_output"]).max())
            # Gluon's float32 path: its distance from the float64 (PyTorch) twin, which
            # test_pytorch_twins holds to Keras, and its moves under nudged weights
            exact = twin_cases.exact_trained_output(key, result, "channels_first")
            floor = twin_cases.noise_floor(output, [exact, *found["nudged_outputs"]])
            limit = max(twin_cases.TOLERANCE, twin_cases.NOISE_FACTOR * floor)
            differences[f"{key} after SGD"] = {"output": trained, "noise_floor": floor}
            if trained >= limit:
                failures[key] = (
                    f"output after SGD differs by {trained:.2e}; noise floor {floor:.2e}, "
                    f"limit {limit:.2e}"
                )
    print(f"max |gluon - Keras| ({mode}):", json.dumps(differences, indent=1))
    assert not failures, json.dumps(failures, indent=1)


def test_the_hybridize_flag_sets_the_switch():
    args = build_parser().parse_args(["run", "-b", BACKEND, "--hybridize"])
    assert settings_of(args)["hybridize"] is True
    assert RunConfig(backend=BACKEND, model="mlp", hybridize=True).hybridize is True


@slow
def test_training_run_records_the_hybridize_switch(home):
    """Hybridized, then imperative: a sweep whose two runs share one warm worker, the
    second's network left imperative (a per-run switch, put back between runs)."""
    require_backends(BACKEND)
    settings = {"backend": BACKEND, "model": "small_cnn", "dataset": "synthetic", "steps": 3,
                "warmup_steps": 1, "batch_size": 8, "train_samples": 32, "test_samples": 16,
                "threads": 1, "sample_interval_s": 0}  # fmt: skip
    sweep = {"name": "hybridize", "settings": settings,
             "groups": [{"name": "both", "matrix": {"hybridize": [True, False]}}]}  # fmt: skip
    path = home / "hybridize.yaml"
    path.write_text(yaml.safe_dump(sweep))
    completed = run_kbench(["sweep", str(path), "--warm", "--store", str(home / "out")], home,
                           home / "out")  # fmt: skip
    assert completed.returncode == 0, dump(completed)
    results = sorted(completed.results(), key=lambda r: r.started_at)
    assert [r.config["hybridize"] for r in results] == [True, False]
    assert [bool(r.metrics.get("warm_worker")) for r in results] == [False, True]  # one worker
    for result in results:
        hybridize = result.config["hybridize"]
        assert result.status == "ok", result.reason
        assert result.metrics["measured_steps"] == 3 and result.metrics["images_per_sec"] > 0
        assert result.model["params"] == 203_434
        assert result.model["flops"]["forward_per_sample"] == 2 * (
            3 * 3 * 1 * 64 * 26 * 26 + 3 * 3 * 64 * 32 * 24 * 24 + 24 * 24 * 32 * 10
        )
        framework = result.environment["framework"]
        assert framework["name"] == "mxnet" and framework["keras_version"] is None
        switch = framework["switches"]["hybridize"]
        assert switch["status"] == ("applied" if hybridize else "default")
        assert ("net.hybridize(" in switch["detail"]) is hybridize
        assert framework["switches"]["mixed_precision"]["detail"] == "float32 throughout"


@slow
@pytest.mark.own_processes("a setting read as a framework starts")
def test_fused_lstm_without_mkldnn_is_unsupported_before_it_runs(home):
    """MXNET_MKLDNN_ENABLED=0: Gluon's fused LSTM has no CPU path in MXNet 1.9 (its first
    forward pass fails inside MXNet), so the run is unsupported, saying why and how to
    fix it; the MLP trains on MXNet's own operators in the same warm worker."""
    require_backends(BACKEND)
    args = ["run", "-b", BACKEND, "-m", "mlp,lstm", "--warm", "--dataset", "synthetic",
            "--steps", "2", "--warmup-steps", "1", "--batch-size", "8", "--train-samples",
            "16", "--test-samples", "8", "--sample-interval", "0"]  # fmt: skip
    completed = run_kbench(args, home, env={"MXNET_MKLDNN_ENABLED": "0"})
    results = {r.config["model"]: r for r in completed.results()}
    assert results["mlp"].status == "ok", dump(completed)
    kernels = results["mlp"].environment["framework"]["cpu_kernels"]
    assert kernels["library"] == "MXNet's own operators" and kernels["MXNET_MKLDNN_ENABLED"] == "0"
    lstm = results["lstm"]
    assert lstm.status == "unsupported", dump(completed)
    assert "MXNET_MKLDNN_ENABLED=0 turns MKLDNN off" in lstm.reason
    assert "Unset MXNET_MKLDNN_ENABLED" in lstm.reason
    assert completed.returncode == 0  # unsupported here is not a failure
