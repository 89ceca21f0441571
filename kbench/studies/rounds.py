"""A comparison run round by round (``kbench run``, ``kbench.run()``, ``kbench demo``):
every backend and model once per round, so that drift of the machine hits every backend
alike, and the ratio stop rule (``--ratio-precision``) read after each round.

A round is fresh processes (``repeats``, :class:`kbench.run.runner.Runner`) or, for
configs with ``window_s``, a window of each backend's warm worker
(:mod:`kbench.run.windows`), model after model. :func:`how_to_measure` is the one rule
that chooses, for ``kbench run``, ``kbench.run()``, sweeps and reproduce;
:func:`plan_comparison` is what ``kbench run`` and ``kbench.run()`` both plan.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from kbench.distributed.launcher import run_distributed
from kbench.measure import quality
from kbench.measure.stats import rounds_needed
from kbench.results.analysis import widest_ratio_half_width
from kbench.results.comparison import is_comparison
from kbench.results.config import (
    WINDOW_S,
    ConfigError,
    RunConfig,
    did_you_mean,
    flag_for,
    needs_fresh_process,
)
from kbench.results.result import RunResult
from kbench.run import windows
from kbench.run.runner import Runner, look_before_runs

Stop = Callable[[List[RunResult]], Optional[str]]

# Warm windows of WINDOW_S (about a second) until every ratio's 95% interval is within
# +-2%, or 100 s since the workers started (four backends end within about two minutes).
WINDOW_PRECISION = 0.02
WINDOW_BUDGET_S = 100.0
# The model kbench run and kbench.run() train when none is named.
DEFAULT_MODEL = "mlp"
ROUNDS_NEEDED = rounds_needed()  # for a 95% interval on a median: 6
OnProgress = Callable[[RunConfig, Dict], None]
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


# kbench run and kbench.run() ----------------------------------------------------------


@dataclass(frozen=True)
class ComparisonPlan:
    """What ``kbench run`` and :func:`kbench.run` run: ``rounds`` of configs (with
    ``window_s`` set where ``measure`` is windows: one round, the windows' rounds its
    own), the baseline, the ratio stop rule's precision and budget, and ``warm``."""

    rounds: List[List[RunConfig]]
    measure: Measure
    baseline: Optional[str] = None
    ratio_precision: Optional[float] = None
    ratio_budget_s: Optional[float] = None
    warm: bool = False
    check_parity: bool = True

    @property
    def repeats(self) -> int:
        return len(self.rounds)

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
) -> ComparisonPlan:
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
        return ComparisonPlan(
            rounds, measure, baseline, ratio_precision, ratio_budget_s, warm, check_parity
        )
    if settings.get("sample_interval_s") == 0:
        log.warning(
            "--sample-interval 0: no window can be checked for a busy machine, so no round "
            "is dropped; the ratios may carry other processes' load"
        )
    settings["window_s"] = settings.get("window_s") or WINDOW_S
    return ComparisonPlan(
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


def run_comparison(
    plan: ComparisonPlan,
    store: Path,
    *,
    busy_threshold: float = quality.BUSY_THRESHOLD,
    wait_quiet_s: float = 0.0,
    on_progress: Optional[OnProgress] = None,
) -> Tuple[List[RunResult], Optional[str]]:
    """Run ``plan`` into ``store`` (:func:`run_rounds`); the results and why measuring
    stopped (None: every round ran)."""
    stop = None
    if plan.ratio_precision is not None:
        stop = functools.partial(
            ratio_stop, plan.ratio_precision, plan.ratio_budget_s, plan.baseline
        )
    return run_rounds(
        plan.rounds, store, busy_threshold=busy_threshold, wait_quiet_s=wait_quiet_s, stop=stop,
        warm=plan.warm, on_progress=on_progress, baseline=plan.baseline,
        check_parity=plan.check_parity,
    )  # fmt: skip


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


def run_rounds(
    rounds: Sequence[Sequence[RunConfig]],
    store: Path,
    *,
    busy_threshold: float = quality.BUSY_THRESHOLD,
    wait_quiet_s: float = 0.0,
    stop: Optional[Callable[[], Stop]] = None,
    warm: bool = False,
    on_progress: Optional[OnProgress] = None,
    baseline: Optional[str] = None,
    check_parity: bool = True,
) -> Tuple[List[RunResult], Optional[str]]:
    """Run ``rounds`` in turn into ``store``; after each, the rule ``stop()`` made may give
    the reason to run no more. The results and that reason (None: every round ran).
    Configs with ``window_s`` run in warm windows (:func:`run_windows`)."""
    count = sum(len(r) for r in rounds)
    look_before_runs(store, count, busy_threshold, wait_quiet_s, "kbench run")
    runner = Runner(
        output_dir=store, on_progress=on_progress, busy_threshold=busy_threshold, warm=warm,
        data_parallel=run_distributed,
    )  # fmt: skip
    if any(config.window_s is not None for r in rounds for config in r):
        configs = [config for r in rounds for config in r]
        return run_windows(runner, configs, stop, baseline, check_parity)
    return runner.run_rounds([list(r) for r in rounds], stop() if stop is not None else None)


def run_windows(
    runner: Runner,
    configs: Sequence[RunConfig],
    stop: Optional[Callable[[], Stop]],
    baseline: Optional[str] = None,
    check_parity: bool = True,
) -> Tuple[List[RunResult], Optional[str]]:
    """Warm interleaved windows, one model at a time (its backends' workers side by side,
    ``baseline``'s first: default the first backend), each with a fresh ``stop()`` rule
    (default: :data:`WINDOW_PRECISION` or :data:`WINDOW_BUDGET_S`); the results and the
    reasons each stopped, joined. ``check_parity``: each warm-up checked against the
    baseline's (:func:`kbench.run.windows.plan_parity`), in ``metrics.parity``."""
    baseline = baseline or configs[0].backend
    if stop is None:
        stop = functools.partial(ratio_stop, WINDOW_PRECISION, WINDOW_BUDGET_S, baseline)
    by_model: Dict[str, List[RunConfig]] = {}
    for config in sorted(configs, key=lambda c: c.backend != baseline):  # stable: baseline first
        by_model.setdefault(config.model, []).append(config)
    results: List[RunResult] = []
    reasons = []
    for model, model_configs in by_model.items():
        found, reason = windows.interleave(
            runner, model_configs, stop=stop(), check_parity=check_parity
        )
        results += found
        reasons.append(f"{model}: {reason}" if len(by_model) > 1 else reason)
    return results, "; ".join(reasons)


def run_once(
    configs: Sequence[RunConfig], store: Path, *, warm: bool = False, on_progress=None
) -> List[RunResult]:
    """One round of ``configs``."""
    return run_rounds([configs], store, warm=warm, on_progress=on_progress)[0]


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
