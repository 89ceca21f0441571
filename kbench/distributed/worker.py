"""One process of a data-parallel run: ``python -m kbench.distributed.worker RUN_JSON``.

Every process of every mode runs this module; it learns its role and rank from
``KBENCH_DIST_ROLE`` / ``KBENCH_DIST_RANK`` (``RANK`` / ``LOCAL_RANK`` when torchrun
started it), announces itself (``procs/<role><rank>.json``, with its pid, so the
parent samples and watches it), and then either serves (an MXNet scheduler or
server, a TensorFlow parameter server or worker server) or trains. A training
process starts its backend as the single-process worker does, sets up its engine
(process group, strategy, kvstore), loads its own shard of the runner's batch order
(``shards.npy``: rank x step x sample), builds the model, trains, and writes
``replies/<role><rank>.json``: per-worker step logs and breakdown, and on rank 0
the test-set evaluation. Whatever happens it tries to leave a reply; an engine that
cannot run here raises :class:`Unsupported`, which becomes status ``unsupported``.

A :class:`StepLog` keeps, for every step (warmup included), when it began and ended
(wall clock) and how long its measured phases took: ``data`` (gathering the worker's
batch from its shard and handing it to the framework), ``forward`` (forward pass and
loss), ``backward`` (the local gradients) and, where the engine runs it apart from the
exchange, ``update`` (the optimizer step). Communication is the rest, ``comm = step -
data - forward - backward - update``, so the parts always add up to the step: the
gradient exchange, waiting for the slowest worker, and the update where the engine
fuses it with the exchange (each engine's ``method`` says how it measures).

Imports only what runs under both environments (Keras 3 and keras-mxnet).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import psutil

from kbench.backends.base import KERAS_EPSILON, Backend, is_out_of_memory
from kbench.measure.processes import watch_parent
from kbench.measure.stats import percentiles
from kbench.results.jsonfile import read_json, write_json_atomic
from kbench.run import worker as run_worker
from kbench.run.protocol import WorkerTask, emit_progress
from kbench.run.worker import task_arrays

log = logging.getLogger("kbench.distributed.worker")

HEARTBEAT_S = 10.0
PHASES = ("data", "forward", "backward", "update", "comm")


def shard_digest(indices: np.ndarray) -> str:
    """A short fingerprint of the sample indices a worker trained on, in order."""
    return hashlib.sha1(np.ascontiguousarray(indices, dtype=np.int64).tobytes()).hexdigest()[:16]


@dataclass
class StepLog:
    """Every step of one worker: wall-clock begin and end, and its measured phases (s)."""

    warmup_steps: int
    begins: List[float] = field(default_factory=list)
    ends: List[float] = field(default_factory=list)
    data: List[float] = field(default_factory=list)
    forward: List[float] = field(default_factory=list)
    backward: List[float] = field(default_factory=list)
    update: List[Optional[float]] = field(default_factory=list)
    losses: List[float] = field(default_factory=list)
    hits: List[Optional[float]] = field(default_factory=list)
    # perf_counter -> wall clock, so steps line up with the parent's sampler series
    wall_offset: float = field(default_factory=lambda: time.time() - time.perf_counter())

    def wall(self, perf_time: float) -> float:
        return perf_time + self.wall_offset

    def add(
        self, begin: float, end: float, *, data: float, forward: float, backward: float,
        update: Optional[float] = None, loss: float = float("nan"), hits: Optional[float] = None,
    ) -> None:  # fmt: skip
        """One step; ``begin`` and ``end`` are wall-clock seconds since the epoch."""
        self.begins.append(float(begin))
        self.ends.append(float(end))
        self.data.append(float(data))
        self.forward.append(float(forward))
        self.backward.append(float(backward))
        self.update.append(None if update is None else float(update))
        self.losses.append(float(loss))
        self.hits.append(None if hits is None else float(hits))

    def __len__(self) -> int:
        return len(self.ends)


def worker_summary(
    log: StepLog, *, rank: int, batch_size: int, steps_per_epoch: int, method: str,
    extra: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:  # fmt: skip
    """One worker's measured window, throughput and per-step breakdown (JSON-ready)."""
    warmup = log.warmup_steps
    total = len(log)
    if warmup >= total:
        raise ValueError(
            f"warmup_steps: expected fewer than the {total} steps worker {rank} ran; received "
            f"{warmup}. Lower --warmup-steps or train longer."
        )
    step, parts = measured_phases(log)
    measured_start = log.ends[warmup - 1] if warmup else log.begins[0]
    measured_time = log.ends[-1] - measured_start
    measured_steps = total - warmup
    means = {name: (float(np.mean(v)) if v is not None else None) for name, v in parts.items()}
    means["step"] = float(np.mean(step))
    epochs = [
        (start, min(start + steps_per_epoch, total)) for start in range(0, total, steps_per_epoch)
    ]
    last_hits = [h for h in log.hits[epochs[-1][0] :] if h is not None]
    summary = {
        "rank": rank,
        "method": method,
        "batch_size": batch_size,
        "steps": total,
        "measured_steps": measured_steps,
        "measured_images": measured_steps * batch_size,
        "measured_time_s": measured_time,
        "images_per_sec": measured_steps * batch_size / measured_time
        if measured_time > 0
        else None,
        "step_time_s": percentiles(step),
        "step_times_s": step,
        "phase_mean_s": means,
        "phase_times_s": parts,
        "first_step_s": log.ends[0] - log.begins[0],
        "warmup_time_s": (log.ends[warmup - 1] - log.begins[0]) if warmup else 0.0,
        "epoch_time_s": [log.ends[stop - 1] - log.begins[start] for start, stop in epochs],
        "epoch_train_loss": [float(np.mean(log.losses[start:stop])) for start, stop in epochs],
        "final_train_loss": float(np.mean(log.losses[epochs[-1][0] :])),
        "final_train_accuracy": (
            float(sum(last_hits) / (len(last_hits) * batch_size)) if last_hits else None
        ),
        "markers": {
            "first_step_start": log.begins[0], "first_step_end": log.ends[0],
            "warmup_end": measured_start, "measured_start": measured_start,
            "measured_end": log.ends[-1],
        },
        "step_ends_s": [end - log.begins[0] for end in log.ends],
    }  # fmt: skip
    summary.update(extra or {})
    return summary


def measured_phases(log: StepLog) -> Tuple[List[float], Dict[str, Optional[List[float]]]]:
    """The measured steps' times, and each phase's times (``update`` None where the
    engine does not run it apart; ``comm`` the rest of each step)."""
    measured = slice(log.warmup_steps, len(log))
    step = [e - b for b, e in zip(log.begins[measured], log.ends[measured])]
    parts: Dict[str, Optional[List[float]]] = {
        "data": log.data[measured], "forward": log.forward[measured],
        "backward": log.backward[measured],
    }  # fmt: skip
    updates = log.update[measured]
    separate_update = all(u is not None for u in updates)
    parts["update"] = [float(u) for u in updates] if separate_update else None
    parts["comm"] = [
        s - d - f - b - (u if separate_update else 0.0)
        for s, d, f, b, u in zip(step, parts["data"], parts["forward"], parts["backward"], updates)
    ]
    return step, parts


class Unsupported(RuntimeError):
    """This mode cannot run here (no GPU for MirroredStrategy, a switch not wired in)."""


@dataclass
class StepOut:
    """What an engine's step reports; the loss is read on the host (the device is done)."""

    loss: float
    forward: float
    backward: float
    update: Optional[float] = None
    hits: Optional[float] = None


@dataclass
class Context:
    """Everything a training process knows: its task, identity, backend, data and shard."""

    task: WorkerTask
    dist: Dict[str, Any]
    role: str
    rank: int
    local_index: int
    backend: Optional[Backend] = None
    arrays: Dict[str, Any] = field(default_factory=dict)
    input_shape: Tuple[int, ...] = ()
    num_classes: int = 0
    loss: str = ""
    timings: Dict[str, float] = field(default_factory=dict)

    @property
    def config(self) -> Dict[str, Any]:
        return self.task.config

    @property
    def workers(self) -> int:
        return int(self.dist["workers"])

    @property
    def batch_size(self) -> int:
        return int(self.config["batch_size"])

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.workers

    @property
    def steps_per_epoch(self) -> int:
        return int(self.dist["steps_per_epoch"])

    @property
    def warmup_steps(self) -> int:
        return int(self.config["warmup_steps"])

    def shard(self, rank: Optional[int] = None) -> np.ndarray:
        """Sample indices of one worker, shape (steps, batch_size), in step order."""
        shards = np.load(self.dist["shards_path"], mmap_mode="r")
        return np.asarray(shards[self.rank if rank is None else rank])

    @property
    def leader(self) -> bool:
        """The process that reports progress and evaluates: each host's first worker (rank
        0 on one host), or the chief."""
        return self.local_index == 0

    def progress(self, event: str, **fields: Any) -> None:
        if self.leader:
            emit_progress(event, **fields)


def identity(dist: Dict[str, Any]) -> Tuple[str, int, int]:
    """(role, rank, index among this host's processes of its role)."""
    role = os.environ.get("KBENCH_DIST_ROLE", "worker")
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:  # started by torchrun
        return role, int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    rank = int(os.environ.get("KBENCH_DIST_RANK", "0"))
    if role != "worker":
        return role, rank, rank
    cluster = dist["cluster"]
    per_host = max(int(dist["workers"]) // len(cluster["hosts"]), 1)
    return role, rank, rank - cluster["node"] * per_host


def announce(dist: Dict[str, Any], role: str, rank: int) -> None:
    record = {"role": role, "rank": rank, "pid": os.getpid(), "host": socket.gethostname()}
    write_json_atomic(Path(dist["procs_dir"]) / f"{role}{rank}.json", record)


def pin_cores(dist: Dict[str, Any], local_index: int) -> Optional[List[int]]:
    layout = dist.get("cores") or []
    if not layout:
        return None
    cores = layout[local_index % len(layout)]
    process = psutil.Process()
    if not hasattr(process, "cpu_affinity"):  # macOS: the worker runs unpinned
        return None
    process.cpu_affinity(cores)
    return cores


def build_model(ctx: Context, compiled: bool = False) -> Any:
    """The model, seeded: every worker starts from the same weights (``compiled``: with
    the run's optimizer and loss, as the backend compiles it)."""
    model, ctx.timings["build_time_s"] = run_worker.build_model(
        ctx.backend, ctx.task, ctx.input_shape, ctx.num_classes
    )
    if compiled:
        ctx.backend.compile(model, ctx.config["optimizer"], ctx.config["learning_rate"], ctx.loss)
    return model


def host_loop(
    ctx: Context, convert: Callable[[np.ndarray, np.ndarray], Tuple[Any, ...]],
    step: Callable[..., StepOut],
) -> StepLog:  # fmt: skip
    """The steps of a host-driven engine: data (gather + convert), then the engine's step.
    ``step`` returns the phases it measured and the loss read on the host, so a step ends
    when the device is done with it."""
    shard = ctx.shard()
    x_train, y_train = ctx.arrays["x_train"], ctx.arrays["y_train"]
    steps_log = StepLog(warmup_steps=ctx.warmup_steps)
    total = len(shard)
    epochs = -(-total // ctx.steps_per_epoch)
    beat = time.perf_counter()
    for index in range(total):
        begin = time.perf_counter()
        indices = shard[index]
        batch = convert(x_train[indices], y_train[indices])
        loaded = time.perf_counter()
        out = step(*batch)
        end = time.perf_counter()
        steps_log.add(
            steps_log.wall(begin), steps_log.wall(end), data=loaded - begin, forward=out.forward,
            backward=out.backward, update=out.update, loss=out.loss, hits=out.hits,
        )  # fmt: skip
        if (index + 1) % ctx.steps_per_epoch == 0 or index + 1 == total:
            epoch = index // ctx.steps_per_epoch
            first = epoch * ctx.steps_per_epoch
            ctx.progress(
                "epoch", epoch=epoch + 1, epochs=epochs,
                loss=float(np.mean(steps_log.losses[first:])),
                seconds=steps_log.ends[-1] - steps_log.begins[first],
            )  # fmt: skip
        elif index == 0 or end - beat >= HEARTBEAT_S:
            beat = end
            ctx.progress("step", step=index + 1, steps=total)
    return steps_log


def evaluate(
    predict: Callable[[np.ndarray], Any], x: Any, y: np.ndarray, loss: str, batch_size: int
) -> Dict[str, Any]:
    """Loss (Keras' cross-entropy on clipped probabilities, without weight penalties) and
    accuracy over the test set, from the model's probabilities."""
    started = time.perf_counter()
    loss_sum = hits = 0.0
    for start in range(0, len(x), batch_size):
        p = np.asarray(predict(x[start : start + batch_size]), dtype=np.float64)
        labels = np.asarray(y[start : start + batch_size])
        if loss == "binary_crossentropy":
            p = np.clip(p, KERAS_EPSILON, 1 - KERAS_EPSILON)
            t = labels.reshape(p.shape).astype(np.float64)
            loss_sum += float(-(t * np.log(p) + (1 - t) * np.log(1 - p)).mean(axis=-1).sum())
            hits += float(((p > 0.5) == (t > 0.5)).mean(axis=-1).sum())
        else:
            labels = labels.reshape(-1).astype(np.int64)
            p = p / p.sum(axis=-1, keepdims=True)
            p = np.clip(p, KERAS_EPSILON, 1 - KERAS_EPSILON)
            loss_sum += float(-np.log(p[np.arange(len(labels)), labels]).sum())
            hits += float((p.argmax(axis=-1) == labels).sum())
    return {
        "test_loss": loss_sum / len(x), "test_accuracy": hits / len(x), "test_samples": len(x),
        "eval_time_s": time.perf_counter() - started,
        "note": "evaluated on the whole test set by rank 0 (by each host's first worker across "
        "hosts; by the chief for tf-ps); the loss is the cross-entropy without the weight "
        "penalties",
    }  # fmt: skip


def summarize(
    ctx: Context, steps_log: StepLog, method: str, rank: Optional[int] = None, **extra: Any
) -> Dict[str, Any]:
    """A worker's summary (this process's, or ``rank``'s where one process measures
    several), with its shard's fingerprint, timings and memory."""
    rank = ctx.rank if rank is None else rank
    shard = ctx.shard(rank)
    fields = dict(
        shard={"samples": int(shard.size), "digest": shard_digest(shard)},
        host=socket.gethostname(),
        pid=os.getpid(),
        memory=ctx.backend.memory_readings() if ctx.backend else [],
        time_to_first_step_s=steps_log.ends[0] - ctx.task.started_at,
        **ctx.timings,
    )
    fields.update(extra)
    return worker_summary(
        steps_log, rank=rank, batch_size=ctx.batch_size, steps_per_epoch=ctx.steps_per_epoch,
        method=method, extra=fields,
    )  # fmt: skip


def training_reply(
    ctx: Context, model: Any, workers: List[Dict[str, Any]], predict: Callable[[np.ndarray], Any],
    **more: Any,
) -> Dict[str, Any]:  # fmt: skip
    """What a training process replies, whatever its engine: the summaries of the workers
    it measured (:func:`summarize`), anything the engine adds (``more``), the model, and,
    on the leader (:attr:`Context.leader`), the test-set evaluation through ``predict``
    (the model's probabilities for a batch of inputs). :func:`main` adds the status,
    role, rank, cores and framework."""
    facts = run_worker.model_facts(
        ctx.backend, model, ctx.config["model"], ctx.input_shape, ctx.num_classes,
        ctx.backend.flops(model),
    )  # fmt: skip
    reply: Dict[str, Any] = {"workers": workers, **more, "model": facts}
    if ctx.leader:
        reply["evaluation"] = evaluate(
            predict, ctx.arrays["x_test"], ctx.arrays["y_test"], ctx.loss,
            max(ctx.batch_size, 256),
        )  # fmt: skip
    return reply


def own_reply(
    ctx: Context, model: Any, steps: StepLog, method: str, predict: Callable, engine: Dict
) -> Dict[str, Any]:
    """:func:`training_reply` of a process that measured its own steps only (``engine``:
    what its summary adds)."""
    return training_reply(ctx, model, [summarize(ctx, steps, method, engine=engine)], predict)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="[worker] %(message)s", stream=sys.stderr)
    if len(argv) != 1:
        log.error("usage: python -m kbench.distributed.worker RUN_JSON (the runner writes it)")
        return 2
    spec = read_json(Path(argv[0]))
    task, dist = WorkerTask.from_dict(spec["task"]), spec["distributed"]
    role, rank, local_index = identity(dist)
    watch_parent(int(os.environ.get("KBENCH_DIST_PARENT", "0")) or None)
    reply_path = Path(dist["replies_dir"]) / f"{role}{rank}.json"
    announce(dist, role, rank)

    from kbench.distributed.engines import load_engine

    engine = load_engine(dist["mode"])
    ctx = Context(task=task, dist=dist, role=role, rank=rank, local_index=local_index)
    if not engine.trains(role):
        # returns, or exits, when the run is over, or never (the parent stops it)
        engine.serve(ctx)
        return 0
    try:
        cores = pin_cores(dist, local_index) if dist.get("pin_workers") else None
        started = time.perf_counter()
        engine.before_start(ctx)
        ctx.backend = run_worker.start_backend(ctx.task)  # as a single-process worker
        ctx.timings["import_time_s"] = ctx.backend.import_time_s
        engine.setup(ctx)
        ctx.timings["setup_time_s"] = time.perf_counter() - started - ctx.timings["import_time_s"]
        data, ctx.loss, ctx.arrays = task_arrays(ctx.task)  # laid out as the model takes it
        ctx.input_shape = tuple(int(d) for d in ctx.arrays["x_train"].shape[1:])
        ctx.num_classes = data.num_classes
        reply = engine.train(ctx)
        reply.update(
            status="ok", role=role, rank=rank, cores=cores, framework=ctx.backend.describe()
        )
        write_json_atomic(reply_path, reply)
        engine.finish(ctx)
    except BaseException as err:  # noqa: B036 - every failure must reach the runner
        if isinstance(err, Unsupported):
            status = "unsupported"
        else:
            status = "oom" if is_out_of_memory(err) else "failed"
        error = {
            "type": type(err).__name__, "message": str(err), "traceback": traceback.format_exc(),
        }  # fmt: skip
        write_json_atomic(
            reply_path, {"status": status, "role": role, "rank": rank, "error": error}
        )
        log.error("%s%d: %s: %s", role, rank, type(err).__name__, err)
        # no interpreter teardown: a framework's exit hooks (a kvstore's final barrier, a
        # process group) can wait forever for peers that are gone
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    return 0


if __name__ == "__main__":
    # run the module's importable copy, so that engines and this entry share one
    # Unsupported, Context, ... (``python -m`` runs this file as __main__)
    from kbench.distributed import worker as importable

    sys.exit(importable.main())
