"""Each backend at its best (``kbench tune``): the fastest settings that compute the same
thing, found in warm interleaved windows, then the backends compared at their best.

For each backend, one after another:

1. **Candidates** (:func:`search_space`): the default settings and each single change
   that applies to this backend on this machine: XLA/``jit_compile``, eager, oneDNN,
   the other data format, bfloat16 where the CPU computes it, Gluon's hybridize,
   ``torch.compile``, half the threads, one inter-op thread (TensorFlow, torch: the
   intra-op threads stay), and (only with ``allow_batch_size``, since it
   changes the training) half and twice the batch. A change that cannot run here is
   skipped with its reason, not run.
2. **Same computation** (:func:`differs`): every candidate starts from the default's
   initial weights (a Keras backend exports them; a native port starts from its own
   seeded ones) and its outputs on the first test batch and its warmup losses must lie
   within the parity tolerance of the default's (bfloat16: its own, wider one, and
   said). One that does not is out, with the figures.
3. **Successive halving in windows**: each candidate is a warm worker; round after
   round each measures one window, so that every per-round ratio to the default is
   taken side by side. From :data:`MIN_ROUNDS` rounds on, a candidate whose ratio
   interval lies wholly below the best one's is dropped (its worker closed), so the
   budget goes to the close contenders; the phase ends when every remaining interval is
   within ``target``, or its share of the budget is spent. The changes that were
   clearly faster (interval above x1) are then tried together, once, the same way.
4. **The best**: the candidate with the highest median ratio whose interval lies above
   x1; else the default ("no setting clearly faster").

Then the backends' best workers, still warm, measure windows in turn until every ratio
to the first backend is within ``target`` or the budget is spent.

**Resuming** (:func:`resumed_reports`): each backend's finished search is written to
``STORE/tune-progress.json``; the same ``kbench tune`` again, in the same store, does
not search those backends again but starts their default and best for the comparison
of the backends. A backend cut short is searched again; other settings, or ``fresh``,
start over. Every tune numbers its rounds on from those in the store (:func:`first_round`):
the earlier windows still count, and rounds are paired by number.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from kbench.backends import BACKENDS
from kbench.measure import processes, sysinfo
from kbench.measure.stats import LEVEL, MedianInterval, median_interval, rounds_needed
from kbench.results.analysis import (
    BFLOAT16,
    FLOAT32,
    Tolerance,
    differences,
    half_width,
    round_ratios,
    throughputs,
    what_differs,
)
from kbench.results.comparison import is_comparison
from kbench.results.config import ConfigError, RunConfig
from kbench.results.jsonfile import write_json_atomic, write_text_atomic
from kbench.results.result import RunResult
from kbench.results.store import ResultStore
from kbench.run import environments
from kbench.run.agreement import step_losses
from kbench.run.runner import Runner, Session
from kbench.run.windows import WindowWorker, keep, measure_round
from kbench_models import spec_for

log = logging.getLogger(__name__)

MIN_ROUNDS = 6  # the fewest per-round ratios whose interval reaches 95%
# Shorter windows than kbench run's: a round is one window of every setting still in (up
# to 8 per backend, each window paying ~0.5 s of per-call set-up and settling besides), and
# a best needs 8+ rounds (its interval at 1 - 0.05/k); measured on 2 cores, 1 s windows
# gave TensorFlow's 7 settings 4 rounds in a 5-minute, 3-backend budget.
WINDOW_S = 0.5
# the settings a search may change (kbench tune --try)
TUNABLE = ("jit_compile", "run_eagerly", "onednn", "data_format", "mixed_precision",
           "hybridize", "torch_compile", "tf32", "threads", "inter_op_threads",
           "batch_size")  # fmt: skip
FINAL_SHARE = 0.25  # of the budget, for the backends compared at their best
MAX_ROUNDS = 200  # of one phase (a search, its changes together, the final comparison)
PROGRESS_NAME = "tune-progress.json"  # each backend's finished search, for resuming
COMBINED_SHARE = 0.35  # of a backend's share, for its clearly faster changes together
BF16_FEATURES = ("avx512_bf16", "amx_tile")
ONEDNN_BY_DEFAULT = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")


@dataclass(frozen=True)
class Candidate:
    backend: str
    changes: Tuple[Tuple[str, Any], ...] = ()  # (setting, value) away from the base

    @property
    def name(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.changes) or "default"

    def config(self, base: RunConfig) -> RunConfig:
        return dataclasses.replace(base, backend=self.backend, **dict(self.changes))

    @property
    def tolerance(self) -> Tolerance:
        return BFLOAT16 if ("mixed_precision", "bfloat16") in self.changes else FLOAT32


@dataclass
class Trial:
    """A candidate under measurement: its worker, its windows, what became of it."""

    candidate: Candidate
    worker: Optional[WindowWorker] = None
    # measuring; at the end: best, measured (not clearly faster), dropped (clearly slower),
    # differs (does not compute the same), skipped, or the status its worker ended with
    state: str = "measuring"
    reason: Optional[str] = None
    check: Dict[str, Any] = field(default_factory=dict)
    # its worker's document as of its last round (kbench.results.comparison: its windows)
    document: Optional[RunResult] = None

    @property
    def results(self) -> List[RunResult]:
        return [] if self.document is None else [self.document]

    def windows(self) -> List[Dict[str, Any]]:
        return [w for r in self.results for w in (r.metrics.get("windows") or {}).get("list") or []]

    def speeds(self) -> Dict[int, float]:
        """{round: img/s} of its counted windows: never the busy-flagged figures of a
        comparison whose every round was dropped (a setting is chosen on quiet rounds)."""
        return dict(throughputs(self.results, strict=True))

    def to_dict(self, ratio: Optional[MedianInterval]) -> Dict[str, Any]:
        return {
            "setting": self.candidate.name,
            "changes": dict(self.candidate.changes),
            "state": self.state,
            "reason": self.reason,
            "windows": len(self.speeds()),
            "dropped_windows": sum(1 for w in self.windows() if w.get("dropped")),
            "images_per_sec_median": _median(list(self.speeds().values())),
            "ratio_to_default": None if ratio is None else ratio.to_dict(),
            "check": self.check,
        }


def search_space(
    backend: str,
    base: RunConfig,
    *,
    cores: int,
    cpu_features: Sequence[str],
    gpu: bool,
    allow_batch_size: bool,
    only: Optional[Sequence[str]] = None,
) -> Tuple[List[Candidate], List[Tuple[str, str]]]:
    """The default and each single change that applies to ``backend`` here (``only``:
    of those settings); and the changes left out, each with its reason."""
    options, skipped = _changes(backend, base, cores, cpu_features, gpu, allow_batch_size)
    candidates = [Candidate(backend)]
    for change in options:
        candidate = Candidate(backend, (change,))
        if only is not None and change[0] not in only:
            skipped.append((candidate.name, f"not asked for (--try {','.join(only)})"))
            continue
        try:
            candidate.config(base)
        except ConfigError as err:
            skipped.append((candidate.name, str(err)))
            continue
        candidates.append(candidate)
    return candidates, skipped


def _changes(
    backend: str, base: RunConfig, cores: int, cpu_features: Sequence[str], gpu: bool,
    allow_batch_size: bool,
) -> Tuple[List[Tuple[str, Any]], List[Tuple[str, str]]]:  # fmt: skip
    """The (setting, value) changes that apply to ``backend`` on this machine, and the
    ones that do not, each (as the report names it) with its reason."""
    spec = BACKENDS[backend]
    keras3 = spec.runs_keras and spec.environment == "keras3"
    options: List[Tuple[str, Any]] = []
    skipped: List[Tuple[str, str]] = []
    if keras3:
        options += [("jit_compile", "on"), ("jit_compile", "off"), ("run_eagerly", True)]
    if backend == "tensorflow" and not gpu:
        by_default = any(f in cpu_features for f in ONEDNN_BY_DEFAULT)
        options.append(("onednn", "off" if by_default else "on"))
    if backend == "torch-native":
        options.append(("torch_compile", True))
    if backend == "mxnet-gluon":
        options.append(("hybridize", True))
    options += [("data_format", f) for f in _other_formats(backend, base)]
    if keras3 or backend == "torch-native":
        if gpu or any(f in cpu_features for f in BF16_FEATURES):
            options.append(("mixed_precision", "bfloat16"))
        else:
            skipped.append(("mixed_precision=bfloat16", "this CPU has no bfloat16 arithmetic "
                            "(no AVX512-BF16 or AMX): emulated, slower by design"))  # fmt: skip
    if gpu:
        options.append(("tf32", "on"))
    else:
        skipped.append(("tf32", "no GPU: TensorFloat-32 is a GPU matmul mode"))
    threads = base.threads or cores
    if threads > 1:
        options.append(("threads", threads // 2))
    if spec.no_inter_op_pool is not None:
        skipped.append(("inter_op_threads", f"no inter-op pool to set: {spec.no_inter_op_pool}"))
    elif (base.inter_op_threads or threads) > 1:  # one pool thread: operations one by one
        options.append(("inter_op_threads", 1))
    else:
        skipped.append(("inter_op_threads=1", "the inter-op pool has 1 thread already"))
    if allow_batch_size:
        options += [("batch_size", base.batch_size * 2), ("batch_size", base.batch_size // 2)]
    else:
        skipped.append(("batch size", "changes the training: only with --allow-batch-size"))
    return options, skipped


def _other_formats(backend: str, base: RunConfig) -> Tuple[str, ...]:
    """The data formats of an image model other than the one ``base`` trains in."""
    spec = BACKENDS[backend]
    if spec_for(base.model, base.model_args).input_kind != "image" or len(spec.data_formats) < 2:
        return ()
    default_format = environments.keras_config(backend, None)["image_data_format"]
    return tuple(f for f in spec.data_formats if f != (base.data_format or default_format))


def differs(
    default: Dict[str, Any], check: Dict[str, Any], tolerance: Tolerance,
    compare_losses: bool = True, running_mean: bool = False,
) -> Optional[str]:  # fmt: skip
    """Why ``check`` (outputs, warmup losses) does not compute what ``default`` does (the
    :func:`~kbench.results.analysis.differences` of the parity check, within
    ``tolerance``; each step's own loss, :func:`~kbench.run.agreement.step_losses`,
    where the backend logs their ``running_mean``); None where it lies within."""
    losses = [
        step_losses(d["losses"], running_mean) if compare_losses else [] for d in (default, check)
    ]
    try:
        figures = differences(default["outputs"], check["outputs"], *losses, tolerance)
    except ValueError as err:
        return f"does not match the default's: {err}"
    return what_differs(figures, tolerance, "the default's")


def round_ratios_of(trial: Trial, reference: Trial) -> List[float]:
    """``trial``'s img/s over ``reference``'s, round by round where both counted."""
    return round_ratios(sorted(trial.speeds().items()), reference.speeds())


def trial_interval(trial: Trial, reference: Trial) -> Optional[MedianInterval]:
    """The interval on ``trial``'s per-round ratios to ``reference``."""
    return median_interval(round_ratios_of(trial, reference))


@dataclass
class Tuner:
    """One ``kbench tune``: its runner, session and settings, the rounds so far."""

    runner: Runner
    session: Session
    base: RunConfig
    target: float
    round_index: int = 0  # the next round's number (on from the store's: first_round)
    weights_dir: Path = Path(".")
    launched: List[Trial] = field(default_factory=list)  # every trial, closed at the end

    def warm(self, default: Trial, others: Sequence[Trial]) -> None:
        """Launch the workers of ``default`` and ``others`` not launched yet (all at once:
        their frameworks import side by side), start and warm up ``default`` (exporting
        its initial weights) and ``others`` (from them), and drop each other that fails or
        does not compute the same."""
        for trial in [t for t in [default, *others] if t.worker is None]:
            self.launched.append(trial)
            config = trial.candidate.config(self.base)
            trial.worker = WindowWorker.launch(self.runner, self.session, config)
            trial.worker.name = f"{trial.candidate.backend} {trial.candidate.name}"
            trial.worker.tags = {
                "tune": {"setting": trial.candidate.name, "changes": dict(trial.candidate.changes)}
            }
        exports = BACKENDS[default.candidate.backend].exports_weights
        weights = self.weights_dir / f"{default.candidate.backend}-initial.npz"
        for trial in [default, *others]:
            if not trial.worker.alive or trial.worker.ready:
                continue  # gone, or warm already (the default, when changes are combined)
            trial.worker.check_rows = self.base.batch_size  # outputs on the same rows
            if default.state != "measuring":
                self._out(trial, "skipped", "the default setting could not run")
                continue
            trial.worker.start()
            if trial.worker.alive:
                if not exports:  # a native port starts from its own seeded weights
                    trial.worker.weights = {"check": True}
                else:
                    key = "weights_out" if trial is default else "weights_in"
                    trial.worker.weights = {key: str(weights)}
                trial.worker.warm_up()
            if not trial.worker.alive:
                keep(self.runner, [trial.worker])
                trial.document = trial.worker.document()
                self._out(trial, trial.document.status, trial.document.reason)
                continue
            trial.check = trial.worker.ready.get("check") or {}
        for trial in others:
            if trial.state != "measuring" or not default.check:
                continue
            batch_changed = any(k == "batch_size" for k, _ in trial.candidate.changes)
            running_mean = BACKENDS[trial.candidate.backend].logs_mean_loss
            why = differs(default.check, trial.check, trial.candidate.tolerance,
                          compare_losses=not batch_changed, running_mean=running_mean)  # fmt: skip
            trial.check = dict(trial.check, tolerance=trial.candidate.tolerance.note,
                               same_computation=why is None, differs=why)  # fmt: skip
            if why is not None:
                self._out(trial, "differs", why)

    def _out(self, trial: Trial, state: str, reason: Optional[str]) -> None:
        trial.state, trial.reason = state, reason
        log.info("  %s: out (%s): %s", trial.worker.name if trial.worker else trial.candidate.name,
                 state, reason)  # fmt: skip
        if trial.worker is not None:
            trial.worker.close()

    def rounds(
        self, trials: List[Trial], reference: Trial, deadline: float, started: float,
        budget_s: float,
    ) -> str:  # fmt: skip
        """Rounds of the measuring ``trials`` until settled, ``deadline`` or
        :data:`MAX_ROUNDS`; why they ended. From :data:`MIN_ROUNDS` on, a trial clearly
        slower than the best is dropped."""
        for _ in range(MAX_ROUNDS):
            measuring = [t for t in trials if t.state == "measuring" and t.worker.alive]
            if reference not in measuring:
                return "the reference's worker ended"
            if len(measuring) < 2:
                return "one setting left"
            self.measure(measuring)
            for trial in measuring:
                if not trial.document.ok:
                    self._out(trial, trial.document.status, trial.document.reason)
            settled = self._halve(trials, reference)
            best, why = best_of(trials, reference)
            log.info(
                "  %s: %.0f of %.0f s of measuring spent; best so far: %s (%s)",
                reference.candidate.backend, time.monotonic() - started, budget_s,
                best.candidate.name, why,
            )  # fmt: skip
            if settled:
                return settled
            if time.monotonic() >= deadline:
                return "its share of the budget spent"
        return f"{MAX_ROUNDS} rounds, the most a phase takes"

    def close(self, now: bool = False) -> None:
        """Close every trial's worker (``now``: stop them at once)."""
        for trial in self.launched:
            if trial.worker is not None:
                trial.worker.close(now=now)

    def measure(self, trials: Sequence[Trial]) -> None:
        """A window of each of ``trials`` (one round), kept; their documents updated."""
        measure_round([t.worker for t in trials], self.round_index)
        keep(self.runner, [t.worker for t in trials])
        self.round_index += 1
        for trial in trials:
            trial.document = trial.worker.document()

    def _halve(self, trials: List[Trial], reference: Trial) -> Optional[str]:
        measuring = [t for t in trials if t.state == "measuring" and t is not reference]
        intervals = {id(t): trial_interval(t, reference) for t in measuring}
        if any(i is None or i.n < MIN_ROUNDS for i in intervals.values()):
            return None
        best_low = max([1.0] + [intervals[id(t)].low for t in measuring])
        for trial in measuring:
            interval = intervals[id(trial)]
            if interval.high < best_low:
                self._out(trial, "dropped", f"clearly slower: x{interval.median:.3f} "
                          f"({interval.low:.3f}-{interval.high:.3f}) of the default")  # fmt: skip
        left = [t for t in measuring if t.state == "measuring"]
        if not left:
            return "every other setting dropped"
        if all(half_width(intervals[id(t)]) <= self.target for t in left):
            return f"every ratio within +-{self.target:.0%}"
        return None


def best_of(trials: Sequence[Trial], reference: Trial) -> Tuple[Trial, str]:
    """The fastest trial whose ratio interval lies above x1, and why it was chosen. With
    k settings compared, each interval is taken at 1 - 0.05/k (Bonferroni), so that the
    chance of calling some setting faster when none is stays at most 5%."""
    contenders = [t for t in trials if t is not reference and t.state == "measuring"]
    # every setting measured counts, dropped ones too: the best was chosen among them all
    compared = [t for t in trials if t is not reference and t.state in ("measuring", "dropped")]
    level = 1 - (1 - LEVEL) / max(1, len(compared))
    faster = []
    for trial in contenders:
        interval = median_interval(round_ratios_of(trial, reference), level)
        if interval is not None and interval.coverage >= level and interval.low > 1.0:
            faster.append((interval.median, trial, interval))
    if contenders and not any(round_ratios_of(t, reference) for t in contenders):
        dropped = [w["dropped"] for w in reference.windows() if w.get("dropped")]
        why = f"every round dropped, the first as {dropped[0]}" if dropped else "no round counted"
        return reference, f"undecided, the default kept: no ratio measured ({why})"
    if not faster:
        return reference, _none_faster(contenders, reference, level, len(compared))
    median, trial, interval = max(faster, key=lambda item: item[0])
    return trial, (
        f"x{median:.3f} ({interval.low:.3f}-{interval.high:.3f}, {interval.coverage:.1%}, "
        f"n={interval.n}) of the default, {len(compared)} settings compared"
    )


def _none_faster(contenders: Sequence[Trial], reference: Trial, level: float, compared: int) -> str:
    """Why the default stays: no setting clearly faster, or too few rounds to tell (then
    the fastest so far, in figures)."""
    needed = rounds_needed(level)
    ratios = {id(t): round_ratios_of(t, reference) for t in contenders}
    short = [t for t in contenders if 0 < len(ratios[id(t)]) < needed]
    if not short:
        return (
            f"no setting clearly faster than the default ({compared} compared, each at {level:.1%})"
        )
    lead = max(short, key=lambda t: float(np.median(ratios[id(t)])))
    mine = ratios[id(lead)]
    return (
        f"undecided, the default kept: {min(len(ratios[id(t)]) for t in short)} rounds, and "
        f"{compared} settings compared at {level:.1%} need {needed}; the fastest so far, "
        f"{lead.candidate.name}: x{float(np.median(mine)):.2f} (x{min(mine):.2f}-x{max(mine):.2f} "
        f"over {len(mine)} rounds)"
    )


def tune_backend(tuner: Tuner, backend: str, budget_s: float, **space: Any) -> Dict[str, Any]:
    """One backend's search (the module docstring's steps 1-4): its report, with its
    default and best trials (``_finalists``), whose workers are left running for the
    comparison of the backends. ``budget_s`` is measuring time, after the workers are warm."""
    candidates, skipped = search_space(backend, tuner.base, **space)
    trials = [Trial(c) for c in candidates]
    reference = trials[0]
    log.info("%s: %d settings to try: %s", backend, len(trials),
             ", ".join(t.candidate.name for t in trials))  # fmt: skip
    tuner.warm(reference, trials[1:])
    started = time.monotonic()  # the budget is for measuring: starting the workers is not in it
    if reference.state == "measuring":
        deadline = started + budget_s * (1 - COMBINED_SHARE)
        ended = tuner.rounds(trials, reference, deadline, started, budget_s)
        # the clearly faster changes, each of its own setting, are tried together once
        faster = [
            t for t in trials[1:] if t.state == "measuring" and best_of([t], reference)[0] is t
        ]
        changes = tuple(c for t in faster for c in t.candidate.changes)
        if reference.state == "measuring" and len(faster) > 1 and len(dict(changes)) == len(faster):
            trials.append(Trial(Candidate(backend, changes)))
            tuner.warm(reference, trials[-1:])
            ended = tuner.rounds(trials, reference, started + budget_s, started, budget_s)
    if reference.state != "measuring":
        return _report(backend, trials, skipped, None, f"the default failed: {reference.reason}")
    best, why = best_of(trials, reference)
    for trial in trials:
        if trial.state == "measuring":
            trial.state = "best" if trial is best else "measured"
            if trial not in (best, reference):
                trial.worker.close()
    best.state, best.reason = "best", why
    return _report(backend, trials, skipped, best, ended)


def in_words(trials: Sequence[Trial], reference: Trial) -> str:
    """What made the difference: each setting tried, its ratio to the default and what
    became of it ("onednn=on: x1.62, best; data_format=channels_first: x0.91, dropped")."""
    parts = []
    for trial in trials[1:]:
        interval = trial_interval(trial, reference)
        ratio = "no ratio" if interval is None else f"x{interval.median:.2f}"
        parts.append(f"{trial.candidate.name}: {ratio}, {trial.state}")
    return "; ".join(parts) or "nothing else to try here"


def _report(backend: str, trials: List[Trial], skipped, best: Optional[Trial],
            ended: str) -> Dict[str, Any]:  # fmt: skip
    reference = trials[0]
    finalists = [reference] if best is None or best is reference else [reference, best]
    return {
        "backend": backend,
        "best": None if best is None else best.candidate.name,
        "best_changes": {} if best is None else dict(best.candidate.changes),
        "in_words": in_words(trials, reference),
        "ended": ended,
        "trials": [
            t.to_dict(trial_interval(t, reference) if t is not reference else None) for t in trials
        ],  # fmt: skip
        "skipped": [{"setting": name, "reason": reason} for name, reason in skipped],
        "_finalists": [] if best is None else finalists,
    }


def compare_finalists(tuner: Tuner, finalists: List[Trial], deadline: float) -> Dict[str, Any]:
    """Every backend's default and best, still warm, in windows until every ratio to the
    first backend's default is within the target, ``deadline`` or :data:`MAX_ROUNDS`;
    each with its ratio."""
    reference = finalists[0]
    ended = "one setting: nothing to compare"
    for _ in range(MAX_ROUNDS if len(finalists) > 1 else 0):
        ended = f"{MAX_ROUNDS} rounds, the most a phase takes"  # unless a reason below
        alive = [t for t in finalists if t.worker.alive]
        if reference not in alive or len(alive) < 2:
            ended = "a worker ended"
            break
        tuner.measure(alive)
        widths = [half_width(trial_interval(t, reference)) for t in alive if t is not reference]
        if max(widths) <= tuner.target:
            ended = f"every ratio within +-{tuner.target:.0%}"
            break
        if time.monotonic() >= deadline:
            ended = "the budget spent"
            break
    rows = []
    for trial in finalists:
        interval = None if trial is reference else trial_interval(trial, reference)
        rows.append({
            "backend": trial.candidate.backend,
            "setting": trial.candidate.name,
            "role": "best" if trial.state == "best" and trial.candidate.changes else "default",
            "images_per_sec_median": _median(list(trial.speeds().values())),
            "ratio_to_first": None if interval is None else interval.to_dict(),
        })  # fmt: skip
    return {"reference": f"{reference.candidate.backend} default", "ended": ended, "rows": rows}


def best_sweep(base: RunConfig, reports: Sequence[Dict[str, Any]], repeats: int = 3) -> Dict:
    """A sweep file (``kbench sweep``) of every backend at its best, fresh processes,
    ``repeats`` rounds: to rerun the comparison, or to keep it in CI."""
    settings = {
        name: value
        for name, value in base.to_dict().items()
        if name not in ("backend", "repeat", "window_s", "timeout_s", "sample_interval_s")
        and value != getattr(RunConfig(backend=base.backend, model=base.model), name)
    }
    settings["model"] = base.model
    groups = [
        {"name": f"{r['backend']}-best", "settings": {"backend": r["backend"], **r["best_changes"]}}
        for r in reports
        if r["best"] is not None
    ]
    return {
        "name": f"tune-{base.model}-best".replace("/", "-").replace(":", "-").replace(" ", "-"),
        "description": "each backend at the best settings kbench tune found (fresh processes)",
        "repeats": repeats,
        "settings": settings,
        "groups": groups,
    }


def tune_identity(
    base: RunConfig, target: float, allow_batch_size: bool, only: Optional[Sequence[str]]
) -> Dict[str, Any]:
    """What must match for a stored search to be reused: every setting but the backend."""
    settings = {k: v for k, v in base.to_dict().items() if k not in ("backend", "repeat")}
    return {
        "settings": settings,
        "target": target,
        "allow_batch_size": allow_batch_size,
        "only": sorted(only) if only else None,
    }


def resumed_reports(
    path: Path, identity: Dict[str, Any], fresh: bool = False
) -> Dict[str, Dict[str, Any]]:
    """{backend: its finished search's report} from ``path`` (``STORE/tune-progress.json``)
    where it was written by a tune of the same ``identity``; else {} and, where a file was
    there, why it is not used."""
    if fresh or not path.is_file():
        return {}
    try:
        progress = json.loads(path.read_text())
        reports = {r["backend"]: r for r in progress["reports"]}
        stored = progress["identity"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("%s: unreadable (%s): searching every backend again", path, err)
        return {}
    if stored != identity:
        was, now = stored.get("settings", {}), identity["settings"]
        changed = sorted(k for k in {**was, **now} if was.get(k) != now.get(k))
        changed += [
            k for k in ("target", "allow_batch_size", "only") if stored.get(k) != identity[k]
        ]
        log.warning("%s: a search with other settings (%s): searching every backend again",
                    path, ", ".join(changed) or "its format")  # fmt: skip
        return {}
    return reports


def resume_backend(tuner: Tuner, report: Dict[str, Any]) -> List[Trial]:
    """A backend searched before: start its default and best (warm, the best checked
    against the default again) for the comparison of the backends; its finalists."""
    backend = report["backend"]
    reference = Trial(Candidate(backend))
    if report.get("best") is None:
        return []
    best = Trial(Candidate(backend, tuple(report["best_changes"].items())))
    trials = [reference] if not best.candidate.changes else [reference, best]
    log.info("%s: searched before in this store (%s): best %s; not searched again "
             "(--fresh to search again)", backend, PROGRESS_NAME, report["best"])  # fmt: skip
    tuner.warm(reference, trials[1:])
    if any(t.state != "measuring" for t in trials):
        failed = next(t for t in trials if t.state != "measuring")
        log.warning("%s: %s could not run again (%s): left out of the comparison",
                    backend, failed.candidate.name, failed.reason)  # fmt: skip
        return []
    trials[-1].state = "best"
    return trials


def tune(
    backends: Sequence[str],
    base: RunConfig,
    store: Path,
    *,
    budget_s: float,
    target: float,
    allow_batch_size: bool = False,
    only: Optional[Sequence[str]] = None,
    fresh: bool = False,
) -> Dict[str, Any]:
    """``kbench tune``: every backend's search, then the backends at their default and
    best, in ``budget_s`` seconds of measuring (starting the workers is not counted: the
    whole takes the budget plus the workers' starts). Every window is a result in
    ``store``; the report is returned and written as ``store/tune.json`` (a report beside
    the documents: the store reads it as none), and a sweep of the best settings as
    ``store/tune-best.yaml``. ``only``: the settings to try (names such as
    ``jit_compile``, ``data_format``, ``threads``); None: all. A backend whose search a
    tune of the same settings finished in ``store`` is not searched again, unless
    ``fresh`` (:func:`resumed_reports`)."""
    started = time.monotonic()
    progress = Path(store) / PROGRESS_NAME
    identity = tune_identity(base, target, allow_batch_size, only)
    done = resumed_reports(progress, identity, fresh)
    space = dict(
        cores=processes.usable_cores(), cpu_features=sysinfo.cpu_features().get("features") or [],
        gpu=base.device == "gpu", allow_batch_size=allow_batch_size, only=only,
    )  # fmt: skip
    configs = [c.config(base) for b in backends for c in search_space(b, base, **space)[0]]
    runner = Runner(output_dir=store)
    with runner.session(configs) as session:
        tuner = Tuner(runner, session, base, target, round_index=first_round(store),
                      weights_dir=session.directory)  # fmt: skip
        try:
            per_backend = budget_s * (1 - FINAL_SHARE) / len(backends)
            reports, finalists = search_backends(tuner, backends, done, per_backend, space,
                                                 (progress, identity))  # fmt: skip
            final_deadline = time.monotonic() + budget_s * FINAL_SHARE
            final = compare_finalists(tuner, finalists, final_deadline) if finalists else None
        except BaseException:
            tuner.close(now=True)
            raise
        finally:
            tuner.close()
    outcome = {"model": base.model, "dataset": base.dataset, "batch_size": base.batch_size,
               "budget_s": budget_s, "target": target, "seconds": time.monotonic() - started,
               "backends": reports, "compared": final,
               "sweep_file": str(Path(store) / "tune-best.yaml"), "method": __doc__}  # fmt: skip
    write_json_atomic(Path(store) / "tune.json", outcome)
    write_text_atomic(Path(store) / "tune-best.yaml", yaml.safe_dump(best_sweep(base, reports),
                                                                     sort_keys=False))  # fmt: skip
    return outcome


def search_backends(
    tuner: Tuner, backends: Sequence[str], done: Dict[str, Dict[str, Any]], budget_s: float,
    space: Dict[str, Any], progress: Tuple[Path, Dict[str, Any]],
) -> Tuple[List[Dict[str, Any]], List[Trial]]:  # fmt: skip
    """Each backend's search in ``budget_s`` (or the one ``done`` holds, resumed), the
    reports so far written with the tune's identity as each search ends (``progress``:
    the file and the identity); the reports and the finalists."""
    reports: List[Dict[str, Any]] = []
    finalists: List[Trial] = []
    for backend in backends:
        if backend in done:
            finalists += resume_backend(tuner, done[backend])
            reports.append(dict(done[backend], resumed=True))
            continue
        report = tune_backend(tuner, backend, budget_s, **space)
        finalists += report.pop("_finalists")
        reports.append(report)
        searched = [r for r in done.values() if r["backend"] not in backends]
        write_json_atomic(progress[0], {"identity": progress[1], "reports": searched + reports})
    return reports, finalists


def first_round(store: Path) -> int:
    """The round after every comparison window ``store`` holds: a tune run again in the
    store numbers its rounds on, so that no ratio pairs one run's window with another's
    (rounds are paired by number)."""
    found = ResultStore(store)
    if not found.exists():
        return 0
    rounds = [
        w["round"]
        for r in found.results()
        if is_comparison(r)
        for w in r.metrics["windows"].get("list") or []
        if isinstance(w.get("round"), int)
    ]
    return max(rounds, default=-1) + 1


def _median(values: List[float]) -> Optional[float]:
    return float(np.median(values)) if values else None
