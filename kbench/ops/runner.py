"""The parent side of ``kbench ops``: one worker process per backend, one result each.

Each worker gets a model run's environment
(:func:`kbench.run.environments.process_environment`) and the engine's supervision
(:class:`kbench.run.engine.Worker`, told ``ops``). A worker that crashes or times out becomes a
``failed`` or ``timeout`` result that keeps the operations it finished; the next
backend still runs.

The result (``kind="ops"``) adds to the worker's entries the fraction of the CPU's
float32 matrix-multiply peak (:func:`kbench.measure.sysinfo.cpu_matmul_peak`) for
every operation with a FLOP count; on a GPU it says no peak is known.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kbench.measure import quality, sysinfo
from kbench.measure.processes import usable_cores
from kbench.ops.spec import DEFAULT_SIZES, DTYPES, OPS
from kbench.ops.worker import IMPLEMENTATIONS
from kbench.results import ending
from kbench.results.config import ConfigError, check_choice, check_setting
from kbench.results.jsonfile import write_json_atomic
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, open_log
from kbench.run import environments
from kbench.run.engine import Outcome, Worker, WorkerGone, judge, start_sampler
from kbench.run.protocol import WorkerReply, WorkerTask
from kbench.run.runner import run_each, session_folder

log = logging.getLogger(__name__)

DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 3
DEFAULT_MAX_MEMORY_MB = 2048.0
DEFAULT_TIMEOUT_S = 1800.0
# Fields checked as the run setting of the same name checks it (warmup: as its flag's).
SETTINGS = {"device": "device", "threads": "threads", "timeout_s": "timeout_s", "seed": "seed",
            "warmup": "warmup_steps", "target_precision": "target_precision",
            "time_budget_s": "time_budget_s"}  # fmt: skip


@dataclass(frozen=True)
class OpsConfig:
    """One backend's operator benchmark, validated on creation.

    ``threads`` None means every core; ``max_memory_mb`` skips an operation at a size
    whose estimated memory is above it (:meth:`kbench.ops.spec.OpSpec.estimated_bytes`);
    with ``target_precision`` or ``time_budget_s`` each operation is timed until its
    median's 95% interval is that precise or the budget is spent, ``repeats`` being the
    most calls (:mod:`kbench.measure.stats`).
    """

    backend: str
    ops: Tuple[str, ...] = tuple(OPS)
    sizes: Tuple[int, ...] = DEFAULT_SIZES
    dtype: str = "float32"
    repeats: int = DEFAULT_REPEATS
    warmup: int = DEFAULT_WARMUP
    device: str = "auto"
    threads: Optional[int] = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    seed: int = 0
    max_memory_mb: float = DEFAULT_MAX_MEMORY_MB
    target_precision: Optional[float] = None
    time_budget_s: Optional[float] = None

    def __post_init__(self) -> None:
        check_choice("backend", self.backend, IMPLEMENTATIONS)
        object.__setattr__(self, "ops", tuple(self.ops))
        object.__setattr__(self, "sizes", tuple(self.sizes))
        if not self.ops:
            raise ConfigError("ops", f"expected one or more of {', '.join(OPS)}; received none.")
        for op in self.ops:
            check_choice("ops", op, OPS)
        if not self.sizes:
            raise ConfigError("sizes", "expected one or more positive integers; received none.")
        for size in self.sizes:
            _positive("sizes", size, int, "positive integers, for example 64,128")
        check_choice("dtype", self.dtype, DTYPES)
        _positive("repeats", self.repeats, int, "a positive integer")
        _positive("max_memory", self.max_memory_mb, (int, float), "a positive number of MiB")
        for field, setting in SETTINGS.items():
            check_setting(setting, getattr(self, field))

    # The sampler's interval: a coarse one (a reading costs about 1 ms of the parent's
    # CPU, 0.2% at this interval) that tells whether other processes shared the CPU with
    # a batch of calls.
    sample_interval_s = 0.5

    @property
    def threads_in_force(self) -> int:
        return self.threads or usable_cores()

    def label(self) -> str:
        return f"{self.backend}/ops"

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data.update(ops=list(self.ops), sizes=list(self.sizes), threads=self.threads_in_force)
        return data


def _positive(setting: str, value: Any, kinds: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
        raise ConfigError(setting, f"expected {what}; received {value!r}.")


# what an ops result's ``data`` says: every operation draws its own inputs
OPS_DATA = {
    "name": "ops-inputs",
    "source": "seeded normal draws: numpy.random.default_rng([seed, crc32(op), size])",
    "synthetic": True,
}


def run_ops(
    configs: Sequence[OpsConfig], output_dir: Path,
    on_progress: Optional[Callable[[OpsConfig, Dict[str, Any]], None]] = None,
) -> List[RunResult]:  # fmt: skip
    """Run each config's worker in turn and store a result for each; only bad input
    (a missing environment, an output directory that cannot be written) raises, and
    it does so before any worker starts."""
    backends = [config.backend for config in configs]
    with session_folder(output_dir, backends, "ops") as (output_dir, directory, python_path):
        return run_each(configs, lambda config: run_one(
            config, output_dir, directory, python_path, on_progress
        ))  # fmt: skip


def run_one(
    config: OpsConfig, output_dir: Path, session_dir: Path, python_path: Path,
    on_progress: Optional[Callable[[OpsConfig, Dict[str, Any]], None]] = None,
) -> RunResult:  # fmt: skip
    """One backend's worker on the engine, sampled; its result stored and returned."""
    run_id = ending.new_run_id(config.backend, "ops")
    run_dir = session_dir / run_id
    run_dir.mkdir()
    env, keras_json = environments.process_environment(
        config.backend, run_dir, python_path, config.threads_in_force, None, config.device
    )
    recorded = environments.recorded_variables(env, config.backend)
    if config.dtype == "float64":  # JAX computes in float32 unless told otherwise
        env["JAX_ENABLE_X64"] = recorded["JAX_ENABLE_X64"] = "1"
    interpreter = environments.interpreter_for(config.backend)
    started_at = time.time()
    task = WorkerTask(config.to_dict(), {}, "", keras_json["image_data_format"], started_at)
    write_json_atomic(run_dir / "task.json", task.to_dict())
    worker = Worker.launch(
        [str(interpreter), "-m", "kbench.ops.worker", str(run_dir / "task.json")], env, run_dir,
        open_log(output_dir, run_id),  # a store that cannot take it: stop
        name=config.label(), progress_of=config, on_progress=on_progress, channel=True,
    )  # fmt: skip
    sampler = start_sampler(worker.pid, config.sample_interval_s)
    try:
        reply, verdict = answers(worker, config, run_dir / "task.json", started_at)
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
    ended_at = time.time()
    metrics = dict(reply.metrics) if reply else {}  # what finished, whatever the status
    if metrics.get("ops"):
        add_peak_fractions(metrics, config.threads_in_force)
        if sampler is not None:
            add_quality(metrics, sampler.result({}).series, config)
    result = ending.run_result(
        run_id=run_id, kind="ops", config=config.to_dict(), verdict=verdict,
        started_at=started_at, ended_at=ended_at,
        environment=ending.environment(
            interpreter, recorded, keras_json, reply.framework if reply else {}
        ),
        data=dict(OPS_DATA, seed=config.seed), metrics=metrics,
    )  # fmt: skip
    return ending.keep(result, ResultStore(output_dir), config.label())


def answers(
    worker: Worker, config: OpsConfig, task: Path, started_at: float
) -> Tuple[Optional[WorkerReply], ending.Verdict]:
    """The worker's last reply (after each operation, what it measured so far) and how it
    ended: past ``config.timeout_s`` from its start it is stopped; it is always closed."""
    reply, verdict = None, None
    try:
        worker.send({"do": "ops", "task": str(task)})
        while reply is None or reply.status == "running":
            answer = worker.await_reply(
                "its operations", started_at + config.timeout_s - time.time(),
                late=f"the worker ran past the {config.timeout_s:g} s timeout and was killed",
                died="the worker {how} without reporting a result",
            )  # fmt: skip
            reply = WorkerReply.from_dict(answer["reply"])
    except WorkerGone as gone:
        verdict = gone.verdict
    except BaseException:  # Ctrl-C: take the worker down with us, write nothing
        worker.close(now=True)
        raise
    worker.close()
    ended = Outcome(worker.process.returncode, False, list(worker.tail))
    return reply, verdict or judge(ended, reply, config)


def add_quality(metrics: Dict[str, Any], series: Dict[str, List[Any]], config: OpsConfig) -> None:
    """Each timed batch's ``quality``: other processes' share of the cores and the flags
    (:func:`kbench.measure.quality.assess` over the batch's ``timed_window``; a batch
    shorter than the sampling interval is judged by the reading that covers its end)."""
    for entry in metrics["ops"]:
        window = entry.pop("timed_window", None)
        found = quality.assess(series, window, config.threads, window_name="timed calls")
        if found is not None:
            entry["quality"] = {"other_share": found.other_share, "samples": found.samples,
                                "flags": found.flags}  # fmt: skip
            for flag in found.flags:
                log.warning("%s: %s at size %s measured while %s",
                            config.label(), entry.get("op"), entry.get("size"), flag)  # fmt: skip


def add_peak_fractions(metrics: Dict[str, Any], threads: int) -> None:
    """Each entry's share of the measured matmul peak (CPU), or why there is none."""
    rated = [e for e in metrics["ops"] if e.get("gflops_per_sec") is not None]
    if metrics.get("device") == "gpu":
        metrics["peak"] = {"available": False, "reason": "no peak figure is known for this GPU"}
    elif rated:
        metrics["peak"] = sysinfo.cpu_matmul_peak(threads)
    else:
        return
    peak = metrics["peak"]
    for entry in rated:
        available = peak.get("available")
        entry["peak_fraction"] = (
            entry["gflops_per_sec"] / peak["gflops_per_sec"] if available else None
        )
