"""Runs each config in a fresh worker process and turns what happens into a result.

For every run the runner picks the backend's interpreter, writes ``run.json`` and a
per-run ``KERAS_HOME``, starts ``python -m kbench.worker`` in its own process
group, relays its progress, and enforces the timeout. A worker that crashes, hangs
or is killed becomes a recorded ``failed`` or ``timeout`` result, and the next run
goes on. Results are written atomically to ``output_dir/<run_id>.json``, the
worker's output to ``output_dir/logs/<run_id>.log``.
"""

from __future__ import annotations

import collections
import datetime as dt
import json
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
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from kbench import datasets, environments, sysinfo
from kbench.config import ConfigError, RunConfig
from kbench.results import RunResult
from kbench.task import PROGRESS_PREFIX, WorkerReply, WorkerTask, read_json, write_json_atomic

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


def data_key(config: RunConfig) -> Tuple:
    return (
        config.dataset,
        config.data_dir,
        config.train_samples,
        config.test_samples,
        config.input_shape,
        config.num_classes,
        config.seed,
    )


def prepare_data(config: RunConfig, directory: Path) -> datasets.PreparedData:
    data = datasets.prepare(
        config.dataset,
        directory,
        data_dir=config.data_dir,
        train_samples=config.train_samples,
        test_samples=config.test_samples,
        input_shape=config.input_shape,
        num_classes=config.num_classes,
        seed=config.seed,
    )
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

    def run_all(self, configs: Sequence[RunConfig]) -> List[RunResult]:
        """Run every config in turn; only bad input (before any run starts) raises."""
        # Everything that can be refused is checked before the first run starts, and
        # before the output directory is created.
        for config in configs:
            environments.interpreter_for(config.backend)
        results = []
        with tempfile.TemporaryDirectory(prefix="kbench-") as session:
            session_dir = Path(session)
            prepared: Dict[Tuple, datasets.PreparedData] = {}
            for config in configs:
                if data_key(config) not in prepared:
                    prepared[data_key(config)] = prepare_data(config, session_dir / "data")
            self.output_dir = check_output_dir(self.output_dir)
            python_path = environments.import_root(session_dir / "pythonpath")
            for index, config in enumerate(configs, start=1):
                log.info("[%d/%d] %s: starting", index, len(configs), config.label())
                data = prepared[data_key(config)]
                result = self.run_one(config, data, session_dir, python_path)
                results.append(result)
                log.info("[%d/%d] %s", index, len(configs), summary_line(result))
        return results

    def run_one(
        self, config: RunConfig, data: datasets.PreparedData, session_dir: Path, python_path: Path
    ) -> RunResult:
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
            config.backend, run_dir, python_path, config.threads_in_force, config.data_format
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
        )
        write_json_atomic(run_dir / "run.json", task.to_dict())

        log_path = self.output_dir / "logs" / f"{run_id}.log"
        log_path.parent.mkdir(exist_ok=True)
        outcome = self._supervise(
            [str(interpreter), "-m", "kbench.worker", str(run_dir / "run.json")],
            env,
            run_dir,
            log_path,
            config,
        )
        wall_time = time.time() - started_at

        reply_path = Path(task.reply_path)
        reply = WorkerReply.from_dict(read_json(reply_path)) if reply_path.exists() else None
        status, reason, error = judge(outcome, reply, config)
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
            metrics=reply.metrics if reply and status == "ok" else {},
            reason=reason,
            error=error,
        )
        result.save(self.output_dir)
        return result

    def _supervise(
        self,
        command: List[str],
        env: Dict[str, str],
        run_dir: Path,
        log_path: Path,
        config: RunConfig,
    ) -> Outcome:
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
                kill_group(process.pid)  # whatever the worker left behind
            reader.join(timeout=10)
        return Outcome(returncode=process.returncode, timed_out=timed_out, log_tail=list(tail))

    def _relay(self, process, log_file, tail, config: RunConfig) -> None:
        for line in process.stdout:
            log_file.write(line)
            log_file.flush()
            if line.startswith(PROGRESS_PREFIX):
                try:
                    event = json.loads(line[len(PROGRESS_PREFIX) :])
                except ValueError:
                    continue
                if self.on_progress:
                    self.on_progress(config, event)
            else:
                tail.append(line.rstrip("\n"))


@dataclass(frozen=True)
class Outcome:
    returncode: int
    timed_out: bool
    log_tail: List[str]


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
        return "failed", f"{error['type']}: {error['message']}".splitlines()[0], error
    code = outcome.returncode
    how = (
        f"was killed by signal {signal.Signals(-code).name}"
        if code < 0
        else (f"exited with code {code}")
    )
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
    spread = m["images_per_sec_per_step"]
    return (
        f"{label}: ok, {m['images_per_sec']:,.0f} img/s (per step p10-p90 "
        f"{spread['p10']:,.0f}-{spread['p90']:,.0f}), test accuracy {m['test_accuracy']:.3f}, "
        f"{result.wall_time_s:.1f} s"
    )
