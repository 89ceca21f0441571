"""Plain PyTorch, no Keras: the models' ``torch.nn.Module`` twins in a hand-written loop.

It shows what Keras costs on top of raw PyTorch. The loop computes what Keras
computes, so that ``kbench parity`` can hold it to the Keras backends: the loss is
cross-entropy on the model's probabilities clipped to [1e-7, 1 - 1e-7] (Keras'
epsilon) plus the model's weight penalties; Adam uses Keras' epsilon 1e-7. Images
are NCHW (``channels_first``) only.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench.backends.base import (
    USER_MODEL_NO_TWIN,
    BackendMismatch,
    NativePort,
    Unsupported,
    counted_flops,
)
from kbench.backends.torch_common import TorchFramework, choose_device
from kbench_models import short_name as kbench_short

KERAS_EPSILON = 1e-7


class TorchNativeBackend(TorchFramework, NativePort):
    name = "torch-native"
    scaler: Any = None  # torch.amp.GradScaler under float16 (apply_switches)

    def load_framework(self, data_format: str) -> None:
        if data_format != "channels_first":
            raise BackendMismatch(
                f"torch-native takes images as NCHW (channels_first); the run asked for "
                f"{data_format!r}. Drop --data-format or use channels_first."
            )
        import torch

        from kbench_models import pytorch as twins

        self.torch, self.twins = torch, twins
        self.device = torch.device(choose_device(torch, self.requested_device))

    def end_case(self) -> None:
        """A warm worker's next task starts without the compiled code of the last one
        (as Keras' clear_session resets dynamo on its torch backend): torch.compile's
        caches and recompile counts would carry over to a later compiled model."""
        if "torch._dynamo" in sys.modules:  # imported by torch.compile only
            self.torch._dynamo.reset()

    def apply_switches(self) -> None:
        board = self.switchboard
        mode = board.value("mixed_precision")
        self.scaler = None
        if mode == "float16":
            # as Keras' LossScaleOptimizer under mixed_float16: small float16 gradients
            # would underflow to zero without a (dynamic) loss scale
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

    def describe(self) -> Dict[str, Any]:
        info = super().describe()
        info.update(keras_version=None, keras_backend=None, image_data_format="channels_first")
        return info

    # ------------------------------------------------------------------ model

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

    def count_params(self, model: Any) -> int:
        return int(self.twins.keras_param_count(model))

    def _sample(self, model: Any, batch: int = 1) -> Any:
        torch = self.torch
        shape = (batch,) + model.kbench_input_shape
        if model.kbench_spec.input_kind == "tokens":
            return torch.zeros(shape, dtype=torch.long, device=self.device)
        return torch.zeros(shape, dtype=torch.float32, device=self.device)

    def output_shape(self, model: Any) -> List[int]:
        model.eval()
        with self.torch.no_grad():
            return [int(d) for d in model(self._sample(model)).shape[1:]]

    def flops(self, model: Any) -> Dict[str, Any]:
        """The count of :data:`~kbench.backends.base.FLOPS_METHOD`, read off the modules
        during one forward pass."""
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

    # -------------------------------------------------------------- training

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
        """Keras' cross-entropy on probabilities, and the number of correct answers."""
        torch = self.torch
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

    def _step(self, model: Any, inputs: Any, labels: Any) -> Tuple[Any, Any]:
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

    def fit_epoch(
        self, model: Any, x: np.ndarray, y: np.ndarray, batch_size: int, clock: Any
    ) -> Dict[str, float]:
        model.train()
        loss_sum = hits_sum = 0.0
        steps = len(x) // batch_size
        for step in range(steps):
            clock.batch_begin()
            part = slice(step * batch_size, (step + 1) * batch_size)
            inputs, labels = self._tensors(model, x[part], y[part])
            loss, hits = self._step(model, inputs, labels)
            clock.batch_end({"loss": loss})  # float() waits for the device
            loss_sum += float(loss)
            hits_sum += float(hits)
        return {"loss": loss_sum / max(steps, 1), "accuracy": hits_sum / max(steps * batch_size, 1)}

    def op_profiler(self, model: Any, training: bool) -> Any:
        from kbench.profiling.captures import TorchCapture

        # PyTorch marks backward and Optimizer.step itself; the batch's conversion to
        # tensors is the data phase
        return TorchCapture(
            gpu=self.gpus > 0, training=training, marks=[(self, "_tensors", "data")]
        )

    def train_step(self, model: Any, x: np.ndarray, y: np.ndarray) -> float:
        model.train()
        loss, _ = self._step(model, *self._tensors(model, x, y))
        return float(loss)

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
