"""MXNet's own settings, shared by keras-mxnet and the native Gluon backend.

Runs under the MXNet environment's numpy<1.24: nothing here imports Keras.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from kbench.backends import kernels
from kbench.backends.base import NoGpu


def _enabled(features: Any, name: str) -> bool:
    """Whether MXNet was built with a feature (``mx.runtime.Features()``)."""
    try:
        return bool(features.is_enabled(name))
    except RuntimeError:  # a feature this MXNet does not know
        return False


def mkldnn_on(features: Any) -> bool:
    """Whether MXNet runs its MKLDNN (oneDNN) CPU operators: built in, and not turned off
    by MXNET_MKLDNN_ENABLED=0."""
    return _enabled(features, "MKLDNN") and os.environ.get("MXNET_MKLDNN_ENABLED", "1") != "0"


def mxnet_kernels(features: Any) -> Dict[str, Any]:
    """MXNet's CPU kernels: its MKLDNN (oneDNN) operators where built in and not turned
    off by MXNET_MKLDNN_ENABLED=0, else its own; and the BLAS it was built with."""
    built = _enabled(features, "MKLDNN")
    on = mkldnn_on(features)
    blas = {"BLAS_MKL": "MKL", "BLAS_OPEN": "OpenBLAS", "BLAS_ATLAS": "ATLAS",
            "BLAS_APPLE": "Apple Accelerate"}  # fmt: skip
    return {
        "library": "MKLDNN (oneDNN)" if on else "MXNet's own operators",
        "mkldnn_built": built,
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
        # MXNet reads its thread counts from the environment when it is imported;
        # the runner sets OMP_NUM_THREADS before the interpreter starts. Unset, MXNet
        # would use half the cores.
        return {
            "framework": {
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "MXNET_CPU_WORKER_NTHREADS": os.environ.get("MXNET_CPU_WORKER_NTHREADS", "1"),
            }
        }

    # MXNet has no per-process fraction. The nearest control is the share of GPU
    # memory its pool leaves to others, read when mxnet is imported.
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
        """Fail the run, saying how to fix it, when fewer than ``wanted`` GPUs are visible."""
        if wanted <= visible:
            return
        import mxnet as mx

        if mx.runtime.Features().is_enabled("CUDA"):
            fix = (
                f"Ask for at most {visible} (--mxnet-gpus {visible}), or make more GPUs "
                "visible (CUDA_VISIBLE_DEVICES)"
            )
        else:
            fix = (
                f"This MXNet {mx.__version__} is a CPU build: install its CUDA build "
                "(KBENCH_GPU=1 scripts/setup_envs.sh mxnet rebuilds envs/mxnet) on a "
                "machine with GPUs"
            )
        raise NoGpu(
            f"--mxnet-gpus {wanted}: expected {wanted} GPU(s) visible to MXNet; received "
            f"{visible}. {fix}, or drop --mxnet-gpus to train on {self.name}'s default device."
        )

    def op_profiler(self, model: Any, training: bool) -> Any:
        import mxnet as mx

        from kbench.profiling import ProfilerUnsupported

        if not mx.runtime.Features().is_enabled("PROFILER"):
            raise ProfilerUnsupported(
                f"mxnet {mx.__version__} was built without its profiler "
                "(mx.runtime.Features(): PROFILER off), so no operator times can be read; "
                "a wheel built with USE_PROFILER=1 would have them"
            )
        raise ProfilerUnsupported(
            "this MXNet has its profiler, but kbench does not read MXNet profiles yet"
        )

    def framework_peaks(self) -> List[Dict[str, Any]]:
        return [
            {
                "kind": "framework_peak",
                "bytes": None,
                "source": "not exposed by MXNet 1.9; the sampler's per-process NVML reading "
                "(process_nvml) stands in",
            }
        ]

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

    def seed_generators(self, seed: int) -> None:
        """Python's, numpy's and MXNet's generators (initialisers draw from the last two)."""
        import random

        import mxnet as mx
        import numpy as np

        random.seed(seed)
        np.random.seed(seed)
        mx.random.seed(seed)

    def sync(self) -> None:
        import mxnet as mx

        mx.nd.waitall()
