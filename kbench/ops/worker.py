"""The child process of one backend's operator benchmark:
``python -m kbench.ops.worker TASK_JSON``.

As :mod:`kbench.run.worker`, it sets nothing global: the parent chose the backend
(``KERAS_BACKEND``), the per-run ``KERAS_HOME`` and the thread variables before this
interpreter started. The backend's :class:`~kbench.backends.base.Backend` applies
the thread settings and checks the framework as for a model run; then every
operation at every size is checked and timed (:func:`kbench.ops.base.measure`),
with a progress line each.

The reply (:class:`kbench.run.protocol.WorkerReply`) is rewritten after every operation, with
status ``running`` until the end, so that a worker that is killed or times out
still leaves what it measured. Imports only what runs under both environments; the
framework comes in through the implementation module of the backend alone.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Type

from kbench.backends.base import is_out_of_memory
from kbench.measure.processes import watch_parent
from kbench.measure.stats import PrecisionGoal
from kbench.ops.base import OpsBackend, measure, summarize
from kbench.ops.spec import OPS
from kbench.results.jsonfile import read_json, write_json_atomic
from kbench.run.protocol import WorkerReply, emit_progress

log = logging.getLogger("kbench.ops.worker")

IMPLEMENTATIONS: Dict[str, str] = {
    "tensorflow": "kbench.ops.keras_ops:KerasOps",
    "jax": "kbench.ops.keras_ops:KerasOps",
    "torch": "kbench.ops.keras_ops:KerasOps",
    "torch-native": "kbench.ops.torch_ops:TorchOps",
    "mxnet": "kbench.ops.mxnet_ops:MXNetOps",
}


@dataclass(frozen=True)
class OpsTask:
    """What the parent asks of one worker (written as ``task.json``)."""

    config: Dict[str, Any]  # OpsConfig.to_dict(): backend, ops, sizes, dtype, repeats, ...
    image_data_format: str  # from the backend's keras.json
    reply_path: str
    started_at: float  # time.time() when the parent started the process

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> OpsTask:
        return cls(**data)


def implementation(backend: str) -> Type[OpsBackend]:
    module, name = IMPLEMENTATIONS[backend].split(":")
    return getattr(importlib.import_module(module), name)


def run(task: OpsTask) -> WorkerReply:
    config = task.config
    cls = implementation(config["backend"])
    runtime = cls.runtime(config["backend"], config["threads"])
    start = time.perf_counter()
    runtime.start(task.image_data_format, device=config["device"])
    ops = cls(gpu=runtime.gpus > 0, dtype=config["dtype"], image_data_format=task.image_data_format)
    import_time = time.perf_counter() - start
    framework = runtime.describe()
    entries: List[Dict[str, Any]] = []

    def metrics() -> Dict[str, Any]:
        return {
            "ops": entries,
            "device": "gpu" if ops.gpu else "cpu",
            "import_time_s": import_time,
            "statuses": summarize(entries),
        }

    max_memory = config.get("max_memory_mb")
    goal = PrecisionGoal.from_config(config)  # --target-precision, --time-budget
    for name in config["ops"]:
        for n in config["sizes"]:
            entry = measure(
                ops,
                OPS[name],
                n,
                dtype=config["dtype"],
                seed=config["seed"],
                warmup=config["warmup"],
                repeats=config["repeats"],
                max_memory_bytes=None if max_memory is None else max_memory * 2**20,
                goal=goal,
            )
            entries.append(entry)
            emit_progress("op", op=name, size=n, status=entry["status"],
                          median_s=entry.get("median_s"), reason=entry.get("reason"))  # fmt: skip
            partial = WorkerReply(status="running", metrics=metrics(), framework=framework)
            write_json_atomic(Path(task.reply_path), partial.to_dict())
    return WorkerReply(status="ok", metrics=metrics(), framework=framework)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="[ops worker] %(message)s", stream=sys.stderr)
    if len(argv) != 1:
        log.error("usage: python -m kbench.ops.worker TASK_JSON (kbench ops writes TASK_JSON)")
        return 2
    watch_parent()  # ends within a second of kbench ops, even after kill -9
    task = OpsTask.from_dict(read_json(Path(argv[0])))
    try:
        reply = run(task)
        write_json_atomic(Path(task.reply_path), reply.to_dict())
    except BaseException as err:  # noqa: B036 - every failure must reach the parent
        reply_path = Path(task.reply_path)
        partial = read_json(reply_path) if reply_path.exists() else {}
        reply = WorkerReply(
            status="oom" if is_out_of_memory(err) else "failed",
            metrics=partial.get("metrics", {}),
            framework=partial.get("framework", {}),
            error={
                "type": type(err).__name__,
                "message": str(err),
                "traceback": traceback.format_exc(),
            },
        )
        write_json_atomic(reply_path, reply.to_dict())
        log.error("%s: %s", type(err).__name__, err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
