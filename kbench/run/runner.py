"""Runs each config in a fresh worker process and turns what happens into a result.

For every run the runner picks the backend's interpreter, writes ``run.json`` and a
per-run ``KERAS_HOME``, starts ``python -m kbench.run.worker`` on the engine
(:mod:`kbench.run.engine`) and awaits its reply within the run's timeout. A worker that
crashes, hangs or is killed becomes a ``failed`` or ``timeout`` result, and the next run
goes on; runs that share what a worker starts with may share one (``--warm``). Results
go to ``output_dir/<run_id>.json``, the worker's output to ``output_dir/logs/<run_id>.log``.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from kbench import datasets
from kbench.backends import BACKENDS
from kbench.backends.kernels import jit_decides_start
from kbench.backends.switches import SWITCHES, per_process
from kbench.measure import quality as quality_mod
from kbench.measure.sampler import Sampler
from kbench.results import ending
from kbench.results.config import ConfigError, RunConfig, file_safe
from kbench.results.jsonfile import refuse_link, write_json_atomic
from kbench.results.result import RunResult
from kbench.results.store import (
    ResultStore,
    check_output_dir,
    low_space_warning,
    open_log,
    writer_lock,
)
from kbench.run import environments, exports, generate, leftovers
from kbench.run.engine import Outcome, Worker, WorkerGone, judge, start_sampler
from kbench.run.metrics import add_sampled, compute_rate
from kbench.run.protocol import WorkerReply, WorkerTask
from kbench_models import spec_for

log = logging.getLogger(__name__)

# A worker's errors that no backend could avoid (kbench_models.user): the model's runs
# on the other backends are recorded with it, not started.
MODEL_REFUSALS = ("WrongOutput",)


def look_before_runs(
    output_dir: Path, runs: int, busy_threshold: float, wait_quiet_s: float, command: str
) -> None:
    """Before model runs: warn where ``output_dir`` has less room than ``runs`` may need,
    then take the one-second look at the machine (``--wait-quiet``). Both only warn."""
    low = low_space_warning(output_dir, runs, command)
    if low:
        log.warning("%s", low)
    quality_mod.preflight_unless_skipped(busy_threshold, wait_quiet_s)


@contextlib.contextmanager
def session_folder(
    output_dir: Path,
    backends: Iterable[str],
    kind: str = "",
    first: Callable[[Path], None] = lambda directory: None,
) -> Iterator[Tuple[Path, Path, Path]]:
    """Each backend's environment checked and a working directory made, ``first(it)``
    done there (what can refuse the run before the store is touched: its data), then the
    store made writable and its writer lock held (a second kbench writing there is
    refused at once): (the store, the directory, the workers' PYTHONPATH folder in it)."""
    for backend in backends:
        environments.interpreter_for(backend)
    with leftovers.working_directory(kind) as directory:
        directory = Path(directory)
        first(directory)
        output_dir = check_output_dir(Path(output_dir))
        with writer_lock(output_dir):
            yield output_dir, directory, environments.import_root(directory / "pythonpath")


def run_each(configs: Sequence[Any], run_one: Callable[[Any], RunResult]) -> List[RunResult]:
    """``run_one(config)`` for each config in turn, a line as each starts and ends."""
    results: List[RunResult] = []
    for index, config in enumerate(configs, start=1):
        log.info("[%d/%d] %s: starting", index, len(configs), config.label())
        results.append(run_one(config))
        log.info("[%d/%d] %s", index, len(configs), ending.summary_line(results[-1]))
    return results


class ModelsDiffer(ConfigError):
    """The backends built models of different parameter counts: the comparison stops."""

    def __init__(self, message: str) -> None:
        super().__init__("model", message)


def different_models(
    counts: Dict[str, int], formats: Dict[str, Optional[str]], done: str
) -> Optional[str]:
    """Why the models the backends built (``counts``: backend -> parameters; ``formats``:
    their image_data_format) are not one model, with the likely fix, or None. ``done``:
    what was measured before this was found, in words."""
    if len(set(counts.values())) < 2:
        return None
    sizes = "; ".join(f"{label}: {count:,}" for label, count in counts.items())
    fix = "build the same layers on every backend"
    if len(set(formats.values()) - {None}) > 1:
        first = sorted(b for b, f in formats.items() if f == "channels_first")
        fix = (
            f"{', '.join(first)} laid the images out channels_first, where a layer that "
            "names an axis (BatchNormalization's or Concatenate's default axis=-1) takes "
            "another one: add --data-format channels_last (or write the axis for both "
            "layouts)"
        )
    return (
        f"the backends built models of different parameter counts ({sizes}), so their "
        f"speeds would compare different models; {done}. Fix: {fix}."
    )


def models_of_results(results: Sequence[RunResult]) -> Optional[str]:
    """:func:`different_models` for fresh runs: per comparison (the same settings but the
    backend and the repeat), the parameter counts of the runs that built their model."""
    groups: Dict[str, Dict[str, RunResult]] = {}
    for result in results:
        params = (result.model or {}).get("params")
        if result.ok and isinstance(params, int):  # as the tables read them
            key = repr(sorted((k, repr(v)) for k, v in result.config.items()
                              if k not in ("backend", "repeat")))  # fmt: skip
            groups.setdefault(key, {}).setdefault(result.config["backend"], result)
    for built in groups.values():
        counts = {b: r.model["params"] for b, r in built.items()}
        formats = {b: (r.environment.get("keras_json") or {}).get("image_data_format")
                   for b, r in built.items()}  # fmt: skip
        done = (
            f"stopped after {len(results)} run(s), before the other rounds (kept in the "
            "store, and said apart by every table)"
        )
        differ = different_models(counts, formats, done)
        if differ:
            return differ
    return None


def new_run_id(config: RunConfig) -> str:
    return ending.new_run_id(config.backend, file_safe(config.model))


def data_request(config: RunConfig) -> Dict[str, Any]:
    """What :func:`kbench.datasets.prepare` needs for this run's data (synthetic data
    takes the model's own input shape and classes unless the run gives them)."""
    spec = spec_for(config.model)
    synthetic = config.dataset == "synthetic"
    own_classes = config.dataset.startswith(datasets.NPZ_PREFIX) and config.num_classes
    named = ("dataset", "data_dir", "train_samples", "test_samples", "image_size", "seed")
    # its image size; a text file's sequence length
    sized = synthetic or config.dataset.startswith((datasets.FOLDER_PREFIX, datasets.TEXT_PREFIX))
    return {name: getattr(config, name) for name in named} | dict(
        input_shape=(config.input_shape or spec.input_shape) if sized else None,
        num_classes=(config.num_classes or spec.num_classes) if synthetic else own_classes or None,
        model_kind=spec.input_kind,
        vocabulary=spec.vocabulary_size,
        target=spec.target,
    )


def batch_order(config: RunConfig, samples: int, batch_size: int) -> np.ndarray:
    """The run's seeded sample order (:func:`kbench.datasets.batch_order`) at ``batch_size``
    (a data-parallel run's: the global batch): ``--steps`` steps after the warmup, or epochs."""
    steps = None if config.steps is None else config.warmup_steps + config.steps
    return datasets.batch_order(
        samples, batch_size, config.epochs or 1, config.seed, total_steps=steps
    )


def data_key(config: RunConfig) -> Tuple:
    return tuple(sorted(data_request(config).items()))


@dataclass
class Runner:
    output_dir: Path
    on_progress: Optional[Callable[[RunConfig, Dict], None]] = None  # (config, event)
    nvml: Any = None  # the NVML module the sampler reads; None imports pynvml
    # share of the given cores that other processes may use before a run is flagged busy
    busy_threshold: float = quality_mod.BUSY_THRESHOLD
    # a round's runs that can share a worker process run in one: for checks and quick
    # looks; their timings are not those of fresh processes
    warm: bool = False
    # one result written to the store at a time, when runs go on side by side in threads
    store_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # kbench.distributed.launcher.run_distributed, given by the stage above that plans
    # data-parallel runs (run never imports it); None refuses them
    data_parallel: Optional[Callable[..., RunResult]] = None
    # the exports the session's runtimes run (kbench.run.exports), made together
    session_exports: exports.SessionExports = field(default_factory=exports.SessionExports)

    def run_all(self, configs: Sequence[RunConfig]) -> List[RunResult]:
        """Run every config in turn; only bad input (before any run starts) raises."""
        return self.run_rounds([configs])[0]

    def run_rounds(
        self, rounds: Sequence[Sequence[RunConfig]],
        stop: Optional[Callable[[List[RunResult]], Optional[str]]] = None,
    ) -> Tuple[List[RunResult], Optional[str]]:  # fmt: skip
        """Run the rounds in turn; after each, ``stop(results so far)`` may end them, giving
        its reason (returned beside the results; None: every round ran)."""
        configs = [config for round_configs in rounds for config in round_configs]
        results: List[RunResult] = []
        refused: Dict[str, RunResult] = {}  # model -> the run that found it unusable
        with self.session(configs) as session:
            for round_configs in rounds:
                for group in self._groups(round_configs):
                    first = len(results) + 1
                    labels = ", ".join(config.label() for config in group)
                    log.info("[%d/%d] %s: starting", first, len(configs), labels)
                    results += [self._refused_again(c, refused[c.model])
                                for c in group if c.model in refused]  # fmt: skip
                    todo = [c for c in group if c.model not in refused]
                    if len(todo) == 1:
                        results.append(session.run(todo[0]))
                    elif todo:
                        results += session.run_warm(todo)
                    for result in results[first - 1 :]:
                        if (result.error or {}).get("type") in MODEL_REFUSALS:
                            refused.setdefault(result.config["model"], result)
                    for index, result in enumerate(results[first - 1 :], first):
                        log.info("[%d/%d] %s", index, len(configs), ending.summary_line(result))
                    differ = models_of_results(results)  # as soon as a backend built it
                    if differ:
                        raise ModelsDiffer(differ)
                reason = stop(results) if stop is not None else None
                if reason is not None and len(results) < len(configs):
                    return results, reason
        return results, None

    def _refused_again(self, config: RunConfig, found: RunResult) -> RunResult:
        """A run of a model an earlier run found unusable on any backend (its output
        does not fit the data): recorded failed with that reason, no worker started."""
        now, by = time.time(), found.config["backend"]
        why = f"{found.reason} (found by {by}'s run, the same on every backend: not run again)"
        verdict = ending.Verdict("failed", ending.first_line(why), found.error)
        result = ending.run_result(
            run_id=new_run_id(config), kind=config.mode, config=config.to_dict(),
            verdict=verdict, started_at=now, ended_at=now,
            environment=ending.environment("", {}, {}, {}), data=found.data,
            model=model_facts(config, None),
        )  # fmt: skip
        with self.store_lock:
            return ending.keep(result, ResultStore(self.output_dir), config.label())

    def _groups(self, configs: Sequence[RunConfig]) -> List[List[RunConfig]]:
        """One run per worker; with :attr:`warm`, runs that can share one share it."""
        if not self.warm:
            return [[config] for config in configs]
        return [[configs[i] for i in group] for group in shared_workers(configs)]

    @contextlib.contextmanager
    def session(self, configs: Sequence[RunConfig]) -> Iterator[Session]:
        """Check ``configs``, hold a session folder, prepare the first one's data."""
        self.session_exports = exports.SessionExports(list(configs))
        backends = [config.backend for config in configs]
        groups: List[DataGroups] = []

        def prepare_first(directory: Path) -> None:
            # a data set that cannot be had is refused before anything runs or is stored
            groups.append(DataGroups.of(directory / "data", configs))
            if configs:
                groups[0].get(configs[0])

        folder = session_folder(self.output_dir, backends, first=prepare_first)
        with folder as (output_dir, directory, python_path):
            self.output_dir = output_dir
            yield Session(self, directory, python_path, groups[0])

    def run_one(
        self, config: RunConfig, data: datasets.PreparedData, session_dir: Path, python_path: Path,
        parity: Optional[Dict[str, Any]] = None, sweep: Optional[Dict[str, Any]] = None,
    ) -> RunResult:  # fmt: skip
        if config.window_s is not None:
            raise ValueError(
                f"{config.label()}: window_s is measured by kbench.run.windows (warm "
                "interleaved windows), not in a worker of its own"
            )
        if config.distributed != "none":  # several processes on the framework's own engine
            if self.data_parallel is None:
                raise ValueError(
                    f"{config.label()}: --distributed {config.distributed} needs the "
                    "data-parallel launcher; expected a Runner made with data_parallel="
                    "kbench.distributed.launcher.run_distributed"
                )
            return self.data_parallel(self, config, data, session_dir, python_path, sweep)
        return self.run_warm([Case(config, data, parity, sweep)], session_dir, python_path)[0]

    def run_warm(
        self, cases: Sequence[Case], session_dir: Path, python_path: Path
    ) -> List[RunResult]:
        """Run ``cases`` in one worker process, one after another (one case: an ordinary
        run); they must share a :func:`worker_key`. Each has its own result and timeout
        (the first counted from the worker's start); a worker that dies or is stopped
        fails the cases it had not answered yet."""
        keys = {worker_key(case.config) for case in cases}
        if len(keys) != 1:
            raise ValueError(
                f"run_warm: expected cases that share one worker (backend, data format, "
                f"threads, device, memory options, start-up switches); received {len(keys)} kinds"
            )
        cases = [with_export(c, session_dir, python_path, self.session_exports) for c in cases]
        planned = [self._plan(case, session_dir) for case in cases]
        first = planned[0]
        env, context, log_path = self.prepare(planned, python_path)
        served = Served(None, warm=len(planned) > 1)
        kept: Dict[str, RunResult] = {}

        def keep_replied(run: PlannedRun) -> None:  # a warm worker's run: judged by its reply
            if run is not first:
                shutil.copyfile(log_path, refuse_link(log_path.with_name(f"{run.run_id}.log")))
            so_far = Outcome(0, False, list(served.worker.tail), served.sampler)
            ended = dataclasses.replace(context, ended_at=time.time())
            kept[run.run_id] = self._finish(run, served.verdict(run, so_far), served, ended)

        try:  # from the launch on: a SIGTERM at any point is said beside the log
            served.worker = self.launch(first, env, context, log_path)
            served.sampler = start_sampler(
                served.worker.pid, first.config.sample_interval_s, self.nvml
            )
            served.serve(planned, context.started_at, keep_replied if served.warm else None)
            served.worker.close()
        except BaseException as err:  # Ctrl-C, SIGTERM, a store that cannot take a run
            if served.worker is not None:
                served.worker.close(now=True)
            if isinstance(err, KeyboardInterrupt):  # keep what finished, say so, stop
                left = [run for run in planned if run.run_id not in kept]
                self._interrupted(left, log_path, served, context)
            raise
        finally:
            if served.sampler is not None:
                served.sampler.__exit__(None, None, None)
        worker, sampler = served.worker, served.sampler
        for run in planned[1:]:  # every run of a warm worker has the worker's whole log
            shutil.copyfile(log_path, refuse_link(log_path.with_name(f"{run.run_id}.log")))
        outcome = Outcome(worker.process.returncode, False, list(worker.tail), sampler)
        ended = dataclasses.replace(context, ended_at=time.time())
        return [
            kept.get(run.run_id) or self._finish(run, served.verdict(run, outcome), served, ended)
            for run in planned
        ]

    def _interrupted(
        self, planned: Sequence[PlannedRun], log_path: Path, served: Served, context: RunContext
    ) -> None:
        """The worker was stopped before ``planned`` were kept: each that replied is saved;
        each other one marked interrupted beside the log, for a resumed sweep to run again."""
        replied = dataclasses.replace(context, warm=True, ended_at=time.time())
        stopped = Outcome(0, False, [])
        for run in planned:
            reply = served.replies.get(run.run_id)
            if reply is not None:
                try:
                    self._finish(run, judge(stopped, reply, run.config), served, replied)
                    continue
                except Exception as err:  # the interrupt goes on whatever this does
                    log.warning("%s: its reply could not be saved: %s", run.config.label(), err)
            leftovers.write_interrupted(
                log_path, run.run_id, run.config, context.started_at, run.case.sweep
            )

    def prepare(
        self, planned: Sequence[PlannedRun], python_path: Path, extra: Optional[Dict] = None
    ) -> Tuple[Dict[str, str], RunContext, Path]:
        """A worker's environment for ``planned`` (with the ``extra`` variables), their task
        files written, how it starts, and its log (a store that cannot take it: raises)."""
        config, run_dir = planned[0].config, planned[0].run_dir
        env, keras_json = environments.process_environment(
            config.backend,
            run_dir,
            python_path,
            config.threads_in_force,
            config.data_format,
            config.device,
        )
        env.update(extra or {})
        interpreter = environments.interpreter_for(config.backend)
        started_at = time.time()
        for run in planned:
            run.write_task(keras_json["image_data_format"], started_at)
        recorded = environments.recorded_variables(env, config.backend) | (extra or {})
        context = RunContext(str(interpreter), recorded, keras_json, started_at, len(planned) > 1)
        return env, context, open_log(self.output_dir, planned[0].run_id)

    def launch(
        self, first: PlannedRun, env: Dict[str, str], context: RunContext, log_path: Path
    ) -> Worker:
        command = [context.interpreter, "-m", "kbench.run.worker", str(first.run_dir / "run.json")]
        config = first.config
        return Worker.launch(
            command,
            env,
            first.run_dir,
            log_path,
            name=config.label(),
            progress_of=config,
            on_progress=self.on_progress,
            channel=True,
        )

    def _plan(self, case: Case, session_dir: Path) -> PlannedRun:
        config = case.config
        run_id = new_run_id(config)
        run_dir = session_dir / run_id
        run_dir.mkdir()
        np.save(
            run_dir / "order.npy", batch_order(config, case.data.train_samples, config.batch_size)
        )
        return PlannedRun(case, run_id, run_dir)

    def _finish(
        self, run: PlannedRun, verdict: ending.Verdict, served: Served, context: RunContext
    ) -> RunResult:
        """The run's result document from its reply and verdict, saved."""
        config = run.config
        reply = served.replies.get(run.run_id)
        started_at, ended_at = context.started_at, context.ended_at
        if context.warm and reply is not None:  # the worker ended later, for this case
            started_at, ended_at = reply.started_at or started_at, reply.ended_at or ended_at
        metrics = dict(reply.metrics) if reply and verdict.status == "ok" else {}
        sampled = None
        if served.sampler is not None:
            measured = bool(metrics) and run.case.parity is None
            sampled = add_sampled(
                served.sampler,
                metrics,
                started_at,
                ended_at,
                config.threads,
                self.busy_threshold,
                measured,
            )
        if metrics and run.case.parity is None:
            metrics["compute"] = compute_rate(config, metrics, reply)
        framework = reply.framework if reply else {}
        result = ending.run_result(
            run_id=run.run_id, kind="parity" if run.case.parity is not None else config.mode,
            config=config.to_dict(), verdict=verdict, started_at=started_at, ended_at=ended_at,
            environment=context.environment(framework), data=run.case.data.describe(),
            model=model_facts(config, reply), metrics=metrics,
            sampler=sampled.to_dict() if sampled else None, sweep=run.case.sweep,
        )  # fmt: skip
        with self.store_lock:  # runs side by side in threads: one writer at a time
            return ending.keep(result, ResultStore(self.output_dir), config.label())


@dataclass
class Served:
    """What a worker answered its ``run`` commands, and how it ended before answering all."""

    worker: Optional[Worker]
    replies: Dict[str, WorkerReply] = field(default_factory=dict)  # run id -> its reply
    gone: Optional[ending.Verdict] = None
    sampler: Optional[Sampler] = None
    warm: bool = False  # several runs in the worker

    def serve(
        self, planned: Sequence[PlannedRun], started_at: float,
        on_reply: Optional[Callable[[PlannedRun], None]] = None,
    ) -> None:  # fmt: skip
        """Each run in turn, with its own timeout (the first counted from the worker's start),
        until the worker ends; ``on_reply(run)`` as each reply comes."""
        for index, run in enumerate(planned):
            timeout = run.config.timeout_s
            if index == 0:
                timeout = max(0.0, started_at + timeout - time.time())
            try:
                answer = self.worker.request(
                    {"do": "run", "task": str(run.run_dir / "run.json")}, run.config.label(),
                    timeout, late=f"the worker ran past the {run.config.timeout_s:g} s timeout "
                    "and was killed", died="the worker {how} without reporting a result",
                )  # fmt: skip
            except WorkerGone as gone:
                self.gone = gone.verdict
                return
            self.replies[run.run_id] = WorkerReply.from_dict(answer["reply"])
            if on_reply is not None:
                on_reply(run)

    def verdict(self, run: PlannedRun, outcome: Outcome) -> ending.Verdict:
        """How ``run`` ended: by its reply (run alone: and exit code 0); unanswered, as its
        worker ended (in a warm worker, said so, unless the worker could not start at all)."""
        reply = self.replies.get(run.run_id)
        if reply is not None:
            returncode = 0 if self.warm else outcome.returncode
            return judge(dataclasses.replace(outcome, returncode=returncode), reply, run.config)
        verdict = self.gone or ending.no_result(
            "WorkerCrashed", "", "the worker ended without reporting a result", outcome.log_tail
        )
        start_failed = not self.replies and verdict.status != "timeout"
        if self.warm and not start_failed:
            verdict = verdict._replace(
                reason=verdict.reason
                + " (in a warm worker shared with other runs: this one had not replied yet)"
            )
        return verdict


def worker_key(config: RunConfig) -> Tuple:
    """What a worker is started with: runs that share it may share a warm worker (a per-run
    switch is applied per run: :meth:`~kbench.backends.base.Backend.next_case`)."""
    switches = tuple(sorted(per_process({n: getattr(config, n, None) for n in SWITCHES}).items()))
    decides = jit_decides_start(config.backend, config.data_format)  # nchw_refusal
    start_jit = config.jit_compile if decides else None
    return (
        config.backend,
        config.data_format,
        config.threads_in_force,
        config.inter_op_threads or config.threads_in_force,  # as the backend applies it
        config.device,
        config.gpu_memory_fraction,
        config.gpu_memory_growth,
        spec_for(config.model).is_user,
        switches,
        start_jit,
    )


def shared_workers(configs: Sequence[RunConfig]) -> List[List[int]]:
    """Indexes of ``configs`` by the worker they can share; data-parallel runs alone."""
    groups: Dict[Tuple, List[int]] = {}
    for index, config in enumerate(configs):
        key = ("distributed", index) if config.distributed != "none" else worker_key(config)
        groups.setdefault(key, []).append(index)
    return list(groups.values())


@dataclass(frozen=True)
class Case:
    """One run for a worker: its config, data, what to replay (parity), its sweep (sweep)."""

    config: RunConfig
    data: datasets.PreparedData
    parity: Optional[Dict[str, Any]] = None
    sweep: Optional[Dict[str, Any]] = None
    export: Optional[Dict[str, Any]] = None  # an inference runtime's (kbench.run.exports)


def with_export(
    case: Case, session_dir: Path, python_path: Path, made: exports.SessionExports
) -> Case:
    """``case`` with the export its runtime runs (made where the cache has none, with the
    session's other runs' formats); a backend that runs no export: unchanged."""
    if not BACKENDS[case.config.backend].export_format:
        return case
    export = exports.export_for(case.config, case.data, session_dir, python_path, made)
    return dataclasses.replace(case, export=export)


@dataclass(frozen=True)
class PlannedRun:
    case: Case
    run_id: str
    run_dir: Path

    @property
    def config(self) -> RunConfig:
        return self.case.config

    def write_task(self, data_format: str, started_at: float) -> None:
        task = WorkerTask(
            config=self.config.to_dict() | {"threads": self.config.threads_in_force},
            data=self.case.data.to_dict(), order_path=str(self.run_dir / "order.npy"),
            data_format=data_format, started_at=started_at, parity=self.case.parity,
            export=self.case.export, generate=self.generate_task(),
        )  # fmt: skip
        write_json_atomic(self.run_dir / "run.json", task.to_dict())

    def generate_task(self) -> Optional[Dict[str, Any]]:
        """A generate run's weights, shared by the session's runs (kbench.run.generate)."""
        if self.config.mode != "generate":
            return None
        data = self.case.data.describe()
        return generate.task_for(self.config.to_dict(), data, self.run_dir.parent)


@dataclass(frozen=True)
class RunContext:
    """How a worker process was started, shared by the runs it ran."""

    interpreter: str
    process_env: Dict[str, str]
    keras_json: Dict[str, Any]
    started_at: float
    warm: bool
    ended_at: float = 0.0

    def environment(self, framework: Dict[str, Any]) -> Dict[str, Any]:
        return ending.environment(self.interpreter, self.process_env, self.keras_json, framework)


def model_facts(config: RunConfig, reply: Optional[WorkerReply]) -> Dict[str, Any]:
    """What the worker said of the model; a user model's source even unbuilt."""
    model = dict(reply.model) if reply else {}
    spec = spec_for(config.model)
    if spec.is_user:
        model.setdefault("name", config.model)
        model.setdefault("source", spec.source())
    return model


@dataclass
class DataGroups:
    """A session's data sets: each prepared when a run first needs it and deleted once
    no run still to come needs it (a sweep of 40 seeds holds one seed's data, not 40)."""

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
            request = data_request(config)
            data = datasets.prepare(
                request.pop("dataset"), self.directory / f"group-{self.made}", **request
            )
            shape = "x".join(map(str, data.input_shape))
            said = (data.name, data.train_samples, data.test_samples, shape, data.source)
            log.info("data: %s, %d train / %d test samples of %s, from %s", *said)
            self.prepared[key] = data
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
    # the warm window workers this session launched (kbench.run.windows): each one's
    # windows count the others, idle meanwhile, as companions, not as other load
    window_workers: List[Any] = field(default_factory=list, repr=False, compare=False)

    def run(
        self, config: RunConfig, parity: Optional[Dict[str, Any]] = None,
        sweep: Optional[Dict[str, Any]] = None,
    ) -> RunResult:  # fmt: skip
        data = self.prepared.get(config)
        result = self.runner.run_one(config, data, self.directory, self.python_path, parity, sweep)
        self.prepared.release(config)
        return result

    def run_warm(
        self, configs: Sequence[RunConfig],
        parities: Optional[Sequence[Optional[Dict[str, Any]]]] = None,
        sweeps: Optional[Sequence[Optional[Dict[str, Any]]]] = None,
    ) -> List[RunResult]:  # fmt: skip
        """``configs`` in one warm worker, each with what it replays and its sweep."""
        none = [None] * len(configs)
        pairs = zip(configs, parities or none, sweeps or none)
        cases = [Case(c, self.prepared.get(c), p, s) for c, p, s in pairs]
        results = self.runner.run_warm(cases, self.directory, self.python_path)
        for config in configs:
            self.prepared.release(config)
        return results
