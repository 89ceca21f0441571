"""The child process of every model run: ``python -m kbench.run.worker TASK_JSON``.

It sets nothing global: the runner chose the backend (``KERAS_BACKEND``), the per-run
``KERAS_HOME`` holding its keras.json, and the thread variables before this interpreter
started. Whatever happens, it tries to leave a reply: metrics on success, the exception
and traceback on failure (a crash that kills the interpreter leaves none, and the runner
records that instead). It ends within a second of its runner
(:func:`kbench.measure.processes.watch_parent`): nobody would read its reply.

It starts the backend once, from the task file it is given, then answers each command
on stdin (:data:`kbench.run.protocol.COMMANDS`) on the reply pipe:

- ``run``: one whole run of a task file (or the export an inference runtime runs,
  made with ``model.export``: :mod:`kbench.run.exports`), in its own ``try``: a failure is
  its reply and the worker goes on. Before each later run the session is cleared and the
  run's per-run switches applied (:meth:`~kbench.backends.base.Backend.next_case`); later
  runs record ``import_time_s`` 0 and ``warm_worker``.
- ``start``, ``warmup``, ``window``: windows of one built and compiled model
  (:mod:`kbench.run.windows`); a failure there replies ``failed`` and ends the worker.
- ``finish``, or the end of stdin: replies ``finished`` and exits 0.
- a task kind of a stage above, whose child runs this loop (:func:`main` with ``kinds``):
  ``ops`` (:mod:`kbench.ops.worker`); a failure replies ``failed`` and ends the worker.

A backend that cannot start replies ``failed`` and exits 1. Imports only what runs under
both environments (Keras 3 and keras-mxnet).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import kbench_models  # the registry only: no Keras import
from kbench import datasets
from kbench.backends import load_backend
from kbench.backends.base import Unsupported, is_out_of_memory
from kbench.backends.switches import SWITCHES
from kbench.measure.processes import watch_parent
from kbench.measure.stats import tracker_for
from kbench.results.jsonfile import read_json
from kbench.run.protocol import COMMANDS, ReplyWriter, WorkerReply, WorkerTask, emit_progress
from kbench.run.trainer import Trainer
from kbench.run.weightfile import replay

log = logging.getLogger("kbench.run.worker")


def start_backend(task: WorkerTask) -> Any:
    """The task's backend, started; ``backend.import_time_s``: how long that took."""
    config = task.config
    backend = load_backend(config["backend"])(
        threads=config["threads"],
        switches=task_switches(task),
        inter_op_threads=config.get("inter_op_threads"),  # absent from older task files
    )
    import_start = time.perf_counter()
    backend.start(
        task.data_format, device=config["device"],
        gpu_memory_fraction=config["gpu_memory_fraction"],
        gpu_memory_growth=config["gpu_memory_growth"],
    )  # fmt: skip
    backend.import_time_s = time.perf_counter() - import_start
    return backend


def task_switches(task: WorkerTask) -> Dict[str, Any]:
    return {name: task.config[name] for name in SWITCHES if name in task.config}


@dataclass
class Built:
    """A task's model as built in this worker, and what a reply says of it."""

    data: datasets.PreparedData
    loss: str
    arrays: Dict[str, np.ndarray]
    model: Any
    build_time_s: float
    facts: Dict[str, Any]  # model_facts: parameters, input, classes, FLOPs, source


def build(backend: Any, task: WorkerTask) -> Built:
    """The task's data, and its model built after seeding on ``backend``."""
    data, loss, arrays = task_arrays(task)
    input_shape = arrays["x_train"].shape[1:]
    model, build_time = build_model(backend, task, input_shape, data.num_classes)
    flops = backend.flops(model)
    facts = model_facts(backend, model, task.config["model"], input_shape, data.num_classes, flops)
    return Built(data, loss, arrays, model, build_time, facts)


def run(task: WorkerTask, backend: Any, warm: bool = False) -> WorkerReply:
    """One run of ``task`` on ``backend`` (``warm``: started by an earlier task)."""
    if warm:
        backend.next_case(task_switches(task))
    config = task.config
    built = build(backend, task)
    stages = dict(
        warmup_steps=config["warmup_steps"],
        process_start=time.time() if warm else task.started_at,
        import_time_s=0.0 if warm else backend.import_time_s, build_time_s=built.build_time_s,
    )  # fmt: skip
    metrics = measure(task, backend, built, stages)
    metrics = metrics if isinstance(metrics, dict) else metrics.to_dict()
    if warm:
        metrics["warm_worker"] = True  # the framework was started by an earlier task
    if config.get("profile"):
        from kbench.profiling import profile_model

        emit_progress("profile", steps=config["profile_steps"])
        metrics["profile"] = profile_model(
            backend, built.model, built.arrays, mode=config["mode"],
            batch_size=config["batch_size"], steps=config["profile_steps"],
        )  # fmt: skip
    return WorkerReply(
        status="ok", metrics=metrics, framework=backend.describe(), model=built.facts
    )


def measure(task: WorkerTask, backend: Any, built: Built, stages: Dict[str, Any]) -> Any:
    config = task.config
    tracker = tracker_for(config, config["batch_size"])  # --target-precision, --time-budget
    if task.parity is not None:
        return replay(
            backend, built.model, built.arrays, np.load(task.order_path), parity=task.parity,
            batch_size=config["batch_size"], learning_rate=config["learning_rate"],
            loss=built.loss, data_format=task.data_format,
        )  # fmt: skip
    if task.export is not None and "make" in task.export:  # the exporter's step
        from kbench.run import exports

        return exports.make(backend, built.model, built.arrays, task.export)
    if config["mode"] == "generate":
        from kbench.run.generate import generate

        return generate(
            backend, built.model, built.arrays, task.generate, batch_size=config["batch_size"],
            max_new_tokens=config["max_new_tokens"], duration_s=config["duration_s"],
            data_format=task.data_format, **stages,
        )  # fmt: skip
    if config["mode"] == "inference":
        from kbench.run.inference import infer

        metrics = infer(
            backend, built.model, built.arrays, batch_size=config["batch_size"],
            duration_s=config["duration_s"], tracker=tracker,
            precision=config.get("precision", "float32"), **stages,
        )  # fmt: skip
        if task.export is None:
            return metrics
        from kbench.run import exports

        return exports.with_agreement(
            metrics, backend, built.model, task.export, built.arrays, config["batch_size"]
        )
    trainer = Trainer(
        backend, built.model, built.arrays, np.load(task.order_path), config["batch_size"]
    )
    return trainer.epochs(
        optimizer=config["optimizer"], learning_rate=config["learning_rate"], loss=built.loss,
        tracker=tracker, **stages,
    )  # fmt: skip


def task_arrays(task: WorkerTask) -> Tuple[datasets.PreparedData, str, Dict[str, np.ndarray]]:
    """The task's data, its loss, and its arrays as the model takes them (layout, labels;
    next-token targets as the parent made them, the inputs shifted by one)."""
    data = datasets.PreparedData.from_dict(task.data)
    spec = kbench_models.spec_for(task.config["model"])
    if spec.target != data.target:
        raise ValueError(
            f"{spec.name} learns {spec.target} targets; received data prepared with "
            f"{data.target} targets ({data.name}). The parent prepares data for the model's "
            "target: run it through kbench, not with a task file of another model's data."
        )
    loss = spec.loss_for(data.num_classes)
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
    """The task's model, built after seeding, and its build time. A parity run of a zoo
    model loading the reference's weights leaves its initializers unused (a user's model
    may draw more than its weights at build time: built as written)."""
    if task.export is not None and "make" not in task.export:  # a runtime: its export
        from kbench.run import exports

        exports.refuse_failed(task.export)
        backend.take_export(task.export)
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
    backend: Any, model: Any, name: str, input_shape: Sequence[int], num_classes: int,
    flops: Dict[str, Any],
) -> Dict[str, Any]:  # fmt: skip
    """What a reply says of the model: parameters, input, classes, FLOPs, a user model's source."""
    spec = kbench_models.spec_for(name)
    return {
        "name": name, "params": backend.count_params(model),
        "input_shape": [int(d) for d in input_shape], "num_classes": num_classes, "flops": flops,
    } | ({"source": spec.source()} if spec.is_user else {})  # fmt: skip


def failure_reply(err: BaseException, started_at: float) -> WorkerReply:
    """The reply of a task that raised ``err``: ``oom``, ``unsupported`` or ``failed``."""
    status = "oom" if is_out_of_memory(err) else "failed"
    return WorkerReply(
        status="unsupported" if isinstance(err, Unsupported) else status,
        error={
            "type": type(err).__name__, "message": str(err),
            "traceback": "".join(traceback.format_exception(err)),
        },
        started_at=started_at, ended_at=time.time(),
    )  # fmt: skip


# A command of a task kind served by the loop of a stage above (``ops``: kbench.ops.worker):
# (what holds the worker's state, the command) -> the reply's event and fields
Kind = Callable[["Served", Dict[str, Any]], Tuple[str, Dict[str, Any]]]


@dataclass
class Served:
    """What this worker holds between commands: its backend, the windows' trainer."""

    backend: Any
    start_warnings: List[str]
    replies: Optional[ReplyWriter] = None  # for a command that answers more than once
    kinds: Dict[str, Kind] = field(default_factory=dict)
    runs: int = 0  # ``run`` commands served so far
    task: Optional[WorkerTask] = None  # the windows' task
    trainer: Optional[Trainer] = None

    def answer(self, command: Dict[str, Any]) -> Optional[Tuple[str, Dict[str, Any]]]:
        """Do ``command``; the reply's event and fields, or None for ``finish``."""
        what = command.get("do")
        if what in self.kinds:
            return self.kinds[what](self, command)
        if what == "run":
            return "result", {"reply": self.run(load_task(command["task"])).to_dict()}
        if what == "start":
            return "started", self.start(load_task(command["task"]))
        if what == "warmup":
            return "ready", warm_up(self.trainer, self.task, command)
        if what == "window":
            started_at = time.time()
            figures = self.trainer.window()
            return "window", {
                "index": command["index"], "metrics": figures, "started_at": started_at,
                "ended_at": time.time(), "framework": self.backend.describe(),
            }  # fmt: skip
        if what == "finish":
            return None
        raise ValueError(f"command: expected do = {', '.join(COMMANDS)}; received {command!r}")

    def run(self, task: WorkerTask) -> WorkerReply:
        emit_progress("case", index=self.runs, model=task.config["model"])
        self.backend.warnings = list(self.start_warnings)  # each task's own, beside the start's
        warm, self.runs = self.runs > 0, self.runs + 1
        started_at = time.time()
        try:
            reply = run(task, self.backend, warm)
        except Exception as err:  # every failure of a run is its reply
            log.error("%s: %s", type(err).__name__, err)
            return failure_reply(err, started_at)
        return dataclasses.replace(reply, started_at=started_at, ended_at=time.time())

    def start(self, task: WorkerTask) -> Dict[str, Any]:
        """The model built and compiled for windows; what ``started`` says."""
        config = task.config
        built = build(self.backend, task)
        self.backend.compile(built.model, config["optimizer"], config["learning_rate"], built.loss)
        self.task = task
        self.trainer = Trainer(
            self.backend, built.model, built.arrays, np.load(task.order_path),
            config["batch_size"], task.data_format,
        )  # fmt: skip
        return {
            "framework": self.backend.describe(), "model": built.facts,
            "import_time_s": self.backend.import_time_s, "build_time_s": built.build_time_s,
        }  # fmt: skip


def load_task(path: str) -> WorkerTask:
    return WorkerTask.from_dict(read_json(Path(path)))


def warm_up(trainer: Trainer, task: WorkerTask, command: Dict[str, Any]) -> Dict[str, Any]:
    """The ``warmup`` command. With ``check_optional``, weights that cannot be saved or
    loaded fail the check, not the worker: the warm-up runs again without it, saying why."""
    settings = (task.config["warmup_steps"], float(command["window_s"]), command.get("steps"))
    begun = trainer.steps_begun
    try:
        return trainer.warm_up(
            *settings, command.get("weights_in"), command.get("weights_out"),
            bool(command.get("check")), command.get("check_rows"),
        )  # fmt: skip
    except Exception as err:
        if not command.get("check_optional") or trainer.steps_begun != begun:
            raise  # not the check's: a training step failed
        log.warning("the check at warm-up is left out: %s: %s", type(err).__name__, err)
        return trainer.warm_up(*settings) | {"check": {"error": f"{type(err).__name__}: {err}"}}


def serve(
    first: WorkerTask, replies: ReplyWriter, commands: Any,
    start: Callable[[WorkerTask], Any] = start_backend, kinds: Optional[Dict[str, Kind]] = None,
) -> int:  # fmt: skip
    """Start the backend (``start``), answer each line of ``commands`` until ``finish``
    (``kinds``: the commands of other task kinds); the exit code."""
    started_at = time.time()
    try:
        backend = start(first)
    except BaseException as err:  # noqa: B036 - every failure must reach the runner
        return failed(replies, err, started_at)
    served = Served(backend, list(backend.warnings), replies, kinds or {})
    for line in commands:
        try:
            answer = served.answer(json.loads(line))
        except BaseException as err:  # noqa: B036 - a window's failure ends the worker
            return failed(replies, err, time.time())
        if answer is None:
            break
        replies.send(answer[0], **answer[1])
    replies.send("finished")
    return 0


def failed(replies: ReplyWriter, err: BaseException, started_at: float) -> int:
    """Reply ``failed``; the exit code (or ``err`` again: Ctrl-C, an exit)."""
    replies.send("failed", **failure_reply(err, started_at).to_dict())
    log.error("%s: %s", type(err).__name__, err)
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        raise err
    return 1


def main(argv=None, module: str = "kbench.run.worker", **kinds: Any) -> int:
    """``python -m MODULE TASK_JSON``; ``kinds``: :func:`serve`'s ``start`` and ``kinds``."""
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="[worker] %(message)s", stream=sys.stderr)
    if len(argv) != 1:
        log.error("usage: python -m %s TASK_JSON (kbench writes TASK_JSON and sends the "
                  "commands)", module)  # fmt: skip
        return 2
    watch_parent()
    replies = ReplyWriter.from_environment()
    return serve(load_task(argv[0]), replies, sys.stdin, **kinds)


if __name__ == "__main__":
    sys.exit(main())
