"""Runs each config in a fresh worker process and turns what happens into a result.

For every run the runner picks the backend's interpreter, writes ``run.json`` and a
per-run ``KERAS_HOME``, starts ``python -m kbench.run.worker`` in its own process
group, relays its progress, and enforces the timeout. A worker that crashes, hangs
or is killed becomes a recorded ``failed`` or ``timeout`` result, and the next run
goes on. Results are written atomically to ``output_dir/<run_id>.json`` (a results
store: :mod:`kbench.results.store`), the worker's output to ``output_dir/logs/<run_id>.log``.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import logging
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from kbench import datasets
from kbench.distributed.launcher import run_distributed
from kbench.measure import quality as quality_mod
from kbench.measure import sampler as sampler_mod
from kbench.measure import sysinfo
from kbench.results.config import RunConfig, file_safe
from kbench.results.jsonfile import read_json, write_json_atomic
from kbench.results.lock import writer_lock
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, check_output_dir, open_log
from kbench.run import environments, leftovers
from kbench.run.metrics import compute_rate, measured_energy, sampled_memory
from kbench.run.supervise import judge, supervise
from kbench.run.task import WorkerReply, WorkerTask
from kbench_models import short_name, spec_for

log = logging.getLogger(__name__)


def new_run_id(config: RunConfig) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{config.backend}-{file_safe(config.model)}-{uuid.uuid4().hex[:6]}"


def data_request(config: RunConfig) -> Dict[str, Any]:
    """What :func:`kbench.datasets.prepare` needs for this run's data.

    Synthetic data takes the model's own input shape, classes and kind unless the
    run gives a shape or class count.
    """
    spec = spec_for(config.model)
    synthetic = config.dataset == "synthetic"
    own_classes = config.dataset.startswith(datasets.NPZ_PREFIX) and config.num_classes
    return dict(
        dataset=config.dataset,
        data_dir=config.data_dir,
        train_samples=config.train_samples,
        test_samples=config.test_samples,
        input_shape=(config.input_shape or spec.input_shape)
        if synthetic or config.dataset.startswith(datasets.FOLDER_PREFIX)  # its image size
        else None,
        num_classes=(config.num_classes or spec.num_classes) if synthetic else own_classes or None,
        image_size=config.image_size,
        model_kind=spec.input_kind,
        vocabulary=spec.vocabulary_size,
        seed=config.seed,
    )


def data_key(config: RunConfig) -> Tuple:
    return tuple(sorted(data_request(config).items()))


def prepare_data(config: RunConfig, directory: Path) -> datasets.PreparedData:
    request = data_request(config)
    data = datasets.prepare(request.pop("dataset"), directory, **request)
    log.info(
        "data: %s, %d train / %d test samples of %s, from %s",
        data.name,
        data.train_samples,
        data.test_samples,
        "x".join(map(str, data.input_shape)),
        data.source,
    )
    return data


@dataclass
class Runner:
    output_dir: Path
    # Called with (config, event dict) for each progress line of a worker.
    on_progress: Optional[Callable[[RunConfig, Dict], None]] = None
    # The NVML module the sampler reads; None imports pynvml. Tests inject a stand-in.
    nvml: Any = None
    # Share of the given cores that other processes may use before a run is flagged busy.
    busy_threshold: float = quality_mod.BUSY_THRESHOLD

    def run_all(self, configs: Sequence[RunConfig]) -> List[RunResult]:
        """Run every config in turn; only bad input (before any run starts) raises."""
        return self.run_rounds([configs])[0]

    def run_rounds(
        self,
        rounds: Sequence[Sequence[RunConfig]],
        stop: Optional[Callable[[List[RunResult]], Optional[str]]] = None,
    ) -> Tuple[List[RunResult], Optional[str]]:
        """Run the rounds in turn; after each, ``stop(results so far)`` may end them early
        by giving its reason (returned beside the results; None: every round ran)."""
        configs = [config for round_configs in rounds for config in round_configs]
        results: List[RunResult] = []
        index = 0
        with self.session(configs) as session:
            for round_configs in rounds:
                for config in round_configs:
                    index += 1
                    log.info("[%d/%d] %s: starting", index, len(configs), config.label())
                    result = session.run(config)
                    results.append(result)
                    log.info("[%d/%d] %s", index, len(configs), summary_line(result))
                reason = stop(results) if stop is not None else None
                if reason is not None and index < len(configs):
                    return results, reason
        return results, None

    @contextlib.contextmanager
    def session(self, configs: Sequence[RunConfig]) -> Iterator[Session]:
        """Check, prepare the data for, and hold a working directory for ``configs``.

        Everything that can be refused is checked before the first run starts, and
        before the output directory is created; the first run's data is prepared then
        too, each other data set when a run first needs it (:class:`DataGroups`).
        """
        for config in configs:
            environments.interpreter_for(config.backend)
        with leftovers.working_directory() as directory:
            directory = Path(directory)
            prepared = DataGroups.of(directory / "data", configs)
            if configs:  # a data set that cannot be had is refused before anything runs
                prepared.get(configs[0])
            self.output_dir = check_output_dir(self.output_dir)
            # one writer per store: a second kbench writing here is refused at once
            with writer_lock(self.output_dir):
                python_path = environments.import_root(directory / "pythonpath")
                yield Session(self, directory, python_path, prepared)

    def run_one(
        self,
        config: RunConfig,
        data: datasets.PreparedData,
        session_dir: Path,
        python_path: Path,
        parity: Optional[Dict[str, Any]] = None,
        sweep: Optional[Dict[str, Any]] = None,
    ) -> RunResult:
        if config.distributed != "none":  # several processes on the framework's own engine
            return run_distributed(self, config, data, session_dir, python_path, sweep)
        run_id = new_run_id(config)
        run_dir = session_dir / run_id
        run_dir.mkdir()
        order = datasets.batch_order(
            data.train_samples,
            config.batch_size,
            config.epochs or 1,
            config.seed,
            total_steps=None if config.steps is None else config.warmup_steps + config.steps,
        )
        np.save(run_dir / "order.npy", order)
        env, keras_json = environments.process_environment(
            config.backend,
            run_dir,
            python_path,
            config.threads_in_force,
            config.data_format,
            config.device,
        )
        interpreter = environments.interpreter_for(config.backend)
        started_at = time.time()
        task = WorkerTask(
            config=config.to_dict() | {"threads": config.threads_in_force},
            data=data.to_dict(),
            order_path=str(run_dir / "order.npy"),
            data_format=keras_json["image_data_format"],
            reply_path=str(run_dir / "reply.json"),
            started_at=started_at,
            parity=parity,
        )
        write_json_atomic(run_dir / "run.json", task.to_dict())

        log_path = open_log(self.output_dir, run_id)  # a store that cannot take it: stop
        try:
            outcome = supervise(
                [str(interpreter), "-m", "kbench.run.worker", str(run_dir / "run.json")],
                env,
                run_dir,
                log_path,
                config,
                self.on_progress,
                self.nvml,
            )
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: say so beside the log, then stop
            leftovers.write_interrupted(log_path, run_id, config, started_at, sweep)
            raise
        ended_at = time.time()
        wall_time = ended_at - started_at

        reply_path = Path(task.reply_path)
        reply = WorkerReply.from_dict(read_json(reply_path)) if reply_path.exists() else None
        status, reason, error = judge(outcome, reply, config)
        metrics = dict(reply.metrics) if reply and status == "ok" else {}
        sampled = None
        if outcome.sampler is not None:
            windows = sampler_mod.windows_from_markers(
                metrics.get("markers", {}), started_at, ended_at
            )
            sampled = outcome.sampler.result(windows)
            if metrics and parity is None:
                metrics["memory"] = metrics["memory"] + sampled_memory(sampled.summary)
                metrics["energy"] = measured_energy(sampled.summary, metrics["measured_images"])
                assessed = quality_mod.assess(
                    sampled.series, windows["measured"], config.threads, self.busy_threshold,
                    worker_gpus=sampled.sources.get("gpu", {}).get("worker_gpus"),
                )  # fmt: skip
                if assessed is not None:
                    metrics["quality"] = assessed.to_dict()
        if metrics and parity is None:
            metrics["compute"] = compute_rate(config, metrics, reply)
        environment = {
            "kbench": sysinfo.kbench_info(),
            "machine": sysinfo.machine(),
            "interpreter": str(interpreter),
            "process_env": environments.recorded_variables(env, config.backend),
            "keras_json": keras_json,
            "framework": reply.framework if reply else {},
        }
        result = RunResult(
            run_id=run_id,
            status=status,
            config=config.to_dict(),
            started_at=dt.datetime.fromtimestamp(started_at, dt.timezone.utc).isoformat(),
            wall_time_s=wall_time,
            environment=environment,
            data=data.describe(),
            model=model_facts(config, reply),
            metrics=metrics,
            reason=reason,
            error=error,
            sampler=sampled.to_dict() if sampled else None,
            kind="parity" if parity is not None else config.mode,
            sweep=sweep,
        )
        ResultStore(self.output_dir).add(result)
        for warning in result.warnings:
            log.warning("%s: %s", config.label(), warning)
        for flag in (metrics.get("quality") or {}).get("flags") or []:
            log.warning("%s: measured while %s", config.label(), flag)
        return result


def model_facts(config: RunConfig, reply: Optional[WorkerReply]) -> Dict[str, Any]:
    """What the worker said of the model; a user model's source (path, function,
    sha256) is recorded even when the worker never got to build it."""
    model = dict(reply.model) if reply else {}
    spec = spec_for(config.model)
    if spec.is_user:
        model.setdefault("name", config.model)
        model.setdefault("source", spec.source())
    return model


@dataclass
class DataGroups:
    """A session's data sets: each prepared when a run first needs it, and deleted
    once no run still to come in the session needs it, so that a sweep of 40 seeds
    holds one seed's data at a time, not 40."""

    directory: Path
    remaining: Dict[Tuple, int]  # data key -> runs of the session still to come
    prepared: Dict[Tuple, datasets.PreparedData]
    made: int = 0  # data sets prepared so far: each in its own folder

    @classmethod
    def of(cls, directory: Path, configs: Sequence[RunConfig]) -> DataGroups:
        remaining = collections.Counter(data_key(config) for config in configs)
        return cls(directory, dict(remaining), {})

    def get(self, config: RunConfig) -> datasets.PreparedData:
        key = data_key(config)
        if key not in self.prepared:
            self.made += 1
            self.prepared[key] = prepare_data(config, self.directory / f"group-{self.made}")
        return self.prepared[key]

    def release(self, config: RunConfig) -> None:
        """One run of ``config``'s data is done; delete the data if it was the last."""
        key = data_key(config)
        self.remaining[key] = self.remaining.get(key, 0) - 1
        if self.remaining[key] <= 0 and key in self.prepared:
            data = self.prepared.pop(key)
            shutil.rmtree(Path(data.path).parent, ignore_errors=True)


@dataclass
class Session:
    """Prepared data and a working directory: runs any of the session's configs."""

    runner: Runner
    directory: Path
    python_path: Path
    prepared: DataGroups

    def run(
        self,
        config: RunConfig,
        parity: Optional[Dict[str, Any]] = None,
        sweep: Optional[Dict[str, Any]] = None,
    ) -> RunResult:
        data = self.prepared.get(config)
        result = self.runner.run_one(config, data, self.directory, self.python_path, parity, sweep)
        self.prepared.release(config)
        return result


def summary_line(result: RunResult) -> str:
    label = f"{result.config['backend']}/{short_name(result.config['model'])}"
    if not result.ok:
        return f"{label}: {result.status.upper()}: {result.reason}"
    m = result.metrics
    if result.kind == "inference":
        latency = m["latency_ms"]
        detail = f"latency p50 {latency['p50']:.2f} ms, p99 {latency['p99']:.2f} ms"
    else:
        spread = m["images_per_sec_per_step"]
        detail = (
            f"per step p10-p90 {spread['p10']:,.0f}-{spread['p90']:,.0f}, "
            f"test accuracy {m['test_accuracy']:.3f}"
        )
    return f"{label}: ok, {m['images_per_sec']:,.0f} img/s ({detail}), {result.wall_time_s:.1f} s"
