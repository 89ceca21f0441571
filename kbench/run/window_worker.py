"""A warm worker that measures windows when told: ``python -m kbench.run.window_worker RUN_JSON``.

It starts the framework, loads the data, builds and compiles the model once, replies
``started``, then reads one command per line on stdin and answers each on the reply
channel (:mod:`kbench.run.channel`):

- ``{"do": "warmup", "window_s": S, "steps": N|null}``, optionally with ``weights_out`` or
  ``weights_in`` (a path) and ``check_optional`` (:func:`warm_up`): the warmup and
  calibration steps (:meth:`~kbench.run.window_steps.WindowTrainer.warm_up`); replies
  ``ready``.
- ``{"do": "window", "index": K}``: one measuring window; replies ``window`` with its
  figures, then waits, doing nothing, while the other backends measure.
- ``{"do": "finish"}``: replies ``finished`` and exits 0 (so does the end of stdin).

A failure replies ``failed`` with the error (status, type, message, traceback) and
exits 1: the runner records it and goes on without this worker. It ends within a
second of its runner (:mod:`kbench.run.parent_watch`). The runner is
:mod:`kbench.run.windows`.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np

from kbench.results.jsonfile import read_json
from kbench.run.channel import ReplyWriter
from kbench.run.parent_watch import watch_parent
from kbench.run.task import WorkerTask
from kbench.run.window_steps import WindowTrainer
from kbench.run.worker import build_model, failure_reply, model_facts, start_backend, task_arrays

log = logging.getLogger("kbench.run.window_worker")


def start(task: WorkerTask) -> Tuple[WindowTrainer, Dict[str, Any]]:
    """The framework started and the model built and compiled: the trainer, and what the
    ``started`` reply says (framework, model, import and build seconds)."""
    config = task.config
    backend = start_backend(task)
    data, loss, arrays = task_arrays(task)
    input_shape = arrays["x_train"].shape[1:]
    model, build_time = build_model(backend, task, input_shape, data.num_classes)
    flops = backend.flops(model)
    backend.compile(model, config["optimizer"], config["learning_rate"], loss)
    trainer = WindowTrainer(
        backend=backend,
        model=model,
        arrays=arrays,
        order=np.load(task.order_path).reshape(-1),
        batch_size=config["batch_size"],
        data_format=task.data_format,
    )
    started = {
        "framework": backend.describe(),
        "model": model_facts(backend, model, config["model"], input_shape, data.num_classes, flops),
        "import_time_s": backend.import_time_s,
        "build_time_s": build_time,
    }
    return trainer, started


def answer(
    trainer: WindowTrainer, task: WorkerTask, command: Dict[str, Any]
) -> Optional[Tuple[str, Dict[str, Any]]]:
    """Do ``command``; the reply's event and fields, or None for ``finish``."""
    what = command.get("do")
    if what == "warmup":
        return "ready", warm_up(trainer, task, command)
    if what == "window":
        started_at = time.time()
        figures = trainer.window()
        return "window", {
            "index": command["index"],
            "metrics": figures,
            "started_at": started_at,
            "ended_at": time.time(),
            "framework": trainer.backend.describe(),
        }
    if what == "finish":
        return None
    raise ValueError(f"command: expected do = warmup, window or finish; received {command!r}")


def warm_up(trainer: WindowTrainer, task: WorkerTask, command: Dict[str, Any]) -> Dict[str, Any]:
    """The ``warmup`` command. With ``check_optional`` (a comparison's check at warm-up),
    initial weights that cannot be saved or loaded (or outputs that cannot be read) fail
    the check, not the worker: the warm-up runs again without them and ``check`` says why."""
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


def serve(task: WorkerTask, replies: ReplyWriter) -> int:
    started_at = time.time()
    try:
        trainer, started = start(task)
    except BaseException as err:  # noqa: B036 - every failure must reach the runner
        replies.send("failed", **failure_reply(err, started_at).to_dict())
        log.error("%s: %s", type(err).__name__, err)
        return 1
    replies.send("started", started_at=started_at, **started)
    for line in sys.stdin:
        try:
            reply = answer(trainer, task, json.loads(line))
        except BaseException as err:  # noqa: B036
            replies.send("failed", **failure_reply(err, time.time()).to_dict())
            log.error("%s: %s", type(err).__name__, err)
            return 1
        if reply is None:
            break
        event, fields = reply
        replies.send(event, **fields)
    replies.send("finished")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="[worker] %(message)s", stream=sys.stderr)
    if len(argv) != 1:
        log.error("usage: python -m kbench.run.window_worker RUN_JSON (kbench writes RUN_JSON)")
        return 2
    watch_parent()
    replies = ReplyWriter.from_environment()
    return serve(WorkerTask.from_dict(read_json(Path(argv[0]))), replies)


if __name__ == "__main__":
    sys.exit(main())
