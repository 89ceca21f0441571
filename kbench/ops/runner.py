"""The parent side of ``kbench ops``: one worker process per backend, one result each.

For each backend it picks the interpreter, makes the worker's environment exactly as
for a model run (:func:`kbench.run.environments.process_environment`: ``KERAS_BACKEND``,
a fresh ``KERAS_HOME`` with the backend's keras.json, thread variables, ``--device
cpu`` hiding GPUs), writes ``task.json``, and starts ``python -m kbench.ops.worker``
under the supervision model runs get (:func:`kbench.run.engine.supervise`: own
process group, log relayed to ``logs/<run_id>.log``, timeout, the whole group
killed). A worker that crashes or times out becomes a ``failed`` or ``timeout``
result that keeps the operations it finished; the next backend still runs.

The result (``kind="ops"``) adds to the worker's entries the fraction of the
machine's float32 matrix-multiply peak (:func:`kbench.measure.sysinfo.cpu_matmul_peak`)
for every operation with a FLOP count, on the CPU; on a GPU it says no peak is
known.
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
from kbench.ops.worker import IMPLEMENTATIONS, OpsTask
from kbench.results import ending
from kbench.results.config import DEVICES, ConfigError, check_choice, check_precision
from kbench.results.jsonfile import read_json, write_json_atomic
from kbench.results.lock import writer_lock
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, check_output_dir, open_log
from kbench.run import environments, leftovers
from kbench.run.engine import judge, supervise
from kbench.run.protocol import WorkerReply

log = logging.getLogger(__name__)

DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 3
DEFAULT_MAX_MEMORY_MB = 2048.0
DEFAULT_TIMEOUT_S = 1800.0


def _positive_int(setting: str, value: Any, allow_zero: bool = False) -> None:
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        what = "a non-negative integer" if allow_zero else "a positive integer"
        raise ConfigError(setting, f"expected {what}; received {value!r}.")


def _positive_number(setting: str, value: Any, unit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(setting, f"expected a positive number of {unit}; received {value!r}.")


@dataclass(frozen=True)
class OpsConfig:
    """One backend's operator benchmark, validated on creation.

    ``threads`` None means every core; ``max_memory_mb`` skips an operation at a size
    whose estimated memory is above it (:meth:`kbench.ops.spec.OpSpec.estimated_bytes`).
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
    # time each operation until its median's 95% interval is within +-target_precision
    # or time_budget_s is spent; repeats is then the most calls (kbench.measure.stats)
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
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ConfigError(
                    "sizes", f"expected positive integers, for example 64,128; received {size!r}."
                )
        check_choice("dtype", self.dtype, DTYPES)
        _positive_int("repeats", self.repeats)
        _positive_int("warmup", self.warmup, allow_zero=True)
        check_choice("device", self.device, DEVICES)
        if self.threads is not None:
            _positive_int("threads", self.threads)
        _positive_number("timeout_s", self.timeout_s, "seconds")
        _positive_number("max_memory", self.max_memory_mb, "MiB")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError("seed", f"expected a non-negative integer; received {self.seed!r}.")
        check_precision(self.target_precision, self.time_budget_s)

    # What kbench.run.engine.supervise reads of a config.
    # A coarse sampler (a reading costs about 1 ms of the parent's CPU, 0.2% at this
    # interval) that tells whether other processes shared the CPU with a batch of calls.
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

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> OpsConfig:
        return cls(**data)


def new_run_id(config: OpsConfig) -> str:
    return ending.new_run_id(config.backend, "ops")


# what an ops result's ``data`` says: every operation draws its own inputs
OPS_DATA = {
    "name": "ops-inputs",
    "source": "seeded normal draws: numpy.random.default_rng([seed, crc32(op), size])",
    "synthetic": True,
}


def run_ops(
    configs: Sequence[OpsConfig],
    output_dir: Path,
    on_progress: Optional[Callable[[OpsConfig, Dict[str, Any]], None]] = None,
) -> List[RunResult]:
    """Run each config's worker in turn and store a result for each; only bad input
    (a missing environment, an output directory that cannot be written) raises, and
    it does so before any worker starts."""
    for config in configs:
        environments.interpreter_for(config.backend)
    output_dir = check_output_dir(Path(output_dir))
    results = []
    with writer_lock(output_dir), leftovers.working_directory("ops") as directory:
        python_path = environments.import_root(Path(directory) / "pythonpath")
        for index, config in enumerate(configs, start=1):
            log.info("[%d/%d] %s: starting", index, len(configs), config.label())
            result = run_one(config, output_dir, Path(directory), python_path, on_progress)
            log.info("[%d/%d] %s", index, len(configs), ending.summary_line(result))
            results.append(result)
    return results


def run_one(
    config: OpsConfig,
    output_dir: Path,
    session_dir: Path,
    python_path: Path,
    on_progress: Optional[Callable[[OpsConfig, Dict[str, Any]], None]] = None,
) -> RunResult:
    """One backend's worker, supervised; its result stored and returned."""
    run_id = new_run_id(config)
    run_dir = session_dir / run_id
    run_dir.mkdir()
    env, recorded, keras_json = worker_environment(config, run_dir, python_path)
    interpreter = environments.interpreter_for(config.backend)
    started_at = time.time()
    task = OpsTask(
        config=config.to_dict(),
        image_data_format=keras_json["image_data_format"],
        reply_path=str(run_dir / "reply.json"),
        started_at=started_at,
    )
    write_json_atomic(run_dir / "task.json", task.to_dict())
    outcome = supervise(
        [str(interpreter), "-m", "kbench.ops.worker", str(run_dir / "task.json")],
        env,
        run_dir,
        open_log(output_dir, run_id),  # a store that cannot take it: stop
        config,  # duck-typed: label(), timeout_s, sample_interval_s
        on_progress,
    )
    ended_at = time.time()
    reply_path = Path(task.reply_path)
    reply = WorkerReply.from_dict(read_json(reply_path)) if reply_path.exists() else None
    metrics = dict(reply.metrics) if reply else {}  # what finished, whatever the status
    if metrics.get("ops"):
        add_peak_fractions(metrics, config.threads_in_force)
        if outcome.sampler is not None:
            add_quality(metrics, outcome.sampler.result({}).series, config)
    result = ending.run_result(
        run_id=run_id,
        kind="ops",
        config=config.to_dict(),
        verdict=judge(outcome, reply, config),
        started_at=started_at,
        ended_at=ended_at,
        environment=ending.environment(
            interpreter, recorded, keras_json, reply.framework if reply else {}
        ),
        data=dict(OPS_DATA, seed=config.seed),
        metrics=metrics,
    )
    return ending.keep(result, ResultStore(output_dir), config.label())


def worker_environment(
    config: OpsConfig, run_dir: Path, python_path: Path
) -> Tuple[Dict[str, str], Dict[str, str], Dict[str, Any]]:
    """The worker's variables, those a result records, and its keras.json: a model
    run's (:func:`kbench.run.environments.process_environment`), with JAX told to
    compute in float64 where the operations are."""
    env, keras_json = environments.process_environment(
        config.backend, run_dir, python_path, config.threads_in_force, None, config.device
    )
    recorded = environments.recorded_variables(env, config.backend)
    if config.dtype == "float64":  # JAX computes in float32 unless told otherwise
        env["JAX_ENABLE_X64"] = recorded["JAX_ENABLE_X64"] = "1"
    return env, recorded, keras_json


def add_quality(metrics: Dict[str, Any], series: Dict[str, List[Any]], config: OpsConfig) -> None:
    """Each timed batch's ``quality``: other processes' share of the cores and the flags
    (:func:`kbench.measure.quality.assess` over the batch's ``timed_window``; a batch
    shorter than the sampling interval is judged by the reading that covers its end)."""
    for entry in metrics["ops"]:
        window = entry.pop("timed_window", None)
        found = quality.assess(series, window, config.threads, window_name="timed calls")
        if found is not None:
            entry["quality"] = {
                "other_share": found.other_share,
                "samples": found.samples,
                "flags": found.flags,
            }
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
        if peak.get("available"):
            entry["peak_fraction"] = entry["gflops_per_sec"] / peak["gflops_per_sec"]
        else:
            entry["peak_fraction"] = None


def progress_line(config: OpsConfig, event: Dict[str, Any]) -> Optional[str]:
    """One line for a worker's progress event, or None for events it does not know."""
    if event.get("event") != "op":
        return None
    text = f"    {config.backend}: {event['op']} {event['size']}: {event['status']}"
    if event.get("median_s") is not None:
        text += f", median {event['median_s'] * 1e3:.3g} ms"
    elif event.get("reason"):
        text += f" ({event['reason']})"
    return text
