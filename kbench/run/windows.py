"""Warm interleaved windows: a comparison measured in rounds of A B C D windows (parent side).

Each config (a backend, usually) gets one warm worker (:mod:`kbench.run.worker`, on the
engine: :mod:`kbench.run.engine`)
that starts its framework, builds and compiles the model once and then measures a
window of steps each time it is told to. The workers start side by side; their warmups
run one at a time; then, round after round, each worker measures one window while the
others wait doing nothing, in an order that turns by one each round (A B C, B C A,
C A B), so that drift of the machine and the position in a round hit every backend
alike. Each window is a result document of its own (``config.repeat`` = its round,
``config.window_s`` set, ``metrics.window`` saying which worker and window): the
per-round ratios, their interval and the ratio stop rule read them as they read fresh
rounds.

- The sampler runs during each window only, on that worker's process tree; the window's
  quality flags are its own. A round in which any window was flagged busy or on a shared
  GPU is dropped: its documents are kept, marked ``metrics.window.dropped`` with the
  reason, and left out of every comparison; the rounds go on.
- A worker that crashes, runs out of memory or stops answering (a window past
  :func:`window_timeout`) is stopped and recorded as today's runs are (``failed``,
  ``oom``, ``timeout``); the others go on. With fewer than two workers left there is no
  ratio to measure, and the comparison stops.
- What needs a fresh process (the first step, compilation, cold memory) is measured
  once, at the worker's start, and kept in its first window's document only.
- Parity at warm-up (``check_parity``: :func:`plan_parity`, :func:`record_parity`): the
  baseline's worker (or the first of a Keras backend, where the baseline is a native
  port) exports its initial weights and the others start from them; the warmup steps
  train on the same batches; each worker's outputs before training and warmup losses
  are compared with the baseline's within ``kbench parity``'s tolerance
  (:mod:`kbench.run.agreement`), and every window records ``metrics.parity``. A backend
  that computes otherwise is measured all the same; one that cannot be checked says why.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import psutil

import kbench_models
from kbench.backends import BACKENDS, load_backend
from kbench.measure import sysinfo
from kbench.measure.sampler import Sampler, process_tree, tree_usage
from kbench.results import ending
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, open_log
from kbench.run import agreement, environments, weightfile
from kbench.run.engine import Worker, WorkerGone, start_sampler
from kbench.run.metrics import add_sampled, compute_rate
from kbench.run.protocol import WorkerReply
from kbench.run.runner import Case, PlannedRun, Runner, Session, model_facts

log = logging.getLogger(__name__)

WINDOW_TIMEOUT_MIN_S = 60.0  # a window that has not answered by then has hung
# After its window a worker is waited for until its threads are idle: thread pools spin
# for a while after work (OpenMP's block time), which would land in the next window.
SETTLE_CPU_PERCENT = 10.0  # of one core
SETTLE_MAX_S = 1.0
SETTLE_STEP_S = 0.05
MAX_ROUNDS = 1000
DROPPING_FLAGS = ("busy", "shared GPU")  # interference that comes and goes: drop the round
NOTE = (
    "a measuring window of a warm worker: the framework, model and compilation were "
    "started once, before the first window; throughput is the window's steps over their "
    "time, as a fresh run's measured window. Not captured here: the first step and "
    "compilation (the worker's start, in its first window's document), and what grows "
    "across windows (allocator pools, caches). The framework's memory readings are the "
    "process's peaks since it started, the sampler's the window's own. Each window's first "
    "step is untimed (the framework's per-call set-up). Test accuracy is not measured: "
    "each backend trains as many steps as its windows take."
)

Stop = Callable[[List[RunResult]], Optional[str]]
OnWindow = Callable[["WindowWorker", int], None]


def window_timeout(window_s: float, expected_s: float = 0.0) -> float:
    """How long a window may take before its worker counts as hung: 20 times what it
    should take (its ``window_s``, or ``expected_s`` from the calibration steps when more:
    a window of ``--steps N`` slow steps), and at least a minute."""
    return max(WINDOW_TIMEOUT_MIN_S, 20.0 * max(window_s, expected_s))


@functools.lru_cache(maxsize=1)
def _gpu_present() -> bool:
    return bool(sysinfo.gpu_info().get("available"))


def grow_on_demand(config: RunConfig) -> Tuple[Dict[str, str], Optional[str]]:
    """The environment variables that make a warm worker of ``config`` grow its GPU
    memory on demand, and why (empty and None: nothing to change). A framework that takes
    most of the GPU's memory when it starts (JAX 75%, TensorFlow all of it) would leave the
    session's other workers none: on an H100, every tune setting of JAX after the first
    failed with out of memory. The run's own settings stay as the user gave them (its
    windows are compared and resumed by them); the user's memory options are kept."""
    if config.device == "cpu" or config.gpu_memory_growth or config.gpu_memory_fraction:
        return {}, None
    backend = load_backend(config.backend)
    if backend.growth_variable is None or (config.device != "gpu" and not _gpu_present()):
        return {}, None
    variables, _ = backend.memory_variables(None, True)
    note = (
        f"grows on demand ({', '.join(f'{k}={v}' for k, v in variables.items())}, as "
        f"--gpu-memory-growth), not {backend.framework_name}'s default "
        f"({backend.memory_default}): the warm workers share the GPU"
    )
    return variables, note


@dataclass
class WindowWorker:
    """One warm worker process (:class:`kbench.run.engine.Worker`) measuring the windows
    of one config, and what it has said so far."""

    runner: Runner
    planned: PlannedRun
    worker: Worker
    interpreter: str
    process_env: Dict[str, str]
    keras_json: Dict[str, Any]
    launched_at: float
    started: Dict[str, Any] = field(default_factory=dict)  # the ``started`` reply
    ready: Dict[str, Any] = field(default_factory=dict)  # the ``ready`` reply
    windows: int = 0  # windows measured so far
    name: str = ""  # what logs and reasons call it (default: its backend)
    weights: Dict[str, Any] = field(default_factory=dict)  # weights_out, weights_in, check
    tags: Dict[str, Any] = field(default_factory=dict)  # added to each window's metrics
    check_rows: Optional[int] = None  # test rows whose outputs the check compares
    # Every worker its session launched, itself included (Session.window_workers).
    siblings: List[WindowWorker] = field(default_factory=list, repr=False, compare=False)
    memory_note: Optional[str] = None  # its GPU memory option changed, and why

    def __post_init__(self) -> None:
        self.name = self.name or self.config.backend

    @property
    def config(self) -> RunConfig:
        return self.planned.config

    @property
    def process(self) -> subprocess.Popen:
        return self.worker.process

    @property
    def alive(self) -> bool:
        return self.worker.alive

    @property
    def companions(self) -> List[int]:
        """The PIDs of the session's other live workers (of this comparison, of tune's
        other settings and backends): idle while this one measures, so what they hold on
        a GPU is recorded apart from other processes' and drops no window."""
        return [w.process.pid for w in self.siblings
                if w is not self and w.alive and not w.worker.closed]  # fmt: skip

    @classmethod
    def launch(cls, runner: Runner, session: Session, config: RunConfig) -> WindowWorker:
        """Start the worker process and tell it to build; it imports and builds while the
        others do too."""
        grow, memory_note = grow_on_demand(config)
        planned = runner._plan(Case(config, session.prepared.get(config)), session.directory)
        env, keras_json = environments.process_environment(
            config.backend, planned.run_dir, session.python_path, config.threads_in_force,
            config.data_format, config.device,
        )  # fmt: skip
        env.update(grow)
        interpreter = environments.interpreter_for(config.backend)
        launched_at = time.time()
        planned.write_task(keras_json["image_data_format"], launched_at)
        task = str(planned.run_dir / "run.json")
        worker = Worker.launch(
            [str(interpreter), "-m", "kbench.run.worker", task], env, planned.run_dir,
            open_log(runner.output_dir, planned.run_id), name=config.label(),
            progress_of=config, on_progress=runner.on_progress, channel=True,
        )  # fmt: skip
        window_worker = cls(
            runner=runner, planned=planned, worker=worker, interpreter=str(interpreter),
            process_env=environments.recorded_variables(env, config.backend) | grow,
            keras_json=keras_json, launched_at=launched_at, siblings=session.window_workers,
            memory_note=memory_note,
        )  # fmt: skip
        session.window_workers.append(window_worker)
        worker.send({"do": "start", "task": task})
        return window_worker

    @property
    def label(self) -> str:
        return self.name if self.name != self.config.backend else self.config.label()

    # --------------------------------------------------------------- its stages

    def start(self) -> List[RunResult]:
        """Wait for the framework, data and model; [] when started, else its failed result."""
        try:
            self.started = self.worker.await_reply("its start", self.config.timeout_s)
        except WorkerGone as gone:
            return [self._failed(gone.verdict, 0, self.launched_at)]
        return []

    def warm_up(self) -> List[RunResult]:
        """The warmup and calibration steps; [] when ready, else its failed result."""
        began = time.time()
        command = {"do": "warmup", "window_s": self.config.window_s, "steps": self.config.steps,
                   "check_rows": self.check_rows} | self.weights  # fmt: skip
        try:
            self.ready = self.worker.request(command, "its warmup", self.config.timeout_s)
        except WorkerGone as gone:
            return [self._failed(gone.verdict, 0, began)]
        for warning in self.started["framework"].get("warnings") or []:
            log.warning("%s: %s", self.label, warning)
        if self.memory_note:
            log.info("%s: GPU memory %s", self.label, self.memory_note)
        log.info(
            "%s: warm; first step %.2f s, %d-step windows (%.1f ms a step)",
            self.label, self.ready["first_step_s"], self.ready["window_steps"],
            self.ready["calibration_step_s"] * 1000,
        )  # fmt: skip
        return []

    def window(
        self, round_index: int, position: int, on_sent: Optional[OnWindow] = None
    ) -> RunResult:
        """One measuring window: its result document (not yet stored)."""
        config = self.config
        sampler = start_sampler(
            self.process.pid, config.sample_interval_s, self.runner.nvml, self.companions
        )
        began = time.time()
        try:
            self.worker.send({"do": "window", "index": self.windows})
            if on_sent is not None:
                on_sent(self, round_index)
            expected = self.ready["window_steps"] * self.ready["calibration_step_s"]
            reply = self.worker.await_reply(
                f"window {self.windows + 1}", window_timeout(config.window_s, expected)
            )
        except WorkerGone as gone:
            return self._failed(gone.verdict, round_index, began)
        finally:
            if sampler is not None:
                sampler.__exit__(None, None, None)
        self.windows += 1
        result = self._window_result(reply, round_index, position, sampler)
        result.metrics["window"]["idle_wait_s"] = self.settle()
        return result

    def settle(self) -> float:
        """Wait, at most :data:`SETTLE_MAX_S`, until the worker's processes use under
        :data:`SETTLE_CPU_PERCENT` of a core; the seconds waited."""
        started = time.monotonic()
        try:
            tree = process_tree(psutil.Process(self.process.pid))
        except psutil.Error:
            return 0.0
        known: Dict[int, psutil.Process] = {}
        tree_usage(tree, known)  # the first reading only starts the count
        while time.monotonic() - started < SETTLE_MAX_S:
            time.sleep(SETTLE_STEP_S)
            usage = tree_usage(tree, known)
            if usage is None or usage[0] < SETTLE_CPU_PERCENT:
                break
        return time.monotonic() - started

    def close(self, now: bool = False) -> None:
        """Tell it to finish (``now``: stop it at once, as on Ctrl-C); stop whatever of it
        is left; close its log. Closing twice does nothing more."""
        self.worker.close(now=now)

    # --------------------------------------------------------------- its results

    def _result(
        self,
        verdict: ending.Verdict,
        round_index: int,
        started_at: float,
        ended_at: float,
        metrics: Optional[Dict[str, Any]] = None,
        sampled: Optional[Dict[str, Any]] = None,
        reply: Optional[WorkerReply] = None,
        run_id: Optional[str] = None,
    ) -> RunResult:
        config = dataclasses.replace(self.config, repeat=round_index)
        return ending.run_result(
            run_id=run_id or f"{self.planned.run_id}-w{self.windows:03d}",
            kind="train",
            config=config.to_dict(),
            verdict=verdict,
            started_at=started_at,
            ended_at=ended_at,
            environment=ending.environment(
                self.interpreter,
                self.process_env,
                self.keras_json,
                reply.framework if reply else self.started.get("framework"),
            ),  # fmt: skip
            data=self.planned.case.data.describe(),
            model=model_facts(config, reply),
            metrics=metrics,
            sampler=sampled,
        )

    def _failed(self, verdict: ending.Verdict, round_index: int, started_at: float) -> RunResult:
        reply = None
        if self.started:
            reply = WorkerReply("failed", framework=self.started["framework"],
                                model=self.started["model"])  # fmt: skip
        return self._result(verdict, round_index, started_at, time.time(), reply=reply)

    def _window_result(
        self,
        reply: Dict[str, Any],
        round_index: int,
        position: int,
        sampler: Optional[Sampler],
    ) -> RunResult:
        metrics = dict(reply["metrics"]) | self._worker_figures() | {
            "window": {
                "index": self.windows - 1, "round": round_index, "position": position,
                "steps": self.ready["window_steps"],
                "worker_run_id": self.planned.run_id, "worker_pid": self.process.pid,
                "fresh_process": False, "dropped": None, "note": NOTE,
            } | ({"gpu_memory": self.memory_note} if self.memory_note else {}),
            **self.tags,
            "warm_worker": True, "epoch_time_s": [], "epoch_train_loss": [],
            "epoch_train_accuracy": [], "test_loss": None, "test_accuracy": None,
        }  # fmt: skip
        started_at, ended_at = reply["started_at"], reply["ended_at"]
        sampled = None
        if sampler is not None:
            sampled = add_sampled(
                sampler, metrics, started_at, ended_at, self.config.threads,
                self.runner.busy_threshold,
            ).to_dict()  # fmt: skip
        worker_reply = WorkerReply(
            "ok", metrics=metrics, framework=reply["framework"], model=self.started["model"]
        )
        metrics["compute"] = compute_rate(self.config, metrics, worker_reply)
        return self._result(
            ending.OK, round_index, started_at, ended_at, metrics, sampled, worker_reply,
            run_id=f"{self.planned.run_id}-w{self.windows - 1:03d}",
        )  # fmt: skip

    def _worker_figures(self) -> Dict[str, Any]:
        """The start's figures, in the first window's document only (None in the others)."""
        first = self.windows == 1
        ready, started = self.ready, self.started
        return {
            "import_time_s": started["import_time_s"] if first else None,
            "build_time_s": started["build_time_s"] if first else None,
            "first_step_s": ready["first_step_s"] if first else None,
            # the workers start side by side and warm up in turn: no fresh process's figure
            "time_to_first_step_s": None,
            "warmup_steps": ready["warmup_steps"] if first else 0,
            "warmup_time_s": ready["warmup_time_s"] if first else None,
        }


def drop_reason(
    round_results: Sequence[RunResult], names: Optional[Dict[int, str]] = None
) -> Optional[str]:
    """Why this round must be dropped: a window flagged busy or on a shared GPU.
    ``names``: what to call each result's worker (by ``id``; default: its backend)."""
    for result in round_results:
        for flag in (result.metrics.get("quality") or {}).get("flags") or []:
            if flag.startswith(DROPPING_FLAGS):
                name = (names or {}).get(id(result), result.config["backend"])
                return f"{name}'s window measured while {flag}"
    return None


def interleave(
    runner: Runner,
    configs: Sequence[RunConfig],
    *,
    stop: Optional[Stop] = None,
    max_rounds: int = MAX_ROUNDS,
    on_window: Optional[OnWindow] = None,
    check_parity: bool = True,
) -> Tuple[List[RunResult], str]:
    """Measure ``configs`` (each with its ``window_s``; its ``steps``, when given, the
    steps of a window) in warm interleaved windows into ``runner.output_dir`` until
    ``stop(counted results)`` gives a reason, ``max_rounds`` rounds ran, or fewer than
    two workers are left. Returns every window's result (dropped ones included) and why
    it stopped. ``on_window(worker, round)`` is called as each window's command is sent.
    The first config is the baseline: when its worker ends, so does the comparison.
    ``check_parity``: every worker's warm-up is checked against the baseline's
    (:func:`plan_parity`); each window's ``metrics.parity`` says how it came out, or that
    it was not checked and why."""
    unset = [config.label() for config in configs if config.window_s is None]
    if unset:
        raise ValueError(f"interleave: expected configs with window_s; {unset[0]} has none")
    results: List[RunResult] = []
    with runner.session(configs) as session:
        workers: List[WindowWorker] = []
        try:
            for config in configs:
                workers.append(WindowWorker.launch(runner, session, config))
            weights = session.directory.resolve() / "initial-weights.npz"
            results += start_workers(runner, plan_parity(workers, weights, check_parity))
            record_parity(workers, weights)
            reason = _rounds(runner, workers, results, stop, max_rounds, on_window)
        except BaseException:  # Ctrl-C, or a failure of kbench's own: stop them at once
            for worker in workers:
                worker.close(now=True)
            raise
        finally:
            for worker in workers:
                worker.close()
    return results, reason


def _rounds(
    runner: Runner,
    workers: List[WindowWorker],
    results: List[RunResult],
    stop: Optional[Stop],
    max_rounds: int,
    on_window: Optional[OnWindow],
) -> str:
    """The rounds of :func:`interleave`, their results added to ``results``; why they ended."""
    for round_index in range(max_rounds):
        alive = [w for w in workers if w.alive]
        if not workers[0].alive:
            return f"the baseline's worker ({workers[0].name}) ended: no ratio to measure"
        if len(alive) < 2:
            left = ", ".join(w.name for w in alive) or "none"
            return f"fewer than two workers left ({left}): no ratio to measure"
        results += measure_round(runner, alive, round_index, on_window)
        # the stop rule reads the live workers' counted windows: a worker that ended can
        # no longer narrow its interval, and would hold the others to the budget
        live = tuple(w.planned.run_id for w in workers if w.alive)
        counted = [r for r in results if not r.dropped and r.run_id.startswith(live)]
        why = stop(counted) if stop is not None else None
        if why is not None:
            return why
    return f"{max_rounds} rounds ran"


def measure_round(
    runner: Runner,
    workers: Sequence[WindowWorker],
    round_index: int,
    on_window: Optional[OnWindow] = None,
) -> List[RunResult]:
    """One round: a window of each of ``workers`` in turn, the order turned by
    ``round_index``; the round dropped (and said) where a window was flagged busy. Its
    results, stored."""
    shift = round_index % len(workers)
    turn = list(workers[shift:]) + list(workers[:shift])
    round_results = [
        worker.window(round_index, position, on_window) for position, worker in enumerate(turn)
    ]
    reason = drop_reason(round_results, {id(r): w.name for r, w in zip(round_results, turn)})
    for result in round_results:
        if reason and result.ok:
            result.metrics["window"]["dropped"] = reason
    _log_round(round_index, [(w.name, r) for w, r in zip(turn, round_results)], reason)
    return keep(runner, round_results)


def start_workers(runner: Runner, workers: Sequence[WindowWorker]) -> List[RunResult]:
    """Wait for every worker's start, then warm each up in turn; the failed ones' results."""
    results: List[RunResult] = []
    for worker in workers:
        results += keep(runner, worker.start())
    for worker in [w for w in workers if w.alive]:
        results += keep(runner, worker.warm_up())
    return results


def plan_parity(
    workers: Sequence[WindowWorker], weights: Path, check: bool = True
) -> List[WindowWorker]:
    """Set up the check at warm-up that each worker computes what the first one (the
    baseline: the reference) does: the first worker whose backend exports weights (a
    Keras backend: the baseline where it is one) saves its initial weights at ``weights``,
    every other starts from them (a native port converts their layout, as in ``kbench
    parity``), and each reports its outputs on the same test rows before training and the
    losses of its warmup steps, the same batches in each (:func:`record_parity` compares
    them). A worker that cannot be checked gets its ``parity`` record now, saying why.
    Returns the workers in the order to warm up: the one that exports first. Not
    ``check``: none is checked, each record says so."""
    reference = workers[0].config
    why_none = not_comparable(reference) if check else NOT_ASKED
    checked = [w for w in workers if _settings_apart(reference, w.config) is None]
    source = next((w for w in checked if BACKENDS[w.config.backend].exports_weights), None)
    if why_none is None and source is None:
        why_none = (
            f"no backend here exports initial weights: {', '.join(w.name for w in checked)} "
            "only load a Keras backend's (native ports); add a Keras backend to check them"
        )
    for worker in workers:
        apart = why_none or _settings_apart(reference, worker.config)
        if apart is not None:
            worker.tags["parity"] = agreement.unchecked(reference.backend, apart)
            continue
        worker.check_rows = reference.batch_size
        where = "weights_out" if worker is source else "weights_in"
        worker.weights = {where: str(weights), "check_optional": True}
    if why_none is not None:
        return list(workers)
    return [source, *[w for w in workers if w is not source]]


NOT_ASKED = "not asked for (--no-parity-check)"
# The settings that change what a worker computes: workers apart in one are not checked.
COMPUTATION = (
    "model", "dataset", "data_dir", "train_samples", "test_samples", "input_shape",
    "num_classes", "image_size", "batch_size", "warmup_steps", "optimizer", "learning_rate",
    "seed", "mode", "mixed_precision",
)  # fmt: skip


def not_comparable(config: RunConfig) -> Optional[str]:
    """Why no worker of ``config``'s comparison can be checked at warm-up; None: they can."""
    if config.model not in kbench_models.MODELS:  # a user model
        return (
            "a user model: kbench cannot tell that its training steps are deterministic "
            "(Dropout and other random layers draw apart on each backend); compare it with "
            "kbench parity"
        )
    if config.mixed_precision != "off":
        return (
            f"mixed precision {config.mixed_precision}: the parity tolerance is float32's, "
            "and half precision rounds apart on each backend"
        )
    return None


def _settings_apart(reference: RunConfig, config: RunConfig) -> Optional[str]:
    apart = [name for name in COMPUTATION if getattr(config, name) != getattr(reference, name)]
    if not apart:
        return None
    return f"its settings differ from {reference.backend}'s in {', '.join(apart)}"


def record_parity(workers: Sequence[WindowWorker], weights: Path) -> None:
    """After the warm-ups of :func:`plan_parity`: each warm worker's ``parity`` record
    (:func:`kbench.run.agreement.same_start`), added to each of its windows' metrics, and
    said. A backend that computes otherwise is still measured."""
    reference = workers[0]
    known = {backend for backend, _ in agreement.KNOWN_DIFFERENCES}
    layer_types: List[str] = []
    if weights.exists() and any(w.config.backend in known for w in workers):
        try:  # for the known differences' notes only
            layer_types = sorted(set(weightfile.layer_types(weights)))
        except (OSError, ValueError, KeyError) as err:
            log.debug("the initial weights' layer types could not be read: %s", err)
    for worker in workers:
        if "parity" not in worker.tags and worker.ready:
            worker.tags["parity"] = agreement.same_start(
                reference.config.backend, reference.ready.get("check"), worker.config.backend,
                worker.ready.get("check"), layer_types=layer_types,
            )  # fmt: skip
        record = worker.tags.get("parity")
        if worker is reference or record is None:
            continue
        if not record["checked"]:
            if record["why"] != NOT_ASKED:
                log.info("%s: not checked against %s: %s", worker.label, reference.name,
                         record["why"])  # fmt: skip
        elif record["same_computation"]:
            log.info(
                "%s: computes as %s at warm-up (max |d output| %.1e, losses within %.1e)",
                worker.label, reference.name, record["output_max_abs"], record["loss_max_rel"],
            )  # fmt: skip
        else:
            log.warning(
                "%s computes otherwise than %s at warm-up: %s; it is measured all the same",
                worker.label, reference.name, record["differs"],
            )  # fmt: skip


def keep(runner: Runner, results: List[RunResult]) -> List[RunResult]:
    """``results`` into the store; their flags are told once a round (:func:`_log_round`),
    the framework's warnings once a worker (:meth:`WindowWorker.warm_up`)."""
    with runner.store_lock:
        store = ResultStore(runner.output_dir)
        for result in results:
            store.add(result)
            if not result.ok:
                log.warning("%s", ending.summary_line(result))
    return list(results)


def _log_round(
    round_index: int, named: Sequence[Tuple[str, RunResult]], dropped_for: Optional[str]
) -> None:
    figures = ", ".join(
        f"{name} {r.metrics['images_per_sec']:,.0f} img/s" if r.ok else f"{name} {r.status.upper()}"
        for name, r in named
    )
    tail = f"; dropped: {dropped_for}" if dropped_for else ""
    log.info("round %d: %s%s", round_index + 1, figures, tail)
