"""torch-ddp: DistributedDataParallel over torch.distributed, one process per worker.

torchrun starts the workers (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``PORT`` set
by it); each joins the process group (gloo on the CPU, NCCL when the worker has a
GPU) and wraps its model in ``DistributedDataParallel``: the PyTorch twin for
``torch-native``, the Keras model itself for ``torch`` (on the torch backend a Keras
model is a ``torch.nn.Module``), trained in a custom loop with a torch optimizer
(Keras' Adam epsilon, 1e-7) and Keras' loss function, as Keras' own guide to
distributed training on PyTorch does. Buffers are not synced at each forward: each
worker keeps its own BatchNorm statistics, as the other engines do.

The phases: forward (model and loss), backward (until the last gradient bucket is
ready: a DDP communication hook stamps each bucket as autograd hands it over, then
runs the standard all-reduce), update (``optimizer.step()``); communication is the
rest, mostly the wait at the end of ``backward()`` for the all-reduce to finish.
On a GPU the clock is synchronized at each phase edge and a bucket's stamp is when
the host handed it to NCCL.
"""

from __future__ import annotations

import datetime as dt
import inspect
import os
import time
from functools import partial
from typing import Any, Dict, List, Tuple

from kbench.backends.base import NativePort
from kbench.distributed.engines import Engine
from kbench.distributed.worker import Context, StepOut, build_model, host_loop, own_reply


class TorchDDP(Engine):
    mode = "torch-ddp"
    method = (
        "host clock per phase (device synchronized on a GPU); backward ends when the last "
        "gradient bucket reaches DDP's communication hook; update is optimizer.step(); "
        "comm is the rest (the wait for the all-reduce)"
    )

    def before_start(self, ctx: Context) -> None:
        import torch

        if torch.cuda.is_available() and ctx.config["device"] != "cpu":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))

    def setup(self, ctx: Context) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.cuda = ctx.backend.gpus > 0
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.cuda else None
        timeout = dt.timedelta(seconds=float(ctx.config["timeout_s"]))
        dist.init_process_group("nccl" if self.cuda else "gloo", timeout=timeout)
        self.process_backend = dist.get_backend()

    def sync(self) -> float:
        if self.cuda:
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def train(self, ctx: Context) -> Dict[str, Any]:
        native = isinstance(ctx.backend, NativePort)  # the port's own module, not a Keras model
        model = build_model(ctx, compiled=native)
        ddp, ready = self._wrap(model)
        if native:
            optimizer = model.kbench_optimizer
            forward, convert, predict = self._native(ctx, model, ddp)
        else:
            optimizer = self._torch_optimizer(ctx, model)
            forward, convert, predict = self._keras(ctx, model, ddp)

        def step(inputs, labels) -> StepOut:
            begin = time.perf_counter()
            total, hits = forward(inputs, labels)
            forwarded = self.sync()
            ready.clear()
            optimizer.zero_grad(set_to_none=True)
            total.backward()
            backwarded = self.sync()
            computed = ready[-1] if ready else backwarded
            optimizer.step()
            updated = self.sync()
            return StepOut(
                loss=float(total.detach()), forward=forwarded - begin,
                backward=computed - forwarded, update=updated - backwarded, hits=float(hits),
            )  # fmt: skip

        steps = host_loop(ctx, convert, step)
        engine = {
            "process_group": self.process_backend, "world_size": self.dist.get_world_size(),
            "buckets": len(ready),
        }  # fmt: skip
        return own_reply(ctx, model, steps, self.method, predict, engine)

    def _wrap(self, model: Any) -> Tuple[Any, List[float]]:
        """The model in ``DistributedDataParallel``, and the list its communication hook
        stamps (``time.perf_counter()``) as each gradient bucket is handed over."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel

        # buffers (BatchNorm statistics) synced once at the start, then each worker's own
        if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
            no_sync = {"forward_sync_buffers": False}  # torch >= 2.13
        else:
            no_sync = {"broadcast_buffers": False}
        ddp = DistributedDataParallel(
            model, device_ids=[self.device.index] if self.cuda else None, **no_sync
        )
        ready: List[float] = []

        def timed_allreduce(state, bucket):
            ready.append(time.perf_counter())
            return default_hooks.allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, timed_allreduce)
        return ddp, ready

    def _torch_optimizer(self, ctx: Context, model: Any) -> Any:
        params = [p for p in model.parameters() if p.requires_grad]
        lr = ctx.config["learning_rate"]
        if ctx.config["optimizer"] == "adam":
            return self.torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-7)
        return self.torch.optim.SGD(params, lr=lr)

    def _native(self, ctx: Context, model: Any, ddp: Any):
        """The port's own loss and conversion; predicting as the backend does (with the
        switches at their defaults, as every data-parallel run has them)."""
        backend = ctx.backend

        def forward(inputs, labels):
            with backend.autocast():
                loss, hits = backend._loss_and_hits(model, ddp(inputs), labels)
            return loss.float() + backend.twins.regularization_loss(model), hits

        model.train()
        return forward, partial(backend._tensors, model), partial(backend.predict, model)

    def _keras(self, ctx: Context, model: Any, ddp: Any):
        import keras

        torch = self.torch
        loss_fn = keras.losses.get(ctx.loss)
        device = self.device or torch.device("cpu")
        binary = ctx.loss == "binary_crossentropy"
        tokens = ctx.arrays["x_train"].dtype.kind in "iu"

        def forward(inputs, labels):
            probabilities = ddp(inputs, training=True)
            loss = torch.mean(loss_fn(labels, probabilities))
            if model.losses:
                loss = loss + sum(model.losses)
            if binary:
                hits = ((probabilities > 0.5).float() == labels.reshape(probabilities.shape)).sum()
            else:
                hits = (probabilities.argmax(dim=-1) == labels.reshape(-1)).sum()
            return loss, hits

        def convert(x, y):
            dtype = torch.long if tokens else torch.float32
            return (
                torch.as_tensor(x, dtype=dtype, device=device), torch.as_tensor(y, device=device),
            )  # fmt: skip

        return forward, convert, partial(ctx.backend.predict, model)

    def finish(self, ctx: Context) -> None:
        # Without the barrier a rank sometimes aborts at exit and torchrun returns 1.
        self.dist.barrier()
        self.dist.destroy_process_group()
