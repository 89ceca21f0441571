"""The child process of one run, or of several: ``python -m kbench.run.worker RUN_JSON...``.

It sets nothing global: the runner chose the backend (``KERAS_BACKEND``), the
per-run ``KERAS_HOME`` holding its keras.json, and the thread variables before
this interpreter started. Whatever happens, it tries to leave a reply: metrics on
success, the exception and traceback on failure. A crash that kills the
interpreter leaves none, and the runner records that instead. It ends within a
second of its runner (:mod:`kbench.run.parent_watch`): nobody would read its reply.

Given several task files (a warm worker: the runner groups runs that share a
backend, data format, threads (intra- and inter-op), device, memory options and
start-up switches: :func:`kbench.run.runner.worker_key`), it starts the framework once
and runs each task in turn, each in its own ``try``, with the framework's session
cleared between them and each task's own per-run switches applied
(:meth:`kbench.backends.base.Backend.next_case`), and writes each task's reply as soon
as it is done; the second and later tasks record ``import_time_s`` 0 and
``warm_worker`` in their metrics. Where isolation is what matters (timings one can
compare with a cold process, crashes, memory), the runner gives each run its own worker.

Imports only what runs under both environments (Keras 3 and keras-mxnet).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

import kbench_models  # the registry only: no Keras import
from kbench import datasets
from kbench.backends import load_backend
from kbench.backends.base import Unsupported, is_out_of_memory
from kbench.backends.switches import SWITCHES
from kbench.measure.precision import tracker_for
from kbench.results.jsonfile import read_json, write_json_atomic
from kbench.run.parent_watch import watch_parent
from kbench.run.task import WorkerReply, WorkerTask, emit_progress

log = logging.getLogger("kbench.run.worker")


def start_backend(task: WorkerTask) -> Any:
    """The task's backend, started (threads, memory options, Keras imported and checked);
    ``backend.import_time_s`` says how long the start took."""
    config = task.config
    backend = load_backend(config["backend"])(
        threads=config["threads"],
        switches=task_switches(task),
        inter_op_threads=config.get("inter_op_threads"),  # absent from older task files
    )
    import_start = time.perf_counter()
    backend.start(
        task.data_format,
        device=config["device"],
        gpu_memory_fraction=config["gpu_memory_fraction"],
        gpu_memory_growth=config["gpu_memory_growth"],
    )
    backend.import_time_s = time.perf_counter() - import_start
    return backend


def task_switches(task: WorkerTask) -> Dict[str, Any]:
    return {name: task.config[name] for name in SWITCHES if name in task.config}


def run(task: WorkerTask, backend: Any = None, warm: bool = False) -> WorkerReply:
    """One task, on ``backend`` when given (started for it, or, ``warm``, by an earlier
    task, whose models it lets go of first, taking this task's per-run switches)."""
    backend = backend if backend is not None else start_backend(task)
    if warm:
        backend.next_case(task_switches(task))
    config = task.config
    import_time = 0.0 if warm else backend.import_time_s

    data, loss, arrays = task_arrays(task)
    input_shape = arrays["x_train"].shape[1:]
    model, build_time = build_model(backend, task, input_shape, data.num_classes)
    flops = backend.flops(model)

    stages = dict(
        batch_size=config["batch_size"],
        warmup_steps=config["warmup_steps"],
        process_start=time.time() if warm else task.started_at,
        import_time_s=import_time,
        build_time_s=build_time,
    )
    tracker = tracker_for(config, config["batch_size"])  # --target-precision, --time-budget
    if task.parity is not None:
        from kbench.run.replay import replay

        metrics = replay(
            backend,
            model,
            arrays,
            np.load(task.order_path),
            parity=task.parity,
            batch_size=config["batch_size"],
            learning_rate=config["learning_rate"],
            loss=loss,
            data_format=task.data_format,
        )
    elif config["mode"] == "inference":
        from kbench.run.inference import infer

        metrics = infer(
            backend, model, arrays, duration_s=config["duration_s"], tracker=tracker, **stages
        )
    else:
        from kbench.run.trainer import train

        metrics = train(
            backend,
            model,
            arrays,
            np.load(task.order_path),
            optimizer=config["optimizer"],
            learning_rate=config["learning_rate"],
            loss=loss,
            tracker=tracker,
            **stages,
        )
    metrics = metrics if isinstance(metrics, dict) else metrics.to_dict()
    if warm:
        metrics["warm_worker"] = True  # the framework was started by an earlier task
    if config.get("profile"):
        from kbench.profiling import profile_model

        emit_progress("profile", steps=config["profile_steps"])
        metrics["profile"] = profile_model(
            backend,
            model,
            arrays,
            mode=config["mode"],
            batch_size=config["batch_size"],
            steps=config["profile_steps"],
        )
    return WorkerReply(
        status="ok",
        metrics=metrics,
        framework=backend.describe(),
        model=model_facts(backend, model, config["model"], input_shape, data.num_classes, flops),
    )


def task_arrays(task: WorkerTask) -> Tuple[datasets.PreparedData, str, Dict[str, np.ndarray]]:
    """The task's data, its loss, and its arrays as the model takes them (layout, labels)."""
    data = datasets.PreparedData.from_dict(task.data)
    loss = kbench_models.spec_for(task.config["model"]).loss_for(data.num_classes)
    arrays = datasets.load_prepared(data.path)
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        arrays[f"x_{split}"] = datasets.to_model_input(
            x, data.kind, task.data_format, data.input_shape[:2] if data.streamed else None
        )
        arrays[f"y_{split}"] = datasets.labels_for_loss(y, loss)
    return data, loss, arrays


def build_model(
    backend: Any, task: WorkerTask, input_shape: Sequence[int], num_classes: int
) -> Tuple[Any, float]:
    """The task's model, built after seeding, and the seconds the build took. A parity
    run of a zoo model that loads the reference's weights builds with the initializers'
    values unused (:meth:`~kbench.backends.base.Backend.initial_values_unused`); a user's
    model may draw more than its weights at build time, so it builds as written."""
    backend.seed(task.config["seed"])
    replaced = (
        task.parity is not None
        and bool(task.parity.get("weights_in"))
        and not kbench_models.spec_for(task.config["model"]).is_user
    )
    build_start = time.perf_counter()
    with backend.initial_values_unused() if replaced else contextlib.nullcontext():
        model = backend.build(task.config["model"], input_shape, num_classes)
    return model, time.perf_counter() - build_start


def model_facts(
    backend: Any,
    model: Any,
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    flops: Dict[str, Any],
) -> Dict[str, Any]:
    """What a reply says of the model: parameters, input, classes, FLOPs, a user model's source."""
    spec = kbench_models.spec_for(name)
    return {
        "name": name,
        "params": backend.count_params(model),
        "input_shape": [int(d) for d in input_shape],
        "num_classes": num_classes,
        "flops": flops,
    } | ({"source": spec.source()} if spec.is_user else {})


def failure_reply(err: BaseException, started_at: float) -> WorkerReply:
    """The reply of a task that raised ``err``: its status (``oom``, ``unsupported`` or
    ``failed``) and the error's type, message and traceback."""
    status = "oom" if is_out_of_memory(err) else "failed"
    return WorkerReply(
        status="unsupported" if isinstance(err, Unsupported) else status,
        error={
            "type": type(err).__name__,
            "message": str(err),
            "traceback": "".join(traceback.format_exception(err)),
        },
        started_at=started_at,
        ended_at=time.time(),
    )


def reply_failure(task: WorkerTask, err: BaseException, started_at: float) -> None:
    write_json_atomic(Path(task.reply_path), failure_reply(err, started_at).to_dict())


def run_and_reply(task: WorkerTask, backend: Any = None, warm: bool = False) -> bool:
    """Run ``task`` and write its reply, whatever happens; True when it succeeded."""
    started_at = time.time()
    try:
        reply = run(task, backend, warm)
        reply = dataclasses.replace(reply, started_at=started_at, ended_at=time.time())
        write_json_atomic(Path(task.reply_path), reply.to_dict())
        return True
    except BaseException as err:  # noqa: B036 - every failure must reach the runner
        reply_failure(task, err, started_at)
        log.error("%s: %s", type(err).__name__, err)
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        return False


def run_tasks(tasks: List[WorkerTask]) -> bool:
    """A warm worker: start the framework once, then each task in turn."""
    try:
        backend = start_backend(tasks[0])
    except BaseException as err:  # noqa: B036 - every task reports why nothing could start
        for task in tasks:
            reply_failure(task, err, task.started_at)
        log.error("%s: %s", type(err).__name__, err)
        return False
    start_warnings = list(backend.warnings)
    ok = True
    for index, task in enumerate(tasks):
        emit_progress("case", index=index, of=len(tasks), model=task.config["model"])
        backend.warnings = list(start_warnings)  # each task's own, beside the start's
        ok = run_and_reply(task, backend, warm=index > 0) and ok
    return ok


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="[worker] %(message)s", stream=sys.stderr)
    if not argv:
        log.error("usage: python -m kbench.run.worker RUN_JSON... (the runner writes RUN_JSON)")
        return 2
    watch_parent()
    tasks = [WorkerTask.from_dict(read_json(Path(path))) for path in argv]
    if len(tasks) == 1:
        return 0 if run_and_reply(tasks[0]) else 1
    return 0 if run_tasks(tasks) else 1


if __name__ == "__main__":
    sys.exit(main())
