"""TensorFlow, JAX and PyTorch under Keras 3: one class, three small framework parts."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import sys
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional

import numpy as np

import kbench_models.hub
from kbench.backends import kernels
from kbench.backends.base import GpuMemoryUnknown, Unsupported, cuda_device, peak_reading
from kbench.backends.keras_common import KerasBackend
from kbench.backends.torch_native import NOT_APPLICABLE_WITHOUT_GPU, TorchFramework
from kbench.measure.sysinfo import cpu_features


def optimizer_name(model: Any) -> str:
    """The scope the optimizer's update runs under; "" for a model never compiled."""
    optimizer = getattr(model, "optimizer", None)
    return optimizer.name if optimizer is not None else ""


# Keras 3 imports these behind guards (``try: import ... except ImportError``) for
# features no kbench run uses (scikit-learn wrappers, plotting, pandas input, JAX for the
# Orbax callback): 3-5 s of a worker's start on 2 cores. They are kept out only while
# Keras loads: a user's model that imports one gets it, though Keras' features that
# wanted it stay off in that process.
OPTIONAL_IMPORTS = ("sklearn", "matplotlib", "pandas", "jax")

log = logging.getLogger(__name__)


@contextlib.contextmanager
def kept_out(modules: List[str]) -> Iterator[List[str]]:
    """While inside, importing any of ``modules`` not yet imported raises ImportError (what a
    guarded import expects); yields the ones kept out."""
    skipped = [m for m in modules if m not in sys.modules]
    for module in skipped:
        sys.modules[module] = None
    try:
        yield skipped
    finally:
        for module in skipped:
            if module in sys.modules and sys.modules[module] is None:
                del sys.modules[module]


class AfterFirstImport(importlib.abc.MetaPathFinder):
    """On ``sys.meta_path``: calls ``then(module)`` once ``name`` is first imported, right
    after its code has run. One shot: it leaves when the module is loaded, not when it is
    only looked up (``importlib.util.find_spec``)."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then
        self._looking = False  # asking the other finders, which include this one

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self._looking:
            return None
        self._looking = True  # (under the import lock: no other thread is in here)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking = False
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenCall(spec.loader, self)
        return spec

    def disarm(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    @staticmethod
    def disarm_all() -> None:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, AfterFirstImport)]


class _ThenCall(importlib.abc.Loader):
    """A module's own loader, then its finder's call with the module it loaded."""

    def __init__(self, loader: Any, finder: AfterFirstImport) -> None:
        self._loader, self._finder = loader, finder

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._finder.disarm()  # loading now: once
        module.__loader__ = module.__spec__.loader = self._loader  # as if found plainly
        self._loader.exec_module(module)
        try:
            self._finder.then(module)
        except Exception as err:  # the import itself succeeded: it must not fail for this
            log.warning("after importing %s: %s: %s", module.__name__, type(err).__name__, err)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


@contextlib.contextmanager
def numpy_draws(keras: Any) -> Iterator[None]:
    """While inside, Keras 3's initializers draw from NumPy (same shape, dtype and scale,
    a truncated normal untruncated), for weights replaced before use or never read: on JAX
    each of Keras' own draws compiles per weight shape (the zoo's twelve models: 55.5 s,
    4.6 s with NumPy, benchmarks/cheap_init.py). Keras' private ``keras.src.backend.random``
    draws are looked up by name: a Keras without them builds as usual."""
    rng = np.random.default_rng(0)

    def normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
        values = rng.standard_normal(size=tuple(shape), dtype=np.float32) * stddev + mean
        return keras.ops.convert_to_tensor(values, dtype=dtype)

    def uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):
        values = rng.random(size=tuple(shape), dtype=np.float32) * (maxval - minval) + minval
        return keras.ops.convert_to_tensor(values, dtype=dtype)

    replaced = {"normal": normal, "truncated_normal": normal, "uniform": uniform}
    try:
        from keras.src.backend import random as backend_random
    except ImportError:
        backend_random = None
    saved = {name: getattr(backend_random, name, None) for name in replaced}
    if backend_random is None or None in saved.values():
        yield
        return
    for name, function in replaced.items():
        setattr(backend_random, name, function)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(backend_random, name, function)


class Keras3Backend(KerasBackend):
    hub_refusal = None  # builds keras_hub models (Backend.build_hub)

    def describe(self) -> Dict[str, Any]:
        info = super().describe()
        hub = kbench_models.hub.version()  # from its metadata: keras_hub is not imported
        return info | ({"keras_hub_version": hub} if hub else {})

    def build_hub(self, spec: Any, input_shape: Any, num_classes: int) -> Any:
        # keras_hub imports tensorflow behind guards for tokenizers and metrics no hub: run
        # uses: kept out on the other backends (seconds of the worker's start, and memory)
        with kept_out([m for m in ("tensorflow",) if m != self.name]) as skipped:
            import keras_hub  # noqa: F401
        self.imports_skipped = list(dict.fromkeys([*self.imports_skipped, *skipped]))
        return super().build_hub(spec, input_shape, num_classes)

    # kept out while the framework loads (OPTIONAL_IMPORTS) and while seeding (TensorFlow)
    imports_skipped: List[str] = []

    def start(self, *args: Any, **kwargs: Any) -> None:
        unused = [m for m in OPTIONAL_IMPORTS if m != self.name]
        with kept_out(unused) as skipped:
            super().start(*args, **kwargs)
        self.imports_skipped = skipped

    def import_keras(self) -> Any:
        import keras

        return keras

    def initial_values_unused(self) -> ContextManager[None]:
        return numpy_draws(self.keras)

    def seed(self, seed: int) -> None:
        # Keras seeds TensorFlow too whatever the backend, importing it (3-4 s): on JAX and
        # PyTorch it is seeded instead when something (a user's model) first imports it
        AfterFirstImport.disarm_all()  # armed by a warm worker's earlier task
        outside = ["tensorflow"] if self.name != "tensorflow" else []
        with kept_out(outside) as skipped:
            self.keras.utils.set_random_seed(seed)

        def seed_tensorflow(tf: Any) -> None:
            """Seed TensorFlow, kept out of the seeding, when it is first imported, and make
            Keras' lazy handle on it (which found it missing) look again."""
            tf.random.set_seed(seed)
            handle = getattr(sys.modules.get("keras.src.utils.module_utils"), "tensorflow", None)
            if getattr(handle, "_available", None) is False:
                handle._available = None

        if skipped:
            sys.meta_path.insert(0, AfterFirstImport("tensorflow", seed_tensorflow))
        self.imports_skipped = sorted(set(self.imports_skipped) | set(skipped))

    def apply_switches(self) -> None:
        board = self.switchboard
        mode = board.value("mixed_precision")
        policy = "float32" if mode == "off" else f"mixed_{mode}"
        self.keras.mixed_precision.set_dtype_policy(policy)
        board.applied(
            "mixed_precision",
            f"keras.mixed_precision.set_dtype_policy({policy!r})"
            + ("" if mode == "off" else ": computations in " + mode + ", variables in float32"),
        )
        self.apply_tf32()

    def compile(self, model: Any, optimizer: str, learning_rate: float, loss: str) -> None:
        board = self.switchboard
        jit = {"auto": "auto", "on": True, "off": False}[board.value("jit_compile")]
        eager = board.value("run_eagerly")
        model.compile(
            optimizer=self.make_optimizer(optimizer, learning_rate), loss=self.keras_loss(loss),
            metrics=["accuracy"], jit_compile=jit, run_eagerly=eager,
        )  # fmt: skip
        board.applied(
            "jit_compile",
            f"compile(jit_compile={jit!r}): {self.jit_meaning}; Keras resolved it to "
            f"{getattr(model, 'jit_compile', '?')!r}",
        )
        board.applied("run_eagerly", f"compile(run_eagerly={eager})")
        if isinstance(model.optimizer, self.keras.optimizers.LossScaleOptimizer):
            # Keras wraps the optimizer itself under mixed_float16
            self.loss_scaling = (
                "keras.optimizers.LossScaleOptimizer (dynamic loss scale, wrapping "
                f"{type(model.optimizer.inner_optimizer).__name__})"
            )


class TensorFlowBackend(Keras3Backend):
    name = "tensorflow"
    jit_meaning = "XLA compilation of the train step (auto: off unless XLA is known to help)"
    onednn_plan: Optional[kernels.OneDnnPlan] = None
    onednn: Optional[bool] = None

    def start(self, data_format: str, device: str = "auto", **kwargs: Any) -> None:
        """Set TF_ENABLE_ONEDNN_OPTS, read once as TensorFlow starts, then check what it did."""
        plan = kernels.plan_onednn(
            self.switchboard.value("onednn"), os.environ.get(kernels.ONEDNN_VARIABLE),
            cpu_features(), sys.platform, data_format, device,
        )  # fmt: skip
        if plan.set_to is not None:
            os.environ[kernels.ONEDNN_VARIABLE] = plan.set_to
        self.onednn_plan = plan
        super().start(data_format, device, **kwargs)  # apply_switches reads self.onednn
        refusal = kernels.nchw_refusal(
            data_format, self.onednn, self.gpus, self.switchboard.value("jit_compile"),
            plan.reason,
        )  # fmt: skip
        if refusal:
            raise Unsupported(refusal)
        if plan.switched_for_layout and self.onednn:
            self.warn(
                "TensorFlow runs oneDNN's CPU kernels for this channels_first run ("
                + plan.reason
                + "): its CPU numbers are oneDNN's, not those of TensorFlow's default kernels "
                "on this CPU"
            )

    def apply_switches(self) -> None:
        super().apply_switches()
        try:  # whether TensorFlow runs its oneDNN CPU kernels, as it says itself
            from tensorflow.python.util import _pywrap_util_port

            self.onednn = bool(_pywrap_util_port.IsMklEnabled())
        except (ImportError, AttributeError):
            self.onednn = None  # this build cannot say
        plan = self.onednn_plan
        if plan is not None:
            state = {True: "on", False: "off", None: "unknown"}[self.onednn]
            self.switchboard.applied("onednn", f"oneDNN {state}: {plan.reason}")

    def tf32_default(self) -> str:
        return "TF32 enabled on Ampere and newer GPUs (TensorFlow's default)"

    def op_profiler(self, model: Any, training: bool) -> Any:
        from kbench.profiling.captures import TensorFlowCapture

        return TensorFlowCapture(model.name, optimizer_name(model), training=training)

    def set_tf32(self, on: bool) -> str:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(on)
        return f"tf.config.experimental.enable_tensor_float_32_execution({on})"

    framework_name = "TensorFlow"
    memory_default = "allocates nearly all GPU memory when it starts (no memory growth, no limit)"
    # for kbench exec; the worker sets both options through tf.config (configure_memory)
    growth_variable = ("TF_FORCE_GPU_ALLOW_GROWTH", "true")

    def configure_threads(self) -> Dict[str, Any]:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(self.threads)
        tf.config.threading.set_inter_op_parallelism_threads(self.inter_op_threads)
        return {
            "framework": {
                "intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
            }
        }

    def configure_memory(self, fraction: Optional[float], growth: bool) -> Dict[str, Any]:
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if fraction is None and not growth:
            return {}
        if not gpus:
            return {"note": NOT_APPLICABLE_WITHOUT_GPU}
        if fraction is not None and growth:
            raise ValueError(
                "TensorFlow cannot combine --gpu-memory-fraction with --gpu-memory-growth "
                "(a logical device has a fixed limit); choose one."
            )
        applied: Dict[str, Any] = {}
        for index, gpu in enumerate(gpus):
            if growth:
                tf.config.experimental.set_memory_growth(gpu, True)
                applied[gpu.name] = "tf.config.experimental.set_memory_growth(True)"
            else:
                # the cap of the card TensorFlow's GPU:index is: CUDA's ordinal index
                device = cuda_device(index)
                seen = tf.config.experimental.get_device_details(gpu).get("device_name")
                if seen and seen != device.name:
                    raise GpuMemoryUnknown(
                        f"TensorFlow's {gpu.name} is a {seen!r} but CUDA's device {index} is "
                        f"a {device.name!r} ({device.pci_bus_id}), so the memory cap cannot be "
                        "computed for the right card. Make TensorFlow see every GPU "
                        "CUDA_VISIBLE_DEVICES names, or use --gpu-memory-growth."
                    )
                limit_mb = int(fraction * device.total_bytes / 2**20)
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit_mb)]
                )
                applied[gpu.name] = (
                    f"logical device memory_limit={limit_mb} MiB ({fraction:g} of the "
                    f"{device.total_bytes // 2**20} MiB of CUDA device {index}, {device.name} "
                    f"at PCI {device.pci_bus_id}, from the CUDA driver)"
                )
        return applied

    def visible_gpus(self) -> int:
        import tensorflow as tf

        return len(tf.config.list_physical_devices("GPU"))

    def framework_peaks(self) -> List[Dict[str, Any]]:
        import tensorflow as tf

        readings = []
        for index in range(self.gpus):
            info = tf.config.experimental.get_memory_info(f"GPU:{index}")
            source = f"tf.config.experimental.get_memory_info('GPU:{index}')['peak']"
            readings.append(peak_reading(info["peak"], f"GPU:{index}", source))
        return readings

    def framework_info(self) -> Dict[str, Any]:
        import tensorflow as tf

        plan = self.onednn_plan
        return {
            "name": "tensorflow",
            "version": tf.__version__,
            "devices": [d.name for d in tf.config.list_physical_devices()],
            # TensorFlow places each operation on its first GPU where it sees one.
            "device_used": "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0",
            "built_with_cuda": tf.test.is_built_with_cuda(),
            "cpu_kernels": {
                "library": {True: "oneDNN", False: "Eigen", None: "unknown"}[self.onednn],
                "onednn": self.onednn,
                "why": plan.reason if plan else None,
                "onednn_plan": plan.to_dict() if plan else None,
                kernels.ONEDNN_VARIABLE: os.environ.get(kernels.ONEDNN_VARIABLE),
            },
        }


class JaxBackend(Keras3Backend):
    name = "jax"
    jit_meaning = "jax.jit of the train step (Keras' default); off runs it op by op"

    def tf32_default(self) -> str:
        return "XLA's default matmul precision on GPU (TF32 on Ampere and newer)"

    def op_profiler(self, model: Any, training: bool) -> Any:
        from kbench.profiling.captures import JaxCapture

        return JaxCapture(optimizer_name(model), training=training)

    def set_tf32(self, on: bool) -> str:
        import jax

        precision = "tensorfloat32" if on else "highest"
        jax.config.update("jax_default_matmul_precision", precision)
        return f"jax.config.update('jax_default_matmul_precision', {precision!r})"

    framework_name = "JAX"
    memory_default = (
        "preallocates 75% of GPU memory when it starts (XLA_PYTHON_CLIENT_PREALLOCATE=true, "
        "XLA_PYTHON_CLIENT_MEM_FRACTION=0.75)"
    )
    fraction_variable = "XLA_PYTHON_CLIENT_MEM_FRACTION"
    growth_variable = ("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

    def configure_threads(self) -> Dict[str, Any]:
        return {
            "framework": "not settable by API: XLA's CPU client sizes its thread pool to the "
            "cores in the process's CPU affinity, which kbench limits to the requested count"
        }

    def configure_memory(self, fraction: Optional[float], growth: bool) -> Dict[str, Any]:
        # Read when JAX starts its GPU client, which happens after this.
        variables, _ = self.memory_variables(fraction, growth)
        os.environ.update(variables)
        return dict(variables)

    def visible_gpus(self) -> int:
        import jax

        return sum(1 for d in jax.devices() if d.platform == "gpu")

    def framework_peaks(self) -> List[Dict[str, Any]]:
        import jax

        readings = []
        for device in jax.devices():
            stats = device.memory_stats() if device.platform == "gpu" else None
            if stats and "peak_bytes_in_use" in stats:
                source = "jax Device.memory_stats()['peak_bytes_in_use']"
                readings.append(peak_reading(stats["peak_bytes_in_use"], str(device), source))
        return readings

    def framework_info(self) -> Dict[str, Any]:
        import jax

        return {
            "name": "jax",
            "version": jax.__version__,
            "devices": [str(d) for d in jax.devices()],
            "device_used": str(jax.devices()[0]),  # JAX's default device
            "default_backend": jax.default_backend(),
            "cpu_kernels": {
                "library": "XLA (LLVM code generated for this CPU's features; Eigen and "
                "oneDNN for some operations)",
                **kernels.variables(("XLA_FLAGS",)),
            },
        }

    def sync(self) -> None:
        import jax

        jax.effects_barrier()


class TorchBackend(TorchFramework, Keras3Backend):
    name = "torch"
    jit_meaning = "torch.compile of the train step (auto: off)"

    def op_profiler(self, model: Any, training: bool) -> Any:
        from kbench.profiling.captures import TorchCapture

        # Keras' optimizer.apply is the update; PyTorch marks backward itself
        marks = [(model.optimizer, "apply", "update")] if training else []
        return TorchCapture(gpu=self.gpus > 0, training=training, marks=marks)
