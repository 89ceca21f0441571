"""PyTorch itself: its settings, shared by Keras on torch and the native backend
(:class:`TorchFramework`), and plain PyTorch with no Keras, the models'
``torch.nn.Module`` twins in a hand-written loop (:class:`TorchNativeBackend`, a
:class:`~kbench.backends.base.NativePort`).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.backends import kernels
from kbench.backends.base import (
    KERAS_EPSILON,
    USER_MODEL_NO_TWIN,
    NativePort,
    Unsupported,
    counted_flops,
    peak_reading,
)
from kbench_models import FROM_LOGITS
from kbench_models import short_name as kbench_short

NOT_APPLICABLE_WITHOUT_GPU = "not applicable: no GPU visible"


def mps_available(torch: Any) -> bool:
    """Whether PyTorch can run on an Apple GPU (Metal Performance Shaders) here."""
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def choose_device(torch: Any, wanted: str = "auto") -> str:
    """The device PyTorch runs on for ``--device wanted``: ``cpu`` when asked, else ``cuda``
    or ``mps`` where there is one (``--device gpu`` without either fails in ``start``)."""
    if wanted == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if mps_available(torch):
        return "mps"
    return "cpu"


def limit_current_device(fraction: float) -> Dict[str, str]:
    """Cap PyTorch's caching allocator on the one GPU this process uses, the current device
    (0, or ``LOCAL_RANK`` under data-parallel training): setting it on every GPU would make
    a CUDA context on each and could leave the last one current, putting every rank on one
    GPU. PyTorch takes only a ``float`` (``1`` from a sweep file raises ``TypeError``)."""
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
        """Remember ``--device``. Keras' torch backend picks its device as it is imported, an
        Apple GPU first: ``KERAS_TORCH_DEVICE=cpu`` keeps ``--device cpu`` on the CPU."""
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
                "intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads(),
            }
        }  # fmt: skip

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
                    "kind": "framework_current", "bytes": int(torch.mps.driver_allocated_memory()),
                    "device": "mps",
                    "source": "torch.mps.driver_allocated_memory() at the end (MPS has no peak)",
                }
            ]  # fmt: skip
        readings = []
        for index in range(self.gpus):
            for what, read in (
                ("allocated", torch.cuda.max_memory_allocated),
                ("reserved", torch.cuda.max_memory_reserved),
            ):
                source = f"torch.cuda.max_memory_{what}({index})"
                readings.append(peak_reading(read(index), f"cuda:{index}", source))
        return readings

    def framework_info(self) -> Dict[str, Any]:
        import torch

        return {
            "name": "torch", "version": torch.__version__,
            "devices": ["cpu"]
            + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
            + (["mps"] if mps_available(torch) else []),
            "cuda": torch.version.cuda, "device_used": self.device_used(),
            "cpu_kernels": kernels.torch_kernels(torch),
        }  # fmt: skip

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


class TorchNativeBackend(TorchFramework, NativePort):
    name = "torch-native"
    hub_refusal = (
        "torch-native runs kbench's PyTorch twins of its zoo models (and a user model's "
        "build_torch), and keras_hub ships no PyTorch twin of its models; run it on Keras' "
        "torch backend (-b torch), which runs the same model on PyTorch"
    )
    scaler: Any = None  # torch.amp.GradScaler under float16 (apply_switches)

    def load_framework(self, data_format: str) -> None:
        self.require_channels_first(data_format)
        import torch

        from kbench_models import pytorch as twins

        self.torch, self.twins = torch, twins
        self.device = torch.device(choose_device(torch, self.requested_device))

    def end_case(self) -> None:
        """Reset torch.compile's caches and recompile counts, as Keras' clear_session does."""
        if "torch._dynamo" in sys.modules:  # imported by torch.compile only
            self.torch._dynamo.reset()

    def apply_switches(self) -> None:
        board = self.switchboard
        mode = board.value("mixed_precision")
        self.scaler = None
        if mode == "float16":
            # as Keras' LossScaleOptimizer: small float16 gradients would underflow to zero
            self.scaler = self.torch.amp.GradScaler(self.device.type)
            self.loss_scaling = (
                f"torch.amp.GradScaler({self.device.type!r}) (dynamic loss scale, initial "
                f"{self.scaler.get_scale():g})"
            )
        board.applied(
            "mixed_precision",
            "float32 throughout"
            if mode == "off"
            else f"torch.autocast({self.device.type!r}, dtype=torch.{mode}) around the forward "
            "pass and the loss; weights and optimizer in float32"
            + ("; losses scaled by torch.amp.GradScaler" if self.scaler is not None else ""),
        )
        self.apply_tf32()

    def autocast(self) -> Any:
        mode = self.switchboard.value("mixed_precision")
        if mode == "off":
            return contextlib.nullcontext()
        return self.torch.autocast(self.device.type, dtype=getattr(self.torch, mode))

    def seed(self, seed: int) -> None:
        self.torch.manual_seed(seed)

    def build(self, name: str, input_shape: Sequence[int], num_classes: int) -> Any:
        import kbench_models

        spec = kbench_models.spec_for(name)
        if spec.is_user:
            model = self.user_twin(spec, tuple(input_shape), num_classes).to(self.device)
        else:
            model = self.twins.build(name, tuple(input_shape), num_classes).to(self.device)
        model.kbench_spec = spec
        model.kbench_input_shape = tuple(input_shape)
        if self.switchboard.value("torch_compile"):
            call = self.torch.compile(model)
            detail = "torch.compile(model): inductor, default mode; it compiles in the first steps"
        else:
            call = model
            detail = "eager PyTorch"
        model.__dict__["kbench_call"] = call  # not a submodule: parameters stay counted once
        self.switchboard.applied("torch_compile", detail)
        return model

    def user_twin(self, spec: Any, input_shape: Tuple[int, ...], num_classes: int) -> Any:
        """The twin a user model's file defines (``build_torch``), else :class:`Unsupported`."""
        from kbench_models import user

        twin = (spec.function or "build") + user.TORCH_SUFFIX
        make = user.load_torch_twin(spec.path, spec.function)
        if make is None:
            hint = (
                ""
                if user.is_saved_model(spec.path)
                else f"; or define {twin}(input_shape, num_classes) in the model file, "
                "returning its PyTorch twin (see examples/my_model.py)"
            )
            raise Unsupported(
                USER_MODEL_NO_TWIN.format(backend=self.name, model=kbench_short(spec.name)) + hint
            )
        model = make(input_shape, num_classes)
        if not isinstance(model, self.twins.KerasTwin):
            raise TypeError(
                f"{kbench_short(spec.name)}: {twin} must return a "
                "kbench_models.pytorch.KerasTwin (a torch.nn.Module whose keras_layers() "
                "lists the Keras model's weighted layers in order, as the zoo's twins in "
                f"models/pytorch/ do); it returned {type(model).__module__}."
                f"{type(model).__qualname__}."
            )
        return model

    def output_shape(self, model: Any) -> List[int]:
        model.eval()
        with self.torch.no_grad():
            sample = self._tensors(model, np.zeros((1,) + model.kbench_input_shape))
            return [int(d) for d in model(sample).shape[1:]]

    def flops(self, model: Any) -> Dict[str, Any]:
        nn = self.torch.nn
        total = [0]

        def hook(module, inputs, output):
            if isinstance(module, nn.Conv2d):
                kh, kw = module.kernel_size
                spatial = output.shape[2] * output.shape[3]
                total[0] += 2 * kh * kw * module.in_channels * module.out_channels * spatial
            elif isinstance(module, nn.Linear):
                positions = int(np.prod(output.shape[1:-1])) if output.dim() > 2 else 1
                total[0] += 2 * module.in_features * module.out_features * positions
            elif isinstance(module, nn.LSTM):
                steps = inputs[0].shape[1]
                size = module.input_size + module.hidden_size
                total[0] += 2 * 4 * module.hidden_size * size * steps

        handles = [m.register_forward_hook(hook) for m in model.modules()
                   if isinstance(m, (nn.Conv2d, nn.Linear, nn.LSTM))]  # fmt: skip
        try:
            self.output_shape(model)
        finally:
            for handle in handles:
                handle.remove()
        return counted_flops(total[0])

    def compile(self, model: Any, optimizer: str, learning_rate: float, loss: str) -> None:
        optim = self.torch.optim
        if optimizer == "adam":
            model.kbench_optimizer = optim.Adam(
                model.parameters(), lr=learning_rate, betas=(0.9, 0.999), eps=KERAS_EPSILON
            )
        else:
            model.kbench_optimizer = optim.SGD(model.parameters(), lr=learning_rate)
        model.kbench_loss = loss

    def _tensors(self, model: Any, x: np.ndarray, y: Optional[np.ndarray] = None):
        torch = self.torch
        dtype = torch.long if model.kbench_spec.input_kind == "tokens" else torch.float32
        inputs = torch.as_tensor(x, dtype=dtype).to(self.device, non_blocking=True)
        if y is None:
            return inputs
        return inputs, torch.as_tensor(y).to(self.device, non_blocking=True)

    def _loss_and_hits(self, model: Any, probabilities: Any, labels: Any) -> Tuple[Any, Any]:
        """Keras' cross-entropy on probabilities (or from logits: next tokens at every
        position), and the number of correct answers (a sequence's: its share of positions)."""
        torch = self.torch
        if model.kbench_loss.endswith(FROM_LOGITS):
            logits, labels = probabilities.float(), labels.long()
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
            )
            right = (logits.argmax(dim=-1) == labels).float()
            return loss, right.reshape(len(labels), -1).mean(dim=1).sum()
        if model.kbench_loss == "binary_crossentropy":
            p = probabilities.clamp(KERAS_EPSILON, 1.0 - KERAS_EPSILON)
            labels = labels.float().reshape(p.shape)
            loss = -(labels * torch.log(p) + (1 - labels) * torch.log(1 - p)).mean()
            hits = ((p > 0.5).float() == labels).sum()
        else:  # as Keras: normalise, clip, then the log of the true class
            labels = labels.long().reshape(-1)
            p = probabilities / probabilities.sum(dim=-1, keepdim=True)
            p = p.clamp(KERAS_EPSILON, 1.0 - KERAS_EPSILON)
            loss = -torch.log(p.gather(1, labels[:, None])).mean()
            hits = (p.argmax(dim=-1) == labels).sum()
        return loss, hits

    def training(self, model: Any) -> None:
        model.train()

    def fit_batch(self, model: Any, x: np.ndarray, y: np.ndarray) -> Tuple[Any, Any]:
        inputs, labels = self._tensors(model, x, y)
        with self.autocast():
            loss, hits = self._loss_and_hits(model, model.kbench_call(inputs), labels)
        total = loss.float() + self.twins.regularization_loss(model)
        model.kbench_optimizer.zero_grad(set_to_none=True)
        if self.scaler is None:
            total.backward()
            model.kbench_optimizer.step()
        else:  # skips the update where the scaled gradients overflowed, then adapts
            self.scaler.scale(total).backward()
            self.scaler.step(model.kbench_optimizer)
            self.scaler.update()
        return total.detach(), hits.detach()

    def op_profiler(self, model: Any, training: bool) -> Any:
        from kbench.profiling.captures import TorchCapture

        # PyTorch marks backward and Optimizer.step itself; _tensors is the data phase
        return TorchCapture(
            gpu=self.gpus > 0, training=training, marks=[(self, "_tensors", "data")]
        )

    def evaluate(
        self, model: Any, x: np.ndarray, y: np.ndarray, batch_size: int
    ) -> Tuple[float, float]:
        model.eval()
        loss_sum = hits = 0.0
        with self.torch.no_grad():
            penalty = float(self.twins.regularization_loss(model))
            for start in range(0, len(x), batch_size):
                inputs, labels = self._tensors(
                    model, x[start : start + batch_size], y[start : start + batch_size]
                )
                loss, correct = self._loss_and_hits(model, model(inputs), labels)
                loss_sum += float(loss) * len(inputs)
                hits += float(correct)
        return loss_sum / len(x) + penalty, hits / len(x)

    def predict(self, model: Any, batch: np.ndarray) -> np.ndarray:
        model.eval()
        with self.torch.no_grad(), self.autocast():
            return model.kbench_call(self._tensors(model, batch)).float().cpu().numpy()
