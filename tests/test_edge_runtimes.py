"""Inference runtimes as backends, for real on a tiny model: onnxruntime, openvino-ir and
litert run the Keras model exported by TensorFlow's worker (kbench.run.exports), and
Keras' own OpenVINO backend runs it with the exporter's weights; each run has its latency
percentiles, cold start, file size and its outputs against the Keras model's. The export
is cached (a second run loads the same file); a layer a format cannot hold makes that
runtime's run ``unsupported`` with the exporter's message; training is refused."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import dump, kbench_here, require_backends, run_kbench

RUNTIMES = ("onnxruntime", "openvino-ir", "litert", "openvino")
TINY = [
    "-m", "mlp", "--mode", "inference", "--batch-size", "1", "--dataset", "synthetic",
    "--train-samples", "64", "--test-samples", "64", "--duration", "0.5", "--threads", "1",
]  # fmt: skip
# tf.linalg.eigh: TensorFlow's SelfAdjointEigV2, which LiteRT's converter cannot hold
EIGH_MODEL = """
    import keras
    import tensorflow as tf


    class Eigenvalues(keras.layers.Layer):
        def call(self, x):
            return tf.linalg.eigh(tf.matmul(x, x, transpose_a=True))[0]


    def build(input_shape=(28, 28, 1), num_classes=10):
        inputs = keras.Input(input_shape)
        x = keras.layers.Reshape((input_shape[0], input_shape[1] * input_shape[2]))(inputs)
        outputs = keras.layers.Dense(num_classes, activation="softmax")(Eigenvalues()(x))
        return keras.Model(inputs, outputs)
"""


@pytest.fixture(scope="module")
def edge_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("edge") / "home"
    home.mkdir()
    return home


@pytest.fixture(scope="module")
def first_run(edge_home):
    require_backends("tensorflow", *RUNTIMES)
    done = run_kbench(["run", "-b", ",".join(RUNTIMES), *TINY], edge_home, timeout=600)
    assert done.returncode == 0, dump(done)
    return done


@pytest.mark.slow
def test_each_runtime_runs_the_export_and_agrees_with_keras(first_run):
    results = {r.config["backend"]: r for r in first_run.results()}
    assert set(results) == set(RUNTIMES)
    for name, result in results.items():
        assert result.ok and result.kind == "inference", (name, result.error)
        m = result.metrics
        latency = m["latency_ms"]
        assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"], (name, latency)
        assert m["images_per_sec"] > 0 and m["measured_batches"] > 0
        # cold start: the model built (the file loaded) and the first pass, apart
        assert m["cold_start_s"] == pytest.approx(m["build_time_s"] + m["first_step_s"])
        assert any(r["kind"] == "process_peak_rss" and r["bytes"] > 0 for r in m["memory"])
        export = m["export"]
        assert export["exported_by"] == "tensorflow" and export["reused"] is False
        assert export["file_bytes"] > 400_000  # mlp: 101,770 float32 weights
        assert "by tensorflow, Keras 3" in export["exporter"]
        assert Path(export["path"]).is_file()
        agreement = m["agreement"]
        assert agreement["samples"] == 32 and agreement["max_abs_diff"] < 1e-3, (name, agreement)
        # argmax differs only where Keras' two largest outputs are within 2 max |d|
        disagree = round((1 - agreement["argmax_agreement"]) * agreement["samples"])
        assert disagree <= agreement["near_ties"], (name, agreement)
        assert result.environment["framework"]["version"], name
        assert result.model["params"] == 101_770
    assert results["onnxruntime"].metrics["export"]["format"] == "onnx"
    assert (
        results["litert"].metrics["export"]["exporter"].startswith("model.export(format='litert')")
    )
    # --threads is each runtime's own thread setting
    threads = results["onnxruntime"].environment["framework"]["threads"]["framework"]
    assert threads == {"SessionOptions.intra_op_num_threads": 1}
    assert (
        "INFERENCE_NUM_THREADS"
        in results["openvino-ir"].environment["framework"]["threads"]["framework"]
    )
    table = first_run.stdout
    assert "inference runtimes" in table and "argmax agree" in table and "of 32" in table


@pytest.mark.slow
def test_a_second_run_loads_the_cached_export(first_run, edge_home):
    before = {r.config["backend"]: r.metrics["export"] for r in first_run.results()}
    path = Path(before["litert"]["path"])
    made = path.stat().st_mtime_ns
    store = edge_home / "again"
    done = run_kbench(["run", "-b", "litert", *TINY, "--store", str(store)], edge_home)
    assert done.returncode == 0, dump(done)
    (result,) = done.results()
    export = result.metrics["export"]
    assert export["reused"] is True and export["path"] == str(path)
    assert export["key"] == before["litert"]["key"] and path.stat().st_mtime_ns == made
    assert "tensorflow (cached)" in done.stdout


def test_training_on_an_inference_only_backend_is_refused(home):
    done = kbench_here(["run", "-b", "litert", "-m", "mlp", "--dataset", "synthetic"], home)
    assert done.returncode == 2, dump(done)
    assert "--mode: backend 'litert' runs inference only" in done.stderr
    assert "Add --mode inference" in done.stderr


@pytest.mark.slow
def test_a_layer_the_format_cannot_hold_is_that_runtimes_unsupported(tmp_path, home):
    require_backends("tensorflow", "litert")
    model = tmp_path / "eigh_model.py"
    model.write_text(textwrap.dedent(EIGH_MODEL))
    args = ["run", "-b", "tensorflow,litert", *TINY]
    args[args.index("mlp")] = f"{model}:build"
    done = run_kbench(args, home, timeout=600)
    results = {r.config["backend"]: r for r in done.results()}
    assert results["tensorflow"].ok, dump(done)
    litert = results["litert"]
    assert litert.status == "unsupported", dump(done)
    assert "model.export(format='litert') by tensorflow" in litert.reason
    assert "SelfAdjointEigV2" in litert.error["message"]


def test_a_changed_model_is_exported_again(tmp_path):
    """Fast: the cache key is the model's content, its input, the format, the precision of
    the file and the versions that wrote it."""
    from types import SimpleNamespace

    from kbench.results.config import RunConfig
    from kbench.run.exports import export_key

    model = tmp_path / "tiny.py"
    model.write_text(textwrap.dedent(EIGH_MODEL))
    data = SimpleNamespace(input_shape=(28, 28, 1), num_classes=10, synthetic=True, streamed=False)
    versions = {"keras": "3.15.1", "onnxruntime": "1.32.0"}

    def key(backend: str, model_name: str, precision="float32", versions=versions) -> str:
        config = RunConfig(backend=backend, model=model_name, mode="inference", precision=precision)
        return export_key(config, data, "channels_last", versions)

    first = key("onnxruntime", f"{model}:build")
    assert key("onnxruntime", f"{model}:build") == first
    assert key("litert", f"{model}:build") != first  # another format
    assert key("onnxruntime", "mlp") != key("onnxruntime", "small_cnn")
    # another precision, another file; a new Keras or runtime never reuses an old export
    assert key("onnxruntime", f"{model}:build", "int8") != first
    assert key("onnxruntime", f"{model}:build", versions=versions | {"keras": "3.16.0"}) != first
    newer_runtime = versions | {"onnxruntime": "1.33.0"}
    assert key("onnxruntime", f"{model}:build", versions=newer_runtime) != first
    # Keras' OpenVINO backend loads float32 weights at every precision (it quantizes them)
    assert key("openvino", "mlp", "int8") == key("openvino", "mlp")
    # OpenVINO's int8 IR: NNCF's version and the calibration inputs are in its key
    calibrated = dict(name="digits", sha256="a1", train_samples=1437)
    data.__dict__.update(calibrated)
    ir8 = key("openvino-ir", "mlp", "int8")
    assert key("openvino-ir", "mlp", "int8", versions=versions | {"nncf": "3.5.0"}) != ir8
    data.sha256 = "b2"  # other data: another calibration set, another file
    assert key("openvino-ir", "mlp", "int8") != ir8
    data.sha256 = "c3"  # the float32 IR takes no calibration: its key ignores the data
    float_ir = key("openvino-ir", "mlp")
    data.sha256 = "a1"
    assert key("openvino-ir", "mlp") == float_ir
    model.write_text(textwrap.dedent(EIGH_MODEL) + "\n# changed\n")
    assert key("onnxruntime", f"{model}:build") != first
