"""Inference runtimes as backends: a Keras model exported with ``model.export`` and run in
onnxruntime, OpenVINO (its IR) or LiteRT, and Keras 3's own OpenVINO backend.

An exported model's runtime imports no Keras: its worker is given the export the
exporter's worker wrote (:mod:`kbench.run.exports`: the file, the Keras model's facts and
its outputs on check inputs). ``build`` loads the file into the runtime (the first part of
the cold start; the first inference is the second), ``predict`` runs one batch, and
``--threads`` is the runtime's own setting (onnxruntime ``intra_op_num_threads``, OpenVINO
``INFERENCE_NUM_THREADS``, LiteRT ``num_threads``). Keras' OpenVINO backend builds the
model as any Keras backend does and loads the exporter's weights, so that every runtime
runs the same weights. Anything about training raises :class:`Unsupported`.
"""

from __future__ import annotations

import importlib.metadata
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.backends.base import Backend, Unsupported
from kbench.backends.keras3 import Keras3Backend

INFERENCE_ONLY = "{backend} runs inference only ({why}); use --mode inference"
NO_GPU_HERE = "not applicable: kbench runs this runtime on the CPU"


# OpenVINO's CPU plugin computes in bfloat16 by default where the CPU has bf16 instructions
# (AVX512_BF16, AMX): float32 runs ask for float32 (lower precisions are --precision's)
OPENVINO_PRECISION = {"INFERENCE_PRECISION_HINT": "f32"}


def openvino_config(threads: int) -> Dict[str, Any]:
    """What kbench compiles an OpenVINO model with: its threads, and float32."""
    return {"INFERENCE_NUM_THREADS": threads, **OPENVINO_PRECISION}


def refuse_training(backend: str) -> Unsupported:
    from kbench.backends import BACKENDS

    why = BACKENDS[backend].inference_only
    return Unsupported(INFERENCE_ONLY.format(backend=backend, why=why))


class TakesExport:
    """What every inference-only backend shares: the export it is given (``self.export``,
    set by the worker from its task before the model is built), and no GPU."""

    memory_default = NO_GPU_HERE
    export: Dict[str, Any] = {}

    def take_export(self, export: Dict[str, Any]) -> None:
        """What the exporter wrote for this run's model (:mod:`kbench.run.exports`)."""
        self.export = export

    def configure_memory(self, fraction: Optional[float], growth: bool) -> Dict[str, Any]:
        return {} if fraction is None and not growth else {"note": NO_GPU_HERE}

    def visible_gpus(self) -> int:
        return 0


class ExportedRuntime(TakesExport, Backend):
    """A runtime that runs the file the exporter wrote."""

    distribution: str  # the package whose version results record
    module: str  # what load_framework imports
    thread_setting: str  # the runtime's own thread setting, as results name it
    framework_name = "a runtime"

    def configure_threads(self) -> Dict[str, Any]:
        return {"framework": {self.thread_setting: self.threads}}

    def load_framework(self, data_format: str) -> None:
        self.runtime = importlib.import_module(self.module)

    def framework_info(self) -> Dict[str, Any]:
        return {
            "name": self.name.split("-")[0],  # openvino-ir runs OpenVINO
            "version": importlib.metadata.version(self.distribution),
            "devices": ["CPU"], "device_used": "CPU", **self.settings,
        }  # fmt: skip

    settings: Dict[str, Any] = {}  # what else the runtime is run with, as results say it

    def seed(self, seed: int) -> None:
        """Nothing draws here: the file holds the exporter's seeded weights."""

    def build(self, name: str, input_shape: Sequence[int], num_classes: int) -> Any:
        if not self.export.get("path"):
            raise ValueError(f"{self.name}: expected the exporter's file in the task; none came")
        return self.load(self.export["path"])

    def load(self, path: str) -> Any:
        """The file at ``path`` loaded into the runtime, ready to run."""
        raise NotImplementedError

    def file_precision(self, precision: str) -> Dict[str, Any]:
        """How the loaded file was quantized (by the exporter: :mod:`kbench.run.exports`),
        checked against the run's ``--precision``."""
        made = self.export.get("quantization") or {"precision": "float32", "method": "?"}
        if made["precision"] != precision:
            raise RuntimeError(
                f"{self.name}: the export is {made['precision']}, the run asked for {precision}"
            )
        return dict(made)

    def count_params(self, model: Any) -> int:
        return int(self.export["model"]["params"])

    def output_shape(self, model: Any) -> List[int]:
        return list(self.export["model"]["output_shape"])

    def flops(self, model: Any) -> Dict[str, Any]:
        return dict(self.export["model"]["flops"])

    def compile(self, model: Any, optimizer: str, learning_rate: float, loss: str) -> None:
        raise refuse_training(self.name)

    def fit_epoch(self, model, x, y, batch_size, clock) -> Dict[str, float]:  # type: ignore[no-untyped-def]
        raise refuse_training(self.name)

    def train_step(self, model: Any, x: np.ndarray, y: np.ndarray) -> float:
        raise refuse_training(self.name)

    def evaluate(self, model, x, y, batch_size) -> Tuple[float, float]:  # type: ignore[no-untyped-def]
        raise refuse_training(self.name)

    def get_weights(self, model: Any) -> List[Tuple[str, List[np.ndarray]]]:
        raise refuse_training(self.name)

    def set_weights(self, model, weights, source_format, source_kernel_layout="HWIO") -> None:  # type: ignore[no-untyped-def]
        raise refuse_training(self.name)


class OnnxRuntimeBackend(ExportedRuntime):
    name = "onnxruntime"
    framework_name = "ONNX Runtime"
    distribution = module = "onnxruntime"
    thread_setting = "SessionOptions.intra_op_num_threads"

    def load(self, path: str) -> Any:
        options = self.runtime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1  # one model, run sequentially
        session = self.runtime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.input_name = session.get_inputs()[0].name
        return session

    def predict(self, model: Any, batch: np.ndarray) -> np.ndarray:
        return model.run(None, {self.input_name: batch})[0]


class OpenVinoIRBackend(ExportedRuntime):
    name = "openvino-ir"
    framework_name = "OpenVINO"
    distribution = module = "openvino"
    thread_setting = "INFERENCE_NUM_THREADS"
    settings = {"compiled_with": OPENVINO_PRECISION}

    def framework_info(self) -> Dict[str, Any]:
        """OpenVINO's, with the version of NNCF, its int8 quantizer (the exporter's), where
        this interpreter has it."""
        try:
            nncf = f"nncf {importlib.metadata.version('nncf')}"
        except importlib.metadata.PackageNotFoundError:
            nncf = None
        return super().framework_info() | {"quantizer": nncf}

    def load(self, path: str) -> Any:
        core = self.runtime.Core()
        compiled = core.compile_model(core.read_model(path), "CPU", openvino_config(self.threads))
        self.output = compiled.outputs[0]
        return compiled.create_infer_request()

    def predict(self, model: Any, batch: np.ndarray) -> np.ndarray:
        return np.array(model.infer({0: batch})[self.output])  # a copy: the request reuses it


class LiteRTBackend(ExportedRuntime):
    name = "litert"
    framework_name = "LiteRT"
    distribution = "ai-edge-litert"
    module = "ai_edge_litert.interpreter"
    thread_setting = "Interpreter(num_threads)"

    def load(self, path: str) -> Any:
        interpreter = self.runtime.Interpreter(model_path=path, num_threads=self.threads)
        self.input_index = interpreter.get_input_details()[0]["index"]
        self.output_index = interpreter.get_output_details()[0]["index"]
        self.batch_shape: Optional[Tuple[int, ...]] = None
        return interpreter

    def predict(self, model: Any, batch: np.ndarray) -> np.ndarray:
        if batch.shape != self.batch_shape:  # the file's batch dimension is 1 until resized
            model.resize_tensor_input(self.input_index, list(batch.shape))
            model.allocate_tensors()
            self.batch_shape = batch.shape
        model.set_tensor(self.input_index, batch)
        model.invoke()
        return np.array(model.get_tensor(self.output_index))


class OpenVinoKerasBackend(TakesExport, Keras3Backend):
    """Keras 3's OpenVINO backend (``KERAS_BACKEND=openvino``): ``predict`` only. It
    builds the model as Keras backends do and loads the exporter's weights
    (``take_export``), so it runs the weights the exported files hold."""

    name = "openvino"
    framework_name = "OpenVINO"
    jit_meaning = "not applicable: Keras' OpenVINO backend compiles the model for predict"

    def build(self, name: str, input_shape: Sequence[int], num_classes: int) -> Any:
        model = super().build(name, input_shape, num_classes)
        if self.export.get("path"):
            model.load_weights(self.export["path"])
        return model

    def configure_threads(self) -> Dict[str, Any]:
        return {"framework": {"INFERENCE_NUM_THREADS": self.threads}}

    def load_framework(self, data_format: str) -> None:
        """Keras' OpenVINO backend compiles with ``openvino.compile_model(model, "CPU")``
        and no config (OpenVINO's defaults: every core, bfloat16 where the CPU has it):
        its calls are given kbench's config (:func:`openvino_config`): ``--threads`` and
        float32. They are looked up by name in Keras' private modules; a Keras without
        them keeps OpenVINO's defaults, with a warning."""
        import openvino

        ours = openvino_config(self.threads)
        plain = openvino.compile_model

        def compile_model(model: Any, device_name: Any = "CPU", config: Any = None, **kw: Any):
            return plain(model, device_name, {**ours, **(config or {})}, **kw)

        openvino.compile_model = compile_model
        super().load_framework(data_format)
        core = sys.modules.get("keras.src.backend.openvino.core")
        if core is not None and getattr(core, "compile_model", None) is plain:
            core.compile_model = compile_model
        if core is None:
            self.warn("Keras' OpenVINO backend was not where kbench looks: OpenVINO runs "
                      "with its defaults (every core; bfloat16 where the CPU has it)")  # fmt: skip

    def framework_info(self) -> Dict[str, Any]:
        import openvino

        return {
            "name": "openvino", "version": importlib.metadata.version("openvino"),
            "full_version": openvino.__version__, "devices": ["CPU"], "device_used": "CPU",
            "compiled_with": openvino_config(self.threads),
        }  # fmt: skip

    def compile(self, model: Any, optimizer: str, learning_rate: float, loss: str) -> None:
        raise refuse_training(self.name)
