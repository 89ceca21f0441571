"""A comparison run round by round (``kbench run``, ``kbench.run()``, ``kbench demo``):
every backend and model once per round, so that drift of the machine hits every backend
alike, and the ratio stop rule (``--ratio-precision``) read after each round.

Two kinds of round: fresh processes (``repeats``: each run a worker process of its own,
:class:`kbench.run.runner.Runner`), or warm interleaved windows (configs with
``window_s``: one warm worker per backend, a window each per round,
:mod:`kbench.run.windows`), model after model."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kbench.measure import quality
from kbench.results.analysis import widest_ratio_half_width
from kbench.results.config import ConfigError, RunConfig, did_you_mean
from kbench.results.result import RunResult
from kbench.run import windows
from kbench.run.before_runs import look_before_runs
from kbench.run.runner import Runner

Stop = Callable[[List[RunResult]], Optional[str]]

# Warm interleaved windows, unless told otherwise: windows of about a second, until every
# ratio's 95% interval is within +-2% or 100 s since the workers started (so that the
# whole comparison of four backends ends within about two minutes).
WINDOW_S = 1.0
WINDOW_PRECISION = 0.02
WINDOW_BUDGET_S = 100.0
OnProgress = Callable[[RunConfig, Dict], None]
log = logging.getLogger(__name__)

# The run settings a caller gives: every RunConfig field but those the plan sets itself.
PLANNED = ("backend", "model", "repeat")
SETTINGS: Tuple[str, ...] = tuple(f.name for f in fields(RunConfig) if f.name not in PLANNED)


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


def plan_rounds(
    backends: Sequence[str], models: Sequence[str], repeats: int = 1, **settings: Any
) -> List[List[RunConfig]]:
    """The runs of ``kbench run`` and :func:`kbench.run`, round by round: in each of
    ``repeats`` rounds every model under every backend (models outer), each a
    :class:`RunConfig` of ``settings`` (its field names: ``batch_size=32``, ``steps=50``).
    One name alone may be a string. Every setting is checked here, before any process
    starts."""
    check_settings(settings, ("backends", "models", "repeats"))
    backends = [backends] if isinstance(backends, str) else list(backends)
    models = [models] if isinstance(models, str) else list(models)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError("repeats", f"expected a positive integer; received {repeats}.")
    if settings.get("window_s") is not None and repeats > 1:
        raise ConfigError(
            "window_s",
            f"warm windows are rounds of their own; received repeats {repeats} too. Give "
            "window_s (warm interleaved windows) or repeats (fresh-process rounds), not both.",
        )
    if settings.get("window_s") is not None and len(set(backends)) < 2:
        raise ConfigError(
            "window_s",
            f"warm windows interleave several backends to measure their ratios; received "
            f"one backend ({', '.join(backends)}). Name two or more, or drop window_s.",
        )
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
    the reason to run no more. Returns the results and that reason (None: every round
    ran). Configs with ``window_s`` run as warm interleaved windows (:func:`run_windows`,
    ``check_parity`` with them)."""
    count = sum(len(r) for r in rounds)
    look_before_runs(store, count, busy_threshold, wait_quiet_s, "kbench run")
    runner = Runner(
        output_dir=store, on_progress=on_progress, busy_threshold=busy_threshold, warm=warm
    )
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
    (default: :data:`WINDOW_PRECISION` or :data:`WINDOW_BUDGET_S`); the reasons each
    stopped, joined. ``check_parity``: each backend's warm-up is checked against the
    baseline's (same initial weights, same batches; :func:`kbench.run.windows.plan_parity`),
    each window recording ``metrics.parity``."""
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
    """``--ratio-precision``: after a round, the reason to run no more, or None: every
    per-round ratio's 95% interval within ``target`` of its median, or ``budget_s``
    seconds spent."""
    started = time.monotonic()

    def stop(results: List[RunResult]) -> Optional[str]:
        widest = widest_ratio_half_width(results, baseline)
        log.info(
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
