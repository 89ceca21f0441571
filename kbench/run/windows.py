"""Warm interleaved windows: a comparison measured in rounds of A B C D windows (parent side).

Each config gets one warm worker (:mod:`kbench.run.worker`) that builds and compiles the
model once, then measures a window of steps each time it is told to. The workers start
side by side and warm up one at a time; then each round every worker measures one window
while the others wait idle, in an order that turns by one each round (A B C, B C A), so
that drift and position hit every backend alike. Each backend's windows are one document
(:mod:`kbench.results.comparison`), stored again every few seconds.

- The sampler runs during each window only, on that worker's tree. A round in which a
  window was flagged busy, on a shared GPU or stalled (its steps show the worker stood
  still) is dropped (kept, marked ``dropped``, left out of every comparison unless every
  round was: then the figures are flagged busy).
- A worker that crashes, runs out of memory or hangs (past :func:`window_timeout`) is
  stopped; its document ends ``failed``, ``oom`` or ``timeout`` with its windows kept.
- The first step, compilation and cold memory are measured once, at the worker's start.
- Parity at warm-up (:func:`plan_parity`, :func:`record_parity`): the workers start from
  one backend's initial weights and warm up on the same batches; each one is compared
  with the baseline in its ``metrics.parity``, and measured all the same.
"""

from __future__ import annotations

import contextlib
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
from kbench.measure import quality, sysinfo
from kbench.measure.sampler import pid_tree, tree_usage
from kbench.results import ending
from kbench.results.analysis import widest_ratio_half_width
from kbench.results.comparison import (
    comparison_metrics,
    comparison_sampler,
    failed_record,
    window_record,
)
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, StoreWriteError
from kbench.run import agreement, weightfile
from kbench.run.engine import Worker, WorkerGone, start_sampler
from kbench.run.metrics import add_sampled, compute_rate
from kbench.run.protocol import WorkerReply
from kbench.run.runner import (
    Case,
    ModelsDiffer,
    PlannedRun,
    RunContext,
    Runner,
    Session,
    different_models,
    model_facts,
)

log = logging.getLogger(__name__)

WINDOW_TIMEOUT_MIN_S = 60.0  # a window that has not answered by then has hung
# after its window a worker is waited for until its threads are idle: thread pools spin
# after work (OpenMP's block time), which would land in the next window
SETTLE_CPU_PERCENT = 10.0  # of one core
SETTLE_MAX_S = 1.0
SETTLE_STEP_S = 0.05
MAX_ROUNDS = 1000
PROGRESS_EVERY_S = 5.0  # a comparison's progress line, and its documents stored, this often
INTERRUPTED = "interrupted"
# interference that comes and goes: drop the round
DROPPING_FLAGS = ("busy", "shared GPU", "stalled")
Stop = Callable[[List[RunResult]], Optional[str]]
OnWindow = Callable[["WindowWorker", int], None]


def window_timeout(window_s: float, expected_s: float = 0.0) -> float:
    """20 times what a window should take (``window_s``, or ``expected_s`` from the
    calibration steps when more), at least a minute: then its worker counts as hung."""
    return max(WINDOW_TIMEOUT_MIN_S, 20.0 * max(window_s, expected_s))


@functools.lru_cache(maxsize=1)
def _gpu_present() -> bool:
    return bool(sysinfo.gpu_info().get("available"))


def grow_on_demand(config: RunConfig) -> Tuple[Dict[str, str], Optional[str]]:
    """The variables that make a warm worker grow its GPU memory on demand, and why: a
    framework taking most of the GPU at its start (JAX 75%, TensorFlow all) leaves the
    others none (on an H100, every JAX tune setting after the first ran out of memory)."""
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
    """One warm worker measuring the windows of one config, and what it has said so far."""

    runner: Runner
    planned: PlannedRun
    worker: Worker
    context: RunContext  # how its process was started
    started: Dict[str, Any] = field(default_factory=dict)  # the ``started`` reply
    ready: Dict[str, Any] = field(default_factory=dict)  # the ``ready`` reply
    windows: int = 0  # windows measured so far
    name: str = ""  # what logs and reasons call it (default: its backend)
    weights: Dict[str, Any] = field(default_factory=dict)  # weights_out, weights_in, check
    tags: Dict[str, Any] = field(default_factory=dict)  # added to each window's metrics
    check_rows: Optional[int] = None  # test rows whose outputs the check compares
    # every worker its session launched, itself included (Session.window_workers)
    siblings: List[WindowWorker] = field(default_factory=list, repr=False, compare=False)
    memory_note: Optional[str] = None  # its GPU memory option changed, and why
    records: List[Dict[str, Any]] = field(default_factory=list)  # every window, in order
    sampled: List[Dict[str, Any]] = field(default_factory=list)  # each window's sampler
    framework: Dict[str, Any] = field(default_factory=dict)  # as its last window found it
    said: bool = False  # its ending was said
    stopped: Optional[str] = None  # why its comparison stopped, once it did
    rounds_done: int = 0  # the comparison's rounds finished (judged for drops)

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
        """The PIDs of the session's other live workers: idle while this one measures, so
        what they hold on a GPU is recorded apart and drops no window."""
        return [w.worker.pid for w in self.siblings
                if w is not self and w.alive and not w.worker.closed]  # fmt: skip

    @classmethod
    def launch(cls, runner: Runner, session: Session, config: RunConfig) -> WindowWorker:
        """Start the worker and tell it to build (while the others do too)."""
        grow, note = grow_on_demand(config)
        planned = runner._plan(Case(config, session.prepared.get(config)), session.directory)
        env, context, log_path = runner.prepare([planned], session.python_path, grow)
        worker = runner.launch(planned, env, context, log_path)
        window_worker = cls(runner, planned, worker, context, memory_note=note)
        window_worker.siblings = session.window_workers
        session.window_workers.append(window_worker)
        worker.send({"do": "start", "task": str(planned.run_dir / "run.json")})
        return window_worker

    @property
    def label(self) -> str:
        return self.name if self.name != self.config.backend else self.config.label()

    def start(self) -> None:
        """Wait for the model built (a worker that fails ends: its document says why)."""
        with contextlib.suppress(WorkerGone):
            self.started = self.worker.await_reply("its start", self.config.timeout_s)
            self.framework = self.started["framework"]

    def warm_up(self) -> None:
        """The warmup and calibration steps (a failure ends the worker, as in :meth:`start`)."""
        command = {"do": "warmup", "window_s": self.config.window_s, "steps": self.config.steps,
                   "check_rows": self.check_rows} | self.weights  # fmt: skip
        try:
            self.ready = self.worker.request(command, "its warmup", self.config.timeout_s)
        except WorkerGone:
            return
        for warning in self.started["framework"].get("warnings") or []:
            log.warning("%s: %s", self.label, warning)
        if self.memory_note:
            log.info("%s: GPU memory %s", self.label, self.memory_note)
        log.info(
            "%s: warm; first step %.2f s, %d-step windows (%.1f ms a step)",
            self.label, self.ready["first_step_s"], self.ready["window_steps"],
            self.ready["calibration_step_s"] * 1000,
        )  # fmt: skip

    def window(
        self, round_index: int, position: int, on_sent: Optional[OnWindow] = None
    ) -> Dict[str, Any]:
        """One measuring window: its record (:mod:`kbench.results.comparison`), kept."""
        config = self.config
        sampler = start_sampler(
            self.worker.pid, config.sample_interval_s, self.runner.nvml, self.companions
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
            record = failed_record(
                round_index, position, gone.verdict.status, gone.verdict.reason, began, time.time()
            )
            self.records.append(record)
            self.sampled.append(None)
            return record
        finally:
            if sampler is not None:
                sampler.__exit__(None, None, None)
        self.windows += 1
        metrics = dict(reply["metrics"])
        started_at, ended_at = reply["started_at"], reply["ended_at"]
        sampled = None
        if sampler is not None:
            sampled = add_sampled(
                sampler, metrics, started_at, ended_at, config.threads, self.runner.busy_threshold
            ).to_dict()
        self.sampled.append(sampled)  # beside its record, as comparison_sampler reads them
        stalled = quality.stall_flag(metrics.get("step_ends_s") or [])
        if stalled:
            found = metrics.get("quality") or {}
            # first: the likeliest cause of what else the window shows (others' share)
            metrics["quality"] = dict(found, flags=[stalled, *(found.get("flags") or [])])
        record = window_record(
            self.windows - 1, round_index, position, metrics, started_at, ended_at
        )
        record["idle_wait_s"] = self.settle()
        self.framework = reply["framework"]
        self.records.append(record)
        return record

    def settle(self) -> float:
        """Wait (at most :data:`SETTLE_MAX_S`) until the worker's threads are idle."""
        started = time.monotonic()
        tree = pid_tree(self.worker.pid)
        if not tree:
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
        self.worker.close(now=now)

    def document(self, sampled: bool = True) -> RunResult:
        """The comparison's document of this worker, with every window it measured; not
        ``sampled``: without the sampler's series (for the stop rule, each round)."""
        reply = WorkerReply("ok", framework=self.framework, model=self.started.get("model") or {})
        metrics: Dict[str, Any] = {}
        if self.ready:
            metrics = comparison_metrics(
                self.records, self._start_figures(), self._facts(), self.tags
            )
            if metrics["images_per_sec"] is not None:
                metrics["compute"] = compute_rate(self.config, metrics, reply)
        ended_at = self.records[-1]["ended_at"] if self.records else time.time()
        return ending.run_result(
            run_id=self.planned.run_id, kind="train", config=self.config.to_dict(),
            verdict=self.verdict(metrics), started_at=self.context.started_at, ended_at=ended_at,
            environment=self.context.environment(self.framework),
            data=self.planned.case.data.describe(), model=model_facts(self.config, reply),
            metrics=metrics,
            sampler=comparison_sampler(self.sampled, self.records) if sampled else None,
        )  # fmt: skip

    def verdict(self, metrics: Dict[str, Any]) -> ending.Verdict:
        """As its worker ended; else failed if interrupted or no window was measured."""
        if self.worker.gone is not None:
            return self.worker.gone
        if self.stopped and self.stopped.startswith(INTERRUPTED):
            return ending.Verdict("failed", self.stopped, None)
        if self.stopped and metrics.get("images_per_sec") is None:
            return ending.Verdict("failed", f"no window measured: {self.stopped}", None)
        return ending.OK

    def _start_figures(self) -> Dict[str, Any]:
        return {  # what the worker's start measured, once
            "import_time_s": self.started.get("import_time_s"),
            "build_time_s": self.started.get("build_time_s"),
            "first_step_s": self.ready["first_step_s"],
            # the workers start side by side and warm up in turn: no fresh process's figure
            "time_to_first_step_s": None,
            "warmup_steps": self.ready["warmup_steps"],
            "warmup_time_s": self.ready["warmup_time_s"],
        }

    def _facts(self) -> Dict[str, Any]:
        return {
            "steps": self.ready["window_steps"], "window_s": self.config.window_s,
            "batch_size": self.config.batch_size, "worker_pid": self.worker.pid,
            "fresh_process": False,
        } | ({"gpu_memory": self.memory_note} if self.memory_note else {})  # fmt: skip


def drop_reason(records: Sequence[Dict[str, Any]], names: Sequence[str]) -> Optional[str]:
    """Why this round must be dropped (a window flagged busy, on a shared GPU or stalled)."""
    for record, name in zip(records, names):
        for flag in (record.get("quality") or {}).get("flags") or []:
            if flag.startswith(DROPPING_FLAGS):
                return f"{name}'s window measured while {flag}"
    return None


def interleave(
    runner: Runner, configs: Sequence[RunConfig], *, stop: Optional[Stop] = None,
    max_rounds: int = MAX_ROUNDS, on_window: Optional[OnWindow] = None, check_parity: bool = True,
) -> Tuple[List[RunResult], str]:  # fmt: skip
    """Measure ``configs`` in warm interleaved windows until ``stop(the live documents)``
    gives a reason, ``max_rounds`` ran, or fewer than two workers are left; the documents
    and why. ``on_window(worker, round)`` as each window is sent. The first config is the
    baseline: when its worker ends, so does the comparison."""
    unset = [config.label() for config in configs if config.window_s is None]
    if unset:
        raise ValueError(f"interleave: expected configs with window_s; {unset[0]} has none")
    with runner.session(configs) as session:
        workers: List[WindowWorker] = []
        try:
            for config in configs:
                workers.append(WindowWorker.launch(runner, session, config))
            weights = session.directory.resolve() / "initial-weights.npz"
            order = plan_parity(workers, weights, check_parity)  # starts, then warm-ups
            for worker in order:
                worker.start()
            differ = models_differ(workers)
            if differ:
                raise ModelsDiffer(differ)
            for worker in [w for w in order if w.alive]:
                worker.warm_up()
            record_parity(workers, weights)
            keep(runner, [w for w in workers if not w.alive])
            reason = _rounds(runner, workers, stop, max_rounds, on_window)
        except BaseException as err:  # Ctrl-C, or a failure of kbench's own: stop them now
            for worker in workers:
                worker.close(now=True)
            if not isinstance(err, ModelsDiffer):  # nothing was measured of those
                interrupted(workers, err)
                keep(runner, workers, quiet=True)
            raise
        finally:
            for worker in workers:
                worker.close()
        for worker in workers:
            worker.stopped = reason
        keep(runner, workers)
    return [w.document() for w in workers], reason


def models_differ(workers: Sequence[WindowWorker]) -> Optional[str]:
    """Why the started workers' models are not one model (their parameter counts differ),
    with the likely fix, or None. Checked as the models are built, before any window: a
    comparison of different models would compare nothing."""
    started = [w for w in workers if w.started]
    counts = {w.config.backend: w.started["model"]["params"] for w in started}
    formats = {w.config.backend: w.context.keras_json.get("image_data_format") for w in started}
    return different_models(counts, formats, "nothing was measured")


def interrupted(workers: Sequence[WindowWorker], err: BaseException) -> None:
    """Mark each comparison cut short by ``err``; its unfinished round left out."""
    why = (
        "Ctrl-C or SIGTERM" if isinstance(err, KeyboardInterrupt)
        else "the store could not take its documents" if isinstance(err, StoreWriteError)
        else type(err).__name__
    )  # fmt: skip
    for worker in workers:
        for record in worker.records:
            if record["round"] >= worker.rounds_done and not record.get("dropped"):
                record["dropped"] = f"{INTERRUPTED}: its round was not finished"
        worker.stopped = (
            f"{INTERRUPTED} ({why}) after {worker.rounds_done} round(s); the windows measured "
            "are kept, and the comparison is measured again whole when its sweep resumes"
        )


def _rounds(
    runner: Runner, workers: List[WindowWorker], stop: Optional[Stop], max_rounds: int,
    on_window: Optional[OnWindow],
) -> str:  # fmt: skip
    """The rounds of :func:`interleave`, documents stored and progress said every
    :data:`PROGRESS_EVERY_S` (and at the end); why they ended."""
    stored_at = said_at = time.monotonic()
    reason, drops, done, said = f"{max_rounds} rounds ran", [], 0, 0
    for round_index in range(max_rounds):
        alive = [w for w in workers if w.alive]
        if not workers[0].alive:
            reason = f"the baseline's worker ({workers[0].name}) ended: no ratio to measure"
            break
        if len(alive) < 2:
            left = ", ".join(w.name for w in alive) or "none"
            reason = f"fewer than two workers left ({left}): no ratio to measure"
            break
        dropped = measure_round(alive, round_index, on_window)
        drops += [dropped] if dropped else []
        done = round_index + 1
        for worker in workers:
            worker.rounds_done = done
        if time.monotonic() - stored_at >= PROGRESS_EVERY_S or any(not w.alive for w in alive):
            keep(runner, workers)
            stored_at = time.monotonic()
        # the stop rule reads the live workers' documents: a worker that ended can no
        # longer narrow its interval, and would hold the others to the budget
        documents = [w.document(sampled=False) for w in workers if w.alive]
        why = stop(documents) if stop is not None else None
        if time.monotonic() - said_at >= PROGRESS_EVERY_S:
            say_progress(done, workers, documents, drops)
            said, said_at = done, time.monotonic()
        if why is not None:
            reason = why
            break
    if done > said:
        say_progress(done, workers, [w.document(sampled=False) for w in workers if w.alive], drops)
    return reason


def measure_round(
    workers: Sequence[WindowWorker], round_index: int, on_window: Optional[OnWindow] = None
) -> Optional[str]:
    """A window of each worker, the order turned by ``round_index``; why it dropped."""
    shift = round_index % len(workers)
    turn = list(workers[shift:]) + list(workers[:shift])
    records = [worker.window(round_index, position, on_window)
               for position, worker in enumerate(turn)]  # fmt: skip
    reason = drop_reason(records, [w.name for w in turn])
    for record in records:
        if reason and record["status"] == "ok":
            record["dropped"] = reason
    return reason


def say_progress(
    rounds: int, workers: Sequence[WindowWorker], documents: Sequence[RunResult], drops: List[str]
) -> None:
    """A comparison's progress line: rounds, each backend's median (the live workers'
    ``documents``), the widest ratio interval, the rounds dropped and the last why."""
    rates = {d.run_id: d.metrics.get("images_per_sec") for d in documents}
    figures = []
    for worker in workers:
        rate = rates.get(worker.planned.run_id)
        if not worker.alive:
            figures.append(f"{worker.name} {worker.worker.gone.status.upper()}")
        elif rate is not None:
            figures.append(f"{worker.name} {rate:,.0f} img/s")
    widest = widest_ratio_half_width(documents, workers[0].config.backend)
    interval = "not yet measurable" if widest is None else f"+-{widest:.1%}"
    dropped = f"; {len(drops)} dropped (last: {drops[-1]})" if drops else ""
    line = ", ".join(figures)
    log.info("round %d: %s; widest ratio interval %s%s", rounds, line, interval, dropped)


def plan_parity(
    workers: Sequence[WindowWorker], weights: Path, check: bool = True
) -> List[WindowWorker]:
    """Set up the check at warm-up against the first worker: the first whose backend
    exports weights saves its initial weights at ``weights``, every other starts from
    them, and each reports outputs and warmup losses (:func:`record_parity`). One that
    cannot be checked gets its record now; the workers in the order to warm up."""
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
# the settings that change what a worker computes: workers apart in one are not checked
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
    """After the warm-ups: each worker's ``parity`` record in its tags, and said."""
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


def keep(runner: Runner, workers: Sequence[WindowWorker], quiet: bool = False) -> None:
    """Each worker's document into the store; one not ok said once (not ``quiet``).
    :class:`~kbench.results.store.ResultsNotSaved` once every document was tried: the
    comparison stops, each document the store could not take kept aside and named."""
    with runner.store_lock:
        documents = [worker.document() for worker in workers]
        for worker, document in zip(workers, documents):
            if not document.ok and not quiet and not worker.said:
                worker.said = True
                log.warning("%s", ending.summary_line(document))
        # each tried, those the store cannot take kept aside, then one error names them all
        ResultStore(runner.output_dir).add_all(documents)
