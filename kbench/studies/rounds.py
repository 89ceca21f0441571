"""A comparison run round by round (``kbench run``, ``kbench demo``): every backend and
model once per round, so that drift of the machine hits every backend alike, and the
ratio stop rule (``--ratio-precision``) read after each round."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from kbench.measure import quality
from kbench.results.config import RunConfig
from kbench.results.result import RunResult
from kbench.run.before_runs import look_before_runs
from kbench.run.runner import Runner
from kbench.views import compare

Stop = Callable[[List[RunResult]], Optional[str]]
OnProgress = Callable[[RunConfig, Dict], None]


def run_rounds(
    rounds: Sequence[Sequence[RunConfig]],
    store: Path,
    *,
    busy_threshold: float = quality.BUSY_THRESHOLD,
    wait_quiet_s: float = 0.0,
    stop: Optional[Stop] = None,
    warm: bool = False,
    on_progress: Optional[OnProgress] = None,
) -> Tuple[List[RunResult], Optional[str]]:
    """Run ``rounds`` in turn into ``store``; after each, ``stop`` may give the reason to
    run no more. Returns the results and that reason (None: every round ran)."""
    count = sum(len(r) for r in rounds)
    look_before_runs(store, count, busy_threshold, wait_quiet_s, "kbench run")
    runner = Runner(
        output_dir=store, on_progress=on_progress, busy_threshold=busy_threshold, warm=warm
    )
    return runner.run_rounds([list(r) for r in rounds], stop)


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
        widest = compare.widest_ratio_half_width(results, baseline)
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
