"""The backends kbench can run, as plain data the parent reads without importing a
framework; the worker's :func:`load_backend` imports the backend's module.

May import: kbench.datasets, kbench.measure, kbench.profiling, kbench_models.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from kbench.backends.base import Backend


@dataclass(frozen=True)
class BackendSpec:
    """One backend: the environment it runs in, the class that drives it, how figures show it."""

    name: str
    environment: str  # a name under envs/, see kbench.run.environments
    # "module:Class": the worker drives it; the parent reads only its class attributes
    implementation: str
    colour: str  # the backend's colour in every figure and report
    # Variables that must be set before the interpreter starts.
    process_env: Dict[str, str] = field(default_factory=dict)
    # The user's variables (by prefix) that change what its runs measure (a persistent
    # compilation cache makes the first step fast), recorded in each result's process_env
    recorded_variable_prefixes: Tuple[str, ...] = ()
    packages: Tuple[str, ...] = ()  # distributions `kbench env` reports
    data_formats: Tuple[str, ...] = ("channels_last", "channels_first")
    # a hand-written port of the models (no Keras): it only loads a Keras backend's weights
    native_port: bool = False
    # why it has no inter-op pool kbench can set (--inter-op-threads is refused); None: it has
    no_inter_op_pool: Optional[str] = None
    # Why it runs inference only (an exported model's runtime, Keras' OpenVINO backend):
    # training settings are refused for it, with this reason; None: it trains.
    inference_only: Optional[str] = None
    # An exported model's runtime: the model.export format its file is in, and the Keras
    # backend whose worker exports it (kbench.run.exports); no Keras in its own process.
    export_format: Optional[str] = None
    exported_by: Optional[str] = None
    # the extra of kbench's package that brings its framework into an environment
    # (`pip install 'kbench[torch]'`, setup.cfg); None: it needs an environment of its own
    extra: Optional[str] = None

    @property
    def runs_keras(self) -> bool:
        """Its process runs Keras as a script would (what ``kbench exec`` can drive): not a
        runtime of an export, nor Keras' OpenVINO backend, whose runs load the exporter's
        weights."""
        return not self.native_port and self.export_format is None

    @property
    def exports_weights(self) -> bool:
        """It can be the parity reference: it writes the initial weights the others load."""
        return self.runs_keras and self.inference_only is None

    @property
    def logs_mean_loss(self) -> bool:
        """The loss its ``fit`` logs after each step is the epoch's mean so far (Keras 3's
        loss tracker), not the step's own (Keras 2.2, the native ports)."""
        return self.runs_keras and self.environment == "keras3"

    def load(self) -> type[Backend]:
        module_name, class_name = self.implementation.split(":")
        return getattr(importlib.import_module(module_name), class_name)


MXNET_NO_INTER_OP = (
    "MXNet runs its operators on OpenMP threads (OMP_NUM_THREADS, which --threads sets, "
    "read when mxnet is imported) and has no API for an inter-op pool"
)

KERAS_OPENVINO_INFERENCE = (
    "Keras 3's OpenVINO backend runs inference only (predict): it has no gradients"
)
RUNTIME_NO_INTER_OP = (
    "kbench runs the model's operators one after another on the runtime's own threads "
    "(--threads sets them: intra_op_num_threads, INFERENCE_NUM_THREADS, num_threads); no "
    "inter-op pool is set apart"
)
RUNS_AN_EXPORT = (
    "it runs a model exported from Keras (model.export) for inference; the file holds no "
    "optimizer or gradients"
)

BACKENDS: Dict[str, BackendSpec] = {
    spec.name: spec
    for spec in (
        BackendSpec(
            name="tensorflow", environment="keras3",
            implementation="kbench.backends.keras3:TensorFlowBackend", colour="#f28e2b",
            process_env={"TF_CPP_MIN_LOG_LEVEL": "2"},
            recorded_variable_prefixes=("XLA_FLAGS", "TF_XLA_FLAGS"),
            packages=("keras", "tensorflow-cpu", "tensorflow"),
            extra="tensorflow",
        ),
        BackendSpec(
            name="jax", environment="keras3", implementation="kbench.backends.keras3:JaxBackend",
            colour="#4e79a7", packages=("keras", "jax", "jaxlib"),
            recorded_variable_prefixes=("JAX_COMPILATION_CACHE", "JAX_PERSISTENT", "XLA_FLAGS"),
            no_inter_op_pool="XLA's CPU client sizes its thread pools itself, to the cores of "
            "the process's CPU affinity (which --threads sets): JAX has no API to set them",
            extra="jax",
        ),
        BackendSpec(
            name="torch", environment="keras3",
            implementation="kbench.backends.keras3:TorchBackend", colour="#e15759",
            packages=("keras", "torch"),
            extra="torch",
        ),
        BackendSpec(
            name="torch-native", environment="keras3",
            implementation="kbench.backends.torch_native:TorchNativeBackend", colour="#b07aa1",
            packages=("torch",), data_formats=("channels_first",), native_port=True,
            extra="torch",
        ),
        BackendSpec(
            name="mxnet", environment="mxnet",
            implementation="kbench.backends.keras_mxnet:KerasMXNetBackend", colour="#59a14f",
            packages=("keras-mxnet", "mxnet", "mxnet-cu112"), no_inter_op_pool=MXNET_NO_INTER_OP,
        ),
        BackendSpec(
            name="mxnet-gluon", environment="mxnet",
            implementation="kbench.backends.mxnet_gluon:MXNetGluonBackend", colour="#8cd17d",
            packages=("mxnet", "mxnet-cu112"), data_formats=("channels_first",), native_port=True,
            no_inter_op_pool=MXNET_NO_INTER_OP,
        ),
        BackendSpec(
            name="openvino", environment="keras3",
            implementation="kbench.backends.runtimes:OpenVinoKerasBackend", colour="#17becf",
            packages=("keras", "openvino"), inference_only=KERAS_OPENVINO_INFERENCE,
            export_format="keras-weights", exported_by="tensorflow",
            no_inter_op_pool=RUNTIME_NO_INTER_OP,
            extra="edge",
        ),
        BackendSpec(
            name="onnxruntime", environment="keras3",
            implementation="kbench.backends.runtimes:OnnxRuntimeBackend", colour="#7f7f7f",
            packages=("onnxruntime", "onnx", "tf2onnx"), inference_only=RUNS_AN_EXPORT,
            export_format="onnx", exported_by="tensorflow", no_inter_op_pool=RUNTIME_NO_INTER_OP,
            extra="edge",
        ),
        BackendSpec(
            name="openvino-ir", environment="keras3",
            implementation="kbench.backends.runtimes:OpenVinoIRBackend", colour="#bcbd22",
            packages=("openvino",), inference_only=RUNS_AN_EXPORT, export_format="openvino",
            exported_by="tensorflow", no_inter_op_pool=RUNTIME_NO_INTER_OP,
            extra="edge",
        ),
        BackendSpec(
            name="litert", environment="keras3",
            implementation="kbench.backends.runtimes:LiteRTBackend", colour="#d37295",
            packages=("ai-edge-litert",), inference_only=RUNS_AN_EXPORT, export_format="litert",
            exported_by="tensorflow",  # Keras exports LiteRT from TensorFlow only
            no_inter_op_pool=RUNTIME_NO_INTER_OP,
            extra="edge",
        ),
    )
}  # fmt: skip


def load_backend(name: str) -> type[Backend]:
    return BACKENDS[name].load()
