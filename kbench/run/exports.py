"""Exported models for the inference runtimes (onnxruntime, openvino-ir, litert, and the
weights Keras' OpenVINO backend loads): made once per model content and format, kept in
kbench's cache (``facts.cache_dir()/exports/<key>/``), and checked against Keras.

Parent side, :func:`export_for`: before a runtime's run, the export its task needs; a
cache miss starts a worker of the exporting backend (``BackendSpec.exported_by``) and
asks it to ``run`` a task whose ``export`` says ``make``: that worker builds the model
seeded as every backend builds it (the same weights as that backend's own runs), writes
the file with ``model.export(path, format=...)`` (the weights with ``save_weights`` for
Keras' OpenVINO backend), and keeps check inputs (the run's first test samples) with
the Keras model's outputs on them. A format that cannot hold the model fails the export
with the exporter's message: that runtime's run is ``unsupported`` with it, the others
run. The key is the model's content (a zoo model's module source, a user model's file
sha256 and function), input shape, classes, data format, seed and format.

Worker side: :func:`make` (the ``make`` step) and :func:`with_agreement` (after a
runtime's inference: its outputs on the check inputs against Keras', max |d| and argmax
agreement, and what was exported, by whom, and its file size).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

import numpy as np

import kbench_models
from kbench import datasets, facts
from kbench.backends import BACKENDS
from kbench.backends.base import Unsupported
from kbench.results.config import RunConfig
from kbench.results.jsonfile import read_json, write_json_atomic
from kbench.run import environments
from kbench.run.engine import Worker, WorkerGone
from kbench.run.protocol import WorkerTask

log = logging.getLogger(__name__)

# the file model.export writes per format (OpenVINO's IR: the .xml beside its .bin)
FILES = {
    "onnx": "model.onnx", "openvino": "model.xml", "litert": "model.tflite",
    "keras-weights": "model.weights.h5",
}  # fmt: skip
CHECK_SAMPLES = 32  # check inputs kept with each export
# real data: the exporter trains the model this long before exporting it (batch, epochs)
TRAIN_BATCH, TRAIN_EPOCHS = 64, 1
EVAL_BATCH = 250  # the batch of the accuracy passes over the test split
# what a format's quantizers need beside the runtime's packages (their versions: the key)
QUANTIZER_PACKAGES = {"openvino": ("nncf",)}
# OpenVINO's int8 (nncf.quantize) is calibrated on this many of the run's training inputs
CALIBRATION_SAMPLES = 300


def cache_root() -> Path:
    return facts.cache_dir() / "exports"


def model_content(model: str) -> Dict[str, Any]:
    """What a model's export depends on: a user model's file sha256 and function, a zoo
    model's module source (and the helpers every zoo model shares)."""
    spec = kbench_models.spec_for(model)
    if spec.is_user:
        return {"sha256": spec.sha256, "function": spec.function}
    folder = Path(kbench_models.__file__).resolve().parent
    sources = [folder / f"{spec.module}.py", folder / "_compat.py", folder / "_shapes.py"]
    digest = hashlib.sha256()
    for path in sources:
        if path.is_file():
            digest.update(path.read_bytes())
    return {"zoo": spec.name, "sha256": digest.hexdigest()}


def export_key(
    config: RunConfig, data: datasets.PreparedData, data_format: str, versions: Dict[str, Any]
) -> str:
    spec = BACKENDS[config.backend]
    about = {
        "format": spec.export_format, "exporter": spec.exported_by,
        "model": model_content(config.model), "input_shape": list(data.input_shape),
        "num_classes": data.num_classes, "data_format": data_format, "seed": config.seed,
        "precision": file_precision(config), "versions": versions,
        "trained": training(config, data),
    }  # fmt: skip
    if calibration(config, data) is not None:  # only then: other keys stay as they were
        about["calibration"] = calibration(config, data)
    return hashlib.sha256(json.dumps(about, sort_keys=True).encode()).hexdigest()[:24]


def file_precision(config: RunConfig) -> str:
    """The precision of the file ``config``'s runtime loads: Keras' OpenVINO backend loads
    float32 weights (its worker quantizes them, :mod:`kbench.run.inference`)."""
    return (
        "float32" if BACKENDS[config.backend].export_format == "keras-weights" else config.precision
    )


def training(config: RunConfig, data: datasets.PreparedData) -> Optional[Dict[str, Any]]:
    """How the exporter trains the model before exporting it, on real data (so that the
    accuracy of a quantized file against the float model's says something); synthetic
    data: None, the seeded weights as built."""
    if data.synthetic or data.streamed:
        return None
    return {
        "data": data.name, "sha256": data.sha256, "version": data.version,
        "train_samples": data.train_samples, "test_samples": data.test_samples,
        "epochs": TRAIN_EPOCHS, "batch_size": TRAIN_BATCH, "optimizer": config.optimizer,
        "learning_rate": config.learning_rate,
        "loss": kbench_models.spec_for(config.model, config.model_args).loss_for(data.num_classes),
    }  # fmt: skip


def calibration(config: RunConfig, data: datasets.PreparedData) -> Optional[Dict[str, Any]]:
    """The inputs a quantizer calibrates ``config``'s file on (OpenVINO's int8: the first
    :data:`CALIBRATION_SAMPLES` of the run's training inputs, synthetic or real); None
    where the file's quantizer takes no data."""
    if (BACKENDS[config.backend].export_format, file_precision(config)) != ("openvino", "int8"):
        return None
    return {
        "samples": min(CALIBRATION_SAMPLES, data.train_samples), "split": "train",
        "data": data.name, "sha256": data.sha256, "train_samples": data.train_samples,
    }  # fmt: skip


# what prints the versions of the distributions named on its command line, as JSON
VERSIONS_SCRIPT = """import importlib.metadata as m, json, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({name: version(name) for name in sys.argv[1:]}))"""


def exporter_versions(config: RunConfig) -> Dict[str, Optional[str]]:
    """The versions that make ``config``'s file: Keras, the exporter's framework, the
    runtime's packages and the quantizer's, as the exporter's interpreter has them (a new
    one never reuses an old export)."""
    spec = BACKENDS[config.backend]
    names = ("keras", *BACKENDS[spec.exported_by].packages, *spec.packages)
    names += QUANTIZER_PACKAGES.get(spec.export_format, ())
    interpreter = environments.interpreter_for(spec.exported_by)
    return _versions(str(interpreter), tuple(dict.fromkeys(names)))


@functools.cache
def _versions(interpreter: str, names: Tuple[str, ...]) -> Dict[str, Optional[str]]:
    done = subprocess.run(
        [interpreter, "-c", VERSIONS_SCRIPT, *names], capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass
class SessionExports:
    """A session's runs (the runtimes among them have their exports made together), the
    exports it made (a later run of one says ``reused`` False too) and those that failed,
    by key: each is tried once."""

    along: List[RunConfig] = field(default_factory=list)
    made: Set[str] = field(default_factory=set)
    failures: Dict[str, Dict[str, Any]] = field(default_factory=dict)


def export_for(
    config: RunConfig, data: datasets.PreparedData, session_dir: Path, python_path: Path,
    session: Optional[SessionExports] = None,
) -> Dict[str, Any]:  # fmt: skip
    """The export ``config``'s runtime runs (its facts, with ``path``; ``reused`` says
    whether the cache had it); where it failed, ``error`` and ``status`` instead, which
    the runtime's worker answers with. A miss starts one exporter worker for it and for
    the exports of ``along`` (the command's other runs) that the cache lacks for the same
    model and data (``session``: the runs, and what it made and what failed)."""
    session = session or SessionExports()
    spec = BACKENDS[config.backend]
    data_format = environments.keras_config(spec.exported_by, config.data_format)
    data_format = data_format["image_data_format"]
    wanted = {
        export_key(c, data, data_format, exporter_versions(c)): c
        for c in [*(c for c in session.along if _same_export(c, config)), config]
    }
    key = export_key(config, data, data_format, exporter_versions(config))
    final = cache_root() / key
    if (final / "export.json").is_file():
        return cached(final, spec.export_format, reused=key not in session.made)
    if key in session.failures:
        return session.failures[key]
    missing = [
        k for k in wanted
        if k not in session.failures and not (cache_root() / k / "export.json").is_file()
    ]  # fmt: skip
    final.parent.mkdir(parents=True, exist_ok=True)
    works = {k: Path(tempfile.mkdtemp(prefix=f".{k}-", dir=final.parent)) for k in missing}
    try:
        asked = [
            {"make": BACKENDS[wanted[k].backend].export_format, "key": k, "dir": str(work),
             "precision": file_precision(wanted[k]),
             "file": FILES[BACKENDS[wanted[k].backend].export_format]}
            for k, work in works.items()
        ]  # fmt: skip
        export = {"make": asked, "train": training(config, data)}
        reply = _run_exporter(config, data, data_format, export, session_dir, python_path)
        for k, work in works.items():
            _keep(reply, k, work, wanted[k], session)
    finally:
        for work in works.values():
            shutil.rmtree(work, ignore_errors=True)
    return session.failures.get(key) or cached(final, spec.export_format, reused=False)


def _keep(
    reply: Dict[str, Any], key: str, work: Path, config: RunConfig, session: SessionExports
) -> None:
    """The export ``key`` the exporter wrote into ``work``, moved into the cache; or why it
    could not be made, in ``session.failures``."""
    made = (reply.get("metrics") or {}).get("made", {}).get(key)
    if reply["status"] != "ok" or made is None or "error" in made:
        failed = made if made and "error" in made else reply
        session.failures[key] = {"status": failed["status"], "error": failed["error"]}
        return
    about = {"key": key, "versions": exporter_versions(config), "made_at": time.time()}
    write_json_atomic(work / "export.json", made | about)
    session.made.add(key)
    try:
        os.rename(work, cache_root() / key)
    except OSError:  # another kbench made it meanwhile: take that one
        pass
    log.info("%s: exported %s (%s) by %s in %.1f s (%d bytes)", config.label(), made["format"],
             made["quantization"]["precision"], made["exported_by"], made["export_s"],
             made["file_bytes"])  # fmt: skip


def _same_export(other: RunConfig, config: RunConfig) -> bool:
    """Whether ``other`` runs an export of the same model, data and training as ``config``,
    by the same exporter."""
    spec, theirs = BACKENDS[config.backend], BACKENDS[other.backend]
    same = (
        "model", "seed", "data_format", "dataset", "data_dir", "input_shape", "num_classes",
        "image_size", "train_samples", "test_samples", "optimizer", "learning_rate",
    )  # fmt: skip
    return (
        theirs.export_format is not None
        and theirs.exported_by == spec.exported_by
        and all(getattr(other, name) == getattr(config, name) for name in same)
    )


def cached(folder: Path, fmt: str, reused: bool) -> Dict[str, Any]:
    """The export in ``folder``: its facts, its file's path, and whether it was reused."""
    return read_json(folder / "export.json") | {"path": str(folder / FILES[fmt]), "reused": reused}


def _run_exporter(
    config: RunConfig, data: datasets.PreparedData, data_format: str, export: Dict[str, Any],
    session_dir: Path, python_path: Path,
) -> Dict[str, Any]:  # fmt: skip
    """A worker of the exporting backend, asked to make ``export`` (``make``: the files,
    ``train``: the training before, or None); its reply."""
    spec = BACKENDS[config.backend]
    exporter = dataclasses.replace(config, backend=spec.exported_by, repeat=0)
    run_dir = Path(tempfile.mkdtemp(prefix="export-", dir=session_dir))
    env, _ = environments.process_environment(
        exporter.backend, run_dir, python_path, exporter.threads_in_force, data_format,
        exporter.device,
    )  # fmt: skip
    task = WorkerTask(
        config=exporter.to_dict() | {"threads": exporter.threads_in_force},
        data=data.to_dict(), order_path="", data_format=data_format, started_at=time.time(),
        export=export,
    )  # fmt: skip
    write_json_atomic(run_dir / "run.json", task.to_dict())
    interpreter = environments.interpreter_for(exporter.backend)
    worker = Worker.launch(
        [str(interpreter), "-m", "kbench.run.worker", str(run_dir / "run.json")], env, run_dir,
        run_dir / "export.log", name=f"{exporter.backend} export", channel=True,
    )  # fmt: skip
    try:
        answer = worker.request(
            {"do": "run", "task": str(run_dir / "run.json")}, "the export", config.timeout_s,
            late=f"the exporter ran past the {config.timeout_s:g} s timeout and was killed",
            died="the exporter {how} without reporting a result",
        )  # fmt: skip
        return answer["reply"]
    except WorkerGone as gone:
        return {"status": gone.verdict.status, "error": gone.verdict.error or {
            "type": "ExportFailed", "message": gone.verdict.reason}}  # fmt: skip
    finally:
        worker.close()


# ------------------------------------------------------------------------- worker side


def make(backend: Any, model: Any, arrays: Dict[str, np.ndarray], export: Dict[str, Any]) -> Dict:
    """The ``make`` step in the exporter's worker: ``model`` trained as ``export["train"]``
    says (real data; None: as built), then written in each format and precision asked
    (``export["make"]``), with check inputs and the Keras outputs beside each; the reply's
    metrics: ``made``, each export's facts by key, or why it could not be made (a format
    that cannot hold the model, a quantizer that is not installed: ``unsupported``, with
    the exporter's message; a quantizer that failed: ``failed``)."""
    from kbench.run.inference import _fixed_batch

    trained = _train(model, backend, arrays, export.get("train"))
    checks = _fixed_batch(arrays, CHECK_SAMPLES)
    outputs = np.asarray(backend.predict(model, checks))  # and a model export can trace
    accuracy = None if trained is None else top1(backend, model, arrays)
    made: Dict[str, Any] = {}
    for asked in export["make"]:
        try:
            facts = _export_one(backend, model, asked, arrays)
        except Exception as err:  # noqa: BLE001 - said in that runtime's result
            status = "unsupported" if isinstance(err, Unsupported) else "failed"
            error = {"type": type(err).__name__, "message": str(err)}
            made[asked["key"]] = {"status": status, "error": error}
            continue
        made[asked["key"]] = facts | {"trained": trained, "keras_accuracy": accuracy}
        np.save(Path(asked["dir"]) / "check_inputs.npy", checks)
        np.save(Path(asked["dir"]) / "keras_outputs.npy", outputs)
    return {"made": made}


def _train(model: Any, backend: Any, arrays: Dict[str, np.ndarray], train: Any) -> Any:
    """``model`` fitted as ``train`` says (the exporter's epoch on real data); its facts."""
    if train is None:
        return None
    backend.compile(model, train["optimizer"], train["learning_rate"], train["loss"])
    started = time.perf_counter()
    history = model.fit(
        arrays["x_train"], arrays["y_train"], batch_size=train["batch_size"],
        epochs=train["epochs"], shuffle=True, verbose=0,
    )  # fmt: skip
    return train | {
        "fit_s": time.perf_counter() - started,
        "final_loss": history.history["loss"][-1],
    }


def top1(backend: Any, model: Any, arrays: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """Top-1 accuracy of ``model`` on the test split, in batches of :data:`EVAL_BATCH`."""
    x, y = arrays["x_test"], arrays["y_test"]
    labels = np.argmax(y, axis=-1) if y.ndim > 1 and y.shape[-1] > 1 else y.reshape(-1)
    predicted = []
    for i in range(0, len(x), EVAL_BATCH):
        out = np.asarray(backend.predict(model, np.ascontiguousarray(x[i : i + EVAL_BATCH])))
        out = out.reshape(len(out), -1)
        predicted.append(np.argmax(out, axis=-1) if out.shape[-1] > 1 else out[:, 0] > 0.5)
    correct = np.concatenate(predicted).astype(labels.dtype) == labels
    return {"top1": float(np.mean(correct)), "samples": int(len(x)), "split": "test"}


def _export_one(
    backend: Any, model: Any, asked: Dict[str, str], arrays: Dict[str, np.ndarray]
) -> Dict[str, Any]:
    """``model`` written in one format at one precision; its facts. ONNX and OpenVINO's IR
    are exported in float32 and quantized from that file (OpenVINO's int8 calibrated on
    the run's training inputs, ``arrays``); LiteRT by its converter."""
    folder, fmt, precision = Path(asked["dir"]), asked["make"], asked["precision"]
    path = folder / asked["file"]
    how = "model.save_weights" if fmt == "keras-weights" else f"model.export(format={fmt!r})"
    keras_version = backend.keras.__version__
    direct = fmt in ("keras-weights", "litert") or precision == "float32"
    written = path if direct else folder / f"float32{path.suffix}"
    options = litert_options(precision) if fmt == "litert" else {}
    started = time.perf_counter()
    try:
        if fmt == "keras-weights":
            model.save_weights(str(path))
        else:
            model.export(str(written), format=fmt, verbose=False, **options)
    except Exception as err:  # a model the format cannot hold: the runtime's run says why
        raise Unsupported(
            f"{how} by {backend.name} (Keras {keras_version}) could not export "
            f"this model: {type(err).__name__}: {err}"
        ) from err
    method = FLOAT32 if precision == "float32" else LITERT_METHODS.get(precision)
    if not direct:
        method = QUANTIZERS[fmt, precision](written, path, arrays)
        for plain in folder.glob("float32.*"):
            plain.unlink()
    export_s = time.perf_counter() - started
    files = [p for p in folder.iterdir() if p.name.startswith("model.")]
    return {
        "format": fmt, "exporter": f"{how} by {backend.name}, Keras {keras_version}",
        "exported_by": backend.name, "keras_version": keras_version,
        "exporter_framework": {k: backend.framework_info().get(k) for k in ("name", "version")},
        "file": asked["file"], "file_bytes": sum(p.stat().st_size for p in files),
        "export_s": export_s, "quantization": {"precision": precision, "method": method},
        "model": {
            "params": backend.count_params(model), "output_shape": backend.output_shape(model),
            "flops": backend.flops(model),
        },
    }  # fmt: skip


# ------------------------------------------------------------- precisions, per format

FLOAT32 = "none: float32, as exported"
LITERT_METHODS = {
    "int8": "TFLite converter post-training dynamic-range quantization (optimizations="
    "[tf.lite.Optimize.DEFAULT], through model.export(format='litert')): weights int8, "
    "activations float32, quantized per call by LiteRT's hybrid kernels",
    "float16": "TFLite converter post-training float16 quantization (optimizations="
    "[tf.lite.Optimize.DEFAULT], target_spec.supported_types=[tf.float16]): weights stored "
    "in float16, dequantized to float32 on the CPU",
}


def litert_options(precision: str) -> Dict[str, Any]:
    """What ``model.export(format="litert")`` hands the TFLite converter for ``precision``."""
    if precision == "float32":
        return {}
    import tensorflow as tf

    options: Dict[str, Any] = {"optimizations": [tf.lite.Optimize.DEFAULT]}
    if precision == "float16":
        options["target_spec"] = {"supported_types": [tf.float16]}
    return options


def _onnx_int8(plain: Path, path: Path, arrays: Dict[str, np.ndarray]) -> str:
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as err:
        raise Unsupported(f"int8 ONNX needs onnxruntime.quantization: {err}") from err
    quantize_dynamic(str(plain), str(path), weight_type=QuantType.QInt8)
    return (
        "onnxruntime.quantization.quantize_dynamic(weight_type=QInt8) on the exported ONNX: "
        "weights int8, activations quantized per call (dynamic)"
    )


def _onnx_float16(plain: Path, path: Path, arrays: Dict[str, np.ndarray]) -> str:
    try:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16
    except ImportError as err:
        raise Unsupported(
            "float16 ONNX needs a float16 converter (onnxruntime.transformers.float16, or "
            f"onnxconverter-common); this environment has none: {err}"
        ) from err
    onnx.save(convert_float_to_float16(onnx.load(str(plain)), keep_io_types=True), str(path))
    return (
        "onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True) on "
        "the exported ONNX: weights and operators float16, inputs and outputs float32"
    )


def _openvino_float16(plain: Path, path: Path, arrays: Dict[str, np.ndarray]) -> str:
    import openvino

    openvino.save_model(openvino.Core().read_model(str(plain)), str(path), compress_to_fp16=True)
    return (
        "openvino.save_model(compress_to_fp16=True) of the exported IR: weights stored in "
        "float16, computed in float32 (kbench compiles with INFERENCE_PRECISION_HINT f32)"
    )


@contextlib.contextmanager
def _no_torch_for_nncf() -> Iterator[None]:
    """NNCF imports torch wherever it is installed, only to register its torch tensors
    and to ask whether a model is torch's (3.5 s of the exporter's time here, for an
    OpenVINO model): while it quantizes an IR in a worker that has not imported torch,
    ``import torch`` fails (NNCF skips what needs it), and is restored after."""
    if "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


def _openvino_int8(plain: Path, path: Path, arrays: Dict[str, np.ndarray]) -> str:
    """NNCF's post-training quantization of the exported IR, calibrated on the first
    :data:`CALIBRATION_SAMPLES` training inputs, one a call, as the runtime is fed."""
    with _no_torch_for_nncf():
        return _nncf_quantize(plain, path, arrays)


def _nncf_quantize(plain: Path, path: Path, arrays: Dict[str, np.ndarray]) -> str:
    try:
        import nncf
    except ImportError as err:
        raise Unsupported(
            "int8 for OpenVINO's IR is NNCF's (nncf.quantize), and this environment has no "
            f"nncf ({err}); OpenVINO itself writes float32 or float16 only"
        ) from err
    import openvino

    nncf.set_log_level(logging.WARNING)  # no INFO tables in the exporter's log
    x = arrays["x_train"] if len(arrays["x_train"]) else arrays["x_test"]
    x = np.ascontiguousarray(x[:CALIBRATION_SAMPLES], dtype=np.float32)
    samples = nncf.Dataset([x[i : i + 1] for i in range(len(x))])
    quantized = nncf.quantize(openvino.Core().read_model(str(plain)), samples, subset_size=len(x))
    openvino.save_model(quantized, str(path), compress_to_fp16=False)
    return (
        f"nncf.quantize (NNCF {nncf.__version__} post-training quantization, preset "
        f"PERFORMANCE) of the exported IR, calibrated on the run's first {len(x)} training "
        "inputs: weights and activations int8 (FakeQuantize nodes, run as int8 kernels by "
        "OpenVINO's CPU plugin)"
    )


QUANTIZERS = {
    ("onnx", "int8"): _onnx_int8, ("onnx", "float16"): _onnx_float16,
    ("openvino", "int8"): _openvino_int8, ("openvino", "float16"): _openvino_float16,
}  # fmt: skip


def refuse_failed(export: Dict[str, Any]) -> None:
    """A runtime's task whose export failed: raise what the exporter said."""
    error = export.get("error")
    if error is None:
        return
    message = f"the export failed, so there is nothing to run: {error.get('message')}"
    if export.get("status") == "unsupported":
        raise Unsupported(message)
    raise RuntimeError(message)


def with_agreement(
    metrics: Any, backend: Any, model: Any, export: Dict[str, Any], arrays: Dict[str, np.ndarray],
    batch_size: int,
) -> Dict[str, Any]:  # fmt: skip
    """An inference run's metrics with what its runtime ran (``export``: the exporter,
    the file and its size, whether the cache had it), its outputs on the export's check
    inputs against the Keras model's (``agreement``), and, where the exporter trained the
    model on real data, its top-1 accuracy on the test split beside the Keras float
    model's (``accuracy``)."""
    folder = Path(export["path"]).parent
    inputs = np.load(folder / "check_inputs.npy")
    expected = np.load(folder / "keras_outputs.npy")
    step = batch_size  # the batch the run measured: no other shape for the runtime
    got = np.concatenate([
        np.asarray(backend.predict(model, np.ascontiguousarray(inputs[i : i + step])))
        for i in range(0, len(inputs), step)
    ]).reshape(expected.shape)  # fmt: skip
    agree = np.argmax(got, axis=-1) == np.argmax(expected, axis=-1)
    largest = float(np.max(np.abs(got - expected)))
    top_two = np.sort(expected.reshape(len(expected), -1), axis=-1)[:, -2:]
    # samples whose two largest Keras outputs are within 2 max |d|: a difference that
    # small may swap them, so argmax may differ there without either being wrong
    near_ties = int(np.sum(top_two[:, 1] - top_two[:, 0] <= 2 * largest))
    shown = {k: v for k, v in export.items() if k not in ("model", "keras_accuracy")}
    metrics = metrics.to_dict()
    keras_accuracy = export.get("keras_accuracy")
    if keras_accuracy:  # after the timed passes: the runtime's model on the test split
        metrics["accuracy"] = top1(backend, model, arrays) | {
            "float_top1": keras_accuracy["top1"],
            "float_model": f"the Keras model on {export['exported_by']}, float32, trained "
            f"{export['trained']['epochs']} epoch(s) on {export['trained']['data']} by the "
            "exporter",
        }  # fmt: skip
    return metrics | {
        "export": shown,
        "agreement": {
            "reference": f"the Keras model on {export['exported_by']} (predict_on_batch), "
            "float32, when it was exported",
            "samples": int(len(inputs)), "max_abs_diff": largest,
            "argmax_agreement": float(np.mean(agree)), "near_ties": near_ties,
        },
    }  # fmt: skip
