"""MXNet itself: its settings, shared by keras-mxnet and the native backend
(:class:`MXNetFramework`), and plain MXNet Gluon with no Keras, the models'
``HybridBlock`` twins in a hand-written loop (:class:`MXNetGluonBackend`, a
:class:`~kbench.backends.base.NativePort`), which shows what keras-mxnet costs on top of
MXNet and what hybridizing buys. Runs under numpy<1.24 and imports no Keras.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.backends import kernels
from kbench.backends.base import KERAS_EPSILON, NativePort, NoGpu, Unsupported, counted_flops
from kbench_models import FROM_LOGITS

# hybridize(): memory planned once (static_alloc) for one input shape: measured faster
HYBRIDIZE_OPTIONS = {"static_alloc": True, "static_shape": True}
# The twins built on Gluon's fused LSTM layer (MXNet's RNN operator)
FUSED_RNN_MODELS = ("lstm", "lstm_embedding")


def _enabled(features: Any, name: str) -> bool:
    """Whether MXNet was built with a feature (``mx.runtime.Features()``)."""
    try:
        return bool(features.is_enabled(name))
    except RuntimeError:  # a feature this MXNet does not know
        return False


def mkldnn_on(features: Any) -> bool:
    """Whether MXNet runs its MKLDNN (oneDNN) CPU operators: built in and not turned off."""
    return _enabled(features, "MKLDNN") and os.environ.get("MXNET_MKLDNN_ENABLED", "1") != "0"


def mxnet_kernels(features: Any) -> Dict[str, Any]:
    """MXNet's CPU kernels (MKLDNN where :func:`mkldnn_on`, else its own) and its BLAS."""
    blas = {"BLAS_MKL": "MKL", "BLAS_OPEN": "OpenBLAS", "BLAS_ATLAS": "ATLAS",
            "BLAS_APPLE": "Apple Accelerate"}  # fmt: skip
    return {
        "library": "MKLDNN (oneDNN)" if mkldnn_on(features) else "MXNet's own operators",
        "mkldnn_built": _enabled(features, "MKLDNN"),
        "blas": next((text for name, text in blas.items() if _enabled(features, name)), None),
        **kernels.variables(("MXNET_MKLDNN_ENABLED",)),
    }


def gpu_contexts(count: int) -> List[str]:
    """MXNet context names of the first ``count`` GPUs: ``['gpu(0)', 'gpu(1)', ...]``."""
    return [f"gpu({index})" for index in range(count)]


class MXNetFramework:
    """Threads, GPU memory options, devices and framework info of MXNet (a mixin)."""

    framework_name = "MXNet"
    memory_default = (
        "pooled allocator grows on demand; MXNET_GPU_MEM_POOL_RESERVE=5 keeps 5% of GPU "
        "memory out of the pool"
    )

    def configure_threads(self) -> Dict[str, Any]:
        # read as mxnet is imported: the runner sets OMP_NUM_THREADS (unset: half the cores)
        return {
            "framework": {
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "MXNET_CPU_WORKER_NTHREADS": os.environ.get("MXNET_CPU_WORKER_NTHREADS", "1"),
            }
        }

    # no per-process fraction: the nearest is the share of GPU memory its pool leaves
    fraction_variable = "MXNET_GPU_MEM_POOL_RESERVE"

    @staticmethod
    def fraction_value(fraction: float) -> str:
        return str(round((1.0 - fraction) * 100))

    def configure_memory(self, fraction: Optional[float], growth: bool) -> Dict[str, Any]:
        applied: Dict[str, Any] = {}
        variables, _ = self.memory_variables(fraction, growth)
        os.environ.update(variables)  # before mxnet is imported
        if fraction is not None:
            reserve = variables["MXNET_GPU_MEM_POOL_RESERVE"]
            applied["MXNET_GPU_MEM_POOL_RESERVE"] = (
                f"{reserve} (the pool may use about {fraction:g} of GPU memory; MXNet has no "
                "hard per-process limit)"
            )
        if growth:
            applied["gpu_memory_growth"] = "not applicable: MXNet's pool always grows on demand"
        return applied

    def visible_gpus(self) -> int:
        import mxnet as mx

        return mx.context.num_gpus()

    def require_gpus(self, wanted: int, visible: int) -> None:
        if wanted <= visible:
            return
        import mxnet as mx

        fix = (
            f"Ask for at most {visible} (--mxnet-gpus {visible}), or make more GPUs visible "
            "(CUDA_VISIBLE_DEVICES)"
            if mx.runtime.Features().is_enabled("CUDA")
            else f"This MXNet {mx.__version__} is a CPU build: install its CUDA build "
            "(KBENCH_GPU=1 scripts/setup_envs.sh mxnet rebuilds envs/mxnet) on a machine "
            "with GPUs"
        )
        raise NoGpu(
            f"--mxnet-gpus {wanted}: expected {wanted} GPU(s) visible to MXNet; received "
            f"{visible}. {fix}, or drop --mxnet-gpus to train on {self.name}'s default device."
        )

    def op_profiler(self, model: Any, training: bool) -> Any:
        import mxnet as mx

        from kbench.profiling import ProfilerUnsupported

        raise ProfilerUnsupported(
            "this MXNet has its profiler, but kbench does not read MXNet profiles yet"
            if mx.runtime.Features().is_enabled("PROFILER")
            else f"mxnet {mx.__version__} was built without its profiler (mx.runtime."
            "Features(): PROFILER off), so no operator times can be read; a wheel built "
            "with USE_PROFILER=1 would have them"
        )

    def framework_peaks(self) -> List[Dict[str, Any]]:
        return [
            {
                "kind": "framework_peak", "bytes": None,
                "source": "not exposed by MXNet 1.9; the sampler's per-process NVML reading "
                "(process_nvml) stands in",
            }
        ]  # fmt: skip

    def framework_info(self) -> Dict[str, Any]:
        import mxnet as mx

        features = mx.runtime.Features()
        gpus = mx.context.num_gpus()
        return {
            "name": "mxnet",
            "version": mx.__version__,
            "devices": ["cpu"] + [f"gpu({i})" for i in range(gpus)],
            # Gluon's own context; keras-mxnet binds to its first GPU where it sees one.
            "device_used": str(getattr(self, "context", None) or ("gpu(0)" if gpus else "cpu(0)")),
            "features": {
                name: features.is_enabled(name)
                for name in ("CUDA", "CUDNN", "MKLDNN", "OPENMP", "DIST_KVSTORE", "PROFILER")
            },
            "cpu_kernels": mxnet_kernels(features),
        }

    def seed(self, seed: int) -> None:
        """Python's, numpy's and MXNet's generators: keras-mxnet draws initial weights with
        numpy, Gluon's initialisers with MXNet and numpy."""
        import random

        import mxnet as mx

        random.seed(seed)
        np.random.seed(seed)
        mx.random.seed(seed)

    def sync(self) -> None:
        import mxnet as mx

        mx.nd.waitall()


class MXNetGluonBackend(MXNetFramework, NativePort):
    name = "mxnet-gluon"
    hub_refusal = (
        "mxnet-gluon runs kbench's Gluon twins of its zoo models, and keras_hub models "
        "(Keras 3) have none; run it on tensorflow, jax or torch"
    )

    def load_framework(self, data_format: str) -> None:
        self.require_channels_first(data_format)
        import mxnet as mx

        from kbench_models import gluon as twins

        self.mx, self.twins = mx, twins
        self.context = mx.gpu(0) if mx.context.num_gpus() else mx.cpu()

    def apply_switches(self) -> None:
        board = self.switchboard
        if board.value("mixed_precision") == "off":
            board.applied("mixed_precision", "float32 throughout")
        else:
            board.not_applicable(
                "mixed_precision",
                "mxnet-gluon trains in float32 only: kbench does not drive MXNet's AMP "
                "(mxnet.contrib.amp)",
            )
        if self.gpus == 0 or board.is_default("tf32"):
            self.apply_tf32()  # no GPU: says so; auto: the framework's default
        else:
            board.not_applicable("tf32", "MXNet 1.9 has no switch kbench sets for TF32")
        if board.is_default("mxnet_gpus"):
            board.applied(
                "mxnet_gpus", f"one device, the first GPU if any, else cpu(): {self.context}"
            )
        else:
            board.not_applicable(
                "mxnet_gpus",
                f"kbench's Gluon loop trains on one device ({self.context}) and splits no batch "
                "across GPUs; --mxnet-gpus does that for keras-mxnet (backend mxnet) only",
            )

    def tf32_default(self) -> str:
        return "MXNet's default (cuBLAS and cuDNN decide; MXNet 1.9 sets no TF32 mode)"

    def build(self, name: str, input_shape: Sequence[int], num_classes: int) -> Any:
        import kbench_models

        self.refuse_user_model(name)
        self.refuse_fused_rnn_without_mkldnn(name)
        net = self.twins.build(name, tuple(input_shape), num_classes)
        net.collect_params().reset_ctx(self.context)
        net.kbench_spec = kbench_models.MODELS[name]
        net.kbench_input_shape = tuple(input_shape)
        # counted before hybridizing: a hybridized net calls no child block's hooks
        sample = self._arrays(np.zeros((1,) + net.kbench_input_shape))
        net.kbench_flops = self.twins.count_flops(net, sample)
        if self.switchboard.value("hybridize"):
            net.hybridize(**HYBRIDIZE_OPTIONS)
            options = ", ".join(f"{key}={value}" for key, value in HYBRIDIZE_OPTIONS.items())
            detail = (
                f"net.hybridize({options}): one cached symbolic graph (CachedOp) per input "
                "shape, built in the first step, its memory planned once"
            )
        else:
            detail = "imperative Gluon: not hybridized, operators dispatched one by one"
        self.switchboard.applied("hybridize", detail)
        return net

    def refuse_fused_rnn_without_mkldnn(self, name: str) -> None:
        """MXNet 1.9's RNN operator (Gluon's fused LSTM) has no CPU path without MKLDNN (its
        first forward pass stops: ``Check failed: in_data.size() == num_inputs (4 vs. 3)``)."""
        on_gpu = self.context.device_type == "gpu"
        if name not in FUSED_RNN_MODELS or on_gpu or mkldnn_on(self.mx.runtime.Features()):
            return
        raise Unsupported(
            f"mxnet-gluon: {name} runs on Gluon's fused LSTM (MXNet's RNN operator), which "
            "MXNet 1.9 runs on the CPU only through MKLDNN, and MXNET_MKLDNN_ENABLED=0 turns "
            "MKLDNN off (without it the first forward pass fails inside MXNet). Unset "
            "MXNET_MKLDNN_ENABLED, run on a GPU, or use backend mxnet (keras-mxnet unrolls "
            "the LSTM into ordinary operators)."
        )

    def output_shape(self, model: Any) -> List[int]:
        sample = self._arrays(np.zeros((1,) + model.kbench_input_shape))
        return [int(d) for d in model(sample).shape[1:]]

    def flops(self, model: Any) -> Dict[str, Any]:
        return counted_flops(model.kbench_flops)

    def compile(self, model: Any, optimizer: str, learning_rate: float, loss: str) -> None:
        mx = self.mx
        if optimizer == "adam":
            rule = mx.optimizer.Adam(
                learning_rate=learning_rate, beta1=0.9, beta2=0.999, epsilon=KERAS_EPSILON
            )
        else:
            rule = mx.optimizer.SGD(learning_rate=learning_rate, momentum=0.0)
        # the loss is a mean already: step(1) applies the gradient unscaled
        model.kbench_trainer = mx.gluon.Trainer(model.collect_params(), rule, kvstore=None)
        model.kbench_loss = loss
        model.kbench_penalties = self.twins.weight_penalties(model)

    def _arrays(self, x: np.ndarray, y: Optional[np.ndarray] = None):
        nd = self.mx.nd
        inputs = nd.array(x, ctx=self.context, dtype=np.float32)  # token ids too
        if y is None:
            return inputs
        return inputs, nd.array(y, ctx=self.context, dtype=np.float32)

    def _loss(self, model: Any, probabilities: Any, labels: Any) -> Any:
        """Keras' cross-entropy on probabilities (the batch mean), or from logits: the
        next token at every position (the mean over the batch's positions)."""
        nd = self.mx.nd
        if model.kbench_loss.endswith(FROM_LOGITS):
            log_p = nd.log_softmax(probabilities, axis=-1)
            return -nd.mean(nd.pick(log_p, labels, axis=-1))
        if model.kbench_loss == "binary_crossentropy":
            p = nd.clip(probabilities, KERAS_EPSILON, 1.0 - KERAS_EPSILON)
            labels = labels.reshape(p.shape)
            return -nd.mean(labels * nd.log(p) + (1 - labels) * nd.log(1 - p))
        # as Keras: normalise, clip, then the log of the true class
        p = probabilities / nd.sum(probabilities, axis=-1, keepdims=True)
        p = nd.clip(p, KERAS_EPSILON, 1.0 - KERAS_EPSILON)
        return -nd.mean(nd.log(nd.pick(p, labels.reshape((-1,)), axis=-1)))

    def _hits(self, model: Any, probabilities: Any, labels: Any) -> Any:
        nd = self.mx.nd
        if model.kbench_loss.endswith(FROM_LOGITS):  # a sequence's share of right tokens
            right = nd.argmax(probabilities, axis=-1) == labels
            return nd.sum(nd.mean(right.reshape((len(labels), -1)), axis=1))
        if model.kbench_loss == "binary_crossentropy":
            return nd.sum((probabilities > 0.5) == labels.reshape(probabilities.shape))
        return nd.sum(nd.argmax(probabilities, axis=-1) == labels.reshape((-1,)))

    def fit_batch(self, model: Any, x: np.ndarray, y: np.ndarray) -> Tuple[Any, Any]:
        inputs, labels = self._arrays(x, y)
        autograd = self.mx.autograd
        with autograd.record():  # training mode: BatchNorm on the batch's statistics
            probabilities = model(inputs)
            total = self._loss(model, probabilities, labels)
            if model.kbench_penalties:
                total = total + self.twins.regularization_loss(model, model.kbench_penalties)
        total.backward()  # MXNet moves BatchNorm's statistics here
        model.kbench_trainer.step(1)
        hits = self._hits(model, probabilities, labels)
        self.mx.nd.waitall()  # the update too, not only the loss it follows
        return total.asscalar(), hits.asscalar()

    def evaluate(
        self, model: Any, x: np.ndarray, y: np.ndarray, batch_size: int
    ) -> Tuple[float, float]:
        loss_sum = hits = 0.0
        penalty = float(self.twins.regularization_loss(model).asscalar())
        for start in range(0, len(x), batch_size):
            part = slice(start, start + batch_size)
            inputs, labels = self._arrays(x[part], y[part])
            probabilities = model(inputs)  # outside autograd.record(): inference mode
            loss_sum += float(self._loss(model, probabilities, labels).asscalar()) * len(inputs)
            hits += float(self._hits(model, probabilities, labels).asscalar())
        return loss_sum / len(x) + penalty, hits / len(x)

    def predict(self, model: Any, batch: np.ndarray) -> np.ndarray:
        return model(self._arrays(batch)).asnumpy()  # a host array: the device is done
