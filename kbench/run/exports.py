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

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

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


def export_key(config: RunConfig, data: datasets.PreparedData, data_format: str) -> str:
    spec = BACKENDS[config.backend]
    about = {
        "format": spec.export_format, "exporter": spec.exported_by,
        "model": model_content(config.model), "input_shape": list(data.input_shape),
        "num_classes": data.num_classes, "data_format": data_format, "seed": config.seed,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(about, sort_keys=True).encode()).hexdigest()[:24]


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
    the formats of ``along`` (the command's other runs) that the cache lacks for the same
    model and data (``session``: the runs, and what it made and what failed)."""
    session = session or SessionExports()
    failures = session.failures
    spec = BACKENDS[config.backend]
    data_format = environments.keras_config(spec.exported_by, config.data_format)
    data_format = data_format["image_data_format"]
    wanted = {
        BACKENDS[c.backend].export_format: c for c in session.along if _same_export(c, config)
    }
    wanted[spec.export_format] = config
    keys = {fmt: export_key(c, data, data_format) for fmt, c in wanted.items()}
    final = cache_root() / keys[spec.export_format]
    if (final / "export.json").is_file():
        return cached(final, spec.export_format, reused=final.name not in session.made)
    if keys[spec.export_format] in failures:
        return failures[keys[spec.export_format]]
    missing = [
        fmt for fmt, key in keys.items()
        if key not in failures and not (cache_root() / key / "export.json").is_file()
    ]  # fmt: skip
    final.parent.mkdir(parents=True, exist_ok=True)
    works = {
        fmt: Path(tempfile.mkdtemp(prefix=f".{keys[fmt]}-", dir=final.parent)) for fmt in missing
    }
    try:
        asked = [{"make": fmt, "dir": str(works[fmt]), "file": FILES[fmt]} for fmt in missing]
        reply = _run_exporter(config, data, data_format, asked, session_dir, python_path)
        for fmt, work in works.items():
            made = (reply.get("metrics") or {}).get("made", {}).get(fmt)
            if reply["status"] != "ok" or made is None or "error" in made:
                failed = made if made and "error" in made else reply
                failures[keys[fmt]] = {"status": failed["status"], "error": failed["error"]}
                continue
            write_json_atomic(
                work / "export.json", made | {"key": keys[fmt], "made_at": time.time()}
            )
            session.made.add(keys[fmt])
            try:
                os.rename(work, cache_root() / keys[fmt])
            except OSError:  # another kbench made it meanwhile: take that one
                pass
            log.info("%s: exported %s by %s in %.1f s (%d bytes)", config.label(), fmt,
                     spec.exported_by, made["export_s"], made["file_bytes"])  # fmt: skip
    finally:
        for work in works.values():
            shutil.rmtree(work, ignore_errors=True)
    if keys[spec.export_format] in failures:
        return failures[keys[spec.export_format]]
    return cached(final, spec.export_format, reused=False)


def _same_export(other: RunConfig, config: RunConfig) -> bool:
    """Whether ``other`` runs an export of the same model and data as ``config``, by the
    same exporter."""
    spec, theirs = BACKENDS[config.backend], BACKENDS[other.backend]
    same = ("model", "seed", "data_format", "dataset", "input_shape", "num_classes", "image_size")
    return (
        theirs.export_format is not None
        and theirs.exported_by == spec.exported_by
        and all(getattr(other, name) == getattr(config, name) for name in same)
    )


def cached(folder: Path, fmt: str, reused: bool) -> Dict[str, Any]:
    """The export in ``folder``: its facts, its file's path, and whether it was reused."""
    return read_json(folder / "export.json") | {"path": str(folder / FILES[fmt]), "reused": reused}


def _run_exporter(
    config: RunConfig, data: datasets.PreparedData, data_format: str,
    asked: List[Dict[str, str]], session_dir: Path, python_path: Path,
) -> Dict[str, Any]:  # fmt: skip
    """A worker of the exporting backend, asked to make the exports ``asked``; its reply."""
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
        export={"make": asked},
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
    """The ``make`` step in the exporter's worker: ``model`` written in each format asked
    (``export["make"]``: format, folder, file), check inputs and the Keras outputs beside
    each; the reply's metrics: ``made``, each format's facts, or why it could not be
    exported (a format that cannot hold the model: ``unsupported``, the exporter's message)."""
    from kbench.run.inference import _fixed_batch

    checks = _fixed_batch(arrays, CHECK_SAMPLES)
    outputs = np.asarray(backend.predict(model, checks))  # and a model export can trace
    made: Dict[str, Any] = {}
    for asked in export["make"]:
        try:
            made[asked["make"]] = _export_one(backend, model, asked)
        except Unsupported as err:
            made[asked["make"]] = {
                "status": "unsupported", "error": {"type": "Unsupported", "message": str(err)},
            }  # fmt: skip
            continue
        np.save(Path(asked["dir"]) / "check_inputs.npy", checks)
        np.save(Path(asked["dir"]) / "keras_outputs.npy", outputs)
    return {"made": made}


def _export_one(backend: Any, model: Any, asked: Dict[str, str]) -> Dict[str, Any]:
    """``model`` written in one format; its facts."""
    folder, fmt = Path(asked["dir"]), asked["make"]
    path = folder / asked["file"]
    how = "model.save_weights" if fmt == "keras-weights" else f"model.export(format={fmt!r})"
    started = time.perf_counter()
    try:
        if fmt == "keras-weights":
            model.save_weights(str(path))
        else:
            model.export(str(path), format=fmt, verbose=False)
    except Exception as err:  # a model the format cannot hold: the runtime's run says why
        raise Unsupported(
            f"{how} by {backend.name} (Keras {backend.keras.__version__}) could not export "
            f"this model: {type(err).__name__}: {err}"
        ) from err
    export_s = time.perf_counter() - started
    files = [p for p in folder.iterdir() if p.name.startswith("model.")]
    return {
        "format": fmt, "exporter": f"{how} by {backend.name}, Keras {backend.keras.__version__}",
        "exported_by": backend.name, "keras_version": backend.keras.__version__,
        "exporter_framework": {k: backend.framework_info().get(k) for k in ("name", "version")},
        "file": asked["file"], "file_bytes": sum(p.stat().st_size for p in files),
        "export_s": export_s,
        "model": {
            "params": backend.count_params(model), "output_shape": backend.output_shape(model),
            "flops": backend.flops(model),
        },
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
    metrics: Any, backend: Any, model: Any, export: Dict[str, Any], batch_size: int
) -> Dict[str, Any]:
    """An inference run's metrics with what its runtime ran (``export``: the exporter,
    the file and its size, whether the cache had it) and its outputs on the export's check
    inputs against the Keras model's (``agreement``)."""
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
    shown = {k: v for k, v in export.items() if k not in ("model",)}
    return metrics.to_dict() | {
        "export": shown,
        "agreement": {
            "reference": f"the Keras model on {export['exported_by']} (predict_on_batch), "
            "when it was exported",
            "samples": int(len(inputs)), "max_abs_diff": largest,
            "argmax_agreement": float(np.mean(agree)), "near_ties": near_ties,
        },
    }  # fmt: skip
