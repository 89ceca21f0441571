"""TensorFlow, JAX and PyTorch under Keras 3: one class, three small framework parts."""

from __future__ import annotations

from typing import Any, Dict

from kbench.backends.base import Backend


class Keras3Backend(Backend):
    def import_keras(self) -> Any:
        import keras

        return keras

    def make_optimizer(self, name: str, learning_rate: float) -> Any:
        optimizers = {"adam": self.keras.optimizers.Adam, "sgd": self.keras.optimizers.SGD}
        return optimizers[name](learning_rate=learning_rate)


class TensorFlowBackend(Keras3Backend):
    name = "tensorflow"

    def configure_threads(self) -> Dict[str, Any]:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(self.threads)
        tf.config.threading.set_inter_op_parallelism_threads(self.threads)
        return {"framework": {"intra_op": self.threads, "inter_op": self.threads}}

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

    def configure_threads(self) -> Dict[str, Any]:
        return {
            "framework": "not settable by API: XLA's CPU client sizes its thread pool to the "
            "cores in the process's CPU affinity, which kbench limits to the requested count"
        }

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


class TorchBackend(Keras3Backend):
    name = "torch"

    def configure_threads(self) -> Dict[str, Any]:
        import torch

        torch.set_num_threads(self.threads)
        torch.set_num_interop_threads(self.threads)
        return {
            "framework": {
                "intra_op": torch.get_num_threads(),
                "inter_op": torch.get_num_interop_threads(),
            }
        }

    def framework_info(self) -> Dict[str, Any]:
        import torch

        return {
            "name": "torch",
            "version": torch.__version__,
            "devices": ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())],
            "cuda": torch.version.cuda,
        }

    def sync(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
