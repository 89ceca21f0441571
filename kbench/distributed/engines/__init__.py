"""The worker side of each data-parallel mode: one small class per framework engine.

An engine says which roles train (:meth:`Engine.trains`), serves the others
(MXNet's scheduler and server, TensorFlow's parameter server and worker servers),
and for a training process sets up the framework's own machinery
(:meth:`Engine.before_start` before the framework starts, :meth:`Engine.setup` after),
trains (:meth:`Engine.train`, returning the reply: per-worker summaries from
:func:`kbench.distributed.worker.summarize`, the model, rank 0's evaluation) and
tears down (:meth:`Engine.finish`). Modules are imported only inside the worker,
under the backend's interpreter.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict

ENGINES: Dict[str, str] = {
    "torch-ddp": "kbench.distributed.engines.torch_ddp:TorchDDP",
    "tf-multiworker": "kbench.distributed.engines.tf:MultiWorker",
    "tf-mirrored": "kbench.distributed.engines.tf:Mirrored",
    "tf-ps": "kbench.distributed.engines.tf:ParameterServer",
    "jax": "kbench.distributed.engines.jax:JaxDataParallel",
    "mxnet-sync": "kbench.distributed.engines.mxnet:KVStoreSync",
    "mxnet-async": "kbench.distributed.engines.mxnet:KVStoreAsync",
}


class Engine:
    """Defaults: every process trains; nothing to set up or tear down."""

    mode: str = ""
    # how the phases of a step are measured, recorded with every worker's summary
    method: str = ""

    def trains(self, role: str) -> bool:
        return role == "worker"

    def serve(self, ctx: Any) -> None:
        raise RuntimeError(f"{self.mode}: no process of role {ctx.role!r} serves")

    def before_start(self, ctx: Any) -> None:
        """Before the backend starts its framework (JAX's distributed client)."""

    def setup(self, ctx: Any) -> None:
        """After the framework started, before data and model (process group, strategy)."""

    def train(self, ctx: Any) -> Dict[str, Any]:
        raise NotImplementedError

    def finish(self, ctx: Any) -> None:
        """After the reply is written (leave the process group)."""


def load_engine(mode: str) -> Engine:
    module_name, class_name = ENGINES[mode].split(":")
    return getattr(importlib.import_module(module_name), class_name)()
