"""TensorFlow, JAX and PyTorch under Keras 3: one class, three small framework parts."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from kbench.backends.base import gpu_total_bytes
from kbench.backends.keras_common import KerasBackend
from kbench.backends.torch_common import NOT_APPLICABLE_WITHOUT_GPU, TorchFramework


class Keras3Backend(KerasBackend):
    def import_keras(self) -> Any:
        import keras

        return keras

    def seed(self, seed: int) -> None:
        self.keras.utils.set_random_seed(seed)  # Python, numpy and the backend's generator

    def make_optimizer(self, name: str, learning_rate: float) -> Any:
        optimizers = {"adam": self.keras.optimizers.Adam, "sgd": self.keras.optimizers.SGD}
        return optimizers[name](learning_rate=learning_rate)


class TensorFlowBackend(Keras3Backend):
    name = "tensorflow"
    memory_default = "allocates nearly all GPU memory when it starts (no memory growth, no limit)"

    def configure_threads(self) -> Dict[str, Any]:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(self.threads)
        tf.config.threading.set_inter_op_parallelism_threads(self.threads)
        return {"framework": {"intra_op": self.threads, "inter_op": self.threads}}

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
                limit_mb = int(fraction * gpu_total_bytes(index) / 2**20)
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit_mb)]
                )
                applied[gpu.name] = f"logical device memory_limit={limit_mb} MiB"
        return applied

    def visible_gpus(self) -> int:
        import tensorflow as tf

        return len(tf.config.list_physical_devices("GPU"))

    def framework_peaks(self) -> List[Dict[str, Any]]:
        import tensorflow as tf

        readings = []
        for index in range(self.gpus):
            info = tf.config.experimental.get_memory_info(f"GPU:{index}")
            readings.append(
                {
                    "kind": "framework_peak",
                    "bytes": int(info["peak"]),
                    "device": f"GPU:{index}",
                    "source": f"tf.config.experimental.get_memory_info('GPU:{index}')['peak']",
                }
            )
        return readings

    def framework_info(self) -> Dict[str, Any]:
        import tensorflow as tf

        return {
            "name": "tensorflow",
            "version": tf.__version__,
            "devices": [d.name for d in tf.config.list_physical_devices()],
            "built_with_cuda": tf.test.is_built_with_cuda(),
        }


class JaxBackend(Keras3Backend):
    name = "jax"
    memory_default = (
        "preallocates 75% of GPU memory when it starts (XLA_PYTHON_CLIENT_PREALLOCATE=true, "
        "XLA_PYTHON_CLIENT_MEM_FRACTION=0.75)"
    )

    def configure_threads(self) -> Dict[str, Any]:
        return {
            "framework": "not settable by API: XLA's CPU client sizes its thread pool to the "
            "cores in the process's CPU affinity, which kbench limits to the requested count"
        }

    def configure_memory(self, fraction: Optional[float], growth: bool) -> Dict[str, Any]:
        # Read when JAX starts its GPU client, which happens after this.
        applied = {}
        if fraction is not None:
            applied["XLA_PYTHON_CLIENT_MEM_FRACTION"] = os.environ[
                "XLA_PYTHON_CLIENT_MEM_FRACTION"
            ] = f"{fraction:g}"
        if growth:
            applied["XLA_PYTHON_CLIENT_PREALLOCATE"] = os.environ[
                "XLA_PYTHON_CLIENT_PREALLOCATE"
            ] = "false"
        return applied

    def visible_gpus(self) -> int:
        import jax

        return sum(1 for d in jax.devices() if d.platform == "gpu")

    def framework_peaks(self) -> List[Dict[str, Any]]:
        import jax

        readings = []
        for device in jax.devices():
            stats = device.memory_stats() if device.platform == "gpu" else None
            if stats and "peak_bytes_in_use" in stats:
                readings.append(
                    {
                        "kind": "framework_peak",
                        "bytes": int(stats["peak_bytes_in_use"]),
                        "device": str(device),
                        "source": "jax Device.memory_stats()['peak_bytes_in_use']",
                    }
                )
        return readings

    def framework_info(self) -> Dict[str, Any]:
        import jax

        return {
            "name": "jax",
            "version": jax.__version__,
            "devices": [str(d) for d in jax.devices()],
            "default_backend": jax.default_backend(),
        }

    def sync(self) -> None:
        import jax

        jax.effects_barrier()


class TorchBackend(TorchFramework, Keras3Backend):
    name = "torch"
