"""The result document of a script's run (``kind: "exec"``): :class:`ExecRunner` runs the
user's command once per config, each in its own process tree; :func:`record` writes
one from inside the user's own process (``kbench.record``).

Per run: the backend's interpreter and environment (:mod:`kbench.exec.environment`),
the command started from the user's directory and watched by :mod:`kbench.exec.watch`,
the store's writer lock held. A command that is neither ``python`` nor a program that
exists is refused before any run starts. Every run reads the same stdin
(:func:`shared_stdin`). The status is ``ok`` for exit code 0,
``failed`` for any other (or a signal), ``timeout`` past ``--timeout``. Ctrl-C stops
the tree; finished results stay.

What a script's events measure (:func:`observe`): training where it called ``fit``
(:func:`kbench.measure.keras_events.summarize` over its batches), else inference over
the ``predict`` batches made outside any fit (else ``evaluate``'s), each call a run of
its own (under keras-mxnet, whose ``predict`` takes no callbacks, each call one step);
fewer than :data:`MIN_MEASURED_STEPS` measured steps give one img/s with no spread
worth the name, and ``measurement_note`` says so.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kbench.exec.environment import (
    EXEC_BACKENDS,
    PYTHON_NAMES,
    SCRIPT_DATA,
    ExecConfig,
    child_environment,
    resolve_command,
)
from kbench.exec.watch import LOG_LIMIT_BYTES, CannotStart, ScriptOutcome, watch
from kbench.measure import processes
from kbench.measure import quality as quality_mod
from kbench.measure import sampler as sampler_mod
from kbench.measure.keras_events import NO_TRAINING, read_events, summarize
from kbench.results import ending
from kbench.results.config import ConfigError, file_safe
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, check_output_dir, open_log, writer_lock
from kbench.run import environments, leftovers
from kbench.run.metrics import sampled_memory
from kbench.run.runner import run_each, session_folder

log = logging.getLogger(__name__)

STDIN_LIMIT_BYTES = 16 * 2**20  # piped into kbench exec: read once, given to every run
MIN_MEASURED_STEPS = 5  # fewer: one figure, no spread; flagged as too short
INFERENCE_STAGES = ("predict", "evaluate")  # in order of preference


def new_run_id(config: ExecConfig) -> str:
    return ending.new_run_id(config.backend, "exec", file_safe(config.name))


@dataclass
class ExecRunner:
    output_dir: Path
    on_progress: Optional[Callable[[Any, Dict], None]] = None
    nvml: Any = None  # the NVML module the sampler reads; tests inject a stand-in
    busy_threshold: float = quality_mod.BUSY_THRESHOLD
    log_limit_bytes: int = LOG_LIMIT_BYTES  # of each script's output kept in its log

    def run_all(self, configs: Sequence[ExecConfig]) -> List[RunResult]:
        """Run every config in turn; only bad input (before any run starts) raises."""
        for config in configs:
            check_command(config.command, config.cwd)
        backends = [config.backend for config in configs]
        with session_folder(self.output_dir, backends, "exec") as (store, directory, python_path):
            self.output_dir, stdin = store, shared_stdin(directory)
            return run_each(configs, lambda c: self.run_one(c, directory, python_path, stdin))

    def run_one(
        self, config: ExecConfig, session_dir: Path, python_path: Path, stdin: Tuple[Any, str]
    ) -> RunResult:
        run_id = new_run_id(config)
        run_dir = session_dir / run_id
        run_dir.mkdir()
        env, keras_json, settings = child_environment(config, run_dir, python_path)
        interpreter = environments.interpreter_for(config.backend)
        command = resolve_command(config.command, interpreter)
        log_path = open_log(self.output_dir, run_id)
        started_at = time.time()
        given, said = stdin
        fed = open(given, "rb") if isinstance(given, Path) else given  # each run from byte 0
        try:
            outcome = watch(
                command, env, Path(config.cwd), log_path, config, run_dir / "events.jsonl",
                self.on_progress, self.nvml, self.log_limit_bytes, stdin=fed,
            )  # fmt: skip
        except KeyboardInterrupt:  # the tree is stopped; say so beside the log
            leftovers.write_interrupted(log_path, run_id, config, started_at, None)
            raise
        except CannotStart as err:  # not an executable file, no rights to run it
            raise ConfigError("command", cannot_start(config.command, err.args[0])) from None
        finally:
            if fed is not given:
                fed.close()
        ended_at = outcome.ended_at  # the script's own end, not that of what it left
        events = read_events(run_dir / "events.jsonl")
        observed = observe(events, config.warmup_steps) if config.instrument else {}
        metrics = exec_metrics(
            command, config.instrument, observed, exit_code=outcome.returncode,
            log_tail=outcome.log_tail[-20:], log=outcome.log, processes_stopped=outcome.stopped,
            processes_escaped=outcome.escaped, stdin=said,
        )  # fmt: skip
        sampled = None if outcome.sampler is None else add_sampled(
            outcome.sampler, observed, metrics, started_at, ended_at,
            threads=config.threads, busy_threshold=self.busy_threshold,
        )  # fmt: skip
        result = script_document(
            config.to_dict(), config.name, observed, run_id=run_id, verdict=judge(outcome, config),
            started_at=started_at, ended_at=ended_at, interpreter=str(interpreter),
            process_env=settings["variables"], keras_json=keras_json, metrics=metrics,
            sampled=sampled,
            framework=dict(name=config.backend, memory_options=settings["memory_options"],
                           cpu_affinity=settings["cpu_affinity"],
                           keras_datasets=settings["keras_datasets"],
                           warnings=backend_warnings(config, observed)),
        )  # fmt: skip
        return ending.keep(result, ResultStore(self.output_dir), config.label())


def shared_stdin(directory: Path) -> Tuple[Any, str]:
    """What every run reads on stdin, and that in words (the result's ``metrics.stdin``):
    kbench's own stdin read once to its end, into a file in ``directory`` that each run
    reads from its start (past :data:`STDIN_LIMIT_BYTES`, the command is refused before
    any run); a terminal, left to each run; no stdin at all, ``/dev/null``."""
    chunks: List[bytes] = []
    try:
        if sys.stdin is None:  # fd 0 was closed when kbench started (now maybe a file of its own)
            raise OSError("no stdin")
        if os.isatty(0):
            return None, "the terminal: each run read what was typed"
        while sum(map(len, chunks)) <= STDIN_LIMIT_BYTES and (chunk := os.read(0, 2**20)):
            chunks.append(chunk)
    except OSError:  # no stdin (closed)
        return subprocess.DEVNULL, "/dev/null: kbench had no stdin"
    data = b"".join(chunks)
    if len(data) > STDIN_LIMIT_BYTES:
        raise ConfigError(
            "command",
            f"expected at most {STDIN_LIMIT_BYTES:,} bytes on stdin (kbench reads them once "
            "and gives every run the same); received more. Let the script read a file instead.",
        )
    (directory / "stdin").write_bytes(data)
    return directory / "stdin", f"{len(data):,} bytes, kbench's stdin read once: every run's"


def backend_warnings(config: ExecConfig, observed: Dict[str, Any]) -> List[str]:
    """What the run's figures must be read with: a script that chose another backend
    (its result is filed under that backend: :func:`script_document`), a measurement
    too short to mean much."""
    warnings = []
    reported = observed.get("keras_backend")
    if reported and reported != config.backend:
        moved = (
            f"its figures are filed under {reported}"
            if reported in EXEC_BACKENDS
            else "its figures are that backend's"
        )
        warnings.append(
            f"Keras in the script reported backend {reported!r}, not {config.backend!r}: "
            "the script chooses its backend itself (KERAS_BACKEND or keras.json set "
            f"inside it); {moved}"
        )
    if observed.get("measurement_note"):
        warnings.append(observed["measurement_note"])
    return warnings


def script_document(
    config: Dict[str, Any], name: str, observed: Dict[str, Any], *, run_id: str,
    verdict: ending.Verdict = ending.OK, started_at: float, ended_at: float, interpreter: str,
    process_env: Dict[str, str], keras_json: Dict[str, Any], framework: Dict[str, Any],
    metrics: Dict[str, Any], sampled: Any,
) -> RunResult:  # fmt: skip
    """The result document of a script's run, ``kbench exec``'s or ``kbench.record``'s.
    ``framework`` names the backend (``name``) and what was set for it; what Keras
    reported in the script (``observed``) is added."""
    framework = dict(
        framework, keras_backend_reported=observed.get("keras_backend"),
        keras_version=observed.get("keras_version"),
    )  # fmt: skip
    reported = observed.get("keras_backend")
    if reported in EXEC_BACKENDS and reported != config["backend"]:
        # the script chose its backend: file its figures under the one that ran them
        config = dict(config, backend=reported, backend_requested=config["backend"])
    return ending.run_result(
        run_id=run_id, kind="exec", config=config, verdict=verdict, started_at=started_at,
        ended_at=ended_at,
        environment=ending.environment(interpreter, process_env, keras_json, framework),
        data={"name": SCRIPT_DATA, "source": "the user's script"},
        model={
            "name": name,
            "params": observed.get("params"),
            "keras_name": observed.get("model_name"),
        },
        metrics=metrics, sampler=sampled.to_dict() if sampled else None,
    )  # fmt: skip


def add_sampled(
    sampler: Any, observed: Dict[str, Any], metrics: Dict[str, Any], started_at: float,
    ended_at: float, threads: Optional[int] = None, busy_threshold: Optional[float] = None,
) -> sampler_mod.SamplerResult:  # fmt: skip
    """The sampler's series over the script's windows, and what it adds to ``metrics``:
    the tree's memory (its peak RSS read from outside, as a worker reads its own
    getrusage peak), and with ``busy_threshold``, where a stage was measured, what else
    the machine did meanwhile."""
    windows = sampler_mod.windows_from_markers(observed.get("markers") or {}, started_at, ended_at)
    sampled = sampler.result(windows)
    peak = (sampled.summary.get("run") or {}).get("process_rss_bytes", {}).get("max")
    rss = [] if peak is None else [
        {"kind": "process_peak_rss", "bytes": int(peak), "device": "host",
         "source": "the largest sampled RSS of the script's process tree (psutil)"}
    ]  # fmt: skip
    metrics["memory"] = rss + sampled_memory(sampled.summary)
    if busy_threshold is not None and observed.get("measured_stage"):
        assessed = quality_mod.assess(sampled.series, windows["measured"], threads, busy_threshold)
        if assessed is not None:
            metrics["quality"] = assessed.to_dict()
    return sampled


def judge(outcome: ScriptOutcome, config: ExecConfig) -> ending.Verdict:
    """How the command ended, from its exit alone (a script writes no reply): code 0 is
    ``ok``, any other (or a signal) ``failed``, with the exception line of the last
    traceback it printed as the reason (else its last line: JAX and Keras print notes
    after the error)."""
    if outcome.timed_out:
        return ending.timed_out(
            f"the command ran past the {config.timeout_s:g} s timeout; its process tree was killed",
            outcome.log_tail,
        )
    code = outcome.returncode
    if code == 0:
        return ending.OK
    how = processes.describe_exit(code)
    last = outcome.exception or next(
        (line for line in reversed(outcome.log_tail) if line.strip()), ""
    )
    reason = f"the command {how}" + (f": {last.strip()[:300]}" if last else "")
    return ending.no_result("ScriptFailed", how, reason, outcome.log_tail)


def exec_metrics(
    command: List[str], instrumented: bool, observed: Dict[str, Any], **process: Any
) -> Dict[str, Any]:
    """The command and how its process ended (``process``: its exit code, log tail, how
    much it printed and where its log was cut, what it left running), then the
    instrumentation's figures, in the units and names of ``kbench run``'s training
    metrics where they mean the same."""
    metrics: Dict[str, Any] = {
        "command": command, **process, "instrumented": instrumented,
        "images_per_sec": None, "test_accuracy": None, "memory": [],
    }  # fmt: skip
    if not instrumented:
        return dict(metrics, note="--no-instrument: process figures only")
    return {**metrics, **training_metrics(observed)}


def training_metrics(observed: Dict[str, Any]) -> Dict[str, Any]:
    """The instrumentation's figures (:func:`observe`) as result
    metrics; a note where the script neither trained nor predicted."""
    if not observed.get("measured_stage"):
        return {
            "note": NO_TRAINING,
            "evaluate_calls": observed.get("evaluate_calls"),
            "predict_calls": observed.get("predict_calls"),
            "instrumentation_errors": observed.get("instrumentation_errors", []),
        }
    metrics = {k: v for k, v in observed.items() if k not in ("params", "model_name")}
    name, value = _evaluated_accuracy(observed.get("evaluate_results") or [])
    metrics["test_accuracy"], metrics["test_accuracy_metric"] = value, name
    return metrics


def _evaluated_accuracy(results: List[Any]) -> Tuple[Optional[str], Optional[float]]:
    """(the name the script gave it, the value) of the accuracy of its last
    ``evaluate``, where it reported one by name; tables show the name beside it."""
    for result in reversed(results):
        if isinstance(result, dict):
            for name in ("accuracy", "acc"):
                if isinstance(result.get(name), (int, float)):
                    return name, float(result[name])
    return None, None


def check_command(command: Sequence[str], cwd: str) -> None:
    """Refuse, before any run, a command that names no program that exists: not
    ``python``, not on PATH, not a file (relative to ``cwd``) that may be run."""
    program = command[0]
    if program in PYTHON_NAMES:
        return
    if os.sep not in program and not (os.altsep and os.altsep in program):
        if shutil.which(program) is None:
            raise ConfigError(
                "command",
                f"expected a program on PATH or the path to one as the command's first "
                f"word; received {program!r}, which is neither. Start a script with python "
                "(kbench exec -b jax -- python train.py) or give the program's path.",
            )
        return
    path = Path(cwd, program)
    if not path.is_file():
        raise ConfigError(
            "command",
            f"expected the path of a program to run; received {program!r}, and there is "
            f"no such file (looked from {cwd}). Check the path, or start a script with "
            "python: kbench exec -b jax -- python train.py",
        )
    if not os.access(path, os.X_OK):
        raise ConfigError("command", cannot_start(command, PermissionError("not executable")))


def cannot_start(command: Sequence[str], err: OSError) -> str:
    return (
        f"expected a command the system can start; {command[0]!r} could not be started "
        f"({err.strerror or err}). Make it executable with a #! line (chmod +x), or run "
        "it through its interpreter: kbench exec -b jax -- python train.py, or -- bash run.sh"
    )


def record(
    store: Any = "results", name: Optional[str] = None, *, throughput: Any = None,
    events: Optional[List[Dict[str, Any]]] = None, sampling: Any = None,
    backend: Optional[str] = None, warmup_steps: Optional[int] = None, repeat: int = 0,
) -> Path:  # fmt: skip
    """``kbench.record(...)``: write into ``store`` the result document ``kbench exec``
    would have written for this process (as :mod:`kbench.callbacks` shows), and return
    its path.

    Args:
        store: the results store (a directory; created if needed).
        name: what tables call the run (default: the script's file name).
        throughput: a :class:`kbench.callbacks.Throughput` that watched the fits; or
        events: the events such a callback wrote (from ``KBENCH_EVENTS`` files).
        sampling: a finished ``kbench.measure.sample()`` block, for CPU, memory and
            GPU series; without it the document has no sampler section.
        backend: default the backend Keras reported, else ``KERAS_BACKEND``.
        warmup_steps: default the callback's own, else 5.
        repeat: which round this is, when you record several runs of one setting.

    Raises :class:`ConfigError` without events or a backend.
    """
    if throughput is not None:
        events = throughput.events
        warmup_steps = throughput.warmup_steps if warmup_steps is None else warmup_steps
    if events is None:
        raise ConfigError(
            "throughput",
            "expected the Throughput callback that watched your fit (throughput=...) or "
            "its events (events=...); received neither.",
        )
    warmup = 5 if warmup_steps is None else warmup_steps
    observed = observe(list(events), warmup)
    backend = backend or observed.get("keras_backend") or os.environ.get("KERAS_BACKEND")
    if backend is None:
        raise ConfigError(
            "backend", "expected backend=...: no fit reported one and KERAS_BACKEND is unset."
        )
    config = ExecConfig(
        backend=backend, command=tuple([sys.executable, *sys.argv]), name=name, repeat=repeat,
        warmup_steps=warmup, sample_interval_s=getattr(sampling, "interval_s", 0.0),
    )  # fmt: skip
    times = [e["t"] for e in events if isinstance(e.get("t"), (int, float))]
    started = getattr(sampling, "started_at", None) or (min(times) if times else time.time())
    ended = getattr(sampling, "ended_at", None) or (max(times) if times else time.time())
    metrics = exec_metrics(list(config.command), True, observed, exit_code=None)
    sampled = None if sampling is None else add_sampled(sampling, observed, metrics, started, ended)
    keras = sys.modules.get("keras")  # the backend and image data format it imported, if any
    keras_json = {} if keras is None or not hasattr(keras, "backend") else {
        "backend": keras.backend.backend(), "image_data_format": keras.backend.image_data_format()
    }  # fmt: skip
    result = script_document(
        dict(config.to_dict(), recorded_by="kbench.record"), config.name, observed,
        run_id=new_run_id(config), started_at=started, ended_at=ended,
        interpreter=sys.executable,
        process_env={k: os.environ[k] for k in ("KERAS_BACKEND",) if k in os.environ},
        keras_json=keras_json, framework={"name": backend, "warnings": []},
        metrics=metrics, sampled=sampled,
    )  # fmt: skip
    directory = check_output_dir(Path(store))
    with writer_lock(directory):
        return ResultStore(directory).add(result)


def observe(events: List[Dict[str, Any]], warmup_steps: int) -> Dict[str, Any]:
    """The figures of a script's events: training, else inference, else none (the
    note says which); ``measured_stage`` names what was measured."""
    observed = summarize(events, warmup_steps)
    if observed.get("training_observed"):
        observed["measured_stage"] = "fit"
    else:
        inference = inference_figures(events, warmup_steps)
        if inference is None:
            return observed
        observed = inference
    observed["warmup_steps_requested"] = warmup_steps
    note = short_note(observed, warmup_steps)
    if note:
        observed["measurement_note"] = note
    return observed


def inference_figures(events: List[Dict[str, Any]], warmup_steps: int) -> Optional[Dict[str, Any]]:
    """:func:`summarize`'s figures over the batches of ``predict`` (else ``evaluate``)
    calls made outside a fit; None where the script made none."""
    for stage in INFERENCE_STAGES:
        batches = [
            dict(e, stage="train", epoch=e.get("call", 0), call=0)
            for e in events
            if e["event"] == "batch" and e.get("stage") == stage and e.get("within") != "fit"
        ]
        if not batches:
            batches = _whole_calls(events, stage)
        if not batches:
            continue
        facts = [e for e in events if e["event"] in ("model", "error")]
        ends = [e for e in events if e["event"] in ("evaluate_end", "predict_end")]
        figures = summarize([*facts, *batches, *ends], warmup_steps)
        figures.update(
            training_observed=False, inference_observed=True, measured_stage=stage, fit_calls=0,
            epochs=0, epoch_time_s=[], epoch_train_loss=[], final_train_loss=None,
            final_train_accuracy=None,
            note=f"inference only: img/s over the {stage} batches (no fit ran)",
        )  # fmt: skip
        figures["markers"]["fit_start"] = batches[0]["t0"]
        return figures
    return None


def _whole_calls(events: List[Dict[str, Any]], stage: str) -> List[Dict[str, Any]]:
    """Each ``<stage>_begin``/``_end`` pair as one step of its samples (keras-mxnet's
    predict and evaluate take no callbacks, so kbench sees only the calls)."""
    calls, begin = [], None
    for event in events:
        if event["event"] == f"{stage}_begin":
            begin = event
        elif event["event"] == f"{stage}_end" and begin is not None:
            samples = begin.get("samples")
            calls.append(
                {"event": "batch", "stage": "train", "call": 0, "epoch": len(calls),
                 "batch": 0, "t0": begin["t"], "t1": event["t"],
                 "size": samples if isinstance(samples, int) else None}
            )  # fmt: skip
            begin = None
    return calls


def short_note(observed: Dict[str, Any], warmup_steps: int) -> Optional[str]:
    """What to read a measurement of too few steps with (None: enough steps)."""
    steps = observed.get("measured_steps") or 0
    if steps >= MIN_MEASURED_STEPS:
        return None
    warmup = observed.get("warmup_steps") or 0
    cut = f"; the warmup was cut from {warmup_steps} to {warmup} step(s) to leave any"
    cut = cut if warmup < warmup_steps else ""
    return (
        f"too short to mean much: img/s from {steps} measured step(s) (at least "
        f"{MIN_MEASURED_STEPS} give a figure with a spread){cut}. Give the script more "
        "batches (more samples, epochs or calls) or lower --warmup-steps"
    )
