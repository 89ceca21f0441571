"""The plan every study makes and the one function that runs it (:func:`run_plan`), and
the comparison ``kbench run``, ``kbench.run()`` and ``kbench demo`` plan
(:func:`plan_comparison`): every backend and model once per round, so that drift of the
machine hits every backend alike, and the ratio stop rule (``--ratio-precision``) read
after each round.

A round is fresh processes (``repeats``, :class:`kbench.run.runner.Runner`) or, for
configs with ``window_s``, a window of each backend's warm worker
(:mod:`kbench.run.windows`), model after model. :func:`how_to_measure` is the one rule
that chooses, for ``kbench run``, ``kbench.run()``, sweeps and reproduce.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

from kbench.distributed.launcher import run_distributed
from kbench.measure import quality
from kbench.measure.stats import rounds_needed
from kbench.results.analysis import token_agreement, widest_ratio_half_width
from kbench.results.comparison import is_comparison
from kbench.results.config import (
    WINDOW_S,
    ConfigError,
    RunConfig,
    default_of,
    did_you_mean,
    flag_for,
    needs_fresh_process,
)
from kbench.results.result import RunResult
from kbench.results.store import ResultStore, StoreWriteError
from kbench.run import windows
from kbench.run.runner import Runner, Session, look_before_runs, shared_workers

Stop = Callable[[List[RunResult]], Optional[str]]

# Warm windows of WINDOW_S (about a second) until every ratio's 95% interval is within
# +-2%, or 100 s since the workers started (four backends end within about two minutes).
WINDOW_PRECISION = 0.02
WINDOW_BUDGET_S = 100.0
# The model kbench run and kbench.run() train when none is named.
DEFAULT_MODEL = "mlp"
ROUNDS_NEEDED = rounds_needed()  # for a 95% interval on a median: 6
OnProgress = Callable[[RunConfig, Dict], None]


class Report(Protocol):
    """What a study shows as the runs of a plan with provenance go (a sweep's progress)."""

    def starting(self, configs: Sequence[RunConfig]) -> None: ...

    def ended(self, configs: Sequence[RunConfig], results: Sequence[RunResult]) -> None: ...


log = logging.getLogger(__name__)

# The run settings a caller gives: every RunConfig field but those the plan sets itself.
PLANNED = ("backend", "model", "repeat")
SETTINGS: Tuple[str, ...] = tuple(f.name for f in fields(RunConfig) if f.name not in PLANNED)
# What a comparison takes beside its run settings (kbench.run()'s keywords too).
PARAMETERS = ("backends", "models", "model", "store", "repeats", "warm", "baseline",
              "ratio_precision", "ratio_budget_s", "check_parity")  # fmt: skip


class UnknownSetting(ConfigError, TypeError):
    """A keyword that is no run setting: a :class:`ConfigError` to the CLI, and the
    TypeError Python raises for an unknown keyword to a caller of :func:`kbench.run`."""


def check_settings(settings: Dict[str, Any], parameters: Sequence[str] = ()) -> None:
    """Refuse a name that is not in :data:`SETTINGS`, naming it, the accepted ones and
    the closest of those or of the caller's own ``parameters`` (``backends``)."""
    unknown = [name for name in settings if name not in SETTINGS]
    if not unknown:
        return
    name = unknown[0]
    hint = did_you_mean(name, [*SETTINGS, *parameters])
    raise UnknownSetting(
        name,
        f"expected a run setting, one of: {', '.join(SETTINGS)}; received {name!r}.{hint}",
    )


# fresh processes or warm windows: the one rule --------------------------------------


@dataclass(frozen=True)
class Measure:
    """How a comparison is measured: in warm interleaved windows, or in fresh processes.
    ``reason``: what keeps it in fresh processes, as the user wrote it (``--repeats``,
    ``one backend (jax)``, ``--mode inference``), or what asked for windows (``--windows``;
    "" for the default); ``why``: that in a sentence."""

    windows: bool
    reason: str = ""
    why: str = ""


WINDOWS_NEED = "several backends, no --repeats, training in one process each"


def how_to_measure(
    backends: Optional[Sequence[str]] = None,
    settings: Optional[Mapping[str, Any]] = None,
    *,
    fresh_flag: Optional[str] = None,
    windows_flag: Optional[str] = None,
    spell: Callable[[str], str] = flag_for,
) -> Measure:
    """The one rule: warm interleaved windows, unless ``fresh_flag`` was given (a flag that
    asks for fresh processes: ``--repeats``, ``--warm``, ``--fresh-processes``; with
    ``windows_flag`` too, refused), there are fewer than two ``backends`` (windows measure
    their ratios), or one of ``settings`` asks for what windows cannot measure
    (:func:`kbench.results.config.needs_fresh_process`, named by ``spell``). ``backends``
    None: the flags alone are judged (a study's; each comparison's later)."""
    if fresh_flag is not None and windows_flag is not None:
        raise ConfigError(
            windows_flag.lstrip("-"),
            f"expected {windows_flag} without {fresh_flag}, which asks for fresh-process "
            "rounds; received both. Drop one.",
        )
    if fresh_flag is not None:
        return Measure(False, fresh_flag, f"{fresh_flag} asks for fresh processes")
    if backends is None:
        return Measure(True, windows_flag or "", "warm interleaved windows")
    named = list(dict.fromkeys(backends))
    if len(named) < 2:
        alone = f"one backend ({', '.join(named)})"
        return Measure(False, alone, f"{alone}: windows compare several backends")
    other = needs_fresh_process(settings or {}, spell)
    if other is not None:
        return Measure(False, other, f"{other} needs a fresh process per run")
    return Measure(True, windows_flag or "", "warm interleaved windows")


def refuse_window_setting(measure: Measure, flag: str = "--window") -> None:
    """A window's length (``window_s``) given where ``measure`` is in fresh processes."""
    raise ConfigError(
        "window_s",
        f"expected {flag} only for warm windows ({WINDOWS_NEED}); received it with "
        f"{measure.reason}. Drop {flag}, or the option that needs fresh processes.",
    )


# the plan every study makes, and the one function that runs it -----------------------


@dataclass(frozen=True)
class Plan:
    """What a study asks the engine to run: ``rounds`` of configs and how, its
    :attr:`schedule` (``fresh`` processes, ``warm`` workers shared by a round's runs, or
    warm interleaved ``windows``: one round of configs with ``window_s``, the windows'
    rounds its own), the ``baseline``, the ratio stop rule's precision and budget, and
    whether windows check their warm-up's parity. :func:`run_plan` runs it."""

    rounds: List[List[RunConfig]]
    measure: Measure
    baseline: Optional[str] = None
    ratio_precision: Optional[float] = None
    ratio_budget_s: Optional[float] = None
    warm: bool = False
    check_parity: bool = True
    # config by config in the rounds' order: the sweep each belongs to (its result's
    # ``sweep``), and what each replays (kbench parity: the steps, seed and weights); None:
    # nothing
    provenance: Optional[Tuple[Optional[Dict[str, Any]], ...]] = None
    replays: Optional[Tuple[Optional[Dict[str, Any]], ...]] = None

    @property
    def schedule(self) -> str:
        return "windows" if self.measure.windows else "warm" if self.warm else "fresh"

    @property
    def repeats(self) -> int:
        return len(self.rounds)

    def stop(self) -> Optional[Stop]:
        """A fresh ratio stop rule (:func:`ratio_stop`), or None: every round runs."""
        if self.ratio_precision is None:
            return None
        return ratio_stop(self.ratio_precision, self.ratio_budget_s, self.baseline)

    def windows_text(self) -> str:
        """How the windows measure and stop, in words (for a comparison in windows)."""
        config = self.rounds[0][0]
        size = (
            f"windows of {config.steps} steps each (--steps: each window's length, not the "
            "steps measured in all)"
            if config.steps is not None
            else f"windows of about {config.window_s:g} s each"
        )
        budget = f" or {self.ratio_budget_s:g} s" if self.ratio_budget_s is not None else ""
        return (
            f"warm interleaved windows: {size}, round after round until every ratio's 95% "
            f"interval is within +-{self.ratio_precision:.1%}{budget}"
        )


def windows_plan(
    configs: Sequence[RunConfig],
    baseline: Optional[str],
    ratio_precision: float,
    ratio_budget_s: Optional[float],
) -> Plan:
    """``configs`` (each with ``window_s``) compared in warm windows, ``baseline``'s first
    (default: the first backend), until the ratio stop rule says."""
    backends = [config.backend for config in configs]
    baseline = baseline if baseline in backends else backends[0]
    return Plan([list(configs)], Measure(True), baseline, ratio_precision, ratio_budget_s)


def plan_comparison(
    backends: Union[str, Sequence[str]],
    models: Union[str, Sequence[str]] = DEFAULT_MODEL,
    *,
    repeats: Optional[int] = None,
    warm: bool = False,
    baseline: Optional[str] = None,
    ratio_precision: Optional[float] = None,
    ratio_budget_s: Optional[float] = None,
    check_parity: bool = True,
    **settings: Any,
) -> Plan:
    """The comparison ``kbench run`` and :func:`kbench.run` make, with one set of
    defaults: ``models`` :data:`DEFAULT_MODEL`, each setting its field's default, and
    several ``backends`` in warm windows (:func:`how_to_measure`) of
    :data:`~kbench.results.config.WINDOW_S` s until every ratio is within
    :data:`WINDOW_PRECISION` or :data:`WINDOW_BUDGET_S` s; otherwise ``repeats`` (default
    1) rounds of fresh processes. Every setting is checked before any process starts."""
    check_settings(settings, PARAMETERS)
    backends = [backends] if isinstance(backends, str) else list(backends)
    if baseline is not None and baseline not in backends:
        raise ConfigError(
            "baseline",
            f"expected one of the backends run ({', '.join(backends)}); received {baseline!r}.",
        )
    fresh_flag = "--repeats" if repeats is not None else "--warm" if warm else None
    measure = how_to_measure(backends, settings, fresh_flag=fresh_flag)
    if not measure.windows:
        if settings.get("window_s") is not None:
            refuse_window_setting(measure)
        _check_fresh_options(backends, repeats, ratio_precision, ratio_budget_s, check_parity)
        rounds = plan_rounds(backends, models, repeats or 1, **settings)
        return Plan(rounds, measure, baseline, ratio_precision, ratio_budget_s, warm, check_parity)
    epochs = settings.get("epochs")
    if epochs not in (None, default_of("epochs")) and settings.get("steps") is None:
        log.warning(
            "--epochs %s is not used: warm windows measure windows of about --window "
            "seconds (or --steps N each) until the ratios are precise, not epochs; "
            "--repeats N measures N fresh runs of %s epochs each instead",
            epochs,
            epochs,
        )
    if settings.get("sample_interval_s") == 0:
        log.warning(
            "--sample-interval 0: no window can be checked for a busy machine, so no round "
            "is dropped; the ratios may carry other processes' load"
        )
    settings["window_s"] = settings.get("window_s") or WINDOW_S
    return Plan(
        plan_rounds(backends, models, 1, **settings),
        measure,
        baseline or backends[0],  # never a backend whose worker failed
        WINDOW_PRECISION if ratio_precision is None else ratio_precision,
        WINDOW_BUDGET_S if ratio_budget_s is None else ratio_budget_s,
        check_parity=check_parity,
    )


def _check_fresh_options(
    backends: Sequence[str], repeats: Optional[int], ratio_precision: Optional[float],
    ratio_budget_s: Optional[float], check_parity: bool,
) -> None:  # fmt: skip
    """What fresh-process rounds refuse: the parity check of windows, a budget without a
    precision, a precision without two backends and six rounds to reach it."""
    if not check_parity:
        raise ConfigError(
            "no_parity_check",
            f"expected it only with warm windows ({WINDOWS_NEED}), whose warm-up it skips; "
            "fresh-process runs make no such check (kbench parity does). Drop "
            "--no-parity-check.",
        )
    if ratio_precision is None:
        if ratio_budget_s is not None:
            raise ConfigError("ratio_budget_s", "expected it only with --ratio-precision.")
        return
    if len(set(backends)) < 2:
        raise ConfigError(
            "ratio_precision",
            f"expected at least two backends to compare; received {', '.join(backends)}. "
            "For one backend's own precision use --target-precision.",
        )
    check_ratio_rounds(repeats or 1)


def check_ratio_rounds(repeats: int) -> None:
    """``--ratio-precision`` refused with fewer rounds to run than a 95% interval needs."""
    if repeats < ROUNDS_NEEDED:
        raise ConfigError(
            "ratio_precision",
            f"expected --repeats of at least {ROUNDS_NEEDED} (the most rounds to run: a 95% "
            f"interval on a median needs {ROUNDS_NEEDED}); received --repeats {repeats}.",
        )


def plan_rounds(
    backends: Sequence[str], models: Sequence[str], repeats: int = 1, **settings: Any
) -> List[List[RunConfig]]:
    """The runs of a comparison, round by round: in each of ``repeats`` rounds every
    model under every backend (models outer), each a :class:`RunConfig` of ``settings``
    (``batch_size=32``). One name alone may be a string. Every setting is checked here;
    ``window_s`` only where :func:`how_to_measure` allows windows."""
    check_settings(settings, PARAMETERS)
    backends = [backends] if isinstance(backends, str) else list(backends)
    models = [models] if isinstance(models, str) else list(models)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError("repeats", f"expected a positive integer; received {repeats}.")
    if settings.get("window_s") is not None:  # windows are rounds of their own
        measure = how_to_measure(
            backends, settings, fresh_flag="--repeats" if repeats > 1 else None
        )
        if not measure.windows:
            refuse_window_setting(measure, "window_s")
    for setting, names in (("backend", backends), ("model", models)):
        if not names:
            raise ConfigError(setting, f"expected at least one {setting}; received none.")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(
                setting,
                f"expected each {setting} once; received {', '.join(twice)} more than once. "
                "Name each once (use repeats for more runs of one).",
            )
    return [
        [
            RunConfig(backend=backend, model=model, repeat=repeat, **settings)
            for model in models
            for backend in backends
        ]
        for repeat in range(repeats)
    ]


def run_plan(
    plan: Plan,
    store: Union[Path, Runner, Session],
    *,
    busy_threshold: float = quality.BUSY_THRESHOLD,
    wait_quiet_s: float = 0.0,
    on_progress: Optional[OnProgress] = None,
    report: Optional[Report] = None,
) -> Tuple[List[RunResult], Optional[str]]:
    """Run ``plan`` into ``store`` (a folder, looked at first for other load; or the
    :class:`Runner` or open :class:`Session` a study made): its rounds in turn, the stop
    rule read after each (a plan with provenance or replays: each run given its own,
    ``report`` told as each worker starts and ends), or in windows one model at a time (its
    backends' workers side by side, each model with a fresh stop rule). The results and
    why measuring stopped (None: every round ran; for windows, each model's reason)."""
    runner = store.runner if isinstance(store, Session) else store
    if not isinstance(runner, Runner):
        count = sum(len(r) for r in plan.rounds)
        look_before_runs(runner, count, busy_threshold, wait_quiet_s, "kbench run")
        runner = Runner(
            output_dir=runner, on_progress=on_progress, busy_threshold=busy_threshold,
            warm=plan.warm, data_parallel=run_distributed,
        )  # fmt: skip
    if plan.schedule == "windows":
        return _run_windows(plan, runner)
    stopped = None
    if plan.provenance is None and plan.replays is None:
        results, stopped = runner.run_rounds([list(r) for r in plan.rounds], plan.stop())
    elif isinstance(store, Session):
        results = _run_recorded(plan, store, report)
    else:
        with runner.session([config for r in plan.rounds for config in r]) as session:
            results = _run_recorded(plan, session, report)
    return record_token_agreement(results, runner.output_dir), stopped


def record_token_agreement(results: List[RunResult], directory: Path) -> List[RunResult]:
    """``results`` with each non-reference generate run's greedy tokens against its
    reference's (:func:`kbench.results.analysis.token_agreement`) in its
    ``metrics.generation_agreement``, its document saved again in ``directory``. A run
    whose reference is not among ``results`` (a sweep's plan holding part of a session's
    backends; a twin that decoded with its own weights) is left as it is."""
    agreement = token_agreement(results)
    recorded = []
    for result in results:
        found = agreement.get(result.run_id)
        if found is not None and "same" in found and not found.get("is_reference"):
            metrics = dict(result.metrics, generation_agreement=found)
            result = replace(result, metrics=metrics)
            try:
                ResultStore(directory).add(result)
            except StoreWriteError as err:  # the document as it ran stays
                log.warning("%s: its token agreement is not recorded: %s", result.run_id, err)
        recorded.append(result)
    return recorded


def _run_windows(plan: Plan, runner: Runner) -> Tuple[List[RunResult], str]:
    """Warm interleaved windows, model by model, the baseline's worker first."""
    by_model: Dict[str, List[RunConfig]] = {}
    for config in sorted(plan.rounds[0], key=lambda c: c.backend != plan.baseline):
        by_model.setdefault(config.model, []).append(config)
    results: List[RunResult] = []
    reasons = []
    for model, configs in by_model.items():
        found, reason = windows.interleave(
            runner, configs, stop=plan.stop(), check_parity=plan.check_parity
        )
        results += found
        reasons.append(f"{model}: {reason}" if len(by_model) > 1 else reason)
    return results, "; ".join(reasons)


def _run_recorded(plan: Plan, session: Session, report: Optional[Report]) -> List[RunResult]:
    """The rounds of a plan with provenance or replays, worker by worker (``warm``: a
    round's runs that can share a worker share one)."""
    count = sum(len(r) for r in plan.rounds)
    provenance = iter(plan.provenance or (None,) * count)
    replays = iter(plan.replays or (None,) * count)
    results: List[RunResult] = []
    for configs in plan.rounds:
        sweeps = [next(provenance) for _ in configs]
        parities = [next(replays) for _ in configs]
        groups = shared_workers(configs) if plan.warm else [[i] for i in range(len(configs))]
        for indexes in groups:
            group = [configs[i] for i in indexes]
            if report is not None:
                report.starting(group)
            if len(group) == 1:
                ran = [session.run(group[0], parities[indexes[0]], sweeps[indexes[0]])]
            else:
                parity = [parities[i] for i in indexes]
                ran = session.run_warm(group, parity, [sweeps[i] for i in indexes])
            if report is not None:
                report.ended(group, ran)
            results += ran
    return results


def run_once(
    configs: Sequence[RunConfig], store: Path, *, warm: bool = False, on_progress=None
) -> List[RunResult]:
    """One round of ``configs`` in fresh processes (``warm``: sharing workers)."""
    return run_plan(fresh_plan([list(configs)], warm), store, on_progress=on_progress)[0]


def fresh_plan(rounds: Sequence[Sequence[RunConfig]], warm: bool = False) -> Plan:
    """``rounds`` in fresh processes (``warm``: a round's runs sharing workers where they
    can), every round run."""
    measure = Measure(False, "--warm" if warm else "", "a study of fresh processes")
    return Plan([list(r) for r in rounds], measure, warm=warm)


def ratio_stop(target: float, budget_s: Optional[float], baseline: Optional[str]) -> Stop:
    """``--ratio-precision``: after a round, the reason to run no more (every per-round
    ratio's 95% interval within ``target`` of its median, or ``budget_s`` s spent), or None."""
    started = time.monotonic()

    def stop(results: List[RunResult]) -> Optional[str]:
        widest = widest_ratio_half_width(results, baseline)
        windows = any(is_comparison(r) for r in results)  # they say it every few seconds
        log.log(
            logging.DEBUG if windows else logging.INFO,
            "    widest ratio interval so far: %s (target +-%.1f%%)",
            "not yet measurable" if widest is None else f"+-{widest:.1%}",
            target * 100,
        )
        if widest is not None and widest <= target:
            return (
                f"ratio precision reached: every per-round ratio's 95% interval within "
                f"+-{widest:.1%} of its median (target +-{target:.1%})"
            )
        if budget_s is not None and time.monotonic() - started >= budget_s:
            where = "not yet measurable" if widest is None else f"+-{widest:.1%}"
            return f"--ratio-budget {budget_s:g} s spent; widest ratio interval {where}"
        return None

    return stop
