"""Runs each config in a fresh worker process and turns what happens into a result.

For every run the runner picks the backend's interpreter, writes ``run.json`` and a
per-run ``KERAS_HOME``, starts ``python -m kbench.worker`` in its own process
group, relays its progress, and enforces the timeout. A worker that crashes, hangs
or is killed becomes a recorded ``failed`` or ``timeout`` result, and the next run
goes on. Results are written atomically to ``output_dir/<run_id>.json`` (a results
store: :mod:`kbench.store`), the worker's output to ``output_dir/logs/<run_id>.log``.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import psutil

from kbench import datasets, environments, sysinfo
from kbench import sampler as sampler_mod
from kbench.config import ConfigError, RunConfig
from kbench.results import RunResult
from kbench.sampler import Sampler
from kbench.store import ResultStore
from kbench.task import WorkerReply, WorkerTask, parse_progress, read_json, write_json_atomic
from kbench_models import MODELS

log = logging.getLogger(__name__)

KILL_GRACE_S = 5.0
LOG_TAIL_LINES = 40


def check_output_dir(path: Path) -> Path:
    """Create ``path`` if needed and prove it writable, before anything runs."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".kbench-probe-", delete=True)
        probe.close()
    except OSError as err:
        raise ConfigError(
            "output_dir",
            f"expected a directory kbench can write; {path} is not one "
            f"({err.strerror or err}). Choose another with --output-dir.",
        ) from err
    return path


def new_run_id(config: RunConfig) -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{config.backend}-{config.model}-{uuid.uuid4().hex[:6]}"


def data_request(config: RunConfig) -> Dict[str, Any]:
    """What :func:`kbench.datasets.prepare` needs for this run's data.

    Synthetic data takes the model's own input shape, classes and kind unless the
    run gives a shape or class count.
    """
    spec = MODELS[config.model]
    synthetic = config.dataset == "synthetic"
    return dict(
        dataset=config.dataset,
        data_dir=config.data_dir,
        train_samples=config.train_samples,
        test_samples=config.test_samples,
        input_shape=(config.input_shape or spec.input_shape) if synthetic else None,
        num_classes=(config.num_classes or spec.num_classes) if synthetic else None,
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

    def run_all(self, configs: Sequence[RunConfig]) -> List[RunResult]:
        """Run every config in turn; only bad input (before any run starts) raises."""
        results = []
        with self.session(configs) as session:
            for index, config in enumerate(configs, start=1):
                log.info("[%d/%d] %s: starting", index, len(configs), config.label())
                result = session.run(config)
                results.append(result)
                log.info("[%d/%d] %s", index, len(configs), summary_line(result))
        return results

    @contextlib.contextmanager
    def session(self, configs: Sequence[RunConfig]) -> Iterator[Session]:
        """Check, prepare the data for, and hold a working directory for ``configs``.

        Everything that can be refused is checked before the first run starts, and
        before the output directory is created.
        """
        for config in configs:
            environments.interpreter_for(config.backend)
        with tempfile.TemporaryDirectory(prefix="kbench-") as directory:
            directory = Path(directory)
            prepared: Dict[Tuple, datasets.PreparedData] = {}
            for config in configs:
                if data_key(config) not in prepared:
                    prepared[data_key(config)] = prepare_data(config, directory / "data")
            self.output_dir = check_output_dir(self.output_dir)
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
            from kbench.distributed import run_distributed

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

        log_path = self.output_dir / "logs" / f"{run_id}.log"
        log_path.parent.mkdir(exist_ok=True)
        outcome = self.supervise(
            [str(interpreter), "-m", "kbench.worker", str(run_dir / "run.json")],
            env,
            run_dir,
            log_path,
            config,
        )
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
            model=reply.model if reply else {},
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
        return result

    def supervise(
        self,
        command: List[str],
        env: Dict[str, str],
        run_dir: Path,
        log_path: Path,
        config: RunConfig,
    ) -> Outcome:
        """Run ``command`` in its own process group: log its output, relay its progress,
        sample it, and stop it past ``config.timeout_s``. ``config`` needs only
        ``label()``, ``timeout_s`` and ``sample_interval_s`` (``kbench ops`` passes its own)."""
        tail: collections.deque = collections.deque(maxlen=LOG_TAIL_LINES)
        with open(log_path, "w") as log_file:
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=run_dir,
                start_new_session=True,  # its own process group: killed as a whole
                text=True,
                errors="replace",
            )
            reader = threading.Thread(
                target=self._relay, args=(process, log_file, tail, config), daemon=True
            )
            reader.start()
            sampler = None
            if config.sample_interval_s > 0:
                try:
                    sampler = Sampler(process.pid, config.sample_interval_s, nvml=self.nvml)
                    sampler.__enter__()
                except psutil.Error as err:  # the worker died before the first sample
                    log.debug("sampler not started: %s", err)
                    sampler = None
            timed_out = False
            try:
                process.wait(timeout=config.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                log.warning(
                    "%s: past its %g s timeout; stopping it", config.label(), config.timeout_s
                )
                stop_group(process)
            except BaseException:  # Ctrl-C: take the worker down with us, write nothing
                stop_group(process)
                raise
            finally:
                if sampler is not None:
                    sampler.__exit__(None, None, None)
                kill_group(process.pid)  # whatever the worker left behind
            reader.join(timeout=10)
        return Outcome(
            returncode=process.returncode,
            timed_out=timed_out,
            log_tail=list(tail),
            sampler=sampler,
        )

    def _relay(self, process, log_file, tail, config: RunConfig) -> None:
        for line in process.stdout:
            log_file.write(line)
            log_file.flush()
            event = parse_progress(line)
            if event is None:
                tail.append(line.rstrip("\n"))
            elif event and self.on_progress:
                self.on_progress(config, event)


@dataclass
class Session:
    """Prepared data and a working directory: runs any of the session's configs."""

    runner: Runner
    directory: Path
    python_path: Path
    prepared: Dict[Tuple, datasets.PreparedData]

    def run(
        self,
        config: RunConfig,
        parity: Optional[Dict[str, Any]] = None,
        sweep: Optional[Dict[str, Any]] = None,
    ) -> RunResult:
        data = self.prepared[data_key(config)]
        return self.runner.run_one(config, data, self.directory, self.python_path, parity, sweep)


@dataclass(frozen=True)
class Outcome:
    returncode: int
    timed_out: bool
    log_tail: List[str]
    sampler: Optional[Sampler] = None


def compute_rate(config: RunConfig, metrics: Dict[str, Any], reply: WorkerReply) -> Dict[str, Any]:
    """Achieved FLOP/s from the model's FLOPs per sample, and its share of the peak."""
    flops = reply.model.get("flops", {})
    per_sample = flops.get("forward_per_sample" if config.mode == "inference" else
                           "train_per_sample")  # fmt: skip
    if not per_sample:
        return {"available": False, "reason": "no FLOPs counted for this model"}
    achieved = metrics["images_per_sec"] * per_sample / 1e9
    rate: Dict[str, Any] = {
        "available": True,
        "flops_per_sample": per_sample,
        "achieved_gflops_per_sec": achieved,
        "method": flops.get("method"),
    }
    if reply.framework.get("memory_options", {}).get("gpus_visible"):
        rate["peak_fraction"] = None
        rate["peak_reason"] = "no peak figure is known for this GPU"
        return rate
    peak = sysinfo.cpu_matmul_peak(config.threads_in_force)
    if peak["available"]:
        rate["peak_gflops_per_sec"] = peak["gflops_per_sec"]
        rate["peak_fraction"] = achieved / peak["gflops_per_sec"]
        rate["peak_method"] = peak["method"]
    else:
        rate["peak_fraction"] = None
        rate["peak_reason"] = peak["reason"]
    return rate


def sampled_memory(summary: Dict[str, Dict[str, Dict[str, float]]]) -> List[Dict[str, Any]]:
    """The sampler's GPU memory peaks over the whole run, labelled with their kinds."""
    readings = []
    for name, stats in sorted(summary.get("run", {}).items()):
        gpu, _, metric = name.partition("_")
        kind = {"process_memory_bytes": "process_nvml", "memory_used_bytes": "device_used"}.get(
            metric
        )
        if gpu.startswith("gpu") and kind:
            readings.append(
                {
                    "kind": kind,
                    "bytes": int(stats["max"]),
                    "device": gpu,
                    "source": "NVML, the largest sampled value over the run"
                    + (
                        " (the worker and its children)"
                        if kind == "process_nvml"
                        else " (every process on the device)"
                    ),
                }
            )
    return readings


def measured_energy(
    summary: Dict[str, Dict[str, Dict[str, float]]], measured_images: int
) -> Dict[str, Any]:
    """Energy over the measured window from every readable counter, and images per joule."""
    counters = {
        name: stats["increase"]
        for name, stats in summary.get("measured", {}).items()
        if name.endswith("energy_j") and stats.get("samples", 0) >= 2
    }
    if not counters:
        return {
            "available": False,
            "reason": "no energy counter was readable (NVML energy on a GPU, Intel RAPL on "
            "the CPU) with at least two samples in the measured window",
        }
    joules = sum(counters.values())
    return {
        "available": True,
        "measured_j": joules,
        "counters": counters,
        "images_per_joule": measured_images / joules if joules > 0 else None,
    }


def judge(
    outcome: Outcome, reply: Optional[WorkerReply], config: RunConfig
) -> Tuple[str, Optional[str], Optional[Dict]]:
    """(status, one-line reason, error details) from how the worker ended."""
    tail = "\n".join(outcome.log_tail)
    if outcome.timed_out:
        return (
            "timeout",
            f"the worker ran past the {config.timeout_s:g} s timeout and was killed",
            {"type": "Timeout", "message": "", "traceback": "", "log_tail": tail},
        )
    if reply is not None and reply.status == "ok" and outcome.returncode == 0:
        return "ok", None, None
    if reply is not None and reply.error:
        error = dict(reply.error, log_tail=tail)
        first_line = f"{error['type']}: {error['message']}".strip().splitlines()[0]
        return reply.status, first_line[:500], error
    code = outcome.returncode
    how = f"exited with code {code}"
    if code < 0:
        how = f"was killed by signal {signal.Signals(-code).name}"
    if code == -signal.SIGKILL:
        how += " (the kernel's out-of-memory killer does this; see dmesg)"
    return (
        "failed",
        f"the worker {how} without reporting a result",
        {"type": "WorkerCrashed", "message": how, "traceback": "", "log_tail": tail},
    )


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the worker's process group, then SIGKILL it after a grace period."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        process.wait()


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def summary_line(result: RunResult) -> str:
    label = f"{result.config['backend']}/{result.config['model']}"
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
