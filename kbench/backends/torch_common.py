"""PyTorch's own settings, shared by Keras on torch and the native PyTorch backend."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

from kbench.backends import kernels

NOT_APPLICABLE_WITHOUT_GPU = "not applicable: no GPU visible"


def mps_available(torch: Any) -> bool:
    """Whether PyTorch can run on an Apple GPU (Metal Performance Shaders) here."""
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def choose_device(torch: Any, wanted: str = "auto") -> str:
    """The device PyTorch runs on for ``--device wanted``: ``cpu`` when asked; else
    ``cuda`` where CUDA sees a GPU, ``mps`` on an Apple GPU, and ``cpu`` without either
    (``--device gpu`` then fails in :meth:`kbench.backends.base.Backend.start`)."""
    if wanted == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if mps_available(torch):
        return "mps"
    return "cpu"


def limit_current_device(fraction: float) -> Dict[str, str]:
    """Cap PyTorch's caching allocator on the one GPU this process uses.

    That GPU is the current device, chosen before the backend starts (device 0, or
    ``LOCAL_RANK`` under data-parallel training). Setting the fraction on every GPU
    would create a CUDA context on each of them and could leave the last one current,
    putting every rank on one GPU; so only the current device is capped, and it is
    checked to still be current afterwards. PyTorch takes only a ``float`` (an ``int``
    such as ``1`` from a sweep file raises ``TypeError``).
    """
    import torch

    index = torch.cuda.current_device()
    torch.cuda.set_per_process_memory_fraction(float(fraction), index)
    applied = {f"cuda:{index}": f"set_per_process_memory_fraction({float(fraction):g}, {index})"}
    after = torch.cuda.current_device()
    if after != index:
        torch.cuda.set_device(index)
        applied["current_device"] = (
            f"restored cuda:{index} (setting the fraction had made cuda:{after} current)"
        )
    return applied


class TorchFramework:
    """Threads, GPU memory options, devices and memory peaks of PyTorch (a mixin)."""

    gpus: int
    threads: int
    inter_op_threads: int
    framework_name = "PyTorch"
    memory_default = "caching allocator grows on demand; no fraction limit"
    requested_device = "auto"

    def start(self, data_format: str, device: str = "auto", *args: Any, **kwargs: Any) -> None:
        """Remember ``--device`` for the device choice, then start as every backend does.

        Keras' torch backend picks its device when it is imported, preferring an Apple
        GPU (MPS) to everything; ``KERAS_TORCH_DEVICE=cpu`` keeps ``--device cpu`` on the
        CPU there (CUDA_VISIBLE_DEVICES='' hides CUDA GPUs only)."""
        self.requested_device = device
        if device == "cpu" and "KERAS_TORCH_DEVICE" not in os.environ:
            os.environ["KERAS_TORCH_DEVICE"] = "cpu"  # before Keras is imported
        super().start(data_format, device, *args, **kwargs)  # type: ignore[misc]

    def device_used(self) -> str:
        """The device the model ran on: torch-native's own, or Keras' torch backend's."""
        device = getattr(self, "device", None)
        if device is not None:
            return str(device)
        core = sys.modules.get("keras.src.backend.torch.core")
        return str(core.get_device()) if core is not None else "unknown"

    def configure_threads(self) -> Dict[str, Any]:
        import torch

        torch.set_num_threads(self.threads)
        torch.set_num_interop_threads(self.inter_op_threads)
        return {
            "framework": {
                "intra_op": torch.get_num_threads(),
                "inter_op": torch.get_num_interop_threads(),
            }
        }

    def configure_memory(self, fraction: Optional[float], growth: bool) -> Dict[str, Any]:
        import torch

        applied: Dict[str, Any] = {}
        if growth:
            applied["gpu_memory_growth"] = (
                "not applicable: PyTorch's caching allocator always grows on demand"
            )
        if fraction is not None:
            if choose_device(torch, self.requested_device) == "mps":
                torch.mps.set_per_process_memory_fraction(float(fraction))
                applied["mps"] = f"torch.mps.set_per_process_memory_fraction({float(fraction):g})"
            elif not torch.cuda.is_available():
                applied["gpu_memory_fraction"] = NOT_APPLICABLE_WITHOUT_GPU
            else:
                applied.update(limit_current_device(fraction))
        return applied

    def visible_gpus(self) -> int:
        """CUDA's GPUs, or 1 where the run uses the Apple GPU (MPS)."""
        import torch

        if choose_device(torch, self.requested_device) == "mps":
            return 1
        return torch.cuda.device_count()

    def framework_peaks(self) -> List[Dict[str, Any]]:
        import torch

        if choose_device(torch, self.requested_device) == "mps":
            return [  # MPS keeps no peak: the allocator's size when the worker ends
                {
                    "kind": "framework_current",
                    "bytes": int(torch.mps.driver_allocated_memory()),
                    "device": "mps",
                    "source": "torch.mps.driver_allocated_memory() at the end (MPS has no peak)",
                }
            ]
        readings = []
        for index in range(self.gpus):
            for what, read in (
                ("allocated", torch.cuda.max_memory_allocated),
                ("reserved", torch.cuda.max_memory_reserved),
            ):
                readings.append(
                    {
                        "kind": "framework_peak",
                        "bytes": int(read(index)),
                        "device": f"cuda:{index}",
                        "source": f"torch.cuda.max_memory_{what}({index})",
                    }
                )
        return readings

    def framework_info(self) -> Dict[str, Any]:
        import torch

        return {
            "name": "torch",
            "version": torch.__version__,
            "devices": ["cpu"]
            + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
            + (["mps"] if mps_available(torch) else []),
            "cuda": torch.version.cuda,
            "device_used": self.device_used(),
            "cpu_kernels": kernels.torch_kernels(torch),
        }

    def tf32_default(self) -> str:
        import torch

        return (
            f"matmul allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
            f"cudnn allow_tf32={torch.backends.cudnn.allow_tf32} (PyTorch's defaults)"
        )

    def set_tf32(self, on: bool) -> str:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on
        return f"torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = {on}"

    def sync(self) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        elif self.gpus and mps_available(torch):
            torch.mps.synchronize()
