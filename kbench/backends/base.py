"""The worker-side contract every backend fulfils.

A backend is created in the worker before its framework is imported: it sets the thread
counts and memory options the run asked for, imports the framework (Keras fixes its
backend from ``KERAS_BACKEND`` and the per-run ``KERAS_HOME``), checks that it came up
with the backend and image data format asked for, and answers the trainer's questions.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
from dataclasses import dataclass
from typing import Any, ClassVar, ContextManager, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.backends import kernels
from kbench.backends.switches import SwitchBoard
from kbench.measure import processes
from kbench.profiling import ProfilerUnsupported

log = logging.getLogger(__name__)


class BackendMismatch(RuntimeError):
    """Keras came up with another backend or data format than the run asked for."""


class Unsupported(RuntimeError):
    """This backend cannot run this model at all: the run is recorded as ``unsupported``."""


USER_MODEL_NO_TWIN = (
    "{backend} runs hand-written twins of the zoo's models, and a user model has no "
    "hand-written twin ({model}); run it on tensorflow, jax, torch or mxnet instead"
)


class NoGpu(RuntimeError):
    """The run asked for GPUs (--device gpu, --mxnet-gpus) the framework does not see."""


OUT_OF_MEMORY_SIGNS = (
    "ResourceExhaustedError",
    "OutOfMemoryError",
    "RESOURCE_EXHAUSTED",
    "out of memory",
    "can't allocate memory",
    "OOM when allocating",
    "std::bad_alloc",
    "cudaErrorMemoryAllocation",
    # TensorFlow, when a copy to the GPU finds no memory for its destination
    "Dst tensor is not initialized",
    # cuDNN, when its workspace cannot be allocated (PyTorch and TensorFlow pass it on)
    "CUDNN_STATUS_ALLOC_FAILED",
)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether an exception (or one it was raised from) is a framework's out-of-memory."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, MemoryError):
            return True
        text = f"{type(err).__name__}: {err}"
        if any(sign in text for sign in OUT_OF_MEMORY_SIGNS):
            return True
        err = err.__cause__ or err.__context__
    return False


class GpuMemoryUnknown(RuntimeError):
    """The total memory of the GPU a framework uses could not be read from the CUDA driver."""


@dataclass(frozen=True)
class CudaDevice:
    """One GPU as CUDA numbers it for this process."""

    index: int  # CUDA's ordinal: after CUDA_VISIBLE_DEVICES, in CUDA_DEVICE_ORDER
    name: str
    pci_bus_id: str
    total_bytes: int


def cuda_device(index: int) -> CudaDevice:
    """CUDA device ``index``, read from the CUDA driver (``libcuda.so.1``): a framework's
    ``GPU:index`` is CUDA's ordinal, counted after ``CUDA_VISIBLE_DEVICES`` and in
    ``CUDA_DEVICE_ORDER``, both of which NVML ignores (its ``index`` can be another card);
    the driver needs no NVML, and its PCI bus id names the card in nvidia-smi's terms."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        raise GpuMemoryUnknown(
            f"the CUDA driver library libcuda.so.1 could not be loaded ({err}), so the total "
            f"memory of GPU {index} is unknown. Install the NVIDIA driver (inside a container: "
            "run it with the GPU's driver libraries mounted), or use --gpu-memory-growth "
            "instead of --gpu-memory-fraction."
        ) from err

    def check(code: int, call: str) -> None:
        if code != 0:
            raise GpuMemoryUnknown(
                f"the CUDA driver's {call} for GPU {index} returned error {code}, so its total "
                "memory is unknown. Check CUDA_VISIBLE_DEVICES and nvidia-smi, or use "
                "--gpu-memory-growth instead of --gpu-memory-fraction."
            )

    device = ctypes.c_int()
    name = ctypes.create_string_buffer(256)
    bus_id = ctypes.create_string_buffer(64)
    total = ctypes.c_size_t()
    check(cuda.cuInit(0), "cuInit")
    check(cuda.cuDeviceGet(ctypes.byref(device), index), f"cuDeviceGet({index})")
    check(cuda.cuDeviceGetName(name, len(name), device), "cuDeviceGetName")
    check(cuda.cuDeviceGetPCIBusId(bus_id, len(bus_id), device), "cuDeviceGetPCIBusId")
    check(cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device), "cuDeviceTotalMem_v2")
    return CudaDevice(index, name.value.decode(), bus_id.value.decode(), int(total.value))


# How every backend counts model FLOPs per sample (``Backend.flops``), as is usual for
# "model FLOPs"; training is the forward pass and a backward pass of about twice its cost.
FLOPS_METHOD = (
    "multiply-adds x2 of Conv2D, Dense and LSTM layers from the built model's shapes; "
    "elementwise layers not counted; training = 3 x forward"
)


def counted_flops(forward: int) -> Dict[str, Any]:
    """What :meth:`Backend.flops` returns for ``forward`` FLOPs per sample."""
    forward = int(forward)  # keras-mxnet reports shapes as numpy integers
    return {"forward_per_sample": forward, "train_per_sample": 3 * forward, "method": FLOPS_METHOD}


FRACTION_NOT_FROM_OUTSIDE = (
    "not applied: {framework} has no environment variable for it (kbench run sets it from "
    "inside its worker)"
)
GROWTH_ON_DEMAND = "not applicable: the allocator grows on demand"


def peak_reading(peak_bytes: int, device: str, source: str) -> Dict[str, Any]:
    """One ``framework_peak`` reading: the framework's allocator peak on ``device``."""
    return {"kind": "framework_peak", "bytes": int(peak_bytes), "device": device, "source": source}


class Backend(abc.ABC):
    name: ClassVar[str]
    framework_name: ClassVar[str]  # the framework as messages name it: "TensorFlow"
    memory_default: ClassVar[str]  # what the framework does with GPU memory unless told
    # The variables the framework reads as it starts (memory_variables) for
    # --gpu-memory-fraction (value: fraction_value) and --gpu-memory-growth; None: none.
    fraction_variable: ClassVar[Optional[str]] = None
    growth_variable: ClassVar[Optional[Tuple[str, str]]] = None

    def __init__(
        self, threads: int, switches: Optional[Dict[str, Any]] = None,
        inter_op_threads: Optional[int] = None,
    ) -> None:  # fmt: skip
        self.threads = threads
        # the inter-op pool, where the framework has one (None: ``threads``, as intra-op)
        self.inter_op_threads = inter_op_threads or threads
        self.gpus = 0
        # subclasses apply the switches they have; the rest are recorded as not applicable
        self.switchboard = SwitchBoard(switches or {}, self.name)
        self.warnings: List[str] = []  # see warn()
        # how float16 training keeps small gradients from underflowing; None: no scaling
        self.loss_scaling: Optional[str] = None

    def start(
        self, data_format: str, device: str = "auto", gpu_memory_fraction: Optional[float] = None,
        gpu_memory_growth: bool = False,
    ) -> None:  # fmt: skip
        self.thread_settings = {
            "requested": self.threads,
            "env": kernels.variables(
                ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
            ),
            **processes.pin_cores(self.threads),  # when fewer than all cores were asked for
            **self.configure_threads(),
        }
        applied = self.configure_memory(gpu_memory_fraction, gpu_memory_growth)
        self.memory_settings = {
            "requested": {
                "gpu_memory_fraction": gpu_memory_fraction, "gpu_memory_growth": gpu_memory_growth,
            },
            "applied": applied, "framework_default": self.memory_default,
        }  # fmt: skip
        self.load_framework(data_format)
        self.gpus = self.visible_gpus()
        self.memory_settings["gpus_visible"] = self.gpus
        self.apply_switches()
        if device == "gpu" and self.gpus == 0:
            raise NoGpu(self.no_gpu_message())

    def no_gpu_message(self) -> str:
        """Why ``--device gpu`` found no GPU: a CPU build, or no GPU or driver for a CUDA build."""
        try:
            info = self.framework_info()
        except Exception:  # noqa: BLE001 - the message must come whatever the framework does
            info = {}
        features = info.get("features") or {}
        built: Any = None  # True or the CUDA version: a CUDA build; False: CPU; None: unknown
        if "built_with_cuda" in info:  # TensorFlow
            built = bool(info["built_with_cuda"])
        elif "cuda" in info:  # torch.version.cuda
            built = info["cuda"] or False
        elif "CUDA" in features:  # MXNet
            built = bool(features["CUDA"])
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        shown = "unset" if visible is None else repr(visible)
        if built:
            which = f"a CUDA {built} build" if isinstance(built, str) else "a CUDA build"
            return (
                f"--device gpu: {self.name} is {which} but found no GPU: no NVIDIA GPU or "
                f"driver was found (CUDA_VISIBLE_DEVICES {shown}; nvidia-smi shows what the "
                "driver sees). Install the NVIDIA driver or make a GPU visible, or use "
                "--device auto/cpu."
            )
        if built is None:
            return (
                f"--device gpu: {self.name} sees no GPU here: no NVIDIA GPU or driver was found "
                f"(CUDA_VISIBLE_DEVICES {shown}), or the framework is its CPU build "
                "(python3 -m kbench.setup --check says which). Use --device auto/cpu, or "
                "fix what --check names."
            )
        return (
            f"--device gpu: {self.name} is a CPU build and sees no GPU. Install the framework's "
            "CUDA build (KBENCH_GPU=1 scripts/setup_envs.sh) or use --device auto/cpu."
        )

    def describe(self) -> Dict[str, Any]:
        """What a result records about the framework and the settings in force."""
        info = self.framework_info()
        info.update(
            numpy_blas=kernels.numpy_blas(), threads=self.thread_settings,
            memory_options=self.memory_settings, switches=self.switchboard.record(),
            loss_scaling=self.loss_scaling, warnings=list(self.warnings),
        )  # fmt: skip
        return info

    def next_case(self, switches: Dict[str, Any]) -> None:
        """Before a warm worker's next task: :meth:`end_case`, then the task's per-run switches."""
        self.switchboard = self.switchboard.for_next_run(switches)
        self.loss_scaling = None  # each task's own, as its compile or switches set it
        self.end_case()
        self.apply_switches()

    def end_case(self) -> None:
        """Let go of the models of the task that ended, before a warm worker's next task."""

    def warn(self, message: str) -> None:
        """Something this run's numbers should be read with: logged, and kept in the result."""
        log.warning("%s", message)
        self.warnings.append(message)

    def apply_switches(self) -> None:
        """Apply the switches that act on the started framework (build and compile: the rest)."""

    def apply_tf32(self) -> None:
        """TF32 on GPUs: say what the framework did, or that it does not apply."""
        board = self.switchboard
        if self.gpus == 0:
            if board.is_default("tf32"):
                board.applied("tf32", "no GPU visible: TF32 does not arise on the CPU")
            else:
                board.not_applicable("tf32", "no GPU visible: TF32 is a GPU matmul mode")
            return
        wanted = board.value("tf32")
        if wanted == "auto":
            board.applied("tf32", f"framework default: {self.tf32_default()}")
            return
        board.applied("tf32", self.set_tf32(wanted == "on"))

    def tf32_default(self) -> str:
        return "unknown"

    def set_tf32(self, on: bool) -> str:
        raise NotImplementedError(f"{self.name} cannot switch TF32")

    # why this backend builds no keras_hub model (``hub:``); None: it builds them (Keras 3)
    hub_refusal: ClassVar[Optional[str]] = (
        "keras_hub models are Keras 3 models, built by the Keras 3 backends (tensorflow, jax, "
        "torch)"
    )

    def build_hub(self, spec: Any, input_shape: Sequence[int], num_classes: int) -> Any:
        """A ``hub:`` model (:mod:`kbench_models.hub`), or :class:`Unsupported` saying why."""
        if self.hub_refusal is not None:
            raise Unsupported(f"{spec.name} on {self.name}: {self.hub_refusal}.")
        return spec.builder()(input_shape=tuple(input_shape), num_classes=num_classes)

    @abc.abstractmethod
    def configure_threads(self) -> Dict[str, Any]:
        """Set the framework's own thread pools; return what was set (or why not)."""

    @abc.abstractmethod
    def configure_memory(self, fraction: Optional[float], growth: bool) -> Dict[str, Any]:
        """Apply the GPU memory options before the framework starts; return what was set."""

    @classmethod
    def memory_variables(
        cls, fraction: Optional[float], growth: bool
    ) -> Tuple[Dict[str, str], Dict[str, str]]:
        """(environment variables, notes): the GPU memory options as the variables the
        framework reads when it starts, and why each option no variable expresses is not
        applied; for ``kbench exec``, which cannot configure a script from inside."""
        variables: Dict[str, str] = {}
        notes: Dict[str, str] = {}
        if fraction is not None and cls.fraction_variable:
            variables[cls.fraction_variable] = cls.fraction_value(fraction)
        elif fraction is not None:
            notes["gpu_memory_fraction"] = FRACTION_NOT_FROM_OUTSIDE.format(
                framework=cls.framework_name
            )
        if growth and cls.growth_variable:
            name, value = cls.growth_variable
            variables[name] = value
        elif growth:
            notes["gpu_memory_growth"] = GROWTH_ON_DEMAND
        return variables, notes

    @staticmethod
    def fraction_value(fraction: float) -> str:
        return f"{fraction:g}"

    @abc.abstractmethod
    def visible_gpus(self) -> int:
        """How many GPUs the framework sees (after Keras is imported)."""

    @abc.abstractmethod
    def load_framework(self, data_format: str) -> None:
        """Import the framework; :class:`BackendMismatch` if not this backend and format."""

    @abc.abstractmethod
    def framework_info(self) -> Dict[str, Any]:
        """Name, version and visible devices of the framework under Keras."""

    @abc.abstractmethod
    def seed(self, seed: int) -> None:
        """Seed every random generator model building uses (weights initialisation)."""

    @abc.abstractmethod
    def build(self, name: str, input_shape: Sequence[int], num_classes: int) -> Any:
        """Model ``name`` for input laid out as this backend takes it."""

    def initial_values_unused(self) -> ContextManager[None]:
        """A context for building a model whose initial weights are never used (parity's
        loaded weights, a parameter census): a backend may draw them more cheaply inside."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def count_params(self, model: Any) -> int:
        """Parameters as Keras counts them (BatchNorm moving statistics included)."""

    @abc.abstractmethod
    def output_shape(self, model: Any) -> List[int]:
        """The shape of one sample's output."""

    @abc.abstractmethod
    def flops(self, model: Any) -> Dict[str, Any]:
        """FLOPs per sample, counted as :data:`FLOPS_METHOD` says (:func:`counted_flops`)."""

    @abc.abstractmethod
    def compile(self, model: Any, optimizer: str, learning_rate: float, loss: str) -> None:
        """Attach optimizer and loss; accuracy is always the metric."""

    @abc.abstractmethod
    def fit_epoch(
        self, model: Any, x: np.ndarray, y: np.ndarray, batch_size: int, clock: Any
    ) -> Dict[str, float]:
        """Train over ``x`` in order, one batch per step, with ``clock.batch_begin()`` and
        ``clock.batch_end(logs)`` around each; the epoch's mean loss and accuracy."""

    @abc.abstractmethod
    def train_step(self, model: Any, x: np.ndarray, y: np.ndarray) -> float:
        """One optimizer step on one batch; the loss before the update."""

    @abc.abstractmethod
    def evaluate(
        self, model: Any, x: np.ndarray, y: np.ndarray, batch_size: int
    ) -> Tuple[float, float]:
        """(loss, accuracy) over ``x``."""

    @abc.abstractmethod
    def predict(self, model: Any, batch: np.ndarray) -> np.ndarray:
        """The model's outputs for one batch, as a host array (so the device is done)."""

    def kernel_layout(self) -> str:
        """How exported Conv2D kernels are laid out (see kbench.run.weightfile)."""
        return "HWIO"

    @abc.abstractmethod
    def get_weights(self, model: Any) -> List[Tuple[str, List[np.ndarray]]]:
        """(Keras layer type, arrays) of every layer with weights, in Keras layer order."""

    @abc.abstractmethod
    def set_weights(
        self, model: Any, weights: List[Tuple[str, List[np.ndarray]]], source_format: str,
        source_kernel_layout: str = "HWIO",
    ) -> None:  # fmt: skip
        """Load :meth:`get_weights`' arrays of a model built in ``source_format``."""

    def sync(self) -> None:
        """Wait until the device has finished queued work (no-op where reads already sync)."""

    def memory_readings(self) -> List[Dict[str, Any]]:
        """Memory figures, each labelled with its kind and where it was read:
        ``process_peak_rss`` (the worker's host memory), ``framework_peak`` (the
        framework's GPU allocator peak); the parent's sampler adds the NVML kinds."""
        readings = [dict(kind="process_peak_rss", **processes.peak_rss())]
        if self.gpus:
            readings += self.framework_peaks()
        return readings

    def framework_peaks(self) -> List[Dict[str, Any]]:
        """``framework_peak`` readings per GPU; called only when a GPU is visible."""
        return []

    def op_profiler(self, model: Any, training: bool) -> Any:
        """The capture of ``model``'s operators, else :class:`ProfilerUnsupported` saying why."""
        raise ProfilerUnsupported(f"{self.name}: kbench reads no operator profiler for it")


KERAS_EPSILON = 1e-7  # Keras' epsilon: the native ports clip probabilities and set Adam's to it


class NativePort(Backend):
    """A hand-written port of the models (torch-native, mxnet-gluon): what Keras costs on
    top of the framework. It loads Keras weights through its twins' ``load_keras_weights``
    and never exports any; images are NCHW only. Its loop (:meth:`fit_batch`) computes
    what Keras computes, so that ``kbench parity`` can hold it to the Keras backends: the
    loss is cross-entropy on the probabilities clipped to [1e-7, 1 - 1e-7] plus the
    model's weight penalties; Adam uses Keras' epsilon 1e-7."""

    twins: Any  # the port's model package (kbench_models.pytorch, kbench_models.gluon)

    def require_channels_first(self, data_format: str) -> None:
        """The twins take images as NCHW only: :class:`BackendMismatch` for another format."""
        if data_format != "channels_first":
            raise BackendMismatch(
                f"{self.name} takes images as NCHW (channels_first); the run asked for "
                f"{data_format!r}. Drop --data-format or use channels_first."
            )

    def describe(self) -> Dict[str, Any]:
        info = super().describe()
        info.update(keras_version=None, keras_backend=None, image_data_format="channels_first")
        return info

    def refuse_user_model(self, name: str) -> None:
        """A user model (``file.py:build``) has no twin here: :class:`Unsupported`."""
        import kbench_models

        if name not in kbench_models.MODELS:
            raise Unsupported(
                USER_MODEL_NO_TWIN.format(backend=self.name, model=kbench_models.short_name(name))
            )

    def count_params(self, model: Any) -> int:
        return int(self.twins.keras_param_count(model))

    def training(self, model: Any) -> None:
        """Training mode for ``model``, before :meth:`fit_batch`."""

    @abc.abstractmethod
    def fit_batch(self, model: Any, x: np.ndarray, y: np.ndarray) -> Tuple[Any, Any]:
        """One optimizer step on one batch: (loss before the update, correct answers),
        each what ``float()`` reads once the device is done."""

    def fit_epoch(
        self, model: Any, x: np.ndarray, y: np.ndarray, batch_size: int, clock: Any
    ) -> Dict[str, float]:
        self.training(model)
        loss_sum = hits_sum = 0.0
        steps = len(x) // batch_size
        for step in range(steps):
            clock.batch_begin()
            part = slice(step * batch_size, (step + 1) * batch_size)
            loss, hits = self.fit_batch(model, x[part], y[part])
            clock.batch_end({"loss": loss})  # float() waits for the device
            loss_sum += float(loss)
            hits_sum += float(hits)
        return {"loss": loss_sum / max(steps, 1), "accuracy": hits_sum / max(steps * batch_size, 1)}

    def train_step(self, model: Any, x: np.ndarray, y: np.ndarray) -> float:
        self.training(model)
        return float(self.fit_batch(model, x, y)[0])

    def get_weights(self, model: Any) -> List[Tuple[str, List[np.ndarray]]]:
        raise NotImplementedError(
            f"{self.name} only receives weights: put a Keras backend first in "
            "`kbench parity --backend` so that it is the reference"
        )

    def set_weights(
        self, model: Any, weights: List[Tuple[str, List[np.ndarray]]], source_format: str,
        source_kernel_layout: str = "HWIO",
    ) -> None:  # fmt: skip
        self.twins.load_keras_weights(
            model, weights, source_format, kernel_layout=source_kernel_layout
        )
