"""--precision float16|int8 on the inference runtimes, for real on a tiny model trained on a
real data set (scikit-learn's digits): each runtime's file quantized by the method its
result names (onnxruntime's quantize_dynamic, the TFLite converter, OpenVINO's
compress_to_fp16 and NNCF's nncf.quantize, Keras' model.quantize for Keras' OpenVINO
backend), smaller than float32,
its outputs against the float Keras model's and its top-1 accuracy on the test split
beside the float model's; a precision a runtime lacks is ``unsupported`` with why; a file
onnxruntime cannot load is ``failed`` with onnxruntime's message."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import dump, kbench_here, require_backends, run_kbench

TINY = [
    "-m", "mlp", "--mode", "inference", "--batch-size", "1", "--dataset", "digits",
    "--duration", "0.3", "--threads", "1",
]  # fmt: skip
MLP_DIGITS_PARAMS = 64 * 128 + 128 + 128 * 10 + 10  # mlp on 8x8 digits: 9,610


@pytest.fixture(scope="module")
def edge_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("precision") / "home"
    home.mkdir()
    return home


def _run(home: Path, backends: str, precision: str, store: str):
    args = ["run", "-b", backends, *TINY, "--precision", precision, "--store", str(home / store)]
    done = run_kbench(args, home, timeout=600)
    return done, {r.config["backend"]: r for r in done.results()}


@pytest.fixture(scope="module")
def int8_runs(edge_home):
    require_backends("tensorflow", "onnxruntime", "litert", "openvino-ir", "openvino")
    # float32 first, into the same store: the int8 run's table has its speed against it
    floats, _ = _run(edge_home, "onnxruntime", "float32", "int8")
    assert floats.returncode == 0, dump(floats)
    return _run(edge_home, "onnxruntime,litert,openvino-ir,openvino", "int8", "int8")


@pytest.mark.slow
def test_int8_files_are_quantized_by_the_named_method_and_keep_their_accuracy(int8_runs):
    done, results = int8_runs
    methods = {
        "onnxruntime": "onnxruntime.quantization.quantize_dynamic(weight_type=QInt8)",
        "litert": "dynamic-range quantization (optimizations=[tf.lite.Optimize.DEFAULT]",
        "openvino": "model.quantize('int8')",
        "openvino-ir": "nncf.quantize (NNCF 3.4.0 post-training quantization",
    }
    for name, method in methods.items():
        result = results[name]
        assert result.ok, (name, dump(done))
        m = result.metrics
        assert result.config["precision"] == "int8"
        assert m["quantization"]["precision"] == "int8" and method in m["quantization"]["method"]
        # the exporter trained the float model an epoch on digits: accuracy far above 1/10
        accuracy = m["accuracy"]
        assert accuracy["samples"] == 360 and accuracy["split"] == "test"
        assert accuracy["float_top1"] > 0.5, (name, accuracy)
        assert abs(accuracy["top1"] - accuracy["float_top1"]) < 0.05, (name, accuracy)
        assert m["export"]["trained"]["data"] == "digits" and m["export"]["trained"]["epochs"] == 1
        # quantized outputs stay near the float Keras model's, and are not identical to it
        agreement = m["agreement"]
        assert 0 < agreement["max_abs_diff"] < 0.05, (name, agreement)
        assert agreement["argmax_agreement"] >= 0.9, (name, agreement)
    assert (
        "Conv2D and the other layers stay float32"
        in results["openvino"].metrics["quantization"]["method"]
    )
    ir_method = results["openvino-ir"].metrics["quantization"]["method"]
    assert "calibrated on the run's first 300 training inputs" in ir_method
    # NNCF's version: in the export's key and in the runtime's environment
    assert results["openvino-ir"].metrics["export"]["versions"]["nncf"] == "3.4.0"
    assert results["openvino-ir"].environment["framework"]["quantizer"] == "nncf 3.4.0"
    # the int8 files: a quarter of float32's weights, and some
    for name in ("onnxruntime", "litert", "openvino-ir"):
        export = results[name].metrics["export"]
        weights = Path(export["path"]).with_suffix(".bin") if name == "openvino-ir" else None
        size = weights.stat().st_size if weights else export["file_bytes"]
        assert size < 4 * MLP_DIGITS_PARAMS * 0.6, (name, size)
        assert export["quantization"]["precision"] == "int8"
    # the IR's .xml beside its .bin: the pair below float32's weights alone (38,440 bytes)
    assert results["openvino-ir"].metrics["export"]["file_bytes"] < 4 * MLP_DIGITS_PARAMS
    # Keras' OpenVINO backend loads float32 weights and quantizes them in its worker
    assert results["openvino"].metrics["export"]["quantization"]["precision"] == "float32"
    table = done.stdout
    assert "top-1 vs float" in table and "vs float32" in table
    accuracy = results["onnxruntime"].metrics["accuracy"]
    assert f"{accuracy['top1']:.3f} vs {accuracy['float_top1']:.3f}" in table
    # beside the accuracy, the speed against the store's float32 run of the same runtime
    line = next(n for n in table.splitlines() if n.strip().startswith("onnxruntime int8: x"))
    assert "than onnxruntime float32 (p50 " in line and ", accuracy 0." in line, line


@pytest.mark.slow
def test_the_report_answers_the_edge_question_from_the_stored_figures(int8_runs, tmp_path):
    """The report's edge section: its verdict names the fastest runtime and precision at
    batch 1 as the stored p50s say, and a quantized row's speed is the stored p50s' ratio."""
    from kbench.results.edge import edge_groups
    from kbench.views.edge import ratio_text
    from kbench.views.report import write_report

    done, _ = int8_runs
    runs = [r for r in done.results() if r.ok]
    assert {r.config["precision"] for r in runs} == {"float32", "int8"}
    p50 = {(r.config["backend"], r.config["precision"]): r.metrics["latency_ms"]["p50"]
           for r in runs}  # fmt: skip
    fastest = min(p50, key=p50.get)
    (group,) = edge_groups(done.results())
    assert group.verdict.row.key[:2] == fastest
    onnx = next(row for row in group.rows if row.key[:2] == ("onnxruntime", "int8"))
    ratio = p50[("onnxruntime", "float32")] / p50[("onnxruntime", "int8")]
    assert onnx.against_float.ratio.median == pytest.approx(ratio)
    ir = next(row for row in group.rows if row.backend == "openvino-ir")
    assert ir.status == "ok" and ir.key[:2] == ("openvino-ir", "int8"), ir
    write_report(done.results(), tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert 'id="edge"' in page and "The edge question" in page
    said = f"{fastest[0]} {fastest[1]} is fastest at batch 1: {p50[fastest]:.2f} ms p50"
    assert said in page, page[page.index('id="edge"') :][:2000]
    assert f"<td>{ratio_text(onnx.against_float)}</td>" in page
    assert "<h3>Latency against accuracy: mlp on digits" in page


@pytest.mark.slow
def test_float16_where_a_runtime_has_it_and_unsupported_where_not(edge_home, int8_runs):
    require_backends("tensorflow", "onnxruntime", "litert", "openvino-ir")
    done, results = _run(edge_home, "onnxruntime,litert,openvino-ir,tensorflow", "float16", "f16")
    methods = {
        "onnxruntime": "convert_float_to_float16(keep_io_types=True)",
        "litert": "supported_types=[tf.float16]",
        "openvino-ir": "compress_to_fp16=True",
    }
    for name, method in methods.items():
        result = results[name]
        assert result.ok, (name, dump(done))
        m = result.metrics
        assert m["quantization"]["precision"] == "float16" and method in m["quantization"]["method"]
        size = m["export"]["file_bytes"]
        # float16 weights: about half of float32's 38,440 bytes, above the int8 file
        assert 2 * MLP_DIGITS_PARAMS <= size < 4 * MLP_DIGITS_PARAMS * 0.8, (name, size)
        assert m["agreement"]["max_abs_diff"] < 1e-2, (name, m["agreement"])
        assert abs(m["accuracy"]["top1"] - m["accuracy"]["float_top1"]) < 0.02, name
    int8_sizes = {n: r.metrics["export"]["file_bytes"] for n, r in int8_runs[1].items() if r.ok}
    assert results["onnxruntime"].metrics["export"]["file_bytes"] > int8_sizes["onnxruntime"]
    # a Keras model has no float16 quantization: unsupported, with the reason
    tf = results["tensorflow"]
    assert tf.status == "unsupported", dump(done)
    assert "model.quantize has no float16 mode" in tf.error["message"]


@pytest.mark.slow
def test_a_file_onnxruntime_cannot_load_is_failed_with_its_message(edge_home, int8_runs):
    """Not ``unsupported``: the export was written; the runtime could not load it."""
    path = Path(int8_runs[1]["onnxruntime"].metrics["export"]["path"])
    good = path.read_bytes()
    try:
        path.write_bytes(b"not an ONNX model" * 8)
        done, results = _run(edge_home, "onnxruntime", "int8", "broken")
    finally:
        path.write_bytes(good)
    result = results["onnxruntime"]
    assert result.status == "failed", dump(done)
    assert done.returncode == 1, dump(done)
    assert "onnxruntime" in result.error["traceback"]
    assert "protobuf" in result.error["message"].lower(), result.error["message"]


def test_precision_is_refused_for_training(home):
    done = kbench_here(
        ["run", "-b", "tensorflow", "-m", "mlp", "--dataset", "synthetic", "--precision", "int8"],
        home,
    )  # fmt: skip
    assert done.returncode == 2, dump(done)
    assert "--precision: --precision int8 quantizes a model for inference" in done.stderr
    assert "Add --mode inference" in done.stderr
