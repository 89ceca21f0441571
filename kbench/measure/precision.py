"""When to stop measuring: ``--target-precision P`` and ``--time-budget S``.

A :class:`PrecisionTracker` is fed the begin and end of every measured step (a training
step, an inference pass, one call of an operation). Measuring stops at the first of:

- **precision reached**: the 95% confidence interval on the median throughput
  (items per step over the step's time) lies within ``±P`` of the median, that is
  ``high / median - 1 <= P`` and ``1 - low / median <= P``. The interval is the
  order-statistics one of :func:`kbench.measure.stats.median_interval` on the step
  times, turned into throughput (``items / time`` reverses the order, so the slowest
  bound step gives the low throughput): distribution-free, nothing random. It needs at
  least 6 steps (fewer cannot reach 95% coverage).
- **budget spent**: ``S`` seconds since the first measured step began.
- **steps exhausted**: the caller ran out of steps (training data and epochs, an
  inference run's ``--duration`` when no budget is given, ``--calls`` calls of an
  operation) before either.

The interval is checked cheaply: after ``MIN_STEPS`` steps, then every ``CHECK_EVERY``
steps or every tenth of the steps so far, whichever is more (a check sorts the step
times); the budget is checked at every step. What it records (:meth:`record`): the goal,
why it stopped, the steps measured, the checks made and the interval reached.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from kbench.measure.stats import LEVEL, MedianInterval, median_interval

PRECISION_REACHED = "precision reached"
BUDGET_SPENT = "budget spent"
STEPS_EXHAUSTED = "steps exhausted"
STOPS = (PRECISION_REACHED, BUDGET_SPENT, STEPS_EXHAUSTED)

MIN_STEPS = 6  # the fewest values whose order-statistics interval reaches 95%
CHECK_EVERY = 5
METHOD = (
    "order statistics: (x_(j), x_(n+1-j)) of the sorted step times, the largest j with "
    "1 - 2 P(Binomial(n, 1/2) < j) >= 95%, as throughput"
)


@dataclass(frozen=True)
class PrecisionGoal:
    """What to measure until: ``target`` (relative half-width of the interval on the
    median throughput, e.g. 0.02) and ``budget_s`` (seconds of measuring); None: no
    such limit."""

    target: Optional[float] = None
    budget_s: Optional[float] = None

    @property
    def active(self) -> bool:
        return self.target is not None or self.budget_s is not None

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> PrecisionGoal:
        """The goal in a run's or ``kbench ops``' config dict (``target_precision``,
        ``time_budget_s``; absent in configs written before they existed)."""
        return cls(config.get("target_precision"), config.get("time_budget_s"))


class StopMeasuring(Exception):
    """Raised from inside a backend's step loop (through the step clock) when the goal
    is met; ``reason`` is one of :data:`STOPS`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PrecisionTracker:
    """Feed :meth:`add` each measured step; it answers why to stop, or None."""

    def __init__(
        self,
        goal: PrecisionGoal,
        items_per_step: float = 1.0,
        min_steps: int = MIN_STEPS,
        check_every: int = CHECK_EVERY,
    ) -> None:
        self.goal = goal
        self.items_per_step = items_per_step
        self.min_steps = max(min_steps, 2)
        self.check_every = max(check_every, 1)
        self.times: List[float] = []
        self.started: Optional[float] = None
        self.elapsed_s = 0.0
        self.checks = 0
        self.stopped: Optional[str] = None
        self._next_check = self.min_steps

    def add(self, begin: float, end: float) -> Optional[str]:
        """Record one step (``perf_counter`` times); the reason to stop now, or None."""
        if self.started is None:
            self.started = begin
        self.times.append(end - begin)
        self.elapsed_s = end - self.started
        goal = self.goal
        n = len(self.times)
        if goal.target is not None and n >= self._next_check:
            self._next_check = n + max(self.check_every, n // 10)
            self.checks += 1
            if self.half_width() <= goal.target:
                self.stopped = PRECISION_REACHED
                return self.stopped
        if goal.budget_s is not None and self.elapsed_s >= goal.budget_s:
            self.stopped = BUDGET_SPENT
            return self.stopped
        return None

    def interval(self) -> Optional[MedianInterval]:
        """The interval on the median throughput (items per second) of the steps so far."""
        times = median_interval(self.times, LEVEL)
        if times is None or times.low <= 0:
            return None
        items = self.items_per_step
        return MedianInterval(
            median=items / times.median,
            low=items / times.high,
            high=items / times.low,
            coverage=times.coverage,
            n=times.n,
        )

    def half_width(self) -> float:
        """The interval's larger distance from the median, relative to it (inf if none)."""
        found = self.interval()
        if found is None or found.coverage < LEVEL:
            return math.inf
        return max(found.high / found.median - 1.0, 1.0 - found.low / found.median)

    def record(self) -> Dict[str, Any]:
        """What a result keeps: the goal, why measuring stopped, the interval reached."""
        found = self.interval()
        width = self.half_width()
        return {
            "target": self.goal.target,
            "time_budget_s": self.goal.budget_s,
            "stopped": self.stopped or STEPS_EXHAUSTED,
            "measured_steps": len(self.times),
            "measured_s": self.elapsed_s,
            "checks": self.checks,
            "interval": None if found is None else found.to_dict(),
            "half_width": None if math.isinf(width) else width,
            "level": LEVEL,
            "method": METHOD,
        }


def tracker_for(config: Dict[str, Any], items_per_step: float) -> Optional[PrecisionTracker]:
    """A tracker for a config that asks for a target or a budget; None otherwise."""
    goal = PrecisionGoal.from_config(config)
    return PrecisionTracker(goal, items_per_step) if goal.active else None
